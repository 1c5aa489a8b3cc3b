"""Plain autoregressive decoding: prompt in, a stream of tokens out, with the stats to compare by.

One target pass per token: the prompt is one pass (its last logits row gives the first token),
then each sampled token is fed back as a one-token span. Every token is drawn from
:func:`reference.sampling.target_distribution` (THE target law) with the full history (prompt and
generated ids), through :func:`reference.sampling.sample` and a seeded ``numpy.random.Generator``:
the same seed gives the same tokens.

Generation stops at the first of: an end-of-generation token (the tokenizer's ``eog_ids`` plus the
request's ``stop_ids``; the token is kept in ``ids`` but not rendered in the text), a stop string
(the text is cut before it; the token that completed it is kept in ``ids``), or ``max_tokens``.

Stats (``GenerationStats``), all wall-clock from the start of the prompt pass:
``ttft_s`` time to the first sampled token; ``tpot_s`` mean time per token after the first;
``tokens_per_s`` generated tokens / total time; ``target_passes`` forward calls of the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from reference.chat import ChatFormat
from reference.errors import ContextOverflow, ModelError, SamplingError
from reference.model import Model
from reference.sampling import SamplingParams, sample, target_distribution
from reference.tokenizer import Tokenizer


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate. Built by the CLI (or a test) and handed to :func:`generate`."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 128
    stop: tuple[str, ...] = ()              # stop strings
    stop_ids: frozenset[int] = frozenset()  # extra end-of-generation ids (a chat end-of-turn token)
    seed: int | None = None                 # None: a fresh unpredictable seed
    truncate: bool = False                  # drop the oldest prompt tokens instead of overflowing


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int
    generated_tokens: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    target_passes: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def measure(
        cls, *, prompt_tokens: int, generated_tokens: int, started: float, first_token_at: float,
        finished: float, target_passes: int,
    ) -> "GenerationStats":
        """Stats from ``time.perf_counter`` stamps: the request start, the first token, the end.

        TTFT is start -> first token (prefill and first draw); TPOT averages the later tokens.
        """
        n, total = generated_tokens, finished - started
        return cls(
            prompt_tokens=prompt_tokens,
            generated_tokens=n,
            ttft_s=(first_token_at - started) if n else 0.0,
            tpot_s=(finished - first_token_at) / (n - 1) if n > 1 else 0.0,
            tokens_per_s=n / total if n and total > 0 else 0.0,
            target_passes=target_passes,
        )


@dataclass(frozen=True)
class GenerationResult:
    prompt_ids: tuple[int, ...]   # as run (after BOS-for-empty and truncation)
    ids: tuple[int, ...]          # generated ids (an ending EOG id included)
    text: str                     # rendered text of ids (EOG not rendered, cut at a stop string)
    stop_reason: str              # "eog", "stop" or "max_tokens"
    stats: GenerationStats


def encode_prompt(
    tokenizer: Tokenizer,
    text: str,
    *,
    chat: ChatFormat | None = None,
    parse_special: bool = True,
) -> list[int]:
    """Prompt ids as llama.cpp makes them: BOS per the metadata's ``add_bos_token``, special
    tokens parsed (``parse_special``; always on in chat mode, whose markers are special tokens).

    ``chat`` wraps ``text`` as one user turn of that chat format first. An empty prompt gives the
    model's BOS alone (ModelError if it has none).
    """
    if chat is not None:
        text, parse_special = chat.wrap(text), True
    ids = tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=parse_special)
    if not ids:
        if tokenizer.bos_id is None:
            raise ModelError("the prompt is empty and the model has no BOS token to start from")
        ids = [tokenizer.bos_id]
    return ids


def fit_context(prompt_ids: Sequence[int], max_tokens: int, context_length: int, *, truncate: bool, bos_id: int | None) -> list[int]:
    """The prompt, checked to leave room for ``max_tokens`` within ``context_length``.

    Raises :class:`ContextOverflow` before any work when it does not fit, unless ``truncate``: then
    the oldest tokens are dropped (a leading BOS is kept).
    """
    ids = list(prompt_ids)
    if max_tokens < 0:
        raise SamplingError(f"max_tokens must be >= 0, got {max_tokens}")
    if len(ids) + max_tokens <= context_length:
        return ids
    keep_bos = bool(ids) and bos_id is not None and ids[0] == bos_id
    room = context_length - max_tokens - int(keep_bos)
    if not truncate or room < 1:
        raise ContextOverflow(
            f"prompt of {len(ids)} tokens plus max_tokens {max_tokens} exceeds the context length "
            f"{context_length}" + ("" if truncate else " (use --truncate to drop the oldest tokens)")
        )
    return ([ids[0]] if keep_bos else []) + ids[len(ids) - room :]


def generate(
    model: Model,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    *,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Decode ``request`` with ``model`` one token per pass; stream text pieces to ``on_text``.

    Raises SamplingError for invalid sampling parameters and ContextOverflow (before any model
    work) when the prompt plus ``max_tokens`` exceeds the context length and ``truncate`` is off.
    """
    request.params.validate(model.config.n_vocab)
    if not request.prompt_ids:
        raise ModelError("the prompt has no tokens (encode_prompt gives BOS for an empty prompt)")
    prompt = fit_context(
        request.prompt_ids, request.max_tokens, model.config.context_length,
        truncate=request.truncate, bos_id=tokenizer.bos_id,
    )
    rng = np.random.default_rng(request.seed)
    end_ids = tokenizer.eog_ids | request.stop_ids
    text = StopStringText(request.stop, tokenizer, on_text)
    history = list(prompt)
    generated: list[int] = []
    stop_reason = "max_tokens"

    started = time.perf_counter()
    first_token_at = started
    passes = 0
    if request.max_tokens > 0:
        cache = model.new_cache(len(prompt) + request.max_tokens)
        logits = model.forward(prompt, cache).logits[-1]  # [V]
        passes = 1
        for step in range(request.max_tokens):
            token = sample(target_distribution(logits, history, request.params), rng)
            if step == 0:
                first_token_at = time.perf_counter()
            generated.append(token)
            history.append(token)
            if token in end_ids:
                stop_reason = "eog"
                break
            if text.push(token):
                stop_reason = "stop"
                break
            if step + 1 == request.max_tokens:
                break
            logits = model.forward([token], cache).logits[-1]
            passes += 1
    finished = time.perf_counter()
    final_text = text.finish()

    stats = GenerationStats.measure(
        prompt_tokens=len(prompt), generated_tokens=len(generated), started=started,
        first_token_at=first_token_at, finished=finished, target_passes=passes,
    )
    return GenerationResult(tuple(prompt), tuple(generated), final_text, stop_reason, stats)


