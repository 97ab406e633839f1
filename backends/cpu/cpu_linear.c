/*
 * cpu_linear.c — the float linear layer: y = x W^T + b forward and its
 * gradients backward. The products run on the fixed tile grid of cpu_gemm.c
 * and the bias gradient is reduced in fixed column chunks, so the bits
 * never depend on the thread count.
 */
#include "cpu_backend.h"
#include "cpu_gemm.h"
#include "cpu_parallel.h"

/* Column chunk of the bias-gradient reduction: one task per chunk. */
#define DBIAS_COLS_PER_TASK 64

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

void cpu_linear_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                        const float *x, const float *w, const float *bias, float *y)
{
    cpu_gemm_bias(cpu_of(be)->pool, rows, out, in, x, w, bias, y);
}

typedef struct dbias_job {
    int64_t rows;
    int32_t cols;
    const float *dy;
    float *dbias;
    bool accumulate;
} dbias_job;

/* Every column is summed over all rows in increasing row order, in double,
 * by the one task that owns its chunk. */
static void dbias_chunk(void *arg, int64_t task, int worker)
{
    (void)worker;
    const dbias_job *job = arg;
    int64_t col0 = task * DBIAS_COLS_PER_TASK;
    int64_t width = min64(DBIAS_COLS_PER_TASK, job->cols - col0);
    double sum[DBIAS_COLS_PER_TASK] = {0};
    for (int64_t r = 0; r < job->rows; r++) {
        const float *restrict row = job->dy + r * job->cols + col0;
        for (int64_t j = 0; j < width; j++)
            sum[j] += (double)row[j];
    }
    float *restrict dbias = job->dbias + col0;
    for (int64_t j = 0; j < width; j++)
        dbias[j] = job->accumulate ? (float)((double)dbias[j] + sum[j]) : (float)sum[j];
}

void cpu_linear_backward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                         const float *x, const float *w, const float *dy, float *dx,
                         bool accumulate_dx, float *dw, float *dbias, bool accumulate_params)
{
    cpu_pool *pool = cpu_of(be)->pool;
    if (dx)
        cpu_gemm(pool, false, false, rows, in, out, 1.0f, dy, out, w, in,
                 accumulate_dx ? 1.0f : 0.0f, dx, in);
    if (dw)
        cpu_gemm(pool, true, false, out, in, rows, 1.0f, dy, out, x, in,
                 accumulate_params ? 1.0f : 0.0f, dw, in);
    if (dbias) {
        dbias_job job = {rows, out, dy, dbias, accumulate_params};
        cpu_parallel_chunks(pool, out, DBIAS_COLS_PER_TASK, dbias_chunk, &job);
    }
}
