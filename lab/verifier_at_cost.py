"""A batched verifier that costs a fixed CPU time per verification: what the gate's full-power
default costs a real implementation of that speed.

Public batch-1 speculative-sampling verifiers cost 30-180 us a verification (a ``torch.topk`` over
the vocabulary, an exponential race over all rows). This module is the reference protocol verifier
(so every property passes) slowed to at least ``VERISPEC_LAB_US`` microseconds (default 100) a
verification by spinning on the CPU (a spin, not a sleep: it holds its core as real work does, so
``--workers`` cannot overlap it on fewer cores). The deterministic properties call ``verify``
(one verification a call); the statistics call ``verify_batch`` (N a call).

The measurement, on 2 cores (``taskset -c 0,1`` pins the run and its worker processes there)::

    time taskset -c 0,1 env OPENBLAS_NUM_THREADS=1 verispec check \\
        --verifier lab.verifier_at_cost:verify --batch-verifier lab.verifier_at_cost:verify_batch \\
        --workers 2 --json > gate.json

``python -m lab.verifier_at_cost`` runs exactly that (``--law-only`` too with ``--law-only``) and
prints the wall time, the CPU time of the run and its workers, the verdict and each property's
time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerdict, Verdict, verify_sampled, verify_sampled_batch

MICROSECONDS = float(os.environ.get("VERISPEC_LAB_US", "100"))


def _spin_until(deadline: float) -> None:
    """Busy until this process has used ``deadline`` seconds of CPU: the cost stays CPU time on a
    loaded machine too (a wall-clock spin preempted by other work would cost less CPU)."""
    while time.process_time() < deadline:
        pass


_VERIFIED = [0]  # verifications this process has made


def _account(verified: int) -> None:
    """This process's CPU time and verifications so far, in ``$VERISPEC_LAB_CPU_DIR/<pid>``."""
    _VERIFIED[0] += verified
    folder = os.environ.get("VERISPEC_LAB_CPU_DIR")
    if folder:
        with open(os.path.join(folder, str(os.getpid())), "w", encoding="utf-8") as out:
            out.write(f"{time.process_time()} {_VERIFIED[0]}\n")


def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict:
    began = time.process_time()
    verdict = verify_sampled(p, q, drafts, uniforms)
    _spin_until(began + MICROSECONDS * 1e-6)
    _VERIFIED[0] += 1
    return verdict


def verify_batch(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> BatchVerdict:
    began = time.process_time()
    verdict = verify_sampled_batch(p, q, drafts, uniforms)
    _spin_until(began + MICROSECONDS * 1e-6 * int(np.shape(drafts)[0]))
    _account(int(np.shape(drafts)[0]))
    return verdict


def law_only_verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], seed: int | None = None) -> Verdict:
    """The same at the same cost, drawing its own uniforms from the call's ``seed`` (``--law-only``)."""
    uniforms = np.random.default_rng(seed).random(len(drafts) + 1)
    return verify(p, q, drafts, [float(u) for u in uniforms])


def law_only_verify_batch(
    p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, seed: int | None = None
) -> BatchVerdict:
    n, k = np.shape(drafts)
    return verify_batch(p, q, drafts, np.random.default_rng(seed).random((n, k + 1)))


def main(argv: Sequence[str]) -> int:
    """Run the gate on this verifier; ``--law-only`` checks its own-RNG twin; other arguments go
    to ``verispec check`` (``--scale 0.1 --min-power 0`` for a cheaper look at the cost)."""
    import resource

    law_only = "--law-only" in argv
    names = ("law_only_verify", "law_only_verify_batch") if law_only else ("verify", "verify_batch")
    command = ["taskset", "-c", "0,1", sys.executable, "-m", "verispec", "check"]
    command += [
        "--verifier",
        f"lab.verifier_at_cost:{names[0]}",
        "--batch-verifier",
        f"lab.verifier_at_cost:{names[1]}",
    ]
    command += ["--workers", "2", "--json", *argv]
    import tempfile

    cpu_dir = tempfile.mkdtemp(prefix="verifier_at_cost_")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "VERISPEC_THREADS": "1"}
    env["VERISPEC_LAB_CPU_DIR"] = cpu_dir
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - began
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the check's own process (its workers are not reaped by us)
    per_process = {}
    for name in os.listdir(cpu_dir):
        with open(os.path.join(cpu_dir, name), encoding="utf-8") as data:
            cpu, verified = data.read().split()
        per_process[name] = (float(cpu), int(verified))
    report = json.loads(done.stdout)
    drawn = sum(int(p.get("n") or 0) for p in report["properties"] if str(p["name"]).startswith("stat_"))
    print(" ".join(command))
    print(f"{MICROSECONDS:g} us a verification: exit {done.returncode} in {wall:.0f} s wall, ", end="")
    print(f"{used.ru_utime + used.ru_stime:.0f} s CPU in the check's process, load {os.getloadavg()[0]:.1f}")
    shares = ", ".join(f"{cpu:.0f} s / {n:,}" for cpu, n in sorted(per_process.values()))
    print(f"each process that verified, CPU / batch verifications: {shares}")
    print(f"{report['headline']}: {report['claim']}")
    print(f"statistical draws (the tests' N): {drawn:,}")
    for prop in report["properties"]:
        print(f"  {prop['name']:<28} {prop['status']:<15} N={prop['n']:<9} {prop['seconds']:7.1f} s")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
