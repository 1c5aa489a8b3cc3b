"""The bench's workload section (``--workload``): the chat requests of :mod:`verispec.workload`
through :func:`verispec.bench.speculative.speculative_vs_plain_ids`, per draft source, and
llama.cpp beside them.

``workload``: per draft, ``runs`` (every request greedy, and at ``sampled_temperature`` unless
``--workload-greedy-only``: category, id, prompt_tokens and the speculative run's keys),
``by_temperature`` (per category and over the categories: the geometric mean of the speedups,
wall and CPU, each category weighing the same however many requests it has; alpha pooled over
generated tokens) and ``all_greedy_same_tokens``.

``workload_llama_cpp``: with the model file and ``llama_cpp`` importable, llama.cpp plain and prompt
lookup on the same greedy requests (:class:`verispec.bench.llama.Decoders`, in a child process),
interleaved request by request with the engine's runs: llama.cpp runs before the engine's runs of
a request and, when ``repeats`` > 1, again after them (best of each), so both sides see the same
minutes of load; the ratios per category and over them, and the same-tokens note. Otherwise why
it is missing; when llama.cpp's process dies or fails part way, the requests it finished, and
``status`` / ``note`` / ``crash`` saying how it ended (the engine's runs go on without it).
Each side ends a request at its own end of generation (the engine's end ids) or ``max_tokens``:
the rates of a request may divide different token counts where the two greedy outputs part
(``generated_tokens`` of each side is recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verispec.bench import llama
from verispec.bench.llama_section import engine_threads
from verispec.bench.means import geomean, ratio_of_sums
from verispec.bench.options import BenchOptions
from verispec.reference.errors import PeerFailed
from verispec.bench.speculative import speculative_vs_plain_ids
from verispec.engine.model import FastModel
from verispec.reference.generate import GenerationRequest
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

if TYPE_CHECKING:
    from verispec.reference.chat import ChatFormat
    from verispec.workload import WorkloadItem


@dataclass(frozen=True)
class _Request:
    """One workload item as the engine gets it: the chat-formatted text and its token ids."""

    item: "WorkloadItem"
    text: str
    ids: tuple[int, ...]


def workload_section(
    model: FastModel, tokenizer: Tokenizer, chat: "ChatFormat", options: BenchOptions, path: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``workload``, ``workload_llama_cpp``) for ``options.workload`` (see the module docstring)."""
    end = tokenizer.token_id(chat.end_of_turn)
    stop_ids: frozenset[int] = frozenset() if end is None else frozenset({end})
    temperatures = (0.0, options.sampled_temperature) if options.workload_sampled else (0.0,)
    requests = [_Request(item, text, tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True)))
                for item, text in ((item, item.prompt_text(chat)) for item in options.workload)]
    beside = _Beside(path, [len(r.ids) + r.item.max_tokens for r in requests], options)
    runs: dict[str, list[dict[str, Any]]] = {spec_text: [] for spec_text in options.drafts}
    llama_runs: list[dict[str, Any]] = []
    try:
        for temperature in temperatures:
            for r in requests:
                request = GenerationRequest(r.ids, params=SamplingParams(temperature=temperature),
                                            max_tokens=r.item.max_tokens, stop_ids=stop_ids, seed=options.seed)
                record = _one_request(model, tokenizer, r, request, options, beside if temperature == 0.0 else None,
                                      runs, tokenizer.eog_ids | stop_ids)
                if record is not None:
                    llama_runs.append(record)
    finally:
        beside.close()
    out = {spec_text: workload_summary(draft_runs, temperatures) for spec_text, draft_runs in runs.items()}
    return out, workload_llama_section(beside, llama_runs, options.drafts)


