/* The int8 layer law (reference/int8_layer_law.py): a decoder layer's two halves in C.

   A half is one call: ``pre`` (RMSNorm -> QKV -> bias -> per-head q/k norm -> RoPE) and ``post``
   (o -> bias -> post-attention norm -> residual -> RMSNorm -> gate/up -> activation -> down ->
   post-FFN norm -> residual); a ``link`` is one layer's post and the next layer's pre. The
   attention between two halves stays with the caller. Every operation is per activation row, so
   a k-row call gives each row the bits a 1-row call gives it; every float32 operation is the
   law's, in its order, never fused (compiled with -ffp-contract=off; the vector code multiplies and
   adds with separate instructions), so the plain C and the AVX-512 VNNI kernels give the same bits.

   Weights (engine/tile_layers.py packs them from the lossless kernel blocks of engine/blocks.py):
   16 weight rows a tile; per tile and weight block of B = 16 or 32 inputs, ``tbb`` bytes:
       16 x scale: float32, or float16 where every scale is one      (64 or 32 bytes)
       16 x min, as wide as the scales   (only for a matrix with mins) (64 or 32 bytes)
       16 x uint8 zero                   (only where a zero point is not 0) (16 bytes)
       levels: 8-bit: B/4 vectors of 64 bytes, vector j lane i = row i's levels 4j..4j+3;
               4-bit: B/8 vectors of 64 bytes, byte (p, i, u) = level (4p+u) low nibble,
                      level (4(p + B/8) + u) high nibble
               5-bit: the 4-bit form of the levels' low 4 bits, then B/4 masks of 64 bits, mask j
                      bit 4i + u = bit 4 of row i's level 4j + u (vector j's byte, as a mask register)
   Lanes are weight rows, so the vector kernel computes each (weight row, activation row) pair in
   the law's own order. Float16 scales and mins (types whose blocks store them so: Q4_0, Q4_1,
   Q5_0, Q5_1, Q8_0) widen to float32 exactly, so the law's products are the same; the tiles of
   such a type then hold the file's own bytes a block (Q4_1: 20 a block of 32). */

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "half_float.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TILE_X86 1
#endif

#define QK 32
#define TILE_ROWS 16
#define GROUP_ROWS 8
#define MAX_THREADS 64
/* tiles a thread takes at a time: a stream long enough for the prefetchers (chunks of 4 measured
   ~20% slower on two threads, on SmolLM2's layers and Gemma 3's) */
#define CHUNK_TILES 16

enum { ISA_PORTABLE = 0, ISA_AVX2 = 1, ISA_AVX512_VNNI = 2 };
enum { ACT_SILU = 0, ACT_GELU_TANH = 1 };

int lt_abi_version(void) { return 3; }

int lt_isa_supported(int isa) {
    if (isa == ISA_PORTABLE) return 1;
#ifdef TILE_X86
    __builtin_cpu_init();
    if (isa == ISA_AVX512_VNNI)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
#endif
    return 0;
}

/* Every loop of the vector kernel has a bound fixed at compile time (rows, block, bits): unrolled,
   the rows' accumulators and the block's level vectors stay in registers (-O2 alone keeps the loops
   and spills both to the stack, which costs a pass of several rows about a third of its time). */
#define UNROLL _Pragma("GCC unroll 16")

#ifdef TILE_X86
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,f16c")))
#endif

/* ---- the law's elementwise functions ------------------------------------------------------ */

/* exp: Cephes' expf, operation by operation (reference/int8_layer_law.py exp_law) */
static float exp_law(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return INFINITY;
    if (x < -87.33654022216797f) return 0.0f;
    const float n = floorf(x * 1.44269502162933349609375f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    const float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r;
    p = p + 1.0f;
    return ldexpf(p, (int)n);
}


static float silu_law(float g) { return g * (1.0f / (1.0f + exp_law(-g))); }

static float gelu_tanh_law(float g) {
    const float g3 = (g * g) * g;
    const float inner = 0.7978845834732056f * (g + 0.044715f * g3);
    const float th = 1.0f - 2.0f / (exp_law(2.0f * inner) + 1.0f);
    return (0.5f * g) * (1.0f + th);
}

#ifdef TILE_X86
/* exp_law on 16 lanes, the same operations: floor by roundscale (exact), ldexp by scalef (one
   rounding, as ldexpf: the exact product rounded once, also where it is subnormal or overflows) */
static inline AVX512 __m512 exp16(__m512 x) {
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __mmask16 high = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283935546875f), _CMP_GT_OQ);
    const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654022216797f), _CMP_LT_OQ);
    const __m512 xi = _mm512_mask_blend_ps(nan | high | low, x, _mm512_setzero_ps());
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(xi, _mm512_set1_ps(1.44269502162933349609375f)), _mm512_set1_ps(0.5f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(xi, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, z), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    __m512 y = _mm512_scalef_ps(p, n);
    y = _mm512_mask_blend_ps(high, y, _mm512_set1_ps(INFINITY));
    y = _mm512_mask_blend_ps(low, y, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(nan, y, x);
}

static inline AVX512 __m512 silu16(__m512 g) {
    const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)0x80000000u))));
    return _mm512_mul_ps(g, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
}

static inline AVX512 __m512 gelu16(__m512 g) {
    const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
    const __m512 inner = _mm512_mul_ps(_mm512_set1_ps(0.7978845834732056f),
                                       _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(0.044715f), g3)));
    const __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(2.0f), inner));
    const __m512 th = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                                    _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), g), _mm512_add_ps(_mm512_set1_ps(1.0f), th));
}

/* y = act(g) * u over n values (u NULL: act(g)) */
static AVX512 void act_avx512(const float *g, const float *u, float *y, int n, int act) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 gi = _mm512_loadu_ps(g + i);
        __m512 z = act == ACT_SILU ? silu16(gi) : gelu16(gi);
        if (u) z = _mm512_mul_ps(z, _mm512_loadu_ps(u + i));
        _mm512_storeu_ps(y + i, z);
    }
    for (; i < n; i++) {
        const float z = act == ACT_SILU ? silu_law(g[i]) : gelu_tanh_law(g[i]);
        y[i] = u ? z * u[i] : z;
    }
}

static AVX512 void exp_avx512(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = exp_law(x[i]);
}
#endif

