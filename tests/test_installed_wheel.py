"""The gate as a user meets it: the wheel built and installed into a fresh venv, run from a project
that has its own top-level ``engine/`` and ``spec/`` packages (tests/support/user_project.py).

What is shown, all through the INSTALLED wheel and its console script:

- the wheel claims no top-level import name but ``verispec`` (its file list), and ``import
  verispec`` in the venv is the wheel's copy;
- ``verispec check ... --law-only --junit-xml``: the correct sampler passes (exit 0, no failed
  testcase), the broken one fails (exit 1), while the user's ``spec.check`` / ``spec.vectors`` /
  ``engine.generate`` (decoys that raise on import) are never touched; the same for
  ``verispec check-decoder`` (our loop on a tiny synthetic GGUF);
- the pytest plugin, loaded from the wheel's ``pytest11`` entry point, in the user's own suite;
- the shipped CI workflow (``verispec template github-actions``), its commands RUN as the workflow
  runs them: the install step, the shard matrix (concurrently, as CI's jobs), the merge step; the
  correct sampler's merged verdict passes, the broken one's fails (shard 1, which runs the
  deterministic properties, fails too);
- the shipped templates: the correct sampler IS ``verispec template law-only-verifier``'s output,
  and the wire-protocol example verifier answers the vectors through ``--verifier-cmd``.

The venv: ``python -m venv --without-pip`` plus a ``.pth`` line naming this interpreter's
site-packages, so NumPy and pytest (and pip) come from there without a download. Only the line is
added: the ``.pth`` files in that folder (an editable install of verispec among them) are not run,
so ``verispec`` resolves to the wheel alone (asserted). pip runs with ``--ignore-installed`` so it
never touches the packages it sees through that line.

Sample sizes: every law-only run is at ``--scale 0.01`` (each statistical test draws ~1,000-10,000
verdicts, ~2 s of CPU per run): the reported power is then low, and what is asserted is the
verdict's direction (`--min-power 0` accepts that low power: a scaled-down pass is otherwise
inconclusive), which this scale decides with certainty for these two samplers (the broken
one emits zero-mass tokens, caught by the deterministic ``range_and_mass``; the correct one passes
with false-alarm probability <= the suite's alpha, its stream keyed and therefore reproducible).
Four shards, as the template ships: enough for a real matrix, at ~2 s each.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.user_project import REPO, SAMPLER_TEMPLATE, VERIFIER_FLAGS, write_project
from tests.support.workflow import Workflow, expand

pytestmark = pytest.mark.slow  # builds a wheel and runs ~20 processes (~60 s of CPU)

SCALE = "0.01"  # of the statistical N (see the module docstring)
SOURCE = ("pyproject.toml", "README.md", "verispec", "reference", "engine", "spec", "proofs", "examples")
TIMEOUT = 300


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    project: Path
    env: dict[str, str]

    def run(self, line: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """A shell line as a CI step runs it (bash), in the user's project."""
        return subprocess.run(
            line,
            shell=True,
            executable="/bin/bash",
            cwd=cwd or self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )


def _build_wheel(root: Path) -> Path:
    """The wheel of a copy of the source (the build writes build/ and *.egg-info beside its input)."""
    source = root / "source"
    source.mkdir()
    for name in SOURCE:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    dist = root / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT,
    )
    (wheel,) = dist.glob("verispec-*.whl")
    return wheel


def _venv(root: Path) -> Path:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "verispec_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    wheel = _build_wheel(root)
    venv = _venv(root)
    project = root / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
        OPENBLAS_NUM_THREADS="1",
        VERISPEC_THREADS="1",
    )
    flow = Workflow.parse((REPO / "verispec" / "data" / "templates" / "github-actions.yml").read_text(encoding="utf-8"))
    # the workflow's env, in a repository without the signing secret (GitHub then gives an empty string)
    values = {"github.workspace": str(project), "secrets.VERISPEC_REPORT_KEY": ""}
    env.update({k: expand(v, values) for k, v in flow.env.items()})
    env.update(
        INSTALL=f"--no-index --no-deps --ignore-installed {wheel}",  # ... with what a user edits in it
        CHECK_ARGS=f"{VERIFIER_FLAGS['correct']} --scale {SCALE} --min-power 0",
    )
    setup = Installed(wheel, venv, project, env)
    install = setup.run(flow.run_line("shard", "install"))  # the workflow's own install step
    assert install.returncode == 0, install.stderr
    sampler = setup.run("verispec template law-only-verifier")  # the user starts from the shipped template
    assert sampler.returncode == 0 and sampler.stdout == SAMPLER_TEMPLATE.read_text(encoding="utf-8")
    write_project(project, sampler.stdout)
    return setup


def test_the_wheel_claims_only_verispec(installed: Installed) -> None:
    top = {name.split("/")[0] for name in zipfile.ZipFile(installed.wheel).namelist()}
    assert top == {"verispec", "verispec-0.1.0.dist-info"}
    where = installed.run('python -c "import verispec, verispec.spec.check as c; print(verispec.__file__, c.__file__)"')
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(installed.venv) for p in where.stdout.split())
    decoy = installed.run('python -c "import spec.check"')  # the user's own names are on the path, and bite
    assert decoy.returncode == 1 and "verispec imported the user project's spec.check" in decoy.stderr


