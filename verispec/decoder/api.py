"""``verispec.check_decoder(...)``: the law test of a whole speculative decoder, as a function.

``verispec check-decoder`` builds its options from its flags with :func:`decoder_options` (one
field per flag: ``--engine-cmd`` -> ``engine_cmd``, ``--prompt`` -> ``prompts``;
verispec/decoder/options.py) and runs them with :func:`run`, as :func:`check_decoder` does, so the
checks of the arguments, the defaults and the run are one piece of code. The modes and the engine
interface are those of :mod:`verispec.spec.decoder.check`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verispec.decoder.options import (
    DEFAULT_PROMPTS,
    DecoderOptions,
    DecoderReporting,
    DecoderUnderTest,
    DepthDesign,
    Engine,
    SamplingFlags,
    TargetLaw,
    decoder_options,
    default_tv,
)

if TYPE_CHECKING:
    from verispec.decoder.report import DecoderReport, PromptOutcome
    from verispec.spec.decoder.laws import Profile

__all__ = [
    "DEFAULT_PROMPTS",
    "DecoderOptions",
    "DecoderReporting",
    "DecoderUnderTest",
    "DepthDesign",
    "SamplingFlags",
    "TargetLaw",
    "build_engine",
    "check_decoder",
    "decoder_options",
    "default_tv",
    "run",
]

# Threads computing our engine's teacher-forced passes ahead of the scoring (spec/decoder/depth/forcing.py):
# its passes are thread-safe and release the GIL in onnxruntime, and the checker's serial pass is
# what the decoding workers wait on.
FORCING_THREADS = 2
DEFAULT_ALPHA = 1e-3  # the run's false-alarm probability, split over the prompts (Bonferroni)


def check_decoder(
    subject: DecoderUnderTest | Engine = None,
    *,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    bench_prompts: bool = False,
    sampling: SamplingFlags | None = None,
    design: DepthDesign | None = None,
    reporting: DecoderReporting | None = None,
    **keywords: Any,
) -> DecoderReport:
    """Test a decoder's law on its model: every token of whole generations of up to ``depth``
    tokens (the default; spec/decoder/depth/law.py, power 0.99 against TV ``tv`` (0.05) on ``fraction``
    of positions, ``budget`` seconds per prompt, inconclusive when it ends short), or with
    ``depth=0`` the first ``m`` tokens (spec/decoder/first_tokens.py, default TV 0.2), or with ``greedy``
    its speculative output against its own plain greedy output.

    The run is four objects (verispec/decoder/options.py): ``subject``, the
    :class:`DecoderUnderTest` (exactly one of ``engine``, a factory ``FACTORY(model_path) -> engine``
    or its ``"module:FACTORY"``; ``engine_cmd``, a program speaking the JSON-lines ops; ``ours``, our
    own decode loop; ``mutant``, a mutant decoder of spec/decoder/mutants.py; and ``model``,
    ``weights``, ``timeout``, ``workers``, the ``draft``); ``sampling``, the :class:`SamplingFlags`
    of the target law; ``design``, the :class:`DepthDesign` of the test; ``reporting``, the
    :class:`DecoderReporting` callbacks. Each field is also a keyword of the same name, the flag's
    (``--draft-top-k`` -> ``draft_top_k``), and ``subject`` may be the engine itself::

        report = verispec.check_decoder("mypkg.serving:engine_factory", model="model.gguf", depth=0, m=2)
        report = verispec.check_decoder(
            DecoderUnderTest("mypkg.serving:engine_factory", model="model.gguf"), design=DepthDesign(depth=0, m=2)
        )
        assert report.passed, report.summary()

    ``target_law``: where the law comes from (``reference``: our forward; ``engine-logits``: the
    engine's reported logits; ``two-sample``: the same engine with speculation off, at depth its
    ``generate_plain`` and position-binned features, default TV 0.1). N is chosen for power 0.99
    against a total-variation deviation ``tv`` at false-alarm probability ``alpha`` (default 1e-3,
    split over the prompts). ``log`` sees each prompt's outcome as it is decided.

    Sized for CI (the depth test against a law): ``progress`` receives lines as the run goes (the
    pilot's cost per token and the design with its projected time up front, within one
    generation's time of the start; then a line at most every ``progress_every`` seconds: tokens
    judged of the design's, looks done, elapsed, projected remaining). ``budget`` without ``tv``
    is budget-led: the design is for the smallest TV the budget affords at the pilot's cost,
    stated up front and in the verdict (spec/decoder/depth/sizing.py); with ``tv`` the budget
    only stops the run (inconclusive if short). ``first_m`` (default on): the first-m test of the
    first ``m`` tokens runs first (its N ~1,000 samples of m tokens: a first-cycle bug is
    rejected in seconds), on 10% of the prompt's alpha, the depth test on the rest
    (spec/decoder/depth/first_m.py).

    ``workers``: the depth test's generations decoded by that many processes, each building its
    own engine (``engine`` then a ``"module:FACTORY"`` string; ``engine_cmd`` started that many
    times), each contained like a program under test (spec/decoder/depth/pool.py); teacher forcing and
    the statistics stay in this process. A block of generations depends on the run seed and its
    index only, so the verdict is the same with any number of workers.

    ``weights`` (with ``ours``): the decoder is the fast engine's own speculative decoder in that
    weights mode (``auto``, ``int8``, ``f32``/``exact``; verispec/decoder/ours.py) instead of our
    reference loop, and the target law at each position is the SAME engine's plain rows, one
    teacher-forced k-row pass per generation (bit for bit its 1-row passes: the engine's
    contract), through the target law's processors (``engine-logits`` semantics). Depth test only.
    ``draft_kind`` (with ``weights``): that decoder's draft, ``auto`` (the default: the token-tree
    draft ``verispec generate --draft`` runs, with a fixed cost curve) or ``ngram`` (the chain).

    ``law``: whose target law the tokens must follow (spec/decoder/laws/): ``verispec`` (the default;
    temperature 1, top_k 4, repeat_penalty 1.5 unless given), ``llama.cpp``, ``transformers`` or
    ``vllm``, each with its ecosystem's parameter names and defaults for the sampling keywords left
    None; a keyword the chosen law does not have is a usage error naming its flag. The engine
    receives a non-default law as ``law=`` (a :class:`verispec.spec.decoder.laws.Profile`; on the wire the
    ``"law"`` field).

    ``batch``: the batch form of the depth test (spec/decoder/depth/batch.py) on the engine's
    ``generate_batch`` (op ``generate_batch``): requests of several lanes (the case's law seeded,
    another temperature and top-p seeded, the case's law unseeded, greedy) in one call, each judged
    against its own law, plus cross-request independence, on one alpha. ``mutant`` may then name a
    batch mutant (spec/decoder/depth/batch_mutants.py) of the fast engine's lockstep decode.

    """
    options = decoder_options(
        subject,
        prompts=prompts,
        bench_prompts=bench_prompts,
        sampling=sampling,
        design=design,
        reporting=reporting,
        **keywords,
    )
    return run(options)


def run(options: DecoderOptions) -> DecoderReport:
    """The run of ``options`` (built and checked by :func:`decoder_options`): the CLI's, the API's
    and the pytest plugin's, one piece of code."""
    from verispec.decoder.report import DecoderReport
    from verispec.reference.model import Model
    from verispec.reference.tokenizer import Tokenizer
    from verispec.registry import resolve_model
    from verispec.spec.decoder.check import ReferenceLogits

    texts = options.texts()
    subject, reporting = options.subject, options.reporting
    path = resolve_model(str(subject.model))
    reference, tokenizer = Model.load(path), Tokenizer.from_file(path)
    logits = ReferenceLogits(reference)
    decoder = build_engine(subject, path, logits, tokenizer)
    report = DecoderReport(str(path))
    start = time.perf_counter()
    design = options.design
    per_prompt = (design.alpha if design.alpha is not None else DEFAULT_ALPHA) / len(texts)  # Bonferroni
    pool = None
    try:
        checker = _Run(decoder, logits, tokenizer, options, per_prompt)
        if subject.workers > 1:
            pool = _pool(subject, path, logits, tokenizer)
            checker.generations = pool
        if reporting.progress is not None:
            from verispec.progress import PeriodicLines

            checker.progress = PeriodicLines(reporting.progress, reporting.progress_every)
        checker.check_modes()
        checker.check_context(texts)
        for text in texts:
            report.results.append(checker.prompt(text))
            if reporting.log:
                reporting.log(report.results[-1])
    finally:
        report.seconds = time.perf_counter() - start
        if pool is not None:
            pool.close()
        close = getattr(decoder, "close", None)
        if callable(close):
            close()
    return report


def _error(message: str) -> Exception:
    from verispec.spec.check import CheckError

    return CheckError(message)


def _pool(subject: DecoderUnderTest, path: Path, logits: Any, tokenizer: Any) -> Any:
    """``subject.workers`` engine processes (spec/decoder/depth/pool.py): ``engine_cmd`` that many
    times, or verispec/decoder/worker.py building the Python engine in each."""
    import os

    from verispec.decoder.recipe import WorkerRecipe
    from verispec.spec.decoder.check import CommandEngine
    from verispec.spec.decoder.depth.pool import GenerationPool

    engine_cmd = subject.engine_cmd
    if engine_cmd is None:
        engine_cmd = WorkerRecipe.of(subject, path, os.getcwd()).command()
    vocab = logits.model.config.n_vocab
    engines = [CommandEngine(engine_cmd, subject.timeout, vocab, tokenizer.eog_ids) for _ in range(subject.workers)]
    return GenerationPool(engines)


def build_engine(subject: DecoderUnderTest, path: Path | None = None, logits: Any = None, tokenizer: Any = None) -> Any:
    """The decoder under test, as check-decoder builds it (here and in each worker process) on
    ``path`` (None: ``subject.model`` resolved); ``logits`` / ``tokenizer``: our reference forward
    and the tokenizer of ``path`` (loaded here when None and the decoder is ours or a mutant);
    ``weights`` with ``ours``: the fast engine's decoder in that mode with the draft ``draft_kind``
    (None: auto; verispec/decoder/ours.py)."""
    from verispec.reference.sampling import SamplingParams
    from verispec.spec.check import load_callable
    from verispec.spec.decoder.check import CommandEngine, ReferenceDecoder
    from verispec.spec.decoder.mutants import DEPTH_MUTANTS, MUTANT_BUGS, LoopDecoder

    if path is None:
        from verispec.registry import resolve_model

        path = resolve_model(str(subject.model))
    engine, ours, mutant, k = subject.engine, subject.ours, subject.mutant, subject.draft.k
    draft = SamplingParams(temperature=subject.draft.draft_temperature, top_k=subject.draft.draft_top_k)
    from verispec.spec.decoder.depth.batch_mutants import BATCH_MUTANTS, batch_mutant

    if mutant in BATCH_MUTANTS:  # a batch mutant of the fast engine's lockstep decode (the batch op's reference)
        from verispec.decoder.ours import EngineDecoder

        return batch_mutant(
            mutant, EngineDecoder(path, subject.weights or "auto", k, draft="ngram")
        )  # its bugs: the chain
    if ours and subject.weights is not None:
        from verispec.decoder.ours import EngineDecoder

        return EngineDecoder(path, subject.weights, k, draft=subject.draft.draft_kind or "auto")
    if (ours or mutant is not None) and (logits is None or tokenizer is None):
        from verispec.reference.model import Model
        from verispec.reference.tokenizer import Tokenizer
        from verispec.spec.decoder.check import ReferenceLogits

        logits, tokenizer = ReferenceLogits(Model.load(path)), Tokenizer.from_file(path)
    if ours:
        return ReferenceDecoder(logits, tokenizer, draft, k)
    if mutant is not None:
        known = {**MUTANT_BUGS, **DEPTH_MUTANTS}
        if mutant not in known:
            raise _error(f"unknown mutant decoder {mutant!r}; known: {', '.join([*known, *BATCH_MUTANTS])}")

        def positioned(ids: Any, positions: Any) -> Any:
            model = logits.model
            return model.forward(list(ids), model.new_cache(len(ids)), positions=list(positions)).logits[-1]

        loop = LoopDecoder(logits, draft, k, known[mutant][1], eog=frozenset(tokenizer.eog_ids), positioned=positioned)
        return FreshMemos(loop)
    if subject.engine_cmd is not None:
        return CommandEngine(subject.engine_cmd, subject.timeout, logits.model.config.n_vocab, tokenizer.eog_ids)
    factory = load_callable(engine) if isinstance(engine, str) else engine
    assert factory is not None  # DecoderUnderTest: exactly one decoder was given
    return factory(path)


class FreshMemos:
    """A mutant decoder whose whole generations (``generate``, ``generate_plain``) run on fresh
    memos per call, its rows from one KV cache along its path (spec/decoder/prefix_rows.py): at depth
    every prefix is new, and a memo of real-vocabulary rows would only grow (GBs over a run)."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder

    def _fresh(self) -> Any:
        from dataclasses import replace

        from verispec.spec.decoder.first_tokens import CachedLaw
        from verispec.spec.decoder.prefix_rows import PathRows

        return replace(self.decoder, logits_of=PathRows(self.decoder.logits_of.model), law=CachedLaw())

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self._fresh().generate(*args, **kwargs)

    def generate_plain(self, *args: Any, **kwargs: Any) -> Any:
        return self._fresh().generate_plain(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # sample, sample_plain, logits, greedy: the decoder's own
        return getattr(self.decoder, name)


@dataclass(frozen=True)
class _Depth:
    """The depth test's settings (``tokens`` 0: the first-m test instead)."""

    tokens: int = 0
    min_tokens: int = 0
    fraction: float = 0.1
    budget: float | None = None
    model: Any = None  # our reference model: teacher-forced rows of whole generations
    budget_led: bool = False  # the design's TV chosen from the budget (no tv given)
    first_m: bool = True  # the first-m test first, on a share of the alpha (spec/decoder/depth/first_m.py)


class _Run:
    """One decoder, one model, one mode: :meth:`prompt` judges a prompt."""

    def __init__(self, engine: Any, logits: Any, tokenizer: Any, options: DecoderOptions, alpha: float) -> None:
        """``alpha``: each prompt's share of the run's false-alarm probability."""
        from verispec.spec.decoder.laws import min_tokens_of

        design = options.design
        profile = options.sampling.profile(tokenizer.eog_ids)
        self.engine, self.logits, self.tokenizer, self.params = engine, logits, tokenizer, profile.legacy
        self.m, self.alpha, self.tv, self.min_mass = design.m, alpha, options.tv, design.min_mass
        self.greedy, self.max_tokens, self.target_law = design.greedy, design.max_tokens, options.sampling.target_law
        self.eog = frozenset(tokenizer.eog_ids)
        self.target: Any = logits
        self.depth = _Depth(
            design.depth,
            min_tokens_of(profile),
            design.fraction,
            design.budget,
            logits.model,
            options.budget_led,
            design.first_m,
        )
        self.law: Profile | None = None if profile.name == "verispec" else profile  # another ecosystem's law
        self.generations: Any = engine  # who decodes the depth tests' blocks (a pool with workers > 1)
        self.progress: Callable[[str, bool], None] | None = None  # progress lines (verispec/progress.py)
        self.batch = options.subject.batch  # the batch form of the depth test (spec/decoder/depth/batch.py)
        self.profile: Profile = profile  # the target law's profile (the batch test's lanes derive from it)

    def check_modes(self) -> None:
        """A usage error for a mode the engine does not offer; picks whose logits are the target."""
        from verispec.spec.decoder.check import EngineLogits, reports_logits

        own = reports_logits(self.engine)
        if self.target_law == "engine-logits" and not own:
            raise _error("target_law engine-logits needs an engine that reports its logits (logits / the logits op)")
        plain_op = "generate_plain" if self.depth.tokens else "sample_plain"
        if self.target_law == "two-sample" and not self.greedy and not callable(getattr(self.engine, plain_op, None)):
            raise _error(f"target_law two-sample needs an engine with {plain_op} (the {plain_op} op)")
        if own and (self.greedy or self.target_law == "engine-logits"):
            self.target = EngineLogits(self.engine)

    def check_context(self, texts: Sequence[str]) -> None:
        """A usage error, before any prompt runs, for a depth that does not fit the model's context
        after a prompt: no decoder could generate it, so it must not fail the decoder."""
        if not self.depth.tokens or self.greedy:
            return
        context = int(self.logits.model.config.context_length)
        for text in texts:
            length = len(self.tokenizer.encode(text, add_bos=self.tokenizer.add_bos, parse_special=True))
            if length + self.depth.tokens > context:
                raise _error(
                    f"depth {self.depth.tokens} after the prompt {text[:40]!r} ({length} tokens) exceeds the model's "
                    f"context length {context}: give a depth of at most {max(context - length, 0)}"
                )

    def vocab(self) -> int:
        """The model's vocabulary: an answered id outside [0, V) is the engine's failure."""
        return int(self.logits.model.config.n_vocab)

    def prompt(self, text: str) -> PromptOutcome:
        """The prompt's verdict; a malformed answer (or a dead engine) fails it with its reason, never exit 2."""
        from verispec.decoder.report import PromptOutcome
        from verispec.spec.external import ExternalError

        began = time.perf_counter()
        try:
            return self._judge(text, began)
        except ExternalError as exc:
            return PromptOutcome(
                text, "malformed", False, f"malformed answer: {str(exc)[:300]}", time.perf_counter() - began
            )

    def _judge(self, text: str, began: float) -> PromptOutcome:
        from verispec.decoder.report import PromptOutcome
        from verispec.spec.decoder.check import LawCase, check_greedy, check_law, law_json
        from verispec.spec.decoder.two_sample import check_two_sample

        ids = tuple(self.tokenizer.encode(text, add_bos=self.tokenizer.add_bos, parse_special=True))  # as the bench
        if self.greedy:
            g = check_greedy(self.engine, self.target, ids, self.max_tokens, self.eog)
            numbers = {"margin": g.margin, "noise": g.noise, "noise_source": g.noise_source, "divergence": g.divergence}
            return PromptOutcome(text, "greedy", g.passed, g.detail(), time.perf_counter() - began, numbers)
        if self.depth.tokens and self.target_law == "two-sample":
            return self._two_sample_depth(text, ids, began)
        if self.depth.tokens and self.batch:
            return self._batch(text, ids, began)
        if self.depth.tokens:
            return self._depth(text, ids, began)
        if self.target_law == "two-sample":
            v = check_two_sample(
                self.engine,
                ids,
                self.params,
                self.m,
                alpha=self.alpha,
                tv=self.tv,
                eog=self.eog,
                min_mass=self.min_mass,
            )
            mode = "two-sample"
        else:
            v = check_law(
                self.engine,
                self.target,
                LawCase(ids, self.params, self.m, self.min_mass, self.eog, self.law),
                alpha=self.alpha,
                tv=self.tv,
            )
            mode = f"law ({self.target.source})"
        numbers = law_json(v)
        passed, detail = bool(numbers.pop("passed")), str(numbers.pop("detail"))
        return PromptOutcome(text, mode, passed, detail, time.perf_counter() - began, numbers)

    def _depth(self, text: str, ids: tuple[int, ...], began: float) -> PromptOutcome:
        """The depth test of one prompt (spec/decoder/depth/law.py)."""
        from verispec.spec.decoder.check import EngineLogits, law_json
        from verispec.spec.decoder.depth.first_m import first_m_summary, split_alpha
        from verispec.spec.decoder.depth.forcing import ConcurrentRows
        from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows, sizing_json, verdict_json
        from verispec.spec.decoder.depth.ties import PlainFedRows
        from verispec.spec.decoder.types import ForcedRows

        if not callable(getattr(self.engine, "generate", None)):
            raise _error("depth needs an engine with generate (the generate op); depth 0 runs the first-m test")
        if callable(
            getattr(self.engine, "forced_rows", None)
        ):  # the engine's own k-row pass (verispec/decoder/ours.py)
            rows: ForcedRows = ConcurrentRows(self.engine.forced_rows, FORCING_THREADS)
        elif isinstance(self.target, EngineLogits):
            rows = PlainFedRows(self.target)
        else:
            rows = reference_rows(self.depth.model)
        case = DepthCase(ids, self.params, self.depth.tokens, self.eog, self.depth.min_tokens, self.law, self.vocab())
        alpha, budget, first = self.alpha, self.depth.budget, None
        if self.depth.first_m and not callable(
            getattr(self.engine, "forced_rows", None)
        ):  # judged on its own rows: no first-m
            first_alpha, alpha = split_alpha(self.alpha)
            first = self._first_m(text, case, first_alpha, alpha)
            if not first[0].passed:
                return self._first_m_failed(text, first[0], began)
            budget = None if budget is None else max(budget - first[1], 1e-3)
        verdict = check_depth(
            self.generations,
            rows,
            case,
            alpha=alpha,
            tv=self.tv,
            fraction=self.depth.fraction,
            budget_s=budget,
            size_to_budget=self.depth.budget_led,
            progress=self._prompt_sink(text),
        )
        led = f" (budget-led: the smallest TV {self.depth.budget:g} s affords)" if verdict.sizing.budget_led else ""
        design = (
            f"design {verdict.design.tokens} tokens for power 0.99 vs TV {verdict.design.tv}{led} on "
            f"{verdict.design.fraction:.0%} of positions"
        )
        # the timing only where it chose the design (budget-led): elsewhere a verdict's numbers do not
        # depend on the machine or the number of workers
        numbers = {**verdict_json(verdict), **(sizing_json(verdict) if verdict.sizing.budget_led else {})}
        if first is not None:
            numbers["first_m"] = {"m": self.m, **law_json(first[0])}
            design = f"{design}; first-m test passed ({first_m_summary(first[0], self.m)})"
        return self._outcome(text, "depth", verdict, numbers, design, began, alpha)

    def _forced_rows(self) -> Any:
        """The depth tests' teacher-forced rows: the engine's own k-row pass, its plain-fed logits, or ours."""
        from verispec.spec.decoder.check import EngineLogits
        from verispec.spec.decoder.depth.forcing import ConcurrentRows
        from verispec.spec.decoder.depth.law import reference_rows
        from verispec.spec.decoder.depth.ties import PlainFedRows

        if callable(getattr(self.engine, "forced_rows", None)):
            return ConcurrentRows(self.engine.forced_rows, FORCING_THREADS)
        if isinstance(self.target, EngineLogits):
            return PlainFedRows(self.target)
        return reference_rows(self.depth.model)

    def _batch(self, text: str, ids: tuple[int, ...], began: float) -> PromptOutcome:
        """The batch form of the depth test on one prompt (spec/decoder/depth/batch.py)."""
        from verispec.spec.decoder.depth.batch import check_batch, default_lanes, verdict_json
        from verispec.spec.decoder.depth.law import DepthCase

        if not callable(getattr(self.engine, "generate_batch", None)):
            raise _error("batch needs an engine with generate_batch (the generate_batch op)")
        profile = self.profile
        case = DepthCase(ids, self.params, self.depth.tokens, self.eog, self.depth.min_tokens, self.law, self.vocab())
        lanes = default_lanes(case, profile, greedy=bool(getattr(self.engine, "batch_greedy", True)))
        verdict = check_batch(
            self.engine,
            self._forced_rows(),
            lanes,
            alpha=self.alpha,
            tv=self.tv,
            fraction=self.depth.fraction,
            budget_s=self.depth.budget,
            progress=self._prompt_sink(text),
        )
        design = (
            f"{len(lanes)} lanes designed for power 0.99 vs TV {self.tv} on {self.depth.fraction:.0%} of positions each "
            f"({verdict.design_tokens:,} tokens)"
        )
        return self._outcome(text, "batch", verdict, verdict_json(verdict), design, began)

    def _prompt_sink(self, text: str) -> Callable[[str, bool], None] | None:
        """The depth test's progress lines, each naming its prompt (None: no progress wanted)."""
        shown = self.progress
        if shown is None:
            return None
        return lambda line, milestone: shown(f"{text[:40]!r}: {line}", milestone)

    def _first_m(self, text: str, case: Any, alpha: float, rest: float) -> tuple[Any, float]:
        """The first-m test on the depth engine's ``generate`` (spec/decoder/depth/first_m.py): (verdict, seconds)."""
        from verispec.spec.decoder.check import LawCase, check_law
        from verispec.spec.decoder.depth.first_m import (
            FIRST_M_SHARE,
            FIRST_M_TV,
            SEED_OFFSET,
            FirstTokensOfGenerate,
            first_m_summary,
        )
        from verispec.spec.decoder.depth.law import case_law

        say = self._prompt_sink(text)
        if say is not None:
            say(
                f"first-m test: the first {self.m} tokens' law against TV {FIRST_M_TV} at alpha={alpha:.2g} "
                f"({FIRST_M_SHARE:.0%} of the prompt's; the depth test gets alpha={rest:.2g})",
                True,
            )
        began = time.perf_counter()
        law = case_law(case) if case.min_tokens or self.law is not None else None  # min_tokens: the EOG ban by position
        first_case = LawCase(case.prompt_ids, self.params, self.m, self.min_mass, self.eog, law)
        verdict = check_law(
            FirstTokensOfGenerate(self.engine, case),
            self.target,
            first_case,
            alpha=alpha,
            tv=FIRST_M_TV,
            seed=20_261_130 + SEED_OFFSET,
        )
        seconds = time.perf_counter() - began
        if say is not None:
            say(
                f"first-m test {'passed' if verdict.passed else 'FAILED'} in {seconds:.1f} s: "
                f"{first_m_summary(verdict, self.m)}",
                True,
            )
        return verdict, seconds

    def _first_m_failed(self, text: str, verdict: Any, began: float) -> PromptOutcome:
        """The prompt's outcome when the first-m test rejected: failed, the depth test not run."""
        from verispec.decoder.report import PromptOutcome
        from verispec.spec.decoder.check import law_json

        where = f"first-m test (the first {self.m} tokens' law): {verdict.detail}"
        detail = (
            f"[FAILED] {where}; N={verdict.n} alpha={verdict.alpha:.2g} power={verdict.power:.4f} vs TV>={verdict.tv} "
            f"(its share of the prompt's alpha {self.alpha:.2g}); the depth test was not run"
        )
        numbers = {
            "state": "failed",
            "exit_status": 1,
            "where": where,
            "alpha": verdict.alpha,
            "first_m": {"m": self.m, **law_json(verdict)},
        }
        return PromptOutcome(text, "depth", False, detail, time.perf_counter() - began, numbers)

    def _outcome(
        self,
        text: str,
        mode: str,
        verdict: Any,
        numbers: dict[str, Any],
        design: str,
        began: float,
        alpha: float | None = None,
    ) -> PromptOutcome:
        """A depth verdict (either mode: a :class:`spec.sequential_state.StateVerdict` with ``where``,
        ``detail`` and ``power``) as the prompt's outcome."""
        from verispec.decoder.report import PromptOutcome
        from verispec.spec.sequential_state import LABEL

        detail = (
            f"[{LABEL[verdict.state]}] {verdict.where + '; ' if verdict.where else ''}{verdict.detail}; {design}, "
            f"alpha={self.alpha if alpha is None else alpha:.2g}, power reached {verdict.power:.4f}"
        )
        numbers.pop("detail", None)
        passed = bool(numbers.pop("passed", verdict.passed))
        return PromptOutcome(
            text,
            mode,
            passed,
            detail,
            time.perf_counter() - began,
            numbers,
            inconclusive=verdict.state == "inconclusive",
        )

    def _two_sample_depth(self, text: str, ids: tuple[int, ...], began: float) -> PromptOutcome:
        """Two-sample mode at depth on one prompt (spec/decoder/depth/two_sample.py)."""
        from verispec.spec.decoder.depth.law import DepthCase
        from verispec.spec.decoder.depth.two_sample import check_two_sample_depth, verdict_json

        if not callable(getattr(self.engine, "generate", None)):
            raise _error("depth needs an engine with generate (the generate op); depth 0 runs the first-m test")
        case = DepthCase(ids, self.params, self.depth.tokens, self.eog, self.depth.min_tokens, vocab=self.vocab())
        verdict = check_two_sample_depth(
            self.generations, case, alpha=self.alpha, tv=self.tv, budget_s=self.depth.budget, min_mass=self.min_mass
        )
        design = (
            f"design {verdict.n_per_arm} generations per arm for power 0.99 vs TV {verdict.tv} on each "
            f"feature's law (df {verdict.df})"
        )
        return self._outcome(text, "two-sample depth", verdict, verdict_json(verdict), design, began)
