"""`verispec models list|fetch NAME|synth`: the registry of real GGUF models that ship on PyPI, and
tiny synthetic ones written on the spot.

    verispec models synth --arch llama --out models/ --seed 0     # models/llama-seed0.gguf
    verispec models synth --list
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
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
    _register_synth(actions)


def _register_synth(actions: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from verispec.synth import ARCHITECTURES, DEFAULT_TYPES
    from verispec.synth.models import TOKENIZERS

    synth = actions.add_parser(
        "synth",
        help="write a tiny synthetic GGUF model (llama, mistral, phi3, gemma3, gemma4 shapes)",
        description="Write a tiny seeded synthetic GGUF model: the tensor names, metadata and layout of a real "
        "family, random weights. The same seed gives the same bytes. transformers, llama.cpp, mlx-lm "
        "and openvino-genai load it; check-decoder judges a whole decoder on it at full power in minutes.",
    )
    synth.add_argument("--arch", choices=list(ARCHITECTURES), help="the architecture's shape")
    synth.add_argument("--out", metavar="DIR", help="the folder to write <arch>-seed<seed>.gguf into (made if needed)")
    synth.add_argument("--seed", type=int, default=0, help="the weights' seed (default 0)")
    synth.add_argument(
        "--types",
        default=",".join(DEFAULT_TYPES),
        metavar="T1,T2",
        help="weight types, cycled over the matrices: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 "
        "(default F16; norms stay F32)",
    )
    synth.add_argument(
        "--tokenizer",
        choices=list(TOKENIZERS),
        default="spm",
        help="spm: SentencePiece (TinyLlama, Mistral, Phi-3, Gemma); bpe: byte-level BPE (SmolLM2's "
        "kind, the one openvino-genai's GGUF reader converts)",
    )
    synth.add_argument("--list", action="store_true", help="list the architectures")
    synth.set_defaults(func=run_synth)


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


def run_synth(args: argparse.Namespace) -> int:
    from verispec.reference.errors import UsageError
    from verispec.synth import ARCHITECTURES, synthesize

    if args.list:
        for arch in ARCHITECTURES.values():
            print(f"{arch.name:<8} {arch.shape_of}")
        return 0
    if args.arch is None or args.out is None:
        raise UsageError("models synth needs --arch and --out (or --list)")
    types = tuple(t.strip() for t in str(args.types).split(",") if t.strip())
    path = synthesize(args.arch, Path(args.out), seed=args.seed, types=types, tokenizer=args.tokenizer)
    print(path)
    return 0
