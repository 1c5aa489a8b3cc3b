"""The gate from Python: :func:`check` and :func:`check_decoder`, the two commands as functions.

    import verispec

    report = verispec.check(verifier="mypkg.sampler:verify", batch_verifier="mypkg.sampler:verify_batch",
                            law_only=True, budget=600)
    assert report.passed, report.summary()

The keyword arguments are the command-line flags (``--batch-verifier`` -> ``batch_verifier``);
``verispec check`` and ``verispec check-decoder`` call these same functions, so a flag and its
keyword are checked, defaulted and run by one piece of code. Bad arguments (a wrong type included:
a string for a number, a float for an integer, a number for a verifier; verispec/arguments.py)
raise a :class:`~verispec.reference.errors.VerispecError` (``CheckError``) before anything runs; a failing
implementation is not an exception but a report with ``passed`` False.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verispec import arguments
from verispec.decoder.api import check_decoder  # re-exported: cheap, it imports its work lazily

if TYPE_CHECKING:
    from verispec.spec.check import CheckReport, Implementation, PropertyOutcome
    from verispec.spec.sequential import Budget
    from verispec.spec.vectors import VectorSet
    from verispec.spec.workers import ImplementationSpec

__all__ = ["check", "check_decoder", "parse_shard"]

Part = str | Callable[..., Any] | None  # "module:function" or the callable itself


def check(
    verifier: Part = None,
    *,
    batch_verifier: Part = None,
    greedy_verifier: Part = None,
    pipeline: Any = None,
    verifier_cmd: str | None = None,
    timeout: float | None = None,
    law_only: bool = False,
    vectors: str | Path | None = None,
    seed: int | None = None,
    count: int | None = None,
    scale: float = 1.0,
    fail_fast: bool = False,
    only: Sequence[str] | None = None,
    sequential: bool = False,
    budget: float | None = None,
    budget_samples: int | None = None,
    workers: int = 1,
    shard: str | tuple[int, int] | None = None,
    log: Callable[[PropertyOutcome], None] | None = None,
    announce: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
    min_power: float | None = None,
    keep_going: bool | None = None,
    warn: Callable[[str], None] | None = None,
) -> CheckReport:
    """Check a verifier against the spec (``verispec check``); returns the typed report.

    The implementation: ``verifier`` (with ``batch_verifier``, ``greedy_verifier``, ``pipeline``),
    each a ``"module:function"`` string or the callable itself, or ``verifier_cmd``, a program
    speaking the JSON-lines wire protocol (``timeout`` seconds per answer; default
    ``spec.external.DEFAULT_TIMEOUT``). ``law_only``: it draws its own randomness,
    ``f(p, q, drafts)`` (spec/law_only.py). ``vectors``: replay these vector files, else generate
    them (``seed``, ``count``; only the kinds the run replays). ``scale`` multiplies the statistical sample
    sizes (the reported power follows). ``sequential`` / ``budget`` (seconds) / ``budget_samples``:
    group-sequential statistics that stop early (inconclusive when a budget ends first).
    ``workers``: draw in N processes (string parts only: they cross a process boundary).
    ``shard``: ``"I/S"`` or ``(I, S)``, one shard of a run that ``verispec check --merge`` adds up.
    ``log`` sees each property's outcome as it is decided; ``announce`` the implementation's
    description once it is loaded; ``progress`` one line of progress at a time on long runs.

    ``min_power``: the power a statistical pass may have below the design's 0.99 (a pass short of
    the power it needs, e.g. at ``scale`` < 1, is inconclusive, exit 3, unless this accepts it;
    the claim prints the power reached). ``keep_going``: run the statistical tests after a
    deterministic property (a vector replay, the contract, ...) has failed; default: yes, except
    when the environment variable ``CI`` is ``true`` (a failed replay already decides the verdict).
    ``warn`` gets one line when the run takes the slow path (default: :func:`warnings.warn`).

    Example (a law-only sampler, quick local run)::

        report = verispec.check(verifier=verify, batch_verifier=verify_batch, law_only=True, scale=0.05)
        print(report.summary())          # the failing properties, the verdict, the claim
        report.exit_status               # 0 passed, 1 failed, 3 inconclusive
        json.dumps(report.as_json())     # what `verispec check --json` prints
    """
    from verispec.spec.check import DEFAULT_STAT_SEED, run_check
    from verispec.spec.external import DEFAULT_TIMEOUT
    from verispec.spec.workers import WorkerPool

    for label, value in (
        ("verifier", verifier),
        ("batch_verifier", batch_verifier),
        ("greedy_verifier", greedy_verifier),
        ("pipeline", pipeline),
        ("log", log),
        ("announce", announce),
        ("progress", progress),
    ):
        arguments.part(label, value)
    arguments.optional_text("verifier_cmd", verifier_cmd)
    for label, value in (("law_only", law_only), ("fail_fast", fail_fast), ("sequential", sequential)):
        arguments.flag(label, value)
    arguments.optional_path("vectors", vectors)
    arguments.optional_integer("seed", seed, minimum=0)
    arguments.optional_integer("count", count, minimum=0)
    arguments.number("scale", scale, positive=True)
    arguments.optional_texts("only", only)
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    _check_arguments(timeout, budget, budget_samples, workers)
    _check_min_power(min_power)
    if vectors is not None and (seed is not None or count is not None):
        raise _error("vectors replays files; seed/count generate vectors: give one or the other")
    where = parse_shard(shard)
    if where is not None and (budget is not None or budget_samples is not None):
        raise _error("shard runs its whole slice: a budget would leave holes in the merge")
    parts = (verifier, batch_verifier, greedy_verifier, pipeline)
    if workers > 1 and any(part is not None and not isinstance(part, str) for part in parts):
        raise _error("workers > 1 builds the verifier in other processes: give its parts as 'module:function'")
    impl, spec = _implementation(*parts, verifier_cmd, timeout, law_only)  # cheap errors first, then the vectors
    pool: WorkerPool | None = None
    try:
        cases = _vectors(vectors, seed, count, _replayed_kinds(law_only, only))
        if announce is not None:
            announce(impl.description)
        slow = slow_path_warning(verifier_cmd is None, batch_verifier is not None, only)
        if slow is not None:
            (warn or _warn)(slow)
        if workers > 1 and spec is not None:
            pool = WorkerPool(spec, DEFAULT_STAT_SEED, workers)
        return run_check(
            impl,
            cases,
            scale=scale,
            fail_fast=fail_fast,
            only=only,
            log=log,
            sequential=sequential,
            budget=_budget(budget, budget_samples),
            shard=where,
            draw=pool.draw if pool else None,
            parallel=workers,
            progress=progress,
            min_power=min_power,
            keep_going=ci_keeps_going() if keep_going is None else keep_going,
        )
    finally:
        impl.close()
        if pool:
            pool.close()


def slow_path_warning(python: bool, batched: bool, only: Sequence[str] | None) -> str | None:
    """The warning for a Python verifier without a batch form whose run has statistics to draw:
    each of their ~7 million verifications is then one Python call (minutes to hours)."""
    from verispec.spec.properties import STATISTICAL

    if not python or batched or not (only is None or STATISTICAL & set(only)):
        return None
    return (
        "no --batch-verifier (batch_verifier=): the statistical tests call the verifier once per draw, "
        "millions of calls (minutes to hours); a batch form f(p, q, drafts [N, k], uniforms [N, k+1]) "
        "takes seconds (docs/checking-verifiers.md)"
    )


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=3)


def ci_keeps_going() -> bool:
    """The default of ``keep_going``: False in CI (``CI=true``, as GitHub Actions, GitLab CI and
    most others set it), True elsewhere."""
    import os

    return os.environ.get("CI", "").strip().lower() not in ("true", "1", "yes")


def _check_min_power(min_power: float | None) -> None:
    if min_power is not None and not 0 <= min_power <= 1:
        raise _error(f"min_power must be in [0, 1], got {min_power}")


def _error(message: str) -> Exception:
    from verispec.spec.check import CheckError

    return CheckError(message)


def _check_arguments(timeout: object, budget: object, budget_samples: object, workers: object) -> None:
    arguments.number("timeout", timeout, positive=True)
    if budget is not None and not (isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget > 0):
        raise _error(f"budget must be > 0 seconds, got {arguments.shown(budget)}")  # inf: no budget, as the CLI allows
    arguments.optional_integer("budget_samples", budget_samples, minimum=0)
    arguments.workers(workers)


def parse_shard(shard: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"I/S"`` or ``(I, S)`` (two integers) -> (I, S) with 1 <= I <= S; CheckError otherwise."""
    return arguments.shard(shard)


