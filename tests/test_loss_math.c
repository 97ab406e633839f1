/*
 * test_loss_math.c — the forward process (lib/math/forward_process.h), the
 * per-position L_cond math (lib/math/lcond_math.h) and the CPU backend's fused
 * loss and jump-output operations, each against a brute force written again
 * from the definitions (docs/math.md, paper Prop. 3.6, Cor. 3.7/3.8),
 * in double, sharing no code with the headers under test.
 *
 * Checks over many cases are folded: each case's error is divided by that
 * case's tolerance, and one CHECK per group asserts the worst ratio is <= 1,
 * naming the case that came closest (or failed), with its exact inputs.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cpu/cpu_math.h"
#include "math/lcond_math.h"
#include "test_util.h"

/* The kernels take nctmc_process / nctmc_schedule values as int32. */
_Static_assert(NCTMC_FP_UNIFORM == (int)NCTMC_PROCESS_UNIFORM, "process enum");
_Static_assert(NCTMC_FP_MASKED == (int)NCTMC_PROCESS_MASKED, "process enum");
_Static_assert(NCTMC_FP_MIXTURE == (int)NCTMC_PROCESS_MIXTURE, "process enum");
_Static_assert(NCTMC_FP_LINEAR == (int)NCTMC_SCHEDULE_LINEAR, "schedule enum");
_Static_assert(NCTMC_FP_COSINE == (int)NCTMC_SCHEDULE_COSINE, "schedule enum");
_Static_assert(NCTMC_FP_LOGLINEAR == (int)NCTMC_SCHEDULE_LOGLINEAR, "schedule enum");

#define MAX_S 256
#define REF_PI 3.141592653589793238462643383279502884
#define SCHEDULE_EPS 1e-3f
#define F32_EPS (1.0 / 16777216.0) /* 2^-24, float32 unit roundoff */

static const int32_t test_vocabs[] = {2, 3, 7, 64};
#define N_VOCABS ((int)(sizeof test_vocabs / sizeof test_vocabs[0]))

/* ------------------------------------------------------------------------ */
/* Folded checks                                                            */
/* ------------------------------------------------------------------------ */

typedef struct worst {
    double ratio; /* largest error / tolerance seen */
    long cases;
    char where[400];
} worst;

static void worst_init(worst *w)
{
    w->ratio = 0.0;
    w->cases = 0;
    snprintf(w->where, sizeof w->where, "(no case)");
}

/* Records one case: err / tol (0 / 0 counts as 0, NaN as +inf). */
static void worst_add(worst *w, double err, double tol, const char *fmt, ...)
{
    double ratio = err == 0.0 ? 0.0 : err / tol;
    if (isnan(ratio))
        ratio = INFINITY;
    w->cases++;
    if (ratio > w->ratio || w->cases == 1) {
        w->ratio = ratio;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->where, sizeof w->where, fmt, ap);
        va_end(ap);
    }
}

/* LOSS_MATH_VERBOSE=1 in the environment prints every group's margin. */
static bool verbose;

/* Whether a sanitizer build (tests/meson.build) leaves out this case: there
 * the large vocabularies (64 and up), which take most of the time, are
 * checked on the first schedule only. A schedule changes the numbers, not
 * the code path, and every check still runs on every process, link and
 * vocabulary; other builds run every case. */
static bool sanitized_skip(int32_t vocab, int schedule)
{
#if defined(NCTMC_TEST_SANITIZED)
    return vocab >= 64 && schedule != 0;
#else
    (void)vocab;
    (void)schedule;
    return false;
#endif
}


