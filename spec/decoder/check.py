"""``verispec check-decoder``: end-to-end law test of a whole speculative decoding engine.

The engine under test (:class:`DecoderEngine`: a Python object, or a program speaking JSON lines,
:class:`CommandEngine`) returns samples of its first m <= 3 generated tokens for a prompt and
sampling parameters, speculation on (fewer when an end-of-generation token ends the sample). The
target law of those tokens comes from one of three places (``--target-law``):

    reference      OUR reference forward on the same GGUF (:class:`ReferenceLogits`): exact for an
                   engine with our numerics (transformers float32 on the dequantized weights)
    engine-logits  the engine's OWN plain logits for each prefix (:class:`EngineLogits`, the
                   ``logits`` op), put through our processors: for an engine of other numerics
    two-sample     no law at all: the same engine with speculation off (``sample_plain``) vs on,
                   a chi-square homogeneity test (:mod:`spec.decoder.two_sample`)

and :mod:`spec.decoder.first_tokens` runs the powered chi-square. Whole generations (the ``generate`` op,
``check-decoder --depth N``, the default) are judged token by token at any depth by
:mod:`spec.decoder.depth.law`. Greedy mode compares the engine's
speculative output with its own plain greedy output token for token; at a divergence it reports
the target's top-1 margin and whether it lies within the batch-shape noise of the logits (a
near-tie) or not (a bug): the ENGINE's own noise when it reports logits, ours otherwise (valid only
for an engine of our numerics; the verdict says which).

Wire ops (same envelope as :mod:`spec.external`)::

    {"op": "sample", "input": {"prompt_ids": [..], "params": {..}, "m": 2, "n": 500, "seed": 7}}
      -> {"samples": [[t1, t2], ...]}                     n runs, speculation on
    {"op": "sample_plain", "input": (as sample)}          n runs, speculation off (two-sample)
      -> {"samples": [[t1, t2], ...]}
    {"op": "generate", "input": {"prompt_ids": [..], "params": {..}, "max_tokens": 64,
                                 "min_tokens": 0, "n": 200, "seed": 7}}
      -> {"samples": [[t1, .., tT] | {"ids": [..], "cycles": [[drafted, accepted], ..]}, ...]}
                                                          n whole generations, speculation on
                                                          (the depth test, spec/decoder/depth/law.py;
                                                          cycles optional)
      sample, sample_plain and generate carry ``"law": {"name": "transformers", "params": {..}}``
      when check-decoder runs another ecosystem's law (``--law``, spec/decoder/laws/; absent: verispec)
    {"op": "generate_plain", "input": (as generate)}    n whole generations, speculation off
      -> {"samples": [[t1, .., tT], ...]}                 (two-sample mode at depth,
                                                          spec/decoder/depth/two_sample.py)
    {"op": "generate_batch", "input": {"requests": [{"prompt_ids": [..], "params": {..}, "max_tokens": 64,
                                                    "min_tokens": 0, "seed": 7 | null, "law": {..}?}, ..]}}
      -> {"generations": [[t1, .., tT] | {"ids": [..], "cycles": [..]}, ...]}
                                                          one whole generation per request, in order,
                                                          each request its own params and seed (null:
                                                          unseeded), decoded together (the batch test,
                                                          spec/decoder/depth/batch.py; optional)
    {"op": "greedy", "input": {"prompt_ids": [..], "max_tokens": 16, "speculative": true}}
      -> {"ids": [..]}
    {"op": "logits", "input": {"prefix_ids": [..], "split_at": null}}
      -> {"logits": [l_0, ..., l_{V-1}]}                  speculation off: the next-token logits
                                                          after the prefix in one pass; split_at s:
                                                          prefix[:s] in one pass, then each later
                                                          token alone (batch-shape noise)

Optional ops (``sample_plain``, ``generate_plain``, ``generate_batch``, ``logits``) may be answered ``{"unsupported": op}``; a mode that
needs one then stops with a usage error.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from verispec.reference.errors import VerispecError
from verispec.reference.sampling import SamplingParams
from verispec.spec import answers
from verispec.spec.decoder.first_tokens import (
    F32,
    CachedLaw,
    LawVerdict,
    LogitsOf,
    Prefix,
    first_tokens_law,
    judge,
    sample_size,
)
from verispec.spec.decoder.laws.common import Profile
from verispec.spec.decoder.prefix_rows import PathRows
from verispec.spec.external import ExternalError
from verispec.spec.vectors import Json


class DecoderEngine(Protocol):
    """A decoding engine with speculation on: n samples of its first m tokens."""

    def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int
    ) -> Sequence[Sequence[int]]: ...


class GreedyEngine(Protocol):
    """Greedy decoding with speculation on or off."""

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> Sequence[int]: ...


class LogitsEngine(Protocol):
    """An engine that reports its own plain (speculation-off) next-token logits after a prefix:
    the prefix in one pass, or (``split_at`` s) ``prefix[:s]`` in one pass, then each later token
    alone, as plain decoding feeds a generation (s = len(prefix) - 1: only the last token alone)."""

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> Any: ...


class PlainSampler(Protocol):
    """The same engine with speculation off: n samples of its first m tokens (two-sample mode)."""

    def sample_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int
    ) -> Sequence[Sequence[int]]: ...


class Logits(Protocol):
    """Where the target's logits come from: ``logits_of(prefix)``, its batch-shape noise, a name."""

    source: str

    def __call__(self, prefix: Prefix) -> F32: ...

    def batch_shape_noise(self, prefix: Prefix, prompt_length: int | None = None) -> float: ...


