"""llama-cpp-python's prompt lookup decoding as an engine for ``verispec check-decoder``.

    verispec check-decoder --engine verispec.peers.llama_cpp_peer:prompt_lookup --model FILE.gguf \\
        --law llama.cpp --target-law engine-logits --temperature 0.8 --repeat-penalty 1.3

llama-cpp-python computes with llama.cpp's quantized kernels, so the target law comes from its own
logits (``--target-law engine-logits``: :meth:`LlamaCppPeer.logits`, a plain ``logits_all``
evaluation of the prefix) through ``--law llama.cpp`` (spec/decoder/laws/llamacpp.py: ``Llama.generate``'s
chain, its penalties over the output tokens only). ``generate`` samples with
``Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))``: temp, top_k, top_p, min_p,
typical_p, repeat/frequency/presence penalties and the penalty window as the profile states them,
and an optional ``logits_processor`` list (the processor sees ``Llama._input_ids``). With
``penalties_by_processor`` the three penalties are sent as 1, 0, 0 and applied instead by
:class:`PenaltyProcessor`, a user ``logits_processor`` that computes llama.cpp's own penalty from
the history it is handed: the same law when that history is prompt + output, as it is without
drafts (the user's view of a custom penalty, a no-repeat rule or a grammar). Each
generation is seeded from (gate seed, index) through NumPy's SeedSequence, so the generations of
different calls never share a seed. Needs the optional ``llama`` extra (llama-cpp-python).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verispec.reference.errors import CheckError
from verispec.reference.sampling import SamplingParams

LOOKUP_TOKENS = 10  # num_pred_tokens, llama-cpp-python's default
N_CTX = 512
THREADS = 1  # a tiny model gains nothing from more, and spinning threads stall a shared machine


def generation_seed(seed: int, index: int) -> int:
    """A 32-bit seed for generation ``index`` of the call seeded ``seed`` (distinct pairs, distinct streams)."""
    import numpy as np

    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(index)]).generate_state(1)[0])


def sampling_kwargs(params: SamplingParams, law: Any) -> tuple[dict[str, Any], int]:
    """``Llama.generate`` keywords and the penalty window of the gate's law: the ``--law llama.cpp``
    profile as it is, or (no profile) verispec's params, whose penalty window also covers the
    prompt and so is llama-cpp-python's law only without penalties."""
    if law is None:
        if params.logit_bias:
            raise CheckError("the llama-cpp-python adapter maps no logit_bias")
        return (
            {
                "temp": params.temperature,
                "top_k": params.top_k,
                "top_p": params.top_p,
                "min_p": params.min_p,
                "repeat_penalty": params.repeat_penalty,
            },
            params.repeat_last_n,
        )
    if getattr(law, "name", None) != "llama.cpp":
        raise CheckError(
            f"the llama-cpp-python adapter samples llama.cpp's law, not --law {getattr(law, 'name', law)!r}"
        )
    p = law.params
    if p.penalize_prompt or p.logit_bias:
        raise CheckError("Llama.generate neither penalizes the prompt nor takes a logit bias")
    return (
        {
            "temp": p.temp,
            "top_k": p.top_k,
            "top_p": p.top_p,
            "min_p": p.min_p,
            "typical_p": p.typical_p,
            "repeat_penalty": p.repeat_penalty,
            "frequency_penalty": p.frequency_penalty,
            "presence_penalty": p.presence_penalty,
        },
        p.penalty_last_n,
    )


class PenaltyProcessor:
    """llama.cpp's repeat, frequency and presence penalties (``llama_sampler_penalties_apply``) as a
    ``logits_processor``: over the last ``window`` OUTPUT tokens of the history it is handed (the
    ids after the first ``prompt_length``), for each distinct token of count c,
    ``l = l * repeat if l <= 0 else l / repeat``, then ``l -= c * frequency + presence``, in float32
    as llama.cpp computes. It runs first in ``Llama``'s sampler chain, on the raw logits in id order,
    where the native penalties would run, so with the right history its law is ``--law llama.cpp``'s
    with those penalties."""

    def __init__(self, repeat: float, frequency: float, presence: float, window: int) -> None:
        import numpy as np

        self.repeat, self.window = np.float32(repeat), window
        self.frequency, self.presence = np.float32(frequency), np.float32(presence)
        self.prompt_length = 0  # set by the adapter before each generation

    def __call__(self, input_ids: Any, logits: Any) -> Any:
        import numpy as np

        output = np.asarray(input_ids[self.prompt_length :], dtype=np.int64)
        if self.window <= 0 or output.size == 0:
            return logits
        ids, counts = np.unique(output[-self.window :], return_counts=True)
        row = logits[ids]
        row = np.where(row <= 0, row * self.repeat, row / self.repeat).astype(np.float32)
        row -= counts.astype(np.float32) * self.frequency + self.presence
        logits[ids] = row
        return logits


