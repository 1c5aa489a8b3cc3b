"""The JSON report's schema: versioned, documented field by field, round-tripped.

docs/report-schema.md is the user's reference; these tests hold it, ``spec.report.report_fields``
and what ``CheckReport.as_json`` writes to the same field list, so none can drift alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec.check import CheckReport, PythonImplementation, run_check
from verispec.spec.report import SCHEMA_VERSION, STATUSES, property_fields, report_fields
from verispec.spec.vectors import VectorSet, build_vectors

DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(2, 1)


def _documented(section: str) -> dict[str, str]:
    """The ``| `field` | type | meaning |`` rows of one section of the schema page."""
    text = DOC.read_text(encoding="utf-8")
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", body, re.MULTILINE)}


def _type_ok(value: object, declared: str) -> bool:
    if value is None:
        return "null" in declared or "optional" in declared
    if isinstance(value, bool):
        return "boolean" in declared
    return any(isinstance(value, t) for name, t in JSON_TYPES.items() if name in declared and name != "boolean")


def test_the_page_documents_exactly_the_fields_written(vectors: VectorSet) -> None:
    assert f"(schema {SCHEMA_VERSION})" in DOC.read_text(encoding="utf-8")
    assert set(_documented("## Top-level fields")) == set(report_fields())
    assert set(_documented("## Each entry of `properties`")) == set(property_fields())
    for status in STATUSES:
        assert f"`{status}`" in DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("shard", [None, (2, 3)])
def test_a_report_round_trips_and_matches_the_documented_types(
    vectors: VectorSet, shard: tuple[int, int] | None
) -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    report = run_check(
        impl, vectors, only=["contract", "stat_verdict_law_k1"], scale=0.01, sequential=True, shard=shard
    )
    written = json.loads(json.dumps(report.as_json()))
    assert written["schema_version"] == SCHEMA_VERSION
    optional = {name for name, kind in report_fields().items() if "optional" in kind}
    assert set(report_fields()) - optional <= set(written) <= set(report_fields())
    for name, value in written.items():
        assert _type_ok(value, report_fields()[name]), (name, value)
    for entry in written["properties"]:
        assert set(entry) == set(property_fields())
        assert all(_type_ok(entry[name], kind) for name, kind in property_fields().items())
    again = CheckReport.from_json(written).as_json()
    assert json.loads(json.dumps(again)) == written
