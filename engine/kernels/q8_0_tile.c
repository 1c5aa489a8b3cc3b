/* The Q8 block-dot law (reference/q8_block_dot.py) on a tile layout of Q8_0 weights.

   Tile layout (engine/tile_head.py packs it; the file's byte count): 16 weight rows a tile; per
   tile and weight block, 544 bytes:
       16 x float16 d           the 16 rows' scales                      (bytes 0..31)
       8 x 64 bytes             vector j: for row i = 0..15, its levels   (bytes 32..543)
                                4j..4j+3, each stored plus 128 (an unsigned byte)
   Lanes are weight rows, so a vector kernel of any width computes each (weight row, activation
   row) pair in the law's own order: the same bits on AVX-512, AVX2 and plain C.

   Each block: dot (int32, exact), scale = d_w * d_a, term = (float)dot * scale, acc = acc + term:
   two float32 roundings, never a fused multiply-add (compiled with -ffp-contract=off, and the
   vector code multiplies and adds with separate instructions). */

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "half_float.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TILE_X86 1
#endif

#define QK 32
#define TILE_ROWS 16
#define TILE_BLOCK_BYTES 544
#define GROUP_ROWS 8 /* activation rows a kernel call holds in registers */
#define MAX_THREADS 64
/* The vector kernels' loops have bounds fixed at compile time: unrolled, the rows' accumulators
   and the block's level vectors stay in registers (-O2 alone keeps the loops and spills them). */
#define UNROLL _Pragma("GCC unroll 16")

enum { ISA_PORTABLE = 0, ISA_AVX2 = 1, ISA_AVX512_VNNI = 2 };

int q8_tile_abi_version(void) { return 1; }

