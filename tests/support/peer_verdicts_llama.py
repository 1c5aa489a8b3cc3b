"""llama-cpp-python's verdicts for docs/peers.md: ``check_decoder`` under ``--law llama.cpp`` with
the engine's own logits as the target (verispec/peers/llama_cpp_peer.py), on the tiny target of
``python -m tests.support.peer_verdicts --out DIR --write-only`` (or any GGUF given as ``--model``).

    python -m tests.support.peer_verdicts_llama --out DIR --path PATH --flags 'JSON' [--patched]
        [--tv 0.05] [--fraction 0.1] [--budget SECONDS] [--depth 64] [--model FILE.gguf] [--workers N]
        [--prompt TEXT]

prints one JSON line (verdict, tokens, design, power, wall and CPU minutes, load); exit status 1
when the verdict is failed. ``--flags``: check_decoder's llama.cpp-law keywords, e.g.
``{"temperature": 0.8, "repeat_penalty": 1.3}``. Paths: ``lookup`` (prompt lookup), ``plain``, and
``lookup-processor`` / ``plain-processor``, the same with the three penalties applied by a user
``logits_processor`` (verispec/peers/llama_cpp_peer.py's ``PenaltyProcessor``) instead of natively:
the same law when the processor is handed the right history. ``--patched``: every engine (each
worker's too) runs with the fix of examples/repros/llama_cpp_processor_history.py applied to the
installed ``llama_cpp.Llama``; run it beside the unpatched command, same design and seeds.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.support.peer_verdicts import PROMPT, write_models

LOOKUP_TOKENS = 10  # num_pred_tokens: llama-cpp-python's default
# The default prompt three times over (as examples/llama_cpp_processor_history_repro.py): prompt
# lookup drafts from it more often, and the drafts are prompt tokens, which the processor history
# bug counts as output. Measured on the tiny target, 30 generations at the lookup-processor flags:
# 7.8% of processor calls see drafts, mean KL 0.014 nats a call (0.0033 with PROMPT)
LOOKUP_PROMPT = " ".join([PROMPT] * 3)
PATHS = ("lookup", "plain", "lookup-processor", "plain-processor")
REPRO = Path(__file__).resolve().parents[2] / "examples" / "repros" / "llama_cpp_processor_history.py"
_FIX_INSTALLED: list[bool] = []  # this process's llama_cpp.Llama carries the fix (installed once)


def install_fix() -> None:
    """The repro's fix, applied to this process's installed ``llama_cpp.Llama`` (once)."""
    if _FIX_INSTALLED:
        return
    spec = importlib.util.spec_from_file_location("llama_cpp_processor_history", REPRO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install_llama_fix()
    _FIX_INSTALLED.append(True)


def peer(path_name: str, model_path: Path, patched: bool = False) -> Any:
    """llama-cpp-python on ``model_path``: prompt lookup (its default draft length) or plain, its
    penalties native or by a ``logits_processor``; ``patched``: with the processor-history fix."""
    from verispec.peers.llama_cpp_peer import LlamaCppPeer

    if patched:
        install_fix()
    return LlamaCppPeer(
        Path(model_path),
        lookup_tokens=None if path_name.startswith("plain") else LOOKUP_TOKENS,
        penalties_by_processor=path_name.endswith("-processor"),
    )


def _engine_key(path_name: str, patched: bool) -> str:
    return path_name.replace("-", "_") + ("_patched" if patched else "")


# ``check_decoder(workers=N)`` builds the engine in each worker from a "module:FACTORY" name:
# ``tests.support.peer_verdicts_llama:ENGINES.lookup_processor_patched`` and so on.
ENGINES = SimpleNamespace(
    **{
        _engine_key(path, patched): functools.partial(peer, path, patched=patched)
        for path in PATHS
        for patched in (False, True)
    }
)


def verdict(
    model: Path,
    path_name: str,
    flags: dict[str, Any],
    fraction: float,
    budget: float | None,
    depth: int,
    tv: float = 0.05,
    prompt: str = PROMPT,
    workers: int = 1,
    patched: bool = False,
) -> dict[str, Any]:
    """One check_decoder depth run of llama-cpp-python (prompt lookup or plain) and its costs."""
    import llama_cpp

    from verispec.decoder.api import check_decoder

    start, load, cpu = time.perf_counter(), os.getloadavg()[0], time.process_time()
    decoder = (
        f"tests.support.peer_verdicts_llama:ENGINES.{_engine_key(path_name, patched)}"
        if workers > 1
        else functools.partial(peer, path_name, patched=patched)
    )
    report = check_decoder(
        decoder,
        model=model,
        prompts=(prompt,),
        law="llama.cpp",
        target_law="engine-logits",
        tv=tv,
        fraction=fraction,
        depth=depth,
        budget=budget,
        workers=workers,
        **flags,
    )
    o = report.results[0]
    return {
        "peer": "llama-cpp-python",
        "version": llama_cpp.__version__,
        "path": path_name,
        "patched": patched,
        "model": model.name,
        "prompt": prompt,
        "flags": flags,
        "depth": depth,
        "state": o.numbers.get("state"),
        "tokens": o.numbers.get("tokens"),
        "design_tokens": o.numbers.get("design_tokens"),
        "power": o.numbers.get("power"),
        "tv": tv,
        "fraction": fraction,
        "minutes": round((time.perf_counter() - start) / 60, 2),
        "workers": workers,
        # the workers' CPU is not this process's: counted at 1 worker only
        "cpu_minutes": round((time.process_time() - cpu) / 60, 2) if workers == 1 else None,
        "load_at_start": round(load, 1),
        "load_at_end": round(os.getloadavg()[0], 1),
        "budget": budget,
        "detail": o.detail,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.peer_verdicts_llama")
    parser.add_argument("--out", type=Path, required=True, help="folder of the tiny models")
    parser.add_argument("--model", type=Path, default=None, help="a GGUF other than the tiny target")
    parser.add_argument("--path", choices=PATHS, default="lookup")
    parser.add_argument("--flags", type=json.loads, default={}, help="llama.cpp-law keywords as JSON")
    parser.add_argument("--tv", type=float, default=0.05)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--budget", type=float, default=None, help="seconds (inconclusive when short)")
    parser.add_argument("--depth", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1, help="llama-cpp-python processes decoding the generations")
    parser.add_argument(
        "--prompt",
        default=PROMPT,
        help=f"the prompt's text (default {PROMPT!r}; {LOOKUP_PROMPT!r}: prompt lookup finds drafts in it)",
    )
    parser.add_argument(
        "--patched", action="store_true", help="the processor-history fix applied to llama_cpp.Llama in every engine"
    )
    args = parser.parse_args(argv)
    model = args.model if args.model is not None else write_models(args.out)["target"]
    row = verdict(
        model,
        args.path,
        args.flags,
        args.fraction,
        args.budget,
        args.depth,
        args.tv,
        prompt=args.prompt,
        workers=args.workers,
        patched=args.patched,
    )
    print(json.dumps(row), flush=True)
    return 1 if row["state"] == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
