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
 * Per-row scalars are in double; the per-column work is in float (see
 * dn_cols below), with the gradient's terms taken as ratios no larger than
 * the upstream gradients, never e^{-l_j} alone (which can be huge).
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

/* The per-column work is in float (a row of 50k columns costs one exp
 * and, forward, one log per column) on coefficients the row computes in
 * double: for a data token j != i,
 *   R_j / sigma = a_c p_j + b_j,   a_c = a / (1 - a),  b_j = pi_j w,
 *   a_c p_j = exp(z_j - lap_off)
 * (b_j alone at the mask, which is never x0). Both terms are >= 0, so the
 * sum loses nothing. The exponent is taken in double and rounded once, and
 * it is that of a_c p_j itself, so its rounding costs that term no more
 * relative precision than its own logarithm has. */
typedef struct dn_cols {
    double lap_off;            /* log(a_c p_j) = z_j - lap_off (data j != i) */
    float a_c;                 /* a / (1 - a) */
    float b_data, b_mask;      /* pi w at a data token, at the mask */
    float pi_data, pi_mask;
    double inv_lam;            /* sigma / lambda (0 when lambda = 0) */
} dn_cols;

static inline NCTMC_HD dn_cols dn_columns(const dn_row *r)
{
    dn_cols c;
    c.lap_off = r->max + r->log_norm - (r->log_a - r->log_om);
    c.a_c = (float)exp(r->log_a - r->log_om);
    double w = exp(r->log_w);
    c.pi_data = (float)exp(r->log_pi_data);
    c.pi_mask = (float)exp(r->log_pi_mask);
    c.b_data = (float)(exp(r->log_pi_data) * w);
    c.b_mask = (float)(exp(r->log_pi_mask) * w);
    c.inv_lam = r->h == -INFINITY ? 0.0 : exp(-r->h);
    return c;
}

/* The exponent of a_c p_j for a data token j != i. */
static inline NCTMC_HD float dn_ap_exponent(const dn_cols *c, float z_j)
{
    return (float)((double)z_j - c->lap_off);
}

/* p_j from a_c p_j (0 at t = 1, where a_c = 0 and no rate depends on p). */
static inline NCTMC_HD float dn_p_of(const dn_cols *c, float ap)
{
    return c->a_c > 0.0f ? ap / c->a_c : 0.0f;
}

/* R_j / sigma at a data token j != i from a_c p_j. */
static inline NCTMC_HD float dn_rate_data(const dn_cols *c, float ap)
{
    return ap + c->b_data;
}

/* l_j = log(R_j / sigma) as stored: a rate of 0 (the mask of a mixture with
 * p_u = 1, unreachable) becomes a finite floor, so that the loss's
 * prior-weighted sums never meet 0 * -inf. */
#define DN_LOGIT_FLOOR (-1e30f)
static inline NCTMC_HD float dn_logit_of_log_rate(float rate, float log_rate)
{
    return rate > 0.0f ? log_rate : DN_LOGIT_FLOOR;
}

/* The two sums the backward pass needs, accumulated over j != i, j < S:
 * sum_u = sum over data k != i of u_k, and sum_pi_G = sum_j pi_j G_j, with
 * G_j = g_j / (R_j/sigma) + g_h sigma/lambda (gh_inv = the last term). The
 * terms of a data column j != i with ap = a_c p_j, g = dL/dl_j: */
typedef struct dn_terms {
    float u;       /* u_j = a_c p G_j, as (a_c p / rate) g + a_c p gh_inv */
    float pi_G;    /* pi_j G_j */
} dn_terms;

static inline NCTMC_HD dn_terms dn_data_terms(const dn_cols *c, float ap, float g, float gh_inv)
{
    dn_terms t;
    float rate = dn_rate_data(c, ap);
    t.u = ap / rate * g + ap * gh_inv;
    t.pi_G = c->pi_data * (g / rate + gh_inv);
    return t;
}

/* pi_m G_m at the mask (0 where it is unreachable). */
static inline NCTMC_HD float dn_mask_pi_G(const dn_cols *c, float g, float gh_inv)
{
    return c->b_mask > 0.0f ? c->pi_mask * (g / c->b_mask + gh_inv) : 0.0f;
}

/* u_i from sum_j pi_j G_j (0 when i is not a data token). */
static inline NCTMC_HD double dn_u_current(const dn_row *r, double sum_pi_G)
{
    return r->log_p_i == -INFINITY ? 0.0 : -exp(r->log_p_i + r->log_rho) * sum_pi_G;
}

/* dz_i = u_i - p_i sum_m u_m, as (1 - p_i) u_i - p_i sum_others (the sum
 * of u over the data tokens other than i): where p_i is near 1, u_i - p_i
 * u_i would cancel away the digits of a large u_i. For k != i,
 * dz_k = u_k - p_k (sum_others + u_i). */
static inline NCTMC_HD double dn_dz_current(const dn_row *r, double u_i, double sum_others)
{
    return exp(r->log_not_p_i) * u_i - exp(r->log_p_i) * sum_others;
}

#endif /* NCTMC_DENOISER_MATH_H */
