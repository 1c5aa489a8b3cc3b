"""The tests' placement rule (tests/README.md), checked: among the tests sit only tests.

Directly in tests/ a Python file is a test (``test_*.py``), the fixtures (``conftest.py``) or the
package marker; every shared helper lives in the one support package, tests/support/, which holds
no test; a measurement script lives in lab/measure/ (tests/test_lab_layout.py).
"""

from __future__ import annotations

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
