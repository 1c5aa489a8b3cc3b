"""`verispec calibrate`: calibrate certified early exit for a model, write the artifact.

    verispec calibrate --model M [--prompts hand|generated|FILE] [--kinds rule|declared]
                       [--prompts-per-kind N] [--lens-prompts-per-kind 8] [--seed S]
                       [--q 0.9] [--layers 8,12,16,20,24]
                       [--residual halfrange|supnorm] [--gate margin|residual] [--no-lens]
                       [--tokens-per-prompt 16] [--engine fast|reference] --out CAL.json
                       [--report FILE.png] [--json]

Prompts (``--prompts``): by default ``hand``, the hand-written calibration pool
(verispec/data/prompts_calibration.jsonl, at least 53 per kind; all of it, or its first
``--prompts-per-kind`` of each kind), with ``--lens-prompts-per-kind`` seeded generated prompts per
kind for the tuned lens (disjoint from the pool and from the held-out prompts); ``generated``, the
seeded generator (:mod:`verispec.calibration_prompts`), ``--prompts-per-kind`` (default 60) per kind
for calibration and, disjoint from them, ``--lens-prompts-per-kind`` per kind for the lens; or a
JSON-lines FILE (the lens then takes every other prompt of each kind). The guarantee covers prompts
drawn like the calibration prompts: the hand-written pool is the default because the generator's
templates did not cover hand-written prompts (docs/early-exit.md). Kinds come from the rule :func:`reference.prompt_kind.prompt_kind` (what ``generate`` uses
by default), or from the file's ``kind`` field with ``--kinds declared`` (then serve with
``generate --kind``). The full model decodes each prompt greedily (``--tokens-per-prompt`` steps)
and each kind gets its own thresholds (:mod:`reference.calibration`), with the claim "expected
flip fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable"; a kind with
too few prompts for α over K depths admits nothing (the summary says so). Calibrate on the engine
you serve with (``--engine``, default fast, as for ``verispec generate``): the two engines round
differently in the last bits. The artifact records the weights mode it was calibrated on
(``--weights``, default auto: int8 where onnxruntime is installed); ``generate --early-exit``
serves on that mode and refuses a mode of other numerics (int8 vs exact). Every argument and the output folder are checked before the model
loads. Progress goes to stderr; a summary per kind and depth to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from verispec.calibration_prompts import DEFAULT_SEED, generate_mix
from verispec.commands.request import add_engine_arguments
from verispec.engine_load import head_kernel_of, layer_kernel_of, load_engine, weights_mode_of
from verispec.reference.calibration import Calibration, Prompt, Records, calibrate, check_output_path, file_sha256
from verispec.reference.certificate import residual_admits
from verispec.reference.chat import ChatFormat
from verispec.reference.conformal import exact_level
from verispec.reference.early_exit import GateKind
from verispec.reference.errors import CalibrationError
from verispec.reference.generate import encode_prompt
from verispec.reference.json_input import field, loads, read_regular
from verispec.reference.prompt_kind import PROMPT_KINDS, prompt_kind
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import DEFAULT_MODEL, resolve_model

DATA = Path(__file__).resolve().parent.parent / "data"
HELDOUT_PROMPTS = DATA / "prompts_heldout.jsonl"
# hand-written calibration pool (>= 49 per kind: alpha = 0.1 over 5 depths), disjoint from the
# held-out prompts and from the generator (tests/test_calibration_prompts.py)
CALIBRATION_PROMPTS = DATA / "prompts_calibration.jsonl"
PROMPTS_FILE_BYTES = 16 * 1024 * 1024  # a prompt file is text, checked before reading


def read_prompts(path: Path) -> list[tuple[str, str]]:
    """(declared kind, text) per line of a JSON-lines prompt file ({"kind": ..., "text": ...})."""
    data = read_regular(path, "prompts", max_bytes=PROMPTS_FILE_BYTES, error=CalibrationError)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CalibrationError(f"cannot read prompts {str(path)!r}: not UTF-8") from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{str(path)!r} line {number}"
        item = loads(line, where, error=CalibrationError)
        kind = field(item, "kind", str, where, error=CalibrationError)
        text = field(item, "text", str, where, error=CalibrationError)
        out.append((kind, text))
    if not out:
        raise CalibrationError(f"{str(path)!r} holds no prompts")
    return out


def encode_prompts(tokenizer: Tokenizer, chat: ChatFormat | None, prompts: list[tuple[str, str]]) -> list[Prompt]:
    """Token ids per prompt; kind "chat" is wrapped in the model's chat format when it has one."""
    return [(kind, encode_prompt(tokenizer, text, chat=chat if kind == "chat" else None)) for kind, text in prompts]


