"""The report of ``verispec check``: per-property outcomes, the claim, the exit status, the JSON.

The JSON form is versioned (``schema_version`` "MAJOR.MINOR", documented field by field in
docs/report-schema.md): a reader refuses another MAJOR (fields changed meaning or went away) and
accepts a newer MINOR (fields were only added). :func:`report_fields` is the documented field list
the tests hold the schema page and :meth:`CheckReport.as_json` to.

What a report says, honestly:

- a test the run did not decide (a budget ended) is ``inconclusive`` and shows the power its
  looks reached, never rounded up to 1; a run with undecided tests reads "inconclusive: ...",
  never "lossless";
- a verifier that accepts malformed input (the ``contract`` property) "does not validate its
  input", reported apart from the law's failures and with every failing case; one that raises on
  the contract's VALID input "crashes on valid input" (another bug under the same property);
- a verifier whose only failures are bit-exact replays of the protocol's draws
  (``BIT_EXACT_PROPERTIES``) is "not bit-exact with the protocol's draws", not "not lossless":
  a textbook verifier (``u < min(1, p/q)``, the residual normalized before its draw) has the
  target law and still fails them; ``--law-only`` tests that law;
- a pass short of the design's power (``--scale`` below 1, or power below an explicit
  ``min_power``) is "underpowered": exit 3, never 0, unless ``min_power`` accepts the power
  reached, which the claim then prints;
- a shard's statistical outcomes are ``counted`` (its slice is drawn and showed no rejection at
  its own looks) or ``failed`` (its own looks rejected: see :mod:`spec.shards`); a shard decides no
  pass, the merge does (:mod:`spec.merge`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from verispec.reference.errors import CheckError as CheckError
from verispec.reference.errors import ReportError as ReportError
from verispec.reference.speculative import PROTOCOL_VERSION
from verispec.spec.sequential import SequentialTest, final_state
from verispec.spec.statistics import POWER, PROPERTY_SEED, TV_BIAS
from verispec.spec.vectors import Json
from verispec.spec.version import VERSION

Status = Literal["passed", "failed", "skipped", "not_applicable", "inconclusive", "counted"]
STATUSES: tuple[str, ...] = ("passed", "failed", "skipped", "not_applicable", "inconclusive", "counted")
EXIT_PASSED, EXIT_FAILED, EXIT_INCONCLUSIVE = 0, 1, 3  # the rest: verispec/exit_codes.py
DEFAULT_STAT_SEED = PROPERTY_SEED  # the properties' seed (spec.properties.run_properties)
SCHEMA_VERSION = "1.1"  # MAJOR.MINOR of the JSON report (docs/report-schema.md)
CONTRACT = "contract"  # the property whose failure means "does not validate its input"
VALID_INPUT_FAILURE = "valid input "  # how the contract names its failure on the one valid input
# properties that compare verdicts with the protocol's at given uniforms, bit for bit: a verifier
# can fail them with the right law (other arithmetic for the same rule), so their failure alone
# says "not bit-exact", not "not lossless"
BIT_EXACT_PROPERTIES = frozenset(
    {"vectors_sampled", "vectors_sampled_large", "protocol_boundaries", "protocol_cells", "full_vocab_protocol"}
)


@dataclass(frozen=True)
class PropertyOutcome:
    """One property on one implementation: status, N, alpha, power, what was seen, its own time."""

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
        status = data["status"]
        if status not in STATUSES:
            raise ReportError(f"property {data.get('name')!r}: unknown status {status!r}")
        return cls(
            _text(data["name"], "name"),
            status,
            _count(data["n"], "n"),
            _number(data["alpha"], "alpha"),
            _number(data["power"], "power"),
            _text(data["detail"], "detail"),
            _number(data["seconds"], "seconds"),
            _number(data.get("tv", TV_BIAS), "tv"),
        )


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ReportError(f"field {what!r} must be a string, got {type(value).__name__}")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReportError(f"field {what!r} must be a non-negative integer, got {value!r:.40}")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ReportError(f"field {what!r} must be a finite number, got {value!r:.40}")
    return float(value)


def format_power(outcome: PropertyOutcome) -> str:
    """The power column: floored (0.99996 is not 1.0000), "undecided" marked as such."""
    floored = math.floor(outcome.power * 1e4) / 1e4
    if outcome.status == "inconclusive":
        return f"reached={floored:.4f} (undecided)"
    return f"power={floored:.4f}"


@dataclass
class CheckReport:
    """Everything ``verispec check`` found about one implementation.

    ``law_only``: the implementation draws its own randomness (:mod:`spec.law_only`);
    ``sequential``: the statistical tests ran group-sequentially (:mod:`spec.sequential`);
    ``shard``: (I, S) for shard I (1-based) of S, whose ``blocks`` (per test, block -> counts)
    :func:`spec.merge.merge_reports` adds up; ``only``: the property selection (None: all);
    ``verifier_identity`` / ``run_id`` / ``probe`` / ``digest`` / ``signature``: what binds a
    shard to its run (:mod:`spec.report_seal`, :mod:`spec.stream_probe`).
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
    only: list[str] | None = None
    verifier_identity: str = ""
    run_id: str = ""
    probe: str | None = None
    verispec_version: str = VERSION
    protocol_version: int = PROTOCOL_VERSION
    digest: str | None = None  # as read from a file (None: not sealed yet)
    signature: str | None = None
    signed: bool = False  # a merged report: every shard's HMAC verified
    min_power: float | None = None  # a smaller power a pass may have (None: the design's, at scale >= 1)

    @property
    def failed(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.status == "failed"]

    @property
    def inconclusive(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.status == "inconclusive"]

    @property
    def contract_failed(self) -> bool:
        return any(p.name == CONTRACT for p in self.failed)

    def contract_failures(self) -> tuple[bool, bool]:
        """(accepts invalid input, crashes on valid input) from the failed contract's cases."""
        contract = next((p for p in self.failed if p.name == CONTRACT), None)
        if contract is None:
            return False, False
        # "F of N cases fail: <first>; ..." with the valid input's failure listed first
        failing, _, cases = contract.detail.partition(" cases fail: ")
        crashes = cases.startswith(VALID_INPUT_FAILURE)
        count = failing.split(" of ")[0]
        return (int(count) > int(crashes)) if count.isdigit() else not crashes, crashes

    def _contract_labels(self) -> list[str]:
        accepts_invalid, crashes_on_valid = self.contract_failures()
        return (["does not validate its input"] if accepts_invalid else []) + (
            ["crashes on valid input"] if crashes_on_valid else []
        )

    def _law_and_bit_exact_failures(self) -> tuple[list[str], list[str]]:
        """The failed properties other than the contract: (law or other, bit-exact replay only)."""
        names = [p.name for p in self.failed if p.name != CONTRACT]
        return [n for n in names if n not in BIT_EXACT_PROPERTIES], [n for n in names if n in BIT_EXACT_PROPERTIES]

    def required_power(self) -> float | None:
        """The power a statistical pass needs: ``min_power`` when given; else the design's
        (``POWER``) when ``scale`` < 1 shrank the design; else None (at scale >= 1 each design
        reaches its stated power by construction: no floor to check)."""
        if self.min_power is not None:
            return self.min_power
        return POWER if self.scale < 1 else None

    @property
    def underpowered(self) -> list[PropertyOutcome]:
        """Statistical tests that passed below :meth:`required_power` (a shard decides no pass)."""
        floor = self.required_power()
        if floor is None or self.shard is not None:
            return []
        # floored to the 4 digits the reports print, so the printed power and the decision agree
        return [p for p in self.statistical() if p.status == "passed" and math.floor(p.power * 1e4) / 1e4 < floor]

    @property
    def passed(self) -> bool:
        """No property failed or stayed inconclusive, and at least one passed (a shard: none
        failed; it decides no pass, only counts)."""
        if self.failed or self.inconclusive or self.underpowered:
            return False
        if self.shard is not None:
            return True
        return any(p.status == "passed" for p in self.properties)

    @property
    def exit_status(self) -> int:
        """0 passed, 1 failed (or nothing ran), 3 inconclusive (a budget ended before power, or a
        pass short of its required power); a shard: 1 when a property failed in it (its own
        looks, or shard 1's deterministic ones), else 0. ``passed`` false never goes with 0."""
        if self.failed:
            return EXIT_FAILED
        if self.inconclusive or self.underpowered:
            return EXIT_INCONCLUSIVE
        return EXIT_PASSED if self.passed else EXIT_FAILED

    def statistical(self) -> list[PropertyOutcome]:
        return [p for p in self.properties if p.name.startswith("stat_") and p.status != "not_applicable"]

    def headline(self) -> str:
        """The one-line verdict: PASSED / FAILED (with what failed) / INCONCLUSIVE."""
        if self.shard is not None:
            if self.failed:
                return f"SHARD {self.shard[0]}/{self.shard[1]} FAILED: " + ", ".join(p.name for p in self.failed)
            return f"SHARD {self.shard[0]}/{self.shard[1]} DONE"
        if self.failed:
            law_failed, bit_exact_failed = self._law_and_bit_exact_failures()
            what = self._contract_labels() + ([", ".join(law_failed)] if law_failed else [])
            if bit_exact_failed:
                what.append("not bit-exact with the protocol: " + ", ".join(bit_exact_failed))
            return "FAILED: " + "; ".join(what)
        if self.inconclusive:
            return "INCONCLUSIVE: " + ", ".join(p.name for p in self.inconclusive)
        if self.underpowered:
            return f"INCONCLUSIVE: underpowered (power {self._lowest_power()} < {self.required_power():g})"
        return "PASSED" if self.passed else "NOTHING RAN"

    def _lowest_power(self) -> str:
        stats = [p for p in self.statistical() if p.status == "passed"]
        return f"{math.floor(min(p.power for p in stats) * 1e4) / 1e4:.4f}" if stats else "n/a"

    def verdict(self) -> str:
        """The one-line verdict (:meth:`headline`): the name the Python API and pytest plugin use."""
        return self.headline()

    def summary(self) -> str:
        """The failed and inconclusive properties' lines, the verdict, the claim, and the run's
        design and reach (an assertion's message)."""
        lines = [format_outcome(p) for p in self.properties if p.status in ("failed", "inconclusive")]
        lines.append(f"{self.headline()}  ({len(self.properties)} properties, {self.seconds:.1f}s)")
        return "\n".join([*lines, self.claim(), *self.scope()])

    def scope(self) -> list[str]:
        """The design (mode, scale, N, power, false alarms) and what such a check can and cannot see."""
        stats = [p for p in self.statistical() if p.status in ("passed", "failed", "inconclusive")]
        mode = "law only (own randomness)" if self.law_only else "protocol (bit-exact replay and law)"
        design = f"design: {mode}, scale {self.scale:g}, {len(stats)} statistical test(s)"
        if stats:
            power = math.floor(min(p.power for p in stats) * 1e4) / 1e4
            needed = self.required_power()
            design += (
                f" at N = {min(p.n for p in stats):,} to {max(p.n for p in stats):,} draws, power reached {power:.4f} "
                f"(needed {POWER if needed is None else needed:g}) against TV "
                + " / ".join(f"{tv:g}" for tv in sorted({p.tv for p in stats}))
                + f", false alarms <= {math.fsum(p.alpha for p in stats):.2g}"
            )
        sees = (
            "sees: the verdict law on the suite's rows and drafts"
            + ("" if self.law_only else ", bit-exact agreement with the protocol's draws")
            + ", input validation (contract)"
        )
        blind = (
            "cannot see: rows or drafts the suite does not draw, deviations below the stated TV, "
            "the decode loop around the verifier (check-decoder checks that)"
            + ("; seed-for-seed agreement with another implementation" if self.law_only else "")
        )
        return [design, sees, blind]

    def claim(self) -> str:
        """What the run showed, at the level it holds."""
        if self.shard is not None:
            return self._shard_claim()
        parts = self._contract_claims()
        law_failed, bit_exact_failed = self._law_and_bit_exact_failures()
        if law_failed:
            parts.append("not lossless (the law is off): " + ", ".join(law_failed) + " failed")
        if bit_exact_failed:
            parts.append(
                "not bit-exact with the protocol's draws: "
                + ", ".join(bit_exact_failed)
                + " failed"
                + ("" if law_failed else " (the law may still be right: try --law-only)")
            )
        if not (law_failed or bit_exact_failed):
            parts.append(self._undecided_or_law_claim())
        if self.only is not None:
            parts.append(f"partial run: only {len(self.only)} selected properties")
        if self.law_only:
            parts.append("not portable: protocol properties not applicable (the verifier draws its own randomness)")
        return "; ".join(parts)

    def _undecided_or_law_claim(self) -> str:
        if self.inconclusive:
            return self._inconclusive_claim()
        return self._underpowered_claim() if self.underpowered else self._law_claim()

    def _contract_claims(self) -> list[str]:
        contract = next((p for p in self.failed if p.name == CONTRACT), None)
        if contract is None:
            return []
        accepts_invalid, crashes_on_valid = self.contract_failures()
        what = (["accepts cases the contract says it must reject"] if accepts_invalid else []) + (
            ["raises on a valid input it must answer"] if crashes_on_valid else []
        )
        return [" and ".join(self._contract_labels()) + f" ({'; '.join(what)}): {contract.detail}"]

    def _underpowered_claim(self) -> str:
        low = self.underpowered
        why = f"--scale {self.scale:g} shrank the design" if self.scale < 1 else "below the --min-power asked"
        return (
            f"underpowered: {len(low)} statistical test(s) passed short of power {self.required_power():g} "
            f"(lowest {self._lowest_power()}; {why}); nothing is claimed about their laws at the design's deviation "
            "(run at --scale 1, or accept the power reached with --min-power X)"
        )

    def _shard_claim(self) -> str:
        assert self.shard is not None
        where = f"shard {self.shard[0]}/{self.shard[1]}"
        if self.failed:
            return (
                f"{where}: "
                + ", ".join(p.name for p in self.failed)
                + " failed (this shard alone rejects: the run fails)"
            )
        return f"{where}: counts only; merge all shards for a verdict"

    def _law_claim(self) -> str:
        stats = self.statistical()
        if not stats:
            return "no statistical test ran: nothing shown about the law"
        power = math.floor(min(p.power for p in stats) * 1e4) / 1e4
        deviations = sorted({p.tv for p in stats})
        alpha = math.fsum(p.alpha for p in stats)
        accepted = (
            f" (below the design's {POWER:g}: accepted by --min-power {self.min_power:g})"
            if self.min_power is not None and power < POWER
            else ""
        )
        return (
            f"lossless at power {power:.4f}{accepted} against total-variation deviation "
            + " / ".join(f"{tv:g}" for tv in deviations)
            + f" on the suite's test laws (false-alarm probability <= {alpha:.2g})"
        )

    def _inconclusive_claim(self) -> str:
        undecided = self.inconclusive
        decided = [p for p in self.statistical() if p.status == "passed"]
        reached = math.floor(min(p.power for p in undecided) * 1e4) / 1e4
        text = (
            f"inconclusive: {len(undecided)} statistical test(s) undecided when the budget ended "
            f"(lowest power reached {reached:.4f}, short of the design's); nothing is claimed about their laws"
        )
        if decided:
            text += f"; {len(decided)} other test(s) passed at their design power"
        return text

    def as_json(self) -> Json:
        out: Json = {
            "schema_version": SCHEMA_VERSION,
            "verispec_version": self.verispec_version,
            "protocol_version": self.protocol_version,
            "implementation": self.implementation,
            "verifier_identity": self.verifier_identity,
            "run_id": self.run_id,
            "vectors": self.vectors,
            "scale": self.scale,
            "tv_bias": TV_BIAS,
            "law_only": self.law_only,
            "sequential": self.sequential,
            "seed": self.seed,
            "only": self.only,
            "shard": list(self.shard) if self.shard else None,
            "probe": self.probe,
            "passed": self.passed,
            "exit_status": self.exit_status,
            "headline": self.headline(),
            "claim": self.claim(),
            "failed": [p.name for p in self.failed],
            "inconclusive": [p.name for p in self.inconclusive],
            "underpowered": [p.name for p in self.underpowered],
            "min_power": self.min_power,
            "signed": self.signed,
            "seconds": round(self.seconds, 3),
            "properties": [p.as_json() for p in self.properties],
            "blocks": {name: {str(b): c for b, c in sorted(bl.items())} for name, bl in self.blocks.items()},
        }
        if self.digest is not None:
            out["digest"] = self.digest
        if self.signature is not None:
            out["signature"] = self.signature
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckReport:
        """A report as written by :meth:`as_json`; CheckError on another schema MAJOR or a
        missing / mistyped field (never a KeyError or a half-read report)."""
        if not isinstance(data, Mapping):
            raise ReportError(f"a report is a JSON object, got {type(data).__name__}")
        check_schema_version(data.get("schema_version"))
        try:
            return _report_from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ReportError(f"malformed report: {type(exc).__name__}: {exc}"[:300]) from None


