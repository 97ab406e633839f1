/*
 * cpu_optim.c — the optimiser's operations over flat parameter arrays:
 * squared norm, scaling, addition, AdamW and the EMA of the weights.
 */
#include <math.h>

#include "cpu_backend.h"
#include "cpu_parallel.h"

/* Floats per task of the elementwise operations. */
#define OPT_TASK_FLOATS 16384

/* sum_squares splits x into at most SUMSQ_MAX_BLOCKS blocks whose size
 * depends on n alone; their partial sums live on the caller's stack and are
 * added in block order, so the result is the same for every thread count. */
#define SUMSQ_MAX_BLOCKS 1024
#define SUMSQ_MIN_BLOCK 16384
#define DLANES 8

typedef struct optim_job {
    int64_t n;
    float *x;
    const float *src;     /* grad (adamw), param (ema), input (sum_squares) */
    float *m;
    float *v;
    double *partials;
    int64_t block;
    float s;              /* scale factor, or EMA decay */
    float lr, beta1, beta2, eps, weight_decay;
    float bias1, bias2;   /* 1 - beta^step */
} optim_job;

static int64_t task_end(int64_t begin, int64_t size, int64_t n)
{
    return begin + size < n ? begin + size : n;
}

static double sum_squares_span(const float *restrict x, int64_t n)
{
    double acc[DLANES] = {0};
    int64_t j = 0;
    for (; j + DLANES <= n; j += DLANES)
        for (int k = 0; k < DLANES; k++)
            acc[k] += (double)x[j + k] * (double)x[j + k];
    for (int k = 0; j + k < n; k++)
        acc[k] += (double)x[j + k] * (double)x[j + k];
    for (int w = DLANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++)
            acc[k] += acc[k + w];
    return acc[0];
}

static void sum_squares_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const optim_job *job = arg;
    int64_t begin = task * job->block;
    int64_t end = task_end(begin, job->block, job->n);
    job->partials[task] = sum_squares_span(job->src + begin, end - begin);
}

double cpu_sum_squares(nctmc_backend *be, int64_t n, const float *x)
{
    if (n <= 0)
        return 0.0;
    int64_t block = (n + SUMSQ_MAX_BLOCKS - 1) / SUMSQ_MAX_BLOCKS;
    block = block < SUMSQ_MIN_BLOCK ? SUMSQ_MIN_BLOCK : block;
    int64_t n_blocks = (n + block - 1) / block;
    double partials[SUMSQ_MAX_BLOCKS];
    optim_job job = {.n = n, .src = x, .partials = partials, .block = block};
    cpu_pool_run(cpu_of(be)->pool, n_blocks, sum_squares_task, &job);
    double total = 0.0;
    for (int64_t b = 0; b < n_blocks; b++)
        total += partials[b];
    return total;
}

static void scale_span(float *restrict x, float s, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        x[j] *= s;
}

static void scale_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const optim_job *job = arg;
    int64_t begin = task * OPT_TASK_FLOATS;
    scale_span(job->x + begin, job->s, task_end(begin, OPT_TASK_FLOATS, job->n) - begin);
}

void cpu_scale(nctmc_backend *be, int64_t n, float *x, float s)
{
    optim_job job = {.n = n, .x = x, .s = s};
    cpu_parallel_chunks(cpu_of(be)->pool, n, OPT_TASK_FLOATS, scale_task, &job);
}

static void add_span(float *restrict y, const float *restrict x, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        y[j] = y[j] + x[j];
}

static void add_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const optim_job *job = arg;
    int64_t begin = task * OPT_TASK_FLOATS;
    add_span(job->x + begin, job->src + begin,
             task_end(begin, OPT_TASK_FLOATS, job->n) - begin);
}

void cpu_add(nctmc_backend *be, int64_t n, float *y, const float *x)
{
    optim_job job = {.n = n, .x = y, .src = x};
    cpu_parallel_chunks(cpu_of(be)->pool, n, OPT_TASK_FLOATS, add_task, &job);
}

static void adamw_span(const optim_job *job, float *restrict p, const float *restrict g,
                       float *restrict m, float *restrict v, int64_t n)
{
    const float lr = job->lr, b1 = job->beta1, b2 = job->beta2, eps = job->eps;
    const float wd = job->weight_decay, bias1 = job->bias1, bias2 = job->bias2;
    for (int64_t j = 0; j < n; j++) {
        float mj = b1 * m[j] + (1.0f - b1) * g[j];
        float vj = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
        float p_old = p[j];
        float p_new = p_old - lr * (mj / bias1) / (sqrtf(vj / bias2) + eps);
        p[j] = p_new - lr * wd * p_old;
        m[j] = mj;
        v[j] = vj;
    }
}

static void adamw_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const optim_job *job = arg;
    int64_t b = task * OPT_TASK_FLOATS;
    int64_t n = task_end(b, OPT_TASK_FLOATS, job->n) - b;
    adamw_span(job, job->x + b, job->src + b, job->m + b, job->v + b, n);
}

void cpu_adamw(nctmc_backend *be, int64_t n, float *param, const float *grad, float *m,
               float *v, float lr, float beta1, float beta2, float eps, float weight_decay,
               int64_t step)
{
    /* Steps count from 1; an earlier step would divide by a zero bias
     * correction, so it is taken as the first. */
    double k = step < 1 ? 1.0 : (double)step;
    optim_job job = {.n = n, .x = param, .src = grad, .m = m, .v = v, .lr = lr,
                     .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay,
                     .bias1 = (float)(1.0 - pow((double)beta1, k)),
                     .bias2 = (float)(1.0 - pow((double)beta2, k))};
    cpu_parallel_chunks(cpu_of(be)->pool, n, OPT_TASK_FLOATS, adamw_task, &job);
}

static void ema_span(float *restrict ema, const float *restrict param, float decay, int64_t n)
{
    const float keep = 1.0f - decay;
    for (int64_t j = 0; j < n; j++)
        ema[j] = decay * ema[j] + keep * param[j];
}

static void ema_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const optim_job *job = arg;
    int64_t b = task * OPT_TASK_FLOATS;
    ema_span(job->x + b, job->src + b, job->s, task_end(b, OPT_TASK_FLOATS, job->n) - b);
}

void cpu_ema_update(nctmc_backend *be, int64_t n, float *ema, const float *param, float decay)
{
    optim_job job = {.n = n, .x = ema, .src = param, .s = decay};
    cpu_parallel_chunks(cpu_of(be)->pool, n, OPT_TASK_FLOATS, ema_task, &job);
}
