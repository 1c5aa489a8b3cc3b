"""`verispec bench`'s llama.cpp columns: llama.cpp plain and prompt-lookup decoding on the same
GGUF, the same prompts, the same greedy requests, in the same run as the engine.

Through the optional ``llama_cpp`` package (``pip install 'verispec[llama]'``: it builds llama.cpp
from source, ~10 min). Two decoders per prompt, alternating ``repeats`` times, best of each:

- ``plain``: ``Llama`` with no draft model;
- ``prompt_lookup``: ``Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))``, llama.cpp's
  prompt-lookup speculative decoding (greedy: the same tokens as plain, up to its own kernels).

Both with ``n_threads`` = ``n_threads_batch`` = ``threads``: the caller passes the engine's own
thread count (onnxruntime's ``intra_op_num_threads``), so the two engines use the same number of
cores. Rate: ``tok_s`` = generated tokens / wall time of the call (prompt processing included,
as :attr:`reference.session.GenerationStats.tokens_per_s` counts it for the engine, whose
speculative section the ratios compare it with, prompt by prompt). ``reset()`` before every
call: llama-cpp-python would otherwise reuse the KV cache of an identical prompt and skip its
prompt pass.

The engine's int8 plain and ngram runs of the same requests are interleaved with llama.cpp's,
prompt by prompt (``engine``: bench passes them), so the ratios compare runs minutes apart at
most, not sections of the bench apart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NOT_INSTALLED = "not installed (optional extra `llama`; builds llama.cpp from source, ~10 min)"


def available() -> bool:
    try:
        import llama_cpp  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def _one_run(llm: Any, prompt: str, max_tokens: int) -> dict[str, float]:
    """One greedy completion: generated tokens (llama.cpp's own count) over its wall time."""
    llm.reset()
    t0 = time.perf_counter()
    result = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, top_k=1, repeat_penalty=1.0)
    elapsed = time.perf_counter() - t0
    n = int(result["usage"]["completion_tokens"])
    return {"tokens": n, "prompt_tokens": int(result["usage"]["prompt_tokens"]),
            "tok_s": n / elapsed if n and elapsed > 0 else 0.0}


def _geomean(values: Sequence[float]) -> float:
    good = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else 0.0


EngineRun = Callable[[str, str], dict[str, float]]  # (kind, text) -> plain_tok_s, speculative_tok_s


def measure(path: Path, prompts: Sequence[tuple[str, str]], max_tokens: int, k: int, threads: int,
            repeats: int, seed: int = 0, engine: EngineRun | None = None) -> dict[str, Any]:
    """llama.cpp plain and prompt-lookup decoding on ``prompts`` (kind, text); see the module doc.

    ``engine``: the engine's own plain and speculative run of a prompt, interleaved with llama.cpp's
    (each repeat runs llama.cpp plain, llama.cpp prompt lookup, then the engine), so a change of
    load on the shared machine falls on both sides; its best runs go to ``engine_runs``."""
    if not available():
        return {"available": False, "note": NOT_INSTALLED}
    import llama_cpp  # type: ignore[import-not-found, unused-ignore]
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # type: ignore[import-not-found, unused-ignore]

    common: dict[str, Any] = {"model_path": str(path), "n_ctx": 512, "n_batch": 512, "n_threads": threads,
              "n_threads_batch": threads, "seed": seed, "verbose": False}
    decoders = {
        "plain": llama_cpp.Llama(**common),
        "prompt_lookup": llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k)),
    }
    out: dict[str, Any] = {"available": True, "version": getattr(llama_cpp, "__version__", None),
                           "threads": threads, "num_pred_tokens": k}
    for name in decoders:
        out[name] = {"runs": []}
    engine_runs: list[dict[str, Any]] = []
    for kind, text in prompts:
        best: dict[str, dict[str, float]] = {}
        ours = {"plain_tok_s": 0.0, "speculative_tok_s": 0.0}
        for _ in range(max(1, repeats)):  # alternate the decoders; keep each one's best run
            for name, llm in decoders.items():
                run = _one_run(llm, text, max_tokens)
                if name not in best or run["tok_s"] > best[name]["tok_s"]:
                    best[name] = run
            if engine is not None:
                mine = engine(kind, text)
                ours = {key: max(ours[key], float(mine[key])) for key in ours}
        for name in decoders:
            out[name]["runs"].append({"prompt": kind, **best[name]})
        if engine is not None:
            engine_runs.append({"prompt": kind, "temperature": 0.0, **ours})
    if engine is not None:
        out["engine_runs"] = engine_runs
    for name in decoders:
        runs = out[name]["runs"]
        out[name]["geomean_tok_s"] = _geomean([r["tok_s"] for r in runs])
    del decoders
    return out


def ratios(llama: dict[str, Any], int8_runs: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The issue's llama.cpp targets as geometric means over the prompts both sides ran.

    ``int8_runs``: the engine's greedy speculative-vs-plain runs on the int8 mode (``prompt``,
    ``plain_tok_s``, ``speculative_tok_s``, end to end like llama.cpp's ``tok_s``); the runs
    interleaved with llama.cpp's (``engine_runs``) take their place when there are any."""
    names = ("int8_plain_over_llama_cpp_plain", "int8_ngram_over_llama_cpp_plain",
             "int8_ngram_over_llama_cpp_prompt_lookup", "llama_cpp_prompt_lookup_over_llama_cpp_plain")
    if not llama.get("available"):
        return {name: None for name in names}
    int8_runs = llama.get("engine_runs") or int8_runs
    plain = {r["prompt"]: r["tok_s"] for r in llama["plain"]["runs"]}
    lookup = {r["prompt"]: r["tok_s"] for r in llama["prompt_lookup"]["runs"]}
    ours = {r["prompt"]: r for r in int8_runs if r.get("temperature") == 0.0 and r["prompt"] in plain}

    def geo(values: list[float]) -> float | None:
        return _geomean(values) if values else None

    return {
        names[0]: geo([r["plain_tok_s"] / plain[p] for p, r in ours.items() if plain[p] > 0]),
        names[1]: geo([r["speculative_tok_s"] / plain[p] for p, r in ours.items() if plain[p] > 0]),
        names[2]: geo([r["speculative_tok_s"] / lookup[p] for p, r in ours.items() if lookup[p] > 0]),
        names[3]: geo([lookup[p] / plain[p] for p in plain if plain[p] > 0 and p in lookup]),
    }
