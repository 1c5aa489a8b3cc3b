"""The README's decoder-mutant table cannot drift from docs/checking-decoders.md's.

The README shows, per late-firing decoder mutant, where it first shows, what catches it in the
law at depth, and the generations it took: columns 1, 3, 4 and 5 of the measured table in
docs/checking-decoders.md (lab/measure/depth_mutants.py writes its rows). This checks the two
agree cell for cell and that both list exactly the mutants of spec.decoder.mutants.DEPTH_MUTANTS.
"""

from __future__ import annotations

from pathlib import Path

from verispec.spec.decoder.mutants import DEPTH_MUTANTS

ROOT = Path(__file__).resolve().parent.parent
DOCS_HEADER = "| mutant | upstream | where it first shows | law at depth: caught by | generations |"
README_HEADER = "| decoder mutant | where it first shows | caught by (law at depth) | generations |"
COLUMNS = (0, 2, 3, 4)  # of the docs table: mutant, where it first shows, caught by, generations


def table_after(text: str, header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the markdown table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_the_readme_table_is_the_docs_table() -> None:
    docs = table_after((ROOT / "docs" / "checking-decoders.md").read_text(), DOCS_HEADER)
    readme = table_after((ROOT / "README.md").read_text(), README_HEADER)
    assert readme == [[row[c] for c in COLUMNS] for row in docs]
    assert sorted(row[0].strip("`") for row in readme) == sorted(DEPTH_MUTANTS)
