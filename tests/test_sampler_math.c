/*
 * test_sampler_math.c — the samplers' internals (the public half,
 * nctmc_sample(), is test_sampler.c):
 *
 *  1. lib/math/sample_math.h against brute forces written again here in double
 *     from docs/math.md and paper App. E: the clean-token recovery returns p0
 *     exactly when fed the true reverse rates of a known product
 *     distribution; the posterior sampler's probabilities against the O(S^2)
 *     sum; the jump distribution with temperature and classifier-free
 *     guidance; the tau-leaping / Euler probabilities; the denoising argmax;
 *     and the empirical frequencies of many draws against the computed
 *     probabilities (chi-square).
 *  2. The CPU backend's sample_step op: every method equals the per-row
 *     math bit for bit, on 1 and 3 threads; fixed rows never move; the
 *     vocabulary padding is never read. Whole chains driven with the exact
 *     rates of a product distribution end at that distribution.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nctmc.h"
#include "math/sample_math.h"
#include "test_util.h"

_Static_assert(SM_METHOD_TAU_LEAPING == (int)NCTMC_SAMPLE_TAU_LEAPING, "method codes");
_Static_assert(SM_METHOD_EULER == (int)NCTMC_SAMPLE_EULER, "method codes");
_Static_assert(SM_METHOD_POSTERIOR == (int)NCTMC_SAMPLE_POSTERIOR, "method codes");

#define REF_PI 3.14159265358979323846
#define MAX_S 32
#define SCHEDULE_EPS 1e-3f

/* ------------------------------------------------------------------------ */
/* The reference forward process, written again (not forward_process.h)     */
/* ------------------------------------------------------------------------ */

static nctmc_fp make_fp(int32_t process, int32_t schedule, int32_t vocab, float p_u)
{
    nctmc_fp fp;
    memset(&fp, 0, sizeof fp);
    fp.process = process;
    fp.schedule = schedule;
    fp.vocab = vocab;
    fp.mixture_uniform = p_u;
    fp.schedule_eps = SCHEDULE_EPS;
    return fp;
}

static double ref_alpha(const nctmc_fp *fp, double t)
{
    switch (fp->schedule) {
    case NCTMC_FP_LINEAR: return 1.0 - t;
    case NCTMC_FP_COSINE: return cos(REF_PI * t / 2.0);
    default: return 1.0 - (1.0 - (double)SCHEDULE_EPS) * t;
    }
}

static double ref_sigma(const nctmc_fp *fp, double t)
{
    double da;
    switch (fp->schedule) {
    case NCTMC_FP_LINEAR: da = -1.0; break;
    case NCTMC_FP_COSINE: da = -(REF_PI / 2.0) * sin(REF_PI * t / 2.0); break;
    default: da = -(1.0 - (double)SCHEDULE_EPS); break;
    }
    return -da / ref_alpha(fp, t);
}

static int ref_n_data(const nctmc_fp *fp)
{
    return fp->process == NCTMC_FP_UNIFORM ? fp->vocab : fp->vocab - 1;
}

static double ref_pi(const nctmc_fp *fp, int j)
{
    int S = fp->vocab;
    if (fp->process == NCTMC_FP_UNIFORM)
        return 1.0 / S;
    if (fp->process == NCTMC_FP_MASKED)
        return j == S - 1 ? 1.0 : 0.0;
    double pu = (double)fp->mixture_uniform;
    return j == S - 1 ? 1.0 - pu : pu / (S - 1);
}

/* q_{t|s}(i | x) for alpha ratio a (s = 0: a = alpha_t) */
static double ref_transition(const nctmc_fp *fp, double a, int i, int x)
{
    return (i == x ? a : 0.0) + (1.0 - a) * ref_pi(fp, i);
}

static const char *proc_name(int32_t process)
{
    return process == NCTMC_FP_UNIFORM ? "uniform" : process == NCTMC_FP_MASKED ? "masked"
                                                                              : "mixture";
}

/* A strictly positive random distribution over the data tokens (mask: 0). */
static void random_p0(test_rng *rng, const nctmc_fp *fp, double *p0)
{
    double sum = 0.0;
    for (int j = 0; j < fp->vocab; j++) {
        double u = (double)test_uniform(rng, 0.0f, 1.0f);
        p0[j] = j < ref_n_data(fp) ? 0.02 + u * u * u : 0.0;
        sum += p0[j];
    }
    for (int j = 0; j < fp->vocab; j++)
        p0[j] /= sum;
}

/*
 * The true reverse rates of one position whose clean token is p0 (the other
 * positions independent, so they carry no information): the marginal
 * q = alpha p0 + (1 - alpha) pi and R(i -> j) = R_fwd(j -> i) q(j) / q(i),
 * R_fwd(j -> i) = sigma pi_i. Written as the model would output them: logits
 * z_j = log R(i -> j) + offset (any offset), z_i arbitrary, and the head's
 * h = log lambda - log sigma. Returns false where pi_i = 0 (no reverse rate).
 */
static bool true_rates(const nctmc_fp *fp, double t, const double *p0, int i, float offset,
                       float z_i, float *z, float *h)
{
    double a = ref_alpha(fp, t), sigma = ref_sigma(fp, t), q[MAX_S];
    for (int j = 0; j < fp->vocab; j++)
        q[j] = a * p0[j] + (1.0 - a) * ref_pi(fp, j);
    if (ref_pi(fp, i) == 0.0)
        return false;
    double lambda = 0.0;
    for (int j = 0; j < fp->vocab; j++) {
        if (j == i) {
            z[j] = z_i;
            continue;
        }
        double rate = sigma * ref_pi(fp, i) * q[j] / q[i];
        lambda += rate;
        z[j] = (float)(log(rate) + (double)offset);
    }
    *h = (float)(log(lambda) - log(sigma));
    return true;
}

