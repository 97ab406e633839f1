/*
 * cuda_linear.cu — the linear layer on cuBLASLt: y = x wᵀ + b and its
 * backward products, in TF32 (float32 data, tensor-core math with float32
 * accumulation) or, in the backend's bf16 mode, on bfloat16 copies of the
 * operands with float32 accumulation and float32 outputs (the float32
 * weights stay the master copy).
 *
 * Row-major X[rows, in] is column-major Xᵀ with the same leading dimension,
 * so every product is written for cuBLAS's column-major convention:
 *   forward  Yᵀ[out, rows]  = W · Xᵀ     (A = w stored in×out, op T)
 *   dx       dXᵀ[in, rows]  = Wᵀ · dYᵀ   (A = w stored in×out, op N)
 *   dw       dWᵀ[in, out]   = Xᵀ · dY    (B = dy stored out×rows, op T)
 * The bias is a cuBLASLt epilogue where an algorithm offers it, else a
 * broadcast before the product. The bias gradient is a column sum in a
 * fixed two-stage order (in double), never atomics.
 *
 * The fused block operations (cuda_fused.cu, NCTMC_CUDA_FUSED) use the
 * GELU epilogues: GELU_AUX_BIAS forward (GELU of the product plus bias,
 * saving the pre-activation) and DGELU backward (dx times GELU'(pre)).
 * cuBLASLt's GELU is the tanh approximation, the model's GELU (PyTorch
 * treats its GELU epilogue as gelu(approximate="tanh")); its exact float
 * evaluation is cuBLASLt's, so it agrees with the model's to within
 * rounding, not bit for bit — test_cuda_fused measures the difference.
 *
 * bf16 logits (NCTMC_CUDA_BF16_LOGITS=1, cuda_loss.cu): linear_forward_bf16
 * writes Y in bfloat16 (a bfloat16 C/D layout, float32 accumulation and
 * bias epilogue, one rounding), and linear_backward_bf16 takes dY in
 * bfloat16 as it is (no copy); both multiply bfloat16 copies of x and w
 * whatever the bf16 mode, and the bias gradient sums the bfloat16 dY in
 * double as it does the float one.
 *
 * cuBLASLt's heuristic is asked once per shape (and operand alignment) and
 * its answer cached; a shape it has no algorithm for runs through
 * cublasGemmEx with the same types. cuBLAS gives the same bits run after
 * run on the same GPU model with one stream, which is how it is used.
 */
#include <string.h>

#include "cuda_internal.cuh"

/* Rows per partial sum of the bias gradient. */
#define DBIAS_CHUNK_ROWS 256
#define DBIAS_LANES 8

/* The largest power of two (<= 16) dividing the address and the stride. */
static int32_t operand_alignment(const void *p, int64_t ld, int32_t elem_bytes)
{
    uintptr_t a = (uintptr_t)p;
    int32_t al = 16;
    while (al > elem_bytes && ((a % (uintptr_t)al) != 0 || (ld * elem_bytes) % al != 0))
        al /= 2;
    return al;
}

