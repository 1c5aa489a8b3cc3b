"""The packed 16-row tile of lab/gguf_kernel_probe.py on Q8_0 blocks (the heads), against MLAS.

    OPENBLAS_NUM_THREADS=1 python -m lab.gguf_head_probe [--rows 1,2,5,8] [--vocab 262144] [--json OUT]

Both real models' heads are Q8_0 (34 bytes a block of 32: a float16 d and 32 int8 levels), and
Gemma 3's, 262,144 rows, is half of its decode step. The probe: ``--vocab`` rows of 640 inputs
(Gemma 3's width; its 262,144 rows are 170 MiB, five times this machine's 32 MiB L3; fewer rows
than ~100,000 would sit partly in a cache that size), random levels and scales.

``packed8``: per 16 rows and block, their 16 d, then their level bytes four at a time as 8
vectors of 64 bytes (544 bytes, the 16 blocks' 544), each level stored plus 128 (an unsigned
byte, so the dot instruction's unsigned operand; the same byte count): a row's block dot is
``sum (w + 128) p - 128 sum p``, exact in int32, then ``acc = fma(dot, d_w d_a, acc)`` in block
order, each (weight row, activation row) pair's own order whatever R is: a k-row pass gives each
row the bits a 1-row pass gives (checked here).

Against onnxruntime's ``MatMulNBits`` (8 bits, zero point 128, ``accuracy_level=4``, one thread),
as the engine runs the head (one graph here, not the engine's chunks of 8192 rows).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lab.gguf_kernel_probe import BLOCK, best, quantize_rows, require_cpu
from lab.provenance import print_and_save, record

MAX_ROWS = 8
WIDTH = 640  # Gemma 3's hidden size

Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])  # 34 bytes, as in the file

SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>

#define PACKED8(R)                                                                             \
static void packed8_##R(const uint8_t *T, int N, int nb, const int8_t *P, const int32_t *PS,   \
                        const float *DA, float *y, int ldy) {                                  \
    const int K = nb * 32;                                                                     \
    for (int n = 0; n < N; n += 16) {                                                          \
        const uint8_t *tile = T + (size_t)n * nb * 34;                                         \
        __m512 acc[R];                                                                         \
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();                              \
        for (int b = 0; b < nb; b++) {                                                         \
            const uint8_t *blk = tile + (size_t)b * 544;                                       \
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));             \
            __m512i w[8];                                                                      \
            for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512((const void *)(blk + 32 + 64 * j)); \
            for (int r = 0; r < R; r++) {                                                      \
                const int32_t *p = (const int32_t *)(P + (size_t)r * K + b * 32);              \
                __m512i dot = _mm512_setzero_si512();                                          \
                for (int j = 0; j < 8; j++) dot = _mm512_dpbusd_epi32(dot, w[j], _mm512_set1_epi32(p[j])); \
                dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * PS[(size_t)r * nb + b]));  \
                __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(DA[(size_t)r * nb + b]));      \
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);              \
            }                                                                                  \
        }                                                                                      \
        for (int r = 0; r < R; r++) _mm512_storeu_ps(y + (size_t)r * ldy + n, acc[r]);         \
    }                                                                                          \
}
PACKED8(1) PACKED8(2) PACKED8(3) PACKED8(4) PACKED8(5) PACKED8(6) PACKED8(7) PACKED8(8)

typedef void (*packed8_fn)(const uint8_t *, int, int, const int8_t *, const int32_t *, const float *, float *, int);
static const packed8_fn PACKED8S[9] = {0, packed8_1, packed8_2, packed8_3, packed8_4, packed8_5,
                                       packed8_6, packed8_7, packed8_8};

/* y [R, N] (row stride ldy) = A [R, K] . W [N, K]^T, N a multiple of 16, R <= 8; T may start at
   any tile, so threads can each take a range of tiles */
void q8_0_matmul_packed(const uint8_t *T, int N, int K, const int8_t *P, const int32_t *PS,
                        const float *DA, int R, float *y, int ldy) {
    PACKED8S[R](T, N, K / 32, P, PS, DA, y, ldy);
}
"""


def build_kernel(folder: Path) -> Any:
    """Compile :data:`SOURCE` with the system C compiler: the packed Q8_0 kernel."""
    c_file, so_file = folder / "head.c", folder / "head.so"
    c_file.write_text(SOURCE)
    isa = ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mavx512vnni"]
    subprocess.run(["cc", "-O3", *isa, "-shared", "-fPIC", "-o", str(so_file), str(c_file)], check=True)
    fn = ctypes.CDLL(str(so_file)).q8_0_matmul_packed
    c_int, ptr = ctypes.c_int, ctypes.c_void_p
    fn.argtypes = [ptr, c_int, c_int, ptr, ptr, ptr, c_int, ptr, c_int]
    fn.restype = None
    return fn


