/*
 * cuda_attention.cu — full bidirectional softmax attention, forward and
 * backward: cuDNN's fused SDPA operation where cuDNN serves the shape, the
 * backend's own kernels elsewhere.
 *
 * cuDNN path. The operations CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR
 * (cuDNN >= 9.17) are built through the backend graph API, one execution
 * plan per (direction, precision, shape) kept in a small cache, with only
 * engines whose numerical notes do not say NONDETERMINISTIC. cuDNN's fused
 * attention takes float16 or bfloat16, so q, k, v (and o, do) are converted
 * into half-precision copies laid out as the packed qkv rows are (cuDNN
 * reads them through strides; head h at columns h*D), with float32
 * accumulation inside. In the backend's TF32 mode the copies are float16
 * (10 mantissa bits, as TF32); to keep small gradients out of float16's
 * subnormal range, dO is multiplied by a power of two chosen from its
 * largest magnitude and dQ, dK, dV by its inverse — exact, since the
 * backward pass is linear in dO. In bf16 mode the copies are bfloat16.
 * The statistics cuDNN keeps for the backward pass (the natural-log
 * log-sum-exp of each scaled score row) are exactly what the fallback
 * keeps, so either direction may run on either path.
 *
 * The backward operation. The H200 run (cuDNN 9.19, sm_90) never got a
 * backward plan: the graph's finalisation failed with BAD_PARAM
 * ("outputGraph.buildDAG()", cut short by a 96-byte buffer then). What the
 * public record says: cudnn-frontend itself never builds
 * OPERATION_SDPA_BWD (its backward is the composite graph of matmul,
 * pointwise and reduction operations that the fused-attention engines
 * pattern-match); the one program that builds it by hand found engines
 * for it only on Blackwell; another found none on sm_100/sm_121 in
 * 9.24-9.26; and the frontend's routing to it (with SM80/SM90 support in
 * the backend) is still being added upstream. Nothing in this graph breaks
 * a documented constraint of the backward (bf16 or fp16 q, k, v, o, dO, dQ,
 * dK, dV with the head dimension innermost, D a multiple of 8 up to 256;
 * float32 Stats [B, H, L, 1] from the forward with its statistics; the
 * scale a float by value; no mask, bias or dropout; L needs no padding).
 * So on Hopper the backward runs the fallback, and the way to cuDNN's
 * backward there is the composite graph (with its deterministic mode),
 * not this operation. The reason a plan was not made now carries cuDNN's
 * version, the failing step and cuDNN's full last error string (describe
 * shows it; test_cuda_fused prints it), so a run names the cause.
 *
 * Fallback path (any shape; always with NCTMC_CUDA_ATTENTION_FALLBACK).
 * Materialised attention in float32 on TF32 batched products: q, k, v (and
 * dO) are gathered head-major, S = scale Q Kᵀ for a chunk of sequences at a
 * time, a row kernel turns S into P (keeping log-sum-exp), O = P V. The
 * backward pass recomputes P from S and the saved log-sum-exp (renormalised
 * by its own sum, so it does not depend on which path wrote the
 * statistics), takes dP = dO Vᵀ, dS = P (dP - rowsum(P dP)) in the same
 * row kernel, then dV = Pᵀ dO, dQ = scale dS K, dK = scale dS ᵀ Q. Rows
 * reduce with fixed block trees; products are cuBLAS (deterministic on one
 * stream).
 *
 * Memory: `saved` holds the [B, H, L] log-sum-exp; `workspace` holds the
 * half-precision or head-major copies (4 N d floats) and the fallback's
 * score matrices for one chunk of sequences, the chunk sized so that they
 * stay under FALLBACK_SCORE_BUDGET floats where one sequence allows.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"

/* Floats of the fallback's two score matrices per chunk (256 MiB). */
#define FALLBACK_SCORE_BUDGET ((size_t)64 << 20)
#define SOFTMAX_THREADS 128
/* Unique ids of the cuDNN graph's tensors. */
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_DO, UID_DQ, UID_DK, UID_DV };

/* ---- sizes -------------------------------------------------------------- */

static size_t round16(size_t floats)
{
    return (floats + 15) / 16 * 16;
}

/* Sequences per fallback chunk: depends on the shape only. */
static int32_t chunk_sequences(int32_t batch, int32_t seq_len, int32_t heads)
{
    size_t per_seq = 2 * (size_t)heads * (size_t)seq_len * (size_t)seq_len;
    size_t cb = FALLBACK_SCORE_BUDGET / (per_seq ? per_seq : 1);
    if (cb < 1)
        cb = 1;
    if (cb > (size_t)batch)
        cb = (size_t)batch;
    return (int32_t)cb;
}

/* The copies region: q, k, v, do head-major (fallback) or the float16
 * qkv, o, do and dqkv (cuDNN) — 4 N d floats either way, each piece
 * starting on 64 bytes. */
static size_t copies_floats(int32_t batch, int32_t seq_len, int32_t heads, int32_t head_dim)
{
    size_t nd = (size_t)batch * (size_t)seq_len * (size_t)heads * (size_t)head_dim;
    return 4 * round16(nd) + 64;
}

