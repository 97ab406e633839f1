/*
 * test_abi_brace.c — versioned structs filled the way C programs fill them:
 * `nctmc_X s = { sizeof s, ... }` (built at -O0, where a compiler may leave
 * a struct's padding as whatever the stack held), and the layouts of
 * programs built against 0.7.0's header, whose nctmc_load_params,
 * nctmc_eval_params and nctmc_dataset_info had trailing padding that may
 * hold anything. Each is accepted (nctmc.h, "Versioned structs": no
 * versioned struct has trailing padding on a 64-bit target; the reserved0
 * fields that replace it are never read). meson builds this file with -O0;
 * scripts/test.sh's gcc and clang stages build it with both compilers.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

/* What an embedder writes: the fields it needs and nothing more. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* The layouts of 0.7.0's header (the same fields as now, without reserved0). */
typedef struct {
    size_t struct_size;
    nctmc_load_mapping mapping;
} load_params_old;
typedef struct {
    size_t struct_size;
    int64_t n_sequences;
    int32_t length;
    const int32_t *tokens;
    const int32_t *labels;
    int32_t batch_size, n_time_samples;
    float t_max;
    uint64_t seed;
    int32_t (*progress)(int64_t done, int64_t total, void *user_data);
    void *user_data;
    nctmc_time_sampling time_sampling;
} eval_params_old;
typedef struct {
    size_t struct_size;
    int32_t vocab_size, seq_len, n_classes;
    int64_t n_tokens, n_sequences;
    uint32_t checksum;
} dataset_info_old;

#define S 5
#define L 4
#define N 2

/* Fills a large part of the stack below the caller with a non-zero byte, so
 * that the padding of the structs the next call declares (on the same
 * stack) is non-zero unless something zeroes it. */
static void dirty_stack(unsigned char value)
{
    volatile unsigned char junk[16384];
    for (size_t k = 0; k < sizeof junk; k++)
        junk[k] = value;
}

typedef struct objects {
    nctmc_context *ctx;
    nctmc_model *model;
    char dir[256];
    char model_path[512];
    char data_path[512];
    int32_t tokens[N * L];
} objects;

static int32_t count_progress(int64_t done, int64_t total, void *user)
{
    (void)done;
    (void)total;
    ++*(int *)user;
    return 1;
}

/* Every call with a brace-initialised struct, compiled at -O0. */
static void calls_with_brace_initialisers(objects *o)
{
    nctmc_context_params cp = {sizeof cp, "cpu", 1};
    CHECK(nctmc_context_create(&cp, &o->ctx) == NCTMC_OK, "context: %s",
          nctmc_context_last_error(NULL));
    if (!o->ctx)
        return;
    nctmc_model_config mc = {sizeof mc, S, 0, L, 1, 8, 2, 4};
    CHECK(nctmc_model_create(o->ctx, &mc, &o->model) == NCTMC_OK, "model: %s",
          nctmc_context_last_error(o->ctx));
    if (!o->model)
        return;
    nctmc_model_config got = {sizeof got};
    CHECK(nctmc_model_get_config(o->model, &got) == NCTMC_OK && got.vocab_size == S &&
              got.seq_len == L,
          "get_config: %s", nctmc_model_last_error(o->model));
    nctmc_tensor_info ti = {sizeof ti};
    CHECK(nctmc_model_tensor_info(o->model, 0, &ti) == NCTMC_OK && ti.n_elements > 0,
          "tensor_info: %s", nctmc_model_last_error(o->model));

    float log_rate[N * L], logp[N * L * S], times[N] = {0.25f, 0.75f};
    nctmc_forward_params fp = {sizeof fp, N, L, o->tokens, times, NULL, log_rate, logp};
    CHECK(nctmc_model_forward(o->model, &fp) == NCTMC_OK, "forward: %s",
          nctmc_model_last_error(o->model));

    CHECK(nctmc_model_save(o->model, o->model_path) == NCTMC_OK, "save: %s",
          nctmc_model_last_error(o->model));
    nctmc_load_params lp = {sizeof lp, NCTMC_LOAD_COPY};
    nctmc_model *loaded = NULL;
    CHECK(nctmc_model_load_ex(o->ctx, o->model_path, &lp, &loaded) == NCTMC_OK,
          "load_ex {sizeof lp, NCTMC_LOAD_COPY}: %s", nctmc_context_last_error(o->ctx));
    nctmc_model_free(loaded);

    int progress_calls = 0;
    nctmc_eval_params ep = {sizeof ep, N, L, o->tokens, NULL, 2, 2, 0.0f, 3,
                            count_progress, &progress_calls};
    nctmc_eval_result er = {sizeof er};
    CHECK(nctmc_eval(o->model, &ep, &er) == NCTMC_OK && er.nelbo_bits_per_token > 0.0 &&
              progress_calls > 0,
          "eval {sizeof ep, ...}: %s", nctmc_model_last_error(o->model));

    nctmc_sampler_params sp = {sizeof sp, N, L};
    nctmc_sampler *sampler = NULL;
    CHECK(nctmc_sampler_create(o->model, &sp, &sampler) == NCTMC_OK, "sampler_create: %s",
          nctmc_model_last_error(o->model));
    int32_t out[N * L];
    nctmc_sample_params sa = {sizeof sa, N, L, NCTMC_SAMPLE_TAU_LEAPING, 4, 0, 0.98f, 1e-3f, 1.0f};
    sa.cfg_scale = 1.0f;
    sa.tokens_out = out;
    CHECK(sampler && nctmc_sample(sampler, &sa) == NCTMC_OK, "sample: %s",
          sampler ? nctmc_sampler_last_error(sampler) : "no sampler");
    nctmc_sampler_free(sampler);

    nctmc_trainer_params tp = {sizeof tp, N,    0,    1e-3f, 0.1f, 1,   10,
                               0.9f,       0.999f, 1e-8f, 0.0f,  1.0f, 0.0f, 1e-3f};
    nctmc_trainer *trainer = NULL;
    CHECK(nctmc_trainer_create(o->model, &tp, &trainer) == NCTMC_OK, "trainer_create: %s",
          nctmc_model_last_error(o->model));
    nctmc_train_stats ts = {sizeof ts};
    nctmc_trainer_state st = {sizeof st};
    nctmc_trainer_params tq = {sizeof tq};
    CHECK(trainer && nctmc_trainer_step(trainer, o->tokens, NULL, &ts) == NCTMC_OK &&
              nctmc_trainer_get_state(trainer, &st) == NCTMC_OK && st.step == 1 &&
              nctmc_trainer_get_params(trainer, &tq) == NCTMC_OK && tq.batch_size == N,
          "trainer: %s", trainer ? nctmc_trainer_last_error(trainer) : "none");
    nctmc_trainer_free(trainer);

    CHECK(nctmc_dataset_write(o->ctx, o->data_path, o->tokens, N * L, S, L, NULL, 0) ==
              NCTMC_OK,
          "dataset_write: %s", nctmc_context_last_error(o->ctx));
    nctmc_dataset *ds = NULL;
    nctmc_dataset_info di = {sizeof di};
    CHECK(nctmc_dataset_open(o->ctx, o->data_path, &ds) == NCTMC_OK &&
              nctmc_dataset_get_info(ds, &di) == NCTMC_OK && di.n_tokens == N * L,
          "dataset info: %s", nctmc_context_last_error(o->ctx));
    nctmc_dataset_free(ds);
}