/* p0 recovered by the header from a row (z, h) at state i, time t. */
static sm_p0 recover(const nctmc_fp *fp, double t, const float *z, float h, int i, double temp)
{
    double log_rate = sm_log_rate(fp, t, i, h, 0, 0.0f, 1.0);
    sm_jump J = sm_jump_init(z, NULL, 1.0, temp, fp->vocab, i);
    return sm_p0_init(fp, fp_alpha(fp, t), log(fp_sigma(fp, t)), log_rate, J);
}

/* ------------------------------------------------------------------------ */
/* 1. sample_math.h                                                         */
/* ------------------------------------------------------------------------ */

static const int32_t procs[3] = {NCTMC_FP_UNIFORM, NCTMC_FP_MASKED, NCTMC_FP_MIXTURE};

static void test_recovery_exact(void)
{
    test_rng rng = test_rng_seed(1);
    static const double times[] = {0.02, 0.3, 0.6, 0.9};
    static const int32_t vocabs[] = {5, 16};
    double worst = 0.0;
    char where[160] = "(none)";
    int n_point = 0, n_point_ok = 0;
    for (int pr = 0; pr < 3; pr++)
        for (int32_t sched = 0; sched < 3; sched++)
            for (int v = 0; v < 2; v++)
                for (int ti = 0; ti < 4; ti++) {
                    nctmc_fp fp = make_fp(procs[pr], sched, vocabs[v], 0.3f);
                    double t = times[ti], p0[MAX_S];
                    random_p0(&rng, &fp, p0);
                    for (int i = 0; i < fp.vocab; i++) {
                        float z[MAX_S], h = 0.0f;
                        float off = test_uniform(&rng, -3.0f, 3.0f);
                        float zi = test_uniform(&rng, -5.0f, 5.0f);
                        if (!true_rates(&fp, t, p0, i, off, zi, z, &h)) {
                            /* pi_i = 0: x0 = i for certain */
                            for (int j = 0; j < fp.vocab; j++)
                                z[j] = test_uniform(&rng, -2.0f, 2.0f);
                            sm_p0 P = recover(&fp, t, z, h, i, 1.0);
                            n_point++;
                            n_point_ok += P.mode == SM_P0_POINT && sm_p0_prob(&P, i) == 1.0;
                            continue;
                        }
                        sm_p0 P = recover(&fp, t, z, h, i, 1.0);
                        /* float logits carry ~1e-7 relative error; p0 = (q - ...)/alpha
                         * magnifies it by 1/alpha */
                        double tol = 2e-6 / ref_alpha(&fp, t);
                        for (int j = 0; j < ref_n_data(&fp); j++) {
                            double e = fabs(sm_p0_prob(&P, j) - p0[j]) / tol;
                            if (e > worst) {
                                worst = e;
                                snprintf(where, sizeof where, "%s sched %d S=%d t=%g i=%d j=%d",
                                         proc_name(fp.process), sched, fp.vocab, t, i, j);
                            }
                        }
                    }
                }
    printf("recovery: worst |p0_hat - p0| / tol = %.3g at %s\n", worst, where);
    CHECK(worst <= 1.0, "recovered p0 differs from the true p0: %.3g x tol at %s", worst, where);
    CHECK(n_point > 0 && n_point_ok == n_point,
          "masked data tokens: p0 = e_i in %d of %d cases", n_point_ok, n_point);
}

/* The masked process at the mask: p0 is the jump distribution itself, for
 * any logits. */
static void test_recovery_masked_is_jump(void)
{
    test_rng rng = test_rng_seed(2);
    double worst = 0.0;
    for (int c = 0; c < 50; c++) {
        nctmc_fp fp = make_fp(NCTMC_FP_MASKED, c % 3, 9, 0.0f);
        double t = test_uniform(&rng, 0.01f, 0.99f);
        float z[MAX_S];
        test_fill_uniform(&rng, z, MAX_S, -4.0f, 4.0f);
        int m = fp.vocab - 1;
        sm_p0 P = recover(&fp, t, z, 0.0f, m, 1.0);
        sm_jump J = sm_jump_init(z, NULL, 1.0, 1.0, fp.vocab, m);
        for (int j = 0; j < m; j++)
            worst = fmax(worst, fabs(sm_p0_prob(&P, j) - exp(sm_jump_logprob(&J, j))));
    }
    CHECK(worst <= 1e-12, "masked: p0 differs from r at the mask by %.3g", worst);
}

/* The posterior sampler's closed forms against sum_x0 p0(x0) q(x_t | x_s)
 * q(x_s | x0), summed over every (x_s, x0) pair. */