def chat_stop_ids(tokenizer: Tokenizer, chat: ChatFormat | None) -> frozenset[int]:
    ids = set(tokenizer.eog_ids)
    if chat is not None:
        end = tokenizer.token_id(chat.end_of_turn)
        if end is not None:
            ids.add(end)
    return frozenset(ids)


class Progress:
    """A one-line progress bar on stderr: [#####.....] done/total tokens, tokens/s."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total, self.label, self.done, self.enabled = total, label, 0, enabled
        self.started = time.perf_counter()

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = min(width, width * self.done // max(1, self.total))
        rate = self.done / max(1e-9, time.perf_counter() - self.started)
        sys.stderr.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} tokens, {rate:.1f}/s"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("calibrate", help="calibrate certified early exit (writes CAL.json)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument(
        "--prompts",
        default="hand",
        help="calibration prompts: hand (the hand-written pool, default), generated (the seeded generator), or a JSON-lines FILE of {kind, text}",
    )
    parser.add_argument(
        "--kinds",
        choices=("rule", "declared"),
        default="rule",
        help="prompt kinds from reference/prompt_kind.py's rule (default) or the file's kind field",
    )
    parser.add_argument(
        "--prompts-per-kind",
        type=int,
        default=None,
        help="calibration prompts per kind (default: the whole hand-written pool; 60 generated)",
    )
    parser.add_argument(
        "--lens-prompts-per-kind",
        type=int,
        default=8,
        help="generated lens prompts per kind, disjoint from calibration (default 8)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"prompt generator seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--q", default="0.9", help="alpha = 1 - q: bound on the expected flip fraction of a new prompt (default 0.9)"
    )
    parser.add_argument(
        "--layers", default=None, help="candidate exit depths, comma-separated (default: 4/15..12/15 of the model)"
    )
    parser.add_argument(
        "--residual",
        choices=("halfrange", "supnorm"),
        default="halfrange",
        help="residual score of the residual gate (default halfrange)",
    )
    parser.add_argument(
        "--gate",
        choices=("margin", "residual"),
        default="margin",
        help="default gate written to the artifact (default margin)",
    )
    parser.add_argument(
        "--no-lens", action="store_true", help="use the model's own head at every depth (no tuned lens)"
    )
    parser.add_argument(
        "--ridge", type=float, default=1e-2, help="tuned-lens ridge penalty, relative to tr(X^T X)/D (default 0.01)"
    )
    parser.add_argument("--tokens-per-prompt", type=int, default=16, help="greedy steps per prompt (default 16)")
    parser.add_argument("--max-prompts", type=int, default=None, help="with --prompts: use only the first N prompts")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="artifact path (CAL.json; the lens goes beside it as CAL.lens.<sha>.npz)",
    )
    parser.add_argument(
        "--report", type=Path, default=None, help="write a PNG of per-depth agreement, admission and scores"
    )
    parser.add_argument("--json", action="store_true", help="print the artifact as JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CalibrationError(f"--layers {text!r} is not a comma-separated list of integers") from None


def check_arguments(args: argparse.Namespace) -> None:
    """Every argument that can be wrong, before the model loads (CalibrationError, one line)."""
    for name in ("tokens_per_prompt", "prompts_per_kind"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CalibrationError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.lens_prompts_per_kind < (0 if args.no_lens else 1):
        raise CalibrationError(f"--lens-prompts-per-kind must be >= 1 with a lens, got {args.lens_prompts_per_kind}")
    if args.max_prompts is not None and args.max_prompts < 1:
        raise CalibrationError(f"--max-prompts must be >= 1, got {args.max_prompts}")
    if not args.ridge > 0:
        raise CalibrationError(f"--ridge must be > 0, got {args.ridge}")
    exact_level(args.q, "--q")
    parse_layers(args.layers)
    check_output_path(args.out)
    if args.report is not None and not args.report.parent.is_dir():
        raise CalibrationError(
            f"cannot write the report {str(args.report)!r}: folder {str(args.report.parent)!r} does not exist"
        )
    if args.report is not None:
        from verispec.atomic import OutputError, output_file

        try:
            output_file(args.report)
        except OutputError as exc:
            raise CalibrationError(str(exc)) from None


def hand_written_pool(per_kind: int | None = None) -> list[tuple[str, str]]:
    """(kind by the rule, text) of the hand-written calibration pool: all of it, or the first
    ``per_kind`` prompts of each kind (the pool's declared kinds are the rule's, tested)."""
    pool = [(prompt_kind(text), text) for _, text in read_prompts(CALIBRATION_PROMPTS)]
    if per_kind is None:
        return pool
    return [item for kind in PROMPT_KINDS for item in [p for p in pool if p[0] == kind][:per_kind]]


def chosen_prompts(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]] | None]:
    """(calibration prompts, lens prompts or None = split the calibration prompts), as (kind, text)."""
    lens = generate_mix(args.lens_prompts_per_kind, args.seed) if not args.no_lens else None
    if args.prompts == "generated":
        per_kind = 60 if args.prompts_per_kind is None else args.prompts_per_kind
        return generate_mix(per_kind, args.seed, skip=args.lens_prompts_per_kind), lens
    if args.prompts == "hand":
        return hand_written_pool(args.prompts_per_kind), lens  # lens prompts: generated, disjoint
    prompts = read_prompts(Path(args.prompts))[: args.max_prompts]
    if args.kinds == "rule":
        prompts = [(prompt_kind(text), text) for _, text in prompts]
    return prompts, None


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    cal_text, lens_text = chosen_prompts(args)
    path = resolve_model(args.model)
    loaded = load_engine(str(path), engine=args.engine, weights=args.weights, backend=args.backend)
    encoded = encode_prompts(loaded.tokenizer, loaded.chat, cal_text)
    lens_prompts = None if lens_text is None else encode_prompts(loaded.tokenizer, loaded.chat, lens_text)
    gate: GateKind = "margin" if args.gate == "margin" else args.residual
    total = (len(encoded) + len(lens_prompts or [])) * args.tokens_per_prompt
    progress = Progress(total, "calibrate", enabled=not args.quiet)
    cal, records = calibrate(
        loaded.model,
        encoded,
        model_sha256=file_sha256(path),
        model_name=path.name,
        depths=parse_layers(args.layers),
        q=args.q,
        n_steps=args.tokens_per_prompt,
        use_lens=not args.no_lens,
        lens_prompts=lens_prompts,
        ridge=args.ridge,
        gate=gate,
        residual=args.residual,
        kind_rule=args.kinds if args.prompts != "generated" else "rule",
        stop_ids=chat_stop_ids(loaded.tokenizer, loaded.chat),
        on_step=progress.step,
        weights=weights_mode_of(loaded.model),  # the artifact serves this mode's numerics only
        head_kernel=head_kernel_of(loaded.model),
        layer_kernel=layer_kernel_of(loaded.model),
    )
    progress.close()
    cal.save(args.out)
    if args.report is not None:
        write_report(cal, records, args.report)
    if args.json:
        print(json.dumps(cal.to_json(None, None), indent=2))
    else:
        print(summary(cal, records))
    return 0


def admitted_fractions(cal: Calibration, records: Records) -> dict[str, list[float]]:
    """Per gate, per depth: the fraction of calibration steps that depth's gate admits (each step
    under its own kind's thresholds)."""
    out: dict[str, list[float]] = {"margin": [], "supnorm": [], "halfrange": []}
    views = {kind: cal.for_kind(kind) for kind in set(records.kinds)}
    for i, depth in enumerate(cal.candidate_depths):
        counts = {"margin": 0, "supnorm": 0, "halfrange": 0}
        for step, kind in enumerate(records.kinds):
            at = views[kind].at(depth)
            margin = float(records.margins[i, step])
            counts["margin"] += int(margin > at.margin_threshold)
            for residual in ("supnorm", "halfrange"):
                q = at.supnorm_quantile if residual == "supnorm" else at.halfrange_quantile
                counts[residual] += int(residual_admits(residual, margin, q))
        for name, count in counts.items():
            out[name].append(count / max(1, records.n))
    return out


