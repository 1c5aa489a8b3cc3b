"""``verispec check``: run the spec against an implementation that is not ours.

An implementation is given either as Python callables or as a program speaking the JSON-lines
wire protocol of :mod:`spec.external`. ``run_check`` then

1. replays the portable vectors (:mod:`spec.vectors`), kind by kind, demanding exact agreement
   (probability rows within the tolerance the case states): properties ``vectors_<kind>``;
2. runs every property of :mod:`spec.properties` (H3's runner: contract, protocol boundaries and
   cells, exact losslessness, batch = sequential, processors through the pipeline, and the
   powered chi-square tests ``stat_*``) through the implementation.

Each property reports passed / failed / skipped, N (cases or draws), alpha (false-alarm
probability; 0 for deterministic properties) and power (probability of detecting a total-variation
bias of ``spec.statistics.TV_BIAS`` = 0.005; 1 for deterministic properties). Vector replay comes
first because it is cheap and kills most broken implementations at once; with ``fail_fast`` the
run stops at the first failure.

Verifiers that draw their own randomness run law-only (:mod:`spec.law_only`: the protocol
properties are reported ``not_applicable``); the statistical tests may run group-sequentially
(:mod:`spec.sequential`: early rejection, a ``Budget`` that leaves them ``inconclusive`` with the
power reached, exit status 3), in worker processes (:mod:`spec.workers`) or as shards whose
block counts :func:`spec.merge.merge_reports` adds up exactly (each shard also takes looks of its
own and fails alone on a rejection it can see: :mod:`spec.shards`). The report, its JSON schema
and the claim live in :mod:`spec.report`; what binds a shard to its run in :mod:`spec.report_seal`.

A law-only verifier is handed a seed per call and must draw from it (:mod:`spec.law_only`).

THE PYTHON INTERFACE (``--verifier module:function`` and friends). All callables receive numpy
float64 arrays for rows and plain lists for ids and uniforms; raising ANY exception means "this
input is rejected" (it is converted to :class:`VerificationError`).

- ``verifier(p, q, drafts, uniforms) -> verdict`` (required): p [k+1, V], q [k, V],
  drafts list[int] (k), uniforms list[float] (k+1); the sampled verification of the protocol.
- ``batch_verifier(p, q, drafts, uniforms) -> BatchVerdict`` (optional, for fast statistics):
  p [k+1, V] or [N, k+1, V], q [k, V] or [N, k, V], drafts int64 [N, k], uniforms [N, k+1];
  returns an object with ``accepted`` [N], ``token`` [N], ``is_bonus`` [N] arrays. Without it the
  single verifier is called N times.
- ``greedy_verifier(p, drafts) -> verdict`` (optional; without it ``vectors_greedy`` is skipped,
  said so): p [k+1, V] float64 rows of logits OR probabilities (any finite reals: only each row's
  argmax matters, lowest id on ties), drafts list[int] (k >= 1); accept while drafts[i] is row i's
  argmax, then emit the argmax of the first disagreeing row (kind "repair") or of row k ("bonus").
  It must reject (raise) NaN, a wrong shape, or a draft id outside [0, V), and must NOT reject
  negative or unnormalized rows (logits).
- ``pipeline``: an object (or a class, instantiated without arguments) with
  ``rows(request) -> (p [k+1, V], q [k, V])`` for a :class:`spec.pipeline.RowsRequest` (target
  and draft logits, history, drafts, target and draft params) and
  ``mode(target_params, draft_params) -> "greedy" | "sampled"`` (params are
  :class:`reference.sampling.SamplingParams`), optional.

A verdict is an object with ``accepted``, ``token``, ``kind`` attributes (like
:class:`reference.speculative.Verdict`), a mapping with those keys, or a tuple
``(accepted, token, kind)``; kind is ``"repair"`` or ``"bonus"``. Parts not given are skipped
(reported as such), except the sampled verifier.
"""

from __future__ import annotations

import importlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import CheckError as CheckError
from verispec.reference.errors import VerificationError, VerispecError
from verispec.reference.sampling import SamplingParams
from verispec.reference.speculative import BatchVerdict, BatchVerifier, Probs2D, Verdict, Verifier
from verispec.spec.external import (
    CommandTransport,
    ExternalError,
    ProgramCannotStart,
    Unsupported,
    WireImplementation,
    parse_verdict,
)
from verispec.spec.law_only import (
    NOT_APPLICABLE_REASON,
    applicable,
    batch_ignoring_uniforms,
    ignoring_uniforms,
)
from verispec.spec.pipeline import Pipeline, RowsRequest
from verispec.spec.properties import PROPERTY_NAMES, STAT_DESIGNS, STATISTICAL, as_batch, as_verifier, run_properties
from verispec.spec.property_names import property_names
from verispec.spec.report import (
    DEFAULT_STAT_SEED,
    EXIT_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_PASSED,
    CheckReport,
    PropertyOutcome,
    Status,
    format_outcome,
    run_design,
    sequential_outcome,
)
from verispec.spec.report_seal import content_digest, report_key, run_id, signature, verifier_identity
from verispec.spec.sequential import BlockDraw, Budget, SequentialTest, run_interleaved, schedule, serial_draw
from verispec.spec.shards import ShardTest
from verispec.spec.statistics import POWER
from verispec.spec.stream_probe import run_probe
from verispec.spec.subject import until_expired
from verispec.spec.vectors import KINDS, Json, VectorSet, compare
from verispec.spec.vectors.gen_large import as_sampled_case
from verispec.spec.vectors.wire import rows_request_from_json

REQUIRED_KINDS = frozenset({"sampled", "sampled_large"})  # vector kinds every verifier must answer
# a verifier without a greedy form is still a sampled verifier worth gating: its greedy vectors are
# skipped, said in one line and recorded as skipped (never passed)
GREEDY_SKIPPED = "no greedy verifier given: greedy verification not checked (--greedy-verifier MOD:FN, or the wire op greedy, adds it)"
Parts = tuple[Verifier, BatchVerifier | None, Pipeline | None]
Progress = Callable[[str], None]  # one line of progress ("stat_x: 12/64 blocks, 38,400 draws")


# -----------------------------------------------------------------------------------------------
# implementations


class Implementation(Protocol):
    """What ``run_check`` needs from an implementation (Python callables or a program)."""

    description: str
    law_only: bool  # it draws its own randomness (spec/law_only.py): no uniforms, no replay

    def replay(self, cases: Sequence[Mapping[str, Any]]) -> list[Json | None]:
        """Per case: its output, ``{"error": msg}`` if rejected, None if the op is not offered."""
        ...

    def verifier_parts(self) -> tuple[Verifier, BatchVerifier | None, Pipeline | None]:
        """(sampled verifier, batch form or None, pipeline or None) for the property runner."""
        ...

    def close(self) -> None: ...


def load_callable(spec: str) -> Any:
    """``"package.module:attribute"`` -> the attribute (dots after the colon walk attributes)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CheckError(f"expected module:function, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CheckError(f"cannot import module {module_name!r} (from {spec!r}): {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CheckError(f"{module_name!r} has no attribute {attr!r} (from {spec!r})")
        obj = getattr(obj, part)
    return obj


def as_verdict(result: Any, where: str) -> Verdict:
    """A Python verifier's result (Verdict-like object, mapping, or 3-tuple) as a Verdict."""
    if isinstance(result, Mapping):
        fields = {key: result.get(key) for key in ("accepted", "token", "kind") if key in result}
    elif isinstance(result, (tuple, list)) and len(result) == 3:
        fields = dict(zip(("accepted", "token", "kind"), result))
    elif all(hasattr(result, a) for a in ("accepted", "token", "kind")):
        fields = {"accepted": result.accepted, "token": result.token, "kind": result.kind}
    else:
        raise ExternalError(f"{where}: expected a verdict (accepted, token, kind), got {result!r:.100}")
    return parse_verdict({k: int(v) if isinstance(v, np.integer) else v for k, v in fields.items()}, where)