/* A program built against 0.7.0's header: the struct's padding is 0xFF. */
static void calls_with_old_padding(objects *o)
{
    load_params_old lp;
    memset(&lp, 0xFF, sizeof lp);
    lp.struct_size = sizeof lp;
    lp.mapping = NCTMC_LOAD_COPY;
    CHECK(sizeof lp <= sizeof(nctmc_load_params) && sizeof(eval_params_old) <=
              sizeof(nctmc_eval_params) && sizeof(dataset_info_old) == sizeof(nctmc_dataset_info),
          "0.7.0's layouts are no larger than the current ones");
    nctmc_model *loaded = NULL;
    nctmc_status status = nctmc_model_load_ex(o->ctx, o->model_path,
                                              (const nctmc_load_params *)(void *)&lp, &loaded);
    CHECK(status == NCTMC_OK, "load_ex, 0.7.0 layout with non-zero padding: %d (%s)", status,
          nctmc_context_last_error(o->ctx));
    nctmc_model_free(loaded);

    eval_params_old ep;
    memset(&ep, 0xFF, sizeof ep);
    ep.struct_size = sizeof ep;
    ep.n_sequences = N;
    ep.length = L;
    ep.tokens = o->tokens;
    ep.labels = NULL;
    ep.batch_size = 2;
    ep.n_time_samples = 2;
    ep.t_max = 0.0f;
    ep.seed = 3;
    ep.progress = NULL;
    ep.user_data = NULL;
    ep.time_sampling = NCTMC_TIME_SAMPLING_UNIFORM;
    nctmc_eval_result er = {sizeof er};
    status = nctmc_eval(o->model, (const nctmc_eval_params *)(void *)&ep, &er);
    CHECK(status == NCTMC_OK, "eval, 0.7.0 layout with non-zero padding: %d (%s)", status,
          nctmc_model_last_error(o->model));

    /* an output: the padding keeps what the caller had */
    dataset_info_old di;
    memset(&di, 0xFF, sizeof di);
    di.struct_size = sizeof di;
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(o->ctx, o->data_path, &ds) == NCTMC_OK &&
              nctmc_dataset_get_info(ds, (nctmc_dataset_info *)(void *)&di) == NCTMC_OK &&
              di.n_tokens == N * L,
          "dataset info into 0.7.0's layout");
    nctmc_dataset_free(ds);

    /* what is past the reserved field is still checked */
    unsigned char bigger[sizeof(nctmc_load_params) + 8];
    memset(bigger, 0, sizeof bigger);
    nctmc_load_params_init_sized((nctmc_load_params *)(void *)bigger, sizeof bigger);
    bigger[sizeof(nctmc_load_params)] = 1;
    status = nctmc_model_load_ex(o->ctx, o->model_path,
                                 (const nctmc_load_params *)(void *)bigger, &loaded);
    CHECK(status == NCTMC_ERR_UNSUPPORTED && loaded == NULL,
          "a non-zero byte past the reserved field is a newer header's field: %d", status);
}

int main(void)
{
    objects o;
    memset(&o, 0, sizeof o);
    for (int i = 0; i < N * L; i++)
        o.tokens[i] = (i * 3 + 1) % S;
    if (!test_make_temp_dir(o.dir, sizeof o.dir)) {
        CHECK(0, "temporary folder");
        return test_finish("abi_brace");
    }
    test_path(o.model_path, sizeof o.model_path, o.dir, "model.safetensors");
    test_path(o.data_path, sizeof o.data_path, o.dir, "tokens.nctmc");
    dirty_stack(0xA5);
    calls_with_brace_initialisers(&o);
    if (o.model)
        calls_with_old_padding(&o);
    nctmc_model_free(o.model);
    nctmc_context_free(o.ctx);
    test_remove_dir(o.dir);
    return test_finish("abi_brace");
}