static void act_portable(const float *g, const float *u, float *y, int n, int act) {
    for (int i = 0; i < n; i++) {
        const float z = act == ACT_SILU ? silu_law(g[i]) : gelu_tanh_law(g[i]);
        y[i] = u ? z * u[i] : z;
    }
}

/* y = act(g) * u (u NULL: act(g)) on ``isa`` */
static void activation(const float *g, const float *u, float *y, int n, int act, int isa) {
#ifdef TILE_X86
    if (isa == ISA_AVX512_VNNI) {
        act_avx512(g, u, y, n, act);
        return;
    }
#endif
    (void)isa;
    act_portable(g, u, y, n, act);
}

static void exp_many(const float *x, float *y, int n, int isa) {
#ifdef TILE_X86
    if (isa == ISA_AVX512_VNNI) {
        exp_avx512(x, y, n);
        return;
    }
#endif
    (void)isa;
    for (int i = 0; i < n; i++) y[i] = exp_law(x[i]);
}

void lt_activation(const float *g, float *y, int n, int act, int isa) { activation(g, NULL, y, n, act, isa); }

void lt_exp(const float *x, float *y, int n, int isa) { exp_many(x, y, n, isa); }

/* RMSNorm of one row: the sum of squares in index order, then y = (x / sqrt(ss / n + eps)) * w */
static void rms_norm_law(const float *x, const float *w, float *y, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss = ss + x[i] * x[i];
    const float s = sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] / s) * w[i];
}

/* ---- activations: int8 per block of 32 ----------------------------------------------------- */

typedef struct {
    int K, B;
    int8_t *levels; /* [K] */
    float *scales;  /* [K / 32] */
    int32_t *sums;  /* [K / B]: each weight block's sum of levels */
    int finite;
} act_row_t;

#ifdef TILE_X86
/* quantize_row on 16 lanes: the same max (exact in any order), divisions and ties-to-even rounding */
static AVX512 void quantize_row_avx512(const float *x, act_row_t *a) {
    const int K = a->K;
    const __m512 inf = _mm512_set1_ps(INFINITY);
    __mmask16 finite = 0xFFFF;
    for (int k = 0; k < K; k += 16)
        finite &= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + k)), inf, _CMP_LT_OQ);
    a->finite = finite == 0xFFFF;
    for (int b = 0; b < K / QK; b++) {
        const float *xb = x + b * QK;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        float amax = 0.0f;
        if (a->finite)
            amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f;
        int8_t *q = a->levels + b * QK;
        if (d == 0.0f) {
            memset(q, 0, QK);
        } else {
            const __m512 dd = _mm512_set1_ps(d);
            const int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_div_ps(v0, dd), mode));
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_div_ps(v1, dd), mode));
            _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
        }
        a->scales[b] = d;
    }
    for (int b = 0; b < K / a->B; b++) {
        int32_t s = 0;
        for (int j = 0; j < a->B; j++) s += a->levels[b * a->B + j];
        a->sums[b] = s;
    }
}
#endif

