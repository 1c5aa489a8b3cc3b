"""How many head rows a certified per-row bound leaves to compute exactly (a lab study).

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.sparse_head_bounds MODEL.gguf \
        [--fit-prompts 5] [--test-prompts 5] [--steps 12] [--json OUT.json]

An exact sparse head computes a cheap sketch ``S_i`` of every logit with a certified bound
``|K_i - S_i| <= B_i`` (``K_i``: the int8 head kernel's logit, the value the full head returns),
then the exact kernel only on the rows whose upper bound reaches the k-th largest lower bound.
It pays only if few rows stay candidates. This study measures that fraction on real hidden
states for the sketch families a head could store:

- ``int4`` .. ``int7``: every 32-weight block of the head requantized symmetrically to b bits
  (round to nearest, scale max|w| / (2^(b-1) - 1)); ``int4`` is the only one MatMulNBits could run
  (it has 4- and 8-bit forms), the others need a kernel that does not exist here;
- ``lowrank16`` / ``lowrank64``: the head projected onto the top r principal directions of hidden
  states from DIFFERENT prompts (``--fit-prompts``), ``S = (W Q)(Q^T x)``, a V x r float32 matrix;
- ``int4pca8`` / ``16`` / ``32``: the int4 sketch plus its error's component along the top r
  principal directions of the fit states, ``S = w4 . x + (Q^T e) . (Q^T x)`` (a V x r float32
  matrix beside the int4 blocks), the bound on ``e . (x - Q Q^T x)`` only;
- ``blocknorm``: no sketch at all (``S = 0``), the bound from per-block row norms.

The bound is the per-block sketch error ``sum_b min(||e_b||_2 ||x_b||_2, ||e_b||_1 ||x_b||_inf)``
(``e = w - w_sketch``, Cauchy-Schwarz and Hoelder per block) plus the kernel's own error against
``w . x`` (:func:`verispec.engine.sparse_head.kernel_error_bound`: its int8 rounding of the
activation and its float32 accumulation; checked here against every row of every test state:
``kernel_model_worst_ratio`` <= 1). ``ideal`` drops the kernel term: the best case, a sketch that
saw the kernel's own rounded activation. A 4-bit sketch would run on ``MatMulNBits`` as well: its
certified radius adds that kernel's error too (the int5-7 widths have no kernel). Counts are computed in float64 from the file's Q8_0
blocks (weights exact), the kernel's logits captured from the int8 engine.

Also measured: whether ``MatMulNBits`` on a sub-matrix (a 1024-row slice, 64 gathered rows) gives
each row the bits the 8192-row chunk gives it (the granularity an exact sparse evaluation could
use). Prints JSON and writes it to ``--json`` (default ``lab/measurements/sparse_head_bounds_MODEL.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lab.provenance import commit as head_commit
from verispec.engine.sparse_head import kernel_error_bound

F64 = npt.NDArray[np.float64]
Q8_0 = 8  # ggml type id
BLOCK = 32
CHUNK = 8192  # the int8 head's rows per kernel session (engine.weights.INT8_HEAD_CHUNK_ROWS)
FINE = 1024
KS = (1, 8, 64)
DATA = Path(__file__).resolve().parent.parent / "verispec" / "data"


def _prompts(name: str, count: int) -> list[str]:
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    step = max(1, len(rows) // count)  # spread over the kinds
    return [str(r["text"]) for r in rows[::step][:count]]


def capture(model_path: str, fit: list[str], test: list[str], steps: int) -> dict[str, Any]:
    """Greedy decode each prompt ``steps`` steps; the normed head inputs and the kernel's logits."""
    from verispec.engine.model import FastModel
    from verispec.reference.tokenizer import Tokenizer

    model = FastModel.load(model_path, weights="int8")
    tok = Tokenizer.from_file(model_path)
    store = model.store
    original = store.head_matmul
    seen: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = []

    def spy(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        y = original(x)
        seen.append((x.copy(), y.copy()))
        return y

    store.head_matmul = spy  # type: ignore[method-assign]
    out: dict[str, Any] = {}
    for name, texts in (("fit", fit), ("test", test)):
        seen.clear()
        for text in texts:
            ids = tok.encode(text, add_bos=tok.add_bos)
            cache = model.new_cache(len(ids) + steps + 1)
            logits = model.forward(ids, cache, last_only=True).logits[-1]
            for _ in range(steps):
                logits = model.forward([int(np.argmax(logits))], cache, last_only=True).logits[-1]
        out[name + "_x"] = np.concatenate([x for x, _ in seen])
        out[name + "_logits"] = np.concatenate([y for _, y in seen])
    store.head_matmul = original  # type: ignore[method-assign]
    out["model"] = model
    return out


def head_q8_0(model_path: str) -> tuple[npt.NDArray[np.uint8], int, int, str]:
    from verispec.reference.gguf import GGUFFile

    with GGUFFile.open(model_path) as f:
        name = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
        info = f.tensors[name]
        if info.ggml_type != Q8_0:
            raise SystemExit(f"{name} is ggml type {info.ggml_type}; this study reads Q8_0 heads")
        raw = np.array(f.raw(name))
    n_in = int(info.shape[-1])  # (rows, n_in)
    n_rows = raw.size // (n_in // BLOCK * 34)
    return raw.reshape(n_rows, -1), n_rows, n_in, name


def dequantize(rows: npt.NDArray[np.uint8], n_in: int) -> F64:
    nb = n_in // BLOCK
    blocks = rows.reshape(-1, 34)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float64).reshape(-1, nb)
    levels = blocks[:, 2:].view(np.int8).astype(np.float64).reshape(-1, nb, BLOCK)
    return (levels * scale[:, :, None]).reshape(-1, n_in)


