"""`verispec check`: run the spec against another implementation.

    verispec check --verifier-cmd "CMD" [--timeout S]
    verispec check --verifier MOD:FN [--batch-verifier MOD:FN] [--greedy-verifier MOD:FN] [--pipeline MOD:OBJ]
        [--vectors DIR | --seed S --count N] [--scale X] [--fail-fast] [--only NAME ...] [--json]
        [--law-only] [--sequential] [--budget SECONDS] [--workers N] [--shard I/S]
    verispec check --merge REPORT.json ... [--json]

Exit status: 0 passed, 1 failed, 2 usage error, 3 inconclusive (--budget ended before power 0.99).
--law-only: the verifier draws its own randomness (f(p, q, drafts); wire op sampled_law), see
spec/law_only.py. --sequential / --budget: group-sequential statistics (spec/sequential.py).
--shard I/S --json > shard_I.json on each of S machines, then --merge shard_*.json: the merged
verdict is exactly the unsharded run's (block counts add).

It replays the portable vectors (exact agreement), then runs the spec's properties, including the
powered statistical tests, through the implementation, and reports per property: status, N,
alpha, power. The interfaces are documented in spec/check.py (Python) and spec/external.py (the
JSON-lines wire protocol).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verispec.spec.check import CheckReport, PropertyOutcome


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from verispec.spec.external import DEFAULT_TIMEOUT

    parser = subparsers.add_parser("check", help="check another verifier implementation against the spec")
    which = parser.add_mutually_exclusive_group(required=False)
    which.add_argument(
        "--verifier", metavar="MOD:FN", help="Python sampled verifier f(p, q, drafts, uniforms) -> verdict"
    )
    which.add_argument(
        "--verifier-cmd", metavar="CMD", help="a program speaking the JSON-lines protocol on stdin/stdout"
    )
    parser.add_argument(
        "--batch-verifier", metavar="MOD:FN", help="with --verifier: batch form f(p, q, drafts [N,k], uniforms [N,k+1])"
    )
    parser.add_argument(
        "--greedy-verifier", metavar="MOD:FN", help="with --verifier: greedy form f(p, drafts) -> verdict"
    )
    parser.add_argument("--pipeline", metavar="MOD:OBJ", help="with --verifier: object with rows(RowsRequest) and mode(...) (spec.pipeline.Pipeline)")
    parser.add_argument(
        "--vectors", type=Path, metavar="DIR", help="replay these vector files (default: generate in memory)"
    )
    parser.add_argument("--seed", type=int, default=None, metavar="S", help="seed of the generated vectors")
    parser.add_argument(
        "--count", type=int, default=None, metavar="N", help="random cases per kind of the generated vectors"
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply statistical sample sizes (power is reported; default 1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for any one response of --verifier-cmd (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failing property")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these properties (vectors_<kind>, contract, stat_..., ...)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report")
    parser.add_argument(
        "--law-only",
        action="store_true",
        help="the verifier draws its own randomness: f(p, q, drafts) (command: op sampled_law); law tests only",
    )
    parser.add_argument(
        "--sequential", action="store_true", help="group-sequential statistics: reject early, stop at power"
    )
    parser.add_argument(
        "--budget", type=float, metavar="SECONDS", help="stop drawing after SECONDS (implies --sequential; exit 3 if short of power)"
    )
    parser.add_argument(
        "--budget-samples", type=int, metavar="N", help="stop drawing after N verifications (implies --sequential)"
    )
    parser.add_argument("--workers", type=int, default=1, metavar="N", help="draw the statistics in N verifier processes")
    parser.add_argument("--shard", metavar="I/S", help="run shard I of S (1-based; --json, then --merge the S reports)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="REPORT", help="combine shard reports (--json output)")
    parser.set_defaults(func=run)


def _shard(text: str | None) -> tuple[int, int] | None:
    from verispec.spec.check import CheckError

    if text is None:
        return None
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise CheckError(f"--shard must be I/S with 1 <= I <= S, got {text!r}")
    return int(index), int(count)


REPORT_BYTES = 64 * 1024 * 1024  # a shard report: counts per block, far below this


def _merge(args: argparse.Namespace) -> int:
    from verispec.reference.json_input import read_json_file
    from verispec.spec.check import CheckError, CheckReport, format_outcome, merge_reports

    reports = []
    for path in args.merge:
        try:
            reports.append(CheckReport.from_json(read_json_file(path, "shard report", max_bytes=REPORT_BYTES, error=CheckError)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:  # a malformed report
            raise CheckError(f"cannot read shard report {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    report = merge_reports(reports)
    _print(report, args.json, format_outcome)
    return report.exit_status


def _print(report: "CheckReport", as_json: bool, format_outcome: "Callable[[PropertyOutcome], str]", logged: bool = False) -> None:
    if as_json:
        print(json.dumps(report.as_json(), indent=2))
        return
    if not logged:
        for outcome in report.properties:
            print(format_outcome(outcome))
    failed = [p.name for p in report.failed]
    if report.shard is not None:
        verdict = f"SHARD {report.shard[0]}/{report.shard[1]} DONE"
    elif failed:
        verdict = "FAILED: " + ", ".join(failed)
    elif report.inconclusive:
        verdict = "INCONCLUSIVE: " + ", ".join(p.name for p in report.inconclusive)
    else:
        verdict = "PASSED" if report.passed else "NOTHING RAN"
    print(f"{verdict}  ({len(report.properties)} properties, {report.seconds:.1f}s)")
    print(report.claim())


def run(args: argparse.Namespace) -> int:
    from verispec.spec.check import (
        DEFAULT_STAT_SEED,
        CheckError,
        CommandImplementation,
        Implementation,
        PythonImplementation,
        format_outcome,
        run_check,
    )
    from verispec.spec.sequential import Budget
    from verispec.spec.vectors import DEFAULT_COUNT, DEFAULT_SEED, build_vectors, read_vectors
    from verispec.spec.workers import ImplementationSpec, WorkerPool

    if args.merge:
        if args.verifier or args.verifier_cmd or args.shard:
            raise CheckError("--merge combines reports: give no --verifier, --verifier-cmd or --shard with it")
        return _merge(args)
    if not (args.verifier or args.verifier_cmd):
        raise CheckError("give --verifier MOD:FN or --verifier-cmd CMD (or --merge REPORT ...)")
    if args.verifier_cmd and (args.batch_verifier or args.greedy_verifier or args.pipeline):
        raise CheckError("--batch-verifier, --greedy-verifier and --pipeline go with --verifier, not --verifier-cmd")
    if args.vectors is not None and (args.seed is not None or args.count is not None):
        raise CheckError("--vectors replays files; --seed/--count generate vectors: give one or the other")
    if not args.timeout > 0:
        raise CheckError(f"--timeout must be > 0, got {args.timeout}")
    if args.budget is not None and not args.budget > 0:
        raise CheckError(f"--budget must be > 0 seconds, got {args.budget}")
    if args.budget_samples is not None and args.budget_samples < 0:
        raise CheckError(f"--budget-samples must be >= 0, got {args.budget_samples}")
    if args.workers < 1:
        raise CheckError(f"--workers must be >= 1, got {args.workers}")
    shard = _shard(args.shard)
    if shard is not None and (args.budget is not None or args.budget_samples is not None):
        raise CheckError("--shard runs its whole slice: a budget would leave holes in the merge")
    if shard is not None and not args.json:
        raise CheckError("--shard writes a report for --merge: add --json")
    vectors = (
        read_vectors(args.vectors)
        if args.vectors is not None
        else build_vectors(
            DEFAULT_COUNT if args.count is None else args.count, DEFAULT_SEED if args.seed is None else args.seed
        )
    )
    spec = ImplementationSpec(
        args.verifier, args.batch_verifier, args.greedy_verifier, args.pipeline, args.verifier_cmd, args.timeout, args.law_only
    )
    impl: Implementation
    if args.verifier_cmd:
        impl = CommandImplementation(args.verifier_cmd, args.timeout, law_only=args.law_only)
    else:
        impl = PythonImplementation.from_specs(
            args.verifier, args.batch_verifier, args.greedy_verifier, args.pipeline, law_only=args.law_only
        )
    budget = (
        Budget(seconds=args.budget, samples=args.budget_samples)
        if args.budget is not None or args.budget_samples is not None
        else None
    )
    log = None if args.json else (lambda outcome: print(format_outcome(outcome), flush=True))
    if not args.json:
        print(f"checking {impl.description}", flush=True)
    pool = WorkerPool(spec, DEFAULT_STAT_SEED, args.workers) if args.workers > 1 else None
    try:
        report = run_check(
            impl,
            vectors,
            scale=args.scale,
            fail_fast=args.fail_fast,
            only=args.only,
            log=log,
            sequential=args.sequential,
            budget=budget,
            shard=shard,
            draw=pool.draw if pool else None,
            parallel=args.workers,
        )
    finally:
        impl.close()
        if pool:
            pool.close()
    _print(report, args.json, format_outcome, logged=True)
    sys.stdout.flush()
    return report.exit_status