static void test_posterior_brute_force(void)
{
    test_rng rng = test_rng_seed(3);
    static const double pairs[][2] = {{0.9, 0.8}, {0.5, 0.49}, {0.2, 0.01}, {0.999, 0.5}};
    double worst = 0.0;
    char where[160] = "(none)";
    for (int pr = 0; pr < 3; pr++)
        for (int32_t sched = 0; sched < 3; sched++)
            for (int k = 0; k < 4; k++)
                for (int32_t S = 4; S <= 16; S += 12) {
                    nctmc_fp fp = make_fp(procs[pr], sched, S, 0.4f);
                    double t = pairs[k][0], s = pairs[k][1];
                    double at = ref_alpha(&fp, t), as = ref_alpha(&fp, s);
                    for (int i = 0; i < S; i++) {
                        float z[MAX_S];
                        test_fill_uniform(&rng, z, MAX_S, -3.0f, 3.0f);
                        float h = test_uniform(&rng, -3.0f, 3.0f);
                        sm_p0 P = recover(&fp, t, z, h, i, 1.0);
                        sm_posterior Q = sm_posterior_init(&fp, &P, fp_alpha(&fp, t),
                                                           fp_alpha(&fp, s));
                        double w[MAX_S], total = 0.0;
                        for (int x = 0; x < S; x++) {
                            w[x] = 0.0;
                            for (int x0 = 0; x0 < ref_n_data(&fp); x0++)
                                w[x] += sm_p0_prob(&P, x0) * ref_transition(&fp, at / as, i, x) *
                                        ref_transition(&fp, as, x, x0);
                            total += w[x];
                        }
                        for (int x = 0; x < S; x++) {
                            double e = fabs(sm_posterior_prob(&fp, &P, &Q, x) - w[x] / total);
                            if (e > worst) {
                                worst = e;
                                snprintf(where, sizeof where, "%s sched %d S=%d t=%g s=%g i=%d x=%d",
                                         proc_name(fp.process), sched, S, t, s, i, x);
                            }
                        }
                    }
                }
    printf("posterior: worst |closed form - brute force| = %.3g at %s\n", worst, where);
    CHECK(worst <= 1e-12, "posterior probabilities differ by %.3g at %s", worst, where);
}

/* softmax over j != i of (z / T), in double, by the definition */
static void ref_log_softmax(const float *z, int S, int i, double T, double *out)
{
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < S; j++)
        if (j != i)
            mx = fmax(mx, (double)z[j] / T);
    for (int j = 0; j < S; j++)
        if (j != i)
            sum += exp((double)z[j] / T - mx);
    for (int j = 0; j < S; j++)
        out[j] = j == i ? -INFINITY : (double)z[j] / T - mx - log(sum);
}

static void test_jump_and_guidance(void)
{
    test_rng rng = test_rng_seed(4);
    static const double temps[] = {0.5, 1.0, 2.0};
    static const double scales[] = {0.0, 0.5, 1.0, 3.0};
    double worst_r = 0.0, worst_rate = 0.0;
    bool masked_ok = true;
    for (int c = 0; c < 200; c++) {
        int S = 2 + c % 15, i = test_randint(&rng, S);
        double T = temps[c % 3], w = scales[(c / 3) % 4];
        float zc[MAX_S], zu[MAX_S];
        test_fill_uniform(&rng, zc, MAX_S, -4.0f, 4.0f);
        test_fill_uniform(&rng, zu, MAX_S, -4.0f, 4.0f);
        double lc[MAX_S], lu[MAX_S], comb[MAX_S], mx = -INFINITY, sum = 0.0;
        ref_log_softmax(zc, S, i, T, lc);
        ref_log_softmax(zu, S, i, T, lu);
        for (int j = 0; j < S; j++)
            if (j != i) {
                comb[j] = (1.0 - w) * lu[j] + w * lc[j];
                mx = fmax(mx, comb[j]);
            }
        for (int j = 0; j < S; j++)
            if (j != i)
                sum += exp(comb[j] - mx);
        sm_jump J = sm_jump_init(zc, zu, w, T, S, i);
        sm_jump Jc = sm_jump_init(zc, NULL, 1.0, T, S, i);
        for (int j = 0; j < S; j++) {
            if (j == i) {
                worst_r = fmax(worst_r, sm_jump_logprob(&J, j) == -INFINITY ? 0.0 : 1.0);
                continue;
            }
            worst_r = fmax(worst_r, fabs(sm_jump_logprob(&J, j) - (comb[j] - mx - log(sum))));
            worst_r = fmax(worst_r, fabs(sm_jump_logprob(&Jc, j) - lc[j]));
        }
        /* log rates: (1 - w) * uncond + w * cond, each h + log sigma */
        nctmc_fp fp = make_fp(NCTMC_FP_UNIFORM, c % 3, S, 0.0f);
        double t = test_uniform(&rng, 0.01f, 0.99f);
        float hc = test_uniform(&rng, -3.0f, 3.0f), hu = test_uniform(&rng, -3.0f, 3.0f);
        double want = (1.0 - w) * ((double)hu + log(ref_sigma(&fp, t))) +
                      w * ((double)hc + log(ref_sigma(&fp, t)));
        double got = sm_log_rate(&fp, t, i, hc, 1, hu, w);
        worst_rate = fmax(worst_rate, fabs(got - want) / fmax(1.0, fabs(want)));
        /* masked: the exact rate, -inf at data tokens, never NaN under w */
        nctmc_fp mfp = make_fp(NCTMC_FP_MASKED, c % 3, S, 0.0f);
        double lm = sm_log_rate(&mfp, t, i, hc, 1, hu, w);
        double a = ref_alpha(&mfp, t);
        double lm_want = i == S - 1 ? log(ref_sigma(&mfp, t) * a / (1.0 - a)) : -INFINITY;
        if (!(lm == lm_want || fabs(lm - lm_want) <= 1e-12 * fabs(lm_want)))
            masked_ok = false;
    }
    CHECK(worst_r <= 1e-12, "jump log-probs (temperature, guidance) off by %.3g", worst_r);
    CHECK(worst_rate <= 1e-12, "guided log rate off by %.3g (relative)", worst_rate);
    CHECK(masked_ok, "masked log rate under guidance is not the exact schedule rate");
}

