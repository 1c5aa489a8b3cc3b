"""The bench's workload section (``--workload``): the chat requests of :mod:`verispec.workload`
through :func:`verispec.bench.speculative.engine_round` (plain, then speculative) per draft source,
and llama.cpp beside them.

``workload``: per draft, ``runs`` (every request greedy, and at ``sampled_temperature`` unless
``--workload-greedy-only``: category, id, prompt_tokens, decoded_tokens and the keys of
:func:`verispec.bench.speculative.rounds_summary`),
``by_temperature`` (per category and over the categories: the geometric mean of the speedups,
wall and CPU, each category weighing the same however many requests it has; alpha pooled over
generated tokens) and ``all_greedy_same_tokens``.

The same work on every side. Each request is decoded by every side (the engine's plain and
speculative runs at each temperature, llama.cpp plain and prompt lookup) to the SAME number of
tokens, from the same prompt ids, with end of generation ignored on every side (the engine's
request sets ``ignore_eog``; llama-cpp-python's ``generate`` never stops by itself). Which number
(``--workload-length``, recorded as ``length``):

- ``answer`` (the default): the length of the engine's own plain greedy answer to the request (one
  untimed decode that ends at the engine's end ids or ``max_tokens``; the end id counted). The
  engine's greedy runs then decode exactly that answer, so the time is the time of the answer;
  llama.cpp decodes its own greedy answer to the same length (past its own end of turn when it
  ended sooner, cut when it would go on). A fixed ``max_tokens`` with end of generation ignored
  instead times the text after the end of turn (the model opening new turns, often repeating
  itself, which flatters every lookup draft), and cutting each side to the common length after the
  fact needs a clock per token on every side, which speculation (several tokens a cycle) and
  llama.cpp's lookup do not give.
- ``max``: the request's ``max_tokens``.

The sampled runs (T = ``sampled_temperature``) decode the same length as the greedy ones.

``workload_llama_cpp``: with the model file and ``llama_cpp`` importable, llama.cpp plain and prompt
lookup on the same greedy requests (:class:`verispec.bench.llama.Decoders`, in a child process),
interleaved request by request with the engine's runs: each of ``repeats`` rounds runs llama.cpp
plain, llama.cpp prompt lookup, then each draft's engine plain and speculative run; each side keeps
its best (least-time) run, so both sides see the same minutes of load. Per category and over the
categories (geometric means, each category weighing the same): every draft over llama.cpp plain and
over the engine's plain, the engine's plain over llama.cpp plain, llama.cpp lookup over llama.cpp
plain; ``all_sides_same_length`` (every side decoded ``decoded_tokens`` on every request) and the
same-tokens note (how far the engine's and llama.cpp's greedy outputs agree, llama.cpp lookup's
against its plain, the engine's speculative against its plain). Otherwise why it is missing; when
llama.cpp's process dies or fails part way, the requests it finished, and ``status`` / ``note`` /
``crash`` saying how it ended (the engine's runs go on without it).
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
from verispec.bench.speculative import Round, engine_round, rounds_summary
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference.errors import PeerFailed
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
    model: FastModel,
    tokenizer: Tokenizer,
    chat: "ChatFormat",
    options: BenchOptions,
    path: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``workload``, ``workload_llama_cpp``) for ``options.workload`` (see the module docstring)."""
    end = tokenizer.token_id(chat.end_of_turn)
    stop_ids: frozenset[int] = frozenset() if end is None else frozenset({end})
    temperatures = (0.0, options.sampled_temperature) if options.workload_sampled else (0.0,)
    requests = [
        _Request(item, text, tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True)))
        for item, text in ((item, item.prompt_text(chat)) for item in options.workload)
    ]
    beside = _Beside(path, [len(r.ids) + r.item.max_tokens for r in requests], options)
    runs: dict[str, list[dict[str, Any]]] = {spec_text: [] for spec_text in options.drafts}
    llama_runs: list[dict[str, Any]] = []
    lengths: dict[str, int] = {}
    try:
        for temperature in temperatures:
            for r in requests:
                if r.item.id not in lengths:
                    lengths[r.item.id] = request_length(model, tokenizer, r, stop_ids, options)
                request = GenerationRequest(
                    r.ids,
                    params=SamplingParams(temperature=temperature),
                    max_tokens=lengths[r.item.id],
                    stop_ids=stop_ids,
                    seed=options.seed,
                    ignore_eog=True,
                )
                record = _one_request(
                    model, tokenizer, r, request, options, beside if temperature == 0.0 else None, runs
                )
                if record is not None:
                    llama_runs.append(record)
    finally:
        beside.close()
    out = {spec_text: workload_summary(draft_runs, temperatures) for spec_text, draft_runs in runs.items()}
    return out, workload_llama_section(beside, llama_runs, options)