int q8_tile_isa_supported(int isa) {
    if (isa == ISA_PORTABLE) return 1;
#ifdef TILE_X86
    __builtin_cpu_init();
    if (isa == ISA_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    if (isa == ISA_AVX512_VNNI)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
#endif
    return 0;
}

/* ---- activations: the law's act blocks -------------------------------------------------- */

/* x [R, K] -> levels [R, K] int8, their block sums [R, K/32] (the VNNI kernel's bias term),
   scales [R, K/32], finite [R] (0: the row holds inf or NaN and gets NaN logits) */
void q8_tile_quantize(const float *x, int R, int K, int8_t *levels, int32_t *sums, float *scales,
                      uint8_t *finite) {
    const int nb = K / QK;
    for (int r = 0; r < R; r++) {
        const float *row = x + (size_t)r * K;
        int ok = 1;
        for (int k = 0; k < K; k++) ok &= isfinite(row[k]) != 0;
        finite[r] = (uint8_t)ok;
        for (int b = 0; b < nb; b++) {
            const float *xb = row + b * QK;
            int8_t *q = levels + (size_t)r * K + b * QK;
            float amax = 0.0f;
            if (ok)
                for (int j = 0; j < QK; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
            const float d = amax / 127.0f;
            int32_t sum = 0;
            for (int j = 0; j < QK; j++) {
                q[j] = d == 0.0f ? 0 : (int8_t)rintf(xb[j] / d);
                sum += q[j];
            }
            sums[(size_t)r * nb + b] = sum;
            scales[(size_t)r * nb + b] = d;
        }
    }
}

/* ---- the kernels: tiles [first, last) x activation rows [0, R), R <= GROUP_ROWS ----------- */

typedef struct {
    const uint8_t *tiles;
    int nb;
    const int8_t *levels; /* [R, nb * 32] */
    const int32_t *sums;  /* [R, nb] */
    const float *scales;  /* [R, nb] */
    int R;
    float *y; /* [R, ldy] */
    int ldy;
} group_t;

static void portable_range(const group_t *g, int first, int last) {
    const int K = g->nb * QK;
    for (int t = first; t < last; t++) {
        const uint8_t *tile = g->tiles + (size_t)t * g->nb * TILE_BLOCK_BYTES;
        for (int r = 0; r < g->R; r++) {
            float acc[TILE_ROWS] = {0};
            for (int b = 0; b < g->nb; b++) {
                const uint8_t *blk = tile + (size_t)b * TILE_BLOCK_BYTES;
                const int8_t *a = g->levels + (size_t)r * K + b * QK;
                const float da = g->scales[(size_t)r * g->nb + b];
                for (int i = 0; i < TILE_ROWS; i++) {
                    int32_t dot = 0;
                    for (int j = 0; j < 8; j++)
                        for (int u = 0; u < 4; u++) dot += ((int32_t)blk[32 + 64 * j + 4 * i + u] - 128) * a[4 * j + u];
                    uint16_t h;
                    memcpy(&h, blk + 2 * i, 2);
                    const float scale = half_to_float(h) * da;
                    const float term = (float)dot * scale;
                    acc[i] = acc[i] + term;
                }
            }
            memcpy(g->y + (size_t)r * g->ldy + (size_t)t * TILE_ROWS, acc, sizeof acc);
        }
    }
}

#ifdef TILE_X86

/* AVX-512 VNNI: a tile is one vector of 16 lanes; dot = sum (w + 128) a - 128 sum a, exact */
#define AVX512_KERNEL(NR)                                                                         \
    __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c"))) static void avx512_##NR( \
        const group_t *g, int first, int last) {                                                  \
        const int K = g->nb * QK;                                                                 \
        for (int t = first; t < last; t++) {                                                      \
            const uint8_t *tile = g->tiles + (size_t)t * g->nb * TILE_BLOCK_BYTES;                \
            __m512 acc[NR];                                                                       \
            UNROLL for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();                            \
            for (int b = 0; b < g->nb; b++) {                                                     \
                const uint8_t *blk = tile + (size_t)b * TILE_BLOCK_BYTES;                         \
                const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));      \
                __m512i w[8];                                                                     \
                UNROLL for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512((const void *)(blk + 32 + 64 * j)); \
                UNROLL for (int r = 0; r < NR; r++) {                                                    \
                    const uint8_t *a = (const uint8_t *)(g->levels + (size_t)r * K + b * QK);     \
                    __m512i dot = _mm512_setzero_si512();                                         \
                    UNROLL for (int j = 0; j < 8; j++) {                                                 \
                        int32_t a4;                                                               \
                        memcpy(&a4, a + 4 * j, 4);                                                \
                        dot = _mm512_dpbusd_epi32(dot, w[j], _mm512_set1_epi32(a4));              \
                    }                                                                             \
                    dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * g->sums[(size_t)r * g->nb + b])); \
                    const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(g->scales[(size_t)r * g->nb + b])); \
                    const __m512 term = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale);            \
                    acc[r] = _mm512_add_ps(acc[r], term);                                         \
                }                                                                                 \
            }                                                                                     \
            UNROLL for (int r = 0; r < NR; r++)                                                          \
                _mm512_storeu_ps(g->y + (size_t)r * g->ldy + (size_t)t * TILE_ROWS, acc[r]);      \
        }                                                                                         \
    }
AVX512_KERNEL(1)
AVX512_KERNEL(2)
AVX512_KERNEL(3)
AVX512_KERNEL(4)
AVX512_KERNEL(5)
AVX512_KERNEL(6)
AVX512_KERNEL(7)
AVX512_KERNEL(8)

/* AVX2: a tile is two vectors of 8 lanes; dot = sum |w| sign(a, w) in 16-bit pairs (at most
   2 * 128 * 127, no saturation), widened to int32: the same integer */
#define AVX2_KERNEL(NR)                                                                           \
    __attribute__((target("avx2,fma,f16c"))) static void avx2_##NR(const group_t *g, int first, int last) { \
        const int K = g->nb * QK;                                                                 \
        const __m256i bias = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);           \
        for (int t = first; t < last; t++) {                                                      \
            const uint8_t *tile = g->tiles + (size_t)t * g->nb * TILE_BLOCK_BYTES;                \
            UNROLL for (int h = 0; h < 2; h++) {                                                         \
                __m256 acc[NR];                                                                   \
                UNROLL for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();                        \
                for (int b = 0; b < g->nb; b++) {                                                 \
                    const uint8_t *blk = tile + (size_t)b * TILE_BLOCK_BYTES;                     \
                    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h))); \
                    __m256i w[8], wabs[8];                                                        \
                    UNROLL for (int j = 0; j < 8; j++) {                                                 \
                        w[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 32 + 64 * j + 32 * h)), bias); \
                        wabs[j] = _mm256_abs_epi8(w[j]);                                          \
                    }                                                                             \
                    UNROLL for (int r = 0; r < NR; r++) {                                                \
                        const uint8_t *a = (const uint8_t *)(g->levels + (size_t)r * K + b * QK); \
                        __m256i dot = _mm256_setzero_si256();                                     \
                        UNROLL for (int j = 0; j < 8; j++) {                                             \
                            int32_t a4;                                                           \
                            memcpy(&a4, a + 4 * j, 4);                                            \
                            const __m256i p = _mm256_maddubs_epi16(wabs[j], _mm256_sign_epi8(_mm256_set1_epi32(a4), w[j])); \
                            dot = _mm256_add_epi32(dot, _mm256_madd_epi16(p, ones));              \
                        }                                                                         \
                        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(g->scales[(size_t)r * g->nb + b])); \
                        const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale);        \
                        acc[r] = _mm256_add_ps(acc[r], term);                                     \
                    }                                                                             \
                }                                                                                 \
                UNROLL for (int r = 0; r < NR; r++)                                                      \
                    _mm256_storeu_ps(g->y + (size_t)r * g->ldy + (size_t)t * TILE_ROWS + 8 * h, acc[r]); \
            }                                                                                     \
        }                                                                                         \
    }
