"""Every ratio of one bench run (``ratios`` in the report): the engine's targets as numbers taken
within the run, where the machine's load falls on both sides. None: a side was not measured."""

from __future__ import annotations

from typing import Any

from verispec.bench import llama
from verispec.bench.report import BenchReport, SpeculativeSummary

Ratios = dict[str, float | None]
# mode label -> the ratio-name prefix its backend ratios carry
BACKEND_KEYS = (("f32/ort", "exact_ort"), ("f32/numpy", "exact_numpy"), ("int8/ort-q", "int8"))


def ratios(report: BenchReport) -> Ratios:
    """The ratios of ``report`` (whose own ``ratios`` field is ignored), in the report's order."""
    return {
        **_engine_ratios(report),
        **_speculative_ratios(report),
        **backend_ratios(report),
        **_workload_ratios(report),
    }


def _engine_ratios(report: BenchReport) -> Ratios:
    plain = float(report.plain.tok_s)
    ref = report.reference.tok_s
    ee = report.early_exit
    return {
        "plain_over_matmul_bound": plain / float(report.matmul_bound.tok_s),
        "plain_over_reference": plain / float(ref) if ref else None,
        "early_exit_over_plain": float(ee["speedup"]) if ee["available"] and ee["speedup"] else None,
    }


def _speculative_ratios(report: BenchReport) -> Ratios:
    return {
        f"speculative_{name}_geomean_over_plain": float(entry.geomean_speedup)
        for name, entry in report.speculative.items()
        if isinstance(entry, SpeculativeSummary)
    }


def backend_ratios(report: BenchReport) -> Ratios:
    """The backend and int8 targets (every backend / weights mode and llama.cpp in this run)."""
    modes: dict[str, Any] = report.backends.get("modes", {})
    out: Ratios = {}
    for name, key in BACKEND_KEYS:
        m = modes.get(name)
        out[f"{key}_5row_over_1row"] = float(m["rows_cost_relative"]["5"]) if m else None
        out[f"{key}_plain_over_own_bound"] = float(m["plain_over_bound"]) if m else None
    exact, int8 = modes.get("f32/ort") or modes.get("f32/numpy"), modes.get("int8/ort-q")
    if exact:  # plain decode of the exact mode over the fastest float32 matmul bound measured
        bound = max(float(m["bound_tok_s"]) for n, m in modes.items() if n.startswith("f32/"))
        out["exact_plain_over_f32_bound"] = float(exact["plain_tok_s"]) / bound
    out["int8_plain_over_exact_plain"] = (
        float(int8["plain_tok_s"]) / float(exact["plain_tok_s"]) if int8 and exact else None
    )
    fused = report.backends.get("int8_fused_over_unfused")  # engine/fused.py: plain steps
    out["int8_fused_over_unfused"] = float(fused) if fused is not None else None
    spec = (report.speculative_int8 or {}).get("ngram")
    int8_runs = [_run_json(r) for r in spec.runs] if isinstance(spec, SpeculativeSummary) else []
    out.update(llama.ratios(report.llama_cpp, int8_runs))
    out["int8_speculative_ngram_geomean_over_int8_plain"] = (
        float(spec.geomean_speedup) if isinstance(spec, SpeculativeSummary) else None
    )
    rss = report.backends.get("rss", {}).get("int8/ort-q", {})
    out["int8_peak_rss_over_file_plus_kv"] = float(rss["over_file_plus_kv"]) if "over_file_plus_kv" in rss else None
    return out


def _run_json(run: Any) -> dict[str, Any]:
    """The fields llama.ratios pairs a speculative run by (prompt, temperature, rates)."""
    return {
        "prompt": run.prompt,
        "temperature": run.temperature,
        "plain_tok_s": run.plain_tok_s,
        "speculative_tok_s": run.speculative_tok_s,
    }


def _workload_ratios(report: BenchReport) -> Ratios:
    out: Ratios = {}
    for name, entry in (report.workload or {}).items():
        for temperature, summary in entry["by_temperature"].items():
            out[f"workload_{name}_T{temperature}_geomean_over_plain"] = float(summary["geomean_speedup"])
    for name, value in (report.workload_llama_cpp or {}).get("geomean", {}).items():
        out[f"workload_{name}"] = value  # greedy, geomean over the categories; None without llama.cpp
    return out
