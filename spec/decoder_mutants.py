"""A small speculative decode loop with named pipeline bugs: the mutant decoders of check-decoder.

Bugs that live outside the accept/reject function (a draft law built from the wrong processors, a
bonus from the wrong row, a rollback that keeps a rejected draft's K,V, rows computed without the
drafted history, penalties that count rejected drafts) are invisible to ``verispec check``, which
hands the verifier correct rows. ``verispec check-decoder`` sees them in the law of the first
tokens. This module is the loop of :mod:`reference.decode` written out small, on a target given
as ``logits_of(prefix)`` with an explicit KV cache (the ids whose K,V it holds: a stale entry
changes the next logits exactly as a real cache would), with one switch per bug.

``DecoderBugs()`` (no bug) is a correct decoder; :func:`catalogue` lists the mutants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams, sample
from verispec.reference.speculative import verify_greedy, verify_sampled
from verispec.spec.decoder_law import CachedLaw, LogitsOf

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class DecoderBugs:
    """Which single mistake the loop makes (the defaults: none)."""

    reported_q: str = "as_drawn"  # as_drawn | raw_softmax | target_params: the q handed to the verifier
    bonus_row: int = 0  # 0: p_k; -1: p_{k-1}
    rollback_extra: int = 0  # positions kept past the accepted ones when the cache is truncated
    rows_with_drafts: bool = True  # False: every target row from the logits after the history alone
    penalty_counts_rejected: bool = False  # the penalty history includes every drafted token
    stops_at_eog: bool = True  # False: decoding runs on past an end-of-generation token


@dataclass(frozen=True)
class LoopDecoder:
    """A speculative decoder (target ``logits_of``, the same model drafting with ``draft_params``)
    that returns the first m tokens; ``bugs`` selects a mutant."""

    logits_of: LogitsOf
    draft_params: SamplingParams
    k: int = 2
    bugs: DecoderBugs = DecoderBugs()
    draft_logits_of: LogitsOf | None = None  # default: the target's logits (a self-draft)
    law: CachedLaw = field(default_factory=CachedLaw)  # THE target law, memoized
    eog: frozenset[int] = frozenset()  # end-of-generation ids: a decode stops after one

    def first_tokens(
        self, prompt: Sequence[int], params: SamplingParams, m: int, rng: np.random.Generator, k: int | None = None
    ) -> list[int]:
        """One decode of m tokens (``k`` drafts per cycle, default ``self.k``; 0: plain decoding)."""
        bugs = self.bugs
        k = self.k if k is None else k
        draft_of = self.draft_logits_of or self.logits_of
        history = [int(t) for t in prompt]
        cache: list[int] = []  # the ids whose K,V the target cache holds
        drafted_ever: list[int] = []
        out: list[int] = []
        while len(out) < m:
            want = min(k, m - len(out) - 1)
            drafts: list[int] = []
            q_rows: list[F64] = []
            for _ in range(want):
                context = history + drafts
                logits = draft_of(tuple(context))
                q = self.law(logits, context, self.draft_params)
                drafts.append(sample(q, rng))
                q_rows.append(self._reported_q(q, logits, context, params))
            drafted_ever += drafts
            pending = history[len(cache) :]
            span = pending + drafts
            if bugs.rows_with_drafts:
                rows = [self.logits_of(tuple(cache + span[:j])) for j in range(len(pending), len(span) + 1)]
            else:
                rows = [self.logits_of(tuple(cache + pending))] * (len(drafts) + 1)
            cache = cache + span
            seen = history + drafted_ever if bugs.penalty_counts_rejected else history
            p = np.stack([self.law(rows[i], seen + drafts[:i], params) for i in range(len(drafts) + 1)])
            before = len(history)
            if drafts:
                if bugs.bonus_row:
                    p = p.copy()
                    p[-1] = p[-1 + bugs.bonus_row]
                if params.greedy:
                    verdict = verify_greedy(p, drafts)
                else:
                    verdict = verify_sampled(p, np.stack(q_rows), drafts, rng.random(len(drafts) + 1).tolist())
                accepted, emitted = verdict.accepted, drafts[: verdict.accepted] + [verdict.token]
            else:
                accepted, emitted = 0, [sample(p[0], rng)]
            cache = cache[: min(len(cache), before + accepted + bugs.rollback_extra)]
            history += emitted
            out += emitted
            end = next((i for i, t in enumerate(out) if t in self.eog), None)
            if end is not None and bugs.stops_at_eog:
                return out[: min(end + 1, m)]
        return out[:m]

    def _reported_q(self, q: F64, logits: Any, context: list[int], params: SamplingParams) -> F64:
        if self.bugs.reported_q == "raw_softmax":  # the processors the draft sampled with are lost
            return self.law(logits, context, SamplingParams())
        if self.bugs.reported_q == "target_params":  # the TARGET's processors applied to q
            return self.law(logits, context, params)
        return q

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> list[list[int]]:
        """n independent runs (the DecoderEngine interface of :mod:`spec.decoder_check`)."""
        rng = np.random.default_rng(seed)
        return [self.first_tokens(prompt_ids, params, m, rng) for _ in range(n)]

    def sample_plain(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> list[list[int]]:
        """n runs with speculation off (k = 0: one target token per step; two-sample mode)."""
        rng = np.random.default_rng(seed)
        return [self.first_tokens(prompt_ids, params, m, rng, 0) for _ in range(n)]

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
        return decoder.first_tokens(prompt_ids, greedy, max_tokens, np.random.default_rng(0), self.k if speculative else 0)


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


def catalogue(logits_of: LogitsOf, draft_params: SamplingParams, k: int = 2) -> dict[str, LoopDecoder]:
    """Every mutant decoder on one target."""
    return {name: LoopDecoder(logits_of, draft_params, k, bugs) for name, (_, bugs) in MUTANT_BUGS.items()}
