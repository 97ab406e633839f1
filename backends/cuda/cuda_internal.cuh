/*
 * cuda_internal.cuh — the CUDA backend's state, its error recording, the
 * scratch buffer, deterministic block reductions, and the operations each
 * .cu file of backends/cuda/ implements (see lib/backend/backend.h for what each
 * one computes).
 *
 * Errors. Operations are void. A failure (a CUDA, cuBLAS or cuDNN error,
 * or an argument the backend cannot serve) is recorded once in `pending`
 * with its message; later failures do not overwrite it; `synchronize`
 * reports and clears it. A kernel launch is checked with cudaGetLastError
 * right away; faults inside a kernel surface at the next synchronisation.
 *
 * Determinism. Every reduction has a fixed shape: a warp reduces with an
 * xor butterfly (each step adds two values that are then equal in both
 * lanes, so every lane ends with the same bits), a block combines its
 * warps' results in warp order, and work is cut into pieces whose
 * boundaries depend only on the shapes. No floating-point atomics.
 *
 * Calls go one way: cuda_backend.cu (the table of operations, creation and
 * teardown) calls the operation files and cuda_graph.cu; cuda_fused.cu (the
 * fused block operations) calls cuda_linear.cu, cuda_adaln.cu and
 * cuda_pointwise.cu; the operation files call cuda_memory.cu (scratch,
 * bf16 copies) and cuda_errors.cu; cuda_memory.cu calls cuda_errors.cu;
 * nothing calls back up into cuda_backend.cu.
 */
#ifndef NCTMC_CUDA_INTERNAL_CUH
#define NCTMC_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

#include "cuda_backend.h"

/* Entries of the cuBLASLt descriptor/algorithm cache and of the cuDNN
 * attention plan cache (each keyed by shape; a model uses a few dozen). */
#define CUDA_LT_CACHE 128
#define CUDA_SDPA_CACHE 16
/* Descriptors a cuDNN plan keeps alive (tensors, operation, graph, ...). */
#define CUDA_SDPA_DESCS 24
/* cuBLAS / cuBLASLt workspace. */
#define CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)
/* Threads per block of the row and elementwise kernels. */
#define CUDA_THREADS 256

typedef struct cuda_lt_key {
    int32_t trans_a, trans_b;
    int32_t bf16;      /* A and B in bfloat16 (else float32, TF32 math) */
    int32_t bias;      /* bias epilogue */
    int32_t epi;       /* CUDA_EPI_*: the GELU epilogues (NCTMC_CUDA_FUSED) */
    int32_t c16;       /* C in bfloat16 (bf16 logits), else float32 */
    int64_t m, n, k, lda, ldb, ldc;
    int32_t align_a, align_b, align_c; /* bytes */
} cuda_lt_key;

/* The GELU epilogues of the fused block operations: GELU with the
 * pre-activation saved (aux), GELU alone (aux would alias the output), and
 * the product times GELU'(aux). */
enum { CUDA_EPI_NONE = 0, CUDA_EPI_GELU_AUX, CUDA_EPI_GELU, CUDA_EPI_DGELU };

typedef struct cuda_lt_entry {
    bool used;
    bool ok;           /* cuBLASLt has an algorithm for it */
    cuda_lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} cuda_lt_entry;

typedef struct cuda_sdpa_plan {
    bool used;
    bool ok;           /* a deterministic engine exists: `plan` is valid */
    int32_t backward, bf16, with_stats;
    int32_t batch, seq_len, heads, head_dim;
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t keep[CUDA_SDPA_DESCS];
    int32_t n_keep;
    int64_t workspace_bytes;
    char reason[480];  /* why cuDNN declined (when !ok), with cuDNN's own detail */
} cuda_sdpa_plan;

/* Recorded graphs kept per backend (keyed by nctmc_graph_key; a trainer
 * uses one or two, a sampler one per batch shape). */
#define CUDA_GRAPH_CACHE 8

enum { CUDA_GRAPH_FREE, CUDA_GRAPH_SEEN, CUDA_GRAPH_READY, CUDA_GRAPH_FAILED };

typedef struct cuda_graph_entry {
    int state;                  /* CUDA_GRAPH_* */
    nctmc_graph_key key;
    uint64_t scratch_epoch;     /* cb->scratch_epoch when first seen */
    cudaGraphExec_t exec;       /* READY only */
} cuda_graph_entry;