static void quantize_row(const float *x, act_row_t *a, int isa) {
#ifdef TILE_X86
    if (isa == ISA_AVX512_VNNI) {
        quantize_row_avx512(x, a);
        return;
    }
#endif
    (void)isa;
    const int K = a->K;
    int ok = 1;
    for (int k = 0; k < K; k++) ok &= isfinite(x[k]) != 0;
    a->finite = ok;
    for (int b = 0; b < K / QK; b++) {
        const float *xb = x + b * QK;
        float amax = 0.0f;
        if (ok)
            for (int j = 0; j < QK; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        const float d = amax / 127.0f;
        for (int j = 0; j < QK; j++) a->levels[b * QK + j] = d == 0.0f ? 0 : (int8_t)rintf(xb[j] / d);
        a->scales[b] = d;
    }
    for (int b = 0; b < K / a->B; b++) {
        int32_t s = 0;
        for (int j = 0; j < a->B; j++) s += a->levels[b * a->B + j];
        a->sums[b] = s;
    }
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *tiles;
    int n_out, K, bits, block, has_min, tbb;
    int has_zero; /* some zero point is not 0 (the packer sets it): the block holds the zeros */
    int half;     /* scales and mins are float16 (every one exactly a float16) */
} lt_matrix_t;

/* Offsets in a block (module doc): the mins, the zeros, the levels. */
static inline int mins_at(const lt_matrix_t *m) { return m->half ? 32 : 64; }
static inline int zeros_at(const lt_matrix_t *m) { return mins_at(m) * (m->has_min ? 2 : 1); }
static inline int levels_at(const lt_matrix_t *m) { return zeros_at(m) + (m->has_zero ? 16 : 0); }

/* lane i of the scales (at = 0) or mins (at = mins_at) of a block */
static inline float block_float(const lt_matrix_t *m, const uint8_t *blk, int at, int i) {
    if (m->half) {
        uint16_t h;
        memcpy(&h, blk + at + 2 * i, 2);
        return half_to_float(h);
    }
    float f;
    memcpy(&f, blk + at + 4 * i, 4);
    return f;
}

typedef struct {
    const lt_matrix_t *m;
    const act_row_t *rows; /* [R] */
    int R;
    float *y; /* [R, ldy] */
    int ldy;
    int isa;
    int next; /* the first tile not yet handed out (atomic) */
    int workers; /* pool workers that take part */
} job_t;

static inline int tile_rows(const lt_matrix_t *m, int t) {
    const int left = m->n_out - t * TILE_ROWS;
    return left < TILE_ROWS ? left : TILE_ROWS;
}

static void portable_tiles(const job_t *g, int r0, int R, int first, int last) {
    const lt_matrix_t *m = g->m;
    const int B = m->block, nbw = m->K / B, lev = levels_at(m), zat = zeros_at(m), mat = mins_at(m);
    for (int t = first; t < last; t++) {
        const uint8_t *tile = m->tiles + (size_t)t * nbw * m->tbb;
        const int valid = tile_rows(m, t);
        for (int r = r0; r < r0 + R; r++) {
            const act_row_t *a = &g->rows[r];
            float acc[TILE_ROWS] = {0};
            for (int b = 0; b < nbw; b++) {
                const uint8_t *blk = tile + (size_t)b * m->tbb;
                const uint8_t *levels = blk + lev;
                const float da = a->scales[(b * B) / QK];
                const int32_t asum = a->sums[b];
                for (int i = 0; i < TILE_ROWS; i++) {
                    int32_t dot = 0;
                    for (int k = 0; k < B; k++) {
                        const int j = k / 4, u = k % 4;
                        int level;
                        if (m->bits == 8) {
                            level = levels[64 * j + 4 * i + u];
                        } else {
                            const int half = B / 8, p = j % half;
                            const uint8_t byte = levels[64 * p + 4 * i + u];
                            level = j < half ? byte & 0x0F : byte >> 4;
                            if (m->bits == 5) {
                                const uint8_t *fifth = levels + 8 * B; /* after the B/8 nibble vectors */
                                const int bit = 4 * i + u;
                                level |= ((fifth[8 * j + bit / 8] >> (bit % 8)) & 1) << 4;
                            }
                        }
                        dot += level * a->levels[b * B + k];
                    }
                    const float scale = block_float(m, blk, 0, i);
                    const float mn = m->has_min ? block_float(m, blk, mat, i) : 0.0f;
                    const int32_t idot = m->has_zero ? dot - (int32_t)blk[zat + i] * asum : dot;
                    const float sd = scale * da;
                    const float t1 = (float)idot * sd;
                    acc[i] = acc[i] + t1;
                    if (m->has_min) {
                        const float md = mn * da;
                        const float t2 = (float)asum * md;
                        acc[i] = acc[i] + t2;
                    }
                }
            }
            memcpy(g->y + (size_t)r * g->ldy + (size_t)t * TILE_ROWS, acc, sizeof(float) * valid);
        }
    }
}

#ifdef TILE_X86

static inline AVX512 __attribute__((always_inline)) void avx512_tiles(const job_t *g, int r0, int first, int last,
                                                                   const int NR, const int BITS, const int B,
                                                                   const int MIN, const int ZERO) {
    const lt_matrix_t *m = g->m;
    const int nbw = m->K / B, half = m->half, mat = mins_at(m), zat = zeros_at(m), lev = levels_at(m);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int t = first; t < last; t++) {
        const uint8_t *tile = m->tiles + (size_t)t * nbw * m->tbb;
        __m512 acc[GROUP_ROWS];
        UNROLL
        for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
        for (int b = 0; b < nbw; b++) {
            const uint8_t *blk = tile + (size_t)b * m->tbb;
            /* float16 lanes widen exactly (vcvtph2ps): the same float32 scales */
            const __m512 scale = half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk))
                                      : _mm512_loadu_ps((const float *)blk);
            const __m512 mn = !MIN    ? _mm512_setzero_ps()
                              : half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + mat)))
                                     : _mm512_loadu_ps((const float *)(blk + mat));
            const __m512i zero =
                ZERO ? _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + zat))) : _mm512_setzero_si512();
            const uint8_t *levels = blk + lev;
            __m512i w[8];
            if (BITS == 8) {
                UNROLL
                for (int j = 0; j < B / 4; j++) w[j] = _mm512_loadu_si512((const void *)(levels + 64 * j));
            } else {
                UNROLL
                for (int p = 0; p < B / 8; p++) {
                    const __m512i v = _mm512_loadu_si512((const void *)(levels + 64 * p));
                    w[p] = _mm512_and_si512(v, low4);
                    w[p + B / 8] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                }
                if (BITS == 5) { /* each byte's fifth bit from its mask: + 16 where set */
                    const uint8_t *fifth = levels + 8 * B;
                    UNROLL
                    for (int j = 0; j < B / 4; j++) {
                        uint64_t bits;
                        memcpy(&bits, fifth + 8 * j, 8);
                        w[j] = _mm512_mask_add_epi8(w[j], _cvtu64_mask64(bits), w[j], _mm512_set1_epi8(16));
                    }
                }
            }
            UNROLL
            for (int r = 0; r < NR; r++) {
                const act_row_t *a = &g->rows[r0 + r];
                const uint8_t *al = (const uint8_t *)(a->levels + b * B);
                __m512i dot = _mm512_setzero_si512();
                UNROLL
                for (int j = 0; j < B / 4; j++) {
                    int32_t a4;
                    memcpy(&a4, al + 4 * j, 4);
                    dot = _mm512_dpbusd_epi32(dot, w[j], _mm512_set1_epi32(a4));
                }
                const int32_t asum = a->sums[b];
                /* every zero point 0 (no ZERO): idot is dot, the same integer */
                const __m512i idot =
                    ZERO ? _mm512_sub_epi32(dot, _mm512_mullo_epi32(zero, _mm512_set1_epi32(asum))) : dot;
                const __m512 da = _mm512_set1_ps(a->scales[(b * B) / QK]);
                const __m512 sd = _mm512_mul_ps(scale, da);
                acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(idot), sd));
                if (MIN) {
                    const __m512 md = _mm512_mul_ps(mn, da);
                    acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_set1_ps((float)asum), md));
                }
            }
        }
        const __mmask16 keep = (__mmask16)((1u << tile_rows(m, t)) - 1u);
        UNROLL
        for (int r = 0; r < NR; r++)
            _mm512_mask_storeu_ps(g->y + (size_t)(r0 + r) * g->ldy + (size_t)t * TILE_ROWS, keep, acc[r]);
    }
}

#define AVX512_FORM(BITS, B, MIN, ZERO)                                                            \
    static AVX512 void avx512_##BITS##_##B##_##MIN##ZERO(const job_t *g, int r0, int R, int first, int last) { \
        switch (R) {                                                                               \
        case 1: avx512_tiles(g, r0, first, last, 1, BITS, B, MIN, ZERO); break;                    \
        case 2: avx512_tiles(g, r0, first, last, 2, BITS, B, MIN, ZERO); break;                    \
        case 3: avx512_tiles(g, r0, first, last, 3, BITS, B, MIN, ZERO); break;                    \
        case 4: avx512_tiles(g, r0, first, last, 4, BITS, B, MIN, ZERO); break;                    \
        case 5: avx512_tiles(g, r0, first, last, 5, BITS, B, MIN, ZERO); break;                    \
        case 6: avx512_tiles(g, r0, first, last, 6, BITS, B, MIN, ZERO); break;                    \
        case 7: avx512_tiles(g, r0, first, last, 7, BITS, B, MIN, ZERO); break;                    \
        default: avx512_tiles(g, r0, first, last, 8, BITS, B, MIN, ZERO); break;                   \
        }                                                                                          \
    }
