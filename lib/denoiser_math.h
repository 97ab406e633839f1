/*
 * denoiser_math.h — the denoiser exit-rate link (NCTMC_EXIT_LINK_DENOISER),
 * written once for the CPU and CUDA kernels (NCTMC_HD, per-row scalars in
 * double).
 *
 * The output head's logits z give one estimate p of the clean token x0 at a
 * position: the posterior of a prior exp(z) over the data tokens (columns
 * [0, n_data)) given that position's own x_t = i,
 *   p_k = exp(z_k) q_t(i | k) / sum_m exp(z_m) q_t(i | m),
 * so z is what the context adds, an O(1) target at every t: z = 0 is the
 * context-free posterior, sure that i is clean as t -> 0 (1 - p_i = O(t))
 * without the network having to output log t. q_t(i | k) takes one value
 * for k = i and another for every k != i, so this is z_i shifted by
 * log((a + (1 - a) pi_i) / ((1 - a) pi_i)) (nothing when i is the mask).
 * The model's reverse rates are the exact conditional rates averaged over p:
 *   R(i -> j) = sum_k p_k sigma pi_i q_t(j | k) / q_t(i | k),   j != i,
 * so the exit rate and the jump distribution come from the same estimate
 * and the model's error in one is the other's. With q_t(j | k) =
 * a delta_jk + (1 - a) pi_j the sum has a closed form (docs/math.md,
 * "The denoiser link"):
 *   R_j / sigma = (a p_j + (1 - a) pi_j w) / (1 - a),
 *   w = 1 - p_i rho,  rho = a / (a + (1 - a) pi_i)
 * (p_i = 0 when i is not a data token: the mixture's mask), and the exit
 * rate lambda = sum_{j != i} R_j:
 *   lambda / sigma = (a (1 - p_i) + (1 - a)(1 - pi_i) w) / (1 - a).
 * At p = e_i (surely clean) lambda is lam_c; at p_i = 0 (surely noise) it
 * is lam_n; at the mixture's mask it is the exact mask rate.
 *
 * The forward operation writes these as the outputs of the sigma link:
 * jump logits l_j = log(R_j / sigma) and h = log(lambda / sigma), so the
 * loss, the samplers and the model outputs use them unchanged. The backward
 * operation takes the loss's gradients with respect to l and h and returns
 * the gradient with respect to z:
 *   G_j  = g_j e^{-l_j} + g_h e^{-h}          (sigma dL/dR_j)
 *   u_k  = p_k a / (1 - a) G_k                (k != i, data)
 *   u_i  = -p_i rho sum_{j != i} pi_j G_j     (i a data token)
 *   dz_k = u_k - p_k sum_m u_m.
 * Every product is taken as the exponential of a sum of logs, so no factor
 * overflows where another would bring it back (e^{-l_j} alone can be huge).
 */
#ifndef NCTMC_DENOISER_MATH_H
#define NCTMC_DENOISER_MATH_H

#include "forward_process.h"

/* The per-row scalars, from the row's logit statistics over the data
 * tokens: max, log of the sum of exp(z - max) over data tokens other than
 * i, and z_i (ignored when i is not a data token). */
typedef struct dn_row {
    double log_a, log_om;      /* log a_t, log(1 - a_t) */
    double max, log_norm;      /* log p_k = z_k (+ shift_i at i) - max - log_norm */
    double shift_i;            /* log q_t(i | i) - log q_t(i | k != i) */
    double log_p_i;            /* -inf when i is not a data token */
    double log_not_p_i;        /* log(1 - p_i) */
    double log_rho;            /* log(a / (a + (1 - a) pi_i)) */
    double log_w;              /* log(1 - p_i rho) */
    double h;                  /* log(lambda / sigma) */
    double log_pi_data, log_pi_mask;
    int32_t i, n_data, mask;
} dn_row;

