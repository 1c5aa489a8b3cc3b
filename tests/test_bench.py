"""`verispec bench` on a tiny budget: the JSON has every section, ratios are positive and finite,
the plot is written. Never asserts a speed (a shared 2-core machine makes any bound flaky)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from verispec import cli
from verispec.bench.backends import variant_label
from verispec.bench.report import SCHEMA_VERSION, BenchReport
from verispec.bench.text import format_report
from verispec.engine.fused import FUSED_BY_DEFAULT


def _positive_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _check_kernel_counts(kernel: dict[str, Any], n_layer: int) -> None:
    """The int8 headline's kernels as ``engine_kernel`` reports them: onnxruntime graphs unless the
    head and the layers both run on their tile kernels (engine/tile_head.py, engine/tile_layers.py,
    which the report names), and the calls a 1-row step made, counted: one layer graph between two
    attentions (L + 1), onnxruntime runs on the mlas layers, native calls on the tile layers, then
    the head's onnxruntime runs (none on the tile head)."""
    tile_head, tile_layers = kernel["head_kernel"].startswith("tile ("), kernel["layer_kernel"].startswith("tile (")
    assert kernel["mode"] == "int8/ort-q"
    assert sum(kernel["row_modes"].values()) == kernel["graphs"]
    assert (kernel["graphs"] == 0) == (tile_head and tile_layers), kernel
    assert kernel["providers"] == ([] if kernel["graphs"] == 0 else ["CPUExecutionProvider"])
    assert set(kernel["row_modes"]) <= {"native", "pad-single-row", "row-by-row"}
    assert kernel["layer_calls_per_step"] == n_layer + 1
    assert kernel["native_calls_per_step"] == (n_layer + 1 if tile_layers else 0), kernel
    head_calls = kernel["calls_per_step"] + kernel["native_calls_per_step"] - kernel["layer_calls_per_step"]
    assert head_calls == 0 if tile_head else head_calls > 0, kernel


@pytest.mark.parametrize("layer_kernel", ["mlas", "tile"])
@pytest.mark.parametrize("head_kernel", ["mlas", "tile"])
def test_engine_kernel_names_both_int8_kernels_and_counts_their_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head_kernel: str, layer_kernel: str
) -> None:
    """A tiny all-Q8_0 llama loaded through the commands' loader on each pair of int8 kernels (the
    layer kernel from VERISPEC_INT8_LAYER_KERNEL, as a user sets it): the report names the kernels
    the model runs and counts each kind of call (the text report's line: tests/test_bench_report.py)."""
    from verispec.bench.kernel_info import engine_kernel
    from verispec.engine.model import FastModel
    from verispec.engine_load import head_kernel_of, layer_kernel_of, load_engine
    from verispec.synth.models import write_synthetic

    path = tmp_path / "tinyllama_q8_0.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0",))
    monkeypatch.setenv("VERISPEC_INT8_LAYER_KERNEL", layer_kernel)
    model = load_engine(str(path), weights="int8", head_kernel=head_kernel).model
    assert isinstance(model, FastModel)
    assert (head_kernel_of(model), layer_kernel_of(model)) == (head_kernel, layer_kernel)
    assert layer_kernel_of(load_engine(str(path), weights="f32").model) is None  # the int8 mode's only
    kernel = engine_kernel(model)
    assert (kernel["head_kernel"], kernel["layer_kernel"]) == (model.store.head_kernel, model.store.layer_kernel)
    _check_kernel_counts(kernel, model.config.n_layer)


