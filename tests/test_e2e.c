/*
 * test_e2e.c — end-to-end quality on a source whose distribution is known
 * exactly: a random first-order Markov chain over S = 8 states, sequences of
 * L = 16. Train briefly, sample 512 sequences, and score them:
 *  - gen-NLL: the mean -log p_source(x) of the samples, which must be
 *    within 15% of the source's entropy H (too high: bad samples);
 *  - diversity: the plug-in entropy of a first-order chain fitted to the
 *    samples, also within 15% of H (too low: collapsed samples).
 * Run for the uniform and the masked process.
 *
 * Usage: test_e2e [uniform|masked] [steps]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

#define S_STATES 8
#define SEQ_LEN 16
#define N_SAMPLES 512
#define TRAIN_BATCH 32

typedef struct markov_chain {
    double init[S_STATES];
    double trans[S_STATES][S_STATES];
} markov_chain;

/* A random chain with structure: each row puts most mass on a few states. */
static markov_chain make_chain(test_rng *rng)
{
    markov_chain mc;
    for (int i = 0; i < S_STATES; i++) {
        double sum = 0.0;
        for (int j = 0; j < S_STATES; j++) {
            double u = test_uniform(rng, 0.0f, 1.0f);
            mc.trans[i][j] = u * u * u * u + 0.01;
            sum += mc.trans[i][j];
        }
        for (int j = 0; j < S_STATES; j++)
            mc.trans[i][j] /= sum;
        mc.init[i] = 1.0 / S_STATES;
    }
    return mc;
}

static double entropy_of(const double *p, int n)
{
    double h = 0.0;
    for (int k = 0; k < n; k++)
        if (p[k] > 0.0)
            h -= p[k] * log(p[k]);
    return h;
}

/* The entropy of a whole sequence: H(x_0) + sum_p E[H(T(x_{p-1}, .))]. */
static double chain_entropy(const markov_chain *mc)
{
    double marg[S_STATES], next[S_STATES];
    memcpy(marg, mc->init, sizeof marg);
    double h = entropy_of(mc->init, S_STATES);
    for (int p = 1; p < SEQ_LEN; p++) {
        memset(next, 0, sizeof next);
        for (int i = 0; i < S_STATES; i++) {
            h += marg[i] * entropy_of(mc->trans[i], S_STATES);
            for (int j = 0; j < S_STATES; j++)
                next[j] += marg[i] * mc->trans[i][j];
        }
        memcpy(marg, next, sizeof marg);
    }
    return h;
}

static int32_t draw_from(const double *p, test_rng *rng)
{
    double u = test_uniform(rng, 0.0f, 1.0f), acc = 0.0;
    for (int k = 0; k < S_STATES; k++) {
        acc += p[k];
        if (u < acc)
            return k;
    }
    return S_STATES - 1;
}

static void draw_sequences(const markov_chain *mc, test_rng *rng, int32_t *x, int n)
{
    for (int s = 0; s < n; s++) {
        int32_t *seq = x + (size_t)s * SEQ_LEN;
        seq[0] = draw_from(mc->init, rng);
        for (int p = 1; p < SEQ_LEN; p++)
            seq[p] = draw_from(mc->trans[seq[p - 1]], rng);
    }
}

static double sequence_nll(const markov_chain *mc, const int32_t *seq)
{
    double nll = -log(mc->init[seq[0]]);
    for (int p = 1; p < SEQ_LEN; p++)
        nll -= log(mc->trans[seq[p - 1]][seq[p]]);
    return nll;
}

/* Entropy of the first-order chain fitted to the samples (position-wise
 * initial distribution, pooled transitions, the samples' own marginals). */
static double fitted_entropy(const int32_t *x, int n)
{
    markov_chain fit;
    memset(&fit, 0, sizeof fit);
    double counts[S_STATES][S_STATES] = {{0}};
    for (int s = 0; s < n; s++) {
        const int32_t *seq = x + (size_t)s * SEQ_LEN;
        fit.init[seq[0]] += 1.0 / n;
        for (int p = 1; p < SEQ_LEN; p++)
            counts[seq[p - 1]][seq[p]] += 1.0;
    }
    for (int i = 0; i < S_STATES; i++) {
        double row = 0.0;
        for (int j = 0; j < S_STATES; j++)
            row += counts[i][j];
        for (int j = 0; j < S_STATES; j++)
            fit.trans[i][j] = row > 0.0 ? counts[i][j] / row : 1.0 / S_STATES;
    }
    return chain_entropy(&fit);
}

