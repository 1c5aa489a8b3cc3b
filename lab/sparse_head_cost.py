"""What a sparse head's pieces cost against the full int8 head, interleaved in one process.

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.sparse_head_cost MODEL.gguf \
        [--rounds 20] [--json OUT.json]

Times, on the same normed hidden state, round by round in turn (so a burst of load falls on all):
the full head (every 8192-row ``MatMulNBits`` chunk of the int8 mode, 8-bit), ONE of its chunks
(what the exact part of a sparse head pays per chunk holding a candidate), and an int4 sketch of
the whole head (the file's Q8_0 rows requantized to 4-bit blocks, the same chunking, the only
narrower width ``MatMulNBits`` runs). Prints JSON: each one's best and median seconds and their
ratios to the full head's, the load average, and the resident bytes the int4 sketch's sessions
added. With ``lab/sparse_head_bounds.py`` (how many chunks a sketch leaves) this prices a sparse
head: sketch + chunks x one chunk.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lab.load_memory import status_bytes
from lab.provenance import commit as head_commit
from lab.sparse_head_bounds import CHUNK, dequantize, head_q8_0, machine


def int4_chunks(raw: npt.NDArray[np.uint8], n_in: int, threads: int) -> Any:
    """The head's rows requantized to symmetric 4-bit blocks of 32, in the int8 head's chunks."""
    from verispec.engine import matmul
    from verispec.engine.blocks import KernelBlocks

    parts: list[matmul.Matmul] = []
    for first in range(0, raw.shape[0], CHUNK):
        w = dequantize(raw[first : first + CHUNK], n_in)
        blocks = w.reshape(w.shape[0], -1, 32)
        step = np.abs(blocks).max(axis=2) / 7.0
        step[step == 0] = 1.0
        levels = (np.clip(np.round(blocks / step[:, :, None]), -7, 7) + 8).astype(np.uint8)
        kernel = KernelBlocks(
            bits=4,
            block=32,
            levels=levels.reshape(w.shape),
            scales=step.astype(np.float32),
            zeros=np.full(step.shape, 8, dtype=np.uint8),
            mins=None,
            source_types=(2,),
        )
        parts.append(matmul.ort_blocks(kernel, threads))
    return matmul.RowChunks(parts)


def measure(model_path: str, rounds: int) -> dict[str, Any]:
    from verispec.engine.model import FastModel
    from verispec.reference import layers

    model = FastModel.load(model_path, weights="int8")
    full = model.store.head_output
    raw, _, n_in, _ = head_q8_0(model_path)
    before = status_bytes()["VmRSS"]
    sketch = int4_chunks(raw, n_in, 1 if os.environ.get("VERISPEC_THREADS") == "1" else 2)
    added = status_bytes()["VmRSS"] - before
    cache = model.new_cache(16)
    hidden = model.forward([1, 504, 2365, 6354, 28, 1130, 314, 260], cache, return_hidden=True).hidden
    assert hidden is not None and full is not None
    x = layers.rms_norm(hidden[-1][-1:], model.store.output_norm, model.config.norm_eps)
    one = full.parts[len(full.parts) // 2]  # type: ignore[attr-defined]
    runs: dict[str, Any] = {"full_head": full, "one_chunk": one, "int4_sketch": sketch}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():  # warm up
        fn(x)
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            t0 = time.perf_counter()
            runs[name](x)
            times[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {"chunks": len(full.parts), "int4_sketch_resident_bytes_added": added}  # type: ignore[attr-defined]
    for name, ts in times.items():
        out[name] = {"best_s": min(ts), "median_s": statistics.median(ts)}
    for name in ("one_chunk", "int4_sketch"):
        out[f"{name}_over_full_best"] = out[name]["best_s"] / out["full_head"]["best_s"]
        out[f"{name}_over_full_median"] = out[name]["median_s"] / out["full_head"]["median_s"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load0 = os.getloadavg()
    result = measure(args.model, args.rounds)
    commit = head_commit(full=True)
    result["provenance"] = {
        "date": started,
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": "python -m lab.sparse_head_cost " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": commit,
        "loadavg_at_start": f"{load0[0]:.2f}",
        "loadavg_at_end": f"{os.getloadavg()[0]:.2f}",
        "machine": machine(),
        "note": f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} "
        f"VERISPEC_THREADS={os.environ.get('VERISPEC_THREADS')}",
    }
    stem = Path(args.model).name.split(".")[0].lower()
    out = args.json or Path("lab/measurements") / f"sparse_head_cost_{stem}.json"
    text = json.dumps(result, indent=2)
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
