"""How fast a kernel on the GGUF file's own Q4_1 blocks could be, against MLAS's ``MatMulNBits``.

    OPENBLAS_NUM_THREADS=1 python -m lab.gguf_kernel_probe [--rows 1,2,3,5,8] [--passes 12] [--json OUT]

A probe, not an engine path: it measures what the int8 mode's next step (a kernel that consumes
the file's blocks in place) would buy on this machine, before anyone builds it.

The probe kernel (C, AVX-512 VNNI on 256-bit vectors, one thread, compiled here with the system
``cc``): ``y[r, n] = sum_b (d_nb da_rb (q_nb . p_rb) + m_nb sa_rb)`` over Q4_1 blocks as the file
stores them (20 bytes: float16 d, float16 m, 16 bytes of nibbles) and activation blocks rounded
to int8 per 32 (``p``, scale ``da``, ``sa = da sum(p)``: llama.cpp's Q8_1). Each weight block is
loaded and unpacked ONCE for all R activation rows of a pass, so a k-row pass streams the weights
once; every row's arithmetic is the same whatever R is (each row's sum is its own, in one order),
so a k-row pass gives each row what a 1-row pass gives, bit for bit (checked here).

A second design, ``wide``: two blocks a 512-bit vector, the activation's levels, scales and sums
in separate arrays (the scales spread per block pair), the mins as a vector dot over the blocks;
the same law (each row its own sums), bit for bit across row counts (checked).

Two tiled designs, 16 weight rows a tile, one per 32-bit lane, so every weight block is loaded
and unpacked once for all rows of a pass and each activation row costs 8 dot instructions a block
tile: ``tiled`` gathers the 16 rows' blocks from the file's layout in place; ``packed`` reads them
from a repack at the file's own size (per 16 rows and block: their 16 d, their 16 m, then their
level bytes four at a time; 320 bytes, the 16 blocks' 320), with loads instead of gathers. Both
sum each (weight row, activation row) pair in one order whatever R is, the same order: the same
bits as each other and across row counts (checked).

The comparison is onnxruntime's ``MatMulNBits`` (4-bit, uint8 zero points, ``accuracy_level=4``,
one thread), one graph holding every matrix, WITHOUT the engine's Q4_1 min term (a Gemm and an
Add a projection on its side): MLAS's side is measured cheaper than the engine pays.

Matrices: SmolLM2-135M's 30 layers (QKV 960 x 576, o 576 x 576, gate/up 3072 x 576, down 576 x
1536), random levels and scales: 63 MiB of Q4_1, streamed from memory each pass (far larger than
the caches). Reported: best pass time of each side at each row count, and the ratios.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lab.provenance import print_and_save, record

BLOCK = 32
MAX_ROWS = 8
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # SmolLM2-135M: qkv, o, gate/up, down
LAYERS = 30

Q4_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", (16,))])  # 20 bytes, as in the file
Q8_1 = np.dtype([("d", "<f4"), ("s", "<f4"), ("qs", "i1", (32,))])  # 40 bytes

SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
typedef struct { uint16_t d, m; uint8_t qs[16]; } bq4;
typedef struct { float d, s; int8_t qs[32]; } bq8;

static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

#define KERNEL(R)                                                                              \
static void rows##R(const bq4 *W, int n0, int n1, int nb, const bq8 *A, float *y, int N) {     \
    for (int n = n0; n < n1; n++) {                                                            \
        const bq4 *w = W + (size_t)n * nb;                                                     \
        __m256 acc[R]; float mins[R];                                                          \
        for (int r = 0; r < R; r++) { acc[r] = _mm256_setzero_ps(); mins[r] = 0.0f; }          \
        for (int b = 0; b < nb; b++) {                                                         \
            __m128i raw = _mm_loadu_si128((const __m128i *)w[b].qs);                           \
            __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),        \
                                         _mm256_set1_epi8(0x0F));                              \
            float dw = _cvtsh_ss(w[b].d), mw = _cvtsh_ss(w[b].m);                              \
            for (int r = 0; r < R; r++) {                                                      \
                const bq8 *a = A + (size_t)r * nb + b;                                         \
                __m256i p = _mm256_loadu_si256((const __m256i *)a->qs);                        \
                __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, p);                 \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a->d), _mm256_cvtepi32_ps(s), acc[r]); \
                mins[r] += mw * a->s;                                                          \
            }                                                                                  \
        }                                                                                      \
        for (int r = 0; r < R; r++) y[(size_t)r * N + n] = hsum(acc[r]) + mins[r];             \
    }                                                                                          \
}
KERNEL(1) KERNEL(2) KERNEL(3) KERNEL(4) KERNEL(5) KERNEL(6) KERNEL(7) KERNEL(8)

typedef void (*kernel_fn)(const bq4 *, int, int, int, const bq8 *, float *, int);
static const kernel_fn KERNELS[9] = {0, rows1, rows2, rows3, rows4, rows5, rows6, rows7, rows8};

/* y [R, N] = A [R, K] . W [N, K]^T on Q4_1 weight blocks and Q8_1 activation blocks, R <= 8 */
void q4_1_matmul(const bq4 *W, int N, int K, const bq8 *A, int R, float *y) {
    KERNELS[R](W, 0, N, K / 32, A, y, N);
}

/* The wide kernel: two blocks a 512-bit vector. Activations split: P [R, K] int8 levels,
   DAX [R, nb / 2, 16] each pair's scales spread (8 x da_b, 8 x da_b+1), SA [R, nb] sums.
   Per row and pair: a load, a dot, a convert, a multiply by the activation scales, a fused
   multiply-add by the weight scales; the mins as a vector dot over the blocks. */
#define WIDE(R)                                                                                \
static void wide##R(const bq4 *W, int N, int nb, const int8_t *P, const float *DAX,            \
                    const float *SA, float *y) {                                               \
    float dw[64], mw[64];                                                                      \
    const int K = nb * 32;                                                                     \
    const __m256i low = _mm256_set1_epi8(0x0F);                                                \
    for (int n = 0; n < N; n++) {                                                              \
        const bq4 *w = W + (size_t)n * nb;                                                     \
        for (int b = 0; b < nb; b++) { dw[b] = _cvtsh_ss(w[b].d); mw[b] = _cvtsh_ss(w[b].m); } \
        __m512 acc[R];                                                                         \
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();                              \
        for (int b = 0; b < nb; b += 2) {                                                      \
            __m128i r0 = _mm_loadu_si128((const __m128i *)w[b].qs);                           \
            __m128i r1 = _mm_loadu_si128((const __m128i *)w[b + 1].qs);                       \
            __m256i x0 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(r0, 4), r0), low);   \
            __m256i x1 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(r1, 4), r1), low);   \
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);                 \
            __m512 dwv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(dw[b])),     \
                                            _mm256_set1_ps(dw[b + 1]), 1);                     \
            for (int r = 0; r < R; r++) {                                                      \
                __m512i p = _mm512_loadu_si512((const void *)(P + (size_t)r * K + b * 32));    \
                __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, p);                 \
                __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(s),                                \
                                         _mm512_loadu_ps(DAX + ((size_t)r * nb / 2 + b / 2) * 16)); \
                acc[r] = _mm512_fmadd_ps(t, dwv, acc[r]);                                      \
            }                                                                                  \
        }                                                                                      \
        for (int r = 0; r < R; r++) {                                                          \
            __m512 m = _mm512_setzero_ps();                                                    \
            for (int b = 0; b < nb; b += 16) {                                                 \
                __mmask16 k = (__mmask16)(nb - b >= 16 ? 0xFFFF : (1u << (nb - b)) - 1);       \
                m = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, mw + b),                          \
                                    _mm512_maskz_loadu_ps(k, SA + (size_t)r * nb + b), m);     \
            }                                                                                  \
            y[(size_t)r * N + n] = _mm512_reduce_add_ps(acc[r]) + _mm512_reduce_add_ps(m);     \
        }                                                                                      \
    }                                                                                          \
}
WIDE(1) WIDE(2) WIDE(3) WIDE(4) WIDE(5) WIDE(6) WIDE(7) WIDE(8)

/* The exported entry of a kernel family on split activation rows (levels P, per-block scales S,
   sums SA): ``entry(W, N, K, P, S, SA, R, y)`` calls the family's instance for R rows, R <= 8. */
#define SPLIT_ENTRY(entry, family, weight_t)                                                   \
typedef void (*family##_fn)(const weight_t *, int, int, const int8_t *, const float *,          \
                            const float *, float *);                                           \
static const family##_fn family##_by_rows[9] = {0, family##1, family##2, family##3, family##4, \
                                                family##5, family##6, family##7, family##8};   \
void entry(const weight_t *W, int N, int K, const int8_t *P, const float *S, const float *SA,  \
           int R, float *y) {                                                                  \
    family##_by_rows[R](W, N, K / 32, P, S, SA, y);                                            \
}

SPLIT_ENTRY(q4_1_matmul_wide, wide, bq4)

/* The tiled kernels' sums, one block of 16 weight rows (levels lo/hi, scales dw, mins mw) against
   each of R activation rows: the integer dot, then acc = fma(dot, dw * da, acc) and
   mins = fma(mw, sa, mins) in block order. Both tiled kernels run exactly this. */
#define TILE_ROWS(R)                                                                           \
    for (int r = 0; r < R; r++) {                                                              \
        const int32_t *p = (const int32_t *)(P + (size_t)r * K + b * 32);                      \
        __m512i dot = _mm512_setzero_si512();                                                  \
        for (int j = 0; j < 4; j++) {                                                          \
            dot = _mm512_dpbusd_epi32(dot, lo[j], _mm512_set1_epi32(p[j]));                    \
            dot = _mm512_dpbusd_epi32(dot, hi[j], _mm512_set1_epi32(p[4 + j]));                \
        }                                                                                      \
        __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(DA[(size_t)r * nb + b]));              \
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);                      \
        mins[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(SA[(size_t)r * nb + b]), mins[r]);        \
    }

/* The tiled kernel: 16 weight rows a tile, one per 32-bit lane, their blocks gathered from the
   file's layout in place (no repack); per block the integer dot of each lane's 32 levels with an
   activation row is 8 dots of 4 bytes, the activation's 4 bytes broadcast; then, per lane and in
   block order, acc = fma(dot, d_w * d_a, acc) and mins = fma(m_w, s_a, mins); y = acc + mins.
   That order is each (weight row, activation row) pair's own, whatever R: the same bits. */
#define TILE(R)                                                                                \
static void tile##R(const bq4 *W, int N, int nb, const int8_t *P, const float *DA,             \
                    const float *SA, float *y) {                                               \
    const __m512i stride = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, \
                                 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(nb * 20));         \
    const __m512i low = _mm512_set1_epi8(0x0F);                                                \
    const int K = nb * 32;                                                                     \
    for (int n = 0; n < N; n += 16) {                                                          \
        const char *base = (const char *)(W + (size_t)n * nb);                                 \
        __m512 acc[R], mins[R];                                                                \
        for (int r = 0; r < R; r++) { acc[r] = _mm512_setzero_ps(); mins[r] = _mm512_setzero_ps(); } \
        for (int b = 0; b < nb; b++) {                                                         \
            const char *blk = base + (size_t)b * 20;                                           \
            __m512i dm = _mm512_i32gather_epi32(stride, blk, 1);                               \
            __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));                            \
            __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));     \
            __m512i lo[4], hi[4];                                                              \
            for (int j = 0; j < 4; j++) {                                                      \
                __m512i g = _mm512_i32gather_epi32(stride, blk + 4 + 4 * j, 1);                \
                lo[j] = _mm512_and_si512(g, low);                                              \
                hi[j] = _mm512_and_si512(_mm512_srli_epi32(g, 4), low);                        \
            }                                                                                  \
            TILE_ROWS(R)                                                                       \
        }                                                                                      \
        for (int r = 0; r < R; r++) _mm512_storeu_ps(y + (size_t)r * N + n, _mm512_add_ps(acc[r], mins[r])); \
    }                                                                                          \
}
TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)

/* The same tile on weights repacked at the file's size: per 16 rows and block, their 16 float16 d,
   their 16 float16 m, then the 16 bytes of levels of each row as 4 vectors (vector j: bytes 4j..4j+3
   of every row): 320 bytes, the 16 blocks' 320. Loads where the tiled kernel gathers; the same sums
   in the same order, so the same bits as the tiled kernel. */
#define PACKED(R)                                                                              \
static void packed##R(const uint8_t *T, int N, int nb, const int8_t *P, const float *DA,       \
                      const float *SA, float *y) {                                             \
    const __m512i low = _mm512_set1_epi8(0x0F);                                                \
    const int K = nb * 32;                                                                     \
    for (int n = 0; n < N; n += 16) {                                                          \
        const uint8_t *tile = T + (size_t)n * nb * 20;                                         \
        __m512 acc[R], mins[R];                                                                \
        for (int r = 0; r < R; r++) { acc[r] = _mm512_setzero_ps(); mins[r] = _mm512_setzero_ps(); } \
        for (int b = 0; b < nb; b++) {                                                         \
            const uint8_t *blk = tile + (size_t)b * 320;                                       \
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));             \
            __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));      \
            __m512i lo[4], hi[4];                                                              \
            for (int j = 0; j < 4; j++) {                                                      \
                __m512i g = _mm512_loadu_si512((const void *)(blk + 64 + 64 * j));             \
                lo[j] = _mm512_and_si512(g, low);                                              \
                hi[j] = _mm512_and_si512(_mm512_srli_epi32(g, 4), low);                        \
            }                                                                                  \
            TILE_ROWS(R)                                                                       \
        }                                                                                      \
        for (int r = 0; r < R; r++) _mm512_storeu_ps(y + (size_t)r * N + n, _mm512_add_ps(acc[r], mins[r])); \
    }                                                                                          \
}
PACKED(1) PACKED(2) PACKED(3) PACKED(4) PACKED(5) PACKED(6) PACKED(7) PACKED(8)

/* N a multiple of 16 for both tiled kernels */
SPLIT_ENTRY(q4_1_matmul_packed, packed, uint8_t)
SPLIT_ENTRY(q4_1_matmul_tiled, tile, bq4)
"""


