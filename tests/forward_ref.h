/*
 * forward_ref.h — the forward process written again from its definitions
 * (docs/math.md), in long double, as the tests' reference: the schedule
 * a_t and sigma_t, the prior pi, the marginal q_{t|0}, D_t(i) by summation
 * and the true conditional exit rate. test_eval.c uses it against
 * nctmc_eval() and the exact bound, test_eval_math.c against the library's
 * closed forms (lib/math/nelbo_math.h). Public only: nctmc.h and system
 * headers (the process and schedule are nctmc_process / nctmc_schedule
 * values).
 */
#ifndef NCTMC_TEST_FORWARD_REF_H
#define NCTMC_TEST_FORWARD_REF_H

#include <math.h>

#include "nctmc.h"

#define REF_PI 3.141592653589793238462643383279502884L

typedef struct ref_proc {
    int process, schedule, S;
    long double pu, eps;
} ref_proc;

static inline ref_proc ref_make(int process, int schedule, int S, float pu, float eps)
{
    ref_proc p = {process, schedule, S, pu, eps};
    return p;
}

static inline long double ref_alpha(const ref_proc *p, long double t)
{
    switch (p->schedule) {
    case NCTMC_SCHEDULE_COSINE: return cosl(REF_PI * t / 2);
    case NCTMC_SCHEDULE_LOGLINEAR: return 1 - (1 - p->eps) * t;
    default: return 1 - t;
    }
}

/* d alpha / dt */
static inline long double ref_dalpha(const ref_proc *p, long double t)
{
    switch (p->schedule) {
    case NCTMC_SCHEDULE_COSINE: return -(REF_PI / 2) * sinl(REF_PI * t / 2);
    case NCTMC_SCHEDULE_LOGLINEAR: return -(1 - p->eps);
    default: return -1;
    }
}

static inline long double ref_sigma(const ref_proc *p, long double t)
{
    return -ref_dalpha(p, t) / ref_alpha(p, t);
}

static inline long double ref_pi(const ref_proc *p, int i)
{
    int mask = p->S - 1;
    switch (p->process) {
    case NCTMC_PROCESS_MASKED: return i == mask ? 1 : 0;
    case NCTMC_PROCESS_MIXTURE: return i == mask ? 1 - p->pu : p->pu / (p->S - 1);
    default: return 1.0L / p->S;
    }
}

static inline int ref_n_data(const ref_proc *p)
{
    return p->process == NCTMC_PROCESS_UNIFORM ? p->S : p->S - 1;
}

static inline long double ref_q(const ref_proc *p, long double a, int i, int x0)
{
    return (i == x0 ? a : 0) + (1 - a) * ref_pi(p, i);
}

/* D_t(i) = sum_{j != i} Rhat_j log(q_i / q_j), Rhat_j = R_t(j, i) q_j / q_i,
 * R_t(j, i) = sigma pi_i; also returns the sum of |terms| (its scale). */
static inline long double ref_d(const ref_proc *p, long double t, int i, int x0,
                                long double *scale)
{
    long double a = ref_alpha(p, t), sigma = ref_sigma(p, t);
    long double qi = ref_q(p, a, i, x0), sum = 0, abs_sum = 0;
    if (qi > 0 && ref_pi(p, i) > 0)
        for (int j = 0; j < p->S; j++) {
            long double qj = ref_q(p, a, j, x0);
            if (j == i || qj <= 0)
                continue;
            long double term = sigma * ref_pi(p, i) * qj / qi * logl(qi / qj);
            sum += term;
            abs_sum += fabsl(term);
        }
    *scale = abs_sum;
    return sum;
}

/* True conditional exit rate from the definitions: state i, clean x0. */
static inline double ref_lam_hat(const ref_proc *rp, double t, int i, int x0)
{
    long double a = ref_alpha(rp, t), sigma = ref_sigma(rp, t), qi = ref_q(rp, a, i, x0);
    long double sum = 0;
    if (qi > 0)
        for (int j = 0; j < rp->S; j++)
            if (j != i)
                sum += sigma * ref_pi(rp, i) * ref_q(rp, a, j, x0) / qi;
    return (double)sum;
}

static inline const char *ref_proc_name(int process)
{
    return process == NCTMC_PROCESS_MASKED ? "masked"
           : process == NCTMC_PROCESS_MIXTURE ? "mixture" : "uniform";
}

#endif /* NCTMC_TEST_FORWARD_REF_H */
