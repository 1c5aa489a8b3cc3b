"""`verispec demo`: plain, speculative and llama.cpp plain decoding of one prompt, side by side,
measured in ONE run on the same prompt ids and the SAME number of generated tokens.

What ``make demo`` runs. The engine runs in the default weights mode (auto: the int8 mode where
onnxruntime is installed, :mod:`verispec.engine_load`). Plain greedy decoding goes first and sets
the length ``n`` (it ends at the chat's end of turn or ``--max-tokens``); speculative decoding of the
same request, with the default draft of ``generate --draft`` (:data:`DEFAULT_DRAFT`: auto, every
lookup proposer merged into one token tree per cycle, kept by measured acceptance; a fresh draft
each round, so no round learns from another's output), is lossless, so it emits the same ``n``
tokens (checked, and printed); llama.cpp
(when llama-cpp-python is installed; in a child process, so a crash of its native code is its
row of the table, verispec/bench/peer.py) starts from the engine's prompt ids and decodes exactly
``n`` tokens greedily, its end of generation ignored (the length is cut to the engine's). The three
run interleaved, ``--repeats`` rounds, and each keeps its best (least-time) run. Rates are
generated tokens over wall time, the prompt pass included, on every side.

The default prompt is the workload's first summarisation request (:data:`DEMO_REQUEST` of
verispec/data/workload.jsonl: a report to summarise in one paragraph), grounded work where drafts
copied from the prompt are what speculation is used for; the output says what the prompt is.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from verispec.bench import llama
from verispec.bench.llama_section import engine_threads
from verispec.commands.request import add_engine_arguments, build_request
from verispec.commands.speculative import draft_boundaries
from verispec.commands.validate import check_generate
from verispec.engine.generate import draw_for, generate_any, law_for
from verispec.engine.model import FastModel
from verispec.engine_load import EngineLoaded, head_kernel_of, layer_kernel_of, load_engine, weights_mode_of
from verispec.exit_codes import EXIT_FAILED, EXIT_PASSED
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import DEFAULT_DRAFT, check_options, make_draft, parse_draft_spec
from verispec.reference.errors import DraftError, PeerFailed
from verispec.reference.generate import GenerationRequest, GenerationResult
from verispec.registry import DEFAULT_MODEL, resolve_model

DEMO_REQUEST = "summarisation-1"  # the workload's first summarisation request: grounded work, where speculation is used
LAWS = {
    "int8": "int8 mode, lossless w.r.t. the int8 model's own law (speculation never changes its output; --exact: the float32 mode)",
    "f32": "exact mode, the reference's float32 numerics (checked against transformers float32)",
    "quantized": "exact mode from the GGUF blocks, the reference's float32 numerics",
}


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("demo", help="plain, speculative and llama.cpp decoding of one prompt, side by side")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument(
        "--prompt",
        default=None,
        help=f"the prompt (one user turn of the chat format unless --no-chat; default the workload's "
        f"{DEMO_REQUEST} request: summarise a given report in one paragraph)",
    )
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens to generate at most (default 96)")
    parser.add_argument(
        "--draft",
        default=DEFAULT_DRAFT,
        metavar="SPEC",
        help=f"the speculative draft source (default {DEFAULT_DRAFT}, generate --draft's: every lookup proposer, "
        "kept by measured acceptance; or ngram | suffix | suffix:tree | layerskip:M | model:PATH | self)",
    )
    parser.add_argument(
        "--k",
        type=int,
        default=8,
        help="draft tokens per cycle at most (a token tree's depth; a chain's k, adaptive; default 8)",
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="interleaved rounds, best run of each side kept (default 2)"
    )
    parser.add_argument("--no-chat", dest="chat", action="store_false", help="the prompt as it is, not a chat turn")
    parser.add_argument("--no-llama", action="store_true", help="leave llama.cpp out")
    add_engine_arguments(parser)
    parser.set_defaults(
        func=run,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        repeat_penalty=1.0,
        seed=0,
        stop=[],
        truncate=False,
        json=False,
        draft_cache=None,
        early_exit=None,
        p_min=0.0,
    )


def run(args: argparse.Namespace) -> int:
    described = describe_prompt(args)  # the default prompt filled in from the workload
    check_generate(args)  # the shared flag checks, before any model loads
    if args.repeats < 1:
        raise DraftError(f"--repeats must be at least 1, got {args.repeats}")
    spec = parse_draft_spec(args.draft)
    check_options(args.k, 0.0)
    loaded = load_engine(
        args.model,
        need_chat=args.chat,
        engine=args.engine,
        weights=args.weights,
        backend=args.backend,
        pass_boundaries=draft_boundaries(spec),
    )
    request = build_request(args, loaded)
    mode = weights_mode_of(loaded.model)
    head = ""  # the int8 law depends on its head's kernel (engine/tile_head.py): named
    if isinstance(loaded.model, FastModel) and head_kernel_of(loaded.model) is not None:
        head = f"; head kernel {loaded.model.store.head_kernel}"
    layers = ""  # and on its layers' kernel (engine/tile_layers.py): named
    if isinstance(loaded.model, FastModel) and layer_kernel_of(loaded.model) is not None:
        layers = f"; layer kernel {loaded.model.store.layer_kernel}"
    print(f"{args.model} ({loaded.model.config.arch}) in the {LAWS.get(mode, mode)}{head}{layers}")
    print(f"prompt: {described}, {len(request.prompt_ids)} prompt tokens")
    first = generate_any(loaded.model, loaded.tokenizer, request)
    sys.stdout.write(first.text + "\n")
    n = first.stats.generated_tokens
    rows = _measure(args, loaded, request, n, first)
    for line in table(rows, n, args.repeats):
        print(line)
    if not all(row.get("same_tokens", True) for row in rows):
        # greedy speculation that changes a token is a broken decoder, not a slow one: say so and fail
        print("error: speculative decoding gave other tokens than plain decoding (not lossless)", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_PASSED


def describe_prompt(args: argparse.Namespace) -> str:
    """Fill in the default prompt (the workload's :data:`DEMO_REQUEST`, its last user turn) and say
    what the prompt is, for the demo's output."""
    if args.prompt is not None:
        return "the --prompt text"
    from verispec.workload import load_workload

    item = next(i for i in load_workload() if i.id == DEMO_REQUEST)
    args.prompt = item.messages[-1].content
    first_line = args.prompt.splitlines()[0]
    return (
        f"a {item.category} request (verispec/data/workload.jsonl {item.id}: {first_line!r} and a "
        f"{len(args.prompt.split())}-word report to summarise)"
    )


def _measure(
    args: argparse.Namespace,
    loaded: EngineLoaded,
    request: GenerationRequest,
    n: int,
    first: GenerationResult,
) -> list[dict[str, Any]]:
    """The three sides, interleaved ``args.repeats`` rounds, each side's best run; the speculative
    row's ``same_tokens`` holds for every round, not only the best one."""
    peer, peer_failure = _open_llama(args, request, n)
    best: dict[str, dict[str, Any]] = {}
    every_round_same = True
    spec_options = SpeculativeOptions(k=args.k, adaptive=True)
    try:
        for _ in range(args.repeats):
            plain = generate_any(loaded.model, loaded.tokenizer, request)
            _keep(best, "plain", {"tok_s": plain.stats.tokens_per_s, "tokens": plain.stats.generated_tokens})
            draft = make_draft(parse_draft_spec(args.draft), loaded.model, loaded.tokenizer)
            spec = speculative_generate(
                loaded.model,
                loaded.tokenizer,
                request,
                draft,
                spec_options,
                law=law_for(loaded.model),
                draw=draw_for(loaded.model),
            )
            ids = spec.generation.ids
            every_round_same = every_round_same and list(ids) == list(first.ids)
            _keep(best, "speculative", {"tok_s": spec.generation.stats.tokens_per_s, "tokens": len(ids)})
            if peer is not None:
                try:
                    run = peer.run("plain", request.prompt_ids, n, frozenset())
                    _keep(
                        best,
                        "llama",
                        {
                            "tok_s": float(run["tok_s"]),
                            "tokens": len(run["tokens"]),
                            "same": llama.common_prefix(first.ids, run["tokens"]),
                        },
                    )
                except PeerFailed as failure:
                    peer_failure, peer = failure, None
    finally:
        if peer is not None:
            peer.close()
    speculative = {"name": f"speculative {args.draft}", **best["speculative"], "same_tokens": every_round_same}
    rows = [{"name": "plain", **best["plain"]}, speculative]
    if not args.no_llama:
        rows.append({"name": "llama.cpp plain", **best.get("llama", {}), "note": _llama_note(peer_failure, best)})
    return rows


def _open_llama(
    args: argparse.Namespace, request: GenerationRequest, n: int
) -> tuple["llama.Decoders | None", PeerFailed | None]:
    if args.no_llama or not llama.available():
        return None, None
    try:
        return llama.open_child(
            resolve_model(args.model), len(request.prompt_ids) + n + args.k + 8, args.k, engine_threads(), 0
        ), None
    except PeerFailed as failure:
        return None, failure


def _llama_note(failure: PeerFailed | None, best: dict[str, dict[str, Any]]) -> str:
    if failure is not None:
        return str(failure)
    if "llama" not in best:
        return llama.NOT_INSTALLED
    same = best["llama"]["same"]
    return (
        f"its end of generation ignored, cut to our length; its first {same['compared']} tokens share "
        f"{same['same_leading_tokens']} with ours (two numerics: they part at near-ties)"
    )


def _keep(best: dict[str, dict[str, Any]], side: str, run: dict[str, Any]) -> None:
    if side not in best or run["tok_s"] > best[side]["tok_s"]:
        best[side] = run


def table(rows: list[dict[str, Any]], n: int, repeats: int) -> list[str]:
    """The side-by-side lines: tok/s and the ratio to our plain decoding, per side."""
    plain = float(rows[0]["tok_s"]) or 1.0
    lines = [
        f"{n} tokens on every side, from the same prompt ids, best of {repeats} interleaved rounds "
        "(generated tokens / wall time, prompt pass included):"
    ]
    for row in rows:
        if "tok_s" not in row:
            lines.append(f"  {row['name']:<22} {'-':>7}          {row.get('note', '')}")
            continue
        extra = row.get("note", "")
        if "same_tokens" in row:
            extra = f"same tokens as plain: {row['same_tokens']}"
        lines.append(f"  {row['name']:<22} {row['tok_s']:7.1f} tok/s  {row['tok_s'] / plain:5.2f}x   {extra}".rstrip())
    return lines
