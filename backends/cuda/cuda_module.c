/*
 * cuda_module.c — the entry point of libnctmc-cuda.so, the CUDA backend as a
 * module the core loads at run time (lib/backend/backend_module.c). Everything else
 * in the module is hidden; this function is its only exported symbol.
 */
#include "cuda_backend.h"

static void set_attention(nctmc_backend *be, int mode)
{
    cuda_backend_set_attention(be, mode == NCTMC_CUDA_ATTENTION_FALLBACK
                                             ? NCTMC_CUDA_ATTENTION_FALLBACK
                                             : NCTMC_CUDA_ATTENTION_AUTO);
}

static const nctmc_backend_module cuda_module = {
    .abi_version = NCTMC_BACKEND_ABI_VERSION,
    .backend_size = sizeof(nctmc_backend),
    .ops_size = sizeof(nctmc_backend_ops),
    .sample_args_size = sizeof(nctmc_sample_step_args),
    .version_number = NCTMC_VERSION_NUMBER,
    .name = "cuda",
    .create = cuda_backend_create,
    .set_attention = set_attention,
    .set_bf16 = cuda_backend_set_bf16,
    .describe = cuda_backend_describe,
    .memory = cuda_backend_memory,
};

/* Declared here only: the core resolves it by name (NCTMC_BACKEND_MODULE_ENTRY). */
__attribute__((visibility("default"))) const nctmc_backend_module *
nctmc_backend_module_entry(void);

const nctmc_backend_module *nctmc_backend_module_entry(void)
{
    return &cuda_module;
}
