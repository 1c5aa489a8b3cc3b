"""Conformal calibration for early exit: exact order-statistic quantiles and conformal risk control.

What the calibration ships (``prompt_risk_threshold``, 3. below) is a PROMPT-level guarantee:
"expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable".
Tokens of one prompt are correlated (a JSON prompt keeps producing JSON), so a token-level
guarantee, which needs calibration and serve TOKENS to be exchangeable, failed on held-out prompts.
The token-level calibrations 1. and 2. are kept as building blocks and for comparison; both
assume that calibration tokens and serve tokens are exchangeable:

1. Residual quantile (split conformal prediction). With n calibration scores s_1..s_n and level
   q in (0, 1), Q = the k-th smallest score with k = ceil((n+1) q). For a fresh exchangeable score
   s, P(s <= Q) >= k/(n+1) >= q, and < q + 1/(n+1) when ties have probability zero; conditionally
   on the calibration draw the coverage is Beta(k, n+1-k). If k > n (q > n/(n+1)) no order
   statistic is high enough and Q = +inf: the layer never admits. (Vovk, Gammerman & Shafer 2005;
   Lei et al., "Distribution-free predictive inference for regression", JASA 2018; Angelopoulos &
   Bates, "A Gentle Introduction to Conformal Prediction", 2023.)
   The index is computed in integer arithmetic. The common ``np.quantile(s, q, method="higher")``
   uses the 0-based index ceil((n-1) q), i.e. the order statistic ceil((n-1) q) + 1, which for
   q > 1/2 can be one below k and then covers less than q (tests/test_conformal.py shows a case).
2. Margin threshold (conformal risk control, Angelopoulos, Bates, Fisch, Lei & Schuster,
   "Conformal Risk Control", ICLR 2024, Thm 1). Loss L_i(lambda) = 1{margin_i > lambda and token i
   flips}: bounded by B = 1, non-increasing and right-continuous in lambda, and 0 at lambda = +inf.
   lambda^ = inf{lambda : (n R^(lambda) + B)/(n + 1) <= alpha} with R^ the empirical mean loss
   gives E[L_{n+1}(lambda^)] <= alpha, i.e. P(admitted and flipped) <= alpha for a fresh token.

3. Prompt-level risk (conformal risk control with the PROMPT as the exchangeable unit,
   ``prompt_risk_threshold``). Calibration prompt i has T_i >= 1 tokens; its loss at threshold
   lambda is the fraction of its tokens with an event (flip, or residual score above the
   quantile) whose score exceeds lambda: L_i(lambda) = #{t in i : score_t > lambda, event_t} / T_i.
   It is bounded by B = 1 (proofs.conformal.prompt_loss_bounded), non-increasing and
   right-continuous in lambda, 0 at +inf, so Angelopoulos et al., Thm 1 applies to the n prompts:
   lambda^ = inf{lambda : (sum_i L_i(lambda) + 1)/(n + 1) <= alpha/K} (computed as
   sum_i L_i <= (n+1) alpha/K - 1 in Fractions, proofs.conformal.crc_budget_iff) gives
   E[L_{n+1}(lambda^)] <= alpha/K for a new prompt exchangeable with the calibration prompts.
   Over the K candidate depths, a served token flips only if some depth admitted it and flipped
   there (proofs.union.first_exit_event), so a prompt's flip fraction is at most the sum of its
   K per-depth losses (proofs.conformal.flip_fraction_union) and its expectation is <= alpha.
   With fewer than ``min_prompts`` = ceil(K/alpha) - 1 prompts no lambda qualifies and the
   gate never admits (proofs.conformal.min_prompts_iff).

Several candidate layers: per-layer level q' = 1 - (1 - q)/K (``bonferroni``) or risk alpha/K,
so that by the union bound the served token flips with probability <= 1 - q (or alpha)
(proved: proofs.union.bonferroni_joint, proofs.union.first_exit_event, proofs.union.residual_gate_event).

Levels (q, alpha) are exact rationals. A ``Fraction`` or ``int`` is taken as is; a ``str`` is parsed
by ``Fraction`` ("0.99", "99/100"); a ``float`` is converted through its shortest repr
(``Fraction(repr(x))``: 0.9 means 9/10, the number the caller wrote, not the binary double
0.90000000000000002220..., which would move the index up by one for some n). ``bool`` is rejected.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import CalibrationError

Level = Fraction | int | str | float


def exact_level(level: Level, name: str = "q") -> Fraction:
    """``level`` as an exact Fraction strictly inside (0, 1) (see the module docstring for types)."""
    if isinstance(level, bool):
        raise CalibrationError(f"{name} must be a number in (0, 1), got bool {level!r}")
    try:
        if isinstance(level, Fraction):
            value = level
        elif isinstance(level, int):
            value = Fraction(level)
        elif isinstance(level, float):
            if not math.isfinite(level):
                raise CalibrationError(f"{name} must be in (0, 1), got {level!r}")
            value = Fraction(repr(level))
        elif isinstance(level, str):
            value = Fraction(level.strip())
        else:
            raise CalibrationError(f"{name} must be a Fraction, int, str or float, got {type(level).__name__}")
    except (ValueError, ZeroDivisionError) as exc:
        raise CalibrationError(f"{name} {level!r} is not a number: {exc}") from None
    if not 0 < value < 1:
        raise CalibrationError(f"{name} must be in (0, 1), got {level!r}")
    return value


def _count(n: int, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise CalibrationError(f"{name} must be an int, got {type(n).__name__} {n!r}")
    if n < 1:
        raise CalibrationError(f"{name} must be >= 1 (no calibration data, no guarantee), got {n}")
    return int(n)


def conformal_index(n: int, q: Level) -> int | None:
    """The 1-based order-statistic index k = ceil((n+1) q), or None if k > n (never admit).

    Integer arithmetic only: with q = a/b in lowest terms, k = -((-(n+1) a) // b).
    Guarantee: k/(n+1) >= q and k/(n+1) < q + 1/(n+1); k >= 1; k > n iff q > n/(n+1).
    proved: proofs.conformal.ceil_by_floor_division, proofs.conformal.index_covers,
    proofs.conformal.index_tight, proofs.conformal.index_positive, proofs.conformal.never_admits_iff.
    Raises CalibrationError for n < 1 or q outside (0, 1).
    """
    n = _count(n)
    level = exact_level(q)
    k = -((-(n + 1) * level.numerator) // level.denominator)
    return k if k <= n else None


def _scores(scores: npt.ArrayLike, name: str = "scores") -> npt.NDArray[np.float64]:
    values = np.asarray(scores)
    if values.ndim != 1:
        raise CalibrationError(f"{name} must be one-dimensional, got shape {values.shape}")
    if values.dtype.kind not in "fiu" or values.dtype == np.float16:
        raise CalibrationError(f"{name} must be real numbers (float32/float64/int), got dtype {values.dtype}")
    exact = np.asarray(values, dtype=np.float64)  # float32 -> float64 is exact
    if values.dtype.kind in "iu" and not bool(np.all(exact.astype(values.dtype) == values)):
        raise CalibrationError(f"{name} has integers that float64 cannot hold exactly")
    if values.size == 0:
        raise CalibrationError(f"{name} is empty: n = 0 calibration points give no guarantee")
    if bool(np.any(np.isnan(exact))):
        raise CalibrationError(f"{name} contains NaN at index {int(np.argmax(np.isnan(exact)))}")
    return exact


def conformal_quantile(scores: npt.ArrayLike, q: Level) -> float:
    """Q = the k-th smallest of the n scores, k = ceil((n+1) q); +inf if k > n.

    ``scores`` [n]: calibration scores (float32 or float64; NaN is an error, +-inf allowed). The
    result is one of the scores exactly (a float32 score stays a float32 value), so a float32
    gate can use it as is. Guarantee: for a fresh score s exchangeable with the calibration
    scores, P(s <= Q) >= q (marginally over calibration and the fresh draw).
    proved: proofs.conformal.index_covers, proofs.conformal.never_admits_iff.
    """
    values = _scores(scores)
    k = conformal_index(values.size, q)
    if k is None:
        return float("inf")
    return float(np.partition(values, k - 1)[k - 1])


def bonferroni(q: Level, n_layers: int) -> Fraction:
    """The per-layer level q' = 1 - (1 - q)/K for K candidate layers (exact).

    Guarantee: if each layer's conformal event fails with probability <= 1 - q', the union over
    the K layers fails with probability <= 1 - q, whatever the dependence between layers.
    proved: proofs.union.bonferroni_level, proofs.union.bonferroni_joint, proofs.union.residual_gate_event;
    Boole's inequality for every K: proofs.union.two_events, proofs.union.induction_step,
    proofs.union.boole_atoms.
    """
    level = exact_level(q)
    k = _count(n_layers, "n_layers")
    return 1 - (1 - level) / k


def margin_threshold(
    margins: npt.ArrayLike,
    flips: npt.ArrayLike,
    alpha: Level,
    n_layers: int = 1,
) -> float:
    """The margin gate's threshold lambda^ for one layer, by conformal risk control at alpha/K.

    ``margins`` [n]: the exit's top-1 margins on calibration tokens (as computed by
    :func:`reference.certificate.top2`); ``flips`` [n] bool: whether the exit's top-1 differs from
    the full model's argmax. Loss L_i(lambda) = 1{margins_i > lambda and flips_i} (the gate admits
    iff margin > lambda). Returns the smallest lambda with
    (sum_i L_i(lambda) + 1) / (n + 1) <= alpha / K:
    -inf if even lambda = -inf qualifies (few enough flips: admit every token), +inf if no finite
    lambda does (alpha/K < 1/(n+1): never admit), else the m+1-th largest flipped margin, where
    m = floor((n+1) alpha/K) - 1 is the number of admitted flips the bound allows.

    Guarantee (Angelopoulos et al., "Conformal Risk Control", ICLR 2024, Thm 1, with B = 1; the
    loss is monotone non-increasing and right-continuous in lambda and 0 at +inf): for a fresh
    token exchangeable with the calibration tokens, P(margin > lambda^ and flip) <= alpha/K, hence
    over K layers each calibrated this way, P(served token flips) <= alpha.
    proved (the union over layers): proofs.union.first_exit_event, proofs.union.two_events,
    proofs.union.induction_step, proofs.union.boole_atoms.
    """
    values = _scores(margins, "margins")
    flipped = np.asarray(flips)
    if flipped.dtype != np.bool_:
        raise CalibrationError(f"flips must be a bool array, got dtype {flipped.dtype}")
    if flipped.shape != values.shape:
        raise CalibrationError(f"flips {flipped.shape} and margins {values.shape} differ in shape")
    risk = exact_level(alpha, "alpha") / _count(n_layers, "n_layers")
    n = values.size
    allowed = math.floor((n + 1) * risk) - 1  # the most admitted flips with (count + 1)/(n+1) <= risk
    if allowed < 0:
        return float("inf")
    flipped_margins = np.sort(values[flipped])[::-1]  # descending
    if flipped_margins.size <= allowed:
        return float("-inf")
    return float(flipped_margins[allowed])


def empirical_flip_risk(margins: npt.ArrayLike, flips: npt.ArrayLike, threshold: float) -> float:
    """The fraction of tokens that the margin gate admits (margin > threshold) and that flip."""
    values = _scores(margins, "margins")
    flipped = np.asarray(flips, dtype=np.bool_)
    return float(np.mean((values > threshold) & flipped))


# --- prompt-level conformal risk control ------------------------------------------------------------

PROMPT_CLAIM = "expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable"
"""The guarantee of the prompt-level gates, in the exact words printed wherever it is claimed."""


def min_prompts(alpha: Level, n_layers: int = 1) -> int:
    """The fewest calibration prompts for which prompt-level risk control at alpha/K can admit.

    (n + 1) alpha/K >= 1 iff n >= ceil(K/alpha) - 1 (integers only: alpha = a/b, K/alpha = K b/a,
    ceil by floor division). Fewer prompts: the threshold is +inf and the gate refuses everything.
    proved: proofs.conformal.min_prompts_iff, proofs.conformal.ceil_by_floor_division.
    """
    risk = exact_level(alpha, "alpha")
    k = _count(n_layers, "n_layers")
    ceiling = -((-k * risk.denominator) // risk.numerator)  # ceil(K / alpha)
    return max(1, ceiling - 1)


def _prompt_index(prompts: npt.ArrayLike, size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(prompt index [N] in 0..n-1, tokens per prompt [n] >= 1); CalibrationError unless every
    index in 0..n-1 has at least one token."""
    index = np.asarray(prompts)
    if index.shape != (size,) or index.dtype.kind not in "iu":
        raise CalibrationError(f"prompt indices must be {size} integers, got {index.dtype} {index.shape}")
    index = np.asarray(index, dtype=np.int64)
    if size == 0 or int(index.min()) < 0:
        raise CalibrationError("prompt indices must be >= 0 and there must be at least one token")
    tokens = np.asarray(np.bincount(index), dtype=np.int64)  # [n]
    if bool(np.any(tokens == 0)):
        raise CalibrationError(f"prompt {int(np.argmin(tokens))} has no tokens: indices must be 0..n-1, each used")
    return index, tokens


