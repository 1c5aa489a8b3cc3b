"""The law at depth: every emitted token of whole generations against its conditional target law.

``check-decoder``'s first-m test (:mod:`spec.decoder.first_tokens`) sees the first m <= 3 tokens; most
speculative-decoding bugs show later (after a full acceptance, after a rollback, once a penalty
window fills, near max_tokens). This test takes whole generations of up to ``max_tokens`` (64 to
512) and judges every token.

Target law at each position. For a generation x_1..x_T after a prompt, ONE teacher-forced pass
over the ACTUAL emitted prefix gives every position's logits (our reference forward, or the
engine's own ``logits`` op per prefix) and the case's target law p_t = law(logits_t, prompt, x_<t)
(a profile of :mod:`spec.decoder.laws`: the default ``verispec`` profile is
:func:`reference.sampling.target_distribution` with the end-of-generation ids masked while
t < ``min_tokens``, vLLM's min_tokens, by a -inf bias before the chain; ``--law`` picks another
ecosystem's chain).

Randomized PIT. Order each row's tokens by probability descending (ids ascending on ties) and let
F be the cumulative law in that order; with V ~ U(0,1) from the gate's own seeded generator,

    U_t = F(x_t - 1) + V p_t(x_t)

is exactly U(0,1) given the past (x_t ~ p_t), so by the chain rule U_1, U_2, .. are i.i.d. U(0,1)
under the null whatever the prompts, lengths and stopping (each U_t is seen or not by the past
alone). The descending order makes the PIT a rank: a law too sharp puts U near 0, one too flat or
drawn from another row near 1, coherently across contexts (in id order they would cancel).

Statistics. Those with heavy or skewed terms are test-martingales, exact at any count (a
nonnegative martingale of mean 1 under the null rejects when it reaches 1/a: P <= a by Ville's
inequality at any look, so these need no split over the looks either); the bounded PIT mean is a
z-test:
- log score, the entropy bias of temperature and penalties: for each lambda of a fixed grid
  (both signs: sharper and flatter laws), prod_t p_t(x_t)^lambda / sum_y p_t(y)^(1 + lambda), the
  likelihood ratio of the tempered law p^(1+lambda)/Z (mean 1 given the past: the chain rule),
  mixed with the design's weights (spec/decoder/depth/power.py: most weight where the design's
  tempering puts it). A z-test of sum_t log p_t(x_t) + H(p_t) (exact mean 0, variance
  Var_p(log p)) called one correct token of p = 1e-5 in a sharp row at an early look z = -7;
  that z is still reported, as a description;
- PIT mean: U_t - 1/2, variance 1/12; the U's are i.i.d. U(0,1) under the null whatever the
  rows, so the sum's law is exactly Irwin-Hall's, bounded (|z| <= sqrt(3 n)), with tails below
  the normal's at every level used here (z >= 2; checked exactly, tests/test_decoder_depth_exact.py);
- PIT histogram: the U's over ten equal bins against uniform (any shape, pooled), as the Bayes
  factor of a Dirichlet(1/2)-multinomial mixture (:func:`histogram_log_evidence`); Pearson's
  chi-square is still reported (it called 5 tokens in one bin p = 1e-6 where that has p = 1e-4);
- end-of-generation rate: the count of EOGs against their masses p_t(EOG): the stopping law
  (min_tokens counted wrong, an EOG bias lost), which moves mass from one token only and so barely
  moves the two statistics above. EOGs are rare events (a few per generation at most, each of
  small mass), where a normal approximation fails: ONE EOG of mass 0.03 is z = +5.6, "p = 2e-8",
  while its probability is 0.03. So this test is exact instead: for each lambda of a fixed grid
  (both signs), M(lambda) = exp(lambda K - sum_t log(1 - p_t + p_t e^lambda)), K the EOG count, is
  a martingale of mean 1 under the null (each EOG indicator is Bernoulli(p_t) given the past), and
  so is their average M; it rejects at level a when M >= 1/a (Markov's inequality; Ville's at any
  stopping time). The z-score is still reported as a description;
- the three tests (log-score martingale, PIT z, EOG martingale) per POSITION bin ([0,1), [1,2), [2,4), .. doubling) and, when the engine reports
  its cycles, per CYCLE EVENT: what the previous cycle did (start / full acceptance / a rejection
  / a plain step) and the token's index in its own cycle. Both are fixed before the token is
  drawn, so a decoder lossless at every step given its state (speculative sampling, sample-and-
  match, tree rejection sampling) keeps p_t in every bin; the token's own role (accepted draft,
  bonus, repair) depends on the token itself and is never a bin. A decoder lossless only over
  whole sequences should not report cycles. The bins are the report of WHERE a law deviates;
- independence of the requests: generation j equals one of the earlier distinct ones with
  probability pi_j = sum of their P(x) = prod_t p_t(x_t) under the null, computed exactly, so the
  count of repeated generations is a sum of Bernoulli(pi_j) given the past; its test-martingale
  (:class:`RepeatSums`, Ville's inequality at alpha_c) fails reused random streams (four streams,
  a stale block answered again, a seed ignored) at the first block that shows them, named
  "repeated generations: R of M", and lets a near-deterministic law's repeats be (reported);
- structure, deterministic: a token of target probability 0 (with the engine's own rows, unless
  within twice its own batch-shape noise of a cut edge: a numerics near-tie, reported and left
  out of the statistics, spec/decoder/depth/ties.py), a token after an end-of-generation
  id, more than max_tokens, or a stop before max_tokens without an EOG fails outright; so does a
  reported logprob (optional, ``{"logprobs": [..]}``) off the token's target log-probability by
  more than ``LOGPROB_TOL`` (llama.cpp #27972 reports 0.0 for every token when speculating).

Sequential, with alpha spending (as :mod:`spec.sequential`): looks after 1/64, 1/32, .., 1/2 and
all of the design's tokens; half the alpha at the final look, the rest split over the earlier
ones (Bonferroni: any stopping rule keeps the total), alpha_c = alpha / 20 to the collision test
first. Within a look: half to the four overall tests (log-score, PIT mean, EOG rate, PIT
histogram: 1/8 each), half to the bin tests (split evenly over their fixed number). A test-
martingale spends at every look the SUM of its per-look shares (:func:`martingale_alpha`): one
crossing of 1/a over all looks has probability <= a, so the union over the looks costs what
the per-look shares add up to, and the total stays alpha. It fails at the first look that rejects, passes
after the final look, and is INCONCLUSIVE when its time budget ends first (the power reached is
reported). N comes from :mod:`spec.decoder.depth.power`: power 0.99 against TV 0.05 on 10% of
positions along the law's entropy, derived from a pilot of the engine's own generations (drawn
apart from the test's, so the test's level does not depend on it).

What it cannot see: a deviation that keeps the distribution of (p_t(x_t), rank) (mass swapped
between equally likely tokens), one whose direction alternates from context to context, and any
deviation smaller than the design's at the rate the design assumes; numerics other than the
target's are a deviation too (use the engine's own logits for such an engine), and with the
engine's own rows a bug that only moves mass across a cut edge within twice its noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import DesignTooLarge, VerispecError
from verispec.spec.decoder.depth.blocks import blocks, plan_of
from verispec.spec.decoder.depth.forcing import rows_in_order
from verispec.spec.decoder.depth.generation import DepthCase as DepthCase
from verispec.spec.decoder.depth.generation import Generation as Generation
from verispec.spec.decoder.depth.generation import GenerationEngine as GenerationEngine
from verispec.spec.decoder.depth.generation import as_generation as as_generation
from verispec.spec.decoder.depth.generation import case_law as case_law
from verispec.spec.decoder.depth.generation import position_params as position_params
from verispec.spec.decoder.depth.power import (
    SCORE_LAMBDAS,
    DeterministicLaw,
    PowerDesign,
    design,
    log_normalizers,
    mixture_log_evidence,
    support_sorted,
)
from verispec.spec.decoder.depth.sizing import (
    BUDGET_USE,
    CORRECTIONS,
    INTERIOR_TV,
    PILOT_SHARE,
    SEARCH_STEPS,
    TV_CEILING,
    ProgressSink,
    corrected_tv,
    duration,
    per_token,
    search_rows,
    smallest_tv,
)
from verispec.spec.decoder.depth.ties import TIE_NOISES, NearTie, cut_edge_margin
from verispec.spec.decoder.laws.common import Profile
from verispec.spec.decoder.types import ForcedRows as ForcedRows
from verispec.spec.decoder.types import Prefix as Prefix
from verispec.spec.sequential_state import State, StateVerdict
from verispec.spec.statistics import POWER, chi2_sf

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

NORMAL = NormalDist()
LOOKS = 7  # after 1/64, 1/32, .., 1/2, 1 of the design's tokens
FINAL_SHARE = 0.5
COLLISION_SHARE = 0.05
PIT_BINS = 10
OVERALL_TESTS = 4  # log-score, PIT mean, end-of-generation rate, PIT histogram
AFTER = ("start", "full", "rejection", "plain")
INDEX = ("1st", "2nd", "3rd", "4th+")  # a token's index in its cycle
TV = 0.05
FRACTION = 0.1
PILOT = 32  # generations of the pilot (design only)
PILOT_BLOCK = 8
MAX_PILOT_ROWS = 1024
# Reported logprobs (the engine's log p_t(x_t), optional): log-softmax moves by at most 2 max|dl| / T
# when the logits move by dl, and an engine of our numerics computes its rows at other batch shapes
# (float32: |dl| <= ~1e-4 at these sizes), so 1e-3 leaves T >= 0.2 covered; a looser engine passes
# its own bound with ``logprob_tol``.
LOGPROB_TOL = 1e-3
MAX_BLOCK = 50  # generations per engine call: a broken decoder is seen after its first block


def events_of(gen: Generation) -> list[str] | None:
    """Each token's cycle event ``after/index`` (module docstring), or None when the cycles are not
    reported or do not add up to the ids (then only position bins are reported). Both parts are
    fixed BEFORE the token is drawn (the previous cycle's outcome, the token's index in its
    cycle), so for a decoder lossless at every step given its state the token's law in a bin is
    still p_t; its own role (accepted, bonus, repair) is not, and is never a bin."""
    if gen.cycles is None:
        return None
    out: list[str] = []
    after = "start"
    for drafted, accepted in gen.cycles:
        if not 0 <= accepted <= drafted:
            return None
        out.extend(f"{after}/{INDEX[min(i, len(INDEX) - 1)]}" for i in range(accepted + 1))
        after = "plain" if drafted == 0 else "full" if accepted == drafted else "rejection"
    return out[: len(gen.ids)] if len(out) >= len(gen.ids) else None


def cycles_error(gen: Generation) -> str:
    """Why reported cycles cannot be this generation's ("" when absent or consistent): a cycle
    accepting more than it drafted, or cycles that do not end within the last one (each cycle
    emits accepted + 1 tokens; the last may be cut by an end-of-generation id or max_tokens).
    Such cycles are a malformed answer, failed like one: dropping them would silently lose the
    cycle-event bins that say where a law deviates."""
    if gen.cycles is None:
        return ""
    for index, (drafted, accepted) in enumerate(gen.cycles):
        if not 0 <= accepted <= drafted:
            return f"cycle {index} reports {accepted} accepted of {drafted} drafted"
    emitted = [accepted + 1 for _, accepted in gen.cycles]
    if sum(emitted) < len(gen.ids) or (emitted and sum(emitted) - emitted[-1] >= len(gen.ids)):
        return f"its {len(gen.cycles)} reported cycles emit {sum(emitted)} tokens, which do not end with its {len(gen.ids)} tokens"
    return ""


def position_bin(position: int) -> int:
    """0: [0,1), 1: [1,2), 2: [2,4), 3: [4,8), ..."""
    return 0 if position == 0 else position.bit_length()


def position_bin_label(b: int) -> str:
    lo, hi = (0, 1) if b == 0 else (1 << (b - 1), 1 << b)
    return f"positions [{lo}, {hi})"


# -----------------------------------------------------------------------------------------------
# one generation scored


@dataclass
class Scored:
    """Per token [T]: log-score term, its null variance, PIT, target log-probability."""

    log_score: F64
    log_var: F64
    pit: F64
    logp: F64
    eog_mass: F64  # p_t(EOG ids)
    rows: list[F64]
    broken: str = ""  # a structural failure, deterministic
    near_ties: list[NearTie] = field(default_factory=list)  # impossible tokens within the engine's noise of a cut
    score_terms: F64 = field(default_factory=lambda: np.zeros((0, SCORE_LAMBDAS.shape[0])))  # [T, G]: l_t(lambda)


def structure_error(ids: Sequence[int], case: DepthCase) -> str:
    """Why a generation cannot come from the case's law at all ("" when well-formed)."""
    if len(ids) > case.max_tokens:
        return f"{len(ids)} tokens, more than max_tokens = {case.max_tokens}"
    after = next((i for i, t in enumerate(ids[:-1]) if t in case.eog), None)
    if after is not None:
        return f"tokens after the end-of-generation id {ids[after]} at position {after}"
    if len(ids) < case.max_tokens and not (ids and ids[-1] in case.eog):
        return f"stopped at {len(ids)} of max_tokens = {case.max_tokens} tokens without an end-of-generation id"
    return ""


