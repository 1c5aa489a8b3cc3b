"""The options of ``verispec check-decoder`` as objects: what the gate passes around, in one place.

Each is a frozen dataclass that checks its own fields when it is built (types and ranges through
:mod:`verispec.arguments`, so a bad value is the same typed error from the CLI, the API and the
pytest plugin); the checks that relate two objects are :class:`DecoderOptions`'.

DecoderUnderTest   the decoder: exactly one of ``engine``, ``engine_cmd``, ``ours``, ``mutant``;
                   ``model``, ``weights``, ``timeout``, ``workers``, ``draft`` (:class:`DraftFlags`),
                   ``batch`` (a batched engine: its ``generate_batch`` op)
DraftFlags         the draft of ``ours`` / a mutant: ``draft_temperature``, ``draft_top_k``, ``k``,
                   ``draft_kind`` (the fast engine's decoder: ``auto`` or ``ngram``)
SamplingFlags      the target law: ``law`` (whose), ``target_law`` (where its rows come from), the
                   sampling flags and ``penalties`` (:class:`Penalties`)
DepthDesign        the test: ``depth`` (0: the first-m test), ``m``, ``tv``, ``fraction``,
                   ``alpha``, ``min_mass``, ``budget``, ``first_m``, ``greedy``, ``max_tokens``
DecoderReporting   ``log``, ``progress``, ``progress_every``
DecoderOptions     the four above and the prompts judged

Every field is named as its flag (``--draft-top-k`` -> ``draft_top_k``): :func:`decoder_options`
builds these objects from the CLI's parsed flags, the API's keywords or ready-made objects, with
the one mapping of :func:`verispec.options.build`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from verispec import arguments
from verispec.options import keywords_of, normalize_field, objects, one_of
from verispec.reference.errors import CheckError

if TYPE_CHECKING:
    from collections.abc import Collection

    from verispec.decoder.report import PromptOutcome
    from verispec.spec.decoder.laws import Profile

__all__ = [
    "DECODER_KEYWORDS",
    "DEFAULT_PROMPTS",
    "DecoderOptions",
    "DecoderReporting",
    "DecoderUnderTest",
    "DepthDesign",
    "DraftFlags",
    "Penalties",
    "SamplingFlags",
    "TargetLaw",
    "decoder_options",
    "default_tv",
]

TargetLaw = Literal["reference", "engine-logits", "two-sample"]
TARGET_LAWS: tuple[str, ...] = ("reference", "engine-logits", "two-sample")
DEFAULT_PROMPTS: tuple[str, ...] = ("The cat sat on the",)
DEFAULT_MODEL = "smollm2-135m"
Engine = str | Callable[[Path], Any] | None  # "module:FACTORY" or FACTORY(model_path) -> engine


DRAFT_KINDS: tuple[str, ...] = ("auto", "ngram")  # the fast engine's decoder's drafts (verispec/decoder/ours.py)


@dataclass(frozen=True, kw_only=True)
class DraftFlags:
    """The draft of our decode loop and of the mutants: its law and ``k`` drafts per cycle (the
    most tree depth with ``auto``).

    ``draft_kind``: the draft of the fast engine's own decoder (``ours`` with ``weights``):
    ``auto``, the token-tree draft ``verispec generate --draft`` runs by default
    (reference/draft_choice.py, with a fixed cost curve so each generation is reproducible from its
    seed), or ``ngram``, the n-gram chain draft. None (the default) is ``auto``: the gate judges
    the decoder the product runs unless told otherwise. Given without ``ours`` and ``weights`` it is
    a usage error (our reference loop and the mutants draft from the draft law above)."""

    draft_temperature: float = 2.0
    draft_top_k: int = 4
    k: int = 2
    draft_kind: str | None = None

    def __post_init__(self) -> None:
        # the draft's law is ours to build (ours, the mutants): a bad one is a usage error, not the decoder failing
        arguments.number("draft_temperature", self.draft_temperature, minimum=0)
        arguments.integer("draft_top_k", self.draft_top_k, minimum=0)
        arguments.integer("k", self.k)
        if self.k < 1:
            raise CheckError("k and max_tokens must be >= 1")
        arguments.optional_text("draft_kind", self.draft_kind)
        if self.draft_kind is not None and self.draft_kind not in DRAFT_KINDS:
            raise CheckError(f"draft_kind must be auto or ngram, got {self.draft_kind!r}")


@dataclass(frozen=True)
class DecoderUnderTest:
    """The decoder, exactly one of: ``engine``, a factory ``FACTORY(model_path) -> engine`` or its
    ``"module:FACTORY"``; ``engine_cmd``, a program speaking the JSON-lines ops (``timeout``
    seconds per response); ``ours``, our own decode loop (with ``weights``: the fast engine's own
    speculative decoder in that mode); ``mutant``, a mutant decoder of spec/decoder/mutants.py.
    ``model``: a registry name or a .gguf path. ``workers``: the depth test's generations decoded
    by that many processes, each building its own engine. ``draft``: the draft of ``ours`` and of
    the mutants. ``batch``: a batched engine, judged through its ``generate_batch`` op by the batch
    form of the depth test (spec/decoder/depth/batch.py); ``mutant`` may then name a batch mutant
    (spec/decoder/depth/batch_mutants.py) of the fast engine's lockstep decode."""

    engine: Engine = None
    _: KW_ONLY
    engine_cmd: str | None = None
    ours: bool = False
    mutant: str | None = None
    model: str | Path = DEFAULT_MODEL
    weights: str | None = None
    timeout: float = 600.0
    workers: int = 1
    draft: DraftFlags = field(default_factory=DraftFlags)
    batch: bool = False

    def __post_init__(self) -> None:
        from verispec.spec.external import check_timeout

        arguments.part("engine", self.engine)
        arguments.flag("ours", self.ours)
        arguments.flag("batch", self.batch)
        for name in ("engine_cmd", "mutant", "weights"):
            arguments.optional_text(name, getattr(self, name))
        arguments.optional_path("model", self.model)
        if self.model is None:
            raise CheckError("model must be a registry name or a .gguf path, got None")
        one_of("draft", self.draft, DraftFlags)
        chosen = (self.engine is not None, self.engine_cmd is not None, self.ours, self.mutant is not None)
        if sum(chosen) != 1:
            raise CheckError(
                "give exactly one decoder: engine (module:FACTORY or a factory), engine_cmd, ours or mutant"
            )
        workers = self.workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise CheckError(f"workers must be an integer >= 1, got {workers!r}")
        arguments.workers(workers)  # at most MAX_WORKERS
        if workers > 1 and self.engine is not None and not isinstance(self.engine, str):
            raise CheckError("workers > 1 builds the engine in other processes: give it as 'module:FACTORY'")
        self._check_weights()
        self._check_draft_kind()
        check_timeout(self.timeout)  # before the model loads: inf, nan, 1e300, -1 are usage errors

    def _check_weights(self) -> None:
        from verispec.engine_load import WEIGHTS_CHOICES

        if self.weights is None:
            return
        if self.weights not in WEIGHTS_CHOICES or self.weights == "quantized":
            raise CheckError(f"weights must be auto, int8, exact or f32, got {self.weights!r}")
        if not self.ours:
            raise CheckError("weights picks the engine of our own decoder: it needs ours")

    def _check_draft_kind(self) -> None:
        if self.draft.draft_kind is not None and not (self.ours and self.weights is not None):
            raise CheckError("draft_kind picks the draft of the fast engine's own decoder: it needs ours and weights")


