"""One ``check-decoder --workers N`` worker: a Python engine served over the decoder wire ops.

    python -m verispec.decoder.worker RECIPE_JSON

The recipe (:class:`WorkerRecipe`, JSON) names the decoder as ``check-decoder`` does (``engine``
``"module:FACTORY"``, ``ours``, ``mutant``) and the model file; the worker builds that engine for
itself, answers the depth tests' ops ``generate``, ``generate_plain`` and ``generate_batch`` (its
requests read by spec/decoder/depth/batch.py ``request_from_json``; spec/decoder/check.py's
wire, one JSON line per request and per response, through :func:`spec.external.serve`) and the
start probe ``ready`` until its stdin closes, and ends when the checker that started it dies
(verispec/parent_death.py), even in the middle of a block. Whatever the engine prints goes to stderr: stdout
carries the protocol only. The checker runs each worker as a program under test
(:mod:`spec.decoder.depth.pool`), so it is contained like one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verispec.decoder.recipe import WorkerRecipe

__all__ = ["OPS", "WorkerRecipe", "build", "handler"]

OPS = ("generate", "generate_plain", "generate_batch", "ready")


def build(recipe: WorkerRecipe) -> Any:
    """The recipe's engine, built as ``check-decoder`` builds it in the checker's process."""
    from verispec.decoder.api import build_engine

    if recipe.cwd and recipe.cwd not in sys.path:
        sys.path.append(recipe.cwd)
    return build_engine(recipe.subject(), Path(recipe.model))


def handler(engine: Any) -> Any:
    """``handle(op, input) -> output`` for the worker's ops."""
    from verispec.reference.errors import UsageError
    from verispec.spec.decoder.depth.blocks import as_mapping
    from verispec.spec.decoder.laws import from_json as law_from_json
    from verispec.spec.vectors.wire import params_from_json

    def handle(op: str, inp: Mapping[str, Any]) -> dict[str, Any]:
        if op == "ready":
            return {}
        if op == "generate_batch":
            from verispec.spec.decoder.depth.batch import request_from_json

            listed = inp.get("requests")
            if not isinstance(listed, list) or not listed:
                raise UsageError("generate_batch input.requests must be a non-empty list of requests")
            requests = [request_from_json(r, f"input.requests[{i}]") for i, r in enumerate(listed)]
            return {"generations": [as_mapping(g) for g in engine.generate_batch(requests)]}
        keywords = {"law": law_from_json(inp["law"])} if inp.get("law") is not None else {}
        raw = getattr(engine, op)(
            [int(t) for t in inp["prompt_ids"]],
            params_from_json(inp["params"]),
            int(inp["max_tokens"]),
            int(inp["n"]),
            int(inp["seed"]),
            int(inp.get("min_tokens", 0)),
            **keywords,
        )
        return {"samples": [as_mapping(g) for g in raw]}

    return handle


def main(argv: list[str]) -> int:
    from verispec.parent_death import die_with_parent
    from verispec.spec.external import serve

    die_with_parent()  # a checker killed outright takes its workers with it
    if len(argv) != 1:
        print("usage: python -m verispec.decoder.worker RECIPE_JSON", file=sys.stderr)
        return 2
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the engine's prints go to stderr
    engine = build(WorkerRecipe.from_json(argv[0]))
    try:
        return serve(handler(engine), sys.stdin.buffer, protocol, OPS)
    finally:
        close = getattr(engine, "close", None)
        if callable(close):
            close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