def score(
    rows_of: ForcedRows, case: DepthCase, ids: Sequence[int], rng: np.random.Generator, keep_rows: bool = False
) -> Scored:
    """The teacher-forced laws of one generation and its per-token statistics (``keep_rows``: each
    law's positive probabilities too, descending, for the power design)."""
    prompt = tuple(case.prompt_ids)
    empty = np.zeros(0)
    broken = structure_error(ids, case)
    if broken or not ids:
        return Scored(empty, empty, empty, empty, empty, [], broken or "an empty generation")
    logits = np.asarray(rows_of(prompt + tuple(ids), len(prompt)), dtype=np.float64)  # [T, V]
    if logits.ndim != 2 or logits.shape[0] != len(ids):
        raise ValueError(f"teacher-forced rows have shape {logits.shape}, expected [{len(ids)}, V]")
    law = case_law(case)
    t_count = len(ids)
    out = Scored(
        np.zeros(t_count),
        np.zeros(t_count),
        np.zeros(t_count),
        np.zeros(t_count),
        np.zeros(t_count),
        [],
        score_terms=np.zeros((t_count, SCORE_LAMBDAS.shape[0])),
    )
    eog_ids = np.array(sorted(e for e in case.eog if 0 <= e < logits.shape[1]), dtype=np.int64)
    for t, x in enumerate(ids):
        if not 0 <= x < logits.shape[1]:
            out.broken = f"token id {x} at position {t} is outside the vocabulary [0, {logits.shape[1]})"
            return out
        p = law(logits[t], prompt, ids[:t])
        px = float(p[x])
        if px <= 0.0:
            tie, why = impossible_token(rows_of, law, logits[t], prompt, ids, t)
            if tie is None:
                out.broken = why
                return out
            out.near_ties.append(tie)
            out.logp[t] = math.nan  # no target probability: left out of every statistic
            if keep_rows:
                out.rows.append(support_sorted(p))
            continue
        support = np.flatnonzero(p > 0)  # ascending ids: every sum below runs over the support alone
        live = p[support]
        logs = np.log(live)
        entropy = -float(live @ logs)
        out.log_score[t] = math.log(px) + entropy
        out.log_var[t] = max(float(live @ logs**2) - entropy**2, 0.0)
        out.score_terms[t] = SCORE_LAMBDAS * math.log(px) - log_normalizers(logs)
        before = pit_mass_before(live, support, px, x)
        out.pit[t] = min(before + float(rng.random()) * px, np.nextafter(1.0, 0.0))
        out.logp[t] = math.log(px)
        out.eog_mass[t] = float(p[eog_ids].sum())
        if keep_rows:
            out.rows.append(support_sorted(p))
    return out