static nctmc_model *train_model(nctmc_context *ctx, nctmc_process process,
                                const markov_chain *mc, int steps)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = process == NCTMC_PROCESS_UNIFORM ? S_STATES : S_STATES + 1;
    c.seq_len = SEQ_LEN;
    c.n_layers = 2;
    c.d_model = 64;
    c.n_heads = 4;
    c.cond_dim = 32;
    c.process = process;
    c.seed = 3;
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &c, &m) != NCTMC_OK)
        return NULL;
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = TRAIN_BATCH;
    p.learning_rate = 2e-3f;
    p.warmup_steps = 50;
    p.total_steps = steps;
    p.ema_decay = 0.995f;
    p.seed = 5;
    nctmc_trainer *t = NULL;
    if (nctmc_trainer_create(m, &p, &t) != NCTMC_OK) {
        nctmc_model_free(m);
        return NULL;
    }
    test_rng rng = test_rng_seed(99);
    int32_t *batch = malloc(sizeof(int32_t) * TRAIN_BATCH * SEQ_LEN);
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    double recent = 0.0;
    for (int k = 0; k < steps; k++) {
        draw_sequences(mc, &rng, batch, TRAIN_BATCH);
        nctmc_status st = nctmc_trainer_step(t, batch, NULL, &s);
        CHECK(st == NCTMC_OK, "step %d: %s", k, nctmc_trainer_last_error(t));
        if (k >= steps - 50)
            recent += s.loss / 50.0;
    }
    printf("  trained %d steps, mean loss of the last 50: %.4f\n", steps, recent);
    nctmc_trainer_copy_weights(t, m, 1); /* sample from the EMA */
    nctmc_trainer_free(t);
    free(batch);
    return m;
}

static void score_samples(const char *what, const markov_chain *mc, const int32_t *x)
{
    double h = chain_entropy(mc);
    double nll = 0.0;
    for (int s = 0; s < N_SAMPLES; s++)
        nll += sequence_nll(mc, x + (size_t)s * SEQ_LEN) / N_SAMPLES;
    double h_fit = fitted_entropy(x, N_SAMPLES);
    printf("  %s: source entropy %.3f nats, gen-NLL %.3f (%+.1f%%), fitted entropy %.3f "
           "(%+.1f%%)\n",
           what, h, nll, 100.0 * (nll - h) / h, h_fit, 100.0 * (h_fit - h) / h);
    CHECK(fabs(nll - h) <= 0.15 * h, "%s: gen-NLL %.3f vs entropy %.3f", what, nll, h);
    CHECK(fabs(h_fit - h) <= 0.15 * h, "%s: fitted entropy %.3f vs entropy %.3f", what, h_fit,
          h);
}

static void sample_and_score(nctmc_model *m, const markov_chain *mc, const char *process,
                             nctmc_sample_method method, const char *method_name)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 128;
    nctmc_sampler *sampler = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &sampler) == NCTMC_OK, "sampler");
    if (!sampler)
        return;
    int32_t *x = malloc(sizeof(int32_t) * N_SAMPLES * SEQ_LEN);
    bool ok = true;
    for (int first = 0; first < N_SAMPLES && ok; first += 128) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = 128;
        p.method = method;
        p.n_steps = 64;
        p.seed = 17;
        p.first_sequence = first;
        p.tokens_out = x + (size_t)first * SEQ_LEN;
        nctmc_status st = nctmc_sample(sampler, &p);
        ok = st == NCTMC_OK;
        CHECK(ok, "sample: %s", nctmc_sampler_last_error(sampler));
    }
    if (ok) {
        char what[64];
        snprintf(what, sizeof what, "%s/%s", process, method_name);
        score_samples(what, mc, x);
    }
    free(x);
    nctmc_sampler_free(sampler);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "uniform";
    int steps = argc > 2 ? atoi(argv[2]) : 1500;
    nctmc_process process = strcmp(which, "masked") == 0 ? NCTMC_PROCESS_MASKED
                                                           : NCTMC_PROCESS_UNIFORM;
    test_rng rng = test_rng_seed(2024);
    markov_chain mc = make_chain(&rng);
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 2;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return 1;
    nctmc_model *m = train_model(ctx, process, &mc, steps);
    CHECK(m != NULL, "training failed");
    if (m) {
        sample_and_score(m, &mc, which, NCTMC_SAMPLE_TAU_LEAPING, "tau-leaping");
        sample_and_score(m, &mc, which, NCTMC_SAMPLE_EULER, "euler");
        if (process == NCTMC_PROCESS_UNIFORM)
            sample_and_score(m, &mc, which, NCTMC_SAMPLE_POSTERIOR, "posterior");
    }
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    char suite[64];
    snprintf(suite, sizeof suite, "e2e_%s", which);
    return test_finish(suite);
}