#define AVX512_FORMS(BITS, B) AVX512_FORM(BITS, B, 0, 0) AVX512_FORM(BITS, B, 0, 1) AVX512_FORM(BITS, B, 1, 0) \
    AVX512_FORM(BITS, B, 1, 1)
AVX512_FORMS(4, 16)
AVX512_FORMS(4, 32)
AVX512_FORMS(5, 16)
AVX512_FORMS(5, 32)
AVX512_FORMS(8, 16)
AVX512_FORMS(8, 32)

typedef void (*form_fn)(const job_t *, int, int, int, int);
static form_fn avx512_form(const lt_matrix_t *m) {
    static const form_fn forms[3][2][2][2] = {
        {{{avx512_4_16_00, avx512_4_16_01}, {avx512_4_16_10, avx512_4_16_11}},
         {{avx512_4_32_00, avx512_4_32_01}, {avx512_4_32_10, avx512_4_32_11}}},
        {{{avx512_5_16_00, avx512_5_16_01}, {avx512_5_16_10, avx512_5_16_11}},
         {{avx512_5_32_00, avx512_5_32_01}, {avx512_5_32_10, avx512_5_32_11}}},
        {{{avx512_8_16_00, avx512_8_16_01}, {avx512_8_16_10, avx512_8_16_11}},
         {{avx512_8_32_00, avx512_8_32_01}, {avx512_8_32_10, avx512_8_32_11}}},
    };
    return forms[m->bits == 4 ? 0 : m->bits == 5 ? 1 : 2][m->block == 32][m->has_min != 0][m->has_zero != 0];
}
#endif

static void run_tiles(const job_t *g, int first, int last) {
    for (int r0 = 0; r0 < g->R; r0 += GROUP_ROWS) {
        const int R = g->R - r0 < GROUP_ROWS ? g->R - r0 : GROUP_ROWS;
#ifdef TILE_X86
        if (g->isa == ISA_AVX512_VNNI) {
            avx512_form(g->m)(g, r0, R, first, last);
            continue;
        }
#endif
        portable_tiles(g, r0, R, first, last);
    }
}

static void run_chunks(job_t *g) {
    const int n_tiles = (g->m->n_out + TILE_ROWS - 1) / TILE_ROWS;
    for (;;) {
        const int first = __atomic_fetch_add(&g->next, CHUNK_TILES, __ATOMIC_RELAXED);
        if (first >= n_tiles) return;
        run_tiles(g, first, first + CHUNK_TILES < n_tiles ? first + CHUNK_TILES : n_tiles);
    }
}

/* ---- threads: a pool that lives across calls ------------------------------------------------

   Workers spin on a generation counter between jobs for a while (a decode step's matrices come
   tens of microseconds apart), then sleep on a condition variable. Which thread computes a tile
   changes nothing in its bits (each output is one thread's, in the law's order). A forked child
   has none of its parent's threads: the pool is rebuilt when the process id changes. */

#define SPIN_ROUNDS 20000

static struct {
    pid_t pid;
    int workers;
    pthread_t ids[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned gen;  /* atomic: bumped once per job */
    job_t *job;    /* the current job (written before gen) */
    int done;      /* atomic: workers finished with the current job */
} pool;

static pthread_mutex_t pool_build = PTHREAD_MUTEX_INITIALIZER;

static inline void cpu_relax(void) {
#ifdef TILE_X86
    _mm_pause();
#endif
}

typedef struct {
    int index;
    unsigned seen; /* the generation when it was made: it takes every later job */
} worker_start_t;

static void *worker(void *arg) {
    const worker_start_t start = *(worker_start_t *)arg;
    free(arg);
    const int index = start.index;
    unsigned seen = start.seen;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE)) == seen) {
            if (++spins < SPIN_ROUNDS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool.mu);
            while (__atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&pool.cv, &pool.mu);
            pthread_mutex_unlock(&pool.mu);
            spins = 0;
        }
        seen = gen;
        job_t *job = pool.job;
        if (index < job->workers) run_chunks(job);
        __atomic_fetch_add(&pool.done, 1, __ATOMIC_ACQ_REL);
    }
    return NULL;
}

/* the pool with at least ``want`` workers (fewer if threads cannot start); returns its size */
static int pool_ready(int want) {
    pthread_mutex_lock(&pool_build);
    if (pool.pid != getpid()) { /* first use, or a forked child: no workers here */
        memset(&pool, 0, sizeof pool);
        pthread_mutex_init(&pool.mu, NULL);
        pthread_cond_init(&pool.cv, NULL);
        pool.pid = getpid();
    }
    while (pool.workers < want && pool.workers < MAX_THREADS - 1) {
        pthread_t id;
        /* a new worker starts at the current generation, read here (not when the thread runs, which
           may be after the next job is posted): it takes every job from the next one on */
        worker_start_t *start = malloc(sizeof *start);
        if (!start) break;
        start->index = pool.workers;
        start->seen = __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE);
        if (pthread_create(&id, NULL, worker, start) != 0) {
            free(start);
            break;
        }
        pthread_detach(id);
        pool.ids[pool.workers++] = id;
    }
    const int workers = pool.workers;
    pthread_mutex_unlock(&pool_build);
    return workers;
}

static void run_job(job_t *job, int threads) {
    const int n_tiles = (job->m->n_out + TILE_ROWS - 1) / TILE_ROWS;
    int want = threads - 1;
    if (want > (n_tiles + CHUNK_TILES - 1) / CHUNK_TILES - 1) want = (n_tiles + CHUNK_TILES - 1) / CHUNK_TILES - 1;
    if (want <= 0) {
        run_chunks(job);
        return;
    }
    const int workers = pool_ready(want);
    job->workers = want < workers ? want : workers;
    pool.job = job;
    __atomic_store_n(&pool.done, 0, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pool.mu);
    __atomic_fetch_add(&pool.gen, 1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    run_chunks(job);
    while (__atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) < workers) cpu_relax();
}

/* ---- a matmul: y [R, n_out] = the law of the rows x [R, K] against m ------------------------ */

typedef struct {
    act_row_t *rows;
    int8_t *levels;
    float *scales;
    int32_t *sums;
} acts_t;