#define CHECK_WORST(w, what)                                                       \
    do {                                                                           \
        if (verbose)                                                               \
            printf("  %-8.3g %s (%ld cases; at %s)\n", (w).ratio, (what), (w).cases, \
                   (w).where);                                                     \
        CHECK((w).ratio <= 1.0, "%s: worst error/tolerance %.3g over %ld cases, at %s", \
              (what), (w).ratio, (w).cases, (w).where);                            \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Configurations                                                           */
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

/* Processes under test: uniform, masked, mixture with three p_u. */
#define N_PROCS 5
static const int32_t proc_kind[N_PROCS] = {NCTMC_FP_UNIFORM, NCTMC_FP_MASKED, NCTMC_FP_MIXTURE,
                                           NCTMC_FP_MIXTURE, NCTMC_FP_MIXTURE};
static const float proc_pu[N_PROCS] = {0.0f, 0.0f, 0.1f, 0.5f, 1.0f};
#define N_SCHEDS 3

static const char *fp_name(const nctmc_fp *fp, char *buf, size_t n)
{
    static const char *sched[] = {"linear", "cosine", "loglinear"};
    const char *s = fp->schedule >= 0 && fp->schedule < 3 ? sched[fp->schedule] : "?";
    const char *link = fp->exit_link == NCTMC_FP_LINK_NOISE_POSTERIOR ? "/noise-link" : "";
    if (fp->process == NCTMC_FP_MIXTURE)
        snprintf(buf, n, "mixture(p_u=%g)/%s/S=%d%s", (double)fp->mixture_uniform, s,
                 (int)fp->vocab, link);
    else
        snprintf(buf, n, "%s/%s/S=%d%s", fp->process == NCTMC_FP_MASKED ? "masked" : "uniform",
                 s, (int)fp->vocab, link);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The reference: docs/math.md's definitions written out again, in double   */
/* ------------------------------------------------------------------------ */

typedef struct ref_proc {
    int process, schedule, S;
    double p_u, eps;
    int link;
} ref_proc;

static ref_proc ref_of(const nctmc_fp *fp)
{
    ref_proc p = {fp->process, fp->schedule, fp->vocab, (double)fp->mixture_uniform,
                  (double)fp->schedule_eps, fp->exit_link};
    return p;
}

static double ref_alpha(const ref_proc *p, double t)
{
    switch (p->schedule) {
    case NCTMC_FP_LINEAR: return 1.0 - t;
    case NCTMC_FP_COSINE: return cos(REF_PI * t / 2.0);
    default: return 1.0 - (1.0 - p->eps) * t;
    }
}

/* d a_t / d t, differentiated by hand */
static double ref_dalpha(const ref_proc *p, double t)
{
    switch (p->schedule) {
    case NCTMC_FP_LINEAR: return -1.0;
    case NCTMC_FP_COSINE: return -(REF_PI / 2.0) * sin(REF_PI * t / 2.0);
    default: return -(1.0 - p->eps);
    }
}

/* 1 - a_t written independently of the library, without cancellation:
 * 1 - cos(x) = 2 sin^2(x / 2) */
static double ref_one_minus_alpha(const ref_proc *p, double t)
{
    switch (p->schedule) {
    case NCTMC_FP_LINEAR: return t;
    case NCTMC_FP_COSINE: return 2.0 * pow(sin(REF_PI * t / 4.0), 2.0);
    default: return (1.0 - p->eps) * t;
    }
}

static double ref_sigma(const ref_proc *p, double t)
{
    return -ref_dalpha(p, t) / ref_alpha(p, t);
}

static int ref_mask(const ref_proc *p)
{
    return p->process == NCTMC_FP_UNIFORM ? -1 : p->S - 1;
}

static int ref_n_data(const ref_proc *p)
{
    return p->process == NCTMC_FP_UNIFORM ? p->S : p->S - 1;
}

static void ref_prior(const ref_proc *p, double *pi)
{
    for (int j = 0; j < p->S; j++) {
        if (p->process == NCTMC_FP_UNIFORM)
            pi[j] = 1.0 / p->S;
        else if (p->process == NCTMC_FP_MASKED)
            pi[j] = j == p->S - 1 ? 1.0 : 0.0;
        else
            pi[j] = j == p->S - 1 ? 1.0 - p->p_u : p->p_u / (p->S - 1);
    }
}

static void ref_q(const ref_proc *p, double a, int x0, const double *pi, double *q)
{
    for (int j = 0; j < p->S; j++)
        q[j] = (j == x0 ? a : 0.0) + (1.0 - a) * pi[j];
}

/* The full forward generator: gen[j * S + k] = R_t(j, k) = sigma (pi_k - [j = k]). */
static void ref_generator(const ref_proc *p, double sigma, const double *pi, double *gen)
{
    for (int j = 0; j < p->S; j++)
        for (int k = 0; k < p->S; k++)
            gen[j * p->S + k] = sigma * (pi[k] - (j == k ? 1.0 : 0.0));
}

/* Conditional reverse rates out of i by the definition (Prop. 3.6):
 * Rhat_j = R_t(j, i) q(j|x0) / q(i|x0) for j != i, read from the generator;
 * all 0 where q(i|x0) = 0 (i is unreachable: no reverse rate). Returns lam_hat. */
static double ref_reverse(const ref_proc *p, const double *gen, const double *q, int i,
                          double *Rhat)
{
    double lam = 0.0;
    for (int j = 0; j < p->S; j++) {
        Rhat[j] = (j != i && q[i] > 0.0) ? gen[j * p->S + i] * q[j] / q[i] : 0.0;
        lam += Rhat[j];
    }
    return lam;
}

/* Poisson KL density f(a, b) = a log(a/b) - a + b, 0 log 0 = 0. */
static double ref_f(double a, double b)
{
    if (a == 0.0)
        return b;
    return a * log(a / b) - a + b;
}

/* Softmax over j != i of z (doubles), into r (r_i = 0). */
static void ref_softmax_excl(int S, int i, const double *z, double *r)
{
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < S; j++)
        if (j != i && z[j] > m)
            m = z[j];
    for (int j = 0; j < S; j++)
        s += j != i ? exp(z[j] - m) : 0.0;
    for (int j = 0; j < S; j++)
        r[j] = j != i ? exp(z[j] - m) / s : 0.0;
}

/* sum_{j != i} f(Rhat_j, lam r_j) for double logits (the O(S) part). */
static double ref_poisson_kl_sum(int S, int i, const double *Rhat, double lam, const double *z)
{
    double r[MAX_S], l = 0.0;
    ref_softmax_excl(S, i, z, r);
    for (int j = 0; j < S; j++)
        if (j != i)
            l += ref_f(Rhat[j], lam * r[j]);
    return l;
}

/* The conditional exit rate out of i given x0, by brute force. */
static double ref_lam_hat(const ref_proc *p, double t, int i, int x0)
{
    static double gen[MAX_S * MAX_S];
    double pi[MAX_S], q[MAX_S], Rhat[MAX_S];
    ref_prior(p, pi);
    ref_q(p, ref_alpha(p, t), x0, pi, q);
    ref_generator(p, ref_sigma(p, t), pi, gen);
    return ref_reverse(p, gen, q, i, Rhat);
}

/* The model's exit rate from h by the definition of its link, with nothing
 * shared with forward_process.h: sigma link lambda = exp(h) sigma; noise-
 * posterior link lambda = (1 - nu) lam_c + nu lam_n, nu = sigmoid(h +
 * logit pi_n), pi_n = P(x0 != i | x_t = i) by Bayes with x0 uniform over
 * the data tokens; the mixture's mask and the masked process: exact.
 * *dlam_dh gets the closed form (1 - nu) nu (lam_n - lam_c) (or lambda, or 0). */
static double ref_link_lambda(const ref_proc *p, double t, int i, double h, double *dlam_dh)
{
    int mask = ref_mask(p);
    *dlam_dh = 0.0;
    if (p->process == NCTMC_FP_MASKED) {
        double a = ref_alpha(p, t);
        return i == mask ? -ref_dalpha(p, t) / (1.0 - a) : 0.0;
    }
    if (p->link == NCTMC_FP_LINK_SIGMA) {
        *dlam_dh = exp(h) * ref_sigma(p, t);
        return *dlam_dh;
    }
    int other = -1;
    for (int j = 0; j < p->S && other < 0; j++)
        if (j != i && j != mask)
            other = j;
    if (i == mask)
        return ref_lam_hat(p, t, i, other);
    double lam_c = ref_lam_hat(p, t, i, i);
    if (other < 0)
        return lam_c;
    double lam_n = ref_lam_hat(p, t, i, other);
    double pi[MAX_S], q[MAX_S], p_i_clean = 0.0, p_i_noise = 0.0;
    ref_prior(p, pi);
    for (int x0 = 0; x0 < p->S; x0++) {
        if (x0 == mask)
            continue;
        ref_q(p, ref_alpha(p, t), x0, pi, q);
        if (x0 == i)
            p_i_clean += q[i];
        else
            p_i_noise += q[i];
    }
    double g = h + log(p_i_noise / p_i_clean);
    double nu = 1.0 / (1.0 + exp(-g));
    *dlam_dh = nu * (1.0 - nu) * (lam_n - lam_c);
    return (1.0 - nu) * lam_c + nu * lam_n;
}

typedef struct ref_row {
    double a, sigma, lam_hat, lam, log_lam, loss, kl, d_h, zscale;
    double Rhat[MAX_S], r[MAX_S], d_z[MAX_S], z[MAX_S];
} ref_row;

/* Everything about one position, by brute force: the rates from the full
 * generator (O(S^2)), lambda_theta from the link (or the exact masked rate
 * -a'/(1 - a) at the mask, 0 elsewhere), the loss as the Poisson-KL sum,
 * the gradients by their closed forms (checked by finite differences). */
static void ref_row_eval(const ref_proc *p, double t, int i, int x0, const float *zf, float h,
                         ref_row *o)
{
    static double gen[MAX_S * MAX_S];
    double pi[MAX_S], q[MAX_S];
    int S = p->S;
    o->a = ref_alpha(p, t);
    o->sigma = ref_sigma(p, t);
    ref_prior(p, pi);
    ref_q(p, o->a, x0, pi, q);
    ref_generator(p, o->sigma, pi, gen);
    o->lam_hat = ref_reverse(p, gen, q, i, o->Rhat);
    double dlam_dh;
    o->lam = ref_link_lambda(p, t, i, (double)h, &dlam_dh);
    o->log_lam = log(o->lam);
    o->zscale = 0.0;
    for (int j = 0; j < S; j++) {
        o->z[j] = (double)zf[j];
        if (j != i && o->z[j] > -1e3 && fabs(o->z[j]) > o->zscale)
            o->zscale = fabs(o->z[j]);
    }
    o->loss = ref_poisson_kl_sum(S, i, o->Rhat, o->lam, o->z);
    ref_softmax_excl(S, i, o->z, o->r);
    o->kl = 0.0;
    for (int j = 0; j < S; j++) {
        if (j != i && o->Rhat[j] > 0.0) {
            double rh = o->Rhat[j] / o->lam_hat;
            o->kl += rh * log(rh / o->r[j]);
        }
        o->d_z[j] = j != i ? o->lam_hat * o->r[j] - o->Rhat[j] : 0.0;
    }
    o->d_h = dlam_dh != 0.0 ? (1.0 - o->lam_hat / o->lam) * dlam_dh : 0.0;
    if (p->process != NCTMC_FP_MASKED && p->link == NCTMC_FP_LINK_SIGMA)
        o->d_h = o->lam - o->lam_hat;
}

/* Tolerances for a kernel that hands the closed form float32 row statistics
 * (max, sum of exp, prior dot; lcond_math.h): everything else is double, so
 * the loss is off by lam_hat times the statistics' rounding, about
 * 2^-24 (1 + |z|max) sqrt(S) in log space (a sum of S float terms of size up
 * to |z|max), plus the float32 store of the result. We allow 4x that. */
static double stat_rounding(const ref_row *o, int S)
{
    return 4.0 * F32_EPS * (1.0 + o->zscale) * sqrt((double)S);
}

static double loss_tol(const ref_row *o, int S)
{
    return 4.0 * F32_EPS * fabs(o->loss) + o->lam_hat * stat_rounding(o, S);
}

/* d l / d z_j = lam_hat r_j - Rhat_j: r_j carries the LSE's rounding. */
static double dz_tol(const ref_row *o, int S, int j, double gs)
{
    return fabs(gs) * (4.0 * F32_EPS * fabs(o->d_z[j]) +
                       (o->lam_hat * o->r[j] + o->Rhat[j]) * stat_rounding(o, S)) +
           1e-37;
}

/* d l / d h = lambda - lam_hat: double arithmetic, then a float32 store. */
static double dh_tol(const ref_row *o, double gs)
{
    return fabs(gs) * (4.0 * F32_EPS * fabs(o->d_h) + 1e-12 * (o->lam + o->lam_hat)) + 1e-37;
}

/* ------------------------------------------------------------------------ */
/* 1. Schedules                                                             */
/* ------------------------------------------------------------------------ */

static void test_schedules(void)
{
    for (int s = 0; s < N_SCHEDS; s++) {
        nctmc_fp fp = make_fp(NCTMC_FP_UNIFORM, s, 7, 0.0f);
        ref_proc p = ref_of(&fp);
        char name[96];
        fp_name(&fp, name, sizeof name);

        CHECK(fp_alpha(&fp, 0.0) == 1.0, "%s: a_0 = %.17g, want 1", name, fp_alpha(&fp, 0.0));
        double a1 = fp_alpha(&fp, 1.0);
        if (s == NCTMC_FP_LOGLINEAR)
            CHECK_CLOSE(a1, (double)SCHEDULE_EPS, 1e-12, 0.0, "loglinear a_1 = eps");
        else
            CHECK(fabs(a1) <= 1e-15, "%s: a_1 = %.3g, want 0", name, a1);

        /* strictly decreasing, inside (0, 1], on a fine grid of [0, 1) */
        bool monotone = true, in_range = true;
        double prev = fp_alpha(&fp, 0.0);
        for (int k = 1; k < 4000; k++) {
            double t = k / 4000.0, a = fp_alpha(&fp, t);
            if (!(a < prev)) {
                monotone = false;
                fprintf(stderr, "  %s: a(%.17g) = %.17g !< a(prev) = %.17g\n", name, t, a, prev);
                break;
            }
            if (!(a > 0.0 && a <= 1.0))
                in_range = false;
            prev = a;
        }
        CHECK(monotone, "%s: a_t not strictly decreasing", name);
        CHECK(in_range, "%s: a_t outside (0, 1] on [0, 1)", name);

        /* sigma = -a'/a: against a central difference of fp_alpha (h = 1e-5:
         * truncation <= (pi/2)^2 h^2 / 6 ~ 4e-11 relative, rounding ~ 1e-11 / a),
         * and against the hand-differentiated reference (ulps). */
        worst fd, an, pos;
        worst_init(&fd);
        worst_init(&an);
        worst_init(&pos);
        for (int k = 0; k <= 2000; k++) {
            double t = 1e-3 + (1.0 - 2e-3) * k / 2000.0;
            double hh = 1e-5;
            double da = (fp_alpha(&fp, t + hh) - fp_alpha(&fp, t - hh)) / (2.0 * hh);
            double want = -da / fp_alpha(&fp, t), got = fp_sigma(&fp, t);
            worst_add(&fd, fabs(got - want), 1e-7 * fabs(want), "t=%.17g got %.17g want %.17g",
                      t, got, want);
            double ref = ref_sigma(&p, t);
            worst_add(&an, fabs(got - ref), 1e-13 * fabs(ref), "t=%.17g got %.17g want %.17g",
                      t, got, ref);
            worst_add(&pos, got > 0.0 && isfinite(got) ? 0.0 : 1.0, 0.5,
                      "t=%.17g sigma=%.17g", t, got);
            double aref = ref_alpha(&p, t);
            worst_add(&an, fabs(fp_alpha(&fp, t) - aref), 1e-15 * aref, "alpha t=%.17g", t);
        }
        char what[160];
        snprintf(what, sizeof what, "%s: fp_sigma vs -a'/a by central difference", name);
        CHECK_WORST(fd, what);
        snprintf(what, sizeof what, "%s: fp_alpha/fp_sigma vs hand-derived a, -a'/a", name);
        CHECK_WORST(an, what);
        snprintf(what, sizeof what, "%s: sigma > 0 and finite on (0, 1)", name);
        CHECK_WORST(pos, what);
    }
}

/* ------------------------------------------------------------------------ */
/* 2. Priors, q_{t|0}, mask conventions, and q as the law of the CTMC        */
/* ------------------------------------------------------------------------ */

static void test_priors(void)
{
    static const double alphas[] = {0.0, 1e-3, 0.3, 0.5, 0.9, 1.0 - 1e-6, 1.0};
    for (int v = 0; v < N_VOCABS; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            nctmc_fp fp = make_fp(proc_kind[pc], NCTMC_FP_LINEAR, test_vocabs[v], proc_pu[pc]);
            ref_proc p = ref_of(&fp);
            int S = p.S;
            char name[96];
            fp_name(&fp, name, sizeof name);
            double pi[MAX_S], q[MAX_S];
            ref_prior(&p, pi);

            int32_t want_mask = fp.process == NCTMC_FP_UNIFORM ? -1 : S - 1;
            CHECK(fp_mask(&fp) == want_mask, "%s: fp_mask = %d, want %d", name,
                  (int)fp_mask(&fp), (int)want_mask);
            CHECK(fp_n_data(&fp) == (fp.process == NCTMC_FP_UNIFORM ? S : S - 1),
                  "%s: fp_n_data = %d", name, (int)fp_n_data(&fp));

            double sum = 0.0, err = 0.0;
            for (int j = 0; j < S; j++) {
                double got = fp_prior(&fp, j);
                sum += got;
                err = fmax(err, fabs(got - pi[j]));
                double part = j == want_mask ? fp_prior_mask(&fp) : fp_prior_data(&fp);
                err = fmax(err, fabs(part - got));
            }
            CHECK(fabs(sum - 1.0) <= 1e-12, "%s: sum of pi = %.17g", name, sum);
            CHECK(err <= 1e-15, "%s: fp_prior differs from the definition by %.3g", name, err);
            if (fp.process == NCTMC_FP_MASKED)
                CHECK(fp_prior(&fp, S - 1) == 1.0 && (S < 2 || fp_prior(&fp, 0) == 0.0),
                      "%s: masked prior must be e_{S-1}", name);
            if (fp.process == NCTMC_FP_UNIFORM)
                CHECK(fp_prior_mask(&fp) == 0.0, "%s: uniform has no mask", name);

            double qerr = 0.0, qsum_err = 0.0, qneg = 0.0;
            for (int x0 = 0; x0 < ref_n_data(&p); x0++) {
                for (size_t k = 0; k < sizeof alphas / sizeof alphas[0]; k++) {
                    double a = alphas[k], s = 0.0;
                    ref_q(&p, a, x0, pi, q);
                    for (int i = 0; i < S; i++) {
                        double got = fp_q(&fp, a, i, x0);
                        s += got;
                        qerr = fmax(qerr, fabs(got - q[i]));
                        qneg = fmin(qneg, got);
                    }
                    qsum_err = fmax(qsum_err, fabs(s - 1.0));
                }
            }
            CHECK(qsum_err <= 1e-12, "%s: q(.|x0) sums to 1 within %.3g", name, qsum_err);
            CHECK(qerr <= 1e-15, "%s: fp_q differs from a e_x0 + (1-a) pi by %.3g", name, qerr);
            CHECK(qneg >= 0.0, "%s: negative q %.3g", name, qneg);
        }
    }
}

