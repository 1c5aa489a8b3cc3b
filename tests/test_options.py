"""The gates' options as objects (verispec/options.py, verispec/decoder/options.py).

What is shown: no public entry point of the gates takes more than 10 parameters (the options
travel as objects); ``verispec check`` / ``verispec check-decoder``, the Python API in its keyword
form and in its object form, and the pytest plugin's fixtures build equal option objects from the
same inputs (one builder); the keyword form reaches the same verdict as the object form; each
object checks its own fields when it is built, with the errors the CLI gives; a keyword of an
object that is also given, or an unknown keyword, is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import verispec
import verispec.api
import verispec.commands.check
import verispec.commands.check_decoder
import verispec.decoder.api
import verispec.decoder.options
import verispec.decoder.recipe
import verispec.decoder.worker
import verispec.options
import verispec.pytest_plugin
from verispec import cli
from verispec.decoder.options import (
    DecoderOptions,
    DecoderReporting,
    DecoderUnderTest,
    DepthDesign,
    DraftFlags,
    Penalties,
    SamplingFlags,
)
from verispec.decoder.report import DecoderReport
from verispec.options import CheckDesign, CheckOptions, CheckReporting, VerifierUnderTest
from verispec.reference.errors import CheckError
from verispec.spec.check import CheckReport, PropertyOutcome

MAX_PARAMETERS = 10
GATE_MODULES: tuple[ModuleType, ...] = (
    verispec.api,
    verispec.options,
    verispec.decoder.api,
    verispec.decoder.options,
    verispec.decoder.recipe,
    verispec.decoder.worker,
    verispec.commands.check,
    verispec.commands.check_decoder,
    verispec.pytest_plugin,
)
VERIFIER = "verispec.reference.speculative:verify_sampled"


def _callables(module: ModuleType) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The functions and classes defined in ``module``, and the methods of those classes."""
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(value):
            yield f"{module.__name__}.{name}", value
        elif inspect.isclass(value):
            yield f"{module.__name__}.{name}", value
            for attribute, member in vars(value).items():
                if inspect.isfunction(member):
                    yield f"{module.__name__}.{name}.{attribute}", member


def _parameters(function: Callable[..., Any]) -> int:
    """Its parameters, ``self`` not counted (a ``**keywords`` counts one: the fields of objects)."""
    parameters = inspect.signature(function).parameters
    return len([name for name in parameters if name != "self"])


def test_no_public_entry_point_takes_more_than_ten_parameters() -> None:
    public = {f"verispec.{name}": getattr(verispec, name) for name in verispec.__all__ if name != "__version__"}
    assert {"verispec.check", "verispec.check_decoder", "verispec.DecoderUnderTest"} <= set(public)
    found = dict(public)
    for module in GATE_MODULES:
        found.update(_callables(module))
    assert "verispec.decoder.api._Run.__init__" in found and "verispec.decoder.api.build_engine" in found
    wide = {name: _parameters(f) for name, f in found.items() if _parameters(f) > MAX_PARAMETERS}
    assert wide == {}


# -----------------------------------------------------------------------------------------------
# one builder: the CLI, the API's two forms and the plugin build equal objects
# -----------------------------------------------------------------------------------------------

DECODER_ARGV = [
    "--ours",
    "--model",
    "x.gguf",
    "--prompt",
    "a",
    "b",
    "--depth",
    "8",
    "--temperature",
    "0.7",
    "--repeat-penalty",
    "1.2",
    "--penalty-last-n",
    "16",
    "--draft-top-k",
    "3",
    "--k",
    "3",
    "--weights",
    "int8",
    "--draft-kind",
    "ngram",
    "--budget",
    "30",
    "--no-first-m",
    "--workers",
    "2",
    "--alpha",
    "0.01",
    "--progress-every",
    "0",
    "--json",
]
DECODER_KEYWORDS: dict[str, Any] = {
    "ours": True,
    "model": "x.gguf",
    "prompts": ["a", "b"],
    "depth": 8,
    "temperature": 0.7,
    "repeat_penalty": 1.2,
    "penalty_last_n": 16,
    "draft_top_k": 3,
    "k": 3,
    "weights": "int8",
    "draft_kind": "ngram",
    "budget": 30.0,
    "first_m": False,
    "workers": 2,
    "alpha": 0.01,
    "progress_every": 0.0,
}
DECODER_OBJECTS = DecoderOptions(
    DecoderUnderTest(
        ours=True, model="x.gguf", workers=2, weights="int8", draft=DraftFlags(draft_top_k=3, k=3, draft_kind="ngram")
    ),
    SamplingFlags(temperature=0.7, penalties=Penalties(repeat_penalty=1.2, penalty_last_n=16)),
    DepthDesign(depth=8, budget=30.0, first_m=False, alpha=0.01),
    DecoderReporting(progress_every=0.0),
    prompts=("a", "b"),
)


