"""`verispec bench` on a tiny budget: the JSON has every section, ratios are positive and finite,
the plot is written. Never asserts a speed (a shared 2-core machine makes any bound flaky)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from engine.bench import format_report
from verispec import cli


def _positive_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.model
def test_bench_json_shape_and_ratios(smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "bench.png"
    status = cli.main(["bench", "--model", str(smollm2_path), "--json", "--plot", str(png),
                       "--tokens", "3", "--prefill-tokens", "8", "--reference-tokens", "2", "--k", "3", "--no-kernels",
                       "--prompts", "chat,repetitive", "--repeats", "1", "--matmul-repeats", "1"])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"date", "model", "machine", "matmul_bound", "plain", "prefill", "speculative",
                           "early_exit", "reference", "llama_cpp", "ratios", "peak_rss_mib", "plot"}
    assert report["machine"]["cores"] >= 1 and report["machine"]["cpu"]
    assert any(b["internal_api"] for b in report["machine"]["blas"])
    assert _positive_finite(report["matmul_bound"]["tok_s"]) and _positive_finite(report["plain"]["tok_s"])
    assert _positive_finite(report["prefill"]["tok_s"]) and _positive_finite(report["reference"]["tok_s"])
    assert set(report["matmul_bound"]["rows_cost_relative"]) == {"1", "2", "4", "5", "8"}
    assert all(_positive_finite(c) for c in report["matmul_bound"]["rows_cost_relative"].values())
    ngram = report["speculative"]["ngram"]
    assert {r["prompt"] for r in ngram["runs"]} == {"chat", "repetitive"}
    for run in ngram["runs"]:
        assert _positive_finite(run["speedup"]) and 0.0 <= run["alpha"] <= 1.0
        assert run["tokens_per_pass"] >= 1.0
        if run["temperature"] == 0.0:
            assert run["same_tokens_as_plain"] is True  # lossless: greedy speculative == greedy plain
    assert any(r["temperature"] == 0.8 for r in ngram["runs"])
    ratios = report["ratios"]
    for key in ("plain_over_matmul_bound", "plain_over_reference", "speculative_ngram_geomean_over_plain"):
        assert _positive_finite(ratios[key]), key
    assert report["llama_cpp"]["available"] in (True, False)
    assert _positive_finite(report["peak_rss_mib"])
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = format_report(report)
    assert "matmul-only bound" in text and "plain decode" in text and "BLAS" in text


def test_kernel_comparison_runs_each_coretype_in_a_child() -> None:
    from engine.kernels import KERNELS, compare

    results = compare([(64, 32), (32, 64)], rows=(1, 4), repeats=1, timeout_s=120)
    assert [r["coretype"] for r in results] == list(KERNELS)
    for r in results:
        assert "error" not in r, r
        assert set(r["ms_by_rows"]) == {"1", "4"} and all(_positive_finite(v) for v in r["ms_by_rows"].values())
    haswell = next(r for r in results if r["coretype"] == "Haswell")
    assert haswell["kernel"] in ("Haswell", None)  # None: a BLAS other than OpenBLAS


def test_bench_refuses_an_unknown_prompt_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--prompts", "poetry"]) == 2
    err = capsys.readouterr().err
    assert "poetry" in err and "structured" in err and err.count("\n") == 1
