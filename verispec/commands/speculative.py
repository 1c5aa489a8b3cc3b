"""`verispec generate --draft ...`: the speculative path of the generate command.

Kept out of generate.py so that file stays thin: :func:`run_speculative` checks the draft options
(one-line DraftError before any model is dequantized: the flags, then the layer range and the draft
vocabulary from the metadata of the target file it then loads, opened once), runs plain decoding
and speculative decoding of the same request on the engine the flags chose, with that engine's
plain loop and law (:func:`reference.evidence.measure`, as ``verispec bench`` does), and prints the
text (streamed) with the evidence on stderr, or one JSON object with a ``"speculative"`` field.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from verispec.commands.request import build_request, result_json, stats_line, stream
from verispec.engine.generate import draw_for, generate_any, law_for
from verispec.engine_load import head_stats_of, load_engine
from verispec.reference.config import Config
from verispec.reference.decode import SpeculativeOptions
from verispec.reference.draft_choice import AutoDraft
from verispec.reference.drafts import (
    CACHED_KINDS,
    DraftSpec,
    check_exit_layer,
    check_options,
    check_same_vocab,
    make_draft,
    parse_draft_spec,
)
from verispec.reference.errors import DraftError
from verispec.reference.evidence import Evidence, measure
from verispec.reference.gguf import GGUFFile
from verispec.reference.suffix_draft import SuffixDraft
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model


def draft_options(args: argparse.Namespace) -> tuple[DraftSpec, SpeculativeOptions]:
    """The draft flags parsed and checked (DraftError), before any file is opened."""
    spec = parse_draft_spec(args.draft)
    check_options(args.k, args.p_min)
    if getattr(args, "draft_cache", None) is not None and spec.kind not in CACHED_KINDS:
        raise DraftError(f"--draft-cache is for --draft suffix, suffix:tree or auto, not {spec}")
    if getattr(args, "draft_cache", None) is not None:
        from verispec.reference.suffix_draft import SuffixCache

        SuffixCache.check_writable(Path(args.draft_cache))  # before the model loads
    return spec, SpeculativeOptions(k=args.k, adaptive=args.adaptive, p_min=args.p_min)


def check_draft(spec: DraftSpec, target: GGUFFile) -> None:
    """The draft checked against the target's metadata (layer range, vocabulary), no weights read.

    ``target`` is the target model's open file (the one its weights are then loaded from).
    """
    if spec.kind == "layerskip":
        check_exit_layer(spec.layer, Config.from_gguf(target).n_layer)
    elif spec.kind == "model":
        try:
            with GGUFFile.open(spec.path) as f:
                draft_tokenizer = Tokenizer.from_gguf(f.metadata)
        except OSError as exc:
            raise DraftError(f"draft model {spec.path!r} cannot be read: {exc.strerror}") from None
        check_same_vocab(Tokenizer.from_gguf(target.metadata), draft_tokenizer, spec.path)


def draft_boundaries(spec: DraftSpec) -> tuple[int, ...]:
    """The depths where the draft's passes over the target start and stop (a layer-skip draft: its
    exit layer; the target's loader cuts its layer chain there), none for the other drafts."""
    return (spec.layer,) if spec.kind == "layerskip" else ()


def evidence_lines(ev: Evidence) -> list[str]:
    """The evidence as short human-readable lines (stderr)."""
    pos = ", ".join(f"{a:.2f}" for a in ev.per_position_acceptance)
    lines = [
        f"[speculative {ev.draft} ({ev.mode}), k={ev.k}{' adaptive' if ev.adaptive else ''}"
        f"{f', p-min {ev.p_min}' if ev.p_min else ''}: {ev.drafted} drafted, {ev.accepted} accepted "
        f"(alpha {ev.acceptance_rate:.3f}; per position [{pos}]), {ev.tokens_per_pass:.2f} tokens per target pass, "
        f"{ev.target_passes} target passes, {ev.draft_passes} draft passes]",
    ]
    if ev.tree_shape is not None:
        t = ev.tree_shape
        lines.append(
            f"[token trees per drafting cycle: {t['nodes']:.1f} nodes, depth {t['depth']:.1f}, "
            f"width {t['width']:.1f} (max {t['max_width']:.0f}); one target pass each]"
        )
    if ev.plain_tokens_per_s is not None:
        c = "n/a" if ev.draft_cost_ratio is None else f"{ev.draft_cost_ratio:.3f}"
        predicted = "n/a" if ev.predicted_speedup is None else f"{ev.predicted_speedup:.2f}x"
        lines.append(
            f"[plain {ev.plain_tokens_per_s:.2f} tokens/s, speculative {ev.tokens_per_s:.2f} tokens/s: "
            f"measured speedup {ev.measured_speedup or 0:.2f}x; predicted {predicted} from alpha and c = {c}"
            + (
                ""
                if ev.verify_cost_ratio is None
                else f" (a verification pass costs {ev.verify_cost_ratio:.2f} plain passes)"
            )
            + ("" if ev.matches_plain is None else f"; same tokens as plain: {ev.matches_plain}")
            + "]"
        )
    return lines


def _finish(draft: object, output: "tuple[int, ...]") -> None:
    """A suffix draft remembers the output in its cross-request cache (and persists it)."""
    if isinstance(draft, (SuffixDraft, AutoDraft)):
        draft.finish(output)


def run_speculative(args: argparse.Namespace) -> int:
    spec, options = draft_options(args)
    with GGUFFile.open(resolve_model(args.model)) as target:  # opened once: checked, then loaded
        check_draft(spec, target)
        loaded = load_engine(
            target,
            need_chat=args.chat,
            engine=args.engine,
            weights=args.weights,
            backend=args.backend,
            pass_boundaries=draft_boundaries(spec),
            head=getattr(args, "head", "full"),
        )
    request = build_request(args, loaded)
    # model: the vocabulary was checked above, from metadata (None: make_draft does not redo it)
    cache_path = Path(args.draft_cache) if getattr(args, "draft_cache", None) else None
    draft = make_draft(spec, loaded.model, None if spec.kind == "model" else loaded.tokenizer, cache_path=cache_path)
    plain = partial(generate_any, loaded.model, loaded.tokenizer)  # the chosen engine's plain loop
    law, draw = law_for(loaded.model), draw_for(loaded.model)  # and its (bit-identical) law and draw
    if args.json:
        result, ev = measure(
            loaded.model, loaded.tokenizer, request, draft, options, trace=args.trace, plain=plain, law=law, draw=draw
        )
        _finish(draft, result.generation.ids)
        out = result_json(result.generation)
        out["speculative"] = ev.as_dict()
        head = head_stats_of(loaded.model)
        if head is not None:
            out["head"] = head
        print(json.dumps(out, ensure_ascii=False))
        return 0
    result, ev = measure(
        loaded.model,
        loaded.tokenizer,
        request,
        draft,
        options,
        trace=args.trace,
        on_text=stream,
        plain=plain,
        law=law,
        draw=draw,
    )
    _finish(draft, result.generation.ids)
    sys.stdout.write("\n")
    sys.stdout.flush()
    if args.trace:
        for i, cycle in enumerate(ev.trace or []):
            print(f"[cycle {i}] {json.dumps(cycle)}", file=sys.stderr)
    print(stats_line(result.generation), file=sys.stderr)
    for line in evidence_lines(ev):
        print(line, file=sys.stderr)
    return 0
