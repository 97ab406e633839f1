/*
 * cuda_sample.cu — the fused sampling operation: one thread block per row
 * running the shared per-row math of lib/math/sample_math.h (tau-leaping, Euler,
 * posterior, final denoising, self-correction proposals) with the same
 * Philox counters as the CPU backend.
 *
 * Every thread of a block evaluates the row's scalar math (rates, the
 * jump decision, p0's constants) itself — it is a few dozen operations —
 * and the block shares each pass over the vocabulary: sample_math.h routes
 * its loops (max, sum, draw, argmax) to the sm_block_* functions defined
 * here when SM_BLOCK_LOOPS is set. Rows that do not jump never touch their
 * logits. A pass reads the row once, coalesced.
 *
 * The blocked order. Sums cut j = 0 .. n-1 into one contiguous chunk per
 * warp (each a multiple of 32 long); lane l of a warp adds its chunk's
 * terms l, l+32, ... in order, the warp combines its lanes with the xor
 * butterfly, and the block adds the chunks' sums in chunk order. A draw
 * finds the first chunk whose running total exceeds the target, then that
 * chunk's warp walks it in j order, 32 terms at a time (a fixed
 * shuffle scan). Every thread gets the same bits, and the same inputs give
 * the same draw on every run; the totals differ from the CPU's sequential
 * sums only in rounding, so the CPU and the GPU draw the same token unless
 * a uniform falls within that rounding of a category boundary (the
 * conformance test compares them on rows of up to 50304 entries).
 *
 * exp_mode = SM_EXP_FLOAT: tau-leaping and Euler jumps by the fast draw
 * (sm_block_fast_draw below): thread p is lane p of sample_math.h's
 * definition, the row is read once, and the result is the CPU's bit for bit
 * (tests/test_cuda_sample_fast.c).
 */
#define SM_BLOCK_LOOPS 1
#include "cuda_internal.cuh"
#include "math/sample_math.h"

#define SAMPLE_THREADS 256
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
#define FULL_MASK 0xffffffffu

/* The block's scratch for the loops. Each loop synchronises before it
 * writes, so a loop never overwrites what an earlier one's threads still
 * read. */
typedef struct loop_shared {
    double value[SAMPLE_WARPS];
    int32_t index[SAMPLE_WARPS];
    int32_t result;
} loop_shared;

static __device__ loop_shared *loops_shared(void)
{
    __shared__ loop_shared sh;
    return &sh;
}

/* Chunk length: n over the warps, rounded up to a multiple of 32. */
static __device__ __forceinline__ int32_t chunk_length(int32_t n)
{
    int32_t c = (n + SAMPLE_WARPS - 1) / SAMPLE_WARPS;
    return (c + 31) & ~31;
}

static __device__ __forceinline__ int32_t warp_max_index(int32_t v)
{
    for (int o = 16; o > 0; o >>= 1) {
        int32_t w = __shfl_xor_sync(FULL_MASK, v, o);
        v = w > v ? w : v;
    }
    return v;
}

static __device__ double sm_block_vmax(sm_terms T, double init)
{
    loop_shared *sh = loops_shared();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double m = init;
    for (int32_t j = (int32_t)threadIdx.x; j < T.n; j += SAMPLE_THREADS)
        if (j != T.skip) {
            double v = sm_term(&T, j);
            m = v > m ? v : m;
        }
    for (int o = 16; o > 0; o >>= 1) {
        double w = __shfl_xor_sync(FULL_MASK, m, o);
        m = w > m ? w : m;
    }
    __syncthreads();
    if (lane == 0)
        sh->value[warp] = m;
    __syncthreads();
    double r = init;
    for (int k = 0; k < SAMPLE_WARPS; k++)
        r = sh->value[k] > r ? sh->value[k] : r;
    return r;
}

/* Each warp's chunk sum into sh->value[warp], and the last j of the chunk
 * with a positive term (or -1) into sh->index[warp]. */
