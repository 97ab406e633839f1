/*
 * features.c — nctmc_get_features(): what the linked library and the
 * machine offer, found without a context (version, the CPU backend's
 * reduced-precision kernel and default thread count, the CUDA module and
 * driver, build options). Reads process state only; safe from any thread.
 */
#include <stdio.h>
#include <string.h>

#include "base/abi.h"
#include "base/fail.h"
#include "backend/backend_module.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_blas.h"
#include "cpu/thread_pool.h"
#include "nctmc.h"

NCTMC_API nctmc_status nctmc_features_init_sized(nctmc_features *features, size_t size)
{
    return abi_init(features, size, NULL, &abi_features);
}

/* The CUDA module's and driver's state, with the reason when unusable. */
static void find_cuda(nctmc_features *f)
{
    const nctmc_backend_module *module = NULL;
    char module_why[sizeof f->cuda_detail] = "", driver_why[sizeof f->cuda_detail] = "";
    f->cuda_module = cuda_module_load(&module, module_why, sizeof module_why) == NCTMC_OK;
    f->cuda_driver = cuda_driver_present(driver_why, sizeof driver_why);
    const char *detail = !f->cuda_module ? module_why
                         : !f->cuda_driver ? driver_why
                                           : "the CUDA module and the NVIDIA driver load";
    snprintf(f->cuda_detail, sizeof f->cuda_detail, "%s", detail);
}

NCTMC_API nctmc_status nctmc_get_features(nctmc_features *features)
{
    if (!features)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char err[NCTMC_ERROR_SIZE];
    if (abi_check_output(features, &abi_features, err, sizeof err) != NCTMC_OK)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_features f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    f.version_number = nctmc_version_number();
    f.version = nctmc_version();
    f.default_threads = cpu_online_cores();
    f.cpu_bf16_kernel = cpu_linear_packed_has_bf16_kernel();
    f.cpu_kernel = f.cpu_bf16_kernel ? "avx512-bf16" : "portable";
#ifdef NCTMC_NO_VECTOR_CLONES
    f.vector_clones = 0;
#else
    f.vector_clones = 1;
#endif
    char blas_err[NCTMC_ERROR_SIZE];
    f.blas = cpu_blas_load(blas_err, sizeof blas_err) ? cpu_blas_functions()->get_config()
                                                      : "OpenBLAS not loaded";
    find_cuda(&f);
    abi_write(features, &f, &abi_features);
    return NCTMC_OK;
}
