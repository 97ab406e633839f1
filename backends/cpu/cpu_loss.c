/*
 * cpu_loss.c — the fused L_cond loss and the model's jump outputs.
 *
 * Each row (position) makes one streaming pass over its S valid logits,
 * skipping the current token i, for the statistics lcond_math.h asks for:
 * the running max, the sum of exp(z - max) rescaled whenever the max grows,
 * and the sum of the data tokens' logits (the prior is constant over data
 * tokens, so prior_dot = pi_data * that sum + pi_mask * z_mask, both taken
 * relative to the max; the sum is accumulated against the row's first
 * logit so that a common offset of the logits costs no precision). The pass
 * works in chunks: a chunk's max is taken first, so each exp is evaluated
 * once, against a max that is final for that chunk. The sums are kept in
 * LANES partials (vectorisable, fixed order) and combined in a fixed tree.
 * The per-position math then comes from lcond_math.h, shared with CUDA.
 */
#include <math.h>

#include "cpu_backend.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "math/lcond_math.h"

#define LANES 16
#define CHUNK (4 * LANES)

typedef struct row_stream {
    float max;
    float ref;               /* sum_z holds sum (z - ref) */
    float sum_exp[LANES];
    float sum_z[LANES];
} row_stream;

static float lanes_total(const float acc[LANES])
{
    float t[LANES];
    for (int k = 0; k < LANES; k++)
        t[k] = acc[k];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++)
            t[k] += t[k + w];
    return t[0];
}

CPU_VECTOR_CLONES
static float chunk_max(const float *restrict z, int32_t n)
{
    float m[LANES];
    for (int k = 0; k < LANES; k++)
        m[k] = -INFINITY;
    int32_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++)
            m[k] = z[j + k] > m[k] ? z[j + k] : m[k];
    for (int k = 0; j + k < n; k++)
        m[k] = z[j + k] > m[k] ? z[j + k] : m[k];
    float best = m[0];
    for (int k = 1; k < LANES; k++)
        best = m[k] > best ? m[k] : best;
    return best;
}

CPU_VECTOR_CLONES
static void chunk_sums(const float *restrict z, int32_t n, float max, float ref,
                       float *restrict se, float *restrict sz)
{
    int32_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) {
            se[k] += cpu_expf(z[j + k] - max);
            sz[k] += z[j + k] - ref;
        }
    for (int k = 0; j + k < n; k++) {
        se[k] += cpu_expf(z[j + k] - max);
        sz[k] += z[j + k] - ref;
    }
}

/* Adds logits [lo, hi) to the stream. */
static void stream_range(row_stream *s, const float *z, int32_t lo, int32_t hi)
{
    for (int32_t c = lo; c < hi; c += CHUNK) {
        int32_t n = hi - c < CHUNK ? hi - c : CHUNK;
        float m = chunk_max(z + c, n);
        if (m > s->max) {
            float f = cpu_expf(s->max - m);
            for (int k = 0; k < LANES; k++)
                s->sum_exp[k] *= f;
            s->max = m;
        }
        chunk_sums(z + c, n, s->max, s->ref, s->sum_exp, s->sum_z);
    }
}

/* The row statistics over j != i, j < S. */
static lcond_row_stats row_stats(const nctmc_fp *fp, const float *z, int32_t i)
{
    int32_t n_data = fp_n_data(fp);
    int32_t mask = fp_mask(fp);
    int32_t cut = i >= 0 && i < n_data ? i : n_data;
    int32_t n_counted = cut < n_data ? n_data - 1 : n_data;
    /* any logit the row really has serves as the reference */
    row_stream s = {.max = -INFINITY, .ref = z[cut == 0 ? 1 : 0]};
    stream_range(&s, z, 0, cut);
    stream_range(&s, z, cut < n_data ? cut + 1 : n_data, n_data);
    double dev_data = (double)lanes_total(s.sum_z);
    if (mask >= 0 && mask != i)
        stream_range(&s, z, mask, mask + 1);
    double max = (double)s.max, ref = (double)s.ref;
    double prior_dot = fp_prior_data(fp) * (dev_data + (double)n_counted * (ref - max));
    if (mask >= 0 && mask != i)
        prior_dot += fp_prior_mask(fp) * ((double)z[mask] - max);
    lcond_row_stats st = {s.max, lanes_total(s.sum_exp), prior_dot};
    return st;
}

