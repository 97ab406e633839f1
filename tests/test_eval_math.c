/*
 * test_eval_math.c — the internals behind nctmc_eval() (lib/math/nelbo_math.h,
 * lib/run/eval_median.h, lib/run/eval_reliability.h); test_eval.c tests
 * nctmc_eval() itself through the public API:
 *
 *  (a) D_t, its mean, the prior KL and cross-entropy in closed form against
 *      brute-force sums written again from the definitions
 *      (tests/forward_ref.h), for every process and schedule;
 *  (b) the median selection and the reservoir;
 *  (c) the implied noise nu_hat at its edges and its bins;
 *  (d) tests/philox_ref.h (test_eval.c's re-derivation of eval's draws)
 *      equals the library's philox4x32_10, and eval's Philox purpose is
 *      the one test_eval.c assumes.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run/eval_median.h"
#include "run/eval_reliability.h"
#include "nctmc.h"
#include "math/nelbo_math.h"
#include "math/philox.h"
#include "forward_ref.h"
#include "philox_ref.h"
#include "test_util.h"

/* tests/forward_ref.h takes the public enumerations' values */
_Static_assert((int)NCTMC_FP_UNIFORM == (int)NCTMC_PROCESS_UNIFORM &&
                   (int)NCTMC_FP_MASKED == (int)NCTMC_PROCESS_MASKED &&
                   (int)NCTMC_FP_MIXTURE == (int)NCTMC_PROCESS_MIXTURE,
               "processes");
_Static_assert((int)NCTMC_FP_LINEAR == (int)NCTMC_SCHEDULE_LINEAR &&
                   (int)NCTMC_FP_COSINE == (int)NCTMC_SCHEDULE_COSINE &&
                   (int)NCTMC_FP_LOGLINEAR == (int)NCTMC_SCHEDULE_LOGLINEAR,
               "schedules");
/* test_eval.c re-derives eval's draws with this purpose (docs/math.md) */
_Static_assert(NCTMC_RNG_EVAL == 9, "eval's Philox purpose");

#define S_EX 4

static ref_proc ref_of(const nctmc_fp *fp)
{
    return ref_make(fp->process, fp->schedule, fp->vocab, fp->mixture_uniform,
                    fp->schedule_eps);
}

static long double ref_entropy(const ref_proc *p, long double t, int x0)
{
    long double a = ref_alpha(p, t), h = 0;
    for (int i = 0; i < p->S; i++) {
        long double q = ref_q(p, a, i, x0);
        if (q > 0)
            h -= q * logl(q);
    }
    return h;
}

static nctmc_fp make_fp(int process, int schedule, int S, float pu, float eps)
{
    nctmc_fp fp = {process, schedule, S, pu, eps, NCTMC_FP_LINK_SIGMA};
    return fp;
}

static const char *sched_name(int schedule)
{
    return schedule == NCTMC_FP_COSINE ? "cosine"
           : schedule == NCTMC_FP_LOGLINEAR ? "loglinear" : "linear";
}

/* ------------------------------------------------------------------------ */
/* (a) closed forms against brute force                                     */
/* ------------------------------------------------------------------------ */

typedef struct worst {
    double ratio;
    char where[200];
} worst;

static void worst_add(worst *w, double err, double tol, const nctmc_fp *fp, double t, int i,
                      int x0)
{
    double r = err == 0.0 ? 0.0 : err / tol;
    if (isnan(r))
        r = INFINITY;
    if (r >= w->ratio) {
        w->ratio = r;
        snprintf(w->where, sizeof w->where, "%s/%s S=%d pu=%g t=%g i=%d x0=%d (err %.3g)",
                 ref_proc_name(fp->process), sched_name(fp->schedule), fp->vocab,
                 (double)fp->mixture_uniform, t, i, x0, err);
    }
}

/* D from fp_conditional_rate's rates (the ones L_cond uses), by summation. */
static double d_from_conditional_rate(const nctmc_fp *fp, double t, int i, int x0)
{
    fp_reverse_rate r = fp_conditional_rate(fp, t, i, x0);
    double a = fp_alpha(fp, t), qi = fp_q(fp, a, i, x0), sum = 0.0;
    for (int j = 0; j < fp->vocab; j++) {
        double qj = fp_q(fp, a, j, x0);
        double rhat = r.lam_hat * (r.w_prior * fp_prior(fp, j) + (j == x0 ? r.w_x0 : 0.0));
        if (j != i && rhat > 0.0)
            sum += rhat * log(qi / qj);
    }
    return sum;
}

