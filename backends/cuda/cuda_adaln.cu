/*
 * cuda_adaln.cu — adaLN: LayerNorm without bias, then per-sequence
 * modulation y = LN(x) * w * (1 + scale[b]) + shift[b], and its backward.
 *
 * One warp per row for everything that reduces along a row (mean and
 * variance forward; the two row sums of the input gradient backward): a
 * lane takes columns lane, lane + 32, ... and the warp combines the lanes
 * with an xor butterfly, a fixed order. The reductions over rows are split
 * as on the CPU: a block owns 32 columns of one sequence and sums its rows
 * in ADALN_LANES interleaved lanes combined in lane order, giving dshift[b]
 * and P[b] = sum dy * LN(x) (kept in dscale's slot); then one thread per
 * column turns P into dscale[b] = w * P[b] and adds
 * dw = sum_b (1 + scale[b]) * P[b] in sequence order.
 *
 * The fused kernels of residual_adaln_forward and adaln_residual_backward
 * (cuda_fused.cu, NCTMC_CUDA_FUSED) follow the same shapes and orders: the
 * forward warp forms out = x + gate * y as it reads the row (one pass fewer
 * over the rows); the backward's per-sequence block also takes the gated
 * residual's dgate (in the order of cuda_pointwise.cu's, RES_LANES ==
 * ADALN_LANES) and writes dy_res = gate * dx (one kernel fewer).
 */
#include <math.h>

#include "cuda_internal.cuh"

#define LN_EPS 1e-5f
#define ADALN_ROWS_PER_BLOCK 8 /* one warp each */
#define ADALN_LANES 8

__global__ void adaln_forward_kernel(int64_t rows, int32_t seq_len, int32_t dim, const float *x,
                                     const float *__restrict__ w,
                                     const float *__restrict__ shift,
                                     const float *__restrict__ scale, int32_t mod_stride,
                                     float *y, float *__restrict__ mean,
                                     float *__restrict__ rstd)
{
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * ADALN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const float *xr = x + r * dim;
    float s = 0.0f;
    for (int32_t k = lane; k < dim; k += 32)
        s += xr[k];
    float mu = cuda_warp_sum(s) / (float)dim;
    float v = 0.0f;
    for (int32_t k = lane; k < dim; k += 32) {
        float d = xr[k] - mu;
        v += d * d;
    }
    float var = cuda_warp_sum(v) / (float)dim;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    int64_t mod = (r / seq_len) * mod_stride;
    float *yr = y + r * dim;
    for (int32_t k = lane; k < dim; k += 32)
        yr[k] = (xr[k] - mu) * rs * w[k] * (1.0f + scale[mod + k]) + shift[mod + k];
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/* dx = rstd * (g - mean(g) - LN(x) * mean(g * LN(x))), g = dy w (1 + scale) */
__global__ void adaln_dx_kernel(int64_t rows, int32_t seq_len, int32_t dim,
                                const float *__restrict__ x, const float *__restrict__ w,
                                const float *__restrict__ scale, int32_t mod_stride,
                                const float *__restrict__ mean, const float *__restrict__ rstd,
                                const float *__restrict__ dy, float *__restrict__ dx,
                                bool accumulate)
{
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * ADALN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    const float *sc = scale + (r / seq_len) * mod_stride;
    float mu = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (int32_t k = lane; k < dim; k += 32) {
        float g = dyr[k] * w[k] * (1.0f + sc[k]);
        sg += g;
        sgx += g * ((xr[k] - mu) * rs);
    }
    float c1 = cuda_warp_sum(sg) / (float)dim;
    float c2 = cuda_warp_sum(sgx) / (float)dim;
    float *dxr = dx + r * dim;
    for (int32_t k = lane; k < dim; k += 32) {
        float g = dyr[k] * w[k] * (1.0f + sc[k]);
        float d = rs * (g - c1 - (xr[k] - mu) * rs * c2);
        dxr[k] = accumulate ? dxr[k] + d : d;
    }
}

/* Block (32 columns x ADALN_LANES lanes) per (column chunk, sequence):
 * dshift[b] = sum dy, dscale[b] = P[b] = sum dy * LN(x) (for now). */
__global__ void adaln_seq_sums_kernel(int64_t rows, int32_t seq_len, int32_t dim,
                                      const float *__restrict__ x,
                                      const float *__restrict__ mean,
                                      const float *__restrict__ rstd,
                                      const float *__restrict__ dy, int32_t mod_stride,
                                      float *__restrict__ dshift, float *__restrict__ dscale)
{
    __shared__ float lane_sh[ADALN_LANES][33];
    __shared__ float lane_p[ADALN_LANES][33];
    int32_t k = (int32_t)blockIdx.x * 32 + (int32_t)threadIdx.x;
    int64_t b = blockIdx.y;
    int64_t r0 = b * seq_len;
    int64_t r1 = r0 + seq_len < rows ? r0 + seq_len : rows;
    float sh = 0.0f, p = 0.0f;
    if (k < dim)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += ADALN_LANES) {
            float g = dy[r * dim + k];
            sh += g;
            p += g * ((x[r * dim + k] - mean[r]) * rstd[r]);
        }
    lane_sh[threadIdx.y][threadIdx.x] = sh;
    lane_p[threadIdx.y][threadIdx.x] = p;
    __syncthreads();
    if (threadIdx.y == 0 && k < dim) {
        float ts = 0.0f, tp = 0.0f;
        for (int l = 0; l < ADALN_LANES; l++) {
            ts += lane_sh[l][threadIdx.x];
            tp += lane_p[l][threadIdx.x];
        }
        dshift[b * mod_stride + k] = ts;
        dscale[b * mod_stride + k] = tp;
    }
}