/* An upper bound of the fallback's score floats for every shape up to
 * this one (a smaller length can allow a larger chunk). */
static size_t scores_floats(int32_t batch, int32_t seq_len, int32_t heads)
{
    size_t per_seq = 2 * (size_t)heads * (size_t)seq_len * (size_t)seq_len;
    size_t all = per_seq * (size_t)batch;
    size_t cap = FALLBACK_SCORE_BUDGET > per_seq ? FALLBACK_SCORE_BUDGET : per_seq;
    return round16(all < cap ? all : cap) + 32;
}

size_t cuda_attention_saved_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                   int32_t heads, int32_t head_dim)
{
    (void)be;
    (void)head_dim;
    return (size_t)batch * (size_t)heads * (size_t)seq_len;
}

size_t cuda_attention_workspace_floats(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                       int32_t heads, int32_t head_dim)
{
    (void)be;
    return copies_floats(batch, seq_len, heads, head_dim) + scores_floats(batch, seq_len, heads) +
           64;
}

typedef struct att_shape {
    int32_t B, L, H, D;
    int64_t d;     /* H * D */
    int64_t N;     /* B * L */
    float scale;   /* 1 / sqrt(D) */
} att_shape;

static att_shape shape_of(int32_t batch, int32_t seq_len, int32_t heads, int32_t head_dim)
{
    att_shape s;
    s.B = batch;
    s.L = seq_len;
    s.H = heads;
    s.D = head_dim;
    s.d = (int64_t)heads * head_dim;
    s.N = (int64_t)batch * seq_len;
    s.scale = (float)(1.0 / sqrt((double)head_dim));
    return s;
}

/* ---- kernels shared by both paths --------------------------------------- */

#define GRID_STRIDE(i, n)                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* |x| as bits: for non-negative floats the integer order is the float
 * order, so an integer atomic max gives the exact maximum in any order. */
__global__ void amax_kernel(int64_t n, const float *__restrict__ x, unsigned *__restrict__ out)
{
    __shared__ unsigned sh[32];
    unsigned m = 0;
    GRID_STRIDE(i, n)
    {
        float a = fabsf(x[i]);
        unsigned bits = a == a ? __float_as_uint(a) : 0u;
        m = bits > m ? bits : m;
    }
    m = cuda_block_max(m, sh);
    if (threadIdx.x == 0)
        atomicMax(out, m);
}

/* The power of two that brings the largest |dO| near 2^12. */
__device__ __forceinline__ int grad_exponent(const unsigned *amax)
{
    float a = __uint_as_float(*amax);
    if (!(a > 0.0f) || isinf(a))
        return 0;
    int e;
    frexpf(a, &e);
    int k = 12 - e;
    return k < -100 ? -100 : (k > 100 ? 100 : k);
}

