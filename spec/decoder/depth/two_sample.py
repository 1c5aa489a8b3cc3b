"""Two-sample mode at depth: whole generations with speculation on vs the same engine's plain ones.

For an engine whose logits we cannot compute (and that does not report them) there is no target
law to score tokens against; but a decoder lossless at every step draws whole generations from
exactly the law of its own plain decoding. So draw generations of up to ``max_tokens`` both ways
(``generate_plain`` and ``generate``: n independent requests each) and test that the two samples
come from one law through FEATURES of a generation, each a function of the generation alone (and
of the gate's own random choice of a position, made the same way in both arms), chosen to see the
late-firing bug classes:

- per position bin b ([0,1), [1,2), [2,4), .. doubling, as :mod:`spec.decoder.depth.law`), at ONE
  position drawn uniformly in the bin for each generation: the token there, as one of the pilot's
  frequent tokens of that bin or "another token", or "ended" when the generation stopped before
  that position (penalties, processors, rows from the wrong cache or position: the token law; the
  stopping law: min_tokens, EOG bias);
- per position bin, at that position: whether the token repeats one of the previous ``W`` ids of
  prompt + generation (W: the params' repeat_last_n, 64 when it is 0 or -1), or "ended" (a penalty
  counted too rarely or too often moves exactly this);
- the stopping time: the bin of the last position of a generation ended by an end-of-generation
  id, or "reached max_tokens" (a min_tokens counted in cycles, an EOG lost at max_tokens);
- request independence: whether requests 2i and 2i+1 of one engine call return identical
  generations (two requests on one random stream).

Every feature is computed from independent generations, one value per generation, so within an
arm the values are i.i.d. and each test is Pearson's chi-square of homogeneity on a 2 x C table
(:func:`spec.decoder.two_sample.homogeneity`), exactly valid asymptotically whatever the
dependence between the positions of one generation. The cells of the token features come from a
PILOT of plain generations drawn apart from the test's (the tokens of pilot frequency >=
``min_mass`` in the bin, at most :data:`spec.decoder.first_tokens.MAX_CELLS`), fixed before the test draws,
so the level does not depend on what the pilot drew. A malformed generation in either arm (more
than max_tokens, tokens after an end-of-generation id, a stop before max_tokens without one) fails
outright.

Power. N generations per arm are chosen so that each test detects, with probability >= 0.99 at
its level, any deviation of total variation >= ``tv`` between the two arms' laws of that feature
(on its cells): with N per arm the homogeneity statistic's non-centrality is at least
N/2 * 4 TV^2 (Cauchy-Schwarz on the pooled law, :mod:`spec.decoder.two_sample`), the one-sample
test's with N/2 draws (:func:`arm_size`). The deviation this mode is designed for is therefore
"TV >= tv in the law of one bin's token at a uniformly drawn position of the bin (or of its
repeat indicator, or of the stopping bin)": at the default tv = 0.1 far weaker than the law-at-
depth design (TV 0.05 on 10% of positions, every token scored against its exact conditional law).

What it cannot see: a deviation of the conditional laws that leaves the marginal law of every
feature within tv (the conditional law given the prefix is never seen: a wrong law at some
prefixes balanced by others; mass moved inside the "another token" cell); a bug that moves the
plain decoding exactly as it moves the speculative one (the plain decoding is the reference); and
anything about whether the engine's processors or numerics are ours. Reported logprobs are not
checked (no law to check them against). Sequential: looks after 1/64, 1/32, .., 1/2 and all of N, half
the alpha at the final look, the rest split evenly over the earlier ones; within a look the alpha
is split evenly over the fixed number of tests (Bonferroni). ``budget_s`` ends it early (the
pilot too, drawn in blocks): inconclusive (exit 3) unless a look rejected.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerispecError
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.blocks import checked_block
from verispec.spec.decoder.depth.law import DepthCase, position_bin, position_bin_label, structure_error
from verispec.spec.decoder.first_tokens import MAX_CELLS
from verispec.spec.decoder.two_sample import homogeneity
from verispec.spec.sequential_state import State, StateVerdict
from verispec.spec.statistics import POWER, power_of

I64 = npt.NDArray[np.int64]

LOOKS = 7  # after 1/64, 1/32, .., 1/2, 1 of N
FINAL_SHARE = 0.5
TV = 0.1
PILOT = 200  # plain generations that pick the token cells (a token of mass 0.01 in a bin is seen ~2 times)
MIN_MASS = 0.01
MAX_BLOCK = 64  # generations per arm per engine call (at most)
ARM_STEP = 50  # N per arm is a multiple of this
ENDED = -1  # the cell "the generation stopped before this position"
OTHER = -2  # the cell "another token" (the tail)
REPEAT_WINDOW = 64  # the repeat feature's window when the params have no penalty window


class PlainGenerationEngine(Protocol):
    """Whole generations both ways: ``generate`` (speculation on) and ``generate_plain`` (off),
    each n independent requests (the interface of :class:`spec.decoder.depth.law.GenerationEngine`)."""

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> Sequence[Any]: ...

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> Sequence[Any]: ...


def bins_of(max_tokens: int) -> list[tuple[int, int]]:
    """The position bins [lo, hi) that hold a position below ``max_tokens``."""
    out = []
    for b in range(position_bin(max(max_tokens - 1, 0)) + 1):
        lo, hi = (0, 1) if b == 0 else (1 << (b - 1), 1 << b)
        out.append((lo, min(hi, max_tokens)))
    return out


def window_of(params: SamplingParams) -> int:
    return params.repeat_last_n if params.repeat_last_n > 0 else REPEAT_WINDOW


@dataclass(frozen=True)
class Features:
    """One generation's features: per bin the token (or ENDED) and the repeat flag (1, 0 or
    ENDED) at the drawn position; the stopping bin (len(bins) = reached max_tokens)."""

    tokens: tuple[int, ...]
    repeats: tuple[int, ...]
    stop: int


def features(ids: Sequence[int], case: DepthCase, positions: Sequence[int]) -> Features:
    """The features of one well-formed generation at the drawn ``positions`` (one per bin)."""
    history = list(case.prompt_ids) + list(ids)
    start = len(case.prompt_ids)
    window = window_of(case.params)
    tokens, repeats = [], []
    for pos in positions:
        if pos >= len(ids):
            tokens.append(ENDED)
            repeats.append(ENDED)
            continue
        at = start + pos
        tokens.append(int(ids[pos]))
        repeats.append(int(ids[pos] in history[max(0, at - window) : at]))
    ended = len(ids) < case.max_tokens or (bool(ids) and ids[-1] in case.eog)
    stop = position_bin(len(ids) - 1) if ended and ids else len(bins_of(case.max_tokens))
    return Features(tuple(tokens), tuple(repeats), stop)


def draw_positions(rng: np.random.Generator, bins: Sequence[tuple[int, int]]) -> list[int]:
    """One position uniform in each bin."""
    return [lo + int(rng.integers(hi - lo)) for lo, hi in bins]


@dataclass
class Arm:
    """One arm's running counts: per bin token and repeat cells, stopping bins, equal pairs."""

    generations: int = 0
    tokens: list[Counter[int]] = field(default_factory=list)
    repeats: list[Counter[int]] = field(default_factory=list)
    stops: Counter[int] = field(default_factory=Counter)
    pairs: Counter[int] = field(default_factory=Counter)  # 1: requests 2i, 2i+1 identical

    def add(self, feats: Features) -> None:
        if not self.tokens:
            self.tokens = [Counter() for _ in feats.tokens]
            self.repeats = [Counter() for _ in feats.repeats]
        self.generations += 1
        for b, (t, r) in enumerate(zip(feats.tokens, feats.repeats)):
            self.tokens[b][t] += 1
            self.repeats[b][r] += 1
        self.stops[feats.stop] += 1


