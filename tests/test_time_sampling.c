/*
 * test_time_sampling.c — importance sampling of the training time t
 * (nctmc_trainer_params.time_sampling): the densities' inverse CDFs map the
 * batch's strata where their CDFs say; the weights make every mode estimate
 * the uniform-time mean, first for known integrands (deterministic
 * quadrature over the stratum offset), then for the trainer's own loss on a
 * fixed model and batch (agreement within the standard errors, while the
 * unweighted losses of the same draws do not agree); the uniform mode is the
 * trainer's old affine map bit for bit; the parameter is checked, saved in
 * checkpoints, and absent from old ones means uniform.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32.h"
#include "dit/dit.h"
#include "test_files.h"
#include "test_util.h"
#include "math/time_sampling.h"
#include "train/trainer.h"

static const nctmc_time_sampling modes[] = {NCTMC_TIME_SAMPLING_UNIFORM,
                                            NCTMC_TIME_SAMPLING_LOGIT, NCTMC_TIME_SAMPLING_SQRT};
static const char *const mode_names[] = {"uniform", "logit", "sqrt"};
#define N_MODES 3

static char dir[256];

/* ---- the densities ------------------------------------------------------ */

/* Ends, monotony, CDF o inverse CDF = identity, density = CDF', and
 * weight x density = the uniform density. */
static void test_inverse_cdf(void)
{
    static const double epsilons[] = {1e-5, 1e-3, 0.05, 0.3};
    for (int m = 0; m < N_MODES; m++)
        for (size_t e = 0; e < sizeof epsilons / sizeof epsilons[0]; e++) {
            double eps = epsilons[e];
            const char *name = mode_names[m];
            nctmc_time_sampling mode = modes[m];
            CHECK_CLOSE(ts_inverse_cdf(mode, eps, 0.0), eps, 1e-12, 0.0, name);
            CHECK_CLOSE(ts_inverse_cdf(mode, eps, 1.0), 1.0 - eps, 1e-12, 0.0, name);
            double prev = -1.0, worst_inv = 0.0, worst_density = 0.0, worst_weight = 0.0;
            bool increasing = true;
            for (int k = 0; k <= 1000; k++) {
                double v = k / 1000.0, t = ts_inverse_cdf(mode, eps, v);
                increasing = increasing && t > prev;
                prev = t;
                worst_inv = fmax(worst_inv, fabs(ts_cdf(mode, eps, t) - v));
                worst_weight = fmax(worst_weight, fabs(ts_weight(mode, eps, t) *
                                                           ts_density(mode, eps, t) *
                                                           (1.0 - 2.0 * eps) - 1.0));
                if (k == 0 || k == 1000)
                    continue;
                double h = 1e-4 * fmin(t - eps, 1.0 - eps - t);
                double slope = (ts_cdf(mode, eps, t + h) - ts_cdf(mode, eps, t - h)) / (2.0 * h);
                double p = ts_density(mode, eps, t);
                worst_density = fmax(worst_density, fabs(slope - p) / p);
            }
            CHECK(increasing, "%s eps %g: the inverse CDF increases", name, eps);
            CHECK(worst_inv < 1e-12, "%s eps %g: CDF(inverse CDF(v)) - v up to %.3g", name, eps,
                  worst_inv);
            CHECK(worst_density < 1e-5, "%s eps %g: density vs the CDF's slope: %.3g", name,
                  eps, worst_density);
            CHECK(worst_weight < 1e-12, "%s eps %g: weight x density x (1 - 2 eps) - 1: %.3g",
                  name, eps, worst_weight);
        }
}

/* The uniform mode is the affine map the trainer used before the field
 * existed, bit for bit, with weight exactly 1. */