template <typename H> __device__ __forceinline__ H to_h(float v);
template <> __device__ __forceinline__ __half to_h<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 to_h<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
__device__ __forceinline__ float from_h(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float from_h(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

/* dst = src (times 2^k when amax is given) in half precision */
template <typename H>
__global__ void to_half_kernel(int64_t n, const float *__restrict__ src,
                               const unsigned *__restrict__ amax, H *__restrict__ dst)
{
    int k = amax ? grad_exponent(amax) : 0;
    GRID_STRIDE(i, n)
    dst[i] = to_h<H>(ldexpf(src[i], k));
}

/* dst = src (times 2^-k when amax is given) in float32 */
template <typename H>
__global__ void from_half_kernel(int64_t n, const H *__restrict__ src,
                                 const unsigned *__restrict__ amax, float *__restrict__ dst)
{
    int k = amax ? grad_exponent(amax) : 0;
    GRID_STRIDE(i, n)
    dst[i] = ldexpf(from_h(src[i]), -k);
}

/* ---- cuDNN plans -------------------------------------------------------- */

typedef struct plan_builder {
    cuda_sdpa_plan *plan;
    cudnnHandle_t dnn;
    bool failed;
} plan_builder;

/* reason = "cuDNN <version> <step>: <status>: <cuDNN's last error string>",
 * the detail on one line (cudnnGetLastErrorString may hold several). */
static void dnn_reason(char *reason, size_t size, const char *step, cudnnStatus_t s)
{
    char detail[1024] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    for (char *c = detail; *c; c++)
        if (*c == '\n' || *c == '\r' || *c == '\t')
            *c = ' ';
    snprintf(reason, size, "cuDNN %zu %s: %s%s%.400s", cudnnGetVersion(), step,
             cudnnGetErrorString(s), detail[0] ? ": " : "", detail);
}

/* Records the first failing step with cuDNN's own message. */
static bool dnn_ok(plan_builder *pb, cudnnStatus_t s, const char *step)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return true;
    if (!pb->failed)
        dnn_reason(pb->plan->reason, sizeof pb->plan->reason, step, s);
    pb->failed = true;
    return false;
}

static cudnnBackendDescriptor_t make_desc(plan_builder *pb, cudnnBackendDescriptorType_t type,
                                          const char *step)
{
    cudnnBackendDescriptor_t d = NULL;
    if (pb->failed || pb->plan->n_keep >= CUDA_SDPA_DESCS)
        return NULL;
    if (!dnn_ok(pb, cudnnBackendCreateDescriptor(type, &d), step))
        return NULL;
    pb->plan->keep[pb->plan->n_keep++] = d;
    return d;
}

static void set_attr(plan_builder *pb, cudnnBackendDescriptor_t d,
                     cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                     int64_t count, const void *value, const char *step)
{
    if (!pb->failed && d)
        dnn_ok(pb, cudnnBackendSetAttribute(d, name, type, count, value), step);
}

static void finalize(plan_builder *pb, cudnnBackendDescriptor_t d, const char *step)
{
    if (!pb->failed && d)
        dnn_ok(pb, cudnnBackendFinalize(d), step);
}

static cudnnBackendDescriptor_t make_tensor(plan_builder *pb, int64_t uid, cudnnDataType_t type,
                                            const int64_t dims[4], const int64_t strides[4],
                                            bool by_value)
{
    cudnnBackendDescriptor_t t = make_desc(pb, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    int64_t alignment = 16;
    set_attr(pb, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    set_attr(pb, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set_attr(pb, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    set_attr(pb, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    set_attr(pb, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment,
             "tensor alignment");
    if (by_value) {
        bool yes = true;
        set_attr(pb, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes,
                 "tensor by value");
    }
    finalize(pb, t, "tensor finalize");
    return t;
}

/* What an engine configuration's numerical notes say. */
enum { ENGINE_DETERMINISTIC, ENGINE_NONDETERMINISTIC, ENGINE_NOTES_UNREADABLE };

static int engine_determinism(cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t engine = NULL;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) !=
        CUDNN_STATUS_SUCCESS)
        return ENGINE_NOTES_UNREADABLE;
    int verdict = ENGINE_NOTES_UNREADABLE;
    int64_t got = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &got, &engine) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got,
                                 notes) == CUDNN_STATUS_SUCCESS) {
        verdict = ENGINE_DETERMINISTIC;
        for (int64_t i = 0; i < got && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
            if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
                verdict = ENGINE_NONDETERMINISTIC;
    }
    cudnnBackendDestroyDescriptor(engine);
    return verdict;
}

/* Asks the heuristics (mode A, then the fallback list) for engine
 * configurations and keeps the first deterministic one that finalises (an
 * engine whose notes cannot be read is not taken either). */
static void choose_engine(plan_builder *pb, cudnnBackendDescriptor_t graph)
{
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int offered = 0, nondeterministic = 0, unreadable = 0, failed = 0;
    char heur_failure[320] = ""; /* cuDNN's word on a heuristics query that failed */
    for (int mi = 0; mi < 2 && !pb->failed && !pb->plan->plan; mi++) {
        cudnnBackendDescriptor_t heur = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) !=
            CUDNN_STATUS_SUCCESS)
            break;
        int64_t count = 0;
        cudnnStatus_t hs = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
        if (hs == CUDNN_STATUS_SUCCESS)
            hs = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE,
                                          1, &modes[mi]);
        if (hs == CUDNN_STATUS_SUCCESS)
            hs = cudnnBackendFinalize(heur);
        if (hs == CUDNN_STATUS_SUCCESS)
            hs = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
        bool heur_ok = hs == CUDNN_STATUS_SUCCESS;
        if (!heur_ok && !heur_failure[0])
            dnn_reason(heur_failure, sizeof heur_failure,
                       mi == 0 ? "heuristics (mode A)" : "heuristics (fallback)", hs);
        if (heur_ok && count > 0) {
            if (count > 16)
                count = 16;
            cudnnBackendDescriptor_t cfgs[16];
            int64_t made = 0;
            for (; made < count; made++)
                if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                 &cfgs[made]) != CUDNN_STATUS_SUCCESS)
                    break;
            int64_t got = 0;
            if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &got, cfgs) !=
                CUDNN_STATUS_SUCCESS)
                got = 0;
            for (int64_t i = 0; i < got && i < made && !pb->plan->plan; i++) {
                offered++;
                int verdict = engine_determinism(cfgs[i]);
                nondeterministic += verdict == ENGINE_NONDETERMINISTIC;
                unreadable += verdict == ENGINE_NOTES_UNREADABLE;
                if (verdict != ENGINE_DETERMINISTIC)
                    continue;
                cudnnBackendDescriptor_t plan = NULL;
                if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                                 &plan) != CUDNN_STATUS_SUCCESS)
                    continue;
                if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                             CUDNN_TYPE_HANDLE, 1, &pb->dnn) ==
                        CUDNN_STATUS_SUCCESS &&
                    cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]) ==
                        CUDNN_STATUS_SUCCESS &&
                    cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS) {
                    pb->plan->plan = plan;
                    /* the plan's configuration stays alive with it */
                    if (pb->plan->n_keep < CUDA_SDPA_DESCS) {
                        pb->plan->keep[pb->plan->n_keep++] = cfgs[i];
                        cfgs[i] = NULL;
                    }
                } else {
                    failed++;
                    cudnnBackendDestroyDescriptor(plan);
                }
            }
            for (int64_t i = 0; i < made; i++)
                if (cfgs[i])
                    cudnnBackendDestroyDescriptor(cfgs[i]);
        }
        cudnnBackendDestroyDescriptor(heur);
    }
    if (!pb->failed && !pb->plan->plan) {
        snprintf(pb->plan->reason, sizeof pb->plan->reason,
                 "cuDNN: no usable engine for this SDPA graph (%d offered: %d nondeterministic, "
                 "%d with unreadable notes, %d failed to finalise)%s%.300s",
                 offered, nondeterministic, unreadable, failed, heur_failure[0] ? "; " : "",
                 heur_failure);
        pb->failed = true;
    }
}