def pit_mass_before(live: F64, support: npt.NDArray[np.intp], px: float, x: int) -> float:
    """The target mass before token ``x`` in the PIT's order (probability descending, id ascending):
    the support's probabilities above ``p(x) = px > 0``, then the equal ones of lower ids.

    ``live`` is ``p[support]`` for the ascending ids ``support`` of ``p > 0``: as ``px > 0``, the
    entries selected here are those the full row [V] would select, in the same order, so both sums
    are the full row's, bit for bit.
    """
    return float(live[live > px].sum() + live[(live == px) & (support < x)].sum())


def impossible_token(
    rows_of: ForcedRows, law: Profile, row: F64, prompt: Prefix, ids: Sequence[int], t: int
) -> tuple[NearTie | None, str]:
    """(a near-tie, "") when token ``ids[t]`` of target probability 0 is within twice the
    engine's own batch-shape noise of the cut (rows with a ``batch_shape_noise``, the engine's
    own: spec/decoder/depth/ties.py), else (None, why it fails outright)."""
    x = int(ids[t])
    why = f"token {x} at position {t} has target probability 0"
    noise_of = getattr(rows_of, "batch_shape_noise", None)
    if not callable(noise_of):
        return None, why
    noise = float(noise_of(prompt + tuple(ids[:t]), len(prompt)))
    margin = cut_edge_margin(law, row, prompt, ids[:t], x, TIE_NOISES * noise)
    if margin is None:
        return None, f"{why}, beyond twice the engine's own batch-shape noise there ({noise:.3g}) from the cut"
    return NearTie(t, x, margin, noise), ""


# -----------------------------------------------------------------------------------------------
# the running sums


# The lambdas of the EOG test-martingale (module docstring): |lambda| from 1/16 (a small shift in a
# long run) to 4 (e^4 = 55 times the EOG rate: a few EOGs where almost none are due), both signs.
EOG_LAMBDAS = np.array([sign * 2.0**e for sign in (1.0, -1.0) for e in range(-4, 3)], dtype=np.float64)
EOG_EXP_M1 = np.expm1(EOG_LAMBDAS)  # e^lambda - 1


@dataclass
class BinSums:
    tokens: int = 0
    log_score: float = 0.0
    log_var: float = 0.0
    pit: float = 0.0
    eog: float = 0.0  # sum of 1[x_t is EOG] - p_t(EOG)
    eog_var: float = 0.0  # sum of p_t(EOG) (1 - p_t(EOG))
    eog_count: int = 0  # K: the EOGs seen
    eog_log_mgf: npt.NDArray[np.float64] = field(
        default_factory=lambda: np.zeros(EOG_LAMBDAS.shape[0])
    )  # sum_t log E[e^(lambda 1[EOG])]

    score_log: npt.NDArray[np.float64] = field(
        default_factory=lambda: np.zeros(SCORE_LAMBDAS.shape[0])
    )  # S_g = sum_t l_t(lambda_g)

    def add(self, s: float, v: float, u: float, ended: bool, eog_mass: float, terms: F64 | None = None) -> None:
        self.tokens += 1
        if terms is not None:
            self.score_log += terms
        self.log_score += s
        self.log_var += v
        self.pit += u - 0.5
        self.eog += float(ended) - eog_mass
        self.eog_var += eog_mass * (1.0 - eog_mass)
        self.eog_count += int(ended)
        if eog_mass > 0.0:
            self.eog_log_mgf += np.log1p(eog_mass * EOG_EXP_M1)

    def z_eog(self) -> float:
        return self.eog / math.sqrt(self.eog_var) if self.eog_var > 0 else 0.0

    def eog_evidence(self) -> float:
        """M: the mean over the lambda grid of exp(lambda K - sum_t log(1 - p_t + p_t e^lambda)),
        a nonnegative martingale of mean 1 under the null (P(M >= 1/a) <= a at any look)."""
        exponents = EOG_LAMBDAS * self.eog_count - self.eog_log_mgf
        top = float(exponents.max())
        return math.exp(min(top, 700.0)) * float(np.mean(np.exp(exponents - top)))

    def eog_rejects(self, alpha: float) -> bool:
        return self.eog_evidence() >= 1.0 / alpha

    def score_log_evidence(self, log_weights: F64) -> float:
        """log M of the log-score test-martingale (spec/decoder/depth/power.py): log sum_g w_g
        exp(S_g), a nonnegative martingale of mean 1 under the null (P(M >= 1/a) <= a at any look)."""
        return mixture_log_evidence(self.score_log, log_weights)

    def score_rejects(self, alpha: float, log_weights: F64) -> bool:
        return self.score_log_evidence(log_weights) >= -math.log(alpha)

    def z_all(self) -> tuple[float, float, float]:
        return self.z_log(), self.z_pit(), self.z_eog()

    def z_log(self) -> float:
        return self.log_score / math.sqrt(self.log_var) if self.log_var > 0 else 0.0

    def z_pit(self) -> float:
        return self.pit / math.sqrt(self.tokens / 12.0) if self.tokens else 0.0


# The lambdas of the repeat test-martingale: from 1/4 (many repeats where some are due, a near-
# deterministic law's excess) to 32 (one repeat where e^-32 is due: any P(x) of a long generation).
REPEAT_LAMBDAS = np.array([2.0**e for e in range(-2, 6)], dtype=np.float64)
REPEAT_EXP_M1 = np.expm1(REPEAT_LAMBDAS)
NEAR_DETERMINISTIC = 0.5  # a repeat expected at least this often per generation: repeats are the law's own


