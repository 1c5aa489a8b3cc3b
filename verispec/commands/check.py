"""`verispec check`: run the spec against another implementation; exit 1 on any failure.

    verispec check --verifier-cmd "CMD" [--timeout S]
    verispec check --verifier MOD:FN [--batch-verifier MOD:FN] [--greedy-verifier MOD:FN] [--pipeline MOD:OBJ]
        [--vectors DIR | --seed S --count N] [--scale X] [--fail-fast] [--only NAME ...] [--json]

It replays the portable vectors (exact agreement), then runs the spec's properties, including the
powered statistical tests, through the implementation, and reports per property: status, N,
alpha, power. The interfaces are documented in spec/check.py (Python) and spec/external.py (the
JSON-lines wire protocol).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from spec.external import DEFAULT_TIMEOUT

    parser = subparsers.add_parser("check", help="check another verifier implementation against the spec")
    which = parser.add_mutually_exclusive_group(required=True)
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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from spec.check import (
        CheckError,
        CommandImplementation,
        Implementation,
        PythonImplementation,
        format_outcome,
        run_check,
    )
    from spec.vectors import DEFAULT_COUNT, DEFAULT_SEED, build_vectors, read_vectors

    if args.verifier_cmd and (args.batch_verifier or args.greedy_verifier or args.pipeline):
        raise CheckError("--batch-verifier, --greedy-verifier and --pipeline go with --verifier, not --verifier-cmd")
    if args.vectors is not None and (args.seed is not None or args.count is not None):
        raise CheckError("--vectors replays files; --seed/--count generate vectors: give one or the other")
    if not args.timeout > 0:
        raise CheckError(f"--timeout must be > 0, got {args.timeout}")
    vectors = (
        read_vectors(args.vectors)
        if args.vectors is not None
        else build_vectors(
            DEFAULT_COUNT if args.count is None else args.count, DEFAULT_SEED if args.seed is None else args.seed
        )
    )
    impl: Implementation
    if args.verifier_cmd:
        impl = CommandImplementation(args.verifier_cmd, args.timeout)
    else:
        impl = PythonImplementation.from_specs(args.verifier, args.batch_verifier, args.greedy_verifier, args.pipeline)
    log = None if args.json else (lambda outcome: print(format_outcome(outcome), flush=True))
    if not args.json:
        print(f"checking {impl.description}", flush=True)
    try:
        report = run_check(impl, vectors, scale=args.scale, fail_fast=args.fail_fast, only=args.only, log=log)
    finally:
        impl.close()
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        failed = [p.name for p in report.failed]
        verdict = "PASSED" if report.passed else ("FAILED: " + ", ".join(failed) if failed else "NOTHING RAN")
        print(f"{verdict}  ({len(report.properties)} properties, {report.seconds:.1f}s)")
    sys.stdout.flush()
    return 0 if report.passed else 1