def random_q8_0(n: int, k: int, rng: np.random.Generator) -> npt.NDArray[Any]:
    blocks = np.zeros((n, k // BLOCK), dtype=Q8_0)
    blocks["d"] = (rng.random((n, k // BLOCK)) * 0.01 + 0.001).astype(np.float16)
    blocks["qs"] = rng.integers(-127, 128, (n, k // BLOCK, BLOCK), dtype=np.int8)
    return blocks


def pack16_q8(m: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """Q8_0 blocks ``[N, nb]`` repacked: per 16 rows and block, 16 d, then 8 vectors of every
    row's level bytes 4j..4j+3, each level plus 128 (the same byte count)."""
    n, nb = m.shape
    raw = m.view(np.uint8).reshape(n // 16, 16, nb, 34).transpose(0, 2, 1, 3)  # [tiles, nb, 16, 34]
    d = raw[..., 0:2].reshape(n // 16, nb, 32)
    levels = (raw[..., 2:34] ^ np.uint8(0x80)).reshape(n // 16, nb, 16, 8, 4).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(np.concatenate([d, levels.reshape(n // 16, nb, 512)], axis=2)).reshape(-1)


class Rows:
    """Activation rows: levels ``[R, K]`` int8, their block sums ``[R, nb]`` int32, scales ``[R, nb]``."""

    def __init__(self, q8: npt.NDArray[Any]) -> None:
        self.levels = np.ascontiguousarray(q8["qs"].reshape(q8.shape[0], -1))
        self.sums = np.ascontiguousarray(q8["qs"].sum(axis=2, dtype=np.int32))
        self.scales = np.ascontiguousarray(q8["d"])
        self.rows = q8.shape[0]


def call(kernel: Any, tiles: npt.NDArray[np.uint8], n: int, a: Rows, out: npt.NDArray[np.float32]) -> None:
    k = a.levels.shape[1]
    kernel(
        tiles.ctypes.data,
        n,
        k,
        a.levels.ctypes.data,
        a.sums.ctypes.data,
        a.scales.ctypes.data,
        a.rows,
        out.ctypes.data,
        n,
    )


def mlas_session(m: npt.NDArray[Any]) -> Any:
    """One onnxruntime session: ``MatMulNBits`` on the blocks, 8 bits, zero point 128."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n, nb = m.shape
    inits = [
        numpy_helper.from_array((m["qs"].view(np.uint8) ^ np.uint8(0x80)).reshape(n, nb, BLOCK), "B"),
        numpy_helper.from_array(m["d"].astype(np.float32).reshape(-1), "S"),
        numpy_helper.from_array(np.full(n * nb, 128, np.uint8), "Z"),
    ]
    node = helper.make_node(
        "MatMulNBits", ["x", "B", "S", "Z"], ["y"], domain="com.microsoft", K=nb * BLOCK, N=n, bits=8,
        block_size=BLOCK, accuracy_level=4,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["R", nb * BLOCK])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["R", n])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,2,5,8")
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--passes", type=int, default=12)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    if not all(1 <= r <= MAX_ROWS for r in rows) or args.vocab % 16:
        parser.error(f"--rows: each between 1 and {MAX_ROWS}; --vocab: a multiple of 16")
    require_cpu()
    load_start = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    m = random_q8_0(args.vocab, WIDTH, rng)
    x = rng.standard_normal((MAX_ROWS, WIDTH)).astype(np.float32)
    q = quantize_rows(x)
    all_rows = Rows(q)
    with tempfile.TemporaryDirectory() as folder:
        kernel = build_kernel(Path(folder))
        tiles = pack16_q8(m)
        assert tiles.nbytes == m.nbytes
        session = mlas_session(m)
        y8 = np.zeros((MAX_ROWS, args.vocab), np.float32)
        call(kernel, tiles, args.vocab, all_rows, y8)
        y1 = np.zeros((1, args.vocab), np.float32)
        for r in range(MAX_ROWS):
            call(kernel, tiles, args.vocab, Rows(q[r : r + 1]), y1)
            assert np.array_equal(y1[0], y8[r]), "a k-row pass changed a row's bits"
        w = (m["qs"].astype(np.float64) * m["d"].astype(np.float64)[..., None]).reshape(args.vocab, -1)
        xr = (q["qs"].astype(np.float64) * q["d"][..., None]).reshape(MAX_ROWS, -1)
        want = xr @ w.T
        results: dict[str, Any] = {
            "head_rows": args.vocab,
            "file_mib": m.nbytes / 2**20,
            "max_rel_error_vs_float64": f"{float(np.abs(y8 - want).max() / np.abs(want).max()):.1e}",
            "rows": {},
        }
        out = np.zeros((MAX_ROWS, args.vocab), np.float32)
        for r in rows:
            taken = Rows(q[:r])
            packed_pass = partial(call, kernel, tiles, args.vocab, taken, out)
            mlas_pass = partial(session.run, None, {"x": np.ascontiguousarray(x[:r])})
            packed_pass(), mlas_pass()
            results["rows"][r] = {
                "packed_ms": best(packed_pass, args.passes) * 1e3,
                "mlas_ms": best(mlas_pass, args.passes) * 1e3,
            }
    one = results["rows"][rows[0]]
    for r, cell in results["rows"].items():
        cell["packed_over_its_1_row"] = cell["packed_ms"] / one["packed_ms"]
        cell["mlas_over_its_1_row"] = cell["mlas_ms"] / one["mlas_ms"]
        cell["mlas_over_packed"] = cell["mlas_ms"] / cell["packed_ms"]
        results[f"mlas_over_packed_{r}_row"] = cell["mlas_over_packed"]
        if r > 1:
            results[f"packed_{r}_rows_over_1_row"] = cell["packed_over_its_1_row"]
            results[f"mlas_{r}_rows_over_1_row"] = cell["mlas_over_its_1_row"]
    results["provenance"] = record("lab.gguf_head_probe", load_start)
    print_and_save(results, args.json)


if __name__ == "__main__":
    main()
