"""`verispec bench`'s backend section: every matmul backend and weights mode measured in ONE run.

Modes (:data:`MODES`): ``f32/numpy`` and ``f32/ort`` (exact float32, the reference's function) and
``int8/ort-q`` (the file's blocks, int8 activations: its own law). For each, on the same machine
in the same minutes, interleaved (round-robin over modes, best of ``repeats``; the machine is
shared, so only ratios within this run mean anything):

- ``bound_ms``: one pass of 1 activation row through every matrix of a decode step (the mode's own
  matmul floor), and ``rows_cost_relative``: the same pass with k rows over 1 row (what a
  verification pass of k rows costs); ``k_within``: the largest draft length k whose k+1-row pass
  stays within 1.5x a 1-row pass (the row counts worth verifying, by measurement).
- ``plain``: greedy decode, best step, and its ratio to the mode's bound.
- ``threads``: the 1-row and 5-row pass with 2 onnxruntime threads over 1 thread (ort modes).
- ``rss``: a child process per mode loads the model, decodes, and reports its peak RSS against the
  GGUF file size plus the KV cache it allocated (the memory target: <= 1.5x).
- ``int8_fused_over_unfused``: the int8 mode's other layer path (:mod:`engine.fused`) is measured
  beside it as one more mode (``int8/ort-q fused`` or ``int8/ort-q unfused``, whichever is not the
  default), interleaved the same way: plain decode steps per second, fused over unfused. For a
  fused model ``bound`` streams its layer graphs (the chain of :mod:`engine.fused`: the matrices
  plus the norms, RoPE, residuals and activation fused with them, without the attention) and the
  head.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from verispec.engine import matmul
from verispec.engine.model import FastModel

MODES: tuple[tuple[str, str], ...] = (("f32", "numpy"), ("f32", "ort"), ("int8", "auto"))
ROWS: tuple[int, ...] = (1, 2, 3, 5, 8)
VERIFY_BUDGET = 1.5  # a k+1-row pass worth running costs at most this many 1-row passes


def label(weights: str, backend: str) -> str:
    return f"{weights}/{'ort-q' if weights == 'int8' else backend}"


def variant_label(fused: bool) -> str:
    """The label of the int8 layer path that is not the default (measured beside it)."""
    return f"int8/ort-q {'fused' if fused else 'unfused'}"


def load_modes(path: Path, loaded: dict[str, FastModel] | None = None) -> tuple[dict[str, FastModel], dict[str, str]]:
    """Every mode this machine can run -> model (``loaded`` ones reused), the int8 mode's other
    layer path included; mode -> why not, for the rest."""
    models: dict[str, FastModel] = {}
    missing: dict[str, str] = {}
    for weights, backend in MODES:
        name = label(weights, backend)
        if loaded and name in loaded:
            models[name] = loaded[name]
            continue
        if backend != "numpy" and not matmul.ort_available():
            missing[name] = "onnxruntime/onnx not installed (pip install 'verispec[fast]')"
            continue
        models[name] = FastModel.load(path, weights=weights, backend=backend)
    default_int8 = models.get(label("int8", "auto"))
    if default_int8 is not None:
        other = not default_int8.fused
        models[variant_label(other)] = FastModel.load(path, weights="int8", fused=other)
    return models, missing


def matmul_stream(model: FastModel, rows: int) -> Callable[[], None]:
    """One pass of ``rows`` activation rows through every matrix a decode step reads."""
    store, cfg = model.store, model.config
    x = np.ones((rows, cfg.n_embd), dtype=np.float32)
    a = np.ones((rows, cfg.n_head * cfg.head_dim), dtype=np.float32)
    f = np.ones((rows, cfg.n_ff), dtype=np.float32)

    chain = store.fused_layers
    feeds = {  # a fused graph's inputs by name (engine/fused.py)
        "x": x,
        "attn": a,
        "cos": np.ones((rows, 1, cfg.head_dim), dtype=np.float32),
        "sin": np.zeros((rows, 1, cfg.head_dim), dtype=np.float32),
        "enter": np.zeros((rows, 1), dtype=np.bool_),
    }

    def run() -> None:
        if chain is not None:  # fused int8: the chain's graphs, one between two attentions
            for graph in chain.graphs():
                graph.run(*(feeds[name] for name in graph.input_names))
        for layer in range(cfg.n_layer if chain is None else 0):
            w = store.layer(layer)
            w.qkv(x)
            w.o(a)
            w.gu(x)
            w.down(f)
        store.head_matmul(x)

    return run


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def curves(models: dict[str, FastModel], repeats: int, rows: tuple[int, ...] = ROWS) -> dict[str, dict[int, float]]:
    """mode -> rows -> best seconds of a pass, the modes interleaved round-robin."""
    streams = {name: {r: matmul_stream(m, r) for r in rows} for name, m in models.items()}
    best: dict[str, dict[int, float]] = {name: {r: math.inf for r in rows} for name in models}
    for name in models:  # warm-up (first calls allocate)
        streams[name][rows[0]]()
    for _ in range(max(1, repeats)):
        for name in models:
            for r in rows:
                best[name][r] = min(best[name][r], _timed(streams[name][r]))
    return best


def decode_best_steps(
    models: dict[str, FastModel],
    prompt: list[int],
    steps: int,
    repeats: int,
    decode: Callable[[FastModel, list[int], int], list[float]],
) -> dict[str, float]:
    """mode -> best seconds of one greedy decode step, the modes interleaved."""
    best = {name: math.inf for name in models}
    for _ in range(max(1, repeats)):
        for name, model in models.items():
            best[name] = min(best[name], min(decode(model, prompt, steps)))
    return best


def threads_ratio(path: Path, weights: str, backend: str, repeats: int, timeout_s: float = 600) -> dict[str, float]:
    """Passes of 1 and 5 rows with 2 onnxruntime threads over 1 thread. The thread count is a
    process setting (engine/ort_pool.py: one shared pool), so each count runs in its own child
    process, the children alternated (1, 2, 1, 2, ...) ``repeats`` times, best pass kept."""
    best: dict[int, dict[int, float]] = {t: {1: math.inf, 5: math.inf} for t in (1, 2)}
    for _ in range(max(1, repeats)):
        for threads in (1, 2):
            args = [sys.executable, "-m", "verispec.bench.backends", "curve", str(path), weights, backend, "2"]
            env = {**os.environ, "VERISPEC_THREADS": str(threads)}
            try:
                done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=True, env=env)
                timed = json.loads(done.stdout.strip().splitlines()[-1])
            except (subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
                raise RuntimeError(f"threads child ({threads} threads) failed: {str(exc)[:200]}") from exc
            for r in (1, 5):
                best[threads][r] = min(best[threads][r], float(timed[str(r)]))
    return {f"{r}_rows": best[2][r] / best[1][r] for r in (1, 5)}


def _curve_child(path: Path, weights: str, backend: str, repeats: int) -> dict[str, float]:
    """(In the child.) Best seconds of a 1- and a 5-row matmul pass at this process's threads."""
    model = FastModel.load(path, weights=weights, backend=backend)
    timed = curves({"m": model}, repeats, rows=(1, 5))["m"]
    return {str(r): timed[r] for r in (1, 5)}