static void test_closed_forms(void)
{
    static const int procs[][2] = {{NCTMC_FP_UNIFORM, 0}, {NCTMC_FP_MASKED, 0},
                                   {NCTMC_FP_MIXTURE, 1}, {NCTMC_FP_MIXTURE, 5},
                                   {NCTMC_FP_MIXTURE, 10}};
    static const int vocabs[] = {2, 3, 7, 50};
    static const double times[] = {1e-7, 1e-4, 0.01, 0.2, 0.5, 0.8, 0.99, 0.999};
    worst wd = {0, ""}, wdr = {0, ""}, wmean = {0, ""}, wdh = {0, ""}, wkl = {0, ""},
          wce = {0, ""};
    for (size_t pi = 0; pi < sizeof procs / sizeof procs[0]; pi++)
        for (int sc = 0; sc < 3; sc++)
            for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++)
                for (size_t ti = 0; ti < sizeof times / sizeof times[0]; ti++) {
                    int S = vocabs[vi];
                    nctmc_fp fp = make_fp(procs[pi][0], sc, S, 0.1f * (float)procs[pi][1],
                                          0.02f);
                    ref_proc rp = ref_of(&fp);
                    double t = times[ti];
                    /* long double's 1 - cos loses digits below this */
                    if (sc == NCTMC_FP_COSINE && t < 1e-4)
                        continue;
                    nelbo_marginal g = nelbo_marginal_at(&fp, t);
                    long double a = ref_alpha(&rp, t), mean = 0;
                    int n_data = ref_n_data(&rp);
                    for (int x0 = 0; x0 < n_data; x0 += (n_data > 3 ? n_data - 1 : 1))
                        for (int i = 0; i < S; i++) {
                            long double scale;
                            long double ref = ref_d(&rp, t, i, x0, &scale);
                            double got = nelbo_d(&fp, &g, i, x0);
                            worst_add(&wd, fabs(got - (double)ref), 1e-9 * (double)scale + 1e-300,
                                      &fp, t, i, x0);
                            double viar = d_from_conditional_rate(&fp, t, i, x0);
                            worst_add(&wdr, fabs(got - viar), 1e-7 * (double)scale + 1e-300,
                                      &fp, t, i, x0);
                            if (x0 == 0)
                                mean += ref_q(&rp, a, i, 0) * ref;
                        }
                    /* E_q[D] closed form, against the sum and against -dH/dt */
                    double emean = nelbo_expected_d(&fp, &g);
                    worst_add(&wmean, fabs(emean - (double)mean),
                              1e-9 * fabs((double)mean) + 1e-12, &fp, t, -1, 0);
                    long double h = 1e-5L * (t < 0.5 ? t : 1 - t);
                    long double dh = (ref_entropy(&rp, t + h, 0) - ref_entropy(&rp, t - h, 0)) /
                                     (2 * h);
                    worst_add(&wdh, fabs(emean + (double)dh), 1e-6 * fabs(emean) + 1e-9, &fp,
                              t, -1, 0);
                    /* the prior terms */
                    long double kl = 0, ce = 0;
                    for (int i = 0; i < S; i++) {
                        long double q = ref_q(&rp, a, i, 0), p_i = ref_pi(&rp, i);
                        if (q > 0) {
                            kl += p_i > 0 ? q * logl(q / p_i) : INFINITY;
                            ce -= p_i > 0 ? q * logl(p_i) : -INFINITY;
                        }
                    }
                    double got_kl = nelbo_prior_kl(&fp, &g);
                    double got_ce = nelbo_prior_cross_entropy(&fp, &g);
                    if (isinf((double)kl))
                        worst_add(&wkl, isinf(got_kl) && got_kl > 0 ? 0.0 : 1.0, 1e-300, &fp,
                                  t, -1, 0);
                    else
                        worst_add(&wkl, fabs(got_kl - (double)kl), 1e-9 * fabs((double)kl) + 1e-13,
                                  &fp, t, -1, 0);
                    if (!isinf((double)ce))
                        worst_add(&wce, fabs(got_ce - (double)ce), 1e-9 * fabs((double)ce) + 1e-13,
                                  &fp, t, -1, 0);
                }
    CHECK(wd.ratio <= 1.0, "D_t closed form vs brute force: worst %.3g of tol at %s", wd.ratio,
          wd.where);
    CHECK(wdr.ratio <= 1.0, "D_t vs the sum over fp_conditional_rate's rates: worst %.3g at %s",
          wdr.ratio, wdr.where);
    CHECK(wmean.ratio <= 1.0, "E_q[D_t] closed form vs sum: worst %.3g at %s", wmean.ratio,
          wmean.where);
    CHECK(wdh.ratio <= 1.0, "E_q[D_t] vs -dH/dt: worst %.3g at %s", wdh.ratio, wdh.where);
    CHECK(wkl.ratio <= 1.0, "prior KL vs brute force: worst %.3g at %s", wkl.ratio, wkl.where);
    CHECK(wce.ratio <= 1.0, "prior cross-entropy vs brute force: worst %.3g at %s", wce.ratio,
          wce.where);
    /* The masked process keeps mass on x0 before t = 1: the KL is infinite,
     * and exactly 0 at t = 1 under the linear and cosine schedules. */
    nctmc_fp mk = make_fp(NCTMC_FP_MASKED, NCTMC_FP_LINEAR, 5, 0.0f, 0.0f);
    nelbo_marginal g1 = nelbo_marginal_at(&mk, 1.0), g9 = nelbo_marginal_at(&mk, 0.999);
    CHECK(nelbo_prior_kl(&mk, &g1) == 0.0 && isinf(nelbo_prior_kl(&mk, &g9)),
          "masked prior KL: %g at t=1, %g at 0.999", nelbo_prior_kl(&mk, &g1),
          nelbo_prior_kl(&mk, &g9));
    mk.schedule = NCTMC_FP_COSINE;
    g1 = nelbo_marginal_at(&mk, 1.0);
    CHECK(fabs(nelbo_prior_kl(&mk, &g1)) < 1e-15, "masked cosine prior KL at t=1: %g",
          nelbo_prior_kl(&mk, &g1));
    /* 1 - a_t keeps its digits where 1 - cos(.) would not */
    nctmc_fp cs = make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_COSINE, 4, 0.0f, 0.0f);
    double om = fp_one_minus_alpha(&cs, 1e-9), want = 1.2337005501361697e-18;
    CHECK(fabs(om - want) < 1e-12 * want, "cosine 1 - a at t=1e-9: %.17g want %.17g", om, want);
}

