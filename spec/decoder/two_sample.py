"""Two-sample mode of ``verispec check-decoder``: the same engine with speculation off vs on.

For an engine whose numerics are not ours and that does not report its logits, there is no target
law to test against; but a lossless speculative decoder draws its first m tokens from exactly the
law of its own plain decoding. So draw N sequences with speculation off (``sample_plain``) and N
with it on (``sample``) and test that the two come from one law: Pearson's chi-square test of
homogeneity on a 2 x C table.

Cells. A PILOT sample with speculation off (``pilot`` draws, independent of the two test samples)
picks them: every well-formed sequence whose pilot frequency is >= ``min_mass`` (at most
:data:`spec.decoder.first_tokens.MAX_CELLS`, heaviest first), plus one tail cell for all other sequences.
The cells are fixed before the test samples are drawn, so the test's false-alarm probability is
alpha whatever the pilot drew. A malformed sample (not 1..m tokens ended by m or by an
end-of-generation id, or a token after an EOG) fails the test outright.

Power. With N draws in each arm, the homogeneity statistic is asymptotically non-central
chi-square with df = C - 1 and non-centrality

    lambda = N/2 * sum_c (p_c - q_c)^2 / r_c,     r_c = (p_c + q_c) / 2,   sum_c r_c = 1,

and by Cauchy-Schwarz (sum |p - q|)^2 <= sum (p - q)^2 / r * sum r, so lambda >= N/2 * 4 TV^2:
the power of the one-sample test (:func:`spec.statistics.power_of`) with N/2 draws. N per arm is
therefore twice the one-sample N for power 0.99 against ``tv`` at ``alpha``. What it does not
see: deviations inside the tail cell or below ``tv`` on the cell law, and a bug that moves the
plain decoding exactly as it moves the speculative one (the plain decoding is the reference here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerispecError
from verispec.spec.decoder.first_tokens import MAX_CELLS, LawVerdict, Prefix, well_formed
from verispec.spec.statistics import MIN_EXPECTED, ChiSquare, chi2_sf, power_of, required_sample_size

PILOT = 1000  # plain draws that pick the cells (a cell of mass 0.01 is seen ~10 times)


def pilot_cells(pilot: Sequence[Sequence[int]], m: int, eog: frozenset[int], min_mass: float) -> tuple[Prefix, ...]:
    """The well-formed sequences of pilot frequency >= ``min_mass``, heaviest first (ties by id)."""
    counts = Counter(tuple(int(t) for t in s) for s in pilot)
    heavy = [(c, seq) for seq, c in counts.items() if well_formed(seq, m, eog) and c >= min_mass * len(pilot)]
    heavy.sort(key=lambda item: (-item[0], item[1]))
    return tuple(seq for _, seq in heavy[:MAX_CELLS])


def cell_counts(
    samples: Sequence[Sequence[int]], cells: Sequence[Prefix], m: int, eog: frozenset[int]
) -> tuple[npt.NDArray[np.int64], int]:
    """(counts over the cells and the tail [C + 1], malformed samples)."""
    index = {cell: i for i, cell in enumerate(cells)}
    counts = np.zeros(len(cells) + 1, dtype=np.int64)
    malformed = 0
    for sample in samples:
        seq = tuple(int(t) for t in sample)
        if not well_formed(seq, m, eog):
            malformed += 1
            continue
        counts[index.get(seq, len(cells))] += 1
    return counts, malformed


def homogeneity(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> ChiSquare:
    """Pearson's chi-square test that the counts ``a`` and ``b`` [C] come from one law.

    Expected counts are the row total times the pooled cell frequency; cells empty in both samples
    are dropped, and cells whose smaller expected count is below 5 are pooled into one (as in
    :func:`spec.statistics.chi_square`). ``max_abs_error``: max |freq_a - freq_b| over cells.
    """
    table = np.stack([np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)])  # [2, C]
    table = table[:, table.sum(axis=0) > 0]
    rows = table.sum(axis=1, keepdims=True)  # [2, 1]
    if np.any(rows == 0):
        raise ValueError("a sample with no observations")
    expected = rows * table.sum(axis=0, keepdims=True) / table.sum()  # [2, C]
    small = expected.min(axis=0) < MIN_EXPECTED
    pooled = int(small.sum())
    if pooled:
        table = np.concatenate([table[:, ~small], table[:, small].sum(axis=1, keepdims=True)], axis=1)
        expected = np.concatenate([expected[:, ~small], expected[:, small].sum(axis=1, keepdims=True)], axis=1)
    statistic = float(np.sum((table - expected) ** 2 / expected))
    df = max(1, table.shape[1] - 1)
    freq_a, freq_b = np.asarray(a) / rows[0, 0], np.asarray(b) / rows[1, 0]
    error = float(np.max(np.abs(freq_a - freq_b)))
    return ChiSquare(statistic, df, chi2_sf(statistic, df), int(table.sum()), 0, pooled, error)


def two_sample_size(df: int, alpha: float, tv: float) -> int:
    """N per arm for power 0.99 against ``tv`` (twice the one-sample N: see the module docstring)."""
    return 2 * required_sample_size(df, alpha, tv)


def check_two_sample(
    engine: Any,
    prompt_ids: Sequence[int],
    params: Any,
    m: int,
    *,
    alpha: float,
    tv: float,
    eog: frozenset[int] = frozenset(),
    min_mass: float = 0.01,
    pilot: int = PILOT,
    seed: int = 20_261_130,
) -> LawVerdict:
    """Speculation on vs off on one prompt (``engine.sample`` vs ``engine.sample_plain``); the
    verdict's N is the draws per arm, its power that against TV >= ``tv`` on the cell law."""
    cells = pilot_cells(engine.sample_plain(prompt_ids, params, m, pilot, seed), m, eog, min_mass)
    df = max(1, len(cells))  # C + 1 cells (the tail too) -> df = C
    n = two_sample_size(df, alpha, tv)
    power = power_of(n // 2, df, alpha, tv)
    try:
        plain = engine.sample_plain(prompt_ids, params, m, n, seed + 1)
        spec = engine.sample(prompt_ids, params, m, n, seed + 2)
        if len(plain) != n or len(spec) != n:
            raise VerispecError(f"the engine returned {len(plain)} and {len(spec)} samples, asked for {n} each")
    except VerispecError as exc:  # a decoder that breaks on a valid request fails the case
        placeholder = ChiSquare(0.0, df, 0.0, 0, 0, 0, 0.0)
        return LawVerdict(
            False, placeholder, n, alpha, power, tv, 0, f"the engine raised {type(exc).__name__}: {str(exc)[:200]}"
        )
    a, bad_a = cell_counts(plain, cells, m, eog)
    b, bad_b = cell_counts(spec, cells, m, eog)
    malformed = bad_a + bad_b
    test = homogeneity(a, b) if a.sum() and b.sum() else ChiSquare(0.0, df, 0.0, 0, 0, 0, 0.0)
    passed = malformed == 0 and a.sum() > 0 and b.sum() > 0 and test.passed(alpha)
    detail = (
        f"two-sample m={m} cells={len(cells)}+tail (pilot {pilot}) chi2={test.statistic:.1f} df={test.df} "
        f"p={test.p_value:.3g} malformed={malformed} (plain {bad_a}, speculative {bad_b}) "
        f"max|freq_plain-freq_spec|={test.max_abs_error:.3g}"
    )
    return LawVerdict(passed, test, n, alpha, power, tv, malformed, detail)