NEEDS = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "f16c", "fma")  # /proc/cpuinfo's names


def require_cpu() -> None:
    """Exit with a message (not an illegal instruction) where this CPU lacks the probes' ISA."""
    try:
        flags = next(
            (
                line.split(":", 1)[1].split()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("flags")
            ),
            [],
        )
    except OSError:
        flags = []
    missing = [f for f in NEEDS if f not in flags]
    if missing:
        raise SystemExit(
            f"the probe's kernels need {', '.join(NEEDS)}; this CPU (/proc/cpuinfo) lacks {', '.join(missing)}"
        )


def build_kernels(folder: Path) -> tuple[Any, Any, Any, Any]:
    """Compile :data:`SOURCE` with the system C compiler: the simple, wide, tiled and packed kernels."""
    c_file, so_file = folder / "probe.c", folder / "probe.so"
    c_file.write_text(SOURCE)
    isa = ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512vnni"]
    subprocess.run(["cc", "-O3", *isa, "-shared", "-fPIC", "-o", str(so_file), str(c_file)], check=True)
    library = ctypes.CDLL(str(so_file))
    simple, wide, tiled = library.q4_1_matmul, library.q4_1_matmul_wide, library.q4_1_matmul_tiled
    c_int, ptr = ctypes.c_int, ctypes.c_void_p
    simple.argtypes = [ptr, c_int, c_int, ptr, c_int, ptr]
    wide.argtypes = tiled.argtypes = [ptr, c_int, c_int, ptr, ptr, ptr, c_int, ptr]
    packed = library.q4_1_matmul_packed
    packed.argtypes = tiled.argtypes
    simple.restype = wide.restype = tiled.restype = packed.restype = None
    return simple, wide, tiled, packed


