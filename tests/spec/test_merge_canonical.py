"""What the merge verifies is what it merges: a shard whose file says something its re-serialized
form does not (a schema version, a block key "01", an extra field) is refused even though its
digest and HMAC verify; an empty ``VERISPEC_REPORT_KEY`` is refused, not read as "no key"; a
partial selection merges only when asked, as a partial claim; shards whose drawing a malformed
answer broke off merge as the failed run. The shard files come from
tests/support/merge_shards.py (the reference, contract + one test at 2% of its N).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.merge_shards import ONLY, SCALE, Files, copy_shards, python_impl, shard_files
from verispec import cli
from verispec.exit_codes import EXIT_FAILED
from verispec.reference.speculative import Verdict, verify_sampled
from verispec.spec.check import CheckError, CheckReport, PythonImplementation, merge_reports, run_check
from verispec.spec.merge import read_shard
from verispec.spec.report import ReportError
from verispec.spec.report_seal import REPORT_KEY_ENV
from verispec.spec.vectors import VectorSet, build_vectors


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(2, 1)


@pytest.fixture(scope="module")
def signed(vectors: VectorSet) -> Files:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(REPORT_KEY_ENV, "ci-secret")
        return shard_files(vectors)


def _merge_read(files: Files) -> CheckReport:
    return merge_reports([read_shard(f, f"shard report {i + 1}") for i, f in enumerate(files)], allow_partial=True)


def test_signed_shards_read_back_as_written_merge(signed: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REPORT_KEY_ENV, "ci-secret")
    assert _merge_read(copy_shards(signed)).signed


@pytest.mark.parametrize("edit", ["schema_version", "block key", "extra field"])
def test_a_field_the_reader_normalizes_is_refused_under_a_valid_signature(
    signed: Files, edit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPORT_KEY_ENV, "ci-secret")
    files = copy_shards(signed)
    if edit == "schema_version":
        files[1]["schema_version"] = "1.7"
    elif edit == "block key":
        blocks = files[1]["blocks"]["stat_verdict_law_k1"]
        key = sorted(blocks, key=int)[0]
        blocks["0" + key] = blocks.pop(key)
    else:
        files[1]["note"] = "merged by hand"
    merge_reports([CheckReport.from_json(f) for f in files], allow_partial=True)  # what the merge used to accept
    field = {"schema_version": "schema_version", "block key": "blocks", "extra field": "note"}[edit]
    with pytest.raises(ReportError, match=f"shard report 2 is not a report as verispec writes it: its field '{field}'"):
        _merge_read(files)


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_report_key_is_refused_not_read_as_unsigned(
    vectors: VectorSet, signed: Files, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPORT_KEY_ENV, value)
    with pytest.raises(CheckError, match="VERISPEC_REPORT_KEY is set but empty"):
        _merge_read(copy_shards(signed))
    with pytest.raises(CheckError, match="VERISPEC_REPORT_KEY is set but empty"):
        run_check(python_impl(), vectors, only=ONLY, scale=SCALE, shard=(1, 2))  # signing a shard too


def test_a_partial_selection_is_refused_with_the_way_to_merge_it_as_partial(vectors: VectorSet) -> None:
    files = shard_files(vectors)
    reports = [CheckReport.from_json(f) for f in files]
    with pytest.raises(CheckError, match="--allow-partial merges it as a partial run"):
        merge_reports(reports)
    merged = merge_reports(reports, allow_partial=True)
    assert "partial run: only 2 selected properties" in merged.claim()


def _spoiled(value: Any) -> Any:
    """The reference verifier whose token 1 is answered as ``value(1)``: a bool or a float that
    would convert to the right id (a Python verifier's answers are read as the wire's are)."""

    def verifier(p: Any, q: Any, drafts: Any, uniforms: Any) -> Verdict:
        verdict = verify_sampled(p, q, drafts, uniforms)
        return Verdict(verdict.accepted, value(verdict.token) if verdict.token == 1 else verdict.token, verdict.kind)

    return verifier


@pytest.mark.parametrize("value", [lambda t: True, float], ids=["true", "float"])
def test_shards_broken_off_by_a_mistyped_id_merge_as_failed(
    vectors: VectorSet, value: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each shard fails its statistical test with the malformed answer before counting a block; the
    merge of those shards is the failed run with that reason (exit 1), not a refusal of the shards
    as if their counts were missing (a usage error, exit 2, that once lost the verdict)."""
    impl = PythonImplementation(_spoiled(value), description="python: a mistyped id")
    files = [
        json.loads(json.dumps(run_check(impl, vectors, only=ONLY, scale=SCALE, shard=(i, 2), min_power=0).as_json()))
        for i in (1, 2)
    ]
    for shard in files:
        assert shard["exit_status"] == EXIT_FAILED and shard["blocks"] == {}
    merged = _merge_read(files)
    test = next(p for p in merged.properties if p.name == "stat_verdict_law_k1")
    assert merged.exit_status == EXIT_FAILED and test.status == "failed"
    assert test.detail.startswith("shard 1/2: drawing broke off") and "must be an integer, got" in test.detail
    paths = [tmp_path / f"shard_{i}.json" for i in (1, 2)]
    for path, shard in zip(paths, files):
        path.write_text(json.dumps(shard))
    assert cli.main(["check", "--merge", *map(str, paths), "--allow-partial", "--json"]) == EXIT_FAILED
    assert "stat_verdict_law_k1" in json.loads(capsys.readouterr().out)["failed"]
