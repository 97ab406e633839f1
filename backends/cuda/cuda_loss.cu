/*
 * cuda_loss.cu — the fused L_cond loss and the model's jump outputs, one
 * block per row (position).
 *
 * The row's statistics come from one pass over its S valid logits (the
 * current token and the padding excluded): each thread keeps a running max
 * with the sum of exp(z - max) rescaled when the max grows, and the sum of
 * the data tokens' logits in double against a reference logit of the row;
 * the block combines the threads' pairs (max, sum) and sums with fixed
 * butterflies. The per-position math — conditional rates, the loss value,
 * the gradient coefficients — is lib/math/lcond_math.h and
 * lib/math/forward_process.h, compiled for the device (NCTMC_HD), the same code
 * the CPU backend runs. The gradient pass writes each logit's gradient
 * from that logit alone, so d_logits may be the logits buffer.
 *
 * Memory traffic. The loss reads every logit and the gradient pass reads
 * them again and writes as many gradients: at paper scale (16 x 512 rows
 * of 50304) that is 1.6 GB a pass. Where the row fits in the block's shared
 * memory (S floats; 227 KB on an H100 holds 58k) the first pass keeps it
 * there, so the logits cross the memory bus once. Rows are read and written
 * four floats at a time where the row's start is 16-byte aligned.
 *
 * The split kernel (behind $NCTMC_CUDA_LCOND=split, read at the backend's
 * first lcond call; docs/dev/backend-modules.md). With the whole row cached,
 * one 1024-thread block fills an SM's shared memory, so each SM reads one
 * row, then writes it, with nothing to overlap the two phases. The split
 * kernel gives each row a thread-block cluster of two blocks (compute
 * capability 9.0): each block caches and reduces half of the row (100 KB at
 * S = 50304), the two exchange their partial (max, sum, deviation) through
 * distributed shared memory and merge them in rank order (both get the
 * same bits), and each writes its half's gradients. Two blocks then fit on
 * an SM, one reading while the other writes. The bytes are the minimum for
 * float32 logits: 4 S read and 4 V written per row (3.3 GB at 16 x 512 x
 * 50304: 0.82 ms at 4.0 TB/s, 0.94 ms at 3.5). Elsewhere (older devices, a
 * half-row beyond shared memory) the default kernel runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cooperative_groups.h>

#include "cuda_internal.cuh"
#include "cuda_softmax.cuh"

#define LOSS_THREADS 256
/* The loss kernel: many threads per row, since with the row cached one
 * block fills an SM's shared memory. */
#define LCOND_THREADS 1024
#define LCOND_BATCH 4

/* (max, sum exp) over j < S, j != i of the row; when sum_data is given,
 * also sum over data tokens j != i of (z_j - ref) in double. */
__device__ softmax_acc row_stats(const float *z, int32_t S, int32_t n_data, int32_t i,
                                 float ref, double *sum_data)
{
    __shared__ float sh_max[32], sh_sum[32];
    __shared__ double sh_dev[32];
    softmax_acc a = {-INFINITY, 0.0f};
    double dev = 0.0;
    for (int32_t j = (int32_t)threadIdx.x; j < S; j += (int32_t)blockDim.x) {
        if (j == i)
            continue;
        float v = z[j];
        acc_add(&a, v);
        if (j < n_data)
            dev += (double)v - (double)ref;
    }
    a = acc_block(a, sh_max, sh_sum);
    if (sum_data)
        *sum_data = cuda_block_sum(dev, sh_dev);
    return a;
}

/* One logit into the row's statistics. */
__device__ __forceinline__ void lcond_take(softmax_acc *acc, double *dev, float v, int32_t j,
                                           int32_t i, int32_t n_data, float ref)
{
    if (j == i)
        return;
    acc_add(acc, v);
    if (j < n_data)
        *dev += (double)v - (double)ref;
}

/* (max, sum exp) and the data tokens' deviation sum of the row, copying
 * the row into `cache` when given. Four logits a load when `vec`. */
