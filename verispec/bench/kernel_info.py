"""Which kernels a loaded engine model runs: its mode, onnxruntime's version and providers, and
the row mode each of its onnxruntime graphs chose (:meth:`engine.matmul.OrtGraph._probe_row_mode`:
``native``, ``pad-single-row`` or ``row-by-row``, measured at load on this machine: how a 1-row
call is kept bit-identical to a k-row call).

Read from the model as loaded (every :class:`engine.matmul.OrtGraph` reachable from its weight
store), never re-measured: what the bench reports is what the timed runs used.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel

MAX_OBJECTS = 100_000  # a bound on the walk (a store holds a few hundred objects)


def engine_kernel(model: FastModel) -> dict[str, Any]:
    """``mode`` (weights/backend), ``onnxruntime`` (version or None), ``providers``, ``graphs``
    (onnxruntime sessions) and ``row_modes`` (row mode -> graphs)."""
    graphs = list(_graphs(model.store))
    providers = sorted({p for g in graphs for p in g.session.get_providers()})
    return {
        "mode": f"{model.weights_mode}/{model.backend}",
        "onnxruntime": _ort_version() if graphs else None,
        "providers": providers,
        "graphs": len(graphs),
        "row_modes": dict(sorted(Counter(g.row_mode for g in graphs).items())),
    }


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