typedef struct cuda_backend {
    nctmc_backend base;
    int device;
    int sm_count;
    int cc_major, cc_minor;
    size_t smem_optin;          /* shared memory a block may opt in to */
    size_t lcond_smem;          /* dynamic shared memory lcond_kernel may use now */
    size_t lcond_static_smem;   /* its static shared memory + 1; 0 until asked */
    /* The split L_cond kernel (cuda_loss.cu): 0 until the first lcond call
     * reads $NCTMC_CUDA_LCOND, then 1 (the default kernel) or 2 (split) */
    int lcond_mode;
    size_t lcond_split_smem;    /* dynamic shared memory lcond_split_kernel may use */
    size_t lcond_split_static;  /* its static shared memory + 1; 0 until asked */
    /* the same four for the kernels' bfloat16 instantiations */
    size_t lcond16_smem, lcond16_static_smem, lcond16_split_smem, lcond16_split_static;
    /* NCTMC_CUDA_BF16_LOGITS=1 at creation: linear_forward_bf16 accepts (the
     * training loss's logits in bfloat16, cuda_linear.cu, cuda_loss.cu) */
    bool bf16_logits;
    /* lcond_denoiser (cuda_denoiser.cu): 0 until its first call reads
     * $NCTMC_CUDA_LCOND_LINK, then 1 (declined) or 2 (fused) */
    int lcond_link_mode;
    size_t link_smem, link_static_smem;  /* as lcond_smem, lcond_static_smem */
    size_t peak_used, total;    /* device memory in use at most / in all (bytes) */
    char device_name[128];
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;          /* NULL when cuDNN could not start */
    char dnn_reason[160];
    void *blas_workspace;
    void *scratch;              /* grow-on-demand temporary memory */
    size_t scratch_bytes;
    bool bf16;
    nctmc_cuda_attention attention_mode;
    /* NCTMC_CUDA_FUSED=1 at creation: the fused block operations run their
     * fused kernels (GELU epilogues, adaLN with the gated residual); off,
     * they run the unfused sequence they name. fused_fallbacks counts the
     * epilogue products cuBLASLt had no algorithm for (run unfused). */
    bool fused;
    unsigned fused_fallbacks;
    char last_forward[520];     /* what the last attention calls ran */
    char last_backward[520];
    nctmc_status pending;       /* first recorded failure, or NCTMC_OK */
    char pending_msg[256];
    cuda_lt_entry lt_cache[CUDA_LT_CACHE];
    int lt_next;
    cuda_sdpa_plan sdpa_cache[CUDA_SDPA_CACHE];
    int sdpa_next;
    /* graph capture (cuda_graph.cu) */
    bool graphs_on;             /* NCTMC_CUDA_GRAPHS=1 at creation */
    uint64_t scratch_epoch;     /* counts reallocations of `scratch` */
    cuda_graph_entry graphs[CUDA_GRAPH_CACHE];
    int graph_next;
    cuda_graph_entry *capturing; /* the entry being captured, or NULL */
    int64_t graph_captures, graph_replays, graph_failures;
    char graph_reason[200];     /* why the last capture failed */
} cuda_backend;

static inline cuda_backend *cuda_of(nctmc_backend *be)
{
    return (cuda_backend *)be;
}

/* ---- errors (cuda_errors.cu) ------------------------------------------- */

/* Records a failure unless one is already pending. */
void cuda_fail(cuda_backend *cb, nctmc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records e (when not cudaSuccess) with `what`; returns e == cudaSuccess. */
bool cuda_check(cuda_backend *cb, cudaError_t e, const char *what);
bool cuda_check_blas(cuda_backend *cb, cublasStatus_t s, const char *what);
/* Checks the launch that just happened. */
static inline bool cuda_launched(cuda_backend *cb, const char *kernel)
{
    return cuda_check(cb, cudaGetLastError(), kernel);
}

/* ---- memory (cuda_memory.cu) ------------------------------------------- */

/* At least `bytes` of device memory, valid until the next call on this
 * backend that asks for scratch (an operation asks once and carves it up).
 * Growing waits for queued work. NULL (recorded) on failure. */
void *cuda_scratch(cuda_backend *cb, size_t bytes);
/* dst[i] = src[i] rounded to bfloat16. */
void cuda_to_bf16(cuda_backend *cb, int64_t n, const float *src, __nv_bfloat16 *dst);
/* Notes the device's memory in use after an allocation (the peak). */
void cuda_note_memory(cuda_backend *cb);
/* bytes rounded up to a multiple of 64. */
static inline size_t cuda_round64(size_t bytes)
{
    return (bytes + 63) / 64 * 64;
}

void *cuda_alloc(nctmc_backend *be, size_t bytes);
void cuda_free(nctmc_backend *be, void *ptr);
void cuda_upload(nctmc_backend *be, void *dst, const void *host_src, size_t bytes);
void cuda_download(nctmc_backend *be, void *host_dst, const void *src, size_t bytes);
void cuda_fill_zero(nctmc_backend *be, void *dst, size_t bytes);

/* ---- launch shapes ------------------------------------------------------ */

/* Blocks for n elements at `threads` per block, capped (grid-stride loops
 * cover the rest; elementwise results do not depend on the grid). */
static inline unsigned cuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    if (b > 65535 * 8)
        b = 65535 * 8;
    return (unsigned)b;
}

