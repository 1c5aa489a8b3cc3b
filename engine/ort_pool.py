"""onnxruntime's threads for the engine: ONE pool per process, shared by every session.

Why: a decode step makes ~121 onnxruntime calls (one session per matrix, engine/matmul.py). With
onnxruntime's default, a pool per session, every session owns its own worker threads, so each
call wakes a different sleeping worker (and with spinning on, 121 pools spin after their calls:
measured ~1 s per SmolLM2 step, load average 85). One process-wide pool keeps the same workers
hot across calls (they spin briefly between calls, then sleep). Measured 2026-11-30 on the idle
2-core AMD EPYC, int8 mode, 2 threads, best of 60 steps (`/tmp`-style A/B, two rounds each):
SmolLM2 14.2-15.0 ms shared vs 17.5-19.8 ms per-session, Gemma 3 21.3 vs 25.8 ms; with 1 thread
the two are equal (17.4-18.3 ms: a pool of 1 is the calling thread).

onnxruntime's constraint: once a process-wide pool exists every session must use it, and its
size is fixed when onnxruntime's environment is created. So the thread count is a PROCESS
setting: the first session fixes it (:func:`pool_threads`); a later session asking for another
count runs on the same pool. Nothing numeric depends on it (MLAS splits a matmul's output rows
and columns between threads, never a dot product's sum: the same values for any count, tested),
only speed, so measuring thread counts needs separate processes (bench does).
``VERISPEC_ORT_POOL=per-session`` restores onnxruntime's per-session pools (no spinning).
"""

from __future__ import annotations

import os
from typing import Any

from verispec.reference.errors import ModelError

POOL_MODES: tuple[str, ...] = ("shared", "per-session")

_pool_threads: int | None = None  # the shared pool's size, once onnxruntime's environment exists


def pool_mode() -> str:
    """``VERISPEC_ORT_POOL``: ``shared`` (default) or ``per-session``."""
    mode = os.environ.get("VERISPEC_ORT_POOL", "shared")
    if mode not in POOL_MODES:
        raise ModelError(f"VERISPEC_ORT_POOL={mode!r} is not one of {', '.join(POOL_MODES)}")
    return mode


def pool_threads() -> int | None:
    """Threads of this process's shared pool (None until the first shared session)."""
    return _pool_threads


def session_options(threads: int) -> Any:
    """``onnxruntime.SessionOptions`` for one of the engine's sessions (sequential execution,
    no memory arena: 121 sessions with an arena each cost memory, measured)."""
    global _pool_threads
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False
    options.enable_mem_pattern = False
    if pool_mode() == "per-session":
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # 121 pools: never spin
        return options
    if _pool_threads is None:
        from onnxruntime.capi import _pybind_state

        _pybind_state.set_global_thread_pool_sizes(threads, 1)
        _pool_threads = threads
    options.use_per_session_threads = False  # (no thread counts set here: onnxruntime warns they are ignored)
    return options
