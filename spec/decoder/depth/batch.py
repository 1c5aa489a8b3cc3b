"""The law at depth for batched engines: many requests, each with its own params and seed, in one call.

Serving stacks decode many requests at once, and a family of defects lives only there: a request's
params applied to every request of the batch, per-request seeds ignored so that requests share
one random stream, unseeded rows of a mixed batch sampled without their noise (vLLM #9441), greedy
rows of a mixed batch broken by a temperature sentinel (vLLM PR #27077), one request's rows or
draft scored for another (vLLM PR #3951), one engine-wide stream (TensorRT-LLM #19487). A test of
one request at a time never sees them. This test asks for whole generations through the batch op

    generate_batch(requests) -> [generation, ...]        (one per request, in order)

where each request (:class:`BatchRequest`) carries its OWN prompt, sampling params (and law
profile), max_tokens, min_tokens and seed (an int, or None: "unseeded", the engine's own
randomness), and judges:

- each request against its OWN target law: the requests of a call come from a few LANES (a lane:
  a prompt, a law and whether its requests are seeded; by default the case's law seeded, another
  temperature and top-p seeded, the case's law unseeded, and greedy), interleaved in the call, and
  each lane's generations are one depth test (:mod:`spec.decoder.depth.law`: the per-position PIT,
  log-score and EOG test-martingales by position bin and cycle event, structure, impossible tokens,
  reported logprobs, and its repeated-generations martingale), designed on a pilot of the same
  batch op for power 0.99 against a tempering of TV ``tv`` on ``fraction`` of positions, with its
  own looks and alpha spending. A lane of a deterministic law (greedy) has no statistic: each of
  its tokens must be the row's only one (as :func:`spec.decoder.depth.law.check_deterministic`).
  A request decoded with another request's params is judged against its own law and rejected
  there; one whose rows are another request's too;
- cross-request independence, beyond each lane's repeat test: under the null the requests of a
  call are independent, so at every position t the randomized PITs U_r,t of the requests alive
  there (in the call's order r) are i.i.d. uniform given everything before, and with
  w_r = U_r,t - 1/2 and C_r = sum_{s < r} w_s (fixed before w_r is drawn),

      M(lambda) = prod exp(lambda C_r w_r) / E[exp(lambda C_r W)],   E[exp(c W)] = sinh(c/2) / (c/2),

  is a test-martingale for every lambda (W uniform on [-1/2, 1/2], the exact moment generating
  function), and so is their mean over a grid of both signs. It rejects at alpha_x when the mean
  reaches 1/alpha_x (Ville's inequality, at any call). Requests that share a random stream (a seed
  ignored, one stream for all, an unseeded request on a seeded one's stream) draw with the same
  uniforms, so their tokens and PITs move together whatever their params: C_r w_r drifts upward.
  The lanes' own repeat martingales see the same defect as identical generations where two
  requests have the same prompt and params, and lanes of one law (the seeded and unseeded lanes of
  the case's law) share one more repeat martingale (:class:`SharedRepeats`): a request drawn on the
  stream of another lane's request repeats it. The PIT martingale mixes two forms with equal
  weight: C_r the previous request's w alone (a stream handed on to the next request) and the sum
  over all earlier ones (one stream for many); the run goes on until it detects a correlation
  ``cross_rho`` (0.1) between neighbouring requests at power ~0.99. A speculative decoder consumes
  its stream by the drafts it verifies, so two requests of DIFFERENT params on one stream fall out
  of step at their first differing draft and their PITs decouple: measured on the tiny model, a
  request on its neighbour's (other params) stream gave z = +3.1 over 1,916 pairs, not rejected.

One alpha budget: ``CROSS_SHARE`` of alpha to cross-request independence (half to the PIT
martingale, half to the shared-law repeat martingales, split over them), the rest split evenly
over the lanes (Bonferroni), each lane's share spent as the depth test spends its own (looks,
collision share, test-martingales over all looks). A correct engine fails with probability <=
alpha. The pilot (its own seeds, never judged) fixes every lane's design, the number of requests
of each lane per call (so that every lane reaches its design's tokens after the same number of
calls) and the looks before the test's first call; seeds are fixed by the run seed, the call, the
lane and the request's index, never by the answers, so a run is reproducible.

Requests joining mid-decode: an engine that declares ``batch_slots`` (an int: at most that many
requests decoded at once, the rest joining as others end) gets calls of more requests than slots
where the design allows, and the verdict says how many joined mid-decode; every joined request is
judged like the others.

What it cannot see: anything the depth test cannot see, lane by lane (a deviation that keeps each
per-context PIT and log score, one smaller than the design's); a dependence between requests that
leaves their PITs uncorrelated at equal positions (a stream shared with a shift of positions, or a
dependence only in the tokens' order within a probability class); reproducibility (the same seed
giving the same output is not asked: two requests never get the same seed); and, for an engine
without ``batch_slots``, whether requests join mid-decode at all.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import DeterministicLaw, Unsupported, UsageError, VerispecError
from verispec.reference.sampling import SamplingParams
from verispec.spec import answers
from verispec.spec.answers import shown
from verispec.spec.decoder.depth.blocks import checked_block
from verispec.spec.decoder.depth.generation import DepthCase, Generation
from verispec.spec.decoder.depth.law import (
    COLLISION_SHARE,
    LOGPROB_TOL,
    LOOKS,
    MAX_PILOT_ROWS,
    DepthVerdict,
    Look,
    RepeatSums,
    Sums,
    cycles_error,
    design_of,
    events_of,
    judge_look,
    logprob_error,
    look_alphas,
    martingale_alpha,
    refuse_unbounded,
    score,
)
from verispec.spec.decoder.depth.power import PowerDesign
from verispec.spec.decoder.depth.sizing import ProgressSink, duration
from verispec.spec.decoder.laws.common import Profile
from verispec.spec.decoder.types import ForcedRows
from verispec.spec.sequential_state import State, StateVerdict
from verispec.spec.statistics import POWER

F64 = npt.NDArray[np.float64]

CROSS_SHARE = 0.1  # of the alpha: the cross-request martingale; the rest over the lanes
# the run goes on (past the lanes' designs if need be) until the cross-request martingale detects a
# PIT correlation of this size between neighbouring requests with power ~0.99
CROSS_RHO = 0.1
PILOT_CALLS = 4  # calls of the pilot (design only, never judged)
PILOT_PER_LANE = 4  # requests of each lane in a pilot call
CALL_SIZE = 48  # at most this many requests of statistical lanes in one call
DETERMINISTIC_GENERATIONS = 48  # a deterministic lane's generations over the run (at least one a call)
MAX_SEED = 2**63 - 1
# lambda of the cross-request martingale: a pairwise PIT correlation rho drifts C_r w_r by about
# rho (r - 1) / 12, best met by lambda ~ 12 rho / (r - 1)-ish; the grid spans rho from ~0.01 to 1
# at the call sizes used, both signs (positively and negatively coupled streams).
CROSS_LAMBDAS = np.array([sign * 2.0**e for sign in (1.0, -1.0) for e in range(-7, 3)], dtype=np.float64)


# -----------------------------------------------------------------------------------------------
# the op


@dataclass(frozen=True)
class BatchRequest:
    """One request of a batch: its own prompt, params (``law``: a non-default law profile, which the
    engine must sample instead of ``params``), max_tokens, min_tokens and seed (None: unseeded)."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    max_tokens: int
    seed: int | None
    min_tokens: int = 0
    law: Profile | None = None