def test_the_wheel_ships_the_tile_kernel_and_it_builds_there(installed: Installed, tmp_path: Path) -> None:
    """The int8 tile head's C source is package data (the wheel stays pure Python); the installed
    package compiles it on first use where a C compiler is (engine/native.py), and names its
    NumPy fallback where none is."""
    shipped = zipfile.ZipFile(installed.wheel).namelist()
    assert {"verispec/engine/kernels/q8_0_tile.c", "verispec/engine/kernels/half_float.h"} <= set(shipped)
    script = "from verispec.engine import tile_head; print(tile_head.default_kernel()[1])"
    built = installed.run(f"VERISPEC_KERNEL_CACHE={tmp_path} python -c '{script}'")
    assert built.returncode == 0, built.stderr
    has_compiler = any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))
    assert built.stdout.startswith("tile (") and ("numpy" not in built.stdout) == has_compiler, built.stdout
    if has_compiler:  # built into the cache it was given
        assert list(tmp_path.glob("q8_0_tile-*.so"))


def _junit_failures(path: Path) -> int:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return int(suite.get("failures", "-1"))


def test_the_console_script_imports_the_users_module_without_pythonpath(installed: Installed) -> None:
    result = installed.run(f"env -u PYTHONPATH verispec check {VERIFIER_FLAGS['correct']} --only contract")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_console_script_gates_both_samplers(installed: Installed) -> None:
    correct = installed.run(
        f"verispec check {VERIFIER_FLAGS['correct']} --scale {SCALE} --min-power 0 --junit-xml correct.xml"
    )
    assert correct.returncode == 0, correct.stdout + correct.stderr
    assert "PASSED" in correct.stdout and _junit_failures(installed.project / "correct.xml") == 0
    broken = installed.run(f"verispec check {VERIFIER_FLAGS['broken']} --scale {SCALE} --junit-xml broken.xml")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "FAILED: range_and_mass" in broken.stdout and _junit_failures(installed.project / "broken.xml") > 0


def test_check_decoder_runs_beside_the_users_engine_package(installed: Installed, tmp_path: Path) -> None:
    made = installed.run(f"verispec models synth --arch llama --out {tmp_path}")  # the wheel's own writer, NumPy only
    assert made.returncode == 0, made.stderr
    model = Path(made.stdout.strip())
    result = installed.run(f"verispec check-decoder --ours --model {model} --depth 0 --m 1 --junit-xml decoder.xml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _junit_failures(installed.project / "decoder.xml") == 0


def test_the_users_suite_gates_with_the_plugin_from_the_entry_point(installed: Installed) -> None:
    result = installed.run(
        f"python -m pytest -q -p no:cacheprovider -p no:randomly -n 0 --verispec-scale {SCALE} --verispec-min-power 0 tests"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def _matrix(installed: Installed, flow: Workflow, check_args: str) -> list[subprocess.CompletedProcess[str]]:
    """The shard job's gate step for every matrix value, concurrently (as CI runs the jobs)."""
    env = {**installed.env, "CHECK_ARGS": check_args}
    line = flow.run_line("shard", "gate one shard")
    jobs = [
        subprocess.Popen(
            expand(line, {"matrix.shard": str(i)}),
            shell=True,
            executable="/bin/bash",
            cwd=installed.project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in flow.matrix("shard", "shard")
    ]
    done = []
    for job in jobs:
        out, err = job.communicate(timeout=TIMEOUT)
        done.append(subprocess.CompletedProcess(job.args, job.returncode, out, err))
    return done


@pytest.mark.parametrize("sampler", ["correct", "broken"])
def test_the_ci_workflow_runs_as_shipped(installed: Installed, sampler: str, tmp_path: Path) -> None:
    shipped = installed.run("verispec template github-actions")
    assert (
        shipped.returncode == 0 and shipped.stdout == (REPO / "verispec/data/templates/github-actions.yml").read_text()
    )
    flow = Workflow.parse(shipped.stdout)
    for stale in installed.project.glob("shard-*"):  # the other parametrization's artifacts
        stale.unlink()
    shards = _matrix(installed, flow, f"{VERIFIER_FLAGS[sampler]} --scale {SCALE} --min-power 0")
    merged = installed.run(flow.run_line("merge", "merged verdict"))
    reports = sorted(p.name for p in installed.project.glob("shard-*"))
    assert reports == sorted(f"shard-{i}.{ext}" for i in flow.matrix("shard", "shard") for ext in ("json", "xml"))
    if sampler == "correct":
        assert [s.returncode for s in shards] == [0, 0, 0, 0], [s.stderr for s in shards]
        assert merged.returncode == 0, merged.stdout + merged.stderr
        assert "PASSED" in merged.stdout and _junit_failures(installed.project / "verispec.xml") == 0
    else:
        assert shards[0].returncode == 1  # shard 1 runs the deterministic properties: range_and_mass fails
        assert merged.returncode == 1, merged.stdout + merged.stderr
        assert _junit_failures(installed.project / "verispec.xml") > 0


def test_the_shipped_wire_verifier_answers_the_vectors(installed: Installed) -> None:
    line = (
        "verispec template external-verifier > wire_verifier.py && verispec check "
        '--verifier-cmd "python wire_verifier.py" --only vectors_sampled vectors_greedy contract'
    )
    result = installed.run(line)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASS  ") == 3