/* Dimensions [B, H, L, D] with the strides of packed rows of `row` floats
 * whose head h starts at column h * D. */
static void row_layout(const att_shape *s, int64_t row, int64_t dims[4], int64_t strides[4])
{
    dims[0] = s->B;
    dims[1] = s->H;
    dims[2] = s->L;
    dims[3] = s->D;
    strides[0] = (int64_t)s->L * row;
    strides[1] = s->D;
    strides[2] = row;
    strides[3] = 1;
}

static void build_plan(cuda_backend *cb, cuda_sdpa_plan *p, const att_shape *s)
{
    plan_builder pb = {p, cb->dnn, false};
    cudnnDataType_t io = p->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    int64_t dims[4], qkv_strides[4], o_strides[4];
    row_layout(s, 3 * s->d, dims, qkv_strides);
    row_layout(s, s->d, dims, o_strides);
    int64_t stat_dims[4] = {s->B, s->H, s->L, 1};
    int64_t stat_strides[4] = {(int64_t)s->H * s->L, s->L, 1, 1};
    int64_t one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t q = make_tensor(&pb, UID_Q, io, dims, qkv_strides, false);
    cudnnBackendDescriptor_t k = make_tensor(&pb, UID_K, io, dims, qkv_strides, false);
    cudnnBackendDescriptor_t v = make_tensor(&pb, UID_V, io, dims, qkv_strides, false);
    cudnnBackendDescriptor_t o = make_tensor(&pb, UID_O, io, dims, o_strides, false);
    cudnnBackendDescriptor_t scale =
        make_tensor(&pb, UID_SCALE, CUDNN_DATA_FLOAT, one, one, true);
    cudnnBackendDescriptor_t stats =
        p->with_stats
            ? make_tensor(&pb, UID_STATS, CUDNN_DATA_FLOAT, stat_dims, stat_strides, false)
            : NULL;
    cudnnBackendDescriptor_t op;
    const cudnnBackendAttributeType_t T = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (!p->backward) {
        op = make_desc(&pb, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SDPA forward");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, T, 1, &q, "forward q");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, T, 1, &k, "forward k");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, T, 1, &v, "forward v");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, T, 1, &o, "forward o");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, T, 1, &scale,
                 "forward scale");
        if (stats)
            set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, T, 1, &stats,
                     "forward stats");
        finalize(&pb, op, "SDPA forward finalize");
    } else {
        cudnnBackendDescriptor_t dout = make_tensor(&pb, UID_DO, io, dims, o_strides, false);
        cudnnBackendDescriptor_t dq = make_tensor(&pb, UID_DQ, io, dims, qkv_strides, false);
        cudnnBackendDescriptor_t dk = make_tensor(&pb, UID_DK, io, dims, qkv_strides, false);
        cudnnBackendDescriptor_t dv = make_tensor(&pb, UID_DV, io, dims, qkv_strides, false);
        op = make_desc(&pb, CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "SDPA backward");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, T, 1, &q, "backward q");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, T, 1, &k, "backward k");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, T, 1, &v, "backward v");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, T, 1, &o, "backward o");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, T, 1, &dout, "backward do");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, T, 1, &stats,
                 "backward stats");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, T, 1, &scale,
                 "backward scale");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, T, 1, &dq, "backward dq");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, T, 1, &dk, "backward dk");
        set_attr(&pb, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, T, 1, &dv, "backward dv");
        finalize(&pb, op, "SDPA backward finalize");
    }
    cudnnBackendDescriptor_t graph =
        make_desc(&pb, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set_attr(&pb, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &cb->dnn,
             "graph handle");
    set_attr(&pb, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, T, 1, &op, "graph ops");
    finalize(&pb, graph, "graph finalize");
    if (!pb.failed)
        choose_engine(&pb, graph);
    if (!pb.failed && p->plan) {
        int64_t got = 0, bytes = 0;
        if (dnn_ok(&pb,
                   cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &got, &bytes),
                   "workspace size")) {
            p->workspace_bytes = bytes;
            p->ok = true;
        }
    }
}

static void plan_release(cuda_sdpa_plan *p)
{
    if (p->plan)
        cudnnBackendDestroyDescriptor(p->plan);
    for (int32_t i = p->n_keep - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->keep[i]);
    memset(p, 0, sizeof *p);
}

void cuda_sdpa_cache_free(cuda_backend *cb)
{
    for (int i = 0; i < CUDA_SDPA_CACHE; i++)
        if (cb->sdpa_cache[i].used)
            plan_release(&cb->sdpa_cache[i]);
}

