"""Exact checks at full vocabulary size: protocol cells and the law, as two separate verdicts.

For one verification with fixed rows p [k+1, V], q [k, V] and drafts, the protocol's verdict is
a function of the k + 1 uniforms, constant on CELLS: acceptance path j (u_0..u_{j-1} accept, u_j
rejects; or all accept, j = k) times the inverse-CDF interval of a token in the row path j draws
from (the residual (p_j - q_j)^+, or p_j when it is all zero, or p_k). This module drives a
verifier through the batch interface with uniforms chosen IN those cells, at full V:

- every probed token's cell is hit at its lowest float uniform, its midpoint and its highest
  float uniform (the inverse-CDF boundaries, computed with the protocol's own float64 cumsum);
- every acceptance test is hit at 0, inside, at its last accepting float, its first rejecting
  float, inside the rejection region and at 1 - 2^-53.

Probed tokens: every token of positive weight when there are at most ``ALL_TOKENS`` of them;
otherwise the largest weights, the first and last positive ids, the last id V - 1, the drafted
ids, and a seeded sample of the tail (weight share < 1e-3). A probe costs one O(V) evaluation in
a NumPy verifier, so (k+1)·V probes per case (~2.4M at V = 262,144, k = 8) would take hours; the
probe set keeps the check under ``PROBE_BUDGET`` evaluations per case while still hitting every
edge the bug classes live on (tail, last id, boundaries, each acceptance position).

TWO VERDICTS, never mixed:

``protocol``: at some probe the verifier's verdict differs from the protocol's (float64, bit for
bit). Reordered scans, another summation order, ``u < p/q`` for ``u q < p`` break the protocol
without changing the law: they fail here only.

``law``: evidence that the verifier's LAW differs from the protocol's by more than float64 rounding,
from order-free reasoning on the probes, under one stated assumption each:
  * acceptance at position i: assuming the verifier's acceptance is monotone in u_i (a threshold
    test, checked on the probes), its acceptance probability lies between its largest accepting and
    smallest rejecting probe; it must contain min(1, p(x)/q(x)) up to ``ACCEPT_SLACK``;
  * the draw on path j: assuming the verifier's token is non-decreasing in the final uniform (an
    inverse CDF in id order, checked on the probes: a reordered scan is not, and is then not judged
    here), a probe u returning token s bounds its CDF: F'(s-1) <= u <= F'(s); the law's CDF
    F(t) = sum_{s<=t} w_s / sum w must satisfy F(s-1) - slack <= u <= F(s) + slack, with slack
    ``cdf_slack(V)`` covering the float64 cumsum's rounding (|computed - exact| <= gamma_V).
A law failure therefore proves a CDF (or acceptance) deviation larger than float rounding, i.e.
a total-variation distance > 0 between the verifier's and the protocol's verdict law for those
drafts. What this cannot see: a law change confined to cells no probe hits (a tail token not in
the sample whose neighbours are right), or one made by a non-monotone draw; the stratified
statistics (``stat_strata_*``) and the small-V exact properties cover those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import inverse_cdf_draws
from verispec.reference.speculative import BatchVerifier, residual_law
from verispec.spec.llm_rows import LlmCase, Rows, case_rng

ALL_TOKENS = 96  # probe every positive-weight token when there are at most this many
PROBE_BUDGET = 1024  # evaluations per case, at most ...
ELEMENT_BUDGET = 1 << 24  # ... and at most this many probes x V (an O(V) verifier's work per case)
MIN_TOKENS = 4  # tokens probed per path, at least (plus the edge ids)
CHUNK_ELEMENTS = 1 << 24  # items per batch call x V: one call per case (ELEMENT_BUDGET), [N, V] temporaries <= 128 MB
U_MAX = float(np.nextafter(1.0, 0.0))
EPS = 2.0**-53
ACCEPT_SLACK = 4 * EPS  # fl(u * q) < p against u < p/q: one rounding of the product and the ratio


def cdf_slack(vocab: int) -> float:
    """Bound on |float64 CDF cell boundary - exact CDF|: the sequential cumsum's gamma_V plus the
    rounding of u * total and of the division (Higham, Accuracy and Stability, Thm 4.4)."""
    gamma = (vocab + 1) * EPS / (1 - (vocab + 1) * EPS)
    return 2 * gamma + 4 * EPS


@dataclass
class Verdicts:
    """What the probes found on one implementation, over all cases."""

    cases: int = 0
    probes: int = 0
    protocol: list[str] = field(default_factory=list)
    law: list[str] = field(default_factory=list)
    not_judged: list[str] = field(default_factory=list)  # non-monotone draws: law left to statistics
    errors: list[str] = field(default_factory=list)
    next_case: int = 0  # the probes are resumable: cases [0, next_case) are done

    def decided(self, verdict: str) -> bool:
        """Whether ``verdict`` ("protocol" or "law") has failed (or the verifier raised)."""
        return bool(self.errors) or bool(self.protocol if verdict == "protocol" else self.law)


# -----------------------------------------------------------------------------------------------
# the protocol, vectorized, for the probe points (float64, the reference's definition)


@dataclass(frozen=True)
class Paths:
    """Per acceptance path j = 0..k: the row it draws from, its float64 cumsum and total."""

    weights: Rows  # [k+1, V]
    cumsum: Rows  # [k+1, V]
    p_x: npt.NDArray[np.float64]  # [k] target mass of the drafts
    q_x: npt.NDArray[np.float64]  # [k] draft mass of the drafts


def paths_of(case: LlmCase) -> Paths:
    k = case.k
    weights = case.p.copy()  # [k+1, V]: row k stays p_k, the bonus row
    weights[:k] = residual_law(case.p[:k], case.q)
    drafts = np.asarray(case.drafts, dtype=np.int64)
    return Paths(
        weights,
        np.cumsum(weights, axis=1),
        case.p[np.arange(k), drafts],
        case.q[np.arange(k), drafts],
    )


def protocol_verdicts(
    paths: Paths, uniforms: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(accepted [N], token [N]) of the protocol for uniforms [N, k+1]."""
    k = paths.p_x.shape[0]
    accept = uniforms[:, :k] * paths.q_x < paths.p_x  # [N, k]
    all_accepted = accept.all(axis=1)
    accepted = np.where(all_accepted, k, np.argmin(accept, axis=1)).astype(np.int64)
    token = np.empty(uniforms.shape[0], dtype=np.int64)
    for j in np.unique(accepted):
        rows = accepted == j
        token[rows] = inverse_cdf_draws(paths.weights[j], uniforms[rows, k])
    return accepted, token


