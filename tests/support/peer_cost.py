"""Where a transformers peer run's CPU goes, per judged token, on the tiny synthetic models.

    python -m tests.support.peer_cost --out DIR [--path PATH ...] [--params hf-all] [--generations 4] [--rounds 2]

For each path, the adapter's own engine (tests/support/peer_verdicts.py's ``tiny_engine``: the same
models, assistants and keywords as a ``peer_verdicts`` run) decodes ``--rounds`` blocks of
``--generations`` generations twice per round, interleaved so both arms see the same load:
``generate()`` under ``torch.no_grad`` (the adapter before) and under ``torch.inference_mode``
(the adapter now; ``torch.inference_mode`` is swapped for ``no_grad`` in the first arm, which
transformers' generate path does not itself use). Same seeds, so both arms decode the same
tokens (``same_tokens``). It prints one JSON line per path: CPU ms a token for each arm and
their ratio; transformers' cycles (one target forward each), the drafts they proposed and
accepted, CPU ms a cycle; and the checker's CPU ms a token for the same tokens (our reference
forward teacher-forcing each generation, the law of each position and the statistics:
``spec.decoder.depth.law.score``). CPU time is this process's (user + system), so a ratio within
one run is meaningful on a shared machine; absolute milliseconds drift with the load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.peer_verdicts import PARAM_SETS, PROMPT, tiny_engine, write_models


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


@contextlib.contextmanager
def no_grad_instead_of_inference_mode() -> Iterator[None]:
    """The adapter as it was: ``torch.inference_mode`` replaced by ``torch.no_grad`` meanwhile."""
    import torch

    saved = torch.inference_mode
    torch.inference_mode = torch.no_grad  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        torch.inference_mode = saved  # type: ignore[misc]


class CycleCounter:
    """Counts transformers' speculative cycles: each ``get_candidates`` (drafts proposed) and the
    ``update_candidate_strategy`` that follows it (drafts accepted), wrapped on every candidate
    generator ``generate()`` builds. Observation only: the calls and their results are unchanged."""

    def __init__(self) -> None:
        self.cycles = self.drafted = self.accepted = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        from transformers.generation.utils import GenerationMixin

        original = GenerationMixin._get_candidate_generator
        counter = self

        def wrapped(model: Any, *args: Any, **kwargs: Any) -> Any:
            generator = original(model, *args, **kwargs)
            get, update = generator.get_candidates, generator.update_candidate_strategy
            last = [0]

            def get_candidates(input_ids: Any, *a: Any, **k: Any) -> Any:
                out = get(input_ids, *a, **k)
                last[0] = int(out[0].shape[1] - input_ids.shape[1])
                return out

            def update_candidate_strategy(input_ids: Any, scores: Any, num_matches: Any, *a: Any, **k: Any) -> Any:
                counter.cycles += 1
                counter.drafted += last[0]
                counter.accepted += int(num_matches)
                return update(input_ids, scores, num_matches, *a, **k)

            generator.get_candidates, generator.update_candidate_strategy = get_candidates, update_candidate_strategy  # type: ignore[method-assign]
            return generator

        GenerationMixin._get_candidate_generator = wrapped  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            GenerationMixin._get_candidate_generator = original  # type: ignore[method-assign]


def measure(path: str, params_name: str, files: dict[str, Path], generations: int, rounds: int) -> dict[str, Any]:
    """One path's JSON line (module docstring)."""
    from verispec.reference.model import Model
    from verispec.reference.tokenizer import Tokenizer
    from verispec.spec.decoder.depth.law import DepthCase, reference_rows, score
    from verispec.spec.decoder.laws import build

    ps = PARAM_SETS[params_name]
    tokenizer = Tokenizer.from_file(files["target"])
    prompt = tuple(tokenizer.encode(PROMPT, add_bos=tokenizer.add_bos, parse_special=True))
    flags = dict(ps.flags)
    min_tokens = int(flags.pop("min_tokens", 0))
    law = build(ps.law, {**flags, "min_tokens": min_tokens or None}, tokenizer.eog_ids)
    keywords = {} if law.name == "verispec" else {"law": law}
    peer = tiny_engine(path, ps.library_defaults, files["target"])
    peer.generate(prompt, law.legacy, ps.depth, 1, 1, min_tokens, **keywords)  # warm: first-call setup out of the sums
    arms: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
        "no_grad": no_grad_instead_of_inference_mode,
        "inference_mode": contextlib.nullcontext,
    }
    cpu = dict.fromkeys(arms, 0.0)
    decoded: dict[str, list[list[int]]] = {arm: [] for arm in arms}
    counters = {arm: CycleCounter() for arm in arms}
    for r in range(rounds):
        for arm, context in arms.items():
            with context(), counters[arm].installed():
                start = cpu_seconds()
                decoded[arm] += peer.generate(
                    prompt, law.legacy, ps.depth, generations, 1000 + r, min_tokens, **keywords
                )
                cpu[arm] += cpu_seconds() - start
    tokens = sum(len(g) for g in decoded["inference_mode"])
    case = DepthCase(
        prompt, law.legacy, ps.depth, frozenset(tokenizer.eog_ids), min_tokens, None if law.name == "verispec" else law
    )
    rows, rng = reference_rows(Model.load(files["target"])), np.random.default_rng(0)
    start = cpu_seconds()
    for ids in decoded["inference_mode"]:
        score(rows, case, ids, rng)
    checker = cpu_seconds() - start
    c = counters["inference_mode"]
    return {
        "path": path,
        "params": params_name,
        "generations": len(decoded["inference_mode"]),
        "tokens": tokens,
        "same_tokens": decoded["no_grad"] == decoded["inference_mode"],
        "engine_ms_per_token": {arm: round(1000 * cpu[arm] / tokens, 2) for arm in arms},
        "ratio_inference_mode_to_no_grad": round(cpu["inference_mode"] / cpu["no_grad"], 3),
        "cycles": c.cycles,
        "tokens_per_cycle": round(tokens / max(c.cycles, 1), 3),
        "drafted": c.drafted,
        "accepted": c.accepted,
        "engine_ms_per_cycle": round(1000 * cpu["inference_mode"] / max(c.cycles, 1), 2),
        "checker_ms_per_token": round(1000 * checker / tokens, 3),
        "load": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    import torch

    from tests.support.peer_verdicts import PATHS

    parser = argparse.ArgumentParser(prog="python -m tests.support.peer_cost")
    parser.add_argument("--out", type=Path, required=True, help="folder of the tiny models")
    parser.add_argument("--path", nargs="+", default=["prompt-lookup", "assisted", "early-exit"], choices=PATHS)
    parser.add_argument("--params", default="hf-all", choices=list(PARAM_SETS))
    parser.add_argument("--generations", type=int, default=4, help="generations per block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per arm, interleaved")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    files = write_models(args.out)
    for path in args.path:
        print(json.dumps(measure(path, args.params, files, args.generations, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
