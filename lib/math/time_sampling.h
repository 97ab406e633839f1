/*
 * time_sampling.h — the densities the trainer may draw t from
 * (nctmc_trainer_params.time_sampling), on (eps, 1 - eps): their inverse
 * CDFs, which turn the batch's stratified uniforms into times, and the
 * importance weights that keep the objective the uniform-time mean of
 * L_cond. docs/training.md, "Importance sampling of t", has the formulas.
 */
#ifndef NCTMC_TIME_SAMPLING_H
#define NCTMC_TIME_SAMPLING_H

#include <stdbool.h>

#include "nctmc.h"

/* Whether mode is one of the NCTMC_TIME_SAMPLING_* values. */
bool ts_mode_valid(nctmc_time_sampling mode);

/* The time whose CDF is v, for v in [0, 1]: eps at 0, 1 - eps at 1,
 * increasing. For NCTMC_TIME_SAMPLING_UNIFORM exactly
 * eps + (1 - 2 eps) v, the expression the trainer always used. */
double ts_inverse_cdf(nctmc_time_sampling mode, double eps, double v);

/* P(T <= t) for T drawn by mode, t in [eps, 1 - eps]. */
double ts_cdf(nctmc_time_sampling mode, double eps, double t);

/* The density p(t) of mode on (eps, 1 - eps). */
double ts_density(nctmc_time_sampling mode, double eps, double t);

/* The importance weight u(t) / p(t) = 1 / ((1 - 2 eps) p(t)), u being the
 * uniform density: E_p[w(T) f(T)] = E_u[f(T)] for every f, and
 * E_p[w(T)] = 1. Exactly 1 for NCTMC_TIME_SAMPLING_UNIFORM. */
double ts_weight(nctmc_time_sampling mode, double eps, double t);

#endif /* NCTMC_TIME_SAMPLING_H */