@dataclass
class RepeatSums:
    """Request independence: repeated whole generations against the rate the target law allows.

    Under the null the generations are independent draws of the target law, so generation j equals
    one of the earlier DISTINCT ones with probability pi_j = sum of their P(x) = prod_t p_t(x_t)
    (each computed exactly on its own teacher-forced rows), fixed by the past. The repeat count R
    is then a sum of Bernoulli(pi_j) given the past, and for each lambda > 0 of a fixed grid
    exp(lambda R - sum_j log(1 + pi_j (e^lambda - 1))) is a nonnegative martingale of mean 1, as is
    their average M; it rejects when M >= 1/alpha_c (Ville's inequality: P <= alpha_c at any
    generation, over the whole run, for any number of workers). So four random streams (every
    fifth generation a repeat), a stale block answered again or a seed ignored fail at the first
    block that shows them, while a law that makes repeats likely (near-deterministic rows: pi_j
    near 1) makes M stay near or below 1: its repeats are legitimate and are reported as such."""

    count: int = 0  # R
    generations: int = 0
    first: int = 0  # the first repeating generation (1-based; 0: none)
    seen_mass: float = 0.0  # sum of P(x) over the distinct generations so far
    expected: float = 0.0  # sum_j pi_j
    log_mgf: F64 = field(default_factory=lambda: np.zeros(REPEAT_LAMBDAS.shape[0]))

    def add(self, repeated: bool, generation: int) -> None:
        pi = min(self.seen_mass, 1.0)  # near-ties count 1 in P(x): a sum past 1 is capped (still conservative)
        self.generations += 1
        self.expected += pi
        self.log_mgf += np.log1p(pi * REPEAT_EXP_M1)
        if repeated:
            self.count += 1
            self.first = self.first or generation

    def log_evidence(self) -> float:
        exponents = REPEAT_LAMBDAS * self.count - self.log_mgf
        top = float(exponents.max())
        return top + math.log(float(np.mean(np.exp(exponents - top))))

    def rejects(self, alpha: float) -> bool:
        return self.count > 0 and self.log_evidence() >= -math.log(alpha)

    def near_deterministic(self) -> bool:
        return self.generations > 1 and self.expected >= NEAR_DETERMINISTIC * (self.generations - 1)

    def describe(self, alpha: float) -> str:
        return (
            f"repeated generations: {self.count} of {self.generations} identical to an earlier one (generation "
            f"{self.first} repeats an earlier one exactly), where the target law expects {self.expected:.3g} "
            f"(evidence e^{self.log_evidence():.1f} >= 1/alpha = {1 / alpha:.3g}): requests sharing or reusing a random stream?"
        )

    def note(self) -> str:
        """The report's line on repeats that did not reject ("" when none)."""
        if not self.count:
            return ""
        why = (
            "the target law is near-deterministic: repeats are its own"
            if self.near_deterministic()
            else "not in excess"
        )
        return f"; repeated generations: {self.count} of {self.generations}, {self.expected:.3g} expected under the target law ({why})"


@dataclass
class Sums:
    """Everything a look needs, accumulated generation by generation."""

    overall: BinSums = field(default_factory=BinSums)
    bins: dict[str, BinSums] = field(default_factory=dict)
    histogram: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(PIT_BINS, dtype=np.int64))
    generations: int = 0
    seen: dict[Prefix, float] = field(default_factory=dict)  # distinct generations -> P(x)
    repeats: RepeatSums = field(default_factory=lambda: RepeatSums())
    collision: str = ""
    broken: str = ""
    score_log_weights: F64 = field(
        default_factory=lambda: np.full(SCORE_LAMBDAS.shape[0], -math.log(SCORE_LAMBDAS.shape[0]))
    )
    near_ties: list[tuple[int, NearTie]] = field(default_factory=list)  # (generation, near-tie)

    def add(
        self, ids: Prefix, scored: Scored, events: list[str] | None, alpha_collision: float, eog: frozenset[int]
    ) -> None:
        self.generations += 1
        if scored.broken:
            self.broken = self.broken or f"generation {self.generations}: {scored.broken}"
            return
        self.repeats.add(ids in self.seen, self.generations)
        if not self.collision and self.repeats.rejects(alpha_collision):
            self.collision = self.repeats.describe(alpha_collision)
        if ids not in self.seen:
            self.seen[ids] = math.exp(float(np.nansum(scored.logp)))  # a near-tie counted as 1: conservative
            self.repeats.seen_mass += self.seen[ids]
        self.near_ties.extend((self.generations, tie) for tie in scored.near_ties)
        tied = {tie.position for tie in scored.near_ties}
        for t in range(len(ids)):
            if t in tied:
                continue
            term = (
                float(scored.log_score[t]),
                float(scored.log_var[t]),
                float(scored.pit[t]),
                t == len(ids) - 1 and ids[t] in eog,
                float(scored.eog_mass[t]),
                scored.score_terms[t],
            )
            self.overall.add(*term)
            self.histogram[min(int(term[2] * PIT_BINS), PIT_BINS - 1)] += 1
            self.bins.setdefault(position_bin_label(position_bin(t)), BinSums()).add(*term)
            if events is not None:
                after, index = events[t].split("/")
                self.bins.setdefault(f"{index} token of a cycle after {after}", BinSums()).add(*term)


def pit_chi_square(histogram: npt.NDArray[np.int64]) -> tuple[float, float]:
    """(statistic, p-value) of the PIT histogram against uniform (df = bins - 1)."""
    n = int(histogram.sum())
    if n == 0:
        return 0.0, 1.0
    expected = n / PIT_BINS
    statistic = float(((histogram - expected) ** 2).sum() / expected)
    return statistic, chi2_sf(statistic, PIT_BINS - 1)


HISTOGRAM_PRIOR = 0.5  # the Dirichlet(1/2, .., 1/2) prior of the histogram's mixture (Krichevsky-Trofimov)


def histogram_log_evidence(histogram: npt.NDArray[np.int64]) -> float:
    """log M of the PIT histogram's test-martingale: the Bayes factor of a Dirichlet-multinomial
    (every bin law, mixed over a Dirichlet(1/2) prior) against the uniform law of the bins,

        M = Gamma(K a) / Gamma(K a + n) prod_i Gamma(a + c_i) / Gamma(a) * K^n,

    the mixture over bin laws r of the likelihood ratios prod_t K r(bin_t), each a nonnegative
    martingale of mean 1 under the null (the U's i.i.d. uniform), so P(M ever >= 1/a) <= a at any
    count. Pearson's chi-square in its place calls 5 tokens in one bin p = 1e-6 (9n against df 9)
    when its probability is 1e-4; this holds at one token and at a million."""
    n = int(histogram.sum())
    k, a = PIT_BINS, HISTOGRAM_PRIOR
    cells = sum(math.lgamma(a + int(c)) - math.lgamma(a) for c in histogram)
    return math.lgamma(k * a) - math.lgamma(k * a + n) + cells + n * math.log(k)


def two_sided_p(z: float) -> float:
    return 2.0 * (1.0 - NORMAL.cdf(abs(z)))


def bin_tests(case: DepthCase) -> int:
    """The fixed number of bin z-tests (three per bin: position bins up to max_tokens, event bins)."""
    return 3 * (position_bin(max(case.max_tokens - 1, 0)) + 1 + len(AFTER) * len(INDEX))


@dataclass(frozen=True)
class Look:
    tokens: int
    generations: int
    alpha: float
    rejected: bool
    where: str
    detail: str


