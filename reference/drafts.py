"""Draft sources for speculative decoding: who proposes the tokens the target then verifies.

Every source implements :class:`reference.seams.DraftSource`. Each cycle of the decode loop
(:mod:`reference.decode`) asks it for up to k tokens together with the EXACT law each token was
drawn from (:class:`Proposal`), then asks it to score the span ``pending + drafts`` with the target
(normally one batched target forward; layer-skip drafts reuse what they already computed).

    ngram            prompt lookup: find the most recent earlier occurrence of the longest suffix
                     n-gram (n = NGRAM_MAX .. NGRAM_MIN) of prompt + output and propose what followed it.
                     Deterministic: q is one-hot on the proposed token.
    layerskip:M      the target's first M layers + its exit head (final norm, lm_head, softcap).
                     The draft runs layers 0..M-1 IN THE TARGET'S OWN KV CACHE, so those layers'
                     K,V and the layer-M hidden states of the drafted positions are exactly what the
                     target needs: verification runs only layers M..L-1 on the k+1 positions (plus
                     layers 0..M-1 on the last draft, which the draft never fed). LayerSkip's cache
                     reuse (Elhoushi et al. 2024).
    model:PATH       a separate GGUF model with its own KV cache; its vocabulary must equal the
                     target's (same size, same token texts) or :class:`DraftError`.
    self             the target drafts for itself in a second cache: every draft is accepted up to
                     float rounding (alpha = 1); a sanity mode.
    suffix           suffix drafting (:mod:`reference.suffix_draft`): the most frequent observed
                     continuation of the longest matching suffix, over this request's text and a
                     bounded cross-request cache of earlier outputs (``--draft-cache PATH``).
                     Deterministic: q is one-hot.
    suffix:tree      the same, proposing token trees verified in one pass (:mod:`reference.tree_decode`).
    auto             every lookup proposer at once (suffix trees and chains, prompt lookup), merged into
                     one token tree and kept by measured acceptance and the verify-cost curve as it
                     decodes (:mod:`reference.draft_choice`); the default draft. Deterministic.

Laws. With a greedy target the draft proposes its own argmax (q one-hot). With a sampling target
the draft samples from q_i = ``law(draft_logits_i, history + drafts[:i], draft_params)``, where
``law`` is THE target law of :mod:`reference.sampling` and ``draft_params`` default to the
target's; q_i is returned as drawn, so verification is lossless whatever the draft's quality.

Early stop (``p_min``, llama.cpp's ``--draft-p-min``): before a token is added, its confidence
(the largest probability of q_i; for a greedy draft, of the temperature-1 softmax of its logits)
is compared with ``p_min``; below it, drafting stops and the token is not proposed.

Adaptive k (:class:`AdaptiveK`): Hugging Face's rule (+2 after a cycle whose drafts were all
accepted, -1 after a rejection) bounded to [0, k_max], plus a cost check: k = 0 (plain steps)
while the measured acceptance and draft cost predict a loss, with probes at growing intervals.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from verispec.reference.draft_control import MeasuredCurve, best_k
from verispec.reference.errors import DraftError
from verispec.reference.sampling import SamplingParams, sample
from verispec.reference.seams import Cache, TargetModel
from verispec.reference.seams import DraftContext as DraftContext  # the draft seam (reference/seams.py)
from verispec.reference.seams import DraftSource as DraftSource
from verispec.reference.seams import LawFn as LawFn
from verispec.reference.seams import Proposal as Proposal
from verispec.reference.speculative import draft_law_rows
from verispec.reference.tree_decode import plain_pass

if TYPE_CHECKING:
    from verispec.reference.tokenizer import Tokenizer

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

NGRAM_MAX = 4  # longest suffix n-gram the prompt lookup tries
# Shortest suffix n-gram the ngram draft acts on. A lone recurring token predicts its old
# continuation too rarely to pay for a multi-row verification pass (2-8 rows cost ~3x one row on
# OpenBLAS): `verispec bench` on SmolLM2 measured ngram geomean 0.89x of plain with 1-grams and
# 1.02x with n >= 2 (worst prompt 0.84x -> 0.97x); Gemma3 0.90x -> 0.95x (2026-11-29).
NGRAM_MIN = 2
DEFAULT_DRAFT = "auto"  # the draft speculative decoding uses when none is named
CACHED_KINDS = ("auto", "suffix")  # the kinds that take a cross-request cache (--draft-cache)


def target_score(target: TargetModel, cache: Cache, pending: Sequence[int], drafts: Sequence[int]) -> F32:
    """The plain verification pass: ONE batched forward of ``pending + drafts``; the last
    ``len(drafts) + 1`` logits rows ``[k+1, V]`` (the prompt's pass without drafts: the head on the
    last row alone where the engine allows, :func:`reference.tree_decode.plain_pass`)."""
    if not drafts:
        last = plain_pass(target, cache, pending)
        if last is not None:
            return last
    span = [*pending, *drafts]
    logits = target.forward(span, cache).logits  # [len(span), V]
    return logits[len(pending) - 1 :]


# -- choosing the next draft token ------------------------------------------------------------------


def _softmax_max(logits: F32) -> float:
    row = np.asarray(logits, dtype=np.float64)
    e = np.exp(row - row.max())
    return float(e.max() / e.sum())


def draw_next(
    ctx: DraftContext, logits: F32, history: Sequence[int], params: SamplingParams
) -> tuple[int, F64 | None, float]:
    """One draft token from a draft logits row: ``(token, q row or None if one-hot, confidence)``."""
    if params.greedy:
        q = ctx.law(logits, history, params)  # one-hot at the penalized argmax
        return int(np.argmax(q)), None, (_softmax_max(logits) if ctx.p_min > 0 else 1.0)
    q = ctx.law(logits, history, params)
    return sample(q, ctx.rng), q, float(q.max())


def _stack(rows: list[F64 | None], tokens: Sequence[int], vocab: int) -> F64 | None:
    """A proposal's q: None when every token was a deterministic choice (one-hot rows, built by the
    verifier when it needs them), else :func:`reference.speculative.draft_law_rows`."""
    if all(r is None for r in rows):
        return None
    return draft_law_rows(rows, tokens, vocab)


# -- ngram (prompt lookup) --------------------------------------------------------------------------


class NgramDraft:
    """Prompt lookup: continue the most recent earlier match of the longest suffix n-gram."""

    def __init__(self, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> None:
        self.name = "ngram"
        self.n_max = n_max
        self.n_min = n_min
        self.draft_passes = 0
        self.draft_time_s = 0.0
        self.ctx: DraftContext | None = None

    def start(self, context: DraftContext) -> None:
        self.ctx = context
        self.draft_passes, self.draft_time_s = 0, 0.0

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        started = time.perf_counter()
        tokens = lookup(history, k, self.n_max, self.n_min)
        self.draft_time_s += time.perf_counter() - started
        return Proposal(tuple(tokens))

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        assert self.ctx is not None, "start() first"
        return target_score(self.ctx.target, self.ctx.cache, pending, drafts)


def lookup(history: Sequence[int], k: int, n_max: int = NGRAM_MAX, n_min: int = 1) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest suffix
    n-gram of ``history`` (n from ``n_max`` down to ``n_min``); [] when no such suffix recurs."""
    h = list(history)
    size = len(h)
    for n in range(min(n_max, size - 1), max(1, n_min) - 1, -1):
        suffix = h[size - n :]
        for start in range(size - n - 1, -1, -1):  # most recent earlier occurrence first
            if h[start : start + n] == suffix:
                return h[start + n : start + n + k]
    return []


