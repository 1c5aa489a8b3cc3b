"""README.md's verdict table on other people's decoders is docs/peers.md's summary table, row for row.

docs/peers.md holds every run; its summary table (the header :data:`tests.support.peer_verdicts.SUMMARY_HEADER`)
is what the README shows, less the columns a reader follows the link for (:data:`README_DROPS`: the
design and the reproduction command), so the two are compared line by line and cannot drift. Each row must
also be coherent in itself: a **passed** verdict reached its design's tokens at power >= 0.99, an
**inconclusive** one did not (it is never shown as passed), and the reproduction it names exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.peer_verdicts import SUMMARY_HEADER

ROOT = Path(__file__).resolve().parent.parent
POWER = 0.99  # the gate's design power (spec/decoder/depth/law.py)
README_DROPS = ("design", "reproduce")  # in docs/peers.md only: the README stays readable


def _names(header: str) -> list[str]:
    return [c.strip() for c in header.strip("|").split("|")]


def _line(values: list[str]) -> str:
    return "| " + " | ".join(values) + " |"


README_HEADER = _line([n for n in _names(SUMMARY_HEADER) if n not in README_DROPS])


def summary_rows(text: str, header: str = SUMMARY_HEADER) -> list[str]:
    """The rows of the table whose header line is ``header`` (none when it is absent)."""
    lines = text.splitlines()
    if header not in lines:
        return []
    rows = []
    for line in lines[lines.index(header) + 2 :]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def cells(row: str) -> dict[str, str]:
    names = _names(SUMMARY_HEADER)
    values = [c.strip() for c in row.strip().strip("|").split("|")]
    assert len(values) == len(names), f"{len(values)} cells, the header has {len(names)}: {row}"
    return dict(zip(names, values))


def readme_row(row: str) -> str:
    """A summary row as the README shows it: the same cells, less :data:`README_DROPS`."""
    return _line([v for n, v in cells(row).items() if n not in README_DROPS])


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def check_row(row: str) -> None:
    """A row's verdict agrees with its tokens and power; its reproduction names a file here."""
    c = cells(row)
    verdict = c["verdict"].strip("*")
    assert verdict in ("passed", "failed", "inconclusive"), row
    judged = re.fullmatch(r"([\d,]+) / ([\d,]+)", c["tokens / design"])
    if verdict != "failed":
        assert judged is not None, f"a {verdict} verdict states tokens / design: {row}"
        reached = _number(judged.group(1)) >= _number(judged.group(2))
        assert reached == (verdict == "passed") and (_number(c["power"]) >= POWER) == reached, row
    scripts = re.findall(r"(?:python -m )?((?:examples|tests)[/.][\w/.]+?)(?:\.py)?(?=[ `])", c["reproduce"])
    assert scripts, f"no reproduction named: {row}"
    for name in scripts:
        assert (ROOT / (name.replace(".", "/") + ".py")).exists(), f"{name} does not exist: {row}"


def test_the_readme_shows_the_summary_table_of_docs_peers() -> None:
    docs = summary_rows((ROOT / "docs" / "peers.md").read_text())
    readme = summary_rows((ROOT / "README.md").read_text(), README_HEADER)
    assert docs, "docs/peers.md has no summary table"
    assert readme == [readme_row(r) for r in docs], (
        "README.md's verdict table differs from docs/peers.md's summary table (less its design and reproduce cells)"
    )


@pytest.mark.parametrize("row", summary_rows((ROOT / "docs" / "peers.md").read_text()))
def test_each_summary_row_is_coherent(row: str) -> None:
    check_row(row)


def test_the_row_check_refuses_an_inconclusive_run_shown_as_passed() -> None:
    row = (
        "| transformers 5.24.0 | tinyllama.gguf | prompt-lookup | hf-all | TV 0.05 on 10% of positions, 64 tokens "
        "| **passed** | 100,000 / 271,000 | 0.512 | 60 (load 12) | `python -m tests.support.peer_verdicts --out DIR` |"
    )
    with pytest.raises(AssertionError):
        check_row(row)
    check_row(row.replace("**passed**", "**inconclusive**"))
    with pytest.raises(AssertionError, match="does not exist"):
        check_row(
            row.replace("**passed**", "**inconclusive**").replace("tests.support.peer_verdicts", "tests.no_such_runner")
        )
