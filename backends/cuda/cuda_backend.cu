/*
 * cuda_backend.cu — the CUDA backend: device selection, the stream and the
 * library handles, synchronisation (reporting what cuda_errors.cu
 * recorded), teardown, and the table of operations implemented in the
 * other files of this folder.
 *
 * Graph capture (cuda_graph.cu) is switched on here, from NCTMC_CUDA_GRAPHS.
 *
 * One stream per backend; cuBLAS, cuBLASLt and cuDNN all run on it, so
 * every operation is ordered after the previous one and the backend needs
 * no events. Nothing is global: all state lives in the backend struct.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

static nctmc_status cuda_synchronize(nctmc_backend *be)
{
    cuda_backend *cb = cuda_of(be);
    cuda_check(cb, cudaStreamSynchronize(cb->stream), "synchronize");
    nctmc_status st = cb->pending;
    if (st != NCTMC_OK) {
        snprintf(be->error, sizeof be->error, "cuda: %.240s", cb->pending_msg);
        cb->pending = NCTMC_OK;
        cb->pending_msg[0] = '\0';
    }
    return st;
}

static void cuda_destroy(nctmc_backend *be)
{
    if (!be)
        return;
    cuda_backend *cb = cuda_of(be);
    if (cb->stream)
        cudaStreamSynchronize(cb->stream);
    cuda_graph_reset(be);
    cuda_sdpa_cache_free(cb);
    cuda_lt_cache_free(cb);
    if (cb->dnn)
        cudnnDestroy(cb->dnn);
    if (cb->lt)
        cublasLtDestroy(cb->lt);
    if (cb->blas)
        cublasDestroy(cb->blas);
    cudaFree(cb->blas_workspace);
    cudaFree(cb->scratch);
    if (cb->stream)
        cudaStreamDestroy(cb->stream);
    free(cb);
}

static const nctmc_backend_ops cuda_ops = {
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .fill_zero = cuda_fill_zero,
    .synchronize = cuda_synchronize,
    .linear_forward = cuda_linear_forward,
    .linear_backward = cuda_linear_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .timestep_embedding = cuda_timestep_embedding,
    .silu_forward = cuda_silu_forward,
    .silu_backward = cuda_silu_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .adaln_forward = cuda_adaln_forward,
    .adaln_backward = cuda_adaln_backward,
    .gated_residual_forward = cuda_gated_residual_forward,
    .gated_residual_backward = cuda_gated_residual_backward,
    .rotary_forward = cuda_rotary_forward,
    .rotary_backward = cuda_rotary_backward,
    .attention_saved_floats = cuda_attention_saved_floats,
    .attention_workspace_floats = cuda_attention_workspace_floats,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .lcond = cuda_lcond,
    .jump_output = cuda_jump_output,
    .denoiser_forward = cuda_denoiser_forward,
    .denoiser_backward = cuda_denoiser_backward,
    .lcond_denoiser = cuda_lcond_denoiser,
    .sum_squares = cuda_sum_squares,
    .scale = cuda_scale,
    .add = cuda_add,
    .adamw = cuda_adamw,
    .ema_update = cuda_ema_update,
    .sample_step = cuda_sample_step,
    /* no reduced-precision weights on the GPU yet: such models are refused */
    .linear_packed_scratch_bytes = NULL,
    .linear_forward_packed = NULL,
    .linear_gelu_forward = cuda_linear_gelu_forward,
    .linear_backward_gelu = cuda_linear_backward_gelu,
    .residual_adaln_forward = cuda_residual_adaln_forward,
    .adaln_residual_backward = cuda_adaln_residual_backward,
    .linear_forward_bf16 = cuda_linear_forward_bf16,
    .linear_backward_bf16 = cuda_linear_backward_bf16,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_reset = cuda_graph_reset,
};

/* The first device failure of creation, as a message; false when e is ok. */
static bool creation_failed(cudaError_t e, const char *what, char *err, size_t err_size)
{
    if (e == cudaSuccess)
        return false;
    snprintf(err, err_size, "%s: %s", what, cudaGetErrorString(e));
    return true;
}

/* Everything but the device check: the stream, the handles, the BLAS
 * workspace. cuDNN is optional (attention then uses the custom kernels). */
static bool start_libraries(cuda_backend *cb, char *err, size_t err_size)
{
    if (creation_failed(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking),
                        "cudaStreamCreate", err, err_size) ||
        creation_failed(cudaMalloc(&cb->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES),
                        "allocating the cuBLAS workspace", err, err_size))
        return false;
    cublasStatus_t s = cublasCreate(&cb->blas);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(cb->blas, cb->stream);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetWorkspace(cb->blas, cb->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtCreate(&cb->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_size, "cuBLAS: %s", cublasGetStatusString(s));
        return false;
    }
    cudnnStatus_t d = cudnnCreate(&cb->dnn);
    if (d == CUDNN_STATUS_SUCCESS)
        d = cudnnSetStream(cb->dnn, cb->stream);
    if (d != CUDNN_STATUS_SUCCESS) {
        snprintf(cb->dnn_reason, sizeof cb->dnn_reason, "cuDNN did not start: %s",
                 cudnnGetErrorString(d));
        if (cb->dnn)
            cudnnDestroy(cb->dnn);
        cb->dnn = NULL;
    }
    return true;
}

