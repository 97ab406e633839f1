/*
 * cuda_errors.cu — error recording: the first failure of a CUDA, cuBLAS or
 * cuDNN call (or of an argument the backend cannot serve) kept in the
 * backend's `pending` status and message until `synchronize`
 * (cuda_backend.cu) reports and clears it.
 *
 * Every other file of this folder records through these functions; they
 * call nothing of the backend's own, so they sit below all of it.
 */
#include <stdarg.h>
#include <stdio.h>

#include "cuda_internal.cuh"

void cuda_fail(cuda_backend *cb, nctmc_status status, const char *fmt, ...)
{
    if (cb->pending != NCTMC_OK)
        return;
    cb->pending = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cb->pending_msg, sizeof cb->pending_msg, fmt, ap);
    va_end(ap);
}

bool cuda_check(cuda_backend *cb, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    nctmc_status st = e == cudaErrorMemoryAllocation ? NCTMC_ERR_OUT_OF_MEMORY : NCTMC_ERR_BACKEND;
    cuda_fail(cb, st, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return false;
}

bool cuda_check_blas(cuda_backend *cb, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return true;
    nctmc_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? NCTMC_ERR_OUT_OF_MEMORY : NCTMC_ERR_BACKEND;
    cuda_fail(cb, st, "%s: %s", what, cublasGetStatusString(s));
    return false;
}
