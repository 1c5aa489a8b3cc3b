"""engine/ort_pool.py: one onnxruntime thread pool per process.

What is checked: the thread count changes no value (the module's claim that makes it a process
setting harmless): a float32 ``MatMul`` and an int8 ``MatMulNBits`` (Q4_1, with the min term)
give bit-identical outputs with 1 and 2 threads, 1 and 5 rows, each count in its own child
process (a process has one pool); a session asking another thread count runs on the process's
pool, quietly (no per-session warning); a bad ``VERISPEC_ORT_POOL`` is a typed error. What is not: speed (`verispec bench`'s
``threads_2_over_1``, measured in child processes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verispec.engine import matmul as mm
from verispec.engine import ort_pool
from verispec.reference.errors import ModelError

pytestmark = pytest.mark.skipif(not mm.ort_available(), reason="onnxruntime not installed (extra `fast`)")

CHILD = """
import sys
import numpy as np
from verispec.engine import matmul as mm
from verispec.engine.blocks import repack
from verispec.reference import quants
rng = np.random.default_rng(7)
shape = (1536, 576)  # SmolLM2's gate/up width: large enough for MLAS to split it between threads
w = rng.standard_normal(shape).astype(np.float32)
x = rng.standard_normal((5, shape[1])).astype(np.float32)
blocks = repack(quants.quantize(w, quants.GGMLType.Q4_1), quants.GGMLType.Q4_1, shape)
f32, int8 = mm.ort_f32(w, mm.default_threads()), mm.ort_blocks(blocks, mm.default_threads())
out = np.stack([np.concatenate([f32(x[:1]), f32(x)]), np.concatenate([int8(x[:1]), int8(x)])])
np.save(sys.argv[1], out)
"""


def _outputs(tmp_path: Path, threads: int) -> np.ndarray:
    target = tmp_path / f"out{threads}.npy"
    env = {**os.environ, "VERISPEC_THREADS": str(threads), "VERISPEC_ORT_POOL": "shared"}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(target)],
        check=True,
        env=env,
        cwd=root,
        timeout=300,
        capture_output=True,
        text=True,
    )
    # sessions on the shared pool set no thread counts: onnxruntime warns per session otherwise
    assert "ignored when using a global thread pool" not in done.stderr, done.stderr[-500:]
    return np.load(target)


def test_thread_count_changes_no_value(tmp_path: Path) -> None:
    one, two = _outputs(tmp_path, 1), _outputs(tmp_path, 2)
    assert np.isfinite(one).all()
    assert np.array_equal(one, two)


def test_a_session_asking_other_threads_runs_on_the_pool() -> None:
    w = np.eye(8, dtype=np.float32)
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    first = mm.ort_f32(w, 1)
    second = mm.ort_f32(w, 2)
    if ort_pool.pool_mode() == "shared":
        assert ort_pool.pool_threads() is not None
    assert np.array_equal(first(x), x) and np.array_equal(second(x), x)


def test_bad_pool_mode_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERISPEC_ORT_POOL", "global")
    with pytest.raises(ModelError, match="VERISPEC_ORT_POOL"):
        ort_pool.pool_mode()
