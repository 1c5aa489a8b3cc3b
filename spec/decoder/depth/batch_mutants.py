"""Batched engines with the catalogued batch-only defects, one switch each (spec/decoder/depth/batch.py).

Each mutant wraps a correct batch engine (the fast engine's lockstep decode,
:meth:`verispec.decoder.ours.EngineDecoder.generate_batch`) and breaks it the way a serving stack
was broken (docs/peers.md, /work/shared/research/peer_defects.md):

- ``one_params_for_all``: every request of a call decoded with the FIRST request's params (a
  batch's sampling metadata built once from one request; the class of TensorRT-LLM's
  engine-wide sampling config, vLLM v0's MQA scorer metadata, vLLM #9423);
- ``one_stream_for_all``: per-request seeds ignored, every request of a call on one copy of the
  same random stream (TensorRT-LLM #19487: "unseeded requests share one RNG stream -> identical
  samples"; PR #17599: one engine-wide seed);
- ``unseeded_rows_not_noised``: in a call mixing seeded and unseeded requests, the unseeded rows
  sampled from un-noised probabilities, i.e. their argmax (vLLM #9441 / #11123 -> PR #10863: the
  exponential race's noise written to a copy, never back);
- ``unseeded_on_a_seeded_stream``: an unseeded request drawn on a copy of the stream of a seeded
  request of the same prompt and params in the call (generators keyed by the sampling params): each
  lane alone looks independent, the two lanes together repeat each other (TensorRT-LLM #19487,
  unseeded requests on a shared stream);
- ``greedy_rows_break_mixed_batch``: in a call mixing greedy and sampled requests, the greedy rows
  divided by a zero temperature the sentinel no longer caught, answered empty (vLLM PR #27077:
  NaN logits, empty ``generated_token_ids``);
- ``rows_of_another_request``: the batched target pass hands each span the rows of the NEXT span of
  the same length (a batch expansion that mis-assigns rows: vLLM PR #3951; one request's draft
  verified on another's rows), so a request's drafts and bonus are judged on another's law.

Each is REJECTED by the batch test (tests/test_decoder_batch.py); the unmutated engine PASSES, and so
does the lossless control ``drafts_from_another_request`` (each request drafts from ANOTHER request's
history: a draft leaking across requests, verified exactly, keeps the law).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from verispec.reference.drafts import NgramDraft, Proposal
from verispec.spec.decoder.depth.batch import BatchRequest


class _Wrapped:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.batch_slots = getattr(inner, "batch_slots", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class OneParamsForAll(_Wrapped):
    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        first = requests[0]
        return self.inner.generate_batch([replace(r, params=first.params, law=first.law) for r in requests])


class OneStreamForAll(_Wrapped):
    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        seed = next((r.seed for r in requests if r.seed is not None), 0)
        return self.inner.generate_batch([replace(r, seed=seed) for r in requests])


class UnseededRowsNotNoised(_Wrapped):
    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        mixed = any(r.seed is None for r in requests) and any(r.seed is not None for r in requests)
        if not mixed:
            return self.inner.generate_batch(requests)
        return self.inner.generate_batch(
            [
                r if r.seed is not None else replace(r, params=replace(r.params, temperature=0.0), seed=0)
                for r in requests
            ]
        )


class UnseededOnASeededStream(_Wrapped):
    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        out: list[BatchRequest] = []
        streams: dict[Any, list[int]] = {}
        for r in requests:  # the engine keys its generators by the request's sampling params
            key = (r.prompt_ids, repr(r.params))
            if r.seed is not None:
                streams.setdefault(key, []).append(r.seed)
        taken: dict[Any, int] = {}
        for r in requests:
            key = (r.prompt_ids, repr(r.params))
            if r.seed is None and streams.get(key):
                index = taken.get(key, 0)
                taken[key] = index + 1
                r = replace(r, seed=streams[key][index % len(streams[key])])
            out.append(r)
        return self.inner.generate_batch(out)


class GreedyRowsBreakMixedBatch(_Wrapped):
    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        greedy = [r.params.temperature == 0 for r in requests]
        out = list(self.inner.generate_batch(requests))
        if any(greedy) and not all(greedy):
            return [{"ids": [], "cycles": []} if g else o for g, o in zip(greedy, out)]
        return out


class _RotatingRows:
    """A model whose batched pass hands each span the rows of the next span of the same length."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def forward_many(self, spans: Any, **options: Any) -> Any:
        results = list(self._model.forward_many(spans, **options))
        by_length: dict[int, list[int]] = {}
        for i, (tokens, _cache) in enumerate(spans):
            by_length.setdefault(len(tokens), []).append(i)
        out = list(results)
        for group in by_length.values():
            if len(group) > 1:
                for j, i in enumerate(group):
                    out[i] = results[group[(j + 1) % len(group)]]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class RowsOfAnotherRequest(_Wrapped):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.decoding = copy.copy(inner)
        self.decoding.model = _RotatingRows(inner.model)

    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        return self.decoding.generate_batch(requests)