static float logit_at(const float *z, int32_t j, int32_t vocab)
{
    return j >= 0 && j < vocab ? z[j] : 0.0f;
}

typedef struct loss_job {
    const nctmc_lcond_args *lc;
    const nctmc_jump_output_args *jo;
} loss_job;

/* d_logits may be the logits row: the few logits the patch-up needs are read
 * before the vectorised pass overwrites them. */
CPU_VECTOR_CLONES
static void lcond_write_grads(const lcond_grad_coef *g, const lcond_position *p,
                              const nctmc_fp *fp, const float *z, float *d, int32_t row_stride)
{
    int32_t S = fp->vocab, mask = fp_mask(fp);
    float z_mask = mask >= 0 ? z[mask] : 0.0f;
    for (int32_t j = 0; j < S; j++)
        d[j] = g->scale * cpu_expf(z[j] - g->lse) - g->sub_data;
    if (mask >= 0)
        d[mask] = g->scale * cpu_expf(z_mask - g->lse) - g->sub_mask;
    if (p->x0 >= 0 && p->x0 < S)
        d[p->x0] -= g->sub_x0;
    if (p->i >= 0 && p->i < S)
        d[p->i] = 0.0f;
    for (int32_t j = S; j < row_stride; j++)
        d[j] = 0.0f;
}

static void lcond_row(const nctmc_lcond_args *a, int64_t r)
{
    const float *z = a->logits + r * a->row_stride;
    int32_t i = a->x_t[r], x0 = a->x_0[r];
    double t = (double)a->times[r / a->seq_len];
    float h = a->rate_h ? a->rate_h[r] : 0.0f;
    lcond_position p = lcond_prepare(&a->fp, t, i, x0, h);
    lcond_row_stats st = row_stats(&a->fp, z, i);
    float scale = a->seq_weight ? a->grad_scale * a->seq_weight[r / a->seq_len] : a->grad_scale;
    if (a->loss)
        a->loss[r] = (float)lcond_value(&p, st, logit_at(z, x0, a->fp.vocab));
    if (a->d_rate_h)
        a->d_rate_h[r] = (float)(lcond_grad_h(&a->fp, &p) * (double)scale);
    if (a->d_logits) {
        lcond_grad_coef g = lcond_grad_coefficients(&a->fp, &p, st, scale);
        lcond_write_grads(&g, &p, &a->fp, z, a->d_logits + r * a->row_stride, a->row_stride);
    }
}

static void lcond_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const nctmc_lcond_args *a = ((const loss_job *)arg)->lc;
    int64_t r0, r1;
    cpu_task_rows(task, a->n_rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        lcond_row(a, r);
}

void cpu_lcond(nctmc_backend *be, const nctmc_lcond_args *args)
{
    loss_job job = {args, NULL};
    cpu_parallel_chunks(cpu_of(be)->pool, args->n_rows, CPU_ROWS_PER_TASK, lcond_task, &job);
}

static void jump_logprob_row(const float *restrict z, double lse, int32_t i,
                             float *restrict out, int32_t vocab)
{
    for (int32_t j = 0; j < vocab; j++)
        out[j] = (float)((double)z[j] - lse);
    if (i >= 0 && i < vocab)
        out[i] = -INFINITY;
}

static void jump_output_row(const nctmc_jump_output_args *a, int64_t r)
{
    const float *z = a->logits + r * a->row_stride;
    int32_t i = a->x_t[r];
    if (a->log_rate) {
        double t = (double)a->times[r / a->seq_len];
        float h = a->rate_h ? a->rate_h[r] : 0.0f;
        a->log_rate[r] = (float)fp_model_log_rate(&a->fp, t, i, h);
    }
    if (a->jump_logprobs) {
        double lse = lcond_lse(row_stats(&a->fp, z, i));
        jump_logprob_row(z, lse, i, a->jump_logprobs + r * a->fp.vocab, a->fp.vocab);
    }
}

static void jump_output_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const nctmc_jump_output_args *a = ((const loss_job *)arg)->jo;
    int64_t r0, r1;
    cpu_task_rows(task, a->n_rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        jump_output_row(a, r);
}

void cpu_jump_output(nctmc_backend *be, const nctmc_jump_output_args *args)
{
    loss_job job = {NULL, args};
    cpu_parallel_chunks(cpu_of(be)->pool, args->n_rows, CPU_ROWS_PER_TASK, jump_output_task, &job);
}