def judge_look(sums: Sums, alpha: float, case: DepthCase, martingale_alpha: float | None = None) -> Look:
    """The tests of one look at level ``alpha`` (split as in the module docstring); the
    test-martingales (log score, EOG rate, PIT histogram) at ``martingale_alpha``, the level of
    all looks together (Ville's inequality holds over every look at once; default ``alpha``)."""
    o = sums.overall
    weights = sums.score_log_weights
    overall_alpha = alpha / 2.0 / OVERALL_TESTS
    bin_alpha = alpha / 2.0 / bin_tests(case)
    total = alpha if martingale_alpha is None else martingale_alpha
    overall_total, bin_total = total / 2.0 / OVERALL_TESTS, total / 2.0 / bin_tests(case)
    chi2, _ = pit_chi_square(sums.histogram)
    z_l, z_u, z_e = o.z_all()
    flags = []
    if o.score_rejects(overall_total, weights):
        flags.append(
            f"log-score z={z_l:+.2f} ({'too unlikely tokens: a flatter or other law' if z_l < 0 else 'too likely tokens: a sharper law'}; "
            f"evidence e^{o.score_log_evidence(weights):.1f} >= 1/alpha)"
        )
    if two_sided_p(z_u) < overall_alpha:
        flags.append(f"PIT mean z={z_u:+.2f}")
    if o.eog_rejects(overall_total):
        flags.append(
            f"end-of-generation rate z={z_e:+.2f} ({'too many' if z_e > 0 else 'too few'} EOGs: {o.eog_count} seen, "
            f"{o.eog_count - o.eog:.2f} due; evidence {o.eog_evidence():.3g} >= 1/alpha)"
        )
    histogram_evidence = histogram_log_evidence(sums.histogram)
    if histogram_evidence >= -math.log(overall_total):
        flags.append(
            f"PIT histogram chi2={chi2:.1f} df={PIT_BINS - 1} (evidence e^{histogram_evidence:.1f} >= 1/alpha)"
        )
    scored_bins = sorted(
        ((max(abs(b.z_log()), abs(b.z_pit())), name, b) for name, b in sums.bins.items()), key=lambda item: -item[0]
    )
    where = [
        f"{name} (log-score z={b.z_log():+.2f}, PIT z={b.z_pit():+.2f}, EOG z={b.z_eog():+.2f}, {b.tokens} tokens)"
        for z, name, b in scored_bins
        if b.score_rejects(bin_total, weights) or two_sided_p(b.z_pit()) < bin_alpha or b.eog_rejects(bin_total)
    ]
    strongest = scored_bins[0] if scored_bins else None
    rejected = bool(flags or where)
    if rejected and not where and strongest is not None:  # an overall test rejected: say where it is largest
        z, name, b = strongest
        where = [
            f"largest in {name} (log-score z={b.z_log():+.2f}, PIT z={b.z_pit():+.2f}, EOG z={b.z_eog():+.2f}, {b.tokens} tokens)"
        ]
    detail = f"{o.tokens} tokens in {sums.generations} generations: log-score z={z_l:+.2f}, PIT z={z_u:+.2f}, EOG z={z_e:+.2f}, PIT chi2={chi2:.1f}"
    if strongest is not None and not where:
        detail += f"; largest bin deviation {strongest[1]} |z|={strongest[0]:.2f}"
    return Look(o.tokens, sums.generations, alpha, rejected, "; ".join(flags + where), detail)


# -----------------------------------------------------------------------------------------------
# the sequential run


@dataclass(frozen=True)
class Sizing:
    """How the run is sized: ``budget_led`` (the TV chosen from the budget) and what the pilot said."""

    budget_led: bool = False
    seconds_per_token: float = math.nan
    projected_s: float = math.nan  # the design's tokens at the pilot's rate
    affordable: float = math.nan  # budget-led: the tokens the budget's rest affords


@dataclass(frozen=True)
class DepthVerdict(StateVerdict):
    state: State
    design: PowerDesign
    tokens: int
    generations: int
    alpha: float
    power: float  # power reached against the design's deviation (at the tokens seen)
    where: str
    detail: str
    looks: tuple[Look, ...] = ()
    near_ties: tuple[tuple[int, NearTie], ...] = ()  # (generation, near-tie): numerics at a cut edge, not judged
    sizing: Sizing = field(default_factory=Sizing)  # how the design was sized (budget-led or not), the pilot's rate


def look_alphas(alpha: float) -> tuple[float, ...]:
    rest = alpha * (1.0 - COLLISION_SHARE)
    return (rest * (1 - FINAL_SHARE) / (LOOKS - 1),) * (LOOKS - 1) + (rest * FINAL_SHARE,)


def final_stat_alpha(alpha: float) -> float:
    """The level of each overall z-test at the final look (the power design's alpha)."""
    return look_alphas(alpha)[-1] / 2.0 / OVERALL_TESTS


def martingale_alpha(alpha: float) -> float:
    """The level of the test-martingales over all looks: the sum of the looks' levels (a union
    over the looks of each look's share spends exactly this; Ville's inequality needs no split)."""
    return math.fsum(look_alphas(alpha))


def martingale_stat_alpha(alpha: float) -> float:
    """The level of each overall test-martingale (the power design's ``martingale_alpha``)."""
    return martingale_alpha(alpha) / 2.0 / OVERALL_TESTS


def draw(engine: GenerationEngine, case: DepthCase, n: int, seed: int) -> list[Generation]:
    """One block of ``n`` generations seeded ``seed`` (:mod:`spec.decoder.depth.blocks`)."""
    return next(blocks(engine, case, [(n, seed)]))


@dataclass
class Pilot:
    """The pilot's rows (a uniform subsample of at most :data:`MAX_PILOT_ROWS`), its generations'
    lengths, and what it cost: ``seconds`` for ``tokens`` tokens decoded, forced and scored."""

    rows: list[F64]
    lengths: list[int]
    seconds: float
    tokens: int

    @property
    def mean_length(self) -> float:
        return max(1.0, float(np.mean(self.lengths)))

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / max(self.tokens, 1)


def pilot_plan(pilot: int, seed: int) -> list[tuple[int, int]]:
    """The pilot's blocks: ONE generation first (the engine's cost is known after one generation's
    time, and said), then blocks of :data:`PILOT_BLOCK`; block seeds from the generation index."""
    first = [(1, seed + 1)] if pilot > 0 else []
    return first + [(min(PILOT_BLOCK, pilot - start), seed + 1 + start) for start in range(1, pilot, PILOT_BLOCK)]


