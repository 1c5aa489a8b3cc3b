"""Which OpenBLAS kernel is faster here: the same weight-shape stream under each OPENBLAS_CORETYPE.

OPENBLAS_CORETYPE must be set before numpy loads, so each kernel is measured in a child process
(``python -m verispec.bench.kernels SHAPES_JSON ROWS...`` prints JSON). Random float32 matrices of the
model's shapes stand in for the weights: the cost of a matmul does not depend on the values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

KERNELS: tuple[str | None, ...] = (None, "Haswell")  # None: OpenBLAS's own choice
ROWS: tuple[int, ...] = (1, 2, 5, 8)


def _measure(shapes: list[tuple[int, int]], rows: Sequence[int], repeats: int) -> dict[str, Any]:
    import numpy as np
    from threadpoolctl import threadpool_info

    rng = np.random.default_rng(0)
    mats = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    out: dict[str, float] = {}
    for r in rows:
        xs = [np.ones((r, m.shape[1]), dtype=np.float32) for m in mats]
        best = float("inf")
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            for x, m in zip(xs, mats):
                x @ m.T
            best = min(best, time.perf_counter() - t0)
        out[str(r)] = best * 1000
    arch = [lib.get("architecture") for lib in threadpool_info() if lib.get("internal_api") == "openblas"]
    return {"kernel": arch[0] if arch else None, "ms_by_rows": out}


def compare(
    shapes: list[tuple[int, int]], rows: Sequence[int] = ROWS, repeats: int = 3, timeout_s: float = 300
) -> list[dict[str, Any]]:
    """For each kernel in :data:`KERNELS`: the active kernel's name and ms per stream by row count."""
    results: list[dict[str, Any]] = []
    for coretype in KERNELS:
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        if coretype is not None:
            env["OPENBLAS_CORETYPE"] = coretype
        args = [sys.executable, "-m", "verispec.bench.kernels", json.dumps(shapes), str(repeats), *map(str, rows)]
        try:
            done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s, check=True)
            entry: dict[str, Any] = json.loads(done.stdout)
        except (subprocess.SubprocessError, json.JSONDecodeError) as exc:
            entry = {"kernel": None, "error": str(exc)[:200]}
        entry["coretype"] = coretype
        results.append(entry)
    return results


if __name__ == "__main__":
    shape_list = [(int(a), int(b)) for a, b in json.loads(sys.argv[1])]
    print(json.dumps(_measure(shape_list, [int(r) for r in sys.argv[3:]], int(sys.argv[2]))))