def measure(
    path: Path,
    prompt: list[int],
    steps: int,
    repeats: int,
    decode: Callable[[FastModel, list[int], int], list[float]],
    *,
    threads: bool = True,
    rss: bool = True,
    loaded: dict[str, FastModel] | None = None,
) -> tuple[dict[str, Any], dict[str, FastModel]]:
    """The section's report (see the module docstring) and the models (for more runs); ``loaded``:
    models already in memory by mode label (reused, not loaded again)."""
    models, missing = load_modes(path, loaded)
    timed = curves(models, repeats)
    steps_best = decode_best_steps(models, prompt, steps, repeats, decode)
    out: dict[str, Any] = {"modes": {}, "unavailable": missing, "rows": list(ROWS)}
    for name in models:
        one = timed[name][1]
        rel = {str(r): timed[name][r] / one for r in ROWS}
        within = [r - 1 for r in ROWS if r > 1 and rel[str(r)] <= VERIFY_BUDGET]
        out["modes"][name] = {
            "bound_ms": one * 1000,
            "bound_tok_s": 1.0 / one,
            "rows_cost_relative": rel,
            "k_within": max(within, default=0),
            "plain_ms": steps_best[name] * 1000,
            "plain_tok_s": 1.0 / steps_best[name],
            "plain_over_bound": one / steps_best[name],
        }
    variants = {m.fused: name for name, m in models.items() if m.weights_mode == "int8"}
    if len(variants) == 2:
        out["int8_fused_over_unfused"] = steps_best[variants[False]] / steps_best[variants[True]]
    if threads and matmul.ort_available():
        out["threads_2_over_1"] = {
            "f32/ort": threads_ratio(path, "f32", "ort", repeats),
            "int8/ort-q": threads_ratio(path, "int8", "auto", repeats),
        }
    if rss:
        out["rss"] = {
            name: rss_probe(path, name.split("/")[0], name.split("/")[1], steps) for name in models if " " not in name
        }  # not the int8 variant: the default path's memory
    return out, models


