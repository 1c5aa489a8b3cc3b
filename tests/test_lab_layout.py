"""The lab stays out of the product: lab/ is never packaged, nothing packaged imports it, and the
experiments and microbenchmarks that moved there are not left behind in the package.

Static checks (no wheel is built here: the packages setuptools finds with pyproject's own
``packages.find`` settings are the wheel's packages); each lab module imports from the
repository root, as ``python -m lab.NAME`` runs it.
"""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("verispec", "reference", "engine", "spec", "proofs")  # the folders the wheel's verispec* holds
LAB_MODULES = sorted(
    ".".join(p.relative_to(ROOT / "lab").with_suffix("").parts)
    for p in (ROOT / "lab").rglob("*.py")
    if p.stem != "__init__"
)  # top-level experiments and the measurements under lab/measure/ ("measure.NAME")
# What moved to lab/ (experiments, microbenchmarks, table printers): none may be packaged again.
MOVED = {
    "measure_early_exit",
    "early_exit_shift",
    "bounded_mean",
    "fused_bench",
    "workload_tables",
    "workload_by_request",
}


def _wheel_packages() -> list[str]:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT), include=find["include"], exclude=find.get("exclude", ()))


def test_the_wheel_packages_are_verispec_only() -> None:
    packages = _wheel_packages()
    assert "verispec" in packages and "verispec.bench" in packages
    assert all(p == "verispec" or p.startswith("verispec.") for p in packages), packages


def test_no_moved_experiment_is_left_in_a_packaged_folder() -> None:
    packaged = {p.stem for folder in PRODUCT for p in (ROOT / folder).rglob("*.py")}
    assert not MOVED & packaged, MOVED & packaged
    assert MOVED <= set(LAB_MODULES)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_nothing_packaged_imports_the_lab() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m == "lab" or m.startswith("lab."))
        for folder in PRODUCT
        for p in (ROOT / folder).rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("name", LAB_MODULES)
def test_each_lab_module_imports_from_the_repository_root(name: str) -> None:
    module = importlib.import_module(f"lab.{name}")
    assert module.__doc__, f"lab/{name.replace('.', '/')}.py says what it measures"


def test_the_measurement_scripts_live_in_the_lab() -> None:
    """A script that measures (and prints numbers a docs page quotes) is not a test: it lives in
    lab/measure/, never among the tests."""
    assert sorted(p.name for p in (ROOT / "tests").rglob("measure_*.py")) == []
    measures = [name for name in LAB_MODULES if name.startswith("measure.")]
    assert len(measures) >= 6, measures