/* d q / dt = q R_t with the library's sigma_t and pi, integrated by RK4 from
 * e_{x0} through the full generator, must land on the library's closed form
 * q_{t|0} = a_t e_x0 + (1 - a_t) pi: the rate and the marginals agree. */
static void kolmogorov_rhs(const nctmc_fp *fp, double t, const double *q, double *dq)
{
    int S = fp->vocab;
    double sigma = fp_sigma(fp, t);
    for (int k = 0; k < S; k++) {
        double acc = 0.0;
        for (int j = 0; j < S; j++)
            acc += q[j] * sigma * (fp_prior(fp, k) - (j == k ? 1.0 : 0.0));
        dq[k] = acc;
    }
}

static void test_kolmogorov(void)
{
    static const int32_t vocabs[] = {3, 7};
    static const double t_ends[] = {0.05, 0.4, 0.9};
    for (int v = 0; v < 2; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            for (int s = 0; s < N_SCHEDS; s++) {
                nctmc_fp fp = make_fp(proc_kind[pc], s, vocabs[v], proc_pu[pc]);
                char name[96];
                fp_name(&fp, name, sizeof name);
                int S = fp.vocab, x0 = S - 2;
                double q[MAX_S], k1[MAX_S], k2[MAX_S], k3[MAX_S], k4[MAX_S], tmp[MAX_S];
                for (int j = 0; j < S; j++)
                    q[j] = j == x0 ? 1.0 : 0.0;
                double t = 0.0, dt = 1e-4, err = 0.0;
                for (size_t e = 0; e < sizeof t_ends / sizeof t_ends[0]; e++) {
                    int steps = (int)lround((t_ends[e] - t) / dt);
                    for (int n = 0; n < steps; n++, t = t + dt) {
                        kolmogorov_rhs(&fp, t, q, k1);
                        for (int j = 0; j < S; j++)
                            tmp[j] = q[j] + 0.5 * dt * k1[j];
                        kolmogorov_rhs(&fp, t + 0.5 * dt, tmp, k2);
                        for (int j = 0; j < S; j++)
                            tmp[j] = q[j] + 0.5 * dt * k2[j];
                        kolmogorov_rhs(&fp, t + 0.5 * dt, tmp, k3);
                        for (int j = 0; j < S; j++)
                            tmp[j] = q[j] + dt * k3[j];
                        kolmogorov_rhs(&fp, t + dt, tmp, k4);
                        for (int j = 0; j < S; j++)
                            q[j] += dt / 6.0 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
                    }
                    t = t_ends[e];
                    double a = fp_alpha(&fp, t);
                    for (int j = 0; j < S; j++)
                        err = fmax(err, fabs(q[j] - fp_q(&fp, a, j, x0)));
                }
                CHECK(err <= 1e-9, "%s: RK4 solution of dq/dt = q R_t differs from q_{t|0} "
                                   "by %.3g", name, err);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 3. fp_conditional_rate against the definition                            */
/* ------------------------------------------------------------------------ */

static void test_conditional_rate(void)
{
    test_rng rng = test_rng_seed(3);
    double times[12] = {1e-3, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0 - 1e-3};
    for (int k = 9; k < 12; k++)
        times[k] = test_uniform(&rng, 1e-3f, 1.0f - 1e-3f);

    static double gen[MAX_S * MAX_S];
    for (int v = 0; v < N_VOCABS; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            for (int s = 0; s < N_SCHEDS; s++) {
                nctmc_fp fp = make_fp(proc_kind[pc], s, test_vocabs[v], proc_pu[pc]);
                ref_proc p = ref_of(&fp);
                int S = p.S, mask = ref_mask(&p);
                char name[96];
                fp_name(&fp, name, sizeof name);
                worst w_scalar, w_lam, w_rhat, w_ent, w_zero, w_mdlm;
                worst_init(&w_scalar);
                worst_init(&w_lam);
                worst_init(&w_rhat);
                worst_init(&w_ent);
                worst_init(&w_zero);
                worst_init(&w_mdlm);
                for (int k = 0; k < 12; k++) {
                    double t = times[k], a = ref_alpha(&p, t), sigma = ref_sigma(&p, t);
                    double pi[MAX_S], q[MAX_S], Rhat[MAX_S];
                    ref_prior(&p, pi);
                    ref_generator(&p, sigma, pi, gen);
                    for (int x0 = 0; x0 < ref_n_data(&p); x0++) {
                        ref_q(&p, a, x0, pi, q);
                        for (int i = 0; i < S; i++) {
                            fp_reverse_rate r = fp_conditional_rate(&fp, t, i, x0);
                            double lam = ref_reverse(&p, gen, q, i, Rhat);
                            worst_add(&w_scalar, fabs(r.alpha - a) + fabs(r.sigma - sigma),
                                      1e-13 * (a + sigma), "t=%.17g alpha %.17g sigma %.17g", t,
                                      r.alpha, r.sigma);
                            if (!(lam > 0.0)) {
                                /* unreachable i or no move: every field 0 */
                                double e = fabs(r.lam_hat) + fabs(r.w_prior) + fabs(r.w_x0) +
                                           fabs(r.neg_entropy);
                                worst_add(&w_zero, e, 1e-300,
                                          "t=%.17g i=%d x0=%d lam_hat %.3g w %.3g %.3g ne %.3g",
                                          t, i, x0, r.lam_hat, r.w_prior, r.w_x0,
                                          r.neg_entropy);
                                continue;
                            }
                            worst_add(&w_lam, fabs(r.lam_hat - lam), 1e-12 * lam,
                                      "t=%.17g i=%d x0=%d got %.17g want %.17g", t, i, x0,
                                      r.lam_hat, lam);
                            double ent = 0.0;
                            for (int j = 0; j < S; j++) {
                                if (j == i)
                                    continue;
                                double rh = Rhat[j] / lam;
                                double got = r.w_prior * pi[j] + (j == x0 ? r.w_x0 : 0.0);
                                worst_add(&w_rhat, fabs(got - rh), 1e-12 * rh + 1e-300,
                                          "t=%.17g i=%d x0=%d j=%d got %.17g want %.17g", t, i,
                                          x0, j, got, rh);
                                ent += rh > 0.0 ? rh * log(rh) : 0.0;
                            }
                            /* w_x0 is read only when x0 != i; it must be 0 otherwise */
                            if (x0 == i)
                                worst_add(&w_rhat, fabs(r.w_x0), 1e-300,
                                          "t=%.17g i=x0=%d: w_x0 = %.17g, want 0", t, i, r.w_x0);
                            worst_add(&w_ent, fabs(r.neg_entropy - ent), 1e-12 * (1.0 + fabs(ent)),
                                      "t=%.17g i=%d x0=%d got %.17g want %.17g", t, i, x0,
                                      r.neg_entropy, ent);
                            if (fp.process == NCTMC_FP_MASKED) {
                                /* Cor. 3.8: the exit rate at the mask is -a'/(1 - a) */
                                double g = -ref_dalpha(&p, t) / (1.0 - a);
                                worst_add(&w_mdlm, fabs(r.lam_hat - g), 1e-12 * g,
                                          "t=%.17g lam_hat %.17g want -a'/(1-a) = %.17g", t,
                                          r.lam_hat, g);
                                /* the exit rate the sampler uses is computed
                                 * without cancellation: compare it with a
                                 * reference that has none either */
                                double lr = fp_masked_log_rate(&fp, t, i);
                                g = -ref_dalpha(&p, t) / ref_one_minus_alpha(&p, t);
                                worst_add(&w_mdlm, fabs(exp(lr) - g), 1e-12 * g,
                                          "t=%.17g exp(masked log rate) %.17g want %.17g", t,
                                          exp(lr), g);
                            }
                        }
                    }
                    if (mask >= 0) {
                        for (int i = 0; i < mask; i++) {
                            double lr = fp_masked_log_rate(&fp, t, i);
                            worst_add(&w_zero, isinf(lr) && lr < 0 ? 0.0 : 1.0, 0.5,
                                      "masked log rate at data token %d = %.17g", i, lr);
                        }
                    }
                }
                char what[200];
                snprintf(what, sizeof what, "%s: alpha, sigma fields", name);
                CHECK_WORST(w_scalar, what);
                snprintf(what, sizeof what, "%s: lam_hat vs sum_j R(j,i) q(j|x0)/q(i|x0)", name);
                CHECK_WORST(w_lam, what);
                snprintf(what, sizeof what, "%s: w_prior pi_j + w_x0 [j=x0] vs Rhat_j/lam_hat",
                         name);
                CHECK_WORST(w_rhat, what);
                snprintf(what, sizeof what, "%s: neg_entropy vs sum rhat log rhat", name);
                CHECK_WORST(w_ent, what);
                snprintf(what, sizeof what, "%s: zero rate where q(i|x0) = 0 or pi_i = 0", name);
                if (w_zero.cases > 0)
                    CHECK_WORST(w_zero, what);
                if (fp.process == NCTMC_FP_MASKED) {
                    snprintf(what, sizeof what, "%s: masked exit rate = -a'/(1-a)", name);
                    CHECK_WORST(w_mdlm, what);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Test inputs                                                              */
/* ------------------------------------------------------------------------ */

enum gen_mode {
    GEN_RANDOM,     /* logits U[-8, 8], h U[-3, 3], t mostly random */
    GEN_EXTREME,    /* logits +-30, h +-20, t in {1e-3, 0.5, 1 - 1e-3} */
    GEN_TRUE_RATES, /* z_j = log Rhat_j and lambda = lam_hat: l = 0 */
    GEN_TRUE_JUMPS, /* r = rhat, random h: l = lam_hat phi(lambda/lam_hat) */
    GEN_TRUE_EXIT,  /* lambda = lam_hat, random z: l = lam_hat KL(rhat || r) */
    GEN_MDLM        /* masked process: x_t in {mask, x0} */
};

typedef struct batch {
    nctmc_fp fp;
    int32_t B, L, S, V;
    int64_t N;
    float *logits, *h, *times;
    int32_t *xt, *x0;
    float grad_scale;
    float *loss, *d_logits, *d_h;
    float *log_rate, *jump_logprobs;
} batch;

static bool batch_alloc(batch *b, nctmc_fp fp, int32_t B, int32_t L, int32_t V)
{
    memset(b, 0, sizeof *b);
    b->fp = fp;
    b->B = B;
    b->L = L;
    b->S = fp.vocab;
    b->V = V;
    b->N = (int64_t)B * L;
    size_t nv = (size_t)b->N * (size_t)V, n = (size_t)b->N;
    b->logits = malloc(nv * sizeof(float));
    b->d_logits = malloc(nv * sizeof(float));
    b->jump_logprobs = malloc((size_t)b->N * (size_t)b->S * sizeof(float));
    b->h = malloc(n * sizeof(float));
    b->loss = malloc(n * sizeof(float));
    b->d_h = malloc(n * sizeof(float));
    b->log_rate = malloc(n * sizeof(float));
    b->times = malloc((size_t)B * sizeof(float));
    b->xt = malloc(n * sizeof(int32_t));
    b->x0 = malloc(n * sizeof(int32_t));
    b->grad_scale = 1.0f;
    if (!(b->logits && b->d_logits && b->jump_logprobs && b->h && b->loss && b->d_h &&
          b->log_rate && b->times && b->xt && b->x0))
        return false;
    /* outputs start as NaN: anything a run does not bring back fails */
    for (size_t k = 0; k < nv; k++)
        b->d_logits[k] = NAN;
    for (size_t k = 0; k < (size_t)b->N * (size_t)b->S; k++)
        b->jump_logprobs[k] = NAN;
    for (size_t k = 0; k < n; k++)
        b->loss[k] = b->d_h[k] = b->log_rate[k] = NAN;
    return true;
}

static void batch_free(batch *b)
{
    free(b->logits);
    free(b->d_logits);
    free(b->jump_logprobs);
    free(b->h);
    free(b->loss);
    free(b->d_h);
    free(b->log_rate);
    free(b->times);
    free(b->xt);
    free(b->x0);
}

static batch batch_copy(const batch *src)
{
    batch b;
    if (!batch_alloc(&b, src->fp, src->B, src->L, src->V)) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    size_t nv = (size_t)src->N * (size_t)src->V, n = (size_t)src->N;
    memcpy(b.logits, src->logits, nv * sizeof(float));
    memcpy(b.h, src->h, n * sizeof(float));
    memcpy(b.times, src->times, (size_t)src->B * sizeof(float));
    memcpy(b.xt, src->xt, n * sizeof(int32_t));
    memcpy(b.x0, src->x0, n * sizeof(int32_t));
    b.grad_scale = src->grad_scale;
    return b;
}

static int32_t sample_from(test_rng *rng, const double *p, int n)
{
    double u = (double)test_uniform(rng, 0.0f, 1.0f), c = 0.0;
    for (int j = 0; j < n; j++) {
        c += p[j];
        if (u < c && p[j] > 0.0)
            return j;
    }
    for (int j = n - 1; j >= 0; j--)
        if (p[j] > 0.0)
            return j;
    return 0;
}

static void fill_batch(batch *b, test_rng *rng, enum gen_mode mode)
{
    ref_proc p = ref_of(&b->fp);
    int S = b->S, V = b->V;
    static const float extreme_t[] = {1e-3f, 0.5f, 1.0f - 1e-3f};
    for (int32_t s = 0; s < b->B; s++) {
        if (mode == GEN_EXTREME || s % 4 == 0)
            b->times[s] = extreme_t[test_randint(rng, 3)];
        else
            b->times[s] = test_uniform(rng, 1e-3f, 1.0f - 1e-3f);
    }
    for (int64_t r = 0; r < b->N; r++) {
        float *z = b->logits + r * V;
        double t = (double)b->times[r / b->L];
        double pi[MAX_S], q[MAX_S];
        ref_prior(&p, pi);
        int32_t x0 = test_randint(rng, ref_n_data(&p));
        ref_q(&p, ref_alpha(&p, t), x0, pi, q);
        int32_t i;
        if (mode == GEN_MDLM)
            i = test_randint(rng, 2) ? (int32_t)(S - 1) : x0;
        else if (mode == GEN_TRUE_RATES || mode == GEN_TRUE_JUMPS || mode == GEN_TRUE_EXIT ||
                 test_randint(rng, 4) != 0)
            i = sample_from(rng, q, S); /* x_t ~ q_{t|0}(. | x0) */
        else
            i = test_randint(rng, S); /* any state, reachable or not */
        b->x0[r] = x0;
        b->xt[r] = i;

        for (int j = 0; j < V; j++)
            z[j] = j < S ? test_uniform(rng, -8.0f, 8.0f) : NAN; /* padding is ignored */
        b->h[r] = test_uniform(rng, -3.0f, 3.0f);
        if (mode == GEN_EXTREME) {
            int pattern = (int)(r % 3);
            for (int j = 0; j < S; j++) {
                if (pattern == 0)
                    z[j] = test_randint(rng, 2) ? 30.0f : -30.0f;
                else if (pattern == 1)
                    z[j] = test_uniform(rng, -30.0f, 30.0f);
                else
                    z[j] = j == (int)((r / 3) % S) ? 30.0f : -30.0f;
            }
            static const float hs[] = {20.0f, -20.0f, 0.0f};
            int hp = (int)(r % 4);
            b->h[r] = hp < 3 ? hs[hp] : test_uniform(rng, -20.0f, 20.0f);
        }
        if (mode == GEN_TRUE_RATES || mode == GEN_TRUE_JUMPS || mode == GEN_TRUE_EXIT) {
            ref_row o;
            ref_row_eval(&p, t, i, x0, z, 0.0f, &o);
            if (mode != GEN_TRUE_EXIT)
                for (int j = 0; j < S; j++)
                    if (j != i)
                        z[j] = o.Rhat[j] > 0.0 ? (float)log(o.Rhat[j]) : -1e4f;
            if (mode != GEN_TRUE_JUMPS && o.lam_hat > 0.0)
                b->h[r] = (float)(log(o.lam_hat) - log(o.sigma));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 3b. lcond_math.h on its own, with row statistics computed here            */
/* ------------------------------------------------------------------------ */

static lcond_row_stats test_row_stats(const nctmc_fp *fp, const float *z, int32_t i)
{
    lcond_row_stats s;
    float m = -INFINITY;
    for (int32_t j = 0; j < fp->vocab; j++)
        if (j != i && z[j] > m)
            m = z[j];
    double se = 0.0, pd = 0.0;
    for (int32_t j = 0; j < fp->vocab; j++) {
        if (j == i)
            continue;
        se += (double)expf(z[j] - m);
        pd += fp_prior(fp, j) * ((double)z[j] - (double)m);
    }
    s.max_logit = m;
    s.sum_exp = (float)se;
    s.prior_dot = pd;
    return s;
}

static void test_lcond_header(void)
{
    test_rng rng = test_rng_seed(17);
    static const enum gen_mode modes[] = {GEN_RANDOM, GEN_EXTREME, GEN_TRUE_RATES};
    static const int32_t vocabs[] = {2, 3, 7, 64, 256};
    for (int v = 0; v < 5; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            for (int s = 0; s < 2 * N_SCHEDS; s++) {
                if (sanitized_skip(vocabs[v], s % N_SCHEDS))
                    continue;
                nctmc_fp fp = make_fp(proc_kind[pc], s % N_SCHEDS, vocabs[v], proc_pu[pc]);
                fp.exit_link = s / N_SCHEDS;
                ref_proc p = ref_of(&fp);
                char name[96];
                fp_name(&fp, name, sizeof name);
                worst wl, wg, wh;
                worst_init(&wl);
                worst_init(&wg);
                worst_init(&wh);
                for (int m = 0; m < 3; m++) {
                    batch b;
                    if (!batch_alloc(&b, fp, 3, 6, fp.vocab)) {
                        CHECK(false, "out of memory");
                        return;
                    }
                    fill_batch(&b, &rng, modes[m]);
                    for (int64_t r = 0; r < b.N; r++) {
                        const float *z = b.logits + r * b.V;
                        double t = (double)b.times[r / b.L];
                        int32_t i = b.xt[r], x0 = b.x0[r];
                        ref_row o;
                        ref_row_eval(&p, t, i, x0, z, b.h[r], &o);
                        lcond_position pos = lcond_prepare(&fp, t, i, x0, b.h[r]);
                        lcond_row_stats st = test_row_stats(&fp, z, i);
                        double l = lcond_value(&pos, st, z[x0]);
                        worst_add(&wl, fabs(l - o.loss), loss_tol(&o, fp.vocab),
                                  "mode %d t=%.9g i=%d x0=%d h=%.9g: got %.17g want %.17g", m,
                                  t, i, x0, (double)b.h[r], l, o.loss);
                        double gh = lcond_grad_h(&fp, &pos);
                        worst_add(&wh, fabs(gh - o.d_h), dh_tol(&o, 1.0),
                                  "mode %d t=%.9g i=%d x0=%d h=%.9g: got %.17g want %.17g", m,
                                  t, i, x0, (double)b.h[r], gh, o.d_h);
                        double lse = lcond_lse(st);
                        for (int32_t j = 0; j < fp.vocab; j++) {
                            double g = lcond_grad_logit(&pos, j, z[j], lse, fp_prior(&fp, j));
                            worst_add(&wg, fabs(g - o.d_z[j]), dz_tol(&o, fp.vocab, j, 1.0),
                                      "mode %d t=%.9g i=%d x0=%d j=%d: got %.9g want %.9g", m,
                                      t, i, x0, j, g, o.d_z[j]);
                        }
                    }
                    batch_free(&b);
                }
                char what[200];
                snprintf(what, sizeof what, "%s: lcond_value vs brute-force Poisson-KL sum",
                         name);
                CHECK_WORST(wl, what);
                snprintf(what, sizeof what, "%s: lcond_grad_h vs (1 - lam_hat / lambda) dlambda/dh", name);
                CHECK_WORST(wh, what);
                snprintf(what, sizeof what, "%s: lcond_grad_logit vs lam_hat r_j - Rhat_j", name);
                CHECK_WORST(wg, what);
            }
        }
    }
}

/* The brute force's gradient formulas are the derivatives of its loss:
 * central differences in double (step 1e-5) of sum_j f(Rhat_j, lambda r_j)
 * in z_j and in h = log lambda (learned link only). */
static void test_gradient_formulas(void)
{
    test_rng rng = test_rng_seed(29);
    static const int32_t vocabs[] = {2, 3, 7, 64};
    for (int v = 0; v < 4; v++) {
        for (int pl = 0; pl < 2 * N_PROCS; pl++) {
            int pc = pl % N_PROCS;
            nctmc_fp fp = make_fp(proc_kind[pc], test_randint(&rng, 3), vocabs[v], proc_pu[pc]);
            fp.exit_link = pl / N_PROCS;
            ref_proc p = ref_of(&fp);
            char name[96];
            fp_name(&fp, name, sizeof name);
            worst w;
            worst_init(&w);
            batch b;
            if (!batch_alloc(&b, fp, 2, 4, fp.vocab))
                return;
            fill_batch(&b, &rng, GEN_RANDOM);
            for (int64_t r = 0; r < b.N; r++) {
                double t = (double)b.times[r / b.L];
                int32_t i = b.xt[r];
                ref_row o;
                ref_row_eval(&p, t, i, b.x0[r], b.logits + r * b.V, b.h[r], &o);
                double zz[MAX_S], d = 1e-5;
                memcpy(zz, o.z, sizeof(double) * (size_t)fp.vocab);
                for (int j = 0; j < fp.vocab; j++) {
                    double keep = zz[j];
                    zz[j] = keep + d;
                    double lp = ref_poisson_kl_sum(fp.vocab, i, o.Rhat, o.lam, zz);
                    zz[j] = keep - d;
                    double lm = ref_poisson_kl_sum(fp.vocab, i, o.Rhat, o.lam, zz);
                    zz[j] = keep;
                    double fd = (lp - lm) / (2 * d);
                    worst_add(&w, fabs(fd - o.d_z[j]), 1e-6 * (o.lam + o.lam_hat) + 1e-300,
                              "t=%.9g i=%d j=%d fd %.12g formula %.12g", t, i, j, fd, o.d_z[j]);
                }
                if (fp.process != NCTMC_FP_MASKED) {
                    double unused, hh = (double)b.h[r];
                    double lamp = ref_link_lambda(&p, t, i, hh + d, &unused);
                    double lamm = ref_link_lambda(&p, t, i, hh - d, &unused);
                    double lp = ref_poisson_kl_sum(fp.vocab, i, o.Rhat, lamp, zz);
                    double lm = ref_poisson_kl_sum(fp.vocab, i, o.Rhat, lamm, zz);
                    double fd = (lp - lm) / (2 * d);
                    worst_add(&w, fabs(fd - o.d_h), 1e-6 * (o.lam + o.lam_hat),
                              "t=%.9g i=%d d/dh fd %.12g formula %.12g", t, i, fd, o.d_h);
                }
            }
            batch_free(&b);
            char what[160];
            snprintf(what, sizeof what, "%s: closed-form gradients vs central differences", name);
            CHECK_WORST(w, what);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 4, 5. The CPU backend's lcond and jump_output                            */
/* ------------------------------------------------------------------------ */

#define SENTINEL 777.0f

static void *dev_upload(nctmc_backend *be, const void *src, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    if (d && src)
        be->ops->upload(be, d, src, bytes);
    return d;
}

/* Runs lcond on b's inputs; d_logits (in place over the logits if asked)
 * and d_rate_h start as SENTINEL so unwritten entries show. */
static bool run_lcond(nctmc_backend *be, batch *b, bool in_place, bool grads)
{
    size_t nv = (size_t)b->N * (size_t)b->V, n = (size_t)b->N;
    float *sent = malloc((nv > n ? nv : n) * sizeof(float));
    if (!sent)
        return false;
    for (size_t k = 0; k < (nv > n ? nv : n); k++)
        sent[k] = SENTINEL;
    bool masked = b->fp.process == NCTMC_FP_MASKED;
    float *logits = dev_upload(be, b->logits, nv * sizeof(float));
    float *h = masked ? NULL : dev_upload(be, b->h, n * sizeof(float));
    int32_t *xt = dev_upload(be, b->xt, n * sizeof(int32_t));
    int32_t *x0 = dev_upload(be, b->x0, n * sizeof(int32_t));
    float *times = dev_upload(be, b->times, (size_t)b->B * sizeof(float));
    float *loss = dev_upload(be, sent, n * sizeof(float));
    float *dl = grads && !in_place ? dev_upload(be, sent, nv * sizeof(float)) : NULL;
    float *dh = grads ? dev_upload(be, sent, n * sizeof(float)) : NULL;
    bool ok = logits && (h || masked) && xt && x0 && times && loss && (dl || !grads || in_place) &&
              (dh || !grads);
    if (ok) {
        nctmc_lcond_args a;
        memset(&a, 0, sizeof a);
        a.n_rows = b->N;
        a.seq_len = b->L;
        a.row_stride = b->V;
        a.logits = logits;
        a.rate_h = h;
        a.x_t = xt;
        a.x_0 = x0;
        a.times = times;
        a.fp = b->fp;
        a.grad_scale = b->grad_scale;
        a.loss = loss;
        a.d_logits = grads ? (in_place ? logits : dl) : NULL;
        a.d_rate_h = dh;
        be->ops->lcond(be, &a);
        ok = be->ops->synchronize(be) == NCTMC_OK;
        be->ops->download(be, b->loss, loss, n * sizeof(float));
        if (grads) {
            be->ops->download(be, b->d_logits, in_place ? logits : dl, nv * sizeof(float));
            be->ops->download(be, b->d_h, dh, n * sizeof(float));
        }
    }
    be->ops->free(be, logits);
    be->ops->free(be, h);
    be->ops->free(be, xt);
    be->ops->free(be, x0);
    be->ops->free(be, times);
    be->ops->free(be, loss);
    be->ops->free(be, dl);
    be->ops->free(be, dh);
    free(sent);
    return ok;
}

static bool run_jump_output(nctmc_backend *be, batch *b)
{
    size_t nv = (size_t)b->N * (size_t)b->V, n = (size_t)b->N, ns = n * (size_t)b->S;
    bool masked = b->fp.process == NCTMC_FP_MASKED;
    float *logits = dev_upload(be, b->logits, nv * sizeof(float));
    float *h = masked ? NULL : dev_upload(be, b->h, n * sizeof(float));
    int32_t *xt = dev_upload(be, b->xt, n * sizeof(int32_t));
    float *times = dev_upload(be, b->times, (size_t)b->B * sizeof(float));
    float *lr = dev_upload(be, NULL, n * sizeof(float));
    float *lp = dev_upload(be, NULL, ns * sizeof(float));
    bool ok = logits && (h || masked) && xt && times && lr && lp;
    if (ok) {
        nctmc_jump_output_args a;
        memset(&a, 0, sizeof a);
        a.n_rows = b->N;
        a.seq_len = b->L;
        a.row_stride = b->V;
        a.logits = logits;
        a.rate_h = h;
        a.x_t = xt;
        a.times = times;
        a.fp = b->fp;
        a.log_rate = lr;
        a.jump_logprobs = lp;
        be->ops->jump_output(be, &a);
        ok = be->ops->synchronize(be) == NCTMC_OK;
        be->ops->download(be, b->log_rate, lr, n * sizeof(float));
        be->ops->download(be, b->jump_logprobs, lp, ns * sizeof(float));
    }
    be->ops->free(be, logits);
    be->ops->free(be, h);
    be->ops->free(be, xt);
    be->ops->free(be, times);
    be->ops->free(be, lr);
    be->ops->free(be, lp);
    return ok;
}

typedef struct lcond_worsts {
    worst nonneg, loss, dh, dz, pad, zero, grad_zero, mdlm, phi, kl, decomp;
} lcond_worsts;

static void lcond_worsts_init(lcond_worsts *w)
{
    worst *all[] = {&w->nonneg, &w->loss,      &w->dh,   &w->dz,  &w->pad,   &w->zero,
                    &w->grad_zero, &w->mdlm, &w->phi, &w->kl, &w->decomp};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        worst_init(all[k]);
}

/* Compares one lcond run (loss and, if grads, gradients) with the brute
 * force, row by row, plus the mode's own identity. */
static void check_lcond_rows(const batch *b, enum gen_mode mode, bool grads, lcond_worsts *w)
{
    ref_proc p = ref_of(&b->fp);
    int S = b->S;
    double gs = (double)b->grad_scale;
    for (int64_t r = 0; r < b->N; r++) {
        const float *z = b->logits + r * b->V;
        double t = (double)b->times[r / b->L];
        int32_t i = b->xt[r], x0 = b->x0[r];
        ref_row o;
        ref_row_eval(&p, t, i, x0, z, b->h[r], &o);
        double l = (double)b->loss[r];
#define ROW_FMT "row %lld t=%.9g i=%d x0=%d h=%.9g lam_hat=%.6g lam=%.6g"
#define ROW_ARGS (long long)r, t, (int)i, (int)x0, (double)b->h[r], o.lam_hat, o.lam
        worst_add(&w->nonneg, l >= 0.0 && isfinite(l) ? 0.0 : 1.0, 0.5, ROW_FMT ": l = %.9g",
                  ROW_ARGS, l);
        worst_add(&w->loss, fabs(l - o.loss), loss_tol(&o, S), ROW_FMT ": got %.9g want %.9g",
                  ROW_ARGS, l, o.loss);
        if (mode == GEN_TRUE_RATES && (o.lam_hat > 0.0 || p.process == NCTMC_FP_MASKED))
            worst_add(&w->zero, fabs(l), o.lam_hat * stat_rounding(&o, S),
                      ROW_FMT ": l at the true rates %.3g", ROW_ARGS, l);
        if (mode == GEN_TRUE_JUMPS && o.lam_hat > 0.0) {
            double u = o.lam / o.lam_hat, want = o.lam_hat * (u - 1.0 - log(u));
            worst_add(&w->phi, fabs(l - want), 4.0 * F32_EPS * want + o.lam_hat * stat_rounding(&o, S),
                      ROW_FMT ": l %.9g want lam_hat phi %.9g", ROW_ARGS, l, want);
        }
        if (mode == GEN_TRUE_EXIT && o.lam_hat > 0.0) {
            /* lambda = lam_hat up to the float rounding of h */
            double want = o.lam_hat * o.kl;
            double dh_round = fabs(log(o.lam / o.lam_hat));
            worst_add(&w->kl, fabs(l - want),
                      4.0 * F32_EPS * want + o.lam_hat * (stat_rounding(&o, S) + dh_round * dh_round),
                      ROW_FMT ": l %.9g want lam_hat KL %.9g", ROW_ARGS, l, want);
        }
        if (o.lam_hat > 0.0) {
            double u = o.lam / o.lam_hat;
            double want = o.lam_hat * (u - 1.0 - log(u)) + o.lam_hat * o.kl;
            worst_add(&w->decomp, fabs(l - want), loss_tol(&o, S),
                      ROW_FMT ": l %.9g want lam_hat (phi + KL) %.9g", ROW_ARGS, l, want);
        }
        if (p.process == NCTMC_FP_MASKED) {
            /* Cor. 3.8: -lam_hat log softmax_{j != m}(z)[x0] at the mask, 0 elsewhere */
            double want = 0.0;
            if (i == S - 1) {
                double g = -ref_dalpha(&p, t) / (1.0 - ref_alpha(&p, t));
                want = -g * log(o.r[x0]);
                worst_add(&w->mdlm, fabs(l - want), 1e-6 * fabs(want) + 1e-6 * g,
                          ROW_FMT ": l %.12g want MDLM %.12g", ROW_ARGS, l, want);
            } else {
                worst_add(&w->mdlm, fabs(l), 1e-300, ROW_FMT ": l %.9g at an unmasked position",
                          ROW_ARGS, l);
            }
        }
        if (!grads)
            continue;
        float got_h = b->d_h[r];
        worst_add(&w->dh, fabs((double)got_h - gs * o.d_h), dh_tol(&o, gs),
                  ROW_FMT ": d_h got %.9g want %.9g", ROW_ARGS, (double)got_h, gs * o.d_h);
        for (int j = 0; j < b->V; j++) {
            double g = (double)b->d_logits[r * b->V + j];
            if (j >= S || j == i) {
                worst_add(&w->pad, fabs(g), 1e-300, ROW_FMT ": d_logits[%d] = %.9g, want 0",
                          ROW_ARGS, j, g);
                continue;
            }
            worst_add(&w->dz, fabs(g - gs * o.d_z[j]), dz_tol(&o, S, j, gs),
                      ROW_FMT ": d_logits[%d] got %.9g want %.9g", ROW_ARGS, j, g,
                      gs * o.d_z[j]);
            if (mode == GEN_TRUE_RATES)
                worst_add(&w->grad_zero, fabs(g),
                          fabs(gs) * (o.lam_hat > 0.0 ? (o.lam_hat * o.r[j] + o.Rhat[j]) *
                                                            stat_rounding(&o, S)
                                                      : 0.0) +
                              1e-37,
                          ROW_FMT ": d_logits[%d] = %.3g at the true rates", ROW_ARGS, j, g);
        }
        if (mode == GEN_TRUE_RATES && o.lam_hat > 0.0 && p.process != NCTMC_FP_MASKED) {
            /* lambda = lam_hat up to h's float rounding 2^-24 |h| */
            double tol = fabs(gs) * o.lam_hat * 4.0 * F32_EPS * (1.0 + fabs((double)b->h[r]));
            worst_add(&w->grad_zero, fabs((double)got_h), tol,
                      ROW_FMT ": d_h = %.3g at the true rate", ROW_ARGS, (double)got_h);
        }
#undef ROW_FMT
#undef ROW_ARGS
    }
}

static void report_lcond_worsts(const char *name, lcond_worsts *w, bool masked)
{
    char what[256];
#define REPORT(field, text)                                     \
    do {                                                        \
        snprintf(what, sizeof what, "%s: %s", name, text);      \
        if (w->field.cases > 0)                                 \
            CHECK_WORST(w->field, what);                        \
    } while (0)
    REPORT(nonneg, "4a l >= 0 and finite");
    REPORT(zero, "4b l = 0 at the true rates (tol lam_hat x stats rounding)");
    REPORT(grad_zero, "4b gradients vanish at the true rates");
    REPORT(loss, "4c l vs the O(S^2) brute-force Poisson-KL sum");
    REPORT(dh, "4e d_rate_h = grad_scale (lambda - lam_hat)");
    REPORT(dz, "4e d_logits_j = grad_scale (lam_hat r_j - Rhat_j)");
    REPORT(pad, "4e d_logits = 0 at j = x_t and in the padding");
    REPORT(phi, "4g l = lam_hat phi(lambda/lam_hat) when r = rhat");
    REPORT(kl, "4g l = lam_hat KL(rhat || r) when lambda = lam_hat");
    REPORT(decomp, "4g l = lam_hat phi + lam_hat KL");
    if (masked)
        REPORT(mdlm, "4d MDLM: l = -lam_hat log softmax_{j!=m}(z)[x0] (1e-6 rel)");
#undef REPORT
}

/* Main sweep: every process, schedule, S in {2, 3, 7, 64, 256}, every input
 * mode, out of place and in place. */
static void test_lcond_backend(nctmc_backend *be)
{
    test_rng rng = test_rng_seed(101);
    static const int32_t vocabs[] = {2, 3, 7, 64, 256};
    static const enum gen_mode modes[] = {GEN_RANDOM,     GEN_EXTREME,   GEN_TRUE_RATES,
                                          GEN_TRUE_JUMPS, GEN_TRUE_EXIT, GEN_MDLM};
    for (int v = 0; v < 5; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            for (int s = 0; s < N_SCHEDS; s++) {
                if (sanitized_skip(vocabs[v], s))
                    continue;
                nctmc_fp fp = make_fp(proc_kind[pc], s, vocabs[v], proc_pu[pc]);
                char name[96];
                fp_name(&fp, name, sizeof name);
                lcond_worsts w;
                lcond_worsts_init(&w);
                bool runs_ok = true, inplace_same = true;
                for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
                    if (modes[m] == GEN_MDLM && fp.process != NCTMC_FP_MASKED)
                        continue;
                    /* padded rows (V > S, NaN padding) and dense rows */
                    int32_t V = (m % 2 == 0) ? fp.vocab + 5 : fp.vocab;
                    batch b;
                    if (!batch_alloc(&b, fp, 4, 9, V)) {
                        CHECK(false, "out of memory");
                        return;
                    }
                    fill_batch(&b, &rng, modes[m]);
                    b.grad_scale = m % 3 == 0 ? 1.0f : m % 3 == 1 ? 1.0f / (float)b.N : -0.37f;
                    runs_ok &= run_lcond(be, &b, false, true);
                    check_lcond_rows(&b, modes[m], true, &w);

                    batch c = batch_copy(&b);
                    runs_ok &= run_lcond(be, &c, true, true);
                    check_lcond_rows(&c, modes[m], true, &w);
                    size_t nv = (size_t)b.N * (size_t)V;
                    for (size_t k = 0; k < nv; k++) {
                        double x = b.d_logits[k], y = c.d_logits[k];
                        if (fabs(x - y) > 1e-6 * fabs(x) + 1e-37)
                            inplace_same = false;
                    }
                    for (int64_t r = 0; r < b.N; r++)
                        if (fabs((double)b.loss[r] - (double)c.loss[r]) >
                                1e-6 * fabs((double)b.loss[r]) ||
                            fabs((double)b.d_h[r] - (double)c.d_h[r]) >
                                1e-6 * fabs((double)b.d_h[r]))
                            inplace_same = false;
                    batch_free(&c);
                    batch_free(&b);
                }
                CHECK(runs_ok, "%s: lcond runs report success", name);
                CHECK(inplace_same, "%s: 4 d_logits aliasing logits gives the same results",
                      name);
                report_lcond_worsts(name, &w, fp.process == NCTMC_FP_MASKED);
            }
        }
    }
}

/* 4f: adding a constant to every logit of a row changes nothing (beyond
 * rounding); the current token's logit and the padding do not matter at all
 * (bitwise); results are bitwise identical for 1 and 2 threads. */
static void test_lcond_invariances(nctmc_backend *be, nctmc_backend *be1)
{
    test_rng rng = test_rng_seed(202);
    static const int32_t vocabs[] = {3, 7, 64, 256};
    for (int v = 0; v < 4; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            nctmc_fp fp = make_fp(proc_kind[pc], (v + pc) % 3, vocabs[v], proc_pu[pc]);
            char name[96];
            fp_name(&fp, name, sizeof name);
            batch b;
            if (!batch_alloc(&b, fp, 3, 11, fp.vocab + 3))
                return;
            fill_batch(&b, &rng, GEN_RANDOM);
            b.grad_scale = 0.25f;
            CHECK(run_lcond(be, &b, false, true), "%s: lcond run", name);
            size_t nv = (size_t)b.N * (size_t)b.V;

            /* shift every valid logit */
            static const float shifts[] = {5.0f, -13.0f, 25.0f};
            worst wl, wg;
            worst_init(&wl);
            worst_init(&wg);
            ref_proc p = ref_of(&fp);
            for (int k = 0; k < 3; k++) {
                batch c = batch_copy(&b);
                for (int64_t r = 0; r < c.N; r++)
                    for (int j = 0; j < c.S; j++)
                        c.logits[r * c.V + j] += shifts[k];
                CHECK(run_lcond(be, &c, false, true), "%s: lcond run", name);
                for (int64_t r = 0; r < b.N; r++) {
                    ref_row o;
                    ref_row_eval(&p, (double)b.times[r / b.L], b.xt[r], b.x0[r],
                                 c.logits + r * c.V, b.h[r], &o);
                    worst_add(&wl, fabs((double)c.loss[r] - (double)b.loss[r]),
                              2.0 * loss_tol(&o, c.S), "shift %g row %lld: %.9g vs %.9g",
                              (double)shifts[k], (long long)r, (double)c.loss[r],
                              (double)b.loss[r]);
                    for (int j = 0; j < c.S; j++)
                        worst_add(&wg,
                                  fabs((double)c.d_logits[r * c.V + j] -
                                       (double)b.d_logits[r * b.V + j]),
                                  2.0 * dz_tol(&o, c.S, j, (double)b.grad_scale),
                                  "shift %g row %lld j=%d: %.9g vs %.9g", (double)shifts[k],
                                  (long long)r, j, (double)c.d_logits[r * c.V + j],
                                  (double)b.d_logits[r * b.V + j]);
                }
                batch_free(&c);
            }
            char what[200];
            snprintf(what, sizeof what, "%s: 4f loss invariant to z + const", name);
            CHECK_WORST(wl, what);
            snprintf(what, sizeof what, "%s: 4f d_logits invariant to z + const", name);
            CHECK_WORST(wg, what);

            /* the current token's logit is excluded, not down-weighted */
            static const float wild[] = {1e30f, -1e30f, NAN};
            for (int k = 0; k < 3; k++) {
                batch c = batch_copy(&b);
                for (int64_t r = 0; r < c.N; r++)
                    c.logits[r * c.V + c.xt[r]] = wild[k];
                CHECK(run_lcond(be, &c, false, true), "%s: lcond run", name);
                bool same = memcmp(c.loss, b.loss, (size_t)b.N * sizeof(float)) == 0 &&
                            memcmp(c.d_h, b.d_h, (size_t)b.N * sizeof(float)) == 0 &&
                            memcmp(c.d_logits, b.d_logits, nv * sizeof(float)) == 0;
                CHECK(same, "%s: z at x_t = %g changes the outputs", name, (double)wild[k]);
                batch_free(&c);
            }

            /* thread count does not change a bit */
            batch c = batch_copy(&b);
            CHECK(run_lcond(be1, &c, false, true), "%s: lcond run (1 thread)", name);
            bool same = memcmp(c.loss, b.loss, (size_t)b.N * sizeof(float)) == 0 &&
                        memcmp(c.d_h, b.d_h, (size_t)b.N * sizeof(float)) == 0 &&
                        memcmp(c.d_logits, b.d_logits, nv * sizeof(float)) == 0;
            CHECK(same, "%s: 1 and 2 threads give different bits", name);
            batch_free(&c);

            /* a NULL d_logits / d_rate_h skips them and leaves the loss alone */
            c = batch_copy(&b);
            CHECK(run_lcond(be, &c, false, false), "%s: lcond run without gradients", name);
            CHECK(memcmp(c.loss, b.loss, (size_t)b.N * sizeof(float)) == 0,
                  "%s: loss differs when the gradients are skipped", name);
            batch_free(&c);
            batch_free(&b);
        }
    }
}

/* 5. jump_output: log lambda = h + log sigma_t (learned link) or the exact
 * masked rate; jump log-probabilities a log-softmax over j != x_t. */
static void test_jump_output(nctmc_backend *be)
{
    test_rng rng = test_rng_seed(303);
    static const int32_t vocabs[] = {2, 3, 7, 64, 256};
    for (int v = 0; v < 5; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            for (int s = 0; s < N_SCHEDS; s++) {
                nctmc_fp fp = make_fp(proc_kind[pc], s, vocabs[v], proc_pu[pc]);
                ref_proc p = ref_of(&fp);
                char name[96];
                fp_name(&fp, name, sizeof name);
                worst wr, wp, ws, wx;
                worst_init(&wr);
                worst_init(&wp);
                worst_init(&ws);
                worst_init(&wx);
                bool ok = true;
                for (int m = 0; m < 2; m++) {
                    batch b;
                    if (!batch_alloc(&b, fp, 3, 7, fp.vocab + (m ? 0 : 4)))
                        return;
                    fill_batch(&b, &rng,
                               m ? GEN_EXTREME
                                 : fp.process == NCTMC_FP_MASKED ? GEN_MDLM : GEN_RANDOM);
                    ok &= run_jump_output(be, &b);
                    int S = b.S;
                    for (int64_t r = 0; r < b.N; r++) {
                        double t = (double)b.times[r / b.L];
                        int32_t i = b.xt[r];
                        double want;
                        if (fp.process == NCTMC_FP_MASKED)
                            want = i == S - 1 ? log(-ref_dalpha(&p, t) / (1.0 - ref_alpha(&p, t)))
                                              : -INFINITY;
                        else
                            want = (double)b.h[r] + log(ref_sigma(&p, t));
                        double got = (double)b.log_rate[r];
                        if (isinf(want))
                            worst_add(&wr, got == want ? 0.0 : 1.0, 0.5,
                                      "row %lld t=%.9g i=%d: log_rate %.9g want -inf",
                                      (long long)r, t, (int)i, got);
                        else
                            worst_add(&wr, fabs(got - want), 4.0 * F32_EPS * (1.0 + fabs(want)),
                                      "row %lld t=%.9g i=%d h=%.9g: log_rate %.9g want %.9g",
                                      (long long)r, t, (int)i, (double)b.h[r], got, want);
                        double z[MAX_S], rr[MAX_S], zscale = 0.0, sum = 0.0;
                        for (int j = 0; j < S; j++) {
                            z[j] = (double)b.logits[r * b.V + j];
                            if (j != i)
                                zscale = fmax(zscale, fabs(z[j]));
                        }
                        ref_softmax_excl(S, i, z, rr);
                        for (int j = 0; j < S; j++) {
                            double lp = (double)b.jump_logprobs[r * S + j];
                            if (j == i) {
                                worst_add(&wx, isinf(lp) && lp < 0 ? 0.0 : 1.0, 0.5,
                                          "row %lld i=%d: logprob at x_t %.9g", (long long)r,
                                          (int)i, lp);
                                continue;
                            }
                            double wl = log(rr[j]);
                            worst_add(&wp, fabs(lp - wl),
                                      4.0 * F32_EPS * (fabs(wl) + (1.0 + zscale) * sqrt((double)S)),
                                      "row %lld i=%d j=%d: logprob %.9g want %.9g", (long long)r,
                                      (int)i, j, lp, wl);
                            sum += exp(lp);
                        }
                        worst_add(&ws, fabs(sum - 1.0),
                                  8.0 * F32_EPS * (1.0 + zscale) * sqrt((double)S),
                                  "row %lld: sum exp(logprob) = %.12g", (long long)r, sum);
                    }
                    batch_free(&b);
                }
                char what[200];
                CHECK(ok, "%s: jump_output runs report success", name);
                snprintf(what, sizeof what, "%s: 5 log_rate", name);
                CHECK_WORST(wr, what);
                snprintf(what, sizeof what, "%s: 5 jump_logprobs vs log softmax_{j!=x_t}", name);
                CHECK_WORST(wp, what);
                snprintf(what, sizeof what, "%s: 5 sum_{j!=x_t} exp(logprob) = 1", name);
                CHECK_WORST(ws, what);
                snprintf(what, sizeof what, "%s: 5 logprob = -inf at x_t", name);
                CHECK_WORST(wx, what);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 6. The denoiser link (lib/math/denoiser_math.h) through the CPU backend's ops  */
/* ------------------------------------------------------------------------ */

/* The link by its definition: p_k proportional to exp(z_k) q_t(i | k) over
 * the data tokens k (the prior exp(z) updated by the position's own x_t),
 * and R_j = sum_k p_k Rhat_j(i | x0 = k), each Rhat from the generator.
 * R[i] is 0; returns lambda = sum_j R_j. */
static double ref_denoiser_rates(const ref_proc *p, double t, int i, const double *z,
                                 double *R)
{
    static double gen[MAX_S * MAX_S];
    double pi[MAX_S], q[MAX_S], Rhat[MAX_S], pk[MAX_S];
    int S = p->S, n_data = ref_n_data(p);
    ref_prior(p, pi);
    ref_generator(p, ref_sigma(p, t), pi, gen);
    double m = -INFINITY, sum = 0.0;
    for (int k = 0; k < n_data; k++)
        m = fmax(m, z[k]);
    for (int k = 0; k < n_data; k++) {
        ref_q(p, ref_alpha(p, t), k, pi, q);
        sum += (pk[k] = exp(z[k] - m) * q[i]);
    }
    for (int j = 0; j < S; j++)
        R[j] = 0.0;
    for (int k = 0; k < n_data; k++) {
        ref_q(p, ref_alpha(p, t), k, pi, q);
        ref_reverse(p, gen, q, i, Rhat);
        for (int j = 0; j < S; j++)
            R[j] += pk[k] / sum * Rhat[j];
    }
    double lam = 0.0;
    for (int j = 0; j < S; j++)
        lam += R[j];
    return lam;
}

/* sum_{j != i, R_j > 0} g_j log(R_j / sigma) + g_h log(lambda / sigma): the
 * scalar whose gradient in z the backward operation returns. */
static double ref_denoiser_objective(const ref_proc *p, double t, int i, const double *z,
                                     const float *g, float g_h)
{
    double R[MAX_S], sigma = ref_sigma(p, t);
    double lam = ref_denoiser_rates(p, t, i, z, R), f = (double)g_h * log(lam / sigma);
    for (int j = 0; j < p->S; j++)
        if (j != i && R[j] > 0.0)
            f += (double)g[j] * log(R[j] / sigma);
    return f;
}

typedef struct dn_rows {
    int32_t N, V;
    float *z, *g, *g_h, *t;   /* inputs: logits, upstream gradients */
    int32_t *x;
    float *l, *h, *dz;        /* the operations' outputs */
} dn_rows;

#define DN_MODES 4
/* Every (t, i, mode) as a row. Modes: logits spread out, sure that i is
 * clean, sure that it is noise, sure of another token. The upstream
 * gradients at the current token and in the padding are SENTINEL: the
 * backward operation must ignore them. */
static void dn_make_rows(const ref_proc *p, test_rng *rng, dn_rows *b)
{
    static const double times[] = {1e-4, 1e-3, 0.01, 0.1, 0.5, 0.9, 0.999};
    const int n_t = (int)(sizeof times / sizeof times[0]);
    int S = p->S, n_data = ref_n_data(p);
    b->V = S + 3;
    b->N = n_t * S * DN_MODES;
    size_t NV = (size_t)b->N * (size_t)b->V;
    b->z = malloc(sizeof(float) * NV);
    b->g = malloc(sizeof(float) * NV);
    b->l = malloc(sizeof(float) * NV);
    b->dz = malloc(sizeof(float) * NV);
    b->g_h = malloc(sizeof(float) * (size_t)b->N);
    b->t = malloc(sizeof(float) * (size_t)b->N);
    b->h = malloc(sizeof(float) * (size_t)b->N);
    b->x = malloc(sizeof(int32_t) * (size_t)b->N);
    for (int32_t r = 0; r < b->N; r++) {
        int mode = r % DN_MODES, i = (r / DN_MODES) % S;
        float *z = b->z + (size_t)r * b->V, *g = b->g + (size_t)r * b->V;
        b->t[r] = (float)times[r / (DN_MODES * S)];
        b->x[r] = i;
        for (int j = 0; j < b->V; j++) {
            z[j] = j < S ? test_uniform(rng, -3.0f, 3.0f) : SENTINEL;
            g[j] = j < S && j != i ? test_uniform(rng, -1.0f, 1.0f) : SENTINEL;
        }
        if (mode == 1 && i < n_data)
            z[i] = 25.0f;
        if (mode == 2 && i < n_data)
            z[i] = -25.0f;
        if (mode == 3)
            z[(i + 1) % n_data] = 25.0f;
        b->g_h[r] = test_uniform(rng, -1.0f, 1.0f);
    }
}

static void dn_free_rows(dn_rows *b)
{
    free(b->z);
    free(b->g);
    free(b->l);
    free(b->dz);
    free(b->g_h);
    free(b->t);
    free(b->h);
    free(b->x);
}

/* Forward, then backward from the upstream gradients, on the backend. */
static void dn_run(nctmc_backend *be, nctmc_fp fp, dn_rows *b)
{
    size_t NV = (size_t)b->N * (size_t)b->V, N = (size_t)b->N;
    nctmc_denoiser_args a = {
        .n_rows = b->N, .seq_len = 1, .row_stride = b->V, .fp = fp,
        .x0_logits = dev_upload(be, b->z, sizeof(float) * NV),
        .x_t = dev_upload(be, b->x, sizeof(int32_t) * N),
        .times = dev_upload(be, b->t, sizeof(float) * N),
        .logits = dev_upload(be, NULL, sizeof(float) * NV),
        .rate_h = dev_upload(be, NULL, sizeof(float) * N),
    };
    be->ops->denoiser_forward(be, &a);
    be->ops->download(be, b->l, a.logits, sizeof(float) * NV);
    be->ops->download(be, b->h, a.rate_h, sizeof(float) * N);
    be->ops->upload(be, a.logits, b->g, sizeof(float) * NV);
    be->ops->upload(be, a.rate_h, b->g_h, sizeof(float) * N);
    be->ops->denoiser_backward(be, &a);
    be->ops->download(be, b->dz, a.logits, sizeof(float) * NV);
    CHECK(be->ops->synchronize(be) == NCTMC_OK, "denoiser ops: %s", be->error);
    be->ops->free(be, (void *)a.x0_logits);
    be->ops->free(be, (void *)a.x_t);
    be->ops->free(be, (void *)a.times);
    be->ops->free(be, a.logits);
    be->ops->free(be, a.rate_h);
}

typedef struct dn_worsts {
    worst logit, rate, fixed, grad, dir;
} dn_worsts;

/* The forward outputs of row r against the definition. */
static void dn_check_forward(const ref_proc *p, const dn_rows *b, int32_t r, const char *name,
                             dn_worsts *w)
{
    int S = p->S, i = b->x[r];
    double t = (double)b->t[r], sigma = ref_sigma(p, t), zd[MAX_S], R[MAX_S];
    const float *z = b->z + (size_t)r * b->V, *l = b->l + (size_t)r * b->V;
    for (int j = 0; j < S; j++)
        zd[j] = (double)z[j];
    double want_h = log(ref_denoiser_rates(p, t, i, zd, R) / sigma);
    /* no rate at all (a lone data token, the mask unreachable): h = -inf */
    double err_h = want_h == -INFINITY && (double)b->h[r] == -INFINITY
                       ? 0.0
                       : fabs((double)b->h[r] - want_h);
    worst_add(&w->rate, err_h, 4 * F32_EPS * fabs(want_h) + 1e-6,
              "%s t=%g i=%d row %d: h %.9g want %.9g", name, t, i, r, (double)b->h[r], want_h);
    for (int j = 0; j < b->V; j++) {
        if (j >= S || j == i || R[j] == 0.0) {
            /* 0 at i and in the padding; the floor for a rate of 0 */
            double want = j >= S || j == i ? 0.0 : -1e30;
            worst_add(&w->fixed, fabs((double)l[j] - want), 1e-300 + 1e-6 * fabs(want),
                      "%s row %d j=%d: %g, want %g", name, r, j, (double)l[j], want);
            continue;
        }
        double want = log(R[j] / sigma);
        worst_add(&w->logit, fabs((double)l[j] - want), 4 * F32_EPS * fabs(want) + 1e-6,
                  "%s t=%g i=%d j=%d row %d: %.9g want %.9g", name, t, i, j, r, (double)l[j],
                  want);
    }
}

/* The backward output of row r against central differences of the
 * definition: per element where S is small, along a random direction
 * always; 0 outside the data tokens. The operation works per column in
 * float, from exponents z_j - log(...) rounded to float (an error of about
 * |exponent| roundings), and dz_k = u_k - p_k sum u may cancel terms as
 * large as the upstream gradients: the tolerance has a floor of that many
 * float roundings of those. */
static void dn_check_backward(const ref_proc *p, const dn_rows *b, int32_t r, test_rng *rng,
                              const char *name, dn_worsts *w)
{
    int S = p->S, i = b->x[r], n_data = ref_n_data(p);
    double t = (double)b->t[r], zd[MAX_S], v[MAX_S], scale = 0.0, gv = 0.0;
    const float *z = b->z + (size_t)r * b->V, *g = b->g + (size_t)r * b->V;
    const float *dz = b->dz + (size_t)r * b->V;
    const double eps = 1e-5;
    double fd[MAX_S], g_max = fabs((double)b->g_h[r]);
    for (int j = 0; j < S; j++) {
        zd[j] = (double)z[j];
        if (j != i)
            g_max = fmax(g_max, fabs((double)g[j]));
    }
    double a = ref_alpha(p, t), mag = 1.0 + fabs(log(a / ref_one_minus_alpha(p, t)));
    double z_max = 0.0;
    for (int j = 0; j < S; j++)
        z_max = fmax(z_max, fabs(zd[j]));
    double floor = 4 * F32_EPS * g_max * (mag + 2.0 * z_max);
    /* per element only for small S: the definition costs S^2 a call */
    bool per_element = S <= 8;
    for (int k = 0; k < n_data && !per_element; k++)
        scale = fmax(scale, fabs((double)dz[k]));
    for (int k = 0; k < n_data && per_element; k++) {
        double z0 = zd[k];
        zd[k] = z0 + eps;
        double up = ref_denoiser_objective(p, t, i, zd, g, b->g_h[r]);
        zd[k] = z0 - eps;
        double down = ref_denoiser_objective(p, t, i, zd, g, b->g_h[r]);
        zd[k] = z0;
        fd[k] = (up - down) / (2.0 * eps);
        scale = fmax(scale, fabs(fd[k]));
    }
    for (int k = 0; k < n_data; k++) {
        if (per_element)
            worst_add(&w->grad, fabs((double)dz[k] - fd[k]), 1e-5 * scale + floor,
                      "%s t=%g i=%d k=%d row %d: %.9g want %.9g", name, t, i, k, r,
                      (double)dz[k], fd[k]);
        v[k] = (double)test_uniform(rng, -1.0f, 1.0f);
        gv += v[k] * (double)dz[k];
    }
    for (int j = n_data; j < b->V; j++)
        worst_add(&w->fixed, fabs((double)dz[j]), 1e-300, "%s row %d: dz[%d] = %g, want 0",
                  name, r, j, (double)dz[j]);
    double side[2];
    for (int s = 0; s < 2; s++) {
        double e = s == 0 ? eps : -eps, moved[MAX_S];
        for (int j = 0; j < S; j++)
            moved[j] = zd[j] + (j < n_data ? e * v[j] : 0.0);
        side[s] = ref_denoiser_objective(p, t, i, moved, g, b->g_h[r]);
    }
    double dir = (side[0] - side[1]) / (2.0 * eps);
    worst_add(&w->dir, fabs(gv - dir), (1e-5 * scale + floor) * n_data,
              "%s t=%g i=%d row %d: g.v %.9g want %.9g", name, t, i, r, gv, dir);
}

/* cpu_logf, which the CPU backend's denoiser forward uses, against libm in
 * double: over the normal floats (log-uniform), near 1 (where log x is
 * small and must keep its relative precision) and at powers of two. */
static void test_cpu_logf(void)
{
    test_rng rng = test_rng_seed(29);
    worst w;
    worst_init(&w);
    for (int k = 0; k < 300000; k++) {
        float x;
        if (k % 3 == 0)
            x = (float)exp((double)test_uniform(&rng, -87.0f, 88.0f));
        else if (k % 3 == 1)
            x = 1.0f + test_uniform(&rng, -0.3f, 0.3f) * (float)pow(10.0, -(k % 7));
        else
            x = ldexpf(1.0f, test_randint(&rng, 250) - 125) * (k % 2 ? 1.0f : 1.41421356f);
        double want = log((double)x), got = (double)cpu_logf(x);
        worst_add(&w, fabs(got - want), 4 * F32_EPS * fabs(want) + 1e-45, "x=%.9g: %.9g want %.9g",
                  (double)x, got, want);
    }
    CHECK_WORST(w, "cpu_logf against log");
}

static void test_denoiser_link(nctmc_backend *be)
{
    test_rng rng = test_rng_seed(17);
    for (int v = 0; v < N_VOCABS; v++) {
        for (int pc = 0; pc < N_PROCS; pc++) {
            if (proc_kind[pc] == NCTMC_FP_MASKED)
                continue; /* the masked process's rate is exact: no link */
            for (int s = 0; s < N_SCHEDS; s++) {
                if (sanitized_skip(test_vocabs[v], s))
                    continue;
                nctmc_fp fp = make_fp(proc_kind[pc], s, test_vocabs[v], proc_pu[pc]);
                ref_proc p = ref_of(&fp);
                char name[96];
                fp_name(&fp, name, sizeof name);
                dn_rows b;
                dn_make_rows(&p, &rng, &b);
                dn_run(be, fp, &b);
                dn_worsts w;
                worst_init(&w.logit);
                worst_init(&w.rate);
                worst_init(&w.fixed);
                worst_init(&w.grad);
                worst_init(&w.dir);
                double pi[MAX_S], R[MAX_S], zd[MAX_S] = {0};
                ref_prior(&p, pi);
                for (int32_t r = 0; r < b.N; r++) {
                    int i = b.x[r];
                    if (i >= ref_n_data(&p) && pi[i] == 0.0)
                        continue; /* the mask of p_u = 1 is never a state */
                    dn_check_forward(&p, &b, r, name, &w);
                    /* the derivative of log 0 has no meaning: a row without
                     * rates must only keep its gradients finite (0) */
                    if (ref_denoiser_rates(&p, (double)b.t[r], i, zd, R) > 0.0)
                        dn_check_backward(&p, &b, r, &rng, name, &w);
                    else
                        for (int j = 0; j < b.V; j++)
                            worst_add(&w.fixed, fabs((double)b.dz[(size_t)r * b.V + j]), 1e-300,
                                      "%s row %d: dz[%d] = %g without rates", name, r, j,
                                      (double)b.dz[(size_t)r * b.V + j]);
                }
                char what[160];
                snprintf(what, sizeof what, "%s: denoiser jump logits = log(R_j / sigma)", name);
                CHECK_WORST(w.logit, what);
                snprintf(what, sizeof what, "%s: denoiser h = log(lambda / sigma)", name);
                CHECK_WORST(w.rate, what);
                snprintf(what, sizeof what, "%s: denoiser fixed entries", name);
                CHECK_WORST(w.fixed, what);
                snprintf(what, sizeof what, "%s: denoiser dz against differences", name);
                CHECK_WORST(w.grad, what);
                snprintf(what, sizeof what, "%s: denoiser dz along a direction", name);
                CHECK_WORST(w.dir, what);
                dn_free_rows(&b);
            }
        }
    }
}

static double cpu_seconds(clock_t since)
{
    return (double)(clock() - since) / CLOCKS_PER_SEC;
}

/* Runs part(), printing its CPU time (what a sanitizer build multiplies). */
#define TIMED(part)                                                      \
    do {                                                                 \
        clock_t t0_ = clock();                                           \
        part;                                                            \
        printf("%s: %.1f s of CPU\n", #part, cpu_seconds(t0_));          \
    } while (0)

int main(void)
{
    verbose = getenv("LOSS_MATH_VERBOSE") != NULL;
    TIMED(test_schedules());
    TIMED(test_priors());
    TIMED(test_kolmogorov());
    TIMED(test_conditional_rate());
    TIMED(test_lcond_header());
    TIMED(test_gradient_formulas());

    char err[256] = "";
    nctmc_backend *be = cpu_backend_create(2, err, sizeof err);
    nctmc_backend *be1 = cpu_backend_create(1, err, sizeof err);
    CHECK(be && be1, "CPU backend: %s", err);
    if (be && be1) {
        TIMED(test_lcond_backend(be));
        TIMED(test_lcond_invariances(be, be1));
        TIMED(test_jump_output(be));
        TIMED(test_cpu_logf());
        TIMED(test_denoiser_link(be));
    }
    if (be)
        be->ops->destroy(be);
    if (be1)
        be1->ops->destroy(be1);
    return test_finish("loss_math");
}