@dataclass(frozen=True, kw_only=True)
class Penalties:
    """The penalty flags of the target law (each None: the law's default; a flag the law does not
    have is a usage error naming it)."""

    repeat_penalty: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    penalty_last_n: int | None = None

    def __post_init__(self) -> None:
        for name in ("repeat_penalty", "repetition_penalty", "frequency_penalty", "presence_penalty"):
            arguments.optional_number(name, getattr(self, name))
        arguments.optional_integer("penalty_last_n", self.penalty_last_n)


@dataclass(frozen=True, kw_only=True)
class SamplingFlags:
    """The target law: ``law``, whose (``verispec``, ``llama.cpp``, ``transformers``, ``vllm``:
    spec/decoder/laws/, each with its ecosystem's names and defaults for the flags left None);
    ``target_law``, where its rows come from (``reference``: our forward; ``engine-logits``: the
    engine's reported logits; ``two-sample``: the same engine with speculation off, no law)."""

    law: str = "verispec"
    target_law: TargetLaw = "reference"
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    min_tokens: int | None = None
    penalties: Penalties = field(default_factory=Penalties)

    def __post_init__(self) -> None:
        arguments.optional_text("law", self.law)
        arguments.optional_text("target_law", self.target_law)
        for name in ("temperature", "top_p", "min_p"):
            arguments.optional_number(name, getattr(self, name))
        for name in ("top_k", "min_tokens"):
            arguments.optional_integer(name, getattr(self, name))
        one_of("penalties", self.penalties, Penalties)
        if self.target_law not in TARGET_LAWS:
            raise CheckError(f"target_law must be reference, engine-logits or two-sample, got {self.target_law!r}")
        if (self.min_tokens or 0) < 0:
            raise CheckError("depth and min_tokens must be >= 0")
        self.profile(())  # before the model loads: a flag the law lacks, a bad value

    def flags(self) -> dict[str, Any]:
        """The sampling flags by keyword (None: the law's default)."""
        p = self.penalties
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "repeat_penalty": p.repeat_penalty,
            "repetition_penalty": p.repetition_penalty,
            "frequency_penalty": p.frequency_penalty,
            "presence_penalty": p.presence_penalty,
            "penalty_last_n": p.penalty_last_n,
            "min_tokens": self.min_tokens,
        }

    def profile(self, eog: Collection[int]) -> Profile:
        """The law profile of these flags and the model's end-of-generation ids (spec/decoder/laws/)."""
        from verispec.spec.decoder.laws import build

        return build(self.law, self.flags(), eog)


