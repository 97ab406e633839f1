/*
 * cuda_fused.cu — the fused block operations of lib/backend/backend.h
 * (linear_gelu_forward, linear_backward_gelu, residual_adaln_forward,
 * adaln_residual_backward).
 *
 * With the backend's `fused` switch off (the default; NCTMC_CUDA_FUSED=1 in
 * the environment at creation turns it on) each runs the sequence of
 * operations it names, the same kernels as before the fused operations
 * existed, so the default path's bits are unchanged. With it on:
 *   - the GELU is cuBLASLt's epilogue of the product (cuda_linear.cu):
 *     GELU_AUX_BIAS forward (the pre-activation saved for the backward
 *     pass), DGELU backward; where cuBLASLt has no algorithm for the
 *     epilogue the product runs plain and the GELU kernel after it
 *     (counted in cb->fused_fallbacks, shown by describe);
 *   - adaLN takes the gated residual into its kernels (cuda_adaln.cu): the
 *     forward forms x + gate * y while it normalises, the backward forms
 *     dgate and gate * dx in its per-sequence pass.
 * test_cuda_fused checks both paths against the CPU backend.
 */
#include "cuda_internal.cuh"

void cuda_linear_gelu_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const float *bias, float *pre,
                              float *y)
{
    cuda_backend *cb = cuda_of(be);
    if (cb->fused) {
        if (cuda_linear_gelu_epilogue(cb, rows, in, out, x, w, bias, pre, y))
            return;
        cb->fused_fallbacks++;
    } else {
        cuda_linear_forward(be, rows, in, out, x, w, bias, pre);
    }
    cuda_gelu_forward(be, rows * (int64_t)out, pre, y);
}

void cuda_linear_backward_gelu(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                               const float *x, const float *w, const float *dy,
                               const float *pre, float *dx, float *dw, float *dbias,
                               bool accumulate_params)
{
    cuda_backend *cb = cuda_of(be);
    if (cb->fused) {
        if (cuda_linear_dgelu_epilogue(cb, rows, in, out, x, w, dy, pre, dx, dw, dbias,
                                       accumulate_params))
            return;
        cb->fused_fallbacks++;
    } else {
        cuda_linear_backward(be, rows, in, out, x, w, dy, dx, false, dw, dbias,
                             accumulate_params);
    }
    cuda_gelu_backward(be, rows * (int64_t)in, pre, dx, dx);
}

void cuda_residual_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                 const float *x, const float *y, const float *gate,
                                 const float *w, const float *shift, const float *scale,
                                 int32_t mod_stride, float *out, float *u, float *mean,
                                 float *rstd)
{
    cuda_backend *cb = cuda_of(be);
    if (cb->fused) {
        cuda_residual_adaln_fused(cb, rows, seq_len, dim, x, y, gate, w, shift, scale,
                                  mod_stride, out, u, mean, rstd);
        return;
    }
    cuda_gated_residual_forward(be, rows, seq_len, dim, x, y, gate, mod_stride, out);
    cuda_adaln_forward(be, rows, seq_len, dim, out, w, shift, scale, mod_stride, u, mean, rstd);
}

void cuda_adaln_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                  const float *x, const float *w, const float *scale,
                                  int32_t mod_stride, const float *mean, const float *rstd,
                                  const float *dy, float *dx, float *dw, bool accumulate_dw,
                                  float *dshift, float *dscale, const float *y_res,
                                  const float *gate, float *dy_res, float *dgate)
{
    cuda_backend *cb = cuda_of(be);
    if (cb->fused) {
        cuda_adaln_residual_fused(cb, rows, seq_len, dim, x, w, scale, mod_stride, mean, rstd,
                                  dy, dx, dw, accumulate_dw, dshift, dscale, y_res, gate,
                                  dy_res, dgate);
        return;
    }
    cuda_adaln_backward(be, rows, seq_len, dim, x, w, scale, mod_stride, mean, rstd, dy, dx,
                        true, dw, accumulate_dw, dshift, dscale);
    cuda_gated_residual_backward(be, rows, seq_len, dim, y_res, gate, mod_stride, dx, dy_res,
                                 dgate);
}
