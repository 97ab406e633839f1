/*
 * cpu_attention.c — full bidirectional softmax attention, one pool task per
 * (sequence, head).
 *
 * Each task makes single-threaded OpenBLAS calls that read q, k, v straight
 * out of the packed qkv rows (row stride 3d), so nothing is copied. The
 * forward pass keeps the probabilities P [B, H, L, L]; the backward pass
 * builds dP in the calling thread's L x L scratch, turns it into dS in place
 * and reads dQ, dK and dV off it. A task's work depends on its task number
 * only, so results are the same for every thread count.
 */
#include "cpu_backend.h"
#include "cpu_math.h"

#include "cpu_blas.h"
#include <math.h>

/* Lanes of the fixed-order row sums: wide enough to vectorise, and the lanes
 * are always combined in the same order. */
#define SUM_LANES 16

typedef struct attention_job {
    int32_t seq_len, heads, head_dim;
    float scale;
    const float *qkv;
    const float *dout;
    float *out;
    float *saved;
    float *dqkv;
    float *workspace;
} attention_job;

size_t cpu_attention_saved_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                  int32_t heads, int32_t head_dim)
{
    (void)be;
    (void)head_dim;
    return (size_t)batch * (size_t)heads * (size_t)seq_len * (size_t)seq_len;
}

size_t cpu_attention_workspace_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                      int32_t heads, int32_t head_dim)
{
    (void)batch;
    (void)heads;
    (void)head_dim;
    return (size_t)cpu_pool_size(cpu_of(be)->pool) * (size_t)seq_len * (size_t)seq_len;
}

static float lanes_total(const float *lanes)
{
    float total = 0.0f;
    for (int l = 0; l < SUM_LANES; l++)
        total += lanes[l];
    return total;
}

/* sum_j x_j y_j, element j always landing in lane j % SUM_LANES. */
static float dot_fixed_order(const float *restrict x, const float *restrict y, int32_t n)
{
    float lanes[SUM_LANES] = {0};
    int32_t j = 0;
    for (; j + SUM_LANES <= n; j += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++)
            lanes[l] += x[j + l] * y[j + l];
    for (int l = 0; l < SUM_LANES && j + l < n; l++)
        lanes[l] += x[j + l] * y[j + l];
    return lanes_total(lanes);
}

static float sum_fixed_order(const float *restrict x, int32_t n)
{
    float lanes[SUM_LANES] = {0};
    int32_t j = 0;
    for (; j + SUM_LANES <= n; j += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++)
            lanes[l] += x[j + l];
    for (int l = 0; l < SUM_LANES && j + l < n; l++)
        lanes[l] += x[j + l];
    return lanes_total(lanes);
}

/* Lanes again, so the max reduction vectorises without fast-math. */
CPU_VECTOR_CLONES
static float row_max(const float *restrict x, int32_t n)
{
    float lanes[SUM_LANES];
    for (int l = 0; l < SUM_LANES; l++)
        lanes[l] = x[0];
    int32_t j = 0;
    for (; j + SUM_LANES <= n; j += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++)
            lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
    for (int l = 0; l < SUM_LANES && j + l < n; l++)
        lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
    float m = lanes[0];
    for (int l = 1; l < SUM_LANES; l++)
        m = lanes[l] > m ? lanes[l] : m;
    return m;
}

/* x = softmax(x) over one row; subtracting the max keeps every exponent
 * <= 0, so nothing overflows. */
CPU_VECTOR_CLONES
static void softmax_row(float *restrict x, int32_t n)
{
    float m = row_max(x, n);
    for (int32_t j = 0; j < n; j++)
        x[j] = cpu_expf(x[j] - m);
    float inv = 1.0f / sum_fixed_order(x, n);
    for (int32_t j = 0; j < n; j++)
        x[j] *= inv;
}

/* dS = P (dP - sum_j dP_j P_j) over one row, written over dP. */
CPU_VECTOR_CLONES
static void softmax_backward_row(const float *restrict p, float *restrict dp, int32_t n)
{
    float delta = dot_fixed_order(dp, p, n);
    for (int32_t j = 0; j < n; j++)
        dp[j] = p[j] * (dp[j] - delta);
}

