"""``verispec bench --plot FILE.png``: tok/s per mode (bars) and acceptance per draft position (lines)."""

from __future__ import annotations

from pathlib import Path

from verispec.atomic import replace_file
from verispec.bench.report import BenchReport, SpeculativeSummary


def plot(report: BenchReport, out: Path) -> None:
    """Draw ``report`` into the PNG ``out`` (matplotlib, imported here: an optional dependency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = {name: e for name, e in report.speculative.items() if isinstance(e, SpeculativeSummary)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    modes = {
        "matmul bound": report.matmul_bound.tok_s,
        "plain (best step)": report.plain.tok_s,
        "plain (end to end)": report.plain.tok_s_end_to_end,  # what the speculative bars compare to
    }
    for name, entry in summaries.items():
        for r in entry.runs:
            modes[f"{name} {r.prompt} T={r.temperature}"] = r.speculative_tok_s
    if report.reference.tok_s:
        modes["reference"] = report.reference.tok_s
    if report.llama_cpp.get("tok_s"):
        modes["llama.cpp"] = report.llama_cpp["tok_s"]
    left.barh(list(modes), list(modes.values()))
    left.set_xlabel("tokens / s")
    left.set_title("decode speed per mode")
    for name, entry in summaries.items():
        for r in entry.runs:
            if r.per_position_acceptance:
                acc = r.per_position_acceptance
                right.plot(range(1, len(acc) + 1), acc, marker="o", label=f"{name} {r.prompt} T={r.temperature}")
    right.set_xlabel("draft position")
    right.set_ylabel("acceptance rate")
    right.set_ylim(0, 1.05)
    right.set_title("acceptance per position")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    fig.tight_layout()
    with replace_file(out) as fh:  # the one safe writer: atomic, never onto a FIFO or a device
        fig.savefig(fh, dpi=100, format="png")
    plt.close(fig)