# -----------------------------------------------------------------------------------------------
# our reference forward, memoized by prefix


# The memo's bound: 256 MiB of rows, least recently used evicted first (1,365 rows of SmolLM2's
# 49,152 ids, 208,000 of a 322-id toy). The first-m test asks for the prompt and its few-token
# continuations again and again (those stay); at depth every prefix is new and is not asked again.
MEMO_BYTES = 256 * 2**20


class ReferenceLogits:
    """``logits_of(prefix)``: the last logits row of one forward of the whole prefix, memoized
    (every prefix of a forwarded span is memoized at once; a memo row is read-only: it is handed
    out again to every later caller of its prefix). Each row is a COPY (a view of a
    float32 forward would keep the whole [T, V] forward alive: T times the row), and the memo
    keeps at most ``memo_bytes`` of rows, the least recently used evicted first, so a long run's
    memory is bounded whatever it asks."""

    source = "reference forward (ours; valid for an engine of our numerics)"

    def __init__(self, model: Any, memo_bytes: int = MEMO_BYTES) -> None:
        self.model = model
        self.memo: OrderedDict[Prefix, F32] = OrderedDict()
        self.memo_bytes = memo_bytes
        self.retained = 0  # bytes of the rows in the memo
        self.forwards = 0

    def __call__(self, prefix: Prefix) -> F32:
        row = self.memo.get(prefix)
        if row is not None:
            self.memo.move_to_end(prefix)
            return row
        logits = self.model.forward(list(prefix), self.model.new_cache(len(prefix))).logits  # [T, V]
        self.forwards += 1
        for i in range(len(prefix)):
            self._keep(
                prefix[: i + 1], np.array(logits[i], dtype=np.float32)
            )  # np.array copies: no view of the forward
        out: F32 = np.array(logits[-1], dtype=np.float32)
        return out

    def _keep(self, prefix: Prefix, row: F32) -> None:
        if prefix in self.memo:
            self.memo.move_to_end(prefix)
            return
        row.setflags(write=False)  # handed out to every caller of the prefix: nobody may change it
        self.memo[prefix] = row
        self.retained += row.nbytes
        while self.retained > self.memo_bytes and len(self.memo) > 1:
            _, old = self.memo.popitem(last=False)
            self.retained -= old.nbytes

    def split_row(self, prefix: Prefix, split_at: int) -> F32:
        """The last row computed as ``prefix[:split_at]`` in one pass, then each later token alone."""
        if not 1 <= split_at < len(prefix):
            raise ValueError(f"split_at must be in [1, {len(prefix) - 1}], got {split_at}")
        cache = self.model.new_cache(len(prefix))
        out = self.model.forward(list(prefix[:split_at]), cache)
        for token in prefix[split_at:]:
            out = self.model.forward([token], cache)
        return np.asarray(out.logits[-1], dtype=np.float32)

    def batch_shape_noise(self, prefix: Prefix, prompt_length: int | None = None) -> float:
        """max |logit difference| of the last row: one pass of the prefix vs :func:`noise_splits`
        (other matmul shapes: other roundings)."""
        whole = np.asarray(
            self.model.forward(list(prefix), self.model.new_cache(len(prefix))).logits[-1], dtype=np.float64
        )
        return max(
            float(np.max(np.abs(whole - np.asarray(self.split_row(prefix, s), dtype=np.float64))))
            for s in noise_splits(len(prefix), prompt_length)
        )


