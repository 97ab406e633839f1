/*
 * cuda_backend.h — the CUDA backend's C interface: creation, and the few
 * switches the tests and benchmarks use (compute precision, attention
 * implementation). The backend's internals are in cuda_internal.cuh; the
 * operations it implements are those of lib/backend/backend.h.
 *
 * These functions live in the module libnctmc-cuda.so, built only when the
 * build found the CUDA toolkit; the module exports none of them. The core
 * and the tests reach them through the module's descriptor
 * (nctmc_backend_module in backend.h, filled by cuda_module.c); the tests
 * include this header for nctmc_cuda_attention.
 */
#ifndef NCTMC_CUDA_BACKEND_H
#define NCTMC_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which attention implementation runs. AUTO uses cuDNN's fused SDPA
 * operation where cuDNN offers a deterministic engine for the shape and
 * the backend's custom kernels elsewhere; FALLBACK always uses the custom
 * kernels (the conformance test checks both). */
typedef enum nctmc_cuda_attention {
    NCTMC_CUDA_ATTENTION_AUTO = 0,
    NCTMC_CUDA_ATTENTION_FALLBACK = 1
} nctmc_cuda_attention;

/*
 * Creates the CUDA backend on device `device` (the context uses 0).
 * bf16: matrix products and attention in bfloat16 with float32
 * accumulation (weights, gradients, optimiser state and every other
 * operation stay float32); otherwise products run in TF32 and attention in
 * float16 with float32 accumulation.
 * On failure returns NULL and writes the reason into err; *no_device is set
 * when the reason is that no usable device exists (no driver, no GPU, a
 * GPU too old for the compiled code), as opposed to a failure of one that
 * does.
 */
nctmc_backend *cuda_backend_create(int device, bool bf16, char *err, size_t err_size,
                                   bool *no_device);

/* Switches the attention implementation (tests). */
void cuda_backend_set_attention(nctmc_backend *be, nctmc_cuda_attention mode);

/* Switches between TF32 (false) and bf16 (true) products (tests). */
void cuda_backend_set_bf16(nctmc_backend *be, bool bf16);

/* One line about the device and about which attention implementation the
 * last forward and backward calls used, with cuDNN's reason where it
 * declined. */
void cuda_backend_describe(nctmc_backend *be, char *buf, size_t size);

/* The device memory in use at most (the whole device, every process and
 * the CUDA context included), seen after any of this backend's
 * allocations and now, and the device's total, in bytes (benchmarks). */
void cuda_backend_memory(nctmc_backend *be, size_t *peak_used, size_t *total);

#ifdef __cplusplus
}
#endif

#endif /* NCTMC_CUDA_BACKEND_H */