static void test_uniform_is_the_old_map(void)
{
    bool same = true;
    for (int k = 0; k < 4096; k++) {
        double eps = k % 2 ? 1e-3 : (double)1e-3f;
        double v = ((double)(k % 512) + 0.3125) / 512.0;
        double old = eps + (1.0 - 2.0 * eps) * v, now = ts_inverse_cdf(0, eps, v);
        same = same && memcmp(&old, &now, sizeof old) == 0 && ts_weight(0, eps, now) == 1.0;
    }
    CHECK(same, "the uniform mode reproduces the old affine map bit for bit");
    CHECK(!ts_mode_valid(-1) && !ts_mode_valid(3) && ts_mode_valid(2), "valid modes");
}

/* B strata (b + u) / B land where the CDF says: the share of the batch at
 * or below c is F(c) to within 1/B, and the known shares below t = 0.01. */
static void test_strata(void)
{
    const int B = 64;
    const double eps = 1e-3, u = 0.37;
    static const double cuts[] = {0.002, 0.01, 0.1, 0.5, 0.9, 0.99, 0.998};
    /* F(0.01) for eps = 1e-3, from the closed forms */
    double below_001[N_MODES] = {
        (0.01 - eps) / (1.0 - 2.0 * eps),
        (log(0.01 / 0.99) - log(eps / (1.0 - eps))) / (2.0 * log((1.0 - eps) / eps)),
        (0.1 - sqrt(eps)) / (sqrt(1.0 - eps) - sqrt(eps))};
    for (int m = 0; m < N_MODES; m++) {
        double t[64];
        for (int b = 0; b < B; b++)
            t[b] = ts_inverse_cdf(modes[m], eps, ((double)b + u) / (double)B);
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            int n = 0;
            for (int b = 0; b < B; b++)
                n += t[b] <= cuts[c];
            double share = (double)n / (double)B, want = ts_cdf(modes[m], eps, cuts[c]);
            CHECK(fabs(share - want) <= 1.0 / B, "%s: %d of %d strata at or below %g, CDF %g",
                  mode_names[m], n, B, cuts[c], want);
        }
        CHECK_CLOSE(ts_cdf(modes[m], eps, 0.01), below_001[m], 1e-12, 0.0, mode_names[m]);
    }
    printf("share of t below 0.01 (eps 1e-3): uniform %.4f, logit %.4f, sqrt %.4f\n",
           below_001[0], below_001[1], below_001[2]);
    CHECK(below_001[1] > 0.16 && below_001[1] < 0.17 && below_001[2] > 0.07 &&
              below_001[2] < 0.071,
          "the shares nctmc.h quotes");
}

/* A loss-like integrand: 1/sqrt(t) spread at small t, growth near 1. */
static double integrand(double t)
{
    return 1.0 / sqrt(t) + 3.0 * t * t + 0.5;
}

/* Its mean over U(eps, 1 - eps), exactly. */
static double integrand_mean(double eps)
{
    double a = eps, b = 1.0 - eps;
    return (2.0 * (sqrt(b) - sqrt(a)) + (b * b * b - a * a * a) + 0.5 * (b - a)) / (b - a);
}

/* The stratified, weighted batch mean is unbiased: averaged over the
 * stratum offset u (a fine grid instead of random draws) it is the uniform
 * mean for every mode; without the weights it is not. */
static void test_weighted_mean_is_unbiased(void)
{
    const int B = 16, K = 20000;
    const double eps = 1e-3;
    double want = integrand_mean(eps);
    for (int m = 0; m < N_MODES; m++) {
        double weighted = 0.0, plain = 0.0;
        for (int k = 0; k < K; k++) {
            double u = ((double)k + 0.5) / (double)K;
            for (int b = 0; b < B; b++) {
                double t = ts_inverse_cdf(modes[m], eps, ((double)b + u) / (double)B);
                weighted += ts_weight(modes[m], eps, t) * integrand(t);
                plain += integrand(t);
            }
        }
        weighted /= (double)K * B;
        plain /= (double)K * B;
        printf("%s: weighted mean %.6f, unweighted %.6f, exact %.6f\n", mode_names[m], weighted,
               plain, want);
        CHECK_CLOSE(weighted, want, 1e-4, 0.0, mode_names[m]);
        if (modes[m] != NCTMC_TIME_SAMPLING_UNIFORM)
            CHECK(fabs(plain - want) > 0.05 * want, "%s: the unweighted mean %g is biased",
                  mode_names[m], plain);
    }
}

