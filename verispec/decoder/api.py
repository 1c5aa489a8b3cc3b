"""``verispec.check_decoder(...)``: the law test of a whole speculative decoder, as a function.

``verispec check-decoder`` parses its flags and calls :func:`check_decoder` with them (one keyword
per flag: ``--engine-cmd`` -> ``engine_cmd``, ``--prompt`` -> ``prompts``), so the checks of the
arguments, the defaults and the run are one piece of code. The modes and the engine interface are
those of :mod:`verispec.spec.decoder.check`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from verispec.decoder.report import DecoderReport, PromptOutcome
    from verispec.reference.sampling import SamplingParams
    from verispec.spec.decoder.laws import Profile

TargetLaw = Literal["reference", "engine-logits", "two-sample"]
DEFAULT_PROMPTS: tuple[str, ...] = ("The cat sat on the",)
# Threads computing our engine's teacher-forced passes ahead of the scoring (spec/decoder/depth/forcing.py):
# its passes are thread-safe and release the GIL in onnxruntime, and the checker's serial pass is
# what the decoding workers wait on.
FORCING_THREADS = 2
DEFAULT_ALPHA = 1e-3  # the run's false-alarm probability, split over the prompts (Bonferroni)


def check_decoder(
    engine: str | Callable[[Path], Any] | None = None,
    *,
    engine_cmd: str | None = None,
    ours: bool = False,
    mutant: str | None = None,
    model: str | Path = "smollm2-135m",
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    bench_prompts: bool = False,
    depth: int = 64,
    m: int = 3,
    law: str = "verispec",
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repeat_penalty: float | None = None,
    repetition_penalty: float | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    penalty_last_n: int | None = None,
    min_tokens: int | None = None,
    draft_temperature: float = 2.0,
    draft_top_k: int = 4,
    k: int = 2,
    target_law: TargetLaw = "reference",
    tv: float | None = None,
    fraction: float = 0.1,
    budget: float | None = None,
    alpha: float | None = None,
    min_mass: float = 0.01,
    greedy: bool = False,
    max_tokens: int = 16,
    timeout: float = 600.0,
    workers: int = 1,
    weights: str | None = None,
    log: Callable[[PromptOutcome], None] | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 30.0,
    first_m: bool = True,
) -> DecoderReport:
    """Test a decoder's law on ``model``: every token of whole generations of up to ``depth``
    tokens (the default; spec/decoder/depth/law.py, power 0.99 against TV ``tv`` (0.05) on ``fraction``
    of positions, ``budget`` seconds per prompt, inconclusive when it ends short), or with
    ``depth=0`` the first ``m`` tokens (spec/decoder/first_tokens.py, default TV 0.2), or with ``greedy``
    its speculative output against its own plain greedy output.

    The decoder, exactly one of: ``engine``, a factory ``FACTORY(model_path) -> engine`` or its
    ``"module:FACTORY"``; ``engine_cmd``, a program speaking the JSON-lines ops; ``ours``, our own
    decode loop; ``mutant``, a mutant decoder of spec/decoder/mutants.py. ``target_law``: where the
    law comes from (``reference``: our forward; ``engine-logits``: the engine's reported logits;
    ``two-sample``: the same engine with speculation off, at depth its ``generate_plain`` and
    position-binned features, default TV 0.1). N is chosen for power 0.99 against a
    total-variation deviation ``tv`` at false-alarm probability ``alpha`` (default 1e-3, split over
    the prompts). ``log`` sees each prompt's outcome as it is decided.

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

    ``law``: whose target law the tokens must follow (spec/decoder/laws/): ``verispec`` (the default;
    temperature 1, top_k 4, repeat_penalty 1.5 unless given), ``llama.cpp``, ``transformers`` or
    ``vllm``, each with its ecosystem's parameter names and defaults for the sampling keywords left
    None; a keyword the chosen law does not have is a usage error naming its flag. The engine
    receives a non-default law as ``law=`` (a :class:`verispec.spec.decoder.laws.Profile`; on the wire the
    ``"law"`` field).

    Example::

        report = verispec.check_decoder("mypkg.serving:engine_factory", model="model.gguf", m=2)
        assert report.passed, report.summary()
    """
    from verispec.decoder.report import DecoderReport
    from verispec.reference.model import Model
    from verispec.reference.tokenizer import Tokenizer
    from verispec.registry import resolve_model
    from verispec.spec.decoder.check import ReferenceLogits
    from verispec.spec.decoder.laws import min_tokens_of
    from verispec.spec.external import check_timeout

    _check_types(
        dict(
            engine=engine,
            engine_cmd=engine_cmd,
            ours=ours,
            mutant=mutant,
            model=model,
            prompts=prompts,
            bench_prompts=bench_prompts,
            depth=depth,
            m=m,
            law=law,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            repeat_penalty=repeat_penalty,
            repetition_penalty=repetition_penalty,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            penalty_last_n=penalty_last_n,
            min_tokens=min_tokens,
            draft_temperature=draft_temperature,
            draft_top_k=draft_top_k,
            k=k,
            target_law=target_law,
            tv=tv,
            fraction=fraction,
            budget=budget,
            alpha=alpha,
            min_mass=min_mass,
            greedy=greedy,
            max_tokens=max_tokens,
            weights=weights,
            log=log,
        )
    )
    budget_led = tv is None and budget is not None and depth > 0 and target_law != "two-sample" and not greedy
    tv = default_tv(depth, target_law) if tv is None else tv
    _check_arguments(engine, engine_cmd, ours, mutant, m, tv, alpha, k, max_tokens, target_law)
    flags = {
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "min_p": min_p,
        "repeat_penalty": repeat_penalty,
        "repetition_penalty": repetition_penalty,
        "frequency_penalty": frequency_penalty,
        "presence_penalty": presence_penalty,
        "penalty_last_n": penalty_last_n,
        "min_tokens": min_tokens,
    }
    _check_depth_arguments(depth, min_tokens or 0, fraction, budget, ours)
    _check_progress_every(progress_every)
    _check_workers(workers, engine, depth, greedy)
    _check_weights(weights, ours, depth, greedy, target_law)
    _profile(law, flags, ())  # before the model loads: a flag the law lacks, a bad value
    _check_law_mode(law, ours or mutant is not None, target_law, greedy)
    check_timeout(timeout)  # before the model loads: inf, nan, 1e300, -1 are usage errors
    texts = _prompts(prompts, bench_prompts)
    path = resolve_model(str(model))
    reference, tokenizer = Model.load(path), Tokenizer.from_file(path)
    profile = _profile(law, flags, tokenizer.eog_ids)
    params = profile.legacy
    logits = ReferenceLogits(reference)
    decoder = build_engine(
        engine, engine_cmd, ours, mutant, path, draft_temperature, draft_top_k, k, timeout, logits, tokenizer, weights
    )
    report = DecoderReport(str(path))
    start = time.perf_counter()
    per_prompt = (alpha if alpha is not None else DEFAULT_ALPHA) / len(texts)  # Bonferroni over the prompts
    pool = None
    try:
        run = _Run(decoder, logits, tokenizer, params, m, per_prompt, tv, min_mass, greedy, max_tokens, target_law)
        if workers > 1:
            pool = _pool(
                workers,
                engine,
                engine_cmd,
                ours,
                mutant,
                path,
                draft_temperature,
                draft_top_k,
                k,
                timeout,
                logits,
                tokenizer,
                weights,
            )
            run.generations = pool
        run.law = None if profile.name == "verispec" else profile
        run.depth = _Depth(depth, min_tokens_of(profile), fraction, budget, reference, budget_led, first_m)
        if progress is not None:
            from verispec.progress import PeriodicLines

            run.progress = PeriodicLines(progress, progress_every)
        run.check_modes()
        run.check_context(texts)
        for text in texts:
            report.results.append(run.prompt(text))
            if log:
                log(report.results[-1])
    finally:
        report.seconds = time.perf_counter() - start
        if pool is not None:
            pool.close()
        close = getattr(decoder, "close", None)
        if callable(close):
            close()
    return report


def default_tv(depth: int, target_law: str) -> float:
    """The deviation N is designed for: TV 0.05 on 10% of positions at depth against a law, TV 0.1
    on one bin's feature law in two-sample mode at depth, TV 0.2 on the first-m cell law."""
    if not depth:
        return 0.2
    return 0.1 if target_law == "two-sample" else 0.05


