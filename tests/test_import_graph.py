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
