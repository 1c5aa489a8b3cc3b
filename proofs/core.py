"""Obligations and the runner that discharges them with z3.

An :class:`Obligation` is one claim about the math the code relies on. It has two kinds:

- ``valid``: a formula that must hold for every assignment of its free symbols (the symbols are
  implicitly universally quantified; hypotheses are written as ``Implies(And(hyps), goal)``).
  The runner asserts its NEGATION on a fresh ``z3.Solver`` and requires ``unsat``:
  ``unsat`` -> ``proved``; ``sat`` -> ``refuted`` (the model is a counterexample);
  ``unknown`` (the rlimit ran out, or a theory is incomplete) -> ``unknown``.
- ``witness``: a formula that must be SATISFIABLE (a tightness counterexample, a float32 rounding
  failure). ``sat`` -> ``witnessed`` (the model is shown); ``unsat`` -> ``refuted`` (no such
  witness exists); ``unknown`` -> ``unknown``.

Determinism: every check runs under a resource limit (``solver.set("rlimit", N)``), which z3
counts in deterministic units and applies per check (relative to the count at the check's
start), so "proved within the limit" is a property of the query, not of the machine's speed.
Wall time is measured and reported, never used to decide.

Only ``proved`` and ``witnessed`` are successes; ``python -m verispec.proofs`` exits non-zero otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import z3

Kind = Literal["valid", "witness"]
Status = Literal["proved", "witnessed", "refuted", "unknown"]

DEFAULT_RLIMIT = 5_000_000
"""Resource units a check may spend unless its obligation asks for more (a few hundred ms)."""


@dataclass(frozen=True)
class Obligation:
    """One claim for z3.

    ``name`` is dotted and starts with the module (``proofs.argmax.pairwise_margin``; a family
    indexed by size adds ``[n=4]``). ``statement`` is the claim in one line of plain math.
    ``build`` constructs the z3 formula (lazily, so importing a module costs nothing).
    ``relied_on_by`` names the code whose correctness rests on the claim (dotted paths); that
    code's docstring names the obligation back (``proved: proofs.argmax.pairwise_margin``).
    """

    name: str
    statement: str
    build: Callable[[], z3.BoolRef]
    relied_on_by: tuple[str, ...] = ()
    kind: Kind = "valid"
    rlimit: int = DEFAULT_RLIMIT


@dataclass(frozen=True)
class Result:
    """The outcome of checking one obligation: status, wall seconds, and a model when one exists.

    ``model`` holds the counterexample of a refuted ``valid`` obligation or the witness of a
    ``witness`` obligation, as ``symbol = value`` lines sorted by name; ``reason`` holds z3's
    ``reason_unknown`` for an ``unknown`` status.
    """

    obligation: Obligation
    status: Status
    seconds: float
    model: tuple[str, ...] = field(default=())
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True iff the obligation is discharged: ``proved`` (valid) or ``witnessed`` (witness)."""
        return self.status in ("proved", "witnessed")


def _model_lines(model: z3.ModelRef) -> tuple[str, ...]:
    lines = []
    for decl in model.decls():
        if decl.arity() > 0:  # interpretations of functions z3 left open (fp.max on +-0): no values
            continue
        value = model[decl]
        text = str(value)
        if isinstance(value, z3.FPNumRef):  # show the exact rational too: it is what was claimed
            text = f"{text} = {model.eval(z3.fpToReal(value))}"
        lines.append(f"{decl.name()} = {text}")
    return tuple(sorted(lines))


def check(obligation: Obligation) -> Result:
    """Discharge one obligation on a fresh solver under its rlimit; never raises on unknown."""
    formula = obligation.build()
    solver = z3.Solver()
    solver.set("rlimit", obligation.rlimit)
    solver.add(z3.Not(formula) if obligation.kind == "valid" else formula)
    start = time.perf_counter()
    answer = solver.check()
    seconds = time.perf_counter() - start
    if answer == z3.unknown:
        return Result(obligation, "unknown", seconds, reason=solver.reason_unknown())
    if answer == z3.unsat:
        status: Status = "proved" if obligation.kind == "valid" else "refuted"
        return Result(obligation, status, seconds)
    status = "refuted" if obligation.kind == "valid" else "witnessed"
    return Result(obligation, status, seconds, model=_model_lines(solver.model()))


def check_all(obligations: Iterable[Obligation]) -> list[Result]:
    """Check each obligation in order (independently: one fresh solver each)."""
    return [check(ob) for ob in obligations]


# --- small encodings shared by the obligation modules -------------------------------------------


def reals(prefix: str, n: int) -> list[z3.ArithRef]:
    """``n`` fresh real symbols ``prefix0 .. prefix{n-1}``."""
    return [z3.Real(f"{prefix}{j}") for j in range(n)]


def rmin(a: z3.ArithRef | float, b: z3.ArithRef | float) -> z3.ArithRef:
    """min(a, b) over the reals, as an if-then-else term."""
    result: z3.ArithRef = z3.If(a <= b, a, b)
    return result


def rmax(a: z3.ArithRef | float, b: z3.ArithRef | float) -> z3.ArithRef:
    """max(a, b) over the reals."""
    result: z3.ArithRef = z3.If(a >= b, a, b)
    return result


def pos(x: z3.ArithRef) -> z3.ArithRef:
    """The positive part (x)^+ = max(x, 0)."""
    result: z3.ArithRef = z3.If(x > 0, x, 0)
    return result


def rabs(x: z3.ArithRef) -> z3.ArithRef:
    """|x| over the reals."""
    result: z3.ArithRef = z3.If(x >= 0, x, -x)
    return result


def implies(hypotheses: Iterable[z3.BoolRef], goal: z3.BoolRef) -> z3.BoolRef:
    """``And(hypotheses) => goal`` (the shape of every ``valid`` obligation with hypotheses)."""
    result: z3.BoolRef = z3.Implies(z3.And(*hypotheses), goal)
    return result


def rounded(exact: z3.ArithRef, computed: z3.ArithRef, u: z3.ArithRef | float) -> z3.BoolRef:
    """The standard rounding model of one float operation: |computed - exact| <= u * |exact|.

    Equivalent to ``computed = exact * (1 + delta)`` with ``|delta| <= u`` (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., eq. 2.4), but linear in the reals when ``u`` is a
    constant, which keeps every rounding obligation in linear real arithmetic.
    """
    result: z3.BoolRef = rabs(computed - exact) <= u * rabs(exact)
    return result
