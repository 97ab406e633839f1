/*
 * cpu_fused.c — the fused block operations of lib/backend/backend.h on the
 * CPU: each is the sequence of the backend's own kernels it names, run in
 * that order, so the model gives the same bits whether it calls the fused
 * operation or the sequence. They are the reference the CUDA backend's fused
 * kernels are checked against.
 */
#include "cpu_backend.h"

void cpu_linear_gelu_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                             const float *x, const float *w, const float *bias, float *pre,
                             float *y)
{
    cpu_linear_forward(be, rows, in, out, x, w, bias, pre);
    cpu_gelu_forward(be, rows * (int64_t)out, pre, y);
}

void cpu_linear_backward_gelu(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const float *dy, const float *pre,
                              float *dx, float *dw, float *dbias, bool accumulate_params)
{
    cpu_linear_backward(be, rows, in, out, x, w, dy, dx, false, dw, dbias, accumulate_params);
    cpu_gelu_backward(be, rows * (int64_t)in, pre, dx, dx);
}

void cpu_residual_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                const float *x, const float *y, const float *gate,
                                const float *w, const float *shift, const float *scale,
                                int32_t mod_stride, float *out, float *u, float *mean,
                                float *rstd)
{
    cpu_gated_residual_forward(be, rows, seq_len, dim, x, y, gate, mod_stride, out);
    cpu_adaln_forward(be, rows, seq_len, dim, out, w, shift, scale, mod_stride, u, mean, rstd);
}

void cpu_adaln_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                 const float *x, const float *w, const float *scale,
                                 int32_t mod_stride, const float *mean, const float *rstd,
                                 const float *dy, float *dx, float *dw, bool accumulate_dw,
                                 float *dshift, float *dscale, const float *y_res,
                                 const float *gate, float *dy_res, float *dgate)
{
    cpu_adaln_backward(be, rows, seq_len, dim, x, w, scale, mod_stride, mean, rstd, dy, dx, true,
                       dw, accumulate_dw, dshift, dscale);
    cpu_gated_residual_backward(be, rows, seq_len, dim, y_res, gate, mod_stride, dx, dy_res,
                                dgate);
}
