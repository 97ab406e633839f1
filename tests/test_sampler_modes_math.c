/*
 * test_sampler_modes_math.c — rate-level classifier-free guidance in
 * lib/math/sample_math.h (the public half, nctmc_sample() with the guidance
 * rules and the correction modes, is test_sampler_modes.c): against the
 * guided rate matrix built entry by entry, R_w(j) = R_c(j)^w R_u(j)^(1 - w)
 * with R(j) = lambda r(j), for every process (the masked one with its exact
 * rate), schedules, vocabularies and scales: the exit rate, the jump
 * distribution (with temperature) and the rates the clean-token recovery
 * reads. Special cases exactly: w = 0 is the unconditional pass, w = 1 the
 * conditional one, the current token and the vocabulary padding are never
 * read, a zero rate stays zero.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "math/sample_math.h"
#include "test_util.h"

_Static_assert(SM_CFG_SEPARATE == (int)NCTMC_CFG_SEPARATE && SM_CFG_RATES == (int)NCTMC_CFG_RATES,
               "guidance rule codes");

#define REF_PI 3.14159265358979323846
#define MAX_S 20
#define PAD 3
#define SCHEDULE_EPS ((double)1e-3f) /* the float the model config holds */

static const int32_t procs[3] = {NCTMC_FP_UNIFORM, NCTMC_FP_MASKED, NCTMC_FP_MIXTURE};

static const char *proc_name(int32_t process)
{
    return process == NCTMC_FP_UNIFORM ? "uniform" : process == NCTMC_FP_MASKED ? "masked"
                                                                              : "mixture";
}

static nctmc_fp make_fp(int32_t process, int32_t schedule, int32_t vocab)
{
    nctmc_fp fp;
    memset(&fp, 0, sizeof fp);
    fp.process = process;
    fp.schedule = schedule;
    fp.vocab = vocab;
    fp.mixture_uniform = 0.3f;
    fp.schedule_eps = (float)SCHEDULE_EPS;
    return fp;
}

/* alpha_t and sigma_t = -alpha'/alpha, written again from docs/math.md */
static double ref_alpha(int32_t schedule, double t)
{
    switch (schedule) {
    case NCTMC_FP_LINEAR: return 1.0 - t;
    case NCTMC_FP_COSINE: return cos(REF_PI * t / 2.0);
    default: return 1.0 - (1.0 - SCHEDULE_EPS) * t;
    }
}

static double ref_sigma(int32_t schedule, double t)
{
    switch (schedule) {
    case NCTMC_FP_LINEAR: return 1.0 / (1.0 - t);
    case NCTMC_FP_COSINE: return (REF_PI / 2.0) * tan(REF_PI * t / 2.0);
    default: return (1.0 - SCHEDULE_EPS) / ref_alpha(schedule, t);
    }
}

/* pi_j of the forward process */
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

/* ------------------------------------------------------------------------ */
/* 1. Rate-level guidance against the guided rate matrix                    */
/* ------------------------------------------------------------------------ */

/* r(j) = softmax_{j != i}(z_j) over j < S, in double, by the definition. */
static void ref_softmax(const float *z, int S, int i, double *r)
{
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < S; j++)
        if (j != i)
            mx = fmax(mx, (double)z[j]);
    for (int j = 0; j < S; j++)
        if (j != i)
            sum += exp((double)z[j] - mx);
    for (int j = 0; j < S; j++)
        r[j] = j == i ? 0.0 : exp((double)z[j] - mx) / sum;
}

/* One pass's exit rate by the model's link (the library's single-pass rate:
 * this file tests how the passes combine, not the link). */
static double pass_rate(const nctmc_fp *fp, double t, int i, float h)
{
    return exp(sm_log_rate(fp, t, i, h, 0, 0.0f, 1.0));
}

typedef struct guided_ref {
    double lam;        /* sum_{j != i} R_w(j) */
    double r[MAX_S];   /* R_w(j) / lam (0 at j = i) */
    double F;          /* sum_{j != i} r_c(j)^w r_u(j)^(1 - w) */
} guided_ref;

