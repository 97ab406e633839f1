/*
 * cpu_activation.c — SiLU and tanh-GELU, forward and backward.
 *
 * Elementwise, split into fixed-size chunks of the flat array. The callers
 * may pass the same array as input and output, so each chunk is computed
 * into a small local block first and then stored: the local block cannot
 * alias anything, which lets the compiler vectorise the arithmetic without
 * runtime overlap checks that an exact alias would fail.
 */
#include "cpu_backend.h"
#include "cpu_math.h"
#include "cpu_parallel.h"

/* Floats per task: large enough to hide the pool's hand-off, small enough
 * that a 2048 x 1536 activation still spreads over many threads. */
#define ACT_TASK_FLOATS 16384
/* Floats computed per local block. */
#define ACT_BLOCK 256

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

/* Computes n values of the activation (or of dy times its derivative) into a
 * block that aliases nothing; dy is unused by the forward kernels. */
typedef void (*act_block_fn)(const float *restrict x, const float *restrict dy,
                             float *restrict out, int64_t n);

typedef struct act_job {
    act_block_fn block;
    int64_t n;
    const float *x;
    const float *dy;
    float *out;
    bool accumulate;
} act_job;

/* The kernels evaluate the sigmoid or tanh in a loop of its own, into the
 * output block, and combine it with x in a second loop. When cpu_expf still
 * saturated to ~1e-38 below its range, gcc computed that arm for every
 * element of a fused loop and the subnormal products made SiLU ~3x slower;
 * cpu_expf now returns 0 there and the two forms measure the same, so the
 * split stays as the form that is fast either way. */
CPU_VECTOR_CLONES
static void silu_block(const float *restrict x, const float *restrict dy,
                       float *restrict y, int64_t n)
{
    (void)dy;
    for (int64_t j = 0; j < n; j++)
        y[j] = cpu_sigmoidf(x[j]);
    for (int64_t j = 0; j < n; j++)
        y[j] = x[j] * y[j];
}

CPU_VECTOR_CLONES
static void silu_grad_block(const float *restrict x, const float *restrict dy,
                            float *restrict dx, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        dx[j] = cpu_sigmoidf(x[j]);
    for (int64_t j = 0; j < n; j++) {
        float s = dx[j];
        dx[j] = dy[j] * (s * (1.0f + x[j] * (1.0f - s)));
    }
}

CPU_VECTOR_CLONES
static void gelu_tanh_block(const float *restrict x, float *restrict t, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        float v = x[j];
        t[j] = cpu_tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
    }
}

CPU_VECTOR_CLONES
static void gelu_block(const float *restrict x, const float *restrict dy,
                       float *restrict y, int64_t n)
{
    (void)dy;
    gelu_tanh_block(x, y, n);
    for (int64_t j = 0; j < n; j++)
        y[j] = 0.5f * x[j] * (1.0f + y[j]);
}

CPU_VECTOR_CLONES
static void gelu_grad_block(const float *restrict x, const float *restrict dy,
                            float *restrict dx, int64_t n)
{
    gelu_tanh_block(x, dx, n);
    for (int64_t j = 0; j < n; j++) {
        float v = x[j], t = dx[j];
        float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
        float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        dx[j] = dy[j] * d;
    }
}

static void store_block(float *restrict dst, const float *restrict src, int64_t n,
                        bool accumulate)
{
    if (accumulate) {
        for (int64_t j = 0; j < n; j++)
            dst[j] += src[j];
    } else {
        for (int64_t j = 0; j < n; j++)
            dst[j] = src[j];
    }
}

static void act_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const act_job *job = arg;
    int64_t begin = task * ACT_TASK_FLOATS;
    int64_t end = begin + ACT_TASK_FLOATS < job->n ? begin + ACT_TASK_FLOATS : job->n;
    float buf[ACT_BLOCK];
    for (int64_t j = begin; j < end; j += ACT_BLOCK) {
        int64_t n = end - j < ACT_BLOCK ? end - j : ACT_BLOCK;
        job->block(job->x + j, job->dy ? job->dy + j : NULL, buf, n);
        store_block(job->out + j, buf, n, job->accumulate);
    }
}

static void act_run(nctmc_backend *be, act_job *job)
{
    cpu_parallel_chunks(cpu_of(be)->pool, job->n, ACT_TASK_FLOATS, act_task, job);
}

void cpu_silu_forward(nctmc_backend *be, int64_t n, const float *x, float *y)
{
    act_job job = {silu_block, n, x, NULL, y, false};
    act_run(be, &job);
}

void cpu_silu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                       float *dx, bool accumulate)
{
    act_job job = {silu_grad_block, n, x, dy, dx, accumulate};
    act_run(be, &job);
}

void cpu_gelu_forward(nctmc_backend *be, int64_t n, const float *x, float *y)
{
    act_job job = {gelu_block, n, x, NULL, y, false};
    act_run(be, &job);
}

void cpu_gelu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                       float *dx)
{
    act_job job = {gelu_grad_block, n, x, dy, dx, false};
    act_run(be, &job);
}
