"""What every decoding command shares: loading a model, turning flags into a request, printing a
result. ``generate`` (plain, ``--draft``, ``--early-exit``), ``logits`` and ``calibrate`` import
this module; it imports none of them, so the commands form no import loop.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from verispec.commands.validate import sampling_params
from verispec.engine import ENGINES
from verispec.engine.weights import BACKEND_CHOICES
from verispec.engine_load import AUTO, EXACT, WEIGHTS_CHOICES, WEIGHTS_HELP, EngineLoaded
from verispec.reference.chat import ChatFormat, optional_chat_format
from verispec.reference.generate import GenerationRequest, GenerationResult, encode_prompt
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model


@dataclass(frozen=True)
class LoadedModel:
    """A model, its tokenizer, and its chat format (None when it has none)."""

    model: Model
    tokenizer: Tokenizer
    chat: ChatFormat | None


def load(name_or_path: str, *, need_chat: bool = False) -> LoadedModel:
    """Resolve a registry name or path, dequantize the weights, build the tokenizer.

    With ``need_chat`` a model without a known chat format is an error (ChatFormatError).
    """
    path = resolve_model(name_or_path)
    with GGUFFile.open(path) as f:
        model = Model.load(f)
        tokenizer = Tokenizer.from_gguf(f.metadata)
        chat = optional_chat_format(f.metadata, required=need_chat)
    return LoadedModel(model, tokenizer, chat)


def add_engine_arguments(parser: argparse.ArgumentParser, default_weights: str = AUTO) -> None:
    """--engine fast|reference, --weights auto|int8|exact|f32|quantized (--exact: exact), --backend
    (every command that runs a model). ``default_weights``: auto for the decoding commands; a
    command that exports numerics (logits) defaults to exact."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="fast",
        help="fast (NumPy+BLAS engine, default) or reference (readable, slow)",
    )
    parser.add_argument(
        "--weights",
        choices=WEIGHTS_CHOICES,
        default=default_weights,
        help=f"{WEIGHTS_HELP} (default {default_weights})",
    )
    parser.add_argument(
        "--exact",
        dest="weights",
        action="store_const",
        const=EXACT,
        help="the exact float32 mode, the reference's numerics (= --weights exact)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="the f32 weights' matmul kernel: auto (ort when installed, else numpy), numpy, ort (onnxruntime MLAS)",
    )


def build_request(args: argparse.Namespace, loaded: "LoadedModel | EngineLoaded") -> GenerationRequest:
    """The flags as a request (sampling parameters validated: one-line SamplingError if bad)."""
    params = sampling_params(args)
    params.validate(loaded.model.config.n_vocab)
    chat = loaded.chat if args.chat else None
    prompt_ids = encode_prompt(loaded.tokenizer, args.prompt, chat=chat)
    stop_ids: frozenset[int] = frozenset()
    if chat is not None:
        end = loaded.tokenizer.token_id(chat.end_of_turn)
        stop_ids = frozenset() if end is None else frozenset({end})
    return GenerationRequest(
        prompt_ids=tuple(prompt_ids),
        params=params,
        max_tokens=args.max_tokens,
        stop=tuple(args.stop),
        stop_ids=stop_ids,
        seed=args.seed,
        truncate=args.truncate,
    )


def result_json(result: GenerationResult) -> dict[str, object]:
    return {
        "prompt_ids": list(result.prompt_ids),
        "ids": list(result.ids),
        "text": result.text,
        "stop_reason": result.stop_reason,
        "stats": result.stats.as_dict(),
    }


def stats_line(result: GenerationResult) -> str:
    s = result.stats
    return (
        f"[{s.prompt_tokens} prompt tokens, {s.generated_tokens} generated ({result.stop_reason}); "
        f"ttft {s.ttft_s * 1000:.0f} ms, tpot {s.tpot_s * 1000:.1f} ms, {s.tokens_per_s:.1f} tokens/s, "
        f"{s.target_passes} target passes]"
    )


def stream(piece: str) -> None:
    """Write a text piece to stdout as it is decoded."""
    sys.stdout.write(piece)
    sys.stdout.flush()
