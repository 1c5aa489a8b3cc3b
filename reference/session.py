"""One decode session: a request from validation to its result, whatever loop produces the tokens.

Every decode loop (plain decoding on either engine, speculative decoding, certified early exit)
opens a :class:`DecodeSession` for its request and commits tokens to it one at a time; the
session owns what the loops must agree on, so it is written once:

    validate      sampling parameters against the vocabulary; a prompt with at least one token
    fit           the prompt and ``max_tokens`` into the context (:func:`fit_context`)
    end ids       the tokenizer's end-of-generation ids plus the request's ``stop_ids``
    stop strings  text streamed without ever showing a stop string (:class:`StopStringText`)
    commit        one token: EOG, then stop string, then ``max_tokens`` end the session
    stats         :class:`GenerationStats` from the clock stamps and the loop's target passes

Generation stops at the first of: an end-of-generation token (kept in ``ids``, not rendered in the
text), a stop string (the text is cut before it; the token that completed it is kept in ``ids``),
or ``max_tokens`` (only ``max_tokens`` and stop strings with ``ignore_eog``: a benchmark that
must decode the same number of tokens on two engines). The session's ``rng`` (seeded by the request) is the request's one generator:
plain draws, draft draws and verification uniforms all come from it, in the loop's order.

Stats (``GenerationStats``), all wall-clock from :meth:`DecodeSession.begin` (the start of the
prompt pass): ``ttft_s`` time to the first committed token; ``tpot_s`` mean time per token after
the first; ``tokens_per_s`` generated tokens / total time; ``target_passes`` forward passes of the
target model (speculative decoding: cycles).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from verispec.reference.errors import ContextOverflow, ModelError, SamplingError
from verispec.reference.sampling import SamplingParams
from verispec.reference.seams import ModelConfig
from verispec.reference.tokenizer import Tokenizer


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate. Built by the CLI (or a test) and handed to :func:`generate`."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 128
    stop: tuple[str, ...] = ()  # stop strings
    stop_ids: frozenset[int] = frozenset()  # extra end-of-generation ids (a chat end-of-turn token)
    seed: int | None = None  # None: a fresh unpredictable seed
    truncate: bool = False  # drop the oldest prompt tokens instead of overflowing
    ignore_eog: bool = False  # decode exactly max_tokens: no token ends it (a fixed-length benchmark)


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
        cls,
        *,
        prompt_tokens: int,
        generated_tokens: int,
        started: float,
        first_token_at: float,
        finished: float,
        target_passes: int,
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
    prompt_ids: tuple[int, ...]  # as run (after BOS-for-empty and truncation)
    ids: tuple[int, ...]  # generated ids (an ending EOG id included)
    text: str  # rendered text of ids (EOG not rendered, cut at a stop string)
    stop_reason: str  # "eog", "stop" or "max_tokens"
    stats: GenerationStats


def fit_context(
    prompt_ids: Sequence[int], max_tokens: int, context_length: int, *, truncate: bool, bos_id: int | None
) -> list[int]:
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


class DecodeSession:
    """One request being decoded: the prompt as run, the history, the committed tokens, the stop
    state and the clock. Raises SamplingError / ModelError / ContextOverflow on construction,
    before any model work, for bad parameters, an empty prompt or a prompt that does not fit.
    """

    def __init__(
        self,
        config: ModelConfig,
        tokenizer: Tokenizer,
        request: GenerationRequest,
        *,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        request.params.validate(config.n_vocab)
        if not request.prompt_ids:
            raise ModelError("the prompt has no tokens (encode_prompt gives BOS for an empty prompt)")
        self.request = request
        self.prompt = fit_context(
            request.prompt_ids,
            request.max_tokens,
            config.context_length,
            truncate=request.truncate,
            bos_id=tokenizer.bos_id,
        )
        self.rng = np.random.default_rng(request.seed)
        self.end_ids = frozenset() if request.ignore_eog else tokenizer.eog_ids | request.stop_ids
        self.text = StopStringText(request.stop, tokenizer, on_text)
        self.history = list(self.prompt)  # prompt + committed tokens (the loops' context)
        self.generated: list[int] = []
        self.stop_reason = "max_tokens"
        self.done = request.max_tokens == 0
        self.target_passes = 0  # counted by the loop
        self.started = self.first_token_at = time.perf_counter()

    @property
    def remaining(self) -> int:
        """Tokens that may still be committed before ``max_tokens``."""
        return self.request.max_tokens - len(self.generated)

    def begin(self) -> None:
        """Start the clock (right before the prompt pass)."""
        self.started = self.first_token_at = time.perf_counter()

    def commit(self, token: int) -> bool:
        """Commit one token; True when the session has ended (EOG, stop string or max_tokens)."""
        if self.done:
            raise ModelError("a token was committed after the decode session ended")
        if not self.generated:
            self.first_token_at = time.perf_counter()
        self.generated.append(token)
        self.history.append(token)
        if token in self.end_ids:
            self.stop_reason, self.done = "eog", True
        elif self.text.push(token):
            self.stop_reason, self.done = "stop", True
        elif len(self.generated) >= self.request.max_tokens:
            self.done = True
        return self.done

    def finish(self) -> GenerationResult:
        """Stop the clock, flush the text; the result with its stats."""
        finished = time.perf_counter()
        final_text = self.text.finish()
        stats = GenerationStats.measure(
            prompt_tokens=len(self.prompt),
            generated_tokens=len(self.generated),
            started=self.started,
            first_token_at=self.first_token_at,
            finished=finished,
            target_passes=self.target_passes,
        )
        return GenerationResult(tuple(self.prompt), tuple(self.generated), final_text, self.stop_reason, stats)


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