/* ---- deterministic reductions (device) ---------------------------------- */

template <typename T> __device__ __forceinline__ T cuda_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ __forceinline__ T cuda_warp_max(T v)
{
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32); every thread gets the
 * same bits. `shared` holds 32 values; the call synchronises the block. */
template <typename T> __device__ T cuda_block_sum(T v, T *shared)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = cuda_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    T t = lane < n_warps ? shared[lane] : T(0);
    return cuda_warp_sum(t);
}

template <typename T> __device__ T cuda_block_max(T v, T *shared)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = cuda_warp_max(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    T t = lane < n_warps ? shared[lane] : shared[0];
    return cuda_warp_max(t);
}

/* Whether n_rows rows fit a one-block-per-row grid (gridDim.x < 2^31);
 * records the failure when not. */
static inline bool cuda_rows_fit(cuda_backend *cb, int64_t n_rows, const char *what)
{
    if (n_rows > 0x7fffffff) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "%s: %lld rows", what, (long long)n_rows);
        return false;
    }
    return true;
}

/* ---- operations --------------------------------------------------------- */

/* cuda_linear.cu */
void cuda_linear_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                         const float *x, const float *w, const float *bias, float *y);
void cuda_linear_backward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                          const float *x, const float *w, const float *dy, float *dx,
                          bool accumulate_dx, float *dw, float *dbias, bool accumulate_params);
void cuda_lt_cache_free(cuda_backend *cb);
/* The bf16 logits' output projection (NCTMC_CUDA_BF16_LOGITS): y in
 * bfloat16, operands in bfloat16 whatever cb->bf16; false when the switch
 * is off. The backward takes dy in bfloat16. */
bool cuda_linear_forward_bf16(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const float *bias, void *y);
void cuda_linear_backward_bf16(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                               const float *x, const float *w, const void *dy, float *dx,
                               bool accumulate_dx, float *dw, float *dbias,
                               bool accumulate_params);
/* The GELU epilogue products (cuda_fused.cu's fused path). The forward
 * writes pre = x wᵀ + bias and, when it returns true, y = GELU(pre) (false:
 * cuBLASLt had no GELU algorithm; y is the caller's to compute). The
 * backward is linear_backward with accumulate_dx false and, when it returns
 * true, dx multiplied by GELU'(pre) (false: dx = dy w only). */
bool cuda_linear_gelu_epilogue(cuda_backend *cb, int64_t rows, int32_t in, int32_t out,
                               const float *x, const float *w, const float *bias, float *pre,
                               float *y);
bool cuda_linear_dgelu_epilogue(cuda_backend *cb, int64_t rows, int32_t in, int32_t out,
                                const float *x, const float *w, const float *dy,
                                const float *pre, float *dx, float *dw, float *dbias,
                                bool accumulate_params);

/* cuda_embedding.cu */
void cuda_embedding_forward(nctmc_backend *be, int64_t rows, int32_t dim, const int32_t *ids,
                            const float *table, float *out, bool accumulate);
void cuda_embedding_backward(nctmc_backend *be, int64_t rows, int32_t dim, int32_t n_entries,
                             const int32_t *ids, const float *dout, float *dtable,
                             bool accumulate);

/* cuda_pointwise.cu */
void cuda_timestep_embedding(nctmc_backend *be, int32_t batch, int32_t dim, const float *times,
                             float *out);
void cuda_silu_forward(nctmc_backend *be, int64_t n, const float *x, float *y);
void cuda_silu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                        float *dx, bool accumulate);
void cuda_gelu_forward(nctmc_backend *be, int64_t n, const float *x, float *y);
void cuda_gelu_backward(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                        float *dx);
void cuda_gated_residual_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                 const float *x, const float *y, const float *gate,
                                 int32_t mod_stride, float *out);
void cuda_gated_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                  int32_t dim, const float *y, const float *gate,
                                  int32_t mod_stride, const float *dx, float *dy, float *dgate);
void cuda_rotary_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                         int32_t head_dim, float base, float *qkv);
void cuda_rotary_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                          int32_t head_dim, float base, float *dqkv);