static bool key_equal(const cuda_lt_key *a, const cuda_lt_key *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static void lt_entry_release(cuda_lt_entry *e)
{
    if (e->a)
        cublasLtMatrixLayoutDestroy(e->a);
    if (e->b)
        cublasLtMatrixLayoutDestroy(e->b);
    if (e->c)
        cublasLtMatrixLayoutDestroy(e->c);
    if (e->desc)
        cublasLtMatmulDescDestroy(e->desc);
    memset(e, 0, sizeof *e);
}

void cuda_lt_cache_free(cuda_backend *cb)
{
    for (int i = 0; i < CUDA_LT_CACHE; i++)
        if (cb->lt_cache[i].used)
            lt_entry_release(&cb->lt_cache[i]);
}

/* The cuBLASLt epilogue of a key. */
static cublasLtEpilogue_t epilogue_of(const cuda_lt_key *k)
{
    switch (k->epi) {
    case CUDA_EPI_GELU_AUX:
        return k->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case CUDA_EPI_GELU:
        return k->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case CUDA_EPI_DGELU:
        return CUBLASLT_EPILOGUE_DGELU;
    default:
        return k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* Builds the descriptors of a product and asks the heuristic for one
 * algorithm; e->ok says whether it found one. */
static void lt_entry_build(cuda_backend *cb, cuda_lt_entry *e, const cuda_lt_key *k)
{
    e->used = true;
    e->ok = false;
    e->key = *k;
    cublasComputeType_t compute = k->bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    cudaDataType_t ab = k->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&e->desc, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return;
    cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtEpilogue_t epi = epilogue_of(k);
    if (epi != CUBLASLT_EPILOGUE_DEFAULT)
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (k->bias) {
        cudaDataType_t bias_type = CUDA_R_32F;
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                       sizeof bias_type);
    }
    if (k->epi == CUDA_EPI_GELU_AUX || k->epi == CUDA_EPI_DGELU) {
        /* the pre-activation: float32 (the output's type), laid out as C */
        int64_t aux_ld = k->ldc;
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                       sizeof aux_ld);
    }
    uint64_t a_rows = k->trans_a ? k->k : k->m, a_cols = k->trans_a ? k->m : k->k;
    uint64_t b_rows = k->trans_b ? k->n : k->k, b_cols = k->trans_b ? k->k : k->n;
    if (cublasLtMatrixLayoutCreate(&e->a, ab, a_rows, a_cols, k->lda) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&e->b, ab, b_rows, b_cols, k->ldb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&e->c, k->c16 ? CUDA_R_16BF : CUDA_R_32F, (uint64_t)k->m,
                                   (uint64_t)k->n, k->ldc) !=
            CUBLAS_STATUS_SUCCESS)
        return;
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return;
    uint64_t ws = CUDA_BLAS_WORKSPACE_BYTES;
    uint32_t al_a = (uint32_t)k->align_a, al_b = (uint32_t)k->align_b,
             al_c = (uint32_t)k->align_c;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                         sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                         sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                         sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                         sizeof al_c);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(cb->lt, e->desc, e->a, e->b, e->c, e->c,
                                                      pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        e->algo = result.algo;
        e->ok = true;
    }
}

static cuda_lt_entry *lt_lookup(cuda_backend *cb, const cuda_lt_key *k)
{
    for (int i = 0; i < CUDA_LT_CACHE; i++)
        if (cb->lt_cache[i].used && key_equal(&cb->lt_cache[i].key, k))
            return &cb->lt_cache[i];
    cuda_lt_entry *e = &cb->lt_cache[cb->lt_next];
    cb->lt_next = (cb->lt_next + 1) % CUDA_LT_CACHE;
    if (e->used)
        lt_entry_release(e);
    lt_entry_build(cb, e, k);
    return e;
}

/* C = bias broadcast over the columns (C is m x n column-major, ldc). */
__global__ void broadcast_bias_kernel(int64_t m, int64_t n, int64_t ldc,
                                      const float *__restrict__ bias, float *__restrict__ c)
{
    int64_t total = m * n, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t col = i / m, row = i % m;
        c[col * ldc + row] = bias[row];
    }
}

/* C = beta C for an empty inner dimension. */
__global__ void scale_matrix_kernel(int64_t m, int64_t n, int64_t ldc, float beta,
                                    float *__restrict__ c)
{
    int64_t total = m * n, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t col = i / m, row = i % m;
        float *p = c + col * ldc + row;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

static void broadcast_bias(cuda_backend *cb, int64_t m, int64_t n, int64_t ldc,
                           const float *bias, float *c)
{
    broadcast_bias_kernel<<<cuda_blocks(m * n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        m, n, ldc, bias, c);
    cuda_launched(cb, "broadcast_bias");
}

/* The key of a product (operand alignments from the pointers). */
static cuda_lt_key make_key(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, bool bf16,
                            const float *c, int64_t ldc, const float *bias, int32_t epi)
{
    int32_t elem = bf16 ? 2 : 4;
    cuda_lt_key key;
    memset(&key, 0, sizeof key);
    key.trans_a = trans_a;
    key.trans_b = trans_b;
    key.bf16 = bf16;
    key.bias = bias != NULL;
    key.epi = epi;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.align_a = operand_alignment(a, lda, elem);
    key.align_b = operand_alignment(b, ldb, elem);
    key.align_c = operand_alignment(c, ldc, 4);
    return key;
}

/*
 * The product with a GELU epilogue (epi a CUDA_EPI_* other than NONE), beta
 * 0: C = GELU(op(A) op(B) + bias) with aux = the pre-activation (GELU_AUX),
 * C = GELU(op(A) op(B) + bias) (GELU), or C = (op(A) op(B)) * GELU'(aux)
 * (DGELU, no bias); aux is float32 laid out as C, 16-byte aligned. Returns
 * false, launching nothing, when cuBLASLt has no algorithm for it.
 */
static bool gemm_epilogue(cuda_backend *cb, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                          bool bf16, float *c, int64_t ldc, const float *bias, int32_t epi,
                          void *aux)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return false;
    /* cuBLASLt's GELU aux wants 16-byte alignment and a leading dimension
     * that is a multiple of 8; other shapes run unfused rather than fail */
    if (aux && (operand_alignment(aux, ldc, 4) < 16 || ldc % 8 != 0))
        return false;
    cuda_lt_key key = make_key(trans_a, trans_b, m, n, k, a, lda, b, ldb, bf16, c, ldc, bias, epi);
    cuda_lt_entry *e = lt_lookup(cb, &key);
    if (!e->ok)
        return false;
    if (bias)
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias);
    if (aux)
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux);
    const float alpha = 1.0f, beta = 0.0f;
    cuda_check_blas(cb,
                    cublasLtMatmul(cb->lt, e->desc, &alpha, a, e->a, b, e->b, &beta, c, e->c, c,
                                   e->c, &e->algo, cb->blas_workspace, CUDA_BLAS_WORKSPACE_BYTES,
                                   cb->stream),
                    "cublasLtMatmul (GELU epilogue)");
    return true;
}