static void test_step_probabilities(void)
{
    static const double rates[] = {1e-9, 0.1, 1.0, 50.0};
    static const double taus[] = {1e-3, 0.1, 0.0};
    double worst_tl = 0.0, worst_eu = 0.0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++) {
            double lam = rates[a], tau = taus[b];
            /* the naive 1 - exp(-x) loses ~1e-16 absolute to cancellation */
            double want_tl = 1.0 - exp(-lam * tau);
            double tl = sm_tau_leap_prob(log(lam), tau);
            worst_tl = fmax(worst_tl, fabs(tl - want_tl) / (1e-15 + 1e-12 * want_tl));
            double want_eu = fmin(lam * tau, 1.0);
            double eu = sm_euler_prob(log(lam), tau);
            worst_eu = fmax(worst_eu, fabs(eu - want_eu) / (1e-300 + 1e-12 * want_eu));
        }
    CHECK(worst_tl <= 1.0, "tau-leaping jump probability off by %.3g x tolerance", worst_tl);
    CHECK(worst_eu <= 1.0, "Euler jump probability off by %.3g x tolerance", worst_eu);
    CHECK(sm_tau_leap_prob(-INFINITY, 0.5) == 0.0 && sm_euler_prob(-INFINITY, 0.5) == 0.0,
          "a zero rate must never jump");
}

/* argmax_x0 p0(x0) q_{t|0}(i | x0) by brute force. */
static void test_denoise(void)
{
    test_rng rng = test_rng_seed(5);
    int mismatches = 0, cases = 0, moved = 0;
    for (int c = 0; c < 300; c++) {
        nctmc_fp fp = make_fp(procs[c % 3], c % 2, 3 + c % 9, 0.3f);
        double t = c % 4 == 0 ? 0.6 : test_uniform(&rng, 0.001f, 0.3f);
        int i = test_randint(&rng, fp.vocab);
        float z[MAX_S];
        test_fill_uniform(&rng, z, MAX_S, -6.0f, 6.0f);
        float h = test_uniform(&rng, -4.0f, 8.0f);
        sm_p0 P = recover(&fp, t, z, h, i, 1.0);
        int best = 0;
        double best_s = -1.0;
        for (int x0 = 0; x0 < ref_n_data(&fp); x0++) {
            double s = sm_p0_prob(&P, x0) * ref_transition(&fp, ref_alpha(&fp, t), i, x0);
            if (s > best_s * (1.0 + 1e-12)) {
                best_s = s;
                best = x0;
            }
        }
        int got = sm_denoise(&fp, &P, fp_alpha(&fp, t));
        cases++;
        mismatches += got != best;
        moved += got != i;
    }
    CHECK(mismatches == 0, "denoise differs from the brute-force argmax in %d of %d cases",
          mismatches, cases);
    CHECK(moved > 0, "no denoising case changed its token (the test would be vacuous)");
}

/* ---- empirical frequencies ---------------------------------------------- */

#define N_DRAWS 200000

/* Pearson's chi-square of counts against probs; a count where the
 * probability is 0 fails outright. Deterministic seeds: the bound is the
 * mean plus about six standard deviations. */
static void check_frequencies(const long *counts, const double *probs, int K, long n,
                              const char *what)
{
    double chi2 = 0.0;
    int df = -1;
    bool impossible = false;
    for (int k = 0; k < K; k++) {
        double e = probs[k] * (double)n;
        if (probs[k] <= 0.0) {
            impossible |= counts[k] != 0;
            continue;
        }
        df++;
        chi2 += ((double)counts[k] - e) * ((double)counts[k] - e) / e;
    }
    double bound = df + 6.0 * sqrt(2.0 * (df > 0 ? df : 1)) + 4.0;
    CHECK(!impossible && chi2 <= bound, "%s: chi2 = %.2f with %d dof (bound %.1f)%s", what,
          chi2, df, bound, impossible ? ", a zero-probability outcome was drawn" : "");
}

typedef struct draw_case {
    nctmc_fp fp;
    int32_t method;
    double t, s, w, temp, tau_sc;
    float z[MAX_S], zu[MAX_S], h, hu;
    bool guided;
    int32_t rule;  /* SM_CFG_* */
    int32_t i;
} draw_case;

/* Draws N_DRAWS rows (positions 0 .. N-1 of sequence 3) through
 * sm_sample_row; counts outcomes (the proposal for CORRECT). */
static void count_draws(const draw_case *c, long *counts, bool *prob_ok)
{
    sm_step st = sm_step_prepare(c->fp, c->method, c->t, c->s, c->w, c->rule, c->temp,
                                 c->tau_sc, 77, 5);
    sm_row_in in = {c->z, c->guided ? c->zu : NULL, c->h, c->hu, c->i, 3, 0};
    sm_p0 P = sm_row_p0(&st, &in);
    *prob_ok = true;
    for (int k = 0; k < c->fp.vocab; k++)
        counts[k] = 0;
    for (int32_t n = 0; n < N_DRAWS; n++) {
        in.position = n;
        int32_t x = -1, prop = -1;
        float prob = 0.0f;
        sm_sample_row(&st, &in, &x, &prop, &prob);
        if (c->method == SM_METHOD_CORRECT) {
            x = prop;
            if (prob != (float)sm_p0_prob(&P, prop))
                *prob_ok = false;
        }
        if (x >= 0 && x < c->fp.vocab)
            counts[x]++;
    }
}