__device__ softmax_acc lcond_pass_stats(const float *z, float *cache, bool vec, int32_t S,
                                       int32_t n_data, int32_t i, float ref, double *sum_data)
{
    __shared__ float sh_max[32], sh_sum[32];
    __shared__ double sh_dev[32];
    softmax_acc a = {-INFINITY, 0.0f};
    double dev = 0.0;
    int32_t head = 0;
    if (vec) {
        /* LCOND_BATCH loads in flight per thread before any is used: with
         * one block per SM (the cached row fills its shared memory) the
         * loads of one thread are what keeps the memory bus busy */
        const float4 *z4 = (const float4 *)z;
        int32_t n4 = S / 4, step = (int32_t)blockDim.x;
        head = n4 * 4;
        for (int32_t q0 = (int32_t)threadIdx.x; q0 < n4; q0 += LCOND_BATCH * step) {
            float4 v[LCOND_BATCH];
#pragma unroll
            for (int b = 0; b < LCOND_BATCH; b++)
                if (q0 + b * step < n4)
                    v[b] = z4[q0 + b * step];
#pragma unroll
            for (int b = 0; b < LCOND_BATCH; b++) {
                int32_t q = q0 + b * step;
                if (q >= n4)
                    break;
                if (cache)
                    ((float4 *)cache)[q] = v[b];
                lcond_take(&a, &dev, v[b].x, 4 * q, i, n_data, ref);
                lcond_take(&a, &dev, v[b].y, 4 * q + 1, i, n_data, ref);
                lcond_take(&a, &dev, v[b].z, 4 * q + 2, i, n_data, ref);
                lcond_take(&a, &dev, v[b].w, 4 * q + 3, i, n_data, ref);
            }
        }
    }
    for (int32_t j = head + (int32_t)threadIdx.x; j < S; j += (int32_t)blockDim.x) {
        float v = z[j];
        if (cache)
            cache[j] = v;
        lcond_take(&a, &dev, v, j, i, n_data, ref);
    }
    a = acc_block(a, sh_max, sh_sum);
    *sum_data = cuda_block_sum(dev, sh_dev);
    return a;
}

/* vec: the row's logits and gradients are 16-byte aligned (row_stride a
 * multiple of 4, buffers aligned); cached: the row is kept in dynamic
 * shared memory between the passes. */
__global__ void __launch_bounds__(LCOND_THREADS) lcond_kernel(nctmc_lcond_args a, bool vec,
                                                              bool cached)
{
    extern __shared__ float4 row_cache4[];
    __shared__ lcond_grad_coef coef;
    float *cache = cached ? (float *)row_cache4 : NULL;
    int64_t r = blockIdx.x;
    const nctmc_fp fp = a.fp;
    const float *z = a.logits + r * a.row_stride;
    int32_t i = a.x_t[r], x0 = a.x_0[r];
    int32_t S = fp.vocab, mask = fp_mask(&fp), n_data = fp_n_data(&fp);
    /* any logit the row really has serves as the reference */
    float ref = z[i == 0 ? 1 : 0];
    double dev_data = 0.0;
    softmax_acc st = lcond_pass_stats(z, cache, vec, S, n_data, i, ref, &dev_data);
    if (threadIdx.x == 0) {
        double t = (double)a.times[r / a.seq_len];
        float h = a.rate_h ? a.rate_h[r] : 0.0f;
        lcond_position p = lcond_prepare(&fp, t, i, x0, h);
        int32_t n_counted = i >= 0 && i < n_data ? n_data - 1 : n_data;
        double max = (double)st.max;
        double prior_dot = fp_prior_data(&fp) * (dev_data + (double)n_counted * ((double)ref - max));
        if (mask >= 0 && mask != i)
            prior_dot += fp_prior_mask(&fp) * ((double)z[mask] - max);
        lcond_row_stats stats;
        stats.max_logit = st.max;
        stats.sum_exp = st.sum;
        stats.prior_dot = prior_dot;
        float z_x0 = x0 >= 0 && x0 < S ? z[x0] : 0.0f;
        /* the product rounded to float, as on the CPU */
        float scale = a.seq_weight ? a.grad_scale * a.seq_weight[r / a.seq_len] : a.grad_scale;
        if (a.loss)
            a.loss[r] = (float)lcond_value(&p, stats, z_x0);
        if (a.d_rate_h)
            a.d_rate_h[r] = (float)(lcond_grad_h(&fp, &p) * (double)scale);
        if (a.d_logits)
            coef = lcond_grad_coefficients(&fp, &p, stats, scale);
    }
    if (!a.d_logits)
        return;
    /* every read of the row above happens before any write below (the
     * gradients may overwrite the logits) */
    __syncthreads();
    lcond_grad_coef g = coef;
    const float *src = cache ? cache : z;
    float *d = a.d_logits + r * a.row_stride;
    int32_t head = 0;
    if (vec) {
        head = a.row_stride / 4 * 4;
        for (int32_t q = (int32_t)threadIdx.x; q < a.row_stride / 4; q += (int32_t)blockDim.x) {
            int32_t j = 4 * q;
            /* the padding (j >= S) is neither read nor cached */
            float4 v = j + 3 < S ? ((const float4 *)src)[q] : make_float4(0.f, 0.f, 0.f, 0.f);
            if (j + 3 >= S) {
                v.x = j < S ? src[j] : 0.0f;
                v.y = j + 1 < S ? src[j + 1] : 0.0f;
                v.z = j + 2 < S ? src[j + 2] : 0.0f;
            }
            float4 o;
            o.x = lcond_grad(g, v.x, j, S, i, mask, x0);
            o.y = lcond_grad(g, v.y, j + 1, S, i, mask, x0);
            o.z = lcond_grad(g, v.z, j + 2, S, i, mask, x0);
            o.w = lcond_grad(g, v.w, j + 3, S, i, mask, x0);
            ((float4 *)d)[q] = o;
        }
    }
    for (int32_t j = head + (int32_t)threadIdx.x; j < a.row_stride; j += (int32_t)blockDim.x)
        d[j] = lcond_grad(g, j < S ? src[j] : 0.0f, j, S, i, mask, x0);
}

