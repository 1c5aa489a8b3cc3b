"""A peer engine that crashes is contained: `verispec bench` runs llama.cpp in a child process
(verispec/bench/peer.py, verispec/bench/llama_child.py) and reports the child's death as that
peer's result, then goes on and exits 0.

The peers here are stand-ins (no llama_cpp needed): small Python programs that answer the first
request and then kill themselves with SIGSEGV, as ggml's AMX kernel does at the first prompt pass
of a ``-march=native`` build on an Intel AMX machine; one that never answers; one that answers
with an error. Each case asserts what it observes (the signal, the exit status, the stderr tail,
the process group gone); the timeouts are safety nets for a hang, not timing claims.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import SEGV_AT_FIRST_RUN, group_gone
from verispec.bench import llama, llama_child
from verispec.bench.peer import PeerProcess
from verispec.bench.text import format_llama
from verispec.reference.errors import PeerFailed

SEGV_AT_OPEN = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGSEGV)"
NEVER_ANSWERS = "import sys, time; sys.stdin.readline(); time.sleep(60)"
ANSWERS_AN_ERROR = (
    "import json, sys; sys.stdin.readline(); "
    "sys.stdout.write(json.dumps({'ok': False, 'error': 'ValueError: bad model'}) + '\\n'); sys.stdout.flush(); "
    "sys.stdin.readline()"
)
HANG_NET = 60.0


def peer(code: str, timeout_s: float = HANG_NET) -> PeerProcess:
    return PeerProcess([sys.executable, "-c", code], timeout_s=timeout_s)


def test_a_peer_killed_by_sigsegv_is_reported_with_its_signal_and_stderr() -> None:
    process = peer(SEGV_AT_FIRST_RUN)
    pgid = process._proc.pid  # type: ignore[union-attr]
    assert process.call("open")["version"] == "stand-in"
    with pytest.raises(PeerFailed) as failed:
        process.call("run", name="plain")
    result = failed.value.result
    assert result["status"] == "crashed" and result["signal"] == "SIGSEGV"
    assert result["exit_code"] == -signal.SIGSEGV and result["during"] == "run"
    assert result["stderr_tail"][-1] == "ggml_backend_amx: prompt eval"
    assert "killed by SIGSEGV" in str(failed.value) and "during run" in str(failed.value)
    process.close()
    assert group_gone(pgid)


def test_a_peer_that_never_answers_times_out_and_is_killed() -> None:
    process = peer(NEVER_ANSWERS, timeout_s=1.0)
    pgid = process._proc.pid  # type: ignore[union-attr]
    with pytest.raises(PeerFailed) as failed:
        process.call("open")
    assert failed.value.result["status"] == "timed out" and "no reply within 1 s" in failed.value.result["error"]
    assert group_gone(pgid)


def test_an_error_reply_is_a_failure_not_a_crash() -> None:
    with pytest.raises(PeerFailed) as failed:
        peer(ANSWERS_AN_ERROR).call("open")
    assert failed.value.result["status"] == "failed" and "ValueError: bad model" in failed.value.result["error"]


def stand_in_child(code: str) -> llama.OpenDecoders:
    def open_decoders(path: Path, n_ctx: int, k: int, threads: int, seed: int) -> llama.Decoders:
        return llama_child.ChildDecoders(path, n_ctx, k, threads, seed, argv=[sys.executable, "-c", code])

    return open_decoders


@pytest.mark.parametrize("code, during", [(SEGV_AT_FIRST_RUN, "run"), (SEGV_AT_OPEN, "open")])
def test_the_llama_section_reports_a_crash_as_its_result(code: str, during: str) -> None:
    engine_calls: list[str] = []

    def engine(kind: str, ids: tuple[int, ...]) -> dict[str, float]:
        engine_calls.append(kind)
        return {"plain_tok_s": 1.0, "speculative_tok_s": 1.0, "generated_tokens": 4}

    out = llama.measure(
        Path("m.gguf"),
        [("chat", (1, 2, 3))],
        max_tokens=4,
        k=4,
        threads=1,
        repeats=1,
        engine=engine,
        open_decoders=stand_in_child(code),
    )
    assert out["available"] is False and out["status"] == "crashed"
    assert out["crash"]["signal"] == "SIGSEGV" and out["crash"]["during"] == during
    assert "killed by SIGSEGV" in out["note"]
    assert engine_calls == []  # the crash came before the engine's turn in the first round
    assert all(v is None for v in llama.ratios(out, []).values())  # no ratio from a dead peer
    lines = format_llama(out)
    assert lines[0].startswith("llama.cpp: crashed (killed by SIGSEGV")
    json.dumps(out)  # the result is plain JSON


def test_the_child_module_serves_the_protocol() -> None:
    """`python -m verispec.bench.llama_child` answers in JSON lines on a private stdout; a request
    before `open` or an unknown one is an error reply, not a crash."""
    process = PeerProcess(llama_child.child_argv(), timeout_s=HANG_NET)
    with pytest.raises(PeerFailed) as failed:
        process.call("tokenize", text="hi")
    assert failed.value.result["status"] == "failed" and "before 'open'" in failed.value.result["error"]


def test_bench_survives_a_crashing_llama_cpp_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole command on a small synthetic llama file: llama.cpp "installed" but faulting at
    its first prompt pass; the bench prints its full report with llama.cpp's crash as llama.cpp's
    result, and exits 0."""
    from tests.support.synthetic import write_synthetic
    from verispec import cli
    from verispec.bench.report import BenchReport

    model = tmp_path / "tinyllama.gguf"
    write_synthetic(model, "tinyllama")
    monkeypatch.setattr(llama, "available", lambda: True)
    monkeypatch.setattr(llama_child, "child_argv", lambda: [sys.executable, "-c", SEGV_AT_FIRST_RUN])
    status = cli.main(
        [
            "bench",
            "--model",
            str(model),
            "--json",
            "--tokens",
            "2",
            "--prefill-tokens",
            "4",
            "--no-reference",
            "--no-kernels",
            "--no-backends",
            "--no-rss",
            "--prompts",
            "chat",
            "--repeats",
            "1",
            "--matmul-repeats",
            "1",
            "--k",
            "2",
        ]
    )
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert BenchReport.from_json(report).as_json() == report
    crash: dict[str, Any] = report["llama_cpp"]["crash"]
    assert report["llama_cpp"]["status"] == "crashed" and crash["signal"] == "SIGSEGV" and crash["exit_code"] == -11
    assert report["plain"]["tok_s"] > 0 and report["speculative"]["ngram"]["runs"]  # everything else measured