/* What the draws should follow: for tau-leaping and Euler stay w.p. 1 - p,
 * else r; the posterior's probabilities; Temp(p0; tau_sc). */
static void expected_probs(const draw_case *c, double *probs)
{
    int S = c->fp.vocab;
    sm_step st = sm_step_prepare(c->fp, c->method, c->t, c->s, c->w, c->rule, c->temp,
                                 c->tau_sc, 77, 5);
    sm_row_in in = {c->z, c->guided ? c->zu : NULL, c->h, c->hu, c->i, 3, 0};
    double log_rate = sm_row_log_rate(&st, &in);
    sm_jump J = sm_jump_init(c->z, in.zu, c->w, c->temp, S, c->i);
    sm_p0 P = sm_row_p0(&st, &in);
    double lam_tau = exp(log_rate) * (c->t - c->s);
    double p = c->method == SM_METHOD_EULER ? fmin(lam_tau, 1.0) : 1.0 - exp(-lam_tau);
    double norm = 0.0;
    for (int x = 0; x < S; x++) {
        switch (c->method) {
        case SM_METHOD_POSTERIOR: {
            sm_posterior Q = sm_posterior_init(&c->fp, &P, st.alpha_t, st.alpha_s);
            probs[x] = sm_posterior_prob(&c->fp, &P, &Q, x);
            break;
        }
        case SM_METHOD_CORRECT:
            probs[x] = x < ref_n_data(&c->fp) ? pow(sm_p0_prob(&P, x), 1.0 / c->tau_sc) : 0.0;
            norm += probs[x];
            break;
        default: probs[x] = x == c->i ? 1.0 - p : p * exp(sm_jump_logprob(&J, x)); break;
        }
    }
    if (c->method == SM_METHOD_CORRECT)
        for (int x = 0; x < S; x++)
            probs[x] /= norm;
}

static draw_case make_draw_case(test_rng *rng, int32_t process, int32_t method, int32_t S)
{
    draw_case c;
    memset(&c, 0, sizeof c);
    c.fp = make_fp(process, NCTMC_FP_LINEAR, S, 0.3f);
    c.method = method;
    c.t = 0.6;
    c.s = 0.5;
    c.w = 1.0;
    c.temp = 1.0;
    c.tau_sc = 0.5;
    test_fill_uniform(rng, c.z, MAX_S, -1.5f, 1.5f);
    test_fill_uniform(rng, c.zu, MAX_S, -1.5f, 1.5f);
    /* lambda tau = e^h sigma tau ~ 0.5: jumps and stays both frequent */
    c.h = (float)log(0.5 / (ref_sigma(&c.fp, c.t) * (c.t - c.s)));
    c.hu = c.h + 0.3f;
    c.i = process == NCTMC_FP_UNIFORM ? 2 : S - 1;
    return c;
}

static void test_draw_frequencies(void)
{
    test_rng rng = test_rng_seed(6);
    static const char *mname[] = {"tau-leaping", "euler", "posterior", "denoise", "correct"};
    long counts[MAX_S];
    double probs[MAX_S];
    char what[128];
    for (int pr = 0; pr < 3; pr++)
        for (int32_t method = 0; method <= SM_METHOD_CORRECT; method++) {
            if (method == SM_METHOD_DENOISE)
                continue;
            draw_case c = make_draw_case(&rng, procs[pr], method, 7);
            if (method == SM_METHOD_EULER && pr == 2)
                c.h += 2.0f; /* lambda tau ~ 3.7: the stay probability is clipped to 0 */
            bool prob_ok;
            count_draws(&c, counts, &prob_ok);
            expected_probs(&c, probs);
            snprintf(what, sizeof what, "%s / %s draws", mname[method], proc_name(c.fp.process));
            check_frequencies(counts, probs, c.fp.vocab, N_DRAWS, what);
            CHECK(prob_ok, "%s: reported proposal probability is not p0(proposal)", what);
        }
    /* guidance with temperature, mixture at a data token */
    draw_case g = make_draw_case(&rng, NCTMC_FP_MIXTURE, SM_METHOD_TAU_LEAPING, 9);
    g.guided = true;
    g.w = 2.0;
    g.temp = 0.7;
    g.i = 3;
    bool ok;
    count_draws(&g, counts, &ok);
    expected_probs(&g, probs);
    check_frequencies(counts, probs, 9, N_DRAWS, "guided tau-leaping draws");
    /* rate-level guidance: the exit rate carries the factor F (here > 1),
     * the posterior sampler reads the guided rates */
    for (int32_t method = SM_METHOD_TAU_LEAPING; method <= SM_METHOD_POSTERIOR; method++) {
        draw_case r = make_draw_case(&rng, procs[method], method, 8);
        r.guided = true;
        r.rule = SM_CFG_RATES;
        r.w = 2.5;
        r.temp = 0.8;
        count_draws(&r, counts, &ok);
        expected_probs(&r, probs);
        snprintf(what, sizeof what, "rate-level guided %s / %s draws", mname[method],
                 proc_name(r.fp.process));
        check_frequencies(counts, probs, 8, N_DRAWS, what);
    }
}