static int acts_alloc(acts_t *a, int R, int K, int B) {
    a->rows = malloc(sizeof(act_row_t) * (size_t)(R ? R : 1));
    a->levels = malloc((size_t)R * K + 1);
    a->scales = malloc(sizeof(float) * ((size_t)R * (K / QK) + 1));
    a->sums = malloc(sizeof(int32_t) * ((size_t)R * (K / B) + 1));
    if (!a->rows || !a->levels || !a->scales || !a->sums) return -1;
    for (int r = 0; r < R; r++)
        a->rows[r] = (act_row_t){K, B, a->levels + (size_t)r * K, a->scales + (size_t)r * (K / QK),
                                 a->sums + (size_t)r * (K / B), 0};
    return 0;
}

static void acts_free(acts_t *a) {
    free(a->rows);
    free(a->levels);
    free(a->scales);
    free(a->sums);
}

static int matmul(const lt_matrix_t *m, const float *x, int R, float *y, int threads, int isa) {
    acts_t a;
    if (acts_alloc(&a, R, m->K, m->block) != 0) {
        acts_free(&a);
        return -2;
    }
    for (int r = 0; r < R; r++) quantize_row(x + (size_t)r * m->K, &a.rows[r], isa);
    job_t job = {m, a.rows, R, y, m->n_out, isa, 0, 0};
    run_job(&job, threads);
    for (int r = 0; r < R; r++)
        if (!a.rows[r].finite)
            for (int n = 0; n < m->n_out; n++) y[(size_t)r * m->n_out + n] = NAN;
    acts_free(&a);
    return 0;
}

static int matrix_ok(const lt_matrix_t *m) {
    if (!m->tiles || m->n_out <= 0 || m->K <= 0 || m->K % QK || (m->bits != 4 && m->bits != 5 && m->bits != 8) ||
        (m->block != 16 && m->block != 32))
        return 0;
    return m->tbb == levels_at(m) + m->block * TILE_ROWS * m->bits / 8;
}

static int isa_ok(int isa) { return (isa == ISA_PORTABLE || isa == ISA_AVX512_VNNI) && lt_isa_supported(isa); }

/* y [R, n_out] = x [R, K] against m, by the law. 0, or -1 for bad arguments, -2 out of memory. */
int lt_matmul(const lt_matrix_t *m, const float *x, int R, float *y, int threads, int isa) {
    if (!matrix_ok(m) || R < 0 || !isa_ok(isa)) return -1;
    return matmul(m, x, R, y, threads, isa);
}

/* ---- the layer's halves ---------------------------------------------------------------------- */

typedef struct {
    int E, n_head, n_kv, d, n_ff, act;
    float eps;
    const float *attn_norm;      /* [E] */
    lt_matrix_t qkv;             /* [n_head d + 2 n_kv d, E] */
    const float *bqkv;           /* [n_head d + 2 n_kv d] or NULL */
    const float *q_norm, *k_norm; /* [d] or NULL */
    const int32_t *rot;          /* [d]: RoPE's partner of each dim */
    lt_matrix_t o;               /* [E, n_head d] */
    const float *bo;             /* [E] or NULL */
    const float *post_attn_norm; /* [E] or NULL */
    const float *ffn_norm;       /* [E] */
    lt_matrix_t gu;              /* [2 n_ff, E]: gate rows, then up rows */
    lt_matrix_t down;            /* [E, n_ff] */
    const float *post_ffn_norm;  /* [E] or NULL */
} lt_layer_t;

static int layer_ok(const lt_layer_t *L) {
    const int q = L->n_head * L->d, kv = L->n_kv * L->d;
    if (L->E <= 0 || L->n_head <= 0 || L->n_kv <= 0 || L->d <= 0 || L->n_ff <= 0 || !L->attn_norm ||
        !L->ffn_norm || !L->rot || (L->act != ACT_SILU && L->act != ACT_GELU_TANH) || (!L->q_norm) != (!L->k_norm))
        return 0;
    if (!matrix_ok(&L->qkv) || !matrix_ok(&L->o) || !matrix_ok(&L->gu) || !matrix_ok(&L->down)) return 0;
    if (L->qkv.n_out != q + 2 * kv || L->qkv.K != L->E || L->o.n_out != L->E || L->o.K != q ||
        L->gu.n_out != 2 * L->n_ff || L->gu.K != L->E || L->down.n_out != L->E || L->down.K != L->n_ff)
        return 0;
    for (int i = 0; i < L->d; i++)
        if (L->rot[i] < 0 || L->rot[i] >= L->d) return 0;
    return 1;
}

/* pre: x [T, E], cos, sin [T, d] -> qk [T, n_head + n_kv, d], v [T, n_kv d] */
static int pre(const lt_layer_t *L, int T, const float *x, const float *cos, const float *sin, float *qk, float *v,
               int threads, int isa) {
    const int E = L->E, d = L->d, H = L->n_head + L->n_kv, nqkv = L->qkv.n_out, kvd = L->n_kv * d;
    float *h = malloc(sizeof(float) * ((size_t)T * E + 1));
    float *qkv = malloc(sizeof(float) * ((size_t)T * nqkv + 1));
    float *unit = malloc(sizeof(float) * ((size_t)d + 1));
    int rc = -2;
    if (!h || !qkv || !unit) goto out;
    for (int t = 0; t < T; t++) rms_norm_law(x + (size_t)t * E, L->attn_norm, h + (size_t)t * E, E, L->eps);
    if ((rc = matmul(&L->qkv, h, T, qkv, threads, isa)) != 0) goto out;
    for (int t = 0; t < T; t++) {
        float *row = qkv + (size_t)t * nqkv;
        if (L->bqkv)
            for (int n = 0; n < nqkv; n++) row[n] = row[n] + L->bqkv[n];
        for (int head = 0; head < H; head++) {
            float *src = row + (size_t)head * d;
            if (L->q_norm) {
                rms_norm_law(src, head < L->n_head ? L->q_norm : L->k_norm, unit, d, L->eps);
                memcpy(src, unit, sizeof(float) * d);
            }
            float *dst = qk + ((size_t)t * H + head) * d;
            const float *c = cos + (size_t)t * d, *s = sin + (size_t)t * d;
            for (int i = 0; i < d; i++) {
                const float a = src[i] * c[i];
                const float b = src[L->rot[i]] * s[i];
                dst[i] = a + b;
            }
        }
        memcpy(v + (size_t)t * kvd, row + (size_t)H * d, sizeof(float) * kvd);
    }
out:
    free(h);
    free(qkv);
    free(unit);
    return rc;
}