def requantize(w: F64, bits: int) -> F64:
    top = 2 ** (bits - 1) - 1
    blocks = w.reshape(w.shape[0], -1, BLOCK)
    step = np.abs(blocks).max(axis=2, keepdims=True) / top
    step[step == 0] = 1.0
    out: F64 = (np.round(blocks / step) * step).reshape(w.shape)
    return out


def sketch_bound(e: F64, x: F64) -> F64:
    """``[T, rows]``: sum over blocks of min(||e_b||_2 ||x_b||_2, ||e_b||_1 ||x_b||_inf)."""
    nb = x.shape[1] // BLOCK
    eb = e.reshape(e.shape[0], nb, BLOCK)
    xb = x.reshape(x.shape[0], nb, BLOCK)
    l2 = np.linalg.norm(xb, axis=2)[:, None, :] * np.linalg.norm(eb, axis=2)[None, :, :]
    l1 = np.abs(xb).max(axis=2)[:, None, :] * np.abs(eb).sum(axis=2)[None, :, :]
    out: F64 = np.minimum(l2, l1).sum(axis=2)
    return out


def candidates(s: F64, b: F64, k: int) -> npt.NDArray[np.bool_]:
    lower = s - b
    kth = np.partition(lower, -k, axis=1)[:, -k][:, None]
    out: npt.NDArray[np.bool_] = (s + b) >= kth
    return out


