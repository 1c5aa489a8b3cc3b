"""A user's project as the gate meets it: its own top-level ``engine/`` and ``spec/`` packages (the
names a serving stack uses, and the names of verispec's own subpackages), a correct sampler with
its own randomness, a broken one, and a pytest suite that gates both with the plugin's fixture.

The correct sampler is the shipped template ``law-only-verifier`` (examples/law_only_verifier.py);
the broken one is that template with ONE line changed, the classic bug: after a rejection it
redraws from the target row p_i instead of the residual max(p_i - q_i, 0). That moves the verdict
law far (tokens the residual gives zero mass are emitted: ``range_and_mass`` fails
deterministically, and the chi-square tests see "impossible" verdicts), so a small scale suffices
to reject it; the correct one passes at any scale with false-alarm probability <= the suite's alpha
(and its stream is keyed, so the verdict is reproducible).

The user's ``spec/check.py`` and ``engine/generate.py`` raise on import: if verispec ever imported
a generic top-level name instead of its own ``verispec.spec`` / ``verispec.engine``, the gate would
crash on the user's module, as the pre-rename wheel did.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLER_TEMPLATE = REPO / "examples" / "law_only_verifier.py"
CORRECT_LINE = "    residual = np.maximum(p[..., :-1, :] - q, 0.0)  # [..., k, V]\n"
BROKEN_LINE = "    residual = p[..., :-1, :].copy()  # BUG: redraws from p_i, not from the residual\n"

VERIFIER_FLAGS = {  # module:function of each sampler, as the user's engine package holds them
    "correct": "--verifier engine.sampler:verify --batch-verifier engine.sampler:verify_batch --law-only",
    "broken": "--verifier engine.broken_sampler:verify --batch-verifier engine.broken_sampler:verify_batch --law-only",
}

DECOY = "raise ImportError('verispec imported the user project\\'s {name}: a generic top-level name')\n"

USER_SUITE = '''\
"""The user's own gate, in a few lines (the verispec pytest plugin's fixture)."""


def test_sampler_is_lossless(verispec_check):
    report = verispec_check(verifier="engine.sampler:verify", batch_verifier="engine.sampler:verify_batch",
                            law_only=True)
    assert report.passed, report.summary()


def test_broken_sampler_is_rejected(verispec_check):
    report = verispec_check(verifier="engine.broken_sampler:verify",
                            batch_verifier="engine.broken_sampler:verify_batch", law_only=True)
    assert not report.passed and report.exit_status == 1, report.summary()
    assert "range_and_mass" in [p.name for p in report.failed]
'''


def broken_sampler(source: str) -> str:
    """The sampler template with its residual line replaced by the bug (ValueError if absent)."""
    if source.count(CORRECT_LINE) != 1:
        raise ValueError("the sampler template no longer has its residual line: update tests/support/user_project.py")
    return source.replace(CORRECT_LINE, BROKEN_LINE)


def write_project(root: Path, sampler_source: str) -> Path:
    """The user project under ``root``; returns ``root``."""
    files = {
        "engine/__init__.py": '"""The user\'s serving engine (not verispec\'s)."""\nOWNER = "user"\n',
        "engine/generate.py": DECOY.format(name="engine.generate"),
        "engine/sampler.py": sampler_source,
        "engine/broken_sampler.py": broken_sampler(sampler_source),
        "spec/__init__.py": '"""The user\'s API specs (not verispec\'s)."""\nOWNER = "user"\n',
        "spec/check.py": DECOY.format(name="spec.check"),
        "spec/vectors.py": DECOY.format(name="spec.vectors"),
        "tests/test_gate.py": USER_SUITE,
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