static cuda_sdpa_plan *get_plan(cuda_backend *cb, const att_shape *s, bool backward,
                                bool with_stats)
{
    for (int i = 0; i < CUDA_SDPA_CACHE; i++) {
        cuda_sdpa_plan *p = &cb->sdpa_cache[i];
        if (p->used && p->backward == backward && p->bf16 == cb->bf16 &&
            p->with_stats == with_stats && p->batch == s->B && p->seq_len == s->L &&
            p->heads == s->H && p->head_dim == s->D)
            return p;
    }
    cuda_sdpa_plan *p = &cb->sdpa_cache[cb->sdpa_next];
    cb->sdpa_next = (cb->sdpa_next + 1) % CUDA_SDPA_CACHE;
    if (p->used)
        plan_release(p);
    p->used = true;
    p->backward = backward;
    p->bf16 = cb->bf16;
    p->with_stats = with_stats;
    p->batch = s->B;
    p->seq_len = s->L;
    p->heads = s->H;
    p->head_dim = s->D;
    build_plan(cb, p, s);
    return p;
}

/* Why the cuDNN path cannot take this shape at all ("" when it may). */
static const char *cudnn_unusable(const cuda_backend *cb, const att_shape *s)
{
    if (cb->attention_mode == NCTMC_CUDA_ATTENTION_FALLBACK)
        return "custom kernels requested";
    if (!cb->dnn)
        return cb->dnn_reason;
    if (s->D % 8 != 0 || s->D > 256)
        return "head width not a multiple of 8 or above 256";
    return "";
}

static bool execute_plan(cuda_backend *cb, cuda_sdpa_plan *p, int n, const int64_t *uids,
                         void **ptrs)
{
    void *ws = NULL;
    if (p->workspace_bytes > 0 && !(ws = cuda_scratch(cb, (size_t)p->workspace_bytes)))
        return true; /* recorded: the operation has failed either way */
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                      uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                      1, &ws);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendExecute(cb->dnn, p->plan, vp);
    if (vp)
        cudnnBackendDestroyDescriptor(vp);
    if (st != CUDNN_STATUS_SUCCESS) {
        /* a plan that does not run is not offered again */
        p->ok = false;
        dnn_reason(p->reason, sizeof p->reason, "execute", st);
        return false;
    }
    return true;
}

/* Workspace pieces of the cuDNN path, in half-precision elements. */
typedef struct half_bufs {
    void *qkv, *o, *dout, *dqkv;
    unsigned *amax;
} half_bufs;

static half_bufs half_layout(const att_shape *s, float *workspace)
{
    size_t nd = round16((size_t)s->N * (size_t)s->d);
    half_bufs h;
    /* 3 N d + N d + N d + 3 N d half values = 4 N d floats */
    char *base = (char *)workspace;
    h.qkv = base;
    h.o = base + 3 * nd * 2;
    h.dout = base + 4 * nd * 2;
    h.dqkv = base + 5 * nd * 2;
    h.amax = (unsigned *)(base + 8 * nd * 2);
    return h;
}

template <typename H>
static void convert_in(cuda_backend *cb, int64_t n, const float *src, const unsigned *amax,
                       void *dst)
{
    to_half_kernel<H><<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        n, src, amax, (H *)dst);
    cuda_launched(cb, "attention: to half");
}

template <typename H>
static void convert_out(cuda_backend *cb, int64_t n, const void *src, const unsigned *amax,
                        float *dst)
{
    from_half_kernel<H><<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        n, (const H *)src, amax, dst);
    cuda_launched(cb, "attention: from half");
}

static void to_io(cuda_backend *cb, int64_t n, const float *src, const unsigned *amax, void *dst)
{
    if (cb->bf16)
        convert_in<__nv_bfloat16>(cb, n, src, amax, dst);
    else
        convert_in<__half>(cb, n, src, amax, dst);
}

static void from_io(cuda_backend *cb, int64_t n, const void *src, const unsigned *amax,
                    float *dst)
{
    if (cb->bf16)
        convert_out<__nv_bfloat16>(cb, n, src, amax, dst);
    else
        convert_out<__half>(cb, n, src, amax, dst);
}

static const char *io_name(const cuda_backend *cb)
{
    return cb->bf16 ? "bf16" : "fp16";
}

static bool cudnn_forward(cuda_backend *cb, const att_shape *s, const float *qkv, float *out,
                          float *saved, float *workspace)
{
    const char *why = cudnn_unusable(cb, s);
    if (why[0]) {
        snprintf(cb->last_forward, sizeof cb->last_forward, "custom (%.500s)", why);
        return false;
    }
    cuda_sdpa_plan *p = get_plan(cb, s, false, saved != NULL);
    if (!p->ok) {
        snprintf(cb->last_forward, sizeof cb->last_forward, "custom (%.500s)", p->reason);
        return false;
    }
    half_bufs h = half_layout(s, workspace);
    int64_t d = s->d, half_bytes = 2;
    to_io(cb, s->N * 3 * d, qkv, NULL, h.qkv);
    float scale = s->scale;
    int64_t uids[6] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_STATS};
    void *ptrs[6] = {h.qkv, (char *)h.qkv + d * half_bytes, (char *)h.qkv + 2 * d * half_bytes,
                     h.o, &scale, saved};
    if (!execute_plan(cb, p, saved ? 6 : 5, uids, ptrs)) {
        snprintf(cb->last_forward, sizeof cb->last_forward, "custom (%.500s)", p->reason);
        return false;
    }
    from_io(cb, s->N * d, h.o, NULL, out);
    snprintf(cb->last_forward, sizeof cb->last_forward, "cuDNN SDPA (%s)", io_name(cb));
    return true;
}

