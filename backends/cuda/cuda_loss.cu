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
 *
 * bf16 logits (nctmc_lcond_args.logits_bf16; the training loss sets it
 * under $NCTMC_CUDA_BF16_LOGITS=1, docs/dev/backend-modules.md). Both
 * kernels are templates on the logits' element: with bfloat16 they read
 * the row eight values a 16-byte load, widen each to float (exact) for the
 * same float32 statistics, cache 2 S bytes a row (half the shared memory)
 * and write the gradients in bfloat16 (rounded to nearest) in place: 2 S
 * read + 2 V written, 201,216 bytes a row at S = V = 50304 (1.65 GB at
 * 16 x 512 rows: 0.41 ms at 4.0 TB/s). bfloat16 gradients because the
 * output projection's backward (cuda_linear.cu) multiplies bfloat16
 * operands anyway; float32 gradients could not be written in place over
 * bfloat16 logits (row r's gradient would cover rows 2r and 2r + 1, which
 * other blocks still read).
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

/* The logits' element: float32, or bfloat16 (nctmc_lcond_args.logits_bf16,
 * NCTMC_CUDA_BF16_LOGITS). Rows move 16 bytes a load: 4 floats or 8
 * bfloat16 values. */
template <typename T> struct alignas(16) lvec {
    T v[16 / sizeof(T)];
};
__device__ __forceinline__ float lval(float v)
{
    return v;
}
__device__ __forceinline__ float lval(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T lstore(float v);
template <> __device__ __forceinline__ float lstore<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 lstore<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

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
 * the row into `cache` when given. 16 bytes a load when `vec`. */
template <typename T>
__device__ softmax_acc lcond_pass_stats(const T *z, T *cache, bool vec, int32_t S,
                                       int32_t n_data, int32_t i, float ref, double *sum_data)
{
    constexpr int32_t W = 16 / sizeof(T);
    __shared__ float sh_max[32], sh_sum[32];
    __shared__ double sh_dev[32];
    softmax_acc a = {-INFINITY, 0.0f};
    double dev = 0.0;
    int32_t head = 0;
    if (vec) {
        /* LCOND_BATCH loads in flight per thread before any is used: with
         * one block per SM (the cached row fills its shared memory) the
         * loads of one thread are what keeps the memory bus busy */
        const lvec<T> *z4 = (const lvec<T> *)z;
        int32_t n4 = S / W, step = (int32_t)blockDim.x;
        head = n4 * W;
        for (int32_t q0 = (int32_t)threadIdx.x; q0 < n4; q0 += LCOND_BATCH * step) {
            lvec<T> v[LCOND_BATCH];
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
                    ((lvec<T> *)cache)[q] = v[b];
#pragma unroll
                for (int32_t e = 0; e < W; e++)
                    lcond_take(&a, &dev, lval(v[b].v[e]), W * q + e, i, n_data, ref);
            }
        }
    }
    for (int32_t j = head + (int32_t)threadIdx.x; j < S; j += (int32_t)blockDim.x) {
        T v = z[j];
        if (cache)
            cache[j] = v;
        lcond_take(&a, &dev, lval(v), j, i, n_data, ref);
    }
    a = acc_block(a, sh_max, sh_sum);
    *sum_data = cuda_block_sum(dev, sh_dev);
    return a;
}

/* The gradients of columns [lo, end) of the row from `src`, the row's
 * columns [lo, S) (those below `end`), into the row d; 0 in the padding.
 * With vec, lo and end are multiples of 16 / sizeof(T) and both rows
 * 16-byte aligned. */
template <typename T>
__device__ void lcond_write(const lcond_grad_coef &g, const T *src, T *d, bool vec, int32_t lo,
                            int32_t end, int32_t S, int32_t i, int32_t mask, int32_t x0)
{
    constexpr int32_t W = 16 / sizeof(T);
    int32_t head = lo;
    if (vec) {
        head = end;
        for (int32_t q = lo / W + (int32_t)threadIdx.x; q < end / W; q += (int32_t)blockDim.x) {
            int32_t j = W * q;
            const T *c = src + (j - lo);
            lvec<T> v, o;
            if (j + W - 1 < S) {
                v = *(const lvec<T> *)c;
            } else {
#pragma unroll
                for (int32_t e = 0; e < W; e++)
                    v.v[e] = j + e < S ? c[e] : lstore<T>(0.0f);
            }
#pragma unroll
            for (int32_t e = 0; e < W; e++)
                o.v[e] = lstore<T>(lcond_grad(g, lval(v.v[e]), j + e, S, i, mask, x0));
            ((lvec<T> *)d)[q] = o;
        }
    }
    for (int32_t j = head + (int32_t)threadIdx.x; j < end; j += (int32_t)blockDim.x)
        d[j] = lstore<T>(lcond_grad(g, j < S ? lval(src[j - lo]) : 0.0f, j, S, i, mask, x0));
}