# -- a separate model (model:PATH, self) ------------------------------------------------------------


class ModelDraft:
    """A draft model with its own KV cache, kept in sync with the committed history by
    truncating it to the longest common prefix (rollback) and feeding the rest."""

    def __init__(self, model: TargetModel, name: str, params: SamplingParams | None = None) -> None:
        self.name = name
        self.model = model
        self.params = params  # None: the target's params
        self.draft_passes = 0
        self.draft_time_s = 0.0
        self.ctx: DraftContext | None = None
        self.cache: Cache | None = None
        self.ids: list[int] = []  # the tokens whose K,V the draft cache holds

    def start(self, context: DraftContext) -> None:
        self.ctx = context
        self.cache = self.model.new_cache(None)
        self.ids = []
        self.draft_passes, self.draft_time_s = 0, 0.0

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        assert self.ctx is not None and self.cache is not None, "start() first"
        started = time.perf_counter()
        params = self.params or self.ctx.params
        common = _common_prefix(self.ids, history)
        common = min(common, len(history) - 1)  # always feed at least the last token
        self.cache.truncate(common)
        del self.ids[common:]
        feed = list(history[common:])
        logits = self._forward(feed)
        hist = list(history)
        tokens: list[int] = []
        rows: list[F64 | None] = []
        for i in range(k):
            token, q, confidence = draw_next(self.ctx, logits, hist, params)
            if confidence < self.ctx.p_min:
                break
            tokens.append(token)
            rows.append(q)
            hist.append(token)
            if i + 1 < k:
                logits = self._forward([token])
        self.draft_time_s += time.perf_counter() - started
        return Proposal(tuple(tokens), _stack(rows, tokens, logits.shape[-1]))

    def _forward(self, tokens: list[int]) -> F32:
        assert self.cache is not None
        logits: F32 = self.model.forward(tokens, self.cache).logits[-1]  # [V]
        self.ids.extend(tokens)
        self.draft_passes += 1
        return logits

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        assert self.ctx is not None, "start() first"
        return target_score(self.ctx.target, self.ctx.cache, pending, drafts)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