class BatchEngine(Protocol):
    """``generate_batch(requests)``: one whole generation per request, in the requests' order, each a
    list of ids or ``{"ids": [..], "cycles": [[drafted, accepted], ..], "logprobs": [..]}`` (the
    ``generate`` op's generation). Optional attribute ``batch_slots`` (int): at most that many
    requests are decoded at once and the rest join mid-decode as others end."""

    def generate_batch(self, requests: Sequence[BatchRequest]) -> Sequence[Any]: ...


def request_json(request: BatchRequest) -> dict[str, Any]:
    """The wire form of one request (docs/checking-decoders.md, "Batched engines")."""
    from verispec.spec.vectors.wire import params_to_json

    out: dict[str, Any] = {
        "prompt_ids": [int(t) for t in request.prompt_ids],
        "params": params_to_json(request.params),
        "max_tokens": int(request.max_tokens),
        "min_tokens": int(request.min_tokens),
        "seed": None if request.seed is None else int(request.seed),
    }
    if request.law is not None and request.law.name != "verispec":
        out["law"] = request.law.to_json()
    return out


def _int_field(obj: Mapping[str, Any], name: str, low: int, high: int, where: str) -> int:
    if name not in obj:
        raise UsageError(f"{where} lacks field {name!r}")
    value = obj[name]
    if not answers.is_integer(value) or not low <= value <= high:
        raise UsageError(f"{where}.{name} must be an integer in [{low}, {high}], got {shown(value)}")
    return int(value)


