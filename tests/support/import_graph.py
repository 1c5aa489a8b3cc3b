"""The static import walk that the import-graph and layering tests share: every ``import`` of a
checked package's files, wherever it is (top level, inside a function, under ``TYPE_CHECKING``, or
by name: ``importlib.import_module``, ``sys.modules``), as a graph of module names; and
:func:`find_cycle`. The rules it is read against are tests/test_import_graph.py (no cycle) and
tests/test_layering.py (which folder may import which)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
        elif isinstance(node, ast.Call) and node.args and by_name(node.func):
            out |= named_modules(node.args[0], known)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
            out |= named_modules(node.slice, known)
    return {m for m in out if m in known and m != name}


def by_name(func: ast.expr) -> bool:
    """A call that imports (or looks up an imported) module by its name."""
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return called in ("import_module", "__import__") or (called == "get" and ast.unparse(func) == "sys.modules.get")


def named_modules(arg: ast.expr, known: set[str]) -> set[str]:
    """The checked modules a name argument can be: a string, or every direct submodule of ``a`` for
    an f-string that starts ``"a."``."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value} & known
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        head = str(arg.values[0].value)
        if head.endswith("."):
            return {m for m in known if m.startswith(head) and "." not in m[len(head) :]}
    return set()


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


# every folder of the repository that holds Python, for the layering rule (tests/test_layering.py)
FOLDERS = ("reference", "engine", "spec", "proofs", "verispec", "tests", "lab", "examples")


def all_modules() -> dict[str, Path]:
    """Every Python file of every folder, by the name it is imported as (symlinks not followed)."""
    return modules(FOLDERS)