def pilot_rows(
    engine: GenerationEngine,
    rows_of: ForcedRows,
    case: DepthCase,
    seed: int,
    pilot: int,
    deadline: float | None = None,
    on_block: Callable[[Pilot, bool], None] | None = None,
) -> Pilot:
    """The pilot (:func:`pilot_plan`), timed; a ``deadline`` on ``time.monotonic()`` ends it after a
    block; ``on_block(pilot so far, more blocks to come)`` after each block."""
    began = time.monotonic()
    rng = np.random.default_rng([seed, 1])
    rows: list[F64] = []
    lengths: list[int] = []
    plan = pilot_plan(pilot, seed)
    pilot_blocks = blocks(engine, case, plan)
    first_broken: str | None = None  # the first malformed generation's reason, kept for the message
    try:
        for index, block in enumerate(pilot_blocks):
            for gen in block:
                scored = score(rows_of, case, gen.ids, rng, keep_rows=True)
                rows.extend(scored.rows)
                lengths.append(len(gen.ids))
                if scored.broken and first_broken is None:
                    first_broken = f"pilot generation {len(lengths)}: {scored.broken}"
            late = deadline is not None and time.monotonic() > deadline
            if on_block is not None and rows:
                on_block(
                    Pilot(rows, lengths, time.monotonic() - began, sum(lengths)), index + 1 < len(plan) and not late
                )
            if late:
                break
    finally:
        pilot_blocks.close()
    if not rows:
        raise VerispecError(f"no row to design the test on: {_why_no_rows(lengths, first_broken)}")
    if len(rows) > MAX_PILOT_ROWS:  # a uniform subsample: the design needs row shapes, not all rows
        rows = [rows[int(i)] for i in np.sort(rng.choice(len(rows), MAX_PILOT_ROWS, replace=False))]
    return Pilot(rows, lengths, time.monotonic() - began, sum(lengths))


def design_of(rows: Sequence[F64], alpha: float, tv: float, fraction: float) -> PowerDesign:
    """The depth test's design on pilot rows at the case's alpha split (power 0.99)."""
    return design(rows, tv, fraction, final_stat_alpha(alpha), POWER, martingale_stat_alpha(alpha))


def pilot_design(
    engine: GenerationEngine,
    rows_of: ForcedRows,
    case: DepthCase,
    alpha: float,
    tv: float,
    fraction: float,
    seed: int,
    pilot: int,
    deadline: float | None = None,
) -> tuple[PowerDesign, float]:
    """(design, mean tokens per generation) from ``pilot`` generations of the engine itself
    (:func:`pilot_rows`; a ``deadline`` on ``time.monotonic()`` ends it after a block)."""
    drawn = pilot_rows(engine, rows_of, case, seed, pilot, deadline)
    return design_of(drawn.rows, alpha, tv, fraction), drawn.mean_length


def budget_design(
    pilot: Pilot, alpha: float, fraction: float, seconds_left: float
) -> tuple[PowerDesign | None, float, float]:
    """(the design for the smallest TV the rest of a budget affords, or None when even TV 1 needs
    more tokens; the tokens afforded; the seconds left for the test) (spec/decoder/depth/sizing.py).
    The search's own time comes out of ``seconds_left``: it is timed on one design at an interior
    TV (at TV 1 the tempering stops at once and would time nothing)."""
    subsample = search_rows(pilot.rows, np.random.default_rng(len(pilot.rows)))
    memo: dict[float, float] = {}

    def tokens_at(tv: float) -> float:
        if tv not in memo:
            memo[tv] = design_of(subsample, alpha, tv, fraction).tokens
        return memo[tv]

    began = time.monotonic()
    tokens_at(INTERIOR_TV)
    one = time.monotonic() - began
    # up to SEARCH_STEPS + 2 designs on the subsample, about two on all rows (a design's cost grows with its rows)
    usable = max(seconds_left - one * (SEARCH_STEPS + 2 + 2 * len(pilot.rows) / len(subsample)), 0.0)
    affordable = usable * BUDGET_USE / max(pilot.seconds_per_token, 1e-9)
    tv = smallest_tv(tokens_at, affordable)
    if tv is None:
        return None, affordable, usable
    planned = design_of(pilot.rows, alpha, tv, fraction)
    for _ in range(CORRECTIONS):  # the subsample's rows may be easier than all of them
        if planned.tokens <= affordable or tv >= TV_CEILING:
            break
        tv = corrected_tv(tv, planned.tokens, affordable)
        planned = design_of(pilot.rows, alpha, tv, fraction)
    return planned, affordable, usable


# The largest design run: 1e8 tokens, 275 times SmolLM2's full default design (363,292 tokens in
# 24 min on an idle AVX-512 machine: docs/results/decoder-depth.md), so days of decoding. A design
# beyond it means the law leaves the design's deviation almost nothing to move (rows near uniform,
# e.g. a temperature of 1e9): no run could reach its power, with or without a budget.
MAX_DESIGN_TOKENS = 10**8


def refuse_unbounded(plan: PowerDesign) -> None:
    if plan.tokens > MAX_DESIGN_TOKENS:
        raise DesignTooLarge(
            f"the depth test's design needs {plan.tokens:.3g} tokens for power {plan.power:g} against TV {plan.tv:g} on "
            f"{plan.fraction:.0%} of positions, beyond the bound of {MAX_DESIGN_TOKENS:.0e} tokens (days of decoding): "
            "this law leaves that deviation almost nothing to move (rows near uniform or near one-hot); "
            "raise --tv or --fraction, or sample another law"
        )


def _why_no_rows(lengths: Sequence[int], first_broken: str | None) -> str:
    """The pilot's own reason for giving no row: the first malformed generation's, not a generic one."""
    if not lengths:
        return "the engine returned no pilot generation"
    if first_broken is not None:
        return f"all {len(lengths)} pilot generations are malformed, the first as {first_broken}"
    return f"the {len(lengths)} pilot generations hold {sum(lengths)} tokens, none at a position with a law to test"


def check_depth(
    engine: GenerationEngine,
    rows_of: ForcedRows,
    case: DepthCase,
    *,
    alpha: float,
    tv: float = TV,
    fraction: float = FRACTION,
    seed: int = 20_261_130,
    budget_s: float | None = None,
    max_generations: int | None = None,
    pilot: int = PILOT,
    block: int | None = None,
    logprob_tol: float = LOGPROB_TOL,
    size_to_budget: bool = False,
    progress: ProgressSink | None = None,
) -> DepthVerdict:
    """The sequential depth test of one case (module docstring). ``budget_s`` (seconds) or
    ``max_generations`` end it early: failed if a look rejected, else inconclusive. With
    ``size_to_budget`` (and ``budget_s``) ``tv`` is not used: the design is for the smallest TV the
    budget affords at the pilot's cost (spec/decoder/depth/sizing.py). ``progress(line,
    milestone)``: the pilot's cost and the design up front (milestones), then one tick a block."""
    started = time.monotonic()
    say = progress or (lambda line, milestone: None)
    budget_led = size_to_budget and budget_s is not None
    try:
        share = PILOT_SHARE if budget_led else 1.0
        deadline = None if budget_s is None else started + share * budget_s
        drawn = pilot_rows(
            engine,
            rows_of,
            case,
            seed,
            pilot,
            deadline,
            None if progress is None else _pilot_reporter(say, alpha, tv, fraction, budget_led),
        )
    except VerispecError as exc:  # a decoder that breaks on a valid request fails the case
        unplanned = PowerDesign(0, tv, fraction, final_stat_alpha(alpha), POWER, ((), ()))
        return _verdict(
            "failed", unplanned, Sums(), alpha, [], f"the pilot failed: {type(exc).__name__}: {str(exc)[:200]}"
        )
    try:
        if budget_led:
            assert budget_s is not None
            sized, affordable, usable = budget_design(drawn, alpha, fraction, budget_s - (time.monotonic() - started))
            if sized is None:
                unreachable = design_of(drawn.rows, alpha, TV_CEILING, fraction)
                say(design_line(unreachable, drawn, alpha, usable, affordable), True)
                return replace(
                    _verdict(
                        "inconclusive",
                        unreachable,
                        Sums(),
                        alpha,
                        [],
                        unaffordable(unreachable, drawn, usable, affordable),
                    ),
                    sizing=Sizing(
                        True, drawn.seconds_per_token, unreachable.tokens * drawn.seconds_per_token, affordable
                    ),
                )
            plan = sized
        else:
            plan, affordable, usable = design_of(drawn.rows, alpha, tv, fraction), math.nan, math.nan
    except DeterministicLaw:
        unplanned = PowerDesign(0, tv, fraction, final_stat_alpha(alpha), POWER, ((), ()))
        limit = (
            DETERMINISTIC_GENERATIONS if max_generations is None else min(max_generations, DETERMINISTIC_GENERATIONS)
        )
        return check_deterministic(
            engine,
            rows_of,
            case,
            unplanned,
            alpha=alpha,
            seed=seed,
            started=started,
            budget_s=budget_s,
            generations=limit,
            logprob_tol=logprob_tol,
        )
    refuse_unbounded(plan)
    sizing = Sizing(budget_led, drawn.seconds_per_token, plan.tokens * drawn.seconds_per_token, affordable)
    say(design_line(plan, drawn, alpha, usable if budget_led else budget_s, affordable if budget_led else None), True)
    return replace(
        _sequential(
            engine,
            rows_of,
            case,
            plan,
            drawn.mean_length,
            alpha,
            seed,
            started,
            budget_s,
            max_generations,
            block,
            logprob_tol,
            say,
        ),
        sizing=sizing,
    )