/*
 * C[m x n] (column-major, ldc) = op(A) op(B) + beta C, or, with a bias,
 * = op(A) op(B) + bias[m] broadcast over the columns (beta then 0).
 * A and B are float32 (TF32 math) or, with bf16, bfloat16.
 */
static void gemm(cuda_backend *cb, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const void *a, int64_t lda, const void *b, int64_t ldb, bool bf16, float beta,
                 float *c, int64_t ldc, const float *bias)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        if (bias)
            broadcast_bias(cb, m, n, ldc, bias, c);
        else {
            scale_matrix_kernel<<<cuda_blocks(m * n, CUDA_THREADS), CUDA_THREADS, 0,
                                  cb->stream>>>(m, n, ldc, beta, c);
            cuda_launched(cb, "scale_matrix");
        }
        return;
    }
    cuda_lt_key key = make_key(trans_a, trans_b, m, n, k, a, lda, b, ldb, bf16, c, ldc, bias,
                               CUDA_EPI_NONE);
    const float alpha = 1.0f;
    cuda_lt_entry *e = lt_lookup(cb, &key);
    if (!e->ok && bias) {
        /* no algorithm with the epilogue: bias first, then accumulate */
        broadcast_bias(cb, m, n, ldc, bias, c);
        beta = 1.0f;
        bias = NULL;
        key.bias = 0;
        e = lt_lookup(cb, &key);
    }
    if (e->ok) {
        if (bias)
            cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias);
        cuda_check_blas(cb,
                        cublasLtMatmul(cb->lt, e->desc, &alpha, a, e->a, b, e->b, &beta, c, e->c,
                                       c, e->c, &e->algo, cb->blas_workspace,
                                       CUDA_BLAS_WORKSPACE_BYTES, cb->stream),
                        "cublasLtMatmul");
        return;
    }
    cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t compute = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    cuda_check_blas(cb,
                    cublasGemmEx(cb->blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, (int)m, (int)n, (int)k,
                                 &alpha, a, ab, (int)lda, b, ab, (int)ldb, &beta, c, CUDA_R_32F,
                                 (int)ldc, compute, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
}

/* C (bfloat16) = bias (rounded to bfloat16) broadcast over the columns,
 * or 0 without a bias. */
__global__ void broadcast_bias16_kernel(int64_t m, int64_t n, int64_t ldc,
                                        const float *__restrict__ bias,
                                        __nv_bfloat16 *__restrict__ c)
{
    int64_t total = m * n, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t col = i / m, row = i % m;
        c[col * ldc + row] = __float2bfloat16_rn(bias ? bias[row] : 0.0f);
    }
}

/*
 * The bf16 logits' product: C[m x n] (column-major, ldc, bfloat16) =
 * op(A) op(B) + bias[m], A and B bfloat16, accumulated in float32 and
 * rounded once to bfloat16 (the bias an epilogue in float32; without an
 * algorithm for it, the bias rounded to bfloat16 is broadcast first).
 */
