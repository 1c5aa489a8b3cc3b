"""Verdicts of transformers' speculative paths on tiny synthetic GGUF models (docs/peers.md).

    python -m tests.support.peer_verdicts --out DIR [--path PATH ...] [--params NAME ...]
        [--tv 0.05] [--fraction 0.1] [--budget SECONDS] [--workers N] [--depth T]
        [--model FILE.gguf [--assistant-layers L] [--universal-assistant FILE.gguf]]

Writes the tiny models (tests/support/synthetic.py: a 3-layer TinyLlama-shaped target, a 1-layer
same-vocabulary assistant of another seed, and a Phi-3-shaped assistant whose tokenizer has four
more tokens) to ``DIR``, then runs ``verispec.check_decoder`` (the depth test, its default sampled
mode) on every chosen path x param set, transformers loading the files itself
(verispec/peers/transformers_peer.py), and prints one JSON line per verdict. The param sets of the
default (verispec) law are those where it is transformers' law (:func:`laws_coincide`); the
``hf-`` sets judge against ``--law transformers`` (spec/decoder/laws/transformers.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.support.synthetic import VARIANTS, write_synthetic
from verispec.reference.sampling import SamplingParams

PROMPT = "The cat sat on the"  # 11 tokens with the synthetic vocabulary's BOS


@dataclass(frozen=True)
class ParamSet:
    """One sampled law (check_decoder's ``law`` and sampling keywords) and the generation length
    it is judged at; ``library_defaults``: the engine sends ``do_sample=True`` alone."""

    name: str
    flags: dict[str, Any]
    law: str = "verispec"
    depth: int = 64
    library_defaults: bool = False

    def params(self) -> SamplingParams:
        f = self.flags
        return SamplingParams(
            temperature=f.get("temperature", 1.0),
            top_k=f.get("top_k", 0),
            top_p=f.get("top_p", 1.0),
            min_p=f.get("min_p", 0.0),
            repeat_penalty=f.get("repeat_penalty", 1.0),
        )


def verdict_flags(**flags: Any) -> dict[str, Any]:
    """verispec-law flags with every filter stated (top_k 0, no penalty unless given)."""
    return {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, **flags}


PARAM_SETS = {
    # where transformers' law is verispec's default law (laws_coincide)
    "t1": ParamSet("t1", verdict_flags()),
    "t0.7": ParamSet("t0.7", verdict_flags(temperature=0.7)),
    "t0.7-k8": ParamSet("t0.7-k8", verdict_flags(temperature=0.7, top_k=8)),
    "t1-k8-p0.9": ParamSet("t1-k8-p0.9", verdict_flags(top_k=8, top_p=0.9)),
    "t1-minp0.05": ParamSet("t1-minp0.05", verdict_flags(min_p=0.05)),
    # the penalty's window (64) covers prompt + 48 tokens, as transformers' whole sequence
    "t1-rep1.3": ParamSet("t1-rep1.3", verdict_flags(repeat_penalty=1.3), depth=48),
    "defaults": ParamSet("defaults", verdict_flags(top_k=50), library_defaults=True),
    # --law transformers (spec/decoder/laws/transformers.py): its whole parameter set
    "hf-t0.7-p0.9": ParamSet("hf-t0.7-p0.9", {"temperature": 0.7, "top_k": 0, "top_p": 0.9}, law="transformers"),
    "hf-t0.7-k20-minp0.1": ParamSet(
        "hf-t0.7-k20-minp0.1", {"temperature": 0.7, "top_k": 20, "min_p": 0.1}, law="transformers"
    ),
    "hf-rep1.3": ParamSet("hf-rep1.3", {"temperature": 0.8, "top_k": 0, "repetition_penalty": 1.3}, law="transformers"),
    "hf-min8": ParamSet("hf-min8", {"temperature": 1.0, "top_k": 0, "min_tokens": 8}, law="transformers"),
    "hf-defaults": ParamSet("hf-defaults", {}, law="transformers", library_defaults=True),
    # every processor a sampled speculative path takes at once (the full-power runs)
    "hf-all": ParamSet(
        "hf-all",
        {"temperature": 0.8, "top_k": 20, "top_p": 0.95, "min_p": 0.05, "repetition_penalty": 1.3, "min_tokens": 8},
        law="transformers",
    ),
    # hf-all less the repetition penalty: prompt lookup drafts (under a penalty with top-k or top-p,
    # transformers refuses every draft copied from the context, so it decodes plainly)
    "hf-all-no-penalty": ParamSet(
        "hf-all-no-penalty",
        {"temperature": 0.8, "top_k": 20, "top_p": 0.95, "min_p": 0.05, "min_tokens": 8},
        law="transformers",
    ),
}
PATHS = ("plain", "prompt-lookup", "assisted", "early-exit", "universal")


def model_files(folder: Path) -> dict[str, Path]:
    """Where :func:`write_models` puts each tiny model in ``folder``."""
    return {
        "target": folder / "tinyllama.gguf",
        "assistant": folder / "tinyllama-1layer.gguf",
        "other-tokenizer": folder / "phi3.gguf",
    }


def write_models(folder: Path) -> dict[str, Path]:
    """The target, a same-vocabulary 1-layer assistant, and an assistant with another tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    files = model_files(folder)
    small = replace(VARIANTS["tinyllama"], name="tinyllama-1layer", n_layer=1)
    for key, variant, seed in (
        ("target", VARIANTS["tinyllama"], 3),
        ("assistant", small, 4),
        ("other-tokenizer", VARIANTS["phi3"], 2),
    ):
        if not files[key].exists():
            write_synthetic(files[key], variant, seed=seed)
    return files


def factory(path_name: str, files: dict[str, Path], library_defaults: bool, assistant_layers: int | None = None) -> Any:
    """The engine factory of one path: the assisted path drafts with ``files["assistant"]`` (when
    there is one and ``assistant_layers`` is None; else the target's first ``assistant_layers``
    layers, 1 by default), the universal path with ``files["other-tokenizer"]``."""
    from verispec.peers.transformers_peer import engine

    own_layers = path_name == "assisted" and assistant_layers is not None
    assistant = (
        None
        if own_layers
        else {"assisted": files.get("assistant"), "universal": files.get("other-tokenizer")}.get(path_name)
    )
    return lambda model_path: engine(
        model_path,
        path_name,
        assistant=assistant,
        library_defaults=library_defaults,
        assistant_layers=assistant_layers or 1,
    )


def tiny_engine(path_name: str, library_defaults: bool, model_path: Path, assistant_layers: int | None = None) -> Any:
    """The engine of one path on the tiny target at ``model_path``, its assistants the files
    :func:`write_models` puts beside it, or for ``assisted`` with ``assistant_layers`` the target's
    own first layers (one torch thread: a worker shares the machine)."""
    import torch

    torch.set_num_threads(1)
    return factory(path_name, model_files(Path(model_path).parent), library_defaults, assistant_layers)(model_path)


TINY_LAYERS = 3  # the tiny target's depth (tests/support/synthetic.py's tinyllama): an assistant keeps fewer


def _engine_key(path_name: str, library_defaults: bool, assistant_layers: int | None = None) -> str:
    first = "" if assistant_layers is None else f"_first{assistant_layers}"
    return path_name.replace("-", "_") + first + ("_defaults" if library_defaults else "")


# ``check_decoder(workers=N)`` builds the engine in each worker from a "module:FACTORY" name:
# ``tests.support.peer_verdicts:ENGINES.prompt_lookup``, ``..ENGINES.assisted_defaults``,
# ``..ENGINES.assisted_first2`` (the target's first 2 layers as the assistant) and so on.
ENGINES = SimpleNamespace(
    **{
        _engine_key(path, defaults): functools.partial(tiny_engine, path, defaults)
        for path in PATHS
        for defaults in (False, True)
    }
    | {
        _engine_key("assisted", defaults, layers): functools.partial(
            tiny_engine, "assisted", defaults, assistant_layers=layers
        )
        for layers in range(1, TINY_LAYERS)
        for defaults in (False, True)
    }
)


def engine_name(path_name: str, library_defaults: bool, assistant_layers: int | None = None) -> str:
    """The ``module:FACTORY`` name of a tiny-model engine in :data:`ENGINES`."""
    return f"tests.support.peer_verdicts:ENGINES.{_engine_key(path_name, library_defaults, assistant_layers)}"


def assistant_text(path_name: str, files: dict[str, Path], assistant_layers: int | None) -> str | None:
    """What drafts on the assisted and universal paths (None on the others)."""
    if path_name == "assisted":
        if assistant_layers is None and "assistant" in files:
            return files["assistant"].name
        return f"the target's first {assistant_layers or 1} layer{'s' if (assistant_layers or 1) > 1 else ''}"
    if path_name == "universal":
        return files["other-tokenizer"].name if "other-tokenizer" in files else None
    return None


def verdict(
    path_name: str,
    ps: ParamSet,
    files: dict[str, Path],
    tv: float,
    fraction: float,
    budget: float | None,
    assistant_layers: int | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """One check_decoder depth run; its numbers, the wall and CPU seconds it took and the load it
    ran under. ``assistant_layers``: the assisted path drafts with the target's first layers
    instead of ``files["assistant"]``."""
    import transformers

    from verispec.decoder.api import check_decoder
    from verispec.peers.transformers_peer import laws_coincide

    if ps.law == "verispec" and not laws_coincide(ps.params(), 11 + ps.depth):
        raise SystemExit(f"{ps.name}: transformers' law is not verispec's default law there")
    start, load, cpu = time.perf_counter(), os.getloadavg()[0], cpu_seconds()
    decoder = (
        engine_name(path_name, ps.library_defaults, assistant_layers)
        if workers > 1
        else factory(path_name, files, ps.library_defaults, assistant_layers)
    )
    report = check_decoder(
        decoder,
        model=files["target"],
        prompts=(PROMPT,),
        depth=ps.depth,
        law=ps.law,
        tv=tv,
        fraction=fraction,
        budget=budget,
        workers=workers,
        **ps.flags,
    )
    outcome = report.results[0]
    return {
        "peer": "transformers",
        "version": transformers.__version__,
        "model": files["target"].name,
        "path": path_name,
        "assistant": assistant_text(path_name, files, assistant_layers),
        "params": ps.name,
        "law": ps.law,
        "flags": ps.flags,
        "depth": ps.depth,
        "state": outcome.numbers.get("state"),
        "tokens": outcome.numbers.get("tokens"),
        "design_tokens": outcome.numbers.get("design_tokens"),
        "power": outcome.numbers.get("power"),
        "tv": tv,
        "fraction": fraction,
        "minutes": round((time.perf_counter() - start) / 60, 2),
        "workers": workers,  # the workers' CPU is not this process's (nor reliably its children's): counted at 1 only
        "cpu_minutes": round((cpu_seconds() - cpu) / 60, 2) if workers == 1 else None,
        "load_at_start": round(load, 1),
        "load_at_end": round(os.getloadavg()[0], 1),
        "budget": budget,
        "detail": outcome.detail,
    }


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process, all its threads."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def verdict_records(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON records among a runner's output lines (its other lines are progress)."""
    return [json.loads(line) for line in lines if line.startswith("{")]


def law_cell(r: dict[str, Any], ps: ParamSet, no_flags: str = "") -> str:
    """A verdict row's parameter cell: the set's name, law, flags (``no_flags`` when it has none)
    and depth (when not the default 64)."""
    flags = ", ".join(f"{k}={v}" for k, v in ps.flags.items()) or no_flags
    depth = f", depth {ps.depth}" if ps.depth != 64 else ""
    return f"{r['params']}: --law {ps.law}, {flags}{depth}"


def outcome_cells(r: dict[str, Any]) -> str:
    """A verdict row's cells from the state to the run time: state, tokens, power, minutes (load)."""
    if r["tokens"] is None:  # the first-m test failed: the depth test had no design
        return f"**{r['state']}** | first-m test | - | {r['minutes']} (load {r['load_at_start']})"
    return (
        f"**{r['state']}** | {r['tokens']} / {r['design_tokens']} | {r['power']:.3f} | "
        f"{r['minutes']} (load {r['load_at_start']})"
    )


def table_rows(lines: list[str]) -> list[str]:
    """docs/peers.md's table rows from this runner's JSON lines."""
    rows = []
    for r in verdict_records(lines):
        law = law_cell(r, PARAM_SETS[r["params"]], no_flags="none (library defaults)")
        command = f"`python -m tests.support.peer_verdicts --out DIR --path {r['path']} --params {r['params']} --fraction {r['fraction']}`"
        rows.append(f"| {r['version']} | {r['path']} | {law} | {outcome_cells(r)} | {command} |")
    return rows


def preload(files: dict[str, Path]) -> None:
    """transformers' models of ``files`` into the adapter's per-process cache, at the oracle's
    memoized loading cost (a real vocabulary's metadata is otherwise parsed many times)."""
    from tests.support.hf_oracle import memoized_gguf
    from verispec.peers.transformers_peer import load_causal_lm, load_tokenizer

    with memoized_gguf():
        for path in files.values():
            load_causal_lm(path)
        if "other-tokenizer" in files:
            load_tokenizer(files["target"]), load_tokenizer(files["other-tokenizer"])


SUMMARY_HEADER = (
    "| peer | model | path | params | design | verdict | tokens / design | power | minutes: wall (CPU, load) "
    "| reproduce |"
)


def _flags_text(flags: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in flags.items()) or "library defaults"


def summary_row(r: dict[str, Any], reproduce: str) -> str:
    """One row of the summary table (docs/peers.md and README.md) from a runner's JSON line."""
    peer = f"{r['peer']} {r['version']}"
    if r["peer"] == "transformers":
        params = f"{r['params']}: --law {r['law']}, {_flags_text(r['flags'])}"
    else:
        params = f"--law llama.cpp, {_flags_text(r['flags'])}"
    design = f"TV {r.get('tv', 0.05)} on {r['fraction']:.0%} of positions, {r.get('depth', 64)} tokens"
    cpu = "" if r.get("cpu_minutes") is None else f"{r['cpu_minutes']} CPU, "
    path = r["path"] if r.get("assistant") is None else f"{r['path']} (assistant: {r['assistant']})"
    return (
        f"| {peer} | {r.get('model', 'tinyllama.gguf')} | {path} | {params} | {design} | **{r['state']}** | "
        f"{r['tokens']:,} / {r['design_tokens']:,} | {r['power']:.3f} | {r['minutes']} ({cpu}load {r['load_at_start']}) "
        f"| {reproduce} |"
    )


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m tests.support.peer_verdicts")
    parser.add_argument("--out", type=Path, required=True, help="folder of the tiny models")
    parser.add_argument("--path", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--params", nargs="+", default=list(PARAM_SETS), choices=list(PARAM_SETS))
    parser.add_argument("--tv", type=float, default=0.05)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--budget", type=float, default=None, help="seconds per run (inconclusive when short)")
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="another target GGUF (e.g. SmolLM2): assisted drafts with its first --assistant-layers layers",
    )
    parser.add_argument(
        "--universal-assistant", type=Path, default=None, help="with --model: the universal path's assistant GGUF"
    )
    parser.add_argument(
        "--assistant-layers",
        type=int,
        default=None,
        help="the assisted path drafts with the target's first L layers (default: the 1-layer "
        "assistant file on the tiny models, 1 layer with --model)",
    )
    parser.add_argument("--depth", type=int, default=None, help="generation length (default: the param set's)")
    parser.add_argument("--workers", type=int, default=1, help="engine processes (tiny models only)")
    parser.add_argument("--write-only", action="store_true", help="write the tiny models and stop")
    parser.add_argument(
        "--table", type=Path, help="print docs/peers.md's table rows of a saved JSON-lines file and stop"
    )
    parser.add_argument(
        "--summary", type=Path, help="print the summary table's rows of a saved JSON-lines file and stop"
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        print("\n".join(table_rows(args.table.read_text().splitlines())))
        return 0
    if args.summary is not None:
        for line in args.summary.read_text().splitlines():
            if line.startswith("{"):
                print(summary_row(json.loads(line), "COMMAND"))
        return 0
    torch.set_num_threads(1)
    files = write_models(args.out)
    if args.write_only:
        return 0
    if args.model is not None and args.workers > 1:
        raise SystemExit(
            "--workers builds the tiny models' engines (tests.support.peer_verdicts:ENGINES): not with --model"
        )
    if args.model is not None:  # a real target: no same-vocabulary assistant file
        files = {"target": args.model} | (
            {} if args.universal_assistant is None else {"other-tokenizer": args.universal_assistant}
        )
        preload(files)
    failed = False
    for path_name in args.path:
        for name in args.params:
            ps = PARAM_SETS[name] if args.depth is None else replace(PARAM_SETS[name], depth=args.depth)
            row = verdict(
                path_name, ps, files, args.tv, args.fraction, args.budget, args.assistant_layers, args.workers
            )
            failed |= row["state"] == "failed"
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