static __device__ void block_chunk_sums(const sm_terms *T, loop_shared *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t len = chunk_length(T->n);
    int32_t begin = warp * len, end = begin + len < T->n ? begin + len : T->n;
    double s = 0.0;
    int32_t last = -1;
    for (int32_t j = begin + lane; j < end; j += 32)
        if (j != T->skip) {
            double w = sm_term(T, j);
            if (w > 0.0)
                last = j;
            s += w;
        }
    s = cuda_warp_sum(s);
    last = warp_max_index(last);
    __syncthreads();
    if (lane == 0) {
        sh->value[warp] = s;
        sh->index[warp] = last;
    }
    __syncthreads();
}

static __device__ double sm_block_vsum(sm_terms T)
{
    loop_shared *sh = loops_shared();
    block_chunk_sums(&T, sh);
    double total = 0.0;
    for (int k = 0; k < SAMPLE_WARPS; k++)
        total += sh->value[k];
    return total;
}

/* Warp `warp` walks its chunk in j order from running sum `base`: the
 * first j whose running sum exceeds target, else the chunk's last j with a
 * positive term, else -1. */
static __device__ int32_t warp_walk(const sm_terms *T, int warp, double base, double target)
{
    int lane = threadIdx.x & 31;
    int32_t len = chunk_length(T->n);
    int32_t begin = warp * len, end = begin + len < T->n ? begin + len : T->n;
    int32_t last = -1;
    double run = base;
    for (int32_t g = begin; g < end; g += 32) {
        int32_t j = g + lane;
        double w = j < end && j != T->skip ? sm_term(T, j) : 0.0;
        double x = w; /* inclusive scan over the 32 lanes */
        for (int o = 1; o < 32; o <<= 1) {
            double y = __shfl_up_sync(FULL_MASK, x, o);
            if (lane >= o)
                x += y;
        }
        unsigned hit = __ballot_sync(FULL_MASK, run + x > target);
        unsigned positive = __ballot_sync(FULL_MASK, w > 0.0);
        if (positive)
            last = g + 31 - __clz((int)positive);
        if (hit)
            return g + __ffs((int)hit) - 1;
        run += __shfl_sync(FULL_MASK, x, 31);
    }
    return last;
}

/* The draw: target = u * total (scale_by_total) or u itself. */
static __device__ int32_t sm_block_vpick(sm_terms T, double u, int scale_by_total, int32_t last)
{
    loop_shared *sh = loops_shared();
    int warp = threadIdx.x >> 5;
    block_chunk_sums(&T, sh);
    double total = 0.0;
    for (int k = 0; k < SAMPLE_WARPS; k++)
        total += sh->value[k];
    double target = scale_by_total ? u * total : u;
    /* the running total repeats the total's additions, so it reaches it */
    double cum = 0.0, base = 0.0;
    int chunk = -1;
    int32_t last_any = -1;
    for (int k = 0; k < SAMPLE_WARPS; k++) {
        double next = cum + sh->value[k];
        if (chunk < 0 && next > target) {
            chunk = k;
            base = cum;
        }
        cum = next;
        last_any = sh->index[k] > last_any ? sh->index[k] : last_any;
    }
    if (chunk < 0) /* rounding left the target unreached */
        return last_any >= 0 ? last_any : last;
    if (warp == chunk) {
        int32_t j = warp_walk(&T, warp, base, target);
        if ((threadIdx.x & 31) == 0)
            sh->result = j >= 0 ? j : last;
    }
    __syncthreads();
    return sh->result;
}

static __device__ int32_t sm_block_vargmax(sm_terms T)
{
    loop_shared *sh = loops_shared();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double best = -1.0;
    int32_t at = INT32_MAX;
    for (int32_t j = (int32_t)threadIdx.x; j < T.n; j += SAMPLE_THREADS)
        if (j != T.skip) {
            double s = sm_term(&T, j);
            if (s > best) {
                best = s;
                at = j;
            }
        }
    /* larger term first, then smaller j: the sequential loop's winner */
    for (int o = 16; o > 0; o >>= 1) {
        double b = __shfl_xor_sync(FULL_MASK, best, o);
        int32_t i = __shfl_xor_sync(FULL_MASK, at, o);
        if (b > best || (b == best && i < at)) {
            best = b;
            at = i;
        }
    }
    __syncthreads();
    if (lane == 0) {
        sh->value[warp] = best;
        sh->index[warp] = at;
    }
    __syncthreads();
    best = -1.0;
    at = INT32_MAX;
    for (int k = 0; k < SAMPLE_WARPS; k++)
        if (sh->value[k] > best || (sh->value[k] == best && sh->index[k] < at)) {
            best = sh->value[k];
            at = sh->index[k];
        }
    return at == INT32_MAX ? 0 : at;
}

