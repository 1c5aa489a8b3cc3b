"""`bench --workload`'s llama.cpp section (verispec/bench/workload.py, verispec/bench/llama.py):
llama.cpp plain and prompt lookup on the workload's greedy requests, interleaved round by round
with the engine's runs, every side decoding the same number of tokens (the engine's answer length
or max_tokens, end of generation ignored); ratios per category and over the categories; the
same-tokens note.

The interleaving and the ratio arithmetic are checked with stand-ins for both engines (exact
numbers, no timing); the section's shape without llama_cpp with ``available()`` patched; one small
run of the real llama.cpp (slow, skipped when the optional extra is not installed). Never asserts
a speed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from verispec.bench import llama as bench_llama
from verispec.bench import workload as bench
from verispec.bench.llama_section import engine_threads
from verispec.bench.options import BenchOptions
from verispec.bench.text import format_workload_llama
from verispec.reference.chat import ChatFormat, ChatMessage
from verispec.reference.generate import GenerationRequest
from verispec.workload import WorkloadItem

CHATML = ChatFormat("chatml", None, "<|im_end|>")
END = 99  # the stand-in tokenizer's end-of-turn id
EOG = frozenset({98})
ITEMS = (
    WorkloadItem("rag", "rag-1", (ChatMessage("user", "passage one"),), 5),
    WorkloadItem("rag", "rag-2", (ChatMessage("user", "passage two"),), 5),
    WorkloadItem("code_edit", "code-1", (ChatMessage("user", "def f(): pass"),), 4),
)
DRAFTS = ("suffix", "suffix:tree")


class StandInTokenizer:
    add_bos = False
    eog_ids = EOG

    def encode(self, text: str, add_bos: bool = False, parse_special: bool = False) -> list[int]:
        return [sum(map(ord, text)), 7]  # two ids per prompt, distinct for these items

    def token_id(self, text: str) -> int | None:
        return END if text == "<|im_end|>" else None


# every rate is a function of (side, request) only, so each ratio is known exactly
LLAMA_TOK_S = {
    "plain": {"rag-1": 10.0, "rag-2": 40.0, "code-1": 20.0},
    "prompt_lookup": {"rag-1": 20.0, "rag-2": 20.0, "code-1": 20.0},
}
ENGINE_PLAIN = {"rag-1": 10.0, "rag-2": 10.0, "code-1": 5.0}
ENGINE_SPEC = {
    "suffix": {"rag-1": 20.0, "rag-2": 40.0, "code-1": 10.0},
    "suffix:tree": {"rag-1": 40.0, "rag-2": 40.0, "code-1": 40.0},
}
ANSWER = {"rag-1": 3, "rag-2": 5, "code-1": 4}  # the engine's plain greedy answer length (its end id counted)
LLAMA_IDS = (1, 2, 9, 4, 5)  # llama.cpp's greedy output, cut to the requested length
ENGINE_IDS = (1, 2, 3, 4, 5)


@dataclass
class StandInDecoders:
    """Stands in for bench_llama.Decoders: logs every call in one shared log."""

    log: list[tuple[str, ...]]
    request_of: dict[tuple[int, ...], str]
    short_by: int = 0  # a broken peer that decodes fewer tokens than asked
    closed: bool = False
    info: dict[str, Any] = field(
        default_factory=lambda: {
            "available": True,
            "version": "stand-in",
            "threads": 2,
            "num_pred_tokens": 12,
            "n_ctx": 64,
        }
    )

    def tokenize(self, text: str) -> list[int]:
        return StandInTokenizer().encode(text)

    def run(self, name: str, ids: Any, max_tokens: int, end_ids: frozenset[int]) -> dict[str, Any]:
        request = self.request_of[tuple(ids)]
        self.log.append(("llama", name, request, str(max_tokens)))
        assert end_ids == frozenset()  # end of generation ignored: exactly max_tokens
        return {"tokens": list(LLAMA_IDS[: max_tokens - self.short_by]), "tok_s": LLAMA_TOK_S[name][request]}

    def close(self) -> None:
        self.closed = True


def run_stand_in_workload(
    monkeypatch: pytest.MonkeyPatch, repeats: int, length: str = "answer", short_by: int = 0
) -> tuple[list[tuple[str, ...]], dict[str, Any], dict[str, Any], StandInDecoders]:
    tok = StandInTokenizer()
    request_of = {tuple(tok.encode(i.prompt_text(CHATML))): i.id for i in ITEMS}
    max_tokens = {i.id: i.max_tokens for i in ITEMS}
    assert len(request_of) == len(ITEMS)  # the stand-in tokenizer tells the requests apart
    log: list[tuple[str, ...]] = []
    decoders = StandInDecoders(log, request_of, short_by)
    monkeypatch.setattr(bench, "workload_llama_decoders", lambda path, lengths, options: decoders)

    def answer_length(model: Any, tokenizer: Any, request: GenerationRequest) -> int:
        rid = request_of[tuple(request.prompt_ids)]
        log.append(("answer", rid))
        # the length probe: greedy, to the engine's own end ids, within the request's max_tokens
        assert request.params.temperature == 0.0 and not request.ignore_eog and request.stop_ids == {END}
        assert request.max_tokens == max_tokens[rid]
        return ANSWER[rid]

    def engine_round(
        model: Any, tokenizer: Any, spec_text: str, request: GenerationRequest, options: Any
    ) -> tuple[str, str, float, int]:
        rid = request_of[tuple(request.prompt_ids)]
        log.append(("engine", spec_text, rid, str(request.params.temperature), str(request.max_tokens)))
        assert request.ignore_eog  # every timed engine run decodes exactly max_tokens
        return rid, spec_text, request.params.temperature, request.max_tokens

    def rounds_summary(rounds: list[tuple[str, str, float, int]]) -> tuple[dict[str, Any], tuple[int, ...]]:
        assert len(rounds) == repeats and len(set(rounds)) == 1  # the rounds of one request and draft
        rid, spec_text, t, n = rounds[0]
        run = {
            "temperature": t,
            "plain_tok_s": ENGINE_PLAIN[rid],
            "speculative_tok_s": ENGINE_SPEC[spec_text][rid],
            "speedup": ENGINE_SPEC[spec_text][rid] / ENGINE_PLAIN[rid],
            "speedup_cpu": 1.0,
            "alpha": 0.5,
            "tokens_per_pass": 2.0,
            "generated_tokens": n,
            "same_tokens_as_plain": True if t == 0.0 else None,
        }
        return run, ENGINE_IDS[:n]

    monkeypatch.setattr(bench, "answer_length", answer_length)
    monkeypatch.setattr(bench, "engine_round", engine_round)
    monkeypatch.setattr(bench, "rounds_summary", rounds_summary)
    options = BenchOptions(
        drafts=DRAFTS, repeats=repeats, workload=ITEMS, workload_sampled=True, k=12, workload_length=length
    )
    out, section = bench.workload_section(None, tok, CHATML, options, Path("model.gguf"))  # type: ignore[arg-type]
    return log, out, section, decoders


@pytest.mark.parametrize("repeats", [1, 3])
def test_every_round_runs_llama_cpp_then_the_engine_request_by_request(
    monkeypatch: pytest.MonkeyPatch, repeats: int
) -> None:
    """Greedy: per request, the answer-length probe, then ``repeats`` rounds of llama.cpp plain,
    llama.cpp lookup and each draft's engine round, all to the same length; then the sampled runs
    (no llama.cpp) to the same lengths, with no second probe."""
    log, out, section, decoders = run_stand_in_workload(monkeypatch, repeats)
    expected: list[tuple[str, ...]] = []
    for item in ITEMS:
        n = str(ANSWER[item.id])
        one_round = [
            ("llama", "plain", item.id, n),
            ("llama", "prompt_lookup", item.id, n),
            *(("engine", d, item.id, "0.0", n) for d in DRAFTS),
        ]
        expected += [("answer", item.id)] + one_round * repeats
    for item in ITEMS:
        expected += [("engine", d, item.id, "0.8", str(ANSWER[item.id])) for d in DRAFTS] * repeats
    assert log == expected and decoders.closed
    assert set(out) == set(DRAFTS) and {r["temperature"] for r in out["suffix"]["runs"]} == {0.0, 0.8}
    assert [r["decoded_tokens"] for r in out["suffix"]["runs"]] == [ANSWER[i.id] for i in ITEMS] * 2
    assert section["length"] == "answer" and section["repeats"] == repeats


def test_length_max_decodes_every_request_to_its_max_tokens_without_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    log, out, section, _ = run_stand_in_workload(monkeypatch, 1, length="max")
    assert not any(e[0] == "answer" for e in log)
    assert {(e[2], e[-1]) for e in log} == {(i.id, str(i.max_tokens)) for i in ITEMS}
    assert section["length"] == "max" and section["all_sides_same_length"] is True
    assert "max_tokens" in section["length_note"]


def test_every_side_decodes_the_same_number_of_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, section, _ = run_stand_in_workload(monkeypatch, 1)
    assert section["all_sides_same_length"] is True
    assert [r["decoded_tokens"] for r in section["runs"]] == [ANSWER[i.id] for i in ITEMS]
    assert all(
        r["llama_cpp"][n]["generated_tokens"] == r["decoded_tokens"]
        for r in section["runs"]
        for n in ("plain", "prompt_lookup")
    )
    assert "same number of tokens on every request" in "\n".join(format_workload_llama(section))


def test_a_side_that_decodes_fewer_tokens_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, section, _ = run_stand_in_workload(monkeypatch, 1, short_by=1)
    assert section["all_sides_same_length"] is False and not any(r["same_length"] for r in section["runs"])
    assert "NOT every side decoded the same number of tokens" in "\n".join(format_workload_llama(section))


def test_llama_cpp_workload_ratios_per_category_and_over_categories(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, section, _ = run_stand_in_workload(monkeypatch, 1)
    assert section["available"] is True and section["threads"] == 2
    assert [r["id"] for r in section["runs"]] == [i.id for i in ITEMS]
    rag, code = section["per_category"]["rag"], section["per_category"]["code_edit"]
    # rag: request ratios 20/10 and 40/40 (suffix over llama.cpp plain); code: 10/20
    assert rag["engine_suffix_over_llama_cpp_plain"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert code["engine_suffix_over_llama_cpp_plain"] == pytest.approx(0.5)
    assert rag["engine_suffix:tree_over_llama_cpp_plain"] == pytest.approx(math.sqrt(4.0 * 1.0))
    assert rag["engine_plain_over_llama_cpp_plain"] == pytest.approx(math.sqrt(1.0 * 0.25))
    assert rag["llama_cpp_prompt_lookup_over_llama_cpp_plain"] == pytest.approx(math.sqrt(2.0 * 0.5))
    # over the engine's own plain: rag 20/10 and 40/10, code 10/5
    assert rag["engine_suffix_over_engine_plain"] == pytest.approx(math.sqrt(2.0 * 4.0))
    assert code["engine_suffix:tree_over_engine_plain"] == pytest.approx(8.0)
    geo = section["geomean"]  # each category weighs the same: rag's two requests count once
    assert set(geo) == set(bench_llama.workload_ratio_names(DRAFTS))
    assert geo["engine_suffix_over_llama_cpp_plain"] == pytest.approx(math.sqrt(math.sqrt(2.0) * 0.5))
    assert geo["engine_suffix_over_engine_plain"] == pytest.approx(math.sqrt(math.sqrt(8.0) * 2.0))
    assert geo["engine_plain_over_llama_cpp_plain"] == pytest.approx(math.sqrt(0.5 * 0.25))
    assert geo["llama_cpp_prompt_lookup_over_llama_cpp_plain"] == pytest.approx(math.sqrt(1.0 * 1.0))
    run = section["runs"][0]  # rag-1: 3 tokens on every side; llama.cpp's third differs from the engine's
    assert run["engine_plain_vs_llama_cpp_plain"] == {"same_leading_tokens": 2, "compared": 3}
    assert run["llama_cpp_prompt_lookup_vs_llama_cpp_plain"] == {"same_leading_tokens": 3, "compared": 3}
    assert run["llama_cpp"]["plain"] == {"tok_s": 10.0, "generated_tokens": 3}
    note = section["same_tokens_note"]
    assert note == {
        "first_tokens": bench_llama.AGREEMENT_TOKENS,
        "requests": 3,
        "requests_all_compared_tokens_same": 0,
        "mean_same_leading_tokens": 2.0,
        "llama_cpp_lookup_vs_plain_requests_all_same": 3,
        "engine_speculative_same_tokens_as_plain": {"suffix": 3, "suffix:tree": 3},
    }
    lines = format_workload_llama(section)
    assert any(line.startswith("workload llama.cpp rag:") for line in lines)
    assert any("0/3 requests agree on their first 32 tokens" in line for line in lines)


def test_common_prefix_counts_leading_agreement_within_the_limit() -> None:
    assert bench_llama.common_prefix([1, 2, 3], [1, 2, 3, 4]) == {"same_leading_tokens": 3, "compared": 3}
    assert bench_llama.common_prefix([5, 2], [1, 2]) == {"same_leading_tokens": 0, "compared": 2}
    assert bench_llama.common_prefix(list(range(50)), list(range(50)), 8) == {"same_leading_tokens": 8, "compared": 8}
    assert bench_llama.common_prefix([], [1]) == {"same_leading_tokens": 0, "compared": 0}


def test_workload_llama_section_without_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama_cpp missing: the engine's workload runs as before; the section names the optional extra
    and every ratio field is there, None."""
    monkeypatch.setattr(bench_llama, "available", lambda: False)
    tok = StandInTokenizer()
    monkeypatch.setattr(bench, "answer_length", lambda *a: 4)
    monkeypatch.setattr(bench, "engine_round", lambda *a: None)
    monkeypatch.setattr(
        bench,
        "rounds_summary",
        lambda rounds: (
            {
                "temperature": 0.0,
                "plain_tok_s": 1.0,
                "speculative_tok_s": 2.0,
                "speedup": 2.0,
                "speedup_cpu": 2.0,
                "alpha": 0.5,
                "tokens_per_pass": 2.0,
                "generated_tokens": 4,
                "same_tokens_as_plain": True,
            },
            ENGINE_IDS[:4],
        ),
    )
    options = BenchOptions(drafts=DRAFTS, repeats=2, workload=ITEMS, workload_sampled=False)
    out, section = bench.workload_section(None, tok, CHATML, options, Path("model.gguf"))  # type: ignore[arg-type]
    assert set(out) == set(DRAFTS) and len(out["suffix"]["runs"]) == len(ITEMS)
    assert section["available"] is False and section["note"] == bench_llama.NOT_INSTALLED
    assert "optional extra `llama`" in section["note"]
    assert section["runs"] == [] and section["per_category"] == {}
    assert section["geomean"] == {name: None for name in bench_llama.workload_ratio_names(DRAFTS)}
    assert format_workload_llama(section) == [f"workload llama.cpp: {bench_llama.NOT_INSTALLED}"]