def _pilot_reporter(
    say: ProgressSink, alpha: float, tv: float, fraction: float, budget_led: bool
) -> Callable[[Pilot, bool], None]:
    """The pilot's progress: after its first block (one generation) its cost and, at a fixed TV, a
    provisional design from that generation's rows; then one tick a block."""
    blocks_seen = [0]

    def report(so_far: Pilot, more: bool) -> None:
        blocks_seen[0] += 1
        cost = (
            f"pilot: {len(so_far.lengths)} generation{'s' if len(so_far.lengths) != 1 else ''}, {so_far.tokens:,} tokens in {duration(so_far.seconds)} "
            f"({per_token(so_far.seconds_per_token)} a token, decoding and judging)"
        )
        if blocks_seen[0] > 1:
            say(cost, False)
            return
        if more and not budget_led:
            guess = design_of(so_far.rows, alpha, tv, fraction).tokens
            cost += (
                f"; provisional design ~{guess:,} tokens for power {POWER} vs TV {tv} on {fraction:.0%} of positions, "
                f"~{duration(guess * so_far.seconds_per_token)} at this rate"
            )
        say(cost, True)

    return report


def design_line(plan: PowerDesign, drawn: Pilot, alpha: float, budget_s: float | None, affordable: float | None) -> str:
    """The up-front line: the design, the pilot's cost per token, the projected time; budget-led:
    what the budget affords and the TV it buys."""
    rate = drawn.seconds_per_token
    head = (
        f"design: {plan.tokens:,} tokens (~{math.ceil(plan.tokens / drawn.mean_length):,} generations of "
        f"~{drawn.mean_length:.0f} tokens) for power {plan.power} vs TV {plan.tv} on {plan.fraction:.0%} of positions, "
        f"alpha={alpha:.2g}; pilot {len(drawn.lengths)} generations at {per_token(rate)} a token: "
        f"projected {duration(plan.tokens * rate)}"
    )
    if affordable is not None and budget_s is not None:
        head += (
            f"; budget-led: the ~{duration(budget_s)} left for the test afford ~{affordable:,.0f} tokens, TV {plan.tv} is the "
            f"smallest deviation detectable there"
        )
    elif budget_s is not None and plan.tokens * rate > budget_s:
        head += f"; the budget {duration(budget_s)} stops it first (inconclusive unless a look rejects; drop --tv for a budget-led design)"
    return head


def unaffordable(plan: PowerDesign, drawn: Pilot, budget_s: float, affordable: float) -> str:
    return (
        f"budget-led: the ~{duration(budget_s)} left for the test afford ~{affordable:,.0f} tokens, but even TV {plan.tv} "
        f"needs {plan.tokens:,} (~{duration(plan.tokens * drawn.seconds_per_token)} at {per_token(drawn.seconds_per_token)} "
        f"a token); no deviation is detectable at power {plan.power} in this budget"
    )


def _sequential(
    engine: GenerationEngine,
    rows_of: ForcedRows,
    case: DepthCase,
    plan: PowerDesign,
    mean_length: float,
    alpha: float,
    seed: int,
    started: float,
    budget_s: float | None,
    max_generations: int | None,
    block: int | None,
    logprob_tol: float,
    say: ProgressSink,
) -> DepthVerdict:
    """The test's blocks and looks on a fixed design (module docstring)."""
    targets = [math.ceil(plan.tokens / 2 ** (LOOKS - 1 - j)) for j in range(LOOKS)]
    per_block = block or min(MAX_BLOCK, max(1, math.ceil(targets[0] / mean_length)))
    alphas = look_alphas(alpha)
    alpha_collision = alpha * COLLISION_SHARE
    sums = Sums(score_log_weights=plan.score_log_weights)
    rng = np.random.default_rng([seed, 2])
    looks: list[Look] = []
    next_look = 0
    test_began = time.monotonic()
    drawn = blocks(
        engine, case, plan_of(seed + 100, per_block, max_generations)
    )  # closed (its lookahead dropped) on return
    while next_look < LOOKS:
        out_of_time = budget_s is not None and time.monotonic() - started > budget_s
        out_of_draws = max_generations is not None and sums.generations >= max_generations
        if out_of_time or out_of_draws:
            return _verdict("inconclusive", plan, sums, alpha, looks, "budget ended before the design's tokens")
        try:
            gens = next(drawn)
        except VerispecError as exc:
            return _verdict(
                "failed", plan, sums, alpha, looks, f"the engine raised {type(exc).__name__}: {str(exc)[:200]}"
            )
        with closing(
            rows_in_order(
                rows_of,
                tuple(case.prompt_ids),
                [g.ids for g in gens],
                lambda ids: bool(ids) and not structure_error(ids, case),
            )
        ) as forced:
            for gen, rows in zip(gens, forced):
                scored = score(rows, case, gen.ids, rng)
                scored.broken = scored.broken or cycles_error(gen) or logprob_error(gen, scored, logprob_tol)
                sums.add(gen.ids, scored, events_of(gen), alpha_collision, case.eog)
        if sums.broken or sums.collision:
            return _verdict("failed", plan, sums, alpha, looks, sums.broken or sums.collision)
        while next_look < LOOKS and sums.overall.tokens >= targets[next_look]:
            look = judge_look(sums, alphas[next_look], case, martingale_alpha(alpha))
            looks.append(look)
            next_look += 1
            if look.rejected:
                return _verdict("failed", plan, sums, alpha, looks, look.where)
        say(tick_line(sums, plan, len(looks), time.monotonic() - started, time.monotonic() - test_began), False)
    return _verdict("passed", plan, sums, alpha, looks, "")