@dataclass(frozen=True)
class TokenCells:
    """Per bin, the pilot's frequent tokens (the cells besides ENDED and OTHER)."""

    per_bin: tuple[tuple[int, ...], ...]

    def cell(self, b: int, token: int) -> int:
        return token if token == ENDED or token in self.per_bin[b] else OTHER


def pilot_cells(
    gens: Sequence[Sequence[int]], case: DepthCase, rng: np.random.Generator, min_mass: float
) -> TokenCells:
    """The tokens of pilot frequency >= ``min_mass`` at the drawn position of each bin, heaviest first."""
    bins = bins_of(case.max_tokens)
    counts: list[Counter[int]] = [Counter() for _ in bins]
    for ids in gens:
        feats = features(ids, case, draw_positions(rng, bins))
        for b, t in enumerate(feats.tokens):
            if t != ENDED:
                counts[b][t] += 1
    per_bin = []
    for c in counts:
        heavy = sorted(((n, t) for t, n in c.items() if n >= min_mass * max(1, len(gens))), key=lambda x: (-x[0], x[1]))
        per_bin.append(tuple(t for _, t in heavy[:MAX_CELLS]))
    return TokenCells(tuple(per_bin))


def table(a: Counter[int], b: Counter[int]) -> tuple[I64, I64]:
    """Two count vectors over the union of their cells."""
    keys = sorted(set(a) | set(b))
    return np.array([a.get(k, 0) for k in keys], dtype=np.int64), np.array([b.get(k, 0) for k in keys], dtype=np.int64)


