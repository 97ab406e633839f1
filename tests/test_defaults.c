/*
 * test_defaults.c — the best measured recipe by default (issue 34), through
 * the public API: nctmc_model_config_init() leaves the exit link to
 * NCTMC_EXIT_LINK_AUTO, which a new model resolves by its process
 * (denoiser for uniform and mixture, noise posterior for masked) while an
 * explicit link keeps its meaning; nctmc_trainer_params_init() draws t from
 * the sqrt density; nctmc_sample_params_from_model() gives a model its
 * process's sampling settings, touches nothing else, and returns what a
 * trainer's checkpoint carries after a save and a load; a 0.2.0 checkpoint,
 * which carries none, gets its process's.
 *
 *   test_defaults [DIR_OF_LEGACY_CHECKPOINTS]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

static nctmc_context *make_ctx(void)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return NULL;
    return ctx;
}

/* A small model of the process, with the link given (or the default). */
static nctmc_model *make_model(nctmc_context *ctx, nctmc_process process, bool set_link,
                               nctmc_exit_link link)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 6;
    c.seq_len = 8;
    c.n_layers = 1;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 8;
    c.process = process;
    if (set_link)
        c.exit_link = link;
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_create(ctx, &c, &m);
    CHECK(st == NCTMC_OK, "create (process %d): %s", (int)process, nctmc_context_last_error(ctx));
    return m;
}

static nctmc_exit_link link_of(const nctmc_model *m)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(m, &c);
    return c.exit_link;
}

static void test_init_defaults(void)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    CHECK(c.exit_link == NCTMC_EXIT_LINK_AUTO, "config init: exit link auto (%d)",
          (int)c.exit_link);
    CHECK(c.time_input == NCTMC_TIME_INPUT_LOG_SNR, "config init: log-SNR time input");
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    CHECK(p.time_sampling == NCTMC_TIME_SAMPLING_SQRT, "trainer init: t ~ sqrt (%d)",
          (int)p.time_sampling);
}

/* AUTO resolves by process; explicit links are kept as given. */
static void test_link_by_process(nctmc_context *ctx)
{
    static const struct {
        nctmc_process process;
        nctmc_exit_link want;
    } cases[] = {{NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_DENOISER},
                 {NCTMC_PROCESS_MASKED, NCTMC_EXIT_LINK_NOISE_POSTERIOR},
                 {NCTMC_PROCESS_MIXTURE, NCTMC_EXIT_LINK_DENOISER}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nctmc_model *m = make_model(ctx, cases[i].process, false, 0);
        if (m)
            CHECK(link_of(m) == cases[i].want, "process %d: default link %d, want %d",
                  (int)cases[i].process, (int)link_of(m), (int)cases[i].want);
        nctmc_model_free(m);
        nctmc_model *a = make_model(ctx, cases[i].process, true, NCTMC_EXIT_LINK_AUTO);
        if (a)
            CHECK(link_of(a) == cases[i].want, "process %d: explicit auto", (int)cases[i].process);
        nctmc_model_free(a);
        for (nctmc_exit_link l = NCTMC_EXIT_LINK_SIGMA; l <= NCTMC_EXIT_LINK_DENOISER; l++) {
            nctmc_model *e = make_model(ctx, cases[i].process, true, l);
            if (e)
                CHECK(link_of(e) == l, "process %d: explicit link %d kept (got %d)",
                      (int)cases[i].process, (int)l, (int)link_of(e));
            nctmc_model_free(e);
        }
    }
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.exit_link = -2;
    nctmc_model *bad = NULL;
    CHECK(nctmc_model_create(ctx, &c, &bad) == NCTMC_ERR_INVALID_ARGUMENT && bad == NULL,
          "exit_link -2 is refused");
    CHECK(strstr(nctmc_context_last_error(ctx), "exit_link") != NULL, "the message names it: %s",
          nctmc_context_last_error(ctx));
}

