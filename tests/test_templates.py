"""``verispec template``: the shipped starting files are the repository's examples byte for byte,
every template is listed and shipped, and the CI workflow is a complete matrix-of-shards + merge
workflow whose matrix and shard count agree (it is RUN from an installed wheel in
tests/test_installed_wheel.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verispec import cli
from verispec.templates import TEMPLATE_DIR, TEMPLATES, TemplateError, template_text

from tests.workflow import Workflow

REPO = Path(__file__).resolve().parents[1]


def test_every_shipped_example_is_the_repositorys_file_byte_for_byte() -> None:
    for entry in TEMPLATES:
        shipped = TEMPLATE_DIR / entry.filename
        if shipped.is_symlink():  # the examples: one copy, in examples/, run by their own tests
            assert shipped.resolve() == REPO / "examples" / entry.filename
            assert template_text(entry.name) == (REPO / "examples" / entry.filename).read_text(encoding="utf-8")
    assert sorted(p.name for p in TEMPLATE_DIR.iterdir()) == sorted(t.filename for t in TEMPLATES)


def test_the_command_prints_a_template_and_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["template", "law-only-verifier"]) == 0
    assert capsys.readouterr().out == template_text("law-only-verifier")
    assert cli.main(["template", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [t.name for t in TEMPLATES]


def test_an_unknown_or_missing_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TemplateError, match="unknown template"):
        template_text("gitlab")
    assert cli.main(["template"]) == 2
    assert "give a template NAME or --list" in capsys.readouterr().err


def test_the_ci_workflow_shards_uploads_and_merges() -> None:
    flow = Workflow.parse(template_text("github-actions"))
    assert flow.matrix("shard", "shard") == list(range(1, int(flow.env["SHARDS"]) + 1))  # the two agree
    shard_steps = [step.get("name") or step.get("uses") for step in flow.steps("shard")]
    assert shard_steps == ["actions/checkout@v4", "actions/setup-python@v5", "install", "gate one shard",
                           "actions/upload-artifact@v4"]
    assert "--batch-verifier" in flow.env["CHECK_ARGS"] and "--law-only" in flow.env["CHECK_ARGS"]
    gate = flow.run_line("shard", "gate one shard")
    assert "--shard ${{ matrix.shard }}/$SHARDS --json" in gate and "--junit-xml" in gate
    merge = flow.job("merge")
    assert merge["needs"] == "shard" and merge["if"] == "${{ !cancelled() }}"  # a failed shard still gets merged
    assert flow.run_line("merge", "merged verdict") == "verispec check --merge shard-*.json --junit-xml verispec.xml"
    download = [s for s in flow.steps("merge") if str(s.get("uses", "")).startswith("actions/download-artifact")]
    assert download and download[0]["with"] == {"pattern": "verispec-shard-*", "merge-multiple": True}