# A deterministic target law's run: every token must be the row's one possible token, so a bug that
# emits another in a fraction f of generations is seen in 200 with probability 1 - (1 - f)^200,
# >= 0.99 for f >= 2.3%.
DETERMINISTIC_GENERATIONS = 200


def check_deterministic(
    engine: GenerationEngine,
    rows_of: ForcedRows,
    case: DepthCase,
    plan: PowerDesign,
    *,
    alpha: float,
    seed: int,
    started: float,
    budget_s: float | None,
    generations: int,
    logprob_tol: float,
) -> DepthVerdict:
    """The depth test when every pilot row is one-hot (:class:`DeterministicLaw`: temperature 0,
    top-k 1): no statistic has anything to measure, but every token of probability 0 (every token
    but the row's one), every structural break, every reported logprob off the law and request
    independence (the repeat test, whose repeats such a law expects) are still judged, on
    :data:`DETERMINISTIC_GENERATIONS` generations (fewer when ``budget_s`` ends first: inconclusive).
    Passes with the report saying the law is deterministic; never a failure of the law itself."""
    sums = Sums()
    rng = np.random.default_rng([seed, 2])
    note = "the target law is deterministic (every pilot row one-hot): no statistics, each token checked to be the row's only one"
    drawn = blocks(engine, case, plan_of(seed + 100, MAX_BLOCK, generations))
    with closing(drawn):
        while sums.generations < generations:
            if budget_s is not None and time.monotonic() - started > budget_s:
                return _verdict(
                    "inconclusive", plan, sums, alpha, [], f"budget ended before {generations} generations", note
                )
            try:
                gens = next(drawn)
            except VerispecError as exc:
                return _verdict(
                    "failed", plan, sums, alpha, [], f"the engine raised {type(exc).__name__}: {str(exc)[:200]}", note
                )
            except StopIteration:
                break
            with closing(
                rows_in_order(
                    rows_of,
                    tuple(case.prompt_ids),
                    [g.ids for g in gens],
                    lambda ids: bool(ids) and not structure_error(ids, case),
                )
            ) as forced:
                for gen, rows in zip(gens, forced):
                    scored = score(rows, case, gen.ids, rng)
                    scored.broken = scored.broken or logprob_error(gen, scored, logprob_tol)
                    sums.add(gen.ids, scored, events_of(gen), alpha * COLLISION_SHARE, case.eog)
            if sums.broken or sums.collision:
                return _verdict("failed", plan, sums, alpha, [], sums.broken or sums.collision, note)
    return _verdict("passed", plan, sums, alpha, [], "", note)


def tick_line(sums: Sums, plan: PowerDesign, looks: int, elapsed: float, testing: float) -> str:
    """One progress tick: tokens judged of the design's, looks done, elapsed, projected remaining
    (at the test's own rate so far)."""
    tokens = sums.overall.tokens
    left = max(plan.tokens - tokens, 0) * testing / max(tokens, 1)
    return (
        f"depth: {tokens:,} / {plan.tokens:,} tokens judged ({min(tokens / max(plan.tokens, 1), 1.0):.0%}) in "
        f"{sums.generations:,} generations, looks {looks}/{LOOKS} done, elapsed {duration(elapsed)}, "
        f"projected remaining {duration(left)}"
    )


def logprob_error(gen: Generation, scored: Scored, tol: float) -> str:
    """Why the engine's reported logprobs are not its tokens' target log-probabilities ("" when they
    are within ``tol``, or not reported)."""
    if gen.logprobs is None or scored.broken:
        return ""
    if len(gen.logprobs) != len(gen.ids):
        return f"{len(gen.logprobs)} logprobs reported for {len(gen.ids)} tokens"
    for t, (reported, ours) in enumerate(zip(gen.logprobs, scored.logp)):
        if math.isnan(float(ours)):  # a near-tie at a cut edge: no target log-probability to check
            continue
        if not abs(reported - float(ours)) <= tol:  # a reported NaN fails
            return f"reported logprob {reported:.6g} at position {t}, target law {float(ours):.6g} (|diff| > {tol:g})"
    return ""


def _verdict(
    state: State, plan: PowerDesign, sums: Sums, alpha: float, looks: list[Look], where: str, note: str = ""
) -> DepthVerdict:
    tokens = sums.overall.tokens
    detail = looks[-1].detail if looks else f"{tokens} tokens in {sums.generations} generations"
    detail = f"{note}; {detail}" if note else detail
    detail += near_ties_note(sums.near_ties) + ("" if sums.collision else sums.repeats.note())
    return DepthVerdict(
        state,
        plan,
        tokens,
        sums.generations,
        alpha,
        plan.power_at(tokens),
        where,
        detail,
        tuple(looks),
        tuple(sums.near_ties),
    )


NEAR_TIES_SHOWN = 3


def near_ties_note(ties: Sequence[tuple[int, NearTie]]) -> str:
    """The report's line on numerics near-ties at cut edges ("" when none)."""
    if not ties:
        return ""
    shown = "; ".join(f"generation {g}, {tie.describe()}" for g, tie in ties[:NEAR_TIES_SHOWN])
    more = f"; {len(ties) - NEAR_TIES_SHOWN} more" if len(ties) > NEAR_TIES_SHOWN else ""
    return (
        f"; {len(ties)} numerics near-ties at a cut edge (impossible under the target row, within twice the "
        f"engine's own batch-shape noise of the cut; not judged): {shown}{more}"
    )


# -----------------------------------------------------------------------------------------------
# teacher-forced rows


def reference_rows(model: Any) -> ForcedRows:
    """One forward of prompt + ids[:-1] (our reference model): the rows predicting each id."""

    def rows(sequence: Prefix, prompt_length: int) -> Any:
        logits = model.forward(list(sequence[:-1]), model.new_cache(len(sequence) - 1)).logits  # [L - 1, V]
        return logits[prompt_length - 1 :]

    return rows


def verdict_json(verdict: DepthVerdict) -> dict[str, Any]:
    return {
        "passed": verdict.passed,
        "state": verdict.state,
        "exit_status": verdict.exit_status,
        "tokens": verdict.tokens,
        "generations": verdict.generations,
        "design_tokens": verdict.design.tokens,
        "alpha": verdict.alpha,
        "power": round(verdict.power, 6),
        "tv": verdict.design.tv,
        "fraction": verdict.design.fraction,
        "budget_led": verdict.sizing.budget_led,
        "where": verdict.where,
        "detail": verdict.detail,
        "near_ties": len(verdict.near_ties),
        "near_tie_margins": [
            [g, t.position, t.token, round(t.margin, 6), round(t.noise, 6)] for g, t in verdict.near_ties[:100]
        ],
    }


def sizing_json(verdict: DepthVerdict) -> dict[str, Any]:
    """The run's timing as the pilot measured it (apart from :func:`verdict_json`: a verdict's
    numbers are the same with any number of workers, its timing is not)."""
    return {
        "seconds_per_token": _finite(verdict.sizing.seconds_per_token),
        "projected_s": _finite(verdict.sizing.projected_s),
        "affordable_tokens": _finite(verdict.sizing.affordable),
    }


def _finite(x: float) -> float | None:
    """A JSON number, or null where the pilot did not say (NaN is no JSON)."""
    return round(x, 6) if math.isfinite(x) else None
