/*
 * test_errors.c — errors a binding can read (issue 8 §4):
 *
 *  1. nctmc_context_create() writes why it failed to the caller's
 *     error_buffer (NUL-terminated, truncated to fit, nothing written past
 *     it), "" on success, and never a buffer the caller's struct_size does
 *     not cover.
 *  2. A successful call clears the last error of the handle it reports to:
 *     context, model (non-const calls), tokenizer, dataset, trainer,
 *     sampler; a successful const-model call leaves the model's message.
 *  3. A sampler's errors live on the sampler (not its context); a failed
 *     nctmc_sampler_create() reports to the context it was given, else to
 *     the model.
 *  4. Const-model calls failing on several threads at once: each message is
 *     whole (written under the model's lock) and a success never clears it.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "tiny_model.h"

static char tmp_dir[512];

/* ---- 1: context creation ---------------------------------------------------- */

static void test_context_error_buffer(void)
{
    char buf[256];
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    CHECK(p.error_buffer == NULL && p.error_buffer_size == 0, "error buffer defaults");
    p.backend = "no-such-backend";
    p.error_buffer = buf;
    p.error_buffer_size = sizeof buf;
    nctmc_context *ctx = (nctmc_context *)&ctx;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_NOT_FOUND && ctx == NULL,
          "unknown backend accepted");
    CHECK(strstr(buf, "unknown backend") && strstr(buf, "no-such-backend"),
          "message: \"%s\"", buf);

    p.backend = "cpu";
    p.n_threads = -3;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_INVALID_ARGUMENT, "n_threads -3 accepted");
    CHECK(strstr(buf, "n_threads") != NULL, "message: \"%s\"", buf);

    p.n_threads = 1;
    CHECK(nctmc_context_create(&p, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "out NULL accepted");
    CHECK(strstr(buf, "out is NULL") != NULL, "message: \"%s\"", buf);

    /* truncation: 9 characters and the NUL, the byte after untouched */
    char small[12];
    memset(small, '#', sizeof small);
    p.backend = "no-such-backend";
    p.error_buffer = small;
    p.error_buffer_size = 10;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_NOT_FOUND, "unknown backend accepted");
    CHECK(small[9] == '\0' && strlen(small) == 9 && small[10] == '#' && small[11] == '#',
          "truncated message \"%.12s\"", small);
    CHECK(strncmp(small, "unknown b", 9) == 0, "truncated message \"%s\"", small);

    /* a success leaves "" */
    memset(buf, 'x', sizeof buf);
    buf[sizeof buf - 1] = '\0';
    p.backend = "cpu";
    p.error_buffer = buf;
    p.error_buffer_size = sizeof buf;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_OK && ctx, "cpu context");
    CHECK(buf[0] == '\0', "after a success the buffer holds \"%.20s...\"", buf);
    CHECK(strcmp(nctmc_context_last_error(ctx), "") == 0, "a new context has an error");
    nctmc_context_free(ctx);

    /* a NULL buffer with a size, and a size of 0, are ignored */
    p.backend = "no-such-backend";
    p.error_buffer = NULL;
    p.error_buffer_size = 64;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_NOT_FOUND, "NULL buffer");
    memset(small, '#', sizeof small);
    p.error_buffer = small;
    p.error_buffer_size = 0;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_NOT_FOUND && small[0] == '#',
          "a buffer of size 0 was written");

    /* a struct that ends before the buffer fields: they are not read */
    memset(small, '#', sizeof small);
    p.error_buffer = small;
    p.error_buffer_size = sizeof small;
    p.struct_size = offsetof(nctmc_context_params, error_buffer);
    ctx = NULL;
    nctmc_context_create(&p, &ctx);
    CHECK(small[0] == '#', "the buffer beyond the caller's struct_size was written");
    nctmc_context_free(ctx);
}

/* ---- 2: success clears ----------------------------------------------------- */

