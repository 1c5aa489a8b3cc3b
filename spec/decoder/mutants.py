"""A small speculative decode loop with named pipeline bugs: the mutant decoders of check-decoder.

Bugs that live outside the accept/reject function (a draft law built from the wrong processors, a
bonus from the wrong row, a rollback that keeps a rejected draft's K,V, rows computed without the
drafted history, penalties that count rejected drafts) are invisible to ``verispec check``, which
hands the verifier correct rows. ``verispec check-decoder`` sees them in the law of the first
tokens. This module is the loop of :mod:`reference.decode` written out small, on a target given
as ``logits_of(prefix)`` with an explicit KV cache (the ids whose K,V it holds: a stale entry
changes the next logits exactly as a real cache would), with one switch per bug.

``DecoderBugs()`` (no bug) is a correct decoder; :func:`catalogue` lists the mutants.
:data:`DEPTH_MUTANTS` are the bug classes of the public catalogue that show late or only with
processors on (penalties counted one token a cycle, min_tokens counted in cycles, EOS inside an
accepted span at max_tokens, cache positions advanced by one a cycle, min_p/logit_bias skipped on
verified rows, penalties dropped when speculating, top-k and top-p in the other order, two
requests on one random stream, a rollback not done, a q that is not the law the draft was drawn
from, a bonus token's K,V dropped, logprobs reported as 0.0), each with its upstream issue; :meth:`LoopDecoder.generate` gives whole generations with
their cycles and logprobs for the depth test (:mod:`spec.decoder.depth.law`), and
:class:`DesignDeviation` is that test's design alternative. Correct but different decoders: a
greedy draft (one-hot q) and sample-and-match verification (``verify="match"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams, sample, target_distribution
from verispec.reference.speculative import verify_greedy, verify_sampled
from verispec.spec.decoder.depth.power import beta_at_tv, tempered
from verispec.spec.decoder.first_tokens import CachedLaw, LogitsOf, Prefix
from verispec.spec.decoder.laws.common import Profile

F64 = npt.NDArray[np.float64]


def _log(probability: float) -> float:
    """log p, -inf for a token of probability 0 (a mutant can emit one: the law test sees it)."""
    return math.log(probability) if probability > 0 else -math.inf


@dataclass(frozen=True)
class DecoderBugs:
    """Which single mistake the loop makes (the defaults: none)."""

    reported_q: str = "as_drawn"  # as_drawn | raw_softmax | target_params: the q handed to the verifier
    bonus_row: int = 0  # 0: p_k; -1: p_{k-1}
    rollback_extra: int = 0  # positions kept past the accepted ones when the cache is truncated
    rows_with_drafts: bool = True  # False: every target row from the logits after the history alone
    penalty_counts_rejected: bool = False  # the penalty history includes every drafted token
    stops_at_eog: bool = True  # False: decoding runs on past an end-of-generation token
    # -- bugs that show late (the depth test, spec/decoder/depth/law.py) --
    penalty_last_per_cycle: bool = False  # the penalty history gets one token a cycle (its last)
    min_tokens_in_cycles: bool = False  # EOG masked while fewer than min_tokens CYCLES are done
    length_before_eog: bool = False  # spans run past max_tokens; the length cut is made before the EOG check
    position_per_cycle: bool = False  # the span's first position advances by 1 a cycle, not by the tokens accepted
    verified_rows_unbiased: bool = False  # min_p and logit_bias applied to the bonus row only
    shared_stream: bool = False  # two consecutive requests draw from one random stream
    bonus_kv_dropped: bool = False  # after a full acceptance the bonus token's K,V is never written
    logprobs_zero: bool = False  # every token of a speculative cycle reported with logprob 0.0
    penalties_dropped_when_speculating: bool = False  # a cycle's rows without the repeat penalty and logit_bias
    top_p_on_unfiltered_law: bool = (
        False  # a cycle's rows: top-p cutoff on the law before top-k, intersected with top-k
    )


Positioned = Callable[[Prefix, Sequence[int]], Any]  # (ids, their positions) -> last logits row [V]


@dataclass(frozen=True)
class Traced:
    """One decode: the ids and each cycle's (drafted, accepted)."""

    ids: list[int]
    cycles: list[tuple[int, int]]
    logprobs: list[float] = field(default_factory=list)  # log p_t(x_t) of each id, as the loop reports it


