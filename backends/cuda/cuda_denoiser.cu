/*
 * cuda_denoiser.cu — the denoiser exit-rate link, forward and backward, one
 * block per row (position). The per-row and per-column math is
 * lib/math/denoiser_math.h, the code the CPU backend runs; the row's sums are
 * taken per thread in a fixed stride and combined by the deterministic
 * block reductions of cuda_internal.cuh.
 *
 * lcond_denoiser (behind $NCTMC_CUDA_LCOND_LINK=fused, read at the
 * backend's first call; docs/dev/backend-modules.md) runs the link, the
 * L_cond loss on its outputs and the link's backward in one kernel: the
 * head's logits z are read once (kept in shared memory) and dL/dz written
 * once, where the chain of three operations reads a row of 50304 floats
 * ten times and writes it three times (the link's outputs, L_cond's
 * gradients, dL/dz).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "cuda_softmax.cuh"
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

/* ---- the link, L_cond and the link's backward in one pass --------------- */

#define LINK_THREADS 1024

/* l_j = log(R_j / sigma) as denoiser_forward stores it, for j < S, j != i,
 * from z_j (ap: a_c p_j where j is a data token, else untouched). */
__device__ __forceinline__ float link_logit(const dn_row &d, const dn_cols &c, float z_j,
                                            int32_t j, float *ap)
{
    if (j < d.n_data) {
        *ap = expf(dn_ap_exponent(&c, z_j));
        float rate = dn_rate_data(&c, *ap);
        return dn_logit_of_log_rate(rate, logf(rate));
    }
    if (j == d.mask)
        return dn_logit_of_log_rate(c.b_mask, logf(c.b_mask));
    return 0.0f;
}

/* The row's coefficients, written by thread 0. */
typedef struct link_shared {
    lcond_grad_coef coef;
    float gh_inv;
} link_shared;

/* One block per row: z (cached in dynamic shared memory when `cached`, read
 * once) gives the link's row scalars (dn_prepare), then L_cond's statistics
 * of the link's logits l (computed from z again at each pass, never
 * stored), the loss and L_cond's gradients g = dL/dl, dL/dh, then the
 * link's backward sums over g, then dL/dz, each from its z_k alone (so the
 * output may be z). vec: rows 16-byte aligned. The float formulas are those
 * of the three operations it replaces; the sums run in another order. */
