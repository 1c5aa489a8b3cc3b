"""The bench's ``llama_cpp`` section: llama.cpp plain and prompt lookup on the bench's prompts
(verispec/bench/llama.py, in a child process), with the engine's own thread count, interleaved
with the int8 mode's plain and ngram runs of the same greedy requests when the bench has that
mode loaded. Both sides start from the engine's prompt ids and decode exactly ``decode_tokens``
tokens, end-of-generation ignored.

Keys: those of :func:`verispec.bench.llama.measure` (``available``, ``status``, ``version``,
``system_info``, ``threads``, ``num_pred_tokens``, ``generated_tokens``, ``eog``, ``plain``,
``prompt_lookup``, ``engine_runs``; or ``available`` false, ``status`` ("not installed",
"crashed", "timed out", "failed"), a ``note`` and for a failure ``crash``), plus ``tok_s``
(llama.cpp plain, geometric mean over the prompts) and ``engine_threads`` when it ran.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from verispec.bench import llama
from verispec.bench.options import BenchOptions
from verispec.bench.speculative import speculative_vs_plain
from verispec.engine.model import FastModel
from verispec.reference.generate import GenerationRequest
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer


def engine_threads() -> int:
    """The engine's own thread count (onnxruntime's ``intra_op_num_threads``; 1 without it): what
    llama.cpp is given, so both engines use the same cores."""
    from verispec.engine import matmul
    from verispec.engine.ort_pool import pool_threads

    # the shared pool's size once it exists (engine/ort_pool.py), else what it will be created with
    return (pool_threads() or matmul.default_threads()) if matmul.ort_available() else 1


def llama_cpp_section(
    path: Path, options: BenchOptions, tokenizer: Tokenizer, int8: FastModel | None = None
) -> dict[str, Any]:
    """llama.cpp on the bench's prompts, the int8 engine's runs interleaved when ``int8`` is given."""
    threads = engine_threads()
    engine = _int8_runs(int8, tokenizer, options) if int8 is not None else None
    prompts = [(kind, prompt_ids(tokenizer, text)) for kind, text in options.prompts]
    out = llama.measure(
        path, prompts, options.decode_tokens, options.k, threads, options.repeats, options.seed, engine=engine
    )
    if out.get("available"):
        out["tok_s"] = out["plain"]["geomean_tok_s"]
        out["engine_threads"] = threads
    return out


def prompt_ids(tok: Tokenizer, text: str) -> tuple[int, ...]:
    """A bench prompt as the engine tokenizes it (special tokens parsed): what both sides get."""
    return tuple(tok.encode(text, add_bos=tok.add_bos, parse_special=True))


def _int8_runs(model: FastModel, tok: Tokenizer, options: BenchOptions) -> llama.EngineRun:
    """The int8 engine's plain and ngram run of one greedy prompt (once: llama.measure repeats),
    exactly ``decode_tokens`` tokens (end-of-generation ignored, as on llama.cpp's side)."""
    once = replace(options, repeats=1)

    def engine(kind: str, ids: tuple[int, ...]) -> dict[str, float]:
        request = GenerationRequest(
            ids,
            params=SamplingParams(temperature=0.0),
            max_tokens=options.decode_tokens,
            seed=options.seed,
            ignore_eog=True,
        )
        return speculative_vs_plain(model, tok, "ngram", request, once)

    return engine
