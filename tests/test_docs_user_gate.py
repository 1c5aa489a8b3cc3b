"""A new user's gate, from the README and docs alone: the commands they show, run as written in a
scratch project outside the tree, on a correct and a broken verifier (a public implementation's
included) and a correct and a broken whole decoder, on the command line, in pytest and through the
CI workflow's shard and merge lines; every verdict states its power and every exit status is the
documented one.

The commands are EXTRACTED from the pages (a line of a fenced block, found by a fragment of it;
backslash continuations joined; the comment dropped), so a page that changes a command changes
what runs here, and a command that no longer exists fails here. What the test adds to a line is
the user's own names (the README's ``mypkg.spec:draw`` becomes the user's broken copy for the
broken run) and the small-design flags the same pages document, so the whole file stays at about
a minute of CPU:

- ``--only`` with a statistical test at FULL power (``stat_verdict_law_k1``: N = 567,000 fixed or
  595,200 sequential, power 0.99 against TV 0.005; ``stat_strata_tail_v262144``: the LLM-scale
  strata, power 0.99 against TV 0.1): the verdict says "power 0.99";
- ``--scale 0.05 --min-power 0`` (README, docs/ci.md: the quick look) where a whole suite must
  run (the workflow's merge refuses a partial run): the claim says the power reached and that
  ``--min-power 0`` accepted it; without ``--min-power`` the same run exits 3, never 0;
- the decoder: the two-stage section's tiny synthetic model (``verispec models synth``) under the
  confirmation's design (``--depth 8 --tv 0.2 --fraction 1``: power 0.99 against TV 0.2 on every
  position), the first-m test on for the command line and off (``--no-first-m``, documented) in
  pytest;
- ``--fail-fast`` for the textbook verifier (it fails at the bit-exact replay).

``CI=true`` is set, as CI runners set it: a deterministic failure skips the statistics.

How verispec is reached: the checkout, not an installed copy. A ``verispec`` shim on PATH runs
``python -m verispec`` with the checkout appended to whatever ``PYTHONPATH`` the line sets (the
docs' ``PYTHONPATH=.`` still puts the project first); pytest loads the plugin by module name. The
install line itself (``pip install``) and a fresh venv are tests/test_installed_wheel.py's (a
wheel build and a venv are too slow to repeat here); the full-power walk-through, timed, is
lab/user_gate_walkthrough.sh.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.user_project import SAMPLER_TEMPLATE, broken_sampler
from tests.support.workflow import Workflow, expand

pytestmark = pytest.mark.slow  # ~20 processes, about a minute of CPU

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
TIMEOUT = 300
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

# The small designs added to the documented lines (see the module docstring).
FULL_POWER_SUBSET = "--only range_and_mass stat_verdict_law_k1 stat_strata_tail_v262144"
QUICK_LOOK = "--scale 0.05 --min-power 0"
DECODER_DESIGN_OF_THE_CONFIRMATION = "--depth 8 --tv 0.2 --fraction 1"

# The user's broken decoder: the model-api template with one index changed, the classic bug of a
# fully accepted cycle's bonus token drawn from the last draft's row instead of the row after it.
DECODER_LINE = (
    "            rows[len(drafts)], history + kept, self._params_at(params, position + len(drafts), min_tokens)"
)
DECODER_BUG = DECODER_LINE.replace("rows[len(drafts)]", "rows[len(drafts) - 1]")


def blocks(page: Path, language: str | None = None) -> list[str]:
    """The fenced blocks of a page (of one language when given)."""
    return [m.group(2) for m in FENCE.finditer(page.read_text(encoding="utf-8")) if language in (None, m.group(1))]


def documented(page: Path, fragment: str) -> str:
    """The one shell line of ``page``'s fenced blocks that holds ``fragment``: continuations
    joined, the trailing ``# comment`` dropped (AssertionError when not exactly one)."""
    found = []
    for block in blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            code = re.sub(r"\s+", " ", line.split("  #")[0]).strip()
            if fragment in code:
                found.append(code)
    assert len(found) == 1, f"{page.name}: {len(found)} command lines hold {fragment!r}: {found}"
    return found[0]


