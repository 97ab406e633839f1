/*
 * cpu_linear_packed.c — the linear layer with reduced-precision weights
 * (bf16, or int8 with a float scale per output row), for sampling.
 *
 * The work is cut into the same fixed grid of tiles of y as the float
 * linear layer (cpu_gemm_tiles() in cpu_gemm.c), so the bits never depend
 * on the thread count. Inside a tile, weights are expanded panel by panel
 * (a few output rows at a time) into the worker's scratch, and one of two
 * kernels runs, as the backend's bf16_dot flag says (cpu_backend.c sets it
 * from cpu_linear_packed_has_bf16_kernel()):
 *
 * - portable: the panel becomes float (bf16 by a shift, int8 exactly) and
 *   one single-threaded OpenBLAS sgemm multiplies it. x stays float, so
 *   the only error is the weights' own rounding.
 * - bf16 dot product (chosen at run time where the CPU has it: AVX512-BF16
 *   on x86-64, FEAT_BF16 on AArch64): the panel becomes bf16 pairs (int8
 *   values are exact in bf16), x is rounded to bf16, and a register-blocked
 *   kernel built on vdpbf16ps (x86-64) or BFDOT (AArch64) accumulates in
 *   float. Debian's OpenBLAS 0.3.21 is built without its bfloat16
 *   extension (libopenblas exports no cblas_sbgemm), hence our own kernel.
 *   Rounding x costs a second 2^-8 relative error per product; in return
 *   a bf16 product does two multiply-adds where a float FMA does one. The
 *   two instructions round each pair's sum differently (BFDOT: to odd,
 *   without denormals), so their bits differ; both meet the same bound
 *   (tests/test_quant_kernels.c). int8 weights take this kernel too, not
 *   SDOT/SMMLA: those multiply int8 by int8, and x rounded to int8 (one
 *   scale per row) loses far more than the 2^-8 relative of bf16.
 *
 * The int8 scale and the bias are applied to each finished tile:
 * y = scale[o] * (x . q[o]) + bias[o].
 */
#include "cpu_backend.h"
#include "cpu_gemm.h"

#include "cpu_blas.h"
#include <string.h>

/* Output rows of W expanded at a time. The bf16 kernel's panel is one
 * 32-wide register block, whose k-pairs of a 384-wide layer (24 KiB) stay in
 * L1 while every row of x passes over them (measured on the DiT shapes: 32
 * ran 5-15% faster than 64, 64 faster than 128). Every sgemm call of the
 * portable kernel packs the tile's rows of x again, so its panels are wide
 * (measured: 64 rows ran at half sgemm's speed for in = 1536, 256 at its
 * speed). */
#define PANEL_N 32
#define PANEL_N_PORTABLE 256
/* Rows of x rounded to bf16 at a time (bf16 kernel). */
#define PANEL_M 256
/* The bf16 kernel's register block: MR rows of x by 32 outputs. */
#define MR 6

typedef struct packed_job {
    int64_t m, n, k;
    const float *x;
    const nctmc_packed_weight *w;
    const float *bias;
    float *y;
    int64_t tile_m, tile_n, tiles_n;
    bool bf16_dot;
    unsigned char *scratch;   /* n_threads slices of per_worker bytes */
    size_t per_worker;
} packed_job;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Round to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* y[rows, cols] = y * scale[col] + bias[col] (either may be NULL). */
static void tile_epilogue(float *y, int64_t ldy, int64_t rows, int64_t cols,
                          const float *scale, const float *bias)
{
    if (!scale && !bias)
        return;
    for (int64_t i = 0; i < rows; i++) {
        float *restrict row = y + i * ldy;
        for (int64_t j = 0; j < cols; j++) {
            float v = scale ? row[j] * scale[j] : row[j];
            row[j] = bias ? v + bias[j] : v;
        }
    }
}

/* ---- portable: expand to float, sgemm -------------------------------------- */

static void expand_f32(const nctmc_packed_weight *w, int64_t k, int64_t o0, int64_t cols,
                       float *restrict dst)
{
    size_t n = (size_t)cols * (size_t)k;
    if (w->type == NCTMC_WEIGHT_BF16) {
        const uint16_t *restrict src = (const uint16_t *)w->data + (size_t)o0 * (size_t)k;
        for (size_t e = 0; e < n; e++)
            dst[e] = bf16_to_f32(src[e]);
    } else {
        const int8_t *restrict src = (const int8_t *)w->data + (size_t)o0 * (size_t)k;
        for (size_t e = 0; e < n; e++)
            dst[e] = (float)src[e];
    }
}

