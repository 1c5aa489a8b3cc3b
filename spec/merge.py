"""``verispec check --merge``: shard reports -> the report of the whole run, or a clear refusal.

The merge adds the block counts (each block exactly once) and takes the looks on the sums at the
alphas :mod:`spec.shards` leaves the merge; alpha and power are those of the whole run. It
refuses, with a message naming the shard, anything that is not exactly the S shards of one run:

- membership: every report a shard of the same S ("shard 3/8 does not belong to a 2-way run"),
  each of 1..S once;
- the run: the same verispec version (this one), protocol version, verifier identity (recomputed
  from the implementation's label and mode), seed, scale, mode and selection, and the run id
  recomputed from them (:mod:`spec.report_seal`);
- the seal: each shard's content digest recomputed from its content; with ``VERISPEC_REPORT_KEY``
  set, each shard's HMAC-SHA256 (unsigned or wrongly signed: refused); signed shards without the
  key: refused (they cannot be verified here);
- the streams: two shards with identical probes drew the same stream (:mod:`spec.stream_probe`);
- the content it can recompute: the mode's full property set (shard 1: every property of the
  mode; shards 2..S: exactly the designed statistical tests; a partial ``--only`` run only with
  ``allow_partial``), exactly each slice's blocks, every block's counts summing to the designed
  block size (N is recomputed from the design, never read: an edited ``scale`` changes the block
  size and is refused), and a claimed shard rejection replayed from its counts. A test a shard
  failed before it counted a block (a malformed answer broke its drawing off) merges as failed
  with that shard's reason: a failure without counts can only make the run fail.

What an unsigned merge can still be fooled by is said in :mod:`spec.report_seal`: counts made up
to fit the designs, or deterministic outcomes written "passed", with the digests recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from verispec.reference.speculative import PROTOCOL_VERSION
from verispec.spec.law_only import applicable
from verispec.spec.properties import PROPERTY_NAMES, STAT_DESIGNS
from verispec.spec.property_names import property_names
from verispec.spec.report import CheckError, CheckReport, PropertyOutcome, ReportError, run_design, sequential_outcome
from verispec.spec.report_seal import (
    REPORT_KEY_ENV,
    canonical_json,
    content_digest,
    report_key,
    run_id,
    signature_matches,
    unsealed,
    verifier_identity,
)
from verispec.spec.sequential import SequentialTest, StatDesign, schedule, shard_blocks
from verispec.spec.shards import (
    ShardTest,
    foreign_shard_message,
    merged_schedule,
    missing_shards_message,
    replay_own_looks,
)
from verispec.spec.stream_probe import same_stream, same_stream_message
from verispec.spec.version import VERSION


def read_shard(data: Any, where: str) -> CheckReport:
    """A shard report read for the merge: parsed, and refused unless writing it back gives exactly
    what was read (:func:`canonical_json` of both, seal fields aside). The digest and the signature
    cover the report as verispec re-serializes it, so a field the reader normalizes (a schema
    version "1.7" read as this one, a block key "01" read as 1, an unknown extra field) would
    otherwise verify although the file says something else: what is verified is what is merged."""
    report = CheckReport.from_json(data)
    written, read = unsealed(report.as_json()), unsealed(data)
    if canonical_json(written) != canonical_json(read):
        first = min(k for k in set(written) | set(read) if _field_differs(written, read, k))
        raise ReportError(
            f"{where} is not a report as verispec writes it: its field {first!r} does not read back as written "
            f"(a non-canonical or edited field; the seal covers only what verispec writes)"
        )
    return report


def _field_differs(written: dict[str, Any], read: dict[str, Any], key: str) -> bool:
    if (key in written) != (key in read):
        return True
    return canonical_json({"v": written[key]}) != canonical_json({"v": read[key]})


def merge_reports(reports: Sequence[CheckReport], *, allow_partial: bool = False) -> CheckReport:
    """The merged report of shards 1..S of one run (CheckError: not such a set; see the module)."""
    shards = _membership(reports)
    by_shard = sorted(reports, key=lambda r: _index(r))
    first = by_shard[0]
    for report in by_shard:
        _same_run(report, first)
    key = _seals(by_shard)
    pair = same_stream({_index(r): r.probe for r in by_shard})
    if pair is not None:
        raise CheckError(same_stream_message(pair, "shards", first.law_only))
    if first.only is not None and not allow_partial:
        raise CheckError(
            f"these shards ran a partial selection (--only {' '.join(first.only)}): the merge requires the mode's full property set "
            f"(--allow-partial merges it as a partial run, whose claim names the selection and never reads as a full pass)"
        )
    deterministic, designed = expected_properties(first)
    for report in by_shard:
        _property_set(report, deterministic if _index(report) == 1 else [], designed)
    merged = CheckReport(
        first.implementation,
        first.vectors,
        first.scale,
        law_only=first.law_only,
        sequential=True,
        seed=first.seed,
        only=first.only,
        verifier_identity=first.verifier_identity,
        run_id=first.run_id,
        signed=key is not None,
    )
    # a power floor the shards agree on carries over (the merge command's --min-power overrides it)
    merged.min_power = first.min_power if all(r.min_power == first.min_power for r in reports) else None
    merged.properties.extend(_deterministic_outcomes(by_shard[0], deterministic))
    for name in designed:
        merged.properties.append(_merge_test(STAT_DESIGNS[name](), by_shard, shards))
    merged.seconds = max(r.seconds for r in by_shard)
    return merged


def _index(report: CheckReport) -> int:
    return report.shard[0] if report.shard else 0


def _membership(reports: Sequence[CheckReport]) -> int:
    """S, when the reports are shards 1..S of one S-way run, each once."""
    if not reports:
        raise CheckError("nothing to merge")
    for at, report in enumerate(reports):
        if report.shard is None:
            raise CheckError(f"report {at + 1} is not a shard report (verispec check --shard I/S --json)")
    shards = reports[0].shard[1] if reports[0].shard else 0
    for report in reports:
        assert report.shard is not None
        if report.shard[1] != shards:
            raise CheckError(foreign_shard_message(report.shard[0], report.shard[1], shards))
    seen = [_index(r) for r in reports]
    if sorted(seen) != list(range(1, shards + 1)):
        raise CheckError(missing_shards_message(seen, shards))
    return shards


def _same_run(report: CheckReport, first: CheckReport) -> None:
    where = f"shard {_index(report)}/{report.shard[1] if report.shard else 0}"
    if report.verispec_version != VERSION:
        raise CheckError(f"{where} was written by verispec {report.verispec_version}; this is {VERSION}: rerun it")
    if report.protocol_version != PROTOCOL_VERSION:
        raise CheckError(
            f"{where} is of protocol version {report.protocol_version}; this verispec speaks {PROTOCOL_VERSION}"
        )
    if report.verifier_identity != verifier_identity(report.implementation, report.law_only):
        raise CheckError(
            f"{where}: its verifier identity does not match its implementation ({report.implementation!r})"
        )
    if report.verifier_identity != first.verifier_identity:
        raise CheckError(f"{where} checked another verifier ({report.implementation!r}, not {first.implementation!r})")
    differ = [
        label
        for label, mine, theirs in (
            ("seed", report.seed, first.seed),
            ("scale", report.scale, first.scale),
            ("mode", report.law_only, first.law_only),
            ("selection", report.only, first.only),
            ("vectors", report.vectors, first.vectors),
        )
        if mine != theirs
    ]
    if differ:
        raise CheckError(f"{where} is of another run ({', '.join(differ)} differ from shard 1's)")
    if report.run_id != run_id(run_design(report), report.seed, report.verifier_identity):
        raise CheckError(f"{where}: its run id does not match its design, seed and verifier")


def _seals(reports: Sequence[CheckReport]) -> bytes | None:
    """Check every shard's digest (and HMAC when the key is set); the key, or None."""
    key = report_key()
    for report in reports:
        where = f"shard {_index(report)}/{report.shard[1] if report.shard else 0}"
        body = report.as_json()
        if report.digest is None or report.digest != content_digest(body):
            raise CheckError(f"{where}: its content digest does not match its content (edited after it was written?)")
        if key is None:
            if report.signature is not None:
                raise CheckError(
                    f"{where} is signed, but {REPORT_KEY_ENV} is not set here: its signature cannot be verified"
                )
            continue
        if report.signature is None:
            raise CheckError(f"{where} is unsigned; with {REPORT_KEY_ENV} set every shard must be signed with it")
        if not signature_matches(body, report.signature, key):
            raise CheckError(
                f"{where}: its signature does not verify with {REPORT_KEY_ENV} (forged, edited, or another key)"
            )
    return key


