/*
 * cpu_denoiser.c — the denoiser exit-rate link, forward and backward
 * (lib/math/denoiser_math.h has the math, shared with CUDA).
 *
 * Rows are independent; each makes its passes over its S logits in a fixed
 * order (sums in LANES float partials, combined in double), so the results
 * do not depend on the number of threads.
 */
#include <math.h>

#include "cpu_backend.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "math/denoiser_math.h"

#define LANES 16

CPU_VECTOR_CLONES
static float range_max(const float *restrict z, int32_t lo, int32_t hi, float max)
{
    for (int32_t k = lo; k < hi; k++)
        max = z[k] > max ? z[k] : max;
    return max;
}

/* sum of exp(z - max) over [lo, hi), in LANES float partials (a fixed
 * order, so the same bits for every thread count) combined in double. */
CPU_VECTOR_CLONES
static double range_sum_exp(const float *restrict z, int32_t lo, int32_t hi, float max)
{
    float acc[LANES] = {0};
    int32_t j = lo;
    for (; j + LANES <= hi; j += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += cpu_expf(z[j + k] - max);
    double sum = 0.0;
    for (; j < hi; j++)
        sum += (double)cpu_expf(z[j] - max);
    for (int k = 0; k < LANES; k++)
        sum += (double)acc[k];
    return sum;
}

/* The row's per-position scalars: the max over the data tokens and the sum
 * of exp(z - max) over the data tokens other than the current one. */
static dn_row row_prepare(const nctmc_denoiser_args *a, int64_t r)
{
    const float *z = a->x0_logits + r * a->row_stride;
    int32_t i = a->x_t[r], n_data = fp_n_data(&a->fp);
    int32_t cut = i >= 0 && i < n_data ? i : n_data;
    float max = range_max(z, 0, n_data, -INFINITY);
    double sum = range_sum_exp(z, 0, cut, max) + range_sum_exp(z, cut + 1, n_data, max);
    double t = (double)a->times[r / a->seq_len];
    float z_i = cut < n_data ? z[i] : 0.0f;
    return dn_prepare(&a->fp, t, i, (double)max, log(sum), z_i);
}

/* l_j over the data tokens [0, n): one exp and one log each. The current
 * token's entry is overwritten by the caller. */
CPU_VECTOR_CLONES
static void forward_data(const dn_cols *c, const float *restrict z, float *restrict l,
                         int32_t n)
{
    for (int32_t j = 0; j < n; j++) {
        float rate = dn_rate_data(c, cpu_expf(dn_ap_exponent(c, z[j])));
        l[j] = dn_logit_of_log_rate(rate, cpu_logf(rate));
    }
}

static void forward_row(const nctmc_denoiser_args *a, int64_t r)
{
    dn_row d = row_prepare(a, r);
    dn_cols c = dn_columns(&d);
    const float *z = a->x0_logits + r * a->row_stride;
    float *l = a->logits + r * a->row_stride;
    forward_data(&c, z, l, d.n_data);
    if (d.mask >= 0)
        l[d.mask] = dn_logit_of_log_rate(c.b_mask, logf(c.b_mask));
    if (d.i >= 0 && d.i < a->fp.vocab)
        l[d.i] = 0.0f;
    for (int32_t j = a->fp.vocab; j < a->row_stride; j++)
        l[j] = 0.0f;
    a->rate_h[r] = (float)d.h;
}

/* Adds u_j and pi_j G_j over the data tokens [lo, hi) to the sums, in
 * LANES float partials (a fixed order) combined in double. */
CPU_VECTOR_CLONES
static void backward_sums(const dn_cols *c, const float *restrict z, const float *restrict g,
                          float gh_inv, int32_t lo, int32_t hi, double *sum_u, double *sum_pi_G)
{
    float au[LANES] = {0}, ap[LANES] = {0};
    int32_t j = lo;
    for (; j + LANES <= hi; j += LANES)
        for (int k = 0; k < LANES; k++) {
            dn_terms t = dn_data_terms(c, cpu_expf(dn_ap_exponent(c, z[j + k])), g[j + k], gh_inv);
            au[k] += t.u;
            ap[k] += t.pi_G;
        }
    for (; j < hi; j++) {
        dn_terms t = dn_data_terms(c, cpu_expf(dn_ap_exponent(c, z[j])), g[j], gh_inv);
        *sum_u += (double)t.u;
        *sum_pi_G += (double)t.pi_G;
    }
    for (int k = 0; k < LANES; k++) {
        *sum_u += (double)au[k];
        *sum_pi_G += (double)ap[k];
    }
}

/* dz_k = u_k - p_k total over the data tokens [lo, hi); u_k is recomputed
 * from g[k] before g[k] is overwritten. */
CPU_VECTOR_CLONES
static void backward_write(const dn_cols *c, const float *restrict z, float *restrict g,
                           float gh_inv, float total, int32_t lo, int32_t hi)
{
    for (int32_t k = lo; k < hi; k++) {
        float ap = cpu_expf(dn_ap_exponent(c, z[k]));
        g[k] = dn_data_terms(c, ap, g[k], gh_inv).u - dn_p_of(c, ap) * total;
    }
}

static void backward_row(const nctmc_denoiser_args *a, int64_t r)
{
    dn_row d = row_prepare(a, r);
    dn_cols c = dn_columns(&d);
    const float *z = a->x0_logits + r * a->row_stride;
    float *g = a->logits + r * a->row_stride;
    float gh_inv = (float)((double)a->rate_h[r] * c.inv_lam);
    /* the data tokens other than i: [0, cut) and [cut + 1, n_data) */
    bool data_i = d.i >= 0 && d.i < d.n_data;
    int32_t cut = data_i ? d.i : d.n_data;
    double sum_u = 0.0, sum_pi_G = 0.0;
    backward_sums(&c, z, g, gh_inv, 0, cut, &sum_u, &sum_pi_G);
    backward_sums(&c, z, g, gh_inv, cut + 1, d.n_data, &sum_u, &sum_pi_G);
    if (d.mask >= 0 && d.mask != d.i)
        sum_pi_G += (double)dn_mask_pi_G(&c, g[d.mask], gh_inv);
    double u_i = dn_u_current(&d, sum_pi_G);
    float total = (float)(sum_u + u_i);
    backward_write(&c, z, g, gh_inv, total, 0, cut);
    backward_write(&c, z, g, gh_inv, total, cut + 1, d.n_data);
    if (data_i)
        g[d.i] = (float)dn_dz_current(&d, u_i, sum_u);
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
    int64_t r0, r1;
    cpu_task_rows(task, job->a->n_rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        job->row(job->a, r);
}

void cpu_denoiser_forward(nctmc_backend *be, const nctmc_denoiser_args *args)
{
    dn_job job = {args, forward_row};
    cpu_parallel_chunks(cpu_of(be)->pool, args->n_rows, CPU_ROWS_PER_TASK, dn_task, &job);
}

void cpu_denoiser_backward(nctmc_backend *be, const nctmc_denoiser_args *args)
{
    dn_job job = {args, backward_row};
    cpu_parallel_chunks(cpu_of(be)->pool, args->n_rows, CPU_ROWS_PER_TASK, dn_task, &job);
}
