/*
 * forward_process.h — the forward (noising) process, written once for every
 * backend: each function is `static inline` and host+device (NCTMC_HD), so
 * the CPU kernels and the CUDA kernels compile the same arithmetic.
 *
 * q_{t|0}(. | x0) = a_t e_{x0} + (1 - a_t) pi,  sigma_t = -a'_t / a_t,
 * forward rate R_t(i, j) = sigma_t pi_j for j != i.
 *
 * Scalars are computed in double: they are per row, so the cost is nil, and
 * near t = 0 or 1 the rates span many orders of magnitude.
 */
#ifndef NCTMC_FORWARD_PROCESS_H
#define NCTMC_FORWARD_PROCESS_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define NCTMC_HD __host__ __device__
#else
#define NCTMC_HD
#endif

#define NCTMC_PI 3.14159265358979323846

/* Plain-old-data description of a forward process, passed by value to
 * kernels. `process` and `schedule` hold nctmc_process / nctmc_schedule
 * values (kept as int32 so CUDA code need not include nctmc.h). */
typedef struct nctmc_fp {
    int32_t process;
    int32_t schedule;
    int32_t vocab;           /* S */
    float mixture_uniform;   /* p_u */
    float schedule_eps;      /* eps of the log-linear schedule */
    int32_t exit_link;       /* nctmc_exit_link: how h becomes lambda_theta */
} nctmc_fp;

enum { NCTMC_FP_UNIFORM = 0, NCTMC_FP_MASKED = 1, NCTMC_FP_MIXTURE = 2 };
enum { NCTMC_FP_LINEAR = 0, NCTMC_FP_COSINE = 1, NCTMC_FP_LOGLINEAR = 2 };
enum { NCTMC_FP_LINK_SIGMA = 0, NCTMC_FP_LINK_NOISE_POSTERIOR = 1 };

/* a_t */
static inline NCTMC_HD double fp_alpha(const nctmc_fp *fp, double t)
{
    switch (fp->schedule) {
    case NCTMC_FP_COSINE: return cos(0.5 * NCTMC_PI * t);
    case NCTMC_FP_LOGLINEAR: return 1.0 - (1.0 - (double)fp->schedule_eps) * t;
    default: return 1.0 - t;
    }
}

/* 1 - a_t without cancellation: near t = 0 the cosine schedule's
 * 1 - cos(pi t / 2) loses every digit (it is 0 below t ~ 1e-8), which
 * would make the masked exit rate sigma a / (1 - a) infinite. */
static inline NCTMC_HD double fp_one_minus_alpha(const nctmc_fp *fp, double t)
{
    switch (fp->schedule) {
    case NCTMC_FP_COSINE: {
        /* a_1 = 0 exactly (the masked prior depends on it), which neither
         * cos(pi/2) nor 2 sin^2(pi/4) gives in floating point */
        if (t >= 1.0)
            return 1.0;
        double s = sin(0.25 * NCTMC_PI * t);
        return 2.0 * s * s;
    }
    case NCTMC_FP_LOGLINEAR: return (1.0 - (double)fp->schedule_eps) * t;
    default: return t;
    }
}

/* sigma_t = -a'_t / a_t (> 0 on (0, 1)) */
static inline NCTMC_HD double fp_sigma(const nctmc_fp *fp, double t)
{
    switch (fp->schedule) {
    case NCTMC_FP_COSINE: return 0.5 * NCTMC_PI * tan(0.5 * NCTMC_PI * t);
    case NCTMC_FP_LOGLINEAR: {
        double k = 1.0 - (double)fp->schedule_eps;
        return k / (1.0 - k * t);
    }
    default: return 1.0 / (1.0 - t);
    }
}

/* The mask token, or -1 for the uniform process (which has none). */
static inline NCTMC_HD int32_t fp_mask(const nctmc_fp *fp)
{
    return fp->process == NCTMC_FP_UNIFORM ? -1 : fp->vocab - 1;
}