static void gemm_out16(cuda_backend *cb, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                       __nv_bfloat16 *c, int64_t ldc, const float *bias)
{
    if (m <= 0 || n <= 0)
        return;
    float beta = 0.0f;
    if (k <= 0 || bias) {
        cuda_lt_key probe = make_key(trans_a, trans_b, m, n, k, a, lda, b, ldb, true,
                                     (const float *)c, ldc, bias, CUDA_EPI_NONE);
        probe.c16 = 1;
        probe.align_c = operand_alignment(c, ldc, 2);
        if (k <= 0 || !lt_lookup(cb, &probe)->ok) {
            broadcast_bias16_kernel<<<cuda_blocks(m * n, CUDA_THREADS), CUDA_THREADS, 0,
                                      cb->stream>>>(m, n, ldc, bias, c);
            cuda_launched(cb, "broadcast_bias16");
            if (k <= 0)
                return;
            bias = NULL;
            beta = 1.0f;
        }
    }
    cuda_lt_key key = make_key(trans_a, trans_b, m, n, k, a, lda, b, ldb, true,
                               (const float *)c, ldc, bias, CUDA_EPI_NONE);
    key.c16 = 1;
    key.align_c = operand_alignment(c, ldc, 2);
    const float alpha = 1.0f;
    cuda_lt_entry *e = lt_lookup(cb, &key);
    if (e->ok) {
        if (bias)
            cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias);
        cuda_check_blas(cb,
                        cublasLtMatmul(cb->lt, e->desc, &alpha, a, e->a, b, e->b, &beta, c, e->c,
                                       c, e->c, &e->algo, cb->blas_workspace,
                                       CUDA_BLAS_WORKSPACE_BYTES, cb->stream),
                        "cublasLtMatmul (bf16 output)");
        return;
    }
    cuda_check_blas(cb,
                    cublasGemmEx(cb->blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, (int)m, (int)n, (int)k,
                                 &alpha, a, CUDA_R_16BF, (int)lda, b, CUDA_R_16BF, (int)ldb,
                                 &beta, c, CUDA_R_16BF, (int)ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx (bf16 output)");
}

/* cublasGemmEx takes int dimensions. */
static bool fits_int(cuda_backend *cb, int64_t rows)
{
    if (rows > 0x7fffffff) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "linear: %lld rows exceed cuBLAS's range",
                  (long long)rows);
        return false;
    }
    return true;
}

/* The forward product's operands: x and w themselves (TF32) or, in bf16
 * mode, bfloat16 copies in scratch. False (recorded) when scratch failed. */
static bool operands_as(cuda_backend *cb, bool bf16, int64_t rows, int32_t in, int32_t out,
                        const float *x, const float *w, const void **xa, const void **wa)
{
    *xa = x;
    *wa = w;
    if (!bf16)
        return true;
    size_t x_bytes = cuda_round64((size_t)rows * (size_t)in * 2);
    size_t w_bytes = cuda_round64((size_t)out * (size_t)in * 2);
    char *s = (char *)cuda_scratch(cb, x_bytes + w_bytes);
    if (!s)
        return false;
    __nv_bfloat16 *x16 = (__nv_bfloat16 *)s, *w16 = (__nv_bfloat16 *)(s + x_bytes);
    cuda_to_bf16(cb, rows * in, x, x16);
    cuda_to_bf16(cb, (int64_t)out * in, w, w16);
    *xa = x16;
    *wa = w16;
    return true;
}

static bool forward_operands(cuda_backend *cb, int64_t rows, int32_t in, int32_t out,
                             const float *x, const float *w, const void **xa, const void **wa)
{
    return operands_as(cb, cb->bf16, rows, in, out, x, w, xa, wa);
}

void cuda_linear_forward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                         const float *x, const float *w, const float *bias, float *y)
{
    cuda_backend *cb = cuda_of(be);
    const void *xa, *wa;
    if (rows <= 0 || out <= 0 || !fits_int(cb, rows) ||
        !forward_operands(cb, rows, in, out, x, w, &xa, &wa))
        return;
    gemm(cb, true, false, out, rows, in, wa, in, xa, in, cb->bf16, 0.0f, y, out, bias);
}