def prompt_logits(model: Model, prompt_ids: Sequence[int]) -> npt.NDArray[np.float32]:
    """Logits after every prompt token, ``[T, V]`` float32, from one pass on a fresh cache.

    ContextOverflow when the prompt is longer than the context length.
    """
    if len(prompt_ids) > model.config.context_length:
        raise ContextOverflow(
            f"prompt of {len(prompt_ids)} tokens exceeds the context length {model.config.context_length}"
        )
    return model.forward(prompt_ids, model.new_cache(max(1, len(prompt_ids)))).logits


class StopStringText:
    """Decoded text, streamed without ever showing a stop string (or a prefix of one that might
    still complete): text that could begin a stop string is held back until it cannot."""

    def __init__(self, stops: Sequence[str], tokenizer: Tokenizer, on_text: Callable[[str], None] | None) -> None:
        self.stops = tuple(s for s in stops if s)
        self.decoder = tokenizer.stream_decoder()
        self.on_text = on_text
        self.text = ""
        self.emitted = 0
        self.stopped = False

    def push(self, token: int) -> bool:
        """Add a token's text; True when a stop string has appeared (the text is cut before it)."""
        self.text += self.decoder.push(token)
        return self._settle(final=False)

    def finish(self) -> str:
        """Flush the decoder (unless stopped) and emit what is left; the final text."""
        if not self.stopped:
            self.text += self.decoder.flush()
            self._settle(final=True)
        return self.text

    def _settle(self, *, final: bool) -> bool:
        cut = min((i for s in self.stops if (i := self.text.find(s)) >= 0), default=-1)
        if cut >= 0:
            self.text = self.text[:cut]
            self.stopped = True
            self._emit(cut)
            return True
        self._emit(len(self.text) if final else len(self.text) - self._held_back())
        return False

    def _held_back(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        longest = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text)), longest, -1):
                if self.text.endswith(s[:k]):
                    longest = k
                    break
        return longest

    def _emit(self, upto: int) -> None:
        if upto > self.emitted:
            if self.on_text is not None:
                self.on_text(self.text[self.emitted : upto])
            self.emitted = upto