def request_from_json(obj: Any, where: str = "request") -> BatchRequest:
    """Inverse of :func:`request_json`, every field exactly of its type (an engine's reader of the
    op: a prompt id ``5.0`` or ``"5"``, a seed ``true`` or a missing field is refused, not converted)."""
    from verispec.spec.decoder.laws import from_json
    from verispec.spec.vectors.wire import params_from_json

    if not isinstance(obj, Mapping):
        raise UsageError(f"{where} must be an object, got {shown(obj)}")
    prompt = obj.get("prompt_ids")
    if not isinstance(prompt, list) or not prompt or not all(answers.is_integer(t) and t >= 0 for t in prompt):
        raise UsageError(f"{where}.prompt_ids must be a non-empty list of non-negative integers, got {shown(prompt)}")
    seed = obj.get("seed", "missing")
    if seed == "missing":
        raise UsageError(f"{where} lacks field 'seed' (an integer, or null: unseeded)")
    if seed is not None and (not answers.is_integer(seed) or not 0 <= seed <= MAX_SEED):
        raise UsageError(f"{where}.seed must be an integer in [0, 2**63 - 1] or null, got {shown(seed)}")
    params = obj.get("params")
    if not isinstance(params, Mapping):
        raise UsageError(f"{where}.params must be an object, got {shown(params)}")
    law = obj.get("law")
    return BatchRequest(
        tuple(int(t) for t in prompt),
        params_from_json(params),
        _int_field(obj, "max_tokens", 1, 2**31 - 1, where),
        None if seed is None else int(seed),
        _int_field(obj, "min_tokens", 0, 2**31 - 1, where),
        None if law is None else from_json(law),
    )


def checked_batch(raw: Any, requests: Sequence[BatchRequest], vocab: int | None) -> list[Generation]:
    """The engine's answer to ``requests``: exactly one generation per request, each read by the one
    reader of generations (:func:`spec.answers.generation`: exact JSON integer ids in [0, vocab),
    cycles, logprobs); ExternalError naming the item otherwise."""
    if isinstance(raw, Mapping):
        raw = raw.get("generations")
    return checked_block(raw, len(requests), vocab)


# -----------------------------------------------------------------------------------------------
# lanes


@dataclass(frozen=True)
class Lane:
    """The requests of one kind: a case (prompt, params, law, max_tokens) and whether they are seeded."""

    name: str
    case: DepthCase
    seeded: bool = True

    def request(self, seed: int) -> BatchRequest:
        c = self.case
        return BatchRequest(
            tuple(c.prompt_ids), c.params, c.max_tokens, seed if self.seeded else None, c.min_tokens, c.law
        )


def lane_profiles(profile: Profile, greedy: bool = True) -> list[tuple[str, Profile, bool]]:
    """The default lanes' (name, law, seeded) for a case of law ``profile``: the case's law seeded,
    another temperature (0.6 x) and top-p 0.9 seeded, the case's law unseeded, and (``greedy``)
    its greedy law seeded; the prompt is the case's for all."""
    from verispec.spec.decoder.laws import MODULES

    module: Any = MODULES[profile.name]
    params = profile.params
    if profile.name == "verispec":
        s = params.sampling
        other = replace(params, sampling=replace(s, temperature=0.6 * (s.temperature or 1.0), top_p=0.9))
        greedy_params = replace(params, sampling=replace(s, temperature=0.0))
    elif profile.name == "llama.cpp":
        other = replace(params, temp=0.6 * (params.temp if params.temp > 0 else 1.0), top_p=0.9)
        greedy_params = replace(params, temp=0.0)
    elif profile.name == "transformers":
        other = replace(params, temperature=0.6 * params.temperature, top_p=0.9)
        greedy_params = replace(params, do_sample=False)
    else:
        other = replace(params, temperature=0.6 * (params.temperature or 1.0), top_p=0.9)
        greedy_params = replace(params, temperature=0.0)
    lanes = [
        ("the case's law, seeded", profile, True),
        ("temperature x 0.6 and top-p 0.9, seeded", module.profile(other), True),
        ("the case's law, unseeded", profile, False),
    ]
    if greedy:
        lanes.append(("greedy, seeded", module.profile(greedy_params), True))
    return lanes