static inline NCTMC_HD dn_row dn_prepare(const nctmc_fp *fp, double t, int32_t i, double max,
                                         double log_sum_others, float z_i)
{
    dn_row r;
    double a = fp_alpha(fp, t), om = fp_one_minus_alpha(fp, t);
    r.log_a = a > 0.0 ? log(a) : -INFINITY;
    r.log_om = log(om);
    r.i = i;
    r.n_data = fp_n_data(fp);
    r.mask = fp_mask(fp);
    double pd = fp_prior_data(fp), pm = fp_prior_mask(fp);
    r.log_pi_data = pd > 0.0 ? log(pd) : -INFINITY;
    r.log_pi_mask = pm > 0.0 ? log(pm) : -INFINITY;
    double pi_i = fp_prior(fp, i);
    r.max = max;
    double log_clean_mass = log(a + om * pi_i);
    double log_one_minus_rho = pi_i > 0.0 ? r.log_om + log(pi_i) - log_clean_mass : -INFINITY;
    r.shift_i = -log_one_minus_rho;
    double zi = i >= 0 && i < r.n_data ? (double)z_i + r.shift_i - max : -INFINITY;
    r.log_norm = fp_logaddexp(log_sum_others, zi);
    r.log_p_i = zi - r.log_norm;
    r.log_not_p_i = log_sum_others - r.log_norm;
    r.log_rho = r.log_a - log_clean_mass;
    /* 1 - p_i rho = (1 - p_i) + p_i (1 - a) pi_i / (a + (1 - a) pi_i):
     * both terms >= 0, so no cancellation when p_i is near 1 */
    r.log_w = fp_logaddexp(r.log_not_p_i, r.log_p_i + log_one_minus_rho);
    double log_rest_prior = log1p(-pi_i);  /* -inf when pi_i = 1 */
    r.h = fp_logaddexp(r.log_a + r.log_not_p_i, r.log_om + log_rest_prior + r.log_w) - r.log_om;
    return r;
}

static inline NCTMC_HD double dn_log_p(const dn_row *r, int32_t j, float z_j)
{
    if (j == r->i)
        return r->log_p_i;
    return j < r->n_data ? (double)z_j - r->max - r->log_norm : -INFINITY;
}

static inline NCTMC_HD double dn_log_pi(const dn_row *r, int32_t j)
{
    return j == r->mask ? r->log_pi_mask : r->log_pi_data;
}

/* l_j = log(R_j / sigma) for j != i, j < S (-inf for an unreachable
 * state: the mask of a mixture with p_u = 1). */
static inline NCTMC_HD double dn_logit(const dn_row *r, int32_t j, float z_j)
{
    return fp_logaddexp(r->log_a + dn_log_p(r, j, z_j), r->log_om + dn_log_pi(r, j) + r->log_w) -
           r->log_om;
}

/* The logit as stored: a rate of 0 becomes a finite floor, so that the
 * loss's prior-weighted sums never meet 0 * -inf. */
#define DN_LOGIT_FLOOR (-1e30)
static inline NCTMC_HD float dn_stored_logit(double l)
{
    return l > DN_LOGIT_FLOOR ? (float)l : (float)DN_LOGIT_FLOOR;
}

/* The two sums the backward pass needs, accumulated over j != i, j < S:
 * sum_u = sum over data k != i of u_k, and sum_pi_G = sum_j pi_j G_j. The
 * terms of one column j (g = dL/dl_j, g_h = dL/dh): */
typedef struct dn_terms {
    double u;      /* u_j (0 when j is not a data token) */
    double pi_G;   /* pi_j G_j */
} dn_terms;

static inline NCTMC_HD dn_terms dn_column_terms(const dn_row *r, int32_t j, float z_j, double g,
                                                double g_h)
{
    dn_terms c;
    double l = dn_logit(r, j, z_j), lp = dn_log_p(r, j, z_j);
    double lpi = dn_log_pi(r, j);
    /* p_j a / (1 - a) G_j = g a p_j / ((1 - a) R_j/sigma) + g_h a p_j / ((1 - a) lambda/sigma) */
    double base = r->log_a + lp - r->log_om;
    /* a column with p_j = 0 or pi_j = 0 adds nothing (and -inf - -inf
     * must not make a NaN) */
    c.u = lp == -INFINITY ? 0.0 : g * exp(base - l) + g_h * exp(base - r->h);
    c.pi_G = lpi == -INFINITY ? 0.0 : g * exp(lpi - l) + g_h * exp(lpi - r->h);
    return c;
}

/* u_i from sum_j pi_j G_j (0 when i is not a data token). */
static inline NCTMC_HD double dn_u_current(const dn_row *r, double sum_pi_G)
{
    return r->log_p_i == -INFINITY ? 0.0 : -exp(r->log_p_i + r->log_rho) * sum_pi_G;
}

/* dz_k = u_k - p_k sum_m u_m, given u = u_k, u_i and sum_others = the sum
 * of u over the data tokens other than i. At k = i it is taken as
 * (1 - p_i) u_i - p_i sum_others: where p_i is near 1, u_i - p_i u_i would
 * cancel away the digits of a large u_i. */
static inline NCTMC_HD double dn_dz(const dn_row *r, int32_t k, float z_k, double u, double u_i,
                                    double sum_others)
{
    if (k == r->i)
        return exp(r->log_not_p_i) * u_i - exp(r->log_p_i) * sum_others;
    return u - exp(dn_log_p(r, k, z_k)) * (sum_others + u_i);
}

#endif /* NCTMC_DENOISER_MATH_H */
