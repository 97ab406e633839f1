/*
 * test_preset.c — the named recipes (nctmc.h, "Presets"): the list, the
 * values each preset writes (the paper's recipe field by field), the fields
 * it leaves alone, the errors (unknown names list the presets, nothing is
 * written on failure), the versioned-struct rules, and that the cpu-small
 * recipe creates a model and a trainer that train.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

static void test_list(void)
{
    int32_t n = 0;
    bool paper = false, cpu_small = false;
    while (nctmc_preset_name(n) != NULL) {
        const char *name = nctmc_preset_name(n);
        paper = paper || strcmp(name, "paper") == 0;
        cpu_small = cpu_small || strcmp(name, "cpu-small") == 0;
        CHECK(nctmc_preset_description(name) && strlen(nctmc_preset_description(name)) > 10,
              "%s has a description", name);
        CHECK(nctmc_preset_backend(name) != NULL, "%s names a backend", name);
        for (int32_t k = 0; k < n; k++)
            CHECK(strcmp(nctmc_preset_name(k), name) != 0, "%s is listed once", name);
        n++;
    }
    CHECK(n == 2 && paper && cpu_small, "the presets are paper and cpu-small (%d listed)", n);
    CHECK(nctmc_preset_name(-1) == NULL && nctmc_preset_name(1000) == NULL, "out of range");
    CHECK(strcmp(nctmc_preset_backend("paper"), "cuda-bf16") == 0 &&
              strcmp(nctmc_preset_backend("cpu-small"), "cpu") == 0,
          "backends");
    CHECK(nctmc_preset_backend("nope") == NULL && nctmc_preset_backend(NULL) == NULL &&
              nctmc_preset_description("nope") == NULL && nctmc_preset_description(NULL) == NULL,
          "no backend or description for what is not a preset");
}

/* The paper's recipe, every field, over structs whose other fields the
 * caller set. */
static void test_paper_values(void)
{
    nctmc_model_config c;
    nctmc_trainer_params p;
    nctmc_model_config_init(&c);
    nctmc_trainer_params_init(&p);
    c.n_classes = 3;
    c.seed = 99;
    c.mixture_uniform = 0.25f;
    p.seed = 42;
    p.label_dropout = 0.2f;
    char err[256] = "stale";
    CHECK(nctmc_preset_apply("paper", &c, &p, err, sizeof err) == NCTMC_OK, "apply: %s", err);
    CHECK(err[0] == '\0', "success clears the message");
    CHECK(c.vocab_size == 50257 && c.vocab_pad_multiple == 128 && c.seq_len == 512 &&
              c.n_layers == 12 && c.d_model == 768 && c.n_heads == 12 && c.cond_dim == 128 &&
              c.process == NCTMC_PROCESS_UNIFORM && c.schedule == NCTMC_SCHEDULE_LINEAR,
          "the paper's model");
    CHECK(p.batch_size == 512 && p.seq_len == 0 && p.learning_rate == 3e-4f &&
              p.min_lr_ratio == 1.0f && p.warmup_steps == 2500 && p.total_steps == 1000000 &&
              p.beta1 == 0.9f && p.beta2 == 0.999f && p.adam_eps == 1e-8f &&
              p.weight_decay == 0.0f && p.grad_clip == 1.0f && p.ema_decay == 0.9999f &&
              p.time_eps == 1e-3f && p.time_sampling == NCTMC_TIME_SAMPLING_SQRT,
          "the paper's recipe, t from the sqrt density");
    CHECK(c.time_input == NCTMC_TIME_INPUT_LOG_SNR && c.exit_link == NCTMC_EXIT_LINK_DENOISER,
          "the library's measured time input and exit link (%d, %d)", (int)c.time_input,
          (int)c.exit_link);
    CHECK(c.n_classes == 3 && c.seed == 99 && c.mixture_uniform == 0.25f && p.seed == 42 &&
              p.label_dropout == 0.2f && c.struct_size == sizeof c && p.struct_size == sizeof p,
          "the fields a preset does not define keep the caller's values");
}