/* vec: the row's logits and gradients are 16-byte aligned (row_stride a
 * multiple of 16 / sizeof(T), buffers aligned); cached: the row is kept in
 * dynamic shared memory between the passes. */
template <typename T>
__global__ void __launch_bounds__(LCOND_THREADS) lcond_kernel(nctmc_lcond_args a, bool vec,
                                                              bool cached)
{
    extern __shared__ float4 row_cache4[];
    __shared__ lcond_grad_coef coef;
    T *cache = cached ? (T *)row_cache4 : NULL;
    int64_t r = blockIdx.x;
    const nctmc_fp fp = a.fp;
    const T *z = (const T *)a.logits + r * a.row_stride;
    int32_t i = a.x_t[r], x0 = a.x_0[r];
    int32_t S = fp.vocab, mask = fp_mask(&fp), n_data = fp_n_data(&fp);
    /* any logit the row really has serves as the reference */
    float ref = lval(z[i == 0 ? 1 : 0]);
    double dev_data = 0.0;
    softmax_acc st = lcond_pass_stats<T>(z, cache, vec, S, n_data, i, ref, &dev_data);
    if (threadIdx.x == 0) {
        double t = (double)a.times[r / a.seq_len];
        float h = a.rate_h ? a.rate_h[r] : 0.0f;
        lcond_position p = lcond_prepare(&fp, t, i, x0, h);
        int32_t n_counted = i >= 0 && i < n_data ? n_data - 1 : n_data;
        double max = (double)st.max;
        double prior_dot = fp_prior_data(&fp) * (dev_data + (double)n_counted * ((double)ref - max));
        if (mask >= 0 && mask != i)
            prior_dot += fp_prior_mask(&fp) * ((double)lval(z[mask]) - max);
        lcond_row_stats stats;
        stats.max_logit = st.max;
        stats.sum_exp = st.sum;
        stats.prior_dot = prior_dot;
        float z_x0 = x0 >= 0 && x0 < S ? lval(z[x0]) : 0.0f;
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
    lcond_write<T>(g, cache ? cache : z, (T *)a.d_logits + r * a.row_stride, vec, 0,
                   a.row_stride, S, i, mask, x0);
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

/* One row per cluster of LSPLIT_CTAS blocks; block `rank` owns columns
 * [rank part, (rank + 1) part) (the last one up to row_stride), part a
 * multiple of 16 / sizeof(T). vec as for lcond_kernel. */
template <typename T>
__global__ void __launch_bounds__(LSPLIT_THREADS, 2) lcond_split_kernel(nctmc_lcond_args a,
                                                                        bool vec, int32_t part)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    extern __shared__ float4 split_cache4[];
    __shared__ lcond_grad_coef coef;
    __shared__ lsplit_partial mine;
    T *cache = (T *)split_cache4;
    cg::cluster_group cluster = cg::this_cluster();
    int32_t rank = (int32_t)cluster.block_rank();
    int64_t r = blockIdx.x / LSPLIT_CTAS;
    const nctmc_fp fp = a.fp;
    const T *z = (const T *)a.logits + r * a.row_stride;
    int32_t i = a.x_t[r], x0 = a.x_0[r];
    int32_t S = fp.vocab, mask = fp_mask(&fp), n_data = fp_n_data(&fp);
    float ref = lval(z[i == 0 ? 1 : 0]);
    int32_t lo = min(rank * part, a.row_stride);
    int32_t n = max(min(S - lo, part), 0);
    /* the scalars are read before the first cluster barrier: the other
     * block writes gradients (maybe over the logits) only after the second */
    float z_mask = 0.0f, z_x0 = 0.0f;   /* thread 0's */
    if (threadIdx.x == 0) {
        z_mask = mask >= 0 && mask != i ? lval(z[mask]) : 0.0f;
        z_x0 = x0 >= 0 && x0 < S ? lval(z[x0]) : 0.0f;
    }
    double dev = 0.0;
    /* the part's columns renumbered from lo: the comparisons with i and
     * n_data shift with them */
    softmax_acc st = lcond_pass_stats<T>(z + lo, cache, vec, n, n_data - lo, i - lo, ref, &dev);
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
    lcond_write<T>(coef, cache, (T *)a.d_logits + r * a.row_stride, vec, lo, end, S, i, mask,
                   x0);
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

/* What lcond_kernel<T> and lcond_split_kernel<T> have been given: the
 * dynamic shared memory each may use, and their static shared memory + 1
 * (0 until asked). */
typedef struct lcond_smem {
    size_t *dyn, *stat, *split_dyn, *split_stat;
} lcond_smem;

static lcond_smem lcond_smem_of(cuda_backend *cb, bool bf16)
{
    lcond_smem m;
    m.dyn = bf16 ? &cb->lcond16_smem : &cb->lcond_smem;
    m.stat = bf16 ? &cb->lcond16_static_smem : &cb->lcond_static_smem;
    m.split_dyn = bf16 ? &cb->lcond16_split_smem : &cb->lcond_split_smem;
    m.split_stat = bf16 ? &cb->lcond16_split_static : &cb->lcond_split_static;
    return m;
}

/* Launches the split kernel; false (nothing launched, nothing recorded)
 * where it cannot run: compute capability below 9.0, or half a row beyond
 * shared memory. */
template <typename T>
static bool lcond_split(cuda_backend *cb, const nctmc_lcond_args *args, bool vec, lcond_smem sm)
{
    if (cb->cc_major < 9 || args->n_rows > 0x7fffffff / LSPLIT_CTAS)
        return false;
    const int32_t W = 16 / (int32_t)sizeof(T);
    int32_t S = args->fp.vocab;
    int32_t part = ((S + LSPLIT_CTAS - 1) / LSPLIT_CTAS + W - 1) / W * W;
    size_t bytes = cuda_round64((size_t)part * sizeof(T));
    if (!*sm.split_stat) {
        cudaFuncAttributes fa;
        if (!cuda_check(cb, cudaFuncGetAttributes(&fa, lcond_split_kernel<T>),
                        "lcond split: attributes"))
            return true;
        *sm.split_stat = fa.sharedSizeBytes + 1;
    }
    if (bytes + *sm.split_stat > cb->smem_optin)
        return false;
    if (bytes > *sm.split_dyn) {
        if (!cuda_check(cb, cudaFuncSetAttribute(lcond_split_kernel<T>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes),
                        "lcond split: shared memory"))
            return true;
        *sm.split_dyn = bytes;
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
    cuda_check(cb, cudaLaunchKernelEx(&cfg, lcond_split_kernel<T>, *args, vec, part),
               "lcond split");
    return true;
}

/* The split kernel where asked for and possible, else the default one. */
template <typename T> static void lcond_launch(cuda_backend *cb, const nctmc_lcond_args *args)
{
    lcond_smem sm = lcond_smem_of(cb, sizeof(T) == 2);
    uintptr_t bases = (uintptr_t)args->logits | (uintptr_t)args->d_logits;
    bool vec = args->row_stride % (int32_t)(16 / sizeof(T)) == 0 && bases % 16 == 0;
    if (cb->lcond_mode == 2 && lcond_split<T>(cb, args, vec, sm))
        return;
    size_t bytes = cuda_round64((size_t)args->fp.vocab * sizeof(T));
    if (!*sm.stat) {
        cudaFuncAttributes fa;
        if (!cuda_check(cb, cudaFuncGetAttributes(&fa, lcond_kernel<T>), "lcond: attributes"))
            return;
        *sm.stat = fa.sharedSizeBytes + 1; /* + 1: known, even when 0 */
    }
    bool cached = bytes + *sm.stat <= cb->smem_optin;
    if (cached && bytes > *sm.dyn) {
        if (!cuda_check(cb, cudaFuncSetAttribute(lcond_kernel<T>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes),
                        "lcond: shared memory"))
            return;
        *sm.dyn = bytes;
    }
    lcond_kernel<T><<<(unsigned)args->n_rows, LCOND_THREADS, cached ? bytes : 0, cb->stream>>>(
        *args, vec, cached);
    cuda_launched(cb, "lcond");
}

void cuda_lcond(nctmc_backend *be, const nctmc_lcond_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (!cb->lcond_mode)
        cb->lcond_mode = lcond_mode_from_env(cb);
    if (args->n_rows <= 0 || !cuda_rows_fit(cb, args->n_rows, "lcond") || !cb->lcond_mode)
        return;
    if (args->logits_bf16)
        lcond_launch<__nv_bfloat16>(cb, args);
    else
        lcond_launch<float>(cb, args);
}

void cuda_jump_output(nctmc_backend *be, const nctmc_jump_output_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (args->n_rows <= 0 || !cuda_rows_fit(cb, args->n_rows, "jump_output"))
        return;
    jump_output_kernel<<<(unsigned)args->n_rows, LOSS_THREADS, 0, cb->stream>>>(*args);
    cuda_launched(cb, "jump_output");
}