class LlamaCppPeer:
    """``generate`` (the depth test) and ``logits`` (its own target law) over ``Llama.generate``."""

    def __init__(
        self,
        path: Path,
        lookup_tokens: int | None = LOOKUP_TOKENS,
        logits_processor: Any = None,
        penalties_by_processor: bool = False,
    ) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        if penalties_by_processor and logits_processor is not None:
            raise CheckError("penalties_by_processor brings its own logits_processor: not both")
        self.path, self.lookup_tokens, self.logits_processor = path, lookup_tokens, logits_processor
        self.penalties_by_processor = penalties_by_processor
        self.windows: dict[int, Any] = {}
        self.make: Any = lambda window: Llama(
            model_path=str(path),
            n_ctx=N_CTX,
            verbose=False,
            last_n_tokens_size=window,
            n_threads=THREADS,
            n_threads_batch=THREADS,
            draft_model=None if lookup_tokens is None else LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens),
        )
        self.scorer: Any = Llama(
            model_path=str(path),
            n_ctx=N_CTX,
            verbose=False,
            logits_all=True,
            n_threads=THREADS,
            n_threads_batch=THREADS,
        )
        self.eos = int(self.scorer.token_eos())
        self.fed: tuple[list[int], int] = ([], -1)  # the scorer's ids and the length of their first batch

    def _llm(self, window: int) -> Any:
        if window not in self.windows:  # the penalty window is a constructor argument
            self.windows[window] = self.make(window)
        return self.windows[window]

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int = 0,
        law: Any = None,
    ) -> list[list[int]]:
        """``n`` sampled generations of up to ``max_tokens`` tokens, prompt lookup on."""
        if min_tokens:
            raise CheckError("Llama.generate has no min_tokens")
        sampling, window = sampling_kwargs(params, law)
        llm = self._llm(window)
        processors = self.logits_processor
        if self.penalties_by_processor:
            penalty = PenaltyProcessor(
                sampling.pop("repeat_penalty"),
                sampling.pop("frequency_penalty", 0.0),
                sampling.pop("presence_penalty", 0.0),
                window,
            )
            penalty.prompt_length = len(prompt_ids)
            sampling |= {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
            processors = [penalty]
        out = []
        for i in range(n):
            llm.set_seed(generation_seed(seed, i))
            llm.reset()
            ids: list[int] = []
            for token in llm.generate(list(prompt_ids), reset=True, logits_processor=processors, **sampling):
                ids.append(int(token))
                if len(ids) == max_tokens or int(token) == self.eos:
                    break
            out.append(ids)
        return out

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
        """llama.cpp's plain next-token logits after the prefix (one batch, or ``prefix[:split_at]``
        then one token at a time). A request that extends the scorer's last one with the same first
        batch continues it (the same batches in the same order: the same rows), so the depth test's
        plain-fed rows of one generation cost one token each, not a re-feed of every prefix."""
        ids = [int(t) for t in prefix_ids]
        first = len(ids) if split_at is None else split_at
        fed, fed_first = self.fed
        if fed_first == first and len(fed) >= first and len(ids) > len(fed) and ids[: len(fed)] == fed:
            row = _fed_row(self.scorer, None, ids[len(fed) :])
        else:
            row = _fed_row(self.scorer, ids[:first], ids[first:])
        self.fed = (ids, first)
        return row


def plain_logits(scorer: Any, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
    """The next-token logits after the prefix of a ``logits_all`` ``Llama`` context: one batch of
    the whole prefix, or (``split_at`` s) ``prefix[:s]`` in one batch, then each later token alone,
    as plain decoding feeds a generation. The context is reset first, so a row never depends on
    the previous call."""
    ids = [int(t) for t in prefix_ids]
    first = len(ids) if split_at is None else split_at
    return _fed_row(scorer, ids[:first], ids[first:])


def _fed_row(scorer: Any, batch: list[int] | None, one_by_one: list[int]) -> list[float]:
    """Reset the context and feed ``batch`` in one batch (None: go on from the context as it is),
    then each token of ``one_by_one`` alone; the next-token logits after the last one fed."""
    if batch is not None:
        scorer.reset()
        scorer.eval(batch)
    for token in one_by_one:
        scorer.eval([token])
    return [float(x) for x in scorer.scores[scorer.n_tokens - 1]]


def prompt_lookup(path: Path) -> LlamaCppPeer:
    """The ``--engine`` factory: prompt lookup, 10 drafts (llama-cpp-python's default)."""
    return LlamaCppPeer(Path(path))


def plain(path: Path) -> LlamaCppPeer:
    """The ``--engine`` factory: no draft model (the control)."""
    return LlamaCppPeer(Path(path), lookup_tokens=None)