static void test_prior_frequencies(void)
{
    long counts[MAX_S];
    double probs[MAX_S];
    for (int pr = 0; pr < 3; pr++) {
        nctmc_fp fp = make_fp(procs[pr], 0, 6, 0.3f);
        for (int k = 0; k < fp.vocab; k++) {
            counts[k] = 0;
            probs[k] = ref_pi(&fp, k);
        }
        for (int32_t n = 0; n < N_DRAWS; n++)
            counts[sm_prior_token(&fp, sm_draw(9, NCTMC_RNG_SAMPLE_PRIOR, 0, n / 64, n % 64))]++;
        char what[64];
        snprintf(what, sizeof what, "prior draws (%s)", proc_name(fp.process));
        check_frequencies(counts, probs, fp.vocab, N_DRAWS, what);
    }
}

/* Every field of the counter changes the numbers, the high bits of the
 * sequence included; the same counter gives the same numbers. */
static void test_counter_fields(void)
{
    sm_uniforms base = sm_draw(5, NCTMC_RNG_SAMPLE_STEP, 3, 7, 11);
    sm_uniforms same = sm_draw(5, NCTMC_RNG_SAMPLE_STEP, 3, 7, 11);
    sm_uniforms v[6] = {
        sm_draw(6, NCTMC_RNG_SAMPLE_STEP, 3, 7, 11),
        sm_draw(5, NCTMC_RNG_SAMPLE_CORRECT, 3, 7, 11),
        sm_draw(5, NCTMC_RNG_SAMPLE_STEP, 4, 7, 11),
        sm_draw(5, NCTMC_RNG_SAMPLE_STEP, 3, 8, 11),
        sm_draw(5, NCTMC_RNG_SAMPLE_STEP, 3, 7 + ((int64_t)1 << 32), 11),
        sm_draw(5, NCTMC_RNG_SAMPLE_STEP, 3, 7, 12),
    };
    CHECK(base.decide == same.decide && base.pick == same.pick, "draws are not reproducible");
    int distinct = 0;
    for (int k = 0; k < 6; k++)
        distinct += v[k].decide != base.decide && v[k].pick != base.pick;
    CHECK(distinct == 6, "only %d of 6 counter fields change the draw", distinct);
    CHECK(base.decide > 0.0 && base.decide < 1.0 && base.pick > 0.0 && base.pick < 1.0,
          "uniforms outside (0, 1)");
}

/* ------------------------------------------------------------------------ */
/* 2. The CPU backend's op                                                  */
/* ------------------------------------------------------------------------ */

typedef struct op_case {
    nctmc_fp fp;
    int32_t B, L, V, method;
    bool guided;
    int64_t N;
    float *logits, *logits_u, *h, *hu;
    int32_t *x_t, *fixed_tokens;
    uint8_t *fixed_mask;
    int32_t rule;  /* SM_CFG_* */
} op_case;

static void op_case_fill(op_case *c, test_rng *rng)
{
    size_t NV = (size_t)c->N * (size_t)c->V;
    c->logits = malloc(NV * sizeof(float));
    c->logits_u = malloc(NV * sizeof(float));
    c->h = malloc((size_t)c->N * sizeof(float));
    c->hu = malloc((size_t)c->N * sizeof(float));
    c->x_t = malloc((size_t)c->N * sizeof(int32_t));
    c->fixed_tokens = malloc((size_t)c->N * sizeof(int32_t));
    c->fixed_mask = malloc((size_t)c->N);
    for (int64_t r = 0; r < c->N; r++) {
        for (int32_t j = 0; j < c->V; j++) {
            /* the padding is NaN: reading it would poison the row */
            bool pad = j >= c->fp.vocab;
            c->logits[r * c->V + j] = pad ? NAN : test_uniform(rng, -3.0f, 3.0f);
            c->logits_u[r * c->V + j] = pad ? NAN : test_uniform(rng, -3.0f, 3.0f);
        }
        c->h[r] = test_uniform(rng, -2.0f, 3.0f);
        c->hu[r] = test_uniform(rng, -2.0f, 3.0f);
        c->x_t[r] = test_randint(rng, c->fp.vocab);
        c->fixed_mask[r] = test_randint(rng, 4) == 0;
        c->fixed_tokens[r] = test_randint(rng, ref_n_data(&c->fp));
    }
}

static void op_case_free(op_case *c)
{
    free(c->logits);
    free(c->logits_u);
    free(c->h);
    free(c->hu);
    free(c->x_t);
    free(c->fixed_tokens);
    free(c->fixed_mask);
}

static void *dev_copy(nctmc_backend *be, const void *src, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    if (d && src)
        be->ops->upload(be, d, src, bytes);
    return d;
}

typedef struct op_result {
    int32_t *x_out, *proposal;
    float *prob;
} op_result;

static nctmc_sample_step_args op_args(const op_case *c)
{
    nctmc_sample_step_args a;
    memset(&a, 0, sizeof a);
    a.n_rows = c->N;
    a.seq_len = c->L;
    a.row_stride = c->V;
    a.method = c->method;
    a.cfg_scale = c->guided ? 1.7f : 1.0f;
    a.cfg_rule = c->rule;
    a.t = 0.7;
    a.s = 0.55;
    a.temperature = 0.8f;
    a.correction_temperature = 0.3f;
    a.seed = 1234;
    a.step = 9;
    a.first_sequence = 40;
    a.fp = c->fp;
    return a;
}