/* post: attn [T, n_head d], x [T, E] -> y [T, E] (y may not overlap attn or x) */
static int post(const lt_layer_t *L, int T, const float *attn, const float *x, float *y, int threads, int isa) {
    const int E = L->E, ff = L->n_ff;
    float *a = malloc(sizeof(float) * ((size_t)T * E + 1));
    float *h = malloc(sizeof(float) * ((size_t)T * E + 1));
    float *gu = malloc(sizeof(float) * ((size_t)T * 2 * ff + 1));
    float *act = malloc(sizeof(float) * ((size_t)T * ff + 1));
    float *f = malloc(sizeof(float) * ((size_t)T * E + 1));
    int rc = -2;
    if (!a || !h || !gu || !act || !f) goto out;
    if ((rc = matmul(&L->o, attn, T, a, threads, isa)) != 0) goto out;
    for (int t = 0; t < T; t++) {
        float *ar = a + (size_t)t * E, *yr = y + (size_t)t * E;
        const float *xr = x + (size_t)t * E;
        if (L->bo)
            for (int i = 0; i < E; i++) ar[i] = ar[i] + L->bo[i];
        if (L->post_attn_norm) {
            rms_norm_law(ar, L->post_attn_norm, h + (size_t)t * E, E, L->eps);
            memcpy(ar, h + (size_t)t * E, sizeof(float) * E);
        }
        for (int i = 0; i < E; i++) yr[i] = xr[i] + ar[i]; /* the residual, held in y */
        rms_norm_law(yr, L->ffn_norm, h + (size_t)t * E, E, L->eps);
    }
    if ((rc = matmul(&L->gu, h, T, gu, threads, isa)) != 0) goto out;
    for (int t = 0; t < T; t++) {
        const float *g = gu + (size_t)t * 2 * ff;
        activation(g, g + ff, act + (size_t)t * ff, ff, L->act, isa);
    }
    if ((rc = matmul(&L->down, act, T, f, threads, isa)) != 0) goto out;
    for (int t = 0; t < T; t++) {
        float *fr = f + (size_t)t * E, *yr = y + (size_t)t * E;
        if (L->post_ffn_norm) {
            rms_norm_law(fr, L->post_ffn_norm, h + (size_t)t * E, E, L->eps);
            fr = h + (size_t)t * E;
        }
        for (int i = 0; i < E; i++) yr[i] = yr[i] + fr[i];
    }
out:
    free(a);
    free(h);
    free(gu);
    free(act);
    free(f);
    return rc;
}

/* The calls: 0, or -1 for bad arguments (nothing written), -2 out of memory. */
int lt_pre(const lt_layer_t *L, int T, const float *x, const float *cos, const float *sin, float *qk, float *v,
           int threads, int isa) {
    if (!layer_ok(L) || T < 0 || !isa_ok(isa)) return -1;
    return pre(L, T, x, cos, sin, qk, v, threads, isa);
}

int lt_post(const lt_layer_t *L, int T, const float *attn, const float *x, float *y, int threads, int isa) {
    if (!layer_ok(L) || T < 0 || !isa_ok(isa)) return -1;
    return post(L, T, attn, x, y, threads, isa);
}

/* post of ``here``, then pre of ``after`` on y; a row with enter set skips post: y = x */
int lt_link(const lt_layer_t *here, const lt_layer_t *after, int T, const float *attn, const float *x,
            const float *cos, const float *sin, const uint8_t *enter, float *y, float *qk, float *v, int threads,
            int isa) {
    if (!layer_ok(here) || !layer_ok(after) || here->E != after->E || T < 0 || !isa_ok(isa)) return -1;
    int rc = post(here, T, attn, x, y, threads, isa);
    if (rc != 0) return rc;
    for (int t = 0; t < T; t++)
        if (enter[t]) memcpy(y + (size_t)t * here->E, x + (size_t)t * here->E, sizeof(float) * here->E);
    return pre(after, T, y, cos, sin, qk, v, threads, isa);
}

/* Query heads of one kv head attended together (at most this many at once): each key and value
   row is read once for all of them, and their sums are independent chains. */
#define HEADS_AT_ONCE 4

/* ---- attention: one query row over its visible keys, the law's order ------------------------

   Per query head (kv head = head / group): score_s = dot(q, k_s) * scale for each visible slot s
   (visible: 0 <= q_pos - key_pos, and < window when window > 0); the dot in 16 lanes, lane j
   summing q[16c + j] k[16c + j] over c from its first product, then the lanes in a fixed tree
   (j + j+8, then + j+4, + j+2, + j+1); m = max score; e_s = exp(score_s - m); sum = the e_s in slot
   order; p_s = e_s / sum; out = the p_s v_s in slot order, from the first term. */

typedef struct {
    int n_head, n_kv, d, window;
    float scale;
    const float *k, *v;      /* this layer's K, V: [n_kv, slots, d] */
    long head_stride;        /* floats between two kv heads' slot 0 (slot stride: d) */
    const int64_t *key_pos;  /* [slots] */
} lt_attention_t;

static float lane_tree(const float *acc) {
    float t8[8], t4[4], t2[2];
    for (int j = 0; j < 8; j++) t8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++) t4[j] = t8[j] + t8[j + 4];
    for (int j = 0; j < 2; j++) t2[j] = t4[j] + t4[j + 2];
    return t2[0] + t2[1];
}

/* lane j: the products of dims i = j (mod 16) in increasing i, from the first; +0 without one */
static float dot_portable(const float *q, const float *k, int d) {
    float acc[16];
    for (int j = 0; j < 16; j++) acc[j] = j < d ? q[j] * k[j] : 0.0f;
    for (int i = 16; i < d; i++) acc[i % 16] = acc[i % 16] + q[i] * k[i];
    return lane_tree(acc);
}

static void axpy_portable(float *acc, float p, const float *v, int d, int first) {
    for (int i = 0; i < d; i++) acc[i] = first ? p * v[i] : acc[i] + p * v[i];
}