def pack16(m: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """Q4_1 blocks ``[N, nb]`` repacked as the packed kernel reads them, the same bytes in all:
    per 16 rows and block, 16 d, 16 m, then 4 vectors of every row's level bytes 4j..4j+3."""
    n, nb = m.shape
    raw = m.view(np.uint8).reshape(n // 16, 16, nb, 20).transpose(0, 2, 1, 3)  # [tiles, nb, 16 rows, 20]
    d, mins, qs = raw[..., 0:2], raw[..., 2:4], raw[..., 4:20].reshape(n // 16, nb, 16, 4, 4)
    groups = qs.transpose(0, 1, 3, 2, 4)  # [tiles, nb, j, 16 rows, 4 bytes]
    parts = [d.reshape(n // 16, nb, 32), mins.reshape(n // 16, nb, 32), groups.reshape(n // 16, nb, 256)]
    return np.ascontiguousarray(np.concatenate(parts, axis=2)).reshape(-1)


class WideRows:
    """Activation rows in the wide kernel's split layout: levels ``[R, K]``, each block pair's
    scales spread over 16 lanes ``[R, nb / 2, 16]``, the blocks' sums ``[R, nb]``."""

    def __init__(self, q8: npt.NDArray[Any]) -> None:
        r, nb = q8.shape
        self.levels = np.ascontiguousarray(q8["qs"].reshape(r, nb * BLOCK))
        self.scales = np.ascontiguousarray(np.repeat(q8["d"].reshape(r, nb // 2, 2), 8, axis=2))
        self.sums = np.ascontiguousarray(q8["s"])
        self.da = np.ascontiguousarray(q8["d"])
        self.rows = r

    def take(self, rows: int) -> WideRows:
        out = WideRows.__new__(WideRows)
        out.levels, out.scales = np.ascontiguousarray(self.levels[:rows]), np.ascontiguousarray(self.scales[:rows])
        out.sums, out.rows = np.ascontiguousarray(self.sums[:rows]), rows
        out.da = np.ascontiguousarray(self.da[:rows])
        return out


def call_split(
    fn: Any, weights: npt.NDArray[Any], shape: tuple[int, int], a: WideRows, scales: npt.NDArray[np.float32], out: Any
) -> None:
    """A kernel on split activation rows: ``fn(W, N, K, levels, scales, sums, R, y)``."""
    n, nb = shape
    ptrs = (a.levels.ctypes.data, scales.ctypes.data, a.sums.ctypes.data)
    fn(weights.ctypes.data, n, nb * BLOCK, *ptrs, a.rows, out.ctypes.data)


def call_wide(wide: Any, m: npt.NDArray[Any], a: WideRows, out: npt.NDArray[np.float32]) -> None:
    call_split(wide, m, m.shape, a, a.scales, out)


def random_q4_1(n: int, k: int, rng: np.random.Generator) -> npt.NDArray[Any]:
    """``[n, k / 32]`` Q4_1 blocks with random levels, scales ~1e-2 and mins ~-0.05."""
    blocks = np.zeros((n, k // BLOCK), dtype=Q4_1)
    blocks["d"] = (rng.random((n, k // BLOCK)) * 0.01 + 0.001).astype(np.float16)
    blocks["m"] = (-rng.random((n, k // BLOCK)) * 0.05).astype(np.float16)
    blocks["qs"] = rng.integers(0, 256, (n, k // BLOCK, 16), dtype=np.uint8)
    return blocks


def levels(blocks: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """``[n, k]`` levels 0..15 in weight order (byte j: weight j low nibble, weight j + 16 high)."""
    qs = blocks["qs"]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(qs.shape[0], -1)


def quantize_rows(x: npt.NDArray[np.float32]) -> npt.NDArray[Any]:
    """``[R, K]`` float32 -> ``[R, K / 32]`` Q8_1 blocks (symmetric int8 per block)."""
    r, k = x.shape
    xb = x.reshape(r, k // BLOCK, BLOCK)
    d = np.abs(xb).max(axis=2) / 127.0
    p = np.rint(xb / np.where(d == 0, 1, d)[..., None]).astype(np.int8)
    out = np.zeros((r, k // BLOCK), dtype=Q8_1)
    out["d"], out["qs"] = d.astype(np.float32), p
    out["s"] = (d * p.astype(np.int32).sum(axis=2)).astype(np.float32)
    return out


def mlas_graph(mats: list[npt.NDArray[Any]]) -> Any:
    """One onnxruntime session with a ``MatMulNBits`` per matrix (inputs x576 and x1536)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, outs = [], [], []
    for i, m in enumerate(mats):
        n, nb = m.shape
        k = nb * BLOCK
        lv = levels(m).reshape(n, nb, BLOCK)
        packed = (lv[..., 0::2] | (lv[..., 1::2] << 4)).astype(np.uint8)
        inits += [
            numpy_helper.from_array(packed, f"B{i}"),
            numpy_helper.from_array(m["d"].astype(np.float32).reshape(-1), f"S{i}"),
            numpy_helper.from_array(np.zeros(n * ((nb + 1) // 2), np.uint8), f"Z{i}"),
        ]
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                [f"x{k}", f"B{i}", f"S{i}", f"Z{i}"],
                [f"y{i}"],
                domain="com.microsoft",
                K=k,
                N=n,
                bits=4,
                block_size=BLOCK,
                accuracy_level=4,
            )
        )
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, ["R", n]))
    ins = [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, ["R", k]) for k in (576, 1536)]
    graph = helper.make_graph(nodes, "probe", ins, outs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), options)


def call_tiled(tiled: Any, m: npt.NDArray[Any], a: WideRows, out: npt.NDArray[np.float32]) -> None:
    call_split(tiled, m, m.shape, a, a.da, out)


def run_tiled(tiled: Any, mats: list[npt.NDArray[Any]], rows: dict[int, WideRows], outs: dict[int, Any]) -> None:
    """One pass of the tiled kernel over every matrix."""
    for i, m in enumerate(mats):
        call_tiled(tiled, m, rows[m.shape[1] * BLOCK], outs[m.shape[0] * 100000 + i])


def run_packed(
    packed: Any,
    tiles: list[npt.NDArray[np.uint8]],
    mats: list[npt.NDArray[Any]],
    rows: dict[int, WideRows],
    outs: dict[int, Any],
) -> None:
    """One pass of the packed kernel over every matrix."""
    for i, (t, m) in enumerate(zip(tiles, mats)):
        call_split(
            packed, t, m.shape, rows[m.shape[1] * BLOCK], rows[m.shape[1] * BLOCK].da, outs[m.shape[0] * 100000 + i]
        )


def run_probe(
    kernel: Any, mats: list[npt.NDArray[Any]], qs: dict[int, npt.NDArray[Any]], rows: int, outs: dict[int, Any]
) -> None:
    """One pass of the simple probe kernel over every matrix, ``rows`` activation rows."""
    for i, m in enumerate(mats):
        n, nb = m.shape
        out = outs[n * 100000 + i]
        kernel(m.ctypes.data, n, nb * BLOCK, qs[nb * BLOCK].ctypes.data, rows, out.ctypes.data)


def run_wide(wide: Any, mats: list[npt.NDArray[Any]], rows: dict[int, WideRows], outs: dict[int, Any]) -> None:
    """One pass of the wide kernel over every matrix."""
    for i, m in enumerate(mats):
        call_wide(wide, m, rows[m.shape[1] * BLOCK], outs[m.shape[0] * 100000 + i])


def best(fn: Any, passes: int) -> float:
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,2,3,5,8")
    parser.add_argument("--passes", type=int, default=12)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    if not all(1 <= r <= MAX_ROWS for r in rows):
        parser.error(f"--rows: each between 1 and {MAX_ROWS}")
    require_cpu()
    load_start = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    mats = [random_q4_1(n, k, rng) for _ in range(LAYERS) for n, k in SHAPES]
    file_bytes = sum(m.nbytes for m in mats)
    with tempfile.TemporaryDirectory() as folder:
        kernel, wide, tiled, packed = build_kernels(Path(folder))
        tiles = [pack16(m) for m in mats]
        session = mlas_graph(mats)
        outs = {m.shape[0] * 100000 + i: np.zeros((MAX_ROWS, m.shape[0]), np.float32) for i, m in enumerate(mats)}
        results: dict[str, Any] = {"file_mib": file_bytes / 2**20, "rows": {}}
        x_all = {k: rng.standard_normal((MAX_ROWS, k)).astype(np.float32) for k in (576, 1536)}
        q_all = {k: quantize_rows(x) for k, x in x_all.items()}
        # the same rows in a k-row pass and in 1-row passes: bit for bit (the probe's law), both kernels
        m0 = mats[2]
        k0 = m0.shape[1] * BLOCK
        wide_all = {k: WideRows(q) for k, q in q_all.items()}
        y8 = np.zeros((MAX_ROWS, m0.shape[0]), np.float32)
        w8 = np.zeros((MAX_ROWS, m0.shape[0]), np.float32)
        t8 = np.zeros((MAX_ROWS, m0.shape[0]), np.float32)
        call_tiled(tiled, m0, wide_all[k0], t8)
        p8 = np.zeros((MAX_ROWS, m0.shape[0]), np.float32)
        run_packed(packed, [tiles[2]], [m0], wide_all, {m0.shape[0] * 100000: p8})
        assert np.array_equal(p8, t8), "the packed kernel's sums differ from the tiled kernel's"
        kernel(m0.ctypes.data, m0.shape[0], k0, q_all[k0].ctypes.data, MAX_ROWS, y8.ctypes.data)
        call_wide(wide, m0, wide_all[k0], w8)
        for r in range(MAX_ROWS):
            y1 = np.zeros((1, m0.shape[0]), np.float32)
            one = np.ascontiguousarray(q_all[k0][r : r + 1])
            kernel(m0.ctypes.data, m0.shape[0], k0, one.ctypes.data, 1, y1.ctypes.data)
            assert np.array_equal(y1[0], y8[r]), "a k-row pass changed a row's bits"
            single = WideRows(one)
            call_wide(wide, m0, single, y1)
            assert np.array_equal(y1[0], w8[r]), "a k-row pass of the wide kernel changed a row's bits"
            call_tiled(tiled, m0, single, y1)
            assert np.array_equal(y1[0], t8[r]), "a k-row pass of the tiled kernel changed a row's bits"
        # and the kernels compute the dot product of the rounded rows with the file's weights
        d64, m64 = (np.repeat(m0[f].astype(np.float64), BLOCK, axis=1) for f in ("d", "m"))
        p = q_all[k0]
        xr = (p["qs"].astype(np.float64) * p["d"][..., None]).reshape(MAX_ROWS, -1)
        want = xr @ (levels(m0) * d64 + m64).T
        results["max_rel_error_vs_float64"] = float(np.abs(y8 - want).max() / np.abs(want).max())
        results["wide_max_rel_error_vs_float64"] = float(np.abs(w8 - want).max() / np.abs(want).max())
        results["tiled_max_rel_error_vs_float64"] = float(np.abs(t8 - want).max() / np.abs(want).max())
        for r in rows:
            qs = {k: np.ascontiguousarray(q[:r]) for k, q in q_all.items()}
            feeds = {f"x{k}": np.ascontiguousarray(x[:r]) for k, x in x_all.items()}
            probe_pass = partial(run_probe, kernel, mats, qs, r, outs)
            taken = {k: a.take(r) for k, a in wide_all.items()}
            wide_pass = partial(run_wide, wide, mats, taken, outs)
            tiled_pass = partial(run_tiled, tiled, mats, taken, outs)
            packed_pass = partial(run_packed, packed, tiles, mats, taken, outs)
            mlas_pass = partial(session.run, None, feeds)
            probe_pass(), wide_pass(), tiled_pass(), packed_pass(), mlas_pass()
            cell = {
                "probe_ms": best(probe_pass, args.passes) * 1e3,
                "wide_ms": best(wide_pass, args.passes) * 1e3,
                "tiled_ms": best(tiled_pass, args.passes) * 1e3,
                "packed_ms": best(packed_pass, args.passes) * 1e3,
                "mlas_ms": best(mlas_pass, args.passes) * 1e3,
            }
            results["rows"][r] = cell
        one = results["rows"][rows[0]]
        for cell in results["rows"].values():
            cell["probe_over_its_1_row"] = cell["probe_ms"] / one["probe_ms"]
            cell["mlas_over_its_1_row"] = cell["mlas_ms"] / one["mlas_ms"]
            cell["wide_over_its_1_row"] = cell["wide_ms"] / one["wide_ms"]
            cell["mlas_over_probe"] = cell["mlas_ms"] / cell["probe_ms"]
            cell["mlas_over_wide"] = cell["mlas_ms"] / cell["wide_ms"]
            cell["tiled_over_its_1_row"] = cell["tiled_ms"] / one["tiled_ms"]
            cell["mlas_over_tiled"] = cell["mlas_ms"] / cell["tiled_ms"]
            cell["packed_over_its_1_row"] = cell["packed_ms"] / one["packed_ms"]
            cell["mlas_over_packed"] = cell["mlas_ms"] / cell["packed_ms"]
    for r in (1, 5):  # the headline: the engine's 1-row step and its 5-row verify pass
        if r in results["rows"]:
            cell = results["rows"][r]
            results[f"mlas_over_probe_{r}_row"] = cell["mlas_over_probe"]
            results[f"mlas_over_wide_{r}_row"] = cell["mlas_over_wide"]
            results[f"mlas_over_tiled_{r}_row"] = cell["mlas_over_tiled"]
            results[f"mlas_over_packed_{r}_row"] = cell["mlas_over_packed"]
            if r > 1:
                for side in ("probe", "wide", "tiled", "packed", "mlas"):
                    results[f"{side}_{r}_rows_over_1_row"] = cell[f"{side}_over_its_1_row"]
    for key in ("max_rel_error_vs_float64", "wide_max_rel_error_vs_float64", "tiled_max_rel_error_vs_float64"):
        results[key] = f"{results[key]:.1e}"  # float32 rounding: shown as it is, not as 0.000
    results["provenance"] = record("lab.gguf_kernel_probe", load_start)
    print_and_save(results, args.json)


if __name__ == "__main__":
    main()
