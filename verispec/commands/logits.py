"""`verispec logits`: the model's logits after every prompt token, saved as a .npy file.

The prompt is tokenized as llama.cpp does (BOS per the metadata's ``add_bos_token``); ``--special``
parses special tokens written in the text. The file holds float32 ``[prompt_tokens, vocab]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from verispec.atomic import replace_file
from verispec.commands.request import add_engine_arguments, load  # noqa: F401  (load: the reference loader, kept importable here)
from verispec.commands.validate import check_logits
from verispec.engine.generate import prompt_logits_any as prompt_logits
from verispec.engine_load import EXACT, load_engine
from verispec.reference.generate import encode_prompt
from verispec.registry import DEFAULT_MODEL


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("logits", help="save the logits after every prompt token (.npy)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument("--prompt", required=True, help="prompt text")
    parser.add_argument("--out", required=True, help="output .npy file: float32 [prompt_tokens, vocab]")
    parser.add_argument("--special", action="store_true", help="parse special tokens written in the prompt")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    add_engine_arguments(parser, default_weights=EXACT)  # the logits it saves are the reference's numerics
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_logits(args)  # before the model loads
    loaded = load_engine(args.model, engine=args.engine, weights=args.weights, backend=args.backend)
    ids = encode_prompt(loaded.tokenizer, args.prompt, parse_special=args.special)
    logits = np.asarray(prompt_logits(loaded.model, ids), dtype=np.float32)  # [T, V]
    with replace_file(Path(args.out)) as fh:  # atomic: Ctrl-C leaves no half-written file
        np.save(fh, logits)
    if args.json:
        print(json.dumps({"out": args.out, "prompt_ids": ids, "shape": list(logits.shape)}))
    else:
        print(f"{args.out}: float32 {list(logits.shape)} (prompt ids {ids})")
    return 0