#ifdef TILE_X86
static AVX512 float dot_avx512(const float *q, const float *k, int d) {
    __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
    for (int c = 16; c < d; c += 16)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(k + c)));
    float lanes[16];
    _mm512_storeu_ps(lanes, acc);
    return lane_tree(lanes);
}

/* The lane trees of 16 keys at once: a[i] holds key i's 16 lanes; the result's lane i is key i's
   dot. Each add pairs what lane_tree pairs (lanes j and j+8, then j and j+4, j and j+2, j and
   j+1; an IEEE sum does not depend on the order of its two operands), the shuffles only move
   lanes: the same 16 floats as 16 lane_tree calls. */
static inline AVX512 __attribute__((always_inline)) __m512 lane_trees16(const __m512 a[16]) {
    __m512 x[8], z[4], u[2];
    UNROLL
    for (int i = 0; i < 8; i++) /* keys 2i, 2i+1: lanes 0-7 and 8-15 hold their t8 */
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    UNROLL
    for (int i = 0; i < 4; i++) /* keys 4i..4i+3: 128-bit lane L holds key 4i+L's t4 */
        z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xDD));
    UNROLL
    for (int i = 0; i < 2; i++) /* 128-bit lane L: key 8i+L's t2, then key 8i+4+L's */
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* element e of 128-bit lane L: key L + 4e */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* scores[h][j] = dot(q_h, k of visible[j]) * scale for H consecutive heads q [H, d], 16 keys at
   a time (their rows stay in L1 across the heads), each key's lanes as dot_avx512's */
static AVX512 void head_scores(const float *q, int H, const float *kh, const int32_t *visible, int count, int d,
                               float scale, float *scores) {
    const __m512 sc = _mm512_set1_ps(scale);
    int j = 0;
    for (; j + 16 <= count; j += 16) {
        for (int h = 0; h < H; h++) {
            const float *qh = q + (size_t)h * d;
            __m512 acc[16];
            const __m512 q0 = _mm512_loadu_ps(qh);
            UNROLL
            for (int i = 0; i < 16; i++) acc[i] = _mm512_mul_ps(q0, _mm512_loadu_ps(kh + (size_t)visible[j + i] * d));
            for (int c = 16; c < d; c += 16) {
                const __m512 qc = _mm512_loadu_ps(qh + c);
                UNROLL
                for (int i = 0; i < 16; i++)
                    acc[i] =
                        _mm512_add_ps(acc[i], _mm512_mul_ps(qc, _mm512_loadu_ps(kh + (size_t)visible[j + i] * d + c)));
            }
            _mm512_storeu_ps(scores + (size_t)h * count + j, _mm512_mul_ps(lane_trees16(acc), sc));
        }
    }
    for (; j < count; j++)
        for (int h = 0; h < H; h++)
            scores[(size_t)h * count + j] = dot_avx512(q + (size_t)h * d, kh + (size_t)visible[j] * d, d) * scale;
}

/* The law's m = the first of the largest scores (a NaN wins), from a vector max where that is the
   same float: no NaN among them, and a largest score that is not zero (+0 and -0 tie). */
static AVX512 float first_max(const float *s, int count) {
    __m512 most = _mm512_set1_ps(s[0]);
    __mmask16 nan = 0;
    int j = 0;
    for (; j + 16 <= count; j += 16) {
        const __m512 x = _mm512_loadu_ps(s + j);
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        most = _mm512_max_ps(most, x);
    }
    float m = _mm512_reduce_max_ps(most);
    for (; j < count; j++) {
        nan |= s[j] != s[j];
        m = s[j] > m ? s[j] : m;
    }
    if (nan || m == 0.0f) {
        m = s[0];
        for (j = 1; j < count; j++) m = s[j] > m || s[j] != s[j] ? s[j] : m;
    }
    return m;
}

/* s_j -> p_j = e_j / sum, e_j = exp(s_j - m), sum = the e_j in slot order: the law's softmax */
static AVX512 void softmax_law(float *s, int count) {
    const float m = first_max(s, count);
    const __m512 mm = _mm512_set1_ps(m);
    int j = 0;
    for (; j + 16 <= count; j += 16) _mm512_storeu_ps(s + j, _mm512_sub_ps(_mm512_loadu_ps(s + j), mm));
    for (; j < count; j++) s[j] = s[j] - m;
    exp_many(s, s, count, ISA_AVX512_VNNI);
    float sum = s[0];
    for (j = 1; j < count; j++) sum = sum + s[j];
    const __m512 ss = _mm512_set1_ps(sum); /* division is correctly rounded, vector or not */
    for (j = 0; j + 16 <= count; j += 16) _mm512_storeu_ps(s + j, _mm512_div_ps(_mm512_loadu_ps(s + j), ss));
    for (; j < count; j++) s[j] = s[j] / sum;
}

/* out[h][c0 .. c0 + 16 NV) = the p[h][j] v_j in slot order, from the first term, for H heads;
   H * NV accumulators in registers, each value chunk loaded once for every head */
static inline AVX512 __attribute__((always_inline)) void head_values(const float *vh, const int32_t *visible,
                                                                    const float *p, int count, int d, int c0,
                                                                    float *out, const int H, const int NV) {
    __m512 acc[HEADS_AT_ONCE * 4];
    const float *v0 = vh + (size_t)visible[0] * d + c0;
    UNROLL
    for (int h = 0; h < H; h++) {
        const __m512 p0 = _mm512_set1_ps(p[(size_t)h * count]);
        UNROLL
        for (int i = 0; i < NV; i++) acc[4 * h + i] = _mm512_mul_ps(p0, _mm512_loadu_ps(v0 + 16 * i));
    }
    for (int j = 1; j < count; j++) {
        const float *v = vh + (size_t)visible[j] * d + c0;
        __m512 vj[4];
        UNROLL
        for (int i = 0; i < NV; i++) vj[i] = _mm512_loadu_ps(v + 16 * i);
        UNROLL
        for (int h = 0; h < H; h++) {
            const __m512 pj = _mm512_set1_ps(p[(size_t)h * count + j]);
            UNROLL
            for (int i = 0; i < NV; i++) acc[4 * h + i] = _mm512_add_ps(acc[4 * h + i], _mm512_mul_ps(pj, vj[i]));
        }
    }
    UNROLL
    for (int h = 0; h < H; h++) {
        UNROLL
        for (int i = 0; i < NV; i++) _mm512_storeu_ps(out + (size_t)h * d + c0 + 16 * i, acc[4 * h + i]);
    }
}

