/*
 * test_sampler_fast.c — the float exp and the fast jump draw of
 * lib/math/sample_math.h (nctmc_sample_step_args.exp_mode = SM_EXP_FLOAT):
 *
 *  1. sm_expf against exp in double over a dense sweep of every float in
 *     [-87.5, 89) (every `stride`-th bit pattern; `--stride 1` is the
 *     exhaustive measurement, `--stride` alone prints the figures): below
 *     SM_EXPF_MAX_ULP ulp (faithful rounding; so not monotone everywhere,
 *     the count of steps down is printed); its special values (NaN, +-inf,
 *     the overflow and underflow edges, no subnormal ever returned).
 *  2. Pinned bits: a hash of sm_expf over the sweep and of fast draws on
 *     fixed rows. The same source is built twice (tests/meson.build): with
 *     the project's flags and with -ffp-contract=fast plus FMA instructions
 *     (x86-64: -mfma, the Haswell case); both must give these hashes, and
 *     the CUDA backend must give the same draws (test_cuda_sample_fast.c).
 *  3. The fast draw's distribution: on a row of S <= 1024 (where its order
 *     of categories is j order) it picks what the double path picks for
 *     the same uniform except within float rounding of a boundary; on long
 *     rows it is the inverse CDF over its lane order (a brute force in
 *     double, written again here); chi-square of many draws against the
 *     softmax, with temperature and guidance.
 *  4. The CPU backend's sample_step with exp_mode = SM_EXP_FLOAT: the same
 *     per-row draws, on 1 and 3 threads, twice; the default (exp_mode 0)
 *     still the double path.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "math/sample_math.h"
#include "test_util.h"

/* The error bound: `test_sampler_fast --stride 1` measured 0.9386 ulp over
 * all 2237726722 floats in [-87.5, 89) (docs/dev/backend-modules.md). */
