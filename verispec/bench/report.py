"""`verispec bench`'s report as types: what one run measured, and its JSON.

:class:`BenchReport` is the run; :meth:`BenchReport.as_json` is the object ``verispec bench
--json`` prints and :meth:`BenchReport.from_json` reads one back (a saved measurement, e.g.
lab/measurements/bench_*.json), checking every typed field (BenchReportError names the first bad
one). The JSON keys and values are those the bench wrote before the report was typed, plus
``schema_version``; a saved report without that field has this layout (version 1), and
``from_json(r).as_json()`` gives ``r`` back key for key and number for number (tested on every
saved measurement).

Typed here: the sections with one fixed layout (model, machine, matmul bound, plain decode,
prefill, reference, verify cost, the speculative sections and their runs). The sections whose
layout depends on what the machine has (``kernels``, ``backends``, ``llama_cpp``, ``early_exit``,
``workload``, ``workload_llama_cpp``) stay JSON objects, checked to be objects; their keys are
documented by the module that measures them (kernels, backends, llama, early_exit, workload).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from verispec.reference.errors import BenchReportError as BenchReportError

# The layout of BenchReport.as_json; a saved report without the field is version 1. Version 2 adds
# machine.isa, machine.load_average_start / load_average_end, engine_kernel, and in the llama_cpp
# sections status, system_info, generated_tokens, eog and (a failed peer) crash.
SCHEMA_VERSION = 2
JSONObject = dict[str, Any]


# -- typed reads of one JSON object ----------------------------------------------------------------


def _object(value: Any, where: str) -> JSONObject:
    if not isinstance(value, dict):
        raise BenchReportError(f"bench report: {where} must be an object, got {type(value).__name__}")
    return value


def _get(obj: JSONObject, key: str, where: str) -> Any:
    if key not in obj:
        raise BenchReportError(f"bench report: {where} has no {key!r}")
    return obj[key]


def _as_number(value: Any, where: str) -> float:
    """A JSON number, kept as it was read (an int stays an int: the JSON text round-trips)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BenchReportError(f"bench report: {where} must be a number, got {value!r}")
    return value


def _number(obj: JSONObject, key: str, where: str) -> float:
    return _as_number(_get(obj, key, where), f"{where}.{key}")


def _optional_number(obj: JSONObject, key: str, where: str) -> float | None:
    return None if obj.get(key) is None else _number(obj, key, where)