#define HEAD_VALUES_NV(H)                                                                          \
    switch (nv) {                                                                                  \
    case 1: head_values(vh, visible, p, count, d, c0, out, H, 1); break;                           \
    case 2: head_values(vh, visible, p, count, d, c0, out, H, 2); break;                           \
    case 3: head_values(vh, visible, p, count, d, c0, out, H, 3); break;                           \
    default: head_values(vh, visible, p, count, d, c0, out, H, 4); break;                          \
    }

static AVX512 void head_values_any(const float *vh, const int32_t *visible, const float *p, int count, int d,
                                   float *out, int H) {
    for (int c0 = 0; c0 < d; c0 += 64) {
        const int nv = (d - c0) / 16 < 4 ? (d - c0) / 16 : 4;
        switch (H) {
        case 1: HEAD_VALUES_NV(1) break;
        case 2: HEAD_VALUES_NV(2) break;
        case 3: HEAD_VALUES_NV(3) break;
        default: HEAD_VALUES_NV(4) break;
        }
    }
}

/* H <= HEADS_AT_ONCE query heads q [H, d] of one kv head over count >= 1 visible slots, whole
   16-lane chunks (d % 16 == 0): attend_row's operations, the same bits; scores [H, count] scratch */
static AVX512 void attend_heads_avx512(const float *q, int H, const float *kh, const float *vh,
                                       const int32_t *visible, int count, int d, float scale, float *scores,
                                       float *out) {
    head_scores(q, H, kh, visible, count, d, scale, scores);
    for (int h = 0; h < H; h++) softmax_law(scores + (size_t)h * count, count);
    head_values_any(vh, visible, scores, count, d, out, H);
}
#endif

/* scratch: visible [end] slot indices, scores [end]. seen: NULL, or the row's [end - span_first] flags
   of the span's slots (a token tree: its path); a slot from span_first on is a key only where flagged.
   The keys stay in slot order, so a tree row gets the bits of the 1-row call on its path laid out
   after the prefix: the same keys, values and positions in the same order. */
static void attend_row(const lt_attention_t *A, const float *q, int64_t q_pos, int end, int span_first,
                       const uint8_t *seen, float *out, int32_t *visible, float *scores, int isa) {
    const int d = A->d, group = A->n_head / A->n_kv;
    int count = 0;
    for (int s = 0; s < end; s++) {
        if (seen && s >= span_first && !seen[s - span_first]) continue;
        const int64_t distance = q_pos - A->key_pos[s];
        if (distance >= 0 && (A->window == 0 || distance < A->window)) visible[count++] = s;
    }
#ifdef TILE_X86
    if (isa == ISA_AVX512_VNNI && d % 16 == 0 && count > 0) { /* whole 16-lane chunks: the same sums */
        for (int head = 0; head < A->n_head;) {
            const int left = group - head % group; /* this kv head's query heads from this one on */
            const int heads = left < HEADS_AT_ONCE ? left : HEADS_AT_ONCE;
            const size_t kv = (size_t)(head / group) * A->head_stride;
            attend_heads_avx512(q + (size_t)head * d, heads, A->k + kv, A->v + kv, visible, count, d, A->scale, scores,
                                out + (size_t)head * d);
            head += heads;
        }
        return;
    }
#endif
    for (int head = 0; head < A->n_head; head++) {
        const float *qh = q + (size_t)head * d;
        const float *kh = A->k + (size_t)(head / group) * A->head_stride;
        const float *vh = A->v + (size_t)(head / group) * A->head_stride;
        float *o = out + (size_t)head * d;
        if (count == 0) { /* no visible key: nothing to attend to */
            for (int i = 0; i < d; i++) o[i] = NAN;
            continue;
        }
        float m = 0.0f;
        for (int j = 0; j < count; j++) {
            scores[j] = dot_portable(qh, kh + (size_t)visible[j] * d, d) * A->scale;
            m = j == 0 || scores[j] > m || scores[j] != scores[j] ? scores[j] : m; /* NaN wins, as in max */
        }
        for (int j = 0; j < count; j++) scores[j] = scores[j] - m;
        exp_many(scores, scores, count, isa);
        float sum = scores[0];
        for (int j = 1; j < count; j++) sum = sum + scores[j];
        for (int j = 0; j < count; j++) {
            const float p = scores[j] / sum;
            axpy_portable(o, p, vh + (size_t)visible[j] * d, d, j == 0);
        }
    }
}

/* rows t = 0..T-1: q [T, n_head, d] at q_pos[t] over slots [0, ends[t]) -> out [T, n_head d].
   span_seen: NULL, or [T, T] flags of a token tree in slots [span_first, span_first + T): row t sees
   span slot span_first + j only where span_seen[t T + j] (its path); then ends[t] <= span_first + T.
   0, or -1 for bad arguments (nothing written), -2 out of memory. */
int lt_attend(const lt_attention_t *A, int T, const float *q, const int64_t *q_pos, const int32_t *ends,
              int span_first, const uint8_t *span_seen, float *out, int isa) {
    if (A->n_head <= 0 || A->n_kv <= 0 || A->n_head % A->n_kv || A->d <= 0 || A->window < 0 || T < 0 ||
        !isa_ok(isa) || (span_seen && span_first < 0))
        return -1;
    int most = 1;
    for (int t = 0; t < T; t++) {
        if (ends[t] <= 0 || (span_seen && ends[t] > span_first + T)) return -1;
        most = ends[t] > most ? ends[t] : most;
    }
    float *scores = malloc(sizeof(float) * (size_t)most * HEADS_AT_ONCE);
    int32_t *visible = malloc(sizeof(int32_t) * (size_t)most);
    if (!scores || !visible) {
        free(scores);
        free(visible);
        return -2;
    }
    for (int t = 0; t < T; t++)
        attend_row(A, q + (size_t)t * A->n_head * A->d, q_pos[t], ends[t], span_first,
                   span_seen ? span_seen + (size_t)t * T : NULL, out + (size_t)t * A->n_head * A->d, visible, scores,
                   isa);
    free(scores);
    free(visible);
    return 0;
}