def request_length(
    model: FastModel, tokenizer: Tokenizer, r: _Request, stop_ids: frozenset[int], options: BenchOptions
) -> int:
    """How many tokens every side decodes for this request (``options.workload_length``):
    ``answer``, the length of the engine's plain greedy answer (ended by its end-of-generation
    ids or the request's ``max_tokens``; one untimed decode); ``max``, the request's ``max_tokens``."""
    if options.workload_length == "max":
        return r.item.max_tokens
    natural = GenerationRequest(
        r.ids,
        params=SamplingParams(temperature=0.0),
        max_tokens=r.item.max_tokens,
        stop_ids=stop_ids,
        seed=options.seed,
    )
    return answer_length(model, tokenizer, natural)


def answer_length(model: FastModel, tokenizer: Tokenizer, request: GenerationRequest) -> int:
    """The generated-token count of the engine's plain decode of ``request`` (its end id counted)."""
    return int(fast_generate(model, tokenizer, request).stats.generated_tokens)


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

    def request(
        self, ids: tuple[int, ...], request: GenerationRequest, best: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]] | None:
        """:func:`llama_request` on the decoders; None once their process has failed."""
        try:
            return llama_request(self.decoders, ids, request, best)
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
    model: FastModel,
    tokenizer: Tokenizer,
    r: _Request,
    request: GenerationRequest,
    options: BenchOptions,
    beside: _Beside | None,
    runs: dict[str, list[dict[str, Any]]],
) -> dict[str, Any] | None:
    """One request, ``options.repeats`` rounds; each round runs llama.cpp plain and prompt lookup
    (greedy requests only), then each draft's engine round (plain, then speculative); each side
    keeps its best run. The drafts' summaries are appended to ``runs``; the llama.cpp record is
    returned, or None when llama.cpp did not run (or its process failed)."""
    rounds: dict[str, list[Round]] = {spec_text: [] for spec_text in options.drafts}
    best: dict[str, dict[str, Any]] | None = {} if beside is not None and beside.running else None
    for _ in range(max(1, options.repeats)):
        if best is not None and beside is not None:
            best = beside.request(r.ids, request, best)
        for spec_text in options.drafts:
            rounds[spec_text].append(engine_round(model, tokenizer, spec_text, request, options))
    engine_plain: tuple[int, ...] = ()
    latest: dict[str, dict[str, Any]] = {}
    for spec_text, draft_rounds in rounds.items():
        run, engine_plain = rounds_summary(draft_rounds)
        latest[spec_text] = run
        runs[spec_text].append(
            {
                "category": r.item.category,
                "id": r.item.id,
                "prompt_tokens": len(r.ids),
                "decoded_tokens": request.max_tokens,
                **run,
            }
        )
    if beside is None or best is None:
        return None
    agree = beside.prompt_ids_agree(r.text, r.ids)
    if agree is None:
        return None
    return llama_record(r.item, agree, best, engine_plain, latest, request.max_tokens)


def workload_summary(runs: list[dict[str, Any]], temperatures: Sequence[float]) -> dict[str, Any]:
    """One draft's workload runs: per temperature, per category and over the categories."""
    summary = {str(t): _temperature_summary([r for r in runs if r["temperature"] == t]) for t in temperatures}
    return {
        "runs": runs,
        "by_temperature": summary,
        "all_greedy_same_tokens": all(r["same_tokens_as_plain"] for r in runs if r["temperature"] == 0.0),
    }


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


def workload_llama_decoders(
    path: Path | None, lengths: Sequence[int], options: BenchOptions
) -> "llama.Decoders | None":
    """llama.cpp's two decoders for the workload in a child process, or None (no model path, or
    llama_cpp missing); PeerFailed when the child cannot open them.

    Context: the longest prompt + answer, plus room for one cycle's prompt-lookup drafts."""
    if path is None or not lengths or not llama.available():
        return None
    n_ctx = max(lengths) + options.k + 8
    return llama.open_child(path, n_ctx, options.k, engine_threads(), options.seed)


