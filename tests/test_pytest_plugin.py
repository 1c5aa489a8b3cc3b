"""The pytest plugin (verispec/pytest_plugin.py): a user's suite gates its verifier with a fixture,
``--verispec-scale`` / the ini ``verispec_scale`` multiply the scale its tests ask for, a bad value
is a usage error, and the plugin's import costs nothing (it loads in every pytest session).

Each case runs pytest in a subprocess on a small suite in a temporary folder, with the plugin
loaded by module name (``-p no:verispec`` first blocks the entry-point copy, so this works whether
or not the installed metadata already registers it; the installed-wheel test covers the entry
point itself). The inner suites check the scale the fixture passed on and a correct / a broken
verifier on deterministic properties only (the law tests are tests/test_api.py's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN = ["-p", "no:verispec", "-p", "verispec.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:randomly"]

SUITE = """\
import pytest

REFERENCE = "verispec.reference.speculative"


def test_scale_is_the_asked_times_the_sessions(verispec_check):
    report = verispec_check(verifier=REFERENCE + ":verify_sampled", only=["contract"], scale=0.5)
    assert report.passed, report.summary()
    assert report.scale == pytest.approx(0.5 * float(EXPECTED_FACTOR))


def test_a_verifier_that_accepts_everything_fails(verispec_check):
    report = verispec_check(verifier=lambda p, q, drafts, uniforms: (0, 0, "repair"), only=["contract"])
    assert not report.passed and report.failed[0].name == "contract"
    assert "accepted without VerificationError" in report.summary()
"""


def _pytest(folder: Path, factor: str, *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_user_gate.py").write_text(f"EXPECTED_FACTOR = {factor!r}\n" + SUITE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", *PLUGIN, *args, str(folder)]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_the_fixture_gates_a_verifier_and_records_its_claim(tmp_path: Path) -> None:
    result = _pytest(tmp_path, "1", "--junitxml", str(tmp_path / "suite.xml"))
    assert result.returncode == 0, result.stdout + result.stderr
    root = ET.parse(tmp_path / "suite.xml").getroot()
    claims = [p.get("value") for p in root.iter("property") if p.get("name") == "verispec_claim"]
    assert len(claims) == 2 and all(
        claim and claim.startswith(("no statistical test", "not lossless", "does not validate its input"))
        for claim in claims
    )


def test_the_scale_option_multiplies_the_scale_asked_for(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nverispec_scale = 0.25\n", encoding="utf-8")  # the option wins
    result = _pytest(tmp_path, "0.2", "--verispec-scale", "0.2")
    assert result.returncode == 0, result.stdout + result.stderr


class _Config:
    """What scale_factor reads of a pytest.Config: the option's value and the ini value."""

    def __init__(self, option: float | None, ini: str) -> None:
        self.option, self.ini = option, ini

    def getoption(self, name: str) -> float | None:
        assert name == "verispec_scale"
        return self.option

    def getini(self, name: str) -> str:
        assert name == "verispec_scale"
        return self.ini


@pytest.mark.parametrize("option, ini, factor", [(None, "1", 1.0), (None, "0.25", 0.25), (0.5, "0.25", 0.5)])
def test_the_option_overrides_the_ini(option: float | None, ini: str, factor: float) -> None:
    from verispec.pytest_plugin import scale_factor

    assert scale_factor(_Config(option, ini)) == factor  # type: ignore[arg-type]


@pytest.mark.parametrize("option, ini", [(0.0, "1"), (-1.0, "1"), (None, "fast"), (None, "0"), (float("nan"), "1")])
def test_a_bad_scale_is_a_usage_error(option: float | None, ini: str) -> None:
    from verispec.pytest_plugin import scale_factor

    with pytest.raises(pytest.UsageError, match="verispec_scale must be"):
        scale_factor(_Config(option, ini))  # type: ignore[arg-type]


def test_a_bad_scale_stops_the_session_at_once(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nverispec_scale = 0\n", encoding="utf-8")
    result = _pytest(tmp_path, "1")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR and "verispec_scale must be > 0" in result.stderr


def test_the_plugin_imports_only_pytest() -> None:
    code = (
        "import sys; before = set(sys.modules); import verispec.pytest_plugin; "
        "print(sorted(m for m in set(sys.modules) - before if m.startswith(('verispec', 'numpy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "['verispec', 'verispec.pytest_plugin']"