/* ------------------------------------------------------------------------ */
/* (b) median selection and the reservoir                                   */
/* ------------------------------------------------------------------------ */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_median(void)
{
    test_rng rng = test_rng_seed(5);
    int bad = 0;
    for (int trial = 0; trial < 400; trial++) {
        int64_t n = 1 + test_randint(&rng, trial < 200 ? 12 : 3000);
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        int levels = 1 + test_randint(&rng, 6);
        for (int64_t i = 0; i < n; i++) {
            /* few distinct values (many ties), sometimes -inf (rate 0) */
            a[i] = trial % 3 == 0 ? (float)test_randint(&rng, levels)
                                  : test_uniform(&rng, -30.0f, 5.0f);
            if (test_randint(&rng, 10) == 0)
                a[i] = -INFINITY;
            b[i] = a[i];
        }
        qsort(b, (size_t)n, sizeof *b, cmp_float);
        double want = n % 2 ? (double)b[n / 2] : 0.5 * ((double)b[n / 2 - 1] + (double)b[n / 2]);
        double got = eval_median(a, n);
        if (!(got == want || (isinf(got) && isinf(want) && got == want)))
            bad++;
        free(a);
        free(b);
    }
    CHECK(bad == 0, "median by selection differs from sorting in %d of 400 arrays", bad);
    float none[1];
    CHECK(isnan(eval_median(none, 0)), "median of nothing is NaN");

    /* The reservoir keeps each of n offered values with probability cap/n:
     * the kept mean of 0..n-1 is (n-1)/2 within sampling error, and every
     * part of the stream is represented. */
    enum { CAP = 1000, N_OFFER = 50000 };
    float slots[CAP];
    eval_reservoir r = {slots, CAP, 0};
    for (int i = 0; i < N_OFFER; i++)
        eval_reservoir_add(&r, (float)i, 77, 9u | 3u << 8, 0);
    double mean = 0.0;
    int late = 0;
    for (int i = 0; i < CAP; i++) {
        mean += slots[i] / CAP;
        late += slots[i] >= N_OFFER / 2;
    }
    double sd = N_OFFER / sqrt(12.0 * CAP);
    CHECK(eval_reservoir_size(&r) == CAP && r.n_seen == N_OFFER, "reservoir size");
    CHECK(fabs(mean - (N_OFFER - 1) / 2.0) < 4 * sd, "reservoir mean %g, want %g +- %g", mean,
          (N_OFFER - 1) / 2.0, sd);
    CHECK(abs(late - CAP / 2) < 4 * 16, "reservoir keeps %d of %d from the second half", late,
          CAP);
}

/* ------------------------------------------------------------------------ */
/* (c) nu_hat                                                               */
/* ------------------------------------------------------------------------ */