#define SM_EXPF_MAX_ULP 1.0

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint64_t fnv(uint64_t h, uint32_t v)
{
    for (int k = 0; k < 4; k++) {
        h ^= (v >> (8 * k)) & 0xffu;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ulp of float at the magnitude of e (e a positive normal float's range). */
static double ulp_at(double e)
{
    int ex;
    frexp(e, &ex); /* e = m 2^ex, m in [0.5, 1) */
    return ldexp(1.0, ex - 24);
}

typedef struct sweep {
    double max_ulp, worst_x;
    long n, decreasing;
    bool subnormal, nan;
    uint64_t hash;
} sweep;

/* Every stride-th float from -87.5 up to 89 (bit patterns walked from the
 * negative end through -0, then +0 upwards). */
static sweep expf_sweep(uint32_t stride)
{
    sweep s = {0.0, 0.0, 0, 0, false, false, 0xcbf29ce484222325ull};
    float prev = 0.0f;
    bool first = true;
    uint32_t lo = bits_of(-87.5f), hi = bits_of(89.0f);
    /* negative: bits from lo down to 0x80000000 */
    for (int side = 0; side < 2; side++) {
        uint32_t u = side == 0 ? lo : 0u;
        for (;;) {
            float x = float_of(u);
            float y = sm_expf(x);
            double e = exp((double)x);
            s.hash = fnv(s.hash, bits_of(y));
            s.n++;
            if (y != y)
                s.nan = true;
            if (y != 0.0f && fabsf(y) < 1.17549435e-38f)
                s.subnormal = true;
            if (!first && y < prev)
                s.decreasing++;
            first = false;
            prev = y;
            if (isfinite(e) && e <= 3.4028234663852886e38 && e >= 1.1754943508222875e-38) {
                double err = fabs((double)y - e) / ulp_at(e);
                if (err > s.max_ulp) {
                    s.max_ulp = err;
                    s.worst_x = x;
                }
            }
            if (side == 0) {
                if (u - 0x80000000u < stride)
                    break;
                u -= stride;
            } else {
                if (hi - u < stride)
                    break;
                u += stride;
            }
        }
    }
    return s;
}

static void test_expf_special(void)
{
    CHECK(sm_expf(0.0f) == 1.0f && sm_expf(-0.0f) == 1.0f, "exp(0) = %.9g", sm_expf(0.0f));
    CHECK(sm_expf(1.0f) == 2.71828182f, "exp(1) = %.9g", sm_expf(1.0f));
    CHECK(isnan(sm_expf(NAN)), "exp(NaN) = %g", sm_expf(NAN));
    CHECK(sm_expf(INFINITY) == INFINITY, "exp(inf) = %g", sm_expf(INFINITY));
    CHECK(sm_expf(-INFINITY) == 0.0f && !signbit(sm_expf(-INFINITY)), "exp(-inf) = %g",
          sm_expf(-INFINITY));
    CHECK(sm_expf(89.0f) == INFINITY && sm_expf(88.7229f) == INFINITY,
          "overflow: exp(88.7229) = %g", sm_expf(88.7229f));
    CHECK(isfinite(sm_expf(88.7228f)) && sm_expf(88.7228f) > 3.4e38f, "exp(88.7228) = %g",
          sm_expf(88.7228f));
    CHECK(sm_expf(-87.5001f) == 0.0f && sm_expf(-200.0f) == 0.0f, "underflow");
    CHECK(sm_expf(-87.3f) >= 1.17549435e-38f, "exp(-87.3) = %g stays normal", sm_expf(-87.3f));
    /* below FLT_MIN (-87.3365 < x < -87.5): flushed to 0, never subnormal */
    CHECK(sm_expf(-87.4f) == 0.0f, "exp(-87.4) = %g", sm_expf(-87.4f));
    CHECK(sm_expf(1e-30f) == 1.0f && sm_expf(-1e-30f) == 1.0f, "tiny arguments");
}

/* The pinned hashes (same on every host, compiler, flag set and device). */
#define PIN_EXPF_HASH 0x9f7d055e919e9a2full
#define PIN_DRAW_HASH 0x1f44c8e0bfcfa164ull
#define PIN_STRIDE 97u

static void test_expf_accuracy(uint32_t stride, bool report)
{
    sweep s = expf_sweep(stride);
    if (report)
        printf("sm_expf: stride %u, %ld floats in [-87.5, 89): max %.4f ulp at x = %.9g "
               "(against exp in double); %ld steps down; hash %016llx\n",
               stride, s.n, s.max_ulp, s.worst_x, s.decreasing, (unsigned long long)s.hash);
    CHECK(s.max_ulp <= SM_EXPF_MAX_ULP, "max error %.4f ulp at x = %.9g", s.max_ulp, s.worst_x);
    CHECK(!s.subnormal && !s.nan, "a subnormal or NaN result in range");
    if (stride == PIN_STRIDE)
        CHECK(s.hash == PIN_EXPF_HASH, "sm_expf bits changed: hash %016llx",
              (unsigned long long)s.hash);
}

/* ------------------------------------------------------------------------ */
/* The fast draw                                                            */
/* ------------------------------------------------------------------------ */

static double uniform01(test_rng *r)
{
    return ((double)(test_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* g_j in double from the float guided logit. */
static double logit(const sm_fjump *F, int32_t j)
{
    return (double)sm_fjump_raw(F, j) * (double)F->inv_temp;
}

/* The inverse CDF over the fast path's lane order, in double (the reference
 * exp) from the float guided logits. */
static int32_t brute_lane_order(const sm_fjump *F, double u)
{
    double max = -INFINITY, total = 0.0;
    for (int32_t j = 0; j < F->S; j++)
        if (j != F->i && logit(F, j) > max)
            max = logit(F, j);
    for (int32_t j = 0; j < F->S; j++)
        if (j != F->i)
            total += exp(logit(F, j) - max);
    double cum = 0.0, target = u * total;
    int32_t last = F->i;
    for (int32_t p = 0; p < SM_FAST_LANES; p++)
        for (int32_t e = 0; sm_fast_entry(p, e) < F->S; e++) {
            int32_t j = sm_fast_entry(p, e);
            if (j == F->i)
                continue;
            cum += exp(logit(F, j) - max);
            last = j;
            if (cum > target)
                return j;
        }
    return last;
}

static void test_draw_against_double(void)
{
    test_rng r = test_rng_seed(5);
    for (int c = 0; c < 2; c++) {
        int32_t S = c == 0 ? 1000 : 20000;
        float *z = malloc(sizeof(float) * (size_t)S), *zu = malloc(sizeof(float) * (size_t)S);
        test_fill_uniform(&r, z, (size_t)S, -6.0f, 6.0f);
        test_fill_uniform(&r, zu, (size_t)S, -6.0f, 6.0f);
        int32_t i = S / 3;
        int n = 4000, same_double = 0, same_brute = 0;
        for (int k = 0; k < n; k++) {
            double u = uniform01(&r);
            const float *g = k & 1 ? zu : NULL;
            int32_t fast = sm_fast_jump_draw(z, g, 1.5, 0.8, S, i, u);
            int32_t dbl = sm_jump_draw(z, g, 1.5, 0.8, S, i, u);
            sm_fjump F = sm_fjump_of(z, g, 1.5, 0.8, S, i);
            same_double += fast == dbl;
            same_brute += fast == brute_lane_order(&F, u);
            CHECK(fast >= 0 && fast < S && fast != i, "draw %d out of range", fast);
        }
        /* a disagreement needs u within ~1e-6 (relative) of a boundary */
        if (S <= 4 * SM_FAST_LANES)
            CHECK(same_double >= n - 2, "S %d: the fast and the double draw agree on %d of %d",
                  S, same_double, n);
        CHECK(same_brute >= n - 2, "S %d: the fast draw and the lane-order inverse CDF agree "
              "on %d of %d", S, same_brute, n);
        free(z);
        free(zu);
    }
}

#define N_DRAWS 200000

static void check_chi2(const long *counts, const double *probs, int K, const char *what)
{
    double chi2 = 0.0;
    int df = -1;
    for (int k = 0; k < K; k++) {
        if (probs[k] <= 0.0) {
            CHECK(counts[k] == 0, "%s: outcome %d has probability 0", what, k);
            continue;
        }
        double e = probs[k] * N_DRAWS;
        chi2 += ((double)counts[k] - e) * ((double)counts[k] - e) / e;
        df++;
    }
    double bound = df + 6.0 * sqrt(2.0 * df) + 4.0;
    CHECK(chi2 <= bound, "%s: chi2 %.2f with %d dof (bound %.1f)", what, chi2, df, bound);
}

/* Draws with Philox uniforms as the sampler keys them, against the
 * softmax over j != i of (zu + w (z - zu)) / T, computed in double. */
static void test_draw_frequencies(void)
{
    enum { K = 7 };
    const float z[K] = {0.3f, -1.2f, 2.0f, 0.0f, -INFINITY, 1.1f, -0.4f};
    const float zu[K] = {0.1f, 0.5f, -1.0f, 0.7f, -INFINITY, 0.2f, 0.0f};
    for (int c = 0; c < 3; c++) {
        const float *g = c == 2 ? zu : NULL;
        double w = c == 2 ? 1.6 : 1.0, T = c == 1 ? 0.6 : 1.0;
        int32_t i = 3;
        double probs[K], total = 0.0;
        for (int k = 0; k < K; k++) {
            double v = g ? (1.0 - w) * zu[k] + w * z[k] : z[k];
            probs[k] = k == i || z[k] == -INFINITY ? 0.0 : exp(v / T);
            total += probs[k];
        }
        for (int k = 0; k < K; k++)
            probs[k] /= total;
        long counts[K] = {0};
        for (int n = 0; n < N_DRAWS; n++) {
            sm_uniforms u = sm_draw(77, NCTMC_RNG_SAMPLE_STEP, 3, n / 100, n % 100);
            counts[sm_fast_jump_draw(z, g, w, T, K, i, u.pick)]++;
        }
        check_chi2(counts, probs, K, c == 0 ? "plain" : c == 1 ? "temperature" : "guidance");
    }
}

/* Degenerate rows: nothing but the current state, or only -inf logits. */
static void test_draw_edges(void)
{
    const float one[1] = {0.0f};
    CHECK(sm_fast_jump_draw(one, NULL, 1.0, 1.0, 1, 0, 0.5) == 0, "S = 1 stays");
    const float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(sm_fast_jump_draw(ninf, NULL, 1.0, 1.0, 3, 1, 0.5) == 1, "all -inf stays");
    const float two[2] = {-INFINITY, 4.0f};
    CHECK(sm_fast_jump_draw(two, NULL, 1.0, 1.0, 2, 0, 0.999999) == 1, "the only weight");
    CHECK(sm_fast_jump_draw(two, NULL, 1.0, 1.0, 2, 0, 1e-12) == 1, "the only weight (small u)");
}

/* ------------------------------------------------------------------------ */
/* The CPU backend's op                                                     */
/* ------------------------------------------------------------------------ */

typedef struct op_rows {
    int32_t N, L, V, S;
    float *logits, *h;
    int32_t *x_t;
} op_rows;

static op_rows make_rows(int32_t B, int32_t L, int32_t S, int32_t V, uint64_t seed)
{
    op_rows o = {B * L, L, V, S, NULL, NULL, NULL};
    test_rng r = test_rng_seed(seed);
    o.logits = malloc(sizeof(float) * (size_t)o.N * (size_t)V);
    o.h = malloc(sizeof(float) * (size_t)o.N);
    o.x_t = malloc(sizeof(int32_t) * (size_t)o.N);
    test_fill_uniform(&r, o.logits, (size_t)o.N * (size_t)V, -4.0f, 4.0f);
    test_fill_uniform(&r, o.h, (size_t)o.N, 1.0f, 3.0f);
    for (int32_t k = 0; k < o.N; k++)
        o.x_t[k] = test_randint(&r, S);
    return o;
}

static void free_rows(op_rows *o)
{
    free(o->logits);
    free(o->h);
    free(o->x_t);
}

/* Tau-leaping from t = 0.999 to 0.001 (nearly every row jumps). */
static void run_op(nctmc_backend *be, const op_rows *o, int32_t exp_mode, int32_t *out)
{
    size_t NV = sizeof(float) * (size_t)o->N * (size_t)o->V, N = (size_t)o->N;
    float *lg = be->ops->alloc(be, NV), *h = be->ops->alloc(be, N * sizeof(float));
    int32_t *x = be->ops->alloc(be, N * sizeof(int32_t)),
            *xo = be->ops->alloc(be, N * sizeof(int32_t));
    be->ops->upload(be, lg, o->logits, NV);
    be->ops->upload(be, h, o->h, N * sizeof(float));
    be->ops->upload(be, x, o->x_t, N * sizeof(int32_t));
    nctmc_sample_step_args a;
    memset(&a, 0, sizeof a);
    a.n_rows = o->N;
    a.seq_len = o->L;
    a.row_stride = o->V;
    a.method = SM_METHOD_TAU_LEAPING;
    a.logits = lg;
    a.rate_h = h;
    a.cfg_scale = 1.0f;
    a.x_t = x;
    a.t = 0.999;
    a.s = 0.001;
    a.temperature = 0.9f;
    a.correction_temperature = 1.0f;
    a.seed = 4242;
    a.step = 1;
    a.first_sequence = 3;
    nctmc_fp fp = {NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, o->S, 0.0f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    a.fp = fp;
    a.x_out = xo;
    a.exp_mode = exp_mode;
    be->ops->sample_step(be, &a);
    be->ops->synchronize(be);
    be->ops->download(be, out, xo, N * sizeof(int32_t));
    void *bufs[] = {lg, h, x, xo};
    for (size_t k = 0; k < 4; k++)
        be->ops->free(be, bufs[k]);
}

/* The row's expected draw by the per-row math directly. */
static int32_t row_reference(const op_rows *o, int32_t r, bool fast)
{
    nctmc_fp fp = {NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, o->S, 0.0f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    sm_step st = sm_step_prepare(fp, SM_METHOD_TAU_LEAPING, 0.999, 0.001, 1.0, SM_CFG_SEPARATE,
                                 (double)0.9f, 1.0, 4242, 1);
    st.fast = fast;
    sm_row_in in = {o->logits + (size_t)r * (size_t)o->V, NULL, o->h[r], 0.0f, o->x_t[r],
                    3 + r / o->L, r % o->L};
    int32_t x = in.i;
    sm_sample_row(&st, &in, &x, NULL, NULL);
    return x;
}

static void test_op(nctmc_backend *be1, nctmc_backend *be3, uint64_t *draw_hash)
{
    op_rows o = make_rows(3, 16, 5000, 5008, 9);
    int32_t *a1 = malloc(sizeof(int32_t) * (size_t)o.N), *a3 = malloc(sizeof(int32_t) * (size_t)o.N),
            *b3 = malloc(sizeof(int32_t) * (size_t)o.N), *d3 = malloc(sizeof(int32_t) * (size_t)o.N);
    run_op(be1, &o, SM_EXP_FLOAT, a1);
    run_op(be3, &o, SM_EXP_FLOAT, a3);
    run_op(be3, &o, SM_EXP_FLOAT, b3);
    run_op(be3, &o, SM_EXP_DOUBLE, d3);
    int moved = 0, bad_fast = 0, bad_double = 0;
    for (int32_t r = 0; r < o.N; r++) {
        moved += a1[r] != o.x_t[r];
        bad_fast += a1[r] != row_reference(&o, r, true);
        bad_double += d3[r] != row_reference(&o, r, false);
        *draw_hash = fnv(*draw_hash, (uint32_t)a1[r]);
    }
    CHECK(memcmp(a1, a3, sizeof(int32_t) * (size_t)o.N) == 0, "1 and 3 threads differ");
    CHECK(memcmp(a3, b3, sizeof(int32_t) * (size_t)o.N) == 0, "two runs differ");
    CHECK(bad_fast == 0, "%d rows differ from sm_fast_jump_draw", bad_fast);
    CHECK(bad_double == 0, "exp_mode 0: %d rows differ from the double path", bad_double);
    CHECK(moved > o.N * 9 / 10, "only %d of %d rows jumped", moved, o.N);
    free(a1);
    free(a3);
    free(b3);
    free(d3);
    free_rows(&o);
}

/* The pinned bits of fixed long rows (S = 50304 as paper-small's; odd rows
 * guided, all at temperature 0.8): every lane mass, M, the total, and
 * draws. Any change to an operation of steps 1-3 changes the masses'
 * bits, which the draws alone would rarely show. */
static void test_pinned_draws(uint64_t *draw_hash)
{
    enum { S = 50304, ROWS = 24 };
    float *z = malloc(sizeof(float) * (S + 1));
    double mass[SM_FAST_LANES];
    test_rng r = test_rng_seed(31);
    for (int k = 0; k < ROWS; k++) {
        test_fill_uniform(&r, z, S + 1, -8.0f, 8.0f);
        const float *zu = k & 1 ? z + 1 : NULL;
        sm_fjump F = sm_fjump_of(z, zu, 1.3, 0.8, S, k * 997 % S);
        float M = sm_seq_fast_masses(&F, mass);
        double total = sm_fast_total(mass);
        uint64_t b;
        for (int p = 0; p < SM_FAST_LANES; p++) {
            memcpy(&b, &mass[p], sizeof b);
            *draw_hash = fnv(fnv(*draw_hash, (uint32_t)b), (uint32_t)(b >> 32));
        }
        memcpy(&b, &total, sizeof b);
        *draw_hash = fnv(fnv(fnv(*draw_hash, (uint32_t)b), (uint32_t)(b >> 32)), bits_of(M));
        for (int n = 0; n < 8; n++) {
            double u = uniform01(&r);
            *draw_hash = fnv(*draw_hash, (uint32_t)sm_fast_jump_draw(z, zu, 1.3, 0.8, S,
                                                                      k * 997 % S, u));
        }
    }
    free(z);
}

int main(int argc, char **argv)
{
#if defined(__x86_64__) && defined(__FMA__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("fma")) {
        printf("sampler_fast: skipped: built with FMA instructions, the CPU has none\n");
        return 77;
    }
#endif
    if (argc >= 2 && strcmp(argv[1], "--stride") == 0) {
        uint32_t stride = argc >= 3 ? (uint32_t)strtoul(argv[2], NULL, 10) : PIN_STRIDE;
        test_expf_accuracy(stride ? stride : 1u, true);
        return test_finish("sampler_fast --stride");
    }
    test_expf_special();
    test_expf_accuracy(PIN_STRIDE, true);
    test_draw_edges();
    test_draw_against_double();
    test_draw_frequencies();

    uint64_t draw_hash = 0xcbf29ce484222325ull;
    char err[256] = "";
    nctmc_backend *be1 = cpu_backend_create(1, err, sizeof err);
    nctmc_backend *be3 = cpu_backend_create(3, err, sizeof err);
    CHECK(be1 && be3, "CPU backend: %s", err);
    if (be1 && be3)
        test_op(be1, be3, &draw_hash);
    if (be1)
        be1->ops->destroy(be1);
    if (be3)
        be3->ops->destroy(be3);
    test_pinned_draws(&draw_hash);
    printf("fast draws: hash %016llx\n", (unsigned long long)draw_hash);
    CHECK(draw_hash == PIN_DRAW_HASH, "the fast draws changed: hash %016llx",
          (unsigned long long)draw_hash);
    return test_finish("sampler_fast");
}