# -- layer skip (early-exit draft with cache reuse) -------------------------------------------------


class LayerSkipDraft:
    """Draft with the target's layers 0..M-1 and its exit head, in the target's own KV cache."""

    def __init__(self, n_layer: int, exit_layer: int) -> None:
        check_exit_layer(exit_layer, n_layer)
        self.name = f"layerskip:{exit_layer}"
        self.exit_layer = exit_layer
        self.n_layer = n_layer
        self.draft_passes = 0
        self.draft_time_s = 0.0
        self.ctx: DraftContext | None = None
        self.base = 0  # cache length when this cycle began
        self.hidden: list[F32] = []  # layer-M hidden rows of the span computed so far
        self.proposed = False  # propose() ran this cycle (else score() starts afresh)

    def start(self, context: DraftContext) -> None:
        self.ctx = context
        self.draft_passes, self.draft_time_s = 0, 0.0

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        assert self.ctx is not None, "start() first"
        started = time.perf_counter()
        cache = self.ctx.cache
        self.base = cache.length
        self.hidden = []
        self.proposed = True
        h = self._lower(list(history[self.base :]))  # [P, n_embd]
        hist = list(history)
        tokens: list[int] = []
        rows: list[F64 | None] = []
        logits = self.ctx.target.head(h[-1:])[0]  # [V]
        for i in range(k):
            token, q, confidence = draw_next(self.ctx, logits, hist, self.ctx.params)
            if confidence < self.ctx.p_min:
                break
            tokens.append(token)
            rows.append(q)
            hist.append(token)
            if i + 1 < k:
                logits = self.ctx.target.head(self._lower([token]))[0]
        self.draft_time_s += time.perf_counter() - started
        return Proposal(tuple(tokens), _stack(rows, tokens, logits.shape[-1]))

    def _lower(self, tokens: list[int]) -> F32:
        """Layers 0..M-1 on ``tokens`` at the cache's end, committed (their K,V are the target's)."""
        assert self.ctx is not None
        cache, target = self.ctx.cache, self.ctx.target
        positions = list(range(cache.length, cache.length + len(tokens)))
        h = target.forward_layers(target.embed(tokens), cache, 0, self.exit_layer - 1, positions)
        cache.advance(len(tokens))
        self.hidden.append(h)
        self.draft_passes += 1
        return h

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        """Layers M..L-1 on the whole span (its layers < M are already in the cache), one pass."""
        assert self.ctx is not None, "start() first"
        cache, target = self.ctx.cache, self.ctx.target
        if not self.proposed:  # a plain step (the loop asked for no draft): nothing computed yet
            self.base, self.hidden = cache.length, []
        self.proposed = False
        span = [*pending, *drafts]
        done = cache.length - self.base
        if done < len(span):  # the last draft was never fed to the lower layers
            h_missing = target.forward_layers(
                target.embed(span[done:]),
                cache,
                0,
                self.exit_layer - 1,
                list(range(cache.length, self.base + len(span))),
            )
            cache.advance(len(span) - done)
            self.hidden.append(h_missing)
        h = np.concatenate(self.hidden, axis=0)[: len(span)]  # [P + k, n_embd]
        out = target.forward_layers(
            h,
            cache,
            self.exit_layer,
            self.n_layer - 1,
            list(range(self.base, self.base + len(span))),
            start=self.base,
        )
        cache.truncate(self.base + len(span))
        return target.head(out[len(pending) - 1 :])