def _error(message: str) -> Exception:
    from verispec.spec.check import CheckError

    return CheckError(message)


# Each keyword's type (the ranges are checked after, by the checks below and the law profiles):
# a Python caller can pass anything, the CLI passes what argparse parsed, and both get one message.
_NUMBERS = (
    "temperature",
    "top_p",
    "min_p",
    "repeat_penalty",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "tv",
    "budget",
    "alpha",
)
_INTEGERS = ("top_k", "penalty_last_n", "min_tokens")
_TEXTS = ("engine_cmd", "mutant", "law", "target_law", "weights")


def _check_types(values: dict[str, object]) -> None:
    """CheckError (verispec/arguments.py) for a keyword of the wrong type, before anything loads."""
    from verispec import arguments

    for name in ("engine", "log"):
        arguments.part(name, values[name])
    for name in ("ours", "bench_prompts", "greedy"):
        arguments.flag(name, values[name])
    for name in _TEXTS:
        arguments.optional_text(name, values[name])
    for name in _NUMBERS:
        if name == "budget":  # inf: no budget
            if values[name] is not None and (
                isinstance(values[name], bool) or not isinstance(values[name], (int, float))
            ):
                raise _error(f"budget must be a number of seconds, got {arguments.shown(values[name])}")
            continue
        arguments.optional_number(name, values[name])
    for name in _INTEGERS:
        arguments.optional_integer(name, values[name])
    for name in ("depth", "m", "k", "max_tokens"):
        arguments.integer(name, values[name])
    for name in ("fraction", "min_mass"):
        arguments.number(name, values[name])
    # the draft's law is ours to build (--ours, --mutant): a bad one is a usage error, not the decoder failing
    arguments.integer("draft_top_k", values["draft_top_k"], minimum=0)
    arguments.number("draft_temperature", values["draft_temperature"], minimum=0)
    arguments.optional_path("model", values["model"])
    if values["model"] is None:
        raise _error("model must be a registry name or a .gguf path, got None")
    arguments.texts("prompts", values["prompts"])