static void tile_portable(const packed_job *job, float *scratch, int64_t row0, int64_t rows,
                          int64_t col0, int64_t cols)
{
    const float *scales = job->w->type == NCTMC_WEIGHT_INT8 ? job->w->scales : NULL;
    for (int64_t p = 0; p < cols; p += PANEL_N_PORTABLE) {
        int64_t pn = min64(PANEL_N_PORTABLE, cols - p);
        expand_f32(job->w, job->k, col0 + p, pn, scratch);
        float *y = job->y + row0 * job->n + col0 + p;
        cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)rows, (blasint)pn,
                    (blasint)job->k, 1.0f, job->x + row0 * job->k, (blasint)job->k, scratch,
                    (blasint)job->k, 0.0f, y, (blasint)job->n);
        tile_epilogue(y, job->n, rows, pn, scales ? scales + col0 + p : NULL,
                      job->bias ? job->bias + col0 + p : NULL);
    }
}

/* ---- bf16 dot-product kernels: shared packing ------------------------------- */

#if (defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))) || \
    (defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__))
#define HAVE_BF16_KERNEL 1
#else
#define HAVE_BF16_KERNEL 0
#endif

#if HAVE_BF16_KERNEL
/* int8 values are exact in bf16 (7 significant bits at most), so the
 * float's top half is the bf16, without rounding. */
static inline uint16_t bf16_of_int8(int8_t q)
{
    float f = (float)q;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

/* The panel as k-pairs: dst[kp][j] holds (W[j, 2kp], W[j, 2kp + 1]) as two
 * bf16 in one 32-bit word, for `width` outputs (columns past `cols`, and
 * the second half of an odd k's last pair, are zero). */
static void expand_pairs(const nctmc_packed_weight *w, int64_t k, int64_t o0, int64_t cols,
                         int64_t width, uint32_t *restrict dst)
{
    int64_t kp_n = (k + 1) / 2;
    if (cols < width || k % 2)
        memset(dst, 0, sizeof *dst * (size_t)(kp_n * width));
    for (int64_t j = 0; j < cols; j++) {
        size_t at = (size_t)(o0 + j) * (size_t)k;
        if (w->type == NCTMC_WEIGHT_BF16) {
            const uint16_t *restrict row = (const uint16_t *)w->data + at;
            for (int64_t p = 0; p < k / 2; p++)
                dst[p * width + j] = (uint32_t)row[2 * p] | (uint32_t)row[2 * p + 1] << 16;
            if (k % 2)
                dst[(kp_n - 1) * width + j] = row[k - 1];
        } else {
            const int8_t *restrict row = (const int8_t *)w->data + at;
            for (int64_t p = 0; p < k / 2; p++)
                dst[p * width + j] = (uint32_t)bf16_of_int8(row[2 * p]) |
                                     (uint32_t)bf16_of_int8(row[2 * p + 1]) << 16;
            if (k % 2)
                dst[(kp_n - 1) * width + j] = bf16_of_int8(row[k - 1]);
        }
    }
}

/* x rows as bf16 pairs, k padded to even with a zero. */
static void round_rows(const float *x, int64_t k, int64_t rows, uint32_t *restrict dst)
{
    int64_t kp_n = (k + 1) / 2;
    for (int64_t i = 0; i < rows; i++) {
        const float *restrict src = x + i * k;
        uint32_t *restrict out = dst + i * kp_n;
        for (int64_t p = 0; p < k / 2; p++)
            out[p] = (uint32_t)bf16_round(src[2 * p]) |
                     (uint32_t)bf16_round(src[2 * p + 1]) << 16;
        if (k % 2)
            out[kp_n - 1] = bf16_round(src[k - 1]);
    }
}

#endif

/* ---- AVX512-BF16 ------------------------------------------------------------ */

#if HAVE_BF16_KERNEL && defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* AVX512-BF16 in the CPU and ZMM state enabled by the OS. */
static bool cpu_has_avx512_bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))   /* OSXSAVE */
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 0xe6u) != 0xe6u)   /* XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM */
        return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 16)) || !(b & (1u << 30)) ||
        !(b & (1u << 31)))       /* AVX512F, BW, VL */
        return false;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return false;
    return (a & (1u << 5)) != 0; /* AVX512_BF16 */
}

/* mr (<= MR) rows by up to 32 outputs: acc = sum over k-pairs of
 * xpair (broadcast) . wpairs, then y = acc * scale + bias on `cols` lanes. */