def noise_splits(length: int, prompt_length: int | None) -> list[int]:
    """The batch shapes the noise is measured at: the last token alone, and (given the prompt's
    length) the generation one token at a time after the prompt in one pass, as plain decoding
    computes it; a speculative decoder's rows come from yet other shapes (the last token and its
    drafts in one batch), so the noise of a prefix is the largest of these differences."""
    splits = {length - 1}
    if prompt_length is not None and 1 <= prompt_length < length:
        splits.add(prompt_length)
    return sorted(s for s in splits if s >= 1)


class EngineLogits:
    """``logits_of(prefix)`` from the engine under test (its ``logits`` op), memoized and checked
    (a 1-D row of finite numbers, the same length every time)."""

    source = "the engine's own logits"

    def __init__(self, engine: LogitsEngine) -> None:
        self.engine = engine
        self.memo: dict[Prefix, F32] = {}
        self.vocab: int | None = None

    def _row(self, prefix: Prefix, split_at: int | None) -> F32:
        try:
            row = np.asarray(self.engine.logits(list(prefix), split_at=split_at), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ExternalError(
                f"the engine's logits for a prefix of {len(prefix)} ids are not numbers: {exc}"
            ) from exc
        if row.ndim != 1 or row.shape[0] == 0 or (self.vocab is not None and row.shape[0] != self.vocab):
            raise ExternalError(f"the engine's logits row has shape {row.shape}, expected [{self.vocab or 'V'}]")
        if not np.all(np.isfinite(row)):
            raise ExternalError(f"the engine's logits for a prefix of {len(prefix)} ids are not all finite")
        self.vocab = row.shape[0]
        return np.asarray(row, dtype=np.float32)

    def __call__(self, prefix: Prefix) -> F32:
        if prefix not in self.memo:
            self.memo[prefix] = self._row(prefix, None)
        return self.memo[prefix]

    def fresh(self, prefix: Prefix) -> F32:
        """The row after ``prefix``, checked, not memoized (the depth test asks for every prefix of
        every generation once: a memo would only grow)."""
        return self._row(prefix, None)

    def plain_fed(self, prefix: Prefix, prompt_length: int) -> F32:
        """The row after ``prefix`` fed as plain decoding feeds it: the first ``prompt_length`` ids
        (the prompt) in one pass, then each later id alone (``split_at``); the prompt alone is one
        pass. Checked, not memoized (as :meth:`fresh`)."""
        return self._row(prefix, prompt_length if 1 <= prompt_length < len(prefix) else None)

    def batch_shape_noise(self, prefix: Prefix, prompt_length: int | None = None) -> float:
        """The engine's own: max |one pass of the prefix - the same row at :func:`noise_splits`|."""
        whole = np.asarray(self(prefix), dtype=np.float64)
        return max(
            float(np.max(np.abs(whole - np.asarray(self._row(prefix, s), dtype=np.float64))))
            for s in noise_splits(len(prefix), prompt_length)
        )


def reports_logits(engine: Any) -> bool:
    """Does the engine offer the ``logits`` op (a method, or a program that does not answer
    ``unsupported``)?"""
    if isinstance(engine, CommandEngine):
        return engine.offers("logits")
    return callable(getattr(engine, "logits", None))


@dataclass
class _Out:
    logits: F32
    hidden: F32 | None = None


class _IdCache:
    """A cache that only records the ids whose K,V it would hold (slots in order)."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    @property
    def length(self) -> int:
        return len(self.ids)

    def truncate(self, length: int) -> None:
        if not 0 <= length <= len(self.ids):
            raise ValueError(f"truncate to {length} outside [0, {len(self.ids)}]")
        del self.ids[length:]

    def keep(self, start: int, slots: Sequence[int]) -> None:
        """After a tree pass: slots ``[0, start)`` plus the listed span slots, in order."""
        self.ids = [*self.ids[:start], *(self.ids[s] for s in slots)]

    def reserve(self, n_tokens: int, start: int | None = None) -> int:
        return len(self.ids) if start is None else start

    def advance(self, n_tokens: int) -> None:
        raise AssertionError("not used: forward() appends")


class MemoTargetModel:
    """A :class:`reference.seams.TargetModel` over :class:`ReferenceLogits`: the decode loop runs
    unchanged (its cache, rollback, draft, token trees) while a forward costs a dictionary look-up
    per row (a miss: one real forward of the row's whole prefix, which memoizes every prefix).
    Each span row gets the row of its own prefix; with ``tree_parents`` the prefix is the row's
    path through the tree (reference/tree_attention.py's meaning). Over :class:`PathRows` (whole
    generations: every prefix is new) a miss runs only the ids past the cached path."""

    def __init__(self, logits: ReferenceLogits | PathRows) -> None:
        self.logits = logits

    @property
    def config(self) -> Any:
        return self.logits.model.config

    @property
    def forwards(self) -> int:
        """Real forwards run so far (memo misses)."""
        return self.logits.forwards

    def row(self, prefix: Prefix) -> F32:
        return self.logits(prefix)

    def new_cache(self, capacity: int | None = None) -> _IdCache:
        return _IdCache()

    def forward(
        self,
        tokens: Sequence[int],
        cache: _IdCache,
        *,
        positions: Sequence[int] | None = None,
        return_hidden: bool = False,
        tree_parents: Sequence[int] | None = None,
    ) -> _Out:
        prefix = tuple(cache.ids)
        paths: list[Prefix] = []
        for i, token in enumerate(int(t) for t in tokens):
            parent = i - 1 if tree_parents is None else int(tree_parents[i])
            paths.append((*(prefix if parent < 0 else paths[parent]), token))
        cache.ids.extend(int(t) for t in tokens)
        if tree_parents is None and paths:  # nested paths: the longest first serves the others
            self.logits(paths[-1])
        return _Out(np.stack([self.logits(p) for p in paths]))

    def forward_layers(self, *args: Any, **kwargs: Any) -> F32:
        raise AssertionError("not used by the model and ngram drafts")

    def head(self, hidden: F32) -> F32:
        raise AssertionError("not used by the model and ngram drafts")

    def embed(self, tokens: Sequence[int]) -> F32:
        raise AssertionError("not used by the model and ngram drafts")


class ReferenceDecoder:
    """Our own decode loop (:func:`reference.decode.speculative_generate`) as a DecoderEngine:
    the target on :class:`MemoTargetModel`, the same model drafting with ``draft_params``."""

    def __init__(self, logits: ReferenceLogits, tokenizer: Any, draft_params: SamplingParams, k: int = 2) -> None:
        self.reference = logits
        self.target = MemoTargetModel(logits)
        self.tokenizer = tokenizer
        self.draft_params = draft_params
        self.k = k
        self.law = CachedLaw()

    def sample(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        m: int,
        n: int,
        seed: int,
        target: MemoTargetModel | None = None,
        law: CachedLaw | None = None,
    ) -> list[list[int]]:
        from verispec.reference.decode import SpeculativeOptions, speculative_generate
        from verispec.reference.drafts import ModelDraft
        from verispec.reference.session import GenerationRequest

        target = target or self.target
        rng = np.random.default_rng(seed)
        draft = ModelDraft(target, "model", params=self.draft_params)
        out = []
        for _ in range(n):
            request = GenerationRequest(tuple(prompt_ids), params, max_tokens=m, seed=int(rng.integers(2**63)))
            result = speculative_generate(
                target, self.tokenizer, request, draft, SpeculativeOptions(k=self.k), law=law or self.law
            )
            out.append(list(result.generation.ids))
        return out

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        """n whole generations (the depth test's engine interface); our loop has no min_tokens. Every
        prefix at depth is new: the rows come from one KV cache along the path (:class:`PathRows`)
        and the law memo is fresh per call (a memo would only grow)."""
        if min_tokens:
            raise VerispecError("our decode loop has no min_tokens")
        return self.sample(prompt_ids, params, max_tokens, n, seed, self._path_target(), CachedLaw())

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        """n whole generations with speculation off (two-sample mode at depth)."""
        if min_tokens:
            raise VerispecError("our decode loop has no min_tokens")
        return self.sample_plain(prompt_ids, params, max_tokens, n, seed, self._path_target())

    def _path_target(self) -> MemoTargetModel:
        return MemoTargetModel(PathRows(self.reference.model))

    def sample_plain(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        m: int,
        n: int,
        seed: int,
        target: MemoTargetModel | None = None,
    ) -> list[list[int]]:
        from verispec.reference.generate import generate
        from verispec.reference.session import GenerationRequest

        target = target or self.target
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            request = GenerationRequest(tuple(prompt_ids), params, max_tokens=m, seed=int(rng.integers(2**63)))
            out.append(list(generate(target, self.tokenizer, request).ids))
        return out

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> F32:
        logits = self.reference
        prefix = tuple(int(t) for t in prefix_ids)
        return logits(prefix) if split_at is None else logits.split_row(prefix, split_at)

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        from verispec.reference.decode import SpeculativeOptions, speculative_generate
        from verispec.reference.drafts import NgramDraft
        from verispec.reference.generate import generate
        from verispec.reference.session import GenerationRequest

        request = GenerationRequest(tuple(prompt_ids), SamplingParams(temperature=0.0), max_tokens=max_tokens)
        if not speculative:
            return list(generate(self.target, self.tokenizer, request).ids)
        result = speculative_generate(
            self.target, self.tokenizer, request, NgramDraft(n_min=1), SpeculativeOptions(k=self.k)
        )
        return list(result.generation.ids)


# -----------------------------------------------------------------------------------------------
# a program under test


def with_law(request: dict[str, Any], law: Profile | None) -> dict[str, Any]:
    """The request with ``"law": {"name", "params"}`` when a law profile is given (an engine that
    ignores the field samples ``params``: the verispec law, the default)."""
    return request if law is None else {**request, "law": law.to_json()}


class CommandEngine:
    """An engine behind a command speaking the ops of the module docstring. Every answer is
    validated (:mod:`spec.answers`) against what was asked and the model's vocabulary ``vocab``
    (None: ids need only be non-negative integers; :func:`check_law` still bounds them by V)."""

    def __init__(self, command: str, timeout: float, vocab: int | None = None, eog: Collection[int] = ()) -> None:
        from verispec.spec.external import CommandTransport, WireImplementation

        self.wire = WireImplementation(CommandTransport(command, timeout))
        self.vocab = vocab
        self.eog = frozenset(eog)

    def _samples(
        self,
        op: str,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        m: int,
        n: int,
        seed: int,
        law: Profile | None = None,
    ) -> list[list[int]]:
        from verispec.spec.vectors.wire import params_to_json

        request = {"prompt_ids": list(prompt_ids), "params": params_to_json(params), "m": m, "n": n, "seed": seed}
        out = self.wire.call(op, with_law(request, law))
        return answers.samples(
            out.get("samples"), n, m, self.vocab if self.vocab is not None else 2**63, f"the engine's {op}"
        )

    def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int, law: Profile | None = None
    ) -> list[list[int]]:
        return self._samples("sample", prompt_ids, params, m, n, seed, law)

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int = 0,
        law: Profile | None = None,
    ) -> list[Any]:
        """n whole generations (ids lists, or ``{"ids", "cycles"}`` objects: spec/decoder/depth/law.py reads them)."""
        return self._generations("generate", prompt_ids, params, max_tokens, n, seed, min_tokens, law)

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[Any]:
        """n whole generations with speculation off (op ``generate_plain``; two-sample mode at depth)."""
        return self._generations("generate_plain", prompt_ids, params, max_tokens, n, seed, min_tokens)

    def _generations(
        self,
        op: str,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int,
        law: Profile | None = None,
    ) -> list[Any]:
        from verispec.spec.vectors.wire import params_to_json

        request = {
            "prompt_ids": list(prompt_ids),
            "params": params_to_json(params),
            "max_tokens": max_tokens,
            "min_tokens": min_tokens,
            "n": n,
            "seed": seed,
        }
        out = self.wire.call(op, with_law(request, law))
        samples = out.get("samples")
        if not isinstance(samples, list) or len(samples) != n or not all(isinstance(s, (list, dict)) for s in samples):
            raise ExternalError(f"{op} output.samples must be a list of {n} generations")
        return samples

    def sample_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int, law: Profile | None = None
    ) -> list[list[int]]:
        return self._samples("sample_plain", prompt_ids, params, m, n, seed, law)

    def generate_batch(self, requests: Sequence[Any]) -> Any:
        """One whole generation per request (op ``generate_batch``; the batch test reads the answer
        with spec/decoder/depth/batch.py ``checked_batch``: exactly one generation a request, each
        through the one reader of generations)."""
        from verispec.spec.decoder.depth.batch import request_json

        out = self.wire.call("generate_batch", {"requests": [request_json(r) for r in requests]})
        generations = out.get("generations")
        if not isinstance(generations, list):
            raise ExternalError(f"generate_batch output.generations must be a list of {len(requests)} generations")
        return generations

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[Any]:
        row = self.wire.call("logits", {"prefix_ids": list(prefix_ids), "split_at": split_at}).get("logits")
        checked: list[Any] = answers.logits_row(
            row, self.vocab, f"the engine's logits after {len(prefix_ids)} ids"
        ).tolist()
        return checked

    def offers(self, op: str) -> bool:
        """Probe an optional op with a one-id request (prefix [0])."""
        from verispec.spec.external import Unsupported

        try:
            if op == "logits":
                self.logits([0])
            return True
        except Unsupported:
            return False
        except ExternalError:
            return True  # it answers, malformed: the check that uses the op fails with the reason

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        out = self.wire.call(
            "greedy", {"prompt_ids": list(prompt_ids), "max_tokens": max_tokens, "speculative": speculative}
        )
        if "ids" not in out:
            raise ExternalError(f"the engine's greedy answer lacks its ids (speculative={speculative})")
        vocab = self.vocab if self.vocab is not None else 2**63
        return answers.greedy_ids(out["ids"], max_tokens, vocab, self.eog, "the engine")

    def close(self) -> None:
        self.wire.close()


# -----------------------------------------------------------------------------------------------
# the checks


@dataclass(frozen=True)
class LawCase:
    prompt_ids: tuple[int, ...]
    params: SamplingParams
    m: int = 2
    min_mass: float = 0.01
    eog: frozenset[int] = frozenset()  # end-of-generation ids: a sample may end early at one
    law: Profile | None = None  # another ecosystem's target law (None: THE target law of params)


def law_options(law: Profile | None) -> dict[str, Profile]:
    """The keyword an engine receives for a non-default law profile (none for the default: old
    engines keep working)."""
    from verispec.spec.decoder.laws import DEFAULT

    return {} if law is None or law.name == DEFAULT else {"law": law}


def check_law(
    engine: DecoderEngine, logits_of: LogitsOf, case: LawCase, *, alpha: float, tv: float, seed: int = 20_261_130
) -> LawVerdict:
    """The engine's first m tokens against the target law of ``logits_of`` (our forward, or the
    engine's own logits), N for power 0.99 against ``tv``."""
    law = first_tokens_law(logits_of, case.prompt_ids, case.params, case.m, case.min_mass, case.eog, case.law)
    n = sample_size(law, alpha, tv)
    vocab = np.asarray(logits_of(case.prompt_ids)).shape[-1]  # the law's V: every id must lie in [0, V)
    try:
        sample: Any = engine.sample  # an engine of the default law need not take ``law``
        samples = answers.samples(
            sample(case.prompt_ids, case.params, case.m, n, seed, **law_options(case.law)), n, case.m, vocab
        )
    except ExternalError as exc:  # a malformed answer fails the case, never counts
        failed = judge(law, [], alpha, tv)
        return replace(failed, passed=False, detail=f"malformed answer: {str(exc)[:300]}")
    except VerispecError as exc:  # a decoder that breaks on a valid request fails the case
        failed = judge(law, [], alpha, tv)
        return replace(failed, passed=False, detail=f"the engine raised {type(exc).__name__}: {str(exc)[:200]}")
    return judge(law, samples, alpha, tv)


@dataclass
class GreedyVerdict:
    """Speculative vs plain greedy: equal, or where they part and why."""

    plain: list[int]
    speculative: list[int]
    divergence: int | None = None  # first differing step (the shorter length when one output is a prefix of the other)
    margin: float = 0.0  # target's top-1 margin there (our reference logits)
    noise: float = 0.0  # batch-shape noise of the logits there
    noise_source: str = ""  # whose logits: the engine's own, or our reference forward
    notes: list[str] = field(default_factory=list)
    malformed: str | None = None  # why an answer could not be counted (a failure)
    ending_bug: str = ""  # one output ends where no near-tie can explain it (past an EOG, past max_tokens, early)

    @property
    def near_tie(self) -> bool:
        """Both rows may move by the noise: a margin within twice it can flip."""
        return self.divergence is not None and not self.ending_bug and self.margin <= 2.0 * self.noise

    @property
    def passed(self) -> bool:
        return self.malformed is None and (self.divergence is None or self.near_tie)

    def detail(self) -> str:
        if self.malformed is not None:
            return f"malformed answer: {self.malformed}"
        if self.divergence is None:
            return f"{len(self.plain)} tokens identical"
        j = self.divergence
        if self.ending_bug:
            return f"differ at step {j}: plain {_token_at(self.plain, j)} vs speculative {_token_at(self.speculative, j)}: BUG ({self.ending_bug})"
        what = "near-tie (within batch-shape noise)" if self.near_tie else "BUG (margin beyond batch-shape noise)"
        return (
            f"differ at step {j}: plain {_token_at(self.plain, j)} vs speculative "
            f"{_token_at(self.speculative, j)}, top-1 margin {self.margin:.4g}, noise {self.noise:.3g} "
            f"(from {self.noise_source}): {what}"
        )


def _token_at(ids: Sequence[int], step: int) -> str:
    """The id at ``step``, or "(ended)" past the end of an output."""
    return str(ids[step]) if step < len(ids) else "(ended)"


def ending_bug(shorter: Sequence[int], max_tokens: int, eog: frozenset[int]) -> str:
    """Why one output being a strict prefix of the other is a bug outright, or "" when the shorter
    may have ended on an end-of-generation id it does not report (then the step is a near-tie
    candidate: that EOG against the longer output's token)."""
    if shorter and shorter[-1] in eog:
        return f"the longer output runs on past the end-of-generation id {shorter[-1]} at step {len(shorter) - 1}"
    if len(shorter) >= max_tokens:
        return f"the longer output exceeds max_tokens = {max_tokens}"
    if not eog:
        return f"the shorter output stops at {len(shorter)} of max_tokens = {max_tokens} tokens, not at an end-of-generation id"
    return ""


def _short_without_an_end(
    ids: Sequence[int], other: Sequence[int], max_tokens: int, ends: frozenset[int], who: str
) -> None:
    """Fewer than max_tokens ids must end at an end-of-generation id (when those are known), unless
    the other output continues them: then the shorter may have ended on an EOG it does not report,
    which :func:`check_greedy` judges as a near-tie candidate."""
    continued = len(other) > len(ids) and list(other[: len(ids)]) == list(ids)
    if ends and len(ids) < max_tokens and ids[-1] not in ends and not continued:
        raise ExternalError(
            f"{who} answered {len(ids)} greedy tokens, asked for {max_tokens} (fewer only when ending at an end-of-generation id)"
        )


def check_greedy(
    engine: GreedyEngine,
    logits_of: Logits,
    prompt_ids: Sequence[int],
    max_tokens: int,
    eog: Collection[int] | None = None,
) -> GreedyVerdict:
    """Token-identical to the engine's own plain greedy output, or a near-tie: the margin and the
    batch-shape noise come from ``logits_of`` (:class:`EngineLogits` for an engine that reports its
    logits, :class:`ReferenceLogits` for one of our numerics).

    Outputs of different lengths with one a prefix of the other: the longer continues where the
    shorter ended. That is a bug outright when the shorter ended at a reported end-of-generation id
    (``eog``), at ``max_tokens``, or early with no EOG known; otherwise the shorter ended on an EOG
    it does not report, and the step is judged as a near-tie between the best EOG and the longer
    output's token.

    Each output must first be well formed: max_tokens ids in [0, V), fewer only when it ends at an
    ``eog`` id (any 1..max_tokens ids when ``eog`` is None, not known); a malformed one fails."""
    vocab = np.asarray(logits_of(tuple(int(t) for t in prompt_ids))).shape[-1]
    ends = frozenset(eog or ())  # the end-of-generation ids, as a set
    try:
        plain = answers.greedy_ids(
            engine.greedy(prompt_ids, max_tokens, False), max_tokens, vocab, None, "the plain engine"
        )
        spec = answers.greedy_ids(
            engine.greedy(prompt_ids, max_tokens, True), max_tokens, vocab, None, "the speculative engine"
        )
        _short_without_an_end(plain, spec, max_tokens, ends, "the plain engine")
        _short_without_an_end(spec, plain, max_tokens, ends, "the speculative engine")
    except ExternalError as exc:
        return GreedyVerdict([], [], noise_source=logits_of.source, malformed=str(exc)[:300])
    verdict = GreedyVerdict(plain, spec, noise_source=logits_of.source)
    if plain == spec:
        return verdict
    j = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), min(len(plain), len(spec)))
    verdict.divergence = j
    prefix = tuple(int(t) for t in prompt_ids) + tuple(plain[:j])
    row = np.asarray(logits_of(prefix), dtype=np.float64)
    if j >= min(len(plain), len(spec)):  # one output is a strict prefix of the other
        shorter, longer = (plain, spec) if len(plain) < len(spec) else (spec, plain)
        verdict.notes.append("outputs differ in length only")
        verdict.ending_bug = ending_bug(shorter, max_tokens, ends)
        if verdict.ending_bug:
            return verdict
        best_eog = (
            max(float(row[e]) for e in ends if 0 <= e < row.shape[0])
            if any(0 <= e < row.shape[0] for e in ends)
            else -np.inf
        )
        verdict.margin = abs(float(row[longer[j]]) - best_eog)
    else:
        top = np.sort(row)
        verdict.margin = float(top[-1] - top[-2])
    verdict.noise = logits_of.batch_shape_noise(prefix, len(prompt_ids)) if len(prefix) > 1 else 0.0
    return verdict


def law_json(verdict: LawVerdict) -> Json:
    return {
        "passed": verdict.passed,
        "n": verdict.n,
        "alpha": verdict.alpha,
        "power": round(verdict.power, 6),
        "tv": verdict.tv,
        "detail": verdict.detail,
    }