/* The guided rates entry by entry: R_c(j) = lam_c r_c(j), R_u likewise,
 * R_w(j) = R_c(j)^w R_u(j)^(1 - w). A state with no rate out of it in
 * either pass (a masked data token) has none under guidance either. */
static guided_ref ref_guided(const nctmc_fp *fp, double t, int i, const float *zc,
                             const float *zu, float hc, float hu, double w)
{
    int S = fp->vocab;
    double rc[MAX_S], ru[MAX_S], lc = pass_rate(fp, t, i, hc), lu = pass_rate(fp, t, i, hu);
    ref_softmax(zc, S, i, rc);
    ref_softmax(zu, S, i, ru);
    guided_ref g;
    memset(&g, 0, sizeof g);
    double Rw[MAX_S], total = 0.0;
    for (int j = 0; j < S; j++) {
        if (j == i)
            continue;
        g.F += pow(rc[j], w) * pow(ru[j], 1.0 - w);
        Rw[j] = lc > 0.0 ? pow(lc * rc[j], w) * pow(lu * ru[j], 1.0 - w) : 0.0;
        total += Rw[j];
    }
    g.lam = total;
    for (int j = 0; j < S; j++)
        g.r[j] = j == i ? 0.0 : pow(rc[j], w) * pow(ru[j], 1.0 - w) / g.F;
    return g;
}

typedef struct worst {
    double err;
    char where[160];
} worst;

static void note(worst *wst, double err, const nctmc_fp *fp, double t, double w, int i,
                 const char *what)
{
    if (err > wst->err || isnan(err)) {
        wst->err = isnan(err) ? INFINITY : err;
        snprintf(wst->where, sizeof wst->where, "%s: %s sched %d S=%d t=%.3f w=%g i=%d", what,
                 proc_name(fp->process), fp->schedule, fp->vocab, t, w, i);
    }
}

/* Random logits over [0, S) and NaN padding past it: a row that reads the
 * padding turns NaN. */
static void fill_row(test_rng *rng, float *z, int S)
{
    for (int j = 0; j < S + PAD; j++)
        z[j] = j < S ? test_uniform(rng, -4.0f, 4.0f) : NAN;
}