def check_schema_version(version: Any) -> None:
    """Refuse a report of another schema MAJOR (a newer MINOR only adds fields)."""
    if not isinstance(version, str) or not version.partition(".")[0].isdigit():
        raise ReportError(f"not a verispec check report: schema_version {version!r:.40} (expected {SCHEMA_VERSION})")
    if version.partition(".")[0] != SCHEMA_VERSION.partition(".")[0]:
        raise ReportError(
            f"report schema {version} is not readable by this verispec (reads {SCHEMA_VERSION.split('.')[0]}.x)"
        )


def _report_from_json(data: Mapping[str, Any]) -> CheckReport:
    shard = data.get("shard")
    only = data.get("only")
    blocks = data.get("blocks") or {}
    return CheckReport(
        implementation=_text(data["implementation"], "implementation"),
        vectors=dict(data.get("vectors") or {}),
        scale=_number(data["scale"], "scale"),
        properties=[PropertyOutcome.from_json(p) for p in data["properties"]],
        seconds=_number(data.get("seconds", 0.0), "seconds"),
        law_only=bool(data.get("law_only", False)),
        sequential=bool(data.get("sequential", False)),
        seed=_count(data.get("seed", DEFAULT_STAT_SEED), "seed"),
        shard=(_count(shard[0], "shard"), _count(shard[1], "shard")) if shard else None,
        blocks={
            _text(name, "blocks"): {int(b): [_count(c, "count") for c in counts] for b, counts in dict(bl).items()}
            for name, bl in dict(blocks).items()
        },
        only=[_text(n, "only") for n in only] if only is not None else None,
        verifier_identity=_text(data.get("verifier_identity", ""), "verifier_identity"),
        run_id=_text(data.get("run_id", ""), "run_id"),
        probe=_text(data["probe"], "probe") if data.get("probe") is not None else None,
        verispec_version=_text(data["verispec_version"], "verispec_version"),
        protocol_version=_count(data["protocol_version"], "protocol_version"),
        digest=_text(data["digest"], "digest") if data.get("digest") is not None else None,
        signature=_text(data["signature"], "signature") if data.get("signature") is not None else None,
        signed=bool(data.get("signed", False)),
        min_power=_number(data["min_power"], "min_power") if data.get("min_power") is not None else None,
    )


