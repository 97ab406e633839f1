/*
 * lcond_math.h — the per-position L_cond loss, written once for every
 * backend (static inline, host+device).
 *
 * For current state i, clean x0, time t, jump logits z (softmax over j != i)
 * and log-rate log lambda_theta, the loss is the Poisson-KL sum
 *   l = sum_{j != i} f(Rhat_j, lambda_theta r_j),  f(a, b) = a log(a/b) - a + b,
 * evaluated in the equivalent stable form
 *   l = lam_hat * ( phi(rho) + KL(rhat || r) ),
 *   phi(rho) = expm1(rho) - rho,  rho = log lambda_theta - log lam_hat,
 *   KL = sum rhat log rhat - sum rhat_j log r_j,
 * where the cross term needs only three statistics of the row (from one
 * log-sum-exp pass):  LSE = log sum_{j != i} exp z_j,
 * wz = sum_{j != i} pi_j z_j  and z_{x0}:
 *   sum_j rhat_j log r_j = w_prior (wz - (1 - pi_i) LSE) + w_x0 (z_{x0} - LSE).
 * Gradients (h the exit-rate head, log lambda = h + log sigma):
 *   dl/dh = lambda_theta - lam_hat,   dl/dz_j = lam_hat r_j - Rhat_j (j != i),
 *   dl/dz_i = 0.
 * When lam_hat = 0 the loss is lambda_theta itself (f(0, b) = b).
 */
#ifndef NCTMC_LCOND_MATH_H
#define NCTMC_LCOND_MATH_H

#include "forward_process.h"

/* What a backend's row pass has to hand over. Entries j >= S and j = i are
 * excluded from all three. */
typedef struct lcond_row_stats {
    float max_logit;  /* max_{j != i} z_j */
    float sum_exp;    /* sum_{j != i} exp(z_j - max_logit) */
    float prior_dot;  /* sum_{j != i} pi_j z_j */
} lcond_row_stats;

/* Everything about one position that does not depend on the logits. */
typedef struct lcond_position {
    fp_reverse_rate rate;
    double log_rate;  /* log lambda_theta (-inf for an exact rate of 0) */
    double pi_i;
    int32_t i;
    int32_t x0;
} lcond_position;

static inline NCTMC_HD lcond_position lcond_prepare(const nctmc_fp *fp, double t, int32_t i,
                                                    int32_t x0, float h)
{
    lcond_position p;
    p.rate = fp_conditional_rate(fp, t, i, x0);
    p.log_rate = fp_model_log_rate(fp, t, i, h);
    p.pi_i = fp_prior(fp, i);
    p.i = i;
    p.x0 = x0;
    return p;
}

static inline NCTMC_HD double lcond_lse(lcond_row_stats s)
{
    return (double)s.max_logit + log((double)s.sum_exp);
}

/* The loss l at this position given the row's statistics and z_{x0}. */
static inline NCTMC_HD double lcond_value(const lcond_position *p, lcond_row_stats s,
                                          float z_x0)
{
    double lam_hat = p->rate.lam_hat;
    double lam = exp(p->log_rate);
    if (!(lam_hat > 0.0))
        return lam;
    double rho = p->log_rate - log(lam_hat);
    double phi = expm1(rho) - rho;
    double lse = lcond_lse(s);
    double cross = p->rate.w_prior * ((double)s.prior_dot - (1.0 - p->pi_i) * lse);
    if (p->rate.w_x0 > 0.0)
        cross += p->rate.w_x0 * ((double)z_x0 - lse);
    double kl = p->rate.neg_entropy - cross;
    /* KL >= 0 exactly; rounding can leave a few ulps below. */
    if (kl < 0.0)
        kl = 0.0;
    return lam_hat * (phi + kl);
}

/* d l / d h for the learned link (0 for the masked process, whose rate is
 * not learned). */
static inline NCTMC_HD double lcond_grad_h(const nctmc_fp *fp, const lcond_position *p)
{
    if (fp->process == NCTMC_FP_MASKED)
        return 0.0;
    return exp(p->log_rate) - p->rate.lam_hat;
}

/* d l / d z_j for j < S, given z_j, the row's LSE and pi_j. */
static inline NCTMC_HD float lcond_grad_logit(const lcond_position *p, int32_t j, float z_j,
                                              double lse, double pi_j)
{
    if (j == p->i || !(p->rate.lam_hat > 0.0))
        return 0.0f;
    double r = exp((double)z_j - lse);
    double rhat = p->rate.w_prior * pi_j + (j == p->x0 ? p->rate.w_x0 : 0.0);
    return (float)(p->rate.lam_hat * (r - rhat));
}

#endif /* NCTMC_LCOND_MATH_H */
