/*
 * cpu_backend.c — the CPU backend: host memory, the thread pool, the
 * backend's state (the reduced-precision kernel choice, the rotary cache's
 * lifetime), and the table of operations implemented in the other files of
 * this folder. The top of backends/cpu/: it calls the kernel files, and none
 * of them calls it.
 */
#include "cpu_backend.h"

#include "cpu_blas.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cpu_blas_reserve.h"

#define CPU_ALIGNMENT NCTMC_MEM_SLAB_ALIGN

static void *cpu_alloc(nctmc_backend *be, size_t bytes)
{
    size_t rounded = (bytes + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
    if (rounded < bytes)
        return NULL;
    if (rounded == 0)
        rounded = CPU_ALIGNMENT;
    void *p = mem_alloc_aligned(be->alloc, rounded, CPU_ALIGNMENT);
    if (p)
        memset(p, 0, rounded);
    return p;
}

static void cpu_free(nctmc_backend *be, void *ptr)
{
    mem_free(be->alloc, ptr);
}

static void cpu_copy(nctmc_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_fill_zero(nctmc_backend *be, void *dst, size_t bytes)
{
    (void)be;
    if (bytes)
        memset(dst, 0, bytes);
}

static nctmc_status cpu_synchronize(nctmc_backend *be)
{
    (void)be;
    return NCTMC_OK;
}

static void cpu_destroy(nctmc_backend *be)
{
    if (!be)
        return;
    cpu_pool_free(cpu_of(be)->pool);
    cpu_rope_cache_free(&cpu_of(be)->rope, be->alloc);
    mem_free(be->alloc, be);
}

bool cpu_backend_set_bf16_dot(nctmc_backend *be, bool enable)
{
    cpu_backend *cb = cpu_of(be);
    cb->bf16_dot = enable && cpu_linear_packed_has_bf16_kernel();
    return cb->bf16_dot;
}

static const nctmc_backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .synchronize = cpu_synchronize,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .timestep_embedding = cpu_timestep_embedding,
    .silu_forward = cpu_silu_forward,
    .silu_backward = cpu_silu_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .adaln_forward = cpu_adaln_forward,
    .adaln_backward = cpu_adaln_backward,
    .gated_residual_forward = cpu_gated_residual_forward,
    .gated_residual_backward = cpu_gated_residual_backward,
    .rotary_forward = cpu_rotary_forward,
    .rotary_backward = cpu_rotary_backward,
    .attention_saved_floats = cpu_attention_saved_floats,
    .attention_workspace_floats = cpu_attention_workspace_floats,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .lcond = cpu_lcond,
    .jump_output = cpu_jump_output,
    .denoiser_forward = cpu_denoiser_forward,
    .denoiser_backward = cpu_denoiser_backward,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .add = cpu_add,
    .adamw = cpu_adamw,
    .ema_update = cpu_ema_update,
    .sample_step = cpu_sample_step,
    .linear_packed_scratch_bytes = cpu_linear_packed_scratch_bytes,
    .linear_forward_packed = cpu_linear_forward_packed,
    .linear_gelu_forward = cpu_linear_gelu_forward,
    .linear_backward_gelu = cpu_linear_backward_gelu,
    .residual_adaln_forward = cpu_residual_adaln_forward,
    .adaln_residual_backward = cpu_adaln_residual_backward,
};

nctmc_backend *cpu_backend_create(int n_threads, char *err, size_t err_size)
{
    return cpu_backend_create_with(n_threads, NULL, err, err_size);
}

nctmc_backend *cpu_backend_create_with(int n_threads, const nctmc_allocator *alloc,
                                       char *err, size_t err_size)
{
    if (n_threads < 0) {
        snprintf(err, err_size, "n_threads must be >= 0 (0 = all cores), got %d", n_threads);
        return NULL;
    }
    if (n_threads == 0)
        n_threads = cpu_online_cores();
    /* OpenBLAS is loaded with the first backend (cpu_blas.c) */
    if (!cpu_blas_load(err, err_size))
        return NULL;
    cpu_backend *cb = mem_calloc(alloc, 1, sizeof *cb);
    if (!cb) {
        snprintf(err, err_size, "out of memory creating the CPU backend");
        return NULL;
    }
    cpu_rope_cache_init(&cb->rope);
    cb->pool = cpu_pool_create(n_threads, alloc);
    if (!cb->pool) {
        mem_free(alloc, cb);
        snprintf(err, err_size, "could not start %d CPU threads", n_threads);
        return NULL;
    }
    /* OpenBLAS's thread count is process-wide; the backend parallelises
     * around single-threaded OpenBLAS calls with its own pool instead, so
     * every split of the work is fixed and contexts do not fight over it. */
    cpu_blas_functions()->set_num_threads(1);
    /* OpenBLAS hangs instead of failing when it cannot map a buffer: take
     * the buffers now, where a shortage is an error (cpu_blas_reserve.c) */
    if (!cpu_blas_reserve(cb->pool, alloc, err, err_size)) {
        cpu_pool_free(cb->pool);
        mem_free(alloc, cb);
        return NULL;
    }
    cb->base.ops = &cpu_ops;
    cb->base.name = "cpu";
    cb->base.n_threads = n_threads;
    cb->base.error[0] = '\0';
    cb->base.alloc = alloc;
    cpu_backend_set_bf16_dot(&cb->base, true);
    return &cb->base;
}