@pytest.mark.model
@pytest.mark.slow
def test_real_llama_cpp_beside_a_small_workload(smollm2_path: Path) -> None:
    """The optional extra installed: both llama.cpp decoders run every greedy request on the same
    prompt ids, with the engine's thread count, to the engine's answer length (every side the same
    count); every ratio is positive and finite."""
    pytest.importorskip("llama_cpp")
    from verispec.engine.model import FastModel
    from verispec.reference.chat import chat_format
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.tokenizer import Tokenizer

    with GGUFFile.open(smollm2_path) as f:
        model = FastModel.load(f)
        tokenizer = Tokenizer.from_gguf(f.metadata)
        chat = chat_format(f.metadata)
    items = (
        WorkloadItem("rag", "r", (ChatMessage("user", "Copy this: one two three four."),), 6),
        WorkloadItem("code_edit", "c", (ChatMessage("user", "Rename x to y: def f(x): return x"),), 6),
    )
    options = BenchOptions(drafts=("suffix",), repeats=1, workload=items, workload_sampled=False, k=4)
    out, section = bench.workload_section(model, tokenizer, chat, options, smollm2_path)
    assert out["suffix"]["all_greedy_same_tokens"] is True
    assert section["available"] is True and section["threads"] == engine_threads() >= 1
    assert (
        section["num_pred_tokens"] == 4
        and section["n_ctx"] >= max(r["prompt_tokens"] for r in out["suffix"]["runs"]) + 6
    )
    assert [r["id"] for r in section["runs"]] == ["r", "c"]
    assert section["all_sides_same_length"] is True
    assert [r["generated_tokens"] for r in out["suffix"]["runs"]] == [r["decoded_tokens"] for r in section["runs"]]
    for run in section["runs"]:
        assert isinstance(run["prompt_ids_agree"], bool)
        assert 1 <= run["decoded_tokens"] <= 6
        for name in ("plain", "prompt_lookup"):
            assert (
                run["llama_cpp"][name]["generated_tokens"] == run["decoded_tokens"]
                and run["llama_cpp"][name]["tok_s"] > 0
            )
        note = run["engine_plain_vs_llama_cpp_plain"]
        assert 0 <= note["same_leading_tokens"] <= note["compared"] <= 6
    for value in section["geomean"].values():
        assert isinstance(value, float) and math.isfinite(value) and value > 0
