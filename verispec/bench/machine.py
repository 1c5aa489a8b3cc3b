"""Where a bench ran: CPU, its vector instruction sets, cores, BLAS as threadpoolctl sees it,
versions, the load average; this process's peak RSS."""

from __future__ import annotations

import os
import platform
import resource
from typing import Any

import numpy as np

from verispec.bench.report import MachineInfo

# The /proc/cpuinfo flags that decide which int8 / float kernels a CPU gets (onnxruntime's MLAS and
# ggml pick theirs at run time or build time from these), in the order of their generations.
ISA_FLAGS: tuple[str, ...] = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_vbmi",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


def machine_info() -> MachineInfo:
    """CPU model, its instruction sets, cores, BLAS libraries as threadpoolctl sees them (the
    active OpenBLAS kernel), versions, and the load average now (the start of the run)."""
    return MachineInfo(
        cpu=_cpu_model(),
        cores=os.cpu_count(),
        blas=_blas_libraries(),
        openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
        python=platform.python_version(),
        numpy=np.__version__,
        onnxruntime=_version("onnxruntime"),
        isa=isa_flags(),
        load_average_start=load_average(),
    )


def isa_flags(cpuinfo: str | None = None) -> list[str]:
    """The :data:`ISA_FLAGS` this CPU has (the first ``flags`` line of /proc/cpuinfo, or of
    ``cpuinfo``); [] where there is none (not Linux, or not x86)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as fh:
                cpuinfo = fh.read()
        except OSError:
            return []
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [flag for flag in ISA_FLAGS if flag in have]
    return []


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    """/proc/cpuinfo's model name, else what platform says, else "unknown"."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _blas_libraries() -> list[dict[str, Any]]:
    try:
        from threadpoolctl import threadpool_info

        keys = ("internal_api", "version", "architecture", "num_threads", "threading_layer")
        return [{k: lib.get(k) for k in keys} for lib in threadpool_info()]
    except Exception:  # threadpoolctl missing or unreadable: report what we have
        return []


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # not installed
        return None


def peak_rss_mib() -> float:
    """Peak resident set size of this process (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