def _check_arguments(
    engine: object,
    engine_cmd: str | None,
    ours: bool,
    mutant: str | None,
    m: int,
    tv: float,
    alpha: float | None,
    k: int,
    max_tokens: int,
    target_law: str,
) -> None:
    from verispec.spec.decoder.first_tokens import MAX_M

    given = sum(1 for chosen in (engine is not None, engine_cmd is not None, ours, mutant is not None) if chosen)
    if given != 1:
        raise _error("give exactly one decoder: engine (module:FACTORY or a factory), engine_cmd, ours or mutant")
    if not 1 <= m <= MAX_M:
        raise _error(f"m must be in [1, {MAX_M}], got {m}")
    if not 0 < tv <= 1:
        raise _error(f"tv must be in (0, 1], got {tv}")
    if alpha is not None and not 0 < alpha < 1:
        raise _error(f"alpha must be in (0, 1), got {alpha}")
    if k < 1 or max_tokens < 1:
        raise _error("k and max_tokens must be >= 1")
    if target_law not in ("reference", "engine-logits", "two-sample"):
        raise _error(f"target_law must be reference, engine-logits or two-sample, got {target_law!r}")


def _check_depth_arguments(depth: int, min_tokens: int, fraction: float, budget: float | None, ours: bool) -> None:
    if depth < 0 or min_tokens < 0:
        raise _error("depth and min_tokens must be >= 0")
    if not 0 < fraction <= 1:
        raise _error(f"fraction must be in (0, 1], got {fraction}")
    if budget is not None and not budget > 0:
        raise _error(f"budget must be > 0 seconds, got {budget}")
    if ours and min_tokens:
        raise _error("ours: our decode loop has no min_tokens")


def _check_progress_every(seconds: float) -> None:
    import math

    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise _error(f"progress_every must be a finite number of seconds >= 0, got {seconds!r}")


def _check_workers(workers: int, engine: object, depth: int, greedy: bool) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise _error(f"workers must be an integer >= 1, got {workers!r}")
    from verispec import arguments

    arguments.workers(workers)  # at most MAX_WORKERS
    if workers > 1 and (not depth or greedy):
        raise _error("workers > 1 decodes the depth test's generations: it needs depth > 0 and no greedy mode")
    if workers > 1 and engine is not None and not isinstance(engine, str):
        raise _error("workers > 1 builds the engine in other processes: give it as 'module:FACTORY'")


def _check_weights(weights: str | None, ours: bool, depth: int, greedy: bool, target_law: str) -> None:
    from verispec.engine_load import WEIGHTS_CHOICES

    if weights is None:
        return
    if weights not in WEIGHTS_CHOICES or weights == "quantized":
        raise _error(f"weights must be auto, int8, exact or f32, got {weights!r}")
    if not ours:
        raise _error("weights picks the engine of our own decoder: it needs ours")
    if not depth or greedy or target_law == "two-sample":
        raise _error(
            "ours with weights runs the depth test against the engine's own rows: depth > 0, no greedy, no two-sample"
        )


