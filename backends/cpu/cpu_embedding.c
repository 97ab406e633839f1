/*
 * cpu_embedding.c — embedding lookup and its gradient, and the sinusoidal
 * timestep features.
 *
 * The gradient is split by columns, never by rows: a task owns a band of
 * columns of the whole table and adds the rows of dout into it in
 * increasing row order, so no two tasks touch the same float and every sum
 * runs in the same order for any thread count.
 */
#include "cpu_backend.h"
#include "cpu_parallel.h"

#include <math.h>
#include <string.h>

/* Columns per gradient task: a few cache lines per table row. */
#define EMBED_COLS_PER_TASK 64

typedef struct embedding_job {
    int64_t rows;
    int32_t dim, n_entries;
    const int32_t *ids;
    const float *table;
    const float *dout;
    float *out;
    bool accumulate;
} embedding_job;

static void add_row(float *restrict dst, const float *restrict src, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        dst[j] += src[j];
}

static void embedding_forward_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const embedding_job *job = arg;
    int64_t r0, r1;
    cpu_task_rows(task, job->rows, &r0, &r1);
    size_t bytes = (size_t)job->dim * sizeof(float);
    for (int64_t r = r0; r < r1; r++) {
        const float *src = job->table + (int64_t)job->ids[r] * job->dim;
        float *dst = job->out + r * job->dim;
        if (job->accumulate)
            add_row(dst, src, job->dim);
        else
            memcpy(dst, src, bytes);
    }
}

void cpu_embedding_forward(nctmc_backend *be, int64_t rows, int32_t dim, const int32_t *ids,
                           const float *table, float *out, bool accumulate)
{
    embedding_job job = {
        .rows = rows, .dim = dim, .ids = ids, .table = table, .out = out,
        .accumulate = accumulate,
    };
    cpu_parallel_chunks(cpu_of(be)->pool, rows, CPU_ROWS_PER_TASK, embedding_forward_task, &job);
}

static void embedding_backward_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const embedding_job *job = arg;
    int64_t col0 = task * EMBED_COLS_PER_TASK;
    int64_t width = job->dim - col0 < EMBED_COLS_PER_TASK ? job->dim - col0
                                                          : EMBED_COLS_PER_TASK;
    float *band = job->out + col0;
    if (!job->accumulate)
        for (int64_t v = 0; v < job->n_entries; v++)
            memset(band + v * job->dim, 0, (size_t)width * sizeof(float));
    for (int64_t r = 0; r < job->rows; r++)
        add_row(band + (int64_t)job->ids[r] * job->dim, job->dout + r * job->dim + col0,
                width);
}

void cpu_embedding_backward(nctmc_backend *be, int64_t rows, int32_t dim, int32_t n_entries,
                            const int32_t *ids, const float *dout, float *dtable,
                            bool accumulate)
{
    embedding_job job = {
        .rows = rows, .dim = dim, .n_entries = n_entries, .ids = ids, .dout = dout,
        .out = dtable, .accumulate = accumulate,
    };
    cpu_parallel_chunks(cpu_of(be)->pool, dim, EMBED_COLS_PER_TASK, embedding_backward_task, &job);
}

typedef struct timestep_job {
    int32_t batch, dim;
    const float *times;
    float *out;
} timestep_job;

/* One sequence per task: dim / 2 cosines and sines, each in double and
 * rounded once; an odd dim gets a zero last column, as in SEDD. */
static void timestep_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const timestep_job *job = arg;
    int32_t half = job->dim / 2;
    double t = (double)job->times[task];
    float *row = job->out + task * job->dim;
    for (int32_t k = 0; k < half; k++) {
        double angle = t * exp(-log(10000.0) * (double)k / (double)half);
        row[k] = (float)cos(angle);
        row[half + k] = (float)sin(angle);
    }
    if (job->dim % 2)
        row[job->dim - 1] = 0.0f;
}

void cpu_timestep_embedding(nctmc_backend *be, int32_t batch, int32_t dim, const float *times,
                            float *out)
{
    timestep_job job = {.batch = batch, .dim = dim, .times = times, .out = out};
    cpu_parallel_chunks(cpu_of(be)->pool, batch, 1, timestep_task, &job);
}
