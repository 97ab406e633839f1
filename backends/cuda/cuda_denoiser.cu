/*
 * cuda_denoiser.cu — the denoiser exit-rate link, forward and backward, one
 * block per row (position). The per-row and per-column math is
 * lib/math/denoiser_math.h, the code the CPU backend runs; the row's sums are
 * taken per thread in a fixed stride and combined by the deterministic
 * block reductions of cuda_internal.cuh.
 */
#include <math.h>

#include "cuda_internal.cuh"
#include "math/denoiser_math.h"

/* The row's scalars: the max over the data tokens, the sum of exp(z - max)
 * over the data tokens other than i. Synchronises the block. */
__device__ dn_row dn_row_device(const nctmc_denoiser_args &a, const float *z, int64_t r,
                                double *shared)
{
    int32_t i = a.x_t[r], n_data = fp_n_data(&a.fp);
    float max = -INFINITY;
    for (int32_t k = (int32_t)threadIdx.x; k < n_data; k += (int32_t)blockDim.x)
        max = z[k] > max ? z[k] : max;
    max = cuda_block_max(max, (float *)shared);
    /* float exps, as the CPU backend's; the partial sums in double */
    double sum = 0.0;
    for (int32_t k = (int32_t)threadIdx.x; k < n_data; k += (int32_t)blockDim.x)
        if (k != i)
            sum += (double)expf(z[k] - max);
    sum = cuda_block_sum(sum, shared);
    double t = (double)a.times[r / a.seq_len];
    float z_i = i >= 0 && i < n_data ? z[i] : 0.0f;
    return dn_prepare(&a.fp, t, i, (double)max, log(sum), z_i);
}

/* What both kernels start from: the block's row, its logits, scalars and
 * column coefficients. */
typedef struct dn_block {
    const float *z;
    float *out;    /* the row of `logits` */
    dn_row d;
    dn_cols c;
} dn_block;

__device__ dn_block dn_block_start(const nctmc_denoiser_args &a, double *shared)
{
    dn_block b;
    int64_t r = blockIdx.x;
    b.z = a.x0_logits + r * a.row_stride;
    b.out = a.logits + r * a.row_stride;
    b.d = dn_row_device(a, b.z, r, shared);
    b.c = dn_columns(&b.d);
    return b;
}

__global__ void denoiser_forward_kernel(nctmc_denoiser_args a)
{
    __shared__ double shared[32];
    const dn_block b = dn_block_start(a, shared);
    const float *z = b.z;
    const dn_row &d = b.d;
    const dn_cols &c = b.c;
    float *l = b.out;
    for (int32_t j = (int32_t)threadIdx.x; j < a.row_stride; j += (int32_t)blockDim.x) {
        float v = 0.0f;
        if (j < d.n_data && j != d.i) {
            float rate = dn_rate_data(&c, expf(dn_ap_exponent(&c, z[j])));
            v = dn_logit_of_log_rate(rate, logf(rate));
        } else if (j == d.mask && j != d.i) {
            v = dn_logit_of_log_rate(c.b_mask, logf(c.b_mask));
        }
        l[j] = v;   /* 0 at i and in the padding */
    }
    if (threadIdx.x == 0)
        a.rate_h[blockIdx.x] = (float)d.h;
}

__global__ void denoiser_backward_kernel(nctmc_denoiser_args a)
{
    __shared__ double shared[32];
    dn_block b = dn_block_start(a, shared);
    const float *z = b.z;
    const dn_row &d = b.d;
    const dn_cols &c = b.c;
    float *g = b.out;
    float gh_inv = (float)((double)a.rate_h[blockIdx.x] * c.inv_lam);
    double sum_u = 0.0, sum_pi_G = 0.0;   /* over the columns j != i */
    for (int32_t j = (int32_t)threadIdx.x; j < a.fp.vocab; j += (int32_t)blockDim.x) {
        if (j == d.i)
            continue;
        if (j < d.n_data) {
            dn_terms t = dn_data_terms(&c, expf(dn_ap_exponent(&c, z[j])), g[j], gh_inv);
            sum_u += (double)t.u;
            sum_pi_G += (double)t.pi_G;
        } else if (j == d.mask) {
            sum_pi_G += (double)dn_mask_pi_G(&c, g[j], gh_inv);
        }
    }
    /* both reductions end with a barrier, so every read of g above is done
     * before the writes below */
    sum_u = cuda_block_sum(sum_u, shared);
    sum_pi_G = cuda_block_sum(sum_pi_G, shared);
    double u_i = dn_u_current(&d, sum_pi_G);
    float total = (float)(sum_u + u_i);
    for (int32_t k = (int32_t)threadIdx.x; k < a.row_stride; k += (int32_t)blockDim.x) {
        if (k >= d.n_data) {
            g[k] = 0.0f;
        } else if (k == d.i) {
            g[k] = (float)dn_dz_current(&d, u_i, sum_u);
        } else {
            float ap = expf(dn_ap_exponent(&c, z[k]));
            g[k] = dn_data_terms(&c, ap, g[k], gh_inv).u - dn_p_of(&c, ap) * total;
        }
    }
}

static void launch(nctmc_backend *be, const nctmc_denoiser_args *args,
                   void (*kernel)(nctmc_denoiser_args), const char *name)
{
    cuda_backend *cb = cuda_of(be);
    if (args->n_rows <= 0 || !cuda_rows_fit(cb, args->n_rows, name))
        return;
    kernel<<<(unsigned)args->n_rows, CUDA_THREADS, 0, cb->stream>>>(*args);
    cuda_launched(cb, name);
}

void cuda_denoiser_forward(nctmc_backend *be, const nctmc_denoiser_args *args)
{
    launch(be, args, denoiser_forward_kernel, "denoiser_forward");
}

void cuda_denoiser_backward(nctmc_backend *be, const nctmc_denoiser_args *args)
{
    launch(be, args, denoiser_backward_kernel, "denoiser_backward");
}