def expected_properties(report: CheckReport) -> tuple[list[str], list[str]]:
    """(properties shard 1 runs alone, the designed tests every shard draws) of the run's mode."""
    wanted = [n for n in property_names() if report.only is None or n in report.only]
    designed = [
        n for n in wanted if n in STAT_DESIGNS and n in PROPERTY_NAMES and (applicable(n) or not report.law_only)
    ]
    return [n for n in wanted if n not in designed], designed


def _property_set(report: CheckReport, deterministic: Sequence[str], designed: Sequence[str]) -> None:
    """Exactly the expected properties, each once (fewer only after a failure stopped the shard)."""
    where = f"shard {_index(report)}/{report.shard[1] if report.shard else 0}"
    names = [p.name for p in report.properties]
    expected = set(deterministic) | set(designed)
    if len(set(names)) != len(names):
        raise CheckError(f"{where} reports a property twice")
    extra = sorted(set(names) - expected)
    if extra:
        raise CheckError(f"{where} reports properties this run's mode does not have there: {', '.join(extra)}")
    missing = [n for n in list(deterministic) + list(designed) if n not in names]
    if missing and not report.failed:
        raise CheckError(f"{where} lacks {', '.join(missing)}: the merge requires the mode's full property set")
    # every statistical test it reports comes with its blocks, except one that failed without
    # drawing a block (a malformed answer broke the drawing off): that failure merges as failed
    counted = [p.name for p in report.properties if p.name in designed and not _broken_off(report, p)]
    if sorted(report.blocks) != sorted(counted):
        raise CheckError(f"{where}: its block counts are not exactly those of its statistical tests")