static void check_settings(const nctmc_model *m, nctmc_sample_method method,
                           nctmc_time_grid grid, int32_t steps, const char *what)
{
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.cfg_scale = 2.5f;
    p.seed = 77;
    p.batch = 3;
    nctmc_status st = nctmc_sample_params_from_model(m, &p);
    CHECK(st == NCTMC_OK, "%s: from_model: %s", what, nctmc_model_last_error(m));
    CHECK(p.method == method && p.grid == grid && p.n_steps == steps,
          "%s: method %d grid %d steps %d, want %d %d %d", what, (int)p.method, (int)p.grid,
          (int)p.n_steps, (int)method, (int)grid, (int)steps);
    CHECK(p.cfg_scale == 2.5f && p.seed == 77 && p.batch == 3 && p.struct_size == sizeof p &&
              p.t_min == 1e-3f && p.temperature == 1.0f,
          "%s: the other fields are left as they were", what);
}

static void test_sampling_by_process(nctmc_context *ctx)
{
    nctmc_model *u = make_model(ctx, NCTMC_PROCESS_UNIFORM, false, 0);
    nctmc_model *k = make_model(ctx, NCTMC_PROCESS_MASKED, false, 0);
    nctmc_model *x = make_model(ctx, NCTMC_PROCESS_MIXTURE, false, 0);
    if (u)
        check_settings(u, NCTMC_SAMPLE_POSTERIOR, NCTMC_GRID_UNIFORM, 64, "uniform");
    if (k)
        check_settings(k, NCTMC_SAMPLE_TAU_LEAPING, NCTMC_GRID_UNIFORM, 128, "masked");
    if (x)
        check_settings(x, NCTMC_SAMPLE_POSTERIOR, NCTMC_GRID_UNIFORM, 128, "mixture");
    if (u) {
        CHECK(nctmc_sample_params_from_model(u, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
              "NULL params");
        CHECK(strstr(nctmc_model_last_error(u), "params is NULL") != NULL, "message: %s",
              nctmc_model_last_error(u));
        nctmc_sample_params small;
        memset(&small, 0, sizeof small);
        small.struct_size = sizeof(size_t);
        CHECK(nctmc_sample_params_from_model(u, &small) == NCTMC_ERR_INVALID_ARGUMENT &&
                  small.method == 0 && small.n_steps == 0,
              "a struct_size below the first published one is refused, nothing written");
    }
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    CHECK(nctmc_sample_params_from_model(NULL, &p) == NCTMC_ERR_INVALID_ARGUMENT &&
              p.method == NCTMC_SAMPLE_TAU_LEAPING && p.n_steps == 128,
          "NULL model: refused, params untouched");
    nctmc_model_free(u);
    nctmc_model_free(k);
    nctmc_model_free(x);
}

/* A trainer's checkpoint carries the settings: a masked model trained and
 * saved loads with tau-leaping and 128 steps; a model whose process
 * recommends otherwise (uniform) loads with its own. Then the same file,
 * saved again by nctmc_model_save(), still carries them. */
static void test_round_trip(nctmc_context *ctx, nctmc_process process,
                            nctmc_sample_method method, int32_t steps, const char *path)
{
    nctmc_model *m = make_model(ctx, process, false, 0);
    if (!m)
        return;
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 2;
    tp.total_steps = 1;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(m, &tp, &t) == NCTMC_OK, "trainer: %s", nctmc_model_last_error(m));
    int32_t tokens[2 * 8];
    for (int i = 0; i < 16; i++)
        tokens[i] = i % 5;
    nctmc_train_stats stats;
    nctmc_train_stats_init(&stats);
    CHECK(t && nctmc_trainer_step(t, tokens, NULL, &stats) == NCTMC_OK, "one step");
    CHECK(t && nctmc_trainer_save(t, path) == NCTMC_OK, "save: %s",
          t ? nctmc_trainer_last_error(t) : "");
    nctmc_trainer_free(t);
    nctmc_model_free(m);

    /* the file names the settings */
    FILE *f = fopen(path, "rb");
    char head[8192] = {0};
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f)
        fclose(f);
    head[n] = '\0';
    char want[64];
    snprintf(want, sizeof want, "\"nctmc.sample.steps\":\"%d\"", (int)steps);
    CHECK(strstr(head + 8, "\"nctmc.sample.method\"") != NULL && strstr(head + 8, want) != NULL,
          "%s: the header holds nctmc.sample.* (%s)", path, want);

    nctmc_model *back = NULL;
    CHECK(nctmc_model_load(ctx, path, &back) == NCTMC_OK, "load: %s",
          nctmc_context_last_error(ctx));
    if (back) {
        check_settings(back, method, NCTMC_GRID_UNIFORM, steps, path);
        CHECK(nctmc_model_save(back, path) == NCTMC_OK, "save again");
        nctmc_model_free(back);
        back = NULL;
        CHECK(nctmc_model_load(ctx, path, &back) == NCTMC_OK, "load again");
        if (back)
            check_settings(back, method, NCTMC_GRID_UNIFORM, steps, "saved again");
        nctmc_model_free(back);
    }
    remove(path);
}

