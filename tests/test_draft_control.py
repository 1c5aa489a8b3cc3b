"""Cost-model control (reference/draft_control.py): the k that maximizes expected tokens per unit of
verification cost, the measured cost curve, the calibration of over-confident estimates."""

from __future__ import annotations

import pytest

from verispec.reference.draft_control import (
    CALIBRATION_BOUNDS,
    EWMA,
    MAX_ACCEPT,
    Calibration,
    VerifyCost,
    best_k,
    expected_accepted,
)


def brute_best(accept: list[float], cost: VerifyCost) -> int:
    rates = []
    for k in range(len(accept) + 1):
        reach, expected = 1.0, 1.0
        for a in accept[:k]:
            reach *= min(a, MAX_ACCEPT)
            expected += reach
        rates.append(expected / cost.relative(k + 1))
    return max(range(len(rates)), key=lambda k: (rates[k], -k))


@pytest.mark.parametrize("per_row", [0.0, 0.1, 0.3, 0.6, 1.0, 3.0])
def test_best_k_maximizes_tokens_per_cost(per_row: float) -> None:
    cost = VerifyCost(prior_row_cost=per_row)
    for accept in ([0.9, 0.9, 0.9, 0.9], [0.5, 0.5], [0.99] * 8, [0.2, 0.9, 0.9], [], [1.0, 1.0]):
        assert best_k(accept, cost) == brute_best(list(accept), cost), (accept, per_row)


def test_plain_step_when_nothing_pays() -> None:
    assert best_k([0.4, 0.4], VerifyCost(prior_row_cost=1.0)) == 0  # 1.4 tokens for 2 passes
    assert best_k([0.99] * 4, VerifyCost(prior_row_cost=0.05)) == 4


def test_measured_costs_replace_the_prior() -> None:
    cost = VerifyCost(prior_row_cost=0.3)
    assert cost.relative(1) == 1.0 and cost.relative(3) == pytest.approx(1.6)
    cost.observe(1, 0.010)
    cost.observe(3, 0.012)
    cost.observe(5, 0.020)
    assert cost.relative(3) == pytest.approx(1.2)
    assert cost.relative(4) == pytest.approx(1.6)  # halfway between 1.2 and 2.0
    assert cost.relative(7) == pytest.approx(2.0 + 0.25 * 2)  # the measured chord 1 -> 5 rows, extended
    only_one = VerifyCost(prior_row_cost=0.3)
    only_one.observe(1, 0.010)
    assert only_one.relative(3) == pytest.approx(1.6)  # nothing but 1 row measured: the prior slope
    cost.observe(0, 1.0)  # ignored
    cost.observe(2, -1.0)  # ignored
    assert set(cost.seconds) == {1, 3, 5}


def test_calibration_moves_toward_observed_acceptance() -> None:
    cal = Calibration()
    assert cal.factor(3) == 1.0
    for _ in range(60):
        cal.observe([0.8, 0.8], [3, 3], accepted=0)  # over-confident at context 3: first token rejected
    assert cal.factor(3) == CALIBRATION_BOUNDS[0] and cal.factor(5) == 1.0
    assert cal.apply([0.8], [3]) == pytest.approx([0.2])
    for _ in range(60):
        cal.observe([0.5, 0.5, 0.5], [6, 7, 7], accepted=3)  # under-confident at contexts 6, 7
    # steady state of the decaying sums at context 7: accepted 2 / EWMA, predicted 1 / EWMA
    assert cal.factor(7) == pytest.approx((2 / EWMA + 1) / (1 / EWMA + 1), rel=1e-4)
    assert cal.apply([0.9], [7]) == [MAX_ACCEPT]
    # unreached tokens (after the first rejection) carry no evidence
    fresh = Calibration()
    fresh.observe([0.5, 0.5, 0.5], [1, 2, 3], accepted=0)
    assert fresh.predicted == {1: 0.5, 2: 0.0, 3: 0.0} and fresh.accepted == {1: 0.0, 2: 0.0, 3: 0.0}


def test_expected_accepted() -> None:
    assert expected_accepted([0.5, 0.5]) == 0.75 and expected_accepted([]) == 0.0


def test_cost_is_robust_to_noise_and_monotone() -> None:
    cost = VerifyCost(prior_row_cost=0.3)
    for _ in range(5):
        cost.observe(1, 0.010)
        cost.observe(3, 0.013)
        cost.observe(7, 0.016)
    cost.observe(3, 0.500)  # one pass disturbed by another process: the median ignores it
    assert cost.relative(3) == pytest.approx(1.3)
    for _ in range(8):
        cost.observe(3, 0.030)  # now 3 rows are persistently slower than 7: c(3) <= c(7)
    assert cost.relative(3) == pytest.approx(1.6)
    assert all(cost.relative(r) <= cost.relative(r + 1) for r in range(1, 12))


@pytest.mark.parametrize("per_row", [0.0, 0.1, 0.3, 1.0])
def test_best_size_maximizes_expected_tokens_per_cost(per_row: float) -> None:
    from verispec.reference.draft_control import best_size

    cost = VerifyCost(prior_row_cost=per_row)
    for reach in ([0.9, 0.5, 0.44, 0.3, 0.2, 0.1], [0.31, 0.29, 0.28], [], [0.99] * 10, [0.5, 0.05, 0.01]):
        rates = [(1 + sum(min(r, MAX_ACCEPT) for r in reach[:n])) / cost.relative(n + 1) for n in range(len(reach) + 1)]
        assert best_size(reach, cost) == max(range(len(rates)), key=lambda n: (rates[n], -n))
    for accept in ([0.9, 0.9, 0.9], [0.5, 0.2], [0.99] * 6):  # a chain: reach = running products
        products = [float(__import__("math").prod(accept[: i + 1])) for i in range(len(accept))]
        assert best_size(products, cost) == best_k(accept, cost)