@dataclass(frozen=True, kw_only=True)
class DepthDesign:
    """The test: every token of whole generations of up to ``depth`` tokens (power 0.99 against TV
    ``tv`` on ``fraction`` of positions, ``budget`` seconds per prompt, the first-m test first
    unless ``first_m`` is off), or with ``depth`` 0 the first ``m`` tokens, or with ``greedy`` the
    first ``max_tokens`` of speculative against plain greedy output. ``tv`` None: 0.05 at depth,
    0.1 two-sample at depth, 0.2 first-m; ``alpha`` None: 1e-3 (split over the prompts);
    ``min_mass``: sequences at least this likely are cells of the first-m test."""

    depth: int = 64
    m: int = 3
    tv: float | None = None
    fraction: float = 0.1
    alpha: float | None = None
    min_mass: float = 0.01
    budget: float | None = None
    first_m: bool = True
    greedy: bool = False
    max_tokens: int = 16

    def __post_init__(self) -> None:
        from verispec.spec.decoder.first_tokens import MAX_M

        for name in ("depth", "m", "max_tokens"):
            arguments.integer(name, getattr(self, name))
        for name in ("tv", "alpha"):
            arguments.optional_number(name, getattr(self, name))
        budget = self.budget  # inf: no budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))):
            raise CheckError(f"budget must be a number of seconds, got {arguments.shown(budget)}")
        arguments.number("fraction", self.fraction)
        arguments.number("min_mass", self.min_mass)
        arguments.flag("greedy", self.greedy)
        arguments.flag("first_m", self.first_m)
        if not 1 <= self.m <= MAX_M:
            raise CheckError(f"m must be in [1, {MAX_M}], got {self.m}")
        if self.tv is not None and not 0 < self.tv <= 1:
            raise CheckError(f"tv must be in (0, 1], got {self.tv}")
        if self.alpha is not None and not 0 < self.alpha < 1:
            raise CheckError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.max_tokens < 1:
            raise CheckError("k and max_tokens must be >= 1")
        if self.depth < 0:
            raise CheckError("depth and min_tokens must be >= 0")
        if not 0 < self.fraction <= 1:
            raise CheckError(f"fraction must be in (0, 1], got {self.fraction}")
        if budget is not None and not budget > 0:
            raise CheckError(f"budget must be > 0 seconds, got {budget}")


@dataclass(frozen=True, kw_only=True)
class DecoderReporting:
    """What the caller sees as the run goes: ``log`` each prompt's outcome as it is decided;
    ``progress`` lines (the pilot's cost and the design up front, then at most one every
    ``progress_every`` seconds)."""

    log: Callable[[PromptOutcome], None] | None = None
    progress: Callable[[str], None] | None = None
    progress_every: float = 30.0

    def __post_init__(self) -> None:
        arguments.part("log", self.log)
        seconds = self.progress_every
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise CheckError(f"progress_every must be a finite number of seconds >= 0, got {seconds!r}")