def check_exit_layer(exit_layer: int, n_layer: int) -> None:
    """DraftError unless 1 <= exit_layer <= n_layer - 1."""
    if not 1 <= exit_layer <= n_layer - 1:
        raise DraftError(f"layerskip layer {exit_layer} is outside 1..{n_layer - 1} (the model has {n_layer} layers)")


# -- adaptive k -------------------------------------------------------------------------------------


class AdaptiveK:
    """How many tokens to draft next: HF's rule (+2 after a cycle whose drafts were all accepted,
    -1 after a rejection) on [1, k_max], and k = 0 (plain steps) while drafting loses.

    "Loses" is measured, not assumed: once a plain step's time is known, drafting cycles must
    commit tokens faster than plain steps do (tokens per second over the drafting cycles so far);
    before that, Leviathan's predicted speedup from alpha and the cost ratio c (draft pass over
    verification pass) must be >= 1. After a losing verdict, PROBE_START plain steps run before
    drafting is tried again with k = 1; each losing probe doubles that interval.

    ``cost`` (optional): the measured verify-cost curve, rows -> c(rows) relative to one row
    (engine/verify_cost.py measures it for the engine's kernel). With it, k never exceeds
    :func:`best_k_for_cost` at the running acceptance (at least 1: switching drafting off stays
    the measured verdict above), so a kernel whose passes grow expensive past a few rows is not
    asked for more.
    """

    PROBE_START = 8
    MIN_CYCLES = 3  # drafting cycles observed before drafting may be switched off

    def __init__(self, k_max: int, k_start: int | None = None, cost: Mapping[int, float] | None = None) -> None:
        self.k_max = k_max
        self.cost = cost
        self.k = min(k_max, 2 if k_start is None else k_start)
        self.drafted = 0
        self.accepted = 0
        self.cycles = 0
        self.tokens = 0  # tokens committed by drafting cycles
        self.time_s = 0.0  # their total time
        self.plain_pass_s = 0.0  # running mean time of a plain step (0: none yet)
        self.plain_left = 0
        self.probe_interval = self.PROBE_START

    def next_k(self) -> int:
        """The k to draft this cycle (0: a plain step)."""
        if self.plain_left > 0:
            self.plain_left -= 1
            return 0
        return max(1, self.k)

    def plain_step(self, seconds: float) -> None:
        """Record a plain step's time."""
        self.plain_pass_s = seconds if self.plain_pass_s == 0 else 0.8 * self.plain_pass_s + 0.2 * seconds

    def update(self, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        """Record a drafting cycle: ``drafted`` proposed, ``accepted`` kept, its two timings."""
        if drafted == 0:
            return
        self.cycles += 1
        self.drafted += drafted
        self.accepted += accepted
        self.tokens += accepted + 1
        self.time_s += draft_s + verify_s
        self.k = min(self.k_max, self.k + 2) if accepted == drafted else max(1, self.k - 1)
        if self.cost is not None:
            self.k = min(self.k, max(1, best_k_for_cost(self.alpha, self.cost, self.k_max)))
        if self.cycles >= self.MIN_CYCLES and not self.pays(draft_s / drafted, verify_s):
            self.plain_left = self.probe_interval
            self.probe_interval *= 2
            self.k = 1
        elif accepted == drafted:
            self.probe_interval = self.PROBE_START

    def pays(self, draft_pass_s: float, verify_s: float) -> bool:
        """Whether drafting beats plain steps, on what has been measured so far."""
        if self.plain_pass_s > 0:
            return self.tokens / self.time_s * self.plain_pass_s >= 1.0 if self.time_s > 0 else True
        cost_ratio = draft_pass_s / verify_s if verify_s > 0 else 0.0
        return predicted_speedup(self.alpha, self.k, cost_ratio) >= 1.0

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def predicted_speedup(alpha: float, k: float, cost_ratio: float) -> float:
    """Leviathan et al.'s expected speedup with acceptance rate ``alpha``, ``k`` drafts per cycle
    and draft cost ratio ``c``: ``(1 - alpha^(k+1)) / ((1 - alpha)(1 + c k))``."""
    if k <= 0:
        return 1.0
    tokens = k + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (k + 1.0)) / (1.0 - alpha)
    return tokens / (1.0 + cost_ratio * k)