/* ---- the trainer -------------------------------------------------------- */

#define S_TOKENS 6
#define SEQ_LEN 8
#define BATCH 8

static nctmc_context *make_ctx(void)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 1;
    nctmc_context *ctx = NULL;
    nctmc_context_create(&p, &ctx);
    return ctx;
}

static nctmc_model *tiny_model(nctmc_context *ctx)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = S_TOKENS;
    c.seq_len = SEQ_LEN;
    c.n_layers = 1;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 8;
    c.seed = 5;
    /* the sigma link's fresh rate is off by a t-dependent factor, so the
     * unweighted losses of the importance-sampled modes are clearly off the
     * objective (with the noise-posterior link's, 4 standard errors of 1500
     * steps do not resolve them) */
    c.exit_link = NCTMC_EXIT_LINK_SIGMA;
    c.time_input = NCTMC_TIME_INPUT_T;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model: %s",
          nctmc_context_last_error(ctx));
    return m;
}

/* A trainer that never moves the weights: learning rate 0, no decay. */
static nctmc_trainer_params frozen_params(nctmc_time_sampling mode, uint64_t seed)
{
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = BATCH;
    p.learning_rate = 0.0f;
    p.warmup_steps = 0;
    p.ema_decay = 0.0f;
    p.time_sampling = mode;
    p.seed = seed;
    return p;
}

typedef struct estimate {
    double mean, se;            /* the reported (weighted) loss */
    double plain_mean, plain_se; /* the same draws, unweighted */
    double mean_weight;
} estimate;

static void finish(double sum, double sum2, int n, double *mean, double *se)
{
    *mean = sum / n;
    double var = (sum2 - n * *mean * *mean) / (n - 1);
    *se = sqrt(fmax(var, 0.0) / n);
}

/* K steps of a frozen trainer on one batch: the mean of the reported loss
 * and of the unweighted loss of the same draws, with their standard errors
 * (steps draw independent times and noise, so the per-step values are
 * independent). */
static estimate frozen_losses(nctmc_model *m, nctmc_time_sampling mode, int K)
{
    estimate e = {0};
    nctmc_trainer_params p = frozen_params(mode, 100 + (uint64_t)mode);
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "trainer: %s", nctmc_model_last_error(m));
    if (!t)
        return e;
    int32_t tokens[BATCH * SEQ_LEN];
    for (int r = 0; r < BATCH * SEQ_LEN; r++)
        tokens[r] = (r / SEQ_LEN + 2 * (r % SEQ_LEN)) % S_TOKENS;
    float rows[BATCH * SEQ_LEN];
    double s = 0, s2 = 0, ps = 0, ps2 = 0, ws = 0;
    nctmc_train_stats st;
    nctmc_train_stats_init(&st);
    for (int k = 0; k < K; k++) {
        CHECK(nctmc_trainer_step(t, tokens, NULL, &st) == NCTMC_OK, "step: %s",
              nctmc_trainer_last_error(t));
        t->be->ops->download(t->be, rows, dit_ws_loss(t->ws), sizeof rows);
        double plain = 0.0, weighted = 0.0, w = 0.0;
        for (int r = 0; r < BATCH * SEQ_LEN; r++) {
            plain += rows[r];
            weighted += (double)t->host_weights[r / SEQ_LEN] * rows[r];
        }
        for (int b = 0; b < BATCH; b++)
            w += t->host_weights[b] / BATCH;
        plain /= BATCH * SEQ_LEN;
        weighted /= BATCH * SEQ_LEN;
        CHECK_CLOSE(st.loss, weighted, 1e-12, 1e-12, "the reported loss is the weighted mean");
        s += st.loss;
        s2 += st.loss * st.loss;
        ps += plain;
        ps2 += plain * plain;
        ws += w;
    }
    finish(s, s2, K, &e.mean, &e.se);
    finish(ps, ps2, K, &e.plain_mean, &e.plain_se);
    e.mean_weight = ws / K;
    nctmc_trainer_free(t);
    return e;
}