def rss_probe(path: Path, weights: str, backend: str, steps: int, timeout_s: float = 600) -> dict[str, Any]:
    """Peak RSS of a child process that loads ``path`` in a mode and decodes ``steps`` tokens."""
    backend = "auto" if backend == "ort-q" else backend
    args = [sys.executable, "-m", "verispec.bench.backends", str(path), weights, backend, str(steps)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=True)
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
        return {"error": str(exc)[:200]}
    return result


def _high_water_bytes() -> int:
    """This process's peak RSS: VmHWM (reset by exec; getrusage's ru_maxrss is not, a child
    started from a big parent reports the parent's peak), ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


RSS_TARGET = 1.5  # the memory target: peak RSS <= 1.5x (GGUF file + KV cache)


def onnxruntime_library_bytes() -> int:
    """Bytes of onnxruntime's shared libraries on disk: an upper bound on the pages of its code a
    process can have resident (0 where it is not installed)."""
    try:
        import onnxruntime
    except ImportError:
        return 0
    folder = Path(onnxruntime.__file__).parent / "capi"
    return sum(p.stat().st_size for p in folder.glob("*.so*") if p.is_file())


def _child(path: Path, weights: str, backend: str, steps: int) -> dict[str, Any]:
    """(In the child.) Load, decode ``steps`` greedy tokens, report peak RSS against file + KV,
    and against what :func:`engine.weights.estimate_bytes` promised for the mode."""
    from verispec.engine.weights import estimate_bytes
    from verispec.reference.gguf import GGUFFile

    baseline = _high_water_bytes()
    with GGUFFile.open(path) as f:
        estimate = estimate_bytes(f, weights)
    del f  # its parsed metadata (Gemma 3's 262,144-token vocabulary: ~36 MiB) is not the load's
    model = FastModel.load(path, weights=weights, backend=backend)
    cfg = model.config
    capacity = 16 + steps + 1
    cache = model.new_cache(capacity)
    # as decoding runs (engine.generate): the prompt's pass computes the head on its last row only
    logits = model.forward(list(range(1, 17)), cache, last_only=True).logits[-1]
    for _ in range(steps):
        logits = model.forward([int(np.argmax(logits))], cache, last_only=True).logits[-1]
    peak = _high_water_bytes()
    kv = int(cache.k.nbytes + cache.v.nbytes)
    file_bytes = path.stat().st_size
    return {
        "peak_rss_mib": peak / 2**20,
        # before loading: Python, NumPy, verispec; what the load imports counts against the model
        "interpreter_mib": baseline / 2**20,
        "imported": [name for name in ("onnx", "onnxruntime") if name in sys.modules],
        "file_mib": file_bytes / 2**20,
        "kv_mib": kv / 2**20,
        "over_file_plus_kv": peak / (file_bytes + kv),
        "model_over_file_plus_kv": (peak - baseline) / (file_bytes + kv),
        "target_over_file_plus_kv": RSS_TARGET,
        "estimate_mib": estimate / 2**20,  # what the load's memory check reserved for the weights
        "onnxruntime_library_mib": onnxruntime_library_bytes() / 2**20,
        "slots": capacity,
        "n_layer": cfg.n_layer,
    }


if __name__ == "__main__":
    # the baseline is this process before a load: onnxruntime is imported by a load that runs on it
    if sys.argv[1] == "curve":
        print(json.dumps(_curve_child(Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))))
    else:
        print(json.dumps(_child(Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))))
