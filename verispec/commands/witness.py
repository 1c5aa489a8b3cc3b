"""`verispec witness [--vocab V] [--agreement A] [--k K] [--draft-cost C] [--steps N] [--seed S]
[--no-verify] [--no-repair] [--show S] [--json]`: the speculative decoding station.

Serves a toy target with a draft that agrees with it by A, prints the evidence of the first steps
(accepted prefix, first rejection, repair or bonus), the totals, the predicted speedup beside the
measured one, and the invariant: the exact TV distance between the emitted law and the target
(0 with verification and repair on) and a chi-square p-value. ``--no-verify`` and ``--no-repair``
show the falsification. Exit status: 0 when the invariant holds, 1 when it is falsified, 2 on bad
flags (one line on stderr).
"""

from __future__ import annotations

import argparse
import json

from verispec.spec.witness import WitnessConfig, WitnessError, format_report, run_witness

DEFAULTS = WitnessConfig()


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("witness", help="serve a toy target with a draft and show the lossless evidence")
    # numbers are parsed in run() so that a bad value is a one-line error, like every verispec error
    parser.add_argument(
        "--vocab", default=str(DEFAULTS.vocab), metavar="V", help=f"toy vocabulary size (default {DEFAULTS.vocab})"
    )
    parser.add_argument(
        "--agreement",
        default=str(DEFAULTS.agreement),
        metavar="A",
        help=f"draft/target agreement in [0, 1] (default {DEFAULTS.agreement})",
    )
    parser.add_argument("--k", default=str(DEFAULTS.k), metavar="K", help=f"drafts per step (default {DEFAULTS.k})")
    parser.add_argument(
        "--draft-cost",
        default=str(DEFAULTS.draft_cost),
        metavar="C",
        help=f"draft pass cost relative to a target pass (default {DEFAULTS.draft_cost})",
    )
    parser.add_argument(
        "--steps",
        default=str(DEFAULTS.steps),
        metavar="N",
        help=f"speculative steps to serve (default {DEFAULTS.steps})",
    )
    parser.add_argument(
        "--seed",
        default=str(DEFAULTS.seed),
        metavar="S",
        help=f"seed of the toy laws and the draws (default {DEFAULTS.seed})",
    )
    parser.add_argument(
        "--show",
        default=str(DEFAULTS.show),
        metavar="S",
        help=f"steps whose evidence is printed (default {DEFAULTS.show})",
    )
    parser.add_argument("--no-verify", action="store_true", help="accept every draft (falsifies the invariant)")
    parser.add_argument(
        "--no-repair", action="store_true", help="emit nothing on a rejection (falsifies the invariant)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def _integer(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise WitnessError(f"{flag} must be an integer, got {text!r}") from None


def _number(flag: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise WitnessError(f"{flag} must be a number, got {text!r}") from None


def config_from(args: argparse.Namespace) -> WitnessConfig:
    """Flags -> a validated :class:`WitnessConfig` (WitnessError names a bad flag)."""
    config = WitnessConfig(
        vocab=_integer("--vocab", args.vocab),
        agreement=_number("--agreement", args.agreement),
        k=_integer("--k", args.k),
        draft_cost=_number("--draft-cost", args.draft_cost),
        steps=_integer("--steps", args.steps),
        seed=_integer("--seed", args.seed),
        verify=not args.no_verify,
        repair=not args.no_repair,
        show=_integer("--show", args.show),
    )
    config.validate()
    return config


def run(args: argparse.Namespace) -> int:
    report = run_witness(config_from(args))
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(format_report(report))
    return 0 if report.holds else 1