def documented_python(page: Path, fragment: str) -> str:
    """The top-level ``def`` of ``page``'s python blocks whose text holds ``fragment``."""
    for block in blocks(page, "python"):
        for chunk in re.split(r"\n(?=def |\S)", block):
            if chunk.startswith("def ") and fragment in chunk:
                return chunk.rstrip() + "\n"
    raise AssertionError(f"{page.name}: no python def holds {fragment!r}")


@dataclass(frozen=True)
class Project:
    root: Path
    env: dict[str, str]

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        """A shell line as the user types it, in the project."""
        return subprocess.run(
            line,
            shell=True,
            executable="/bin/bash",
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )


def _shim(folder: Path) -> None:
    folder.mkdir()
    shim = folder / "verispec"
    shim.write_text(
        f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{REPO}" exec {shlex.quote(sys.executable)} -m verispec "$@"\n',
        encoding="utf-8",
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("user") / "project"
    root.mkdir()
    _shim(root.parent / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{root.parent / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        CI="true",
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        VERISPEC_THREADS="1",
    )
    user = Project(root, env)
    package = root / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    # the user's files: the shipped templates (through the documented `verispec template NAME`)
    sampler = user.run("verispec template law-only-verifier")
    assert sampler.returncode == 0 and sampler.stdout == SAMPLER_TEMPLATE.read_text(encoding="utf-8"), sampler.stderr
    (package / "sampler.py").write_text(sampler.stdout, encoding="utf-8")
    (package / "broken_sampler.py").write_text(broken_sampler(sampler.stdout), encoding="utf-8")
    decoder = user.run("verispec template model-api-decoder")
    assert decoder.returncode == 0 and decoder.stdout.count(DECODER_LINE) == 1, decoder.stderr
    (package / "decoder.py").write_text(decoder.stdout, encoding="utf-8")
    (package / "broken_decoder.py").write_text(decoder.stdout.replace(DECODER_LINE, DECODER_BUG), encoding="utf-8")
    # the README's mypkg.spec: a textbook protocol verifier (verify) and the sampler (draw); mypkg.broken: the bug
    textbook = (REPO / "tests" / "support" / "textbook_verifier.py").read_text(encoding="utf-8")
    draws = "from mypkg.{0} import verify as draw, verify_batch as draw_batch  # noqa: E402, F401\n"
    (package / "spec.py").write_text(textbook + draws.format("sampler"), encoding="utf-8")
    (package / "broken.py").write_text(draws.format("broken_sampler"), encoding="utf-8")
    return user


def _ok(result: subprocess.CompletedProcess[str], status: int) -> str:
    assert result.returncode == status, f"exit {result.returncode}, wanted {status}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_readme_verifier_lines_pass_and_fail_at_a_stated_power(project: Project) -> None:
    law_only = documented(README, "--law-only --verifier mypkg.spec:draw")  # ... --budget 600
    passed = _ok(project.run(f"{law_only} {FULL_POWER_SUBSET}"), 0)
    assert "PASSED" in passed and "lossless at power 0.99" in passed
    broken = _ok(project.run(f"{law_only.replace('mypkg.spec:', 'mypkg.broken:')} {FULL_POWER_SUBSET}"), 1)
    assert "FAILED" in broken and "FAIL  range_and_mass" in broken
    # a quick look short of the design's power is inconclusive unless --min-power accepts it, and says so
    quick = law_only.replace(" --budget 600", "") + " --only stat_verdict_law_k1 --scale 0.05"
    assert "INCONCLUSIVE: underpowered" in _ok(project.run(quick), 3)
    assert "accepted by --min-power 0" in _ok(project.run(quick + " --min-power 0"), 0)


def test_a_textbook_verifier_is_told_it_is_not_bit_exact_not_that_it_is_lossy(project: Project) -> None:
    protocol = documented(README, "--verifier mypkg.spec:verify --batch-verifier")
    out = _ok(project.run(f"{protocol} --fail-fast"), 1)
    assert "FAILED: not bit-exact with the protocol" in out and "try --law-only" in out
    assert "not lossless" not in out


def test_the_reference_passes_the_documented_protocol_line_at_full_power(project: Project) -> None:
    reference = documented(DOCS / "checking-verifiers.md", "--verifier verispec.reference.speculative:verify_sampled")
    only = "--only vectors_sampled vectors_greedy contract stat_verdict_law_k1 stat_strata_tail_v262144"
    out = _ok(project.run(f"{reference} {only}"), 0)
    assert "PASS  vectors_greedy" in out and "lossless at power 0.99" in out


def test_a_public_implementation_transformers_passes_law_only(project: Project) -> None:
    pytest.importorskip("transformers.generation.utils")
    line = documented(DOCS / "checking-verifiers.md", "--verifier examples.transformers_verifier:verify")
    assert line.startswith("OMP_NUM_THREADS=1 verispec check --law-only") and "--only $ONLY --shard $i/8" in line
    (project.root / "examples").mkdir(exist_ok=True)
    (project.root / "examples" / "transformers_verifier.py").write_text(
        (REPO / "examples" / "transformers_verifier.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    unsharded = line.split(" --only")[0]  # its own run, no shards: the law's tests at a quick look
    out = _ok(project.run(f"{unsharded} --only range_and_mass stat_verdict_law_k1 {QUICK_LOOK}"), 0)
    assert "PASSED" in out and re.search(r"lossless at power 0\.\d+ \(below the design's 0\.99: accepted", out)


def test_a_whole_decoder_passes_and_its_broken_copy_fails_on_a_tiny_model(project: Project) -> None:
    made = _ok(project.run(documented(DOCS / "checking-decoders.md", "verispec models synth --arch llama")), 0)
    model = made.strip()
    assert model == "models/llama-seed0.gguf" and (project.root / model).is_file()
    confirmation = documented(DOCS / "checking-decoders.md", "--model smollm2-135m --depth 8 --tv 0.2 --fraction 1")
    assert DECODER_DESIGN_OF_THE_CONFIRMATION in confirmation
    on_the_tiny_model = confirmation.replace("--model smollm2-135m", f"--model {model}")
    passed = project.run(on_the_tiny_model)
    assert "design:" in passed.stderr and "power 0.99 vs TV 0.2" in passed.stderr  # the design up front
    assert "PASS  " in _ok(passed, 0) and "first-m test passed" in passed.stdout
    broken = project.run(on_the_tiny_model.replace("mypkg.decoder:", "mypkg.broken_decoder:"))
    assert "FAIL  " in _ok(broken, 1) and "first-m test" in broken.stdout


# the confirmation's design, first-m test off (documented: --no-first-m), for the snippet's decoder
SMALL_DECODER_DESIGN = ", depth=8, tv=0.2, fraction=1, first_m=False)"


@pytest.mark.parametrize("subject", ["correct", "broken"])
def test_the_pytest_plugin_gates_the_sampler_and_the_decoder(project: Project, subject: str) -> None:
    quick = documented_python(README, "def test_my_sampler(verispec_check)")
    flags = re.search(r"quick look: (--verispec-scale \S+ --verispec-min-power \S+)", quick)
    assert flags is not None
    model = project.root / "models" / "llama-seed0.gguf"
    if not model.is_file():
        _ok(project.run("verispec models synth --arch llama --out models/ --seed 0"), 0)
    suite = project.root / f"test_{subject}_gate.py"
    sampler, decoder = ("spec", "decoder") if subject == "correct" else ("broken", "broken_decoder")
    snippet = documented_python(DOCS / "ci.md", "def test_my_decoder(verispec_check_decoder)")
    assert snippet.count('model="models/llama-seed0.gguf")') == 1
    small = snippet.replace(
        'model="models/llama-seed0.gguf")', 'model="models/llama-seed0.gguf"' + SMALL_DECODER_DESIGN
    )
    user_suite = (
        quick.replace("mypkg.spec:", f"mypkg.{sampler}:")
        + "\n\n"
        + small.replace("mypkg.decoder:", f"mypkg.{decoder}:")
    )
    suite.write_text(user_suite, encoding="utf-8")
    plugin = "-p no:verispec -p verispec.pytest_plugin -p no:cacheprovider -p no:randomly -p no:xdist"
    python = shlex.quote(sys.executable)
    result = project.run(
        f"PYTHONPATH={REPO} {python} -m pytest -q {plugin} {flags.group(1)} --junit-xml {subject}.xml {suite.name}"
    )
    if subject == "correct":
        assert "2 passed" in _ok(result, 0)
        assert "verispec_claim" in (project.root / "correct.xml").read_text(encoding="utf-8")
    else:
        assert "2 failed" in _ok(result, 1) and "range_and_mass" in result.stdout


@pytest.mark.parametrize("subject", ["correct", "broken"])
def test_the_workflows_lines_gate_the_sampler_and_the_decoder(project: Project, subject: str, tmp_path: Path) -> None:
    made = documented(DOCS / "ci.md", "verispec template github-actions --shards 8")
    args = re.search(r'--check-args="([^"]+)"', made)
    decoder = re.search(r'--decoder-args="([^"]+)"', made)
    assert args is not None and args.group(1).startswith("--verifier mypkg.sampler:verify")
    assert decoder is not None and decoder.group(1).startswith("--engine mypkg.decoder:factory")
    check_args = args.group(1) + f" {QUICK_LOOK}"
    decoder_args = decoder.group(1) + f" {DECODER_DESIGN_OF_THE_CONFIRMATION} --no-first-m"
    if subject == "broken":
        check_args = check_args.replace("mypkg.sampler:", "mypkg.broken_sampler:")
        decoder_args = decoder_args.replace("mypkg.decoder:", "mypkg.broken_decoder:")
    rendered = (
        made.replace("--shards 8", "--shards 2")
        .replace(args.group(0), f"--check-args={shlex.quote(check_args)}")
        .replace(decoder.group(0), f"--decoder-args={shlex.quote(decoder_args)}")
    )
    flow = Workflow.parse(_ok(project.run(rendered), 0))
    assert flow.matrix("shard", "shard") == [1, 2] and flow.env["CHECK_ARGS"] == check_args
    work = Project(tmp_path, {**project.env, **{k: expand(v, _values(project)) for k, v in flow.env.items()}})
    (tmp_path / "mypkg").symlink_to(project.root / "mypkg")  # the repository's checkout: the user's package
    shards = [work.run(expand(flow.run_line("shard", "gate one shard"), {"matrix.shard": str(i)})) for i in (1, 2)]
    merged = work.run(flow.run_line("merge", "merged verdict"))
    gated = work.run(flow.run_line("decoder", "gate the decoder"))
    if subject == "correct":
        assert [s.returncode for s in shards] == [0, 0], [s.stderr for s in shards]
        out = _ok(merged, 0)
        assert "PASSED" in out and "accepted by --min-power 0" in out
        assert "power 0.99 vs TV 0.2" in _ok(gated, 0)
    else:
        assert shards[0].returncode == 1  # shard 1 runs the deterministic properties: range_and_mass fails
        assert "FAILED" in _ok(merged, 1)
        assert "FAILED" in _ok(gated, 1)
    assert (tmp_path / "verispec.xml").is_file() and (tmp_path / "decoder.xml").is_file()


def _values(project: Project) -> dict[str, str]:
    """The workflow's expressions in a repository without the signing secret (GitHub: empty)."""
    return {"github.workspace": ".", "secrets.VERISPEC_REPORT_KEY": ""}
