"""No import loops inside reference/, engine/ or verispec/: a static walk of every import.

Every ``import`` statement counts, wherever it is: at the top, inside a function (a lazy import
that hides a loop is still a loop for whoever reads the code) and under ``if TYPE_CHECKING:`` (a
type-only loop still ties two modules together). Only imports between modules of the checked
packages are edges; ``from package import name`` is an edge to ``package.name`` when that is a
module, else to ``package``. The implicit import of a parent package's ``__init__`` is not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Edges to modules outside these packages are not followed.
PACKAGES = ("reference", "engine", "spec", "proofs", "verispec")
# top-level folders imported under the one import root (verispec/reference etc. are symlinks)
UNDER_VERISPEC = frozenset({"reference", "engine", "spec", "proofs"})


def module_name(path: Path) -> str:
    """The name the code imports a file by: reference/x.py is ``verispec.reference.x``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts and parts[0] in UNDER_VERISPEC:
        parts.insert(0, "verispec")
    return ".".join(parts)


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every Python file of ``packages``, by the name it is imported as (symlinks not followed)."""
    return {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The checked modules that ``name`` imports (anywhere in its file)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in sorted(graph):
        if state.get(root):
            continue
        path: list[str] = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def import_graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    found = modules(packages)
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


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


def test_the_seams_import_no_loop_model_or_engine() -> None:
    """reference/seams.py sits under everything: it imports no other checked module but sampling."""
    assert import_graph()["verispec.reference.seams"] <= {"verispec.reference.sampling"}


def test_the_walk_sees_the_import_root() -> None:
    """Edges are found through the one import root: the verifier imports the draw it uses."""
    graph = import_graph()
    assert "verispec.reference.sampling" in graph["verispec.reference.speculative"]
    assert "verispec.reference.errors" in graph["verispec.cli"]


def private_imports(packages: tuple[str, ...] = (*PACKAGES, "lab", "tests")) -> list[str]:
    """``from a import _name`` across modules: a private name another module leans on."""
    found = modules(packages)
    out = []
    for name, path in sorted(found.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in found and node.module != name:
                out += [
                    f"{name} imports {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    return out


def test_no_private_name_is_imported_across_modules() -> None:
    """A name another module needs is public (no underscore); a private one stays in its file."""
    assert private_imports() == []
