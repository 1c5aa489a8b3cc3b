"""The workload tables (markdown) of a saved `verispec bench --workload --json` measurement.

    python -m lab.workload_tables lab/measurements/workload_smollm2-135m.json

The file is ``{"provenance": {...}, "report": <bench JSON>}`` (lab/measurements/). Prints
markdown: the targets' rows (geomean, worst category, the three 2x categories, evidence), then one
row per category with the llama.cpp columns measured beside the engine in the same run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def drafts_of(report: dict[str, Any]) -> tuple[str, ...]:
    """The draft sources the run measured (``--draft``, in its order)."""
    return tuple(report["workload"])


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pooled_per_depth(runs: Sequence[dict[str, Any]], depths: int = 8) -> str:
    """Acceptance per depth, mean over the requests weighted by generated tokens."""
    out = []
    for i in range(depths):
        pairs = [
            (r["per_position_acceptance"][i], r["generated_tokens"])
            for r in runs
            if len(r["per_position_acceptance"]) > i
        ]
        weight = sum(w for _, w in pairs)
        out.append(f"{sum(a * w for a, w in pairs) / weight:.2f}".lstrip("0") if weight else "-")
    return " ".join(out)


def _tree(runs: Sequence[dict[str, Any]]) -> str:
    shapes = [r["tree_shape"] for r in runs if r.get("tree_shape")]
    if not shapes:
        return ""
    mean = {k: sum(s[k] for s in shapes) / len(shapes) for k in ("nodes", "depth", "width")}
    return f"{mean['nodes']:.1f}, {mean['depth']:.1f}, {mean['width']:.2f}, {max(s['max_width'] for s in shapes):.0f}"


def summary_table(report: dict[str, Any], name: str) -> list[str]:
    workload, drafts = report["workload"], drafts_of(report)
    temps = list(workload[drafts[0]]["by_temperature"])
    cols = [(d, t) for t in temps for d in drafts]
    head = "| " + name + " | " + " | ".join(f"`{d}` T={t}" for d, t in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(d, t) for d, t in cols) + " |")

    def s(d: str, t: str) -> dict[str, Any]:
        summary: dict[str, Any] = workload[d]["by_temperature"][t]
        return summary

    def runs(d: str, t: str) -> list[dict[str, Any]]:
        return [r for r in workload[d]["runs"] if str(r["temperature"]) == t]

    row(
        "geomean over categories, wall / CPU (target >= 1.5x; T=0.8: >= 1.2x)",
        lambda d, t: f"{s(d, t)['geomean_speedup']:.2f} / {s(d, t)['geomean_speedup_cpu']:.2f}",
    )
    row(
        "worst category, wall (target >= 0.95x)",
        lambda d, t: (lambda pc: f"{min(pc.values()):.2f} ({min(pc, key=pc.get)})")(s(d, t)["per_category_speedup"]),
    )
    row(
        "summarisation / rag / code edit, wall (target >= 2.0x each)",
        lambda d, t: " / ".join(
            _fmt(s(d, t)["per_category_speedup"].get(c)) for c in ("summarisation", "rag", "code_edit")
        ),
    )
    row(
        "same, CPU",
        lambda d, t: " / ".join(
            _fmt(s(d, t)["per_category_speedup_cpu"].get(c)) for c in ("summarisation", "rag", "code_edit")
        ),
    )
    row("alpha, tokens per target pass", lambda d, t: f"{s(d, t)['alpha']:.2f}, {s(d, t)['tokens_per_pass']:.2f}")
    row("alpha per depth 1..8", lambda d, t: _pooled_per_depth(runs(d, t)))
    row("tree per drafting cycle: nodes, depth, width, max width", lambda d, t: _tree(runs(d, t)))
    row(
        "same tokens as plain (greedy)",
        lambda d, t: (
            f"{sum(r['same_tokens_as_plain'] is True for r in runs(d, t))}/{len(runs(d, t))}" if t == "0.0" else ""
        ),
    )
    return lines


def category_table(report: dict[str, Any], name: str) -> list[str]:
    """Per category: the engine's speedups over its own plain, and the llama.cpp ratios."""
    workload, llama, drafts = report["workload"], report.get("workload_llama_cpp", {}), drafts_of(report)
    temps = list(workload[drafts[0]]["by_temperature"])
    llama_cols = (
        "llama_cpp_prompt_lookup_over_llama_cpp_plain",
        "engine_plain_over_llama_cpp_plain",
        *(f"engine_{d}_over_llama_cpp_plain" for d in drafts),
    )
    llama_heads = (
        "llama.cpp lookup / llama.cpp plain",
        "engine plain / llama.cpp plain",
        *(f"engine `{d}` / llama.cpp plain" for d in drafts),
    )
    heads = [f"`{d}` T={t} wall (CPU)" for t in temps for d in drafts] + list(llama_heads)
    lines = [f"| {name}, per category | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    categories = list(workload[drafts[0]]["by_temperature"][temps[0]]["per_category_speedup"])
    per_llama = llama.get("per_category", {})
    for c in [*categories, "geomean"]:
        cells = []
        for t in temps:
            for d in drafts:
                s = workload[d]["by_temperature"][t]
                wall = s["geomean_speedup"] if c == "geomean" else s["per_category_speedup"][c]
                cpu = s["geomean_speedup_cpu"] if c == "geomean" else s["per_category_speedup_cpu"][c]
                cells.append(f"{wall:.2f} ({cpu:.2f})")
        source = llama.get("geomean", {}) if c == "geomean" else per_llama.get(c, {})
        cells.extend(_fmt(source.get(k)) for k in llama_cols)
        label = f"**{c}**" if c == "geomean" else c
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def llama_note(report: dict[str, Any]) -> str:
    llama = report.get("workload_llama_cpp", {})
    if not llama.get("available"):
        return f"llama.cpp: {llama.get('note')}"
    note = llama["same_tokens_note"]
    agree = [r["prompt_ids_agree"] for r in llama["runs"]]
    lookup = [r["llama_cpp_prompt_lookup_vs_llama_cpp_plain"] for r in llama["runs"]]
    return (
        f"llama-cpp-python {llama['version']}, {llama['threads']} thread{'s' if llama['threads'] != 1 else ''} (the engine's), prompt lookup "
        f"num_pred_tokens {llama['num_pred_tokens']}; engine plain vs llama.cpp plain: "
        f"{note['requests_all_compared_tokens_same']}/{note['requests']} requests agree on all of their first "
        f"{note['first_tokens']} tokens, {note['mean_same_leading_tokens']:.1f} leading tokens the same on average "
        f"(information: two engines' numerics); llama.cpp lookup vs its plain: "
        f"{sum(n['same_leading_tokens'] == n['compared'] for n in lookup)}/{len(lookup)}; llama.cpp's own "
        f"tokenization of the prompt text equals the engine's ids on {sum(agree)}/{len(agree)}"
    )


def main(paths: Sequence[str]) -> None:
    for path in paths:
        saved = json.loads(Path(path).read_text())
        report, prov = saved["report"], saved["provenance"]
        name = Path(report["model"]["path"]).name
        print(f"<!-- {path}: {prov['command']} ({prov['started_utc']} - {prov['finished_utc']}) -->")
        print("\n".join(summary_table(report, name)))
        print()
        print("\n".join(category_table(report, name)))
        print()
        print(llama_note(report))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
