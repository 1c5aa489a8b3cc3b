"""What the speculative-equals-plain tests share (tests/test_spec_equivalence.py,
tests/test_tree_decode.py): :func:`compare` (equal outputs, or a first difference at a derived
near-tie, recorded in :data:`near_ties`), and the exact law of the first two sampled tokens
(:class:`MemoLaw`, :func:`first_two_tokens_law` at :data:`SAMPLED`), and :func:`greedy_auto_and_plain` (the
fast engine's default-draft greedy decode beside its plain one, for a new int8 law's kernel tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tests.support.tolerances import forward_spread
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.spec.decoder.check import MemoTargetModel

if TYPE_CHECKING:
    from verispec.engine.model import FastModel
    from verispec.reference.tokenizer import Tokenizer

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

near_ties: list[str] = []  # every tolerated difference, reported at the end of the module


def top1_margin(model: Model, prefix: Sequence[int]) -> tuple[float, float]:
    """(top-1 margin of the logits after ``prefix``, the largest margin float32 rounding can flip)."""
    logits = np.asarray(model.forward(list(prefix), model.new_cache(len(prefix))).logits[-1], dtype=np.float64)
    second, first = np.argsort(logits)[-2:]
    spread = forward_spread(model, tuple(prefix), head_rows=1, samples=16).logits
    assert spread is not None
    near_tie = 2.0 * float(spread.tolerance[0, first] + spread.tolerance[0, second])
    return float(logits[first] - logits[second]), near_tie


def compare(model: Model, prompt: Sequence[int], plain: Sequence[int], spec: Sequence[int], label: str) -> None:
    """Equal, or different first at a near-tie of the plain run (recorded); else fail."""
    if tuple(plain) == tuple(spec):
        return
    j = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), min(len(plain), len(spec)))
    assert j < min(len(plain), len(spec)), f"{label}: outputs differ in length only: {plain} vs {spec}"
    margin, near_tie = top1_margin(model, [*prompt, *plain[:j]])
    assert margin < near_tie, (
        f"{label}: speculative token {spec[j]} != plain {plain[j]} at step {j} with top-1 margin "
        f"{margin:.5f} >= {near_tie:.5f}, the most float32 rounding can flip"
    )
    near_ties.append(f"{label}: step {j}, margin {margin:.2e}")


class MemoLaw:
    """THE target law, memoized by (history, params): valid because the memoized model's logits
    row after a history is a function of that history."""

    def __init__(self) -> None:
        self.memo: dict[tuple[tuple[int, ...], SamplingParams], F64] = {}

    def __call__(self, logits: F32, history: Sequence[int], params: SamplingParams) -> F64:
        key = (tuple(history), params)
        if key not in self.memo:
            self.memo[key] = target_distribution(logits, history, params)
        return self.memo[key]


SAMPLED = SamplingParams(temperature=0.8, top_p=0.95)


def first_two_tokens_law(
    target: MemoTargetModel, law: MemoLaw, prompt: tuple[int, ...], n_cells: int
) -> tuple[dict[tuple[int, int], float], list[tuple[int, int]], npt.NDArray[np.float64]]:
    """The exact law of the first two sampled tokens without speculation: every possible (t1, t2)
    pair's probability, the n_cells most likely pairs, and their probabilities plus one tail cell
    for the rest (probs [n_cells + 1])."""
    p1 = law(target.row(prompt), prompt, SAMPLED)
    exact: dict[tuple[int, int], float] = {}
    for t1 in np.flatnonzero(p1):
        p2 = law(target.row((*prompt, int(t1))), (*prompt, int(t1)), SAMPLED)
        for t2 in np.flatnonzero(p2):
            exact[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
    pairs = sorted(exact, key=lambda pair: -exact[pair])[:n_cells]
    tail = max(0.0, 1.0 - sum(exact[pair] for pair in pairs))
    return exact, pairs, np.array([exact[pair] for pair in pairs] + [tail], dtype=np.float64)


def greedy_auto_and_plain(model: FastModel, tokenizer: Tokenizer, text: str) -> tuple[list[int], list[int], int]:
    """``text`` decoded greedily for 32 tokens (end of generation ignored) by the fast engine's plain
    loop and by speculation with the default ``auto`` draft (k = 6, adaptive): (speculative ids,
    plain ids, speculative target passes)."""
    from verispec.engine import sampling as fast_sampling
    from verispec.engine.generate import generate as fast_generate
    from verispec.reference.decode import SpeculativeOptions, speculative_generate
    from verispec.reference.drafts import make_draft, parse_draft_spec
    from verispec.reference.generate import GenerationRequest

    ids = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos))
    request = GenerationRequest(ids, params=SamplingParams(temperature=0.0), max_tokens=32, seed=0, ignore_eog=True)
    plain = fast_generate(model, tokenizer, request)
    draft = make_draft(parse_draft_spec("auto"), model, tokenizer)
    spec = speculative_generate(
        model, tokenizer, request, draft, SpeculativeOptions(k=6, adaptive=True),
        law=fast_sampling.target_distribution, draw=fast_sampling.sample,
    )  # fmt: skip
    return list(spec.generation.ids), list(plain.ids), spec.generation.stats.target_passes