/* cuda_adaln.cu */
void cuda_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                        const float *x, const float *w, const float *shift, const float *scale,
                        int32_t mod_stride, float *y, float *mean, float *rstd);
void cuda_adaln_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                         const float *x, const float *w, const float *scale, int32_t mod_stride,
                         const float *mean, const float *rstd, const float *dy, float *dx,
                         bool accumulate_dx, float *dw, bool accumulate_dw, float *dshift,
                         float *dscale);
/* The fused kernels of residual_adaln_forward / adaln_residual_backward
 * (cuda_fused.cu's fused path; same arguments as the operations). */
void cuda_residual_adaln_fused(cuda_backend *cb, int64_t rows, int32_t seq_len, int32_t dim,
                               const float *x, const float *y, const float *gate,
                               const float *w, const float *shift, const float *scale,
                               int32_t mod_stride, float *out, float *u, float *mean,
                               float *rstd);
void cuda_adaln_residual_fused(cuda_backend *cb, int64_t rows, int32_t seq_len, int32_t dim,
                               const float *x, const float *w, const float *scale,
                               int32_t mod_stride, const float *mean, const float *rstd,
                               const float *dy, float *dx, float *dw, bool accumulate_dw,
                               float *dshift, float *dscale, const float *y_res,
                               const float *gate, float *dy_res, float *dgate);

/* cuda_fused.cu: the fused block operations, fused kernels when cb->fused,
 * else the sequence of the operations above that each names */
void cuda_linear_gelu_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const float *bias, float *pre,
                              float *y);
void cuda_linear_backward_gelu(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                               const float *x, const float *w, const float *dy,
                               const float *pre, float *dx, float *dw, float *dbias,
                               bool accumulate_params);
void cuda_residual_adaln_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                 const float *x, const float *y, const float *gate,
                                 const float *w, const float *shift, const float *scale,
                                 int32_t mod_stride, float *out, float *u, float *mean,
                                 float *rstd);
void cuda_adaln_residual_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                                  const float *x, const float *w, const float *scale,
                                  int32_t mod_stride, const float *mean, const float *rstd,
                                  const float *dy, float *dx, float *dw, bool accumulate_dw,
                                  float *dshift, float *dscale, const float *y_res,
                                  const float *gate, float *dy_res, float *dgate);

/* cuda_attention.cu */
size_t cuda_attention_saved_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                   int32_t heads, int32_t head_dim);
size_t cuda_attention_workspace_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                       int32_t heads, int32_t head_dim);
void cuda_attention_forward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                            int32_t head_dim, const float *qkv, float *out, float *saved,
                            float *workspace);
void cuda_attention_backward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                             int32_t head_dim, const float *qkv, const float *out,
                             float *saved, const float *dout, float *dqkv, float *workspace);
void cuda_sdpa_cache_free(cuda_backend *cb);

/* cuda_loss.cu */
void cuda_lcond(nctmc_backend *be, const nctmc_lcond_args *args);
void cuda_jump_output(nctmc_backend *be, const nctmc_jump_output_args *args);

/* cuda_denoiser.cu */
void cuda_denoiser_forward(nctmc_backend *be, const nctmc_denoiser_args *args);
void cuda_denoiser_backward(nctmc_backend *be, const nctmc_denoiser_args *args);
bool cuda_lcond_denoiser(nctmc_backend *be, const nctmc_lcond_denoiser_args *args);

/* cuda_optim.cu */
double cuda_sum_squares(nctmc_backend *be, int64_t n, const float *x);
void cuda_scale(nctmc_backend *be, int64_t n, float *x, float s);
void cuda_add(nctmc_backend *be, int64_t n, float *y, const float *x);
void cuda_adamw(nctmc_backend *be, int64_t n, float *param, const float *grad, float *m,
                float *v, float lr, float beta1, float beta2, float eps, float weight_decay,
                int64_t step);
void cuda_ema_update(nctmc_backend *be, int64_t n, float *ema, const float *param, float decay);

/* cuda_graph.cu */
int cuda_graph_begin(nctmc_backend *be, const nctmc_graph_key *key);
bool cuda_graph_end(nctmc_backend *be);
void cuda_graph_reset(nctmc_backend *be);
/* "graphs off", or on with their counts and the last failure's reason. */
void cuda_graph_describe(cuda_backend *cb, char *buf, size_t size);

/* cuda_sample.cu */
void cuda_sample_step(nctmc_backend *be, const nctmc_sample_step_args *args);

#endif /* NCTMC_CUDA_INTERNAL_CUH */
