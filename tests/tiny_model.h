/*
 * tiny_model.h — the small contexts, models, samplers and trainers that the
 * lifetime, error, cancel and getter tests share: one CPU thread, a one-block
 * DiT of width 16, random weights (so that a sample depends on every weight
 * and memory that went bad would show in the tokens, not only under ASan).
 */
#ifndef NCTMC_TINY_MODEL_H
#define NCTMC_TINY_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

#define TINY_S 12
#define TINY_L 8
#define TINY_BATCH 2
#define TINY_STEPS 4

static inline nctmc_context *tiny_context(void)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 1;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    CHECK(st == NCTMC_OK && ctx, "context_create: %s", nctmc_status_string(st));
    return ctx;
}

static inline nctmc_model_config tiny_model_config(int32_t process, int32_t n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = TINY_S;
    c.seq_len = TINY_L;
    c.n_layers = 1;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.n_classes = n_classes;
    c.process = process;
    c.seed = 3;
    return c;
}

/* Every tensor filled with values in +-0.3 drawn from `seed`. */
static inline void tiny_randomize(nctmc_model *m, uint64_t seed)
{
    test_rng rng = test_rng_seed(seed);
    for (int32_t i = 0; i < nctmc_model_n_tensors(m); i++) {
        nctmc_tensor_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (nctmc_model_tensor_info(m, i, &info) != NCTMC_OK)
            continue;
        float *v = malloc((size_t)info.n_elements * sizeof(float));
        if (!v)
            continue;
        test_fill_uniform(&rng, v, (size_t)info.n_elements, -0.3f, 0.3f);
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

static inline nctmc_model *tiny_model(nctmc_context *ctx, int32_t process, int32_t n_classes)
{
    nctmc_model_config c = tiny_model_config(process, n_classes);
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_create(ctx, &c, &m);
    CHECK(st == NCTMC_OK && m, "model_create: %s", nctmc_context_last_error(ctx));
    if (m)
        tiny_randomize(m, 11);
    return m;
}

/* A sampler computing on `ctx` (NULL: the model's context). */
static inline nctmc_sampler *tiny_sampler(const nctmc_model *m, nctmc_context *ctx)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = TINY_BATCH;
    sp.ctx = ctx;
    nctmc_sampler *s = NULL;
    nctmc_status st = nctmc_sampler_create(m, &sp, &s);
    CHECK(st == NCTMC_OK && s, "sampler_create: %s",
          ctx ? nctmc_context_last_error(ctx) : nctmc_model_last_error(m));
    return s;
}

/* Parameters of a short deterministic draw of TINY_BATCH sequences. */
static inline nctmc_sample_params tiny_sample_params(int32_t *out)
{
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = TINY_BATCH;
    p.n_steps = TINY_STEPS;
    p.seed = 7;
    p.tokens_out = out;
    return p;
}

/* A trainer whose learning rate is 0 and without EMA: steps run the whole
 * computation but leave the weights as they are (samples stay comparable),
 * and its checkpoints hold exactly the model's weights. */
static inline nctmc_trainer *tiny_trainer(nctmc_model *m)
{
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 2;
    tp.learning_rate = 0.0f;
    tp.warmup_steps = 0;
    tp.ema_decay = 0.0f;
    nctmc_trainer *t = NULL;
    nctmc_status st = nctmc_trainer_create(m, &tp, &t);
    CHECK(st == NCTMC_OK && t, "trainer_create: %s", nctmc_model_last_error(m));
    return t;
}

/* Clean data tokens for one trainer batch (2 x TINY_L). */
static inline void tiny_batch(int32_t *tokens, int32_t n_data)
{
    for (int32_t i = 0; i < 2 * TINY_L; i++)
        tokens[i] = (i * 5 + 1) % n_data;
}

#endif /* NCTMC_TINY_MODEL_H */