@dataclass(frozen=True)
class LoopDecoder:
    """A speculative decoder (target ``logits_of``, the same model drafting with ``draft_params``)
    that returns the first m tokens; ``bugs`` selects a mutant. ``verify``: "rejection" (the
    accept/reject rule) or "match" (sample-and-match: each row's token drawn from p, drafts kept
    while they equal it; lossless too). ``positioned``: the target's logits at explicit positions
    (only the ``position_per_cycle`` mutant needs it). ``target``: a law profile of :mod:`spec.decoder.laws`
    the verified rows always follow (a correct decoder of another ecosystem); otherwise the profile
    it is asked for (``law=``), else THE target law of ``params``."""

    logits_of: LogitsOf
    draft_params: SamplingParams
    k: int = 2
    bugs: DecoderBugs = DecoderBugs()
    draft_logits_of: LogitsOf | None = None  # default: the target's logits (a self-draft)
    law: CachedLaw = field(default_factory=CachedLaw)  # THE target law, memoized
    eog: frozenset[int] = frozenset()  # end-of-generation ids: a decode stops after one
    verify: str = "rejection"
    positioned: Positioned | None = None
    target: Profile | None = None  # the target law this decoder really samples (None: the law it is asked for)

    def first_tokens(
        self, prompt: Sequence[int], params: SamplingParams, m: int, rng: np.random.Generator, k: int | None = None
    ) -> list[int]:
        """One decode of m tokens (``k`` drafts per cycle, default ``self.k``; 0: plain decoding)."""
        return self.decode(prompt, params, m, rng, k).ids

    def decode(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        m: int,
        rng: np.random.Generator,
        k: int | None = None,
        min_tokens: int = 0,
        law: Profile | None = None,
    ) -> Traced:
        """One decode of up to m tokens, EOG banned before ``min_tokens`` (with its cycles); the
        verified rows follow ``self.target`` or ``law`` when one is given (module docstring)."""
        bugs = self.bugs
        profile = self.target or law
        k = self.k if k is None else k
        draft_of = self.draft_logits_of or self.logits_of
        history = [int(t) for t in prompt]
        cache: list[int] = []  # the ids whose K,V the target cache holds
        positions: list[int] = []  # their positions (only the position mutant moves them)
        covered = 0  # history tokens the loop believes cached (> len(cache) once a bonus K,V is dropped)
        drafted_ever: list[int] = []
        penalty_history = list(history)  # the penalty mutant's history: one token a cycle
        out: list[int] = []
        cycles: list[tuple[int, int]] = []
        logprobs: list[float] = []
        while len(out) < m:
            want = k if bugs.length_before_eog else min(k, m - len(out) - 1)
            drafts: list[int] = []
            q_rows: list[F64] = []
            for _ in range(want):
                context = history + drafts
                logits = draft_of(tuple(context))
                q = self.law(logits, context, self.draft_params)
                drafts.append(self.law.draw(q, rng))
                q_rows.append(self._reported_q(q, logits, context, params))
            drafted_ever += drafts
            pending = history[covered:]
            span = pending + drafts
            start = len(cache) if not bugs.position_per_cycle or not cycles else len(prompt) + len(cycles) - 1
            span_positions = [start + i for i in range(len(span))]
            rows = self._rows(cache, positions, span, span_positions, len(pending), len(drafts))
            cache, positions, covered = cache + span, positions + span_positions, covered + len(span)
            seen = (
                history + drafted_ever
                if bugs.penalty_counts_rejected
                else penalty_history
                if bugs.penalty_last_per_cycle
                else history
            )
            if profile is not None:
                p = [profile(rows[i], prompt, out + drafts[:i]) for i in range(len(drafts) + 1)]
            else:
                p = [
                    self._target_law(
                        rows[i],
                        (seen + drafts[:i]) if not bugs.penalty_last_per_cycle else seen,
                        self._row_params(
                            params,
                            len(out) + i,
                            len(cycles),
                            min_tokens,
                            is_bonus=i == len(drafts),
                            speculative=bool(drafts),
                        ),
                        speculative=bool(drafts),
                    )
                    for i in range(len(drafts) + 1)
                ]
            before = len(history)
            accepted, emitted = self._verify(p, q_rows, drafts, params, rng)
            keep = min(covered, before + accepted + bugs.rollback_extra)
            offset = covered - len(cache)  # history tokens counted as cached without K,V (dropped bonuses)
            cache, positions, covered = cache[: keep - offset], positions[: keep - offset], keep
            if bugs.bonus_kv_dropped and drafts and accepted == len(drafts):
                covered += 1  # the bonus is counted as cached and never fed
            cycles.append((len(drafts), accepted))
            logprobs += [0.0 if bugs.logprobs_zero and drafts else _log(float(p[i][t])) for i, t in enumerate(emitted)]
            history += emitted
            penalty_history.append(emitted[-1])
            out += emitted
            if bugs.length_before_eog and len(out) >= m:
                return Traced(out[:m], cycles, logprobs[:m])
            end = next((i for i, t in enumerate(out) if t in self.eog), None)
            if end is not None and bugs.stops_at_eog:
                return Traced(out[: min(end + 1, m)], cycles, logprobs[: min(end + 1, m)])
        return Traced(out[:m], cycles, logprobs[:m])

    def _rows(
        self,
        cache: list[int],
        positions: list[int],
        span: list[int],
        span_positions: list[int],
        pending: int,
        drafts: int,
    ) -> list[Any]:
        """The target's logits rows [drafts + 1] for the span after the cache."""
        if self.bugs.position_per_cycle:
            if self.positioned is None:
                raise ValueError("the position mutant needs a target with explicit positions (positioned)")
            ids, where = cache + span, positions + span_positions
            return [
                self.positioned(tuple(ids[: len(cache) + j]), where[: len(cache) + j])
                for j in range(pending, pending + drafts + 1)
            ]
        if self.bugs.rows_with_drafts:
            return [self.logits_of(tuple(cache + span[:j])) for j in range(pending, len(span) + 1)]
        return [self.logits_of(tuple(cache + span[:pending]))] * (drafts + 1)

    def _target_law(self, row: Any, history: list[int], params: SamplingParams, speculative: bool) -> F64:
        """The law of a target row, as the mutant computes it (``top_p_on_unfiltered_law``: in a
        speculative cycle the top-p cutoff is taken on the law before top-k and intersected with
        the top-k set, the other order of the two filters; plain steps are right)."""
        if not (self.bugs.top_p_on_unfiltered_law and speculative and params.top_p < 1.0 and not params.greedy):
            return self.law(row, history, params)
        unfiltered = self.law(row, history, replace(params, top_k=0, top_p=1.0, min_p=0.0, temperature=1.0))
        order = np.lexsort((np.arange(unfiltered.shape[0]), -unfiltered))
        reached = np.flatnonzero(np.cumsum(unfiltered[order]) >= params.top_p)
        kept = order[: int(reached[0]) + 1 if reached.size else order.shape[0]]
        banned = {int(t): -math.inf for t in np.setdiff1d(np.arange(unfiltered.shape[0]), kept)}
        return self.law(
            row, history, replace(params, top_p=1.0, logit_bias={**dict(params.logit_bias or {}), **banned})
        )

    def _row_params(
        self,
        params: SamplingParams,
        position: int,
        cycle: int,
        min_tokens: int,
        is_bonus: bool,
        speculative: bool = True,
    ) -> SamplingParams:
        """THE target law's params at an output position (min_tokens bans EOG), as the mutant builds them."""
        if self.bugs.verified_rows_unbiased and not is_bonus:
            params = replace(params, min_p=0.0, logit_bias=None)
        if self.bugs.penalties_dropped_when_speculating and speculative:
            params = replace(params, repeat_penalty=1.0, logit_bias=None)
        masked = (cycle if self.bugs.min_tokens_in_cycles else position) < min_tokens
        if not masked or not self.eog:
            return params
        return replace(params, logit_bias={**dict(params.logit_bias or {}), **{int(e): -math.inf for e in self.eog}})

    def _verify(
        self, rows: list[F64], q_rows: list[F64], drafts: list[int], params: SamplingParams, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        """(accepted drafts, emitted tokens) of one cycle; ``rows``: the target law of each span row."""
        if not drafts:
            return 0, [self.law.draw(rows[0], rng)]  # as sample(): the memo's law row keeps its running sum
        p = np.stack(rows)
        if self.bugs.bonus_row:
            p = p.copy()
            p[-1] = p[-1 + self.bugs.bonus_row]
        if params.greedy:
            verdict = verify_greedy(p, drafts)
        elif self.verify == "match":
            for i in range(len(drafts) + 1):
                token = sample(p[i], rng)
                if i == len(drafts) or token != drafts[i]:
                    return i, drafts[:i] + [token]
        else:
            verdict = verify_sampled(p, np.stack(q_rows), drafts, rng.random(len(drafts) + 1).tolist())
        return verdict.accepted, drafts[: verdict.accepted] + [verdict.token]

    def _reported_q(self, q: F64, logits: Any, context: list[int], params: SamplingParams) -> F64:
        if self.bugs.reported_q == "raw_softmax":  # the processors the draft sampled with are lost
            return self.law(logits, context, SamplingParams())
        if self.bugs.reported_q == "target_params":  # the TARGET's processors applied to q
            return self.law(logits, context, params)
        return q

    def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int, law: Profile | None = None
    ) -> list[list[int]]:
        """n independent runs (the DecoderEngine interface of :mod:`spec.decoder.check`)."""
        rng = np.random.default_rng(seed)
        return [self.decode(prompt_ids, params, m, rng, law=law).ids for _ in range(n)]

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int = 0,
        law: Profile | None = None,
    ) -> list[dict[str, Any]]:
        """n independent whole generations with their cycles (the GenerationEngine interface of
        :mod:`spec.decoder.depth.law`); each request its own stream, or (``shared_stream``) one stream
        per two requests."""
        return self._generations(prompt_ids, params, max_tokens, n, seed, min_tokens, None, law)

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[dict[str, Any]]:
        """n whole generations with speculation off (k = 0: one target token a step, each request
        its own stream; two-sample mode at depth). Every bug of the loop lives in its speculative
        cycles, so the plain generations are correct for every mutant but ``stops_at_eog``."""
        return self._generations(prompt_ids, params, max_tokens, n, seed, min_tokens, 0, None)

    def _generations(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int,
        k: int | None,
        law: Profile | None,
    ) -> list[dict[str, Any]]:
        seeds = np.random.default_rng(seed).integers(2**63, size=n)
        shared = self.bugs.shared_stream and k != 0
        out = []
        for i in range(n):
            rng = np.random.default_rng(int(seeds[i - i % 2] if shared else seeds[i]))
            traced = self.decode(prompt_ids, params, max_tokens, rng, k, min_tokens=min_tokens, law=law)
            out.append({"ids": traced.ids, "cycles": [list(c) for c in traced.cycles], "logprobs": traced.logprobs})
        return out

    def sample_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int, law: Profile | None = None
    ) -> list[list[int]]:
        """n runs with speculation off (k = 0: one target token per step; two-sample mode)."""
        rng = np.random.default_rng(seed)
        return [self.decode(prompt_ids, params, m, rng, 0, law=law).ids for _ in range(n)]

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> Any:
        """The target's own plain logits after a prefix (``split_at``: the batch-shape variant,
        when the target offers one): the mutants' logits are correct, their loops are not."""
        prefix = tuple(int(t) for t in prefix_ids)
        split = getattr(self.logits_of, "split_row", None)
        return split(prefix, split_at) if split_at is not None and callable(split) else self.logits_of(prefix)

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        """Greedy decoding, with speculation (``self.k`` drafts, the draft greedy too) or without
        (the GreedyEngine interface)."""
        greedy = SamplingParams(temperature=0.0)
        decoder = replace(self, draft_params=greedy)
        return decoder.first_tokens(
            prompt_ids, greedy, max_tokens, np.random.default_rng(0), self.k if speculative else 0
        )


