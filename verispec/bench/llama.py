"""`verispec bench`'s llama.cpp columns: llama.cpp plain and prompt-lookup decoding on the same
GGUF, the same prompt ids, the same number of generated tokens, in the same run as the engine.

Through the optional ``llama_cpp`` package (``pip install 'verispec[llama]'``: it builds llama.cpp
from source, ~10 min), always in a child process (:mod:`verispec.bench.llama_child`): native code
that faults (ggml's AMX kernel on a ``-march=native`` build) ends that child, not the bench; the
section then reports the crash (:mod:`verispec.bench.peer`) and the bench goes on. Two decoders
per prompt, alternating ``repeats`` times, best (least time) of each:

- ``plain``: ``Llama`` with no draft model;
- ``prompt_lookup``: ``Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))``, llama.cpp's
  prompt-lookup speculative decoding (greedy: the same tokens as plain, up to its own kernels).

Same work on both sides: every run starts from the engine's own prompt ids (tokenized once by
the engine) and decodes exactly ``max_tokens`` tokens greedily with end-of-generation ignored
(llama-cpp-python's ``generate`` never stops by itself; the engine's request sets
``ignore_eog``), so the two rates divide the same number of tokens. Both with ``n_threads`` =
``n_threads_batch`` = ``threads``: the caller passes the engine's own thread count (onnxruntime's
``intra_op_num_threads``), so the two engines use the same number of cores. Rate: ``tok_s`` =
generated tokens / wall time of the run, prompt pass included (as
:attr:`reference.session.GenerationStats.tokens_per_s` counts it for the engine). ``reset()``
before every run: llama-cpp-python would otherwise reuse the KV cache of an identical prompt.

The engine's int8 plain and ngram runs of the same requests are interleaved with llama.cpp's,
prompt by prompt (``engine``: bench passes them), so the ratios compare runs minutes apart at
most, not sections of the bench apart.

The workload (``bench --workload``) opens the same decoders with a larger context; every side of a
request decodes the same fixed number of tokens, end of generation ignored (verispec/bench/workload.py
says which length), and the generated ids come back for the same-tokens note (:func:`common_prefix`);
:func:`workload_ratios` gives the ratios per category and over them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from verispec.bench.means import geomean
from verispec.bench.peer import describe
from verispec.reference.errors import PeerFailed

NOT_INSTALLED = "not installed (optional extra `llama`; builds llama.cpp from source, ~10 min)"
DECODERS = ("plain", "prompt_lookup")
PROMPT_N_CTX = 512  # the bench prompts' context (prompt + max_tokens must fit; checked below)


def available() -> bool:
    """llama_cpp is installed (found, not imported: its native library loads only in the child)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


class Decoders(Protocol):
    """llama.cpp's two decoders on one file (in this process or a child: the same calls)."""

    info: dict[str, Any]  # available, version, system_info, threads, num_pred_tokens, n_ctx

    def run(self, name: str, ids: Sequence[int], max_tokens: int, end_ids: frozenset[int]) -> dict[str, Any]: ...

    def tokenize(self, text: str) -> list[int]: ...

    def close(self) -> None: ...


OpenDecoders = Callable[[Path, int, int, int, int], Decoders]  # (path, n_ctx, k, threads, seed)


def open_child(path: Path, n_ctx: int, k: int, threads: int, seed: int) -> Decoders:
    """The decoders (:class:`verispec.bench.llama_child.LlamaDecoders`) in a child process, the
    bench's default; PeerFailed if it cannot open them."""
    from verispec.bench.llama_child import ChildDecoders

    return ChildDecoders(path, n_ctx, k, threads, seed)


def crashed_section(failure: PeerFailed) -> dict[str, Any]:
    """A peer that died or failed, as the section's result: ``available`` false, ``status``, a
    one-line ``note`` and the details (``crash``: signal, exit code, during, stderr tail)."""
    return {
        "available": False,
        "status": failure.result.get("status", "failed"),
        "note": describe(failure.result),
        "crash": failure.result,
    }


