/*
 * cpu_adaln.c — adaLN: LayerNorm without bias, then per-sequence modulation
 * y = LN(x) * w * (1 + scale[b]) + shift[b].
 *
 * Row sums use LANES independent partial sums combined in a fixed tree: the
 * compiler may not reorder a float sum, so this is what lets it vectorise,
 * and the order is still fixed by the source.
 *
 * The backward pass has two kinds of reduction. dx needs sums along each row
 * (row tasks). dshift, dscale and dw need sums over rows: a task owns one
 * (sequence, column chunk) pair and walks the sequence's rows in order,
 * giving P[b] = sum dy * LN(x) and dshift[b]; then
 *   dscale[b] = w * P[b],   dw = sum_b (1 + scale[b]) * P[b]  (b in order).
 * P[b] waits in dscale's slot between the two steps, so nothing is
 * allocated and no split depends on the thread count.
 */
#include <math.h>

#include "cpu_backend.h"
#include "cpu_parallel.h"

#define LANES 16
#define LN_EPS 1e-5f
/* Columns per column task (four cache lines of a row). */
#define ADALN_COLS_PER_TASK 64

typedef struct adaln_job {
    int64_t rows;
    int32_t seq_len;
    int32_t dim;
    int32_t mod_stride;
    int64_t n_row_tasks;  /* backward: tasks below this do dx */
    const float *x;
    const float *w;
    const float *shift;
    const float *scale;
    const float *mean_in;
    const float *rstd_in;
    const float *dy;
    float *y;             /* forward output, or dx */
    float *mean;
    float *rstd;
    float *dw;
    float *dshift;
    float *dscale;
    bool accumulate_dx;
    bool accumulate_dw;
} adaln_job;

static float lanes_total(float acc[LANES])
{
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++)
            acc[k] += acc[k + w];
    return acc[0];
}

static float row_sum(const float *restrict x, int32_t n)
{
    float acc[LANES] = {0};
    int32_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += x[j + k];
    for (int k = 0; j + k < n; k++)
        acc[k] += x[j + k];
    return lanes_total(acc);
}

static float row_sum_sq_dev(const float *restrict x, float mean, int32_t n)
{
    float acc[LANES] = {0};
    int32_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) {
            float d = x[j + k] - mean;
            acc[k] += d * d;
        }
    for (int k = 0; j + k < n; k++) {
        float d = x[j + k] - mean;
        acc[k] += d * d;
    }
    return lanes_total(acc);
}

static void adaln_row(const float *restrict x, const float *restrict w,
                      const float *restrict shift, const float *restrict scale,
                      float *restrict y, int32_t dim, float *mean_out, float *rstd_out)
{
    float mean = row_sum(x, dim) / (float)dim;
    float var = row_sum_sq_dev(x, mean, dim) / (float)dim;
    float rstd = 1.0f / sqrtf(var + LN_EPS);
    for (int32_t k = 0; k < dim; k++)
        y[k] = (x[k] - mean) * rstd * w[k] * (1.0f + scale[k]) + shift[k];
    *mean_out = mean;
    *rstd_out = rstd;
}

static void adaln_forward_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const adaln_job *job = arg;
    int64_t r0, r1;
    cpu_task_rows(task, job->rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t mod = (r / job->seq_len) * job->mod_stride;
        int64_t off = r * job->dim;
        adaln_row(job->x + off, job->w, job->shift + mod, job->scale + mod, job->y + off,
                  job->dim, job->mean + r, job->rstd + r);
    }
}

/* With g = dy * w * (1 + scale) the gradient of LN(x):
 *   dx = rstd * (g - mean(g) - LN(x) * mean(g * LN(x))). */
static void adaln_dx_row(const float *restrict x, const float *restrict dy,
                         const float *restrict w, const float *restrict scale, float mean,
                         float rstd, float *restrict dx, int32_t dim, bool accumulate)
{
    float sg[LANES] = {0}, sgx[LANES] = {0};
    int32_t j = 0;
    for (; j + LANES <= dim; j += LANES)
        for (int k = 0; k < LANES; k++) {
            float g = dy[j + k] * w[j + k] * (1.0f + scale[j + k]);
            sg[k] += g;
            sgx[k] += g * ((x[j + k] - mean) * rstd);
        }
    for (int k = 0; j + k < dim; k++) {
        float g = dy[j + k] * w[j + k] * (1.0f + scale[j + k]);
        sg[k] += g;
        sgx[k] += g * ((x[j + k] - mean) * rstd);
    }
    float c1 = lanes_total(sg) / (float)dim;
    float c2 = lanes_total(sgx) / (float)dim;
    if (accumulate) {
        for (int32_t k = 0; k < dim; k++) {
            float g = dy[k] * w[k] * (1.0f + scale[k]);
            dx[k] += rstd * (g - c1 - (x[k] - mean) * rstd * c2);
        }
    } else {
        for (int32_t k = 0; k < dim; k++) {
            float g = dy[k] * w[k] * (1.0f + scale[k]);
            dx[k] = rstd * (g - c1 - (x[k] - mean) * rstd * c2);
        }
    }
}

static void adaln_dx_task(const adaln_job *job, int64_t task)
{
    int64_t r0, r1;
    cpu_task_rows(task, job->rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *scale = job->scale + (r / job->seq_len) * job->mod_stride;
        int64_t off = r * job->dim;
        adaln_dx_row(job->x + off, job->dy + off, job->w, scale, job->mean_in[r],
                     job->rstd_in[r], job->y + off, job->dim, job->accumulate_dx);
    }
}