__global__ void adaln_param_kernel(int64_t n_seq, int32_t dim, const float *__restrict__ w,
                                   const float *__restrict__ scale, int32_t mod_stride,
                                   float *__restrict__ dscale, float *__restrict__ dw,
                                   bool accumulate_dw)
{
    int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= dim)
        return;
    float acc = 0.0f, wk = w[k];
    for (int64_t b = 0; b < n_seq; b++) {
        int64_t at = b * mod_stride + k;
        float p = dscale[at];
        acc += (1.0f + scale[at]) * p;
        dscale[at] = wk * p;
    }
    if (dw)
        dw[k] = accumulate_dw ? dw[k] + acc : acc;
}

void cuda_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                        const float *x, const float *w, const float *shift, const float *scale,
                        int32_t mod_stride, float *y, float *mean, float *rstd)
{
    cuda_backend *cb = cuda_of(be);
    if (rows <= 0 || seq_len <= 0 || dim <= 0)
        return;
    unsigned blocks = (unsigned)((rows + ADALN_ROWS_PER_BLOCK - 1) / ADALN_ROWS_PER_BLOCK);
    adaln_forward_kernel<<<blocks, 32 * ADALN_ROWS_PER_BLOCK, 0, cb->stream>>>(
        rows, seq_len, dim, x, w, shift, scale, mod_stride, y, mean, rstd);
    cuda_launched(cb, "adaln_forward");
}

