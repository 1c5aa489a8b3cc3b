"""The gate from Python: :func:`check` and :func:`check_decoder`, the two commands as functions.

    import verispec

    report = verispec.check(verifier="mypkg.sampler:verify", batch_verifier="mypkg.sampler:verify_batch",
                            law_only=True, budget=600)
    assert report.passed, report.summary()

The options are objects (verispec/options.py, verispec/decoder/options.py: ``VerifierUnderTest``,
``CheckDesign``, ...) whose fields are the command-line flags (``--batch-verifier`` ->
``batch_verifier``), each also a keyword of these functions; ``verispec check`` and ``verispec
check-decoder`` build the same objects with the same builder and run them with the same
function, so a flag and its keyword are checked, defaulted and run by one piece of code. Bad arguments (a wrong type included:
a string for a number, a float for an integer, a number for a verifier; verispec/arguments.py)
raise a :class:`~verispec.reference.errors.VerispecError` (``CheckError``) before anything runs; a failing
implementation is not an exception but a report with ``passed`` False.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verispec import arguments
from verispec.decoder.api import check_decoder  # re-exported: cheap, it imports its work lazily
from verispec.options import CheckDesign, CheckOptions, CheckReporting, Part, VerifierUnderTest, check_options

if TYPE_CHECKING:
    from verispec.spec.check import CheckReport, Implementation
    from verispec.spec.sequential import Budget
    from verispec.spec.vectors import VectorSet
    from verispec.spec.workers import ImplementationSpec

__all__ = ["check", "check_decoder", "check_options", "parse_shard", "run"]


def check(
    subject: VerifierUnderTest | Part = None,
    *,
    vectors: str | Path | None = None,
    seed: int | None = None,
    count: int | None = None,
    design: CheckDesign | None = None,
    reporting: CheckReporting | None = None,
    **keywords: Any,
) -> CheckReport:
    """Check a verifier against the spec (``verispec check``); returns the typed report.

    The run is three objects (verispec/options.py) and the vectors it replays: ``subject``, the
    :class:`VerifierUnderTest` (``verifier``, with ``batch_verifier``, ``greedy_verifier``,
    ``pipeline``, each a ``"module:function"`` string or the callable itself, or ``verifier_cmd``,
    a program speaking the JSON-lines wire protocol, ``timeout`` seconds per answer, default
    ``spec.external.DEFAULT_TIMEOUT``; ``law_only``: it draws its own randomness, ``f(p, q,
    drafts)``, spec/law_only.py; ``workers``: draw in N processes, string parts only: they cross a
    process boundary); ``design``, the :class:`CheckDesign`; ``reporting``, the
    :class:`CheckReporting` callbacks. Each field is also a keyword of the same name, the flag's,
    and ``subject`` may be the verifier itself. ``vectors``: replay these vector files, else
    generate them (``seed``, ``count``; only the kinds the run replays).

    The design: ``scale`` multiplies the statistical sample sizes (the reported power follows).
    ``sequential`` / ``budget`` (seconds) / ``budget_samples``: group-sequential statistics that
    stop early (inconclusive when a budget ends first). ``shard``: ``"I/S"`` or ``(I, S)``, one
    shard of a run that ``verispec check --merge`` adds up. ``min_power``: the power a statistical
    pass may have below the design's 0.99 (a pass short of the power it needs, e.g. at ``scale`` <
    1, is inconclusive, exit 3, unless this accepts it; the claim prints the power reached).
    ``keep_going``: run the statistical tests after a deterministic property (a vector replay,
    the contract, ...) has failed; default: yes, except when the environment variable ``CI`` is
    ``true`` (a failed replay already decides the verdict).

    The reporting: ``log`` sees each property's outcome as it is decided; ``announce`` the
    implementation's description once it is loaded; ``progress`` one line of progress at a time
    on long runs; ``warn`` gets one line when the run takes the slow path (default:
    :func:`warnings.warn`).

    Example (a law-only sampler, quick local run)::

        report = verispec.check(verifier=verify, batch_verifier=verify_batch, law_only=True, scale=0.05)
        report = verispec.check(
            VerifierUnderTest(verify, batch_verifier=verify_batch, law_only=True), design=CheckDesign(scale=0.05)
        )
        print(report.summary())          # the failing properties, the verdict, the claim
        report.exit_status               # 0 passed, 1 failed, 3 inconclusive
        json.dumps(report.as_json())     # what `verispec check --json` prints
    """
    options = check_options(
        subject, vectors=vectors, seed=seed, count=count, design=design, reporting=reporting, **keywords
    )
    return run(options)


def run(options: CheckOptions) -> CheckReport:
    """The run of ``options`` (built and checked by :func:`check_options`): the CLI's, the API's
    and the pytest plugin's, one piece of code."""
    from verispec.spec.check import DEFAULT_STAT_SEED, run_check
    from verispec.spec.workers import WorkerPool

    subject, design, reporting = options.subject, options.design, options.reporting
    impl, spec = _implementation(subject)  # cheap errors first, then the vectors
    pool: WorkerPool | None = None
    try:
        cases = _vectors(options.vectors, options.seed, options.count, _replayed_kinds(subject.law_only, design.only))
        if reporting.announce is not None:
            reporting.announce(impl.description)
        slow = slow_path_warning(subject.verifier_cmd is None, subject.batch_verifier is not None, design.only)
        if slow is not None:
            (reporting.warn or _warn)(slow)
        if subject.workers > 1 and spec is not None:
            pool = WorkerPool(spec, DEFAULT_STAT_SEED, subject.workers)
        return run_check(
            impl,
            cases,
            scale=design.scale,
            fail_fast=design.fail_fast,
            only=design.only,
            log=reporting.log,
            sequential=design.sequential,
            budget=_budget(design.budget, design.budget_samples),
            shard=design.slice(),
            draw=pool.draw if pool else None,
            parallel=subject.workers,
            progress=reporting.progress,
            min_power=design.min_power,
            keep_going=ci_keeps_going() if design.keep_going is None else design.keep_going,
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


def _error(message: str) -> Exception:
    from verispec.spec.check import CheckError

    return CheckError(message)


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


def _implementation(subject: VerifierUnderTest) -> tuple[Implementation, ImplementationSpec | None]:
    """The implementation, and how to rebuild it in a worker (None when a part is a callable)."""
    from verispec.spec.check import CommandImplementation, PythonImplementation
    from verispec.spec.workers import ImplementationSpec

    law_only, command = subject.law_only, subject.verifier_cmd
    if command is not None:
        timeout = subject.timeout
        assert timeout is not None  # VerifierUnderTest fills in the default when built
        spec = ImplementationSpec(command=command, timeout=timeout, law_only=law_only)
        return CommandImplementation(command, timeout, law_only=law_only), spec
    verifier, batch, greedy, pipeline = subject.parts()
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