def _rejecting(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Call ``fn``; any exception it raises becomes a VerificationError (a rejection)."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except VerificationError:
            raise
        except Exception as exc:  # noqa: BLE001 - a Python implementation rejects by raising
            raise VerificationError(f"{name} raised {type(exc).__name__}: {exc}") from exc

    return call


class _RejectingPipeline:
    def __init__(self, pipeline: Any) -> None:
        self._rows = _rejecting(pipeline.rows, "pipeline.rows")
        self._mode = _rejecting(pipeline.mode, "pipeline.mode")

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        p, q = self._rows(request)
        return np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)

    def mode(self, target_params: SamplingParams, draft_params: SamplingParams) -> Literal["greedy", "sampled"]:
        mode = self._mode(target_params, draft_params)
        if mode not in ("greedy", "sampled"):
            raise ExternalError(f'pipeline.mode must return "greedy" or "sampled", got {mode!r}')
        return "greedy" if mode == "greedy" else "sampled"


def _qualified(obj: Any) -> str:
    """``module:qualname`` of a callable or object (its type's, for an instance)."""
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(named, '__module__', '?')}:{getattr(named, '__qualname__', '?')}"


class PythonImplementation:
    """An implementation given as Python callables (see the module docstring for signatures)."""

    def __init__(
        self,
        verifier: Callable[..., Any],
        *,
        batch: Callable[..., Any] | None = None,
        greedy: Callable[..., Any] | None = None,
        pipeline: Any = None,
        description: str = "python",
        law_only: bool = False,
    ) -> None:
        if description == "python":  # name the callables: the description is the verifier's identity
            description = ("python (law only): " if law_only else "python: ") + ", ".join(
                f"{label} {_qualified(fn)}"
                for label, fn in (("verifier", verifier), ("batch", batch), ("greedy", greedy), ("pipeline", pipeline))
                if fn is not None
            )
        if law_only:  # f(p, q, drafts, seed): the properties' uniforms become each call's seed
            verifier = ignoring_uniforms(verifier)
            batch = batch_ignoring_uniforms(batch) if batch is not None else None
        self.law_only = law_only
        self._verifier = _rejecting(verifier, "verifier")
        self._batch = _rejecting(batch, "batch verifier") if batch is not None else None
        self._greedy = _rejecting(greedy, "greedy verifier") if greedy is not None else None
        if isinstance(pipeline, type):
            pipeline = pipeline()
        self._pipeline = _RejectingPipeline(pipeline) if pipeline is not None else None
        self.description = description

    @classmethod
    def from_specs(
        cls,
        verifier: str,
        batch: str | None = None,
        greedy: str | None = None,
        pipeline: str | None = None,
        law_only: bool = False,
    ) -> PythonImplementation:
        """Load the callables from ``module:function`` strings."""
        parts = [f"verifier {verifier}"] + [
            f"{label} {spec}" for label, spec in (("batch", batch), ("greedy", greedy), ("pipeline", pipeline)) if spec
        ]
        return cls(
            load_callable(verifier),
            batch=load_callable(batch) if batch else None,
            greedy=load_callable(greedy) if greedy else None,
            pipeline=load_callable(pipeline) if pipeline else None,
            description=("python (law only): " if law_only else "python: ") + ", ".join(parts),
            law_only=law_only,
        )

    def verify(self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict:
        """The sampled verifier, with its result normalized to a Verdict."""
        return as_verdict(self._verifier(p, q, drafts, uniforms), "verifier result")

    def verify_batch(
        self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike
    ) -> BatchVerdict:
        """The batch verifier, with its result as int64/bool arrays."""
        assert self._batch is not None
        result = self._batch(p, q, drafts, uniforms)
        try:
            return BatchVerdict(
                np.asarray(result.accepted, dtype=np.int64),
                np.asarray(result.token, dtype=np.int64),
                np.asarray(result.is_bonus, dtype=np.bool_),
            )
        except AttributeError:
            raise ExternalError(
                f"batch verifier must return accepted/token/is_bonus arrays, got {result!r:.100}"
            ) from None

    def verifier_parts(self) -> tuple[Verifier, BatchVerifier | None, Pipeline | None]:
        return self.verify, (self.verify_batch if self._batch is not None else None), self._pipeline

    def replay(self, cases: Sequence[Mapping[str, Any]]) -> list[Json | None]:
        return [self._replay_one(case) for case in cases]

    def _replay_one(self, case: Mapping[str, Any]) -> Json | None:
        op, inp = case["op"], case["input"]
        try:
            if op == "sampled":
                v = self.verify(
                    np.asarray(inp["p"], dtype=np.float64),
                    np.asarray(inp["q"], dtype=np.float64),
                    list(inp["drafts"]),
                    list(inp["uniforms"]),
                )
            elif op == "greedy" and self._greedy is not None:
                v = as_verdict(
                    self._greedy(np.asarray(inp["p"], dtype=np.float64), list(inp["drafts"])), "greedy result"
                )
            elif op == "rows" and self._pipeline is not None:
                request = rows_request_from_json(inp)
                p, q = self._pipeline.rows(request)
                mode = self._pipeline.mode(request.target_params, request.draft_params)
                return {"p": p.tolist(), "q": q.tolist(), "mode": mode}
            else:
                return None
        except VerificationError as exc:
            return {"error": str(exc)}
        return {"accepted": v.accepted, "token": v.token, "kind": v.kind}

    def close(self) -> None:
        pass


class CommandImplementation:
    """An implementation behind ``--verifier-cmd``: a program speaking the wire protocol."""

    def __init__(self, command: str, timeout: float, law_only: bool = False) -> None:
        self.wire = WireImplementation(CommandTransport(command, timeout))
        self.description = f"command{' (law only, op sampled_law)' if law_only else ''}: {command}"
        self.law_only = law_only
        self._pipeline: Pipeline | None | Literal["unknown"] = "unknown"

    def replay(self, cases: Sequence[Mapping[str, Any]], lines: list[bytes] | None = None) -> list[Json | None]:
        return self.wire.replay(cases, lines)

    def verifier_parts(self) -> tuple[Verifier, BatchVerifier | None, Pipeline | None]:
        if self.law_only:
            batch: BatchVerifier = batch_ignoring_uniforms(self.wire.verify_law_batch)
            return as_verifier(batch), batch, None
        if self._pipeline == "unknown":
            try:
                self.wire.mode(SamplingParams(), SamplingParams())
                self._pipeline = self.wire
            except Unsupported:
                self._pipeline = None
            except ProgramCannotStart:
                raise
            except VerispecError:
                self._pipeline = self.wire  # it answers rows, badly: let the property say so
        return self.wire.verify, self.wire.verify_batch, self._pipeline

    def close(self) -> None:
        self.wire.close()


# -----------------------------------------------------------------------------------------------
# the run


def replay_kind(
    impl: Implementation, kind: str, cases: Sequence[Mapping[str, Any]], wire_lines: list[bytes] | None = None
) -> PropertyOutcome:
    """Replay one vector file; exact agreement (within each case's stated tolerance). ``wire_lines``:
    the memo of these cases' request lines a program is sent (VectorSet.wire_lines[kind])."""
    name = f"vectors_{kind}"
    start = time.perf_counter()

    def outcome(status: Status, detail: str) -> PropertyOutcome:
        return PropertyOutcome(name, status, len(cases), 0.0, 1.0, detail, time.perf_counter() - start)

    if not cases:
        return outcome("skipped", "no cases")
    try:
        expanded = [as_sampled_case(case) for case in cases]  # large-V rows expanded
        if isinstance(impl, CommandImplementation) and wire_lines is not None:
            answers = impl.replay(expanded, wire_lines)
        else:
            answers = impl.replay(expanded)
    except VerispecError as exc:
        return outcome("failed", f"replay broke off: {exc}")
    unsupported = sum(1 for a in answers if a is None)
    if unsupported == len(cases):
        if kind in REQUIRED_KINDS:
            return outcome("failed", f"the implementation does not offer op {kind!r}, which every verifier must")
        return outcome(
            "skipped", GREEDY_SKIPPED if kind == "greedy" else f"the implementation does not offer op {kind!r}"
        )
    if unsupported:
        return outcome("failed", f"op {kind!r} answered 'unsupported' for {unsupported} of {len(cases)} cases")
    mismatches: list[str] = []
    for case, answer in zip(cases, answers):
        assert answer is not None
        problem = compare(case, answer)
        if problem:
            mismatches.append(f"{case['id']} {case['tags']}: {problem}")
    if mismatches:
        return outcome("failed", f"{len(mismatches)} of {len(cases)} cases disagree; first: {mismatches[0]}")
    return outcome("passed", f"{len(cases)} cases agree")


@dataclass(frozen=True)
class RunOptions:
    """How ``run_check`` runs: see its docstring for each."""

    scale: float = 1.0
    fail_fast: bool = False
    only: Sequence[str] | None = None
    log: Callable[[PropertyOutcome], None] | None = None
    sequential: bool = False
    budget: Budget | None = None
    shard: tuple[int, int] | None = None
    draw: BlockDraw | None = None
    parallel: int = 1
    seed: int = DEFAULT_STAT_SEED
    progress: Progress | None = None
    keep_going: bool = True


def run_check(
    impl: Implementation,
    vectors: VectorSet,
    *,
    scale: float = 1.0,
    fail_fast: bool = False,
    only: Sequence[str] | None = None,
    log: Callable[[PropertyOutcome], None] | None = None,
    sequential: bool = False,
    budget: Budget | None = None,
    shard: tuple[int, int] | None = None,
    draw: BlockDraw | None = None,
    parallel: int = 1,
    seed: int = DEFAULT_STAT_SEED,
    progress: Progress | None = None,
    min_power: float | None = None,
    keep_going: bool = True,
) -> CheckReport:
    """Replay the vectors, then run the spec's properties, through ``impl``.

    ``scale`` multiplies the statistical sample sizes (the reported power follows); ``only``
    restricts the run to the named properties (see :func:`property_names`); ``fail_fast`` stops
    at the first failed property; ``log`` sees every outcome as it is decided; ``progress`` gets
    a line after every group of blocks drawn. An implementation with ``law_only`` runs only the
    law's properties (:mod:`spec.law_only`); the rest are reported not applicable.

    ``sequential`` runs the statistical tests group-sequentially (:mod:`spec.sequential`), round
    robin, until each is decided or ``budget`` ends (undecided ones: "inconclusive", with the
    power reached). ``shard`` = (I, S), 1-based: this run draws only the blocks of shard I of S
    (implies ``sequential``; the deterministic properties run in shard 1 only), takes its own
    looks on them (:mod:`spec.shards`: a rejection there fails the shard and the run) and passes
    nothing; :func:`spec.merge.merge_reports` decides. ``draw`` / ``parallel``: draw blocks
    elsewhere, e.g. in worker processes (default: here, one at a time); either implies
    ``sequential``, the path that draws in blocks (the fixed-N tests draw in this process alone,
    so workers would sit idle).

    ``min_power``: the report's :attr:`CheckReport.min_power` (a pass below the power it needs is
    inconclusive). ``keep_going`` False: once a deterministic property has failed (the verdict is
    then FAILED whatever the statistics say), the statistical tests are skipped, each saying why
    (not in a shard: its slice must be complete for the merge).

    Every run's first verifier call is the same-stream probe (:mod:`spec.stream_probe`); a
    program that cannot start raises :class:`spec.external.ProgramCannotStart` (a usage error).
    """
    options = RunOptions(
        scale,
        fail_fast,
        only,
        log,
        sequential or shard is not None or budget is not None or draw is not None or parallel > 1,
        budget,
        shard,
        draw,
        parallel,
        seed,
        progress,
        keep_going or shard is not None,
    )
    _validate(options)
    report = _new_report(impl, vectors, options)
    report.min_power = None if min_power is None else float(min_power)  # 0 and 0.0: one JSON (the digest)
    start = time.perf_counter()
    try:
        parts = impl.verifier_parts()
        report.probe = run_probe(_batch_of(parts), seed, shard[0] if shard else 0)
        _run_properties(impl, vectors, options, report, parts)
        return report
    finally:
        report.seconds = time.perf_counter() - start
        if shard is not None:
            seal(report)


# The largest --scale: sample sizes grow as 1/TV^2, so 100 times them is the design's power against a
# deviation 10 times smaller (TV 0.0005); beyond, one block of the sequential test (1/64 of its
# design) is more draws than any run can make (a budget still ends it: it is checked before every
# verifier call, inside a block too).
MAX_SCALE = 100.0


def _validate(options: RunOptions) -> None:
    known = property_names()
    unknown = sorted(set(options.only or ()) - set(known))
    if unknown:
        raise CheckError(f"unknown properties {unknown}; known: {', '.join(known)}")
    if not (isinstance(options.scale, (int, float)) and 0 < options.scale < math.inf):
        raise CheckError(f"scale must be a finite number > 0, got {options.scale!r}")
    if not options.scale <= MAX_SCALE:
        raise CheckError(
            f"scale must be at most {MAX_SCALE:g}, got {options.scale:g}: {MAX_SCALE:g} times the sample sizes already "
            f"has power {POWER} against a TV {math.sqrt(MAX_SCALE):g} times smaller, and one block of a larger design "
            "is more draws than any run can make"
        )
    if options.shard is not None and not 1 <= options.shard[0] <= options.shard[1]:
        raise CheckError(f"shard must be I/S with 1 <= I <= S, got {options.shard[0]}/{options.shard[1]}")
    if options.shard is not None and options.budget is not None:
        raise CheckError("a shard draws its whole slice: a budget would leave holes in the merge")


def _new_report(impl: Implementation, vectors: VectorSet, options: RunOptions) -> CheckReport:
    report = CheckReport(
        impl.description,
        {"source": vectors.source, "seed": vectors.seed, "count": vectors.count},
        options.scale,
        law_only=impl.law_only,
        sequential=options.sequential,
        seed=options.seed,
        shard=options.shard,
        only=sorted(set(options.only), key=property_names().index) if options.only is not None else None,
        verifier_identity=verifier_identity(impl.description, impl.law_only),
    )
    report.run_id = run_id(run_design(report), report.seed, report.verifier_identity)
    return report


def seal(report: CheckReport) -> None:
    """Write the report's content digest, and its HMAC when ``VERISPEC_REPORT_KEY`` is set."""
    report.digest, report.signature = None, None
    body = report.as_json()
    report.digest = content_digest(body)
    key = report_key()
    if key is not None:
        report.signature = signature(body, key)


def _batch_of(parts: Parts, expired: Callable[[], bool] | None = None) -> BatchVerifier:
    """The batch form of the parts; with ``expired`` (a budget's), BudgetEnded before any verifier
    call once it says so (per call of a one-by-one verifier, per batch call of a batch one)."""
    verifier, batch, _ = parts
    if expired is None:
        return batch if batch is not None else as_batch(verifier)
    return until_expired(batch, expired) if batch is not None else as_batch(verifier, expired)


def _run_properties(
    impl: Implementation, vectors: VectorSet, options: RunOptions, report: CheckReport, parts: Parts
) -> None:
    """The vector replays and the deterministic properties (shard 1 only), then the designed
    statistical tests (all together, look by look, when sequential)."""
    recorder = _Recorder(report, options)
    in_this_shard = options.shard is None or options.shard[0] == 1
    if in_this_shard and not _run_deterministic(impl, vectors, options, recorder, parts):
        return
    designed = [n for n in PROPERTY_NAMES if recorder.wanted(n) and _look_by_look(n, options, impl.law_only)]
    if designed and recorder.statistics_stopped():
        for name in designed:
            recorder(recorder.skipped_statistic(name))
    elif designed:
        _run_sequential(report, designed, parts, options, recorder)


def _look_by_look(name: str, options: RunOptions, law_only: bool) -> bool:
    """Whether ``name`` runs group-sequentially here (a designed test the mode applies to)."""
    return options.sequential and name in STAT_DESIGNS and (applicable(name) or not law_only)


class _Recorder:
    """Appends outcomes to the report, logs them, and says when ``fail_fast`` stops the run."""

    def __init__(self, report: CheckReport, options: RunOptions) -> None:
        self.report, self.options, self.stopped = report, options, False

    def wanted(self, name: str) -> bool:
        return self.options.only is None or name in self.options.only

    def __call__(self, outcome: PropertyOutcome) -> bool:
        self.report.properties.append(outcome)
        if self.options.log:
            self.options.log(outcome)
        self.stopped = self.stopped or (self.options.fail_fast and outcome.status == "failed")
        return self.stopped

    def statistics_stopped(self) -> bool:
        """Without ``keep_going``: a deterministic property has failed, so the statistics are not run."""
        return not self.options.keep_going and any(p.name not in STATISTICAL for p in self.report.failed)

    def skipped_statistic(self, name: str) -> PropertyOutcome:
        first = next(p.name for p in self.report.failed if p.name not in STATISTICAL)
        reason = f"not run: {first} (deterministic) already failed the verdict; --keep-going runs the statistics anyway"
        return PropertyOutcome(name, "skipped", 0, 0.0, 0.0, reason, 0.0)


def _run_deterministic(
    impl: Implementation, vectors: VectorSet, options: RunOptions, record: _Recorder, parts: Parts
) -> bool:
    """Vector replays and the properties not run look by look; False when ``fail_fast`` stopped."""
    for kind in KINDS:
        name = f"vectors_{kind}"
        if not record.wanted(name):
            continue
        if impl.law_only:
            outcome = PropertyOutcome(name, "not_applicable", 0, 0.0, 0.0, NOT_APPLICABLE_REASON, 0.0)
        else:
            outcome = replay_kind(impl, kind, vectors.cases.get(kind, []), vectors.wire_lines.setdefault(kind, []))
        if record(outcome):
            return False
    for name in PROPERTY_NAMES:
        if not record.wanted(name) or _look_by_look(name, options, impl.law_only):
            continue
        if impl.law_only and not applicable(name):
            outcome = PropertyOutcome(name, "not_applicable", 0, 0.0, 0.0, NOT_APPLICABLE_REASON, 0.0)
        elif name in STATISTICAL and record.statistics_stopped():
            outcome = record.skipped_statistic(name)
        else:
            if options.progress is not None:
                options.progress(f"{name}: running")
            outcome = _run_one(name, parts, options.scale, options.seed, impl.law_only)
        if record(outcome):
            return False
    return True


def _run_one(name: str, parts: Parts, scale: float, seed: int, law_only: bool) -> PropertyOutcome:
    """One property of :mod:`spec.properties`, run in full (statistical ones at fixed N)."""
    verifier, batch, pipeline = parts
    if name == "pipeline_processors" and pipeline is None:
        return PropertyOutcome(
            name, "skipped", 0, 0.0, 0.0, "no pipeline: the implementation computes no rows from logits", 0.0
        )
    began = time.perf_counter()
    (result,) = run_properties(verifier, batch, pipeline, only=[name], scale=scale, seed=seed, own_randomness=law_only)
    status: Status = "passed" if result.passed else "failed"
    return PropertyOutcome(
        name, status, result.n, result.alpha, result.power, result.detail, time.perf_counter() - began, result.tv
    )


class _TimedDraw:
    """A BlockDraw that keeps each test's own drawing time and reports progress. ``deadline``: for
    a draw in other processes (a worker pool's), the budget's end in ``time.time()``, handed to
    each draw so the workers stop calling the verifier there too."""

    def __init__(
        self, draw: BlockDraw, progress: Progress | None, deadline: Callable[[], float | None] | None = None
    ) -> None:
        self.draw, self.progress, self.deadline = draw, progress, deadline
        self.seconds: dict[str, float] = defaultdict(float)
        self.blocks: dict[str, int] = defaultdict(int)

    def __call__(self, design: Any, blocks: Sequence[int], size: int) -> list[Any]:
        began = time.perf_counter()
        if self.deadline is not None:
            counts = self.draw(design, blocks, size, deadline=self.deadline())  # type: ignore[call-arg]
        else:
            counts = self.draw(design, blocks, size)
        self.seconds[design.name] += time.perf_counter() - began
        self.blocks[design.name] += len(blocks)
        if self.progress is not None:
            drawn = self.blocks[design.name]
            self.progress(f"{design.name}: {drawn} blocks, {drawn * size:,} draws, {self.seconds[design.name]:.0f} s")
        return counts


def _run_sequential(
    report: CheckReport, names: Sequence[str], parts: Parts, options: RunOptions, record: _Recorder
) -> None:
    """:func:`_draw_sequential`; a broken answer while drawing (an ExternalError from the wire, a
    crashed worker) fails the undecided tests with its reason, as the plain run does, instead of
    aborting the run with a usage error and no report."""
    began = time.perf_counter()
    try:
        _draw_sequential(report, names, parts, options, record)
    except Exception as exc:  # noqa: BLE001 - the subject may break in any way: report it
        reason = f"drawing broke off: {type(exc).__name__}: {str(exc)[:300]}"
        decided = {p.name for p in report.properties}
        for name in (n for n in names if n not in decided):
            if record(PropertyOutcome(name, "failed", 0, 0.0, 0.0, reason, time.perf_counter() - began)):
                return


def _draw_sequential(
    report: CheckReport, names: Sequence[str], parts: Parts, options: RunOptions, record: _Recorder
) -> None:
    """The designed statistical tests, group-sequentially (or one shard's blocks of them)."""
    budget = options.budget if options.budget is not None and options.budget.seconds is not None else None
    if options.draw is None:  # here: the budget's seconds end a block's drawing at the next verifier call
        draw = _TimedDraw(
            serial_draw(_batch_of(parts, budget.expired if budget else None), report.seed), options.progress
        )
    else:  # elsewhere (worker processes): each draw is handed the budget's end
        draw = _TimedDraw(options.draw, options.progress, budget.wall_deadline if budget else None)
    designs = [STAT_DESIGNS[n]() for n in names]
    if options.shard is not None:
        _run_shard(report, designs, draw, options, record)
        return
    tests = [SequentialTest(design, schedule(design, report.scale)) for design in designs]
    run_interleaved(tests, draw, options.budget, parallel=options.parallel, fail_fast=options.fail_fast)
    for test in tests:
        record(sequential_outcome(test, draw.seconds[test.design.name]))


def _run_shard(
    report: CheckReport, designs: Sequence[Any], draw: _TimedDraw, options: RunOptions, record: _Recorder
) -> None:
    """Shard I's blocks of every test, its own looks after each group; a rejection stops the test."""
    assert options.shard is not None
    index, shards = options.shard
    for design in designs:
        test = ShardTest(design, schedule(design, report.scale), index, shards)
        blocks = test.blocks
        for at in range(0, len(blocks), options.parallel):
            group = blocks[at : at + options.parallel]
            for block, counts in zip(group, draw(design, group, test.plan.block)):
                test.add(block, counts)
                test.look()
                if test.rejection is not None:
                    break
            if test.rejection is not None:
                break
        report.blocks[design.name] = {b: c.tolist() for b, c in test.counts.items()}
        if record(_shard_outcome(test, draw.seconds[design.name])):
            return


def _shard_outcome(test: ShardTest, seconds: float) -> PropertyOutcome:
    name = test.design.name
    if test.rejection is not None:
        return PropertyOutcome(
            name, "failed", test.samples, test.look_alpha, test.power(), test.rejection, seconds, test.design.tv
        )
    detail = (
        f"shard {test.index}/{test.shards}: {len(test.counts)} of {test.plan.blocks} blocks of {test.plan.block}, "
        f"no rejection at its own looks; the merge decides"
    )
    return PropertyOutcome(name, "counted", test.samples, 0.0, 0.0, detail, seconds, test.design.tv)


def merge_reports(reports: Sequence[CheckReport], *, allow_partial: bool = False) -> CheckReport:
    """Shard reports -> the report of the whole run (see :func:`spec.merge.merge_reports`)."""
    from verispec.spec.merge import merge_reports as merge

    return merge(reports, allow_partial=allow_partial)


__all__ = [
    "DEFAULT_STAT_SEED",
    "EXIT_FAILED",
    "EXIT_INCONCLUSIVE",
    "EXIT_PASSED",
    "CheckError",
    "CheckReport",
    "CommandImplementation",
    "Implementation",
    "PropertyOutcome",
    "PythonImplementation",
    "as_verdict",
    "format_outcome",
    "load_callable",
    "merge_reports",
    "property_names",
    "replay_kind",
    "run_check",
    "sequential_outcome",
]
