"""pytest plugin (entry point ``pytest11``): gate a verifier from a test suite in a few lines.

    def test_my_sampler(verispec_check):
        report = verispec_check(verifier="mypkg.sampler:verify", batch_verifier="mypkg.sampler:verify_batch",
                                law_only=True, budget=600)
        assert report.passed, report.summary()

``verispec_check(...)`` is :func:`verispec.check` and ``verispec_check_decoder(...)`` is
:func:`verispec.check_decoder` (the same arguments: the option objects or their fields as
keywords, built into the same objects), with one difference: ``--verispec-scale X`` (or the ini option
``verispec_scale``) multiplies every ``scale`` the tests ask for, so ``pytest --verispec-scale
0.05`` is a quick local look and plain ``pytest`` in CI runs at the power the tests state. The
reported power follows the scale, and a scaled-down pass is not a pass: it is inconclusive
(``report.passed`` False, exit status 3: "underpowered", with the power reached), so a CI that
copies ``--verispec-scale 0.05`` goes red, not green. ``--verispec-min-power P`` (ini
``verispec_min_power``) accepts a pass at power >= P for every test that sets no ``min_power``
itself: ``pytest --verispec-scale 0.05 --verispec-min-power 0`` is the quick local look that
passes, its claim saying the power reached. Each test's claim is recorded as the JUnit property
``verispec_claim``.

Loaded in every pytest session of an environment that has verispec installed, so this module
imports nothing beyond pytest until a fixture is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from verispec.decoder.report import DecoderReport
    from verispec.spec.check import CheckReport

SCALE_OPTION = "--verispec-scale"
MIN_POWER_OPTION = "--verispec-min-power"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("verispec", "verispec gate")
    group.addoption(
        SCALE_OPTION,
        type=float,
        default=None,
        metavar="X",
        help="multiply the statistical sample sizes of every verispec_check (quick local runs: 0.05; default 1)",
    )
    parser.addini("verispec_scale", "default of --verispec-scale", default="1")
    group.addoption(
        MIN_POWER_OPTION,
        type=float,
        default=None,
        metavar="P",
        help="accept a verispec_check pass at power >= P (a quick run at --verispec-scale < 1 is otherwise "
        "inconclusive: report.passed False)",
    )
    parser.addini("verispec_min_power", "default of --verispec-min-power", default="")


def pytest_configure(config: pytest.Config) -> None:
    scale_factor(config)  # a bad value stops the session at once, not in the first gated test
    min_power(config)


def min_power(config: pytest.Config) -> float | None:
    """The session's accepted power: the option, else the ini value (empty: none); in [0, 1]."""
    option = config.getoption(MIN_POWER_OPTION.lstrip("-").replace("-", "_"))
    text = str(config.getini("verispec_min_power")).strip() if option is None else str(option)
    if not text:
        return None
    try:
        power = float(text)
    except ValueError:
        raise pytest.UsageError(f"{MIN_POWER_OPTION} / verispec_min_power must be a number, got {text!r}") from None
    if not 0 <= power <= 1:
        raise pytest.UsageError(f"{MIN_POWER_OPTION} / verispec_min_power must be in [0, 1], got {power}")
    return power


def scale_factor(config: pytest.Config) -> float:
    """The session's scale multiplier: the option, else the ini value; > 0 or a usage error."""
    option = config.getoption(SCALE_OPTION.lstrip("-").replace("-", "_"))
    text = str(config.getini("verispec_scale")) if option is None else str(option)
    try:
        factor = float(text)
    except ValueError:
        raise pytest.UsageError(f"{SCALE_OPTION} / verispec_scale must be a number, got {text!r}") from None
    if not factor > 0:
        raise pytest.UsageError(f"{SCALE_OPTION} / verispec_scale must be > 0, got {factor}")
    if not math.isfinite(factor):  # inf would size every test without end
        raise pytest.UsageError(f"{SCALE_OPTION} / verispec_scale must be finite, got {text!r}")
    return factor


@pytest.fixture
def verispec_check(request: pytest.FixtureRequest) -> Callable[..., CheckReport]:
    """``verispec_check(**kwargs) -> CheckReport``: :func:`verispec.check` at the session's scale."""
    factor = scale_factor(request.config)
    accepted = min_power(request.config)

    def run(*args: Any, **kwargs: Any) -> CheckReport:
        from dataclasses import replace

        from verispec import api, arguments
        from verispec.options import check_options

        options = check_options(*args, **kwargs)  # the objects verispec.check builds, the same checks
        design = options.design
        scale = arguments.number(  # the product checked too: two finite factors can overflow to inf
            "scale (the test's scale times --verispec-scale)", design.scale * factor, positive=True
        )
        min_power = accepted if design.min_power is None else design.min_power
        report = api.run(replace(options, design=replace(design, scale=scale, min_power=min_power)))
        request.node.user_properties.append(("verispec_claim", report.claim()))
        return report

    return run


@pytest.fixture
def verispec_check_decoder(request: pytest.FixtureRequest) -> Callable[..., DecoderReport]:
    """``verispec_check_decoder(**kwargs) -> DecoderReport``: :func:`verispec.check_decoder`
    (its sample sizes come from ``tv`` and ``alpha``, which the session's scale does not change)."""

    def run(*args: Any, **kwargs: Any) -> DecoderReport:
        from verispec.decoder import api
        from verispec.decoder.options import decoder_options

        report = api.run(decoder_options(*args, **kwargs))  # the objects verispec.check_decoder builds
        request.node.user_properties.append(("verispec_verdict", report.verdict()))
        return report

    return run