bool cuda_linear_forward_bf16(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const float *bias, void *y)
{
    cuda_backend *cb = cuda_of(be);
    if (!cb->bf16_logits)
        return false;
    const void *xa, *wa;
    if (rows <= 0 || out <= 0 || !fits_int(cb, rows) ||
        !operands_as(cb, true, rows, in, out, x, w, &xa, &wa))
        return true;
    gemm_out16(cb, true, false, out, rows, in, wa, in, xa, in, (__nv_bfloat16 *)y, out, bias);
    return true;
}

bool cuda_linear_gelu_epilogue(cuda_backend *cb, int64_t rows, int32_t in, int32_t out,
                               const float *x, const float *w, const float *bias, float *pre,
                               float *y)
{
    const void *xa, *wa;
    if (rows <= 0 || out <= 0 || !fits_int(cb, rows) ||
        !forward_operands(cb, rows, in, out, x, w, &xa, &wa))
        return true; /* nothing to compute, or the failure is recorded */
    bool aux = pre != y;
    if (gemm_epilogue(cb, true, false, out, rows, in, wa, in, xa, in, cb->bf16, y, out, bias,
                      aux ? CUDA_EPI_GELU_AUX : CUDA_EPI_GELU, aux ? pre : NULL))
        return true;
    gemm(cb, true, false, out, rows, in, wa, in, xa, in, cb->bf16, 0.0f, pre, out, bias);
    return false;
}

/* A gradient as double, from float32 or bfloat16 (bf16 logits). */
__device__ __forceinline__ double dy_value(float v)
{
    return (double)v;
}
__device__ __forceinline__ double dy_value(__nv_bfloat16 v)
{
    return (double)__bfloat162float(v);
}

/* Stage 1: partial[chunk][j] = sum over the chunk's rows of dy[r][j] in
 * double; a block is 32 columns x DBIAS_LANES row lanes, the lanes' sums
 * combined in lane order. */

template <typename T>
__global__ void dbias_partial_kernel(int64_t rows, int32_t cols, const T *__restrict__ dy,
                                     double *__restrict__ partial)
{
    __shared__ double lanes[DBIAS_LANES][33];
    int32_t j = (int32_t)blockIdx.x * 32 + (int32_t)threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * DBIAS_CHUNK_ROWS;
    int64_t r1 = r0 + DBIAS_CHUNK_ROWS < rows ? r0 + DBIAS_CHUNK_ROWS : rows;
    double acc = 0.0;
    if (j < cols)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += DBIAS_LANES)
            acc += dy_value(dy[r * cols + j]);
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        double t = 0.0;
        for (int l = 0; l < DBIAS_LANES; l++)
            t += lanes[l][threadIdx.x];
        partial[(int64_t)blockIdx.y * cols + j] = t;
    }
}

/* Stage 2: dbias[j] (+)= sum over chunks, in chunk order. */
__global__ void dbias_final_kernel(int64_t n_chunks, int32_t cols,
                                   const double *__restrict__ partial, float *__restrict__ dbias,
                                   bool accumulate)
{
    int32_t j = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= cols)
        return;
    double s = 0.0;
    for (int64_t c = 0; c < n_chunks; c++)
        s += partial[c * cols + j];
    dbias[j] = accumulate ? (float)((double)dbias[j] + s) : (float)s;
}

template <typename T>
static void bias_gradient(cuda_backend *cb, int64_t rows, int32_t out, const T *dy,
                          float *dbias, bool accumulate, double *partial)
{
    int64_t n_chunks = (rows + DBIAS_CHUNK_ROWS - 1) / DBIAS_CHUNK_ROWS;
    if (n_chunks > 65535) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "linear: %lld rows exceed the bias reduction",
                  (long long)rows);
        return;
    }
    dim3 grid((unsigned)((out + 31) / 32), (unsigned)n_chunks);
    dim3 block(32, DBIAS_LANES);
    dbias_partial_kernel<T><<<grid, block, 0, cb->stream>>>(rows, out, dy, partial);
    cuda_launched(cb, "dbias_partial");
    dbias_final_kernel<<<(out + CUDA_THREADS - 1) / CUDA_THREADS, CUDA_THREADS, 0, cb->stream>>>(
        n_chunks, out, partial, dbias, accumulate);
    cuda_launched(cb, "dbias_final");
}

/* linear_backward; with `pre`, dx (overwritten) through the DGELU
 * epilogue where cuBLASLt has it: returns whether dx got GELU'(pre).
 * With dy16 (bf16 logits' gradients) dy is NULL and the products take
 * dy16 itself, x and w in bfloat16, whatever cb->bf16. */
