"""`verispec generate`: decode from a prompt, streaming the text (or one --json object).

Thin by design: parse the flags into a :class:`reference.generate.GenerationRequest`
(:mod:`verispec.commands.request`, shared with the other decoding commands), decode on the engine
the flags name, print. ``--draft`` runs :mod:`verispec.commands.speculative`, ``--early-exit``
:mod:`verispec.commands.generate_early_exit`; both build their request and print their result
with the same shared module, so no command imports another's entry point back.
"""

from __future__ import annotations

import argparse
import json
import sys

from verispec.commands.generate_early_exit import run_early_exit
from verispec.commands.request import LoadedModel as LoadedModel  # re-exported: tests patch them here
from verispec.commands.request import add_engine_arguments, build_request, result_json, stats_line, stream
from verispec.commands.request import load as load
from verispec.commands.speculative import run_speculative
from verispec.commands.validate import check_generate
from verispec.engine.generate import generate_any as generate
from verispec.engine_load import HEAD_HELP, HEAD_MODES, head_stats_of, load_engine
from verispec.reference.drafts import DEFAULT_DRAFT
from verispec.registry import DEFAULT_MODEL

# llama.cpp's defaults (common/common.h), so a configuration moved from llama-cli means the same.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
DEFAULT_REPEAT_PENALTY = 1.0
DEFAULT_MAX_TOKENS = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument("--prompt", required=True, help="prompt text (special tokens like <|im_start|> are parsed)")
    parser.add_argument(
        "--chat", action="store_true", help="wrap the prompt as one user turn of the model's chat format"
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        help=f"tokens to generate at most (default {DEFAULT_MAX_TOKENS})",
    )
    parser.add_argument(
        "--temperature", type=float, default=DEFAULT_TEMPERATURE, help=f"0 = greedy (default {DEFAULT_TEMPERATURE})"
    )
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help=f"0 disables (default {DEFAULT_TOP_K})")
    parser.add_argument("--top-p", type=float, default=DEFAULT_TOP_P, help=f"1 disables (default {DEFAULT_TOP_P})")
    parser.add_argument("--min-p", type=float, default=DEFAULT_MIN_P, help=f"0 disables (default {DEFAULT_MIN_P})")
    parser.add_argument("--repeat-penalty", type=float, default=DEFAULT_REPEAT_PENALTY, help="1 disables (default 1.0)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: unpredictable)")
    parser.add_argument("--stop", action="append", default=[], metavar="STR", help="stop string (repeatable)")
    parser.add_argument(
        "--truncate",
        action="store_true",
        help="drop the oldest prompt tokens when prompt + max tokens exceed the context",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    add_engine_arguments(parser)
    # speculative decoding (reference/decode.py, reference/drafts.py, reference/evidence.py)
    parser.add_argument(
        "--draft",
        nargs="?",
        const=DEFAULT_DRAFT,
        default=None,
        metavar="SPEC",
        help=f"speculative decoding; --draft alone: {DEFAULT_DRAFT} (every lookup proposer, kept by measured acceptance)"
        "; or auto | ngram | suffix | suffix:tree (token trees, one pass each) | layerskip:M | model:PATH | self",
    )
    parser.add_argument(
        "--draft-cache",
        default=None,
        metavar="PATH",
        help="with --draft suffix or suffix:tree: a cross-request cache of earlier outputs, read and rewritten atomically",
    )
    parser.add_argument(
        "--k", type=int, default=4, help="draft tokens per cycle (the maximum with --adaptive; default 4)"
    )
    parser.add_argument(
        "--adaptive", action="store_true", help="adapt k each cycle (down to plain steps when drafting does not pay)"
    )
    parser.add_argument(
        "--p-min",
        type=float,
        default=0.0,
        help="stop drafting when the draft's top probability is below this (default 0)",
    )
    parser.add_argument("--trace", action="store_true", help="per-cycle speculative trace (stderr, or in --json)")
    # certified early exit (reference/early_exit.py; run by verispec/commands/generate_early_exit.py)
    parser.add_argument(
        "--early-exit",
        default=None,
        metavar="CAL.json",
        help="greedy decoding with certified early exit, calibrated by `verispec calibrate` (needs --temperature 0)",
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="with --early-exit: also run every layer and count served tokens that differ from the full model's",
    )
    parser.add_argument(
        "--kind",
        default=None,
        help="with --early-exit: the prompt's kind, whose calibration applies (default: reference/prompt_kind.py's rule on the prompt text)",
    )


def add_head_argument(parser: argparse.ArgumentParser) -> None:
    """--head full|sparse: the int8 mode's head (engine/sparse_head.py)."""
    parser.add_argument("--head", choices=HEAD_MODES, default="full", help=HEAD_HELP)


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("generate", help="generate text from a prompt")
    add_arguments(parser)
    add_head_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_generate(args)  # every flag, before any model is loaded (verispec/commands/validate.py)
    if getattr(args, "early_exit", None) is not None:
        return run_early_exit(args)
    if getattr(args, "draft", None) is not None:
        return run_speculative(args)
    loaded = load_engine(
        args.model,
        need_chat=args.chat,
        engine=args.engine,
        weights=args.weights,
        backend=args.backend,
        head=getattr(args, "head", "full"),
    )
    request = build_request(args, loaded)
    if args.json:
        result = generate(loaded.model, loaded.tokenizer, request)
        out = result_json(result)
        head = head_stats_of(loaded.model)
        if head is not None:
            out["head"] = head
        print(json.dumps(out, ensure_ascii=False))
        return 0
    result = generate(loaded.model, loaded.tokenizer, request, on_text=stream)
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(stats_line(result), file=sys.stderr)
    head_line(loaded.model)
    return 0


def head_line(model: object) -> None:
    """One stderr line on what a sparse head did (nothing for the full head)."""
    from verispec.engine.model import FastModel

    head = head_stats_of(model) if isinstance(model, FastModel) else None
    if head is not None:
        print(
            f"[sparse head: {head['rows']} rows, {head['sparse_rows']} from candidate chunks, "
            f"{head['lazy_draws']} lazy draws, {head['fallback_rows']} full-head fallbacks {head['fallbacks']}]",
            file=sys.stderr,
        )
