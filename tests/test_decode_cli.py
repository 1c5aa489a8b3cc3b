"""`verispec generate --draft ...`: one-line errors before any work, and the evidence JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verispec.cli import main
from verispec.commands import speculative
from verispec.engine_load import load_engine

EVIDENCE_FIELDS = {
    "draft",
    "mode",
    "k",
    "adaptive",
    "p_min",
    "cycles",
    "drafting_cycles",
    "drafted",
    "accepted",
    "acceptance_rate",
    "accepted_per_pass",
    "tokens_per_pass",
    "per_position_acceptance",
    "target_passes",
    "draft_passes",
    "ttft_s",
    "tpot_s",
    "tokens_per_s",
    "plain_tokens_per_s",
    "plain_tpot_s",
    "measured_speedup",
    "draft_cost_ratio",
    "predicted_speedup",
    "verify_cost_ratio",
    "matches_plain",
    "trace",
    "tree_shape",
}


@pytest.mark.model
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--draft", "eagle"], "unknown draft spec 'eagle'"),
        (["--draft", "ngram", "--k", "0"], "k must be an integer >= 1, got 0"),
        (["--draft", "ngram", "--p-min", "1.5"], "p-min must be in [0, 1], got 1.5"),
        (["--draft", "ngram", "--p-min", "-0.1"], "p-min must be in [0, 1], got -0.1"),
        (["--draft", "layerskip:30"], "layerskip layer 30 is outside 1..29"),
        (["--draft", "layerskip:0"], "layerskip layer 0 is outside 1..29"),
        (["--draft", "model:GEMMA"], "vocabulary of 262144 tokens, the target 49152"),
        (["--draft", "model:/no/such.gguf"], "/no/such.gguf"),
    ],
)
def test_bad_input_one_line_before_work(
    flags: list[str],
    message: str,
    gemma3_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was loaded before the draft options were checked")

    monkeypatch.setattr(speculative, "load_engine", no_work)
    flags = [f.replace("GEMMA", str(gemma3_path)) for f in flags]
    assert main(["generate", "--model", "smollm2-135m", "--prompt", "hi", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("verispec: error: ") and message in err


@pytest.fixture(scope="module")
def target_loads() -> dict[tuple[Any, ...], Any]:
    """The target models the commands below loaded, by file and engine flags."""
    return {}


@pytest.fixture
def load_target_once(monkeypatch: pytest.MonkeyPatch, target_loads: dict[tuple[Any, ...], Any]) -> None:
    """The speculative command loads its target through the real loader (engine_load.load_engine,
    the default int8 mode), once for this file: the two commands ask for the same load, get the
    object a fresh load builds, and each decodes on caches of its own (no test mutates a model)."""

    def load_once(source: Any, *, need_chat: bool = False, **flags: Any) -> Any:
        key = (str(getattr(source, "path", source)), need_chat, *sorted(flags.items()))
        if key not in target_loads:
            target_loads[key] = load_engine(source, need_chat=need_chat, **flags)
        return target_loads[key]

    monkeypatch.setattr(speculative, "load_engine", load_once)


@pytest.mark.model
def test_json_evidence(capsys: pytest.CaptureFixture[str], load_target_once: None) -> None:
    argv = [
        "generate",
        "--prompt",
        "1, 2, 3, 1, 2, 3, 1, 2,",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "--draft",
        "ngram",
        "--k",
        "3",
        "--json",
        "--trace",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    spec = out["speculative"]
    assert set(spec) == EVIDENCE_FIELDS
    assert spec["draft"] == "ngram" and spec["mode"] == "greedy" and spec["matches_plain"] is True
    assert spec["tree_shape"] is None  # a single-path draft: no tree
    assert len(out["ids"]) == 8 and spec["target_passes"] == len(spec["trace"]) == spec["cycles"]
    assert sum(len(c["emitted"]) for c in spec["trace"]) == 8
    assert spec["accepted"] == sum(c["accepted"] for c in spec["trace"]) > 0  # the pattern repeats
    assert spec["measured_speedup"] > 0 and spec["plain_tokens_per_s"] > 0
    assert 0 <= spec["acceptance_rate"] <= 1 and spec["predicted_speedup"] > 0
    for cycle in spec["trace"]:
        assert set(cycle) >= {"drafted", "accepted", "first_rejection", "repaired", "bonus"}


@pytest.mark.model
def test_text_mode_layerskip_adaptive(capsys: pytest.CaptureFixture[str], load_target_once: None) -> None:
    argv = [
        "generate",
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "4",
        "--draft",
        "layerskip:24",
        "--adaptive",
        "--k",
        "3",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "speculative layerskip:24 (greedy), k=3 adaptive" in captured.err
    assert "same tokens as plain: True" in captured.err and "measured speedup" in captured.err