def _integer(obj: JSONObject, key: str, where: str) -> int:
    value = _get(obj, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BenchReportError(f"bench report: {where}.{key} must be an integer, got {value!r}")
    return value


def _optional_integer(obj: JSONObject, key: str, where: str) -> int | None:
    return None if obj.get(key) is None else _integer(obj, key, where)


def _text(obj: JSONObject, key: str, where: str) -> str:
    value = _get(obj, key, where)
    if not isinstance(value, str):
        raise BenchReportError(f"bench report: {where}.{key} must be a string, got {value!r}")
    return value


def _optional_text(obj: JSONObject, key: str, where: str) -> str | None:
    return None if obj.get(key) is None else _text(obj, key, where)


def _optional_bool(obj: JSONObject, key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise BenchReportError(f"bench report: {where}.{key} must be true, false or null, got {value!r}")
    return value


def _optional_texts(obj: JSONObject, key: str, where: str) -> list[str] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BenchReportError(f"bench report: {where}.{key} must be a list of strings, got {value!r}")
    return value


def _optional_numbers(obj: JSONObject, key: str, where: str) -> list[float] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise BenchReportError(f"bench report: {where}.{key} must be a list of numbers, got {value!r}")
    return [_as_number(v, f"{where}.{key}[{i}]") for i, v in enumerate(value)]


def _numbers_by_name(obj: JSONObject, key: str, where: str) -> dict[str, float]:
    table = _object(_get(obj, key, where), f"{where}.{key}")
    return {name: _number(table, name, f"{where}.{key}") for name in table}


def _section(obj: JSONObject, key: str, where: str = "report") -> JSONObject:
    return _object(_get(obj, key, where), f"{where}.{key}")


def _optional_section(obj: JSONObject, key: str) -> JSONObject | None:
    return None if obj.get(key) is None else _section(obj, key)


# -- the fixed sections ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    """The measured file and the shape that sets its cost."""

    path: str
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int

    @classmethod
    def from_json(cls, obj: JSONObject) -> ModelInfo:
        w = "model"
        return cls(
            _text(obj, "path", w),
            _text(obj, "arch", w),
            _integer(obj, "n_layer", w),
            _integer(obj, "n_embd", w),
            _integer(obj, "n_vocab", w),
        )


@dataclass(frozen=True)
class MachineInfo:
    """Where it ran: CPU, cores, the BLAS libraries as threadpoolctl sees them, versions; from
    schema version 2 the CPU's vector instruction sets and the load average at the start and the
    end of the run (None in older reports, and then left out of the JSON)."""

    cpu: str
    cores: int | None
    blas: list[JSONObject]  # one object per library: internal_api, version, architecture, num_threads, ...
    openblas_coretype: str | None
    python: str
    numpy: str
    onnxruntime: str | None
    isa: list[str] | None = None  # /proc/cpuinfo flags among verispec.bench.machine.ISA_FLAGS
    load_average_start: list[float] | None = None  # 1, 5, 15 minutes
    load_average_end: list[float] | None = None

    def as_json(self) -> JSONObject:
        later = ("isa", "load_average_start", "load_average_end")
        return {k: v for k, v in _fields_of(self).items() if k not in later or v is not None}

    @classmethod
    def from_json(cls, obj: JSONObject) -> MachineInfo:
        w = "machine"
        blas = _get(obj, "blas", w)
        if not isinstance(blas, list):
            raise BenchReportError(f"bench report: {w}.blas must be a list, got {blas!r}")
        return cls(
            _text(obj, "cpu", w),
            _optional_integer(obj, "cores", w),
            [_object(b, f"{w}.blas[{i}]") for i, b in enumerate(blas)],
            _optional_text(obj, "openblas_coretype", w),
            _text(obj, "python", w),
            _text(obj, "numpy", w),
            _optional_text(obj, "onnxruntime", w),
            _optional_texts(obj, "isa", w),
            _optional_numbers(obj, "load_average_start", w),
            _optional_numbers(obj, "load_average_end", w),
        )


@dataclass(frozen=True)
class MatmulBound:
    """One activation row through every matrix of a decode step: the step's cost floor."""

    ms_per_token: float
    tok_s: float
    rows_cost_relative: dict[str, float]  # rows -> (pass with that many rows) / (1-row pass)

    @classmethod
    def from_json(cls, obj: JSONObject) -> MatmulBound:
        w = "matmul_bound"
        return cls(
            _number(obj, "ms_per_token", w), _number(obj, "tok_s", w), _numbers_by_name(obj, "rows_cost_relative", w)
        )


@dataclass(frozen=True)
class PlainDecode:
    """Greedy decoding on the loaded engine: best and median step, and end to end."""

    tok_s: float  # 1 / the least-disturbed step (comparable with the best-of bound)
    tok_s_median_step: float
    tok_s_end_to_end: float  # generated tokens / wall time of a whole request
    ms_per_token: float
    tokens: int

    @classmethod
    def from_json(cls, obj: JSONObject) -> PlainDecode:
        w = "plain"
        return cls(
            _number(obj, "tok_s", w),
            _number(obj, "tok_s_median_step", w),
            _number(obj, "tok_s_end_to_end", w),
            _number(obj, "ms_per_token", w),
            _integer(obj, "tokens", w),
        )


@dataclass(frozen=True)
class Prefill:
    """One forward over a prompt of ``tokens`` tokens (the head on the last row)."""

    tokens: int
    tok_s: float

    @classmethod
    def from_json(cls, obj: JSONObject) -> Prefill:
        return cls(_integer(obj, "tokens", "prefill"), _number(obj, "tok_s", "prefill"))


@dataclass(frozen=True)
class ReferenceSpeed:
    """The reference engine's decode steps, or why they were not measured (``tok_s`` None)."""

    tok_s: float | None
    tok_s_median_step: float | None = None
    tokens: int | None = None
    note: str | None = None

    def as_json(self) -> JSONObject:
        """``tok_s`` always (null when skipped); the other fields when there is one."""
        return {"tok_s": self.tok_s, **{k: v for k, v in _fields_of(self).items() if k != "tok_s" and v is not None}}

    @classmethod
    def from_json(cls, obj: JSONObject) -> ReferenceSpeed:
        w = "reference"
        _get(obj, "tok_s", w)
        return cls(
            _optional_number(obj, "tok_s", w),
            _optional_number(obj, "tok_s_median_step", w),
            _optional_integer(obj, "tokens", w),
            _optional_text(obj, "note", w),
        )


@dataclass(frozen=True)
class VerifyCost:
    """The verify-cost curve ``--adaptive`` caps k with (engine/verify_cost.py) and the caps it gives."""

    rows_cost_relative: dict[str, float]  # rows -> c(rows), c(1) = 1
    k_cap_at_alpha: dict[str, int]  # acceptance rate -> the largest k worth drafting

    @classmethod
    def from_json(cls, obj: JSONObject, where: str) -> VerifyCost:
        caps = _section(obj, "k_cap_at_alpha", where)
        return cls(
            _numbers_by_name(obj, "rows_cost_relative", where),
            {a: _integer(caps, a, f"{where}.k_cap_at_alpha") for a in caps},
        )


@dataclass(frozen=True)
class SpeculativeRun:
    """One request decoded plain and speculatively (alternating, best of each): speedup and evidence."""

    prompt: str  # the prompt kind (chat, code, structured, prose, repetitive)
    temperature: float
    plain_tok_s: float
    speculative_tok_s: float
    speedup: float  # speculative_tok_s / plain_tok_s (wall time)
    speedup_cpu: float  # the same in process CPU time per token
    alpha: float  # acceptance rate
    tokens_per_pass: float
    per_position_acceptance: list[float]
    tree_shape: JSONObject | None  # token-tree drafts: nodes, depth, width per cycle
    generated_tokens: int
    same_tokens_as_plain: bool | None  # greedy: lossless means the same tokens; sampled: None

    @classmethod
    def from_json(cls, obj: JSONObject, where: str) -> SpeculativeRun:
        acceptance = _get(obj, "per_position_acceptance", where)
        if not isinstance(acceptance, list):
            raise BenchReportError(f"bench report: {where}.per_position_acceptance must be a list")
        tree = obj.get("tree_shape")
        _get(obj, "tree_shape", where)
        return cls(
            _text(obj, "prompt", where),
            _number(obj, "temperature", where),
            _number(obj, "plain_tok_s", where),
            _number(obj, "speculative_tok_s", where),
            _number(obj, "speedup", where),
            _number(obj, "speedup_cpu", where),
            _number(obj, "alpha", where),
            _number(obj, "tokens_per_pass", where),
            [_as_number(a, f"{where}.per_position_acceptance[{i}]") for i, a in enumerate(acceptance)],
            None if tree is None else _object(tree, f"{where}.tree_shape"),
            _integer(obj, "generated_tokens", where),
            _optional_bool(obj, "same_tokens_as_plain", where),
        )


@dataclass(frozen=True)
class SpeculativeSummary:
    """One draft source over the prompt set: its runs and their geometric means."""

    runs: list[SpeculativeRun]
    geomean_speedup: float  # greedy runs
    min_speedup: float
    structured_geomean_speedup: float  # greedy runs on the structured and repetitive prompts
    sampled_speedup: float  # the sampled runs

    def as_json(self) -> JSONObject:
        return {
            "runs": [_fields_of(r) for r in self.runs],
            **{k: v for k, v in _fields_of(self).items() if k != "runs"},
        }

    @classmethod
    def from_json(cls, obj: JSONObject, where: str) -> SpeculativeSummary:
        runs = _get(obj, "runs", where)
        if not isinstance(runs, list):
            raise BenchReportError(f"bench report: {where}.runs must be a list")
        return cls(
            [
                SpeculativeRun.from_json(_object(r, f"{where}.runs[{i}]"), f"{where}.runs[{i}]")
                for i, r in enumerate(runs)
            ],
            _number(obj, "geomean_speedup", where),
            _number(obj, "min_speedup", where),
            _number(obj, "structured_geomean_speedup", where),
            _number(obj, "sampled_speedup", where),
        )


# draft spec -> its summary, or a one-line reason the section could not run
Speculative = dict[str, SpeculativeSummary | str]


def _speculative_from_json(obj: JSONObject, where: str) -> Speculative:
    return {
        name: entry
        if isinstance(entry, str)
        else SpeculativeSummary.from_json(_object(entry, f"{where}.{name}"), f"{where}.{name}")
        for name, entry in obj.items()
    }


def _speculative_as_json(section: Speculative) -> JSONObject:
    return {name: entry if isinstance(entry, str) else entry.as_json() for name, entry in section.items()}


def _fields_of(obj: Any) -> JSONObject:
    """A flat dataclass's fields, in declaration order (no deep copy: the JSON sections are shared)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


# -- the run -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchReport:
    """Everything one ``verispec bench`` run measured (see verispec/bench/__init__.py)."""

    date: str
    model: ModelInfo
    machine: MachineInfo
    load_s: float
    matmul_bound: MatmulBound
    kernels: list[JSONObject]  # per OpenBLAS coretype: kernel, ms_by_rows (verispec/bench/kernels.py); [] when skipped
    plain: PlainDecode
    prefill: Prefill
    speculative: Speculative
    verify_cost: dict[str, VerifyCost]  # mode label -> curve
    backends: JSONObject  # verispec/bench/backends.py: modes, unavailable, rows, threads_2_over_1, rss
    early_exit: JSONObject  # verispec/bench/early_exit.py: available, and the run or a note
    reference: ReferenceSpeed
    llama_cpp: JSONObject  # verispec/bench/llama.py: available, plain, prompt_lookup, ratios' inputs
    ratios: dict[str, float | None]  # every ratio of this run (verispec/bench/ratios.py); None: a side not measured
    peak_rss_mib: float
    default_backend: str | None = None  # with the backend section: the loaded model's backend
    speculative_int8: Speculative | None = None  # with the backend section: the speculative section on int8
    workload_engine: str | None = None  # with --workload: the mode label the workload ran on
    workload: JSONObject | None = (
        None  # with --workload: per draft, runs and by_temperature (verispec/bench/workload.py)
    )
    workload_llama_cpp: JSONObject | None = None  # with --workload: llama.cpp beside it, or why not
    engine_kernel: JSONObject | None = None  # version 2: the headline model's kernels (verispec/bench/kernel_info.py)
    head: JSONObject | None = None  # with --head sparse: sparse beside full head (verispec/bench/head.py)
    plot: str | None = None  # with --plot: the PNG written
    schema_version: int = SCHEMA_VERSION

    def as_json(self) -> JSONObject:
        """The JSON object ``verispec bench --json`` prints (optional sections only when measured)."""
        out: JSONObject = {"schema_version": self.schema_version}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "schema_version" or (value is None and f.default is None):
                continue
            out[f.name] = _section_as_json(f.name, value)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> BenchReport:
        """The report in ``obj`` (parsed JSON); BenchReportError naming the first bad field."""
        report = _object(obj, "the report")
        version = report.get("schema_version", 1)  # reports saved before the field: this layout
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
            raise BenchReportError(
                f"bench report: schema_version {version!r} is not one this verispec reads "
                f"(1..{SCHEMA_VERSION}; a newer verispec wrote it?)"
            )
        kernels = _get(report, "kernels", "report")
        if not isinstance(kernels, list):
            raise BenchReportError("bench report: report.kernels must be a list")
        verify = _section(report, "verify_cost")
        speculative_int8 = _optional_section(report, "speculative_int8")
        if version >= 2:
            _check_version_2(report)
        return cls(
            date=_text(report, "date", "report"),
            model=ModelInfo.from_json(_section(report, "model")),
            machine=MachineInfo.from_json(_section(report, "machine")),
            load_s=_number(report, "load_s", "report"),
            matmul_bound=MatmulBound.from_json(_section(report, "matmul_bound")),
            kernels=[_object(k, f"report.kernels[{i}]") for i, k in enumerate(kernels)],
            plain=PlainDecode.from_json(_section(report, "plain")),
            prefill=Prefill.from_json(_section(report, "prefill")),
            speculative=_speculative_from_json(_section(report, "speculative"), "speculative"),
            verify_cost={
                m: VerifyCost.from_json(_section(verify, m, "verify_cost"), f"verify_cost.{m}") for m in verify
            },
            backends=_section(report, "backends"),
            early_exit=_section(report, "early_exit"),
            reference=ReferenceSpeed.from_json(_section(report, "reference")),
            llama_cpp=_section(report, "llama_cpp"),
            ratios=_ratios_from_json(_section(report, "ratios")),
            peak_rss_mib=_number(report, "peak_rss_mib", "report"),
            default_backend=_optional_text(report, "default_backend", "report"),
            speculative_int8=None
            if speculative_int8 is None
            else _speculative_from_json(speculative_int8, "speculative_int8"),
            workload_engine=_optional_text(report, "workload_engine", "report"),
            workload=_optional_section(report, "workload"),
            workload_llama_cpp=_optional_section(report, "workload_llama_cpp"),
            engine_kernel=_optional_section(report, "engine_kernel"),
            head=_optional_section(report, "head"),
            plot=_optional_text(report, "plot", "report"),
            schema_version=version,
        )


def _check_version_2(report: JSONObject) -> None:
    """What a version-2 report always has: the CPU's instruction sets, the headline model's
    kernels, and llama.cpp's status (ok, not installed, crashed, timed out, failed)."""
    isa = _section(report, "machine").get("isa")
    if not isinstance(isa, list):
        raise BenchReportError("bench report: a version-2 report's machine has no 'isa' list")
    _section(report, "engine_kernel")
    status = _section(report, "llama_cpp").get("status")
    if not isinstance(status, str):
        raise BenchReportError("bench report: a version-2 report's llama_cpp has no 'status'")


def _ratios_from_json(obj: JSONObject) -> dict[str, float | None]:
    return {name: _optional_number(obj, name, "ratios") for name in obj}


def _section_as_json(name: str, value: Any) -> Any:
    """One top-level field as JSON: typed sections through their own layout, JSON ones as they are."""
    if name in ("speculative", "speculative_int8"):
        return _speculative_as_json(value)
    if name == "verify_cost":
        return {mode: _fields_of(curve) for mode, curve in value.items()}
    if isinstance(value, (ReferenceSpeed, MachineInfo)):
        return value.as_json()
    if isinstance(value, (ModelInfo, MatmulBound, PlainDecode, Prefill)):
        return _fields_of(value)
    return value
