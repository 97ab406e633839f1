/*
 * cuda_optim.cu — the optimiser's operations over flat parameter arrays:
 * squared norm, scaling, AdamW and the EMA of the weights.
 *
 * sum_squares is a two-stage reduction in double with a fixed shape: the
 * array is cut into at most SUMSQ_MAX_BLOCKS contiguous pieces whose size
 * depends on n alone; a block sums its piece (threads strided, then the
 * block's butterfly) into a partial, and one block adds the partials in a
 * fixed tree. The rest is elementwise.
 */
#include <math.h>

#include "cuda_internal.cuh"

#define SUMSQ_MAX_BLOCKS 1024
#define SUMSQ_MIN_PIECE 16384
#define SUMSQ_THREADS 256

__global__ void sum_squares_partial_kernel(int64_t n, int64_t piece, const float *__restrict__ x,
                                           double *__restrict__ partial)
{
    __shared__ double sh[32];
    int64_t begin = (int64_t)blockIdx.x * piece;
    int64_t end = begin + piece < n ? begin + piece : n;
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        double v = (double)x[i];
        acc += v * v;
    }
    double t = cuda_block_sum(acc, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = t;
}

__global__ void sum_partials_kernel(int32_t n, const double *__restrict__ partial,
                                    double *__restrict__ out)
{
    __shared__ double sh[32];
    double acc = 0.0;
    for (int32_t i = (int32_t)threadIdx.x; i < n; i += (int32_t)blockDim.x)
        acc += partial[i];
    double t = cuda_block_sum(acc, sh);
    if (threadIdx.x == 0)
        *out = t;
}

double cuda_sum_squares(nctmc_backend *be, int64_t n, const float *x)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return 0.0;
    int64_t piece = (n + SUMSQ_MAX_BLOCKS - 1) / SUMSQ_MAX_BLOCKS;
    piece = piece < SUMSQ_MIN_PIECE ? SUMSQ_MIN_PIECE : piece;
    int32_t n_pieces = (int32_t)((n + piece - 1) / piece);
    double *partial = (double *)cuda_scratch(cb, (size_t)(n_pieces + 1) * sizeof(double));
    if (!partial)
        return NAN;
    sum_squares_partial_kernel<<<(unsigned)n_pieces, SUMSQ_THREADS, 0, cb->stream>>>(n, piece, x,
                                                                                    partial);
    cuda_launched(cb, "sum_squares");
    sum_partials_kernel<<<1, SUMSQ_THREADS, 0, cb->stream>>>(n_pieces, partial,
                                                            partial + n_pieces);
    cuda_launched(cb, "sum_squares: total");
    double total = NAN;
    if (cuda_check(cb,
                   cudaMemcpyAsync(&total, partial + n_pieces, sizeof total,
                                   cudaMemcpyDeviceToHost, cb->stream),
                   "sum_squares: download") &&
        cuda_check(cb, cudaStreamSynchronize(cb->stream), "sum_squares: synchronize"))
        return total;
    return NAN;
}

#define GRID_STRIDE(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void scale_kernel(int64_t n, float *__restrict__ x, float s)
{
    GRID_STRIDE(i, n)
    x[i] *= s;
}

void cuda_scale(nctmc_backend *be, int64_t n, float *x, float s)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    scale_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, x, s);
    cuda_launched(cb, "scale");
}

__global__ void add_kernel(int64_t n, float *__restrict__ y, const float *__restrict__ x)
{
    GRID_STRIDE(i, n)
    y[i] = __fadd_rn(y[i], x[i]);
}

void cuda_add(nctmc_backend *be, int64_t n, float *y, const float *x)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    add_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, y, x);
    cuda_launched(cb, "add");
}

typedef struct adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    float bias1, bias2; /* 1 - beta^step */
} adamw_params;

__global__ void adamw_kernel(int64_t n, float *__restrict__ param, const float *__restrict__ grad,
                             float *__restrict__ m, float *__restrict__ v, adamw_params h)
{
    GRID_STRIDE(i, n)
    {
        float g = grad[i];
        float mj = h.beta1 * m[i] + (1.0f - h.beta1) * g;
        float vj = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
        float p_old = param[i];
        float p_new = p_old - h.lr * (mj / h.bias1) / (sqrtf(vj / h.bias2) + h.eps);
        param[i] = p_new - h.lr * h.weight_decay * p_old;
        m[i] = mj;
        v[i] = vj;
    }
}

void cuda_adamw(nctmc_backend *be, int64_t n, float *param, const float *grad, float *m,
                float *v, float lr, float beta1, float beta2, float eps, float weight_decay,
                int64_t step)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    /* as on the CPU: an earlier step would divide by a zero correction */
    double k = step < 1 ? 1.0 : (double)step;
    adamw_params h = {lr, beta1, beta2, eps, weight_decay,
                      (float)(1.0 - pow((double)beta1, k)), (float)(1.0 - pow((double)beta2, k))};
    adamw_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, param, grad, m,
                                                                                v, h);
    cuda_launched(cb, "adamw");
}

__global__ void ema_kernel(int64_t n, float *__restrict__ ema, const float *__restrict__ param,
                           float decay)
{
    const float keep = 1.0f - decay;
    GRID_STRIDE(i, n)
    ema[i] = decay * ema[i] + keep * param[i];
}

void cuda_ema_update(nctmc_backend *be, int64_t n, float *ema, const float *param, float decay)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    ema_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, ema, param,
                                                                              decay);
    cuda_launched(cb, "ema_update");
}
