"""The obligations have teeth: each mutant claim (a plausible mistake) is refuted by the same runner."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import z3

from verispec.proofs import conformal, lossless, tukey, union
from verispec.proofs.core import Obligation, check, implies, pos, rabs, reals, rmin


def _margin_tau_le_gamma() -> z3.BoolRef:  # forgot the factor 2
    da, db, ta, tb, tau, gamma = z3.Reals("d_a d_b t_a t_b tau gamma")
    return implies([da - db >= gamma, rabs(da - ta) < tau, rabs(db - tb) < tau, tau <= gamma], ta > tb)


def _margin_nonstrict_residual() -> z3.BoolRef:  # |e| <= tau instead of < tau, n = 3
    d, t = reals("d", 3), reals("t", 3)
    tau, gamma = z3.Reals("tau gamma")
    hyps = [d[1] - d[j] >= gamma for j in (0, 2)] + [rabs(d[j] - t[j]) <= tau for j in range(3)]
    # flip under lowest-id ties: some lower id reaches t_1
    return implies(hyps + [2 * tau <= gamma], t[1] > t[0])


def _compose_without_equal_rows_guard() -> z3.BoolRef:
    big_p, big_m, x, a, s, t = z3.Reals("P M X A S T")
    return implies([a == big_m, big_m + x == big_p, s == 1 - t, 0 <= x, x <= s], a + (1 - t) * x / s == big_p)


def _accept_q_over_p() -> z3.BoolRef:  # min(1, q/p) instead of min(1, p/q)
    p, q = z3.Reals("p q")
    return implies([p >= 0, q >= 0], z3.If(q > 0, q * rmin(1, q / p), 0) == rmin(p, q))


def _residual_not_renormalized() -> z3.BoolRef:
    p, q, hyps = lossless.simplex_rows(3)
    s_pos, s_min = lossless.residual_sums(p, q)
    emitted = [lossless.accept_mass(p[i], q[i]) + (1 - s_min) * pos(p[i] - q[i]) for i in range(3)]
    return implies(hyps, z3.And(*[emitted[i] == p[i] for i in range(3)]))


def _rho_cap_iff_closed_ball() -> z3.BoolRef:
    r, c = z3.Reals("r c")
    return implies([c > 0], (tukey.rho(r, c) < c * c / 6) == (rabs(r) <= c))


def _index_by_floor() -> z3.BoolRef:
    n, q, k = conformal.conformal_symbols()
    m = (z3.ToReal(n) + 1) * q
    hyps = [n >= 1, q > 0, q < 1, z3.ToReal(k) <= m, m < z3.ToReal(k) + 1]
    return implies(hyps, z3.ToReal(k) / (z3.ToReal(n) + 1) >= q)


def _index_numpy_higher() -> z3.BoolRef:  # np.quantile(method="higher"): k = ceil((n-1) q) + 1
    n, q, k = conformal.conformal_symbols()
    m = (z3.ToReal(n) - 1) * q
    hyps = [n >= 1, q > 0, q < 1, z3.ToReal(k) - 2 < m, m <= z3.ToReal(k) - 1]
    return implies(hyps, z3.ToReal(k) / (z3.ToReal(n) + 1) >= q)


def _no_bonferroni() -> z3.BoolRef:  # each layer at level q, hoping the union is still at q
    weights, law = union.event_atoms(2)
    q = z3.Real("q")
    per_layer = [union.prob_event(weights, k) <= 1 - q for k in range(2)]
    return implies(law + per_layer + [q > 0, q < 1], union.prob_union(weights) <= 1 - q)


MUTANTS: dict[str, Callable[[], z3.BoolRef]] = {
    "argmax: tau <= gamma (factor 2 forgotten)": _margin_tau_le_gamma,
    "argmax: non-strict residual bound": _margin_nonstrict_residual,
    "lossless: residual without the p == q guard": _compose_without_equal_rows_guard,
    "lossless: accept min(1, q/p)": _accept_q_over_p,
    "lossless: residual not renormalized": _residual_not_renormalized,
    "tukey: bowl taken closed": _rho_cap_iff_closed_ball,
    "conformal: floor instead of ceil": _index_by_floor,
    "conformal: np.quantile higher index": _index_numpy_higher,
    "union: no Bonferroni correction": _no_bonferroni,
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_claim_is_refuted(name: str) -> None:
    result = check(Obligation(f"mutant.{name}", name, MUTANTS[name]))
    assert result.status == "refuted", f"{name}: {result.status} {result.reason}"
    assert result.model  # a concrete counterexample