__global__ void __launch_bounds__(LINK_THREADS) lcond_denoiser_kernel(
    nctmc_lcond_denoiser_args a, bool cached, bool vec)
{
    extern __shared__ float4 link_cache4[];
    __shared__ double shared[32];
    __shared__ link_shared ls;
    float *cache = (float *)link_cache4;
    int64_t r = blockIdx.x;
    const nctmc_fp fp = a.fp;
    const float *z = a.x0_logits + r * a.row_stride;
    int32_t i = a.x_t[r], x0 = a.x_0[r], S = fp.vocab, n_data = fp_n_data(&fp);
    /* 1. the link's row: max over the data tokens, then the sum of exp */
    float max = -INFINITY;
    int32_t head = 0;
    if (cached && vec) {
        /* four floats a load (the row and the cache 16-byte aligned) */
        head = S / 4 * 4;
        for (int32_t q = (int32_t)threadIdx.x; q < S / 4; q += (int32_t)blockDim.x) {
            float4 v = ((const float4 *)z)[q];
            link_cache4[q] = v;
            float m = 4 * q + 3 < n_data ? fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)) : -INFINITY;
            if (4 * q + 3 >= n_data) {
                m = 4 * q < n_data ? v.x : m;
                m = 4 * q + 1 < n_data && v.y > m ? v.y : m;
                m = 4 * q + 2 < n_data && v.z > m ? v.z : m;
            }
            max = m > max ? m : max;
        }
    }
    for (int32_t k = head + (int32_t)threadIdx.x; k < S; k += (int32_t)blockDim.x) {
        float v = z[k];
        if (cached)
            cache[k] = v;
        if (k < n_data)
            max = v > max ? v : max;
    }
    const float *src = cached ? cache : z;
    max = cuda_block_max(max, (float *)shared);
    double sum = 0.0;
    for (int32_t k = (int32_t)threadIdx.x; k < n_data; k += (int32_t)blockDim.x)
        if (k != i)
            sum += (double)expf(src[k] - max);
    sum = cuda_block_sum(sum, shared);
    double t = (double)a.times[r / a.seq_len];
    float z_i = i >= 0 && i < n_data ? src[i] : 0.0f;
    const dn_row d = dn_prepare(&fp, t, i, (double)max, log(sum), z_i);
    const dn_cols c = dn_columns(&d);
    /* 2. L_cond's statistics of l, as lcond_kernel takes them */
    int32_t mask = d.mask, ref_j = i == 0 ? 1 : 0;
    float ap = 0.0f;
    float ref = link_logit(d, c, src[ref_j], ref_j, &ap);
    softmax_acc acc = {-INFINITY, 0.0f};
    double dev = 0.0;
    for (int32_t j = (int32_t)threadIdx.x; j < S; j += (int32_t)blockDim.x) {
        if (j == i)
            continue;
        float l = link_logit(d, c, src[j], j, &ap);
        acc_add(&acc, l);
        if (j < n_data)
            dev += (double)l - (double)ref;
    }
    __shared__ float sh_max[32], sh_sum[32];
    acc = acc_block(acc, sh_max, sh_sum);
    double dev_data = cuda_block_sum(dev, shared);
    if (threadIdx.x == 0) {
        float h = (float)d.h;   /* rate_h as denoiser_forward stores it */
        lcond_position p = lcond_prepare(&fp, t, i, x0, h);
        int32_t n_counted = i >= 0 && i < n_data ? n_data - 1 : n_data;
        double m = (double)acc.max;
        double prior_dot = fp_prior_data(&fp) * (dev_data + (double)n_counted * ((double)ref - m));
        if (mask >= 0 && mask != i) {
            float l_mask = link_logit(d, c, src[mask], mask, &ap);
            prior_dot += fp_prior_mask(&fp) * ((double)l_mask - m);
        }
        lcond_row_stats stats;
        stats.max_logit = acc.max;
        stats.sum_exp = acc.sum;
        stats.prior_dot = prior_dot;
        float l_x0 = x0 >= 0 && x0 < S && x0 != i ? link_logit(d, c, src[x0], x0, &ap) : 0.0f;
        float scale = a.seq_weight ? a.grad_scale * a.seq_weight[r / a.seq_len] : a.grad_scale;
        if (a.loss)
            a.loss[r] = (float)lcond_value(&p, stats, l_x0);
        if (a.rate_h)
            a.rate_h[r] = h;
        float gh = (float)(lcond_grad_h(&fp, &p) * (double)scale);
        ls.coef = lcond_grad_coefficients(&fp, &p, stats, scale);
        ls.gh_inv = (float)((double)gh * c.inv_lam);
    }
    if (!a.d_x0_logits)
        return;
    __syncthreads();
    const lcond_grad_coef g = ls.coef;
    const float gh_inv = ls.gh_inv;
    /* 3. the link's backward sums over g = dL/dl */
    double sum_u = 0.0, sum_pi_G = 0.0;
    for (int32_t j = (int32_t)threadIdx.x; j < S; j += (int32_t)blockDim.x) {
        if (j == i)
            continue;
        float l = link_logit(d, c, src[j], j, &ap);
        float gj = lcond_grad(g, l, j, S, i, mask, x0);
        if (j < n_data) {
            dn_terms tm = dn_data_terms(&c, ap, gj, gh_inv);
            sum_u += (double)tm.u;
            sum_pi_G += (double)tm.pi_G;
        } else if (j == mask) {
            sum_pi_G += (double)dn_mask_pi_G(&c, gj, gh_inv);
        }
    }
    /* both end with a barrier: every read of z above is done before the
     * writes below */
    sum_u = cuda_block_sum(sum_u, shared);
    sum_pi_G = cuda_block_sum(sum_pi_G, shared);
    double u_i = dn_u_current(&d, sum_pi_G);
    float total = (float)(sum_u + u_i);
    /* 4. dL/dz */
    float *out = a.d_x0_logits + r * a.row_stride;
    for (int32_t k = (int32_t)threadIdx.x; k < a.row_stride; k += (int32_t)blockDim.x) {
        if (k >= n_data) {
            out[k] = 0.0f;
        } else if (k == i) {
            out[k] = (float)dn_dz_current(&d, u_i, sum_u);
        } else {
            float l = link_logit(d, c, src[k], k, &ap);
            float gk = lcond_grad(g, l, k, S, i, mask, x0);
            out[k] = dn_data_terms(&c, ap, gk, gh_inv).u - dn_p_of(&c, ap) * total;
        }
    }
}

/* $NCTMC_CUDA_LCOND_LINK: unset, empty or "default": 1 (declined); "fused":
 * 2; anything else is recorded as an error (and declined). */
static int link_mode_from_env(cuda_backend *cb)
{
    const char *v = getenv("NCTMC_CUDA_LCOND_LINK");
    if (!v || !*v || strcmp(v, "default") == 0)
        return 1;
    if (strcmp(v, "fused") == 0)
        return 2;
    cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT,
              "NCTMC_CUDA_LCOND_LINK=%.40s: expected \"fused\" or \"default\"", v);
    return 1;
}

bool cuda_lcond_denoiser(nctmc_backend *be, const nctmc_lcond_denoiser_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (!cb->lcond_link_mode)
        cb->lcond_link_mode = link_mode_from_env(cb);
    if (cb->lcond_link_mode != 2)
        return false;
    if (args->n_rows <= 0 || !cuda_rows_fit(cb, args->n_rows, "lcond_denoiser"))
        return true;
    size_t bytes = cuda_round64((size_t)args->fp.vocab * sizeof(float));
    if (!cb->link_static_smem) {
        cudaFuncAttributes fa;
        if (!cuda_check(cb, cudaFuncGetAttributes(&fa, lcond_denoiser_kernel),
                        "lcond_denoiser: attributes"))
            return true;
        cb->link_static_smem = fa.sharedSizeBytes + 1;
    }
    bool cached = bytes + cb->link_static_smem <= cb->smem_optin;
    bool vec = args->row_stride % 4 == 0 && (uintptr_t)args->x0_logits % 16 == 0;
    if (cached && bytes > cb->link_smem) {
        if (!cuda_check(cb, cudaFuncSetAttribute(lcond_denoiser_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes),
                        "lcond_denoiser: shared memory"))
            return true;
        cb->link_smem = bytes;
    }
    lcond_denoiser_kernel<<<(unsigned)args->n_rows, LINK_THREADS, cached ? bytes : 0,
                            cb->stream>>>(*args, cached, vec);
    cuda_launched(cb, "lcond_denoiser");
    return true;
}