static void test_context_clears(nctmc_context *ctx)
{
    nctmc_model_config c = tiny_model_config(NCTMC_PROCESS_UNIFORM, 0);
    c.n_heads = 5;   /* 16 is not divisible by 5 */
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) != NCTMC_OK, "a bad config was accepted");
    CHECK(nctmc_context_last_error(ctx)[0] != '\0', "no message for a bad config");
    c.n_heads = 2;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model_create");
    CHECK(strcmp(nctmc_context_last_error(ctx), "") == 0,
          "model_create succeeded but the context keeps \"%s\"", nctmc_context_last_error(ctx));

    /* forward_ex reports to its context */
    int32_t tokens[TINY_L] = {0};
    float times[1] = {0.5f}, log_rate[TINY_L];
    nctmc_forward_params f;
    nctmc_forward_params_init(&f);
    f.batch = 1;
    f.length = TINY_L + 1;
    f.tokens = tokens;
    f.times = times;
    f.log_rate = log_rate;
    CHECK(nctmc_model_forward_ex(m, ctx, &f) != NCTMC_OK && nctmc_context_last_error(ctx)[0],
          "forward_ex with a too long length");
    f.length = TINY_L;
    CHECK(nctmc_model_forward_ex(m, ctx, &f) == NCTMC_OK, "forward_ex");
    CHECK(strcmp(nctmc_context_last_error(ctx), "") == 0, "forward_ex left \"%s\"",
          nctmc_context_last_error(ctx));

    /* tokenizer and dataset creation report to the context */
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_chars(ctx, "\xff", 1, &tok) != NCTMC_OK &&
              nctmc_context_last_error(ctx)[0],
          "invalid UTF-8 corpus");
    CHECK(nctmc_tokenizer_create_chars(ctx, "abc", 3, &tok) == NCTMC_OK, "chars tokenizer");
    CHECK(strcmp(nctmc_context_last_error(ctx), "") == 0, "create_chars left \"%s\"",
          nctmc_context_last_error(ctx));
    nctmc_tokenizer_free(tok);

    char path[600];
    test_path(path, sizeof path, tmp_dir, "missing.shard");
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(ctx, path, &ds) != NCTMC_OK && nctmc_context_last_error(ctx)[0],
          "opening a missing shard");
    int32_t data[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    test_path(path, sizeof path, tmp_dir, "d.shard");
    CHECK(nctmc_dataset_write(ctx, path, data, 8, 4, 4, NULL, 0) == NCTMC_OK, "dataset_write");
    CHECK(strcmp(nctmc_context_last_error(ctx), "") == 0, "dataset_write left \"%s\"",
          nctmc_context_last_error(ctx));
    nctmc_model_free(m);
}