extern "C" nctmc_backend *cuda_backend_create(int device, bool bf16, char *err,
                                              size_t err_size, bool *no_device)
{
    *no_device = false;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        /* no driver (cudaErrorInsufficientDriver), no GPU
         * (cudaErrorNoDevice) and the like all mean "no device" */
        snprintf(err, err_size, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
        cudaGetLastError();
        *no_device = true;
        return NULL;
    }
    if (device < 0 || device >= count) {
        snprintf(err, err_size, "no CUDA device %d (%d present)", device, count);
        *no_device = true;
        return NULL;
    }
    cudaDeviceProp prop;
    if (creation_failed(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", err,
                        err_size))
        return NULL;
    if (prop.major < 8) {
        snprintf(err, err_size,
                 "no usable CUDA device: %s has compute capability %d.%d, this build needs "
                 "8.0 or newer",
                 prop.name, prop.major, prop.minor);
        *no_device = true;
        return NULL;
    }
    if (creation_failed(cudaSetDevice(device), "cudaSetDevice", err, err_size))
        return NULL;
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, err_size, "out of memory creating the CUDA backend");
        return NULL;
    }
    cb->device = device;
    cb->sm_count = prop.multiProcessorCount;
    cb->cc_major = prop.major;
    cb->cc_minor = prop.minor;
    cb->smem_optin = prop.sharedMemPerBlockOptin;
    snprintf(cb->device_name, sizeof cb->device_name, "%.120s", prop.name);
    cb->bf16 = bf16;
    cb->attention_mode = NCTMC_CUDA_ATTENTION_AUTO;
    /* the fused block kernels (cuda_fused.cu): off unless asked for */
    const char *fused = getenv("NCTMC_CUDA_FUSED");
    cb->fused = fused && strcmp(fused, "1") == 0;
    /* graph capture (cuda_graph.cu; docs/dev/backend-modules.md): read once */
    const char *graphs = getenv("NCTMC_CUDA_GRAPHS");
    cb->graphs_on = graphs && strcmp(graphs, "1") == 0;
    /* the training loss's logits in bfloat16 (cuda_linear.cu, cuda_loss.cu;
     * docs/dev/backend-modules.md): read once */
    const char *bf16_logits = getenv("NCTMC_CUDA_BF16_LOGITS");
    cb->bf16_logits = bf16_logits && strcmp(bf16_logits, "1") == 0;
    cb->pending = NCTMC_OK;
    snprintf(cb->last_forward, sizeof cb->last_forward, "none yet");
    snprintf(cb->last_backward, sizeof cb->last_backward, "none yet");
    if (!start_libraries(cb, err, err_size)) {
        cuda_destroy(&cb->base);
        return NULL;
    }
    cuda_note_memory(cb);
    cb->base.ops = &cuda_ops;
    cb->base.name = bf16 ? "cuda-bf16" : "cuda";
    cb->base.n_threads = 1;
    cb->base.error[0] = '\0';
    return &cb->base;
}

extern "C" void cuda_backend_set_attention(nctmc_backend *be, nctmc_cuda_attention mode)
{
    cuda_of(be)->attention_mode = mode;
    cuda_graph_reset(be); /* recorded graphs ran the other implementation */
}

extern "C" void cuda_backend_set_bf16(nctmc_backend *be, bool bf16)
{
    cuda_backend *cb = cuda_of(be);
    cb->bf16 = bf16;
    cb->base.name = bf16 ? "cuda-bf16" : "cuda";
    cuda_graph_reset(be); /* recorded graphs ran the other precision */
}

extern "C" void cuda_backend_memory(nctmc_backend *be, size_t *peak_used, size_t *total)
{
    cuda_backend *cb = cuda_of(be);
    cuda_note_memory(cb);
    *peak_used = cb->peak_used;
    *total = cb->total;
}

extern "C" void cuda_backend_describe(nctmc_backend *be, char *buf, size_t size)
{
    cuda_backend *cb = cuda_of(be);
    char fused[64] = "fused kernels off";
    if (cb->fused)
        snprintf(fused, sizeof fused, "fused kernels on (%u GELU epilogue fallbacks)",
                 cb->fused_fallbacks);
    char graphs[400];
    cuda_graph_describe(cb, graphs, sizeof graphs);
    snprintf(buf, size, "%s (sm_%d%d, %d SMs), %s products%s, %s; attention forward: %s; "
             "backward: %s%s%s; %s",
             cb->device_name, cb->cc_major, cb->cc_minor, cb->sm_count,
             cb->bf16 ? "bf16" : "TF32", cb->bf16_logits ? ", bf16 logits" : "", fused, cb->last_forward, cb->last_backward,
             cb->dnn ? "" : "; ", cb->dnn ? "" : cb->dnn_reason, graphs);
}