static inline __attribute__((always_inline)) BF16_TARGET void
micro_kernel(int mr, const uint32_t *xp, int64_t kp_n, const uint32_t *wp, int64_t width,
             int64_t cols, const float *scale, const float *bias, float *y, int64_t ldy)
{
    __m512 acc[MR][2];
    for (int i = 0; i < mr; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp_n; p++) {
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp + p * width);
        __m512bh w1 = (__m512bh)_mm512_loadu_si512(wp + p * width + 16);
        for (int i = 0; i < mr; i++) {
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xp[i * kp_n + p]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xv, w0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xv, w1);
        }
    }
    for (int h = 0; h < 2; h++) {
        int64_t left = cols - 16 * h;
        if (left <= 0)
            break;
        __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        __m512 s = scale ? _mm512_maskz_loadu_ps(mask, scale + 16 * h) : _mm512_set1_ps(1.0f);
        __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + 16 * h) : _mm512_setzero_ps();
        for (int i = 0; i < mr; i++) {
            /* separate multiply and add, like the portable epilogue */
            __m512 v = _mm512_add_ps(_mm512_mul_ps(acc[i][h], s), b);
            _mm512_mask_storeu_ps(y + i * ldy + 16 * h, mask, v);
        }
    }
}

BF16_TARGET static void block_rows(int64_t rows, const uint32_t *xp, int64_t kp_n,
                                   const uint32_t *wp, int64_t width, int64_t cols,
                                   const float *scale, const float *bias, float *y, int64_t ldy)
{
    int64_t i = 0;
    for (; i + MR <= rows; i += MR)
        micro_kernel(MR, xp + i * kp_n, kp_n, wp, width, cols, scale, bias, y + i * ldy, ldy);
    switch (rows - i) {
#define TAIL(r)                                                                              \
    case r:                                                                                  \
        micro_kernel(r, xp + i * kp_n, kp_n, wp, width, cols, scale, bias, y + i * ldy, ldy); \
        break;
        TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5)
#undef TAIL
    default: break;
    }
}

static bool cpu_has_bf16_dot(void)
{
    return cpu_has_avx512_bf16();
}
#endif

/* ---- AArch64 BFDOT ------------------------------------------------------------ */

#if HAVE_BF16_KERNEL && defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>

/* FEAT_BF16 (BFDOT), from the kernel's hardware capabilities; the rest of
 * the build targets baseline ARMv8-A, so only these functions use it. */
#define BF16_TARGET __attribute__((target("arch=armv8.2-a+bf16")))
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif

static bool cpu_has_bf16_dot(void)
{
    return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
}

/* mr (<= 4) rows by up to 32 outputs in eight 4-lane accumulators per row,
 * each lane summing its output's pair products in k order (as the x86
 * kernel's lanes do); then y = acc * scale + bias on `cols` lanes. */
static inline __attribute__((always_inline)) BF16_TARGET void
neon_kernel(int mr, const uint32_t *xp, int64_t kp_n, const uint32_t *wp, int64_t width,
            int64_t cols, const float *scale, const float *bias, float *y, int64_t ldy)
{
    float32x4_t acc[4][8];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < 8; v++)
            acc[i][v] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < kp_n; p++) {
        bfloat16x8_t w[8];
        for (int v = 0; v < 8; v++)
            w[v] = vreinterpretq_bf16_u32(vld1q_u32(wp + p * width + 4 * v));
        for (int i = 0; i < mr; i++) {
            bfloat16x8_t xv = vreinterpretq_bf16_u32(vdupq_n_u32(xp[i * kp_n + p]));
            for (int v = 0; v < 8; v++)
                acc[i][v] = vbfdotq_f32(acc[i][v], w[v], xv);
        }
    }
    for (int i = 0; i < mr; i++) {
        float lanes[32];
        for (int v = 0; v < 8; v++)
            vst1q_f32(lanes + 4 * v, acc[i][v]);
        float *restrict row = y + i * ldy;
        for (int64_t j = 0; j < cols; j++) {
            /* separate multiply and add, like the portable epilogue */
            float t = scale ? lanes[j] * scale[j] : lanes[j];
            row[j] = bias ? t + bias[j] : t;
        }
    }
}

BF16_TARGET static void block_rows(int64_t rows, const uint32_t *xp, int64_t kp_n,
                                   const uint32_t *wp, int64_t width, int64_t cols,
                                   const float *scale, const float *bias, float *y, int64_t ldy)
{
    int64_t i = 0;
    for (; i + 4 <= rows; i += 4)
        neon_kernel(4, xp + i * kp_n, kp_n, wp, width, cols, scale, bias, y + i * ldy, ldy);
    switch (rows - i) {
    case 1: neon_kernel(1, xp + i * kp_n, kp_n, wp, width, cols, scale, bias, y + i * ldy, ldy); break;
    case 2: neon_kernel(2, xp + i * kp_n, kp_n, wp, width, cols, scale, bias, y + i * ldy, ldy); break;
    case 3: neon_kernel(3, xp + i * kp_n, kp_n, wp, width, cols, scale, bias, y + i * ldy, ldy); break;
    default: break;
    }
}
#endif

