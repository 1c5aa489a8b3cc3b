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

The workload (``bench --workload``) uses :class:`WorkloadDecoders` instead: the engine's prompt ids
go in (the chat-formatted text as the engine gets it, tokenized once), a request ends at the
engine's own end ids or ``max_tokens``, and the generated ids come back for the same-tokens note
(:func:`common_prefix`); :func:`workload_ratios` gives the ratios per category and over them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verispec.geomean import geomean

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
        out[name]["geomean_tok_s"] = geomean([r["tok_s"] for r in runs])
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
        return geomean(values) if values else None

    return {
        names[0]: geo([r["plain_tok_s"] / plain[p] for p, r in ours.items() if plain[p] > 0]),
        names[1]: geo([r["speculative_tok_s"] / plain[p] for p, r in ours.items() if plain[p] > 0]),
        names[2]: geo([r["speculative_tok_s"] / lookup[p] for p, r in ours.items() if lookup[p] > 0]),
        names[3]: geo([lookup[p] / plain[p] for p in plain if plain[p] > 0 and p in lookup]),
    }


# -- the workload beside the engine (bench --workload) ------------------------------------------------

WORKLOAD_DECODERS = ("plain", "prompt_lookup")
AGREEMENT_TOKENS = 32  # the engine-vs-llama.cpp same-tokens note compares this many leading tokens


class WorkloadDecoders:
    """llama.cpp plain and prompt lookup, opened once for the workload's greedy requests.

    The requests go in as the engine's own prompt token ids (the chat-formatted text the engine
    gets, tokenized once by the engine), so both engines start from the very same prompt; whether
    llama.cpp's own tokenizer gives the same ids is recorded beside it (``prompt_ids_agree``).
    A request ends like the engine's decode session ends it: at one of ``end_ids`` (the token is
    counted, as the engine counts it) or after ``max_tokens``. Rate: generated tokens over the
    wall time of the whole call, prompt pass included (the engine's ``tokens_per_s``)."""

    def __init__(self, path: Path, n_ctx: int, k: int, threads: int, seed: int = 0) -> None:
        import llama_cpp  # type: ignore[import-not-found, unused-ignore]
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # type: ignore[import-not-found, unused-ignore]

        common: dict[str, Any] = {"model_path": str(path), "n_ctx": n_ctx, "n_batch": min(n_ctx, 2048),
                                  "n_threads": threads, "n_threads_batch": threads, "seed": seed, "verbose": False}
        self.decoders: dict[str, Any] = {
            "plain": llama_cpp.Llama(**common),
            "prompt_lookup": llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k)),
        }
        self.info: dict[str, Any] = {"available": True, "version": getattr(llama_cpp, "__version__", None),
                                     "threads": threads, "num_pred_tokens": k, "n_ctx": n_ctx}

    def prompt_ids_agree(self, text: str, ids: Sequence[int]) -> bool:
        """llama.cpp's tokenization of the prompt text (special tokens parsed, its own BOS rule)
        equals the engine's ids: information on the two tokenizers, not a precondition."""
        llm = self.decoders["plain"]
        return [int(t) for t in llm.tokenize(text.encode("utf-8"), special=True)] == list(ids)

    def run(self, name: str, ids: Sequence[int], max_tokens: int, end_ids: frozenset[int]) -> dict[str, Any]:
        """One greedy request on decoder ``name``: its token ids and tok/s."""
        llm = self.decoders[name]
        llm.reset()  # no KV reuse of an identical earlier prompt: every run pays its prompt pass
        out: list[int] = []
        t0 = time.perf_counter()
        if max_tokens > 0:
            for token in llm.generate(list(ids), temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
                out.append(int(token))
                if out[-1] in end_ids or len(out) >= max_tokens:
                    break
        elapsed = time.perf_counter() - t0
        return {"tokens": out, "tok_s": len(out) / elapsed if out and elapsed > 0 else 0.0}

    def close(self) -> None:
        self.decoders.clear()


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int = AGREEMENT_TOKENS) -> dict[str, int]:
    """How many of the first ``limit`` tokens two greedy outputs share before they differ, and how
    many could be compared (the shorter output, capped at ``limit``)."""
    compared = min(len(a), len(b), limit)
    same = next((i for i in range(compared) if a[i] != b[i]), compared)
    return {"same_leading_tokens": same, "compared": compared}


def workload_ratio_names(drafts: Sequence[str]) -> tuple[str, ...]:
    """The ratio fields of the workload's llama.cpp section, for these engine drafts."""
    return (*(f"engine_{d}_over_llama_cpp_plain" for d in drafts), "engine_plain_over_llama_cpp_plain",
            "llama_cpp_prompt_lookup_over_llama_cpp_plain")


def workload_ratios(runs: Sequence[dict[str, Any]], drafts: Sequence[str]) -> dict[str, Any]:
    """Per category and over the categories, each ratio of :func:`workload_ratio_names`.

    ``runs``: one per greedy request: ``category``, ``llama_cpp`` {``plain``, ``prompt_lookup``:
    {``tok_s``}}, ``engine`` {``plain_tok_s``, ``speculative_tok_s``: {draft: tok/s}}. Ratios are
    taken request by request (both sides of a ratio ran minutes apart at most), their geometric
    mean per category, then the geometric mean over the categories (each category weighs the same,
    as in the engine's own workload table). A request a side did not decode (0 tok/s) is left out."""
    names = workload_ratio_names(drafts)

    def per_request(run: dict[str, Any]) -> dict[str, float]:
        plain = float(run["llama_cpp"]["plain"]["tok_s"])
        if plain <= 0:
            return {}
        sides = {f"engine_{d}_over_llama_cpp_plain": float(run["engine"]["speculative_tok_s"].get(d, 0.0)) for d in drafts}
        sides["engine_plain_over_llama_cpp_plain"] = float(run["engine"]["plain_tok_s"])
        sides["llama_cpp_prompt_lookup_over_llama_cpp_plain"] = float(run["llama_cpp"]["prompt_lookup"]["tok_s"])
        return {name: v / plain for name, v in sides.items() if v > 0}

    ratios = [(r["category"], per_request(r)) for r in runs]
    categories = list(dict.fromkeys(c for c, _ in ratios))
    per_category = {c: {n: geomean([r[n] for cat, r in ratios if cat == c and n in r]) or None for n in names}
                    for c in categories}
    geomean = {n: geomean([v for v in (per_category[c][n] for c in categories) if v]) or None for n in names}
    return {"per_category": per_category, "geomean": geomean}
