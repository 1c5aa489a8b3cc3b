"""`verispec generate`: decode from a prompt, streaming the text (or one --json object).

Thin by design: parse the flags into a :class:`reference.generate.GenerationRequest`, call
:func:`reference.generate.generate`, print. A later decoding strategy (``--draft``,
``--early-exit``, ``--engine``) adds its flags in :func:`add_arguments` and its fields in
:func:`build_request`, and swaps the library call in :func:`run`; parsing and printing stay as is.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from reference.chat import ChatFormat, ChatFormatError, chat_format
from engine import ENGINES
from engine.generate import generate_any as generate
from engine.weights import BACKEND_CHOICES, WEIGHT_MODES
from reference.generate import GenerationRequest, GenerationResult, encode_prompt
from reference.gguf import GGUFFile
from reference.model import Model
from reference.sampling import SamplingParams
from reference.tokenizer import Tokenizer
from verispec.engine_load import EngineLoaded, load_engine
from verispec.registry import DEFAULT_MODEL, resolve_model

# llama.cpp's defaults (common/common.h), so a configuration moved from llama-cli means the same.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
DEFAULT_REPEAT_PENALTY = 1.0
DEFAULT_MAX_TOKENS = 128


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
        try:
            chat: ChatFormat | None = chat_format(f.metadata)
        except ChatFormatError:
            if need_chat:
                raise
            chat = None
    return LoadedModel(model, tokenizer, chat)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument("--prompt", required=True, help="prompt text (special tokens like <|im_start|> are parsed)")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt as one user turn of the model's chat format")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help=f"tokens to generate at most (default {DEFAULT_MAX_TOKENS})")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help=f"0 = greedy (default {DEFAULT_TEMPERATURE})")
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help=f"0 disables (default {DEFAULT_TOP_K})")
    parser.add_argument("--top-p", type=float, default=DEFAULT_TOP_P, help=f"1 disables (default {DEFAULT_TOP_P})")
    parser.add_argument("--min-p", type=float, default=DEFAULT_MIN_P, help=f"0 disables (default {DEFAULT_MIN_P})")
    parser.add_argument("--repeat-penalty", type=float, default=DEFAULT_REPEAT_PENALTY, help="1 disables (default 1.0)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: unpredictable)")
    parser.add_argument("--stop", action="append", default=[], metavar="STR", help="stop string (repeatable)")
    parser.add_argument("--truncate", action="store_true", help="drop the oldest prompt tokens when prompt + max tokens exceed the context")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    add_engine_arguments(parser)
    # speculative decoding (reference/decode.py, reference/drafts.py, reference/evidence.py)
    parser.add_argument("--draft", default=None, metavar="SPEC", help="speculative decoding with draft source ngram | layerskip:M | model:PATH | self")
    parser.add_argument("--k", type=int, default=4, help="draft tokens per cycle (the maximum with --adaptive; default 4)")
    parser.add_argument("--adaptive", action="store_true", help="adapt k each cycle (down to plain steps when drafting does not pay)")
    parser.add_argument("--p-min", type=float, default=0.0, help="stop drafting when the draft's top probability is below this (default 0)")
    parser.add_argument("--trace", action="store_true", help="per-cycle speculative trace (stderr, or in --json)")
    # certified early exit (reference/early_exit.py; run by verispec/commands/generate_early_exit.py)
    parser.add_argument("--early-exit", default=None, metavar="CAL.json", help="greedy decoding with certified early exit, calibrated by `verispec calibrate` (needs --temperature 0)")
    parser.add_argument("--audit", action="store_true", help="with --early-exit: also run every layer and count served tokens that differ from the full model's")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--engine fast|reference, --weights f32|quantized|int8, --backend (every command that runs a model)."""
    parser.add_argument("--engine", choices=ENGINES, default="fast", help="fast (NumPy+BLAS engine, default) or reference (readable, slow)")
    parser.add_argument("--weights", choices=WEIGHT_MODES, default="f32", help="f32: dequantize once (fast, the reference's function); quantized: keep GGUF blocks, dequantize per layer (low memory, slow); int8: GGUF blocks with int8 activations (onnxruntime, llama.cpp-class numerics, its own law); fast engine only")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto", help="the f32 weights' matmul kernel: auto (ort when installed, else numpy), numpy, ort (onnxruntime MLAS)")


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("generate", help="generate text from a prompt")
    add_arguments(parser)
    parser.set_defaults(func=run)


def build_request(args: argparse.Namespace, loaded: "LoadedModel | EngineLoaded") -> GenerationRequest:
    """The flags as a request (sampling parameters validated: one-line SamplingError if bad)."""
    params = SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
    )
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


def run(args: argparse.Namespace) -> int:
    if getattr(args, "early_exit", None) is not None:
        from verispec.commands.generate_early_exit import run_early_exit

        return run_early_exit(args)
    if getattr(args, "draft", None) is not None:
        from verispec.commands.speculative import run_speculative

        return run_speculative(args)
    loaded = load_engine(args.model, need_chat=args.chat, engine=args.engine, weights=args.weights, backend=args.backend)
    request = build_request(args, loaded)
    if args.json:
        result = generate(loaded.model, loaded.tokenizer, request)
        print(json.dumps(result_json(result), ensure_ascii=False))
        return 0

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    result = generate(loaded.model, loaded.tokenizer, request, on_text=stream)
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(stats_line(result), file=sys.stderr)
    return 0