/* The split kernel's blocks per row (a cluster) and threads per block. */
#define LSPLIT_CTAS 2
#define LSPLIT_THREADS 512

/* A block's statistics of its part of the row. */
typedef struct lsplit_partial {
    float max;
    float sum;
    double dev;
} lsplit_partial;

/* The gradients of columns [lo, end) of the row from the block's cache of
 * columns [lo, S) (those below `end`); 0 in the padding. */
__device__ void lsplit_write(const lcond_grad_coef &g, const float *cache, float *d, bool vec,
                             int32_t lo, int32_t end, int32_t S, int32_t i, int32_t mask,
                             int32_t x0)
{
    int32_t head = lo;
    if (vec) {
        /* lo and end are multiples of 4 here */
        head = end;
        for (int32_t q = lo / 4 + (int32_t)threadIdx.x; q < end / 4; q += (int32_t)blockDim.x) {
            int32_t j = 4 * q;
            const float *c = cache + (j - lo);
            float4 v = j + 3 < S ? *(const float4 *)c : make_float4(0.f, 0.f, 0.f, 0.f);
            if (j + 3 >= S) {
                v.x = j < S ? c[0] : 0.0f;
                v.y = j + 1 < S ? c[1] : 0.0f;
                v.z = j + 2 < S ? c[2] : 0.0f;
            }
            float4 o;
            o.x = lcond_grad(g, v.x, j, S, i, mask, x0);
            o.y = lcond_grad(g, v.y, j + 1, S, i, mask, x0);
            o.z = lcond_grad(g, v.z, j + 2, S, i, mask, x0);
            o.w = lcond_grad(g, v.w, j + 3, S, i, mask, x0);
            ((float4 *)d)[q] = o;
        }
    }
    for (int32_t j = head + (int32_t)threadIdx.x; j < end; j += (int32_t)blockDim.x)
        d[j] = lcond_grad(g, j < S ? cache[j - lo] : 0.0f, j, S, i, mask, x0);
}

/* One row per cluster of LSPLIT_CTAS blocks; block `rank` owns columns
 * [rank part, (rank + 1) part) (the last one up to row_stride), part a
 * multiple of 4. vec as for lcond_kernel. */
