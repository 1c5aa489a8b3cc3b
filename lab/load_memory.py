"""Where an int8 load's resident memory is, stage by stage: a table from /proc/self/smaps.

``python -m lab.load_memory MODEL.gguf [--steps 4] [--json OUT.json]`` loads ``MODEL`` in the int8
mode in THIS process (run it alone: ``VERISPEC_THREADS=1``), and after each stage (imports, the
GGUF opened, every few layers, the head, the load's end, the prompt, the decode steps) reads
``/proc/self/status`` and ``/proc/self/smaps``. Each row: RSS now, the peak since the previous row
(VmHWM, reset between rows by writing 5 to ``/proc/self/clear_refs`` where the kernel allows it),
and RSS split by what backs it:

- ``anon``: anonymous memory (heap, anonymous maps, pages written in private file maps);
- ``gguf``: the model file's mapped pages (the file's own, shared with the page cache);
- ``ort_tmp``: onnxruntime's maps of the engine's external-data files (deleted once a session exists);
- ``ort_lib``: onnxruntime's shared libraries; ``other``: every other file (Python, NumPy, ...).

The baseline row (``imports``) is the interpreter with NumPy and verispec imported, nothing loaded:
what a process holds before it loads a model. ``over_file_plus_kv`` is (peak - baseline) /
(file + KV), the figure of the memory target; whatever the load imports (onnxruntime and onnx
where a kernel runs on them, ~50 MiB; the tile kernels need neither) counts against the model, and
``imported`` names it. ``prepacked_mib`` is what the kernels hold for the weights alone
(:func:`engine.weights.int8_prepacked_bytes` on the kernels the load chose), the floor of this
design. The stage hooks wrap the loader's methods from outside (observation only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lab.provenance import commit

KIB = 1024
MIB = 1024 * 1024


def status_bytes() -> dict[str, int]:
    """VmRSS / VmHWM / RssAnon / RssFile of this process, in bytes (/proc/self/status)."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * KIB
    return out


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (clear_refs 5); False where the kernel refuses it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _group(path: str, gguf: str) -> str:
    if not path or path.startswith("[") or path.startswith("/memfd:"):
        return "anon"
    if path == gguf:
        return "gguf"
    if "verispec-ort-" in path:
        return "ort_tmp"
    if "onnxruntime" in path:
        return "ort_lib"
    return "other"


def smaps_split(gguf: str) -> dict[str, int]:
    """Resident bytes by group (see the module docstring); ``anon`` counts every anonymous page,
    including those written in private file maps (the ``Anonymous:`` field), which the file
    groups then exclude."""
    groups = {"anon": 0, "gguf": 0, "ort_tmp": 0, "ort_lib": 0, "other": 0}
    group = "anon"
    rss = 0
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(maxsplit=5)
            if not head:
                continue
            if not head[0].endswith(":"):  # a mapping's header line
                path = head[5].strip() if len(head) > 5 else ""
                if path.endswith(" (deleted)"):
                    path = path[: -len(" (deleted)")]
                group = _group(path, gguf)
                rss = 0
            elif head[0] == "Rss:":
                rss = int(head[1]) * KIB
                groups[group] += rss
            elif head[0] == "Anonymous:" and group != "anon":
                written = int(head[1]) * KIB
                groups[group] -= written
                groups["anon"] += written
    return groups


class Recorder:
    def __init__(self, gguf: str) -> None:
        self.gguf = gguf
        self.rows: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.peak_resets = _reset_peak()

    def mark(self, stage: str) -> None:
        status = status_bytes()
        row: dict[str, Any] = {
            "stage": stage,
            "t_s": round(time.perf_counter() - self.started, 3),
            "rss_mib": status["VmRSS"] / MIB,
            "peak_since_last_mib": status["VmHWM"] / MIB,
        }
        row.update({k + "_mib": v / MIB for k, v in smaps_split(self.gguf).items()})
        self.rows.append(row)
        _reset_peak()

    @property
    def overall_peak_mib(self) -> float:
        return float(max(r["peak_since_last_mib"] for r in self.rows))


def _wrap(owner: Any, name: str, after: Callable[[Any, tuple[Any, ...]], None]) -> None:
    original = getattr(owner, name)

    def wrapped(self: Any, *args: Any) -> Any:
        out = original(self, *args)
        after(self, args)
        return out

    setattr(owner, name, wrapped)


LIBRARIES = ("onnx", "onnxruntime")  # what a load may import beyond the baseline's