static void test_model_clears(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    if (!m)
        return;
    float v[16];
    int32_t index = -1;
    /* const calls: a failure writes, a success leaves the message */
    CHECK(nctmc_model_find_tensor(m, "no.such.tensor", &index) == NCTMC_ERR_NOT_FOUND,
          "find_tensor of a missing name");
    char kept[512];
    snprintf(kept, sizeof kept, "%s", nctmc_model_last_error(m));
    CHECK(strstr(kept, "no.such.tensor") != NULL, "message \"%s\"", kept);
    /* the model's messages are escaped to one printable line like every
     * other handle's, though they are written under the model's lock */
    CHECK(nctmc_model_find_tensor(m, "evil\x1b[2J\nname", &index) == NCTMC_ERR_NOT_FOUND &&
              strchr(nctmc_model_last_error(m), '\x1b') == NULL &&
              strchr(nctmc_model_last_error(m), '\n') == NULL &&
              strstr(nctmc_model_last_error(m), "evil\\x1b[2J\\x0aname") != NULL,
          "an unescaped model message: \"%s\"", nctmc_model_last_error(m));
    CHECK(nctmc_model_find_tensor(m, "no.such.tensor", &index) == NCTMC_ERR_NOT_FOUND,
          "find_tensor of a missing name, again");
    CHECK(nctmc_model_find_tensor(m, "vocab_embed.embedding", &index) == NCTMC_OK,
          "find_tensor of a real name");
    CHECK(nctmc_model_read_tensor(m, "blocks.0.norm1.weight", v, 16) == NCTMC_OK,
          "read_tensor: %s", nctmc_model_last_error(m));
    nctmc_tensor_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK(nctmc_model_tensor_info(m, 0, &info) == NCTMC_OK, "tensor_info");
    char path[600];
    test_path(path, sizeof path, tmp_dir, "m.ckpt");
    CHECK(nctmc_model_save(m, path) == NCTMC_OK, "save");
    CHECK(strcmp(nctmc_model_last_error(m), kept) == 0,
          "a successful const call changed the model's message to \"%s\"",
          nctmc_model_last_error(m));
    CHECK(nctmc_model_save(m, "") == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_model_last_error(m), "path"),
          "save without a path: \"%s\"", nctmc_model_last_error(m));
    test_path(path, sizeof path, tmp_dir, "no-such-dir/m.ckpt");
    CHECK(nctmc_model_save(m, path) == NCTMC_ERR_IO &&
              strstr(nctmc_model_last_error(m), "no-such-dir"),
          "save into a missing directory: \"%s\"", nctmc_model_last_error(m));

    /* non-const calls: a success clears */
    CHECK(nctmc_model_write_tensor(m, "blocks.0.norm1.weight", v, 16) == NCTMC_OK,
          "write_tensor");
    CHECK(strcmp(nctmc_model_last_error(m), "") == 0, "write_tensor left \"%s\"",
          nctmc_model_last_error(m));
    CHECK(nctmc_model_write_tensor(m, "blocks.0.norm1.weight", v, 15) != NCTMC_OK &&
              nctmc_model_last_error(m)[0],
          "write_tensor with a wrong count");
    int32_t tokens[TINY_L] = {0};
    float times[1] = {0.5f}, log_rate[TINY_L];
    nctmc_forward_params f;
    nctmc_forward_params_init(&f);
    f.batch = 1;
    f.length = TINY_L;
    f.tokens = tokens;
    f.times = times;
    f.log_rate = log_rate;
    CHECK(nctmc_model_forward(m, &f) == NCTMC_OK, "forward");
    CHECK(strcmp(nctmc_model_last_error(m), "") == 0, "forward left \"%s\"",
          nctmc_model_last_error(m));
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_bytes(&tok);
    CHECK(nctmc_model_set_tokenizer(m, tok) != NCTMC_OK && nctmc_model_last_error(m)[0],
          "a 256-token tokenizer on a 12-state model");
    CHECK(nctmc_model_set_tokenizer(m, NULL) == NCTMC_OK, "detaching the tokenizer");
    CHECK(strcmp(nctmc_model_last_error(m), "") == 0, "set_tokenizer left \"%s\"",
          nctmc_model_last_error(m));
    nctmc_tokenizer_free(tok);

    /* eval and trainer_create report to the model */
    int32_t data[2 * TINY_L];
    tiny_batch(data, TINY_S);
    nctmc_eval_params ep;
    nctmc_eval_params_init(&ep);
    ep.n_sequences = 2;
    ep.length = TINY_L;
    ep.tokens = data;
    ep.n_time_samples = 2;
    nctmc_eval_result er;
    nctmc_eval_result_init(&er);
    nctmc_model_write_tensor(m, "blocks.0.norm1.weight", v, 15);
    CHECK(nctmc_eval(m, &ep, &er) == NCTMC_OK, "eval: %s", nctmc_model_last_error(m));
    CHECK(strcmp(nctmc_model_last_error(m), "") == 0, "eval left \"%s\"",
          nctmc_model_last_error(m));
    nctmc_model_write_tensor(m, "blocks.0.norm1.weight", v, 15);
    nctmc_trainer *t = tiny_trainer(m);
    CHECK(strcmp(nctmc_model_last_error(m), "") == 0, "trainer_create left \"%s\"",
          nctmc_model_last_error(m));

    /* the trainer's own calls */
    data[0] = TINY_S;   /* outside the data tokens */
    CHECK(t && nctmc_trainer_step(t, data, NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT &&
              nctmc_trainer_last_error(t)[0],
          "a step with a bad token");
    data[0] = 0;
    CHECK(t && nctmc_trainer_step(t, data, NULL, NULL) == NCTMC_OK, "step");
    CHECK(strcmp(nctmc_trainer_last_error(t), "") == 0, "step left \"%s\"",
          nctmc_trainer_last_error(t));
    CHECK(t && nctmc_trainer_save(t, "") != NCTMC_OK && nctmc_trainer_last_error(t)[0],
          "save without a path");
    test_path(path, sizeof path, tmp_dir, "t.ckpt");
    CHECK(t && nctmc_trainer_save(t, path) == NCTMC_OK, "trainer save");
    CHECK(strcmp(nctmc_trainer_last_error(t), "") == 0, "trainer save left \"%s\"",
          nctmc_trainer_last_error(t));
    nctmc_trainer_free(t);
    nctmc_model_free(m);
}

