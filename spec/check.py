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
  ``rows(target_logits [k+1, V], draft_logits [k, V], history, drafts, target_params,
  draft_params) -> (p, q)`` and ``mode(target_params, draft_params) -> "greedy" | "sampled"``
  (params are :class:`reference.sampling.SamplingParams`), optional.

A verdict is an object with ``accepted``, ``token``, ``kind`` attributes (like
:class:`reference.speculative.Verdict`), a mapping with those keys, or a tuple
``(accepted, token, kind)``; kind is ``"repair"`` or ``"bonus"``. Parts not given are skipped
(reported as such), except the sampled verifier.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from reference.errors import VerificationError, VerispecError
from reference.sampling import SamplingParams
from reference.speculative import PROTOCOL_VERSION, BatchVerdict, BatchVerifier, Probs2D, Verdict, Verifier
from spec.external import CommandTransport, ExternalError, Unsupported, WireImplementation, parse_verdict
from spec.properties import PROPERTY_NAMES, Pipeline, run_properties
from spec.statistics import TV_BIAS
from spec.vectors import KINDS, Json, VectorSet, compare
from spec.vectors.gen_large import as_sampled_case

Status = Literal["passed", "failed", "skipped"]
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

    def as_json(self) -> Json:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.status == "passed",
            "n": self.n,
            "alpha": self.alpha,
            "power": round(self.power, 6),
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
        }


@dataclass
class CheckReport:
    """Everything ``verispec check`` found about one implementation."""

    implementation: str
    vectors: Json
    scale: float
    properties: list[PropertyOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.status == "failed"]

    @property
    def passed(self) -> bool:
        """No property failed, and at least one passed."""
        return not self.failed and any(p.status == "passed" for p in self.properties)

    def as_json(self) -> Json:
        return {
            "implementation": self.implementation,
            "protocol_version": PROTOCOL_VERSION,
            "vectors": self.vectors,
            "scale": self.scale,
            "tv_bias": TV_BIAS,
            "passed": self.passed,
            "failed": [p.name for p in self.failed],
            "seconds": round(self.seconds, 3),
            "properties": [p.as_json() for p in self.properties],
        }


# -----------------------------------------------------------------------------------------------
# implementations


class Implementation(Protocol):
    """What ``run_check`` needs from an implementation (Python callables or a program)."""

    description: str

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

    def rows(
        self,
        target_logits: npt.NDArray[np.float64],
        draft_logits: npt.NDArray[np.float64],
        history: Sequence[int],
        drafts: Sequence[int],
        target_params: SamplingParams,
        draft_params: SamplingParams,
    ) -> tuple[Probs2D, Probs2D]:
        p, q = self._rows(target_logits, draft_logits, history, drafts, target_params, draft_params)
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
    ) -> None:
        self._verifier = _rejecting(verifier, "verifier")
        self._batch = _rejecting(batch, "batch verifier") if batch is not None else None
        self._greedy = _rejecting(greedy, "greedy verifier") if greedy is not None else None
        if isinstance(pipeline, type):
            pipeline = pipeline()
        self._pipeline = _RejectingPipeline(pipeline) if pipeline is not None else None
        self.description = description

    @classmethod
    def from_specs(
        cls, verifier: str, batch: str | None = None, greedy: str | None = None, pipeline: str | None = None
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
            description="python: " + ", ".join(parts),
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
                from spec.vectors import params_from_json

                tp, dp = params_from_json(inp["target_params"]), params_from_json(inp["draft_params"])
                p, q = self._pipeline.rows(
                    np.asarray(inp["target_logits"], dtype=np.float64),
                    np.asarray(inp["draft_logits"], dtype=np.float64),
                    list(inp["history"]),
                    list(inp["drafts"]),
                    tp,
                    dp,
                )
                return {"p": p.tolist(), "q": q.tolist(), "mode": self._pipeline.mode(tp, dp)}
            else:
                return None
        except VerificationError as exc:
            return {"error": str(exc)}
        return {"accepted": v.accepted, "token": v.token, "kind": v.kind}

    def close(self) -> None:
        pass


class CommandImplementation:
    """An implementation behind ``--verifier-cmd``: a program speaking the wire protocol."""

    def __init__(self, command: str, timeout: float) -> None:
        self.wire = WireImplementation(CommandTransport(command, timeout))
        self.description = f"command: {command}"
        self._pipeline: Pipeline | None | Literal["unknown"] = "unknown"

    def replay(self, cases: Sequence[Mapping[str, Any]]) -> list[Json | None]:
        return self.wire.replay(cases)

    def verifier_parts(self) -> tuple[Verifier, BatchVerifier | None, Pipeline | None]:
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
) -> CheckReport:
    """Replay the vectors, then run the spec's properties, through ``impl``.

    ``scale`` multiplies the statistical sample sizes (the reported power follows); ``only``
    restricts the run to the named properties (see :func:`property_names`); ``fail_fast`` stops
    at the first failed property; ``log`` sees every outcome as it is decided.
    """
    known = property_names()
    unknown = sorted(set(only or ()) - set(known))
    if unknown:
        raise CheckError(f"unknown properties {unknown}; known: {', '.join(known)}")
    if not scale > 0:
        raise CheckError(f"scale must be > 0, got {scale}")
    report = CheckReport(
        impl.description, {"source": vectors.source, "seed": vectors.seed, "count": vectors.count}, scale
    )
    start = time.perf_counter()

    def record(outcome: PropertyOutcome) -> bool:
        report.properties.append(outcome)
        if log:
            log(outcome)
        return fail_fast and outcome.status == "failed"

    try:
        for kind in KINDS:
            name = f"vectors_{kind}"
            if only is not None and name not in only:
                continue
            if record(replay_kind(impl, kind, vectors.cases.get(kind, []))):
                return report
        parts: tuple[Verifier, BatchVerifier | None, Pipeline | None] | None = None
        for name in PROPERTY_NAMES:
            if only is not None and name not in only:
                continue
            if parts is None:
                parts = impl.verifier_parts()
            verifier, batch, pipeline = parts
            if name == "pipeline_processors" and pipeline is None:
                record(
                    PropertyOutcome(
                        name,
                        "skipped",
                        0,
                        0.0,
                        0.0,
                        "no pipeline: the implementation computes no rows from logits",
                        0.0,
                    )
                )
                continue
            began = time.perf_counter()
            (result,) = run_properties(verifier, batch, pipeline, only=[name], scale=scale)
            status: Status = "passed" if result.passed else "failed"
            outcome = PropertyOutcome(
                name, status, result.n, result.alpha, result.power, result.detail, time.perf_counter() - began
            )
            if record(outcome):
                return report
        return report
    finally:
        report.seconds = time.perf_counter() - start


def format_outcome(outcome: PropertyOutcome) -> str:
    """One line for humans: status, name, N, alpha, power, time, detail."""
    mark = {"passed": "PASS", "failed": "FAIL", "skipped": "skip"}[outcome.status]
    stats = (
        f"N={outcome.n:<8} alpha={outcome.alpha:<7.2g} power={outcome.power:<6.4f}"
        if outcome.status != "skipped"
        else " " * 38
    )
    return f"{mark}  {outcome.name:<28} {stats} {outcome.seconds:6.1f}s  {outcome.detail}"
