"""Your own speculative decoder on verispec's reference model API, under `verispec check-decoder`.

    verispec template model-api-decoder > mydecoder.py
    verispec models synth --arch llama --out models/
    verispec check-decoder --engine mydecoder:factory --model models/llama-seed0.gguf     # full power
    verispec check-decoder --engine mydecoder:factory --greedy                            # SmolLM2

A complete, lossless decoder of about 150 lines, written only with the public names of
docs/model-api.md: ``Model.load``, ``Model.new_cache``, ``Model.forward`` (logits ``[T, V]``),
``KVCache.truncate`` (the rollback), ``target_distribution`` (THE law: logits + history + params
-> probabilities) and ``Tokenizer.from_file(path).eog_ids``. The draft is the target's first
:data:`DRAFT_LAYERS` layers with its final norm and head (no second file); every cycle drafts up
to :data:`K` tokens from the draft's law q, scores them in ONE target forward, and keeps each with
probability min(1, p/q), drawing a rejected position from the residual max(p - q, 0) and a fully
accepted cycle's bonus token from p at the next position (Leviathan et al. 2023; Chen et al. 2023).

The rules that check-decoder holds a decoder to (the verispec law, docs/model-api.md):

* the history of the law's repeat penalty is the prompt plus every token generated so far,
  drafts accepted in this cycle included;
* ``min_tokens`` bans the end-of-generation ids at the first ``min_tokens`` output positions (a
  ``-inf`` logit bias, in p and q alike);
* a generation stops AT an end-of-generation id, which is included in the returned ids, or after
  ``max_tokens`` ids.

Replace the loop with your own and keep the ops: ``generate`` (the default depth mode),
``greedy`` (``--greedy``), ``logits`` (the engine's own noise for greedy verdicts), ``sample``,
``sample_plain`` and ``generate_plain`` (``--target-law two-sample``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.reference.tokenizer import Tokenizer

K = 3  # drafts per cycle
DRAFT_LAYERS = 1  # the draft: the target's first layers, its final norm and head


def truncated(model: Model, n_layers: int) -> Model:
    """The model's first ``n_layers`` decoder layers with its final norm and head: a weaker model on
    the same vocabulary. Per-layer config entries (sliding flags, KV heads) are cut to match."""
    if not 1 <= n_layers <= model.config.n_layer:
        raise ValueError(f"a draft of {n_layers} layers from a model of {model.config.n_layer}")
    cut = {
        f.name: getattr(model.config, f.name)[:n_layers]
        for f in dataclasses.fields(model.config)
        if isinstance(getattr(model.config, f.name), tuple)
        and len(getattr(model.config, f.name)) == model.config.n_layer
    }
    config = dataclasses.replace(model.config, n_layer=n_layers, **cut)
    return Model(config, dataclasses.replace(model.weights, layers=model.weights.layers[:n_layers]))


class ModelApiDecoder:
    """Speculative sampling with a truncated draft on verispec's reference forward."""

    def __init__(self, path: Path, k: int = K, draft_layers: int = DRAFT_LAYERS) -> None:
        self.target = Model.load(path)
        self.draft = truncated(self.target, draft_layers)
        self.eog = Tokenizer.from_file(path).eog_ids
        self.k = k

    # -- the law at one output position ---------------------------------------------------------

    def _params_at(self, params: SamplingParams, position: int, min_tokens: int) -> SamplingParams:
        if position >= min_tokens or not self.eog:
            return params
        bias = dict(params.logit_bias or {})
        bias.update({int(e): -math.inf for e in self.eog})
        return dataclasses.replace(params, logit_bias=bias)

    # -- one generation ---------------------------------------------------------------------------

    def _generation(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        min_tokens: int,
        rng: np.random.Generator,
        speculative: bool,
    ) -> list[int]:
        history, out = [int(t) for t in prompt], []
        capacity = len(history) + max_tokens + self.k + 1
        target_cache, draft_cache = self.target.new_cache(capacity), self.draft.new_cache(capacity)
        while len(out) < max_tokens:
            k = min(self.k, max_tokens - len(out) - 1) if speculative else 0
            drafts, qs = self._draft(history, draft_cache, params, len(out), min_tokens, k, rng)
            # the caches hold all of the history but its last token: feed the rest and the drafts at once
            rows = self.target.forward(history[target_cache.length :] + drafts, target_cache).logits[-(k + 1) :]
            for token in self._verify(history, drafts, qs, rows, params, len(out), min_tokens, rng):
                history.append(token)
                out.append(token)
                if token in self.eog or len(out) == max_tokens:
                    return out
            target_cache.truncate(len(history) - 1)  # the rollback: drop the rejected drafts' K, V
            draft_cache.truncate(min(draft_cache.length, len(history) - 1))
        return out

    def _draft(
        self,
        history: list[int],
        cache: Any,
        params: SamplingParams,
        position: int,
        min_tokens: int,
        k: int,
        rng: np.random.Generator,
    ) -> tuple[list[int], list[np.ndarray]]:
        drafts: list[int] = []
        qs: list[np.ndarray] = []
        for i in range(k):
            span = (history + drafts)[cache.length :]
            row = self.draft.forward(span, cache).logits[-1]
            q = target_distribution(row, history + drafts, self._params_at(params, position + i, min_tokens))
            drafts.append(int(rng.choice(len(q), p=q)))
            qs.append(q)
        return drafts, qs

    def _verify(
        self,
        history: list[int],
        drafts: list[int],
        qs: list[np.ndarray],
        rows: np.ndarray,
        params: SamplingParams,
        position: int,
        min_tokens: int,
        rng: np.random.Generator,
    ) -> list[int]:
        kept: list[int] = []
        for i, (token, q) in enumerate(zip(drafts, qs)):
            p = target_distribution(rows[i], history + kept, self._params_at(params, position + i, min_tokens))
            if rng.random() * q[token] < p[token]:  # accept with probability min(1, p/q)
                kept.append(token)
                continue
            residual = np.maximum(p - q, 0.0)
            kept.append(int(rng.choice(len(p), p=residual / residual.sum())))
            return kept
        p = target_distribution(
            rows[len(drafts)], history + kept, self._params_at(params, position + len(drafts), min_tokens)
        )
        kept.append(int(rng.choice(len(p), p=p)))  # every draft kept: the bonus token
        return kept

    # -- the ops of check-decoder -----------------------------------------------------------------

    def _many(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int,
        speculative: bool,
    ) -> list[list[int]]:
        rng = np.random.default_rng(seed)
        return [self._generation(prompt_ids, params, max_tokens, min_tokens, rng, speculative) for _ in range(n)]

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return self._many(prompt_ids, params, max_tokens, n, seed, min_tokens, True)

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return self._many(prompt_ids, params, max_tokens, n, seed, min_tokens, False)

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> list[list[int]]:
        return self._many(prompt_ids, params, m, n, seed, 0, True)

    def sample_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int
    ) -> list[list[int]]:
        return self._many(prompt_ids, params, m, n, seed, 0, False)

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        greedy = SamplingParams(temperature=0.0)
        return self._generation(prompt_ids, greedy, max_tokens, 0, np.random.default_rng(0), speculative)

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
        """The target's plain next-token logits after the prefix: one forward, or ``prefix[:split_at]``
        then each later token alone (other matmul shapes: the engine's own batch-shape noise)."""
        prefix = [int(t) for t in prefix_ids]
        cache = self.target.new_cache(len(prefix))
        cut = len(prefix) if split_at is None else split_at
        rows = self.target.forward(prefix[:cut], cache).logits
        for token in prefix[cut:]:
            rows = self.target.forward([token], cache).logits
        return [float(x) for x in rows[-1]]


def factory(path: Path) -> ModelApiDecoder:
    """The ``--engine`` factory."""
    return ModelApiDecoder(Path(path))
