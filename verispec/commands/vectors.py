"""`verispec vectors --out DIR [--count N] [--seed S] [--force] [--json]`: write the portable test vectors.

One JSON-lines file per kind (sampled, greedy, rows, target_law, gate, conformal_index,
dequantize), a ``manifest.json`` (versions, seed, count, per-file case count and sha256) and a
``FORMAT.md`` describing the format. The same seed and count give the same bytes.

All or nothing (verispec/atomic.py): the set is built in a hidden folder beside DIR and renamed
into place, so DIR holds a whole set or what it held before. DIR must be absent or an empty
folder; ``--force`` replaces a non-empty one (its old contents are deleted once the new set is in).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verispec.atomic import replace_directory
from verispec.commands.validate import check_vectors


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from verispec.spec.vectors import DEFAULT_COUNT, DEFAULT_SEED

    parser = subparsers.add_parser("vectors", help="write deterministic portable test vectors (JSON lines)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory to write (created if needed)")
    parser.add_argument(
        "--count",
        type=int,
        default=DEFAULT_COUNT,
        metavar="N",
        help=f"random cases per kind, edge cases come on top (default {DEFAULT_COUNT})",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, metavar="S", help=f"generator seed (default {DEFAULT_SEED})"
    )
    parser.add_argument("--force", action="store_true", help="replace DIR when it is not empty")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from verispec.spec.vectors import write_vectors

    check_vectors(args)
    with replace_directory(args.out, force=args.force) as staging:
        manifest = write_vectors(staging, count=args.count, seed=args.seed)
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    print(
        f"wrote {args.out} (format {manifest['format_version']}, protocol {manifest['protocol_version']}, seed {manifest['seed']}, count {manifest['count']})"
    )
    for entry in manifest["files"]:
        print(f"  {entry['name']:<22} {entry['cases']:>5} cases  sha256 {entry['sha256']}")
    print("  manifest.json, FORMAT.md")
    return 0