void cuda_adaln_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                         const float *x, const float *w, const float *scale, int32_t mod_stride,
                         const float *mean, const float *rstd, const float *dy, float *dx,
                         bool accumulate_dx, float *dw, bool accumulate_dw, float *dshift,
                         float *dscale)
{
    cuda_backend *cb = cuda_of(be);
    if (rows <= 0 || seq_len <= 0 || dim <= 0)
        return;
    int64_t n_seq = (rows + seq_len - 1) / seq_len;
    if (n_seq > 65535) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "adaln: %lld sequences", (long long)n_seq);
        return;
    }
    unsigned blocks = (unsigned)((rows + ADALN_ROWS_PER_BLOCK - 1) / ADALN_ROWS_PER_BLOCK);
    adaln_dx_kernel<<<blocks, 32 * ADALN_ROWS_PER_BLOCK, 0, cb->stream>>>(
        rows, seq_len, dim, x, w, scale, mod_stride, mean, rstd, dy, dx, accumulate_dx);
    cuda_launched(cb, "adaln_backward_dx");
    dim3 grid((unsigned)((dim + 31) / 32), (unsigned)n_seq);
    adaln_seq_sums_kernel<<<grid, dim3(32, ADALN_LANES), 0, cb->stream>>>(
        rows, seq_len, dim, x, mean, rstd, dy, mod_stride, dshift, dscale);
    cuda_launched(cb, "adaln_backward_sums");
    adaln_param_kernel<<<(dim + CUDA_THREADS - 1) / CUDA_THREADS, CUDA_THREADS, 0, cb->stream>>>(
        n_seq, dim, w, scale, mod_stride, dscale, dw, accumulate_dw);
    cuda_launched(cb, "adaln_backward_params");
}

/* ---- fused with the gated residual (NCTMC_CUDA_FUSED) -------------------- */

/* out = x + gate * y (out may equal x: each element is read, then written,
 * by one lane), then the adaLN of out as adaln_forward_kernel. */
