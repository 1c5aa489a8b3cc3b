"""CPU of the int8 layer graphs alone: a link against the two graphs it fuses, and the cost by rows.

``python -m lab.link_ab MODEL.gguf [--repeats 40]`` builds, in one process, for every layer
boundary both the two graphs (``post`` of layer l, ``pre`` of layer l + 1) and the link that
fuses them (engine/fused.py), alternating which is built first so neither layout gets the
better memory placement (measured: a whole model loaded second ran up to 15-20% faster than one
loaded first in the same process, either layout). Then, alternating the layouts each repeat, it
streams every boundary once on constant inputs (no attention, no head) at 1 and 5 rows and
records the CPU seconds (``time.process_time``: at 1 thread the work itself, robust to a loaded
machine). Second, the model as loaded (the chain and the head) at 1, 2, 3, 4, 5 and 8 rows: the
CPU of a pass of its layer graphs and of its head relative to one row (what a k-row verify pass
costs beyond a 1-row one, without the attention). Prints JSON with the load average. Set
``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from verispec.engine import fused
from verispec.engine.matmul import OrtGraph, default_threads
from verispec.engine.model import FastModel
from verispec.engine.weights import int8_layer_source
from verispec.reference.config import Config
from verispec.reference.gguf import GGUFFile

ROWS = (1, 2, 3, 4, 5, 8)


def _inputs(cfg: Config, rows: int) -> dict[str, Any]:
    d = cfg.head_dim
    return {
        "attn": np.ones((rows, cfg.n_head * d), np.float32),
        "x": np.ones((rows, cfg.n_embd), np.float32),
        "cos": np.ones((rows, 1, d), np.float32),
        "sin": np.zeros((rows, 1, d), np.float32),
        "enter": np.zeros((rows, 1), np.bool_),
    }


def _run(graph: OrtGraph, feeds: dict[str, Any]) -> list[Any]:
    return graph.run(*(feeds[name] for name in graph.input_names))


def links_against_pairs(path: Path, repeats: int) -> dict[str, Any]:
    """The two layouts of every boundary, built interleaved, streamed alternately (CPU ms)."""
    threads = default_threads()
    with GGUFFile.open(path) as f:
        cfg = Config.from_gguf(f)
        layer = int8_layer_source(f, cfg)
        parts = [layer(il) for il in range(cfg.n_layer)]
        pairs: list[tuple[OrtGraph, OrtGraph]] = []
        links: list[OrtGraph] = []
        for il in range(cfg.n_layer - 1):
            for build in ("pair", "link") if il % 2 == 0 else ("link", "pair"):
                if build == "pair":
                    pre = fused.build_pre(cfg, *parts[il + 1], threads)
                    pairs.append((fused.build_post(cfg, *parts[il], threads), pre))
                else:
                    links.append(fused.build_link(cfg, parts[il], parts[il + 1], threads))
        del parts
    cpu: dict[str, dict[int, list[float]]] = {"pairs": {1: [], 5: []}, "links": {1: [], 5: []}}
    for i in range(repeats):
        for layout in ("pairs", "links") if i % 2 == 0 else ("links", "pairs"):
            for rows in (1, 5):
                feeds = _inputs(cfg, rows)
                c0 = time.process_time()
                if layout == "pairs":
                    for post, pre in pairs:
                        _run(pre, {**feeds, "x": _run(post, feeds)[0]})
                else:
                    for link in links:
                        _run(link, feeds)
                cpu[layout][rows].append(time.process_time() - c0)
    median = {k: {r: statistics.median(v) for r, v in per.items()} for k, per in cpu.items()}
    n = cfg.n_layer - 1
    return {
        "boundaries": n,
        "cpu_ms_median": {k: {str(r): 1e3 * v for r, v in per.items()} for k, per in median.items()},
        "saved_us_per_boundary": {str(r): 1e6 * (median["pairs"][r] - median["links"][r]) / n for r in (1, 5)},
        "pairs_over_links": {str(r): median["pairs"][r] / median["links"][r] for r in (1, 5)},
    }


def cost_by_rows(path: Path, repeats: int) -> dict[str, Any]:
    """CPU of the loaded model's layer graphs and head by rows, relative to one row."""
    model = FastModel.load(path, weights="int8", fused=True, layer_kernel="mlas")  # onnxruntime's graphs
    chain = model.store.fused_layers
    assert chain is not None
    graphs = [g for g in chain.graphs() if isinstance(g, OrtGraph)]
    cpu: dict[int, dict[str, list[float]]] = {r: {"layers": [], "head": []} for r in ROWS}
    for _ in range(repeats):
        for rows in ROWS:
            feeds = _inputs(model.config, rows)
            c0 = time.process_time()
            for graph in graphs:
                _run(graph, feeds)
            c1 = time.process_time()
            model.store.head_matmul(feeds["x"])
            cpu[rows]["layers"].append(c1 - c0)
            cpu[rows]["head"].append(time.process_time() - c1)
    median = {r: {k: statistics.median(v) for k, v in parts.items()} for r, parts in cpu.items()}
    return {
        "row_modes": sorted({g.row_mode for g in graphs}),
        "cpu_ms_median": {str(r): {k: 1e3 * v for k, v in parts.items()} for r, parts in median.items()},
        "relative_to_one_row": {str(r): {k: v / median[1][k] for k, v in parts.items()} for r, parts in median.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    load = [os.getloadavg()[0]]
    out: dict[str, Any] = {"model": args.model.name, "threads": os.environ.get("VERISPEC_THREADS", "default")}
    out["links_against_pairs"] = links_against_pairs(args.model, args.repeats)
    out["cost_by_rows"] = cost_by_rows(args.model, max(1, args.repeats // 3))
    out["load_average"] = load + [os.getloadavg()[0]]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
