"""No import loops inside reference/, engine/, spec/, proofs/ or verispec/: a static walk of every import.

Every ``import`` statement counts, wherever it is: at the top, inside a function (a lazy import
that hides a loop is still a loop for whoever reads the code) and under ``if TYPE_CHECKING:`` (a
type-only loop still ties two modules together). Only imports between modules of the checked
packages are edges; ``from package import name`` is an edge to ``package.name`` when that is a
module, else to ``package``. The implicit import of a parent package's ``__init__`` is not an edge.
An import by name is an edge too: ``importlib.import_module("a.b")`` (or ``__import__``),
``sys.modules.get("a.b")`` / ``sys.modules["a.b"]``, and ``import_module(f"a.{name}")`` is an edge to
every direct submodule of ``a`` (names held in data, such as a table of moved modules, are not followed).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.import_graph import PACKAGES, find_cycle, import_graph, imports_of, modules


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_walk_sees_lazy_and_type_only_imports(tmp_path: Path) -> None:
    """The checker itself: a loop through a function-level and a TYPE_CHECKING import is found."""
    a = tmp_path / "a.py"
    b = tmp_path / "b.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import X\n")
    b.write_text("def f():\n    import pkg.a\n")
    known = {"pkg.a", "pkg.b"}
    graph = {"pkg.a": imports_of("pkg.a", a, known), "pkg.b": imports_of("pkg.b", b, known)}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])
    assert find_cycle({"pkg.a": {"pkg.b"}, "pkg.b": set()}) is None


def test_the_walk_sees_imports_by_name(tmp_path: Path) -> None:
    """A loop through ``importlib.import_module(f"pkg.{name}")`` and ``sys.modules.get("pkg.a")``
    is found: an import by name is still an import."""
    a = tmp_path / "a.py"
    b = tmp_path / "b.py"
    a.write_text("import importlib\ndef load(name):\n    return importlib.import_module(f'pkg.{name}')\n")
    b.write_text("import sys\ndef peek():\n    return sys.modules.get('pkg.a')\n")
    known = {"pkg.a", "pkg.b"}
    graph = {"pkg.a": imports_of("pkg.a", a, known), "pkg.b": imports_of("pkg.b", b, known)}
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert find_cycle(graph) is not None


def test_the_seams_import_no_loop_model_or_engine() -> None:
    """reference/seams.py sits under everything: it imports no other checked module but sampling."""
    assert import_graph()["verispec.reference.seams"] <= {"verispec.reference.sampling"}


def test_the_walk_sees_the_import_root() -> None:
    """Edges are found through the one import root: the verifier imports the draw it uses."""
    graph = import_graph()
    assert "verispec.reference.sampling" in graph["verispec.reference.speculative"]
    assert "verispec.reference.errors" in graph["verispec.cli"]
    assert "verispec.commands.check_decoder" in graph["verispec.cli"]  # imported by name


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def absolute(module: str | None, level: int, importer: str, path: Path) -> str:
    """The absolute module a ``from`` import names (``from .x import y`` in a.b.c -> a.b.x)."""
    if not level:
        return module or ""
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    anchor = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join([*anchor, *([module] if module else [])])


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a chain of attribute reads on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_uses(name: str, path: Path, found: dict[str, Path]) -> list[str]:
    """Where module ``name`` leans on another module's private name: ``from a import _x`` (relative
    imports resolved) or ``a._x`` read through a name bound to module ``a`` (``import a.b as m``,
    ``from a import b`` when ``a.b`` is a module, ``import a.b`` then ``a.b._x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    bound: dict[str, str] = {}  # local name -> the module it is bound to
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = absolute(node.module, node.level, name, path)
            for a in node.names:
                if base in found and base != name and private(a.name):
                    out.append(f"{name} imports {base}.{a.name}")
                if f"{base}.{a.name}" in found:
                    bound[a.asname or a.name] = f"{base}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in found:
                    bound[a.asname] = a.name
                elif not a.asname:
                    top = a.name.split(".")[0]
                    bound[top] = top
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain = dotted(node.value)
            if chain is None:
                continue
            head, _, rest = chain.partition(".")
            module = ".".join(filter(None, [bound.get(head, ""), rest])) if head in bound else ""
            if module in found and module != name:
                out.append(f"{name} reads {module}.{node.attr}")
    return out


def private_imports(packages: tuple[str, ...] = (*PACKAGES, "lab", "tests")) -> list[str]:
    """Every private name one module leans on in another (see :func:`private_uses`)."""
    found = modules(packages)
    return [use for name, path in sorted(found.items()) for use in private_uses(name, path, found)]


def test_no_private_name_is_imported_across_modules() -> None:
    """A name another module needs is public (no underscore); a private one stays in its file."""
    assert private_imports() == []


def test_the_private_name_check_sees_every_form(tmp_path: Path) -> None:
    """The check's teeth: an absolute, a relative and an attribute use of a private name are found;
    a public name, a dunder and a module's own private name are not."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("_x = 1\ny = 2\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "from pkg.a import _x\nfrom .a import _x as z\nfrom pkg import a\nimport pkg.a as m\nimport pkg.a\n"
        "v = a._x + m._x + pkg.a._x + a.y + a.__name__.__len__()\n_own = 1\nw = _own\n"
    )
    found = {
        "pkg": tmp_path / "pkg" / "__init__.py",
        "pkg.a": tmp_path / "pkg" / "a.py",
        "pkg.b": tmp_path / "pkg" / "b.py",
    }
    uses = private_uses("pkg.b", found["pkg.b"], found)
    assert sorted(uses) == sorted(
        [
            "pkg.b imports pkg.a._x",
            "pkg.b imports pkg.a._x",
            "pkg.b reads pkg.a._x",
            "pkg.b reads pkg.a._x",
            "pkg.b reads pkg.a._x",
        ]
    )
