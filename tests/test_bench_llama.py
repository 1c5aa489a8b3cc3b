"""`verispec bench`'s llama.cpp columns on the bench prompts (verispec/bench/llama.py ``measure``)
with a stand-in ``llama_cpp`` module, its decoders opened in this process (the bench opens them in a
child: tests/test_bench_peer_crash.py): llama_cpp is an optional extra that builds from source, so
the interleaving, the best-of-repeats rule, the fixed length (end of generation ignored, the
engine's prompt ids) and the decoders' settings are checked here against a stand-in whose every
rate is known exactly (a fake clock: no timing). Never asserts a speed."""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verispec.bench import llama, llama_child

PROMPTS = (("chat", (1, 5, 6)), ("code", (1, 7)))
TEXT = {(1, 5, 6): "hi", (1, 7): "def f():"}
# seconds a run takes: (decoder, prompt, repeat) -> seconds; each run makes max_tokens = 8 tokens
SECONDS = {
    ("plain", "hi", 0): 2.0,
    ("plain", "hi", 1): 1.0,
    ("lookup", "hi", 0): 1.0,
    ("lookup", "hi", 1): 3.0,
    ("plain", "def f():", 0): 3.0,
    ("plain", "def f():", 1): 6.0,
    ("lookup", "def f():", 0): 2.0,
    ("lookup", "def f():", 1): 2.0,
}
TOKENS = 8
EOS = 2  # the stand-in emits it first: the bench's fixed-length runs must not stop there


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class StandInLookup:
    def __init__(self, num_pred_tokens: int) -> None:
        self.num_pred_tokens = num_pred_tokens


def stand_in_module(clock: Clock, log: list[tuple[str, ...]], made: list[dict[str, Any]]) -> types.ModuleType:
    class Llama:
        def __init__(self, **kwargs: Any) -> None:
            made.append(kwargs)
            self.name = "lookup" if "draft_model" in kwargs else "plain"
            self.calls: dict[str, int] = {}

        def reset(self) -> None:
            log.append((self.name, "reset"))

        def generate(self, ids: list[int], **kwargs: Any) -> Iterator[int]:
            assert kwargs == {"temp": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "reset": True}
            prompt = TEXT[tuple(ids)]  # the engine's own prompt ids go in
            repeat = self.calls.get(prompt, 0)
            self.calls[prompt] = repeat + 1
            log.append((self.name, prompt))
            clock.now += SECONDS[(self.name, prompt, repeat)]
            while True:  # like llama-cpp-python's generate: it never stops by itself
                yield EOS

    module = types.ModuleType("llama_cpp")
    module.Llama = Llama  # type: ignore[attr-defined]
    module.__version__ = "stand-in"  # type: ignore[attr-defined]
    module.llama_print_system_info = lambda: b"AVX2 = 1 | AMX_INT8 = 0 "  # type: ignore[attr-defined]
    return module


def in_process(path: Path, n_ctx: int, k: int, threads: int, seed: int) -> llama.Decoders:
    return llama_child.LlamaDecoders(path, n_ctx, k, threads, seed)


def test_measure_interleaves_the_decoders_and_the_engine_and_keeps_each_ones_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, log, made = Clock(), [], []  # type: ignore[var-annotated]
    speculative = types.ModuleType("llama_cpp.llama_speculative")
    speculative.LlamaPromptLookupDecoding = StandInLookup  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", stand_in_module(clock, log, made))
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", speculative)
    monkeypatch.setattr(llama_child, "time", clock)
    engine_rates = iter(
        [
            {"plain_tok_s": 5.0, "speculative_tok_s": 9.0},
            {"plain_tok_s": 7.0, "speculative_tok_s": 8.0},
            {"plain_tok_s": 1.0, "speculative_tok_s": 2.0},
            {"plain_tok_s": 3.0, "speculative_tok_s": 1.0},
        ]
    )

    def engine(kind: str, ids: tuple[int, ...]) -> dict[str, float]:
        log.append(("engine", TEXT[ids]))
        return {**next(engine_rates), "generated_tokens": TOKENS}

    out = llama.measure(
        Path("m.gguf"),
        PROMPTS,
        max_tokens=TOKENS,
        k=5,
        threads=3,
        repeats=2,
        seed=7,
        engine=engine,
        open_decoders=in_process,
    )

    assert [m["n_threads"] for m in made] == [3, 3] and [m["n_threads_batch"] for m in made] == [3, 3]
    assert all(m["model_path"] == "m.gguf" and m["seed"] == 7 and m["n_ctx"] >= 3 + TOKENS for m in made)
    assert "draft_model" not in made[0] and made[1]["draft_model"].num_pred_tokens == 5
    calls = [entry for entry in log if entry[1] != "reset"]
    round_of = [("plain", "{t}"), ("lookup", "{t}"), ("engine", "{t}")]
    assert calls == [(side, t) for t in ("hi", "def f():") for _ in range(2) for side, _ in round_of]
    assert sum(1 for entry in log if entry[1] == "reset") == 8  # before every run: no KV reuse
    assert out["available"] is True and out["status"] == "ok" and out["version"] == "stand-in"
    assert out["threads"] == 3 and out["num_pred_tokens"] == 5 and out["system_info"] == "AVX2 = 1 | AMX_INT8 = 0"
    assert out["generated_tokens"] == TOKENS and out["eog"] == "ignored"
    # every run decodes exactly max_tokens, past the end-of-generation token, from the same prompt ids
    assert all(r["tokens"] == TOKENS for name in llama.DECODERS for r in out[name]["runs"])
    assert [r["prompt_tokens"] for r in out["plain"]["runs"]] == [3, 2]
    # best of the two repeats: tokens / the shorter run
    assert [r["tok_s"] for r in out["plain"]["runs"]] == [TOKENS / 1.0, TOKENS / 3.0]
    assert [r["tok_s"] for r in out["prompt_lookup"]["runs"]] == [TOKENS / 1.0, TOKENS / 2.0]
    assert out["plain"]["geomean_tok_s"] == pytest.approx(math.sqrt(8.0 * 8.0 / 3.0))
    assert out["engine_runs"] == [
        {"prompt": "chat", "temperature": 0.0, "plain_tok_s": 7.0, "speculative_tok_s": 9.0, "tokens": TOKENS},
        {"prompt": "code", "temperature": 0.0, "plain_tok_s": 3.0, "speculative_tok_s": 2.0, "tokens": TOKENS},
    ]
