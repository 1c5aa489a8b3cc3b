"""Misuse is caught before work: every bad flag is one line on stderr and exit status 2, and no
model is loaded (the loaders are replaced by a tripwire). verispec/commands/validate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import verispec.commands.generate_early_exit  # noqa: F401  (imported before any patch: see tripwire)
import verispec.commands.speculative  # noqa: F401
import verispec.engine.weights as engine_weights
from tests.support.tiny_gguf import write_tiny_gguf
from verispec import engine_load
from verispec.cli import main
from verispec.commands.validate import MAX_K, MAX_TEMPERATURE
from verispec.engine.model import FastModel
from verispec.reference.model import Model

CONTEXT = 256


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("validate") / "tiny.gguf", context_length=CONTEXT, n_layer=3)


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace every way a command loads weights; record any call. (The modules are imported at
    the top of this file: a ``from engine import load_model`` run while a patch is active would
    keep that test's tripwire for good.)"""
    calls: list[str] = []

    def trip(name: str) -> Any:
        def loader(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} called before the flags were checked")

        return loader

    monkeypatch.setattr(Model, "load", trip("Model.load"))
    monkeypatch.setattr(FastModel, "load", trip("FastModel.load"))
    monkeypatch.setattr(engine_load, "load_model", trip("engine.load_model"))
    monkeypatch.setattr(engine_weights, "load_weights", trip("load_weights"))
    return calls


BAD_GENERATE = [
    (["--temperature", "-1"], "temperature"),
    (["--temperature", "nan"], "temperature"),
    (["--temperature", "1e308"], f"<= {MAX_TEMPERATURE:g}"),
    (["--top-p", "2"], "top_p"),
    (["--top-p", "0"], "top_p"),
    (["--min-p", "-0.5"], "min_p"),
    (["--top-k", "-3"], "top_k"),
    (["--repeat-penalty", "0"], "repeat_penalty"),
    (["--repeat-penalty", "inf"], "repeat_penalty"),
    (["--seed", "-1"], "--seed"),
    (["--max-tokens", "-1"], "--max-tokens"),
    (["--max-tokens", str(CONTEXT)], "context length"),
    (["--stop", ""], "--stop"),
    (["--draft", "bogus"], "draft spec"),
    (["--draft", "ngram", "--k", "0"], "k must be"),
    (["--draft", "ngram", "--k", "10000"], f"<= {MAX_K}"),
    (["--draft", "ngram", "--p-min", "1.5"], "p-min"),
    (["--draft", "layerskip:7"], "layer"),
    (["--draft", "model:/nonexistent/draft.gguf"], "not a file"),
    (["--audit"], "--audit goes with --early-exit"),
    (["--early-exit", "cal.json", "--draft", "ngram", "--temperature", "0"], "give one"),
    (["--early-exit", "cal.json"], "greedy"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_GENERATE, ids=[" ".join(f) for f, _ in BAD_GENERATE])
def test_bad_generate_flags_fail_before_the_model_loads(
    tiny: Path, tripwire: list[str], capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["generate", "--model", str(tiny), "--prompt", "hi", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verispec: error: ") and err.count("\n") == 1, err
    assert message in err
    assert tripwire == []


def test_good_flags_reach_the_loader(tiny: Path, tripwire: list[str]) -> None:
    # the tripwire itself works: valid flags get as far as loading the model
    with pytest.raises(AssertionError, match="before the flags were checked"):
        main(
            [
                "generate",
                "--model",
                str(tiny),
                "--prompt",
                "hi",
                "--max-tokens",
                str(CONTEXT - 1),
                "--temperature",
                str(MAX_TEMPERATURE),
                "--draft",
                "ngram",
                "--k",
                str(MAX_K),
            ]
        )
    assert tripwire


@pytest.mark.parametrize("out", ["missing-folder/x.npy", "."])
def test_logits_output_is_checked_first(
    tiny: Path, tripwire: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, out: str
) -> None:
    assert main(["logits", "--model", str(tiny), "--prompt", "hi", "--out", str(tmp_path / out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert tripwire == []