MUTANT_BUGS: dict[str, tuple[str, DecoderBugs]] = {
    "draft_q_from_wrong_processors": (
        "q reported as the raw softmax while the draft sampled with its processors",
        DecoderBugs(reported_q="raw_softmax"),
    ),
    "target_processors_applied_to_q": (
        "q recomputed with the target's params, not the draft's",
        DecoderBugs(reported_q="target_params"),
    ),
    "bonus_from_wrong_row": ("all drafts accepted: the bonus drawn from p_{k-1}", DecoderBugs(bonus_row=-1)),
    "rollback_off_by_one": ("the cache keeps the first rejected draft's K,V", DecoderBugs(rollback_extra=1)),
    "rows_without_drafted_history": (
        "every target row from the logits after the history alone",
        DecoderBugs(rows_with_drafts=False),
    ),
    "penalties_count_rejected_drafts": (
        "the repetition penalty counts every drafted token, rejected ones too",
        DecoderBugs(penalty_counts_rejected=True),
    ),
}

# Seen only where end-of-generation has real probability in the first m tokens (not in the six
# above, whose test prompt never ends early): decoding runs on past an EOG token.
EOG_MUTANT = ("ignores_end_of_generation", DecoderBugs(stops_at_eog=False))


# The bug classes of the public catalogue (../shared/research/peer_defects.md) that show only deep
# in a generation or only with processors on; the depth test (spec/decoder/depth/law.py) must reject each.
DEPTH_MUTANTS: dict[str, tuple[str, DecoderBugs]] = {
    "penalty_one_token_a_cycle": (
        "SGLang PR #33643: the penalizer is fed only output_ids[-1] per step, so the repetition "
        "penalty counts one token a cycle (its strength ~ nominal / accepted length)",
        DecoderBugs(penalty_last_per_cycle=True),
    ),
    "min_tokens_counted_in_cycles": (
        "SGLang PR #33643: min_new_tokens counts steps, not tokens: EOG stays masked ~L times too long",
        DecoderBugs(min_tokens_in_cycles=True),
    ),
    "eos_in_span_at_max_tokens": (
        "SGLang #31599 (PR #33758), vLLM PR #47616: the length cap is checked before stop/EOS, so an "
        "accepted span holding an EOG that crosses max_tokens emits the tokens after the EOG",
        DecoderBugs(length_before_eog=True),
    ),
    "cache_position_per_cycle": (
        "transformers #30042 (PR #30068): cache_position advanced by 1 per cycle, not by the number "
        "of tokens accepted: later tokens sit at wrong positions",
        DecoderBugs(position_per_cycle=True),
    ),
    "min_p_logit_bias_skipped_on_verified_rows": (
        "vLLM #42744 (also SGLang #10617): the rejection sampler runs only the non-argmax-invariant "
        "processors, so min_p and logit_bias act on the bonus row alone",
        DecoderBugs(verified_rows_unbiased=True),
    ),
    "requests_share_one_stream": (
        "TensorRT-LLM #19487: unseeded requests share one random stream: identical samples",
        DecoderBugs(shared_stream=True),
    ),
    "logprobs_zero_when_speculating": (
        "llama.cpp #27972 (also vLLM #17876, #34497): every token reported with logprob 0.0 (p = 1) "
        "when speculating; the tokens themselves are right",
        DecoderBugs(logprobs_zero=True),
    ),
    "penalties_dropped_when_speculating": (
        "TensorRT-LLM PR #17701 (one-model speculative decoding silently ignores the repetition "
        "penalty), SGLang PR #22049 (spec v2 ignores the penalties and logit_bias in verification): "
        "every row of a speculative cycle without the repeat penalty and the logit bias",
        DecoderBugs(penalties_dropped_when_speculating=True),
    ),
    "top_k_top_p_in_the_other_order": (
        "SGLang PR #36173: the speculative verifier and the plain sampler apply top-k and top-p in "
        "different orders (one takes the top-p cutoff on the law renormalised over the top-k set, "
        "the other on the whole law intersected with top-k); here our order is top-k, renormalise, "
        "top-p and the mutant's cycle rows take the other",
        DecoderBugs(top_p_on_unfiltered_law=True),
    ),
    "rollback_not_done": (
        "mlx-lm #846 (PR #1109): the cache is not rewound after a rejection (a non-trimmable "
        "cache): the rejected drafts' K,V stay and corrupt every later row",
        DecoderBugs(rollback_extra=1 << 30),
    ),
    "q_not_the_drawn_law": (
        "transformers #32867 (the assistant drew greedily or with processors while its untempered "
        "softmax was reported as q) and #47932 (candidate generators return raw logits as q while "
        "sampling from the processed law): the verifier is handed a q the draft was not drawn from",
        DecoderBugs(reported_q="raw_softmax"),
    ),
    "bonus_kv_dropped": (
        "vLLM PR #3951 (there the draft's cache; here the target's): after a full acceptance the "
        "bonus token's K,V is never written, so every later row misses that token",
        DecoderBugs(bonus_kv_dropped=True),
    ),
}


