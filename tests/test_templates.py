"""``verispec template``: the shipped starting files are the repository's examples byte for byte,
every template is listed and shipped, and the CI workflow is a complete matrix-of-shards + merge
workflow whose matrix and shard count agree (it is RUN from an installed wheel in
tests/test_installed_wheel.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.workflow import Workflow, expand
from verispec import cli
from verispec.templates import TEMPLATE_DIR, TEMPLATES, TemplateError, template_text, workflow_text

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
    assert shard_steps == [
        "actions/checkout@v4",
        "actions/setup-python@v5",
        "install",
        "gate one shard",
        "actions/upload-artifact@v4",
    ]
    assert "--batch-verifier" in flow.env["CHECK_ARGS"] and "--law-only" in flow.env["CHECK_ARGS"]
    gate = flow.run_line("shard", "gate one shard")
    assert "--shard ${{ matrix.shard }}/$SHARDS --json" in gate and "--junit-xml" in gate
    merge = flow.job("merge")
    assert merge["needs"] == "shard" and merge["if"] == "${{ !cancelled() }}"  # a failed shard still gets merged
    # an unset secret reaches the steps as an empty variable, which verispec refuses: both steps unset it
    unsigned_unless_keyed = 'test -n "$VERISPEC_REPORT_KEY" || unset VERISPEC_REPORT_KEY; '
    assert gate.startswith(unsigned_unless_keyed)
    assert flow.run_line("merge", "merged verdict") == (
        unsigned_unless_keyed + "verispec check --merge shard-*.json --junit-xml verispec.xml"
    )
    download = [s for s in flow.steps("merge") if str(s.get("uses", "")).startswith("actions/download-artifact")]
    assert download and download[0]["with"] == {"pattern": "verispec-shard-*", "merge-multiple": True}


# -- the decoder templates: their generate op runs check-decoder's default (depth) mode ------------

DECODER_TEMPLATES = {
    "transformers-decoder": "transformers",
    "llama-cpp-decoder": "llama_cpp",
    "model-api-decoder": None,
}
# A CI-sized depth design on a tiny synthetic model: 8 tokens deep, power 0.99 against TV 0.2 on
# every position (~280 tokens, seconds), the same mode and statistics as the full default design.
DEPTH = ["--depth", "8", "--tv", "0.2", "--fraction", "1", "--prompt", "the model", "--json"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from verispec.synth import synthesize

    return synthesize("llama", tmp_path_factory.mktemp("synth"), seed=0)


def _check_decoder(
    engine: str, model: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any]]:
    status = cli.main(["check-decoder", "--engine", engine, "--model", str(model), *DEPTH, *extra])
    return status, json.loads(capsys.readouterr().out)


def test_every_decoder_template_offers_generate() -> None:
    # a method whose first parameter after self is prompt_ids, however the formatter wraps it
    for name in DECODER_TEMPLATES:
        assert re.search(r"\n    def generate\(\s*self,\s*prompt_ids\b", template_text(name)), name


def test_the_model_api_template_passes_the_depth_mode_and_greedy(
    tiny_llama: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, report = _check_decoder("examples.model_api_decoder:factory", tiny_llama, capsys)
    assert status == 0 and report["results"][0]["mode"] == "depth", report
    assert report["results"][0]["power"] >= 0.99
    assert (
        cli.main(
            [
                "check-decoder",
                "--engine",
                "examples.model_api_decoder:factory",
                "--model",
                str(tiny_llama),
                "--greedy",
                "--prompt",
                "the model",
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()


def keep_every_draft(path: Path) -> Any:
    """The model-api template with its acceptance test removed: every draft kept, the bonus drawn
    from the first row (its tokens follow the draft's law, not the target's)."""
    from examples.model_api_decoder import ModelApiDecoder

    class KeepEveryDraft(ModelApiDecoder):
        def _verify(self, history: list[int], drafts: list[int], *args: Any) -> list[int]:
            return list(drafts) + super()._verify(history + list(drafts), [], [], *args[1:])[-1:]

    return KeepEveryDraft(Path(path))


def test_a_broken_model_api_decoder_fails_the_depth_mode(tiny_llama: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = _check_decoder("tests.test_templates:keep_every_draft", tiny_llama, capsys)
    assert status == 1 and report["results"][0]["state"] == "failed", report


@pytest.mark.parametrize(
    "name, engine",
    [
        ("transformers-decoder", "examples.transformers_decoder:prompt_lookup"),
        ("llama-cpp-decoder", "examples.llama_cpp_decoder:prompt_lookup"),
    ],
)
def test_the_library_templates_pass_the_depth_mode(
    name: str, engine: str, tiny_llama: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip(DECODER_TEMPLATES[name] or "")
    # transformers penalizes the whole sequence, the law its last 64 tokens: no penalty at depth.
    # The depth test alone (--no-first-m): the first-m test's 1,000 generations are 1,000 calls of
    # transformers' generate (~0.4 s each on a loaded 2-core machine: 7 minutes, past the engine
    # timeout at heavier load), and they test no op of the template the depth test does not.
    extra = ["--repeat-penalty", "1", "--no-first-m"]
    extra += ["--target-law", "engine-logits"] if name == "llama-cpp-decoder" else []
    status, report = _check_decoder(engine, tiny_llama, capsys, *extra)
    assert status == 0, report


# -- the workflow's options, and its steps run in a fresh repository --------------------------------


def test_the_workflow_options_write_the_env_and_the_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    args = '--verifier engine.sampler:verify --law-only --note "a b"'
    assert (
        cli.main(
            [
                "template",
                "github-actions",
                "--shards",
                "3",
                "--install",
                "git+https://example.org/verispec.git",
                "--check-args",
                args,
                "--decoder-args",
                "--engine mypkg.decoder:factory --model models/llama-seed0.gguf",
            ]
        )
        == 0
    )
    flow = Workflow.parse(capsys.readouterr().out)
    assert flow.matrix("shard", "shard") == [1, 2, 3] and flow.env["SHARDS"] == "3"
    assert flow.env["DECODER_ARGS"] == "--engine mypkg.decoder:factory --model models/llama-seed0.gguf"
    gate = [s for s in flow.steps("decoder") if s.get("name") == "gate the decoder"]
    assert gate and gate[0]["if"] == "env.DECODER_ARGS != ''" and "check-decoder $DECODER_ARGS" in gate[0]["run"]
    assert Workflow.parse(template_text("github-actions")).env["DECODER_ARGS"] == ""  # shipped: the job does nothing
    assert flow.env["INSTALL"] == "git+https://example.org/verispec.git" and flow.env["CHECK_ARGS"] == args
    assert flow.env["VERISPEC_REPORT_KEY"] == "${{ secrets.VERISPEC_REPORT_KEY }}"  # both jobs sign and check
    assert "pip install verispec\n" not in template_text("github-actions")
    assert Workflow.parse(template_text("github-actions")).env["INSTALL"].endswith(".whl")  # no index has verispec


@pytest.mark.parametrize(
    "argv",
    [["--shards", "0"], ["--shards", "257"], ["--install", " "], ["--check-args", "a\nb"], ["--decoder-args", "a\nb"]],
)
def test_bad_workflow_options_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["template", "github-actions", *argv]) == 2
    assert capsys.readouterr().out == ""
    assert cli.main(["template", "law-only-verifier", "--shards", "2"]) == 2  # not an option of that template


def test_the_workflow_steps_run_in_a_fresh_repository(tmp_path: Path) -> None:
    """A scratch git repository with the user's sampler (the law-only template): the rendered
    workflow's gate step for every matrix value, then its merge step, in bash as the runner runs
    them, with the signing secret set; verispec comes from this checkout (standing in for the
    install step, whose line is the workflow's own `pip install $INSTALL`)."""
    import subprocess

    from tests.support.user_project import VERIFIER_FLAGS, write_project

    project = write_project(tmp_path / "repo", template_text("law-only-verifier"))
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    flow = Workflow.parse(workflow_text(shards=2, check_args=f"{VERIFIER_FLAGS['correct']} --scale 0.01 --min-power 0"))
    assert flow.run_line("shard", "install") == "python -m pip install $INSTALL"
    values = {"github.workspace": str(project), "secrets.VERISPEC_REPORT_KEY": "00ff" * 8}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env.update({k: expand(v, values) for k, v in flow.env.items()})
    env.update(
        PYTHONPATH=f"{env['PYTHONPATH']}{os.pathsep}{REPO}",
        OPENBLAS_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )

    def step(line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            line, shell=True, executable="/bin/bash", cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    for shard in flow.matrix("shard", "shard"):
        done = step(expand(flow.run_line("shard", "gate one shard"), {"matrix.shard": str(shard)}))
        assert done.returncode == 0, done.stdout + done.stderr
    merged = step(flow.run_line("merge", "merged verdict"))
    assert merged.returncode == 0 and "PASSED" in merged.stdout, merged.stdout + merged.stderr
    assert json.loads((project / "shard-1.json").read_text())["signature"]  # the secret signed the shards
