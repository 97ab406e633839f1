/*
 * cuda_pointwise.cu — elementwise and nearly elementwise operations: the
 * timestep features, SiLU and tanh-GELU, the gated residual, and rotary.
 *
 * Elementwise kernels use grid-stride loops (each element's value does not
 * depend on which thread computes it, so the grid is free). The gated
 * residual's gate gradient is a column sum over each sequence's rows: a
 * block owns 32 columns of one sequence and sums its rows in
 * RES_LANES interleaved lanes that are combined in lane order.
 * Transcendentals are CUDA's correctly-rounded-within-an-ulp expf / tanhf
 * (no fast-math), and the timestep and rotary angles are evaluated in
 * double and rounded once, as the CPU backend does.
 */
#include <math.h>

#include "cuda_internal.cuh"

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f
#define RES_LANES 8

#define GRID_STRIDE(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- timestep features -------------------------------------------------- */

__global__ void timestep_kernel(int32_t batch, int32_t dim, const float *__restrict__ times,
                                float *__restrict__ out)
{
    int32_t half = dim / 2;
    GRID_STRIDE(i, (int64_t)batch * dim)
    {
        int64_t b = i / dim;
        int32_t k = (int32_t)(i % dim);
        float v = 0.0f;
        if (k < 2 * half) {
            int32_t f = k < half ? k : k - half;
            double angle = (double)times[b] * exp(-log(10000.0) * (double)f / (double)half);
            v = k < half ? (float)cos(angle) : (float)sin(angle);
        }
        out[i] = v;
    }
}

void cuda_timestep_embedding(nctmc_backend *be, int32_t batch, int32_t dim, const float *times,
                             float *out)
{
    cuda_backend *cb = cuda_of(be);
    int64_t n = (int64_t)batch * dim;
    if (n <= 0)
        return;
    timestep_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(batch, dim,
                                                                                   times, out);
    cuda_launched(cb, "timestep_embedding");
}

/* ---- SiLU and GELU ----------------------------------------------------- */

__device__ __forceinline__ float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* y may equal x: each element is read before it is written, by one thread */
__global__ void silu_kernel(int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = v * sigmoid(v);
    }
}

__global__ void silu_grad_kernel(int64_t n, const float *x, const float *dy, float *dx,
                                 bool accumulate)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], s = sigmoid(v);
        float g = dy[i] * (s * (1.0f + v * (1.0f - s)));
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

__device__ __forceinline__ float gelu_tanh(float v)
{
    return tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
}

__global__ void gelu_kernel(int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + gelu_tanh(v));
    }
}

__global__ void gelu_grad_kernel(int64_t n, const float *x, const float *dy, float *dx)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], t = gelu_tanh(v);
        float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
        float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        dx[i] = dy[i] * d;
    }
}

void cuda_silu_forward(nctmc_backend *be, int64_t n, const float *x, float *y)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    silu_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, x, y);
    cuda_launched(cb, "silu_forward");
}

void cuda_silu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                        float *dx, bool accumulate)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    silu_grad_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, x, dy, dx,
                                                                                    accumulate);
    cuda_launched(cb, "silu_backward");
}

void cuda_gelu_forward(nctmc_backend *be, int64_t n, const float *x, float *y)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    gelu_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, x, y);
    cuda_launched(cb, "gelu_forward");
}

void cuda_gelu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                        float *dx)
{
    cuda_backend *cb = cuda_of(be);
    if (n <= 0)
        return;
    gelu_grad_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, x, dy,
                                                                                    dx);
    cuda_launched(cb, "gelu_backward");
}

/* ---- gated residual ----------------------------------------------------- */

/* out may equal x */
__global__ void residual_kernel(int64_t rows, int32_t seq_len, int32_t dim, const float *x,
                                const float *__restrict__ y, const float *__restrict__ gate,
                                int32_t mod_stride, float *out)
{
    GRID_STRIDE(i, rows * dim)
    {
        int64_t r = i / dim;
        int32_t k = (int32_t)(i % dim);
        out[i] = x[i] + gate[(r / seq_len) * mod_stride + k] * y[i];
    }
}