/* Runs the op on backend memory and downloads the outputs into *res. */
static void run_op(nctmc_backend *be, const op_case *c, op_result *res)
{
    size_t NV = (size_t)c->N * (size_t)c->V * sizeof(float), N = (size_t)c->N;
    bool masked = c->fp.process == NCTMC_FP_MASKED;
    nctmc_sample_step_args a = op_args(c);
    float *lg = dev_copy(be, c->logits, NV), *lu = dev_copy(be, c->logits_u, NV);
    float *h = dev_copy(be, c->h, N * sizeof(float)), *hu = dev_copy(be, c->hu, N * sizeof(float));
    int32_t *x = dev_copy(be, c->x_t, N * sizeof(int32_t));
    int32_t *ft = dev_copy(be, c->fixed_tokens, N * sizeof(int32_t));
    uint8_t *fm = dev_copy(be, c->fixed_mask, N);
    int32_t *xo = dev_copy(be, NULL, N * sizeof(int32_t)), *pr = dev_copy(be, NULL, N * sizeof(int32_t));
    float *pp = dev_copy(be, NULL, N * sizeof(float));
    a.logits = lg;
    a.rate_h = masked ? NULL : h;
    a.logits_uncond = c->guided ? lu : NULL;
    a.rate_h_uncond = c->guided && !masked ? hu : NULL;
    a.x_t = x;
    a.fixed_mask = fm;
    a.fixed_tokens = ft;
    a.x_out = xo;
    a.proposal = pr;
    a.proposal_prob = pp;
    be->ops->sample_step(be, &a);
    be->ops->download(be, res->x_out, xo, N * sizeof(int32_t));
    be->ops->download(be, res->proposal, pr, N * sizeof(int32_t));
    be->ops->download(be, res->prob, pp, N * sizeof(float));
    CHECK(be->ops->synchronize(be) == NCTMC_OK, "sample_step: %s", be->error);
    void *all[] = {lg, lu, h, hu, x, ft, fm, xo, pr, pp};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        be->ops->free(be, all[k]);
}

/* The op's outputs, row by row, against sm_sample_row called here. */
static int count_row_mismatches(const op_case *c, const op_result *res)
{
    nctmc_sample_step_args a = op_args(c);
    sm_step st = sm_step_prepare(c->fp, c->method, a.t, a.s, a.cfg_scale, a.cfg_rule,
                                 a.temperature, a.correction_temperature, a.seed, a.step);
    bool masked = c->fp.process == NCTMC_FP_MASKED;
    int bad = 0;
    for (int64_t r = 0; r < c->N; r++) {
        bool corr = c->method == SM_METHOD_CORRECT;
        if (c->fixed_mask[r]) {
            bad += corr ? res->proposal[r] != c->x_t[r] || res->prob[r] != -1.0f
                        : res->x_out[r] != c->fixed_tokens[r];
            continue;
        }
        sm_row_in in = {c->logits + r * c->V, c->guided ? c->logits_u + r * c->V : NULL,
                        masked ? 0.0f : c->h[r], masked ? 0.0f : c->hu[r], c->x_t[r],
                        a.first_sequence + r / c->L, (int32_t)(r % c->L)};
        int32_t x = -1, prop = -1;
        float prob = 0.0f;
        sm_sample_row(&st, &in, &x, &prop, &prob);
        bad += corr ? prop != res->proposal[r] || memcmp(&prob, &res->prob[r], sizeof prob) != 0
                    : x != res->x_out[r];
    }
    return bad;
}

static void op_result_alloc(op_result *r, int64_t N)
{
    r->x_out = calloc((size_t)N, sizeof(int32_t));
    r->proposal = calloc((size_t)N, sizeof(int32_t));
    r->prob = calloc((size_t)N, sizeof(float));
}

static void op_result_free(op_result *r)
{
    free(r->x_out);
    free(r->proposal);
    free(r->prob);
}

static bool op_results_equal(const op_result *a, const op_result *b, int64_t N, int32_t method)
{
    if (method == SM_METHOD_CORRECT)
        return memcmp(a->proposal, b->proposal, (size_t)N * sizeof(int32_t)) == 0 &&
               memcmp(a->prob, b->prob, (size_t)N * sizeof(float)) == 0;
    return memcmp(a->x_out, b->x_out, (size_t)N * sizeof(int32_t)) == 0;
}

static void test_op_rows_and_threads(nctmc_backend *be1, nctmc_backend *be3)
{
    test_rng rng = test_rng_seed(7);
    static const char *mname[] = {"tau-leaping", "euler", "posterior", "denoise", "correct"};
    static const char *gname[] = {"", " guided", " guided (rates)"};
    for (int pr = 0; pr < 3; pr++)
        for (int32_t method = 0; method <= SM_METHOD_CORRECT; method++)
            for (int guided = 0; guided < 3; guided++) {
                /* guided 2: the rate-level rule */
                op_case c = {make_fp(procs[pr], NCTMC_FP_COSINE, 9, 0.3f), 5, 13, 12, method,
                             guided > 0, 65, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                             guided == 2 ? SM_CFG_RATES : SM_CFG_SEPARATE};
                op_case_fill(&c, &rng);
                op_result r1, r3;
                op_result_alloc(&r1, c.N);
                op_result_alloc(&r3, c.N);
                run_op(be1, &c, &r1);
                run_op(be3, &c, &r3);
                int bad = count_row_mismatches(&c, &r1);
                CHECK(bad == 0, "op %s/%s%s: %d of %lld rows differ from the row math",
                      mname[method], proc_name(c.fp.process), gname[guided], bad,
                      (long long)c.N);
                CHECK(op_results_equal(&r1, &r3, c.N, method),
                      "op %s/%s%s: 1 and 3 threads differ", mname[method],
                      proc_name(c.fp.process), gname[guided]);
                op_result_free(&r1);
                op_result_free(&r3);
                op_case_free(&c);
            }
}

