"""The runner's semantics: negation + unsat for valid claims, sat for witnesses, rlimit -> unknown."""

from __future__ import annotations

import json
from fractions import Fraction
from functools import partial

import pytest
import z3

import verispec.proofs.__main__ as cli
from verispec.proofs import lossless
from verispec.proofs.catalog import MODULES, all_obligations
from verispec.proofs.core import Obligation, check


def _true_claim() -> z3.BoolRef:
    x = z3.Real("x")
    result: z3.BoolRef = z3.Implies(x > 1, x * x > x)
    return result


def _false_claim() -> z3.BoolRef:
    x = z3.Real("x")
    result: z3.BoolRef = z3.Implies(x > 0, x * x > x)  # fails at x = 1/2
    return result


def test_valid_true_claim_is_proved() -> None:
    assert check(Obligation("t.true", "x > 1 => x^2 > x", _true_claim)).status == "proved"


def test_valid_false_claim_is_refuted_with_a_counterexample() -> None:
    result = check(Obligation("t.false", "x > 0 => x^2 > x", _false_claim))
    assert result.status == "refuted" and not result.ok
    (line,) = result.model
    name, value = line.split(" = ")
    x = Fraction(value)
    assert name == "x" and x > 0 and x * x <= x  # the model really is a counterexample


def test_witness_sat_is_witnessed_and_unsat_is_refuted() -> None:
    sat = check(Obligation("t.w", "exists x: x > 0 and x^2 <= x", lambda: z3.Not(_false_claim()), kind="witness"))
    assert sat.status == "witnessed" and sat.ok and sat.model
    unsat = check(Obligation("t.w2", "exists x > 1: x^2 <= x", lambda: z3.Not(_true_claim()), kind="witness"))
    assert unsat.status == "refuted" and not unsat.ok


def test_monolithic_n6_exhausts_rlimit() -> None:
    """The claim in proofs/lossless.py's docstring: the one-shot query at n = 6 runs out."""
    ob = Obligation("t.mono6", "one step, n = 6, monolithic", partial(lossless.one_step_direct, 6), rlimit=20_000_000)
    result = check(ob)
    assert result.status == "unknown" and not result.ok
    assert "resource" in result.reason or "canceled" in result.reason


def test_names_are_unique_and_prefixed_by_their_module() -> None:
    obligations = all_obligations()
    assert len({ob.name for ob in obligations}) == len(obligations)
    for ob in obligations:
        # obligation names are the module path below the import root: proofs.lossless.one_step[n=2]
        assert any(ob.name.startswith(module.removeprefix("verispec.") + ".") for module in MODULES), ob.name
        assert ob.relied_on_by, f"{ob.name} names no code that relies on it"


def test_cli_json_and_exit_status(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["--json", "--only", "proofs.union.two_events"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["status"] for row in doc["obligations"]] == ["proved"]
    assert set(doc["obligations"][0]) >= {"name", "statement", "status", "seconds"}

    bad = Obligation(
        "proofs.union.bogus", "x > 0 => x^2 > x", _false_claim, ("verispec.reference.conformal.bonferroni",)
    )
    monkeypatch.setattr(cli, "all_obligations", lambda: [bad])
    assert cli.main([]) == 1
    out = capsys.readouterr()
    assert "refuted" in out.out and "NOT DISCHARGED: proofs.union.bogus" in out.err