def mapped(counter: Counter[int], cells: TokenCells, b: int) -> Counter[int]:
    out: Counter[int] = Counter()
    for t, n in counter.items():
        out[cells.cell(b, t)] += n
    return out


def looked_tests(case: DepthCase) -> int:
    """Two tests per bin, the stopping time, the pairs."""
    return 2 * len(bins_of(case.max_tokens)) + 2


def arm_size(df: int, alpha: float, tv: float) -> int:
    """N per arm (a multiple of ARM_STEP) with the one-sample power at N/2 >= 0.99 against ``tv``."""
    n = ARM_STEP
    while power_of(n // 2, df, alpha, tv) < POWER:
        n *= 2
    lo, hi = n // 2, n
    while hi - lo > ARM_STEP:
        mid = (lo + hi) // 2 // ARM_STEP * ARM_STEP
        lo, hi = (mid, hi) if power_of(mid // 2, df, alpha, tv) < POWER else (lo, mid)
    return max(hi, ARM_STEP)


def look_alphas(alpha: float) -> tuple[float, ...]:
    return (alpha * (1 - FINAL_SHARE) / (LOOKS - 1),) * (LOOKS - 1) + (alpha * FINAL_SHARE,)


@dataclass(frozen=True)
class TwoSampleDepthVerdict(StateVerdict):
    state: State
    n_per_arm: int
    generations: int  # per arm, seen
    alpha: float
    tv: float
    df: int  # the largest test's degrees of freedom (the design's)
    power: float  # reached against ``tv`` on the largest test, at the generations seen
    where: str
    detail: str


def judge(plain: Arm, spec: Arm, cells: TokenCells, case: DepthCase, alpha: float) -> tuple[bool, str, str]:
    """(rejected, where, detail) of one look: every test at alpha / looked_tests."""
    level = alpha / looked_tests(case)
    results: list[tuple[float, str]] = []
    for b in range(len(bins_of(case.max_tokens))):
        label = position_bin_label(b)
        for name, a, c in (
            ("token law", mapped(plain.tokens[b], cells, b), mapped(spec.tokens[b], cells, b)),
            ("repeat rate", plain.repeats[b], spec.repeats[b]),
        ):
            results.append(_test(f"{label}: {name}", a, c, level))
    results.append(_test("stopping time", plain.stops, spec.stops, level))
    if plain.pairs and spec.pairs:
        results.append(
            _test(
                "identical request pairs",
                plain.pairs,
                spec.pairs,
                level,
                f"{spec.pairs[1]} of {sum(spec.pairs.values())} speculative pairs identical, plain {plain.pairs[1]}",
            )
        )
    rejected = [text for p, text in results if p < level]
    smallest = min(results, key=lambda r: r[0])
    detail = (
        f"{spec.generations} generations per arm, {len(results)} tests at level {level:.3g}; smallest p: {smallest[1]}"
    )
    return bool(rejected), "; ".join(rejected), detail


def _test(name: str, a: Counter[int], b: Counter[int], level: float, extra: str = "") -> tuple[float, str]:
    x, y = table(a, b)
    if x.sum() == 0 or y.sum() == 0 or x.shape[0] < 2:
        return 1.0, f"{name} (one cell)"
    t = homogeneity(x, y)
    return t.p_value, f"{name} chi2={t.statistic:.1f} df={t.df} p={t.p_value:.3g}" + (f" ({extra})" if extra else "")


def draw_arm(engine: Any, plain: bool, case: DepthCase, n: int, seed: int) -> list[tuple[int, ...]]:
    op = engine.generate_plain if plain else engine.generate
    return arm_ids(op(case.prompt_ids, case.params, case.max_tokens, n, seed, case.min_tokens), n, case.vocab)


def draw_arms(engine: Any, case: DepthCase, n: int, seed: int) -> list[list[tuple[int, ...]]]:
    """Both arms of a block, plain (seed + 1) and speculative (seed): at once on an engine pool
    (``submit``: spec/decoder/depth/pool.py), else one after the other; the same generations either way."""
    submit = getattr(engine, "submit", None)
    if not callable(submit):
        return [draw_arm(engine, is_plain, case, n, seed + is_plain) for is_plain in (True, False)]
    pending = [
        submit(
            "generate_plain" if is_plain else "generate",
            case.prompt_ids,
            case.params,
            case.max_tokens,
            n,
            seed + is_plain,
            case.min_tokens,
        )
        for is_plain in (True, False)
    ]
    return [arm_ids(future.result(), n, case.vocab) for future in pending]


def arm_ids(raw: Any, n: int, vocab: int | None = None) -> list[tuple[int, ...]]:
    """An arm's answer as id tuples, read as every depth answer is (:func:`spec.decoder.depth.blocks.checked_block`)."""
    return [g.ids for g in checked_block(raw, n, vocab)]


def check_two_sample_depth(
    engine: PlainGenerationEngine,
    case: DepthCase,
    *,
    alpha: float,
    tv: float = TV,
    seed: int = 20_261_201,
    budget_s: float | None = None,
    pilot: int = PILOT,
    min_mass: float = MIN_MASS,
    n_per_arm: int | None = None,
    block: int | None = None,
) -> TwoSampleDepthVerdict:
    """The sequential two-sample test at depth of one case (module docstring). ``n_per_arm``
    overrides the design's N (the power reported is then the power at that N)."""
    started = time.monotonic()
    rng = np.random.default_rng([seed, 3])
    bins = bins_of(case.max_tokens)
    final_level = look_alphas(alpha)[-1] / looked_tests(case)
    pilot_gens: list[tuple[int, ...]] = []
    try:
        for start in range(0, pilot, MAX_BLOCK):  # in blocks: the budget bounds the pilot too
            if budget_s is not None and pilot_gens and time.monotonic() - started > budget_s:
                return TwoSampleDepthVerdict("inconclusive", 0, 0, alpha, tv, 1, 0.0, "budget ended in the pilot", "")
            pilot_gens += draw_arm(engine, True, case, min(MAX_BLOCK, pilot - start), seed + 1 + start)
    except VerispecError as exc:
        return TwoSampleDepthVerdict(
            "failed", 0, 0, alpha, tv, 1, 0.0, f"the pilot failed: {type(exc).__name__}: {str(exc)[:200]}", ""
        )
    broken = next((e for e in (structure_error(g, case) for g in pilot_gens) if e), "")
    if broken:
        return TwoSampleDepthVerdict(
            "failed", 0, 0, alpha, tv, 1, 0.0, f"a plain generation of the pilot: {broken}", ""
        )
    cells = pilot_cells(pilot_gens, case, rng, min_mass)
    df = max([len(c) + 1 for c in cells.per_bin] + [len(bins)])  # cells + OTHER + ENDED, less one
    n = n_per_arm or arm_size(df, final_level, tv)
    per_block = block or min(MAX_BLOCK, max(2, math.ceil(n / 2 ** (LOOKS - 1))))
    per_block += per_block % 2  # whole request pairs
    targets = [math.ceil(n / 2 ** (LOOKS - 1 - j)) for j in range(LOOKS)]
    alphas = look_alphas(alpha)
    plain, spec = Arm(), Arm()
    next_look, block_index, detail = 0, 0, ""

    def verdict(state: State, where: str) -> TwoSampleDepthVerdict:
        return TwoSampleDepthVerdict(
            state,
            n,
            spec.generations,
            alpha,
            tv,
            df,
            power_of(spec.generations // 2, df, final_level, tv),
            where,
            detail,
        )

    while next_look < LOOKS:
        if budget_s is not None and time.monotonic() - started > budget_s:
            return verdict("inconclusive", "budget ended before the design's generations")
        try:
            drawn = draw_arms(engine, case, per_block, seed + 100 + 2 * block_index)
        except VerispecError as exc:
            return verdict("failed", f"the engine raised {type(exc).__name__}: {str(exc)[:200]}")
        block_index += 1
        for arm, gens, who in ((plain, drawn[0], "plain"), (spec, drawn[1], "speculative")):
            for i, ids in enumerate(gens):
                broken = structure_error(ids, case)
                if broken:
                    return verdict("failed", f"a {who} generation: {broken}")
                arm.add(features(ids, case, draw_positions(rng, bins)))
                if i % 2:
                    arm.pairs[int(gens[i - 1] == ids)] += 1
        while next_look < LOOKS and spec.generations >= targets[next_look]:
            rejected, where, detail = judge(plain, spec, cells, case, alphas[next_look])
            next_look += 1
            if rejected:
                return verdict("failed", where)
    return verdict("passed", "")


def verdict_json(verdict: TwoSampleDepthVerdict) -> dict[str, Any]:
    return {
        "passed": verdict.passed,
        "state": verdict.state,
        "exit_status": verdict.exit_status,
        "generations_per_arm": verdict.generations,
        "design_per_arm": verdict.n_per_arm,
        "alpha": verdict.alpha,
        "power": round(verdict.power, 6),
        "tv": verdict.tv,
        "df": verdict.df,
        "where": verdict.where,
        "detail": verdict.detail,
    }
