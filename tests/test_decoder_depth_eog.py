"""The depth test's end-of-generation rate test is exact at any count (spec/decoder/depth/law.py).

EOGs are rare events: a normal approximation of their count calls ONE EOG of mass 0.03 a z = +5.6
deviation (p = 2e-8) when its probability is 0.03, a false alarm a correct decoder meets in its
first block. The test is a mixture of Bernoulli likelihood-ratio martingales, so its level holds
by Markov's inequality at any count; these tests check that level by simulation, the false-alarm
case exactly, and that the test still rejects EOG rates that are off.
"""

from __future__ import annotations

import math

import numpy as np

from verispec.spec.decoder.depth.law import BinSums


def _sums(masses: list[float], ended_at: int | None) -> BinSums:
    b = BinSums()
    for t, mass in enumerate(masses):
        b.add(0.0, 0.0, 0.5, t == ended_at, mass)
    return b


def test_one_rare_eog_is_no_evidence_though_its_z_is_large() -> None:
    # the first look's tokens: EOG had no mass but at the last one, 0.03, where it was drawn
    b = _sums([0.0] * 9 + [0.03], ended_at=9)
    assert b.z_eog() > 5.0  # the normal approximation would reject at alpha = 1e-6
    assert b.eog_evidence() < 10.0  # P(M >= 1/a) <= a: no rejection below alpha = 0.1


def test_the_level_holds_by_simulation() -> None:
    # Null: each token is EOG with its own predictable mass (it depends on the past, as a model's
    # would), the run stops at the first EOG or 40 tokens. P(M >= 1/a) <= a = 0.05 exactly (Ville);
    # 3,000 runs: the binomial sd of the fraction is 0.004, so 0.05 + 5 sd = 0.07 fails only a
    # wrong martingale (one that omits or misweights the masses rejects far more often).
    rng = np.random.default_rng(20261201)
    rejections = 0
    runs = 3000
    for _ in range(runs):
        b = BinSums()
        for t in range(40):
            mass = float(0.002 + 0.1 * rng.random() ** 3 + (0.05 if t % 7 == 0 else 0.0))
            ended = bool(rng.random() < mass)
            b.add(0.0, 0.0, 0.5, ended, mass)
            if ended:
                break
        rejections += b.eog_rejects(0.05)
    assert rejections / runs <= 0.07, rejections / runs


def test_too_many_eogs_are_rejected() -> None:
    # masses 0.01, EOGs drawn at 0.1 (an EOG bias lost): 50 generations of up to 40 tokens
    rng = np.random.default_rng(7)
    b = BinSums()
    for _ in range(50):
        for t in range(40):
            ended = bool(rng.random() < 0.1)
            b.add(0.0, 0.0, 0.5, ended, 0.01)
            if ended:
                break
    assert b.eog_rejects(1e-6), (b.eog_count, b.eog_evidence())


def test_too_few_eogs_are_rejected() -> None:
    b = _sums([0.2] * 200, ended_at=None)  # EOG due 40 times, never seen (min_tokens counted wrong)
    assert b.eog_rejects(1e-6)
    assert math.isfinite(b.eog_evidence())


def test_no_eog_mass_is_no_evidence() -> None:
    assert _sums([0.0] * 100, ended_at=None).eog_evidence() == 1.0
