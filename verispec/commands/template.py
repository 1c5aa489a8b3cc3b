"""`verispec template NAME | --list`: print a shipped starting file (CI workflow, example verifiers).

    verispec template github-actions > .github/workflows/verispec.yml
    verispec template law-only-verifier > my_sampler.py
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from verispec.templates import TEMPLATES

    parser = subparsers.add_parser("template", help="print a shipped template: CI workflow, example verifiers")
    parser.add_argument("name", nargs="?", choices=[t.name for t in TEMPLATES], help="the template to print")
    parser.add_argument("--list", action="store_true", help="list the templates")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from verispec.templates import TEMPLATES, TemplateError, template_text

    if args.list or args.name is None:
        if not args.list:
            raise TemplateError("give a template NAME or --list")
        for entry in TEMPLATES:
            print(f"{entry.name:<22} {entry.what}")
        return 0
    sys.stdout.write(template_text(args.name))
    sys.stdout.flush()
    return 0