def default_lanes(case: DepthCase, profile: Profile, greedy: bool = True) -> list[Lane]:
    """:func:`lane_profiles` as lanes on ``case``'s prompt, max_tokens, EOG ids and vocabulary."""
    out = []
    for name, law, seeded in lane_profiles(profile, greedy):
        lane_case = replace(case, params=law.legacy, law=None if law.name == "verispec" else law)
        out.append(Lane(name, lane_case, seeded))
    return out


def request_seed(run_seed: int, phase: int, call: int, lane: int, index: int) -> int:
    """The seed of request ``index`` of lane ``lane`` in call ``call`` of a phase (1: pilot, 2: test):
    distinct for distinct tuples, with probability 1 - 2^-60 or so, and fixed before any answer."""
    state = np.random.SeedSequence([run_seed & MAX_SEED, phase, call, lane, index]).generate_state(2, np.uint64)
    return int(state[0] >> np.uint64(1))


def call_requests(lanes: Sequence[Lane], per_lane: Sequence[int]) -> list[int]:
    """The lanes of a call's requests, in the call's order: interleaved (index-major), so every lane
    shares passes with every other."""
    order: list[int] = []
    for index in range(max(per_lane, default=0)):
        order.extend(lane for lane in range(len(lanes)) if index < per_lane[lane])
    return order


# -----------------------------------------------------------------------------------------------
# the cross-request martingale


def log_sinhc(x: F64) -> F64:
    """log(sinh(x) / x), 0 at 0, stable for large |x|."""
    ax = np.abs(x)
    small = ax < 1e-4
    safe = np.where(small, 1.0, ax)
    big = ax + np.log1p(-np.exp(-2.0 * safe)) - math.log(2.0) - np.log(safe)
    return np.where(small, ax * ax / 6.0, big)