static void test_rates_brute_force(void)
{
    test_rng rng = test_rng_seed(91);
    static const double scales[] = {0.0, 0.4, 1.0, 2.5, 4.0};
    static const int32_t vocabs[] = {2, 5, 16};
    static const double temps[] = {1.0, 0.6};
    worst lam = {0.0, "(none)"}, jump = {0.0, "(none)"}, p0 = {0.0, "(none)"};
    int n_zero = 0, zero_ok = 0, holder_bad = 0;
    for (int pr = 0; pr < 3; pr++)
        for (int32_t sched = 0; sched < 3; sched++)
            for (int v = 0; v < 3; v++)
                for (int k = 0; k < 5; k++) {
                    nctmc_fp fp = make_fp(procs[pr], sched, vocabs[v]);
                    if (fp.process != NCTMC_FP_UNIFORM && fp.vocab < 3)
                        continue; /* a mask and one data token: nothing to guide */
                    double w = scales[k], t = test_uniform(&rng, 0.02f, 0.95f);
                    for (int i = 0; i < fp.vocab; i++) {
                        float zc[MAX_S + PAD], zu[MAX_S + PAD];
                        fill_row(&rng, zc, fp.vocab);
                        fill_row(&rng, zu, fp.vocab);
                        float hc = test_uniform(&rng, -3.0f, 3.0f);
                        float hu = test_uniform(&rng, -3.0f, 3.0f);
                        guided_ref g = ref_guided(&fp, t, i, zc, zu, hc, hu, w);
                        double got = sm_guided_log_rate(&fp, t, i, hc, zc, zu, hu, w,
                                                        SM_CFG_RATES);
                        if (g.lam == 0.0) {
                            n_zero++;
                            zero_ok += got == -INFINITY;
                        } else {
                            note(&lam, fabs(exp(got) / g.lam - 1.0), &fp, t, w, i, "lambda");
                        }
                        /* Hölder (w in [0, 1]) and Jensen (w >= 1) */
                        if (w <= 1.0 ? g.F > 1.0 + 1e-12 : g.F < 1.0 - 1e-12)
                            holder_bad++;
                        /* the jump distribution: r_w, tempered by T */
                        double T = temps[(i + k) % 2], norm = 0.0;
                        for (int j = 0; j < fp.vocab; j++)
                            norm += j == i ? 0.0 : pow(g.r[j], 1.0 / T);
                        sm_jump J = sm_jump_init(zc, zu, w, T, fp.vocab, i);
                        for (int j = 0; j < fp.vocab; j++) {
                            if (j == i)
                                continue;
                            double want = log(pow(g.r[j], 1.0 / T) / norm);
                            note(&jump, fabs(sm_jump_logprob(&J, j) - want), &fp, t, w, i,
                                 "jump");
                        }
                        /* the recovery reads the guided rate */
                        sm_step st = sm_step_prepare(fp, SM_METHOD_POSTERIOR, t, t * 0.9, w,
                                                     SM_CFG_RATES, T, 1.0, 1, 1);
                        sm_row_in in = {zc, zu, hc, hu, i, 0, 0};
                        sm_p0 P = sm_row_p0(&st, &in);
                        double sp = ref_sigma(sched, t) * ref_pi(&fp, i);
                        if (sp > 0.0)
                            note(&p0, fabs(P.q_i - sp / (sp + g.lam)) / (sp / (sp + g.lam)), &fp,
                                 t, w, i, "q(i)");
                    }
                }
    printf("rate-level guidance: worst relative lambda error %.3g at %s\n", lam.err, lam.where);
    printf("rate-level guidance: worst jump log-prob error %.3g at %s\n", jump.err, jump.where);
    CHECK(lam.err <= 1e-12, "guided exit rate off by %.3g (relative) at %s", lam.err, lam.where);
    CHECK(jump.err <= 1e-11, "guided jump log-prob off by %.3g at %s", jump.err, jump.where);
    CHECK(p0.err <= 1e-11, "the recovery's q(i) is not from the guided rate: %.3g at %s", p0.err,
          p0.where);
    CHECK(n_zero > 0 && zero_ok == n_zero, "a zero rate stays zero: %d of %d", zero_ok, n_zero);
    CHECK(holder_bad == 0, "F on the wrong side of 1 in %d cases", holder_bad);
}

/* The masked process: out of the mask the rate is exact from the schedule,
 * the same in both passes, so guidance gives lambda_exact * F; the
 * separate rule leaves lambda_exact alone. */
static void test_masked_exact(void)
{
    test_rng rng = test_rng_seed(92);
    double worst_rates = 0.0, worst_sep = 0.0;
    for (int c = 0; c < 60; c++) {
        int32_t sched = c % 3;
        nctmc_fp fp = make_fp(NCTMC_FP_MASKED, sched, 4 + c % 9);
        int m = fp.vocab - 1;
        double t = test_uniform(&rng, 0.01f, 0.98f), w = test_uniform(&rng, 0.0f, 5.0f);
        float zc[MAX_S + PAD], zu[MAX_S + PAD];
        fill_row(&rng, zc, fp.vocab);
        fill_row(&rng, zu, fp.vocab);
        double rc[MAX_S], ru[MAX_S], F = 0.0, a = ref_alpha(sched, t);
        ref_softmax(zc, fp.vocab, m, rc);
        ref_softmax(zu, fp.vocab, m, ru);
        for (int j = 0; j < m; j++)
            F += pow(rc[j], w) * pow(ru[j], 1.0 - w);
        double exact = ref_sigma(sched, t) * a / (1.0 - a);
        /* h is ignored: the masked rate is not learned */
        double got = sm_guided_log_rate(&fp, t, m, 9.0f, zc, zu, -9.0f, w, SM_CFG_RATES);
        double sep = sm_guided_log_rate(&fp, t, m, 9.0f, zc, zu, -9.0f, w, SM_CFG_SEPARATE);
        worst_rates = fmax(worst_rates, fabs(exp(got) / (exact * F) - 1.0));
        worst_sep = fmax(worst_sep, fabs(exp(sep) / exact - 1.0));
        for (int i = 0; i < m; i++)
            CHECK(sm_guided_log_rate(&fp, t, i, 0.0f, zc, zu, 0.0f, w, SM_CFG_RATES) == -INFINITY,
                  "masked data token %d has a guided rate", i);
    }
    CHECK(worst_rates <= 1e-9, "masked guided rate: lambda_exact * F off by %.3g", worst_rates);
    CHECK(worst_sep <= 1e-9, "masked separate rule: not the exact rate (%.3g)", worst_sep);
}