def summarize(mask: npt.NDArray[np.bool_], n_rows: int) -> dict[str, float]:
    counts = mask.sum(axis=1)
    chunks = [len(np.unique(np.flatnonzero(row) // CHUNK)) for row in mask]
    fine = [len(np.unique(np.flatnonzero(row) // FINE)) for row in mask]
    return {
        "rows_median": float(np.median(counts)),
        "rows_p90": float(np.percentile(counts, 90)),
        "rows_max": int(counts.max()),
        "row_fraction_mean": float(counts.mean() / n_rows),
        "chunks_8192_median": float(np.median(chunks)),
        "chunks_8192_of": (n_rows + CHUNK - 1) // CHUNK,
        "blocks_1024_median": float(np.median(fine)),
        "blocks_1024_of": (n_rows + FINE - 1) // FINE,
    }


def submatrix_probe(raw: npt.NDArray[np.uint8], n_in: int, x: npt.NDArray[np.float32], name: str) -> dict[str, Any]:
    """Whether MatMulNBits on a slice / gathered rows returns each row's bits of the 8192-row chunk."""
    from verispec.engine import matmul
    from verispec.engine.blocks import repack

    def session(rows: npt.NDArray[np.uint8]) -> matmul.Matmul:
        blocks = repack(np.ascontiguousarray(rows).reshape(-1), Q8_0, (rows.shape[0], n_in), name=name)
        return matmul.ort_blocks(blocks, 1)

    full = session(raw[:CHUNK])(x)
    slice_rows = session(raw[FINE : 2 * FINE])(x)
    picked = np.random.default_rng(0).choice(CHUNK, 64, replace=False)
    gathered = session(raw[picked])(x)
    one = session(raw[picked[:1]])(x)
    return {
        "slice_1024_equal": bool(np.array_equal(slice_rows, full[:, FINE : 2 * FINE])),
        "gathered_64_equal": bool(np.array_equal(gathered, full[:, picked])),
        "single_row_equal": bool(np.array_equal(one, full[:, picked[:1]])),
        "rows_1_state_equal": bool(np.array_equal(session(raw[:CHUNK])(x[:1]), full[:1])),
    }


def study(model_path: str, fit_n: int, test_n: int, steps: int) -> dict[str, Any]:
    fit, test = _prompts("prompts_calibration.jsonl", fit_n), _prompts("prompts_heldout.jsonl", test_n)
    got = capture(model_path, fit, test, steps)
    xf, x32, kernel = got["fit_x"].astype(np.float64), got["test_x"], got["test_logits"].astype(np.float64)
    x = x32.astype(np.float64)
    raw, n_rows, n_in, name = head_q8_0(model_path)
    _, _, vt = np.linalg.svd(xf, full_matrices=False)
    families: dict[str, Any] = {
        "int4pca8": 8,
        "int4pca16": 16,
        "int4pca32": 32,
        "int4": 4,
        "int5": 5,
        "int6": 6,
        "int7": 7,
        "lowrank16": 16,
        "lowrank64": 64,
        "blocknorm": 0,
    }
    t = x.shape[0]
    scores = {f: np.empty((t, n_rows)) for f in families}
    bounds = {f: np.empty((t, n_rows)) for f in families}
    kterm = np.empty((t, n_rows))
    # a 4-bit sketch runs through MatMulNBits too: its own kernel error joins the certified radius
    on_kernel = [f for f in families if f.startswith("int4")]
    sketch_kernel = {f: np.empty((t, n_rows)) for f in on_kernel}
    worst_ratio = 0.0
    for first in range(0, n_rows, CHUNK):
        rows = slice(first, min(first + CHUNK, n_rows))
        w = dequantize(raw[rows], n_in)
        kterm[:, rows] = kernel_error_bound(w, x32)
        exact = x @ w.T
        worst_ratio = max(worst_ratio, float((np.abs(kernel[:, rows] - exact) / kterm[:, rows]).max()))
        for fam, param in families.items():
            if fam.startswith("int4pca"):  # int4 plus the error's component along x's directions
                q = vt[:param].T  # [K, r]
                sk = requantize(w, 4)
                x_par = x @ q  # [T, r]
                x_perp = x - x_par @ q.T
                # e.x = (Q^T e).(Q^T x) + e.(x - Q Q^T x) for any Q: the first term exact (a V x r
                # matrix stored beside the int4 sketch), the second bounded per block
                scores[fam][:, rows] = x @ sk.T + x_par @ ((w - sk) @ q).T
                bounds[fam][:, rows] = sketch_bound(w - sk, x_perp)
                sketch_kernel[fam][:, rows] = kernel_error_bound(sk, x32)
                continue
            if fam.startswith("int"):
                sk = requantize(w, param)
            elif fam.startswith("lowrank"):
                q = vt[:param].T
                sk = (w @ q) @ q.T
            else:
                sk = np.zeros_like(w)
            scores[fam][:, rows] = x @ sk.T
            bounds[fam][:, rows] = sketch_bound(w - sk, x)
            if fam in sketch_kernel:
                sketch_kernel[fam][:, rows] = kernel_error_bound(sk, x32)
    result: dict[str, Any] = {
        "head_tensor": name,
        "rows": n_rows,
        "n_in": n_in,
        "test_states": t,
        "fit_states": int(xf.shape[0]),
        "kernel_model_worst_ratio": worst_ratio,
        "kernel_term_median": float(np.median(kterm)),
        "top1_minus_top2_median": float(np.median(np.diff(np.sort(kernel, axis=1)[:, -2:], axis=1))),
        "families": {},
    }
    sketch_bits = {
        "int4pca8": 4.5 + 8 * 32 / n_in,
        "int4pca16": 4.5 + 16 * 32 / n_in,
        "int4pca32": 4.5 + 32 * 32 / n_in,
        "int4": 4.5,
        "int5": 5.5,
        "int6": 6.5,
        "int7": 7.5,
        "lowrank16": 16 * 32 / n_in,
        "lowrank64": 64 * 32 / n_in,
        "blocknorm": 32 / BLOCK,
    }
    for fam in families:
        entry: dict[str, Any] = {"sketch_bits_per_weight": sketch_bits[fam]}
        certified = bounds[fam] + kterm + (sketch_kernel[fam] if fam in sketch_kernel else 0.0)
        for label, b in (("certified", certified), ("ideal", bounds[fam])):
            entry[label] = {f"k{k}": summarize(candidates(scores[fam], b, k), n_rows) for k in KS}
        result["families"][fam] = entry
    result["head_bits_per_weight"] = 34 * 8 / 32
    result["submatrix"] = submatrix_probe(raw, n_in, x32[:4], name)
    return result


def machine() -> str:
    import onnxruntime

    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_int8") if f" {f}" in text]
    return f"{name}, {os.cpu_count()} cores, {' '.join(flags)}; onnxruntime {onnxruntime.__version__}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--fit-prompts", type=int, default=5)
    parser.add_argument("--test-prompts", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load0 = os.getloadavg()
    result = study(args.model, args.fit_prompts, args.test_prompts, args.steps)
    commit = head_commit(full=True)
    result["provenance"] = {
        "date": started,
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": "python -m lab.sparse_head_bounds " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": commit,
        "loadavg_at_start": f"{load0[0]:.2f}",
        "loadavg_at_end": f"{os.getloadavg()[0]:.2f}",
        "machine": machine(),
        "note": "counts in float64 from the file's Q8_0 blocks; kernel logits from the int8 engine (1 thread)",
    }
    stem = Path(args.model).name.split(".")[0].lower()
    out = args.json or Path("lab/measurements") / f"sparse_head_bounds_{stem}.json"
    text = json.dumps(result, indent=2)
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