@dataclass
class CrossSums:
    """The cross-request test-martingale (module docstring) over the calls so far, in two forms mixed
    with equal weight: C_r the previous alive request's w alone (neighbours in the call: a stream
    handed on to the next request), and the sum over all earlier alive requests (one stream for many)."""

    log_terms: F64 = field(default_factory=lambda: np.zeros((2, CROSS_LAMBDAS.shape[0])))
    drift: F64 = field(default_factory=lambda: np.zeros(2))  # sum of C_r w_r, per form
    variance: F64 = field(default_factory=lambda: np.zeros(2))  # its null variance: sum of C_r^2 / 12
    pairs: F64 = field(default_factory=lambda: np.zeros(2))  # request pairs compared at an equal position

    def add_call(self, pits: Sequence[F64]) -> None:
        """One call's PITs, one array per request in the call's order (NaN: a position not judged)."""
        longest = max((len(p) for p in pits), default=0)
        for t in range(longest):
            alive = [float(p[t]) for p in pits if t < len(p) and not math.isnan(float(p[t]))]
            if len(alive) < 2:
                continue
            w = np.asarray(alive) - 0.5
            current = w[1:]  # each request after the first, against what came before it at t
            n = current.shape[0]
            for form, (c, pairs) in enumerate(((w[:-1], n), (np.cumsum(w)[:-1], n * (n + 1) // 2))):
                x = np.outer(CROSS_LAMBDAS, c)  # [G, n]: lambda C_r
                self.log_terms[form] += (x * current).sum(axis=1) - log_sinhc(x / 2.0).sum(axis=1)
                self.drift[form] += float(c @ current)
                self.variance[form] += float(c @ c) / 12.0
                self.pairs[form] += pairs

    def log_evidence(self) -> float:
        top = float(self.log_terms.max())
        return top + math.log(float(np.mean(np.exp(self.log_terms - top))))

    def strongest(self) -> int:
        """The form (0: neighbours, 1: all earlier requests) with the larger evidence."""
        return int(np.argmax(self.log_terms.max(axis=1)))

    def rejects(self, alpha: float) -> bool:
        return self.log_evidence() >= -math.log(alpha)

    def z(self, form: int | None = None) -> float:
        f = self.strongest() if form is None else form
        return float(self.drift[f] / math.sqrt(self.variance[f])) if self.variance[f] > 0 else 0.0

    def detectable_correlation(self, alpha: float) -> float:
        """The PIT correlation rho between neighbouring requests that the martingale detects with
        power ~0.99 at the pairs seen (its neighbours form alone, normal approximation: drift
        rho pairs / 12 against sd sqrt(V), the best lambda of the grid within a factor 2 of the
        optimum costs at most 6% of the threshold): inf before any pair."""
        if self.pairs[0] == 0 or self.variance[0] <= 0:
            return math.inf
        threshold = math.log(self.log_terms.size / alpha)
        needed = 1.07 * math.sqrt(2.0 * threshold * self.variance[0]) + 2.326 * math.sqrt(self.variance[0])
        return float(12.0 * needed / self.pairs[0])

    def describe(self, alpha: float) -> str:
        return (
            f"requests not independent: the PITs of the requests of a call move together "
            f"({'neighbouring requests' if self.strongest() == 0 else 'each request with all earlier ones'}: "
            f"z={self.z():+.2f} over {int(self.pairs[self.strongest()]):,} request pairs at equal positions; evidence e^{self.log_evidence():.1f} >= 1/alpha = "
            f"{1 / alpha:.3g}): a shared or reused random stream?"
        )


@dataclass
class SharedRepeats:
    """Repeated generations across lanes of one law (the same prompt, law, max_tokens and min_tokens:
    the default seeded and unseeded lanes): each lane's own repeat martingale sees requests of the
    lane only, so a request drawn on the stream of a request of ANOTHER lane of its law is seen here,
    by the same martingale (:class:`spec.decoder.depth.law.RepeatSums`) on the pooled generations."""

    lanes: tuple[int, ...]
    seen: dict[tuple[int, ...], float] = field(default_factory=dict)
    repeats: RepeatSums = field(default_factory=RepeatSums)

    def add(self, ids: tuple[int, ...], logp: F64) -> None:
        self.repeats.add(ids in self.seen, self.repeats.generations + 1)
        if ids not in self.seen:
            self.seen[ids] = math.exp(float(np.nansum(logp)))
            self.repeats.seen_mass += self.seen[ids]


def shared_law_groups(lanes: Sequence[Lane]) -> list[SharedRepeats]:
    """The lanes of one law, two or more (:class:`SharedRepeats`)."""
    groups: dict[Any, list[int]] = {}
    for i, lane in enumerate(lanes):
        c = lane.case
        law = None if c.law is None else (c.law.name, repr(c.law.params))
        groups.setdefault((c.prompt_ids, repr(c.params), law, c.max_tokens, c.min_tokens), []).append(i)
    return [SharedRepeats(tuple(g)) for g in groups.values() if len(g) > 1]


# -----------------------------------------------------------------------------------------------
# the run


@dataclass(frozen=True)
class LaneVerdict:
    name: str
    seeded: bool
    deterministic: bool
    verdict: DepthVerdict
    per_call: int


@dataclass(frozen=True)
class BatchVerdict(StateVerdict):
    state: State
    lanes: tuple[LaneVerdict, ...]
    alpha: float
    power: float  # the smallest lane power reached against its design's deviation
    where: str
    detail: str
    calls: int
    requests_per_call: int
    joined: int  # requests that joined mid-decode (an engine declaring batch_slots)
    cross_pairs: int = 0
    cross_z: float = 0.0
    cross_rho: float = math.inf  # the pairwise PIT correlation detectable at the pairs seen (power ~0.99)
    design_tokens: int = 0  # the statistical lanes' design tokens, summed
    tokens: int = 0
    generations: int = 0


@dataclass
class _LaneState:
    lane: Lane
    alpha: float
    plan: PowerDesign | None  # None: a deterministic law
    per_call: int = 1
    sums: Sums = field(default_factory=Sums)
    looks: list[Look] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.plan is None or len(self.looks) >= LOOKS


def check_batch(
    engine: Any,
    rows_of: ForcedRows,
    lanes: Sequence[Lane],
    *,
    alpha: float,
    tv: float = 0.05,
    fraction: float = 0.1,
    seed: int = 20_261_130,
    budget_s: float | None = None,
    max_calls: int | None = None,
    pilot_calls: int = PILOT_CALLS,
    pilot_per_lane: int = PILOT_PER_LANE,
    call_size: int = CALL_SIZE,
    cross_rho: float = CROSS_RHO,
    progress: ProgressSink | None = None,
) -> BatchVerdict:
    """The batch form of the depth test (module docstring) on ``engine.generate_batch``."""
    if not lanes:
        raise UsageError("the batch test needs at least one lane")
    if not callable(getattr(engine, "generate_batch", None)):
        raise UsageError("the batch test needs an engine with generate_batch (the generate_batch op)")
    say = progress or (lambda line, milestone: None)
    started = time.monotonic()
    lane_alpha = alpha * (1.0 - CROSS_SHARE) / len(lanes)
    shared = shared_law_groups(lanes)
    cross_alpha = alpha * CROSS_SHARE / (2.0 if shared else 1.0)  # half to the PIT martingale, half to shared repeats
    shared_alpha = alpha * CROSS_SHARE / 2.0 / max(len(shared), 1)
    vocab = next((lane.case.vocab for lane in lanes if lane.case.vocab is not None), None)
    declared: Any = getattr(engine, "batch_slots", None)
    slots = int(declared) if answers.is_integer(declared) and int(declared) > 0 else None

    def ask(requests: list[BatchRequest]) -> list[Generation]:
        return checked_batch(engine.generate_batch(requests), requests, vocab)

    # the pilot: every lane's rows and lengths, structure checked (never judged statistically)
    rng = np.random.default_rng([seed, 1])
    rows: list[list[F64]] = [[] for _ in lanes]
    lengths: list[list[int]] = [[] for _ in lanes]
    states = [_LaneState(lane, lane_alpha, None) for lane in lanes]
    try:
        for call in range(pilot_calls):
            order = call_requests(lanes, [pilot_per_lane] * len(lanes))
            counts = [0] * len(lanes)
            requests = []
            for lane in order:
                requests.append(lanes[lane].request(request_seed(seed, 1, call, lane, counts[lane])))
                counts[lane] += 1
            for lane, gen in zip(order, ask(requests)):
                scored = score(rows_of, lanes[lane].case, gen.ids, rng, keep_rows=True)
                broken = scored.broken or cycles_error(gen) or logprob_error(gen, scored, LOGPROB_TOL)
                if broken:
                    return _failed(
                        states, alpha, f"lane {lanes[lane].name!r}, pilot call {call + 1}: {broken}", 0, 0, 0
                    )
                rows[lane].extend(scored.rows)
                lengths[lane].append(len(gen.ids))
    except Unsupported as exc:  # a program without the optional op: a usage error, as for every optional op
        raise UsageError(f"the batch test needs the generate_batch op: {exc}") from None
    except VerispecError as exc:  # a decoder that breaks on a valid batch fails the case
        return _failed(states, alpha, f"the pilot failed: {type(exc).__name__}: {str(exc)[:200]}", 0, 0, 0)

    generations_needed: list[float] = []
    for i, state in enumerate(states):
        lane_rows = rows[i]
        if len(lane_rows) > MAX_PILOT_ROWS:
            picked = np.sort(rng.choice(len(lane_rows), MAX_PILOT_ROWS, replace=False))
            lane_rows = [lane_rows[int(j)] for j in picked]
        mean_length = max(1.0, float(np.mean(lengths[i]))) if lengths[i] else 1.0
        try:
            if not lane_rows:
                raise DeterministicLaw("no row")
            state.plan = design_of(lane_rows, lane_alpha, tv, fraction)
        except DeterministicLaw:
            state.plan = None
            generations_needed.append(0.0)
            continue
        refuse_unbounded(state.plan)
        state.targets = [math.ceil(state.plan.tokens / 2 ** (LOOKS - 1 - j)) for j in range(LOOKS)]
        state.sums = Sums(score_log_weights=state.plan.score_log_weights)
        generations_needed.append(state.plan.tokens / mean_length)
    total = sum(generations_needed)
    calls_planned = max(1, math.ceil(total / call_size)) if total else 1
    if slots is not None:  # enough requests a call that some join mid-decode, where the design allows
        calls_planned = max(1, min(calls_planned, math.ceil(total / (2 * slots)))) if total else 1
    for state, needed in zip(states, generations_needed):
        if state.plan is None:
            state.per_call = max(1, min(8, math.ceil(DETERMINISTIC_GENERATIONS / calls_planned)))
        else:
            state.per_call = max(1, math.ceil(needed / calls_planned))
    per_call = [s.per_call for s in states]
    size = sum(per_call)
    design_tokens = sum(s.plan.tokens for s in states if s.plan is not None)
    say(
        f"batch design: {len(lanes)} lanes, {size} requests a call ({', '.join(f'{s.lane.name}: {s.per_call}' for s in states)}), "
        f"~{calls_planned} calls; {design_tokens:,} design tokens for power {POWER} vs TV {tv} on {fraction:.0%} of "
        f"positions per lane, alpha={alpha:.2g} ({CROSS_SHARE:.0%} to cross-request independence, run until it detects "
        f"a PIT correlation >= {cross_rho:g} between neighbouring requests at power ~0.99)"
        + (f"; {max(size - slots, 0)} requests a call join mid-decode ({slots} slots)" if slots is not None else ""),
        True,
    )

    # the test
    rng = np.random.default_rng([seed, 2])
    cross = CrossSums()
    joined = 0
    call = 0
    while not all(s.done for s in states) or cross.detectable_correlation(cross_alpha) > cross_rho:
        out_of_time = budget_s is not None and time.monotonic() - started > budget_s
        if out_of_time or (max_calls is not None and call >= max_calls):
            return _finish(
                states,
                "inconclusive",
                alpha,
                "budget ended before the design's tokens",
                call,
                size,
                joined,
                cross,
                cross_alpha,
            )
        order = call_requests(lanes, per_call)
        counts = [0] * len(lanes)
        requests = []
        for lane in order:
            requests.append(lanes[lane].request(request_seed(seed, 2, call, lane, counts[lane])))
            counts[lane] += 1
        try:
            gens = ask(requests)
        except VerispecError as exc:
            return _finish(
                states,
                "failed",
                alpha,
                f"the engine raised {type(exc).__name__}: {str(exc)[:200]}",
                call,
                size,
                joined,
                cross,
                cross_alpha,
            )
        call += 1
        joined += max(len(requests) - slots, 0) if slots is not None else 0
        pits: list[F64] = []
        logps: list[F64 | None] = []  # None: a broken generation (failed below)
        for lane, gen in zip(order, gens):
            state = states[lane]
            scored = score(rows_of, state.lane.case, gen.ids, rng)
            scored.broken = scored.broken or cycles_error(gen) or logprob_error(gen, scored, LOGPROB_TOL)
            state.sums.add(gen.ids, scored, events_of(gen), state.alpha * COLLISION_SHARE, state.lane.case.eog)
            pit = scored.pit.copy()
            pit[np.isnan(scored.logp)] = math.nan  # a near-tie: not judged
            pits.append(pit)
            logps.append(None if scored.broken else scored.logp)
        for group in shared:
            for lane, gen, logp in zip(order, gens, logps):
                if lane in group.lanes and logp is not None:
                    group.add(gen.ids, logp)
            if group.repeats.rejects(shared_alpha):
                where = (
                    f"lanes {', '.join(repr(lanes[i].name) for i in group.lanes)} together: "
                    + group.repeats.describe(shared_alpha)
                )
                return _finish(states, "failed", alpha, where, call, size, joined, cross, cross_alpha)
        for state in states:
            if state.sums.broken or state.sums.collision:
                why = state.sums.broken or state.sums.collision
                return _finish(
                    states, "failed", alpha, f"lane {state.lane.name!r}: {why}", call, size, joined, cross, cross_alpha
                )
        cross.add_call(pits)
        if cross.rejects(cross_alpha):
            return _finish(states, "failed", alpha, cross.describe(cross_alpha), call, size, joined, cross, cross_alpha)
        for state in states:
            if state.plan is None:
                continue
            alphas = look_alphas(state.alpha)
            while len(state.looks) < LOOKS and state.sums.overall.tokens >= state.targets[len(state.looks)]:
                look = judge_look(state.sums, alphas[len(state.looks)], state.lane.case, martingale_alpha(state.alpha))
                state.looks.append(look)
                if look.rejected:
                    where = f"lane {state.lane.name!r}: {look.where}"
                    return _finish(states, "failed", alpha, where, call, size, joined, cross, cross_alpha)
        say(
            f"batch: call {call} of ~{calls_planned}, {sum(s.sums.overall.tokens for s in states):,} tokens judged, "
            f"elapsed {duration(time.monotonic() - started)}",
            False,
        )
    return _finish(states, "passed", alpha, "", call, size, joined, cross, cross_alpha)


def _lane_depth_verdict(state: State, plan: PowerDesign, lane: _LaneState) -> DepthVerdict:
    """A lane's depth verdict (spec/decoder/depth/law.py's), as the depth test states one."""
    sums = lane.sums
    detail = lane.looks[-1].detail if lane.looks else f"{sums.overall.tokens} tokens in {sums.generations} generations"
    return DepthVerdict(
        state,
        plan,
        sums.overall.tokens,
        sums.generations,
        lane.alpha,
        plan.power_at(sums.overall.tokens),
        "",
        detail,
        tuple(lane.looks),
        tuple(sums.near_ties),
    )


def _lane_verdicts(states: Sequence[_LaneState], state: State) -> tuple[LaneVerdict, ...]:
    out = []
    for s in states:
        plan = s.plan or PowerDesign(0, 0.0, 0.0, s.alpha, POWER, ((), ()))
        lane_state: State = state if s.plan is None or state != "passed" else "passed"
        out.append(
            LaneVerdict(
                s.lane.name,
                s.lane.seeded,
                s.plan is None,
                _lane_depth_verdict(lane_state, plan, s),
                s.per_call,
            )
        )
    return tuple(out)


def _failed(states: Sequence[_LaneState], alpha: float, where: str, calls: int, size: int, joined: int) -> BatchVerdict:
    detail = "failed in the pilot, before any test call (a structural break: no statistic spent)"
    return BatchVerdict("failed", _lane_verdicts(states, "failed"), alpha, 0.0, where, detail, calls, size, joined)


def _finish(
    states: Sequence[_LaneState],
    state: State,
    alpha: float,
    where: str,
    calls: int,
    size: int,
    joined: int,
    cross: CrossSums,
    cross_alpha: float,
) -> BatchVerdict:
    lanes = _lane_verdicts(states, state)
    statistical = [s for s in states if s.plan is not None]
    power = min((s.plan.power_at(s.sums.overall.tokens) for s in statistical if s.plan is not None), default=1.0)
    rho = cross.detectable_correlation(cross_alpha)
    parts = []
    for s in states:
        kind = (
            "deterministic: each token the row's only one"
            if s.plan is None
            else (
                f"{s.sums.overall.tokens:,} / {s.plan.tokens:,} tokens, looks {len(s.looks)}/{LOOKS}, power "
                f"{s.plan.power_at(s.sums.overall.tokens):.3f} vs TV {s.plan.tv}"
            )
        )
        parts.append(f"{s.lane.name} ({s.per_call} a call, {s.sums.generations} generations; {kind})")
    detail = (
        f"{calls} calls of {size} requests"
        + (f", {joined} joined mid-decode" if joined else "")
        + f"; lanes: {'; '.join(parts)}; cross-request: neighbours z={cross.z(0):+.2f} over {int(cross.pairs[0]):,} pairs, "
        + f"all earlier z={cross.z(1):+.2f}, "
        + (f"detects a pairwise PIT correlation >= {rho:.3f} (power ~0.99)" if math.isfinite(rho) else "no pairs")
    )
    return BatchVerdict(
        state,
        lanes,
        alpha,
        power,
        where,
        detail,
        calls,
        size,
        joined,
        int(cross.pairs[0]),
        cross.z(0),
        rho,
        sum(s.plan.tokens for s in statistical if s.plan is not None),
        sum(s.sums.overall.tokens for s in states),
        sum(s.sums.generations for s in states),
    )


def verdict_json(verdict: BatchVerdict) -> dict[str, Any]:
    return {
        "passed": verdict.passed,
        "state": verdict.state,
        "exit_status": verdict.exit_status,
        "alpha": verdict.alpha,
        "power": round(verdict.power, 6),
        "where": verdict.where,
        "detail": verdict.detail,
        "calls": verdict.calls,
        "requests_per_call": verdict.requests_per_call,
        "joined_mid_decode": verdict.joined,
        "tokens": verdict.tokens,
        "generations": verdict.generations,
        "design_tokens": verdict.design_tokens,
        "cross": {
            "pairs": verdict.cross_pairs,
            "z": round(verdict.cross_z, 6),
            "detectable_correlation": round(verdict.cross_rho, 6) if math.isfinite(verdict.cross_rho) else None,
        },
        "lanes": [
            {
                "name": lane.name,
                "seeded": lane.seeded,
                "deterministic": lane.deterministic,
                "per_call": lane.per_call,
                "tokens": lane.verdict.tokens,
                "generations": lane.verdict.generations,
                "design_tokens": lane.verdict.design.tokens,
                "power": round(lane.verdict.power, 6),
                "tv": lane.verdict.design.tv,
            }
            for lane in verdict.lanes
        ],
    }
