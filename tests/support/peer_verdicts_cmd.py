"""Verdicts of peers that live in their own venvs, through ``check-decoder --engine-cmd`` (docs/peers.md,
"Other peers"), on tiny synthetic models written to ``DIR``.

    python -m tests.support.peer_verdicts_cmd --peer mlx-lm|openvino-genai --out DIR [--path PATH ...]
        [--params NAME ...] [--tv 0.05] [--fraction 1.0] [--budget SECONDS] [--venv NAME]
        [--patched] [--no-prefix-caching] [--depth T]

prints one JSON line per verdict. The param sets are tests/support/peer_verdicts.py's plus :data:`EXTRA`.
mlx-lm runs on the 3-layer TinyLlama-shaped target (the target is its own draft: sample-and-match
then accepts often, so rollbacks and full acceptances both occur); openvino-genai on the same
shape written with F16 matrices and a byte-level BPE vocabulary (what its GGUF reader loads), with
a 1-layer draft of another seed. The peers' venvs live under ``$VERISPEC_PEER_VENVS``
(default /work/venvs): ``mlx`` and ``openvino`` (``--venv NAME``: another one there, e.g. an older
mlx-lm). ``--patched`` (mlx-lm): the adapter applies the fix of
examples/repros/mlx_lm_speculative_prefill_history.py to its mlx-lm before serving; run it beside
the unpatched command, same design and seeds. ``--no-prefix-caching`` (openvino-genai): its
pipeline with ``SchedulerConfig.enable_prefix_caching=False``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support.peer_verdicts import (
    PARAM_SETS,
    PROMPT,
    ParamSet,
    law_cell,
    outcome_cells,
    verdict_flags,
    verdict_records,
    write_models,
)

VENVS = Path(os.environ.get("VERISPEC_PEER_VENVS", "/work/venvs"))
REPO = Path(__file__).resolve().parents[2]
# peer: (venv folder, adapter, its paths, the distributions whose versions are reported)
PEERS = {
    "mlx-lm": ("mlx", "examples/mlx_lm_decoder_cmd.py", ("speculative", "plain"), ("mlx-lm", "mlx")),
    "openvino-genai": (
        "openvino",
        "examples/openvino_genai_decoder_cmd.py",
        ("prompt-lookup", "draft", "plain"),
        ("openvino-genai", "openvino"),
    ),
}
EXTRA = {
    "t1-p0.9": ParamSet("t1-p0.9", verdict_flags(top_p=0.9)),
    # a strong penalty: the prompt's tokens lose most of their mass (mlx-lm's speculative path keeps it)
    "t1-rep3": ParamSet("t1-rep3", verdict_flags(repeat_penalty=3.0), depth=48),
}
ALL_SETS = {**PARAM_SETS, **EXTRA}
# On the TinyLlama-shaped target, penalty 3 on this prompt's tokens (or on its last one only) moves
# the first token's law by TV 0.54 (0.0002 for PROMPT, whose tokens the target gives little mass):
# found by scoring 150 random texts of the vocabulary's pieces by that TV
PENALTY_PROMPT = "en thor fasten is"


def write_peer_models(folder: Path) -> dict[str, Path]:
    """tests/support/peer_verdicts.py's models plus the F16 + BPE target and 1-layer draft of openvino-genai."""
    from dataclasses import replace

    from tests.support.synthetic import VARIANTS, write_synthetic

    files = write_models(folder)
    small = replace(VARIANTS["tinyllama"], name="tinyllama-1layer", n_layer=1)
    for key, variant, seed in (("bpe-target", VARIANTS["tinyllama"], 3), ("bpe-draft", small, 4)):
        files[key] = folder / f"{variant.name}-bpe-f16.gguf"
        if not files[key].exists():
            write_synthetic(
                files[key], variant, seed=seed, quant_types=("F16",), file_type="MOSTLY_F16", tokenizer="bpe"
            )
    return files


def python_of(peer: str, venv: str | None = None) -> Path:
    return VENVS / (venv or PEERS[peer][0]) / "bin" / "python"


def engine_command(
    peer: str,
    path: str,
    files: dict[str, Path],
    venv: str | None = None,
    patched: bool = False,
    prefix_caching: bool = True,
) -> str:
    """The program the gate runs: the peer's venv python on its adapter, for one path."""
    _, script, paths, _ = PEERS[peer]
    if path not in paths:
        raise SystemExit(f"{peer} has the paths {', '.join(paths)}, not {path!r}")
    if patched and peer != "mlx-lm":
        raise SystemExit(f"--patched: {peer}'s fix is in C++, not a monkeypatch of its Python (docs/peers.md)")
    if not prefix_caching and peer != "openvino-genai":
        raise SystemExit("--no-prefix-caching is an openvino-genai pipeline setting")
    if peer == "mlx-lm":
        target = files["target"]
        args = ["--target", target, "--draft", target] + (["--plain"] if path == "plain" else [])
        args += ["--patched"] if patched else []
    else:
        args = ["--target", files["bpe-target"], "--mode", path, "--draft", files["bpe-draft"]]
        args += [] if prefix_caching else ["--no-prefix-caching"]
    return " ".join(shlex.quote(str(a)) for a in (python_of(peer, venv), REPO / script, *args))


