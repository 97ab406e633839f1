/*
 * sample_tokens.c — what a Windows program does with nctmc.dll: load a
 * model, sample with a seed, print the tokens (one line per sequence).
 * Written in the common subset of C and C++: sample_tokens.cpp compiles
 * this same file as C++. scripts/windows.sh builds it natively and with
 * MinGW (C and C++) and compares the output for a model trained natively.
 *
 *   sample_tokens MODEL.safetensors SEED
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nctmc.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sample_tokens MODEL.safetensors SEED\n");
        return 2;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 2;
    nctmc_context *ctx = NULL;
    nctmc_model *m = NULL;
    nctmc_sampler *s = NULL;
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 3;
    int ok = nctmc_context_create(&cp, &ctx) == NCTMC_OK &&
             nctmc_model_load(ctx, argv[1], &m) == NCTMC_OK &&
             nctmc_sampler_create(m, &sp, &s) == NCTMC_OK;
    int32_t len = ok ? nctmc_model_seq_len(m) : 0;
    int32_t *out = (int32_t *)malloc((size_t)(3 * (len > 0 ? len : 1)) * sizeof(int32_t));
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = 3;
    p.n_steps = 16;
    p.seed = strtoull(argv[2], NULL, 10);
    p.tokens_out = out;
    ok = ok && out && nctmc_sample(s, &p) == NCTMC_OK;
    for (int32_t b = 0; ok && b < 3; b++) {
        for (int32_t i = 0; i < len; i++)
            printf("%s%d", i ? " " : "", (int)out[b * len + i]);
        printf("\n");
    }
    if (!ok)
        fprintf(stderr, "sample_tokens: %s | %s\n", ctx ? nctmc_context_last_error(ctx) : "",
                m ? nctmc_model_last_error(m) : "");
    free(out);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return ok ? 0 : 1;
}
