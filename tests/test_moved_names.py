"""The old module names of the decoder gate still import, as the same modules, with a warning."""

from __future__ import annotations

import importlib
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

import verispec
from verispec.moved import MOVED

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_the_new_module_and_warns(old: str) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__ is not None and module.__spec__.name == MOVED[old]  # its own spec, untouched
    assert any(issubclass(w.category, DeprecationWarning) and MOVED[old] in str(w.message) for w in caught)


def test_every_new_name_exists_and_no_old_file_is_left() -> None:
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        folder = "spec" if old.startswith("verispec.spec.") else "verispec"
        leftover = ROOT / folder / Path(*old.split(".")[2 if folder == "spec" else 1 :]).with_suffix(".py")
        assert not leftover.exists(), f"{leftover} is still there beside its new home {new}"


def test_the_finder_looks_up_every_old_name() -> None:
    """``import verispec``'s finder reads the table only for names with these prefixes: each old name has one."""
    assert all(old.startswith(verispec.MovedNames.PREFIXES) for old in MOVED)


def test_the_version_is_the_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert verispec.__version__ == project["version"]
