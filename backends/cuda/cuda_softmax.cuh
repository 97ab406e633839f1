/*
 * cuda_softmax.cuh — the row statistics of the L_cond kernels
 * (cuda_loss.cu, cuda_denoiser.cu): a running (max, sum of exp(z - max))
 * with its deterministic block combination, and one logit's L_cond
 * gradient from the row's coefficients (lib/math/lcond_math.h).
 */
#ifndef NCTMC_CUDA_SOFTMAX_CUH
#define NCTMC_CUDA_SOFTMAX_CUH

#include <math.h>

#include "cuda_internal.cuh"
#include "math/lcond_math.h"

/* The running (max, sum of exp(z - max)) of a set of logits. */
typedef struct softmax_acc {
    float max;
    float sum;
} softmax_acc;

static __device__ __forceinline__ void acc_add(softmax_acc *a, float v)
{
    if (v > a->max) {
        a->sum = (a->max == -INFINITY ? 0.0f : a->sum * expf(a->max - v)) + 1.0f;
        a->max = v;
    } else if (v != -INFINITY) {
        a->sum += expf(v - a->max);
    }
}

/* Commutative: swapping a and b gives the same bits, so both lanes of a
 * butterfly step hold equal values afterwards. */
static __device__ __forceinline__ softmax_acc acc_merge(softmax_acc a, softmax_acc b)
{
    float m = a.max > b.max ? a.max : b.max;
    softmax_acc r;
    r.max = m;
    float sa = a.max == -INFINITY ? 0.0f : a.sum * expf(a.max - m);
    float sb = b.max == -INFINITY ? 0.0f : b.sum * expf(b.max - m);
    r.sum = sa + sb;
    return r;
}

static __device__ softmax_acc acc_block(softmax_acc a, float *sh_max, float *sh_sum)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        softmax_acc b;
        b.max = __shfl_xor_sync(0xffffffffu, a.max, o);
        b.sum = __shfl_xor_sync(0xffffffffu, a.sum, o);
        a = acc_merge(a, b);
    }
    __syncthreads();
    if (lane == 0) {
        sh_max[warp] = a.max;
        sh_sum[warp] = a.sum;
    }
    __syncthreads();
    softmax_acc t;
    t.max = lane < n_warps ? sh_max[lane] : -INFINITY;
    t.sum = lane < n_warps ? sh_sum[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        softmax_acc b;
        b.max = __shfl_xor_sync(0xffffffffu, t.max, o);
        b.sum = __shfl_xor_sync(0xffffffffu, t.sum, o);
        t = acc_merge(t, b);
    }
    return t;
}

/* grad_scale * d l / d z_j from the row's coefficients (0 at i and in the
 * padding). */
static __device__ __forceinline__ float lcond_grad(const lcond_grad_coef &g, float z,
                                                   int32_t j, int32_t S, int32_t i,
                                                   int32_t mask, int32_t x0)
{
    if (j >= S || j == i)
        return 0.0f;
    float v = g.scale * expf(z - g.lse) - (j == mask ? g.sub_mask : g.sub_data);
    return j == x0 ? v - g.sub_x0 : v;
}

#endif /* NCTMC_CUDA_SOFTMAX_CUH */
