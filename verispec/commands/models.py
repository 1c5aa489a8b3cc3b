"""`verispec models list|fetch NAME`: the registry of real GGUF models that ship on PyPI."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from verispec import registry


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("models", help="list or fetch registered models")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    list_parser = actions.add_parser("list", help="list registered models and whether installed")
    list_parser.add_argument("--json", action="store_true", help="print JSON")
    list_parser.set_defaults(func=run_list)
    fetch_parser = actions.add_parser("fetch", help="install (and assemble) a registered model")
    fetch_parser.add_argument("name", choices=sorted(registry.REGISTRY))
    fetch_parser.set_defaults(func=run_fetch)


def run_list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for name, model in registry.REGISTRY.items():
        path = registry.installed_path(name)
        rows.append(
            {
                "name": name,
                "default": name == registry.DEFAULT_MODEL,
                "package": model.pip_requirement,
                "file": model.filename,
                "sha256": model.sha256,
                "installed": path is not None,
                "path": str(path) if path else None,
                "description": model.description,
            }
        )
    if args.json:
        print(json.dumps({"models": rows}, indent=2))
        return 0
    for row in rows:
        mark = "*" if row["default"] else " "
        state = row["path"] if row["installed"] else f"not installed (verispec models fetch {row['name']})"
        print(f"{mark} {row['name']:<14} {row['description']}\n    {state}")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    path = registry.fetch(args.name, log=lambda line: print(line, file=sys.stderr))
    print(path)
    return 0
