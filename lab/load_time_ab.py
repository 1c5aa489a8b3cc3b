"""Two source trees, the same int8 load, interleaved: the load's CPU time before / after in one run.

``python -m lab.load_time_ab BEFORE_TREE AFTER_TREE MODEL.gguf [--rounds 6]`` runs, round by round,
one child process per tree (``PYTHONPATH`` = the tree), alternating which goes first; each loads
``MODEL`` in the int8 mode and reports the load's wall seconds and its CPU seconds (getrusage of
the whole process, every thread, around the load alone). Prints JSON: per tree the best and median
of both; ``after_over_before_cpu`` (median CPU after / before, < 1: the after tree loads faster)
and the load average before and after. CPU time is the figure to compare on a shared machine:
wall time counts the other processes' turns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = """
import json, resource, sys, time
from verispec.engine.model import FastModel
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0, t0 = cpu(), time.perf_counter()
FastModel.load(sys.argv[1], weights="int8")
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": cpu() - c0}))
"""


def child(tree: Path, model: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(model)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=900,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    load_start = os.getloadavg()[0]
    for round_index in range(args.rounds):
        order = ["before", "after"] if round_index % 2 == 0 else ["after", "before"]
        for name in order:
            runs[name].append(child(trees[name], args.model.resolve()))
    out: dict[str, Any] = {
        "model": args.model.name,
        "threads": os.environ.get("VERISPEC_THREADS"),
        "rounds": args.rounds,
    }
    for name, found in runs.items():
        out[name] = {
            "tree": str(trees[name]),
            "best_cpu_s": min(r["cpu_s"] for r in found),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in found),
            "median_wall_s": statistics.median(r["wall_s"] for r in found),
        }
    out["after_over_before_cpu"] = out["after"]["median_cpu_s"] / out["before"]["median_cpu_s"]
    out["load_average"] = [load_start, os.getloadavg()[0]]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
