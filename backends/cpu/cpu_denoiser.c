/*
 * cpu_denoiser.c — the denoiser exit-rate link, forward and backward
 * (lib/denoiser_math.h has the math, shared with CUDA).
 *
 * Rows are independent; each makes its passes over its S logits in
 * increasing column order with double accumulators, so the results do not
 * depend on the number of threads.
 */
#include <math.h>

#include "cpu_backend.h"
#include "denoiser_math.h"

/* The row's per-position scalars: the max over the data tokens and the sum
 * of exp(z - max) over the data tokens other than the current one. */
static dn_row row_prepare(const nctmc_denoiser_args *a, int64_t r)
{
    const float *z = a->x0_logits + r * a->row_stride;
    int32_t i = a->x_t[r], n_data = fp_n_data(&a->fp);
    double max = -INFINITY;
    for (int32_t k = 0; k < n_data; k++)
        max = (double)z[k] > max ? (double)z[k] : max;
    double sum = 0.0;
    for (int32_t k = 0; k < n_data; k++)
        if (k != i)
            sum += exp((double)z[k] - max);
    double t = (double)a->times[r / a->seq_len];
    float z_i = i >= 0 && i < n_data ? z[i] : 0.0f;
    return dn_prepare(&a->fp, t, i, max, log(sum), z_i);
}

static void forward_row(const nctmc_denoiser_args *a, int64_t r)
{
    dn_row d = row_prepare(a, r);
    const float *z = a->x0_logits + r * a->row_stride;
    float *l = a->logits + r * a->row_stride;
    int32_t S = a->fp.vocab;
    for (int32_t j = 0; j < S; j++)
        l[j] = j == d.i ? 0.0f : dn_stored_logit(dn_logit(&d, j, z[j]));
    for (int32_t j = S; j < a->row_stride; j++)
        l[j] = 0.0f;
    a->rate_h[r] = (float)d.h;
}

static void backward_row(const nctmc_denoiser_args *a, int64_t r)
{
    dn_row d = row_prepare(a, r);
    const float *z = a->x0_logits + r * a->row_stride;
    float *g = a->logits + r * a->row_stride;
    double g_h = (double)a->rate_h[r];
    int32_t S = a->fp.vocab;
    double sum_u = 0.0, sum_pi_G = 0.0;   /* sum_u: over k != i */
    for (int32_t j = 0; j < S; j++) {
        if (j == d.i)
            continue;
        dn_terms c = dn_column_terms(&d, j, z[j], (double)g[j], g_h);
        sum_u += c.u;
        sum_pi_G += c.pi_G;
    }
    double u_i = dn_u_current(&d, sum_pi_G);
    /* u_k is recomputed from g[k] before g[k] is overwritten */
    for (int32_t k = 0; k < d.n_data; k++) {
        double u = k == d.i ? u_i : dn_column_terms(&d, k, z[k], (double)g[k], g_h).u;
        g[k] = (float)dn_dz(&d, k, z[k], u, u_i, sum_u);
    }
    for (int32_t j = d.n_data; j < a->row_stride; j++)
        g[j] = 0.0f;
}

typedef struct dn_job {
    const nctmc_denoiser_args *a;
    void (*row)(const nctmc_denoiser_args *, int64_t);
} dn_job;

static void dn_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const dn_job *job = arg;
    int64_t r0 = task * CPU_ROWS_PER_TASK;
    int64_t r1 = r0 + CPU_ROWS_PER_TASK < job->a->n_rows ? r0 + CPU_ROWS_PER_TASK
                                                         : job->a->n_rows;
    for (int64_t r = r0; r < r1; r++)
        job->row(job->a, r);
}

void cpu_denoiser_forward(nctmc_backend *be, const nctmc_denoiser_args *args)
{
    dn_job job = {args, forward_row};
    cpu_parallel_chunks(cpu_of(be), args->n_rows, CPU_ROWS_PER_TASK, dn_task, &job);
}

void cpu_denoiser_backward(nctmc_backend *be, const nctmc_denoiser_args *args)
{
    dn_job job = {args, backward_row};
    cpu_parallel_chunks(cpu_of(be), args->n_rows, CPU_ROWS_PER_TASK, dn_task, &job);
}