static void test_tokenizer_and_dataset_clear(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_bytes(&tok);
    int32_t bad[2] = {65, 300}, good[2] = {65, 66};
    char text[8];
    size_t n = 0;
    CHECK(nctmc_tokenizer_decode(tok, bad, 2, text, sizeof text, &n) != NCTMC_OK &&
              nctmc_tokenizer_last_error(tok)[0],
          "decoding token 300");
    CHECK(nctmc_tokenizer_decode(tok, good, 2, text, sizeof text, &n) == NCTMC_OK &&
              strcmp(text, "AB") == 0,
          "decode");
    CHECK(strcmp(nctmc_tokenizer_last_error(tok), "") == 0, "decode left \"%s\"",
          nctmc_tokenizer_last_error(tok));
    int32_t tokens[4];
    CHECK(nctmc_tokenizer_encode(tok, "abc", 3, tokens, 2, &n) != NCTMC_OK &&
              nctmc_tokenizer_last_error(tok)[0],
          "encoding into a small buffer");
    CHECK(nctmc_tokenizer_encode(tok, "abc", 3, tokens, 4, &n) == NCTMC_OK && n == 3, "encode");
    CHECK(strcmp(nctmc_tokenizer_last_error(tok), "") == 0, "encode left \"%s\"",
          nctmc_tokenizer_last_error(tok));
    nctmc_tokenizer_free(tok);

    char path[600];
    int32_t data[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    test_path(path, sizeof path, tmp_dir, "e.shard");
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_write(ctx, path, data, 8, 4, 4, NULL, 0) == NCTMC_OK &&
              nctmc_dataset_open(ctx, path, &ds) == NCTMC_OK,
          "dataset: %s", nctmc_context_last_error(ctx));
    int32_t got[4], label;
    CHECK(ds && nctmc_dataset_read_tokens(ds, 6, 4, got) != NCTMC_OK &&
              nctmc_dataset_last_error(ds)[0],
          "reading past the end");
    CHECK(ds && nctmc_dataset_read_tokens(ds, 4, 4, got) == NCTMC_OK && got[3] == 3,
          "read_tokens");
    CHECK(strcmp(nctmc_dataset_last_error(ds), "") == 0, "read_tokens left \"%s\"",
          nctmc_dataset_last_error(ds));
    CHECK(ds && nctmc_dataset_read_label(ds, 0, &label) != NCTMC_OK &&
              nctmc_dataset_last_error(ds)[0],
          "a label of an unlabelled shard");
    nctmc_dataset_free(ds);
}

/* ---- 3: a sampler's errors --------------------------------------------------- */