__global__ void residual_adaln_forward_kernel(int64_t rows, int32_t seq_len, int32_t dim,
                                              const float *x, const float *__restrict__ y,
                                              const float *__restrict__ gate,
                                              const float *__restrict__ w,
                                              const float *__restrict__ shift,
                                              const float *__restrict__ scale,
                                              int32_t mod_stride, float *out,
                                              float *__restrict__ u, float *__restrict__ mean,
                                              float *__restrict__ rstd)
{
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * ADALN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    int64_t mod = (r / seq_len) * mod_stride;
    const float *xr = x + r * dim, *yr = y + r * dim;
    float *orow = out + r * dim;
    float s = 0.0f;
    for (int32_t k = lane; k < dim; k += 32) {
        float v = xr[k] + gate[mod + k] * yr[k];
        orow[k] = v;
        s += v;
    }
    float mu = cuda_warp_sum(s) / (float)dim;
    float v = 0.0f;
    for (int32_t k = lane; k < dim; k += 32) {
        float d = orow[k] - mu;
        v += d * d;
    }
    float var = cuda_warp_sum(v) / (float)dim;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    float *ur = u + r * dim;
    for (int32_t k = lane; k < dim; k += 32)
        ur[k] = (orow[k] - mu) * rs * w[k] * (1.0f + scale[mod + k]) + shift[mod + k];
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/* adaln_seq_sums_kernel plus the gated residual's backward on dx (already
 * holding adaLN's input gradient): dgate[b] = sum dx * y_res, dy_res = gate
 * * dx. dy_res may equal dy: each element's dy is read before its dy_res is
 * written, by the same thread. */
__global__ void adaln_residual_sums_kernel(int64_t rows, int32_t seq_len, int32_t dim,
                                           const float *__restrict__ x,
                                           const float *__restrict__ mean,
                                           const float *__restrict__ rstd, const float *dy,
                                           int32_t mod_stride, float *__restrict__ dshift,
                                           float *__restrict__ dscale,
                                           const float *__restrict__ dx,
                                           const float *__restrict__ y_res,
                                           const float *__restrict__ gate, float *dy_res,
                                           float *__restrict__ dgate)
{
    __shared__ float lane_sh[ADALN_LANES][33];
    __shared__ float lane_p[ADALN_LANES][33];
    __shared__ float lane_g[ADALN_LANES][33];
    int32_t k = (int32_t)blockIdx.x * 32 + (int32_t)threadIdx.x;
    int64_t b = blockIdx.y;
    int64_t r0 = b * seq_len;
    int64_t r1 = r0 + seq_len < rows ? r0 + seq_len : rows;
    float sh = 0.0f, p = 0.0f, ga = 0.0f;
    if (k < dim) {
        float g = gate[b * mod_stride + k];
        for (int64_t r = r0 + threadIdx.y; r < r1; r += ADALN_LANES) {
            int64_t at = r * dim + k;
            float d = dy[at];
            sh += d;
            p += d * ((x[at] - mean[r]) * rstd[r]);
            float e = dx[at];
            ga += e * y_res[at];
            dy_res[at] = g * e;
        }
    }
    lane_sh[threadIdx.y][threadIdx.x] = sh;
    lane_p[threadIdx.y][threadIdx.x] = p;
    lane_g[threadIdx.y][threadIdx.x] = ga;
    __syncthreads();
    if (threadIdx.y == 0 && k < dim) {
        float ts = 0.0f, tp = 0.0f, tg = 0.0f;
        for (int l = 0; l < ADALN_LANES; l++) {
            ts += lane_sh[l][threadIdx.x];
            tp += lane_p[l][threadIdx.x];
            tg += lane_g[l][threadIdx.x];
        }
        dshift[b * mod_stride + k] = ts;
        dscale[b * mod_stride + k] = tp;
        dgate[b * mod_stride + k] = tg;
    }
}

void cuda_residual_adaln_fused(cuda_backend *cb, int64_t rows, int32_t seq_len, int32_t dim,
                               const float *x, const float *y, const float *gate,
                               const float *w, const float *shift, const float *scale,
                               int32_t mod_stride, float *out, float *u, float *mean,
                               float *rstd)
{
    if (rows <= 0 || seq_len <= 0 || dim <= 0)
        return;
    unsigned blocks = (unsigned)((rows + ADALN_ROWS_PER_BLOCK - 1) / ADALN_ROWS_PER_BLOCK);
    residual_adaln_forward_kernel<<<blocks, 32 * ADALN_ROWS_PER_BLOCK, 0, cb->stream>>>(
        rows, seq_len, dim, x, y, gate, w, shift, scale, mod_stride, out, u, mean, rstd);
    cuda_launched(cb, "residual_adaln_forward");
}

void cuda_adaln_residual_fused(cuda_backend *cb, int64_t rows, int32_t seq_len, int32_t dim,
                               const float *x, const float *w, const float *scale,
                               int32_t mod_stride, const float *mean, const float *rstd,
                               const float *dy, float *dx, float *dw, bool accumulate_dw,
                               float *dshift, float *dscale, const float *y_res,
                               const float *gate, float *dy_res, float *dgate)
{
    if (rows <= 0 || seq_len <= 0 || dim <= 0)
        return;
    int64_t n_seq = (rows + seq_len - 1) / seq_len;
    if (n_seq > 65535) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "adaln: %lld sequences", (long long)n_seq);
        return;
    }
    unsigned blocks = (unsigned)((rows + ADALN_ROWS_PER_BLOCK - 1) / ADALN_ROWS_PER_BLOCK);
    adaln_dx_kernel<<<blocks, 32 * ADALN_ROWS_PER_BLOCK, 0, cb->stream>>>(
        rows, seq_len, dim, x, w, scale, mod_stride, mean, rstd, dy, dx, true);
    cuda_launched(cb, "adaln_residual_backward_dx");
    dim3 grid((unsigned)((dim + 31) / 32), (unsigned)n_seq);
    adaln_residual_sums_kernel<<<grid, dim3(32, ADALN_LANES), 0, cb->stream>>>(
        rows, seq_len, dim, x, mean, rstd, dy, mod_stride, dshift, dscale, dx, y_res, gate,
        dy_res, dgate);
    cuda_launched(cb, "adaln_residual_backward_sums");
    adaln_param_kernel<<<(dim + CUDA_THREADS - 1) / CUDA_THREADS, CUDA_THREADS, 0, cb->stream>>>(
        n_seq, dim, w, scale, mod_stride, dscale, dw, accumulate_dw);
    cuda_launched(cb, "adaln_residual_backward_params");
}
