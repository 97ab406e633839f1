/*
 * cpu_backend.h — the CPU backend's state and the operations each file of
 * backends/cpu/ implements (see lib/backend/backend.h for what each one computes).
 *
 * Layers, calls going down only: cpu_backend.c (the table of operations,
 * creation, destruction) calls the kernel files; the kernel files read the
 * state below but call nothing of cpu_backend.c, only the shared layer
 * beneath them: cpu_parallel.h (work splits), cpu_gemm.h (matrix
 * products), thread_pool.h (the pool).
 */
#ifndef NCTMC_CPU_BACKEND_H
#define NCTMC_CPU_BACKEND_H

#include "backend/backend.h"
#include "cpu_rotary.h"
#include "thread_pool.h"

typedef struct cpu_backend {
    nctmc_backend base;
    cpu_pool *pool;
    /* Reduced-precision linear layers use the AVX512-BF16 kernel (set at
     * creation where the CPU has it; cpu_backend_set_bf16_dot()). */
    bool bf16_dot;
    /* cpu_rotary.c's cache of its table: the backend starts and frees it,
     * only cpu_rotary.c looks inside */
    cpu_rope_cache rope;
} cpu_backend;

static inline cpu_backend *cpu_of(nctmc_backend *be)
{
    return (cpu_backend *)be;
}

/* cpu_backend.c */
/* Chooses the kernel of reduced-precision linear layers: the AVX512-BF16
 * one when `enable` and the CPU has it, the portable one otherwise (tests
 * compare both). Returns whether the AVX512-BF16 kernel is now in use. */
bool cpu_backend_set_bf16_dot(nctmc_backend *be, bool enable);

/* cpu_linear.c */
void cpu_linear_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                        const float *x, const float *w, const float *bias, float *y);
void cpu_linear_backward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                         const float *x, const float *w, const float *dy, float *dx,
                         bool accumulate_dx, float *dw, float *dbias, bool accumulate_params);

/* cpu_linear_packed.c */
size_t cpu_linear_packed_scratch_bytes(nctmc_backend *be, int32_t in);
void cpu_linear_forward_packed(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                               const float *x, const nctmc_packed_weight *w,
                               const float *bias, float *y, void *scratch);
/* Whether this build has the AVX512-BF16 kernel and the CPU runs it (ZMM
 * state enabled by the OS). */
bool cpu_linear_packed_has_bf16_kernel(void);

/* cpu_embedding.c */
void cpu_embedding_forward(nctmc_backend *be, int64_t rows, int32_t dim, const int32_t *ids,
                           const float *table, float *out, bool accumulate);
void cpu_embedding_backward(nctmc_backend *be, int64_t rows, int32_t dim, int32_t n_entries,
                            const int32_t *ids, const float *dout, float *dtable,
                            bool accumulate);
void cpu_timestep_embedding(nctmc_backend *be, int32_t batch, int32_t dim, const float *times,
                            float *out);

/* cpu_activation.c */
void cpu_silu_forward(nctmc_backend *be, int64_t n, const float *x, float *y);
void cpu_silu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                       float *dx, bool accumulate);
void cpu_gelu_forward(nctmc_backend *be, int64_t n, const float *x, float *y);
void cpu_gelu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                       float *dx);

/* cpu_adaln.c */
void cpu_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                       const float *x, const float *w, const float *shift, const float *scale,
                       int32_t mod_stride, float *y, float *mean, float *rstd);
void cpu_adaln_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                        const float *x, const float *w, const float *scale, int32_t mod_stride,
                        const float *mean, const float *rstd, const float *dy, float *dx,
                        bool accumulate_dx, float *dw, bool accumulate_dw, float *dshift,
                        float *dscale);

/* cpu_residual.c */
void cpu_gated_residual_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                const float *x, const float *y, const float *gate,
                                int32_t mod_stride, float *out);
void cpu_gated_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                 int32_t dim, const float *y, const float *gate,
                                 int32_t mod_stride, const float *dx, float *dy, float *dgate);

/* cpu_fused.c: the fused block operations, as the sequences they name */
void cpu_linear_gelu_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                             const float *x, const float *w, const float *bias, float *pre,
                             float *y);
void cpu_linear_backward_gelu(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const float *dy, const float *pre,
                              float *dx, float *dw, float *dbias, bool accumulate_params);
void cpu_residual_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                const float *x, const float *y, const float *gate,
                                const float *w, const float *shift, const float *scale,
                                int32_t mod_stride, float *out, float *u, float *mean,
                                float *rstd);
void cpu_adaln_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                 const float *x, const float *w, const float *scale,
                                 int32_t mod_stride, const float *mean, const float *rstd,
                                 const float *dy, float *dx, float *dw, bool accumulate_dw,
                                 float *dshift, float *dscale, const float *y_res,
                                 const float *gate, float *dy_res, float *dgate);

/* cpu_rotary.c */
void cpu_rotary_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                        int32_t head_dim, float base, float *qkv);
void cpu_rotary_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                         int32_t head_dim, float base, float *dqkv);
/* (the cache of its table the backend holds: cpu_rotary.h) */

/* cpu_attention.c */
size_t cpu_attention_saved_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                  int32_t heads, int32_t head_dim);
size_t cpu_attention_workspace_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                      int32_t heads, int32_t head_dim);
void cpu_attention_forward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                           int32_t head_dim, const float *qkv, float *out, float *saved,
                           float *workspace);
void cpu_attention_backward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                            int32_t head_dim, const float *qkv, const float *out, float *saved,
                            const float *dout, float *dqkv, float *workspace);

/* cpu_loss.c */
void cpu_lcond(nctmc_backend *be, const nctmc_lcond_args *args);
void cpu_jump_output(nctmc_backend *be, const nctmc_jump_output_args *args);
void cpu_sample_step(nctmc_backend *be, const nctmc_sample_step_args *args);

/* cpu_denoiser.c */
void cpu_denoiser_forward(nctmc_backend *be, const nctmc_denoiser_args *args);
void cpu_denoiser_backward(nctmc_backend *be, const nctmc_denoiser_args *args);

/* cpu_optim.c */
double cpu_sum_squares(nctmc_backend *be, int64_t n, const float *x);
void cpu_scale(nctmc_backend *be, int64_t n, float *x, float s);
void cpu_add(nctmc_backend *be, int64_t n, float *y, const float *x);
void cpu_adamw(nctmc_backend *be, int64_t n, float *param, const float *grad, float *m,
               float *v, float lr, float beta1, float beta2, float eps, float weight_decay,
               int64_t step);
void cpu_ema_update(nctmc_backend *be, int64_t n, float *ema, const float *param, float decay);

#endif /* NCTMC_CPU_BACKEND_H */
