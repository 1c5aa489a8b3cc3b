"""`verispec calibrate`: calibrate certified early exit for a model, write the artifact.

    verispec calibrate --model M [--prompts FILE] [--q 0.99] [--layers 8,12,16,20,24]
                       [--residual halfrange|supnorm] [--gate margin|residual] [--no-lens]
                       [--tokens-per-prompt 48] [--engine fast|reference] --out CAL.json
                       [--report FILE.png] [--json]

The full model decodes each prompt greedily (``--tokens-per-prompt`` steps); the tuned lens (unless
``--no-lens``) is fit on every other prompt of each kind and the quantiles / thresholds on the
others (:mod:`reference.calibration`). Calibrate on the engine you serve with (``--engine``,
default fast, as for ``verispec generate``): the two engines round differently in the last bits. Progress goes to stderr; a summary per depth to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from reference.calibration import Calibration, Prompt, Records, calibrate, file_sha256
from reference.certificate import residual_admits
from reference.chat import ChatFormat
from reference.early_exit import GateKind
from reference.errors import CalibrationError
from reference.generate import encode_prompt
from reference.tokenizer import Tokenizer
from verispec.commands.request import add_engine_arguments
from verispec.engine_load import load_engine
from verispec.registry import DEFAULT_MODEL, resolve_model

DATA = Path(__file__).resolve().parent.parent / "data"
CALIBRATION_PROMPTS = DATA / "prompts_calibration.jsonl"
HELDOUT_PROMPTS = DATA / "prompts_heldout.jsonl"


def read_prompts(path: Path) -> list[tuple[str, str]]:
    """(kind, text) per line of a JSON-lines prompt file ({"kind": ..., "text": ...})."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CalibrationError(f"cannot read prompts {str(path)!r}: {exc}") from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            kind, text = str(item["kind"]), str(item["text"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CalibrationError(f"{str(path)!r} line {number} is not {{\"kind\", \"text\"}} JSON: {exc!r}") from None
        out.append((kind, text))
    if not out:
        raise CalibrationError(f"{str(path)!r} holds no prompts")
    return out


def encode_prompts(tokenizer: Tokenizer, chat: ChatFormat | None, prompts: list[tuple[str, str]]) -> list[Prompt]:
    """Token ids per prompt; kind "chat" is wrapped in the model's chat format when it has one."""
    return [
        (kind, encode_prompt(tokenizer, text, chat=chat if kind == "chat" else None)) for kind, text in prompts
    ]


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
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} tokens, {rate:.1f}/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("calibrate", help="calibrate certified early exit (writes CAL.json)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"registry name or .gguf path (default {DEFAULT_MODEL})")
    parser.add_argument("--prompts", type=Path, default=CALIBRATION_PROMPTS, help="JSON-lines prompts {kind, text} (default: the built-in calibration mix)")
    parser.add_argument("--q", default="0.99", help="target: P(served token != full argmax) <= 1 - q (default 0.99)")
    parser.add_argument("--layers", default=None, help="candidate exit depths, comma-separated (default: 4/15..12/15 of the model)")
    parser.add_argument("--residual", choices=("halfrange", "supnorm"), default="halfrange", help="residual score of the residual gate (default halfrange)")
    parser.add_argument("--gate", choices=("margin", "residual"), default="margin", help="default gate written to the artifact (default margin)")
    parser.add_argument("--no-lens", action="store_true", help="use the model's own head at every depth (no tuned lens)")
    parser.add_argument("--ridge", type=float, default=1e-2, help="tuned-lens ridge penalty, relative to tr(X^T X)/D (default 0.01)")
    parser.add_argument("--tokens-per-prompt", type=int, default=48, help="greedy steps per prompt (default 48)")
    parser.add_argument("--max-prompts", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--out", type=Path, required=True, help="artifact path (CAL.json; the lens goes to CAL.lens.npz)")
    parser.add_argument("--report", type=Path, default=None, help="write a PNG of per-depth agreement, admission and scores")
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


def run(args: argparse.Namespace) -> int:
    if args.tokens_per_prompt < 1:
        raise CalibrationError(f"--tokens-per-prompt must be >= 1, got {args.tokens_per_prompt}")
    path = resolve_model(args.model)
    loaded = load_engine(str(path), engine=args.engine, weights=args.weights, backend=args.backend)
    prompts = read_prompts(args.prompts)[: args.max_prompts]
    encoded = encode_prompts(loaded.tokenizer, loaded.chat, prompts)
    gate: GateKind = "margin" if args.gate == "margin" else args.residual
    progress = Progress(len(encoded) * args.tokens_per_prompt, "calibrate", enabled=not args.quiet)
    cal, records = calibrate(
        loaded.model, encoded, model_sha256=file_sha256(path), model_name=path.name,
        depths=parse_layers(args.layers), q=args.q, n_steps=args.tokens_per_prompt,
        use_lens=not args.no_lens, ridge=args.ridge, gate=gate, residual=args.residual,
        stop_ids=chat_stop_ids(loaded.tokenizer, loaded.chat), on_step=progress.step,
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
    """Per gate, per depth: the fraction of calibration steps that depth's gate admits."""
    out: dict[str, list[float]] = {"margin": [], "supnorm": [], "halfrange": []}
    for i, d in enumerate(cal.depths):
        margins = records.margins[i]
        out["margin"].append(float(np.mean(margins > np.float32(d.margin_threshold))))
        for kind in ("supnorm", "halfrange"):
            q = d.supnorm_quantile if kind == "supnorm" else d.halfrange_quantile
            out[kind].append(float(np.mean([residual_admits(kind, float(m), q) for m in margins])))
    return out


def summary(cal: Calibration, records: Records) -> str:
    admitted = admitted_fractions(cal, records)
    lines = [
        f"{cal.model_name}: n = {cal.n} calibration steps (+{cal.n_lens} lens steps), q = {cal.q}, "
        f"q' = {cal.q_layer} per depth, alpha/K = {cal.alpha / len(cal.depths)}",
        "depth  agree  median margin  Q supnorm  Q halfrange  lambda margin  admitted: margin supnorm halfrange",
    ]
    for i, d in enumerate(cal.depths):
        lines.append(
            f"{d.depth:5d}  {d.agreement:5.1%}  {float(np.median(records.margins[i])):13.2f}  "
            f"{d.supnorm_quantile:9.2f}  {d.halfrange_quantile:11.2f}  {d.margin_threshold:13.2f}  "
            f"{admitted['margin'][i]:15.1%} {admitted['supnorm'][i]:7.1%} {admitted['halfrange'][i]:9.1%}"
        )
    return "\n".join(lines)


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
    fig.savefig(path, dpi=100)
    plt.close(fig)