def best_k_for_cost(alpha: float, cost: Mapping[int, float], k_max: int) -> int:
    """The k in 0..k_max maximizing Leviathan's expected tokens per cycle ``(1 - alpha^(k+1)) /
    (1 - alpha)`` over the cycle's cost ``cost[k + 1]`` (rows -> cost relative to one row; a
    draft that costs nothing, as a lookup draft nearly does); the smallest such k. Rows missing
    from ``cost`` are not chosen. It is :func:`reference.draft_control.best_k` at a constant
    acceptance (clamped, as every estimate there, to MAX_ACCEPT)."""
    return best_k([alpha] * k_max, MeasuredCurve(cost))  # one controller for chains, trees and this cap


# -- parsing ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftSpec:
    """A parsed ``--draft`` value: kind ``auto``, ``ngram``, ``suffix`` (``tree``: ``suffix:tree``,
    token trees verified in one pass), ``layerskip`` (layer), ``model`` (path), ``self``."""

    kind: str
    layer: int = 0
    path: str = ""
    tree: bool = False

    def __str__(self) -> str:
        if self.tree:
            return f"{self.kind}:tree"
        return {"layerskip": f"layerskip:{self.layer}", "model": f"model:{self.path}"}.get(self.kind, self.kind)


def parse_draft_spec(text: str) -> DraftSpec:
    """``auto`` | ``ngram`` | ``suffix`` | ``suffix:tree`` | ``layerskip:M`` | ``model:PATH`` |
    ``self`` -> DraftSpec; DraftError otherwise."""
    if text in ("auto", "ngram", "suffix", "self"):
        return DraftSpec(text)
    if text == "suffix:tree":
        return DraftSpec("suffix", tree=True)
    kind, sep, arg = text.partition(":")
    if sep and kind == "layerskip":
        try:
            return DraftSpec("layerskip", layer=int(arg))
        except ValueError:
            raise DraftError(f"layerskip needs an integer layer, got {arg!r} in --draft {text!r}") from None
    if sep and kind == "model" and arg:
        return DraftSpec("model", path=arg)
    raise DraftError(
        f"unknown draft spec {text!r} (expected auto, ngram, suffix, suffix:tree, layerskip:M, model:PATH or self)"
    )