EngineRun = Callable[[str, tuple[int, ...]], dict[str, float]]  # (kind, ids) -> plain_tok_s, speculative_tok_s, ...


def measure(
    path: Path,
    prompts: Sequence[tuple[str, Sequence[int]]],
    max_tokens: int,
    k: int,
    threads: int,
    repeats: int,
    seed: int = 0,
    engine: EngineRun | None = None,
    open_decoders: OpenDecoders = open_child,
) -> dict[str, Any]:
    """llama.cpp plain and prompt-lookup decoding on ``prompts`` (kind, engine prompt ids); see the
    module doc. A crash or failure of the decoders' process is the section's result
    (:func:`crashed_section`), never an exception.

    ``engine``: the engine's own plain and speculative run of a prompt, interleaved with llama.cpp's
    (each repeat runs llama.cpp plain, llama.cpp prompt lookup, then the engine), so a change of
    load on the shared machine falls on both sides; its best runs go to ``engine_runs``."""
    if not available() and open_decoders is open_child:
        return {"available": False, "status": "not installed", "note": NOT_INSTALLED}
    n_ctx = max([PROMPT_N_CTX, *(len(ids) + max_tokens + k + 8 for _, ids in prompts)])  # room for one cycle of drafts
    decoders: Decoders | None = None
    try:
        decoders = open_decoders(path, n_ctx, k, threads, seed)
        out: dict[str, Any] = {**decoders.info, "status": "ok", "generated_tokens": max_tokens, "eog": "ignored"}
        for name in DECODERS:
            out[name] = {"runs": []}
        engine_runs: list[dict[str, Any]] = []
        for kind, ids in prompts:
            best, ours = _best_runs(decoders, kind, tuple(ids), max_tokens, repeats, engine)
            for name in DECODERS:
                out[name]["runs"].append({"prompt": kind, **best[name]})
            if ours is not None:
                engine_runs.append({"prompt": kind, "temperature": 0.0, **ours})
    except PeerFailed as failure:
        return crashed_section(failure)
    finally:
        if decoders is not None:
            decoders.close()
    if engine is not None:
        out["engine_runs"] = engine_runs
    for name in DECODERS:
        out[name]["geomean_tok_s"] = geomean([r["tok_s"] for r in out[name]["runs"]])
    return out


def _best_runs(
    decoders: Decoders, kind: str, ids: tuple[int, ...], max_tokens: int, repeats: int, engine: EngineRun | None
) -> tuple[dict[str, dict[str, float]], dict[str, float] | None]:
    """One prompt, ``repeats`` rounds of every decoder then the engine: each side's best run
    (the engine's best plain and best speculative rate, or None without it)."""
    best: dict[str, dict[str, float]] = {}
    ours: dict[str, float] = {"plain_tok_s": 0.0, "speculative_tok_s": 0.0}
    for _ in range(max(1, repeats)):  # alternate the decoders; keep each one's best run
        for name in DECODERS:
            run = decoders.run(name, ids, max_tokens, frozenset())  # EOG ignored: exactly max_tokens
            summary = {"tokens": len(run["tokens"]), "prompt_tokens": len(ids), "tok_s": float(run["tok_s"])}
            if name not in best or summary["tok_s"] > best[name]["tok_s"]:
                best[name] = summary
        if engine is not None:
            mine = engine(kind, ids)
            ours = {key: max(ours[key], float(mine[key])) for key in ("plain_tok_s", "speculative_tok_s")}
            ours["tokens"] = int(mine["generated_tokens"])
    return best, ours if engine is not None else None


