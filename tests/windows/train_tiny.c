/*
 * train_tiny.c — trains a tiny model for a few steps with the native (Linux)
 * build and saves it: the model that tests/windows/sample_tokens.c samples
 * on both systems (scripts/windows.sh compares the tokens).
 *
 *   train_tiny OUT.safetensors
 */
#include <stdint.h>
#include <stdio.h>

#include "nctmc.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: train_tiny OUT.safetensors\n");
        return 2;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    nctmc_context *ctx = NULL;
    nctmc_model *m = NULL;
    nctmc_trainer *t = NULL;
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 12;
    c.seq_len = 16;
    c.n_layers = 1;
    c.d_model = 32;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.seed = 5;
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 4;
    tp.learning_rate = 3e-3f;
    tp.seed = 9;
    int ok = nctmc_context_create(&cp, &ctx) == NCTMC_OK &&
             nctmc_model_create(ctx, &c, &m) == NCTMC_OK &&
             nctmc_trainer_create(m, &tp, &t) == NCTMC_OK;
    int32_t tokens[4 * 16];
    for (int step = 0; ok && step < 20; step++) {
        for (int i = 0; i < 4 * 16; i++)
            tokens[i] = (i % 16 + step % 3) % 12; /* ramps: something to learn */
        ok = nctmc_trainer_step(t, tokens, NULL, NULL) == NCTMC_OK;
    }
    ok = ok && nctmc_model_save(m, argv[1]) == NCTMC_OK;
    if (!ok)
        fprintf(stderr, "train_tiny: %s | %s\n", ctx ? nctmc_context_last_error(ctx) : "",
                m ? nctmc_model_last_error(m) : "");
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return ok ? 0 : 1;
}
