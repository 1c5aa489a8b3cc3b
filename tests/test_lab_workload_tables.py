"""lab/workload_tables.py on the saved workload measurements: one summary table and one
per-category table per file, every category of the run a row, the llama.cpp note. No model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.workload_tables import category_table, drafts_of, llama_note, main, summary_table

MEASUREMENTS = Path(__file__).resolve().parent.parent / "lab" / "measurements"
SAVED = sorted(MEASUREMENTS.glob("workload_*.json"))


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.name)
def test_tables_of_a_saved_workload_run(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads(path.read_text())["report"]
    drafts = drafts_of(report)
    assert drafts and set(drafts) == set(report["workload"])
    categories = list(report["workload"][drafts[0]]["by_temperature"]["0.0"]["per_category_speedup"])
    summary = summary_table(report, "m")
    assert summary[0].startswith(f"| m | `{drafts[0]}` T=0.0") and len(summary) == 2 + 8  # header, rule, 8 rows
    per_category = category_table(report, "m")
    assert [row.split(" | ")[0].removeprefix("| ") for row in per_category[2:]] == [*categories, "**geomean**"]
    assert all(row.count("|") == per_category[0].count("|") for row in per_category)
    main([str(path)])
    out = capsys.readouterr().out
    assert out.startswith(f"<!-- {path}: ") and llama_note(report) in out