def target_of(peer: str, files: dict[str, Path]) -> Path:
    return files["target"] if peer == "mlx-lm" else files["bpe-target"]


def peer_version(peer: str, venv: str | None = None) -> str:
    import subprocess

    names = PEERS[peer][3]
    code = f"import importlib.metadata as m; print(' '.join(m.version(n) for n in {names!r}))"
    python = str(python_of(peer, venv))
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def verdict(
    peer: str,
    path: str,
    ps: ParamSet,
    files: dict[str, Path],
    tv: float,
    fraction: float,
    budget: float | None,
    prompt: str = PROMPT,
    venv: str | None = None,
    patched: bool = False,
    prefix_caching: bool = True,
) -> dict[str, Any]:
    """One depth run of the gate on the peer's program; its numbers, minutes and load."""
    from verispec.decoder.api import check_decoder

    if ps.library_defaults:
        raise SystemExit(f"{ps.name}: the engine-cmd adapters send every parameter (no library defaults)")
    command = engine_command(peer, path, files, venv, patched, prefix_caching)
    start, load = time.perf_counter(), os.getloadavg()[0]
    report = check_decoder(
        engine_cmd=command,
        model=target_of(peer, files),
        prompts=(prompt,),
        depth=ps.depth,
        law=ps.law,
        tv=tv,
        fraction=fraction,
        budget=budget,
        timeout=3600,
        **ps.flags,
    )
    outcome = report.results[0]
    return {
        "peer": peer,
        "version": peer_version(peer, venv),
        "path": path,
        "venv": venv,
        "patched": patched,
        "prefix_caching": prefix_caching,
        "params": ps.name,
        "law": ps.law,
        "flags": ps.flags,
        "prompt": prompt,
        "depth": ps.depth,
        "state": outcome.numbers.get("state"),
        "tokens": outcome.numbers.get("tokens"),
        "design_tokens": outcome.numbers.get("design_tokens"),
        "power": outcome.numbers.get("power"),
        "tv": tv,
        "fraction": fraction,
        "minutes": round((time.perf_counter() - start) / 60, 2),
        "load_at_start": round(load, 1),
        "detail": outcome.detail,
    }


def table_rows(lines: list[str]) -> list[str]:
    """docs/peers.md's rows ("Other peers") from this runner's JSON lines."""
    rows = []
    for r in verdict_records(lines):
        prompt = "" if r.get("prompt", PROMPT) == PROMPT else f" --prompt {r['prompt']!r}"
        prompt += f" --venv {r['venv']}" if r.get("venv") else ""
        prompt += " --patched" if r.get("patched") else ""
        prompt += "" if r.get("prefix_caching", True) else " --no-prefix-caching"
        ps = ALL_SETS[r["params"]]
        if r.get("depth", ps.depth) != ps.depth:
            ps, prompt = replace(ps, depth=r["depth"]), prompt + f" --depth {r['depth']}"
        command = f"`python -m tests.support.peer_verdicts_cmd --peer {r['peer']} --out DIR --path {r['path']} --params {r['params']}{prompt}`"
        rows.append(
            f"| {r['peer']} {r['version']} | {r['path']} | {law_cell(r, ps)} | "
            f"{r.get('prompt', PROMPT)!r} | {outcome_cells(r)} | {command} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.peer_verdicts_cmd")
    parser.add_argument("--peer", choices=list(PEERS), default="mlx-lm")
    parser.add_argument("--out", type=Path, required=True, help="folder of the tiny models")
    parser.add_argument("--path", nargs="+", default=None, help="the peer's paths (default: all of them)")
    parser.add_argument("--params", nargs="+", default=["t1"], choices=list(ALL_SETS))
    parser.add_argument("--tv", type=float, default=0.05)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--budget", type=float, default=None)
    parser.add_argument(
        "--prompt",
        default=PROMPT,
        help=f"the prompt's text (default {PROMPT!r}; {PENALTY_PROMPT!r}: "
        "one whose tokens the target likes, so a penalty on them moves mass)",
    )
    parser.add_argument("--table", type=Path, help="print docs/peers.md's rows of a saved JSON-lines file and stop")
    parser.add_argument(
        "--venv", default=None, help="the peer's venv folder under $VERISPEC_PEER_VENVS (default: its own)"
    )
    parser.add_argument("--depth", type=int, default=None, help="generation length (default: the param set's)")
    parser.add_argument("--patched", action="store_true", help="mlx-lm: the speculative prompt-history fix applied")
    parser.add_argument(
        "--no-prefix-caching", action="store_true", help="openvino-genai: SchedulerConfig.enable_prefix_caching=False"
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        print("\n".join(table_rows(args.table.read_text().splitlines())))
        return 0
    files = write_peer_models(args.out)
    failed = False
    for path in args.path or PEERS[args.peer][2]:
        for name in args.params:
            ps = ALL_SETS[name] if args.depth is None else replace(ALL_SETS[name], depth=args.depth)
            row = verdict(
                args.peer,
                path,
                ps,
                files,
                args.tv,
                args.fraction,
                args.budget,
                args.prompt,
                args.venv,
                args.patched,
                not args.no_prefix_caching,
            )
            failed |= row["state"] == "failed"
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
