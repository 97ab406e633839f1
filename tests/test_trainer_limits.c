/*
 * test_trainer_limits.c — what a trainer checkpoint's metadata may ask for
 * (issue 10, items 5 and 7): a run's counters stop at their limit instead of
 * overflowing, and every state a trainer reaches saves to a file the loader
 * accepts; sizes past the bounds are refused before anything is allocated;
 * nctmc_trainer_inspect() reads the saved parameters and state without
 * creating a trainer, whatever batch size the file names.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "train/trainer.h"

static nctmc_context *ctx;
static char dir[256];

static nctmc_model *tiny_model(int32_t seq_len)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 4;
    c.seq_len = seq_len;
    c.n_layers = 1;
    c.d_model = 4;
    c.n_heads = 1;
    c.cond_dim = 2;
    c.process = NCTMC_PROCESS_UNIFORM;
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &c, &m) != NCTMC_OK)
        return NULL;
    return m;
}

static nctmc_trainer *tiny_trainer(nctmc_model *m, int32_t batch)
{
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = batch;
    p.ema_decay = 0.0f;
    nctmc_trainer *t = NULL;
    if (nctmc_trainer_create(m, &p, &t) != NCTMC_OK)
        return NULL;
    return t;
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Item 5: data_position (and step) near the limit. */
static void test_counter_limits(void)
{
    char ds_path[512], ckpt[512];
    test_path(ds_path, sizeof ds_path, dir, "stream.bin");
    test_path(ckpt, sizeof ckpt, dir, "limit.safetensors");
    int32_t tokens[64];
    for (int i = 0; i < 64; i++)
        tokens[i] = i % 4;
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_write(ctx, ds_path, tokens, 64, 4, 0, NULL, 0) == NCTMC_OK &&
              nctmc_dataset_open(ctx, ds_path, &ds) == NCTMC_OK,
          "a stream shard");
    nctmc_model *m = tiny_model(8);
    nctmc_trainer *t = m ? tiny_trainer(m, 2) : NULL;
    CHECK(t != NULL, "a trainer");
    if (!t || !ds)
        return;
    nctmc_trainer_state s;
    nctmc_trainer_state_init(&s);

    /* the last batch that fits is taken; the position lands on the limit */
    t->state.data_position = TRAINER_COUNTER_MAX - 2;
    CHECK(nctmc_trainer_step_dataset(t, ds, NULL) == NCTMC_OK, "the last batch: %s",
          nctmc_trainer_last_error(t));
    nctmc_trainer_get_state(t, &s);
    CHECK(s.data_position == TRAINER_COUNTER_MAX && s.step == 1, "position at the limit");
    CHECK(nctmc_trainer_step_dataset(t, ds, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "no step past the limit");
    CHECK(strstr(nctmc_trainer_last_error(t), "limit") != NULL, "the message says so: %s",
          nctmc_trainer_last_error(t));
    nctmc_trainer_get_state(t, &s);
    CHECK(s.data_position == TRAINER_COUNTER_MAX && s.step == 1,
          "a refused step changes nothing");
    /* the state reached saves to a file that resumes */
    nctmc_model *m2 = NULL;
    nctmc_trainer *t2 = NULL;
    CHECK(nctmc_trainer_save(t, ckpt) == NCTMC_OK, "save at the limit");
    CHECK(nctmc_trainer_resume(ctx, ckpt, NULL, &m2, &t2) == NCTMC_OK,
          "a checkpoint at the limit loads: %s", nctmc_context_last_error(ctx));
    if (t2) {
        CHECK(nctmc_trainer_step_dataset(t2, ds, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
              "and refuses to go on, cleanly");
        /* explicit batches do not move the position, so they may go on */
        int32_t batch[16] = {0};
        CHECK(nctmc_trainer_step(t2, batch, NULL, NULL) == NCTMC_OK, "an explicit batch");
    }
    nctmc_trainer_free(t2);
    nctmc_model_free(m2);

    /* as the issue found it: INT64_MAX in a file (the library never writes
     * it; here the state is set behind its back) is refused at load */
    t->state.data_position = INT64_MAX;
    CHECK(nctmc_trainer_step_dataset(t, ds, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "INT64_MAX: no step, no overflow");
    CHECK(nctmc_trainer_save(t, ckpt) == NCTMC_OK, "write such a file");
    CHECK(nctmc_trainer_resume(ctx, ckpt, NULL, &m2, &t2) == NCTMC_ERR_FORMAT && !m2 && !t2,
          "the loader refuses it");
    CHECK(strstr(nctmc_context_last_error(ctx), "past the limit") != NULL, "says why: %s",
          nctmc_context_last_error(ctx));
    t->state.data_position = 0;
    t->state.step = TRAINER_COUNTER_MAX;
    int32_t batch[16] = {0};
    CHECK(nctmc_trainer_step(t, batch, NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "no step past the step limit either");
    /* a diverged run is not saved over the last good checkpoint: the
     * loader would refuse the file (found by fuzz_loaders) */
    t->state.step = 3;
    t->state.data_position = 6;
    CHECK(nctmc_trainer_save(t, ckpt) == NCTMC_OK, "a good checkpoint");
    size_t good_size = 0;
    uint8_t *good = test_read_bytes(ckpt, &good_size);
    float inf = INFINITY;
    t->be->ops->upload(t->be, t->adam_m + 1, &inf, sizeof inf);
    t->be->ops->synchronize(t->be);
    CHECK(nctmc_trainer_save(t, ckpt) == NCTMC_ERR_NON_FINITE, "a non-finite moment: not saved");
    size_t now_size = 0;
    uint8_t *now = test_read_bytes(ckpt, &now_size);
    CHECK(good && now && now_size == good_size && memcmp(good, now, good_size) == 0,
          "the good checkpoint is untouched");
    CHECK(test_count_entries(dir) == 2, "no temporary file is left");
    free(good);
    free(now);
    /* the model trained in place, saved on its own: a non-finite weight is
     * refused the same way, the last good file kept */
    char model_path[512];
    test_path(model_path, sizeof model_path, dir, "diverged-model.safetensors");
    CHECK(nctmc_model_save(m, model_path) == NCTMC_OK, "a good model file");
    good = test_read_bytes(model_path, &good_size);
    float nan = NAN;
    m->ctx->backend->ops->upload(m->ctx->backend, m->weights + 5, &nan, sizeof nan);
    m->ctx->backend->ops->synchronize(m->ctx->backend);
    CHECK(nctmc_model_save(m, model_path) == NCTMC_ERR_NON_FINITE, "a NaN weight: not saved");
    CHECK(strstr(nctmc_model_last_error(m), "not finite") != NULL, "says why: %s",
          nctmc_model_last_error(m));
    now = test_read_bytes(model_path, &now_size);
    CHECK(good && now && now_size == good_size && memcmp(good, now, good_size) == 0,
          "the good model file is untouched");
    nctmc_model *back = NULL;
    CHECK(nctmc_model_load(ctx, model_path, &back) == NCTMC_OK, "and still loads");
    nctmc_model_free(back);
    CHECK(remove(model_path) == 0 && test_count_entries(dir) == 2,
          "no temporary file is left");
    free(good);
    free(now);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_dataset_free(ds);
}

/* Item 7: inspecting costs no trainer; sizes are bounded at load. */
static void test_inspect_and_bounds(void)
{
    char ckpt[512], model_only[512];
    test_path(ckpt, sizeof ckpt, dir, "big-batch.safetensors");
    test_path(model_only, sizeof model_only, dir, "model.safetensors");
    nctmc_model *m = tiny_model(128);
    nctmc_trainer *t = m ? tiny_trainer(m, 2) : NULL;
    CHECK(t != NULL, "a trainer");
    if (!t)
        return;
    CHECK(nctmc_model_save(m, model_only) == NCTMC_OK, "a model-only checkpoint");
    /* a batch the file names but did not pay for: 32768 x 128 tokens, the
     * largest allowed, a workspace of gigabytes */
    t->params.batch_size = 32768;
    t->state.step = 7;
    t->state.data_position = 14;
    CHECK(nctmc_trainer_save(t, ckpt) == NCTMC_OK, "save");
    nctmc_trainer_params p;
    nctmc_trainer_state s;
    nctmc_trainer_params_init(&p);
    nctmc_trainer_state_init(&s);
    long before = max_rss_kib();
    CHECK(nctmc_trainer_inspect(ctx, ckpt, &p, &s) == NCTMC_OK, "inspect: %s",
          nctmc_context_last_error(ctx));
    long grown = max_rss_kib() - before;
    CHECK(grown < 32 * 1024, "inspecting took %ld KiB more", grown);
    CHECK(p.batch_size == 32768 && s.step == 7 && s.data_position == 14 &&
              p.learning_rate == t->params.learning_rate && s.seed == t->params.seed,
          "the saved values come back");
    CHECK(nctmc_trainer_inspect(ctx, ckpt, NULL, NULL) == NCTMC_OK, "NULL outputs");
    CHECK(nctmc_trainer_inspect(ctx, model_only, &p, &s) == NCTMC_ERR_NOT_FOUND,
          "a model-only checkpoint has no training state");
    nctmc_trainer_params wrong = p;
    wrong.struct_size = 3;
    CHECK(nctmc_trainer_inspect(ctx, ckpt, &wrong, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "a bad struct_size");
    CHECK(nctmc_trainer_inspect(NULL, ckpt, &p, &s) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ctx");

    /* past the bound: 65536 x 128 tokens per step is refused by inspect and
     * by resume, before a model or trainer is made */
    t->params.batch_size = 65536;
    CHECK(nctmc_trainer_save(t, ckpt) == NCTMC_OK, "save a file asking for too much");
    CHECK(nctmc_trainer_inspect(ctx, ckpt, &p, &s) == NCTMC_ERR_FORMAT, "inspect refuses it");
    CHECK(strstr(nctmc_context_last_error(ctx), "tokens per step") != NULL, "says why: %s",
          nctmc_context_last_error(ctx));
    nctmc_model *m2 = NULL;
    nctmc_trainer *t2 = NULL;
    before = max_rss_kib();
    CHECK(nctmc_trainer_resume(ctx, ckpt, NULL, &m2, &t2) == NCTMC_ERR_FORMAT && !m2 && !t2,
          "resume refuses it");
    grown = max_rss_kib() - before;
    CHECK(grown < 32 * 1024, "refusing took %ld KiB more", grown);
    /* the same bound holds for a trainer made in memory */
    nctmc_trainer_params big;
    nctmc_trainer_params_init(&big);
    big.batch_size = 65536;
    CHECK(nctmc_trainer_create(m, &big, &t2) == NCTMC_ERR_INVALID_ARGUMENT && !t2,
          "nctmc_trainer_create applies the bound");
    nctmc_trainer_free(t);
    nctmc_model_free(m);
}

int main(void)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    if (!test_make_temp_dir(dir, sizeof dir) || nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "test_trainer_limits: no scratch directory or context\n");
        return 1;
    }
    test_counter_limits();
    test_inspect_and_bounds();
    nctmc_context_free(ctx);
    test_remove_dir(dir);
    return test_finish("trainer_limits");
}
