"""``python -m verispec.proofs [--json] [--only SUBSTRING] [--models]``: check every z3 obligation.

Prints one row per obligation (name, status, seconds, statement) and a summary line; with
``--json`` a JSON document instead. Exits 0 iff every obligation is ``proved`` (valid claims) or
``witnessed`` (satisfiability claims: tightness counterexamples, float32 rounding failures), 1
otherwise. Witness models are printed under their row (always in ``--json``; in text with
``--models``, and always for a failed obligation).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from verispec.proofs.catalog import all_obligations
from verispec.proofs.core import Result, check


def _row(result: Result) -> str:
    ob = result.obligation
    return f"{ob.name:<48} {result.status:<9} {result.seconds:7.3f}s  {ob.statement}"


def _as_json(results: list[Result], seconds: float) -> str:
    rows = [
        {
            "name": r.obligation.name,
            "kind": r.obligation.kind,
            "statement": r.obligation.statement,
            "status": r.status,
            "ok": r.ok,
            "seconds": round(r.seconds, 4),
            "rlimit": r.obligation.rlimit,
            "relied_on_by": list(r.obligation.relied_on_by),
            "model": list(r.model),
            "reason": r.reason,
        }
        for r in results
    ]
    summary = {"total": len(results), "ok": sum(r.ok for r in results), "seconds": round(seconds, 3)}
    return json.dumps({"obligations": rows, "summary": summary}, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verispec.proofs", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--only", metavar="SUBSTRING", help="check only obligations whose name contains it")
    parser.add_argument("--models", action="store_true", help="print witness models under their rows")
    args = parser.parse_args(argv)

    obligations = [ob for ob in all_obligations() if args.only is None or args.only in ob.name]
    start = time.perf_counter()
    results: list[Result] = []
    for ob in obligations:
        result = check(ob)
        results.append(result)
        if not args.json:
            print(_row(result), flush=True)
            if result.model and (args.models or not result.ok):
                print("\n".join(f"{'':<50}{line}" for line in result.model))
            if result.reason:
                print(f"{'':<50}reason: {result.reason}")
    seconds = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    if args.json:
        print(_as_json(results, seconds))
    else:
        print(f"{len(results) - len(failed)}/{len(results)} obligations discharged in {seconds:.2f}s")
        for r in failed:
            print(f"NOT DISCHARGED: {r.obligation.name} ({r.status})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