@dataclass(frozen=True)
class DecoderOptions:
    """One ``verispec check-decoder`` run: the decoder, the target law, the test, the reporting,
    and the prompts judged (``bench_prompts``: the five of ``verispec bench`` instead)."""

    subject: DecoderUnderTest
    sampling: SamplingFlags = field(default_factory=SamplingFlags)
    design: DepthDesign = field(default_factory=DepthDesign)
    reporting: DecoderReporting = field(default_factory=DecoderReporting)
    prompts: Sequence[str] = DEFAULT_PROMPTS
    bench_prompts: bool = False

    def __post_init__(self) -> None:
        one_of("subject", self.subject, DecoderUnderTest)
        one_of("sampling", self.sampling, SamplingFlags)
        one_of("design", self.design, DepthDesign)
        one_of("reporting", self.reporting, DecoderReporting)
        arguments.flag("bench_prompts", self.bench_prompts)
        normalize_field(self, "prompts", tuple(arguments.texts("prompts", self.prompts)))
        if not self.prompts and not self.bench_prompts:
            raise CheckError("prompts must be a non-empty sequence of strings")
        subject, sampling, design = self.subject, self.sampling, self.design
        if subject.ours and sampling.min_tokens:
            raise CheckError("ours: our decode loop has no min_tokens")
        if subject.workers > 1 and (not design.depth or design.greedy):
            raise CheckError("workers > 1 decodes the depth test's generations: it needs depth > 0 and no greedy mode")
        if subject.batch and (
            not design.depth or design.greedy or subject.workers > 1 or sampling.target_law == "two-sample"
        ):
            raise CheckError("batch runs the batch depth test: depth > 0, no greedy, no two-sample, one worker")
        if subject.batch and subject.ours and subject.weights is None:
            raise CheckError(
                "batch with ours needs weights: the fast engine's lockstep decode is the batch op's reference"
            )
        if subject.weights is not None and (not design.depth or design.greedy or sampling.target_law == "two-sample"):
            raise CheckError(
                "ours with weights runs the depth test against the engine's own rows: depth > 0, no greedy, no two-sample"
            )
        self._check_law_mode()

    def _check_law_mode(self) -> None:
        """Our decode loop and its mutants sample the verispec law (their bugs are written against
        its penalty window and min_tokens); two-sample mode has no law at all."""
        law = self.sampling.law
        if law == "verispec" or self.design.greedy:
            return
        if self.subject.ours or self.subject.mutant is not None:
            raise CheckError(f"ours and the mutants sample the verispec law; law {law} needs another decoder")
        if self.sampling.target_law == "two-sample":
            raise CheckError(
                f"target_law two-sample compares the engine with itself, no law; law {law} needs reference or "
                "engine-logits"
            )

    def texts(self) -> list[str]:
        """The prompts judged."""
        if self.bench_prompts:
            from verispec.bench.options import PROMPTS

            return [text for _, text in PROMPTS]
        return list(self.prompts)

    @property
    def budget_led(self) -> bool:
        """A budget without a tv at depth against a law: the design is for the smallest TV the
        budget affords at the pilot's cost (spec/decoder/depth/sizing.py)."""
        design = self.design
        return (
            design.tv is None
            and design.budget is not None
            and design.depth > 0
            and self.sampling.target_law != "two-sample"
            and not design.greedy
        )

    @property
    def tv(self) -> float:
        """The deviation N is designed for: ``design.tv``, else :func:`default_tv`."""
        return default_tv(self.design.depth, self.sampling.target_law) if self.design.tv is None else self.design.tv


def default_tv(depth: int, target_law: str) -> float:
    """The deviation N is designed for: TV 0.05 on 10% of positions at depth against a law, TV 0.1
    on one bin's feature law in two-sample mode at depth, TV 0.2 on the first-m cell law."""
    if not depth:
        return 0.2
    return 0.1 if target_law == "two-sample" else 0.05


DECODER_OBJECTS: dict[str, type] = {
    "subject": DecoderUnderTest,
    "sampling": SamplingFlags,
    "design": DepthDesign,
    "reporting": DecoderReporting,
}
DECODER_KEYWORDS = (
    *(name for cls in DECODER_OBJECTS.values() for name in keywords_of(cls)),
    "prompts",
    "bench_prompts",
)


def decoder_options(
    subject: DecoderUnderTest | Engine = None,
    *,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    bench_prompts: bool = False,
    sampling: SamplingFlags | None = None,
    design: DepthDesign | None = None,
    reporting: DecoderReporting | None = None,
    **keywords: Any,
) -> DecoderOptions:
    """The options of one check-decoder run, from objects or from the flags' keywords (``depth=8``,
    ``temperature=0.7``, ...); ``subject`` may be the ``engine`` itself (the keyword form's first
    argument)."""
    if subject is not None and not isinstance(subject, DecoderUnderTest):
        if "engine" in keywords:
            raise TypeError("check_decoder() got multiple values for argument 'engine'")
        keywords = {"engine": subject, **keywords}
        subject = None
    given = {"subject": subject, "sampling": sampling, "design": design, "reporting": reporting}
    built = objects("check_decoder", given, DECODER_OBJECTS, keywords)
    return DecoderOptions(prompts=prompts, bench_prompts=bench_prompts, **built)
