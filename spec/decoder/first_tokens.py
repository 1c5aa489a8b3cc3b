"""The law of a decoder's first m generated tokens, and the powered test of a whole decoder.

``verispec check-decoder`` treats a decoding engine as a black box that, for a prompt and sampling
parameters, returns samples of its first m <= 3 generated tokens with speculation on. A lossless
decoder's samples follow the TARGET law of those tokens,

    P(t_1 .. t_m) = prod_j law(logits(prompt + t_<j), prompt + t_<j, params),

``law`` being THE target law (:func:`reference.sampling.target_distribution`, or another
ecosystem's profile of :mod:`spec.decoder.laws`, called as ``law(logits, prompt, t_<j)``) and ``logits`` the
target's logits after a prefix: here computed by OUR reference forward (exact for an engine with
our numerics: transformers float32 on the same dequantized weights, our fast engine), or given as
an engine's own reported logits (``logits_of`` is any prefix -> row function).

End of generation. A sample is the first m tokens, or fewer when an end-of-generation id (``eog``)
ends it: a sequence shorter than m ending in EOG is a legitimate outcome with its own probability
(the product above stops at the EOG token), not a short read.

Cells. The sequences of probability >= ``min_mass`` are found by best-first expansion of prefixes
(a sequence is never more likely than its prefix, so no heavy sequence is missed; an EOG-ended
prefix is not expanded); each is a cell, the rest of the sequence space one tail cell of mass
1 - sum(cells). A sample outside the support (a token of law probability 0 at its position, a token
after an EOG, or fewer than m tokens not ended by EOG) is counted as impossible and fails the test.

Test. Pearson chi-square (:func:`spec.statistics.chi_square`) with N from the power analysis: any
deviation of total variation >= ``tv`` on the cell law is detected with probability >= 0.99 at
false-alarm probability ``alpha``. What it does not see: deviations inside the tail cell, and
deviations below ``tv`` of the cell law; numerics that differ from ours are a deviation too (use the
engine's own logits for such an engine).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference import sampling
from verispec.reference.sampling import SamplingParams, largest_positive_id, target_distribution
from verispec.spec.decoder.laws.common import Profile
from verispec.spec.decoder.types import LogitsOf as LogitsOf
from verispec.spec.decoder.types import Prefix as Prefix
from verispec.spec.statistics import ChiSquare, chi_square, power_of, required_sample_size

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

MAX_M = 3
MAX_CELLS = 64


@dataclass(frozen=True)
class SequenceLaw:
    """The cell law of the first m tokens: ``cells`` (heaviest first) and ``probs`` [C + 1]
    (the last entry: the tail cell)."""

    prompt: Prefix
    params: SamplingParams
    m: int
    cells: tuple[Prefix, ...]
    probs: F64
    support: Callable[[Prefix], bool]  # a well-formed sequence, every token possible at its position

    @property
    def df(self) -> int:
        return max(1, int((self.probs > 0).sum()) - 1)

    def counts(self, samples: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], int]:
        """(counts over the cells [C + 1], samples outside the support or of the wrong length)."""
        index = {cell: i for i, cell in enumerate(self.cells)}
        counts = np.zeros(len(self.cells) + 1, dtype=np.int64)
        impossible = 0
        for sample in samples:
            seq = tuple(int(t) for t in sample)
            if not self.support(seq):
                impossible += 1
                continue
            counts[index.get(seq, len(self.cells))] += 1
        return counts, impossible


class MemoLaw:
    """Target law rows by prefix, memoized (one ``logits_of`` call per prefix). ``law``: a profile
    of :mod:`spec.decoder.laws` called with the prefix split at ``prompt_length`` (None: THE target law of
    ``params`` on the whole prefix)."""

    def __init__(
        self, logits_of: LogitsOf, params: SamplingParams, law: Profile | None = None, prompt_length: int = 0
    ) -> None:
        self.logits_of = logits_of
        self.params = params
        self.law = law
        self.prompt_length = prompt_length
        self.memo: dict[Prefix, F64] = {}

    def row(self, prefix: Prefix) -> F64:
        if prefix not in self.memo:
            logits = np.asarray(self.logits_of(prefix), dtype=np.float64)
            if self.law is None:
                probs = target_distribution(logits, list(prefix), self.params)
            else:
                probs = self.law(logits, prefix[: self.prompt_length], prefix[self.prompt_length :])
            self.memo[prefix] = np.asarray(probs, dtype=np.float64)
        return self.memo[prefix]


class CachedLaw:
    """THE target law memoized by (logits row content, history, params): the decode loops call it
    on the same few rows thousands of times (rows are keyed by a 128-bit BLAKE2 digest of their
    bytes, so copies and views of a row hit the same entry). A few forwards then serve tens of
    thousands of decodes.

    Two costs of those calls are paid once per row instead of once per call, neither changing a
    result: a row that is a read-only array owning its bytes (ReferenceLogits' memo rows) has
    fixed content while it lives, so its digest is kept by identity (a weak reference: a dead
    row's entry goes, so a new object at its address is hashed afresh); and :meth:`draw` keeps the
    running sum of each law row this memo returned, so a draw from it is a search, not a V-long sum.
    """

    def __init__(self) -> None:
        self.memo: dict[tuple[bytes, Prefix, Any], F64] = {}
        self._digests: dict[int, tuple[weakref.ref[Any], bytes]] = {}  # id(fixed row) -> (row, digest)
        self._cumulative: dict[int, tuple[F64, F64 | None]] = {}  # id(memo law row) -> (row, its running sum)

    def __call__(self, logits: Any, history: Sequence[int], params: SamplingParams) -> F64:
        row = np.ascontiguousarray(logits)
        key = (self._digest(row), tuple(int(t) for t in history), params_key(params))
        hit = self.memo.get(key)
        if hit is None:
            hit = np.asarray(target_distribution(row, list(history), params), dtype=np.float64)
            hit.setflags(write=False)
            self.memo[key] = hit
            self._cumulative[id(hit)] = (hit, None)  # the memo keeps hit alive: its id stays its own
        return hit

    def _digest(self, row: Any) -> bytes:
        fixed = row.flags.owndata and not row.flags.writeable  # its bytes cannot change while it lives
        if fixed:
            entry = self._digests.get(id(row))
            if entry is not None and entry[0]() is row:
                return entry[1]
        digest = hashlib.blake2b(row.tobytes(), digest_size=16).digest() + str(row.dtype).encode()
        if fixed:
            address = id(row)

            def forget(ref: weakref.ref[Any]) -> None:
                if self._digests.get(address, (None, b""))[0] is ref:
                    del self._digests[address]

            self._digests[address] = (weakref.ref(row, forget), digest)
        return digest

    def draw(self, probs: F64, rng: np.random.Generator) -> int:
        """:func:`reference.sampling.sample` (one ``rng.random()`` uniform, :func:`inverse_cdf`'s
        search of the running sum), the same id bit for bit; for a law row this memo returned the
        running sum is computed (and the row checked) once. Any other row: ``sample`` itself."""
        entry = self._cumulative.get(id(probs))
        if entry is None or entry[0] is not probs:
            return sampling.sample(probs, rng)
        cumulative = entry[1]
        if cumulative is None:
            if probs.ndim != 1 or probs.shape[0] == 0 or not np.all(np.isfinite(probs)) or np.any(probs < 0):
                return sampling.sample(probs, rng)  # raises sample's own error
            cumulative = np.cumsum(probs, dtype=np.float64)
            if float(cumulative[-1]) <= 0.0:
                return sampling.sample(probs, rng)  # raises: zero total mass
            self._cumulative[id(probs)] = (probs, cumulative)
        u = np.array([float(rng.random())], dtype=np.float64)
        chosen = int(np.searchsorted(cumulative, u * float(cumulative[-1]), side="right")[0])
        return chosen if chosen < cumulative.shape[0] else largest_positive_id(probs)  # subnormal total


def params_key(params: SamplingParams) -> tuple[SamplingParams, tuple[tuple[int, float], ...]]:
    """A hashable key for params (``logit_bias`` is a mapping: its sorted items)."""
    bias = tuple(sorted((int(t), float(b)) for t, b in (params.logit_bias or {}).items()))
    return replace(params, logit_bias=None), bias


def complete(tokens: Prefix, m: int, eog: frozenset[int]) -> bool:
    """A whole sample: m tokens, or fewer ended by an end-of-generation id."""
    return len(tokens) == m or (len(tokens) > 0 and tokens[-1] in eog)


def well_formed(seq: Prefix, m: int, eog: frozenset[int]) -> bool:
    """1..m tokens, complete, no EOG before the last one."""
    return 1 <= len(seq) <= m and complete(seq, m, eog) and not any(t in eog for t in seq[:-1])


def first_tokens_law(
    logits_of: LogitsOf,
    prompt: Sequence[int],
    params: SamplingParams,
    m: int,
    min_mass: float = 0.01,
    eog: frozenset[int] = frozenset(),
    law: Profile | None = None,
) -> SequenceLaw:
    """The cell law of the first ``m`` tokens after ``prompt``, a sample ending early at an id of
    ``eog`` (see the module docstring); ``law``: another ecosystem's profile (None: THE target law
    of ``params``)."""
    if not 1 <= m <= MAX_M:
        raise ValueError(f"m must be in [1, {MAX_M}], got {m}")
    if not 0 < min_mass < 1:
        raise ValueError(f"min_mass must be in (0, 1), got {min_mass}")
    base = tuple(int(t) for t in prompt)
    rows = MemoLaw(logits_of, params, law, len(prompt))
    heap: list[tuple[float, Prefix]] = [(-1.0, ())]
    cells: list[tuple[Prefix, float]] = []
    while heap and len(cells) < MAX_CELLS:
        neg, tokens = heapq.heappop(heap)
        mass = -neg
        if complete(tokens, m, eog):
            cells.append((tokens, mass))
            continue
        row = rows.row(base + tokens)
        for t in np.flatnonzero(row * mass >= min_mass):
            heapq.heappush(heap, (-mass * float(row[t]), tokens + (int(t),)))
    probs = np.array([mass for _, mass in cells] + [max(0.0, 1.0 - math.fsum(mass for _, mass in cells))])

    def support(seq: Prefix) -> bool:
        return well_formed(seq, m, eog) and all(rows.row(base + seq[:j])[seq[j]] > 0 for j in range(len(seq)))

    return SequenceLaw(base, params, m, tuple(c for c, _ in cells), probs, support)


@dataclass(frozen=True)
class LawVerdict:
    """One decoder case judged: the chi-square, N, alpha, power against ``tv``."""

    passed: bool
    test: ChiSquare
    n: int
    alpha: float
    power: float
    tv: float
    impossible: int
    detail: str


def sample_size(law: SequenceLaw, alpha: float, tv: float) -> int:
    """N for power 0.99 against any TV >= tv on the cell law."""
    return required_sample_size(law.df, alpha, tv)


def judge(law: SequenceLaw, samples: Sequence[Sequence[int]], alpha: float, tv: float) -> LawVerdict:
    """Chi-square of the samples against the cell law; any impossible sample fails."""
    counts, impossible = law.counts(samples)
    n = len(samples)
    test = (
        chi_square(counts, law.probs) if counts.sum() > 0 else chi_square(np.ones_like(counts), law.probs)
    )  # no sample: a placeholder, failed below
    power = power_of(n, law.df, alpha, tv)
    passed = impossible == 0 and counts.sum() > 0 and test.passed(alpha)
    detail = (
        f"m={law.m} cells={len(law.cells)}+tail chi2={test.statistic:.1f} df={test.df} p={test.p_value:.3g} "
        f"impossible={impossible} max|freq-prob|={test.max_abs_error:.3g}"
    )
    return LawVerdict(passed, test, n, alpha, power, tv, impossible, detail)
