"""A checker killed outright takes its ``workers=N`` decoder processes with it.

A Python program calls ``verispec.check_decoder(..., workers=2)`` and gets SIGTERM: with no
handler installed SIGTERM's default action ends it at once, so none of the checker's own exit
paths (pool close, kill_all_peers, atexit) runs. Each worker is busy in the middle of a block (an
engine that never answers, tests/support/stalling_engine.py), so it is not reading stdin and would not see
its EOF; it must end anyway, because its parent died (verispec/parent_death.py). The bound on
"ends" (5 s) is a safety net far above the kernel's immediate kill and the 0.2 s poll elsewhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.processes import process_gone
from tests.support.synthetic import Variant, write_synthetic

REPO = Path(__file__).resolve().parent.parent
TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)
START_NET = 120.0  # seconds for the checker and two workers to start on a loaded machine (a hang beyond)
# first_m off: the first-m test decodes in the checker itself, and the stalling engine must stall in
# the depth test's workers, the processes this test kills the checker under
CHECKER = (
    "import sys, verispec; verispec.check_decoder('tests.support.stalling_engine:engine', model=sys.argv[1], "
    "workers=2, timeout=600, first_m=False)"
)


def busy_workers(busy: Path, checker: subprocess.Popen[bytes]) -> list[int]:
    """The pids of both workers once each has begun a block (their readiness signal)."""
    deadline = time.monotonic() + START_NET
    while len(list(busy.iterdir())) < 2:
        if checker.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the workers never began decoding: {checker.communicate()}")
        time.sleep(0.05)
    return sorted(int(path.name) for path in busy.iterdir())


def test_workers_end_when_their_checker_is_killed_by_sigterm(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    write_synthetic(model, TINY, quant_types=("F16",))
    busy = tmp_path / "busy"
    busy.mkdir()
    checker = subprocess.Popen(
        [sys.executable, "-c", CHECKER, str(model)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "VERISPEC_TEST_BUSY_DIR": str(busy)},
    )
    workers: list[int] = []
    try:
        workers = busy_workers(busy, checker)
        assert checker.pid not in workers, "the blocks are decoded by the worker processes, not the checker"
        checker.send_signal(signal.SIGTERM)
        checker.communicate(timeout=30)
        assert checker.returncode == -signal.SIGTERM  # killed outright: no exit path of its own ran
        assert all(process_gone(pid, within=5.0) for pid in workers), "a worker outlived its checker"
    finally:
        if checker.poll() is None:
            checker.kill()
            checker.communicate()
        for pid in workers:
            if not process_gone(pid, within=0.0):
                os.kill(pid, signal.SIGKILL)


ORPHAN = (
    "import sys, time; import verispec.parent_death as death; death._kernel_kills_on_parent_death = lambda: False; "
    "death.die_with_parent(); print('watching', flush=True); time.sleep(600)"
)
MIDDLE = (
    "import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL); "
    "assert child.stdout.readline() == b'watching\\n'; print(child.pid, flush=True)"
)  # then it exits: the child is orphaned


def test_where_the_kernel_does_not_watch_the_parent_a_thread_sees_it_die() -> None:
    """The portable path of verispec/parent_death.py (a thread polling the parent id), taken on
    purpose here: a middle process starts a watching child, then exits."""
    middle = subprocess.run(
        [sys.executable, "-c", MIDDLE, ORPHAN], cwd=REPO, capture_output=True, text=True, timeout=START_NET
    )
    assert middle.returncode == 0, middle.stderr
    orphan = int(middle.stdout)
    try:
        assert process_gone(orphan, within=5.0), "the watching child outlived its parent"
    finally:
        if not process_gone(orphan, within=0.0):
            os.kill(orphan, signal.SIGKILL)