@dataclass(frozen=True)
class DesignDeviation:
    """The depth test's design alternative as a decoder (:mod:`spec.decoder.depth.power`): plain
    decoding that at each position, with probability ``fraction``, draws from the target law
    tempered to total variation ``tv`` (sharpened or flattened), and from the target law
    elsewhere. The depth test must reject it with probability >= 0.99 at its design N."""

    logits_of: LogitsOf
    tv: float = 0.05
    fraction: float = 0.1
    sharpen: bool = False
    eog: frozenset[int] = frozenset()

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        from verispec.spec.decoder.depth.law import DepthCase, position_params

        case = DepthCase(tuple(prompt_ids), params, max_tokens, self.eog, min_tokens)
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            history, ids = [int(t) for t in prompt_ids], list[int]()
            while len(ids) < max_tokens and not (ids and ids[-1] in self.eog):
                p = target_distribution(self.logits_of(tuple(history)), history, position_params(case, len(ids)))
                law = self._deviated(p) if rng.random() < self.fraction else p
                ids.append(sample(law, rng))
                history.append(ids[-1])
            out.append(ids)
        return out

    def _deviated(self, p: F64) -> F64:
        live = p > 0
        if live.sum() < 2:
            return p
        q = np.zeros_like(p)
        q[live] = tempered(p[live], beta_at_tv(p[live], self.tv, self.sharpen))
        return q


def catalogue(logits_of: LogitsOf, draft_params: SamplingParams, k: int = 2) -> dict[str, LoopDecoder]:
    """Every mutant decoder on one target."""
    return {name: LoopDecoder(logits_of, draft_params, k, bugs) for name, (_, bugs) in MUTANT_BUGS.items()}