def summary(cal: Calibration, records: Records) -> str:
    admitted = admitted_fractions(cal, records)
    lines = [
        f"{cal.model_name}: {cal.n_prompts} calibration prompts, n = {cal.n} steps (+{cal.n_lens} lens steps), "
        f"q = {cal.q}, alpha = {cal.alpha}, alpha/K = {cal.alpha_per_depth} per depth",
        f"claim, per kind: {cal.claim} (α = {cal.alpha})",
    ]
    for kind, kc in sorted(cal.kinds.items()):
        status = cal.for_kind(kind).refusal or "admits"
        lines.append(
            f"  kind {kind:11s} {kc.n_prompts:4d} prompts, {kc.n:5d} steps (needs >= {kc.min_prompts} prompts): {status}"
        )
    lines.append("depth  agree  median margin  lambda margin per kind  admitted: margin supnorm halfrange")
    for i, d in enumerate(cal.depths):
        per_kind = " ".join(f"{k}:{kc.depths[i].margin_threshold:.2f}" for k, kc in sorted(cal.kinds.items()))
        lines.append(
            f"{d.depth:5d}  {d.agreement:5.1%}  {float(np.median(records.margins[i])):13.2f}  {per_kind}  "
            f"{admitted['margin'][i]:7.1%} {admitted['supnorm'][i]:7.1%} {admitted['halfrange'][i]:9.1%}"
        )
    return "\n".join(lines)


