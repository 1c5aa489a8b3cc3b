"""Shard reports that cannot be forged into a pass: every edit the merge can see is refused.

Two small shard sets (the reference and a law-breaking mutant through the Python interface, one
statistical test at 2% of its N plus the contract) are written to JSON and edited the way a
careless or hostile CI step would. "Resealed" means the forger also recomputed the run id and the
content digest (anyone can: they are plain sha256); what still catches those edits is content the
merge recomputes itself, or the HMAC when ``VERISPEC_REPORT_KEY`` is set. The limits an unsigned
merge keeps (spec/report_seal.py) are tested as limits: counts swapped in from a correct run and
resealed are accepted without a key and refused with one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.merge_shards import Files, copy_shards, shard_files
from verispec.spec.check import CheckError, CheckReport, merge_reports
from verispec.spec.report import PropertyOutcome, ReportError, run_design
from verispec.spec.report_seal import REPORT_KEY_ENV, content_digest, run_id, verifier_identity
from verispec.spec.vectors import VectorSet, build_vectors


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(2, 1)


def _merge(files: Files) -> CheckReport:
    return merge_reports([CheckReport.from_json(f) for f in files], allow_partial=True)


def _reseal(data: dict[str, Any], *, identity: bool = False) -> dict[str, Any]:
    """What a forger who read spec/report_seal.py does after an edit: recompute the digests."""
    report = CheckReport.from_json(data)
    if identity:
        report.verifier_identity = verifier_identity(report.implementation, report.law_only)
    report.run_id = run_id(run_design(report), report.seed, report.verifier_identity)
    report.digest, report.signature = None, None
    report.digest = content_digest(report.as_json())
    out: dict[str, Any] = report.as_json()
    return out


@pytest.fixture(scope="module")
def good(vectors: VectorSet) -> Files:
    return shard_files(vectors)


@pytest.fixture(scope="module")
def broken(vectors: VectorSet) -> Files:
    return shard_files(vectors, "resample_from_target")


def test_the_untouched_shards_merge(good: Files, broken: Files) -> None:
    assert _merge(copy_shards(good)).passed
    assert not _merge(copy_shards(broken)).passed


def test_an_edit_left_unsealed_is_refused(good: Files, broken: Files) -> None:
    files = copy_shards(broken)
    files[1]["blocks"] = good[1]["blocks"]  # counts swapped in from a correct run
    with pytest.raises(CheckError, match="shard 2/2: its content digest does not match"):
        _merge(files)


def test_scale_edited_in_every_shard_cannot_claim_a_bigger_n(good: Files) -> None:
    files = [dict(f, scale=10.0) for f in copy_shards(good)]
    with pytest.raises(CheckError, match="holds .* draws; the design's blocks hold"):
        _merge([_reseal(f) for f in files])


def test_removed_blocks_are_refused_even_resealed(good: Files) -> None:
    files = copy_shards(good)
    blocks = files[1]["blocks"]["stat_verdict_law_k1"]
    del blocks[sorted(blocks, key=int)[-1]]
    with pytest.raises(CheckError, match="are not its slice"):
        _merge([_reseal(f) for f in files])


def test_a_claimed_rejection_must_show_in_the_counts(good: Files) -> None:
    files = copy_shards(good)
    stat = next(p for p in files[1]["properties"] if p["name"] == "stat_verdict_law_k1")
    stat["status"] = "failed"
    with pytest.raises(CheckError, match="claims a rejection its counts do not show"):
        _merge([_reseal(f) for f in files])


def test_a_hand_written_report_without_the_full_property_set_is_refused(good: Files) -> None:
    design_counts = {b: c for b, c in good[0]["blocks"]["stat_verdict_law_k1"].items()}
    forged = copy_shards(good)[0]
    forged.update(shard=[1, 1], only=None, implementation="nothing at all")
    forged["properties"] = [p for p in forged["properties"] if p["name"] == "stat_verdict_law_k1"]
    forged["blocks"] = {"stat_verdict_law_k1": design_counts}
    with pytest.raises(CheckError, match="lacks .* full property set"):
        merge_reports([CheckReport.from_json(_reseal(forged, identity=True))])
    partial = copy_shards(good)
    with pytest.raises(CheckError, match="partial selection"):
        merge_reports([CheckReport.from_json(f) for f in partial])  # --only shards need allow_partial


def test_another_verifiers_shard_is_refused(good: Files, broken: Files) -> None:
    mixed = [copy_shards(good)[0], copy_shards(broken)[1]]
    with pytest.raises(CheckError, match="checked another verifier"):
        _merge(mixed)
    relabelled = copy_shards(broken)[1]
    relabelled["implementation"] = good[0]["implementation"]
    with pytest.raises(CheckError, match="verifier identity does not match its implementation"):
        _merge([copy_shards(good)[0], _reseal(relabelled)])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("verispec_version", "0.0.1", "written by verispec 0.0.1"),
        ("protocol_version", 2, "protocol version 2"),
        ("seed", 7, "another run"),
    ],
)
def test_versions_and_the_run_must_match(good: Files, field: str, value: object, message: str) -> None:
    files = copy_shards(good)
    files[1][field] = value
    with pytest.raises(CheckError, match=message):
        _merge([_reseal(f) for f in files])


def test_membership_messages(vectors: VectorSet, good: Files) -> None:
    eight = shard_files(vectors, shards=8)
    with pytest.raises(CheckError, match="shard 3/8 does not belong to a 2-way run"):
        _merge([copy_shards(good)[0], eight[2]])
    with pytest.raises(CheckError, match="shard 1/2 given twice"):
        _merge([copy_shards(good)[0], copy_shards(good)[0]])


def test_with_a_key_only_signed_shards_merge(
    vectors: VectorSet, good: Files, broken: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPORT_KEY_ENV, "ci-secret")
    signed = shard_files(vectors)
    assert all(f["signature"] for f in signed)
    assert _merge(copy_shards(signed)).signed
    with pytest.raises(CheckError, match="is unsigned"):
        _merge(copy_shards(good))
    swapped = copy_shards(shard_files(vectors, "resample_from_target"))
    swapped[0]["blocks"], swapped[1]["blocks"] = signed[0]["blocks"], signed[1]["blocks"]
    with pytest.raises(CheckError, match="signature does not verify"):
        _merge([dict(_reseal(f), signature=s["signature"]) for f, s in zip(swapped, signed)])
    monkeypatch.setenv(REPORT_KEY_ENV, "another-secret")
    with pytest.raises(CheckError, match="signature does not verify"):
        _merge(copy_shards(signed))
    monkeypatch.delenv(REPORT_KEY_ENV)
    with pytest.raises(CheckError, match="is signed, but VERISPEC_REPORT_KEY is not set"):
        _merge(copy_shards(signed))


def test_the_unsigned_limit_counts_swapped_in_and_resealed_pass(good: Files, broken: Files) -> None:
    """The documented limit of an unsigned merge: a forger who swaps in a correct run's counts and
    recomputes the digests gets a pass. Only the HMAC (test above) refuses this."""
    files = copy_shards(broken)
    for mine, theirs in zip(files, good):
        mine["blocks"] = theirs["blocks"]
        mine["properties"] = theirs["properties"]
    assert _merge([_reseal(f) for f in files]).passed


def test_reports_of_another_schema_major_are_refused(good: Files) -> None:
    data = copy_shards(good)[0]
    for version in ("2.0", None, "x"):
        with pytest.raises(ReportError, match="schema"):
            CheckReport.from_json(dict(data, schema_version=version))
    assert CheckReport.from_json(dict(data, schema_version="1.9", added_later=True)).shard == (1, 2)
    with pytest.raises(ReportError, match="n"):
        CheckReport.from_json(dict(data, properties=[dict(data["properties"][0], n="many")]))
    assert PropertyOutcome.from_json(data["properties"][0]).name == "contract"


def test_malformed_shard_files_are_one_typed_error(good: Files) -> None:
    data = copy_shards(good)[1]
    with pytest.raises(ReportError, match="unknown status 'PASSED!'"):
        CheckReport.from_json(dict(data, properties=[dict(data["properties"][0], status="PASSED!")]))
    with pytest.raises(ReportError, match="malformed report: KeyError"):
        CheckReport.from_json({k: v for k, v in data.items() if k != "scale"})
    far = copy_shards(good)
    blocks = far[1]["blocks"]["stat_verdict_law_k1"]
    blocks["999999"] = blocks.pop(sorted(blocks, key=int)[0])  # a block outside the design
    with pytest.raises(CheckError, match="are not its slice"):
        _merge([_reseal(f) for f in far])