#if HAVE_BF16_KERNEL
static void tile_bf16(const packed_job *job, unsigned char *scratch, int64_t row0,
                      int64_t rows, int64_t col0, int64_t cols)
{
    int64_t kp_n = (job->k + 1) / 2;
    uint32_t *wp = (uint32_t *)scratch;
    uint32_t *xp = wp + kp_n * PANEL_N;
    const float *scales = job->w->type == NCTMC_WEIGHT_INT8 ? job->w->scales : NULL;
    for (int64_t r = 0; r < rows; r += PANEL_M) {
        int64_t rm = min64(PANEL_M, rows - r);
        round_rows(job->x + (row0 + r) * job->k, job->k, rm, xp);
        for (int64_t p = 0; p < cols; p += PANEL_N) {
            int64_t pn = min64(PANEL_N, cols - p);
            int64_t width = (pn + 31) / 32 * 32;
            expand_pairs(job->w, job->k, col0 + p, pn, width, wp);
            for (int64_t q = 0; q < pn; q += 32)
                block_rows(rm, xp, kp_n, wp + q, width, min64(32, pn - q),
                           scales ? scales + col0 + p + q : NULL,
                           job->bias ? job->bias + col0 + p + q : NULL,
                           job->y + (row0 + r) * job->n + col0 + p + q, job->n);
        }
    }
}
#else
static bool cpu_has_bf16_dot(void)
{
    return false;
}
#endif

/* ---- the job ------------------------------------------------------------------ */

/* Scratch per worker for inner dimension k, enough for either kernel (the
 * kernel may be switched after the caller sized its scratch), in 64-byte
 * slices so that no load straddles two workers' data. */
static size_t worker_bytes(int64_t k)
{
    size_t kk = (size_t)k, kp_n = (kk + 1) / 2;
    size_t portable = sizeof(float) * PANEL_N_PORTABLE * kk;
    size_t bf16 = sizeof(uint32_t) * kp_n * (PANEL_N + PANEL_M);
    return ((portable > bf16 ? portable : bf16) + 63) / 64 * 64;
}

size_t cpu_linear_packed_scratch_bytes(nctmc_backend *be, int32_t in)
{
    return worker_bytes(in < 1 ? 1 : in) * (size_t)cpu_pool_size(cpu_of(be)->pool);
}

static void packed_tile(void *arg, int64_t task, int worker)
{
    const packed_job *job = arg;
    int64_t row0 = task / job->tiles_n * job->tile_m;
    int64_t col0 = task % job->tiles_n * job->tile_n;
    int64_t rows = min64(job->tile_m, job->m - row0);
    int64_t cols = min64(job->tile_n, job->n - col0);
    unsigned char *scratch = job->scratch + (size_t)worker * job->per_worker;
#if HAVE_BF16_KERNEL
    if (job->bf16_dot) {
        tile_bf16(job, scratch, row0, rows, col0, cols);
        return;
    }
#endif
    tile_portable(job, (float *)scratch, row0, rows, col0, cols);
}

/* An empty inner dimension: y is the bias (or 0). */
static void fill_bias(int64_t m, int64_t n, const float *bias, float *y)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            y[i * n + j] = bias ? bias[j] : 0.0f;
}

void cpu_linear_forward_packed(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                               const float *x, const nctmc_packed_weight *w,
                               const float *bias, float *y, void *scratch)
{
    cpu_backend *cb = cpu_of(be);
    if (rows <= 0 || out <= 0)
        return;
    if (in == 0) {
        fill_bias(rows, out, bias, y);
        return;
    }
    packed_job job = {
        .m = rows, .n = out, .k = in, .x = x, .w = w, .bias = bias, .y = y,
        .bf16_dot = cb->bf16_dot, .scratch = scratch, .per_worker = worker_bytes(in),
    };
    cpu_gemm_tiles(rows, out, in, &job.tile_m, &job.tile_n);
    job.tiles_n = (out + job.tile_n - 1) / job.tile_n;
    int64_t tiles = (rows + job.tile_m - 1) / job.tile_m * job.tiles_n;
    cpu_pool_run(cb->pool, tiles, packed_tile, &job);
}

bool cpu_linear_packed_has_bf16_kernel(void)
{
    return cpu_has_bf16_dot();
}
