"""One errors module: every exception class of verispec is defined in reference/errors.py, carries
an exit category, and is still importable under the module name it used to live in."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect

import pytest

from tests.support.import_graph import all_modules
from verispec.reference import errors
from verispec.reference.errors import EXIT_CATEGORIES, VerispecError, exit_category_of

ERRORS_MODULE = "verispec.reference.errors"
# the plain-Python example verifier imports nothing of ours (an independent oracle by design), so
# its one exception class, raised and caught inside it, cannot derive from VerispecError
# (shipped by `verispec template external-verifier` as verispec/data/templates/, a link to it)
OWN_EXCEPTIONS_ALLOWED = frozenset({"examples.external_verifier", "verispec.data.templates.external_verifier"})
EXCEPTION_NAMES = frozenset(
    {name for name, value in vars(errors).items() if inspect.isclass(value) and issubclass(value, BaseException)}
    | {name for name, value in vars(builtins).items() if inspect.isclass(value) and issubclass(value, BaseException)}
)

# the module names classes used to be defined in, and the names they still re-export
OLD_HOMES = {
    "verispec.spec.check": ["CheckError"],
    "verispec.spec.external": ["ExternalError", "Unsupported"],
    "verispec.spec.vectors.kinds": ["VectorError"],
    "verispec.spec.vectors": ["VectorError"],
    "verispec.spec.witness": ["WitnessError"],
    "verispec.atomic": ["OutputError"],
    "verispec.workload": ["WorkloadError"],
    "verispec.commands.bench": ["BenchError"],
    "verispec.commands.validate": ["UsageError"],
    "verispec.reference.chat": ["ChatFormatError"],
    "verispec.reference.quants": ["QuantSizeMismatch", "NonFiniteQuantInput"],
    "verispec.reference.gguf": ["GGUFTruncated", "GGUFSizeExceedsFile", "GGUFUnreadable", "GGUFBigEndian"],
    "verispec.engine.weights": ["InsufficientMemory"],
    "verispec.engine.matmul": ["BackendUnavailable"],
    "verispec.engine.blocks": ["NotBlockQuantized"],
    "verispec.spec.decoder.depth.law": ["DesignTooLarge"],
    "verispec.spec.decoder.depth.power": ["DeterministicLaw"],
    "verispec.spec.sequential": ["BudgetEnded"],
    "verispec.synth.models": ["SynthError"],
    "verispec.synth.quants": ["QuantError"],
}


def _base_names(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


def test_no_exception_class_is_defined_outside_the_errors_module() -> None:
    outside = []
    for module, path in all_modules().items():
        if module == ERRORS_MODULE or module in OWN_EXCEPTIONS_ALLOWED or module.startswith("tests."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and _base_names(node) & EXCEPTION_NAMES:
                outside.append(f"{module}.{node.name}")
    assert outside == []


def test_the_scan_sees_an_exception_class() -> None:
    tree = ast.parse("class Broken(VerificationError):\n    pass\nclass Plain(Exception):\n    pass\n")
    assert [_base_names(n) & EXCEPTION_NAMES for n in tree.body if isinstance(n, ast.ClassDef)] == [
        {"VerificationError"},
        {"Exception"},
    ]


def _error_classes() -> list[type[VerispecError]]:
    return [v for v in vars(errors).values() if inspect.isclass(v) and issubclass(v, VerispecError)]


def test_every_class_is_ours_and_has_an_exit_category() -> None:
    classes = [v for v in vars(errors).values() if inspect.isclass(v) and issubclass(v, BaseException)]
    # Terminated is SIGTERM's unwinding signal (like KeyboardInterrupt), deliberately not an error
    assert [c.__name__ for c in classes if not issubclass(c, VerispecError)] == ["Terminated"]
    assert not issubclass(errors.Terminated, Exception)
    assert all(c.exit_category in EXIT_CATEGORIES for c in _error_classes())
    assert len(_error_classes()) >= 40


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("UsageError", "usage"),
        ("CheckError", "usage"),
        ("OutputError", "usage"),
        ("BackendUnavailable", "usage"),
        ("ContextOverflow", "usage"),
        ("GGUFTruncated", "input"),
        ("ModelError", "input"),
        ("VectorError", "input"),
        ("CalibrationError", "usage"),
        ("ExternalError", "failed"),
        ("Unsupported", "failed"),
    ],
)
def test_categories_follow_the_module_docstring(name: str, category: str) -> None:
    cls = getattr(errors, name)
    assert cls.exit_category == category
    assert exit_category_of(cls("x")) == category


def test_a_foreign_exception_has_no_category() -> None:
    assert exit_category_of(ValueError("x")) is None
    assert exit_category_of(KeyboardInterrupt()) is None


@pytest.mark.parametrize("module", sorted(OLD_HOMES))
def test_old_module_names_re_export_the_one_class(module: str) -> None:
    imported = importlib.import_module(module)
    for name in OLD_HOMES[module]:
        assert getattr(imported, name) is getattr(errors, name)