@pytest.fixture
def decoder_runs(monkeypatch: pytest.MonkeyPatch) -> list[DecoderOptions]:
    """The options each check-decoder run was handed (the run itself stubbed out)."""
    runs: list[DecoderOptions] = []

    def run(options: DecoderOptions) -> DecoderReport:
        runs.append(options)
        return DecoderReport("stub.gguf")

    monkeypatch.setattr("verispec.decoder.api.run", run)
    return runs


def test_check_decoder_options_are_one_object_from_the_cli_the_api_and_the_plugin(
    decoder_runs: list[DecoderOptions],
    verispec_check_decoder: Callable[..., DecoderReport],
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli.main(["check-decoder", *DECODER_ARGV])
    verispec.check_decoder(**DECODER_KEYWORDS)
    verispec.check_decoder(
        DECODER_OBJECTS.subject,
        prompts=["a", "b"],
        sampling=DECODER_OBJECTS.sampling,
        design=DECODER_OBJECTS.design,
        reporting=DECODER_OBJECTS.reporting,
    )
    verispec_check_decoder(**DECODER_KEYWORDS)
    capsys.readouterr()
    assert len(decoder_runs) == 4
    for options in decoder_runs:
        assert options == DECODER_OBJECTS


CHECK_ARGV = [
    "--verifier",
    VERIFIER,
    "--batch-verifier",
    "m:g",
    "--law-only",
    "--scale",
    "0.5",
    "--only",
    "contract",
    "--workers",
    "2",
    "--seed",
    "3",
    "--count",
    "4",
    "--fail-fast",
    "--min-power",
    "0.25",
    "--no-keep-going",
    "--shard",
    "1/2",
    "--json",
]
CHECK_KEYWORDS: dict[str, Any] = {
    "batch_verifier": "m:g",
    "law_only": True,
    "scale": 0.5,
    "only": ["contract"],
    "workers": 2,
    "seed": 3,
    "count": 4,
    "fail_fast": True,
    "min_power": 0.25,
    "keep_going": False,
    "shard": (1, 2),
}
CHECK_OBJECTS = CheckOptions(
    VerifierUnderTest(VERIFIER, batch_verifier="m:g", law_only=True, workers=2),
    CheckDesign(scale=0.5, only=("contract",), fail_fast=True, min_power=0.25, keep_going=False, shard="1/2"),
    seed=3,
    count=4,
)


@pytest.fixture
def check_runs(monkeypatch: pytest.MonkeyPatch) -> list[CheckOptions]:
    runs: list[CheckOptions] = []

    def run(options: CheckOptions) -> CheckReport:
        runs.append(options)
        return CheckReport("stub", {}, 1.0, [PropertyOutcome("contract", "passed", 1, 0.0, 1.0, "ok", 0.0)])

    monkeypatch.setattr("verispec.api.run", run)
    return runs


def _without_reporting(options: CheckOptions) -> CheckOptions:
    """The options but their callbacks (the CLI's print to the terminal: other objects each run)."""
    return replace(options, reporting=CheckReporting())


def test_check_options_are_one_object_from_the_cli_the_api_and_the_plugin(
    check_runs: list[CheckOptions], verispec_check: Callable[..., CheckReport], capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["check", *CHECK_ARGV])
    verispec.check(VERIFIER, **CHECK_KEYWORDS)
    verispec.check(CHECK_OBJECTS.subject, seed=3, count=4, design=CHECK_OBJECTS.design)
    verispec_check(VERIFIER, **CHECK_KEYWORDS)  # the session's scale is 1
    capsys.readouterr()
    assert len(check_runs) == 4
    for options in check_runs:
        assert _without_reporting(options) == CHECK_OBJECTS


def test_the_plugin_scales_the_objects_design_as_it_scales_the_keyword(
    check_runs: list[CheckOptions], verispec_check: Callable[..., CheckReport]
) -> None:
    verispec_check(VerifierUnderTest(VERIFIER), design=CheckDesign(scale=0.5, only=["contract"]))
    verispec_check(VERIFIER, scale=0.5, only=["contract"])
    assert check_runs[0] == check_runs[1] and check_runs[0].design.scale == 0.5


# -----------------------------------------------------------------------------------------------
# the keyword form: the same verdict as the object form
# -----------------------------------------------------------------------------------------------


def _timeless(value: Any) -> Any:
    """A report's JSON without its wall-clock times (the one part two identical runs differ in)."""
    if isinstance(value, dict):
        return {key: _timeless(item) for key, item in value.items() if key != "seconds"}
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    from tests.support.synthetic import write_synthetic

    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_synthetic(path, "tinyllama")
    return path


def test_the_keyword_form_reaches_the_object_forms_verdict(tiny_gguf: Path) -> None:
    by_keyword = verispec.check_decoder(
        mutant="bonus_from_wrong_row", model=tiny_gguf, depth=0, m=2, prompts=["hello"], temperature=0.9
    )
    by_object = verispec.check_decoder(
        verispec.DecoderUnderTest(mutant="bonus_from_wrong_row", model=tiny_gguf),
        prompts=["hello"],
        sampling=verispec.SamplingFlags(temperature=0.9),
        design=verispec.DepthDesign(depth=0, m=2),
    )
    assert not by_keyword.passed and _timeless(by_keyword.as_json()) == _timeless(by_object.as_json())
    by_keyword_check = verispec.check(VERIFIER, only=["contract", "vectors_sampled"])
    by_object_check = verispec.check(
        verispec.VerifierUnderTest(VERIFIER), design=verispec.CheckDesign(only=["contract", "vectors_sampled"])
    )
    assert by_keyword_check.passed
    assert _timeless(by_keyword_check.as_json()) == _timeless(by_object_check.as_json())


# -----------------------------------------------------------------------------------------------
# each object checks its own fields, with the CLI's errors
# -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: DecoderUnderTest(), "give exactly one decoder"),
        (lambda: DecoderUnderTest(42), r"engine must be 'module:function' or a callable, got 42 \(int\)"),
        (lambda: DecoderUnderTest(ours=True, workers=0), "workers must be an integer >= 1"),
        (lambda: DecoderUnderTest(lambda path: None, workers=2), "give it as 'module:FACTORY'"),
        (lambda: DecoderUnderTest(ours=True, weights="int4"), "weights must be auto, int8, exact or f32"),
        (lambda: DecoderUnderTest(ours=True, draft=3), r"draft must be a DraftFlags, got 3 \(int\)"),
        (lambda: DraftFlags(k=0), "k and max_tokens must be >= 1"),
        (lambda: SamplingFlags(temperature="1"), r"temperature must be a number, got '1' \(str\)"),
        (lambda: SamplingFlags(target_law="ours"), "target_law must be reference, engine-logits or two-sample"),
        (lambda: Penalties(penalty_last_n=1.5), "penalty_last_n must be an integer"),
        (lambda: DepthDesign(m=4), r"m must be in \[1, 3\], got 4"),
        (lambda: DepthDesign(depth=8.0), r"depth must be an integer, got 8\.0 \(float\)"),
        (lambda: DepthDesign(tv=0.0), r"tv must be in \(0, 1\]"),
        (lambda: DepthDesign(budget="60"), "budget must be a number of seconds"),
        (lambda: DecoderReporting(progress_every=-1), "progress_every must be a finite number of seconds >= 0"),
        (lambda: DecoderOptions(DecoderUnderTest(ours=True), prompts="one"), "prompts must be a list of strings"),
        (
            lambda: DecoderOptions(DecoderUnderTest(ours=True, workers=2), design=DepthDesign(depth=0)),
            "workers > 1 decodes the depth test's generations",
        ),
        (lambda: VerifierUnderTest(), "give verifier"),
        (lambda: VerifierUnderTest(VERIFIER, workers=0), "workers must be >= 1"),
        (lambda: CheckDesign(scale=float("inf")), "scale must be a finite number, got inf"),
        (lambda: CheckDesign(shard="3/2"), "shard must be I/S"),
        (lambda: CheckDesign(shard="1/2", budget=5.0), "a budget would leave holes"),
        (lambda: CheckOptions(VerifierUnderTest(VERIFIER), vectors="x", seed=1), "give one or the other"),
    ],
)
def test_each_object_checks_its_fields_when_built(build: Callable[[], object], message: str) -> None:
    with pytest.raises(CheckError, match=message):
        build()


