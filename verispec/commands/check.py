"""`verispec check`: run the spec against another implementation.

    verispec check --verifier-cmd "CMD" [--timeout S]
    verispec check --verifier MOD:FN [--batch-verifier MOD:FN] [--greedy-verifier MOD:FN] [--pipeline MOD:OBJ]
        [--vectors DIR | --seed S --count N] [--scale X] [--min-power P] [--fail-fast] [--[no-]keep-going]
        [--only NAME ...] [--json]
        [--law-only] [--sequential] [--budget SECONDS] [--workers N] [--shard I/S] [--junit-xml PATH]
    verispec check --merge REPORT.json ... [--json] [--allow-partial] [--min-power P] [--junit-xml PATH]

Exit status (verispec/exit_codes.py): 0 passed, 1 failed, 2 usage error (including a verifier
program that cannot start), 3 inconclusive (--budget ended before power 0.99, or a pass short of
power 0.99, as at --scale < 1, that no --min-power accepts), 4 model/input
error (an unreadable file, a broken vectors directory or report), 130 interrupted.
--law-only: the verifier draws its own randomness (f(p, q, drafts, seed); wire op sampled_law
with a seed per request), see spec/law_only.py. --sequential / --budget: group-sequential
statistics (spec/sequential.py). --shard I/S --json > shard_I.json on each of S machines (a shard
that sees a rejection alone exits 1), then --merge shard_*.json: the merged counts are exactly the
unsharded run's (spec/shards.py, spec/merge.py); with VERISPEC_REPORT_KEY set shards are signed
and the merge refuses unsigned ones (spec/report_seal.py).

It replays the portable vectors (exact agreement), then runs the spec's properties, including the
powered statistical tests, through the implementation, and reports per property: status, N,
alpha, power. The interfaces are documented in spec/check.py (Python) and spec/external/__init__.py (the
JSON-lines wire protocol). The same run from Python: ``verispec.check(...)`` (verispec/api.py), the
flags built into the same objects (verispec/options.py).
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
    from verispec.exit_codes import EPILOG
    from verispec.spec.external import DEFAULT_TIMEOUT

    parser = subparsers.add_parser(
        "check", help="check another verifier implementation against the spec", epilog=EPILOG
    )
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
        "--greedy-verifier",
        metavar="MOD:FN",
        help="with --verifier: greedy form f(p [k+1, V] logits or probabilities, drafts) -> verdict "
        "(optional: without it vectors_greedy is skipped, said so)",
    )
    parser.add_argument(
        "--pipeline",
        metavar="MOD:OBJ",
        help="with --verifier: object with rows(RowsRequest) and mode(...) (spec.pipeline.Pipeline)",
    )
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
        "--keep-going",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after a deterministic property failed, still run the statistical tests "
        "(default: yes, except with CI=true in the environment: --no-keep-going)",
    )
    parser.add_argument(
        "--min-power",
        type=float,
        default=None,
        metavar="P",
        help="accept a statistical pass at power >= P below the design's 0.99 (e.g. with --scale < 1, which "
        "otherwise exits 3, inconclusive); the verdict prints the power reached",
    )
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these properties (vectors_<kind>, contract, stat_..., ...)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report")
    parser.add_argument(
        "--law-only",
        action="store_true",
        help="the verifier draws its own randomness: f(p, q, drafts, seed) drawing from seed (command: op sampled_law with a seed); law tests only",
    )
    parser.add_argument(
        "--sequential", action="store_true", help="group-sequential statistics: reject early, stop at power"
    )
    parser.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="stop drawing after SECONDS (implies --sequential; exit 3 if short of power)",
    )
    parser.add_argument(
        "--budget-samples", type=int, metavar="N", help="stop drawing after N verifications (implies --sequential)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="draw the statistics in N verifier processes (implies --sequential)",
    )
    parser.add_argument("--shard", metavar="I/S", help="run shard I of S (1-based; --json, then --merge the S reports)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="REPORT", help="combine shard reports (--json output)")
    parser.add_argument(
        "--junit-xml", type=Path, metavar="PATH", help="also write the report as JUnit XML (one testcase per property)"
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="with --merge: accept shards of an --only run (the claim says partial)",
    )
    parser.set_defaults(func=run)


REPORT_BYTES = 64 * 1024 * 1024  # a shard report: counts per block, far below this


def _merge(args: argparse.Namespace) -> int:
    from verispec.reference.json_input import read_json_file
    from verispec.spec.check import CheckError, format_outcome, merge_reports
    from verispec.spec.merge import read_shard
    from verispec.spec.report import ReportError

    reports = []
    for path in args.merge:
        try:
            data = read_json_file(path, "shard report", max_bytes=REPORT_BYTES, error=ReportError)
            reports.append(read_shard(data, f"shard report {path}"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:  # a malformed report
            raise ReportError(f"cannot read shard report {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if args.min_power is not None and not 0 <= args.min_power <= 1:
        raise CheckError(f"--min-power must be in [0, 1], got {args.min_power}")
    report = merge_reports(reports, allow_partial=args.allow_partial)
    if args.min_power is not None:  # the merge decides the pass, so its floor wins over the shards'
        report.min_power = float(args.min_power)
    _print(report, args.json, format_outcome)
    _write_junit(args.junit_xml, report)
    return report.exit_status


def _write_junit(path: Path | None, report: "CheckReport") -> None:
    """After the report is printed: a file that cannot be written is one line on stderr."""
    if path is not None:
        from verispec.junit import write_check_junit, write_side_output

        sys.stdout.flush()
        write_side_output(f"the JUnit XML {path}", lambda: write_check_junit(path, report))


def _print(
    report: "CheckReport", as_json: bool, format_outcome: "Callable[[PropertyOutcome], str]", logged: bool = False
) -> None:
    if as_json:
        print(json.dumps(report.as_json(), indent=2))
        return
    if not logged:
        for outcome in report.properties:
            print(format_outcome(outcome))
    print(f"{report.headline()}  ({len(report.properties)} properties, {report.seconds:.1f}s)")
    print(report.claim())


def run(args: argparse.Namespace) -> int:
    from verispec import api
    from verispec.commands import import_from_current_folder
    from verispec.options import CHECK_KEYWORDS, check_options, flag_values
    from verispec.progress import progress_line
    from verispec.spec.check import CheckError, format_outcome

    if args.allow_partial and not args.merge:
        raise CheckError("--allow-partial goes with --merge")
    if args.merge:
        if args.verifier or args.verifier_cmd or args.shard:
            raise CheckError("--merge combines reports: give no --verifier, --verifier-cmd or --shard with it")
        return _merge(args)
    if not (args.verifier or args.verifier_cmd):
        raise CheckError("give --verifier MOD:FN or --verifier-cmd CMD (or --merge REPORT ...)")
    if args.shard is not None and not args.json:
        raise CheckError("--shard writes a report for --merge: add --json")
    if args.junit_xml is not None:
        from verispec.junit import check_junit_target

        check_junit_target(args.junit_xml)
    import_from_current_folder()
    quiet = args.json
    progress = None if quiet else progress_line()

    def log(outcome: "PropertyOutcome") -> None:
        if progress is not None:
            progress.close()  # the outcome's line replaces the progress line
        print(format_outcome(outcome), flush=True)

    try:
        options = check_options(  # verispec/options.py: the flags' checks, one builder for CLI and API
            **flag_values(args, CHECK_KEYWORDS),
            log=None if quiet else log,
            announce=None if quiet else (lambda description: print(f"checking {description}", flush=True)),
            progress=progress,
            warn=lambda message: print(f"verispec: warning: {message}", file=sys.stderr, flush=True),
        )
        report = api.run(options)
    finally:
        if progress is not None:
            progress.close()
    _print(report, args.json, format_outcome, logged=True)
    sys.stdout.flush()
    _write_junit(args.junit_xml, report)
    return report.exit_status