static bool cudnn_backward(cuda_backend *cb, const att_shape *s, const float *qkv,
                           const float *out, const float *saved, const float *dout, float *dqkv,
                           float *workspace)
{
    const char *why = cudnn_unusable(cb, s);
    if (why[0]) {
        snprintf(cb->last_backward, sizeof cb->last_backward, "custom (%.500s)", why);
        return false;
    }
    cuda_sdpa_plan *p = get_plan(cb, s, true, true);
    if (!p->ok) {
        snprintf(cb->last_backward, sizeof cb->last_backward, "custom (%.500s)", p->reason);
        return false;
    }
    half_bufs h = half_layout(s, workspace);
    int64_t d = s->d, hb = 2;
    to_io(cb, s->N * 3 * d, qkv, NULL, h.qkv);
    to_io(cb, s->N * d, out, NULL, h.o);
    cuda_check(cb, cudaMemsetAsync(h.amax, 0, sizeof(unsigned), cb->stream),
               "attention: amax reset");
    amax_kernel<<<cuda_blocks(s->N * d, CUDA_THREADS) > 1024 ? 1024
                                                              : cuda_blocks(s->N * d, CUDA_THREADS),
                  CUDA_THREADS, 0, cb->stream>>>(s->N * d, dout, h.amax);
    cuda_launched(cb, "attention: amax");
    to_io(cb, s->N * d, dout, h.amax, h.dout);
    float scale = s->scale;
    char *q = (char *)h.qkv, *dq = (char *)h.dqkv;
    int64_t uids[10] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE,
                        UID_DO, UID_DQ, UID_DK, UID_DV};
    void *ptrs[10] = {q,      q + d * hb,  q + 2 * d * hb,      h.o,
                      (void *)saved, &scale, h.dout,   dq, dq + d * hb, dq + 2 * d * hb};
    if (!execute_plan(cb, p, 10, uids, ptrs)) {
        snprintf(cb->last_backward, sizeof cb->last_backward, "custom (%.500s)", p->reason);
        return false;
    }
    from_io(cb, s->N * 3 * d, h.dqkv, h.amax, dqkv);
    snprintf(cb->last_backward, sizeof cb->last_backward, "cuDNN SDPA (%s)", io_name(cb));
    return true;
}

/* ---- fallback: materialised attention ----------------------------------- */

/* dst[(bl * H + h) * L * D + l * D + e] = src[((b0 + bl) * L + l) * row + col0 + h * D + e] */
__global__ void gather_heads_kernel(int32_t n_seq, int32_t L, int32_t H, int32_t D, int64_t b0,
                                    const float *__restrict__ src, int64_t row, int64_t col0,
                                    float *__restrict__ dst)
{
    int64_t total = (int64_t)n_seq * H * L * D;
    GRID_STRIDE(i, total)
    {
        int64_t e = i % D, l = (i / D) % L, h = (i / ((int64_t)D * L)) % H,
                bl = i / ((int64_t)D * L * H);
        dst[i] = src[((b0 + bl) * L + l) * row + col0 + h * D + e];
    }
}

__global__ void scatter_heads_kernel(int32_t n_seq, int32_t L, int32_t H, int32_t D, int64_t b0,
                                     const float *__restrict__ src, int64_t row, int64_t col0,
                                     float *__restrict__ dst)
{
    int64_t total = (int64_t)n_seq * H * L * D;
    GRID_STRIDE(i, total)
    {
        int64_t e = i % D, l = (i / D) % L, h = (i / ((int64_t)D * L)) % H,
                bl = i / ((int64_t)D * L * H);
        dst[((b0 + bl) * L + l) * row + col0 + h * D + e] = src[i];
    }
}

/* One block per score row: P = softmax(S) in place, lse = max + log(sum)
 * into stats (when given) at [b, h, l]. */
__global__ void softmax_rows_kernel(int32_t L, int64_t b0, int32_t H, float *__restrict__ s,
                                    float *__restrict__ stats)
{
    __shared__ float sh[32];
    int64_t row = blockIdx.x; /* (bl * H + h) * L + l within the chunk */
    float *x = s + row * L;
    float m = -INFINITY;
    for (int32_t j = (int32_t)threadIdx.x; j < L; j += (int32_t)blockDim.x)
        m = x[j] > m ? x[j] : m;
    m = cuda_block_max(m, sh);
    float sum = 0.0f;
    for (int32_t j = (int32_t)threadIdx.x; j < L; j += (int32_t)blockDim.x) {
        float e = expf(x[j] - m);
        x[j] = e;
        sum += e;
    }
    sum = cuda_block_sum(sum, sh);
    float inv = 1.0f / sum;
    for (int32_t j = (int32_t)threadIdx.x; j < L; j += (int32_t)blockDim.x)
        x[j] *= inv;
    if (stats && threadIdx.x == 0)
        stats[b0 * H * L + row] = m + logf(sum);
}