# -----------------------------------------------------------------------------------------------
# probe points


def first_float_at_least(scale: float, bound: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Per bound b: the smallest float u in [0, 1] with fl(u * scale) >= b (1.0 if none < 1)."""
    guess = np.clip(bound / scale, 0.0, 1.0)
    for _ in range(4):  # the quotient is within an ulp or two of the answer
        below = np.nextafter(guess, 0.0)
        step_down = (below * scale >= bound) & (guess > 0)
        guess = np.where(step_down, below, guess)
        step_up = (guess * scale < bound) & (guess < 1.0)
        guess = np.where(step_up, np.nextafter(guess, 2.0), guess)
    return guess


def probes_per_case(vocab: int) -> int:
    """How many evaluations one case may take at vocabulary size V."""
    return max(64, min(PROBE_BUDGET, ELEMENT_BUDGET // vocab))


def probe_tokens(weights: Rows, extra: Sequence[int], rng: np.random.Generator, count: int) -> npt.NDArray[np.int64]:
    """Which tokens of a row [V] to probe: all positive ones if few, else ``count`` split
    between the largest weights and a seeded tail sample, plus the edge ids (module docstring)."""
    positive = np.flatnonzero(weights > 0)
    if positive.shape[0] <= min(ALL_TOKENS, count):
        return positive.astype(np.int64)
    share = weights / weights.sum()
    top = positive[np.argsort(-share[positive], kind="stable")[: max(1, count // 2)]]
    tail = positive[share[positive] < 1e-3]
    sample = rng.choice(tail, size=min(max(1, count // 2), tail.shape[0]), replace=False) if tail.shape[0] else tail
    vocab = weights.shape[0]
    chosen = {int(v) for v in top} | {int(v) for v in sample} | {int(positive[0]), int(positive[-1])}
    chosen |= {t for t in (vocab - 1, *extra) if 0 <= t < vocab and weights[t] > 0}
    return np.asarray(sorted(chosen), dtype=np.int64)


def acceptance_points(p_x: float, q_x: float) -> tuple[list[float], list[float]]:
    """(uniforms the protocol accepts, uniforms it rejects) for one drafted id."""
    first_reject = float(first_float_at_least(q_x, np.array([p_x]))[0])  # fl(u q) >= p from here
    accepting = [0.0] if p_x > 0 else []
    rejecting = [U_MAX] if U_MAX * q_x >= p_x else []
    if first_reject < 1.0:
        if first_reject > 0:
            last_accept = float(np.nextafter(first_reject, 0.0))
            accepting += [last_accept / 2, last_accept]
        rejecting += [first_reject, (first_reject + 1.0) / 2]
    else:
        accepting += [0.5, U_MAX]
    return accepting, [u for u in rejecting if u * q_x >= p_x]


def draw_points(cumsum: Rows, tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Final uniforms inside each token's float64 inverse-CDF cell: lowest, middle, highest."""
    total = float(cumsum[-1])
    lower = np.where(tokens > 0, cumsum[np.maximum(tokens - 1, 0)], 0.0)
    low = first_float_at_least(total, lower)
    high = np.nextafter(first_float_at_least(total, cumsum[tokens]), 0.0)
    nonempty = (low <= high) & (low < 1.0)
    low, high = low[nonempty], np.minimum(high[nonempty], U_MAX)
    return np.unique(np.concatenate([low, (low + high) / 2, high]))


def case_probes(case: LlmCase, paths: Paths, seed: int) -> npt.NDArray[np.float64]:
    """Uniforms [N, k+1] probing every acceptance position and the probed draw cells of every path."""
    k = case.k
    rng = case_rng(seed, "probes", case.name)
    points = [acceptance_points(float(px), float(qx)) for px, qx in zip(paths.p_x, paths.q_x)]
    accept_mid = [acc[len(acc) // 2] if acc else 0.0 for acc, _ in points]
    reject_mid = [rej[-1] if rej else U_MAX for _, rej in points]
    rows: list[npt.NDArray[np.float64]] = []

    def path_prefix(j: int) -> list[float]:
        return accept_mid[:j] + ([reject_mid[j]] if j < k else []) + [0.5] * (k - j - (1 if j < k else 0))

    for i, (accepting, rejecting) in enumerate(points):  # acceptance tests of position i
        for u in accepting + rejecting:
            row = accept_mid[:i] + [u] + reject_mid[i + 1 :] + [0.5]
            rows.append(np.asarray(row[: k + 1], dtype=np.float64))
    edges = 3 + k  # first, last positive, V - 1 and the drafts, per path
    per_path = (probes_per_case(case.vocab) - len(rows)) // (3 * (k + 1)) - edges
    for j in range(k + 1):
        if j < k and not points[j][1]:
            continue  # position j never rejects: path j is empty
        if any(not points[i][0] for i in range(min(j, k))):
            break  # an earlier draft can never be accepted
        tokens = probe_tokens(paths.weights[j], case.drafts, rng, max(MIN_TOKENS, per_path))
        finals = draw_points(paths.cumsum[j], tokens)
        base = np.asarray(path_prefix(j)[:k], dtype=np.float64)
        block = np.empty((finals.shape[0], k + 1))
        block[:, :k] = base
        block[:, k] = finals
        rows.extend(block)
    return np.asarray(rows, dtype=np.float64)


# -----------------------------------------------------------------------------------------------
# running a verifier on the probes, and the two verdicts


def evaluate(
    batch: BatchVerifier, case: LlmCase, uniforms: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """The verifier's (accepted, token, is_bonus) on every probe, in chunks (shared rows)."""
    n = uniforms.shape[0]
    chunk = max(1, CHUNK_ELEMENTS // case.vocab)
    drafts = np.asarray(case.drafts, dtype=np.int64)
    out_a, out_t, out_b = [], [], []
    for start in range(0, n, chunk):
        u = uniforms[start : start + chunk]
        # writable copies: the cached rows are read-only, and a verifier may legitimately scratch its inputs
        result = batch(case.p.copy(), case.q.copy(), np.tile(drafts, (u.shape[0], 1)), u)
        out_a.append(np.asarray(result.accepted, dtype=np.int64))
        out_t.append(np.asarray(result.token, dtype=np.int64))
        out_b.append(np.asarray(result.is_bonus, dtype=np.bool_))
    return np.concatenate(out_a), np.concatenate(out_t), np.concatenate(out_b)


def judge_case(batch: BatchVerifier, case: LlmCase, seed: int, verdicts: Verdicts) -> None:
    """Probe one case; append what is wrong to ``verdicts`` (protocol and law separately)."""
    paths = paths_of(case)
    uniforms = case_probes(case, paths, seed)
    verdicts.cases += 1
    verdicts.probes += uniforms.shape[0]
    try:
        accepted, token, is_bonus = evaluate(batch, case, uniforms)
    except Exception as exc:  # noqa: BLE001 - a broken verifier must not crash the gate
        verdicts.errors.append(f"{case.name}: raised {type(exc).__name__}: {exc}")
        return
    want_a, want_t = protocol_verdicts(paths, uniforms)
    k = case.k
    wrong = (accepted != want_a) | (token != want_t) | (is_bonus != (want_a == k))
    if np.any(wrong):
        i = int(np.flatnonzero(wrong)[0])
        verdicts.protocol.append(
            f"{case.name} {list(case.tags)}: u={uniforms[i].tolist()[:3]}..{uniforms[i, k]!r}: protocol "
            f"({int(want_a[i])}, {int(want_t[i])}), verifier ({int(accepted[i])}, {int(token[i])}, bonus={bool(is_bonus[i])}) "
            f"[{int(wrong.sum())} of {wrong.shape[0]} probes differ]"
        )
    law = _acceptance_law(case, paths, uniforms, accepted) or _draw_law(
        case, paths, uniforms, accepted, token, verdicts
    )
    if law:
        verdicts.law.append(f"{case.name} {list(case.tags)}: {law}")


def _acceptance_law(
    case: LlmCase, paths: Paths, uniforms: npt.NDArray[np.float64], accepted: npt.NDArray[np.int64]
) -> str:
    """Acceptance probability of each position, bounded by the probes that reach it."""
    k = case.k
    for i in range(k):
        p_x, q_x = float(paths.p_x[i]), float(paths.q_x[i])
        exact = 1.0 if p_x >= q_x else p_x / q_x
        prefix_ok = np.all(uniforms[:, :i] * paths.q_x[:i] < paths.p_x[:i], axis=1)  # protocol reaches i
        reached = prefix_ok & (accepted >= i)  # ... and so does the verifier
        if not np.any(reached):
            continue
        u, acc = uniforms[reached, i], accepted[reached] > i
        order = np.argsort(u, kind="stable")
        u, acc = u[order], acc[order]
        if np.any(acc[1:] & ~acc[:-1]):  # accept after a reject in u: not a threshold test
            continue
        lo = float(u[acc].max()) if np.any(acc) else 0.0
        hi = float(u[~acc].min()) if np.any(~acc) else 1.0
        if exact > hi + ACCEPT_SLACK or exact < lo - ACCEPT_SLACK:
            return f"position {i}: acceptance probability of draft {case.drafts[i]} is min(1, p/q) = {exact:.6g}, the verifier's lies in [{lo:.6g}, {hi:.6g}]"
    return ""


def _draw_law(
    case: LlmCase,
    paths: Paths,
    uniforms: npt.NDArray[np.float64],
    accepted: npt.NDArray[np.int64],
    token: npt.NDArray[np.int64],
    verdicts: Verdicts,
) -> str:
    """CDF bounds of each path's draw from monotone probes (see the module docstring)."""
    k, vocab = case.k, case.vocab
    slack = cdf_slack(vocab)
    want_a, _ = protocol_verdicts(paths, uniforms)
    for j in range(k + 1):
        rows = (want_a == j) & (accepted == j)
        if not np.any(rows):
            continue
        u, t = uniforms[rows, k], token[rows]
        order = np.argsort(u, kind="stable")
        u, t = u[order], t[order]
        if np.any((t < 0) | (t >= vocab)):
            return f"path {j}: token {int(t[(t < 0) | (t >= vocab)][0])} outside [0, {vocab})"
        if np.any(np.diff(t) < 0):
            verdicts.not_judged.append(f"{case.name} path {j}: draw not monotone in u")
            continue
        c = paths.cumsum[j]
        total = float(c[-1])
        upper = c[t] / total  # F(s)
        lower = np.where(t > 0, c[np.maximum(t - 1, 0)], 0.0) / total  # F(s-1)
        bad = (u > upper + slack) | (u < lower - slack)
        if np.any(bad):
            b = int(np.flatnonzero(bad)[0])
            off = max(float(u[b] - upper[b]), float(lower[b] - u[b]))
            return (
                f"path {j}: final u={float(u[b])!r} gave token {int(t[b])}, whose CDF cell is "
                f"[{float(lower[b]):.12g}, {float(upper[b]):.12g}): the verifier's CDF is off the law's by >= {off:.3g}"
            )
    return ""


def judge(
    batch: BatchVerifier, cases: Sequence[LlmCase], seed: int, verdict: str = "law", verdicts: Verdicts | None = None
) -> Verdicts:
    """Run the cases in order (small V first), resuming ``verdicts``, until ``verdict`` ("protocol"
    or "law") has failed or every case is done. So a protocol breach found early costs little, and
    a verifier that only breaks the protocol still has its law verdict judged on every case."""
    verdicts = verdicts if verdicts is not None else Verdicts()
    while verdicts.next_case < len(cases) and not verdicts.decided(verdict):
        judge_case(batch, cases[verdicts.next_case], seed, verdicts)
        verdicts.next_case += 1
    return verdicts