def measure(model_path: Path, steps: int, layer_every: int) -> dict[str, Any]:
    from verispec.engine import weights as weights_module
    from verispec.engine.model import FastModel

    gguf = str(model_path.resolve())
    rec = Recorder(gguf)
    rec.mark("imports")
    before = [name for name in LIBRARIES if name in sys.modules]
    n_layer_box: list[int] = [0]

    def after_layer(loader: Any, args: tuple[Any, ...]) -> None:
        il = int(args[0])
        n_layer_box[0] = loader.cfg.n_layer
        if il % layer_every == layer_every - 1 or il == loader.cfg.n_layer - 1:
            rec.mark(f"layer {il}")

    loader_cls = weights_module.Int8Loader
    _wrap(loader_cls, "layer_parts", after_layer)  # the fused path: one layer's matrices, packed next
    _wrap(loader_cls, "layer", after_layer)
    _wrap(loader_cls, "head", lambda _s, _a: rec.mark("head"))
    t0 = time.perf_counter()
    model = FastModel.load(model_path, weights="int8")
    load_s = time.perf_counter() - t0
    rec.mark("loaded")
    cfg = model.config
    prompt = list(range(1, 17))
    cache = model.new_cache(len(prompt) + steps + 1)
    logits = model.forward(prompt, cache, last_only=True).logits[-1]
    rec.mark("prompt (16 rows)")
    tokens = []
    for _ in range(steps):
        token = int(np.argmax(logits))
        tokens.append(token)
        logits = model.forward([token], cache, last_only=True).logits[-1]
    rec.mark(f"{steps} decode steps")
    from verispec.reference.gguf import GGUFFile

    floor = getattr(weights_module, "int8_prepacked_bytes", None)  # absent in trees before it existed
    kernels = [getattr(model.store, f"{part}_kernel", "mlas").split()[0] for part in ("layer", "head")]
    with GGUFFile.open(model_path) as f:
        prepacked_mib = floor(f, cfg, *kernels) / MIB if floor is not None else float("nan")
    base = rec.rows[0]["rss_mib"]
    file_mib = model_path.stat().st_size / MIB
    kv_mib = (cache.k.nbytes + cache.v.nbytes) / MIB
    peak = rec.overall_peak_mib
    return {
        "model": model_path.name,
        "n_layer": cfg.n_layer,
        "file_mib": file_mib,
        "kv_mib": kv_mib,
        "baseline_mib": base,
        "imported_before": before,
        "imported": [name for name in LIBRARIES if name in sys.modules and name not in before],
        "kernels": {"layer": kernels[0], "head": kernels[1]},
        "peak_mib": peak,
        "over_file_plus_kv": (peak - base) / (file_mib + kv_mib),
        "steady_over_file_plus_kv": (rec.rows[-1]["rss_mib"] - base) / (file_mib + kv_mib),
        "prepacked_mib": prepacked_mib,
        "prepacked_over_file_plus_kv": prepacked_mib / (file_mib + kv_mib),
        "load_s": load_s,
        "tokens": tokens,
        "peak_resets": rec.peak_resets,
        "onnxruntime": _version("onnxruntime"),
        "rows": rec.rows,
    }


def _version(name: str) -> str | None:
    """An installed distribution's version, without importing it (None where it is missing)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def provenance() -> dict[str, Any]:
    import verispec

    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verispec_tree": str(Path(verispec.__file__).resolve().parent.parent),
        "command": " ".join([os.path.basename(sys.executable), "-m", "lab.load_memory", *sys.argv[1:]]),
        "commit": commit(full=True),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "env": {k: os.environ.get(k) for k in ("VERISPEC_THREADS", "OPENBLAS_NUM_THREADS", "VERISPEC_INT8_FUSED")},
    }


COLUMNS = ("rss_mib", "peak_since_last_mib", "anon_mib", "gguf_mib", "ort_tmp_mib", "ort_lib_mib", "other_mib")


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['model']}: file {result['file_mib']:.1f} MiB, KV {result['kv_mib']:.2f} MiB, "
        f"load {result['load_s']:.2f} s, layer kernel {result['kernels']['layer']}, "
        f"head kernel {result['kernels']['head']}",
        f"{'stage':<18} {'t_s':>7} " + " ".join(f"{c.removesuffix('_mib'):>20}" for c in COLUMNS),
    ]
    for r in result["rows"]:
        lines.append(f"{r['stage']:<18} {r['t_s']:>7.2f} " + " ".join(f"{r[c]:>20.1f}" for c in COLUMNS))
    lines.append(
        f"peak {result['peak_mib']:.1f} MiB, baseline {result['baseline_mib']:.1f} MiB: "
        f"(peak - baseline) / (file + KV) = {result['over_file_plus_kv']:.3f} "
        f"(the load imported: {', '.join(result['imported']) or 'nothing more'}); "
        f"steady {result['steady_over_file_plus_kv']:.3f}"
    )
    lines.append(
        f"the kernels' prepacked weights alone (engine.weights.int8_prepacked_bytes): "
        f"{result['prepacked_mib']:.1f} MiB = {result['prepacked_over_file_plus_kv']:.3f} x (file + KV)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layer-every", type=int, default=6, help="a row every this many layers")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here, with provenance")
    args = parser.parse_args()
    result = measure(args.model, args.steps, args.layer_every)
    print(table(result))
    if args.json is not None:
        args.json.write_text(json.dumps({"provenance": provenance(), **result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