BATCH_MUTANTS: dict[str, tuple[str, type[_Wrapped]]] = {
    "one_params_for_all": ("one request's params applied to every request of the batch", OneParamsForAll),
    "one_stream_for_all": ("per-request seeds ignored: one random stream for every request", OneStreamForAll),
    "unseeded_rows_not_noised": (
        "unseeded rows of a mixed-seed batch sampled without noise (argmax)",
        UnseededRowsNotNoised,
    ),
    "unseeded_on_a_seeded_stream": (
        "an unseeded request drawn on the stream of a seeded request of the same params",
        UnseededOnASeededStream,
    ),
    "greedy_rows_break_mixed_batch": (
        "greedy rows of a mixed batch broken (a zero temperature)",
        GreedyRowsBreakMixedBatch,
    ),
    "rows_of_another_request": ("each span scored on another request's rows in the batched pass", RowsOfAnotherRequest),
}
UPSTREAM: dict[str, str] = {
    "one_params_for_all": "TensorRT-LLM #19487 class; vLLM #9423",
    "one_stream_for_all": "TensorRT-LLM #19487, PR #17599",
    "unseeded_rows_not_noised": "vLLM #9441, #11123 -> PR #10863",
    "unseeded_on_a_seeded_stream": "TensorRT-LLM #19487 (unseeded requests share a stream)",
    "greedy_rows_break_mixed_batch": "vLLM PR #27077",
    "rows_of_another_request": "vLLM PR #3951",
}


class _DraftsFromAnotherRequest(NgramDraft):
    """A draft copied from ANOTHER request's latest history (request ``index - 1`` of the call's
    ``size``, prompt included): the tokens that followed this request's last token there, else its
    last k tokens, so nearly every cycle verifies a foreign draft. Drafts
    leak across requests, but each is a proposal verified exactly (q one-hot),
    so the law is kept: a control the batch test must pass."""

    def __init__(self, histories: dict[int, tuple[int, ...]], index: int, size: int) -> None:
        super().__init__()
        self.histories, self.index, self.other = histories, index, (index - 1) % size

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        self.histories[self.index] = tuple(history)
        other = self.histories.get(self.other, ())
        last = history[-1] if history else None
        for start in range(len(other) - 2, -1, -1):  # what followed this request's last token over there
            if other[start] == last:
                return Proposal(tuple(other[start + 1 : start + 1 + k]))
        return Proposal(tuple(other[-k:]))  # else its last k tokens: a foreign draft every cycle


class DraftsFromAnotherRequest(_Wrapped):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.decoding = copy.copy(inner)
        self.histories: dict[int, tuple[int, ...]] = {}
        self.decoding.batch_drafts = lambda index, size: _DraftsFromAnotherRequest(self.histories, index, size)

    def generate_batch(self, requests: Sequence[BatchRequest]) -> Any:
        self.histories.clear()
        return self.decoding.generate_batch(requests)


# Correct-but-different batch engines: the batch test must PASS them (no false alarm on a lossless leak).
LOSSLESS_CONTROLS: dict[str, tuple[str, type[_Wrapped]]] = {
    "drafts_from_another_request": (
        "each request drafts from another request's history, verified exactly (lossless)",
        DraftsFromAnotherRequest,
    ),
}


def batch_mutant(name: str, inner: Any) -> Any:
    """The batch engine ``inner`` with the defect ``name`` (a key of :data:`BATCH_MUTANTS`)."""
    known = {**BATCH_MUTANTS, **LOSSLESS_CONTROLS}
    if name not in known:
        raise KeyError(f"unknown batch mutant {name!r}; known: {', '.join(known)}")
    return known[name][1](inner)