/* Number of data tokens: states a clean x0 may take. */
static inline NCTMC_HD int32_t fp_n_data(const nctmc_fp *fp)
{
    return fp->process == NCTMC_FP_UNIFORM ? fp->vocab : fp->vocab - 1;
}

/* pi at a data token, and at the mask token (0 where there is none). */
static inline NCTMC_HD double fp_prior_data(const nctmc_fp *fp)
{
    switch (fp->process) {
    case NCTMC_FP_MASKED: return 0.0;
    case NCTMC_FP_MIXTURE: return (double)fp->mixture_uniform / (double)(fp->vocab - 1);
    default: return 1.0 / (double)fp->vocab;
    }
}

static inline NCTMC_HD double fp_prior_mask(const nctmc_fp *fp)
{
    switch (fp->process) {
    case NCTMC_FP_MASKED: return 1.0;
    case NCTMC_FP_MIXTURE: return 1.0 - (double)fp->mixture_uniform;
    default: return 0.0;
    }
}

/* pi_j */
static inline NCTMC_HD double fp_prior(const nctmc_fp *fp, int32_t j)
{
    return j == fp_mask(fp) ? fp_prior_mask(fp) : fp_prior_data(fp);
}

/* q_{t|0}(i | x0) given a = a_t */
static inline NCTMC_HD double fp_q(const nctmc_fp *fp, double a, int32_t i, int32_t x0)
{
    return (i == x0 ? a : 0.0) + (1.0 - a) * fp_prior(fp, i);
}

/* x log x with 0 log 0 = 0 */
static inline NCTMC_HD double fp_xlogx(double x)
{
    return x > 0.0 ? x * log(x) : 0.0;
}

/*
 * The conditional reverse rate out of state i given x0 (paper Prop. 3.6):
 *   c = sigma pi_i / q(i | x0),
 *   Rhat_j = c ((1 - a) pi_j + a [j = x0])        (j != i),
 *   lam_hat = sum_{j != i} Rhat_j = c ((1 - a)(1 - pi_i) + a [x0 != i]).
 * Stored normalised: rhat_j = w_prior pi_j + w_x0 [j = x0] for j != i.
 */
typedef struct fp_reverse_rate {
    double alpha;
    double sigma;
    double lam_hat;      /* total conditional exit rate */
    double w_prior;      /* c (1 - a) / lam_hat (0 when lam_hat = 0) */
    double w_x0;         /* c a [x0 != i] / lam_hat (0 when lam_hat = 0) */
    double neg_entropy;  /* sum_{j != i} rhat_j log rhat_j */
} fp_reverse_rate;

static inline NCTMC_HD fp_reverse_rate fp_conditional_rate(const nctmc_fp *fp, double t,
                                                           int32_t i, int32_t x0)
{
    fp_reverse_rate r;
    r.alpha = fp_alpha(fp, t);
    r.sigma = fp_sigma(fp, t);
    r.lam_hat = 0.0;
    r.w_prior = 0.0;
    r.w_x0 = 0.0;
    r.neg_entropy = 0.0;
    double a = r.alpha;
    double pi_i = fp_prior(fp, i);
    /* pi_i = 0 means the forward process never moves into i: there is no
     * reverse rate out of it (this also covers states with q(i|x0) = 0). */
    if (pi_i <= 0.0)
        return r;
    double c = r.sigma * pi_i / fp_q(fp, a, i, x0);
    double moved = i != x0 ? 1.0 : 0.0;
    r.lam_hat = c * ((1.0 - a) * (1.0 - pi_i) + a * moved);
    if (!(r.lam_hat > 0.0))
        return r;
    r.w_prior = c * (1.0 - a) / r.lam_hat;
    r.w_x0 = c * a * moved / r.lam_hat;

    /* sum of rhat log rhat over j != i, grouped by distinct values */
    int32_t mask = fp_mask(fp);
    double pd = fp_prior_data(fp);
    int32_t i_is_data = i != mask;
    int32_t n_other = fp_n_data(fp) - i_is_data - (i != x0 ? 1 : 0);
    double h = (double)n_other * fp_xlogx(r.w_prior * pd);
    if (i != x0)
        h += fp_xlogx(r.w_prior * pd + r.w_x0);
    if (mask >= 0 && i != mask)
        h += fp_xlogx(r.w_prior * fp_prior_mask(fp));
    r.neg_entropy = h;
    return r;
}