/* ---- The fast jump draw (sample_math.h, "The float exp and the fast jump
 * draw"): thread p of the block is lane p, so the row is read once, as
 * float4 where the row is 16-byte aligned; warp 0 then runs steps 3-5 as
 * shuffles with the host's operations (sm_scan32 = the shfl_up scan). */
static_assert(SAMPLE_THREADS == SM_FAST_LANES, "one thread per lane");

typedef struct fast_shared {
    float max[SAMPLE_WARPS];
    double mass[SM_FAST_LANES];
    int32_t result;
} fast_shared;

static __device__ __forceinline__ double warp_scan32(double x, int lane)
{
    for (int o = 1; o < 32; o <<= 1) {
        double y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o)
            x = x + y;
    }
    return x;
}

/* Entries b .. b+3 of a lane, from v = z[b .. b+3] (unguided rows). */
static __device__ __forceinline__ void fast_add4(sm_lane *L, const sm_fjump *F, int32_t b,
                                                 float4 v)
{
    float g[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 4; c++)
        if (b + c != F->i)
            sm_lane_add(L, g[c], F->inv_temp);
}

/* Entries b .. min(b+3, S-1) one by one. */
static __device__ void fast_add_scalar(sm_lane *L, const sm_fjump *F, int32_t b)
{
    for (int32_t j = b; j < b + 4 && j < F->S; j++)
        if (j != F->i)
            sm_lane_add(L, sm_fjump_raw(F, j), F->inv_temp);
}

/* Step 1: lane p's entries in increasing j; two float4 loads in flight per
 * thread where the row is aligned and unguided. */
static __device__ sm_lane fast_lane(const sm_fjump *F, int32_t p)
{
    const int32_t stride = 4 * SM_FAST_LANES;
    sm_lane L = sm_lane_empty();
    bool vec = F->zu == NULL && ((uintptr_t)F->z & 15u) == 0;
    for (int32_t b = 4 * p; b < F->S; b += 2 * stride) {
        int32_t b2 = b + stride;
        if (vec && b2 + 3 < F->S) {
            float4 v0 = __ldg((const float4 *)(F->z + b));
            float4 v1 = __ldg((const float4 *)(F->z + b2));
            fast_add4(&L, F, b, v0);
            fast_add4(&L, F, b2, v1);
        } else {
            fast_add_scalar(&L, F, b);
            if (b2 < F->S)
                fast_add_scalar(&L, F, b2);
        }
    }
    return L;
}

/* Step 5 by warp 0: sm_seq_fast_walk. */
static __device__ int32_t fast_walk(const sm_fjump *F, float M, int32_t p, double before,
                                    double target, int32_t last)
{
    int lane = threadIdx.x & 31;
    double run = before;
    int32_t lastpos = -1;
    for (int32_t e0 = 0; sm_fast_entry(p, e0) < F->S; e0 += SM_FAST_GROUP) {
        int32_t j = sm_fast_entry(p, e0 + lane);
        double w = j < F->S && j != F->i ? sm_fjump_weight(sm_fjump_raw(F, j), F->inv_temp, M)
                                         : 0.0;
        unsigned positive = __ballot_sync(FULL_MASK, w > 0.0);
        if (positive)
            lastpos = sm_fast_entry(p, e0 + 31 - __clz((int)positive));
        double x = warp_scan32(w, lane);
        unsigned hit = __ballot_sync(FULL_MASK, run + x > target);
        if (hit)
            return sm_fast_entry(p, e0 + __ffs((int)hit) - 1);
        run += __shfl_sync(FULL_MASK, x, 31);
    }
    return lastpos >= 0 ? lastpos : last;
}