def _replayed_kinds(law_only: bool, only: Sequence[str] | None) -> list[str]:
    """The vector kinds the run replays: none for a law-only verifier (replay is not applicable),
    those ``only`` names otherwise (generating the rest would cost seconds for nothing)."""
    from verispec.spec.vectors import KINDS

    return [] if law_only else [kind for kind in KINDS if only is None or f"vectors_{kind}" in only]


def _vectors(path: str | Path | None, seed: int | None, count: int | None, kinds: Sequence[str]) -> VectorSet:
    from verispec.spec.vectors import DEFAULT_COUNT, DEFAULT_SEED, build_vectors, read_vectors

    if path is not None:
        return read_vectors(Path(path))
    return build_vectors(DEFAULT_COUNT if count is None else count, DEFAULT_SEED if seed is None else seed, kinds)


def _budget(seconds: float | None, samples: int | None) -> Budget | None:
    from verispec.spec.sequential import Budget

    return None if seconds is None and samples is None else Budget(seconds=seconds, samples=samples)


def _implementation(
    verifier: Part,
    batch: Part,
    greedy: Part,
    pipeline: Any,
    command: str | None,
    timeout: float,
    law_only: bool,
) -> tuple[Implementation, ImplementationSpec | None]:
    """The implementation, and how to rebuild it in a worker (None when a part is a callable)."""
    from verispec.spec.check import CommandImplementation, PythonImplementation
    from verispec.spec.workers import ImplementationSpec

    if command is not None:
        if verifier is not None or batch is not None or greedy is not None or pipeline is not None:
            raise _error("batch_verifier, greedy_verifier and pipeline go with verifier, not verifier_cmd")
        spec = ImplementationSpec(command=command, timeout=timeout, law_only=law_only)
        return CommandImplementation(command, timeout, law_only=law_only), spec
    if verifier is None:
        raise _error("give verifier (module:function or a callable) or verifier_cmd")
    if isinstance(verifier, str) and all(part is None or isinstance(part, str) for part in (batch, greedy, pipeline)):
        spec = ImplementationSpec(verifier, _text(batch), _text(greedy), _text(pipeline), law_only=law_only)
        return PythonImplementation.from_specs(
            verifier, spec.batch, spec.greedy, spec.pipeline, law_only=law_only
        ), spec
    return _from_objects(verifier, batch, greedy, pipeline, law_only), None


def _text(part: object) -> str | None:
    return part if isinstance(part, str) else None


def _from_objects(verifier: Part, batch: Part, greedy: Part, pipeline: Any, law_only: bool) -> Implementation:
    """A PythonImplementation from callables (strings among them loaded), described by name."""
    from verispec.spec.check import PythonImplementation, load_callable

    def resolve(part: Any) -> Any:
        return load_callable(part) if isinstance(part, str) else part

    def name(part: Any) -> str:
        if isinstance(part, str):
            return part
        return f"{getattr(part, '__module__', '?')}:{getattr(part, '__qualname__', type(part).__qualname__)}"

    labelled = [("verifier", verifier), ("batch", batch), ("greedy", greedy), ("pipeline", pipeline)]
    description = ", ".join(f"{label} {name(part)}" for label, part in labelled if part is not None)
    return PythonImplementation(
        resolve(verifier),
        batch=resolve(batch),
        greedy=resolve(greedy),
        pipeline=resolve(pipeline),
        description=("python (law only): " if law_only else "python: ") + description,
        law_only=law_only,
    )