/* Block (32 columns x RES_LANES lanes) per (column chunk, sequence). */
__global__ void residual_grad_kernel(int64_t rows, int32_t seq_len, int32_t dim,
                                     const float *__restrict__ y,
                                     const float *__restrict__ gate, int32_t mod_stride,
                                     const float *dx, float *dy, float *__restrict__ dgate)
{
    __shared__ float lanes[RES_LANES][33];
    int32_t k = (int32_t)blockIdx.x * 32 + (int32_t)threadIdx.x;
    int64_t b = blockIdx.y;
    int64_t r0 = b * seq_len;
    int64_t r1 = r0 + seq_len < rows ? r0 + seq_len : rows;
    float acc = 0.0f;
    if (k < dim) {
        float g = gate[b * mod_stride + k];
        for (int64_t r = r0 + threadIdx.y; r < r1; r += RES_LANES) {
            int64_t at = r * dim + k;
            acc += dx[at] * y[at];
            dy[at] = g * dx[at];
        }
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && k < dim) {
        float t = 0.0f;
        for (int l = 0; l < RES_LANES; l++)
            t += lanes[l][threadIdx.x];
        dgate[b * mod_stride + k] = t;
    }
}

void cuda_gated_residual_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                 const float *x, const float *y, const float *gate,
                                 int32_t mod_stride, float *out)
{
    cuda_backend *cb = cuda_of(be);
    if (rows <= 0 || seq_len <= 0 || dim <= 0)
        return;
    residual_kernel<<<cuda_blocks(rows * dim, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        rows, seq_len, dim, x, y, gate, mod_stride, out);
    cuda_launched(cb, "gated_residual_forward");
}

void cuda_gated_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                  int32_t dim, const float *y, const float *gate,
                                  int32_t mod_stride, const float *dx, float *dy, float *dgate)
{
    cuda_backend *cb = cuda_of(be);
    if (rows <= 0 || seq_len <= 0 || dim <= 0)
        return;
    int64_t n_seq = (rows + seq_len - 1) / seq_len;
    if (n_seq > 65535) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "gated residual: %lld sequences",
                  (long long)n_seq);
        return;
    }
    dim3 grid((unsigned)((dim + 31) / 32), (unsigned)n_seq);
    residual_grad_kernel<<<grid, dim3(32, RES_LANES), 0, cb->stream>>>(
        rows, seq_len, dim, y, gate, mod_stride, dx, dy, dgate);
    cuda_launched(cb, "gated_residual_backward");
}

/* ---- rotary ------------------------------------------------------------- */

/* One thread per (row, q/k head, pair). The angle p * base^(-2a/D) and its
 * cosine and sine are evaluated in double and rounded once; direction -1
 * applies the transpose (the inverse rotation). */
__global__ void rotary_kernel(int64_t rows, int32_t seq_len, int32_t heads, int32_t head_dim,
                              double base, double direction, float *__restrict__ qkv)
{
    int32_t half = head_dim / 2;
    int64_t per_row = 2 * (int64_t)heads * half;
    int64_t stride = 3 * (int64_t)heads * head_dim;
    GRID_STRIDE(i, rows * per_row)
    {
        int64_t r = i / per_row;
        int64_t rest = i % per_row;
        int64_t h = rest / half;
        int32_t a = (int32_t)(rest % half);
        double inv_freq = pow(base, -2.0 * (double)a / (double)head_dim);
        double angle = (double)(r % seq_len) * inv_freq;
        float c = (float)cos(angle), s = (float)(direction * sin(angle));
        float *x = qkv + r * stride + h * head_dim + a;
        float u = x[0], v = x[half];
        x[0] = u * c - v * s;
        x[half] = v * c + u * s;
    }
}

static void rotary_run(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                       int32_t head_dim, float base, double direction, float *qkv)
{
    cuda_backend *cb = cuda_of(be);
    if (rows <= 0 || seq_len <= 0 || heads <= 0 || head_dim < 2)
        return;
    int64_t n = rows * 2 * (int64_t)heads * (head_dim / 2);
    rotary_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        rows, seq_len, heads, head_dim, (double)base, direction, qkv);
    cuda_launched(cb, "rotary");
}

void cuda_rotary_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                         int32_t head_dim, float base, float *qkv)
{
    rotary_run(be, rows, seq_len, heads, head_dim, base, 1.0, qkv);
}

void cuda_rotary_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                          int32_t head_dim, float base, float *dqkv)
{
    rotary_run(be, rows, seq_len, heads, head_dim, base, -1.0, dqkv);
}
