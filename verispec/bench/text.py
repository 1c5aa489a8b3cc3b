"""The bench report as readable lines: what ``verispec bench`` prints without ``--json``."""

from __future__ import annotations

from typing import Any

from verispec.bench.report import BenchReport, SpeculativeSummary


def format_report(report: BenchReport) -> str:
    """Every section of ``report``, one or more lines each, in the order they were measured."""
    lines = _format_head(report)
    for k in report.kernels:
        ms = ", ".join(f"{r} rows {v:.1f} ms" for r, v in k.get("ms_by_rows", {}).items())
        lines.append(f"kernel OPENBLAS_CORETYPE={k['coretype']} -> {k.get('kernel')}: {ms or k.get('error')}")
    lines.extend(_format_speculative(report))
    lines.extend(_format_backends(report))
    for name, v in report.verify_cost.items():
        curve = ", ".join(f"{r}: {c:.2f}" for r, c in v.rows_cost_relative.items())
        caps = ", ".join(f"alpha {a}: k {k}" for a, k in v.k_cap_at_alpha.items())
        lines.append(f"verify cost {name} (forward, rows x1-row): {curve}; --adaptive k cap {caps}")
    lines.extend(_format_workload(report.workload or {}))
    if report.workload_llama_cpp is not None:
        lines.extend(format_workload_llama(report.workload_llama_cpp))
    ref = report.reference.tok_s
    lines.append(f"reference: {ref:.2f} tok/s" if ref else "reference: skipped")
    lines.extend(format_llama(report.llama_cpp))
    lines.append(_format_early_exit(report.early_exit))
    lines.append("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in report.ratios.items() if v is not None))
    lines.append(f"peak RSS {report.peak_rss_mib:.0f} MiB; load {report.load_s:.1f} s")
    return "\n".join(lines)


def _format_head(report: BenchReport) -> list[str]:
    """Model, machine, the matmul bound, plain decode and prefill."""
    m, bound, plain = report.machine, report.matmul_bound, report.plain
    blas = (
        ", ".join(
            f"{b.get('internal_api')} {b.get('version')} ({b.get('architecture')}, {b.get('num_threads')} threads)"
            for b in m.blas
        )
        or "unknown"
    )
    return [
        f"model {report.model.path} ({report.model.arch}); {report.date}",
        f"machine: {m.cpu}, {m.cores} cores; BLAS {blas}; OPENBLAS_CORETYPE={m.openblas_coretype}",
        *_format_machine_load(report),
        *_format_engine_kernel(report.engine_kernel),
        f"matmul-only bound: {bound.tok_s:.1f} tok/s ({bound.ms_per_token:.1f} ms); "
        "rows cost x1-row: " + ", ".join(f"{r}: {c:.2f}" for r, c in bound.rows_cost_relative.items()),
        f"plain decode: {plain.tok_s:.1f} tok/s best step, {plain.tok_s_median_step:.1f} median step, "
        f"{plain.tok_s_end_to_end:.1f} end to end; prefill {report.prefill.tok_s:.1f} tok/s",
    ]


def _format_machine_load(report: BenchReport) -> list[str]:
    """The instruction sets and the load average at the start and the end (version-2 reports)."""
    m = report.machine
    if m.isa is None:
        return []

    def load(values: list[float] | None) -> str:
        return "unknown" if values is None else " ".join(f"{v:.2f}" for v in values)

    return [
        f"instruction sets: {' '.join(m.isa) or 'none known'}; load average (1/5/15 min) at start "
        f"{load(m.load_average_start)}, at end {load(m.load_average_end)}"
    ]


def _format_engine_kernel(kernel: dict[str, Any] | None) -> list[str]:
    if kernel is None:
        return []
    rows = ", ".join(f"{mode} x{n}" for mode, n in kernel["row_modes"].items()) or "no onnxruntime graphs"
    calls = kernel.get("calls_per_step")
    native = kernel.get("native_calls_per_step") or 0  # the tile layer kernel's (absent in older reports)
    ort = (
        f"onnxruntime {kernel['onnxruntime']} ({', '.join(kernel['providers'])})"
        if kernel["onnxruntime"]
        else ("tile kernels only" if native else "NumPy")  # int8 on the tile head and the tile layers
    )
    step = "" if calls is None else f"; {calls} onnxruntime calls a step"
    layers = kernel.get("layer_calls_per_step")
    if layers is not None and calls is not None:
        # the layers' graphs run on onnxruntime or, on the tile layer kernel, as native calls
        step += (
            f" ({layers} layer graphs, {calls - layers} head)" if not native else f" ({calls + native - layers} head)"
        )
    step += f", {native} native layer calls" if native and calls is not None else ""
    head = kernel.get("head_kernel")
    step += "" if head in (None, "none") else f"; head kernel {head}"
    layer_kernel = kernel.get("layer_kernel")
    step += "" if layer_kernel in (None, "none") else f"; layer kernel {layer_kernel}"
    return [f"headline mode {kernel['mode']}: {ort}; row modes {rows}{step}"]


def _format_speculative(report: BenchReport) -> list[str]:
    lines = []
    for name, entry in report.speculative.items():
        if not isinstance(entry, SpeculativeSummary):
            lines.append(f"speculative: {entry}")
            continue
        for r in entry.runs:
            lines.append(
                f"speculative {name} T={r.temperature} {r.prompt:<10}: {r.speculative_tok_s:.1f} tok/s "
                f"vs plain {r.plain_tok_s:.1f} = {r.speedup:.2f}x, alpha {r.alpha:.2f}, "
                f"{r.tokens_per_pass:.2f} tokens/pass, same tokens {r.same_tokens_as_plain}"
            )
        lines.append(
            f"speculative {name}: geomean {entry.geomean_speedup:.2f}x, min {entry.min_speedup:.2f}x, "
            f"structured/repetitive {entry.structured_geomean_speedup:.2f}x, T=0.8 {entry.sampled_speedup:.2f}x"
        )
    return lines


def _format_workload(workload: dict[str, Any]) -> list[str]:
    lines = []
    for name, entry in workload.items():
        for r in entry["runs"]:
            lines.append(
                f"workload {name} T={r['temperature']} {r['id']:<16}: {r['speedup']:.2f}x ({r['speedup_cpu']:.2f}x cpu), alpha {r['alpha']:.2f}, "
                f"{r['tokens_per_pass']:.2f} tokens/pass, {r['generated_tokens']} tokens, same tokens {r['same_tokens_as_plain']}"
            )
        for temperature, summary in entry["by_temperature"].items():
            cats = ", ".join(f"{c} {v:.2f}x" for c, v in summary["per_category_speedup"].items())
            lines.append(
                f"workload {name} T={temperature}: geomean {summary['geomean_speedup']:.2f}x ({summary['geomean_speedup_cpu']:.2f}x cpu) "
                f"(min category {summary['min_category_speedup']:.2f}x; alpha {summary['alpha']:.2f}); {cats}"
            )
    return lines


def _format_early_exit(ee: dict[str, Any]) -> str:
    if not ee["available"]:
        return f"early exit: {ee['note']}"
    return (
        f"early exit ({ee['gate']} gate): {ee['early_exit_tok_s']:.1f} tok/s vs plain {ee['plain_tok_s']:.1f} "
        f"(x{ee['speedup']:.2f}); mean depth {ee['mean_exit_depth']:.2f}/{ee['n_layer']}, "
        f"admitted {ee['admitted_fraction']:.1%}, {ee['head_evaluations_per_token']:.2f} exit heads per token"
    )


def format_llama(llama: dict[str, Any]) -> list[str]:
    if not llama.get("available"):
        lines = [f"llama.cpp: {llama.get('note')}"]
        crash = llama.get("crash") or {}
        lines.extend(f"llama.cpp stderr: {line}" for line in crash.get("stderr_tail", [])[-3:])
        return lines
    lines = [
        f"llama.cpp kernel: {llama.get('system_info')}; {llama.get('generated_tokens')} tokens a run, "
        f"end of generation {llama.get('eog')}, both engines from the same prompt ids"
    ]
    for name in ("plain", "prompt_lookup"):
        runs = ", ".join(f"{r['prompt']} {r['tok_s']:.1f}" for r in llama[name]["runs"])
        lines.append(
            f"llama.cpp {name} ({llama['threads']} threads, llama-cpp-python {llama['version']}): "
            f"geomean {llama[name]['geomean_tok_s']:.1f} tok/s end to end; {runs}"
        )
    if llama.get("engine_runs"):
        runs = ", ".join(
            f"{r['prompt']} {r['plain_tok_s']:.1f} / {r['speculative_tok_s']:.1f}" for r in llama["engine_runs"]
        )
        lines.append(f"engine int8 interleaved with llama.cpp, plain / ngram tok/s end to end: {runs}")
    return lines


def format_workload_llama(section: dict[str, Any]) -> list[str]:
    """The workload's llama.cpp section: ratios over and per category, the same-tokens note."""
    if not section.get("available"):
        return [f"workload llama.cpp: {section.get('note')}"]

    def ratios(values: dict[str, float | None]) -> str:
        return ", ".join(f"{name} {v:.2f}" for name, v in values.items() if v is not None)

    lines = [
        f"workload llama.cpp ({section['threads']} threads, llama-cpp-python {section['version']}, "
        f"prompt lookup {section['num_pred_tokens']} tokens), geomean over categories: {ratios(section['geomean'])}"
    ]
    lines.extend(f"workload llama.cpp {c}: {ratios(v)}" for c, v in section["per_category"].items())
    if "length" in section:
        same = (
            "every side the same number of tokens on every request"
            if section.get("all_sides_same_length")
            else "NOT every side decoded the same number of tokens"
        )
        lines.append(
            f"workload length rule {section['length']}: {section['length_note']}; best of "
            f"{section['repeats']} interleaved rounds; {same}"
        )
    note = section["same_tokens_note"]
    lines.append(
        f"workload engine plain vs llama.cpp plain (information): {note['requests_all_compared_tokens_same']}/"
        f"{note['requests']} requests agree on their first {note['first_tokens']} tokens, "
        f"{note['mean_same_leading_tokens']:.1f} leading tokens the same on average"
    )
    if "llama_cpp_lookup_vs_plain_requests_all_same" in note:
        spec = ", ".join(
            f"{d} {n}/{note['requests']}" for d, n in note["engine_speculative_same_tokens_as_plain"].items()
        )
        lines.append(
            f"workload same tokens as its own plain: llama.cpp prompt lookup "
            f"{note['llama_cpp_lookup_vs_plain_requests_all_same']}/{note['requests']} (first "
            f"{note['first_tokens']} tokens); engine {spec} (all tokens)"
        )
    return lines


def _format_backends(report: BenchReport) -> list[str]:
    section = report.backends
    lines = [f"backend {n}: unavailable ({why})" for n, why in section.get("unavailable", {}).items()]
    for name, m in section.get("modes", {}).items():
        curve = ", ".join(f"{r}: {c:.2f}" for r, c in m["rows_cost_relative"].items())
        lines.append(
            f"backend {name}: bound {m['bound_tok_s']:.1f} tok/s; plain {m['plain_tok_s']:.1f} tok/s "
            f"({m['plain_over_bound']:.2f}x bound); rows cost x1-row {curve}; k within {m['k_within']}"
        )
    for name, t in section.get("threads_2_over_1", {}).items():
        lines.append(f"backend {name}: 2 threads / 1 thread: 1 row {t['1_rows']:.2f}x, 5 rows {t['5_rows']:.2f}x")
    for name, r in section.get("rss", {}).items():
        lines.append(_format_rss(name, r))
    spec = (report.speculative_int8 or {}).get("ngram")
    if isinstance(spec, SpeculativeSummary):
        lines.append(
            f"speculative ngram on int8: geomean {spec.geomean_speedup:.2f}x its plain, min {spec.min_speedup:.2f}x"
        )
    return lines


def _format_rss(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"backend {name}: peak RSS probe failed: {r['error']}"
    return (
        f"backend {name}: peak RSS {r['peak_rss_mib']:.0f} MiB = {r['over_file_plus_kv']:.2f}x (file "
        f"{r['file_mib']:.0f} + KV {r['kv_mib']:.1f} MiB); {r['model_over_file_plus_kv']:.2f}x without the "
        f"interpreter's {r['interpreter_mib']:.0f} MiB (target {r.get('target_over_file_plus_kv', 1.5)}x)"
    )