# A stand-in llama_cpp package for the real child (python -m verispec.bench.llama_child): its
# native-looking prints go to file descriptor 1, which the child must keep away from its replies.
FAKE_LLAMA_CPP = """
import os
__version__ = "fake"
os.write(1, b"ggml noise on stdout\\n")


def llama_print_system_info():
    return b"AVX = 1 | AVX2 = 1 | AMX_INT8 = 0 "


class Llama:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def reset(self):
        pass

    def tokenize(self, text, special=False):
        return [len(text), 1]

    def generate(self, ids, **kwargs):
        os.write(1, b"more noise\\n")
        while True:
            yield ids[-1] + 1
"""
FAKE_SPECULATIVE = """
class LlamaPromptLookupDecoding:
    def __init__(self, num_pred_tokens):
        self.num_pred_tokens = num_pred_tokens
"""


def test_the_real_child_runs_llama_decoders_and_keeps_its_replies_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text(FAKE_LLAMA_CPP)
    (package / "llama_speculative.py").write_text(FAKE_SPECULATIVE)
    repo = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{repo}")
    decoders = llama_child.ChildDecoders(Path("m.gguf"), 64, 3, 1, 0)
    try:
        assert decoders.info["version"] == "fake" and decoders.info["process"] == "child"
        assert decoders.info["system_info"] == "AVX = 1 | AVX2 = 1 | AMX_INT8 = 0"
        run = decoders.run("prompt_lookup", [4, 9], 5, frozenset())
        assert run["tokens"] == [10] * 5 and run["tok_s"] > 0  # exactly max_tokens: nothing ends it
        assert decoders.run("plain", [4, 9], 5, frozenset({10}))["tokens"] == [10]  # an end id ends it, counted
        assert llama.prompt_ids_agree(decoders, "abc", [3, 1]) is True
    finally:
        decoders.close()
