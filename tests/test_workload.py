"""The bench workload (verispec/data/workload.jsonl): every category present with enough requests,
chat-rendered for both model families, bad files refused with one typed error; `bench --workload`
reports every category and the geomean (never asserts a speed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from verispec import cli
from verispec.bench.report import BenchReport
from verispec.bench.text import format_report
from verispec.reference.chat import ChatFormat
from verispec.workload import CATEGORIES, WorkloadError, load_workload, select

CHATML = ChatFormat("chatml", "You are a helpful assistant.", "<|im_end|>")
GEMMA = ChatFormat("gemma", None, "<end_of_turn>")


def test_packaged_workload_covers_every_category_with_long_answers() -> None:
    items = load_workload()
    for category in CATEGORIES:
        assert sum(1 for i in items if i.category == category) >= 4, category
    assert {i.category for i in items} == set(CATEGORIES)
    assert all(128 <= i.max_tokens <= 256 for i in items)
    assert any(len(i.messages) >= 3 for i in items if i.category == "multi_turn")
    assert all("```" in i.messages[-1].content for i in items if i.category == "code_edit")  # a pasted function


def test_workload_renders_in_both_chat_families() -> None:
    for item in load_workload():
        chatml, gemma = item.prompt_text(CHATML), item.prompt_text(GEMMA)
        assert chatml.endswith("<|im_start|>assistant\n") and gemma.endswith("<start_of_turn>model\n")
        assert item.messages[-1].content in chatml and item.messages[-1].content in gemma


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "expected an object"),
        (
            '{"category": "poetry", "id": "a", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9}',
            "category",
        ),
        ('{"category": "qa", "id": "", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9}', "id"),
        (
            '{"category": "qa", "id": "a", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
            "max_tokens",
        ),
        (
            '{"category": "qa", "id": "a", "messages": [{"role": "user", "content": "x"}], "max_tokens": true}',
            "max_tokens",
        ),
        ('{"category": "qa", "id": "a", "messages": [], "max_tokens": 9}', "messages"),
        ('{"category": "qa", "id": "a", "messages": [{"role": "robot", "content": "x"}], "max_tokens": 9}', "role"),
        (
            '{"category": "qa", "id": "a", "messages": [{"role": "assistant", "content": "x"}], "max_tokens": 9}',
            "last message",
        ),
    ],
)
def test_bad_workload_lines_are_refused_by_line(tmp_path: Path, line: str, fragment: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text(
        '{"category": "qa", "id": "ok", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9}\n'
        + line
        + "\n"
    )
    with pytest.raises(WorkloadError, match="line 2") as info:
        load_workload(path)
    assert fragment in str(info.value)


def test_missing_empty_and_duplicate_workloads_are_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(WorkloadError, match="no requests"):
        load_workload(tmp_path / "empty.jsonl")
    row = '{"category": "qa", "id": "same", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9}\n'
    (tmp_path / "dup.jsonl").write_text(row * 2)
    with pytest.raises(WorkloadError, match="more than once"):
        load_workload(tmp_path / "dup.jsonl")


def test_select_filters_categories_and_counts() -> None:
    items = load_workload()
    chosen = select(items, ["rag", "maths"], 2)
    assert [i.category for i in chosen] == ["rag", "rag", "maths", "maths"]
    with pytest.raises(WorkloadError, match="poetry"):
        select(items, ["poetry"])
    with pytest.raises(WorkloadError, match=">= 1"):
        select(items, None, 0)


def test_bench_refuses_a_bad_workload_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(["bench", "--model", str(tmp_path / "no-such.gguf"), "--workload", str(tmp_path / "absent.jsonl")])
        == 2
    )
    err = capsys.readouterr().err
    assert "absent.jsonl" in err and err.count("\n") == 1


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("weights", ["f32", "int8"])
def test_bench_workload_reports_each_category_and_the_geomean(
    weights: str, smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the exact mode and on the int8 mode (`--workload-weights`: its own law, its own plain).

    Two categories, the first request of each: qa-1 (32 prompt tokens) and code_edit-1 (150).
    What is asserted is the section's shape over two categories (ids, temperatures, per-category
    speedups and their geomean, the same tokens as plain), which any two categories show; the
    prompts' prefills are most of the cost, so the short qa request stands where rag-1 (214
    tokens) stood: both have nothing accepted in their 4 tokens (alpha 0, one token a pass, on both
    modes, measured), and code_edit-1, kept, is the request whose pasted function the ngram draft
    copies (accepted drafts: alpha 1/3 on both modes), so the lossless check still sees drafts
    accepted and a repair or bonus after them."""
    path = tmp_path / "w.jsonl"
    rows = [item for item in select(load_workload(), ["qa", "code_edit"], 1)]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "category": i.category,
                    "id": i.id,
                    "max_tokens": 4,
                    "messages": [{"role": m.role, "content": m.content} for m in i.messages],
                }
            )
            + "\n"
            for i in rows
        )
    )
    status = cli.main(
        [
            "bench",
            "--model",
            str(smollm2_path),
            "--json",
            "--tokens",
            "2",
            "--prefill-tokens",
            "4",
            "--no-reference",
            "--no-kernels",
            "--prompts",
            "chat",
            "--repeats",
            "1",
            "--matmul-repeats",
            "1",
            "--k",
            "3",
            "--no-backends",
            "--no-rss",
            "--workload",
            str(path),  # asserts on the workload only
            "--workload-weights",
            weights,
        ]
    )
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["workload_engine"] == {"f32": "f32/ort", "int8": "int8/ort-q"}[weights]
    entry: dict[str, Any] = report["workload"]["ngram"]
    assert {r["id"] for r in entry["runs"]} == {i.id for i in rows}
    assert {r["temperature"] for r in entry["runs"]} == {0.0, 0.8}
    assert entry["all_greedy_same_tokens"] is True  # lossless
    # the same work: plain and speculative decode each request's answer length (end of generation ignored)
    assert all(r["generated_tokens"] == r["decoded_tokens"] <= 4 for r in entry["runs"])
    for summary in entry["by_temperature"].values():
        assert set(summary["per_category_speedup"]) == {"qa", "code_edit"}
        values = list(summary["per_category_speedup"].values())
        assert math.isclose(summary["geomean_speedup"], math.sqrt(values[0] * values[1]), rel_tol=1e-12)
    assert "workload_ngram_T0.0_geomean_over_plain" in report["ratios"]
    # llama.cpp beside it (tests/test_bench_workload_llama.py): every ratio field, None when not installed
    llama = report["workload_llama_cpp"]
    for name in (
        "engine_ngram_over_llama_cpp_plain",
        "engine_plain_over_llama_cpp_plain",
        "llama_cpp_prompt_lookup_over_llama_cpp_plain",
    ):
        value = report["ratios"][f"workload_{name}"]
        assert (value is None) if not llama["available"] else _positive(value), name
    text = format_report(BenchReport.from_json(report))
    assert "workload ngram T=0.0: geomean" in text and "workload ngram T=0.8: geomean" in text
    assert all(_positive(r["speedup_cpu"]) for r in entry["runs"])


def _positive(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0