def _broken_off(report: CheckReport, outcome: PropertyOutcome) -> bool:
    """A statistical test the shard reports failed with no block counted: its drawing broke off
    (a malformed answer, a crashed verifier), so the failure is not a rejection of counts. Taken
    as it says: a merged test it fails can never read as a pass."""
    return outcome.status == "failed" and not report.blocks.get(outcome.name)


def _deterministic_outcomes(shard_one: CheckReport, names: Sequence[str]) -> list[PropertyOutcome]:
    by_name = {p.name: p for p in shard_one.properties}
    return [
        by_name.get(name) or PropertyOutcome(name, "skipped", 0, 0.0, 0.0, "not run: shard 1 stopped at a failure", 0.0)
        for name in names
    ]


def _merge_test(design: StatDesign, reports: Sequence[CheckReport], shards: int) -> PropertyOutcome:
    """One designed test: each shard's slice checked, the counts added, the looks on the sums."""
    test = SequentialTest(design, merged_schedule(design, reports[0].scale, shards))
    rejections: list[tuple[ShardTest, float]] = []
    seconds = 0.0
    for report in reports:
        outcome = next((p for p in report.properties if p.name == design.name), None)
        if outcome is None:
            continue
        seconds += outcome.seconds
        shard_test = _checked_slice(design, report, outcome, shards)
        for block, counts in shard_test.counts.items():
            test.add(block, counts)
        if shard_test.rejection is not None:
            rejections.append((shard_test, outcome.seconds))
    if rejections:
        shard_test, _ = rejections[0]
        detail = shard_test.rejection or ""
        if len(rejections) > 1:
            detail += f" (and {len(rejections) - 1} other shard(s) rejected alone)"
        return PropertyOutcome(
            design.name, "failed", test.samples, design.alpha, shard_test.power(), detail, seconds, design.tv
        )
    test.take_looks()
    return sequential_outcome(test, seconds)


def _checked_slice(design: StatDesign, report: CheckReport, outcome: PropertyOutcome, shards: int) -> ShardTest:
    """The shard's counts of one test, refused unless they are exactly its slice at the design's totals."""
    index = _index(report)
    where = f"shard {index}/{shards}, {design.name}"
    plan = schedule(design, report.scale)
    shard_test = ShardTest(design, plan, index, shards)
    owned = shard_blocks(plan, index - 1, shards)
    got = report.blocks.get(design.name, {})
    for block in sorted(got):
        counts = np.asarray(got[block], dtype=np.int64)
        if counts.shape != design.probs.shape:
            raise CheckError(
                f"{where}: block {block} has {counts.shape[0]} cells, the design has {design.probs.shape[0]}"
            )
        if int(counts.sum()) != plan.block or bool((counts < 0).any()):
            raise CheckError(
                f"{where}: block {block} holds {int(counts.sum())} draws; the design's blocks hold {plan.block}"
            )
    if outcome.status == "counted":
        if sorted(got) != owned:
            raise CheckError(
                f"{where}: blocks {_span(sorted(got))} are not its slice {_span(owned)} (every {shards}th block)"
            )
        for block in owned:
            shard_test.add(block, np.asarray(got[block], dtype=np.int64))
        return shard_test
    if outcome.status != "failed":
        raise CheckError(f"{where}: status {outcome.status!r} is not a shard's (counted or failed)")
    if _broken_off(report, outcome):  # no counts to replay: it can only make the merged test fail
        shard_test.rejection = f"shard {index}/{shards}: {outcome.detail}"
        return shard_test
    drawn = sorted(got)
    if drawn != owned[: len(drawn)] or not drawn:
        raise CheckError(f"{where}: a rejection must come with the first blocks of its slice, got {_span(drawn)}")
    for block in drawn:
        shard_test.counts[block] = np.asarray(got[block], dtype=np.int64)
    replay_own_looks(shard_test, drawn)
    if shard_test.rejection is None or len(shard_test.counts) != len(drawn):
        raise CheckError(f"{where}: claims a rejection its counts do not show at its own looks")
    return shard_test


def _span(blocks: Sequence[int]) -> str:
    if len(blocks) <= 6:
        return "[" + ", ".join(map(str, blocks)) + "]"
    return f"[{blocks[0]}, {blocks[1]}, ..., {blocks[-1]}] ({len(blocks)} blocks)"