@pytest.mark.model
def test_bench_json_shape_and_ratios(smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "bench.png"
    status = cli.main(
        [
            "bench",
            "--model",
            str(smollm2_path),
            "--json",
            "--plot",
            str(png),
            "--tokens",
            "3",
            "--prefill-tokens",
            "8",
            "--reference-tokens",
            "2",
            "--k",
            "3",
            "--no-kernels",
            "--prompts",
            "chat,repetitive",
            "--repeats",
            "1",
            "--matmul-repeats",
            "1",
            "--no-rss",
        ]
    )
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema_version"] == SCHEMA_VERSION
    assert BenchReport.from_json(report).as_json() == report  # the printed JSON reads back whole
    assert set(report) >= {
        "date",
        "model",
        "machine",
        "matmul_bound",
        "plain",
        "prefill",
        "speculative",
        "early_exit",
        "reference",
        "llama_cpp",
        "ratios",
        "peak_rss_mib",
        "plot",
    }
    assert report["machine"]["cores"] >= 1 and report["machine"]["cpu"]
    assert isinstance(report["machine"]["isa"], list) and len(report["machine"]["load_average_end"]) == 3
    # the headline is the default mode: int8 where onnxruntime is installed (the dev extra has it)
    kernel = report["engine_kernel"]
    _check_kernel_counts(kernel, report["model"]["n_layer"])
    assert kernel["huge_page_mib"] >= 0  # 0 where the kernel has no MADV_COLLAPSE (engine/huge_pages.py)
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
    assert report["llama_cpp"]["status"] in ("ok", "not installed")  # installed, it must not crash here
    if report["llama_cpp"]["available"]:  # the optional extra is installed: both decoders, every prompt
        llama = report["llama_cpp"]
        assert llama["generated_tokens"] == 3 and llama["eog"] == "ignored" and llama["system_info"]
        for name in ("plain", "prompt_lookup"):
            assert [r["prompt"] for r in llama[name]["runs"]] == ["chat", "repetitive"]
            # the same work as the engine: exactly --tokens tokens from the engine's prompt ids
            assert all(_positive_finite(r["tok_s"]) and r["tokens"] == 3 for r in llama[name]["runs"])
        assert [r["tokens"] for r in llama["engine_runs"]] == [3, 3]
        assert llama["threads"] == llama["engine_threads"] >= 1
        assert _positive_finite(report["ratios"]["int8_plain_over_llama_cpp_plain"])
    for curve in report["verify_cost"].values():  # what --adaptive caps k with, k + 1 = 4 rows
        assert set(curve["rows_cost_relative"]) == {"1", "2", "3", "4"} and curve["rows_cost_relative"]["1"] == 1.0
        assert all(c >= 1.0 for c in curve["rows_cost_relative"].values())
        assert all(0 <= k <= 3 for k in curve["k_cap_at_alpha"].values())
    # every backend / weights mode in the same run (verispec/bench/backends.py)
    modes = report["backends"]["modes"]
    other = variant_label(not FUSED_BY_DEFAULT)  # the int8 mode's other layer path, measured beside it
    assert set(modes) == {"f32/numpy", "f32/ort", "int8/ort-q", other} and report["default_backend"] == "ort-q"
    for mode in modes.values():
        assert set(mode["rows_cost_relative"]) == {"1", "2", "3", "5", "8"}
        assert all(_positive_finite(mode[k]) for k in ("bound_tok_s", "plain_tok_s", "plain_over_bound"))
        assert 0 <= mode["k_within"] <= 7
    for run in report["speculative_int8"]["ngram"]["runs"]:
        if run["temperature"] == 0.0:
            assert run["same_tokens_as_plain"] is True  # lossless relative to the int8 mode's own law
    for key in (
        "exact_ort_5row_over_1row",
        "int8_5row_over_1row",
        "exact_plain_over_f32_bound",
        "int8_plain_over_exact_plain",
        "int8_fused_over_unfused",
    ):
        assert _positive_finite(ratios[key]), key
    assert _positive_finite(report["peak_rss_mib"])
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = format_report(BenchReport.from_json(report))
    assert "matmul-only bound" in text and "plain decode" in text and "BLAS" in text


def test_kernel_comparison_runs_each_coretype_in_a_child() -> None:
    from verispec.bench.kernels import KERNELS, compare

    results = compare([(64, 32), (32, 64)], rows=(1, 4), repeats=1, timeout_s=120)
    assert [r["coretype"] for r in results] == list(KERNELS)
    for r in results:
        assert "error" not in r, r
        assert set(r["ms_by_rows"]) == {"1", "4"} and all(_positive_finite(v) for v in r["ms_by_rows"].values())
    haswell = next(r for r in results if r["coretype"] == "Haswell")
    assert haswell["kernel"] in ("Haswell", None)  # None: a BLAS other than OpenBLAS


def test_rss_probe_reports_a_child_peak(tiny_gguf: Any) -> None:
    from verispec.bench.backends import rss_probe

    path = tiny_gguf("llama")
    probe = rss_probe(path, "int8", "ort-q", steps=2, timeout_s=300)
    assert "error" not in probe, probe
    assert probe["peak_rss_mib"] >= probe["interpreter_mib"] > 0
    assert _positive_finite(probe["over_file_plus_kv"]) and probe["kv_mib"] > 0


def test_bench_refuses_an_unknown_prompt_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--prompts", "poetry"]) == 2
    err = capsys.readouterr().err
    assert "poetry" in err and "structured" in err and err.count("\n") == 1


@pytest.mark.model
def test_bench_measures_early_exit_with_a_calibration(smollm2_path: Path, tmp_path: Path) -> None:
    """`bench --early-exit CAL.json`: early exit against plain greedy on the same engine, with its
    depth statistics; the artifact must be for this model (CalibrationError otherwise)."""
    from verispec.bench.options import BenchOptions
    from verispec.bench.run import run_bench
    from verispec.engine import load_model
    from verispec.reference.calibration import calibrate, file_sha256
    from verispec.reference.errors import CalibrationError
    from verispec.reference.tokenizer import Tokenizer

    model = load_model(smollm2_path)
    tokenizer = Tokenizer.from_file(smollm2_path)
    prompts = [
        ("prose", tokenizer.encode(t)) for t in ("The history of the printing press", "Rivers flow to the sea because")
    ]
    # A permissive gate (q = 0.5, margin): some tokens exit, so the deferred catch-up path runs too.
    cal, _ = calibrate(
        model,
        prompts,
        model_sha256=file_sha256(smollm2_path),
        model_name="smollm2",
        depths=[24],
        q="0.5",
        n_steps=6,
        use_lens=False,
    )
    cal_path = tmp_path / "cal.json"
    cal.save(cal_path)
    options = BenchOptions(
        decode_tokens=6,
        prefill_tokens=8,
        matmul_repeats=1,
        reference=False,
        kernels=False,
        prompts=(("chat", "Hello"),),
        repeats=1,
        early_exit=cal_path,
        backends=False,
    )
    report = run_bench(smollm2_path, options)
    ee = report.early_exit
    assert ee["available"] is True and ee["gate"] == "margin" and ee["n_layer"] == 30
    assert _positive_finite(ee["early_exit_tok_s"]) and _positive_finite(ee["plain_tok_s"])
    assert _positive_finite(report.ratios["early_exit_over_plain"])
    assert 0.0 <= ee["admitted_fraction"] <= 1.0 and 24.0 <= ee["mean_exit_depth"] <= 30.0
    assert ee["head_evaluations_per_token"] >= 0.0
    assert "early exit (margin gate)" in format_report(report)

    other = tmp_path / "other.json"
    cal_wrong, _ = calibrate(
        model, prompts, model_sha256="0" * 64, model_name="other", depths=[24], q="0.5", n_steps=2, use_lens=False
    )
    cal_wrong.save(other)
    with pytest.raises(CalibrationError):
        run_bench(
            smollm2_path,
            BenchOptions(
                decode_tokens=2,
                prefill_tokens=4,
                matmul_repeats=1,
                reference=False,
                kernels=False,
                prompts=(("chat", "Hello"),),
                repeats=1,
                early_exit=other,
            ),
        )


def test_llama_cpp_columns_say_how_to_get_them_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from verispec.bench import llama as bench_llama

    monkeypatch.setattr(bench_llama, "available", lambda: False)
    out = bench_llama.measure(Path("unused.gguf"), [("chat", (1, 2))], 4, 4, 1, 1)
    assert out == {"available": False, "status": "not installed", "note": bench_llama.NOT_INSTALLED}
    assert "optional extra `llama`" in out["note"] and "from source" in out["note"]
    assert set(bench_llama.ratios(out, [])) and all(v is None for v in bench_llama.ratios(out, []).values())


def test_llama_cpp_ratios_pair_prompts_and_skip_sampled_runs() -> None:
    from verispec.bench import llama as bench_llama

    llama = {
        "available": True,
        "plain": {"runs": [{"prompt": "a", "tok_s": 10.0}, {"prompt": "b", "tok_s": 40.0}]},
        "prompt_lookup": {"runs": [{"prompt": "a", "tok_s": 20.0}, {"prompt": "b", "tok_s": 40.0}]},
    }
    ours = [
        {"prompt": "a", "temperature": 0.0, "plain_tok_s": 20.0, "speculative_tok_s": 40.0},
        {"prompt": "b", "temperature": 0.0, "plain_tok_s": 10.0, "speculative_tok_s": 20.0},
        {"prompt": "a", "temperature": 0.8, "plain_tok_s": 1.0, "speculative_tok_s": 1.0},
    ]
    r = bench_llama.ratios(llama, ours)
    assert r["int8_plain_over_llama_cpp_plain"] == pytest.approx(math.sqrt(2.0 * 0.25))  # a: 20/10, b: 10/40
    assert r["int8_ngram_over_llama_cpp_plain"] == pytest.approx(math.sqrt(4.0 * 0.5))
    assert r["int8_ngram_over_llama_cpp_prompt_lookup"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert r["llama_cpp_prompt_lookup_over_llama_cpp_plain"] == pytest.approx(math.sqrt(2.0 * 1.0))


def test_the_instruction_sets_come_from_the_cpuinfo_flags() -> None:
    from verispec.bench.machine import isa_flags, load_average

    sapphire_rapids = (
        "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni "
        "avx512_vbmi avx512_bf16 amx_bf16 amx_tile amx_int8 avx_vnni\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    assert isa_flags(sapphire_rapids) == [
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx_vnni",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
        "avx512_vbmi",
        "avx512_bf16",
        "amx_tile",
        "amx_int8",
        "amx_bf16",
    ]
    assert isa_flags("flags\t\t: fpu sse2 avx avx2 fma\n") == ["avx", "avx2", "fma"]
    assert isa_flags("no flags line") == []
    average = load_average()
    assert average is None or (len(average) == 3 and all(v >= 0 for v in average))
