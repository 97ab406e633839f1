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
 * log-sum-exp pass) and z_{x0}: the max m, LSE = log sum_{j != i} exp z_j,
 * and wz = sum_{j != i} pi_j (z_j - m):
 *   sum_j rhat_j log r_j = w_prior (wz - (1 - pi_i)(LSE - m))
 *                          + w_x0 (z_{x0} - LSE)
 * (using sum_{j != i} pi_j = 1 - pi_i).
 * Gradients (h the exit-rate head): dl/dlambda = 1 - lam_hat / lambda, so
 *   dl/dh = (1 - lam_hat / lambda) dlambda/dh, which is lambda - lam_hat
 *   for the sigma link (log lambda = h + log sigma) and
 *   (1 - lam_hat / lambda)(lam_n - lam_c) nu (1 - nu) for the
 *   noise-posterior link (forward_process.h);
 *   dl/dz_j = lam_hat r_j - Rhat_j (j != i),  dl/dz_i = 0.
 * When lam_hat = 0 the loss is lambda_theta itself (f(0, b) = b).
 */
#ifndef NCTMC_LCOND_MATH_H
#define NCTMC_LCOND_MATH_H

#include "forward_process.h"

/* What a backend's row pass has to hand over. Entries j >= S and j = i are
 * excluded from all three. prior_dot is taken relative to the row's max so
 * that a common offset of the logits (which the loss does not depend on)
 * costs no precision; a backend may accumulate sum pi_j (z_j - ref) against
 * any fixed ref and shift it at the end. */
typedef struct lcond_row_stats {
    float max_logit;   /* m = max_{j != i} z_j */
    float sum_exp;     /* sum_{j != i} exp(z_j - m) */
    double prior_dot;  /* sum_{j != i} pi_j (z_j - m) */
} lcond_row_stats;

/* Everything about one position that does not depend on the logits. */
typedef struct lcond_position {
    fp_reverse_rate rate;
    double log_rate;  /* log lambda_theta (-inf for an exact rate of 0) */
    double dlam_dh;   /* d lambda_theta / d h (0 where the rate is exact) */
    double pi_i;
    int32_t i;
    int32_t x0;
} lcond_position;

static inline NCTMC_HD lcond_position lcond_prepare(const nctmc_fp *fp, double t, int32_t i,
                                                    int32_t x0, float h)
{
    lcond_position p;
    p.rate = fp_conditional_rate(fp, t, i, x0);
    fp_model_rate m = fp_model_rate_at(fp, t, i, h);
    p.log_rate = m.log_rate;
    p.dlam_dh = m.dlam_dh;
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
    /* LSE - m: everything below is relative to the row's max */
    double log_sum = log((double)s.sum_exp);
    double cross = p->rate.w_prior * (s.prior_dot - (1.0 - p->pi_i) * log_sum);
    if (p->rate.w_x0 > 0.0)
        cross += p->rate.w_x0 * (((double)z_x0 - (double)s.max_logit) - log_sum);
    double kl = p->rate.neg_entropy - cross;
    /* KL >= 0 exactly; rounding can leave a few ulps below. */
    if (kl < 0.0)
        kl = 0.0;
    return lam_hat * (phi + kl);
}

/* d l / d h for the learned link (0 where the rate is exact: the masked
 * process, and the mixture's mask token under the noise-posterior link). */
static inline NCTMC_HD double lcond_grad_h(const nctmc_fp *fp, const lcond_position *p)
{
    if (fp->process == NCTMC_FP_MASKED)
        return 0.0;
    if (fp->exit_link != NCTMC_FP_LINK_NOISE_POSTERIOR)
        return exp(p->log_rate) - p->rate.lam_hat;
    if (p->dlam_dh == 0.0)
        return 0.0;
    double ratio = p->rate.lam_hat > 0.0 ? exp(log(p->rate.lam_hat) - p->log_rate) : 0.0;
    return (1.0 - ratio) * p->dlam_dh;
}

/* d l / d z_j for j < S, given z_j, the row's LSE and pi_j (the definition,
 * in double; lcond_grad_coefficients is the same formula arranged for a
 * vectorised float loop). */
static inline NCTMC_HD float lcond_grad_logit(const lcond_position *p, int32_t j, float z_j,
                                              double lse, double pi_j)
{
    if (j == p->i || !(p->rate.lam_hat > 0.0))
        return 0.0f;
    double r = exp((double)z_j - lse);
    double rhat = p->rate.w_prior * pi_j + (j == p->x0 ? p->rate.w_x0 : 0.0);
    return (float)(p->rate.lam_hat * (r - rhat));
}

/* grad_scale * d l / d z_j as
 *   scale * exp(z_j - lse) - (j == mask ? sub_mask : sub_data)
 *                          - (j == x0 ? sub_x0 : 0),   and 0 at j = i,
 * so a backend evaluates one multiply-subtract per logit and patches the
 * (at most three) special entries. */
typedef struct lcond_grad_coef {
    float lse;
    float scale;      /* grad_scale * lam_hat */
    float sub_data;   /* grad_scale * lam_hat * w_prior * pi_data */
    float sub_mask;   /* grad_scale * lam_hat * w_prior * pi_mask */
    float sub_x0;     /* grad_scale * lam_hat * w_x0 */
} lcond_grad_coef;

static inline NCTMC_HD lcond_grad_coef lcond_grad_coefficients(const nctmc_fp *fp,
                                                               const lcond_position *p,
                                                               lcond_row_stats s,
                                                               float grad_scale)
{
    lcond_grad_coef g = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    g.lse = (float)lcond_lse(s);
    if (!(p->rate.lam_hat > 0.0))
        return g;
    double k = (double)grad_scale * p->rate.lam_hat;
    g.scale = (float)k;
    g.sub_data = (float)(k * p->rate.w_prior * fp_prior_data(fp));
    g.sub_mask = (float)(k * p->rate.w_prior * fp_prior_mask(fp));
    g.sub_x0 = (float)(k * p->rate.w_x0);
    return g;
}

#endif /* NCTMC_LCOND_MATH_H */