static void test_errors(void)
{
    nctmc_model_config c, c0;
    nctmc_trainer_params p, p0;
    nctmc_model_config_init(&c);
    nctmc_trainer_params_init(&p);
    c0 = c;
    p0 = p;
    char err[256];
    CHECK(nctmc_preset_apply("Paper", &c, &p, err, sizeof err) == NCTMC_ERR_NOT_FOUND,
          "an unknown name");
    CHECK(strstr(err, "\"Paper\"") && strstr(err, "\"paper\"") && strstr(err, "\"cpu-small\""),
          "the message names the presets: %s", err);
    CHECK(memcmp(&c, &c0, sizeof c) == 0 && memcmp(&p, &p0, sizeof p) == 0,
          "nothing written on failure");
    CHECK(nctmc_preset_apply(NULL, &c, &p, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(err, "NULL"),
          "a NULL name: %s", err);
    CHECK(nctmc_preset_apply("nope", &c, &p, NULL, 0) == NCTMC_ERR_NOT_FOUND,
          "no error buffer");
    char tiny[8];
    CHECK(nctmc_preset_apply("nope", &c, &p, tiny, sizeof tiny) == NCTMC_ERR_NOT_FOUND &&
              strlen(tiny) == sizeof tiny - 1,
          "the message is cut to the buffer");
    /* a bad second struct: the first is not written either */
    nctmc_trainer_params bad = p;
    bad.struct_size = 4;
    CHECK(nctmc_preset_apply("paper", &c, &bad, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT,
          "a struct below its first published size");
    CHECK(strstr(err, "nctmc_trainer_params") != NULL, "names the struct: %s", err);
    CHECK(memcmp(&c, &c0, sizeof c) == 0, "the config is untouched when the params are bad");
    /* either struct may be NULL */
    CHECK(nctmc_preset_apply("paper", NULL, &p, NULL, 0) == NCTMC_OK && p.batch_size == 512 &&
              memcmp(&c, &c0, sizeof c) == 0,
          "params only");
    CHECK(nctmc_preset_apply("paper", &c, NULL, NULL, 0) == NCTMC_OK && c.d_model == 768,
          "config only");
    CHECK(nctmc_preset_apply("cpu-small", NULL, NULL, NULL, 0) == NCTMC_OK, "neither");
}

/* A caller with the first published nctmc_trainer_params (before
 * time_sampling) gets only the bytes it has. */
static void test_older_struct(void)
{
    size_t first = offsetof(nctmc_trainer_params, seed) + sizeof(uint64_t);
    size_t total = first + 32;
    unsigned char *buf = malloc(total);
    memset(buf, 0xAB, total);
    CHECK(nctmc_trainer_params_init_sized((nctmc_trainer_params *)buf, first) == NCTMC_OK,
          "init at the first published size");
    CHECK(nctmc_preset_apply("paper", NULL, (nctmc_trainer_params *)buf, NULL, 0) == NCTMC_OK,
          "apply to an older struct");
    bool guard = true;
    for (size_t k = first; k < total; k++)
        guard = guard && buf[k] == 0xAB;
    nctmc_trainer_params seen;
    memcpy(&seen, buf, first);
    CHECK(guard && seen.batch_size == 512 && seen.ema_decay == 0.9999f &&
              seen.struct_size == first,
          "written up to its size, no further");
    free(buf);
}

/* The cpu-small recipe makes a model and a trainer the library accepts,
 * and its steps lower the loss on a small structured batch. */
static void test_cpu_small_trains(void)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = nctmc_preset_backend("cpu-small");
    cp.n_threads = 2;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");
    nctmc_model_config c;
    nctmc_trainer_params p;
    nctmc_model_config_init(&c);
    nctmc_trainer_params_init(&p);
    CHECK(nctmc_preset_apply("cpu-small", &c, &p, NULL, 0) == NCTMC_OK, "apply");
    c.vocab_size = 8;
    c.seq_len = 16;
    /* 150 steps and 20-step windows: with t from the sqrt density (the
     * preset's since 0.8.0) the reported loss is an importance-weighted
     * estimate, noisier at batch 8 than the evenly stratified one, and 60
     * steps with 10-step windows no longer separated learning from noise */
    p.batch_size = 8;
    p.total_steps = 150;
    p.warmup_steps = 10;
    nctmc_model *m = NULL;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model: %s",
          nctmc_context_last_error(ctx));
    CHECK(m && nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "trainer: %s",
          m ? nctmc_model_last_error(m) : "");
    if (t) {
        int32_t tokens[8 * 16];
        for (int r = 0; r < 8 * 16; r++)
            tokens[r] = (r / 16 + r % 16) % 8;
        nctmc_train_stats s;
        nctmc_train_stats_init(&s);
        double first = 0.0, last = 0.0;
        for (int k = 0; k < 150; k++) {
            CHECK(nctmc_trainer_step(t, tokens, NULL, &s) == NCTMC_OK, "step");
            if (k < 20)
                first += s.loss / 20;
            if (k >= 130)
                last += s.loss / 20;
        }
        printf("cpu-small on a toy batch: loss %.4f -> %.4f\n", first, last);
        CHECK(last < 0.9 * first, "cpu-small learns: %.4f -> %.4f", first, last);
    }
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

int main(void)
{
    test_list();
    test_paper_values();
    test_errors();
    test_older_struct();
    test_cpu_small_trains();
    return test_finish("preset");
}