/* On a fixed model and batch, every mode's reported loss estimates the
 * same objective: the means over many steps agree within 4 combined
 * standard errors. The unweighted losses of the importance-sampled steps
 * do not, so the agreement is the weights' doing. */
static void test_trainer_estimates_agree(void)
{
    nctmc_context *ctx = make_ctx();
    nctmc_model *m = tiny_model(ctx);
    const int K = 1500;
    estimate e[N_MODES];
    for (int k = 0; k < N_MODES; k++) {
        e[k] = frozen_losses(m, modes[k], K);
        printf("%s: loss %.5f +- %.5f (unweighted %.5f +- %.5f), mean weight %.4f\n",
               mode_names[k], e[k].mean, e[k].se, e[k].plain_mean, e[k].plain_se,
               e[k].mean_weight);
    }
    for (int k = 1; k < N_MODES; k++) {
        double se = sqrt(e[k].se * e[k].se + e[0].se * e[0].se);
        double plain_se = sqrt(e[k].plain_se * e[k].plain_se + e[0].se * e[0].se);
        CHECK(fabs(e[k].mean - e[0].mean) <= 4.0 * se,
              "%s: weighted mean loss %.5f vs uniform %.5f (4 standard errors: %.5f)",
              mode_names[k], e[k].mean, e[0].mean, 4.0 * se);
        CHECK(fabs(e[k].plain_mean - e[0].mean) > 4.0 * plain_se,
              "%s: the unweighted mean %.5f should be off the uniform %.5f", mode_names[k],
              e[k].plain_mean, e[0].mean);
        CHECK(fabs(e[k].mean_weight - 1.0) < 0.05, "%s: the weights average %.4f", mode_names[k],
              e[k].mean_weight);
    }
    CHECK(e[0].mean_weight == 1.0 && e[0].plain_mean == e[0].mean, "uniform: weights 1");
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* The times a step gives the model are the strata through the inverse CDF,
 * as floats, and the weights are those of these float times. */
static void test_trainer_times(void)
{
    nctmc_context *ctx = make_ctx();
    nctmc_model *m = tiny_model(ctx);
    nctmc_trainer_params p = frozen_params(NCTMC_TIME_SAMPLING_LOGIT, 3);
    nctmc_trainer *t = NULL;
    nctmc_trainer_create(m, &p, &t);
    int32_t tokens[BATCH * SEQ_LEN] = {0};
    CHECK(t && nctmc_trainer_step(t, tokens, NULL, NULL) == NCTMC_OK, "a step");
    if (t) {
        /* the offset u is unknown here, but one u explains every time */
        double v0 = ts_cdf(p.time_sampling, p.time_eps, t->host_times[0]);
        double u = v0 * BATCH;
        bool ok = u >= -1e-5 && u < 1.0 + 1e-5;
        for (int b = 0; b < BATCH; b++) {
            double want = ts_inverse_cdf(p.time_sampling, p.time_eps, ((double)b + u) / BATCH);
            ok = ok && fabs(t->host_times[b] - want) <= 2e-7 * want &&
                 t->host_weights[b] ==
                     (float)ts_weight(p.time_sampling, p.time_eps, (double)t->host_times[b]);
        }
        CHECK(ok, "the batch's times are the strata through the inverse CDF");
    }
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* ---- parameters and checkpoints --------------------------------------- */

/* Rewrites the checkpoint at path with the time_sampling key renamed out of
 * the nctmc. namespace (so the loader ignores it, as a file written before
 * the field existed lacks it), checksum recomputed (docs/formats.md). */
static bool hide_time_sampling_key(const char *path)
{
    size_t n = 0;
    uint8_t *data = test_read_bytes(path, &n);
    static const char key[] = "\"nctmc.trainer.time_sampling\"";
    static const char sum_key[] = "\"nctmc.checksum\":\"";
    uint8_t *at = NULL, *sum = NULL;
    for (size_t k = 8; data && k + sizeof sum_key < n; k++) {
        if (!at && memcmp(data + k, key, sizeof key - 1) == 0)
            at = data + k;
        if (!sum && memcmp(data + k, sum_key, sizeof sum_key - 1) == 0)
            sum = data + k + sizeof sum_key - 1;
    }
    bool ok = at && sum;
    if (ok) {
        memcpy(at + 1, "xxxxx", 5);
        memset(sum, '0', 8);
        char digits[9];
        snprintf(digits, sizeof digits, "%08x", (unsigned)crc32_update(0, data, n));
        memcpy(sum, digits, 8);
        ok = test_write_bytes(path, data, n) != 0;
    }
    free(data);
    return ok;
}

static void test_params_and_checkpoints(void)
{
    nctmc_context *ctx = make_ctx();
    nctmc_model *m = tiny_model(ctx);
    nctmc_trainer *t = NULL;
    nctmc_trainer_params p = frozen_params(3, 1);
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_ERR_INVALID_ARGUMENT && !t,
          "time_sampling 3 is refused");
    CHECK(strstr(nctmc_model_last_error(m), "time_sampling") != NULL, "says why: %s",
          nctmc_model_last_error(m));
    p.time_sampling = NCTMC_TIME_SAMPLING_SQRT;
    p.learning_rate = 1e-3f;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "create");
    int32_t tokens[BATCH * SEQ_LEN] = {0};
    nctmc_trainer_step(t, tokens, NULL, NULL);
    char path[512];
    test_path(path, sizeof path, dir, "trainer.safetensors");
    CHECK(nctmc_trainer_save(t, path) == NCTMC_OK, "save: %s", nctmc_trainer_last_error(t));
    nctmc_trainer_params got;
    nctmc_trainer_params_init(&got);
    CHECK(nctmc_trainer_inspect(ctx, path, &got, NULL) == NCTMC_OK &&
              got.time_sampling == NCTMC_TIME_SAMPLING_SQRT,
          "the checkpoint keeps time_sampling (%d)", (int)got.time_sampling);
    nctmc_model *m2 = NULL;
    nctmc_trainer *t2 = NULL;
    CHECK(nctmc_trainer_resume(ctx, path, NULL, &m2, &t2) == NCTMC_OK, "resume: %s",
          nctmc_context_last_error(ctx));
    nctmc_trainer_params_init(&got);
    if (t2)
        nctmc_trainer_get_params(t2, &got);
    CHECK(got.time_sampling == NCTMC_TIME_SAMPLING_SQRT, "resumed with time_sampling");
    nctmc_trainer_free(t2);
    nctmc_model_free(m2);
    /* a checkpoint from before the field: uniform */
    CHECK(hide_time_sampling_key(path), "rewrite the checkpoint without the key");
    nctmc_trainer_params_init(&got);
    got.time_sampling = 7;
    CHECK(nctmc_trainer_inspect(ctx, path, &got, NULL) == NCTMC_OK &&
              got.time_sampling == NCTMC_TIME_SAMPLING_UNIFORM,
          "a checkpoint without the key means uniform: %s", nctmc_context_last_error(ctx));
    m2 = NULL;
    t2 = NULL;
    CHECK(nctmc_trainer_resume(ctx, path, NULL, &m2, &t2) == NCTMC_OK, "resume the old file: %s",
          nctmc_context_last_error(ctx));
    nctmc_trainer_free(t2);
    nctmc_model_free(m2);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

int main(void)
{
    if (!test_make_temp_dir(dir, sizeof dir)) {
        fprintf(stderr, "test_time_sampling: no scratch directory\n");
        return 1;
    }
    test_inverse_cdf();
    test_uniform_is_the_old_map();
    test_strata();
    test_weighted_mean_is_unbiased();
    test_trainer_times();
    test_trainer_estimates_agree();
    test_params_and_checkpoints();
    test_remove_dir(dir);
    return test_finish("time_sampling");
}