def prompt_risk_threshold(
    scores: npt.ArrayLike,
    events: npt.ArrayLike,
    prompts: npt.ArrayLike,
    alpha: Level,
    n_layers: int = 1,
) -> float:
    """The smallest lambda with (sum_i L_i(lambda) + 1)/(n + 1) <= alpha/K over n calibration prompts.

    ``scores`` [N] (float32/float64, no NaN): one per calibration token; ``events`` [N] bool: the
    tokens that can cost (flips for the margin gate; every token for a residual quantile);
    ``prompts`` [N] int: the prompt of each token, 0..n-1, each used. L_i(lambda) = #{t in i :
    scores_t > lambda and events_t} / T_i (see the module docstring, 3.). Exact: the per-prompt
    weights 1/T_i and the budget (n+1) alpha/K - 1 are Fractions. Returns +inf if the budget is
    negative (n < :func:`min_prompts`: never admit), -inf if every event fits in the budget, else
    the largest event score whose own weight first overflows the budget (a score value itself, so
    a float32 score stays a float32 value).

    Guarantee (Angelopoulos et al., "Conformal Risk Control", ICLR 2024, Thm 1, B = 1): for a new
    prompt exchangeable with the calibration prompts, E[L_{n+1}(lambda^)] <= alpha/K; for the
    margin gate over K depths, PROMPT_CLAIM.
    proved: proofs.conformal.prompt_loss_bounded, proofs.conformal.crc_budget_iff,
    proofs.conformal.min_prompts_iff, proofs.conformal.threshold_is_infimum,
    proofs.conformal.flip_fraction_union.
    """
    values = _scores(scores, "scores")
    event = np.asarray(events)
    if event.dtype != np.bool_ or event.shape != values.shape:
        raise CalibrationError(f"events must be a bool array of shape {values.shape}, got {event.dtype} {event.shape}")
    index, tokens = _prompt_index(prompts, values.size)
    n = int(tokens.size)
    risk = exact_level(alpha, "alpha") / _count(n_layers, "n_layers")
    budget = (n + 1) * risk - 1  # Fraction: sum_i L_i(lambda) may not exceed it
    if budget < 0:
        return float("inf")
    chosen = np.flatnonzero(event)
    order = chosen[np.argsort(-values[chosen], kind="stable")]  # event tokens, scores descending
    spent = Fraction(0)
    i = 0
    while i < order.size:
        score = values[order[i]]
        group = Fraction(0)  # tied scores enter the loss together
        while i < order.size and values[order[i]] == score:
            group += Fraction(1, int(tokens[index[order[i]]]))
            i += 1
        if spent + group > budget:
            return float(score)  # at lambda = score the loss is `spent` <= budget; below it, more
        spent += group
    return float("-inf")


def prompt_losses(
    scores: npt.ArrayLike, events: npt.ArrayLike, prompts: npt.ArrayLike, threshold: float
) -> list[Fraction]:
    """L_i(threshold) per prompt i (exact Fractions): the fraction of its tokens with score >
    threshold and an event (what :func:`prompt_risk_threshold` bounds in expectation)."""
    values = _scores(scores, "scores")
    event = np.asarray(events, dtype=np.bool_)
    index, tokens = _prompt_index(prompts, values.size)
    hits = np.bincount(index, weights=((values > threshold) & event).astype(np.float64), minlength=tokens.size)
    return [Fraction(int(h), int(t)) for h, t in zip(hits, tokens)]