def _pool(
    workers: int,
    engine: str | Callable[[Path], Any] | None,
    engine_cmd: str | None,
    ours: bool,
    mutant: str | None,
    path: Path,
    draft_temperature: float,
    draft_top_k: int,
    k: int,
    timeout: float,
    logits: Any,
    tokenizer: Any,
    weights: str | None = None,
) -> Any:
    """``workers`` engine processes (spec/decoder/depth/pool.py): ``engine_cmd`` that many times, or
    verispec/decoder/worker.py building the Python engine in each."""
    import os

    from verispec.decoder.recipe import WorkerRecipe
    from verispec.spec.decoder.check import CommandEngine
    from verispec.spec.decoder.depth.pool import GenerationPool

    if engine_cmd is None:
        recipe = WorkerRecipe(
            str(path),
            engine if isinstance(engine, str) else None,
            ours,
            mutant,
            draft_temperature,
            draft_top_k,
            k,
            os.getcwd(),
            weights,
        )
        engine_cmd = recipe.command()
    vocab = logits.model.config.n_vocab
    return GenerationPool([CommandEngine(engine_cmd, timeout, vocab, tokenizer.eog_ids) for _ in range(workers)])


def _profile(law: str, flags: dict[str, Any], eog: Collection[int]) -> Profile:
    """The law profile of the sampling flags (spec/decoder/laws/); a usage error names a flag it lacks."""
    from verispec.spec.decoder.laws import build

    return build(law, flags, eog)


def _check_law_mode(law: str, ours: bool, target_law: str, greedy: bool) -> None:
    """Our decode loop and its mutants sample the verispec law (their bugs are written against its
    penalty window and min_tokens); two-sample mode has no law at all."""
    if law == "verispec" or greedy:
        return
    if ours:
        raise _error(f"ours and the mutants sample the verispec law; law {law} needs another decoder")
    if target_law == "two-sample":
        raise _error(
            f"target_law two-sample compares the engine with itself, no law; law {law} needs reference or engine-logits"
        )


def _prompts(prompts: Sequence[str], bench_prompts: bool) -> list[str]:
    if bench_prompts:
        from verispec.bench.options import PROMPTS

        return [text for _, text in PROMPTS]
    if isinstance(prompts, str) or not prompts:
        raise _error("prompts must be a non-empty sequence of strings")
    return list(prompts)


def build_engine(
    engine: str | Callable[[Path], Any] | None,
    engine_cmd: str | None,
    ours: bool,
    mutant: str | None,
    path: Path,
    draft_temperature: float,
    draft_top_k: int,
    k: int,
    timeout: float,
    logits: Any = None,
    tokenizer: Any = None,
    weights: str | None = None,
) -> Any:
    """The decoder under test, as check-decoder builds it (here and in each worker process);
    ``logits`` / ``tokenizer``: our reference forward and the tokenizer of ``path`` (loaded here
    when None and the decoder is ours or a mutant); ``weights`` with ``ours``: the fast engine's
    decoder in that mode (verispec/decoder/ours.py)."""
    from verispec.reference.sampling import SamplingParams
    from verispec.spec.check import load_callable
    from verispec.spec.decoder.check import CommandEngine, ReferenceDecoder
    from verispec.spec.decoder.mutants import DEPTH_MUTANTS, MUTANT_BUGS, LoopDecoder

    draft = SamplingParams(temperature=draft_temperature, top_k=draft_top_k)
    if ours and weights is not None:
        from verispec.decoder.ours import EngineDecoder

        return EngineDecoder(path, weights, k)
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
            raise _error(f"unknown mutant decoder {mutant!r}; known: {', '.join(known)}")

        def positioned(ids: Any, positions: Any) -> Any:
            model = logits.model
            return model.forward(list(ids), model.new_cache(len(ids)), positions=list(positions)).logits[-1]

        loop = LoopDecoder(logits, draft, k, known[mutant][1], eog=frozenset(tokenizer.eog_ids), positioned=positioned)
        return FreshMemos(loop)
    if engine_cmd is not None:
        return CommandEngine(engine_cmd, timeout, logits.model.config.n_vocab, tokenizer.eog_ids)
    factory = load_callable(engine) if isinstance(engine, str) else engine
    assert factory is not None  # _check_arguments: exactly one decoder was given
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

    def __init__(
        self,
        engine: Any,
        logits: Any,
        tokenizer: Any,
        params: SamplingParams,
        m: int,
        alpha: float,
        tv: float,
        min_mass: float,
        greedy: bool,
        max_tokens: int,
        target_law: TargetLaw,
    ) -> None:
        self.engine, self.logits, self.tokenizer, self.params = engine, logits, tokenizer, params
        self.m, self.alpha, self.tv, self.min_mass = m, alpha, tv, min_mass
        self.greedy, self.max_tokens, self.target_law = greedy, max_tokens, target_law
        self.eog = frozenset(tokenizer.eog_ids)
        self.target: Any = logits
        self.depth = _Depth()
        self.law: Profile | None = None  # another ecosystem's target law (None: verispec, of params)
        self.generations: Any = engine  # who decodes the depth tests' blocks (a pool with workers > 1)
        self.progress: Callable[[str, bool], None] | None = None  # progress lines (verispec/progress.py)

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
