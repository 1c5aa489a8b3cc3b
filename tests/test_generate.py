"""reference/generate.py and the `generate` / `logits` commands.

The decoding loop is first checked on scripted fakes (a model whose greedy choice is dictated, a
tokenizer whose pieces are known), so stop strings, EOG and accounting are tested exactly; then on
SmolLM2 end to end against llama.cpp's greedy continuation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.tolerances import assert_within, forward_spread
from verispec import cli
from verispec.commands import generate as generate_command
from verispec.commands import logits as logits_command
from verispec.engine_load import load_engine
from verispec.reference.errors import ContextOverflow, ModelError, SamplingError
from verispec.reference.generate import GenerationRequest, encode_prompt, fit_context, generate, prompt_logits
from verispec.reference.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)

# -- scripted fakes -----------------------------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("blas_single_thread")


@dataclass
class FakeConfig:
    n_vocab: int = 64
    context_length: int = 64


@dataclass
class FakeCache:
    capacity: int
    length: int = 0


@dataclass
class FakeResult:
    logits: Any


@dataclass
class ScriptedModel:
    """Greedy decoding of this model yields ``script`` in order (one-hot-ish logits)."""

    script: list[int]
    config: FakeConfig = field(default_factory=FakeConfig)
    calls: list[list[int]] = field(default_factory=list)

    def new_cache(self, capacity: int | None = None) -> FakeCache:
        return FakeCache(capacity or self.config.context_length)

    def forward(self, tokens: list[int], cache: FakeCache) -> FakeResult:
        self.calls.append(list(tokens))
        assert cache.length + len(tokens) <= cache.capacity
        cache.length += len(tokens)
        step = len(self.calls) - 1
        logits = np.zeros((len(tokens), self.config.n_vocab), np.float32)
        if step < len(self.script):
            logits[-1, self.script[step]] = 5.0
        return FakeResult(logits)


class FakeStream:
    def __init__(self, pieces: dict[int, str]) -> None:
        self.pieces = pieces

    def push(self, token: int) -> str:
        return self.pieces.get(token, "?")

    def flush(self) -> str:
        return ""


@dataclass
class FakeTokenizer:
    pieces: dict[int, str]
    eog_ids: frozenset[int] = frozenset({15})
    bos_id: int | None = 0

    def stream_decoder(self) -> FakeStream:
        return FakeStream(self.pieces)


PIECES = {
    i: s
    for i, s in enumerate(
        ["<s>", "Hel", "lo", " wor", "ld", "!", " E", "N", "D", " x", "E", "ND", "a", "b", "c", "</s>"]
    )
}


def _run(script: list[int], **request: Any) -> tuple[Any, list[str], ScriptedModel]:
    model = ScriptedModel(script)
    streamed: list[str] = []
    req = GenerationRequest(
        prompt_ids=request.pop("prompt_ids", (0, 1)), params=request.pop("params", GREEDY), **request
    )
    result = generate(model, FakeTokenizer(PIECES), req, on_text=streamed.append)  # type: ignore[arg-type]
    return result, streamed, model


def test_max_tokens_and_accounting() -> None:
    result, streamed, model = _run([1, 2, 3, 4, 5], max_tokens=4)
    assert result.ids == (1, 2, 3, 4) and result.text == "Hello world" and result.stop_reason == "max_tokens"
    assert "".join(streamed) == result.text
    assert model.calls == [[0, 1], [1], [2], [3]]  # the last token is never fed back
    s = result.stats
    assert (s.prompt_tokens, s.generated_tokens, s.target_passes) == (2, 4, 4)
    assert s.ttft_s > 0 and s.tpot_s >= 0 and s.tokens_per_s > 0


def test_eog_ends_without_being_rendered() -> None:
    result, streamed, _ = _run([1, 2, 15, 3], max_tokens=10)
    assert result.ids == (1, 2, 15) and result.text == "Hello" and result.stop_reason == "eog"
    assert result.stats.target_passes == 3


def test_extra_stop_ids() -> None:
    result, _, _ = _run([1, 2, 13, 3], max_tokens=10, stop_ids=frozenset({13}))
    assert result.ids == (1, 2, 13) and result.stop_reason == "eog" and result.text == "Hello"


def test_stop_string_across_tokens_is_never_streamed() -> None:
    # " E" "N" "D" completes " END": the text is cut before it, and " E"/"N" were held back
    result, streamed, _ = _run([1, 2, 6, 7, 8, 3], max_tokens=10, stop=(" END",))
    assert result.text == "Hello" and result.stop_reason == "stop"
    assert result.ids == (1, 2, 6, 7, 8)
    assert "".join(streamed) == "Hello" and all("E" not in s for s in streamed)


def test_held_back_prefix_is_released_when_it_cannot_complete() -> None:
    # " E" could start " END"; then " x" shows it did not: everything is released, in order
    result, streamed, _ = _run([1, 6, 9, 12], max_tokens=4, stop=(" END",))
    assert result.text == "Hel E xa" and result.stop_reason == "max_tokens"
    assert streamed == ["Hel", " E x", "a"]


def test_stop_string_inside_one_token_and_earliest_wins() -> None:
    result, streamed, _ = _run([1, 10, 11, 5], max_tokens=10, stop=("lENDx", "END"))
    assert result.text == "Hel" and "".join(streamed) == "Hel" and result.ids == (1, 10, 11)


def test_max_tokens_zero_does_no_work() -> None:
    result, streamed, model = _run([1], max_tokens=0)
    assert result.ids == () and result.text == "" and model.calls == [] and result.stats.target_passes == 0


def test_context_overflow_before_any_work() -> None:
    model = ScriptedModel([1] * 100)
    req = GenerationRequest(prompt_ids=tuple(range(1, 11)), params=GREEDY, max_tokens=60)
    with pytest.raises(ContextOverflow, match=r"10 tokens plus max_tokens 60 exceeds the context length 64"):
        generate(model, FakeTokenizer(PIECES), req)  # type: ignore[arg-type]
    assert model.calls == []


def test_truncate_keeps_bos_and_the_newest_tokens() -> None:
    assert fit_context([0, 1, 2, 3, 4, 5], 3, 6, truncate=True, bos_id=0) == [0, 4, 5]
    assert fit_context([7, 1, 2, 3, 4, 5], 3, 6, truncate=True, bos_id=0) == [3, 4, 5]
    assert fit_context([0, 1, 2], 3, 6, truncate=False, bos_id=0) == [0, 1, 2]
    with pytest.raises(ContextOverflow):
        fit_context([0, 1], 6, 6, truncate=True, bos_id=0)  # no room even for one prompt token
    result, _, model = _run([3, 4], prompt_ids=tuple(range(0, 63)), max_tokens=2, truncate=True)
    assert result.prompt_ids == (0,) + tuple(range(1, 63))[-61:] and len(model.calls[0]) == 62


@pytest.mark.parametrize(
    "params, message",
    [
        (SamplingParams(temperature=-1.0), "temperature"),
        (SamplingParams(top_p=0.0), "top_p"),
        (SamplingParams(top_p=1.5), "top_p"),
        (SamplingParams(top_k=-2), "top_k"),
    ],
)
def test_invalid_sampling_parameters(params: SamplingParams, message: str) -> None:
    with pytest.raises(SamplingError, match=message):
        _run([1], params=params, max_tokens=2)


def test_seeded_sampling_is_reproducible() -> None:
    class Noisy(ScriptedModel):
        def forward(self, tokens: list[int], cache: FakeCache) -> FakeResult:
            cache.length += len(tokens)
            return FakeResult(np.zeros((len(tokens), self.config.n_vocab), np.float32))  # uniform law

    def ids(seed: int) -> tuple[int, ...]:
        req = GenerationRequest(prompt_ids=(0,), params=SamplingParams(), max_tokens=12, seed=seed)
        tok = FakeTokenizer(PIECES, eog_ids=frozenset())
        return generate(Noisy([]), tok, req).ids  # type: ignore[arg-type]

    assert ids(7) == ids(7)
    assert ids(7) != ids(8)


# -- the real default model ---------------------------------------------------------------------------


@pytest.mark.model
def test_empty_prompt_is_bos_alone(smollm2_tokenizer: Any) -> None:
    assert encode_prompt(smollm2_tokenizer, "") == [smollm2_tokenizer.bos_id]


@pytest.mark.model
@pytest.mark.oracle
def test_greedy_generation_matches_llamacpp(smollm2_model: Any, smollm2_tokenizer: Any, golden: dict[str, Any]) -> None:
    g = next(x for x in golden["models"]["smollm2-135m-q4_1"]["greedy"] if x["prompt"] == "The capital of France is")
    ids = encode_prompt(smollm2_tokenizer, g["prompt"])
    assert ids == g["prompt_ids"]
    # llama.cpp's margins: 2.54 1.21 1.40 1.49 0.92 0.33 ...: compare before its first margin < 0.5
    result = generate(smollm2_model, smollm2_tokenizer, GenerationRequest(tuple(ids), GREEDY, max_tokens=5))
    assert list(result.ids) == g["continuation_ids"][:5]
    assert result.text == smollm2_tokenizer.decode(g["continuation_ids"][:5])
    assert result.stats.target_passes == 5 and result.stats.generated_tokens == 5


@pytest.fixture(scope="module")
def engine_loads() -> dict[tuple[Any, ...], Any]:
    """The models the commands loaded in this file, by what they asked for (see cli_with_smollm2)."""
    return {}


def _load_request(source: Any, flags: dict[str, Any]) -> tuple[Any, ...]:
    """What a load is of: the model and the engine flags (``need_chat`` only checks the chat format)."""
    return (source, *sorted(flags.items()))


@pytest.fixture
def cli_with_smollm2(monkeypatch: pytest.MonkeyPatch, engine_loads: dict[tuple[Any, ...], Any]) -> None:
    """The commands load through the real loader (engine_load.load_engine: the registry name, the
    default ``auto`` weights, the engine), each distinct request once in this file: test_cli_generate_json
    and test_cli_empty_prompt share the default (int8) load; the chat and logits tests share the exact
    one, which test_cli_loads_a_model_for_real made. A kept load is the object a fresh one builds
    (``need_chat`` only checks the chat format, which SmolLM2 has; a request that would be refused
    goes to the loader again), and no test mutates a model: each command runs on a cache of its own."""

    def load_once(source: Any, *, need_chat: bool = False, **flags: Any) -> Any:
        key = _load_request(source, flags)
        if key not in engine_loads or (need_chat and engine_loads[key].chat is None):
            engine_loads[key] = load_engine(source, need_chat=need_chat, **flags)
        return engine_loads[key]

    monkeypatch.setattr(generate_command, "load_engine", load_once)
    monkeypatch.setattr(logits_command, "load_engine", load_once)


@pytest.mark.model
def test_cli_loads_a_model_for_real(
    monkeypatch: pytest.MonkeyPatch,
    engine_loads: dict[tuple[Any, ...], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command's own load (registry name, exact weights): always a fresh one, which the later
    commands in this file then reuse (it runs first in the file; in any other order they load again)."""

    loads: list[Any] = []

    def load_and_keep(source: Any, *, need_chat: bool = False, **flags: Any) -> Any:
        loads.append(load_engine(source, need_chat=need_chat, **flags))
        engine_loads[_load_request(source, flags)] = loads[-1]
        return loads[-1]

    monkeypatch.setattr(logits_command, "load_engine", load_and_keep)
    out = tmp_path / "l.npy"
    assert cli.main(["logits", "--model", "smollm2-135m", "--prompt", "Hello world", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["prompt_ids"] == [19556, 905] and np.load(out).shape == (2, 49152)
    assert len(loads) == 1  # the command loaded through the real loader


@pytest.mark.model
def test_cli_generate_json(cli_with_smollm2: None, capsys: pytest.CaptureFixture[str], golden: dict[str, Any]) -> None:
    status = cli.main(
        ["generate", "--prompt", "The capital of France is", "--max-tokens", "6", "--temperature", "0", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert set(out) >= {"prompt_ids", "ids", "text", "stats"}
    assert set(out["stats"]) == {
        "prompt_tokens",
        "generated_tokens",
        "ttft_s",
        "tpot_s",
        "tokens_per_s",
        "target_passes",
    }
    assert out["prompt_ids"] == [504, 3575, 282, 4649, 314]
    g = next(x for x in golden["models"]["smollm2-135m-q4_1"]["greedy"] if x["prompt"] == "The capital of France is")
    assert out["ids"][:5] == g["continuation_ids"][:5]  # before llama.cpp's first margin < 0.5
    assert len(out["ids"]) == 6 == out["stats"]["generated_tokens"] and out["text"]


@pytest.mark.model
def test_cli_generate_chat_streams_and_stops_at_end_of_turn(
    cli_with_smollm2: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # the exact mode: the reference's numerics, whose answer here is known (the int8 default's own
    # greedy answer parts from it at a near-tie and need not name Paris)
    status = cli.main(
        [
            "generate",
            "--chat",
            "--prompt",
            "What is the capital of France?",
            "--max-tokens",
            "40",
            "--temperature",
            "0",
            "--exact",
        ]
    )
    captured = capsys.readouterr()
    assert status == 0
    assert "Paris" in captured.out and "<|im_end|>" not in captured.out
    assert "(eog)" in captured.err and "target passes" in captured.err


@pytest.mark.model
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--top-p", "1.5"], "top_p"),
        (["--temperature", "-0.5"], "temperature"),
        (["--top-k", "-1"], "top_k"),
        (["--max-tokens", "9000"], "context length 8192"),
    ],
)
def test_cli_bad_input_is_one_line(
    cli_with_smollm2: None, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    status = cli.main(["generate", "--prompt", "hi", *flags])
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1


@pytest.mark.model
def test_cli_empty_prompt(cli_with_smollm2: None, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["generate", "--prompt", "", "--max-tokens", "2", "--temperature", "0", "--json"])
    assert status == 0 and json.loads(capsys.readouterr().out)["prompt_ids"] == [1]


@pytest.mark.model
def test_cli_logits(
    cli_with_smollm2: None, smollm2_model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "logits.npy"
    assert cli.main(["logits", "--prompt", "<|im_start|>user", "--out", str(out)]) == 0
    plain = np.load(out)
    assert cli.main(["logits", "--prompt", "<|im_start|>user", "--out", str(out), "--special"]) == 0
    special = np.load(out)
    assert plain.dtype == np.float32 and plain.shape[1] == 49152
    assert special.shape == (2, 49152) and plain.shape[0] > 2  # the marker is one token only with --special
    # the CLI's pass and this one: float32 evaluations of one forward, within the derived tolerance
    spread = forward_spread(smollm2_model, (1, 4093), samples=16).logits
    assert spread is not None
    assert_within(special, prompt_logits(smollm2_model, [1, 4093]), spread.tolerance, "CLI logits")
    assert "float32 [2, 49152]" in capsys.readouterr().out


def test_prompt_logits_refuses_overlong(tiny_gguf: Any) -> None:
    from verispec.reference.model import Model

    model = Model.load(tiny_gguf("llama", context_length=8))
    with pytest.raises(ContextOverflow):
        prompt_logits(model, list(range(9)))
    with pytest.raises(ModelError):
        generate(model, None, GenerationRequest(prompt_ids=()))  # type: ignore[arg-type]