def llama_request(
    decoders: "llama.Decoders | None", ids: tuple[int, ...], request: GenerationRequest, best: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each llama.cpp decoder once on the request, exactly ``request.max_tokens`` tokens (its end of
    generation ignored, as the engine's request ignores its own); the faster of this run and
    ``best`` kept."""
    if decoders is None:
        return best
    out = dict(best)
    for name in llama.WORKLOAD_DECODERS:
        run = decoders.run(name, ids, request.max_tokens, frozenset())
        if name not in out or run["tok_s"] > out[name]["tok_s"]:
            out[name] = run
    return out


def llama_record(
    item: "WorkloadItem",
    prompt_ids_agree: bool,
    runs: dict[str, dict[str, Any]],
    engine_plain: tuple[int, ...],
    engine_runs: dict[str, dict[str, Any]],
    length: int,
) -> dict[str, Any]:
    """One greedy request's llama.cpp side, the engine's rates beside it, the token count of every
    side (``same_length``: all of them decoded ``length``), and the same-tokens note."""
    plain_ids, lookup_ids = runs["plain"]["tokens"], runs["prompt_lookup"]["tokens"]
    counts = (
        [len(run["tokens"]) for run in runs.values()]
        + [len(engine_plain)]
        + [int(r["generated_tokens"]) for r in engine_runs.values()]
    )
    return {
        "category": item.category,
        "id": item.id,
        "prompt_ids_agree": prompt_ids_agree,
        "decoded_tokens": length,
        "same_length": all(c == length for c in counts),
        "llama_cpp": {
            name: {"tok_s": run["tok_s"], "generated_tokens": len(run["tokens"])} for name, run in runs.items()
        },
        # the engine's plain rate: the best of its plain runs of this request (one beside each draft)
        "engine": {
            "plain_tok_s": max((float(r["plain_tok_s"]) for r in engine_runs.values()), default=0.0),
            "speculative_tok_s": {d: float(r["speculative_tok_s"]) for d, r in engine_runs.items()},
            "same_tokens_as_plain": {d: r["same_tokens_as_plain"] for d, r in engine_runs.items()},
        },
        # information, not a check: two engines' greedy outputs part at near-ties of their own numerics
        "engine_plain_vs_llama_cpp_plain": llama.common_prefix(engine_plain, plain_ids),
        "llama_cpp_prompt_lookup_vs_llama_cpp_plain": llama.common_prefix(lookup_ids, plain_ids),
    }


LENGTH_NOTES = {
    "answer": "every side decodes exactly the length of the engine's plain greedy answer (its end id counted), "
    "end of generation ignored on every side",
    "max": "every side decodes exactly the request's max_tokens, end of generation ignored on every side "
    "(the text after the end of turn is timed too)",
}


def workload_llama_section(beside: _Beside, runs: list[dict[str, Any]], options: BenchOptions) -> dict[str, Any]:
    """The workload's llama.cpp section: its runs, the ratios per category and over the categories
    (:func:`verispec.bench.llama.workload_ratios`), the length rule, and the same-tokens note
    summed over requests; when llama.cpp did not run, the reason and every ratio None; when its
    process failed, the requests it finished and how it failed (``status``, ``note``, ``crash``)."""
    drafts = options.drafts
    failed = {} if beside.failure is None else llama.crashed_section(beside.failure)
    length = {
        "length": options.workload_length,
        "length_note": LENGTH_NOTES[options.workload_length],
        "repeats": max(1, options.repeats),
    }
    if not beside.info:
        note = (
            llama.NOT_INSTALLED if not llama.available() else "not run (no greedy workload request, or no model file)"
        )
        return {
            "available": False,
            "note": note,
            "runs": [],
            "per_category": {},
            **length,
            "geomean": {name: None for name in llama.workload_ratio_names(drafts)},
            **failed,
        }
    notes = [r["engine_plain_vs_llama_cpp_plain"] for r in runs]
    lookup = [r["llama_cpp_prompt_lookup_vs_llama_cpp_plain"] for r in runs]
    status = (
        {"status": failed["status"], "note": failed["note"], "crash": failed["crash"]} if failed else {"status": "ok"}
    )
    return {
        **beside.info,
        **status,
        **length,
        "runs": runs,
        **llama.workload_ratios(runs, drafts),
        "all_sides_same_length": all(r["same_length"] for r in runs),
        "same_tokens_note": {
            "first_tokens": llama.AGREEMENT_TOKENS,
            "requests": len(notes),
            "requests_all_compared_tokens_same": _all_same(notes),
            "mean_same_leading_tokens": sum(n["same_leading_tokens"] for n in notes) / len(notes) if notes else None,
            "llama_cpp_lookup_vs_plain_requests_all_same": _all_same(lookup),
            "engine_speculative_same_tokens_as_plain": {
                d: sum(1 for r in runs if r["engine"]["same_tokens_as_plain"].get(d) is True) for d in drafts
            },
        },
    }


def _all_same(notes: Sequence[dict[str, int]]) -> int:
    return sum(1 for n in notes if n["same_leading_tokens"] == n["compared"])