/* Steps 3-5 by warp 0. */
static __device__ int32_t fast_pick(const sm_fjump *F, const fast_shared *sh, float M,
                                    double u, int32_t last)
{
    int lane = threadIdx.x & 31;
    double total = 0.0;
    for (int g = 0; g < SM_FAST_LANES; g += 32) {
        double x = warp_scan32(sh->mass[g + lane], lane);
        total += __shfl_sync(FULL_MASK, x, 31);
    }
    double target = u * total, run = 0.0, before = 0.0;
    int32_t p = -1, lastlane = -1;
    for (int g = 0; g < SM_FAST_LANES && p < 0; g += 32) {
        double c = sh->mass[g + lane];
        unsigned positive = __ballot_sync(FULL_MASK, c > 0.0);
        if (positive)
            lastlane = g + 31 - __clz((int)positive);
        double x = warp_scan32(c, lane);
        unsigned hit = __ballot_sync(FULL_MASK, run + x > target);
        if (hit) {
            int l = __ffs((int)hit) - 1;
            double prev = __shfl_sync(FULL_MASK, x, l > 0 ? l - 1 : 0);
            before = l > 0 ? run + prev : run;
            p = g + l;
        } else {
            run += __shfl_sync(FULL_MASK, x, 31);
        }
    }
    if (p < 0) {
        p = lastlane;
        target = INFINITY;
        before = run;
    }
    if (p < 0)
        return last;
    return fast_walk(F, M, p, before, target, last);
}

static __device__ int32_t sm_block_fast_draw(const sm_fjump *F, double u, int32_t last)
{
    __shared__ fast_shared sh;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    sm_lane L = fast_lane(F, (int32_t)threadIdx.x);
    float m = L.max;
    for (int o = 16; o > 0; o >>= 1) {
        float y = __shfl_xor_sync(FULL_MASK, m, o);
        m = y > m ? y : m;
    }
    __syncthreads();
    if (lane == 0)
        sh.max[warp] = m;
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < SAMPLE_WARPS; k++)
        M = sh.max[k] > M ? sh.max[k] : M;
    if (!(M > -INFINITY))
        return last;
    sh.mass[threadIdx.x] = sm_lane_mass(&L, M);
    __syncthreads();
    if (warp == 0) {
        int32_t j = fast_pick(F, &sh, M, u, last);
        if (lane == 0)
            sh.result = j;
    }
    __syncthreads();
    return sh.result;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_step_kernel(nctmc_sample_step_args a, sm_step st)
{
    int64_t r = blockIdx.x;
    if (a.fixed_mask && a.fixed_mask[r]) {
        if (threadIdx.x == 0) {
            if (a.method == SM_METHOD_CORRECT) {
                a.proposal[r] = a.x_t[r];
                a.proposal_prob[r] = -1.0f;
            } else {
                a.x_out[r] = a.fixed_tokens[r];
            }
        }
        return;
    }
    sm_row_in in;
    in.z = a.logits + r * a.row_stride;
    in.zu = a.logits_uncond ? a.logits_uncond + r * a.row_stride : NULL;
    in.h = a.rate_h ? a.rate_h[r] : 0.0f;
    in.h_uncond = a.rate_h_uncond ? a.rate_h_uncond[r] : 0.0f;
    in.i = a.x_t[r];
    in.sequence = a.first_sequence + r / a.seq_len;
    in.position = (int32_t)(r % a.seq_len);
    int32_t x = in.i, proposal = 0;
    float prob = 0.0f;
    sm_sample_row(&st, &in, &x, &proposal, &prob);
    /* x_out may be x_t: every thread has read it before one writes */
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    if (a.method == SM_METHOD_CORRECT) {
        a.proposal[r] = proposal;
        a.proposal_prob[r] = prob;
    } else {
        a.x_out[r] = x;
    }
}

void cuda_sample_step(nctmc_backend *be, const nctmc_sample_step_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (args->n_rows <= 0 || args->seq_len <= 0)
        return;
    if (args->n_rows > 0x7fffffff) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "sample_step: %lld rows",
                  (long long)args->n_rows);
        return;
    }
    sm_step st = sm_step_prepare(args->fp, args->method, args->t, args->s, args->cfg_scale,
                                 args->cfg_rule, args->temperature, args->correction_temperature,
                                 args->seed, args->step);
    st.fast = args->exp_mode == SM_EXP_FLOAT;
    sample_step_kernel<<<(unsigned)args->n_rows, SAMPLE_THREADS, 0, cb->stream>>>(*args, st);
    cuda_launched(cb, "sample_step");
}