/* w = 0: the unconditional pass bit for bit; w = 1: the conditional one.
 * The current token's logits and the padding never change a bit. */
static void test_special_cases(void)
{
    test_rng rng = test_rng_seed(93);
    int bad_w0 = 0, bad_w1 = 0, bad_self = 0, cases = 0;
    for (int c = 0; c < 300; c++) {
        nctmc_fp fp = make_fp(procs[c % 3], c % 3, 3 + c % 14);
        double t = test_uniform(&rng, 0.02f, 0.97f);
        int i = test_randint(&rng, fp.vocab);
        float zc[MAX_S + PAD], zu[MAX_S + PAD];
        fill_row(&rng, zc, fp.vocab);
        fill_row(&rng, zu, fp.vocab);
        float hc = test_uniform(&rng, -3.0f, 3.0f), hu = test_uniform(&rng, -3.0f, 3.0f);
        double u0 = sm_guided_log_rate(&fp, t, i, hc, zc, zu, hu, 0.0, SM_CFG_RATES);
        double u1 = sm_guided_log_rate(&fp, t, i, hc, zc, zu, hu, 1.0, SM_CFG_RATES);
        double lu = sm_log_rate(&fp, t, i, hu, 0, 0.0f, 1.0);
        double lc = sm_log_rate(&fp, t, i, hc, 0, 0.0f, 1.0);
        sm_jump J0 = sm_jump_init(zc, zu, 0.0, 0.8, fp.vocab, i);
        sm_jump J1 = sm_jump_init(zc, zu, 1.0, 0.8, fp.vocab, i);
        sm_jump Ju = sm_jump_init(zu, NULL, 1.0, 0.8, fp.vocab, i);
        sm_jump Jc = sm_jump_init(zc, NULL, 1.0, 0.8, fp.vocab, i);
        bool same0 = memcmp(&u0, &lu, sizeof u0) == 0, same1 = memcmp(&u1, &lc, sizeof u1) == 0;
        for (int j = 0; j < fp.vocab; j++) {
            double a0 = sm_jump_logprob(&J0, j), b0 = sm_jump_logprob(&Ju, j);
            double a1 = sm_jump_logprob(&J1, j), b1 = sm_jump_logprob(&Jc, j);
            same0 = same0 && memcmp(&a0, &b0, sizeof a0) == 0;
            same1 = same1 && memcmp(&a1, &b1, sizeof a1) == 0;
        }
        bad_w0 += !same0;
        bad_w1 += !same1;
        /* the current token's own logits are never read */
        double w = test_uniform(&rng, 0.0f, 4.0f);
        double before = sm_guided_log_rate(&fp, t, i, hc, zc, zu, hu, w, SM_CFG_RATES);
        zc[i] = test_uniform(&rng, -50.0f, 50.0f);
        zu[i] = NAN;
        double after = sm_guided_log_rate(&fp, t, i, hc, zc, zu, hu, w, SM_CFG_RATES);
        bad_self += memcmp(&before, &after, sizeof before) != 0;
        cases++;
    }
    CHECK(bad_w0 == 0, "w = 0 is not the unconditional rate bit for bit in %d of %d", bad_w0,
          cases);
    CHECK(bad_w1 == 0, "w = 1 is not the conditional rate bit for bit in %d of %d", bad_w1,
          cases);
    CHECK(bad_self == 0, "the current token's logits changed the rate in %d of %d", bad_self,
          cases);
}

int main(void)
{
    test_rates_brute_force();
    test_masked_exact();
    test_special_cases();
    return test_finish("sampler_modes_math");
}
