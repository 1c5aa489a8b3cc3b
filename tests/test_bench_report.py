"""The bench's typed report against the measurements it wrote before it was typed (lab/measurements/).

Every saved report reads back and writes out key for key and number for number (the JSON text
with sorted keys is identical, ``schema_version`` aside); the split formulas recompute every saved
summary and ratio exactly (``==`` on floats: the same operations in the same order give the same
bits, so any change to a formula shows); a malformed report is refused with one typed error that
names the field. No model, no timing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verispec.bench import llama
from verispec.bench.ratios import ratios
from verispec.bench.report import SCHEMA_VERSION, BenchReport, BenchReportError, SpeculativeSummary
from verispec.bench.speculative import summarise
from verispec.bench.text import format_report
from verispec.bench.workload import workload_summary
from verispec.reference.errors import VerispecError

MEASUREMENTS = Path(__file__).resolve().parent.parent / "lab" / "measurements"
SAVED = sorted([*MEASUREMENTS.glob("bench_*.json"), *MEASUREMENTS.glob("workload_*.json")])
# Ratios added to the bench after some measurements were saved (absent from those files' ratios).
NEWER_RATIOS = {"int8_fused_over_unfused"}


def NEWER_WORKLOAD_RATIOS(drafts: list[str]) -> set[str]:
    """Workload llama.cpp ratios added after some reports were saved (recomputed, not in them)."""
    return {f"engine_{d}_over_engine_plain" for d in drafts}


def _report(path: Path) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads(path.read_text())
    report: dict[str, Any] = saved.get("report", saved)  # workload files wrap it with their provenance
    return report


def test_there_are_saved_reports_of_both_kinds() -> None:
    names = [p.name for p in SAVED]
    assert sum(n.startswith("bench_") for n in names) >= 4 and sum(n.startswith("workload_") for n in names) >= 2


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.name)
def test_a_saved_report_round_trips_key_for_key_and_number_for_number(path: Path) -> None:
    report = _report(path)
    version = report.get("schema_version", 1)  # a report saved before the field reads as version 1
    typed = BenchReport.from_json(report)
    back = typed.as_json()
    assert back.pop("schema_version") == typed.schema_version == version
    without_version = {key: value for key, value in report.items() if key != "schema_version"}
    assert json.dumps(back, sort_keys=True) == json.dumps(without_version, sort_keys=True)
    assert BenchReport.from_json(typed.as_json()) == typed
    assert format_report(typed).count("\n") >= 10  # every section renders from saved data


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.name)
def test_the_split_formulas_recompute_every_saved_summary_and_ratio(path: Path) -> None:
    typed = BenchReport.from_json(_report(path))
    for section in (typed.speculative, typed.speculative_int8 or {}):
        for entry in section.values():
            assert isinstance(entry, SpeculativeSummary) and summarise(entry.runs) == entry
    for entry in (typed.workload or {}).values():
        temperatures = [float(t) for t in entry["by_temperature"]]
        assert workload_summary(entry["runs"], temperatures) == entry
    beside = typed.workload_llama_cpp
    if beside is not None and beside["available"]:
        expected = {"per_category": beside["per_category"], "geomean": beside["geomean"]}
        got = llama.workload_ratios(beside["runs"], list(typed.workload or {}))
        saved_names = set(beside["geomean"])
        assert set(got["geomean"]) - saved_names <= NEWER_WORKLOAD_RATIOS(list(typed.workload or {}))
        kept = {
            "per_category": {
                c: {n: v for n, v in r.items() if n in saved_names} for c, r in got["per_category"].items()
            },
            "geomean": {n: v for n, v in got["geomean"].items() if n in saved_names},
        }
        assert kept == expected
    recomputed = ratios(typed)
    assert {k: recomputed[k] for k in typed.ratios} == typed.ratios
    assert set(recomputed) - set(typed.ratios) <= NEWER_RATIOS
    assert [k for k in recomputed if k in typed.ratios] == list(typed.ratios)  # the same order


def test_as_json_puts_the_version_first_and_leaves_out_sections_not_measured() -> None:
    report = _report(MEASUREMENTS / "bench_idle_end_1thread_smollm2-135m.json")
    out = BenchReport.from_json(report).as_json()
    assert next(iter(out)) == "schema_version" and out["schema_version"] == 1  # the version it was read as
    assert not {"workload", "workload_engine", "workload_llama_cpp", "plot", "engine_kernel"} & set(out)
    assert not {"isa", "load_average_start", "load_average_end"} & set(out["machine"])  # version-2 fields


def _version_2(report: dict[str, Any]) -> dict[str, Any]:
    """A saved report with the fields version 2 adds (as the bench writes them)."""
    report["schema_version"] = 2
    report["machine"].update(isa=["avx", "avx2"], load_average_start=[1.5, 1.0, 0.5], load_average_end=[2.0, 1.2, 0.6])
    report["engine_kernel"] = {
        "mode": "int8/ort-q",
        "onnxruntime": "1.32.0",
        "providers": ["CPUExecutionProvider"],
        "graphs": 37,
        "row_modes": {"native": 6, "pad-single-row": 31},
        "calls_per_step": 37,
        "layer_calls_per_step": 31,
    }
    report["llama_cpp"].update(
        status="crashed", crash={"signal": "SIGSEGV", "exit_code": -11, "during": "run", "stderr_tail": ["ggml_amx"]}
    )
    return report


def test_a_version_2_report_round_trips_with_its_new_fields() -> None:
    report = _broken(_version_2)
    typed = BenchReport.from_json(report)
    assert typed.schema_version == SCHEMA_VERSION == 2 and typed.machine.isa == ["avx", "avx2"]
    assert typed.machine.load_average_end == [2.0, 1.2, 0.6] and typed.engine_kernel is not None
    assert typed.as_json() == report
    text = format_report(typed)
    assert (
        "instruction sets: avx avx2; load average (1/5/15 min) at start 1.50 1.00 0.50, at end 2.00 1.20 0.60" in text
    )
    assert (
        "headline mode int8/ort-q: onnxruntime 1.32.0 (CPUExecutionProvider); row modes native x6, pad-single-row x31; "
        "37 onnxruntime calls a step (31 layer graphs, 6 head)" in text
    )


def test_the_report_names_the_int8_head_kernel() -> None:
    """A report from a run whose int8 head ran the tile kernel says so (engine/tile_head.py); the
    head then makes no onnxruntime call."""
    report = _broken(_version_2)
    report["engine_kernel"].update(graphs=31, calls_per_step=31, head_kernel="tile (avx512-vnni)")
    text = format_report(BenchReport.from_json(report))
    assert "31 onnxruntime calls a step (31 layer graphs, 0 head); head kernel tile (avx512-vnni)" in text


def test_the_report_names_the_int8_layer_kernel_and_its_native_calls() -> None:
    """A report from a run whose int8 layers ran the tile kernel (engine/tile_layers.py) says so:
    the layers' graphs are then native calls, and the onnxruntime calls left are the head's."""
    report = _broken(_version_2)
    report["engine_kernel"].update(
        graphs=6, calls_per_step=6, native_calls_per_step=31, head_kernel="mlas", layer_kernel="tile (avx512-vnni)"
    )
    text = format_report(BenchReport.from_json(report))
    assert (
        "6 onnxruntime calls a step (6 head), 31 native layer calls; head kernel mlas; layer kernel tile (avx512-vnni)"
        in text
    )
    report["engine_kernel"].update(graphs=0, calls_per_step=0, head_kernel="tile (avx512-vnni)", onnxruntime=None)
    report["engine_kernel"].update(providers=[], row_modes={})
    text = format_report(BenchReport.from_json(report))
    assert (
        "headline mode int8/ort-q: tile kernels only; row modes no onnxruntime graphs; 0 onnxruntime calls a step "
        "(0 head), 31 native layer calls; head kernel tile (avx512-vnni); layer kernel tile (avx512-vnni)" in text
    )
    report["engine_kernel"].update(native_calls_per_step=0, calls_per_step=37, layer_kernel="mlas")
    text = format_report(BenchReport.from_json(report))
    assert (
        "37 onnxruntime calls a step (31 layer graphs, 6 head); head kernel tile (avx512-vnni); layer kernel mlas"
        in text
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: r["machine"].pop("isa"), "no 'isa' list"),
        (lambda r: r.pop("engine_kernel"), "'engine_kernel'"),
        (lambda r: r["llama_cpp"].pop("status"), "no 'status'"),
        (lambda r: r["machine"].update(load_average_start=["high"]), "machine.load_average_start[0] must be a number"),
        (lambda r: r["machine"].update(isa=["avx2", 512]), "machine.isa must be a list of strings"),
    ],
)
def test_a_version_2_report_without_its_fields_is_refused(change: Any, named: str) -> None:
    def broken(r: dict[str, Any]) -> None:
        change(_version_2(r))

    with pytest.raises(BenchReportError) as refused:
        BenchReport.from_json(_broken(broken))
    assert named in str(refused.value)


def _broken(change: Any) -> dict[str, Any]:
    report = json.loads(json.dumps(_report(MEASUREMENTS / "bench_idle_end_1thread_smollm2-135m.json")))
    change(report)
    return report


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: r.pop("plain"), "'plain'"),
        (lambda r: r["plain"].pop("tok_s"), "plain has no 'tok_s'"),
        (lambda r: r["plain"].update(tokens=2.5), "plain.tokens must be an integer"),
        (lambda r: r["matmul_bound"]["rows_cost_relative"].update({"2": "fast"}), "matmul_bound.rows_cost_relative.2"),
        (lambda r: r.update(load_s=True), "report.load_s must be a number"),
        (lambda r: r["speculative"]["ngram"]["runs"][0].update(same_tokens_as_plain="yes"), "same_tokens_as_plain"),
        (lambda r: r.update(backends=[]), "report.backends must be an object"),
        (lambda r: r.update(schema_version=SCHEMA_VERSION + 1), "schema_version"),
        (lambda r: r.update(schema_version="1"), "schema_version"),
    ],
)
def test_a_malformed_report_is_refused_naming_the_field(change: Any, named: str) -> None:
    with pytest.raises(BenchReportError) as refused:
        BenchReport.from_json(_broken(change))
    assert named in str(refused.value) and isinstance(refused.value, VerispecError)


def test_a_report_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(BenchReportError, match="must be an object"):
        BenchReport.from_json([1, 2])
