"""``--junit-xml PATH``: a gate's report as JUnit XML, the format every CI system displays.

One ``<testsuite>`` per run, one ``<testcase>`` per property (``verispec check``) or per prompt
(``verispec check-decoder``) with its own time; a failed one carries ``<failure>``, an
inconclusive one ``<failure type="inconclusive">`` (not passed: the budget ended before power),
a skipped or not-applicable one ``<skipped>``. The file is written atomically
(:func:`verispec.atomic.replace_file`): a reader sees the old file or the whole new one; a path
that is a FIFO, a device or (unless asked) a symlink is refused before the run
(:func:`verispec.atomic.output_file`).

The XML is a side output: the commands print the verdict and the report first and write the XML
after (:func:`write_side_output`), so a file that cannot be written at the end costs one line on
stderr, never the report, and the exit status stays the verdict's.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from verispec.atomic import OutputError, output_file, replace_file

if TYPE_CHECKING:
    from verispec.decoder.report import DecoderReport
    from verispec.spec.check import CheckReport

Result = Literal["passed", "failed", "inconclusive", "skipped"]
# XML 1.0 cannot hold these characters at all (a verifier's error text may contain anything)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


@dataclass(frozen=True)
class Case:
    """One JUnit test case: a property or a prompt."""

    name: str
    classname: str
    seconds: float
    result: Result
    message: str  # the failure's or skip's one line ("" when passed)
    text: str = ""  # the case's full detail (the failure's body, or <system-out> when passed)


def check_cases(report: CheckReport) -> list[Case]:
    """A ``verispec check`` report's properties as cases (a shard's undrawn verdicts: skipped)."""
    cases = []
    for p in report.properties:
        # a shard's "counted" test drew its slice without a rejection: passed here, decided by the merge
        status = "passed" if p.status == "counted" else p.status
        result: Result = "skipped" if status == "skipped" or status == "not_applicable" else status
        numbers = f"N={p.n} alpha={p.alpha:.3g} power={p.power:.4f} tv={p.tv:g}"
        message = "" if result == "passed" else f"{p.status}: {p.detail}"
        cases.append(Case(p.name, "verispec.check", p.seconds, result, message, f"{numbers}\n{p.detail}"))
    return cases


def decoder_cases(report: DecoderReport) -> list[Case]:
    """A ``verispec check-decoder`` report's prompts as cases."""
    return [
        Case(
            r.prompt,
            f"verispec.check_decoder.{r.mode}",
            r.seconds,
            "passed" if r.passed else "inconclusive" if r.inconclusive else "failed",
            "" if r.passed else f"{'inconclusive' if r.inconclusive else 'failed'}: {r.detail}",
            r.line(),
        )
        for r in report.results
    ]


def junit_xml(suite: str, cases: Sequence[Case], seconds: float) -> bytes:
    """The XML document of one suite of cases."""
    counts = {result: sum(1 for c in cases if c.result == result) for result in ("failed", "inconclusive", "skipped")}
    root = ET.Element("testsuites")
    element = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(counts["failed"] + counts["inconclusive"]),
        errors="0",
        skipped=str(counts["skipped"]),
        time=f"{seconds:.3f}",
    )
    for case in cases:
        child = ET.SubElement(
            element, "testcase", name=_xml_text(case.name), classname=case.classname, time=f"{case.seconds:.3f}"
        )
        if case.result in ("failed", "inconclusive"):
            failure = ET.SubElement(child, "failure", message=_xml_text(case.message), type=case.result)
            failure.text = _xml_text(case.text)
        elif case.result == "skipped":
            ET.SubElement(child, "skipped", message=_xml_text(case.message))
        elif case.text:
            ET.SubElement(child, "system-out").text = _xml_text(case.text)
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def check_junit_target(path: Path) -> None:
    """OutputError now, before a run of minutes, if ``path`` could not be written afterwards."""
    output_file(path)


def write_side_output(what: str, write: Callable[[], None]) -> bool:
    """Run ``write`` (a side output such as the JUnit XML, after the report is out): on failure one
    line on stderr naming ``what`` and why, and False; the caller's exit status is unchanged."""
    try:
        write()
    except (OutputError, OSError) as exc:
        print(f"verispec: error: {what} was not written (the verdict above stands): {exc}", file=sys.stderr, flush=True)
        return False
    return True


def write_junit(path: Path, suite: str, cases: Sequence[Case], seconds: float) -> None:
    """Write the suite to ``path`` atomically (OutputError when it cannot be written)."""
    document = junit_xml(suite, cases, seconds)
    with replace_file(path) as out:
        out.write(document)


def write_check_junit(path: Path, report: CheckReport) -> None:
    suite = "verispec check" + (f" shard {report.shard[0]}/{report.shard[1]}" if report.shard else "")
    write_junit(path, suite, check_cases(report), report.seconds)


def write_decoder_junit(path: Path, report: DecoderReport) -> None:
    write_junit(path, "verispec check-decoder", decoder_cases(report), report.seconds)
