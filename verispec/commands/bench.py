"""`verispec bench --model M [--json] [--plot FILE.png]`: engine speed, ratios, machine (verispec/bench/).

``--json`` prints :meth:`verispec.bench.report.BenchReport.as_json` (versioned: ``schema_version``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from verispec.bench.options import DRAFTS, PROMPTS, BenchOptions
from verispec.bench.plot import plot
from verispec.bench.run import run_bench
from verispec.bench.text import format_report
from verispec.engine.sparse_head import HEAD_HELP, HEAD_MODES
from verispec.reference.errors import BenchError as BenchError
from verispec.registry import DEFAULT_MODEL, resolve_model
from verispec.workload import WorkloadItem, load_workload, select


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "bench", help="measure engine speed against its matmul bound, the reference and llama.cpp"
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot", default=None, metavar="FILE.png", help="draw tok/s per mode and acceptance per position"
    )
    parser.add_argument("--tokens", type=int, default=48, help="tokens per decode run (default 48)")
    parser.add_argument(
        "--prefill-tokens", type=int, default=64, help="prompt tokens of the prefill measurement (default 64)"
    )
    parser.add_argument(
        "--draft",
        action="append",
        default=None,
        metavar="SPEC",
        help=f"draft sources to measure (repeatable; default {', '.join(DRAFTS)})",
    )
    parser.add_argument("--k", type=int, default=4, help="maximum draft tokens per cycle (adaptive; default 4)")
    parser.add_argument(
        "--reference-tokens", type=int, default=4, help="decode steps timed on the reference engine (default 4)"
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) reference engine run")
    parser.add_argument(
        "--no-kernels", action="store_true", help="skip the OpenBLAS kernel comparison (child processes)"
    )
    parser.add_argument(
        "--prompts",
        default=None,
        metavar="KIND,...",
        help=f"prompt kinds to run speculative decoding on (default all: {', '.join(k for k, _ in PROMPTS)})",
    )
    parser.add_argument(
        "--matmul-repeats", type=int, default=5, help="timed passes of each matmul stream, best kept (default 5)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="alternating plain/speculative runs per prompt, best of each kept (default 2)",
    )
    parser.add_argument(
        "--no-backends", action="store_true", help="skip measuring every backend / weights mode (numpy, ort, int8)"
    )
    parser.add_argument("--no-rss", action="store_true", help="skip the per-mode peak-RSS child processes")
    parser.add_argument(
        "--early-exit",
        default=None,
        metavar="CAL.json",
        help="also measure certified early exit with this calibration (verispec calibrate)",
    )
    parser.add_argument(
        "--workload",
        nargs="?",
        const="",
        default=None,
        metavar="FILE.jsonl",
        help="also run the chat workload (default verispec/data/workload.jsonl) per category",
    )
    parser.add_argument(
        "--workload-categories", default=None, metavar="CAT,...", help="workload categories to run (default all)"
    )
    parser.add_argument(
        "--workload-per-category",
        type=int,
        default=None,
        metavar="N",
        help="first N requests of each category (default all)",
    )
    parser.add_argument("--workload-greedy-only", action="store_true", help="skip the workload's sampled (T=0.8) runs")
    parser.add_argument(
        "--workload-length",
        choices=("answer", "max"),
        default="answer",
        help="tokens every side decodes per workload request, end of generation ignored on every side "
        "(default answer: the length of the engine's plain greedy answer; max: the request's max_tokens)",
    )
    parser.add_argument(
        "--workload-weights",
        choices=("auto", "exact", "f32", "int8"),
        default="auto",
        help="the engine mode the workload runs on (default auto: the headline mode; exact = f32: "
        "the reference's float32 numerics; int8: llama.cpp-class numerics, its own target law)",
    )
    parser.add_argument(
        "--weights",
        choices=("auto", "int8", "exact", "f32"),
        default="auto",
        help="the headline model's mode (default auto: int8 where onnxruntime is installed, "
        "else exact; exact = f32: the reference's float32 numerics)",
    )
    parser.add_argument(
        "--exact",
        dest="weights",
        action="store_const",
        const="exact",
        help="the exact float32 mode as the headline (= --weights exact)",
    )
    parser.add_argument(
        "--head",
        choices=HEAD_MODES,
        default="full",
        help="sparse: add the head section, plain greedy decoding with the int8 engine's sparse head beside "
        "its full head in alternating rounds (tokens/s ratio, the head's share of a step, fallbacks); "
        "the other sections run the full head. " + HEAD_HELP,
    )
    parser.set_defaults(func=run)


def _prompts(text: str | None) -> tuple[tuple[str, str], ...]:
    if text is None:
        return PROMPTS
    known = dict(PROMPTS)
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in known]
    if unknown or not kinds:
        raise BenchError(f"unknown prompt kind(s) {unknown or text!r}; known: {', '.join(known)}")
    return tuple((k, known[k]) for k in kinds)


def _workload(args: argparse.Namespace) -> "tuple[WorkloadItem, ...]":
    """The requested workload items (WorkloadError, one line, for a bad file or selection)."""
    if args.workload is None:
        return ()
    items = load_workload(Path(args.workload)) if args.workload else load_workload()
    categories = [c.strip() for c in args.workload_categories.split(",")] if args.workload_categories else None
    return select(items, categories, args.workload_per_category)


def run(args: argparse.Namespace) -> int:
    if args.head != "full" and args.weights in ("exact", "f32"):  # refused before minutes of timing
        raise BenchError(f"--head {args.head} is a head mode of the int8 engine, not of --weights {args.weights}")
    workload = _workload(args)  # checked before the model loads
    if args.plot:
        from verispec.atomic import output_file

        output_file(Path(args.plot))  # a FIFO, device or folder refused before minutes of timing
    options = BenchOptions(
        decode_tokens=args.tokens,
        prefill_tokens=args.prefill_tokens,
        drafts=tuple(args.draft) if args.draft else DRAFTS,
        k=args.k,
        reference=not args.no_reference,
        reference_tokens=args.reference_tokens,
        kernels=not args.no_kernels,
        prompts=_prompts(args.prompts),
        repeats=args.repeats,
        matmul_repeats=args.matmul_repeats,
        early_exit=Path(args.early_exit) if args.early_exit else None,
        backends=not args.no_backends,
        rss_children=not args.no_rss,
        workload=workload,
        workload_sampled=not args.workload_greedy_only,
        workload_length=args.workload_length,
        workload_weights=args.workload_weights,
        weights=args.weights,
        head=args.head,
    )
    report = run_bench(resolve_model(args.model), options)
    if args.plot:
        plot(report, Path(args.plot))
        report = replace(report, plot=args.plot)
    print(json.dumps(report.as_json()) if args.json else format_report(report))
    return 0
