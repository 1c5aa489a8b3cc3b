"""Which folder may import which: a static walk of every import (tests/support/import_graph.py's walker).

The rule, folder by folder (an import of its own folder is always allowed):

    reference/   nothing of ours: the reference is the meaning, it depends on nothing built on it
    engine/      reference/ (the fast engine is checked against the reference it imports)
    spec/        reference/ (the spec checks implementations against the reference's definitions)
    proofs/      nothing of ours (z3 alone; its link table names code by path strings, no import)
    verispec/    everything: the CLI and the API put the pieces together
    tests/, lab/, examples/   imported by none of the above (they are users of the product)
    lab/measure/ also tests/support/ (and nothing else of tests/): it measures the tests' own
                 cases at full scale; the rest of lab/ imports only the product

and examples/external_verifier.py imports nothing of ours: it is the independent plain-Python
oracle, written from the protocol text. Every import counts (top level, inside a function, under
``TYPE_CHECKING``). The exceptions that hold today, each with its reason, are :data:`EXCEPTIONS`.
"""

from __future__ import annotations

import functools

from tests.support.import_graph import FOLDERS, import_graph

MAY_IMPORT: dict[str, frozenset[str]] = {
    "reference": frozenset(),
    "engine": frozenset({"reference"}),
    "spec": frozenset({"reference"}),
    "proofs": frozenset(),
    "verispec": frozenset({"reference", "engine", "spec", "proofs"}),
    "tests": frozenset(FOLDERS),
    "lab": frozenset({"reference", "engine", "spec", "proofs", "verispec"}),
    "examples": frozenset({"reference", "engine", "spec", "proofs", "verispec"}),
}
# the one part of the lab that may import the tests' support package (and no other test module)
LAB_MEASURE, TESTS_SUPPORT = "lab.measure", "tests.support"
# (importing module, imported module): why the rule bends there
EXCEPTIONS: dict[tuple[str, str], str] = {}
INDEPENDENT = ("examples.external_verifier",)  # imports nothing of ours at all


def folder_of(module: str) -> str:
    """``verispec.reference.x`` -> reference; ``verispec.cli`` -> verispec; ``tests.x`` -> tests."""
    parts = module.split(".")
    if parts[0] == "verispec" and len(parts) > 1 and parts[1] in MAY_IMPORT and parts[1] != "verispec":
        return parts[1]
    return parts[0]


@functools.cache  # one walk for all the tests: the graph is read, never changed
def edges() -> dict[str, set[str]]:
    return import_graph(FOLDERS)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        here = folder_of(module)
        for target in sorted(targets):
            there = folder_of(target)
            if there == here or there in MAY_IMPORT[here] or (module, target) in EXCEPTIONS:
                continue
            if within(module, LAB_MEASURE) and within(target, TESTS_SUPPORT):
                continue
            out.append(f"{module} ({here}/) imports {target} ({there}/)")
        if module in INDEPENDENT and targets:
            out.append(f"{module} is an independent oracle but imports {sorted(targets)}")
    return out


def test_every_folder_imports_only_what_the_layering_allows() -> None:
    assert violations(edges()) == []


def test_every_exception_still_holds() -> None:
    """An exception whose module still imports nothing of the kind is removed from the list, so the
    rule stays tight (one whose module has moved away, as the bench modules will, simply no longer
    applies)."""
    graph = edges()
    stale = [pair for pair in EXCEPTIONS if pair[0] in graph and pair[1] not in graph[pair[0]]]
    assert stale == []


def test_the_walk_sees_every_folder() -> None:
    """The checker's own teeth: it finds the real edges it must, and flags a forbidden one."""
    graph = edges()
    assert "verispec.reference.sampling" in graph["verispec.engine.sampling"]
    assert "verispec.reference.speculative" in graph["verispec.spec.strata"]
    assert {folder_of(m) for m in graph} >= {"reference", "engine", "spec", "proofs", "verispec", "tests"}
    forbidden = {
        "verispec.reference.sampling": {"verispec.engine.sampling"},
        "verispec.spec.strata": {"tests.test_layering"},
    }
    assert len(violations(forbidden)) == 2


def test_only_the_lab_measurements_import_the_tests_support_and_nothing_else_of_tests() -> None:
    """lab/measure/ may import tests/support/; another lab module may not, nor may lab/measure/
    import a test module (a measurement leaning on a test's internals breaks when the test moves)."""
    graph = edges()
    assert "tests.support.depth" in graph["lab.measure.depth_mutants"]  # the rule is exercised
    allowed = {"lab.measure.depth_mutants": {"tests.support.depth"}}
    assert violations(allowed) == []
    forbidden = {
        "lab.measure.depth_mutants": {"tests.test_decoder_depth", "tests.conftest"},
        "lab.results": {"tests.support.depth"},
        "verispec.spec.strata": {"tests.support.depth"},
    }
    assert len(violations(forbidden)) == 4
