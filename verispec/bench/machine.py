"""Where a bench ran: CPU, cores, BLAS as threadpoolctl sees it, versions; this process's peak RSS."""

from __future__ import annotations

import os
import platform
import resource
from typing import Any

import numpy as np

from verispec.bench.report import MachineInfo


def machine_info() -> MachineInfo:
    """CPU model, cores, BLAS libraries as threadpoolctl sees them (the active OpenBLAS kernel)."""
    return MachineInfo(
        cpu=_cpu_model(),
        cores=os.cpu_count(),
        blas=_blas_libraries(),
        openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
        python=platform.python_version(),
        numpy=np.__version__,
        onnxruntime=_version("onnxruntime"),
    )


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
