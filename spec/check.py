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
reports :func:`merge_reports` adds up exactly.

THE PYTHON INTERFACE (``--verifier module:function`` and friends). All callables receive numpy
float64 arrays for rows and plain lists for ids and uniforms; raising ANY exception means "this
input is rejected" (it is converted to :class:`VerificationError`).

- ``verifier(p, q, drafts, uniforms) -> verdict`` (required): p [k+1, V], q [k, V],
  drafts list[int] (k), uniforms list[float] (k+1); the sampled verification of the protocol.
- ``batch_verifier(p, q, drafts, uniforms) -> BatchVerdict`` (optional, for fast statistics):
  p [k+1, V] or [N, k+1, V], q [k, V] or [N, k, V], drafts int64 [N, k], uniforms [N, k+1];
  returns an object with ``accepted`` [N], ``token`` [N], ``is_bonus`` [N] arrays. Without it the
  single verifier is called N times.
- ``greedy_verifier(p, drafts) -> verdict`` (optional): p [k+1, V] logits or probabilities.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerificationError, VerispecError
from verispec.reference.sampling import SamplingParams
from verispec.reference.speculative import PROTOCOL_VERSION, BatchVerdict, BatchVerifier, Probs2D, Verdict, Verifier
from verispec.spec.external import CommandTransport, ExternalError, Unsupported, WireImplementation, parse_verdict
from verispec.spec.pipeline import Pipeline, RowsRequest
from verispec.spec.law_only import NOT_APPLICABLE_REASON, applicable, batch_ignoring_uniforms, ignoring_uniforms
from verispec.spec.properties import PROPERTY_NAMES, STAT_DESIGNS, as_verifier, run_properties
from verispec.spec.sequential import BlockDraw, Budget, SequentialTest, final_state, run_interleaved, schedule, serial_draw, shard_blocks
from verispec.spec.statistics import TV_BIAS
from verispec.spec.vectors import KINDS, Json, VectorSet, compare
from verispec.spec.vectors.gen_large import as_sampled_case
from verispec.spec.vectors.wire import rows_request_from_json

Status = Literal["passed", "failed", "skipped", "not_applicable", "inconclusive"]
EXIT_PASSED, EXIT_FAILED, EXIT_INCONCLUSIVE = 0, 1, 3  # 2: a usage error (verispec/cli.py)
DEFAULT_STAT_SEED = 20_240_531  # the properties' seed (spec.properties.run_properties)
REQUIRED_KINDS = frozenset({"sampled", "sampled_large", "greedy"})  # vector kinds every verifier must answer


class CheckError(VerispecError):
    """``verispec check`` cannot start: a bad ``module:function``, an unknown property name."""


@dataclass(frozen=True)
class PropertyOutcome:
    """One property on one implementation: status, N, alpha, power, what was seen, time."""

    name: str
    status: Status
    n: int
    alpha: float
    power: float
    detail: str
    seconds: float
    tv: float = TV_BIAS  # the deviation ``power`` is against (statistical properties)

    def as_json(self) -> Json:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.status == "passed",
            "n": self.n,
            "alpha": self.alpha,
            "power": round(self.power, 6),
            "tv": self.tv,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PropertyOutcome:
        return cls(
            str(data["name"]),
            data["status"],
            int(data["n"]),
            float(data["alpha"]),
            float(data["power"]),
            str(data["detail"]),
            float(data["seconds"]),
            float(data.get("tv", TV_BIAS)),
        )


