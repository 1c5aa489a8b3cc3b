"""`verispec template NAME | --list`: print a shipped starting file (CI workflow, example verifiers).

    verispec template github-actions > .github/workflows/verispec.yml
    verispec template law-only-verifier > my_sampler.py
    verispec template github-actions --shards 8 --install vendor/verispec-0.1.0-py3-none-any.whl \
        --check-args="--verifier mypkg.sampler:verify --batch-verifier mypkg.sampler:verify_batch --law-only"
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from verispec.templates import TEMPLATES

    parser = subparsers.add_parser("template", help="print a shipped template: CI workflow, example verifiers")
    parser.add_argument("name", nargs="?", choices=[t.name for t in TEMPLATES], help="the template to print")
    parser.add_argument("--list", action="store_true", help="list the templates")
    workflow = parser.add_argument_group("github-actions options")
    workflow.add_argument("--shards", type=int, help="shard jobs (the matrix is 1..N; default 4)")
    workflow.add_argument(
        "--install",
        metavar="SPEC",
        help="what pip installs: verispec's wheel, a checkout path or git+https:// URL (and more)",
    )
    workflow.add_argument("--check-args", metavar="ARGS", help="the arguments of `verispec check` (your verifier)")
    workflow.add_argument(
        "--decoder-args", metavar="ARGS", help="the arguments of `verispec check-decoder` (your decoder; default: none)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from verispec.templates import TEMPLATES, TemplateError, template_text, workflow_text

    if args.list or args.name is None:
        if not args.list:
            raise TemplateError("give a template NAME or --list")
        for entry in TEMPLATES:
            print(f"{entry.name:<22} {entry.what}")
        return 0
    options = {
        "shards": args.shards,
        "install": args.install,
        "check_args": args.check_args,
        "decoder_args": args.decoder_args,
    }
    given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None]
    if args.name == "github-actions":
        text = workflow_text(**options)
    elif given:
        raise TemplateError(f"{', '.join(given)}: options of the github-actions template only")
    else:
        text = template_text(args.name)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
