"""Every package's ``__init__`` is a true map: its docstring names each of its modules.

A newcomer opens a folder's ``__init__`` to learn what is there; a module it does not name is one
they will not find (and a map that names a module no longer there misleads). So every direct
child module and subpackage of each package appears in the docstring inside backticks
(``:mod:`.name```, ```name``` or ``:mod:`package.name```), and every module the docstring names
as ``:mod:`.name``` exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("reference", "engine", "spec", "proofs", "verispec", "lab")


def packages() -> list[Path]:
    """Every package folder of the product and the lab (the symlinks verispec/reference etc. not followed)."""
    found = []
    for top in TOPS:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT)
            if any((ROOT / Path(*rel.parts[: i + 1])).is_symlink() for i in range(len(rel.parts))):
                continue
            if "data" in rel.parts:
                continue
            found.append(init.parent)
    return found + [ROOT / "tests" / "support"]  # the tests' one support package is a map too


def children(package: Path) -> list[str]:
    """The direct child modules and subpackages of ``package`` (not ``__init__``/``__main__``)."""
    out = [p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")]
    out += [p.name for p in package.iterdir() if p.is_dir() and not p.is_symlink() and (p / "__init__.py").exists()]
    return sorted(out)


def named(docstring: str) -> set[str]:
    """The identifiers inside the docstring's backtick spans."""
    text = docstring.replace("``", "`")  # reST literals and roles alike
    return {word for span in re.findall(r"`([^`]+)`", text) for word in re.findall(r"\w+", span)}


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_package_map_names_every_module(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    missing = [name for name in children(package) if name not in named(doc)]
    assert missing == [], f"{package.relative_to(ROOT)}/__init__.py does not name {missing}"
    stale = [m for m in re.findall(r":mod:`\.(\w+)", doc) if m not in children(package)]
    assert stale == [], f"{package.relative_to(ROOT)}/__init__.py names modules that are not there: {stale}"


def test_the_check_sees_a_missing_module(tmp_path: Path) -> None:
    """The map check's teeth: a module the docstring leaves out is found."""
    (tmp_path / "__init__.py").write_text('"""- :mod:`.a`: one."""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    doc = ast.get_docstring(ast.parse((tmp_path / "__init__.py").read_text())) or ""
    assert [n for n in children(tmp_path) if n not in named(doc)] == ["b"]