class _Beside:
    """llama.cpp's decoders beside the workload until their process fails (the failure is kept:
    the workload's engine runs go on without llama.cpp)."""

    def __init__(self, path: Path | None, lengths: Sequence[int], options: BenchOptions) -> None:
        self.failure: PeerFailed | None = None
        self.decoders: "llama.Decoders | None" = None
        self.info: dict[str, Any] = {}
        try:
            self.decoders = workload_llama_decoders(path, lengths, options)
        except PeerFailed as failure:
            self.failure = failure
        if self.decoders is not None:
            self.info = dict(self.decoders.info)

    @property
    def running(self) -> bool:
        return self.decoders is not None

    def request(self, ids: tuple[int, ...], request: GenerationRequest, end_ids: frozenset[int],
                best: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
        """:func:`llama_request` on the decoders; None once their process has failed."""
        try:
            return llama_request(self.decoders, ids, request, end_ids, best)
        except PeerFailed as failure:
            self._failed(failure)
            return None

    def prompt_ids_agree(self, text: str, ids: tuple[int, ...]) -> bool | None:
        if self.decoders is None:
            return None
        try:
            return llama.prompt_ids_agree(self.decoders, text, ids)
        except PeerFailed as failure:
            self._failed(failure)
            return None

    def _failed(self, failure: PeerFailed) -> None:
        self.failure = failure
        self.close()

    def close(self) -> None:
        if self.decoders is not None:
            self.decoders.close()
            self.decoders = None


def _one_request(
    model: FastModel, tokenizer: Tokenizer, r: _Request, request: GenerationRequest, options: BenchOptions,
    beside: _Beside | None, runs: dict[str, list[dict[str, Any]]], end_ids: frozenset[int],
) -> dict[str, Any] | None:
    """One request: llama.cpp first (greedy only), every draft's engine run (appended to ``runs``),
    llama.cpp again when repeating; the llama.cpp record, or None when it did not run (or failed)."""
    best = beside.request(r.ids, request, end_ids, {}) if beside is not None and beside.running else None
    engine_plain: tuple[int, ...] = ()
    for spec_text in options.drafts:
        run, engine_plain = speculative_vs_plain_ids(model, tokenizer, spec_text, request, options)
        runs[spec_text].append({"category": r.item.category, "id": r.item.id, "prompt_tokens": len(r.ids), **run})
    if beside is None or best is None:
        return None
    if options.repeats > 1:
        best = beside.request(r.ids, request, end_ids, best)
    agree = beside.prompt_ids_agree(r.text, r.ids)
    if best is None or agree is None:
        return None
    latest = {spec_text: draft_runs[-1] for spec_text, draft_runs in runs.items()}
    return llama_record(r.item, agree, best, engine_plain, latest)


def workload_summary(runs: list[dict[str, Any]], temperatures: Sequence[float]) -> dict[str, Any]:
    """One draft's workload runs: per temperature, per category and over the categories."""
    summary = {str(t): _temperature_summary([r for r in runs if r["temperature"] == t]) for t in temperatures}
    return {"runs": runs, "by_temperature": summary,
            "all_greedy_same_tokens": all(r["same_tokens_as_plain"] for r in runs if r["temperature"] == 0.0)}


def _temperature_summary(chosen: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one temperature: geometric means per category, then over the categories."""
    categories = list(dict.fromkeys(r["category"] for r in chosen))
    per_category = {c: geomean([r["speedup"] for r in chosen if r["category"] == c]) for c in categories}
    per_category_cpu = {c: geomean([r["speedup_cpu"] for r in chosen if r["category"] == c]) for c in categories}
    return {
        "per_category_speedup_cpu": per_category_cpu,
        "geomean_speedup_cpu": geomean(list(per_category_cpu.values())),
        "per_category_speedup": per_category,
        "geomean_speedup": geomean(list(per_category.values())),
        "min_category_speedup": min(per_category.values()) if per_category else 0.0,
        "alpha": ratio_of_sums(chosen, "alpha"),
        "tokens_per_pass": geomean([r["tokens_per_pass"] for r in chosen]),
    }


def workload_llama_decoders(path: Path | None, lengths: Sequence[int], options: BenchOptions) -> "llama.Decoders | None":
    """llama.cpp's two decoders for the workload in a child process, or None (no model path, or
    llama_cpp missing); PeerFailed when the child cannot open them.

    Context: the longest prompt + answer, plus room for one cycle's prompt-lookup drafts."""
    if path is None or not lengths or not llama.available():
        return None
    n_ctx = max(lengths) + options.k + 8
    return llama.open_child(path, n_ctx, options.k, engine_threads(), options.seed)


def llama_request(decoders: "llama.Decoders | None", ids: tuple[int, ...], request: GenerationRequest,
                  end_ids: frozenset[int], best: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each llama.cpp decoder once on the request; the faster of this run and ``best`` kept."""
    if decoders is None:
        return best
    out = dict(best)
    for name in llama.WORKLOAD_DECODERS:
        run = decoders.run(name, ids, request.max_tokens, end_ids)
        if name not in out or run["tok_s"] > out[name]["tok_s"]:
            out[name] = run
    return out


def llama_record(item: "WorkloadItem", prompt_ids_agree: bool, runs: dict[str, dict[str, Any]],
                 engine_plain: tuple[int, ...], engine_runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One greedy request's llama.cpp side, the engine's rates beside it, and the same-tokens note."""
    plain_ids, lookup_ids = runs["plain"]["tokens"], runs["prompt_lookup"]["tokens"]
    return {
        "category": item.category, "id": item.id, "prompt_ids_agree": prompt_ids_agree,
        "llama_cpp": {name: {"tok_s": run["tok_s"], "generated_tokens": len(run["tokens"])} for name, run in runs.items()},
        # the engine's plain rate: the best of its plain runs of this request (one beside each draft)
        "engine": {"plain_tok_s": max((float(r["plain_tok_s"]) for r in engine_runs.values()), default=0.0),
                   "speculative_tok_s": {d: float(r["speculative_tok_s"]) for d, r in engine_runs.items()}},
        # information, not a check: two engines' greedy outputs part at near-ties of their own numerics
        "engine_plain_vs_llama_cpp_plain": llama.common_prefix(engine_plain, plain_ids),
        "llama_cpp_prompt_lookup_vs_llama_cpp_plain": llama.common_prefix(lookup_ids, plain_ids),
    }


def workload_llama_section(beside: _Beside, runs: list[dict[str, Any]], drafts: Sequence[str]) -> dict[str, Any]:
    """The workload's llama.cpp section: its runs, the ratios per category and over the categories
    (:func:`verispec.bench.llama.workload_ratios`), and the same-tokens note summed over requests;
    when llama.cpp did not run, the reason and every ratio None; when its process failed, the
    requests it finished and how it failed (``status``, ``note``, ``crash``)."""
    failed = {} if beside.failure is None else llama.crashed_section(beside.failure)
    if not beside.info:
        note = llama.NOT_INSTALLED if not llama.available() else "not run (no greedy workload request, or no model file)"
        return {"available": False, "note": note, "runs": [], "per_category": {},
                "geomean": {name: None for name in llama.workload_ratio_names(drafts)}, **failed}
    notes = [r["engine_plain_vs_llama_cpp_plain"] for r in runs]
    status = {"status": failed["status"], "note": failed["note"], "crash": failed["crash"]} if failed else {"status": "ok"}
    return {
        **beside.info, **status, "runs": runs, **llama.workload_ratios(runs, drafts),
        "same_tokens_note": {
            "first_tokens": llama.AGREEMENT_TOKENS,
            "requests": len(notes),
            "requests_all_compared_tokens_same": sum(1 for n in notes if n["same_leading_tokens"] == n["compared"]),
            "mean_same_leading_tokens": sum(n["same_leading_tokens"] for n in notes) / len(notes) if notes else None,
        },
    }
