/*
 * cuda_memory.cu — device memory, host transfers, the backend's scratch
 * buffer, and the float32 -> bfloat16 conversion of the products' operands
 * in bf16 mode.
 *
 * Transfers run on the backend's stream, so they are ordered with the
 * operations around them. A download returns when the data is on the host.
 * An upload from ordinary (pageable) host memory returns once the driver
 * has copied the source into its staging buffer, so the caller may reuse
 * it at once; from page-locked memory the driver would read it later, so
 * the upload waits for the copy.
 */
#include "cuda_internal.cuh"

void cuda_note_memory(cuda_backend *cb)
{
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        cudaGetLastError(); /* a statistic only */
        return;
    }
    cb->total = total;
    if (total - free_bytes > cb->peak_used)
        cb->peak_used = total - free_bytes;
}

/* cudaMalloc aligns to 256 bytes; a request of 0 bytes still gets a
 * distinct pointer. */
void *cuda_alloc(nctmc_backend *be, size_t bytes)
{
    cuda_backend *cb = cuda_of(be);
    size_t rounded = bytes < 256 ? 256 : bytes;
    void *p = NULL;
    if (cudaMalloc(&p, rounded) != cudaSuccess) {
        cudaGetLastError(); /* allocation failure is answered by NULL */
        return NULL;
    }
    if (!cuda_check(cb, cudaMemsetAsync(p, 0, rounded, cb->stream), "alloc: zero fill")) {
        cudaFree(p);
        return NULL;
    }
    cuda_note_memory(cb);
    return p;
}

void cuda_free(nctmc_backend *be, void *ptr)
{
    if (!ptr)
        return;
    cuda_backend *cb = cuda_of(be);
    /* queued work may still use it */
    cuda_check(cb, cudaStreamSynchronize(cb->stream), "free: synchronize");
    cuda_check(cb, cudaFree(ptr), "free");
}

static bool host_is_pageable(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    return a.type == cudaMemoryTypeUnregistered;
}

void cuda_upload(nctmc_backend *be, void *dst, const void *host_src, size_t bytes)
{
    if (!bytes)
        return;
    cuda_backend *cb = cuda_of(be);
    if (!cuda_check(cb, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->stream),
                    "upload"))
        return;
    if (!host_is_pageable(host_src))
        cuda_check(cb, cudaStreamSynchronize(cb->stream), "upload: synchronize");
}

void cuda_download(nctmc_backend *be, void *host_dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cuda_backend *cb = cuda_of(be);
    if (cuda_check(cb, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream),
                   "download"))
        cuda_check(cb, cudaStreamSynchronize(cb->stream), "download: synchronize");
}

void cuda_fill_zero(nctmc_backend *be, void *dst, size_t bytes)
{
    if (!bytes)
        return;
    cuda_backend *cb = cuda_of(be);
    cuda_check(cb, cudaMemsetAsync(dst, 0, bytes, cb->stream), "fill_zero");
}

void *cuda_scratch(cuda_backend *cb, size_t bytes)
{
    if (bytes <= cb->scratch_bytes && cb->scratch)
        return cb->scratch;
    /* grow geometrically so a run settles after a few steps */
    size_t want = bytes > 2 * cb->scratch_bytes ? bytes : 2 * cb->scratch_bytes;
    want = cuda_round64(want < 4096 ? 4096 : want);
    if (!cuda_check(cb, cudaStreamSynchronize(cb->stream), "scratch: synchronize"))
        return NULL;
    cudaFree(cb->scratch);
    cb->scratch = NULL;
    cb->scratch_bytes = 0;
    if (cudaMalloc(&cb->scratch, want) != cudaSuccess) {
        cudaGetLastError();
        cb->scratch = NULL;
        cuda_fail(cb, NCTMC_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of scratch", want);
        return NULL;
    }
    cb->scratch_bytes = want;
    cb->scratch_epoch++; /* graphs that captured the old buffer are stale */
    cuda_note_memory(cb);
    return cb->scratch;
}

__global__ void to_bf16_kernel(int64_t n, const float *__restrict__ src,
                               __nv_bfloat16 *__restrict__ dst)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

void cuda_to_bf16(cuda_backend *cb, int64_t n, const float *src, __nv_bfloat16 *dst)
{
    if (n <= 0)
        return;
    to_bf16_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, src, dst);
    cuda_launched(cb, "to_bf16");
}