@dataclass
class CheckReport:
    """Everything ``verispec check`` found about one implementation.

    ``law_only``: the implementation draws its own randomness (:mod:`spec.law_only`);
    ``sequential``: the statistical tests ran group-sequentially (:mod:`spec.sequential`);
    ``shard``: (I, S) for shard I (1-based) of S, whose ``blocks`` (per test, block -> counts)
    :func:`merge_reports` adds up; a shard report decides nothing by itself.
    """

    implementation: str
    vectors: Json
    scale: float
    properties: list[PropertyOutcome] = field(default_factory=list)
    seconds: float = 0.0
    law_only: bool = False
    sequential: bool = False
    seed: int = DEFAULT_STAT_SEED
    shard: tuple[int, int] | None = None
    blocks: dict[str, dict[int, list[int]]] = field(default_factory=dict)

    @property
    def failed(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.status == "failed"]

    @property
    def inconclusive(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.status == "inconclusive"]

    @property
    def passed(self) -> bool:
        """No property failed or stayed inconclusive, and at least one passed."""
        return (
            not self.failed and not self.inconclusive and any(p.status == "passed" for p in self.properties)
        )

    @property
    def exit_status(self) -> int:
        """0 passed, 1 failed (or nothing ran), 3 inconclusive (a budget ended before power); a
        shard: 0 when its slice is drawn and its deterministic properties (shard 1) passed."""
        if self.failed:
            return EXIT_FAILED
        if self.shard is not None:
            return EXIT_PASSED
        if self.inconclusive:
            return EXIT_INCONCLUSIVE
        return EXIT_PASSED if self.passed else EXIT_FAILED

    def statistical(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.name.startswith("stat_") and p.status != "not_applicable"]

    def claim(self) -> str:
        """What the run showed, at the level it holds."""
        if self.shard is not None:
            return f"shard {self.shard[0]}/{self.shard[1]}: counts only; merge all shards for a verdict"
        stats = self.statistical()
        if self.failed:
            return "not lossless: " + ", ".join(p.name for p in self.failed) + " failed"
        if not stats:
            return "no statistical test ran: nothing shown about the law"
        power = min(p.power for p in stats)
        deviations = sorted({p.tv for p in stats})
        alpha = math.fsum(p.alpha for p in stats)
        what = (
            f"lossless at power {power:.4f} against total-variation deviation "
            + " / ".join(f"{tv:g}" for tv in deviations)
            + f" on the suite's test laws (false-alarm probability <= {alpha:.2g})"
        )
        if self.inconclusive:
            what = "inconclusive (budget ended before power 0.99): " + what
        if self.law_only:
            what += "; not portable: protocol properties not applicable (the verifier draws its own randomness)"
        return what

    def as_json(self) -> Json:
        return {
            "implementation": self.implementation,
            "protocol_version": PROTOCOL_VERSION,
            "vectors": self.vectors,
            "scale": self.scale,
            "tv_bias": TV_BIAS,
            "law_only": self.law_only,
            "sequential": self.sequential,
            "seed": self.seed,
            "shard": list(self.shard) if self.shard else None,
            "passed": self.passed,
            "exit_status": self.exit_status,
            "claim": self.claim(),
            "failed": [p.name for p in self.failed],
            "inconclusive": [p.name for p in self.inconclusive],
            "seconds": round(self.seconds, 3),
            "properties": [p.as_json() for p in self.properties],
            "blocks": {name: {str(b): c for b, c in sorted(bl.items())} for name, bl in self.blocks.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckReport:
        shard = data.get("shard")
        return cls(
            implementation=str(data["implementation"]),
            vectors=dict(data.get("vectors") or {}),
            scale=float(data["scale"]),
            properties=[PropertyOutcome.from_json(p) for p in data["properties"]],
            seconds=float(data.get("seconds", 0.0)),
            law_only=bool(data.get("law_only", False)),
            sequential=bool(data.get("sequential", False)),
            seed=int(data.get("seed", DEFAULT_STAT_SEED)),
            shard=(int(shard[0]), int(shard[1])) if shard else None,
            blocks={
                str(name): {int(b): [int(c) for c in counts] for b, counts in bl.items()}
                for name, bl in dict(data.get("blocks") or {}).items()
            },
        )


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
        if law_only:  # f(p, q, drafts): the properties' uniforms are dropped on the way in
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

    def replay(self, cases: Sequence[Mapping[str, Any]]) -> list[Json | None]:
        return self.wire.replay(cases)

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
            except VerispecError:
                self._pipeline = self.wire  # it answers rows, badly: let the property say so
        return self.wire.verify, self.wire.verify_batch, self._pipeline

    def close(self) -> None:
        self.wire.close()


# -----------------------------------------------------------------------------------------------
# the run


def replay_kind(impl: Implementation, kind: str, cases: Sequence[Mapping[str, Any]]) -> PropertyOutcome:
    """Replay one vector file; exact agreement (within each case's stated tolerance)."""
    name = f"vectors_{kind}"
    start = time.perf_counter()

    def outcome(status: Status, detail: str) -> PropertyOutcome:
        return PropertyOutcome(name, status, len(cases), 0.0, 1.0, detail, time.perf_counter() - start)

    if not cases:
        return outcome("skipped", "no cases")
    try:
        answers = impl.replay([as_sampled_case(case) for case in cases])  # large-V rows expanded
    except VerispecError as exc:
        return outcome("failed", f"replay broke off: {exc}")
    unsupported = sum(1 for a in answers if a is None)
    if unsupported == len(cases):
        if kind in REQUIRED_KINDS:
            return outcome("failed", f"the implementation does not offer op {kind!r}, which every verifier must")
        return outcome("skipped", f"the implementation does not offer op {kind!r}")
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


def property_names() -> list[str]:
    """Every property ``run_check`` can run, in order: vector replays, then the spec's."""
    return [f"vectors_{kind}" for kind in KINDS] + list(PROPERTY_NAMES)


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
) -> CheckReport:
    """Replay the vectors, then run the spec's properties, through ``impl``.

    ``scale`` multiplies the statistical sample sizes (the reported power follows); ``only``
    restricts the run to the named properties (see :func:`property_names`); ``fail_fast`` stops
    at the first failed property; ``log`` sees every outcome as it is decided. An implementation
    with ``law_only`` runs only the law's properties (:mod:`spec.law_only`); the rest are
    reported not applicable.

    ``sequential`` runs the statistical tests group-sequentially (:mod:`spec.sequential`), round
    robin, until each is decided or ``budget`` ends (undecided ones: "inconclusive", with the
    power reached). ``shard`` = (I, S), 1-based: this run draws only the blocks of shard I of S
    (implies ``sequential``; the deterministic properties run in shard 1 only) and decides
    nothing; :func:`merge_reports` does. ``draw`` / ``parallel``: draw blocks elsewhere, e.g. in
    worker processes (default: here, one at a time).
    """
    known = property_names()
    unknown = sorted(set(only or ()) - set(known))
    if unknown:
        raise CheckError(f"unknown properties {unknown}; known: {', '.join(known)}")
    if not scale > 0:
        raise CheckError(f"scale must be > 0, got {scale}")
    if shard is not None and not 1 <= shard[0] <= shard[1]:
        raise CheckError(f"shard must be I/S with 1 <= I <= S, got {shard[0]}/{shard[1]}")
    sequential = sequential or shard is not None or budget is not None
    report = CheckReport(
        impl.description,
        {"source": vectors.source, "seed": vectors.seed, "count": vectors.count},
        scale,
        law_only=impl.law_only,
        sequential=sequential,
        seed=seed,
        shard=shard,
    )
    start = time.perf_counter()
    stopped = False

    def record(outcome: PropertyOutcome) -> bool:
        nonlocal stopped
        report.properties.append(outcome)
        if log:
            log(outcome)
        stopped = stopped or (fail_fast and outcome.status == "failed")
        return stopped

    def wanted(name: str) -> bool:
        return only is None or name in only

    in_this_shard = shard is None or shard[0] == 1
    try:
        for kind in KINDS:
            name = f"vectors_{kind}"
            if not wanted(name):
                continue
            if impl.law_only:
                record(PropertyOutcome(name, "not_applicable", 0, 0.0, 0.0, NOT_APPLICABLE_REASON, 0.0))
            elif not in_this_shard:
                continue
            elif record(replay_kind(impl, kind, vectors.cases.get(kind, []))):
                return report
        parts: tuple[Verifier, BatchVerifier | None, Pipeline | None] | None = None
        designed: list[str] = []
        for name in PROPERTY_NAMES:
            if not wanted(name):
                continue
            if impl.law_only and not applicable(name):
                record(PropertyOutcome(name, "not_applicable", 0, 0.0, 0.0, NOT_APPLICABLE_REASON, 0.0))
                continue
            if sequential and name in STAT_DESIGNS:
                designed.append(name)  # run below, all together, look by look
                continue
            if not in_this_shard:
                continue
            if parts is None:
                parts = impl.verifier_parts()
            if record(_run_one(name, parts, scale, seed, impl.law_only)):
                return report
        if designed:
            if parts is None:
                parts = impl.verifier_parts()
            _run_sequential(report, designed, parts, draw, parallel, budget, fail_fast, log)
        return report
    finally:
        report.seconds = time.perf_counter() - start


def _run_one(
    name: str,
    parts: tuple[Verifier, BatchVerifier | None, Pipeline | None],
    scale: float,
    seed: int,
    law_only: bool,
) -> PropertyOutcome:
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


def _run_sequential(
    report: CheckReport,
    names: Sequence[str],
    parts: tuple[Verifier, BatchVerifier | None, Pipeline | None],
    draw: BlockDraw | None,
    parallel: int,
    budget: Budget | None,
    fail_fast: bool,
    log: Callable[[PropertyOutcome], None] | None,
) -> None:
    """:func:`_draw_sequential`; a broken answer while drawing (an ExternalError from the wire, a
    crashed worker) fails the undecided tests with its reason, as the plain run does, instead of
    aborting the run with a usage error and no report."""
    began = time.perf_counter()
    try:
        _draw_sequential(report, names, parts, draw, parallel, budget, fail_fast, log)
    except Exception as exc:  # noqa: BLE001 - the subject may break in any way: report it
        reason = f"drawing broke off: {type(exc).__name__}: {str(exc)[:300]}"
        decided = {p.name for p in report.properties}
        for name in (n for n in names if n not in decided):
            outcome = PropertyOutcome(name, "failed", 0, 0.0, 0.0, reason, time.perf_counter() - began)
            report.properties.append(outcome)
            if log:
                log(outcome)


def _draw_sequential(
    report: CheckReport,
    names: Sequence[str],
    parts: tuple[Verifier, BatchVerifier | None, Pipeline | None],
    draw: BlockDraw | None,
    parallel: int,
    budget: Budget | None,
    fail_fast: bool,
    log: Callable[[PropertyOutcome], None] | None,
) -> None:
    """The designed statistical tests, group-sequentially (or one shard's blocks of them)."""
    verifier, batch, _ = parts
    if draw is None:
        from verispec.spec.properties import as_batch

        draw = serial_draw(batch if batch is not None else as_batch(verifier), report.seed)
    began = time.perf_counter()
    tests = [SequentialTest(design, schedule(design, report.scale)) for design in (STAT_DESIGNS[n]() for n in names)]
    if report.shard is not None:
        index, shards = report.shard
        for test in tests:
            blocks = shard_blocks(test.plan, index - 1, shards)
            for at in range(0, len(blocks), parallel):
                group = blocks[at : at + parallel]
                for block, counts in zip(group, draw(test.design, group, test.plan.block)):
                    test.add(block, counts)
            report.blocks[test.design.name] = {b: c.tolist() for b, c in test.block_counts.items()}
            detail = f"shard {index}/{shards}: {len(blocks)} of {test.plan.blocks} blocks of {test.plan.block}"
            seconds = time.perf_counter() - began
            outcome = PropertyOutcome(test.design.name, "skipped", test.samples, 0.0, 0.0, detail, seconds, test.design.tv)
            report.properties.append(outcome)
            if log:
                log(outcome)
        return
    run_interleaved(tests, draw, budget, parallel=parallel, fail_fast=fail_fast)
    for test in tests:
        outcome = sequential_outcome(test, time.perf_counter() - began)
        report.properties.append(outcome)
        if log:
            log(outcome)


def sequential_outcome(test: SequentialTest, seconds: float) -> PropertyOutcome:
    """A sequential test's outcome: N drawn, its alpha, the power its looks reached."""
    state = final_state(test)
    status: Status = "passed" if state == "passed" else ("failed" if state == "failed" else "inconclusive")
    return PropertyOutcome(
        test.design.name,
        status,
        test.samples,
        test.design.alpha,
        test.power_reached,
        test.detail(),
        seconds,
        test.design.tv,
    )


def merge_reports(reports: Sequence[CheckReport]) -> CheckReport:
    """Shard reports -> the report of the whole run: block counts added (each block exactly once),
    the looks taken on the sums; alpha and power are those of the whole run.

    Every shard of one S must be there once, with the same implementation, scale, seed and mode.
    """
    if not reports:
        raise CheckError("nothing to merge")
    first = reports[0]
    if first.shard is None:
        raise CheckError("merge takes shard reports (verispec check --shard I/S --json)")
    shards = first.shard[1]
    seen = sorted(r.shard[0] for r in reports if r.shard is not None)
    if seen != list(range(1, shards + 1)) or any(r.shard is None or r.shard[1] != shards for r in reports):
        raise CheckError(f"merge needs shards 1..{shards} exactly once each, got {seen}")
    for r in reports:
        same = (r.implementation, r.scale, r.seed, r.law_only) == (first.implementation, first.scale, first.seed, first.law_only)
        if not same:
            raise CheckError(f"shard {r.shard} is of another run (implementation, scale, seed or mode differ)")
    merged = CheckReport(first.implementation, first.vectors, first.scale, law_only=first.law_only, sequential=True, seed=first.seed)
    by_shard = sorted(reports, key=lambda r: r.shard[0] if r.shard else 0)
    statistical = {name for r in reports for name in r.blocks}
    for outcome in by_shard[0].properties:  # shard 1 ran the deterministic properties
        if outcome.name not in statistical:
            merged.properties.append(outcome)
    for name in [n for n in PROPERTY_NAMES if n in statistical]:
        design = STAT_DESIGNS[name]()
        test = SequentialTest(design, schedule(design, first.scale))
        for r in by_shard:
            for block, counts in r.blocks.get(name, {}).items():
                test.add(block, np.asarray(counts, dtype=np.int64))
        test.take_looks()
        merged.properties.append(sequential_outcome(test, sum(p.seconds for r in reports for p in r.properties if p.name == name)))
    merged.seconds = max(r.seconds for r in reports)
    return merged


def format_outcome(outcome: PropertyOutcome) -> str:
    """One line for humans: status, name, N, alpha, power, time, detail."""
    mark = {"passed": "PASS", "failed": "FAIL", "skipped": "skip", "not_applicable": "n/a ", "inconclusive": "INCO"}[
        outcome.status
    ]
    stats = (
        f"N={outcome.n:<8} alpha={outcome.alpha:<7.2g} power={outcome.power:<6.4f}"
        if outcome.status not in ("skipped", "not_applicable")
        else " " * 38
    )
    return f"{mark}  {outcome.name:<28} {stats} {outcome.seconds:6.1f}s  {outcome.detail}"
