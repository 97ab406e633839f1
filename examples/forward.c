/*
 * forward.c — the smallest program that embeds libnctmc: create a context
 * and a model, evaluate it on a batch, and print what it says about each
 * position (how fast it wants to leave its current state, and where to).
 *
 *   forward [--threads N]
 *
 * The model is freshly initialised (training comes with the trainer), so
 * the jump distribution starts uniform and the exit rate at sigma_t; the
 * program then perturbs the output projection to show the API for writing
 * weights by name.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"

#define S 8
#define L 6

static void print_position(const float *log_rate, const float *logp, const int32_t *tokens,
                           int pos)
{
    printf("  pos %d  state %d  exit rate %8.4f  jump to:", pos, tokens[pos],
           exp(log_rate[pos]));
    for (int j = 0; j < S; j++) {
        float p = j == tokens[pos] ? 0.0f : expf(logp[pos * S + j]);
        printf(" %.3f", p);
    }
    printf("\n");
}

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "forward: %s: %s\n", what, why);
    return 1;
}

int main(int argc, char **argv)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    if (argc == 3 && strcmp(argv[1], "--threads") == 0)
        cp.n_threads = atoi(argv[2]);
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return fail("context", "cannot create");

    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = S;
    cfg.seq_len = L;
    cfg.n_layers = 2;
    cfg.d_model = 32;
    cfg.n_heads = 4;
    cfg.cond_dim = 16;
    cfg.seed = 7;
    nctmc_model *model = NULL;
    if (nctmc_model_create(ctx, &cfg, &model) != NCTMC_OK)
        return fail("model", nctmc_context_last_error(ctx));
    printf("libnctmc %s, backend %s (%d threads), model with %lld parameters in %d tensors\n",
           nctmc_version(), nctmc_context_backend(ctx), nctmc_context_n_threads(ctx),
           (long long)nctmc_model_n_params(model), nctmc_model_n_tensors(model));

    int32_t tokens[L] = {0, 3, 3, 7, 1, 5};
    float t = 0.5f, log_rate[L], logp[L * S];
    nctmc_forward_params p;
    nctmc_forward_params_init(&p);
    p.batch = 1;
    p.length = L;
    p.tokens = tokens;
    p.times = &t;
    p.log_rate = log_rate;
    p.jump_logprobs = logp;
    if (nctmc_model_forward(model, &p) != NCTMC_OK)
        return fail("forward", nctmc_model_last_error(model));
    printf("fresh model at t = %.2f (uniform jumps, exit rate sigma_t = %.2f):\n", t,
           1.0 / (1.0 - t));
    for (int pos = 0; pos < L; pos++)
        print_position(log_rate, logp, tokens, pos);

    /* favour state 2 everywhere through the output bias */
    float bias[S] = {0};
    bias[2] = 2.0f;
    if (nctmc_model_write_tensor(model, "output_layer.linear.bias", bias, S) != NCTMC_OK)
        return fail("write_tensor", nctmc_model_last_error(model));
    if (nctmc_model_forward(model, &p) != NCTMC_OK)
        return fail("forward", nctmc_model_last_error(model));
    printf("after output_layer.linear.bias[2] = 2:\n");
    for (int pos = 0; pos < L; pos++)
        print_position(log_rate, logp, tokens, pos);

    nctmc_model_free(model);
    nctmc_context_free(ctx);
    return 0;
}