/* Column offsets of the q, k and v parts of head h in a qkv row. */
static int64_t q_col(const attention_job *job, int64_t h)
{
    return h * job->head_dim;
}

static int64_t k_col(const attention_job *job, int64_t h)
{
    return (int64_t)job->heads * job->head_dim + h * job->head_dim;
}

static int64_t v_col(const attention_job *job, int64_t h)
{
    return 2 * (int64_t)job->heads * job->head_dim + h * job->head_dim;
}

static void attention_forward_task(void *arg, int64_t task, int worker)
{
    const attention_job *job = arg;
    int64_t b = task / job->heads, h = task % job->heads;
    int32_t L = job->seq_len, D = job->head_dim;
    int64_t d = (int64_t)job->heads * D, ld = 3 * d;
    int64_t LL = (int64_t)L * L;
    const float *rows = job->qkv + b * L * ld;
    float *p = job->saved ? job->saved + task * LL : job->workspace + worker * LL;

    cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, D, job->scale,
                rows + q_col(job, h), (blasint)ld, rows + k_col(job, h), (blasint)ld, 0.0f,
                p, L);
    for (int32_t i = 0; i < L; i++)
        softmax_row(p + (int64_t)i * L, L);
    cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, 1.0f, p, L,
                rows + v_col(job, h), (blasint)ld, 0.0f, job->out + b * L * d + h * D,
                (blasint)d);
}

void cpu_attention_forward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                           int32_t head_dim, const float *qkv, float *out, float *saved,
                           float *workspace)
{
    attention_job job = {
        .seq_len = seq_len, .heads = heads, .head_dim = head_dim,
        .scale = (float)(1.0 / sqrt((double)head_dim)),
        .qkv = qkv, .out = out, .saved = saved, .workspace = workspace,
    };
    cpu_pool_run(cpu_of(be)->pool, (int64_t)batch * heads, attention_forward_task, &job);
}

static void attention_backward_task(void *arg, int64_t task, int worker)
{
    const attention_job *job = arg;
    int64_t b = task / job->heads, h = task % job->heads;
    int32_t L = job->seq_len, D = job->head_dim;
    int64_t d = (int64_t)job->heads * D, ld = 3 * d;
    int64_t LL = (int64_t)L * L;
    const float *rows = job->qkv + b * L * ld;
    const float *dout = job->dout + b * L * d + h * D;
    float *drows = job->dqkv + b * L * ld;
    const float *p = job->saved + task * LL;
    float *ds = job->workspace + worker * LL;

    /* dV = P^T dO */
    cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, D, L, 1.0f, p, L, dout,
                (blasint)d, 0.0f, drows + v_col(job, h), (blasint)ld);
    /* dP = dO V^T, then dS in place */
    cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, D, 1.0f, dout, (blasint)d,
                rows + v_col(job, h), (blasint)ld, 0.0f, ds, L);
    for (int32_t i = 0; i < L; i++)
        softmax_backward_row(p + (int64_t)i * L, ds + (int64_t)i * L, L);
    /* dQ = scale dS K, dK = scale dS^T Q */
    cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, job->scale, ds, L,
                rows + k_col(job, h), (blasint)ld, 0.0f, drows + q_col(job, h), (blasint)ld);
    cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, D, L, job->scale, ds, L,
                rows + q_col(job, h), (blasint)ld, 0.0f, drows + k_col(job, h), (blasint)ld);
}

void cpu_attention_backward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                            int32_t head_dim, const float *qkv, const float *out, float *saved,
                            const float *dout, float *dqkv, float *workspace)
{
    /* The softmax backward takes sum_j dP P from P itself rather than from
     * out . dout, so a caller's `out` buffer may already be reused. */
    (void)out;
    attention_job job = {
        .seq_len = seq_len, .heads = heads, .head_dim = head_dim,
        .scale = (float)(1.0 / sqrt((double)head_dim)),
        .qkv = qkv, .dout = dout, .saved = saved, .dqkv = dqkv, .workspace = workspace,
    };
    cpu_pool_run(cpu_of(be)->pool, (int64_t)batch * heads, attention_backward_task, &job);
}
