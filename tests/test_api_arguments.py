"""The arguments of ``verispec.check`` / ``verispec.check_decoder`` (and so of the two commands)
checked by type and range at the API boundary (verispec/arguments.py): every wrong one is a
CheckError naming it, before anything is imported, loaded or run; ``--scale inf`` is one line.
"""

from __future__ import annotations

from typing import Any

import pytest

import verispec
from verispec import cli
from verispec.spec.check import CheckError

REFERENCE = "verispec.reference.speculative"
VERIFIER = f"{REFERENCE}:verify_sampled"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scale": "0.5"}, r"scale must be a number, got '0\.5' \(str\)"),
        ({"scale": float("inf")}, "scale must be a finite number, got inf"),
        ({"scale": float("nan")}, "scale must be a finite number, got nan"),
        ({"scale": True}, r"scale must be a number, got True \(bool\)"),
        ({"timeout": "5"}, r"timeout must be a number, got '5' \(str\)"),
        ({"budget": "60"}, r"budget must be > 0 seconds, got '60' \(str\)"),
        ({"workers": 2.0}, r"workers must be an integer, got 2\.0 \(float\)"),
        ({"workers": "2"}, r"workers must be an integer, got '2' \(str\)"),
        (
            {"workers": 100_000},
            r"workers must be at most 256 \(one process each\), got 100000",
        ),  # not 100,000 processes
        ({"seed": "1"}, r"seed must be an integer"),
        ({"count": 1.5}, r"count must be an integer"),
        ({"budget_samples": "9"}, r"budget_samples must be an integer"),
        ({"shard": (1, 2.5)}, r"shard must be I/S with 1 <= I <= S, got \(1, 2\.5\)"),
        ({"shard": (True, 2)}, r"shard must be I/S"),
        ({"only": "contract"}, r"only must be a list of strings, got 'contract' \(str\)"),
        ({"law_only": "yes"}, r"law_only must be True or False"),
        ({"batch_verifier": 3}, r"batch_verifier must be 'module:function' or a callable, got 3 \(int\)"),
        ({"vectors": 7}, r"vectors must be a path"),
    ],
)
def test_a_wrong_type_is_a_check_error_naming_the_argument(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckError, match=message):
        verispec.check(VERIFIER, **{"only": ["contract"], **kwargs})


def test_a_number_for_the_verifier_is_a_check_error_not_a_failed_verifier() -> None:
    with pytest.raises(CheckError, match=r"verifier must be 'module:function' or a callable, got 42 \(int\)"):
        verispec.check(42, only=["contract"])  # type: ignore[arg-type]


def test_scale_inf_on_the_command_line_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--verifier", VERIFIER, "--only", "contract", "--scale", "inf"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == "verispec: error: scale must be a finite number, got inf" and captured.out == ""


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ours": True, "m": "2"}, r"m must be an integer, got '2' \(str\)"),
        ({"ours": True, "depth": 8.0}, r"depth must be an integer, got 8\.0 \(float\)"),
        ({"ours": True, "temperature": "1"}, r"temperature must be a number, got '1' \(str\)"),
        ({"ours": True, "top_k": 4.5}, r"top_k must be an integer"),
        ({"ours": True, "tv": float("nan")}, r"tv must be a finite number"),
        ({"ours": True, "greedy": 1}, r"greedy must be True or False"),
        ({"ours": True, "prompts": "The cat"}, r"prompts must be a list of strings"),
        ({"engine": 42}, r"engine must be 'module:function' or a callable, got 42 \(int\)"),
        ({"ours": True, "model": 3}, r"model must be a path"),
        ({"ours": True, "depth": 8, "workers": 100_000}, r"workers must be at most 256"),
        ({"ours": True, "draft_top_k": -1}, r"draft_top_k must be >= 0, got -1"),  # our draft's law: usage
        ({"ours": True, "draft_temperature": -0.5}, r"draft_temperature must be >= 0, got -0\.5"),
    ],
)
def test_check_decoder_types_are_check_errors_before_the_model_loads(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckError, match=message):
        verispec.check_decoder(**{"model": "/nonexistent.gguf", **kwargs})


@pytest.mark.parametrize("option, ini", [(float("inf"), "1"), (None, "inf"), (None, "1e400")])
def test_an_infinite_plugin_scale_is_a_usage_error(option: float | None, ini: str) -> None:
    from verispec.pytest_plugin import scale_factor

    class Config:
        def getoption(self, name: str) -> float | None:
            return option

        def getini(self, name: str) -> str:
            return ini

    with pytest.raises(pytest.UsageError, match="verispec_scale must be finite"):
        scale_factor(Config())  # type: ignore[arg-type]
