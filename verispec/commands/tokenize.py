"""`verispec tokenize --model MODEL [--special] [--bos] [--json] [--pieces] TEXT`: text -> token ids.

The ids are llama.cpp's for the same model (see :mod:`reference.tokenizer`). By default no BOS is
added and control tokens written in the text (``<|im_start|>``) are tokenized as plain text;
``--bos`` puts the BOS id first, ``--special`` parses control tokens. Text output prints the ids on
one line, or with ``--pieces`` one line per token: id, vocabulary string, decoded piece.
``--json`` prints exactly ``{"model": MODEL, "ids": [...]}`` (MODEL as given on the command line).
"""

from __future__ import annotations

import argparse
import json

from verispec.reference.tokenizer import Tokenizer
from verispec.registry import DEFAULT_MODEL, resolve_model


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("tokenize", help="print the token ids of a text")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument("--special", action="store_true", help="parse control tokens in the text")
    parser.add_argument("--bos", action="store_true", help="put the BOS token first")
    parser.add_argument("--json", action="store_true", help='print {"model": ..., "ids": [...]}')
    parser.add_argument("--pieces", action="store_true", help="one line per token with its text")
    parser.add_argument("text", metavar="TEXT", help="the text to tokenize")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tokenizer = Tokenizer.from_file(resolve_model(args.model))
    ids = tokenizer.encode(args.text, add_bos=args.bos, parse_special=args.special)
    if args.json:
        print(json.dumps({"model": args.model, "ids": ids}))
    elif args.pieces:
        for token in ids:
            piece = tokenizer.token_bytes(token).decode("utf-8", errors="backslashreplace")
            print(f"{token}\t{tokenizer.token_text(token)!r}\t{piece!r}")
    else:
        print(" ".join(map(str, ids)))
    return 0
