/*
 * make_legacy_fixture.c — wrote tests/legacy/v0.2.0-*.safetensors and
 * their outputs with libnctmc 0.2.0 (commit c924474), through the public API
 * only. Kept to show how the fixtures were made; it is not built. To
 * regenerate against a 0.2.0 build:
 *
 *   cc -std=c11 -Iinclude tests/legacy/make_legacy_fixture.c -Lbuild -lnctmc -lm \
 *      -o /tmp/mk && LD_LIBRARY_PATH=build /tmp/mk tests/legacy
 *
 * For each model (uniform, and mixture with two classes) it draws every
 * weight at random, saves the checkpoint, then records the forward outputs
 * on fixed inputs and the tokens of the three samplers (test_legacy.c
 * reads them back with the same layout).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"

#define B 3
#define L 6
#define S 7
#define STEPS 12

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform_pm(float scale)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(rng_state >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
}

static int fill_weights(nctmc_model *m)
{
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info;
        nctmc_tensor_info_init(&info);
        if (nctmc_model_tensor_info(m, k, &info) != NCTMC_OK)
            return 0;
        float *w = malloc((size_t)info.n_elements * sizeof *w);
        for (int64_t i = 0; i < info.n_elements; i++)
            w[i] = uniform_pm(0.5f);
        int ok = nctmc_model_write_tensor(m, info.name, w, info.n_elements) == NCTMC_OK;
        free(w);
        if (!ok)
            return 0;
    }
    return 1;
}

static int write_case(nctmc_context *ctx, const char *dir, const char *name,
                      nctmc_process process, int32_t n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = S;
    c.seq_len = L;
    c.n_layers = 1;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 8;
    c.n_classes = n_classes;
    c.process = process;
    c.seed = 5;
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &c, &m) != NCTMC_OK || !fill_weights(m)) {
        fprintf(stderr, "%s: %s\n", name, nctmc_context_last_error(ctx));
        return 0;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/v0.2.0-%s.safetensors", dir, name);
    if (nctmc_model_save(m, path) != NCTMC_OK)
        return 0;

    int32_t tokens[B * L];
    float times[B] = {0.002f, 0.4f, 0.97f};
    int32_t labels[B] = {0, 1, n_classes};
    for (int i = 0; i < B * L; i++)
        tokens[i] = (i * 5 + 3) % S;
    float log_rate[B * L], logp[B * L * S];
    nctmc_forward_params f;
    nctmc_forward_params_init(&f);
    f.batch = B;
    f.length = L;
    f.tokens = tokens;
    f.times = times;
    f.labels = n_classes ? labels : NULL;
    f.log_rate = log_rate;
    f.jump_logprobs = logp;
    if (nctmc_model_forward(m, &f) != NCTMC_OK) {
        fprintf(stderr, "%s: %s\n", name, nctmc_model_last_error(m));
        return 0;
    }

    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = B;
    nctmc_sampler *s = NULL;
    if (nctmc_sampler_create(m, &sp, &s) != NCTMC_OK)
        return 0;
    int32_t sampled[3][B * L];
    for (int method = 0; method < 3; method++) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = B;
        p.method = method;
        p.n_steps = STEPS;
        p.seed = 9;
        p.labels = n_classes ? labels : NULL;
        p.cfg_scale = n_classes ? 1.5f : 1.0f;
        p.tokens_out = sampled[method];
        if (nctmc_sample(s, &p) != NCTMC_OK) {
            fprintf(stderr, "%s: %s\n", name, nctmc_sampler_last_error(s));
            return 0;
        }
    }
    snprintf(path, sizeof path, "%s/v0.2.0-%s.outputs", dir, name);
    FILE *out = fopen(path, "wb");
    if (!out)
        return 0;
    fwrite(log_rate, sizeof log_rate, 1, out);
    fwrite(logp, sizeof logp, 1, out);
    fwrite(sampled, sizeof sampled, 1, out);
    fclose(out);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
    return 1;
}

int main(int argc, char **argv)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    nctmc_context *ctx = NULL;
    if (argc != 2 || nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return 1;
    int ok = write_case(ctx, argv[1], "uniform", NCTMC_PROCESS_UNIFORM, 0) &&
             write_case(ctx, argv[1], "mixture", NCTMC_PROCESS_MIXTURE, 2);
    nctmc_context_free(ctx);
    printf("%s (library %s)\n", ok ? "written" : "FAILED", nctmc_version());
    return ok ? 0 : 1;
}
