"""``verispec.check`` / ``verispec.check_decoder``: the gate as Python functions, and the CLI on them.

What is shown: the API takes the callables themselves or ``module:function`` strings and returns
the typed reports; the correct own-RNG sampler (examples/law_only_verifier.py) passes and its
one-line-broken variant (tests/support/user_project.py) fails; bad arguments are typed errors before
anything runs; ``verispec check`` and ``verispec check-decoder`` build their flags into the same
option objects and run them with the same functions (no second copy of the flag handling); ``import verispec`` stays cheap.

Sample sizes: the law tests run at ``SCALE`` of their full N (the reported power follows, and is
not what is asserted); the broken sampler emits tokens of zero residual mass, which the
deterministic ``range_and_mass`` property catches at any scale and the chi-square tests see as
"impossible" verdicts (see tests/support/user_project.py). check-decoder runs on a tiny synthetic GGUF
(tests/support/synthetic.py, ~3 s): our own loop must pass at the command's default alpha (1e-3, fixed
seed), a mutant loop whose bonus token comes from the wrong row must fail.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import verispec
from tests.support.user_project import SAMPLER_TEMPLATE, broken_sampler
from verispec import cli
from verispec.decoder.options import DecoderOptions, DecoderUnderTest, DepthDesign, SamplingFlags
from verispec.decoder.report import DecoderReport
from verispec.options import CheckDesign, CheckOptions, VerifierUnderTest
from verispec.spec.check import CheckError, CheckReport, PropertyOutcome
from verispec.spec.external import DEFAULT_TIMEOUT

SCALE = 0.01  # of the statistical N (see the module docstring)
LAW = ["contract", "range_and_mass", "stat_verdict_law_k2", "stat_lossless_ar_k2"]
REFERENCE = "verispec.reference.speculative"


def _module(path: Path, name: str, source: str | None = None) -> ModuleType:
    if source is not None:
        path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sampler() -> ModuleType:
    return _module(SAMPLER_TEMPLATE, "law_only_verifier_under_test")


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    path = tmp_path_factory.mktemp("broken") / "broken_sampler.py"
    return _module(path, "broken_sampler_under_test", broken_sampler(SAMPLER_TEMPLATE.read_text(encoding="utf-8")))


def test_check_takes_callables_and_returns_the_typed_report(sampler: ModuleType) -> None:
    report = verispec.check(
        sampler.verify, batch_verifier=sampler.verify_batch, law_only=True, only=LAW, scale=SCALE, min_power=0
    )
    assert isinstance(report, CheckReport)
    assert report.passed and report.exit_status == 0, report.summary()
    assert [p.name for p in report.properties if p.status == "passed"] == LAW
    assert report.implementation.startswith("python (law only): verifier law_only_verifier_under_test:verify")
    assert report.scale == SCALE and report.law_only
    assert json.loads(json.dumps(report.as_json()))["passed"] is True
    assert report.summary().splitlines()[0].startswith("PASSED  (")


def test_check_takes_module_function_strings() -> None:
    report = verispec.check(
        f"{REFERENCE}:verify_sampled",
        batch_verifier=f"{REFERENCE}:verify_sampled_batch",
        only=["vectors_sampled", "contract", "stat_verdict_law_k1"],
        scale=SCALE,
        sequential=True,
        min_power=0,
    )
    assert report.passed, report.summary()
    assert report.sequential and report.implementation == (
        f"python: verifier {REFERENCE}:verify_sampled, batch {REFERENCE}:verify_sampled_batch"
    )


def test_a_broken_sampler_fails_with_every_failure_in_the_summary(broken: ModuleType) -> None:
    # keep_going: every failure is the point here (under CI=true a run stops at its first deterministic failure)
    report = verispec.check(
        broken.verify, batch_verifier=broken.verify_batch, law_only=True, only=LAW, scale=SCALE, keep_going=True
    )
    assert not report.passed and report.exit_status == 1
    failed = [p.name for p in report.failed]
    assert failed == ["range_and_mass", "stat_verdict_law_k2", "stat_lossless_ar_k2"]
    summary = report.summary()
    assert all(f"FAIL  {name}" in summary for name in failed) and "FAILED: range_and_mass" in summary


def test_log_and_announce_see_the_run(sampler: ModuleType) -> None:
    seen: list[str] = []
    names: list[str] = []
    verispec.check(
        sampler.verify, law_only=True, only=["contract"], log=lambda o: names.append(o.name), announce=seen.append
    )
    assert names == ["contract"] and len(seen) == 1 and seen[0].startswith("python (law only)")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "give verifier"),
        ({"verifier_cmd": "true", "batch_verifier": "m:f"}, "go with verifier"),
        ({"verifier": "m:f", "shard": "3/2"}, "shard must be I/S"),
        ({"verifier": "m:f", "shard": "1/2", "budget": 5.0}, "a budget would leave holes"),
        ({"verifier": "m:f", "budget": 0.0}, "budget must be > 0"),
        ({"verifier": "m:f", "workers": 0}, "workers must be >= 1"),
        ({"verifier": "m:f", "timeout": 0.0}, "timeout must be > 0"),
        ({"verifier": "m:f", "vectors": "x", "seed": 1}, "give one or the other"),
        ({"verifier": "no_such_module_here:f"}, "cannot import module"),
    ],
)
def test_bad_arguments_are_check_errors_before_anything_runs(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckError, match=message):
        verispec.check(**kwargs)


def test_workers_draw_what_one_process_draws() -> None:
    """The reference consumes the given uniforms, so its verdicts in 2 worker processes are the
    one-process verdicts (spec/workers.py): the same N and the same chi-square."""
    kwargs: dict[str, Any] = {
        "batch_verifier": f"{REFERENCE}:verify_sampled_batch",
        "only": ["stat_verdict_law_k1"],
        "scale": SCALE,
        "sequential": True,
        "min_power": 0,
    }
    alone = verispec.check(f"{REFERENCE}:verify_sampled", **kwargs)
    pooled = verispec.check(f"{REFERENCE}:verify_sampled", workers=2, **kwargs)
    assert pooled.passed and [(p.n, p.detail) for p in pooled.properties] == [(p.n, p.detail) for p in alone.properties]


def test_workers_need_parts_that_cross_a_process_boundary(sampler: ModuleType) -> None:
    with pytest.raises(CheckError, match="module:function"):
        verispec.check(sampler.verify, law_only=True, workers=2)


def test_a_wire_verifier_runs_through_the_api() -> None:
    report = verispec.check(
        verifier_cmd=f"{sys.executable} -m verispec.spec.external --reference", only=["vectors_sampled", "contract"]
    )
    assert report.passed and [p.status for p in report.properties] == ["passed", "passed"], report.summary()


def test_the_wire_timeout_defaults_to_the_protocol_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    class Recorder:
        def __init__(self, command: str, timeout: float, law_only: bool = False) -> None:
            seen.append(timeout)
            raise CheckError("recorded")

    monkeypatch.setattr("verispec.spec.check.CommandImplementation", Recorder)
    with pytest.raises(CheckError, match="recorded"):
        verispec.check(verifier_cmd="true")
    assert seen == [DEFAULT_TIMEOUT]


def _stub_report() -> CheckReport:
    return CheckReport("stub", {}, 1.0, [PropertyOutcome("contract", "passed", 1, 0.0, 1.0, "ok", 0.0)])


def test_the_check_command_hands_its_flags_to_the_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[CheckOptions] = []

    def fake(options: CheckOptions) -> CheckReport:
        calls.append(options)
        return _stub_report()

    monkeypatch.setattr("verispec.api.run", fake)
    argv = [
        "check",
        "--verifier",
        "m:f",
        "--batch-verifier",
        "m:g",
        "--law-only",
        "--scale",
        "0.5",
        "--budget",
        "9",
        "--only",
        "contract",
        "--workers",
        "2",
        "--seed",
        "3",
        "--count",
        "4",
        "--fail-fast",
        "--json",
        "--min-power",
        "0.25",
        "--no-keep-going",
    ]
    assert cli.main(argv) == 0
    ((options),) = calls
    assert options.subject == VerifierUnderTest(
        "m:f", batch_verifier="m:g", law_only=True, workers=2, timeout=DEFAULT_TIMEOUT
    )
    assert options.design == CheckDesign(
        scale=0.5, budget=9.0, only=["contract"], fail_fast=True, min_power=0.25, keep_going=False
    )
    assert (options.vectors, options.seed, options.count) == (None, 3, 4)
    reporting = options.reporting
    assert (reporting.log, reporting.announce, reporting.progress) == (None, None, None)
    assert callable(reporting.warn)  # the slow-path warning goes to stderr
    assert json.loads(capsys.readouterr().out)["implementation"] == "stub"


def test_the_command_finds_a_module_of_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the console script runs: the current folder is not on the import path until the command
    appends it (``python -m verispec`` has it first)."""
    (tmp_path / "gate_here_verifier.py").write_text(f"from {REFERENCE} import verify_sampled as verify\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "gate_here_verifier", raising=False)
    assert cli.main(["check", "--verifier", "gate_here_verifier:verify", "--only", "contract"]) == 0
    assert sys.path[-1] == str(tmp_path) and "PASSED" in capsys.readouterr().out


def test_the_check_decoder_command_hands_its_flags_to_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[DecoderOptions] = []

    def fake(options: DecoderOptions) -> DecoderReport:
        calls.append(options)
        return DecoderReport("stub.gguf")

    monkeypatch.setattr("verispec.decoder.api.run", fake)
    argv = ["check-decoder", "--ours", "--model", "x.gguf", "--prompt", "a", "b", "--depth", "0", "--m", "2"]
    assert cli.main([*argv, "--tv", "0.3"]) == 1
    ((options),) = calls
    assert options.subject == DecoderUnderTest(ours=True, model="x.gguf", timeout=600.0)
    assert options.prompts == ("a", "b") and options.sampling == SamplingFlags(target_law="reference")
    assert options.design == DepthDesign(depth=0, m=2, tv=0.3, alpha=None, greedy=False)
    assert callable(options.reporting.log)


def test_the_check_decoder_command_prints_each_prompt_as_it_is_decided(
    tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(
            ["check-decoder", "--ours", "--model", str(tiny_gguf), "--depth", "0", "--m", "1", "--prompt", "hi", "yo"]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line[:10] for line in lines] == ["PASS  'hi'", "PASS  'yo'", "PASSED"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one decoder"),
        ({"ours": True, "mutant": "x"}, "exactly one decoder"),
        ({"ours": True, "m": 4}, "m must be in"),
        ({"ours": True, "tv": 0.0}, "tv must be in"),
        ({"ours": True, "alpha": 1.0}, "alpha must be in"),
        ({"ours": True, "target_law": "ours"}, "target_law must be"),
        ({"ours": True, "prompts": "one string"}, "prompts must be"),
    ],
)
def test_check_decoder_argument_errors_come_before_the_model_loads(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckError, match=message):
        verispec.check_decoder(model="/nonexistent.gguf", **kwargs)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    from tests.support.synthetic import write_synthetic

    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_synthetic(path, "tinyllama")
    return path


def test_check_decoder_passes_our_loop_and_rejects_a_mutant(tiny_gguf: Path) -> None:
    ours = verispec.check_decoder(ours=True, model=tiny_gguf, depth=0, m=2, prompts=["hello"])
    assert isinstance(ours, DecoderReport) and ours.passed and ours.exit_status == 0, ours.summary()
    (result,) = ours.results
    assert result.mode.startswith("law (") and result.numbers["n"] >= 1000 and result.numbers["alpha"] == 1e-3
    mutant = verispec.check_decoder(mutant="bonus_from_wrong_row", model=tiny_gguf, depth=0, m=2, prompts=["hello"])
    assert not mutant.passed and mutant.exit_status == 1
    assert mutant.summary().startswith("FAIL  'hello'") and mutant.summary().endswith(f"{tiny_gguf})")
    assert json.loads(json.dumps(mutant.as_json()))["results"][0]["passed"] is False


def test_import_verispec_loads_no_numpy_and_no_gate() -> None:
    code = "import sys, verispec, verispec.pytest_plugin; print(sorted(m for m in sys.modules if m.startswith(('numpy', 'verispec.'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == ["verispec.pytest_plugin"]
