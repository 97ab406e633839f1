/*
 * test_features.c — nctmc_get_features() (nctmc.h, "What this build can
 * do"): the version agrees with nctmc_version(), the default thread count
 * with what a context made with n_threads = 0 gets, the kernel name with the
 * kernel flag; without the CUDA module (an $NCTMC_CUDA_MODULE naming no file)
 * cuda_module is 0 and cuda_detail says why; the versioned-struct rules
 * (a struct below the first published size is refused and left alone).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

int main(void)
{
    /* a module path that does not exist: the query must say "not installed" */
    setenv("NCTMC_CUDA_MODULE", "/nonexistent/libnctmc-cuda.so", 1);
    nctmc_features f;
    CHECK(nctmc_features_init(&f) == NCTMC_OK && f.struct_size == sizeof f,
          "nctmc_features_init");
    CHECK(nctmc_get_features(&f) == NCTMC_OK, "nctmc_get_features");
    CHECK(f.struct_size == sizeof f, "struct_size kept");
    CHECK(f.version_number == nctmc_version_number() && f.version &&
              strcmp(f.version, nctmc_version()) == 0,
          "version %d %s", f.version_number, f.version ? f.version : "(null)");
    CHECK(f.cpu_kernel && ((f.cpu_bf16_kernel == 1 && strcmp(f.cpu_kernel, "avx512-bf16") == 0) ||
                           (f.cpu_bf16_kernel == 0 && strcmp(f.cpu_kernel, "portable") == 0)),
          "kernel %d %s", f.cpu_bf16_kernel, f.cpu_kernel ? f.cpu_kernel : "(null)");
    CHECK(f.vector_clones == 0 || f.vector_clones == 1, "vector_clones %d", f.vector_clones);
    CHECK(f.blas && strlen(f.blas) > 0, "blas description");
    CHECK(f.cuda_module == 0 && strstr(f.cuda_detail, "/nonexistent/libnctmc-cuda.so") &&
              strstr(f.cuda_detail, "not installed"),
          "no CUDA module: %d \"%s\"", f.cuda_module, f.cuda_detail);
    CHECK(f.cuda_driver == 0 || f.cuda_driver == 1, "cuda_driver %d", f.cuda_driver);
    printf("features: %s, kernel %s, %d threads, clones %d, cuda %d/%d (%s), blas %s\n",
           f.version, f.cpu_kernel, f.default_threads, f.vector_clones, f.cuda_module,
           f.cuda_driver, f.cuda_detail, f.blas);

    /* the default thread count is what a context with n_threads = 0 gets */
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");
    CHECK(f.default_threads >= 1 && nctmc_context_n_threads(ctx) == f.default_threads,
          "default threads %d, context %d", f.default_threads, nctmc_context_n_threads(ctx));
    nctmc_context_free(ctx);

    /* versioned-struct rules */
    CHECK(nctmc_get_features(NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL");
    unsigned char small[sizeof f];
    memset(small, 0x77, sizeof small);
    size_t too_small = sizeof(size_t) + 4;
    memcpy(small, &too_small, sizeof too_small);
    CHECK(nctmc_get_features((nctmc_features *)(void *)small) == NCTMC_ERR_INVALID_ARGUMENT &&
              small[sizeof(size_t)] == 0x77,
          "a struct_size below the first published size is refused, nothing written");
    CHECK(nctmc_features_init_sized(&f, 4) == NCTMC_ERR_INVALID_ARGUMENT, "init too small");
    return test_finish("features");
}