__global__ void __launch_bounds__(LSPLIT_THREADS, 2) lcond_split_kernel(nctmc_lcond_args a,
                                                                        bool vec, int32_t part)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    extern __shared__ float4 split_cache4[];
    __shared__ lcond_grad_coef coef;
    __shared__ lsplit_partial mine;
    float *cache = (float *)split_cache4;
    cg::cluster_group cluster = cg::this_cluster();
    int32_t rank = (int32_t)cluster.block_rank();
    int64_t r = blockIdx.x / LSPLIT_CTAS;
    const nctmc_fp fp = a.fp;
    const float *z = a.logits + r * a.row_stride;
    int32_t i = a.x_t[r], x0 = a.x_0[r];
    int32_t S = fp.vocab, mask = fp_mask(&fp), n_data = fp_n_data(&fp);
    float ref = z[i == 0 ? 1 : 0];
    int32_t lo = min(rank * part, a.row_stride);
    int32_t n = max(min(S - lo, part), 0);
    /* the scalars are read before the first cluster barrier: the other
     * block writes gradients (maybe over the logits) only after the second */
    float z_mask = 0.0f, z_x0 = 0.0f;   /* thread 0's */
    if (threadIdx.x == 0) {
        z_mask = mask >= 0 && mask != i ? z[mask] : 0.0f;
        z_x0 = x0 >= 0 && x0 < S ? z[x0] : 0.0f;
    }
    double dev = 0.0;
    /* the part's columns renumbered from lo: the comparisons with i and
     * n_data shift with them */
    softmax_acc st = lcond_pass_stats(z + lo, cache, vec, n, n_data - lo, i - lo, ref, &dev);
    if (threadIdx.x == 0) {
        mine.max = st.max;
        mine.sum = st.sum;
        mine.dev = dev;
    }
    cluster.sync();
    lsplit_partial p[LSPLIT_CTAS] = {};
    if (threadIdx.x == 0)
        for (int k = 0; k < LSPLIT_CTAS; k++)
            p[k] = *cluster.map_shared_rank(&mine, k);
    /* no block leaves (its shared memory with it) before both are read */
    cluster.sync();
    if (threadIdx.x == 0) {
        /* merged in rank order: the same bits in both blocks */
        softmax_acc all = {p[0].max, p[0].sum};
        double dev_data = p[0].dev;
        for (int k = 1; k < LSPLIT_CTAS; k++) {
            softmax_acc b = {p[k].max, p[k].sum};
            all = acc_merge(all, b);
            dev_data += p[k].dev;
        }
        double t = (double)a.times[r / a.seq_len];
        float h = a.rate_h ? a.rate_h[r] : 0.0f;
        lcond_position pos = lcond_prepare(&fp, t, i, x0, h);
        int32_t n_counted = i >= 0 && i < n_data ? n_data - 1 : n_data;
        double max = (double)all.max;
        double prior_dot = fp_prior_data(&fp) * (dev_data + (double)n_counted * ((double)ref - max));
        if (mask >= 0 && mask != i)
            prior_dot += fp_prior_mask(&fp) * ((double)z_mask - max);
        lcond_row_stats stats;
        stats.max_logit = all.max;
        stats.sum_exp = all.sum;
        stats.prior_dot = prior_dot;
        float scale = a.seq_weight ? a.grad_scale * a.seq_weight[r / a.seq_len] : a.grad_scale;
        if (rank == 0 && a.loss)
            a.loss[r] = (float)lcond_value(&pos, stats, z_x0);
        if (rank == 0 && a.d_rate_h)
            a.d_rate_h[r] = (float)(lcond_grad_h(&fp, &pos) * (double)scale);
        if (a.d_logits)
            coef = lcond_grad_coefficients(&fp, &pos, stats, scale);
    }
    if (!a.d_logits)
        return;
    __syncthreads();
    int32_t end = rank == LSPLIT_CTAS - 1 ? a.row_stride : min(lo + part, a.row_stride);
    lsplit_write(coef, cache, a.d_logits + r * a.row_stride, vec, lo, end, S, i, mask, x0);
#endif
}

__global__ void jump_output_kernel(nctmc_jump_output_args a)
{
    int64_t r = blockIdx.x;
    const nctmc_fp fp = a.fp;
    int32_t i = a.x_t[r], S = fp.vocab;
    if (a.log_rate && threadIdx.x == 0) {
        double t = (double)a.times[r / a.seq_len];
        float h = a.rate_h ? a.rate_h[r] : 0.0f;
        a.log_rate[r] = (float)fp_model_log_rate(&fp, t, i, h);
    }
    if (!a.jump_logprobs)
        return;
    const float *z = a.logits + r * a.row_stride;
    softmax_acc st = row_stats(z, S, fp_n_data(&fp), i, 0.0f, NULL);
    double lse = (double)st.max + log((double)st.sum);
    float *out = a.jump_logprobs + r * S;
    for (int32_t j = (int32_t)threadIdx.x; j < S; j += (int32_t)blockDim.x)
        out[j] = j == i ? -INFINITY : (float)((double)z[j] - lse);
}

