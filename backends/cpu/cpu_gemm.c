/*
 * cpu_gemm.c — matrix products on the backend's pool (cpu_gemm.h).
 *
 * OpenBLAS runs single-threaded (cpu_backend.c sets it); parallelism comes
 * from cutting C into a grid of tiles, one OpenBLAS call per tile. The grid
 * is a function of the product's shape alone, never of the thread count:
 * threads only choose which tiles they run. That is what makes the output
 * bitwise the same for every thread count, whatever kernel OpenBLAS picks —
 * some of its kernels (Haswell's, for one) compute an element differently
 * depending on where it lies in the call's output, so a grid that followed
 * the pool size would change the bits. Calls OpenBLAS and the pool only.
 */
#include "cpu_gemm.h"

#include "cpu_blas.h"
#include <string.h>

/* Below this many multiply-adds a single call beats the cost of waking the
 * pool and of packing the operands once per tile. */
#define GEMM_SPLIT_MIN_MACS (1 << 21)
/* Aim for a tile per this many multiply-adds (~0.1 ms on one core), and
 * never more than GEMM_MAX_TILES tiles: each tile repacks its panels of A and
 * B, so on the 2-core reference machine 8 tiles of the DiT shapes ran as
 * fast as one 2-thread OpenBLAS call and 16 about 5% slower. 16 keeps two
 * tiles per thread up to 8 threads; larger pools still run the same grid,
 * with some threads idle at the end of a product. */
#define GEMM_MACS_PER_TILE (1 << 22)
#define GEMM_MAX_TILES 16
/* No tile edge under this: thinner tiles spend their time packing. */
#define GEMM_MIN_TILE_EDGE 128
/* Plans that cut columns first (few rows, see gemm_plan) go down to this
 * column edge, and cut rows only while they have fewer than
 * GEMM_COLUMN_PLAN_TILES tiles. */
#define GEMM_MIN_COLUMN_EDGE 96
#define GEMM_COLUMN_PLAN_TILES 8
/* Tile edges are multiples of the widest OpenBLAS micro-kernel, so no tile
 * but the last in a row or column runs a ragged edge. */
#define GEMM_TILE_ALIGN 16

typedef struct gemm_job {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    /* When set, C starts as this row vector broadcast over the rows and beta
     * is ignored: the bias is written while the tile is about to be hot. */
    const float *bias;
    int64_t tile_m, tile_n, tiles_n;
} gemm_job;

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Cuts C into row bands first, then the bands into columns, halving each
 * while the pieces keep the minimum edge. Row bands are contiguous in C and
 * share nothing but B; measured on the DiT shapes they beat square tiles of
 * the same count.
 *
 * Each row band packs its own copy of B's panels and each column band its
 * own copy of A's, so when A is the smaller operand (m < n: a sampler's one
 * or few sequences, where B is the layer's weights, cold in memory, and A
 * the activations, hot in cache) the plan cuts columns first, to narrower
 * edges, and rows only while it has few tiles. Measured single-threaded on
 * the batch-1 DiT products with weights out of cache: 256 x 144 tiles ran
 * at 86 GFLOP/s where 128 x 144 ran at 79, 256 x 192 at 84 against 77.
 * Only m, n and k decide the grid (see the top of the file). */
static void plan_rows_first(const gemm_job *job, int64_t target, int64_t *cuts_m,
                            int64_t *cuts_n)
{
    while (*cuts_m * 2 <= target && job->m / (*cuts_m * 2) >= GEMM_MIN_TILE_EDGE)
        *cuts_m *= 2;
    while (*cuts_m * *cuts_n * 2 <= target && job->n / (*cuts_n * 2) >= GEMM_MIN_TILE_EDGE)
        *cuts_n *= 2;
}

static void plan_columns_first(const gemm_job *job, int64_t target, int64_t *cuts_m,
                               int64_t *cuts_n)
{
    while (*cuts_n * 2 <= target && job->n / (*cuts_n * 2) >= GEMM_MIN_COLUMN_EDGE)
        *cuts_n *= 2;
    while (*cuts_m * *cuts_n < GEMM_COLUMN_PLAN_TILES && *cuts_m * *cuts_n * 2 <= target &&
           job->m / (*cuts_m * 2) >= GEMM_MIN_TILE_EDGE)
        *cuts_m *= 2;
}