static void test_sampler_errors(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    nctmc_context *own = tiny_context();
    if (!m || !own) {
        nctmc_model_free(m);
        nctmc_context_free(own);
        return;
    }
    /* creation without a context of its own: errors on the model, not on
     * the model's context */
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 0;
    nctmc_sampler *s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT, "max_batch 0");
    CHECK(strstr(nctmc_model_last_error(m), "max_batch") != NULL, "model's message \"%s\"",
          nctmc_model_last_error(m));
    CHECK(strcmp(nctmc_context_last_error(ctx), "") == 0,
          "the model's context got the message \"%s\"", nctmc_context_last_error(ctx));
    /* with one: errors there */
    sp.ctx = own;
    sp.max_length = TINY_L + 5;
    sp.max_batch = TINY_BATCH;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT, "max_length");
    CHECK(strstr(nctmc_context_last_error(own), "max_length") != NULL,
          "given context's message \"%s\"", nctmc_context_last_error(own));
    CHECK(strstr(nctmc_model_last_error(m), "max_batch") != NULL,
          "the model's message changed to \"%s\"", nctmc_model_last_error(m));
    sp.max_length = 0;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK && s, "sampler on its own context");
    CHECK(strcmp(nctmc_context_last_error(own), "") == 0, "success left \"%s\" on the context",
          nctmc_context_last_error(own));
    CHECK(strcmp(nctmc_sampler_last_error(s), "") == 0, "a new sampler has a message");

    /* sampling: errors on the sampler only */
    int32_t out[TINY_BATCH * TINY_L];
    nctmc_sample_params p = tiny_sample_params(out);
    p.temperature = -1.0f;
    CHECK(nctmc_sample(s, &p) == NCTMC_ERR_INVALID_ARGUMENT, "temperature -1");
    CHECK(strstr(nctmc_sampler_last_error(s), "temperature") != NULL, "sampler's message \"%s\"",
          nctmc_sampler_last_error(s));
    CHECK(strcmp(nctmc_context_last_error(own), "") == 0,
          "the sampler's context got \"%s\"", nctmc_context_last_error(own));
    CHECK(strstr(nctmc_model_last_error(m), "max_batch") != NULL,
          "the model got \"%s\"", nctmc_model_last_error(m));
    p.temperature = 1.0f;
    CHECK(nctmc_sample(s, &p) == NCTMC_OK, "sample");
    CHECK(strcmp(nctmc_sampler_last_error(s), "") == 0, "sample left \"%s\"",
          nctmc_sampler_last_error(s));
    nctmc_sampler_free(s);
    nctmc_context_free(own);
    nctmc_model_free(m);
}

/* ---- 4: failing const calls on several threads ----------------------------- */

#define N_THREADS 4
#define N_CALLS 2000

typedef struct racer {
    pthread_t thread;
    const nctmc_model *model;
    int id;
    int wrong;
} racer;

static void *racer_main(void *arg)
{
    racer *r = arg;
    char name[32];
    float v[16];
    int32_t index;
    for (int k = 0; k < N_CALLS; k++) {
        snprintf(name, sizeof name, "missing.%d", r->id);
        if (r->id % 2 == 0) {
            if (nctmc_model_find_tensor(r->model, name, &index) != NCTMC_ERR_NOT_FOUND)
                r->wrong++;
        } else if (nctmc_model_read_tensor(r->model, name, v, 16) != NCTMC_ERR_NOT_FOUND) {
            r->wrong++;
        }
        if (nctmc_model_read_tensor(r->model, "blocks.0.norm1.weight", v, 16) != NCTMC_OK)
            r->wrong++;
    }
    return NULL;
}

static void test_concurrent_failures(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    if (!m)
        return;
    racer r[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        r[i] = (racer){.model = m, .id = i};
        CHECK(pthread_create(&r[i].thread, NULL, racer_main, &r[i]) == 0, "thread %d", i);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(r[i].thread, NULL);
        CHECK(r[i].wrong == 0, "thread %d: %d calls answered wrongly", i, r[i].wrong);
    }
    /* the last message is one thread's, whole */
    const char *msg = nctmc_model_last_error(m);
    int whole = 0;
    for (int i = 0; i < N_THREADS; i++) {
        char want[64];
        snprintf(want, sizeof want, "no tensor named \"missing.%d\"", i);
        whole += strcmp(msg, want) == 0;
    }
    CHECK(whole == 1, "the model's message after the race is \"%s\"", msg);
    nctmc_model_free(m);
}

/* Every const call on a model, made to fail (or, for nctmc_model_convert(),
 * to succeed: it builds a model on the model's context), on several threads
 * at once: each answers its own status, and the TSan build (scripts/test.sh)
 * sees every write of the model's message go through its lock. */
