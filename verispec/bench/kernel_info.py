"""Which kernels a loaded engine model runs: its mode, onnxruntime's version and providers, and
the row mode each of its onnxruntime graphs chose (:meth:`engine.matmul.OrtGraph._probe_row_mode`:
``native``, ``pad-single-row`` or ``row-by-row``, measured at load on this machine: how a 1-row
call is kept bit-identical to a k-row call).

Read from the model as loaded (every :class:`engine.matmul.OrtGraph` reachable from its weight
store), never re-measured: what the bench reports is what the timed runs used. How many graphs a
step runs is counted (:attr:`engine.matmul.OrtGraph.calls`) over one 1-row decode step (a
one-token prompt, then one token, on a cache of its own): ``calls_per_step``; the tile layer
kernel's calls (engine/tile_layers.py: one C call a layer half, no onnxruntime run) are counted
the same way (:attr:`engine.tile_layers.TileGraph.calls`): ``native_calls_per_step``. The layers'
graphs (``layer_calls_per_step``: one between two attentions, :class:`engine.fused.LayerChain`, on
whichever layer kernel) come from the model's structure; the onnxruntime calls beyond the layers'
(``calls_per_step + native_calls_per_step - layer_calls_per_step``) are the head's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel
from verispec.engine.tile_layers import TileGraph

MAX_OBJECTS = 100_000  # a bound on the walk (a store holds a few hundred objects)


def engine_kernel(model: FastModel) -> dict[str, Any]:
    """``mode`` (weights/backend), ``onnxruntime`` (version or None), ``providers``, ``graphs``
    (onnxruntime sessions), ``row_modes`` (row mode -> graphs), ``calls_per_step`` (onnxruntime
    runs of a 1-row decode step, counted), ``native_calls_per_step`` (the tile layer kernel's C
    calls in that step, counted: 0 on the ``mlas`` layers), ``layer_calls_per_step`` (the layers'
    graphs of a step, on either layer kernel; None without fused layers), ``head_kernel`` (the int8
    head's kernel: ``mlas``, or ``tile (ISA)``, engine/tile_head.py), ``layer_kernel`` (the int8
    layers' kernel: ``mlas``, or ``tile (ISA)``, engine/tile_layers.py) and ``huge_page_mib`` (the
    load's memory on 2 MiB pages, engine/huge_pages.py)."""
    graphs = list(_graphs(model.store))
    providers = sorted({p for g in graphs for p in g.session.get_providers()})
    chain = model.store.fused_layers
    ort_calls, native_calls = calls_per_step(model)
    return {
        "mode": f"{model.weights_mode}/{model.backend}",
        "onnxruntime": _ort_version() if graphs else None,
        "providers": providers,
        "graphs": len(graphs),
        "row_modes": dict(sorted(Counter(g.row_mode for g in graphs).items())),
        "calls_per_step": ort_calls,
        "native_calls_per_step": native_calls,
        "layer_calls_per_step": None if chain is None else chain.calls(0, model.config.n_layer - 1),
        "head_kernel": model.store.head_kernel,
        "layer_kernel": model.store.layer_kernel,
        "huge_page_mib": model.store.huge_page_bytes / 2**20,
    }


def calls_per_step(model: FastModel) -> tuple[int, int]:
    """onnxruntime runs and tile layer kernel calls of one 1-row decode step (the head on its
    row), counted."""
    cache = model.new_cache(2)
    model.forward([0], cache, last_only=True)
    ort_before, native_before = OrtGraph.calls, TileGraph.calls
    model.forward([0], cache, last_only=True)
    return OrtGraph.calls - ort_before, TileGraph.calls - native_before


def _graphs(root: object) -> Iterator[OrtGraph]:
    """Every OrtGraph reachable from ``root`` through the engine's own objects and containers."""
    seen: set[int] = set()
    stack: list[object] = [root]
    while stack and len(seen) < MAX_OBJECTS:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, OrtGraph):
            yield obj
            continue
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif type(obj).__module__.startswith("verispec.engine"):
            stack.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())
            slots: tuple[str, ...] = getattr(type(obj), "__slots__", ())
            stack.extend(getattr(obj, name) for name in slots if hasattr(obj, name))


def _ort_version() -> str | None:
    try:
        import onnxruntime

        return str(onnxruntime.__version__)
    except ImportError:
        return None