static bool linear_backward_run(cuda_backend *cb, int64_t rows, int32_t in, int32_t out,
                                const float *x, const float *w, const float *dy, float *dx,
                                bool accumulate_dx, float *dw, float *dbias,
                                bool accumulate_params, const float *pre,
                                const __nv_bfloat16 *dy16 = NULL)
{
    if (rows <= 0 || !fits_int(cb, rows))
        return true;
    bool bf16 = cb->bf16 || dy16;
    int64_t n_chunks = (rows + DBIAS_CHUNK_ROWS - 1) / DBIAS_CHUNK_ROWS;
    size_t partial_bytes = dbias ? cuda_round64((size_t)n_chunks * (size_t)out * 8) : 0;
    size_t x_bytes = bf16 && dw ? cuda_round64((size_t)rows * (size_t)in * 2) : 0;
    size_t w_bytes = bf16 && dx ? cuda_round64((size_t)out * (size_t)in * 2) : 0;
    size_t dy_bytes =
        bf16 && !dy16 && (dx || dw) ? cuda_round64((size_t)rows * (size_t)out * 2) : 0;
    char *s = NULL;
    if (partial_bytes + x_bytes + w_bytes + dy_bytes > 0 &&
        !(s = (char *)cuda_scratch(cb, partial_bytes + x_bytes + w_bytes + dy_bytes)))
        return true; /* recorded */
    const void *xa = x, *wa = w, *dya = dy;
    if (bf16) {
        __nv_bfloat16 *x16 = (__nv_bfloat16 *)(s + partial_bytes);
        __nv_bfloat16 *w16 = (__nv_bfloat16 *)(s + partial_bytes + x_bytes);
        __nv_bfloat16 *dy_copy = (__nv_bfloat16 *)(s + partial_bytes + x_bytes + w_bytes);
        if (dy16) {
            dya = dy16;
        } else if (dx || dw) {
            cuda_to_bf16(cb, rows * out, dy, dy_copy);
            dya = dy_copy;
        }
        if (dw) {
            cuda_to_bf16(cb, rows * in, x, x16);
            xa = x16;
        }
        if (dx) {
            cuda_to_bf16(cb, (int64_t)out * in, w, w16);
            wa = w16;
        }
    }
    bool dgelu = false;
    if (dx && pre)
        dgelu = gemm_epilogue(cb, false, false, in, rows, out, wa, in, dya, out, bf16, dx, in,
                              NULL, CUDA_EPI_DGELU, (void *)pre);
    if (dx && !dgelu)
        gemm(cb, false, false, in, rows, out, wa, in, dya, out, bf16, accumulate_dx ? 1.0f : 0.0f,
             dx, in, NULL);
    if (dw)
        gemm(cb, false, true, in, out, rows, xa, in, dya, out, bf16,
             accumulate_params ? 1.0f : 0.0f, dw, in, NULL);
    if (dbias && dy16)
        bias_gradient(cb, rows, out, dy16, dbias, accumulate_params, (double *)s);
    else if (dbias)
        bias_gradient(cb, rows, out, dy, dbias, accumulate_params, (double *)s);
    return dgelu;
}

void cuda_linear_backward_bf16(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                               const float *x, const float *w, const void *dy, float *dx,
                               bool accumulate_dx, float *dw, float *dbias,
                               bool accumulate_params)
{
    linear_backward_run(cuda_of(be), rows, in, out, x, w, NULL, dx, accumulate_dx, dw, dbias,
                        accumulate_params, NULL, (const __nv_bfloat16 *)dy);
}

void cuda_linear_backward(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                          const float *x, const float *w, const float *dy, float *dx,
                          bool accumulate_dx, float *dw, float *dbias, bool accumulate_params)
{
    linear_backward_run(cuda_of(be), rows, in, out, x, w, dy, dx, accumulate_dx, dw, dbias,
                        accumulate_params, NULL);
}

bool cuda_linear_dgelu_epilogue(cuda_backend *cb, int64_t rows, int32_t in, int32_t out,
                                const float *x, const float *w, const float *dy,
                                const float *pre, float *dx, float *dw, float *dbias,
                                bool accumulate_params)
{
    return linear_backward_run(cb, rows, in, out, x, w, dy, dx, false, dw, dbias,
                               accumulate_params, pre);
}