def check_options(k: int, p_min: float) -> None:
    """DraftError for k < 1 or p_min outside [0, 1]."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise DraftError(f"k must be an integer >= 1, got {k!r}")
    if not 0.0 <= p_min <= 1.0:  # also NaN
        raise DraftError(f"p-min must be in [0, 1], got {p_min!r}")


def check_same_vocab(target: "Tokenizer", draft: "Tokenizer", draft_name: str) -> None:
    """DraftError unless both vocabularies have the same size and the same text at every id."""
    if target.vocab_size != draft.vocab_size:
        raise DraftError(
            f"draft {draft_name} has a vocabulary of {draft.vocab_size} tokens, the target {target.vocab_size}"
        )
    for i in range(target.vocab_size):
        if target.token_text(i) != draft.token_text(i):
            raise DraftError(
                f"draft {draft_name} vocabulary differs from the target's at id {i}: "
                f"{draft.token_text(i)!r} vs {target.token_text(i)!r}"
            )


def make_draft(
    spec: DraftSpec,
    target: TargetModel,
    target_tokenizer: "Tokenizer | None" = None,
    cache_path: Path | None = None,
) -> DraftSource:
    """Build the draft source of ``spec`` for ``target`` (loading a draft model for ``model:``).

    ``cache_path``: the suffix draft's persisted cross-request cache (``--draft-cache``; other
    kinds refuse it). DraftError for a layer outside 1..L-1, a vocabulary mismatch or a bad cache
    file (checked before any decoding).
    """
    if cache_path is not None and spec.kind not in CACHED_KINDS:
        raise DraftError(f"--draft-cache is for --draft suffix, suffix:tree or auto, not {spec}")
    if spec.kind == "ngram":
        return NgramDraft()
    if spec.kind == "auto":
        from verispec.reference.draft_choice import AutoDraft
        from verispec.reference.suffix_draft import SuffixCache, vocab_fingerprint

        if cache_path is None:
            return AutoDraft()
        SuffixCache.check_writable(cache_path)  # refused now, not after the text was generated
        fingerprint = vocab_fingerprint(target_tokenizer) if target_tokenizer is not None else ""
        return AutoDraft(SuffixCache.load(cache_path, target.config.n_vocab, fingerprint), cache_path=cache_path)
    if spec.kind == "suffix":
        from verispec.reference.suffix_draft import TREE_WIDTH, SuffixCache, SuffixDraft, vocab_fingerprint

        width = TREE_WIDTH if spec.tree else 0
        if cache_path is None:
            return SuffixDraft(tree_width=width)
        SuffixCache.check_writable(cache_path)  # refused now, not after the text was generated
        fingerprint = vocab_fingerprint(target_tokenizer) if target_tokenizer is not None else ""
        return SuffixDraft(
            SuffixCache.load(cache_path, target.config.n_vocab, fingerprint), cache_path, tree_width=width
        )
    if spec.kind == "self":
        return ModelDraft(target, "self")
    if spec.kind == "layerskip":
        return LayerSkipDraft(target.config.n_layer, spec.layer)
    if spec.kind == "model":
        from verispec.reference.gguf import GGUFFile
        from verispec.reference.model import Model
        from verispec.reference.tokenizer import Tokenizer

        path = Path(spec.path)
        if not path.is_file():
            raise DraftError(f"draft model {spec.path!r} is not a file")
        with GGUFFile.open(path) as f:
            if target_tokenizer is not None:  # None: the caller checked (or has no tokenizer)
                check_same_vocab(target_tokenizer, Tokenizer.from_gguf(f.metadata), spec.path)
            model = Model.load(f)
        if model.config.n_vocab != target.config.n_vocab:
            raise DraftError(f"draft {spec.path} has {model.config.n_vocab} logits, the target {target.config.n_vocab}")
        return ModelDraft(model, f"model:{spec.path}")
    raise DraftError(f"unknown draft kind {spec.kind!r}")