/* One block per row: P = exp(S - lse) renormalised (written over S),
 * dS = P (dP - sum_j P dP) (written over dP). */
__global__ void softmax_grad_rows_kernel(int32_t L, int64_t b0, int32_t H,
                                         const float *__restrict__ stats, float *__restrict__ s,
                                         float *__restrict__ dp)
{
    __shared__ float sh[32];
    int64_t row = blockIdx.x;
    float *x = s + row * L, *g = dp + row * L;
    float lse = stats[b0 * H * L + row];
    float sum = 0.0f;
    for (int32_t j = (int32_t)threadIdx.x; j < L; j += (int32_t)blockDim.x) {
        float e = expf(x[j] - lse);
        x[j] = e;
        sum += e;
    }
    float inv = 1.0f / cuda_block_sum(sum, sh);
    float delta = 0.0f;
    for (int32_t j = (int32_t)threadIdx.x; j < L; j += (int32_t)blockDim.x) {
        float p = x[j] * inv;
        x[j] = p;
        delta += p * g[j];
    }
    delta = cuda_block_sum(delta, sh);
    for (int32_t j = (int32_t)threadIdx.x; j < L; j += (int32_t)blockDim.x)
        g[j] = x[j] * (g[j] - delta);
}

typedef struct fallback_bufs {
    float *q, *k, *v, *dout; /* head-major [chunk * H, L, D] */
    float *s, *dp;           /* [chunk * H, L, L] */
} fallback_bufs;

static fallback_bufs fallback_layout(const att_shape *s, int32_t chunk, float *workspace)
{
    size_t nd = round16((size_t)chunk * (size_t)s->H * (size_t)s->L * (size_t)s->D);
    size_t ll = round16((size_t)chunk * (size_t)s->H * (size_t)s->L * (size_t)s->L);
    size_t copies = copies_floats(s->B, s->L, s->H, s->D);
    fallback_bufs f;
    f.q = workspace;
    f.k = workspace + nd;
    f.v = workspace + 2 * nd;
    f.dout = workspace + 3 * nd;
    f.s = workspace + copies;
    f.dp = f.s + ll;
    return f;
}

/* C[bh] (m x n, column-major) = alpha op(A[bh]) op(B[bh]) for every head
 * of the chunk, TF32 math. */
static void batched_gemm(cuda_backend *cb, bool ta, bool tb, int m, int n, int k, float alpha,
                         const float *a, int lda, int64_t stride_a, const float *b, int ldb,
                         int64_t stride_b, float *c, int ldc, int64_t stride_c, int batch)
{
    const float beta = 0.0f;
    cuda_check_blas(cb,
                    cublasGemmStridedBatchedEx(cb->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                               tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, a,
                                               CUDA_R_32F, lda, stride_a, b, CUDA_R_32F, ldb,
                                               stride_b, &beta, c, CUDA_R_32F, ldc, stride_c,
                                               batch, CUBLAS_COMPUTE_32F_FAST_TF32,
                                               CUBLAS_GEMM_DEFAULT),
                    "attention: batched product");
}

static void gather(cuda_backend *cb, const att_shape *s, int32_t n_seq, int64_t b0,
                   const float *src, int64_t row, int64_t col0, float *dst)
{
    int64_t n = (int64_t)n_seq * s->H * s->L * s->D;
    gather_heads_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        n_seq, s->L, s->H, s->D, b0, src, row, col0, dst);
    cuda_launched(cb, "attention: gather");
}

static void scatter(cuda_backend *cb, const att_shape *s, int32_t n_seq, int64_t b0,
                    const float *src, int64_t row, int64_t col0, float *dst)
{
    int64_t n = (int64_t)n_seq * s->H * s->L * s->D;
    scatter_heads_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(
        n_seq, s->L, s->H, s->D, b0, src, row, col0, dst);
    cuda_launched(cb, "attention: scatter");
}

/* S = scale Q Kᵀ per head: column-major C = K Qᵀ is row-major S. */
static void scores(cuda_backend *cb, const att_shape *s, int heads, const float *q,
                   const float *k, float *out)
{
    int L = s->L, D = s->D;
    int64_t ld = (int64_t)L * D, ll = (int64_t)L * L;
    batched_gemm(cb, true, false, L, L, D, s->scale, k, D, ld, q, D, ld, out, L, ll, heads);
}

