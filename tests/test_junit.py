"""``--junit-xml``: one testcase per property (check) or prompt (check-decoder), its own time, a
<failure> for failed and inconclusive ones, <skipped> for skipped and not-applicable ones, written
atomically; what the XML says is read back with ElementTree, never string-matched.

The command runs here replay vectors and deterministic properties only (no statistics: what is
tested is the file, not the law), in-process through ``verispec.cli.main``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verispec import cli
from verispec.atomic import OutputError
from verispec.decoder.report import DecoderReport, PromptOutcome
from verispec.junit import check_cases, junit_xml, write_check_junit, write_decoder_junit
from verispec.spec.check import CheckReport, PropertyOutcome

REFERENCE = "verispec.reference.speculative"


def _report() -> CheckReport:
    outcomes = [
        PropertyOutcome("vectors_sampled", "passed", 10, 0.0, 1.0, "10 cases agree", 0.25),
        PropertyOutcome("contract", "failed", 14, 0.0, 1.0, "k = 0: accepted \x00 <&> without VerificationError", 0.5),
        PropertyOutcome("stat_verdict_law_k1", "inconclusive", 900, 1e-4, 0.4, "budget ended", 2.0),
        PropertyOutcome("vectors_gate", "skipped", 0, 0.0, 0.0, "op not offered", 0.0),
        PropertyOutcome("exact_lossless", "not_applicable", 0, 0.0, 0.0, "own randomness", 0.0),
    ]
    return CheckReport("python: demo", {}, 1.0, outcomes, seconds=3.5)


def _suite(path: Path) -> ET.Element:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return suite


def test_every_property_is_a_testcase_with_its_status_and_time(tmp_path: Path) -> None:
    path = tmp_path / "report.xml"
    write_check_junit(path, _report())
    suite = _suite(path)
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "5",
        "failures": "2",
        "errors": "0",
        "skipped": "2",
        "time": "3.500",
    }
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == [p.name for p in _report().properties]
    assert [cases[n].get("time") for n in cases] == ["0.250", "0.500", "2.000", "0.000", "0.000"]
    failure = cases["contract"].find("failure")
    assert failure is not None and failure.get("type") == "failed"
    assert failure.get("message") == "failed: k = 0: accepted \ufffd <&> without VerificationError"  # NUL cannot be XML
    inconclusive = cases["stat_verdict_law_k1"].find("failure")
    assert inconclusive is not None and inconclusive.get("type") == "inconclusive"
    assert "power=0.4000" in (inconclusive.text or "")
    for name in ("vectors_gate", "exact_lossless"):
        assert cases[name].find("skipped") is not None and cases[name].find("failure") is None
    assert cases["vectors_sampled"].find("failure") is None and cases["vectors_sampled"].find("skipped") is None


def test_decoder_prompts_are_testcases(tmp_path: Path) -> None:
    numbers = {"n": 1000, "alpha": 1e-3, "power": 0.99, "tv": 0.2}
    report = DecoderReport(
        "m.gguf",
        [
            PromptOutcome("a", "law (ours)", True, "ok", 1.5, numbers),
            PromptOutcome("b", "greedy", False, "differ at step 3", 0.5),
        ],
        seconds=2.0,
    )
    path = tmp_path / "decoder.xml"
    write_decoder_junit(path, report)
    suite = _suite(path)
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("verispec check-decoder", "2", "1")
    a, b = suite.iter("testcase")
    assert (a.get("name"), a.get("classname"), a.get("time")) == ("a", "verispec.check_decoder.law (ours)", "1.500")
    assert b.find("failure") is not None and a.find("failure") is None


def test_the_file_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "report.xml"
    path.write_bytes(b"old")
    write_check_junit(path, _report())
    assert path.read_bytes() == junit_xml("verispec check", check_cases(_report()), 3.5)
    assert [p.name for p in tmp_path.iterdir()] == ["report.xml"]  # no temporary file left beside it
    with pytest.raises(OutputError, match="is a folder"):
        write_check_junit(tmp_path, _report())
    with pytest.raises(OutputError, match="does not exist"):
        write_check_junit(tmp_path / "missing" / "r.xml", _report())


def test_check_command_writes_junit_beside_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gate.xml"
    argv = [
        "check",
        "--verifier",
        f"{REFERENCE}:verify_sampled",
        "--only",
        "vectors_sampled",
        "contract",
        "--json",
        "--junit-xml",
        str(path),
    ]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    cases = list(_suite(path).iter("testcase"))
    assert (
        [c.get("name") for c in cases] == [p["name"] for p in report["properties"]] == ["vectors_sampled", "contract"]
    )
    assert all(c.find("failure") is None for c in cases)


def test_a_failing_check_fails_its_testcase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gate.xml"
    # a function of the wrong arity as the verifier: it "rejects" even the valid input
    argv = ["check", "--verifier", "verispec.spec.mutants:catalogue", "--only", "contract", "--junit-xml", str(path)]
    assert cli.main(argv) == 1
    (case,) = _suite(path).iter("testcase")
    assert case.get("name") == "contract" and case.find("failure") is not None
    assert "FAILED: crashes on valid input" in capsys.readouterr().out  # it rejects every invalid case


@pytest.mark.parametrize(
    "command",
    [
        ["check", "--verifier", f"{REFERENCE}:verify_sampled", "--only", "contract"],
        ["check-decoder", "--ours", "--model", "/nonexistent.gguf"],
    ],
)
def test_an_unwritable_junit_path_is_a_usage_error_before_the_run(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*command, "--junit-xml", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "is a folder" in captured.err and captured.out == ""  # nothing ran