/* The exact exit rate of the masked process at state i: sigma a / (1 - a)
 * at the mask, 0 elsewhere — returned as a log (-inf for 0). */
static inline NCTMC_HD double fp_masked_log_rate(const nctmc_fp *fp, double t, int32_t i)
{
    if (i != fp_mask(fp))
        return -INFINITY;
    double a = fp_alpha(fp, t);
    return log(fp_sigma(fp, t) * a / fp_one_minus_alpha(fp, t));
}

/* log(1 + exp(x)) without overflow or loss of small values */
static inline NCTMC_HD double fp_softplus(double x)
{
    return x > 0.0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* log(exp(a) + exp(b)); a or b may be -inf */
static inline NCTMC_HD double fp_logaddexp(double a, double b)
{
    double hi = a > b ? a : b, lo = a > b ? b : a;
    if (hi == -INFINITY)
        return -INFINITY;
    return hi + log1p(exp(lo - hi));
}

/* The log signal-to-noise ratio log(a_t / (1 - a_t)), the time input of
 * NCTMC_TIME_INPUT_LOG_SNR, clamped so that t = 0 and t = 1 stay finite. */
#define NCTMC_LOG_SNR_LIMIT 30.0
static inline NCTMC_HD double fp_log_snr(const nctmc_fp *fp, double t)
{
    double a = fp_alpha(fp, t), om = fp_one_minus_alpha(fp, t);
    double v = (a > 0.0 ? log(a) : -INFINITY) - (om > 0.0 ? log(om) : -INFINITY);
    if (!(v < NCTMC_LOG_SNR_LIMIT))
        return NCTMC_LOG_SNR_LIMIT;
    if (!(v > -NCTMC_LOG_SNR_LIMIT))
        return -NCTMC_LOG_SNR_LIMIT;
    return v;
}

/*
 * The two exact conditional exit rates of a data token i with pi_i > 0
 * (fp_conditional_rate with x0 = i and with x0 != i), in log space:
 *   lam_c = sigma pi_i (1 - a)(1 - pi_i) / (a + (1 - a) pi_i)   (i is clean)
 *   lam_n = sigma (1 - (1 - a) pi_i) / (1 - a)                  (i is noise)
 * and the logit of pi_n = P(x0 != i | x_t = i) when x0 is uniform over the
 * n_d data tokens and nothing else is known:
 *   pi_n = (n_d - 1)(1 - a) pi_i / (a + n_d (1 - a) pi_i),
 *   logit pi_n = log((n_d - 1)(1 - a) pi_i) - log(a + (1 - a) pi_i)
 * ((1 - a)(1 - pi_i) for the uniform process, where n_d pi_i = 1).
 */
typedef struct fp_noise_rates {
    double log_lam_c, log_lam_n;
    double logit_pi_n;   /* -inf when no other data token exists */
} fp_noise_rates;

static inline NCTMC_HD fp_noise_rates fp_noise_rates_at(const nctmc_fp *fp, double t,
                                                        int32_t i)
{
    fp_noise_rates r;
    double a = fp_alpha(fp, t), om = fp_one_minus_alpha(fp, t);
    double log_sigma = log(fp_sigma(fp, t));
    double pi_i = fp_prior(fp, i);
    double log_clean_mass = log(a + om * pi_i);
    r.log_lam_c = log_sigma + log(pi_i) + log(om) + log1p(-pi_i) - log_clean_mass;
    r.log_lam_n = log_sigma + log1p(-om * pi_i) - log(om);
    int32_t n_other = fp_n_data(fp) - 1;
    r.logit_pi_n = n_other > 0 ? log((double)n_other * om * pi_i) - log_clean_mass : -INFINITY;
    return r;
}

/* log lambda_theta and d lambda_theta / d h at one position. */
typedef struct fp_model_rate {
    double log_rate;   /* -inf for an exact rate of 0 */
    double dlam_dh;    /* 0 where the rate is not learned */
} fp_model_rate;

/* The exit rate of the mixture process at its mask token: the same for
 * every x0 (x0 is never the mask), so it is known exactly:
 *   sigma (a + (1 - a)(1 - pi_m)) / (1 - a). */
static inline NCTMC_HD double fp_mixture_mask_log_rate(const nctmc_fp *fp, double t)
{
    double a = fp_alpha(fp, t), om = fp_one_minus_alpha(fp, t);
    return log(fp_sigma(fp, t)) + log(a + om * (1.0 - fp_prior_mask(fp))) - log(om);
}

/*
 * NCTMC_EXIT_LINK_NOISE_POSTERIOR:
 *   lambda = (1 - nu) lam_c + nu lam_n,  nu = sigmoid(h + logit pi_n),
 * as logaddexp(log(1 - nu) + log lam_c, log nu + log lam_n) with
 * log nu = -softplus(-g), log(1 - nu) = -softplus(g), g = h + logit pi_n;
 * d lambda / d h = (lam_n - lam_c) nu (1 - nu).
 */
static inline NCTMC_HD fp_model_rate fp_noise_posterior_rate(const nctmc_fp *fp, double t,
                                                             int32_t i, float h)
{
    fp_model_rate m;
    fp_noise_rates r = fp_noise_rates_at(fp, t, i);
    if (r.logit_pi_n == -INFINITY) {
        /* one data token: it is always clean */
        m.log_rate = r.log_lam_c;
        m.dlam_dh = 0.0;
        return m;
    }
    double g = (double)h + r.logit_pi_n;
    double log_nu = -fp_softplus(-g), log_not_nu = -fp_softplus(g);
    m.log_rate = fp_logaddexp(log_not_nu + r.log_lam_c, log_nu + r.log_lam_n);
    double log_spread = log_nu + log_not_nu;
    m.dlam_dh = exp(r.log_lam_n + log_spread) - exp(r.log_lam_c + log_spread);
    return m;
}

/* log lambda_theta from the exit-rate head's output h, by the model's link
 * (the masked process's rate is exact from the schedule; so is the mixture
 * process's rate out of the mask under the noise-posterior link). */
static inline NCTMC_HD fp_model_rate fp_model_rate_at(const nctmc_fp *fp, double t, int32_t i,
                                                      float h)
{
    fp_model_rate m;
    m.dlam_dh = 0.0;
    if (fp->process == NCTMC_FP_MASKED) {
        m.log_rate = fp_masked_log_rate(fp, t, i);
        return m;
    }
    if (fp->exit_link == NCTMC_FP_LINK_NOISE_POSTERIOR) {
        if (i == fp_mask(fp)) {
            /* p_u = 1 leaves the mask unreachable: no rate out of it */
            m.log_rate = fp_prior_mask(fp) > 0.0 ? fp_mixture_mask_log_rate(fp, t) : -INFINITY;
            return m;
        }
        return fp_noise_posterior_rate(fp, t, i, h);
    }
    m.log_rate = (double)h + log(fp_sigma(fp, t));
    m.dlam_dh = exp(m.log_rate);
    return m;
}

static inline NCTMC_HD double fp_model_log_rate(const nctmc_fp *fp, double t, int32_t i,
                                                float h)
{
    return fp_model_rate_at(fp, t, i, h).log_rate;
}

#endif /* NCTMC_FORWARD_PROCESS_H */
