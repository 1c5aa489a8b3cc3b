"""The tests' placement rule (tests/README.md), checked: among the tests sit only tests.

Directly in tests/ a Python file is a test (``test_*.py``), the fixtures (``conftest.py``) or the
package marker; every shared helper lives in the one support package, tests/support/, which holds
no test; a measurement script lives in lab/measure/ (tests/test_lab_layout.py). A test takes what
it shares from the support package, never from another test module.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
FIXED = {"conftest.py", "__init__.py"}


def misplaced(folder: Path) -> list[str]:
    """Python files directly in ``folder`` that are neither tests nor the fixtures."""
    return sorted(p.name for p in folder.glob("*.py") if p.name not in FIXED and not p.name.startswith("test_"))


def test_only_tests_sit_among_the_tests() -> None:
    for folder in (TESTS, TESTS / "spec", TESTS / "proofs"):
        assert misplaced(folder) == [], f"{folder.name}/: move shared helpers to tests/support/"


def test_the_support_package_holds_no_test() -> None:
    assert sorted(p.name for p in (TESTS / "support").glob("test_*.py")) == []


def test_the_check_sees_a_helper_among_the_tests(tmp_path: Path) -> None:
    """The rule's teeth: a helper module beside the tests is found, a test and the fixtures are not."""
    for name in ("test_a.py", "conftest.py", "__init__.py", "helpers.py"):
        (tmp_path / name).write_text("")
    assert misplaced(tmp_path) == ["helpers.py"]


def imports_of_test_modules(path: Path) -> list[str]:
    """The test modules (``tests...test_*``) that the file at ``path`` imports, anywhere in it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        found += [n for n in names if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_imports_another_test_module() -> None:
    offenders = {
        str(p.relative_to(TESTS)): imports_of_test_modules(p)
        for p in sorted(TESTS.rglob("*.py"))
        if imports_of_test_modules(p)
    }
    assert offenders == {}, "move what tests share to tests/support/"


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    source = tmp_path / "test_b.py"
    source.write_text(
        "import tests.test_a\ndef f():\n    from tests.spec.test_c import x\nfrom tests.support.d import y\n"
    )
    assert imports_of_test_modules(source) == ["tests.test_a", "tests.spec.test_c"]
