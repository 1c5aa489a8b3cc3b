"""`verispec bench`'s run: every section measured in ONE process, on the same loaded model, in a
fixed order (see verispec/bench/__init__.py for what each section is); llama.cpp alone runs in a
child process (verispec/bench/llama_child.py), so a crash of its native code is its result only.

:func:`run_bench` is the order; each section is one function here or in its own module. The
headline model is loaded once, in the default mode (``options.weights``, auto: the int8 mode where
onnxruntime is installed, else the exact float32 mode, verispec/engine_load.py); the backend
section loads the other modes and hands back the int8 one for the speculative, llama.cpp and
(``--workload-weights int8``) workload runs (the headline model itself when it is int8); every
other model is released before the reference engine loads its own copy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from verispec.bench.backends import matmul_stream
from verispec.bench.early_exit import early_exit_section, load_calibration
from verispec.bench.kernel_info import engine_kernel
from verispec.bench.llama_section import llama_cpp_section
from verispec.bench.machine import load_average, machine_info, peak_rss_mib
from verispec.bench.options import BenchOptions
from verispec.bench.ratios import ratios
from verispec.bench.report import (
    BenchReport,
    MatmulBound,
    ModelInfo,
    PlainDecode,
    Prefill,
    ReferenceSpeed,
    Speculative,
    VerifyCost,
)
from verispec.bench.speculative import speculative_section, verify_cost
from verispec.bench.timing import best_time, decode_steps
from verispec.bench.workload import workload_section
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.engine_load import resolve_weights
from verispec.reference.calibration import numerics
from verispec.reference.errors import BenchError
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

if TYPE_CHECKING:
    from verispec.reference.calibration import Calibration
    from verispec.reference.chat import ChatFormat

BOUND_ROWS = (1, 2, 4, 5, 8)  # activation rows of the matmul-bound curve
PROSE_PROMPT = 3  # the prompt set's index of the prose prompt: plain decode, prefill, early exit, backends


@dataclass(frozen=True)
class _Loaded:
    model: FastModel
    tokenizer: Tokenizer
    chat: "ChatFormat | None"  # with a workload: the model's chat format
    load_s: float


@dataclass(frozen=True)
class _Backends:
    """The backend section and what it measured on the int8 mode (None without the section)."""

    section: dict[str, Any]
    default_backend: str | None = None
    speculative_int8: Speculative | None = None
    verify_cost_int8: VerifyCost | None = None
    llama_cpp: dict[str, Any] | None = None  # interleaved with the int8 mode's runs


def run_bench(path: Path, options: BenchOptions = BenchOptions()) -> BenchReport:  # noqa: B008 (frozen: one shared default is safe)
    """Measure every section for the model at ``path``, in the order below."""
    calibration = load_calibration(path, options)  # a wrong artifact fails before any work
    loaded = _load(path, options)
    model, tokenizer = loaded.model, loaded.tokenizer
    date, machine = time.strftime("%Y-%m-%d %H:%M:%S %Z"), machine_info()
    bound = matmul_bound(model, options.matmul_repeats)
    kernels = kernels_section(model, options)
    ids = prose_ids(tokenizer, options)
    plain = plain_decode(model, tokenizer, ids, options)
    head = _head(path, model, ids, options)
    prefill = prefill_speed(model, ids, options.prefill_tokens)
    speculative = speculative_section(model, tokenizer, options)
    verify = {_label(model): verify_cost(model, options.k)}
    backends, int8 = _backends(path, model, tokenizer, ids, options)
    if backends.verify_cost_int8 is not None:
        verify["int8/ort-q"] = backends.verify_cost_int8
    workload = _workload(path, loaded, options, int8)
    del int8  # released before the reference engine loads its own copy
    exit_model = _early_exit_model(path, model, calibration)
    plain_model = model if exit_model.weights_mode == model.weights_mode else exit_model
    early_exit = early_exit_section(calibration, exit_model, tokenizer, ids, options, plain_model=plain_model)
    del exit_model, plain_model
    reference = reference_speed(path, ids, options)
    llama_cpp = (
        backends.llama_cpp
        if backends.llama_cpp is not None
        else llama_cpp_section(path, options, tokenizer, model if model.weights_mode == "int8" else None)
    )
    report = BenchReport(
        date=date,
        model=_model_info(path, model),
        machine=machine,
        load_s=loaded.load_s,
        matmul_bound=bound,
        kernels=kernels,
        plain=plain,
        prefill=prefill,
        speculative=speculative,
        verify_cost=verify,
        backends=backends.section,
        early_exit=early_exit,
        reference=reference,
        llama_cpp=llama_cpp,
        ratios={},
        peak_rss_mib=0.0,
        default_backend=backends.default_backend,
        # the headline model in the int8 mode: its speculative section is the int8 one
        speculative_int8=backends.speculative_int8 or (speculative if model.weights_mode == "int8" else None),
        workload_engine=workload[0],
        workload=workload[1],
        workload_llama_cpp=workload[2],
        engine_kernel=engine_kernel(model),
        head=head,
    )
    machine = replace(machine, load_average_end=load_average())
    return replace(report, machine=machine, ratios=ratios(report), peak_rss_mib=peak_rss_mib())


def _load(path: Path, options: BenchOptions) -> _Loaded:
    """The headline model (the fast engine in ``options.weights``, auto: the default mode), the
    tokenizer, and (with a workload) the chat format."""
    from verispec.reference.chat import chat_format
    from verispec.reference.gguf import GGUFFile

    t0 = time.perf_counter()
    with GGUFFile.open(path) as f:
        model = FastModel.load(f, weights=resolve_weights(options.weights, arch=str(f.get("general.architecture", ""))))
        tokenizer = Tokenizer.from_gguf(f.metadata)
        chat = chat_format(f.metadata) if options.workload else None
    return _Loaded(model, tokenizer, chat, time.perf_counter() - t0)


def _head(path: Path, model: FastModel, ids: tuple[int, ...], options: BenchOptions) -> dict[str, Any] | None:
    """With ``--head sparse``: the sparse head beside the full head (verispec/bench/head.py); the
    other sections run the full head. BenchError unless the headline model is the int8 mode."""
    if options.head == "full":
        return None
    if model.weights_mode != "int8":
        raise BenchError(
            f"--head {options.head} is a head mode of the int8 engine (the headline runs {model.weights_mode})"
        )
    from verispec.bench.head import head_section

    return head_section(path, model, list(ids), options.decode_tokens, max(2, options.repeats))


def _label(model: FastModel) -> str:
    return f"{model.weights_mode}/{model.backend}"


def _model_info(path: Path, model: FastModel) -> ModelInfo:
    cfg = model.config
    return ModelInfo(str(path), cfg.arch, cfg.n_layer, cfg.n_embd, cfg.n_vocab)


def matmul_bound(model: FastModel, repeats: int) -> MatmulBound:
    """The 1-row matmul stream (best of ``repeats``) and the k-row streams relative to it."""
    bound_s = best_time(matmul_stream(model, 1), repeats)
    rows = {str(r): best_time(matmul_stream(model, r), max(1, repeats // 2)) / bound_s for r in BOUND_ROWS}
    return MatmulBound(bound_s * 1000, 1.0 / bound_s, rows)


def kernels_section(model: FastModel, options: BenchOptions) -> list[dict[str, Any]]:
    """The OpenBLAS kernel comparison on the model's matrix shapes (child processes), or []."""
    if not options.kernels:
        return []
    from verispec.bench.kernels import compare

    return compare(model.store.matmul_shapes(model.config), repeats=max(1, options.matmul_repeats // 2))


def prose_ids(tokenizer: Tokenizer, options: BenchOptions) -> tuple[int, ...]:
    """The prose prompt's ids (the last prompt when the set is shorter)."""
    prose = options.prompts[min(PROSE_PROMPT, len(options.prompts) - 1)][1]
    return tuple(tokenizer.encode(prose, add_bos=tokenizer.add_bos))


def plain_decode(model: FastModel, tokenizer: Tokenizer, ids: tuple[int, ...], options: BenchOptions) -> PlainDecode:
    """Greedy decode: a whole request end to end, then each step timed alone."""
    request = GenerationRequest(
        ids, params=SamplingParams(temperature=0.0), max_tokens=options.decode_tokens, seed=options.seed
    )
    plain = fast_generate(model, tokenizer, request)
    steps = decode_steps(model, list(ids), options.decode_tokens)
    best, median = min(steps), float(np.median(steps))
    return PlainDecode(
        tok_s=1.0 / best,  # least-disturbed step, comparable with the best-of matmul bound
        tok_s_median_step=1.0 / median,
        tok_s_end_to_end=plain.stats.tokens_per_s,
        ms_per_token=best * 1000,
        tokens=plain.stats.generated_tokens,
    )


def prefill_speed(model: FastModel, ids: tuple[int, ...], tokens: int) -> Prefill:
    """One forward over ``tokens`` prompt tokens (``ids`` repeated), the head on the last row."""
    prompt_ids = (list(ids) * (tokens // max(1, len(ids)) + 1))[:tokens]
    seconds = best_time(lambda: model.forward(prompt_ids, model.new_cache(len(prompt_ids)), last_only=True), 1)
    return Prefill(len(prompt_ids), len(prompt_ids) / seconds)


def _backends(
    path: Path, model: FastModel, tokenizer: Tokenizer, ids: tuple[int, ...], options: BenchOptions
) -> tuple[_Backends, FastModel | None]:
    """Every backend / weights mode (verispec/bench/backends.py) and, on the int8 mode, the
    speculative section, its verify cost and llama.cpp beside it; the int8 model when the
    workload runs on it (kept, not loaded again), else None."""
    if not options.backends:
        return _Backends({"modes": {}, "note": "skipped (--no-backends)"}), None
    from verispec.bench.backends import measure

    section, modes = measure(
        path,
        list(ids),
        options.decode_tokens,
        max(2, options.repeats),
        decode_steps,
        threads=options.kernels,
        rss=options.rss_children,
        loaded={_label(model): model},
    )
    int8 = modes.get("int8/ort-q")
    if int8 is None:
        return _Backends(section, model.backend), None
    if int8 is model:  # the headline model is the int8 mode: its sections are already measured
        return _Backends(section, model.backend, llama_cpp=llama_cpp_section(path, options, tokenizer, int8)), None
    measured = _Backends(
        section,
        model.backend,
        speculative_section(int8, tokenizer, options),
        verify_cost(int8, options.k),
        llama_cpp_section(path, options, tokenizer, int8),
    )
    keep = options.workload and options.workload_weights == "int8"
    return measured, int8 if keep else None


def _workload(
    path: Path, loaded: _Loaded, options: BenchOptions, int8: FastModel | None
) -> tuple[str | None, dict[str, Any] | None, dict[str, Any] | None]:
    """(``workload_engine``, ``workload``, ``workload_llama_cpp``), all None without a workload.

    The workload's engine: the model loaded first, or the int8 mode (from the backend section when
    it ran, else loaded here)."""
    if loaded.chat is None:
        return None, None, None
    wanted = (
        loaded.model.weights_mode if options.workload_weights == "auto" else resolve_weights(options.workload_weights)
    )
    model = (
        loaded.model
        if wanted == loaded.model.weights_mode
        else (int8 if int8 is not None and wanted == "int8" else FastModel.load(path, weights=wanted))
    )
    workload, beside = workload_section(model, loaded.tokenizer, loaded.chat, options, path)
    return _label(model), workload, beside


def _early_exit_model(path: Path, model: FastModel, calibration: "Calibration | None") -> FastModel:
    """The model early exit is measured on: the headline one's mode when the calibration was made
    on its numerics, else the calibration's own mode (a certificate holds for the numerics it was
    measured on); with fused int8 layers loaded again with the chain cut at the candidate depths,
    as the serve loader loads it (``pass_boundaries``: the same bits, no link half computed and
    dropped where a pass stops), while plain decoding keeps the headline model's uncut chain."""
    if calibration is None:
        return model
    weights = (
        model.weights_mode if numerics(calibration.weights) == numerics(model.weights_mode) else calibration.weights
    )
    if weights == model.weights_mode and not model.fused:
        return model
    from verispec.reference.early_exit import exit_depths

    return FastModel.load(path, weights=weights, pass_boundaries=exit_depths(calibration, calibration.gate))


def reference_speed(path: Path, ids: tuple[int, ...], options: BenchOptions) -> ReferenceSpeed:
    """The reference engine's decode steps on a short run (a second copy of the weights, released after)."""
    if not options.reference:
        return ReferenceSpeed(None, note="skipped")
    ref_model = Model.load(path)
    steps = decode_steps(ref_model, list(ids), options.reference_tokens)
    del ref_model
    return ReferenceSpeed(1.0 / min(steps), 1.0 / float(np.median(steps)), len(steps))