def save_png(fig: Any, path: Path) -> None:
    """``fig`` as a PNG at ``path`` through the one safe writer (atomic; never onto a FIFO or device)."""
    from verispec.atomic import replace_file

    with replace_file(path) as fh:
        fig.savefig(fh, dpi=100, format="png")


def write_report(cal: Calibration, records: Records, path: Path) -> None:
    """A two-panel PNG: agreement / admitted fraction per depth; residual quantiles vs margins."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depths = [d.depth for d in cal.depths]
    admitted = admitted_fractions(cal, records)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(depths, [d.agreement for d in cal.depths], "o-", label="exit top-1 == full argmax")
    for gate, values in admitted.items():
        left.plot(depths, values, "s--", label=f"admitted ({gate})")
    left.set_xlabel("exit depth")
    left.set_ylim(0, 1)
    left.legend(fontsize=8)
    left.set_title(f"{cal.model_name}, q = {cal.q}")
    right.boxplot([records.margins[i] for i in range(len(depths))], positions=depths, widths=1.0)
    right.plot(depths, [2 * d.halfrange_quantile for d in cal.depths], "r^-", label="2 Q halfrange")
    right.plot(depths, [2 * d.supnorm_quantile for d in cal.depths], "mv-", label="2 Q supnorm")
    right.set_yscale("symlog")
    right.set_xlabel("exit depth")
    right.set_ylabel("logits")
    right.set_title("exit margins (boxes) vs residual gate bars")
    right.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