/*
 * Whole chains with the exact rates of a product distribution: at every
 * step, each row's logits and h are the true reverse rates at its current
 * state (true_rates), and the op moves it. After the grid and the final
 * denoising step, each position's tokens must follow its p0. The posterior
 * sampler is exact up to the denoising at t_min; tau-leaping and Euler carry
 * a discretisation error that shrinks with the steps.
 */
#define ORACLE_CHAINS 8000
#define ORACLE_L 3
#define ORACLE_S 6

static double oracle_chain_tv(nctmc_backend *be, nctmc_fp fp, int32_t method, int32_t n_steps,
                              double p0[ORACLE_L][MAX_S])
{
    int64_t N = (int64_t)ORACLE_CHAINS * ORACLE_L;
    int32_t S = fp.vocab;
    float *z = malloc((size_t)N * S * sizeof(float)), *h = malloc((size_t)N * sizeof(float));
    int32_t *x = malloc((size_t)N * sizeof(int32_t)), *xo = malloc((size_t)N * sizeof(int32_t));
    for (int64_t r = 0; r < N; r++)
        x[r] = sm_prior_token(&fp, sm_draw(3, NCTMC_RNG_SAMPLE_PRIOR, 0, r / ORACLE_L,
                                           (int32_t)(r % ORACLE_L)));
    double t_max = 0.999, t_min = 1e-3;
    for (int32_t k = 0; k <= n_steps; k++) {
        double t = t_max + (t_min - t_max) * k / n_steps;
        double s = t_max + (t_min - t_max) * (k + 1) / n_steps;
        int32_t m = k == n_steps ? SM_METHOD_DENOISE : method;
        for (int64_t r = 0; r < N; r++) {
            h[r] = 0.0f;
            if (!true_rates(&fp, t, p0[r % ORACLE_L], x[r], 0.0f, 0.0f, z + r * S, h + r))
                for (int32_t j = 0; j < S; j++)
                    z[r * S + j] = 0.0f;
        }
        nctmc_sample_step_args a;
        memset(&a, 0, sizeof a);
        a.n_rows = N;
        a.seq_len = ORACLE_L;
        a.row_stride = S;
        a.method = m;
        a.logits = z;
        a.rate_h = fp.process == NCTMC_FP_MASKED ? NULL : h;
        a.cfg_scale = 1.0f;
        a.x_t = x;
        a.t = t;
        a.s = k == n_steps ? t : s;
        a.temperature = 1.0f;
        a.seed = 11;
        a.step = (uint32_t)k + 1;
        a.fp = fp;
        a.x_out = xo;
        /* CPU backend memory is host memory: the buffers are used directly */
        be->ops->sample_step(be, &a);
        memcpy(x, xo, (size_t)N * sizeof(int32_t));
    }
    double tv = 0.0;
    for (int l = 0; l < ORACLE_L; l++) {
        double freq[MAX_S] = {0}, d = 0.0;
        for (int64_t c = 0; c < ORACLE_CHAINS; c++)
            freq[x[c * ORACLE_L + l]] += 1.0 / ORACLE_CHAINS;
        for (int32_t j = 0; j < S; j++)
            d += 0.5 * fabs(freq[j] - p0[l][j]);
        tv = fmax(tv, d);
    }
    free(z);
    free(h);
    free(x);
    free(xo);
    return tv;
}

static void test_oracle_chains(nctmc_backend *be)
{
    test_rng rng = test_rng_seed(8);
    static const char *mname[] = {"tau-leaping", "euler", "posterior"};
    /* sampling noise alone: E[TV] ~ 0.4 sqrt(S / chains) ~ 0.011 */
    static const double tol[] = {0.04, 0.04, 0.03};
    for (int pr = 0; pr < 3; pr++) {
        nctmc_fp fp = make_fp(procs[pr], NCTMC_FP_LINEAR, pr == 0 ? ORACLE_S : ORACLE_S + 1, 0.3f);
        double p0[ORACLE_L][MAX_S];
        for (int l = 0; l < ORACLE_L; l++)
            random_p0(&rng, &fp, p0[l]);
        for (int32_t method = 0; method <= SM_METHOD_POSTERIOR; method++) {
            double tv = oracle_chain_tv(be, fp, method, 64, p0);
            printf("oracle chain %s/%s, 64 steps: max TV to p0 = %.4f\n", mname[method],
                   proc_name(fp.process), tv);
            CHECK(tv <= tol[method], "%s/%s with the true rates: TV %.4f to p0 (tolerance %.2f)",
                  mname[method], proc_name(fp.process), tv, tol[method]);
        }
    }
}

int main(void)
{
    test_recovery_exact();
    test_recovery_masked_is_jump();
    test_posterior_brute_force();
    test_jump_and_guidance();
    test_step_probabilities();
    test_denoise();
    test_draw_frequencies();
    test_prior_frequencies();
    test_counter_fields();

    char err[256] = "";
    nctmc_backend *be1 = cpu_backend_create(1, err, sizeof err);
    nctmc_backend *be3 = cpu_backend_create(3, err, sizeof err);
    CHECK(be1 && be3, "CPU backend: %s", err);
    if (be1 && be3) {
        test_op_rows_and_threads(be1, be3);
        test_oracle_chains(be3);
    }
    if (be1)
        be1->ops->destroy(be1);
    if (be3)
        be3->ops->destroy(be3);
    return test_finish("sampler_math");
}
