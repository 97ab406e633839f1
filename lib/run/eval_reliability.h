/*
 * eval_reliability.h — nctmc_eval's exit-rate reliability table
 * (docs/math.md, "Reliability table").
 *
 * A data token i at time t is either clean (x0 = i), with true conditional
 * exit rate lam_c, or noise (x0 != i), with lam_n (the same for every
 * x0 != i); the loss is minimised by lambda* = (1 - nu) lam_c + nu lam_n,
 * nu = P(x0 != i | context). So the learned rate implies a noise
 * probability nu_hat, and a calibrated model's nu_hat matches how often
 * such positions are noise. The table counts, per (time bucket, nu_hat
 * bin), the positions, their nu_hat and how many were noise.
 */
#ifndef NCTMC_EVAL_RELIABILITY_H
#define NCTMC_EVAL_RELIABILITY_H

#include <stdint.h>

#include "math/forward_process.h"
#include "nctmc.h"

typedef struct eval_reliability {
    int64_t count[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
    int64_t n_noisy[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
    double sum_nu[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
} eval_reliability;

/* nu_hat = (lambda - lam_c) / (lam_n - lam_c) clipped to [0, 1], for state
 * i at time t with learned log rate `log_rate`; NaN where the rate is not
 * learned or nu_hat is undefined: the masked process, the mask token, a
 * state the forward process cannot reach, or a NaN rate. */
double eval_implied_noise(const nctmc_fp *fp, double t, int32_t i, double log_rate);

/* The nu_hat bin: floor(nu * NCTMC_EVAL_NU_BINS), 1 in the last bin. */
int eval_nu_bin(double nu);

/* Counts one position of time bucket `bucket` (nu_hat = nu, not NaN). */
void eval_reliability_add(eval_reliability *r, int bucket, double nu, int noisy);

/* Writes the table, the per-bucket and overall ECE and the position count
 * into *out (this build's full struct). */
void eval_reliability_fill(const eval_reliability *r, nctmc_eval_result *out);

#endif /* NCTMC_EVAL_RELIABILITY_H */