typedef struct const_racer {
    pthread_t thread;
    const nctmc_model *model;
    nctmc_context *ctx; /* the thread's own, for forward_ex */
    const char *dir;
    int wrong;
} const_racer;

static void *const_racer_main(void *arg)
{
    const_racer *r = arg;
    char path[600];
    snprintf(path, sizeof path, "%s/no/such/dir/m.safetensors", r->dir);
    for (int k = 0; k < 40; k++) {
        nctmc_model_config cfg;
        nctmc_model_config_init(&cfg);
        cfg.struct_size = 1;
        r->wrong += nctmc_model_get_config(r->model, &cfg) != NCTMC_ERR_INVALID_ARGUMENT;
        r->wrong += nctmc_model_get_config(r->model, NULL) != NCTMC_ERR_INVALID_ARGUMENT;
        nctmc_tensor_info info;
        nctmc_tensor_info_init(&info);
        r->wrong += nctmc_model_tensor_info(r->model, -1, &info) != NCTMC_ERR_INVALID_ARGUMENT;
        r->wrong += nctmc_model_tensor_info(r->model, 0, NULL) != NCTMC_ERR_INVALID_ARGUMENT;
        info.struct_size = 1;
        r->wrong += nctmc_model_tensor_info(r->model, 0, &info) != NCTMC_ERR_INVALID_ARGUMENT;
        int32_t index;
        r->wrong += nctmc_model_find_tensor(r->model, NULL, &index) == NCTMC_OK;
        float v[4];
        r->wrong += nctmc_model_read_tensor(r->model, "blocks.0.norm1.weight", v, 1) == NCTMC_OK;
        r->wrong += nctmc_model_save(r->model, NULL) != NCTMC_ERR_INVALID_ARGUMENT;
        r->wrong += nctmc_model_save(r->model, path) == NCTMC_OK;
        nctmc_model *q = NULL;
        r->wrong += nctmc_model_convert(r->model, (nctmc_weight_type)77, &q) == NCTMC_OK;
        r->wrong += nctmc_model_convert(r->model, NCTMC_WEIGHT_BF16, NULL) == NCTMC_OK;
        if (k % 8 == 0) {
            r->wrong += nctmc_model_convert(r->model, NCTMC_WEIGHT_BF16, &q) != NCTMC_OK;
            nctmc_model_free(q);
        }
        nctmc_sampler_params sp;
        nctmc_sampler_params_init(&sp);
        sp.max_batch = -1;
        nctmc_sampler *s = NULL;
        r->wrong += nctmc_sampler_create(r->model, &sp, &s) == NCTMC_OK;
        sp.struct_size = 1;
        r->wrong += nctmc_sampler_create(r->model, &sp, &s) == NCTMC_OK;
        r->wrong += nctmc_model_forward_ex(r->model, r->ctx, NULL) == NCTMC_OK;
    }
    return NULL;
}

static void test_every_const_call_failing(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    if (!m)
        return;
    const_racer r[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        r[i] = (const_racer){.model = m, .ctx = tiny_context(), .dir = tmp_dir};
        CHECK(r[i].ctx && pthread_create(&r[i].thread, NULL, const_racer_main, &r[i]) == 0,
              "thread %d", i);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(r[i].thread, NULL);
        CHECK(r[i].wrong == 0, "const calls, thread %d: %d answered wrongly", i, r[i].wrong);
        nctmc_context_free(r[i].ctx);
    }
    CHECK(strlen(nctmc_model_last_error(m)) > 0, "the model holds one of the messages");
    nctmc_model_free(m);
}

int main(void)
{
    if (!test_make_temp_dir(tmp_dir, sizeof tmp_dir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    test_context_error_buffer();
    nctmc_context *ctx = tiny_context();
    if (ctx) {
        test_context_clears(ctx);
        test_model_clears(ctx);
        test_tokenizer_and_dataset_clear(ctx);
        test_sampler_errors(ctx);
        test_concurrent_failures(ctx);
        test_every_const_call_failing(ctx);
    }
    nctmc_context_free(ctx);
    test_remove_dir(tmp_dir);
    return test_finish("errors");
}