/* A model made in memory and saved without a trainer carries nothing: the
 * file is what earlier libraries wrote (no nctmc.sample.* keys). */
static void test_untrained_save(nctmc_context *ctx, const char *path)
{
    nctmc_model *m = make_model(ctx, NCTMC_PROCESS_MASKED, false, 0);
    if (!m)
        return;
    CHECK(nctmc_model_save(m, path) == NCTMC_OK, "save");
    nctmc_model_free(m);
    FILE *f = fopen(path, "rb");
    char head[8192] = {0};
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f)
        fclose(f);
    head[n] = '\0';
    CHECK(n > 8 && strstr(head + 8, "nctmc.sample.") == NULL, "no nctmc.sample.* keys");
    remove(path);
}

/* 0.2.0's checkpoints carry no settings: their process's. */
static void test_legacy(nctmc_context *ctx, const char *dir)
{
    static const struct {
        const char *file;
        nctmc_sample_method method;
        int32_t steps;
    } files[] = {{"v0.2.0-uniform.safetensors", NCTMC_SAMPLE_POSTERIOR, 64},
                 {"v0.2.0-mixture.safetensors", NCTMC_SAMPLE_POSTERIOR, 128}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].file);
        nctmc_model *m = NULL;
        CHECK(nctmc_model_load(ctx, path, &m) == NCTMC_OK, "load %s: %s", path,
              nctmc_context_last_error(ctx));
        if (!m)
            continue;
        CHECK(link_of(m) == NCTMC_EXIT_LINK_SIGMA, "%s keeps the sigma link", files[i].file);
        check_settings(m, files[i].method, NCTMC_GRID_UNIFORM, files[i].steps, files[i].file);
        nctmc_model_free(m);
    }
}

int main(int argc, char **argv)
{
    nctmc_context *ctx = make_ctx();
    CHECK(ctx != NULL, "context");
    if (!ctx)
        return test_finish("defaults");
    test_init_defaults();
    test_link_by_process(ctx);
    test_sampling_by_process(ctx);
    test_round_trip(ctx, NCTMC_PROCESS_MASKED, NCTMC_SAMPLE_TAU_LEAPING, 128,
                    "test_defaults_masked.safetensors");
    test_round_trip(ctx, NCTMC_PROCESS_UNIFORM, NCTMC_SAMPLE_POSTERIOR, 64,
                    "test_defaults_uniform.safetensors");
    test_untrained_save(ctx, "test_defaults_plain.safetensors");
    if (argc > 1)
        test_legacy(ctx, argv[1]);
    else
        CHECK(false, "usage: test_defaults DIR_OF_LEGACY_CHECKPOINTS");
    nctmc_context_free(ctx);
    return test_finish("defaults");
}
