/*
 * eval_reliability.c — the exit-rate reliability table of nctmc_eval()
 * (see eval_reliability.h and docs/math.md, "Reliability table").
 */
#include "eval_reliability.h"

#include <math.h>

double eval_implied_noise(const nctmc_fp *fp, double t, int32_t i, double log_rate)
{
    /* the masked process's rate is exact, and the mixture's mask token is
     * noise whatever x0 is: there is nothing to calibrate */
    if (fp->process == NCTMC_FP_MASKED || i == fp_mask(fp) || isnan(log_rate))
        return NAN;
    /* lam_n is the same for every x0 != i (q(i | x0) = (1 - a) pi_i for
     * all of them), the mask included, so any other state will do */
    int32_t other = i == 0 ? 1 : 0;
    double lam_c = fp_conditional_rate(fp, t, i, i).lam_hat;
    double lam_n = fp_conditional_rate(fp, t, i, other).lam_hat;
    if (!(lam_n > lam_c))
        return NAN;
    /* Clipping is decided on the logs: near t = 0, lam_n ~ sigma / t and
     * lam_c ~ sigma t are orders of magnitude apart, and exp(log_rate) may
     * overflow where the answer is plainly 1 (lam_n itself is +inf where
     * a_t rounds to 1, and nu_hat is then 0 for any finite rate). Between
     * them the ratio is taken in double, far inside its range. */
    if (log_rate >= log(lam_n))
        return 1.0;
    if (log_rate <= log(lam_c))
        return 0.0;
    double nu = (exp(log_rate) - lam_c) / (lam_n - lam_c);
    return nu < 0.0 ? 0.0 : (nu > 1.0 ? 1.0 : nu);
}

int eval_nu_bin(double nu)
{
    int k = (int)(nu * NCTMC_EVAL_NU_BINS);
    return k < 0 ? 0 : (k >= NCTMC_EVAL_NU_BINS ? NCTMC_EVAL_NU_BINS - 1 : k);
}

void eval_reliability_add(eval_reliability *r, int bucket, double nu, int noisy)
{
    int k = eval_nu_bin(nu);
    r->count[bucket][k]++;
    r->n_noisy[bucket][k] += noisy != 0;
    r->sum_nu[bucket][k] += nu;
}

/* One cell; returns its count-weighted calibration error. */
static double fill_cell(const eval_reliability *r, int b, int k, nctmc_reliability_cell *cell)
{
    int64_t n = r->count[b][k];
    cell->count = n;
    cell->n_noisy = r->n_noisy[b][k];
    if (n == 0) {
        cell->mean_nu = NAN;
        cell->observed_noisy = NAN;
        return 0.0;
    }
    cell->mean_nu = r->sum_nu[b][k] / (double)n;
    cell->observed_noisy = (double)cell->n_noisy / (double)n;
    return (double)n * fabs(cell->mean_nu - cell->observed_noisy);
}

void eval_reliability_fill(const eval_reliability *r, nctmc_eval_result *out)
{
    double error_all = 0.0;
    int64_t n_all = 0;
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++) {
        double error = 0.0;
        int64_t n = 0;
        for (int k = 0; k < NCTMC_EVAL_NU_BINS; k++) {
            error += fill_cell(r, b, k, &out->reliability[b][k]);
            n += r->count[b][k];
        }
        out->ece_bucket[b] = n ? error / (double)n : NAN;
        error_all += error;
        n_all += n;
    }
    out->ece = n_all ? error_all / (double)n_all : NAN;
    out->n_reliability = n_all;
}