def ratios(llama: dict[str, Any], int8_runs: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The int8 mode's llama.cpp targets as geometric means over the prompts both sides ran.

    ``int8_runs``: the engine's greedy speculative-vs-plain runs on the int8 mode (``prompt``,
    ``plain_tok_s``, ``speculative_tok_s``, end to end like llama.cpp's ``tok_s``); the runs
    interleaved with llama.cpp's (``engine_runs``) take their place when there are any."""
    names = (
        "int8_plain_over_llama_cpp_plain",
        "int8_ngram_over_llama_cpp_plain",
        "int8_ngram_over_llama_cpp_prompt_lookup",
        "llama_cpp_prompt_lookup_over_llama_cpp_plain",
    )
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

WORKLOAD_DECODERS = DECODERS
AGREEMENT_TOKENS = 32  # the engine-vs-llama.cpp same-tokens note compares this many leading tokens


def prompt_ids_agree(decoders: Decoders, text: str, ids: Sequence[int]) -> bool:
    """llama.cpp's tokenization of the prompt text equals the engine's ids: information on the
    two tokenizers, not a precondition (both engines start from the engine's ids)."""
    return decoders.tokenize(text) == list(ids)


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int = AGREEMENT_TOKENS) -> dict[str, int]:
    """How many of the first ``limit`` tokens two greedy outputs share before they differ, and how
    many could be compared (the shorter output, capped at ``limit``)."""
    compared = min(len(a), len(b), limit)
    same = next((i for i in range(compared) if a[i] != b[i]), compared)
    return {"same_leading_tokens": same, "compared": compared}


def workload_ratio_names(drafts: Sequence[str]) -> tuple[str, ...]:
    """The ratio fields of the workload's llama.cpp section, for these engine drafts."""
    return (
        *(f"engine_{d}_over_llama_cpp_plain" for d in drafts),
        *(f"engine_{d}_over_engine_plain" for d in drafts),
        "engine_plain_over_llama_cpp_plain",
        "llama_cpp_prompt_lookup_over_llama_cpp_plain",
    )


def workload_ratios(runs: Sequence[dict[str, Any]], drafts: Sequence[str]) -> dict[str, Any]:
    """Per category and over the categories, each ratio of :func:`workload_ratio_names`.

    ``runs``: one per greedy request: ``category``, ``llama_cpp`` {``plain``, ``prompt_lookup``:
    {``tok_s``}}, ``engine`` {``plain_tok_s``, ``speculative_tok_s``: {draft: tok/s}}
    (``engine_D_over_engine_plain``: draft D's speculative rate over the engine's best plain run of
    the same request, both interleaved with llama.cpp's). Ratios are
    taken request by request (both sides of a ratio ran minutes apart at most), their geometric
    mean per category, then the geometric mean over the categories (each category weighs the same,
    as in the engine's own workload table). A request a side did not decode (0 tok/s) is left out."""
    names = workload_ratio_names(drafts)

    def per_request(run: dict[str, Any]) -> dict[str, float]:
        plain = float(run["llama_cpp"]["plain"]["tok_s"])
        ours = float(run["engine"]["plain_tok_s"])
        out: dict[str, float] = {}
        if ours > 0:
            for d in drafts:
                spec = float(run["engine"]["speculative_tok_s"].get(d, 0.0))
                if spec > 0:
                    out[f"engine_{d}_over_engine_plain"] = spec / ours
        if plain <= 0:
            return out
        sides = {
            f"engine_{d}_over_llama_cpp_plain": float(run["engine"]["speculative_tok_s"].get(d, 0.0)) for d in drafts
        }
        sides["engine_plain_over_llama_cpp_plain"] = ours
        sides["llama_cpp_prompt_lookup_over_llama_cpp_plain"] = float(run["llama_cpp"]["prompt_lookup"]["tok_s"])
        out.update({name: v / plain for name, v in sides.items() if v > 0})
        return out

    ratios = [(r["category"], per_request(r)) for r in runs]
    categories = list(dict.fromkeys(c for c, _ in ratios))
    per_category = {
        c: {n: geomean([r[n] for cat, r in ratios if cat == c and n in r]) or None for n in names} for c in categories
    }
    over_categories = {n: geomean([v for v in (per_category[c][n] for c in categories) if v]) or None for n in names}
    return {"per_category": per_category, "geomean": over_categories}