static void adaln_cols_row(const float *restrict x, const float *restrict dy, float mean,
                           float rstd, float *restrict dsh, float *restrict p, int32_t width)
{
    for (int32_t k = 0; k < width; k++) {
        dsh[k] += dy[k];
        p[k] += dy[k] * ((x[k] - mean) * rstd);
    }
}

/* dshift[b] and P[b] (into dscale's slot) for one column chunk. */
static void adaln_seq_cols_task(const adaln_job *job, int64_t task)
{
    int32_t n_chunks = (job->dim + ADALN_COLS_PER_TASK - 1) / ADALN_COLS_PER_TASK;
    int64_t b = task / n_chunks;
    int32_t c0 = (int32_t)(task % n_chunks) * ADALN_COLS_PER_TASK;
    int32_t width = job->dim - c0 < ADALN_COLS_PER_TASK ? job->dim - c0 : ADALN_COLS_PER_TASK;
    int64_t r0 = b * job->seq_len;
    int64_t r1 = r0 + job->seq_len < job->rows ? r0 + job->seq_len : job->rows;
    float dsh[ADALN_COLS_PER_TASK] = {0}, p[ADALN_COLS_PER_TASK] = {0};
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = r * job->dim + c0;
        adaln_cols_row(job->x + off, job->dy + off, job->mean_in[r], job->rstd_in[r], dsh, p,
                       width);
    }
    int64_t mod = b * job->mod_stride + c0;
    for (int32_t k = 0; k < width; k++) {
        job->dshift[mod + k] = dsh[k];
        job->dscale[mod + k] = p[k];
    }
}

static void adaln_backward_rows_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const adaln_job *job = arg;
    if (task < job->n_row_tasks)
        adaln_dx_task(job, task);
    else
        adaln_seq_cols_task(job, task - job->n_row_tasks);
}

static void adaln_param_cols(const float *restrict w, const float *restrict scale,
                             float *restrict p_dscale, float *restrict acc, int32_t width)
{
    for (int32_t k = 0; k < width; k++) {
        acc[k] += (1.0f + scale[k]) * p_dscale[k];
        p_dscale[k] = w[k] * p_dscale[k];
    }
}

/* dw over all sequences in order, and dscale[b] = w * P[b]. */
static void adaln_param_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const adaln_job *job = arg;
    int32_t c0 = (int32_t)task * ADALN_COLS_PER_TASK;
    int32_t width = job->dim - c0 < ADALN_COLS_PER_TASK ? job->dim - c0 : ADALN_COLS_PER_TASK;
    int64_t n_seq = (job->rows + job->seq_len - 1) / job->seq_len;
    float acc[ADALN_COLS_PER_TASK] = {0};
    for (int64_t b = 0; b < n_seq; b++) {
        int64_t mod = b * job->mod_stride + c0;
        adaln_param_cols(job->w + c0, job->scale + mod, job->dscale + mod, acc, width);
    }
    float *dw = job->dw + c0;
    for (int32_t k = 0; k < width; k++)
        dw[k] = job->accumulate_dw ? dw[k] + acc[k] : acc[k];
}

void cpu_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                       const float *x, const float *w, const float *shift, const float *scale,
                       int32_t mod_stride, float *y, float *mean, float *rstd)
{
    if (seq_len <= 0 || dim <= 0)
        return;
    adaln_job job = {.rows = rows, .seq_len = seq_len, .dim = dim, .mod_stride = mod_stride,
                     .x = x, .w = w, .shift = shift, .scale = scale, .y = y, .mean = mean,
                     .rstd = rstd};
    cpu_parallel_chunks(cpu_of(be)->pool, rows, CPU_ROWS_PER_TASK, adaln_forward_task, &job);
}

void cpu_adaln_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                        const float *x, const float *w, const float *scale, int32_t mod_stride,
                        const float *mean, const float *rstd, const float *dy, float *dx,
                        bool accumulate_dx, float *dw, bool accumulate_dw, float *dshift,
                        float *dscale)
{
    if (seq_len <= 0 || dim <= 0 || rows < 0)
        return;
    int64_t n_seq = (rows + seq_len - 1) / seq_len;
    int64_t n_chunks = (dim + ADALN_COLS_PER_TASK - 1) / ADALN_COLS_PER_TASK;
    adaln_job job = {.rows = rows, .seq_len = seq_len, .dim = dim, .mod_stride = mod_stride,
                     .n_row_tasks = (rows + CPU_ROWS_PER_TASK - 1) / CPU_ROWS_PER_TASK,
                     .x = x, .w = w, .scale = scale, .mean_in = mean, .rstd_in = rstd,
                     .dy = dy, .y = dx, .dw = dw, .dshift = dshift, .dscale = dscale,
                     .accumulate_dx = accumulate_dx, .accumulate_dw = accumulate_dw};
    cpu_backend *cb = cpu_of(be);
    /* dx and the per-sequence column sums read the same inputs and write
     * disjoint outputs, so they share one job. */
    cpu_pool_run(cb->pool, job.n_row_tasks + n_seq * n_chunks, adaln_backward_rows_task, &job);
    cpu_pool_run(cb->pool, n_chunks, adaln_param_task, &job);
}
