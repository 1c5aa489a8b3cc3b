"""The model-fuzz corpus's CPU in a long-lived process: ``run_cases`` (tests/support/model_corpus.py,
the ci count of 400 cases) in a process that first holds ``--maps`` extra file mappings, as a test
worker does late in the gate (every model and onnxruntime session it loaded). A model load hands
pages back in passes over /proc/self/smaps (engine/pages.py), whose cost grows with the mappings.

Run it in each source tree, interleaved, on the same machine (the ratio is the claim, with the
load average):

    PYTHONPATH=TREE python -m lab.measure.fuzz_fat_process --maps 10000

prints one JSON line: the tree, the mappings held, the corpus's CPU seconds (self + children).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import tempfile
import warnings
from pathlib import Path

import numpy as np

from tests.support.model_corpus import run_cases

PAGES_PER_FILE = 100


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _hold_mappings(count: int, folder: Path) -> list[mmap.mmap]:
    """``count`` one-page read-only file mappings, each with its page resident."""
    held: list[mmap.mmap] = []
    for i in range(-(-count // (PAGES_PER_FILE // 2))):
        path = folder / str(i)
        path.write_bytes(b"x" * mmap.PAGESIZE * PAGES_PER_FILE)
        with open(path, "rb") as fh:
            for page in range(0, PAGES_PER_FILE, 2):  # every other page: no two mappings merge
                held.append(mmap.mmap(fh.fileno(), mmap.PAGESIZE, offset=mmap.PAGESIZE * page, access=mmap.ACCESS_READ))
                held[-1][0]
    return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--maps", type=int, default=10_000, help="extra file mappings to hold first")
    parser.add_argument("--cases", type=int, default=400)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # as the test: overflow in a forward is a ModelError
    with np.errstate(all="ignore"), tempfile.TemporaryDirectory() as scratch:
        run_cases(range(3))  # imports and first calls outside the count
        held = _hold_mappings(args.maps, Path(scratch))
        started = _cpu_s()
        _, failures = run_cases(range(args.cases))
        used = _cpu_s() - started
        maps = Path("/proc/self/maps").read_text().count("\n")
        del held
    print(
        json.dumps(
            {
                "tree": os.environ.get("PYTHONPATH", ""),
                "mappings": maps,
                "cases": args.cases,
                "cpu_s": round(used, 2),
                "untyped": len(failures),
                "load_average": list(os.getloadavg()),
            }
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