static void gemm_plan(gemm_job *job)
{
    double macs = (double)job->m * (double)job->n * (double)job->k;
    int64_t target = 1;
    if (macs >= GEMM_SPLIT_MIN_MACS) {
        double wanted = macs / GEMM_MACS_PER_TILE;
        target = wanted >= GEMM_MAX_TILES ? GEMM_MAX_TILES : (int64_t)wanted;
    }
    int64_t cuts_m = 1, cuts_n = 1;
    if (job->m < job->n)
        plan_columns_first(job, target, &cuts_m, &cuts_n);
    else
        plan_rows_first(job, target, &cuts_m, &cuts_n);
    job->tile_m = ceil_div(ceil_div(job->m, cuts_m), GEMM_TILE_ALIGN) * GEMM_TILE_ALIGN;
    job->tile_n = ceil_div(ceil_div(job->n, cuts_n), GEMM_TILE_ALIGN) * GEMM_TILE_ALIGN;
    job->tiles_n = ceil_div(job->n, job->tile_n);
}

/* C = beta C (or the bias) for an empty inner dimension, which OpenBLAS
 * rejects through its leading-dimension checks. */
static void tile_without_k(const gemm_job *job, float *restrict c, int64_t rows,
                           int64_t cols, int64_t col0)
{
    for (int64_t i = 0; i < rows; i++) {
        float *restrict row = c + i * job->ldc;
        for (int64_t j = 0; j < cols; j++)
            row[j] = job->bias ? job->bias[col0 + j]
                     : job->beta == 0.0f ? 0.0f : job->beta * row[j];
    }
}

static void broadcast_bias(const float *restrict bias, float *restrict c, int64_t ldc,
                           int64_t rows, int64_t cols)
{
    for (int64_t i = 0; i < rows; i++)
        memcpy(c + i * ldc, bias, (size_t)cols * sizeof *c);
}

static void gemm_tile(void *arg, int64_t task, int worker)
{
    (void)worker;
    const gemm_job *job = arg;
    int64_t row0 = task / job->tiles_n * job->tile_m;
    int64_t col0 = task % job->tiles_n * job->tile_n;
    int64_t rows = min64(job->tile_m, job->m - row0);
    int64_t cols = min64(job->tile_n, job->n - col0);
    float *c = job->c + row0 * job->ldc + col0;
    if (job->k == 0) {
        tile_without_k(job, c, rows, cols, col0);
        return;
    }
    float beta = job->beta;
    if (job->bias) {
        broadcast_bias(job->bias + col0, c, job->ldc, rows, cols);
        beta = 1.0f;
    }
    const float *a = job->trans_a ? job->a + row0 : job->a + row0 * job->lda;
    const float *b = job->trans_b ? job->b + col0 * job->ldb : job->b + col0;
    cpu_sgemm(CblasRowMajor, job->trans_a ? CblasTrans : CblasNoTrans,
                job->trans_b ? CblasTrans : CblasNoTrans, (blasint)rows, (blasint)cols,
                (blasint)job->k, job->alpha, a, (blasint)job->lda, b, (blasint)job->ldb, beta,
                c, (blasint)job->ldc);
}

static void gemm_run(cpu_pool *pool, gemm_job *job)
{
    if (job->m <= 0 || job->n <= 0)
        return;
    gemm_plan(job);
    int64_t tiles = ceil_div(job->m, job->tile_m) * job->tiles_n;
    cpu_pool_run(pool, tiles, gemm_tile, job);
}

void cpu_gemm(cpu_pool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *c, int64_t ldc)
{
    gemm_job job = {
        .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
        .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c,
        .lda = lda, .ldb = ldb, .ldc = ldc, .bias = NULL,
    };
    gemm_run(pool, &job);
}

void cpu_gemm_bias(cpu_pool *pool, int64_t m, int64_t n, int64_t k, const float *a,
                   const float *b, const float *bias, float *c)
{
    gemm_job job = {
        .trans_a = false, .trans_b = true, .m = m, .n = n, .k = k,
        .alpha = 1.0f, .beta = 0.0f, .a = a, .b = b, .c = c,
        .lda = k, .ldb = k, .ldc = n, .bias = bias,
    };
    gemm_run(pool, &job);
}

void cpu_gemm_tiles(int64_t m, int64_t n, int64_t k, int64_t *tile_m, int64_t *tile_n)
{
    gemm_job job = {.m = m, .n = n, .k = k};
    gemm_plan(&job);
    *tile_m = job.tile_m;
    *tile_n = job.tile_n;
}
