/*
 * consumer.c — a program that knows libnctmc only through its installed
 * header and pkg-config file: creates a context and a small model, runs one
 * forward pass and checks the jump distribution sums to one.
 */
#include <math.h>
#include <stdio.h>

#include <nctmc.h>

int main(void)
{
    if (nctmc_version_number() != NCTMC_VERSION_NUMBER) {
        fprintf(stderr, "header %d and library %d disagree\n", NCTMC_VERSION_NUMBER,
                nctmc_version_number());
        return 1;
    }
    nctmc_context *ctx = NULL;
    nctmc_model *model = NULL;
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 5;
    cfg.seq_len = 4;
    cfg.n_layers = 1;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.cond_dim = 4;
    if (nctmc_context_create(NULL, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &model) != NCTMC_OK) {
        fprintf(stderr, "create failed: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    int32_t tokens[4] = {0, 1, 2, 3};
    float t = 0.5f, log_rate[4], logp[4 * 5];
    nctmc_forward_params p;
    nctmc_forward_params_init(&p);
    p.batch = 1;
    p.length = 4;
    p.tokens = tokens;
    p.times = &t;
    p.log_rate = log_rate;
    p.jump_logprobs = logp;
    if (nctmc_model_forward(model, &p) != NCTMC_OK) {
        fprintf(stderr, "forward failed: %s\n", nctmc_model_last_error(model));
        return 1;
    }
    double sum = 0.0;
    for (int j = 0; j < 5; j++)
        sum += exp(logp[j]);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    if (fabs(sum - 1.0) > 1e-5) {
        fprintf(stderr, "jump distribution sums to %g\n", sum);
        return 1;
    }
    printf("consumer: libnctmc %s works through pkg-config\n", nctmc_version());
    return 0;
}
