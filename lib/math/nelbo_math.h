/*
 * nelbo_math.h — the θ-independent pieces of the NELBO (paper Thm. 3.2 after
 * the conditional swap; docs/math.md "NELBO"), written once for every
 * backend (static inline, host+device), in double.
 *
 * Per position, with x0 the clean token and q = q_{t|0}(. | x0):
 *   D_t(i)  = sum_{j != i} Rhat_j log(q_i / q_j)
 * Because Rhat_j = c q_j for every j != i (c = sigma pi_i / q_i), this is
 *   D_t(i)  = c ((1 - q_i) log q_i - sum_{j != i} q_j log q_j)
 *           = sigma pi_i (log q_i + H(q)) / q_i,
 * O(1) once the entropy H(q) is known; q takes at most three distinct
 * values (x0, the other data tokens, the mask), so H(q) is O(1) too.
 * Its mean over i ~ q is minus the entropy's time derivative,
 *   E_q[D_t] = sigma (sum_i pi_i log q_i + H(q)) = -dH(q_{t|0})/dt,
 * so the integral of D over [0, T] is exactly -H(q_{T|0}) (q_{0|0} = e_{x0}
 * has no entropy): docs/math.md uses this to split the bound into a KL prior
 * and the integral of L_cond.
 */
#ifndef NCTMC_NELBO_MATH_H
#define NCTMC_NELBO_MATH_H

#include "forward_process.h"


/* q_{t|0}(. | x0) for any data token x0 (the prior is the same on every data
 * token, so only "is x0", "other data token" and "mask" matter). */
typedef struct nelbo_marginal {
    double sigma;        /* sigma_t */
    double one_minus_a;  /* 1 - a_t */
    double q_x0, log_q_x0;
    double q_data, log_q_data;  /* each other data token (-inf if pi = 0) */
    double q_mask, log_q_mask;  /* the mask (0, -inf when there is none) */
    double entropy;             /* H(q) in nats */
} nelbo_marginal;

static inline NCTMC_HD double nelbo_log_or_ninf(double x)
{
    return x > 0.0 ? log(x) : -INFINITY;
}

static inline NCTMC_HD nelbo_marginal nelbo_marginal_at(const nctmc_fp *fp, double t)
{
    nelbo_marginal g;
    double om = fp_one_minus_alpha(fp, t);
    double pd = fp_prior_data(fp), pm = fp_prior_mask(fp);
    g.sigma = fp_sigma(fp, t);
    g.one_minus_a = om;
    /* q_x0 = a + om pd = 1 - om (1 - pd): log1p keeps its log exact near 1 */
    g.q_x0 = 1.0 - om * (1.0 - pd);
    g.log_q_x0 = g.q_x0 > 0.0 ? log1p(-om * (1.0 - pd)) : -INFINITY;
    g.q_data = om * pd;
    g.log_q_data = nelbo_log_or_ninf(g.q_data);
    g.q_mask = om * pm;
    g.log_q_mask = nelbo_log_or_ninf(g.q_mask);
    double n_other = (double)(fp_n_data(fp) - 1);
    double h = 0.0;
    if (g.q_x0 > 0.0)
        h -= g.q_x0 * g.log_q_x0;
    if (g.q_data > 0.0)
        h -= n_other * g.q_data * g.log_q_data;
    if (g.q_mask > 0.0)
        h -= g.q_mask * g.log_q_mask;
    g.entropy = h;
    return g;
}

/* q_i and log q_i of state i under the marginal. */
static inline NCTMC_HD double nelbo_q(const nctmc_fp *fp, const nelbo_marginal *g, int32_t i,
                                      int32_t x0, double *log_q)
{
    if (i == x0) {
        *log_q = g->log_q_x0;
        return g->q_x0;
    }
    if (i == fp_mask(fp)) {
        *log_q = g->log_q_mask;
        return g->q_mask;
    }
    *log_q = g->log_q_data;
    return g->q_data;
}

/* D_t(i) = sum_{j != i} Rhat_j log(q_i / q_j) for current state i. States
 * the forward process never enters (pi_i = 0) have no reverse rate: 0. */
static inline NCTMC_HD double nelbo_d(const nctmc_fp *fp, const nelbo_marginal *g, int32_t i,
                                      int32_t x0)
{
    double pi_i = fp_prior(fp, i);
    double log_q;
    double q = nelbo_q(fp, g, i, x0, &log_q);
    if (!(pi_i > 0.0) || !(q > 0.0))
        return 0.0;
    return g->sigma * pi_i * (log_q + g->entropy) / q;
}

/* E_{i ~ q}[D_t(i)] = sigma (sum_i pi_i log q_i + H(q)) = -dH/dt. */
static inline NCTMC_HD double nelbo_expected_d(const nctmc_fp *fp, const nelbo_marginal *g)
{
    double pd = fp_prior_data(fp), pm = fp_prior_mask(fp);
    double cross = 0.0;
    if (pd > 0.0)
        cross += pd * (g->log_q_x0 + (double)(fp_n_data(fp) - 1) * g->log_q_data);
    if (pm > 0.0)
        cross += pm * g->log_q_mask;
    return g->sigma * (cross + g->entropy);
}

/* KL(q_{t|0}(. | x0) || pi): every state but x0 has q_j / pi_j = 1 - a, so
 * KL = q_x0 log(q_x0 / pi_x0) + (1 - q_x0) log(1 - a); +inf when q puts
 * mass on x0 and pi does not (the masked process before t = 1). */
static inline NCTMC_HD double nelbo_prior_kl(const nctmc_fp *fp, const nelbo_marginal *g)
{
    double pd = fp_prior_data(fp);
    double kl = 0.0;
    if (g->q_x0 > 0.0) {
        if (!(pd > 0.0))
            return INFINITY;
        kl += g->q_x0 * (g->log_q_x0 - log(pd));
    }
    double rest = g->one_minus_a * (1.0 - pd);  /* 1 - q_x0 */
    if (rest > 0.0)
        kl += rest * log(g->one_minus_a);
    return kl;
}

/* The cross-entropy -E_q[log pi] = KL(q || pi) + H(q): the prior term of
 * the theorem as the paper states it. */
static inline NCTMC_HD double nelbo_prior_cross_entropy(const nctmc_fp *fp,
                                                        const nelbo_marginal *g)
{
    return nelbo_prior_kl(fp, g) + g->entropy;
}

#endif /* NCTMC_NELBO_MATH_H */