static void fallback_forward(cuda_backend *cb, const att_shape *s, const float *qkv, float *out,
                             float *saved, float *workspace)
{
    int32_t chunk = chunk_sequences(s->B, s->L, s->H);
    fallback_bufs f = fallback_layout(s, chunk, workspace);
    int L = s->L, D = s->D;
    int64_t ld = (int64_t)L * D, ll = (int64_t)L * L, row = 3 * s->d;
    for (int64_t b0 = 0; b0 < s->B; b0 += chunk) {
        int32_t n_seq = (int32_t)(s->B - b0 < chunk ? s->B - b0 : chunk);
        int heads = n_seq * s->H;
        gather(cb, s, n_seq, b0, qkv, row, 0, f.q);
        gather(cb, s, n_seq, b0, qkv, row, s->d, f.k);
        gather(cb, s, n_seq, b0, qkv, row, 2 * s->d, f.v);
        scores(cb, s, heads, f.q, f.k, f.s);
        softmax_rows_kernel<<<(unsigned)((int64_t)heads * L), SOFTMAX_THREADS, 0, cb->stream>>>(
            L, b0, s->H, f.s, saved);
        cuda_launched(cb, "attention: softmax");
        /* Oᵀ (D x L) = Vᵀ Pᵀ: V column-major D x L, P row-major = Pᵀ */
        batched_gemm(cb, false, false, D, L, L, 1.0f, f.v, D, ld, f.s, L, ll, f.q, D, ld, heads);
        scatter(cb, s, n_seq, b0, f.q, s->d, 0, out);
    }
}

static void fallback_backward(cuda_backend *cb, const att_shape *s, const float *qkv,
                              const float *saved, const float *dout, float *dqkv,
                              float *workspace)
{
    int32_t chunk = chunk_sequences(s->B, s->L, s->H);
    fallback_bufs f = fallback_layout(s, chunk, workspace);
    int L = s->L, D = s->D;
    int64_t ld = (int64_t)L * D, ll = (int64_t)L * L, row = 3 * s->d;
    for (int64_t b0 = 0; b0 < s->B; b0 += chunk) {
        int32_t n_seq = (int32_t)(s->B - b0 < chunk ? s->B - b0 : chunk);
        int heads = n_seq * s->H;
        gather(cb, s, n_seq, b0, qkv, row, 0, f.q);
        gather(cb, s, n_seq, b0, qkv, row, s->d, f.k);
        gather(cb, s, n_seq, b0, qkv, row, 2 * s->d, f.v);
        gather(cb, s, n_seq, b0, dout, s->d, 0, f.dout);
        scores(cb, s, heads, f.q, f.k, f.s);
        /* dP = dO Vᵀ, the same form as Q Kᵀ */
        batched_gemm(cb, true, false, L, L, D, 1.0f, f.v, D, ld, f.dout, D, ld, f.dp, L, ll,
                     heads);
        softmax_grad_rows_kernel<<<(unsigned)((int64_t)heads * L), SOFTMAX_THREADS, 0,
                                   cb->stream>>>(L, b0, s->H, saved, f.s, f.dp);
        cuda_launched(cb, "attention: softmax backward");
        /* dVᵀ (D x L) = dOᵀ P  (into v: V is no longer needed) */
        batched_gemm(cb, false, true, D, L, L, 1.0f, f.dout, D, ld, f.s, L, ll, f.v, D, ld,
                     heads);
        /* dQᵀ = Kᵀ dSᵀ scale (into dout), dKᵀ = Qᵀ dS scale (into k) */
        batched_gemm(cb, false, false, D, L, L, s->scale, f.k, D, ld, f.dp, L, ll, f.dout, D, ld,
                     heads);
        batched_gemm(cb, false, true, D, L, L, s->scale, f.q, D, ld, f.dp, L, ll, f.k, D, ld,
                     heads);
        scatter(cb, s, n_seq, b0, f.dout, row, 0, dqkv);
        scatter(cb, s, n_seq, b0, f.k, row, s->d, dqkv);
        scatter(cb, s, n_seq, b0, f.v, row, 2 * s->d, dqkv);
    }
}

/* ---- the operations ----------------------------------------------------- */

static bool shape_ok(cuda_backend *cb, const att_shape *s, const char *what)
{
    if (s->B <= 0 || s->L <= 0 || s->H <= 0 || s->D <= 0)
        return false;
    if ((int64_t)s->B * s->H * (int64_t)s->L > 0x7fffffff) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "%s: %d x %d x %d rows exceed the grid", what,
                  s->B, s->H, s->L);
        return false;
    }
    return true;
}

void cuda_attention_forward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                            int32_t head_dim, const float *qkv, float *out, float *saved,
                            float *workspace)
{
    cuda_backend *cb = cuda_of(be);
    att_shape s = shape_of(batch, seq_len, heads, head_dim);
    if (!shape_ok(cb, &s, "attention_forward"))
        return;
    if (!cudnn_forward(cb, &s, qkv, out, saved, workspace))
        fallback_forward(cb, &s, qkv, out, saved, workspace);
}

void cuda_attention_backward(nctmc_backend *be, int32_t batch, int32_t seq_len, int32_t heads,
                             int32_t head_dim, const float *qkv, const float *out,
                             float *saved, const float *dout, float *dqkv, float *workspace)
{
    cuda_backend *cb = cuda_of(be);
    att_shape s = shape_of(batch, seq_len, heads, head_dim);
    if (!shape_ok(cb, &s, "attention_backward"))
        return;
    if (!saved) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT,
                  "attention_backward: no saved statistics (forward ran without `saved`)");
        return;
    }
    if (!cudnn_backward(cb, &s, qkv, out, saved, dout, dqkv, workspace))
        fallback_backward(cb, &s, qkv, saved, dout, dqkv, workspace);
}