def report_fields() -> dict[str, str]:
    """The top-level fields of a report and their JSON types (docs/report-schema.md lists the same)."""
    return {
        "schema_version": "string",
        "verispec_version": "string",
        "protocol_version": "integer",
        "implementation": "string",
        "verifier_identity": "string",
        "run_id": "string",
        "vectors": "object",
        "scale": "number",
        "tv_bias": "number",
        "law_only": "boolean",
        "sequential": "boolean",
        "seed": "integer",
        "only": "array|null",
        "shard": "array|null",
        "probe": "string|null",
        "passed": "boolean",
        "exit_status": "integer",
        "headline": "string",
        "claim": "string",
        "failed": "array",
        "inconclusive": "array",
        "underpowered": "array",
        "min_power": "number|null",
        "signed": "boolean",
        "seconds": "number",
        "properties": "array",
        "blocks": "object",
        "digest": "string (optional)",
        "signature": "string (optional)",
    }


def property_fields() -> dict[str, str]:
    """The fields of each entry of ``properties`` and their JSON types."""
    return {
        "name": "string",
        "status": "string",
        "passed": "boolean",
        "n": "integer",
        "alpha": "number",
        "power": "number",
        "tv": "number",
        "seconds": "number",
        "detail": "string",
    }


def format_outcome(outcome: PropertyOutcome) -> str:
    """One line for humans: status, name, N, alpha, power, its own time, detail."""
    mark = {
        "passed": "PASS",
        "failed": "FAIL",
        "skipped": "skip",
        "not_applicable": "n/a ",
        "inconclusive": "INCO",
        "counted": "cnt ",
    }[outcome.status]
    stats = (
        f"N={outcome.n:<8} alpha={outcome.alpha:<7.2g} {format_power(outcome):<12}"
        if outcome.status not in ("skipped", "not_applicable")
        else " " * 38
    )
    return f"{mark}  {outcome.name:<28} {stats} {outcome.seconds:6.1f}s  {outcome.detail}"


def sequential_outcome(test: SequentialTest, seconds: float) -> PropertyOutcome:
    """A sequential test's outcome: N (at the rejecting look, else drawn), its alpha, the power its
    looks reached."""
    state = final_state(test)
    status: Status = "passed" if state == "passed" else ("failed" if state == "failed" else "inconclusive")
    return PropertyOutcome(
        test.design.name,
        status,
        test.looks[-1].n if state == "failed" else test.samples,
        math.fsum(test.plan.alphas),
        test.power_reached,
        test.detail(),
        seconds,
        test.design.tv,
    )


def run_design(report: CheckReport) -> Json:
    """What a run's blocks and looks are a function of (with the seed and the verifier: its run id)."""
    return {
        "scale": report.scale,
        "only": report.only,
        "shards": report.shard[1] if report.shard else None,
        "vectors": report.vectors,
        "tv_bias": TV_BIAS,
        "law_only": report.law_only,
        "sequential": report.sequential,
        "verispec_version": report.verispec_version,
        "protocol_version": report.protocol_version,
        "schema_major": SCHEMA_VERSION.split(".")[0],
    }