/* nu_hat at its edges: clipping without overflow, and where it means nothing. */
static void test_implied_noise_edges(void)
{
    nctmc_fp un = make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, S_EX, 0, 0);
    nctmc_fp mx = make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_COSINE, S_EX, 0.5f, 0);
    nctmc_fp mk = make_fp(NCTMC_FP_MASKED, NCTMC_FP_LINEAR, S_EX, 0, 0);
    CHECK(eval_implied_noise(&un, 0.3, 1, 800.0) == 1.0 &&
              eval_implied_noise(&un, 0.3, 1, INFINITY) == 1.0,
          "a rate past exp's range is noise (1)");
    CHECK(eval_implied_noise(&un, 0.3, 1, -800.0) == 0.0 &&
              eval_implied_noise(&un, 0.3, 1, -INFINITY) == 0.0,
          "a zero rate is clean (0)");
    CHECK(eval_implied_noise(&un, 1e-20, 2, 5.0) == 0.0,
          "where a_t rounds to 1 (lam_n infinite) a finite rate is clean");
    CHECK(isnan(eval_implied_noise(&un, 0.3, 1, NAN)) &&
              isnan(eval_implied_noise(&mx, 0.3, S_EX - 1, 0.0)) &&
              isnan(eval_implied_noise(&mk, 0.3, 0, 0.0)) &&
              isnan(eval_implied_noise(&mk, 0.3, S_EX - 1, 0.0)),
          "no nu_hat for a NaN rate, the mixture's mask, or the masked process");
    /* inside: the definition, on the mixture's data token */
    ref_proc rp = ref_of(&mx);
    double t = 0.4, lam_c = ref_lam_hat(&rp, t, 1, 1), lam_n = ref_lam_hat(&rp, t, 1, 2);
    double lam = 0.3 * lam_c + 0.7 * lam_n;
    CHECK(fabs(eval_implied_noise(&mx, t, 1, log(lam)) - 0.7) < 1e-12,
          "nu_hat of a rate 30/70 between the clean and the noise rate: %.15g",
          eval_implied_noise(&mx, t, 1, log(lam)));
    CHECK(eval_nu_bin(0.0) == 0 && eval_nu_bin(0.0999) == 0 && eval_nu_bin(0.1) == 1 &&
              eval_nu_bin(0.95) == 9 && eval_nu_bin(1.0) == 9,
          "nu bins");
}


/* ------------------------------------------------------------------------ */
/* (d) tests/philox_ref.h against the library's Philox                      */
/* ------------------------------------------------------------------------ */

/* Counters and keys of every kind: random words, eval's own layout (purpose,
 * stream, sequence bits), and the all-zero and all-one extremes. */
static void test_philox_ref(void)
{
    test_rng rng = test_rng_seed(99);
    int bad = 0, n = 0;
    for (int k = 0; k < 4096; k++) {
        uint32_t c[4];
        uint64_t key;
        for (int w = 0; w < 4; w++)
            c[w] = (uint32_t)(test_rng_next(&rng) >> 32);
        key = test_rng_next(&rng);
        if (k % 4 == 1) {   /* eval's counter layout */
            c[0] = (uint32_t)NCTMC_RNG_EVAL | (uint32_t)(k / 4 % 4) << 8 |
                   (c[0] & 0xFFFFu) << 16;
            c[1] &= 0xFFu;
            c[3] &= 0xFFu;
        } else if (k == 2 || k == 6) {
            c[0] = c[1] = c[2] = c[3] = k == 2 ? 0u : 0xFFFFFFFFu;
            key = k == 2 ? 0u : UINT64_MAX;
        }
        philox4x32 lc = {{c[0], c[1], c[2], c[3]}};
        philox4x32 lib = philox4x32_10(lc, key);
        philox_ref_block ref = philox_ref(c[0], c[1], c[2], c[3], key);
        bool same = true;
        for (int w = 0; w < 4; w++)
            same = same && lib.v[w] == ref.w[w];
        if (!same && bad++ < 3)
            fprintf(stderr, "  philox_ref(%08x %08x %08x %08x, %016llx) differs\n", c[0], c[1],
                    c[2], c[3], (unsigned long long)key);
        n++;
    }
    CHECK(bad == 0, "tests/philox_ref.h differs from philox4x32_10 on %d of %d inputs", bad, n);
}

static double cpu_seconds(clock_t since)
{
    return (double)(clock() - since) / CLOCKS_PER_SEC;
}

int main(void)
{
    static const struct {
        const char *name;
        void (*run)(void);
    } parts[] = {{"closed forms", test_closed_forms}, {"median", test_median},
                 {"implied noise", test_implied_noise_edges}, {"philox", test_philox_ref}};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        clock_t t0 = clock();
        parts[k].run();
        printf("%s: %.1f s of CPU\n", parts[k].name, cpu_seconds(t0));
    }
    return test_finish("eval_math");
}