/* $NCTMC_CUDA_LCOND: unset, empty or "default": 1; "split": 2; anything
 * else is recorded as an error (0: nothing runs). */
static int lcond_mode_from_env(cuda_backend *cb)
{
    const char *v = getenv("NCTMC_CUDA_LCOND");
    if (!v || !*v || strcmp(v, "default") == 0)
        return 1;
    if (strcmp(v, "split") == 0)
        return 2;
    cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT,
              "NCTMC_CUDA_LCOND=%.40s: expected \"split\" or \"default\"", v);
    return 0;
}

/* Launches the split kernel; false (nothing launched, nothing recorded)
 * where it cannot run: compute capability below 9.0, or half a row beyond
 * shared memory. */
static bool lcond_split(cuda_backend *cb, const nctmc_lcond_args *args, bool vec)
{
    if (cb->cc_major < 9 || args->n_rows > 0x7fffffff / LSPLIT_CTAS)
        return false;
    int32_t S = args->fp.vocab;
    int32_t part = ((S + LSPLIT_CTAS - 1) / LSPLIT_CTAS + 3) / 4 * 4;
    size_t bytes = cuda_round64((size_t)part * sizeof(float));
    if (!cb->lcond_split_static) {
        cudaFuncAttributes fa;
        if (!cuda_check(cb, cudaFuncGetAttributes(&fa, lcond_split_kernel),
                        "lcond split: attributes"))
            return true;
        cb->lcond_split_static = fa.sharedSizeBytes + 1;
    }
    if (bytes + cb->lcond_split_static > cb->smem_optin)
        return false;
    if (bytes > cb->lcond_split_smem) {
        if (!cuda_check(cb, cudaFuncSetAttribute(lcond_split_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes),
                        "lcond split: shared memory"))
            return true;
        cb->lcond_split_smem = bytes;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(args->n_rows * LSPLIT_CTAS), 1, 1);
    cfg.blockDim = dim3(LSPLIT_THREADS, 1, 1);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = cb->stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = LSPLIT_CTAS;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cuda_check(cb, cudaLaunchKernelEx(&cfg, lcond_split_kernel, *args, vec, part), "lcond split");
    return true;
}

void cuda_lcond(nctmc_backend *be, const nctmc_lcond_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (!cb->lcond_mode)
        cb->lcond_mode = lcond_mode_from_env(cb);
    if (args->n_rows <= 0 || !cuda_rows_fit(cb, args->n_rows, "lcond") || !cb->lcond_mode)
        return;
    uintptr_t bases = (uintptr_t)args->logits | (uintptr_t)args->d_logits;
    bool vec = args->row_stride % 4 == 0 && bases % 16 == 0;
    if (cb->lcond_mode == 2 && lcond_split(cb, args, vec))
        return;
    size_t bytes = cuda_round64((size_t)args->fp.vocab * sizeof(float));
    if (!cb->lcond_static_smem) {
        cudaFuncAttributes fa;
        if (!cuda_check(cb, cudaFuncGetAttributes(&fa, lcond_kernel), "lcond: attributes"))
            return;
        cb->lcond_static_smem = fa.sharedSizeBytes + 1; /* + 1: known, even when 0 */
    }
    bool cached = bytes + cb->lcond_static_smem <= cb->smem_optin;
    if (cached && bytes > cb->lcond_smem) {
        if (!cuda_check(cb, cudaFuncSetAttribute(lcond_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes),
                        "lcond: shared memory"))
            return;
        cb->lcond_smem = bytes;
    }
    lcond_kernel<<<(unsigned)args->n_rows, LCOND_THREADS, cached ? bytes : 0, cb->stream>>>(
        *args, vec, cached);
    cuda_launched(cb, "lcond");
}

void cuda_jump_output(nctmc_backend *be, const nctmc_jump_output_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (args->n_rows <= 0 || !cuda_rows_fit(cb, args->n_rows, "jump_output"))
        return;
    jump_output_kernel<<<(unsigned)args->n_rows, LOSS_THREADS, 0, cb->stream>>>(*args);
    cuda_launched(cb, "jump_output");
}