def test_a_keyword_of_a_given_object_is_refused_and_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(CheckError, match="temperature: given in sampling= already"):
        verispec.check_decoder(ours=True, sampling=SamplingFlags(), temperature=0.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'depht'"):
        verispec.check_decoder(ours=True, depht=8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sacle'"):
        verispec.check(VERIFIER, sacle=0.5)
    with pytest.raises(CheckError, match=r"design must be a CheckDesign, got DepthDesign"):
        verispec.check(VERIFIER, design=DepthDesign())  # type: ignore[arg-type]


def _dests(command: str) -> set[str]:
    """The destinations of a subcommand's flags."""
    import argparse

    from verispec.cli import build_parser

    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {action.dest for action in subparsers.choices[command]._actions if action.dest != "help"}


def test_every_flag_is_a_field_and_every_field_but_the_callbacks_a_flag() -> None:
    """The CLI's builder reads the parsed flags by field name: a flag named otherwise would be lost."""
    from verispec.decoder.options import DECODER_KEYWORDS
    from verispec.options import CHECK_KEYWORDS

    outputs = {"json", "junit_xml"}
    assert _dests("check-decoder") - outputs == set(DECODER_KEYWORDS) - {"log", "progress"}
    merge = {"merge", "allow_partial"}
    assert _dests("check") - outputs - merge == set(CHECK_KEYWORDS) - {"log", "announce", "progress", "warn"}


def test_a_worker_recipe_carries_the_decoder_under_test() -> None:
    subject = DecoderUnderTest(mutant="bonus_from_wrong_row", model="/x.gguf", draft=DraftFlags(draft_top_k=5, k=3))
    recipe = verispec.decoder.recipe.WorkerRecipe.of(subject, Path("/x.gguf"), "/tmp")
    assert recipe.from_json(recipe.to_json()).subject() == subject
