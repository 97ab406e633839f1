/*
 * time_sampling.c — the time densities of the trainer (time_sampling.h).
 * Each has a closed-form CDF and inverse, so the stratified uniforms of a
 * batch map to times with no numerical search:
 *   UNIFORM  p = 1 / (b - a)                      t = a + (b - a) v
 *   LOGIT    p = 1 / (Z t (1 - t)),               t = sigmoid(logit a + Z v),
 *            Z = logit b - logit a
 *   SQRT     p = 1 / (2 D sqrt t), D = sqrt b - sqrt a,
 *                                                  t = (sqrt a + D v)^2
 * on (a, b) = (eps, 1 - eps).
 */
#include "time_sampling.h"

#include <math.h>

bool ts_mode_valid(nctmc_time_sampling mode)
{
    return mode == NCTMC_TIME_SAMPLING_UNIFORM || mode == NCTMC_TIME_SAMPLING_LOGIT ||
           mode == NCTMC_TIME_SAMPLING_SQRT;
}

static double logit(double t)
{
    return log(t) - log1p(-t);
}

/* Z, the width of (eps, 1 - eps) in logit t. */
static double logit_span(double eps)
{
    return logit(1.0 - eps) - logit(eps);
}

/* D, the width of (eps, 1 - eps) in sqrt t. */
static double sqrt_span(double eps)
{
    return sqrt(1.0 - eps) - sqrt(eps);
}

double ts_inverse_cdf(nctmc_time_sampling mode, double eps, double v)
{
    switch (mode) {
    case NCTMC_TIME_SAMPLING_LOGIT: {
        double y = logit(eps) + logit_span(eps) * v;
        return 1.0 / (1.0 + exp(-y));
    }
    case NCTMC_TIME_SAMPLING_SQRT: {
        double s = sqrt(eps) + sqrt_span(eps) * v;
        return s * s;
    }
    default:
        /* the trainer's expression from before time_sampling existed, kept
         * operation for operation so that mode 0 draws the same bits */
        return eps + (1.0 - 2.0 * eps) * v;
    }
}

double ts_cdf(nctmc_time_sampling mode, double eps, double t)
{
    switch (mode) {
    case NCTMC_TIME_SAMPLING_LOGIT: return (logit(t) - logit(eps)) / logit_span(eps);
    case NCTMC_TIME_SAMPLING_SQRT: return (sqrt(t) - sqrt(eps)) / sqrt_span(eps);
    default: return (t - eps) / (1.0 - 2.0 * eps);
    }
}

double ts_density(nctmc_time_sampling mode, double eps, double t)
{
    switch (mode) {
    case NCTMC_TIME_SAMPLING_LOGIT: return 1.0 / (logit_span(eps) * t * (1.0 - t));
    case NCTMC_TIME_SAMPLING_SQRT: return 1.0 / (2.0 * sqrt_span(eps) * sqrt(t));
    default: return 1.0 / (1.0 - 2.0 * eps);
    }
}

double ts_weight(nctmc_time_sampling mode, double eps, double t)
{
    /* written out rather than 1 / ((1 - 2 eps) p): no division by a tiny
     * density, and exactly 1 for the uniform mode */
    switch (mode) {
    case NCTMC_TIME_SAMPLING_LOGIT: return logit_span(eps) * t * (1.0 - t) / (1.0 - 2.0 * eps);
    case NCTMC_TIME_SAMPLING_SQRT: return 2.0 * sqrt_span(eps) * sqrt(t) / (1.0 - 2.0 * eps);
    default: return 1.0;
    }
}