AVX2_KERNEL(1)
AVX2_KERNEL(2)
AVX2_KERNEL(3)
AVX2_KERNEL(4)
AVX2_KERNEL(5)
AVX2_KERNEL(6)
AVX2_KERNEL(7)
AVX2_KERNEL(8)

typedef void (*kernel_fn)(const group_t *, int, int);
static const kernel_fn AVX512S[GROUP_ROWS + 1] = {0, avx512_1, avx512_2, avx512_3, avx512_4,
                                                  avx512_5, avx512_6, avx512_7, avx512_8};
static const kernel_fn AVX2S[GROUP_ROWS + 1] = {0, avx2_1, avx2_2, avx2_3, avx2_4,
                                                avx2_5, avx2_6, avx2_7, avx2_8};
#endif

static void run_group(const group_t *g, int first, int last, int isa) {
#ifdef TILE_X86
    if (isa == ISA_AVX512_VNNI) {
        AVX512S[g->R](g, first, last);
        return;
    }
    if (isa == ISA_AVX2) {
        AVX2S[g->R](g, first, last);
        return;
    }
#endif
    portable_range(g, first, last);
}

/* ---- the call: every activation row, tiles handed out to threads ---------------------------- */

/* Tiles go out in chunks from a shared counter, so a thread that is slowed (another process on
   its core) takes fewer: the pass ends when the work does, not when the slowest fixed share does.
   Which thread computes a tile changes nothing in its bits (each output is one thread's, in the
   law's order). */
#define CHUNK_TILES 32

typedef struct {
    const uint8_t *tiles;
    int n_tiles, nb, R, ldy, isa;
    const int8_t *levels;
    const int32_t *sums;
    const float *scales;
    float *y;
    int next; /* the first tile not yet handed out (atomic) */
} pass_t;

static void *run_chunks(void *arg) {
    pass_t *pass = (pass_t *)arg;
    const int K = pass->nb * QK;
    for (;;) {
        const int first = __atomic_fetch_add(&pass->next, CHUNK_TILES, __ATOMIC_RELAXED);
        if (first >= pass->n_tiles) return NULL;
        const int last = first + CHUNK_TILES < pass->n_tiles ? first + CHUNK_TILES : pass->n_tiles;
        for (int r0 = 0; r0 < pass->R; r0 += GROUP_ROWS) {
            const int rows = pass->R - r0 < GROUP_ROWS ? pass->R - r0 : GROUP_ROWS;
            const group_t g = {pass->tiles, pass->nb, pass->levels + (size_t)r0 * K,
                               pass->sums + (size_t)r0 * pass->nb, pass->scales + (size_t)r0 * pass->nb, rows,
                               pass->y + (size_t)r0 * pass->ldy, pass->ldy};
            run_group(&g, first, last, pass->isa);
        }
    }
}

/* y [R, ldy] (ldy >= 16 n_tiles) = the law's logits of the activation rows against the tiles.
   Each output is computed by one thread, in the law's order: any thread count, the same bits.
   Rows marked not finite get NaN. Returns 0, or -1 for arguments out of range (nothing written). */
int q8_tile_matmul(const uint8_t *tiles, int n_tiles, int nb, const int8_t *levels, const int32_t *sums,
                   const float *scales, const uint8_t *finite, int R, float *y, int ldy, int threads, int isa) {
    if (n_tiles < 0 || nb <= 0 || R < 0 || ldy < n_tiles * TILE_ROWS || isa < 0 || isa > 2 ||
        !q8_tile_isa_supported(isa))
        return -1;
    const int chunks = (n_tiles + CHUNK_TILES - 1) / CHUNK_TILES;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > chunks) threads = chunks;
    if (threads < 1) threads = 1;
    pass_t pass = {tiles, n_tiles, nb, R, ldy, isa, levels, sums, scales, y, 0};
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 1; i < threads; i++) started[i] = pthread_create(&ids[i], NULL, run_chunks, &pass) == 0;
    run_chunks(&pass); /* this thread too; a thread that could not start leaves its chunks to the rest */
    for (int i = 1; i < threads; i++)
        if (started[i]) pthread_join(ids[i], NULL);
    for (int r = 0; r < R; r++)
        if (!finite[r])
            for (int n = 0; n < n_tiles * TILE_ROWS; n++) y[(size_t)r * ldy + n] = NAN;
    return 0;
}
