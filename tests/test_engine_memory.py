"""Peak RSS of the int8 mode: a child process loads SmolLM2 and decodes (verispec/bench/backends.py).

The target is peak RSS <= 1.5x (GGUF file + KV cache); this mode misses it (docs/performance.md: the prepacked kernel format is larger than the file's blocks, and the interpreter
with NumPy and onnxruntime is ~0.5x SmolLM2's file by itself). What this test holds is the bound
the load's memory check promises (engine.weights.estimate_bytes, the refusal before loading):

    peak - interpreter  <=  estimate_bytes(int8) + KV + onnxruntime's library files

estimate_bytes(int8) = 2 x the kernel bytes of every matrix (the factor's parts are stated there:
onnxruntime's prepacked copy <= 1.31x, one matrix's transient build copies, allocator slack); the
library term bounds the pages of onnxruntime's code a process can have resident (their size on
disk, read here, not a measured number). Before the weights went to onnxruntime as external data
(a copy in the graph proto plus the session's, each file page left resident, the embedding copied)
SmolLM2's peak was 487 MiB above the interpreter, 2.2x this bound: the test fails on that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verispec.bench.backends import rss_probe
from verispec.engine import matmul

pytestmark = pytest.mark.skipif(not matmul.ort_available(), reason="onnxruntime/onnx not installed")


@pytest.mark.model
def test_int8_peak_rss_within_the_promised_bound(smollm2_path: Path) -> None:
    probe = rss_probe(smollm2_path, "int8", "ort-q", steps=4, timeout_s=600)
    assert "error" not in probe, probe
    model_mib = probe["peak_rss_mib"] - probe["interpreter_mib"]
    bound_mib = probe["estimate_mib"] + probe["kv_mib"] + probe["onnxruntime_library_mib"]
    assert 0 < model_mib <= bound_mib, probe
