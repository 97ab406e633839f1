/*
 * test_abi.c — the versioned-struct contract (nctmc.h, "Versioned structs";
 * docs/api.md, "Compatibility") proved against the current library in both
 * directions, for every versioned struct and every call that takes one.
 *
 * For each struct this file declares four layouts, as programs built
 * against four headers would have them:
 *   X_pre  the first published layout without its last field (a header
 *          that never existed: below the first published size);
 *   X_old  the struct without its last field (an older, smaller header;
 *          the same as X_pre until a release appends a field);
 *   X_now  the struct as nctmc.h has it (asserted equal to nctmc_X);
 *   X_new  the struct with fields appended (a newer header).
 * Each layout is put at the very end of a heap block of exactly its size (so
 * that an AddressSanitizer build catches any read or write past it) and, a
 * second time, in front of guard bytes (so that any build catches a write
 * past it). Checked:
 *   - nctmc_X_init_sized() writes exactly `size` bytes (the stack-overwrite
 *     bug of a fixed-size init) and refuses NULL and sizes below the first
 *     published size, writing nothing;
 *   - every call rejects the pre layout (below the first published size:
 *     NCTMC_ERR_INVALID_ARGUMENT, naming the struct), accepts the current
 *     one, accepts the new one when its unknown fields are 0 and rejects it
 *     (NCTMC_ERR_UNSUPPORTED, naming the struct and the library version)
 *     when one is not; an output struct is written only up to the fields
 *     the library knows;
 *   - (test_abi_internal.c) the library's own sizes are abi_layouts.h's, and
 *     with a history in which the last field was appended after the first
 *     release (the library's own helper, lib/base/abi.c, with that first
 *     size), an old caller's missing fields take their defaults and its
 *     output is truncated to its size.
 * This program links libnctmc.so and sees nctmc.h only; the layouts are
 * tests/abi_layouts.h's.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_layouts.h"
#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

/* ---- the objects the calls work on ----------------------------------------- */

#define S 5
#define L 4
#define BATCH 2
#define MODEL_SEED 7
#define TRAINER_SEED 11

typedef struct fixture {
    nctmc_context *ctx;
    nctmc_model *model;
    nctmc_trainer *trainer;
    nctmc_dataset *dataset;
    nctmc_sampler *sampler;
    char dir[256];
    char dataset_path[512];
    char trainer_path[512];
    int32_t tokens[BATCH * L];
    float times[BATCH];
    float log_rate[BATCH * L];
    float logp[BATCH * L * S];
    int32_t out[BATCH * L];
    nctmc_text_range where[1]; /* nctmc_infill()'s ranges_out */
    char logged[512];   /* the last message the log callback received */
} fixture;

static void record_log(nctmc_log_level level, const char *message, void *user)
{
    (void)level;
    fixture *f = user;
    snprintf(f->logged, sizeof f->logged, "%s", message);
}

static void tiny_config(nctmc_model_config *c)
{
    c->vocab_size = S;
    c->seq_len = L;
    c->n_layers = 1;
    c->d_model = 8;
    c->n_heads = 2;
    c->cond_dim = 4;
    c->seed = MODEL_SEED;
}

static void tiny_trainer_params(nctmc_trainer_params *p)
{
    p->batch_size = BATCH;
    p->warmup_steps = 1;
    p->total_steps = 10;
    p->seed = TRAINER_SEED;
}

static bool fixture_open(fixture *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < BATCH * L; i++)
        f->tokens[i] = (int32_t)((i * 3 + 1) % S);
    f->times[0] = 0.3f;
    f->times[1] = 0.7f;
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    nctmc_model_config mc;
    nctmc_model_config_init(&mc);
    tiny_config(&mc);
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tiny_trainer_params(&tp);
    if (!test_make_temp_dir(f->dir, sizeof f->dir))
        return false;
    test_path(f->dataset_path, sizeof f->dataset_path, f->dir, "tokens.nctmc");
    test_path(f->trainer_path, sizeof f->trainer_path, f->dir, "trainer.safetensors");
    return nctmc_context_create(&cp, &f->ctx) == NCTMC_OK &&
           nctmc_model_create(f->ctx, &mc, &f->model) == NCTMC_OK &&
           nctmc_trainer_create(f->model, &tp, &f->trainer) == NCTMC_OK &&
           nctmc_trainer_save(f->trainer, f->trainer_path) == NCTMC_OK &&
           nctmc_dataset_write(f->ctx, f->dataset_path, f->tokens, BATCH * L, S, L, NULL, 0) ==
               NCTMC_OK &&
           nctmc_dataset_open(f->ctx, f->dataset_path, &f->dataset) == NCTMC_OK &&
           nctmc_sampler_create(f->model, NULL, &f->sampler) == NCTMC_OK;
}

static void fixture_close(fixture *f)
{
    nctmc_sampler_free(f->sampler);
    nctmc_dataset_free(f->dataset);
    nctmc_trainer_free(f->trainer);
    nctmc_model_free(f->model);
    nctmc_context_free(f->ctx);
    test_remove_dir(f->dir);
}

/* ---- per struct and call: fill the fields, make the call ------------------- */

/* Sets the fields a call needs on a struct of at least the current size.
 * The call returns its status and points *message at where it stores
 * errors; on success it has checked what it produced. */
typedef void (*prepare_fn)(fixture *f, void *p);
typedef nctmc_status (*call_fn)(fixture *f, void *p, const char **message);

static void prep_none(fixture *f, void *p)
{
    (void)f;
    (void)p;
}

static void prep_context(fixture *f, void *p)
{
    nctmc_context_params *c = p;
    c->backend = "cpu";
    c->n_threads = 2;
    c->log_fn = record_log;
    c->log_user_data = f;
}

static nctmc_status call_context_create(fixture *f, void *p, const char **message)
{
    nctmc_context *c = (nctmc_context *)f; /* must become NULL on failure */
    f->logged[0] = '\0';
    *message = f->logged;
    nctmc_status st = nctmc_context_create(p, &c);
    if (st != NCTMC_OK) {
        CHECK(c == NULL, "*out is NULL on failure");
        return st;
    }
    CHECK(nctmc_context_n_threads(c) == 2 && strcmp(nctmc_context_backend(c), "cpu") == 0,
          "the context has the fields set");
    nctmc_context_free(c);
    return st;
}

static void prep_config(fixture *f, void *p)
{
    (void)f;
    tiny_config(p);
}

static nctmc_status call_model_create(fixture *f, void *p, const char **message)
{
    nctmc_model *m = (nctmc_model *)f;
    *message = nctmc_context_last_error(f->ctx);
    nctmc_status st = nctmc_model_create(f->ctx, p, &m);
    if (st != NCTMC_OK) {
        CHECK(m == NULL, "*out is NULL on failure");
        return st;
    }
    /* the same configuration and seed: the same first weights */
    float a[S * 8], b[S * 8];
    nctmc_model_read_tensor(m, "vocab_embed.embedding", a, S * 8);
    nctmc_model_read_tensor(f->model, "vocab_embed.embedding", b, S * 8);
    CHECK(nctmc_model_n_params(m) == nctmc_model_n_params(f->model) &&
              memcmp(a, b, sizeof a) == 0,
          "the model has the configuration set");
    nctmc_model_free(m);
    return st;
}

static nctmc_status call_get_config(fixture *f, void *p, const char **message)
{
    *message = nctmc_model_last_error(f->model);
    nctmc_status st = nctmc_model_get_config(f->model, p);
    const nctmc_model_config *c = p;
    if (st == NCTMC_OK)
        CHECK(c->vocab_size == S && c->seq_len == L && c->seed == MODEL_SEED,
              "get_config filled the struct");
    return st;
}

static nctmc_status call_tensor_info(fixture *f, void *p, const char **message)
{
    *message = nctmc_model_last_error(f->model);
    nctmc_status st = nctmc_model_tensor_info(f->model, 0, p);
    const nctmc_tensor_info *t = p;
    if (st == NCTMC_OK)
        CHECK(t->name && strcmp(t->name, "vocab_embed.embedding") == 0 && t->n_dims == 2 &&
                  t->n_elements == t->shape[0] * t->shape[1] && t->n_elements == S * 8,
              "tensor_info filled the struct");
    return st;
}

static void prep_forward(fixture *f, void *p)
{
    nctmc_forward_params *q = p;
    q->batch = BATCH;
    q->length = L;
    q->tokens = f->tokens;
    q->times = f->times;
    q->log_rate = f->log_rate;
    q->jump_logprobs = f->logp;
}

static void check_forward_output(const fixture *f)
{
    double sum = 0.0;
    for (int j = 0; j < S; j++)
        sum += exp((double)f->logp[j]);
    CHECK(fabs(sum - 1.0) < 1e-5, "the forward produced a distribution (sum %g)", sum);
}

static nctmc_status call_forward(fixture *f, void *p, const char **message)
{
    *message = nctmc_model_last_error(f->model);
    memset(f->logp, 0, sizeof f->logp);
    nctmc_status st = nctmc_model_forward(f->model, p);
    if (st == NCTMC_OK)
        check_forward_output(f);
    return st;
}

static nctmc_status call_forward_ex(fixture *f, void *p, const char **message)
{
    *message = nctmc_context_last_error(f->ctx);
    memset(f->logp, 0, sizeof f->logp);
    nctmc_status st = nctmc_model_forward_ex(f->model, f->ctx, p);
    if (st == NCTMC_OK)
        check_forward_output(f);
    return st;
}

static nctmc_status call_dataset_info(fixture *f, void *p, const char **message)
{
    *message = nctmc_dataset_last_error(f->dataset);
    nctmc_status st = nctmc_dataset_get_info(f->dataset, p);
    const nctmc_dataset_info *d = p;
    if (st == NCTMC_OK)
        CHECK(d->vocab_size == S && d->seq_len == L && d->n_tokens == BATCH * L &&
                  d->n_sequences == BATCH,
              "get_info filled the struct");
    return st;
}

static void prep_trainer(fixture *f, void *p)
{
    (void)f;
    tiny_trainer_params(p);
}

static nctmc_status call_trainer_create(fixture *f, void *p, const char **message)
{
    nctmc_trainer *t = (nctmc_trainer *)f;
    *message = nctmc_model_last_error(f->model);
    nctmc_status st = nctmc_trainer_create(f->model, p, &t);
    if (st != NCTMC_OK) {
        CHECK(t == NULL, "*out is NULL on failure");
        return st;
    }
    nctmc_trainer_state s;
    nctmc_trainer_state_init(&s);
    nctmc_trainer_get_state(t, &s);
    CHECK(s.seed == TRAINER_SEED, "the trainer has the parameters set");
    nctmc_trainer_free(t);
    return st;
}

static nctmc_status call_trainer_resume(fixture *f, void *p, const char **message)
{
    nctmc_model *m = (nctmc_model *)f;
    nctmc_trainer *t = (nctmc_trainer *)f;
    *message = nctmc_context_last_error(f->ctx);
    nctmc_status st = nctmc_trainer_resume(f->ctx, f->trainer_path, p, &m, &t);
    if (st != NCTMC_OK) {
        CHECK(m == NULL && t == NULL, "*model_out and *trainer_out are NULL on failure");
        return st;
    }
    nctmc_trainer_params got;
    nctmc_trainer_params_init(&got);
    nctmc_trainer_get_params(t, &got);
    CHECK(got.batch_size == BATCH && got.seed == TRAINER_SEED, "resumed with the params");
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    return st;
}

static nctmc_status call_get_params(fixture *f, void *p, const char **message)
{
    *message = nctmc_trainer_last_error(f->trainer);
    nctmc_status st = nctmc_trainer_get_params(f->trainer, p);
    const nctmc_trainer_params *q = p;
    if (st == NCTMC_OK)
        CHECK(q->batch_size == BATCH && q->seed == TRAINER_SEED && q->total_steps == 10,
              "get_params filled the struct");
    return st;
}

static nctmc_status call_train_step(fixture *f, void *p, const char **message)
{
    *message = nctmc_trainer_last_error(f->trainer);
    nctmc_trainer_state before;
    nctmc_trainer_state_init(&before);
    nctmc_trainer_get_state(f->trainer, &before);
    nctmc_status st = nctmc_trainer_step(f->trainer, f->tokens, NULL, p);
    const nctmc_train_stats *s = p;
    if (st == NCTMC_OK)
        CHECK(s->step == before.step + 1 && s->loss > 0.0 && s->skipped == 0 &&
                  s->n_skipped == 0,
              "step filled the stats");
    return st;
}

static nctmc_status call_trainer_state(fixture *f, void *p, const char **message)
{
    *message = nctmc_trainer_last_error(f->trainer);
    nctmc_status st = nctmc_trainer_get_state(f->trainer, p);
    const nctmc_trainer_state *s = p;
    if (st == NCTMC_OK)
        CHECK(s->seed == TRAINER_SEED && s->step >= 0, "get_state filled the struct");
    return st;
}

static void prep_eval(fixture *f, void *p)
{
    nctmc_eval_params *q = p;
    q->n_sequences = BATCH;
    q->length = L;
    q->tokens = f->tokens;
    q->batch_size = 2;
    q->n_time_samples = 2;
}

static nctmc_status call_eval_params(fixture *f, void *p, const char **message)
{
    *message = nctmc_model_last_error(f->model);
    nctmc_eval_result r;
    nctmc_eval_result_init(&r);
    nctmc_status st = nctmc_eval(f->model, p, &r);
    if (st == NCTMC_OK)
        CHECK(r.n_tokens == BATCH * L && r.nelbo_bits_per_token > 0.0, "eval ran");
    return st;
}

static nctmc_status call_eval_result(fixture *f, void *p, const char **message)
{
    *message = nctmc_model_last_error(f->model);
    nctmc_eval_params q;
    nctmc_eval_params_init(&q);
    prep_eval(f, &q);
    nctmc_status st = nctmc_eval(f->model, &q, p);
    const nctmc_eval_result *r = p;
    if (st == NCTMC_OK)
        CHECK(r->n_tokens == BATCH * L && r->nelbo_bits_per_token > 0.0 &&
                  r->buckets[NCTMC_EVAL_BUCKETS - 1].t_hi == r->t_max &&
                  r->n_reliability == BATCH * L * 2 && r->ece >= 0.0,
              "eval filled the result, up to its last field");
    return st;
}

static void prep_sampler(fixture *f, void *p)
{
    nctmc_sampler_params *q = p;
    q->max_batch = 3;
    q->ctx = f->ctx;
}

static nctmc_status call_sampler_create(fixture *f, void *p, const char **message)
{
    nctmc_sampler *s = (nctmc_sampler *)f;
    /* a struct too small to hold its ctx field cannot name the context: the
     * failure is then reported to the model */
    *message = ((const nctmc_sampler_params *)p)->struct_size >= sizes_sampler_params.first_size ? nctmc_context_last_error(f->ctx)
                                                            : nctmc_model_last_error(f->model);
    nctmc_status st = nctmc_sampler_create(f->model, p, &s);
    if (st != NCTMC_OK) {
        CHECK(s == NULL, "*out is NULL on failure");
        return st;
    }
    /* max_batch 3 was read: a batch of 3 runs, one of 4 does not */
    int32_t out[4 * L];
    nctmc_sample_params q;
    nctmc_sample_params_init(&q);
    q.n_steps = 2;
    q.tokens_out = out;
    q.batch = 3;
    nctmc_status a = nctmc_sample(s, &q);
    q.batch = 4;
    nctmc_status b = nctmc_sample(s, &q);
    CHECK(a == NCTMC_OK && b == NCTMC_ERR_INVALID_ARGUMENT, "the sampler has max_batch");
    nctmc_sampler_free(s);
    return st;
}

static void prep_sample(fixture *f, void *p)
{
    nctmc_sample_params *q = p;
    q->batch = BATCH;
    q->n_steps = 3;
    q->seed = 5;
    q->tokens_out = f->out;
}

static nctmc_status call_sample(fixture *f, void *p, const char **message)
{
    *message = nctmc_sampler_last_error(f->sampler);
    for (int i = 0; i < BATCH * L; i++)
        f->out[i] = -1;
    nctmc_status st = nctmc_sample(f->sampler, p);
    if (st == NCTMC_OK) {
        bool in_range = true;
        for (int i = 0; i < BATCH * L; i++)
            in_range = in_range && f->out[i] >= 0 && f->out[i] < S;
        CHECK(in_range, "sample wrote tokens");
    }
    return st;
}

static void prep_infill(fixture *f, void *p)
{
    nctmc_infill_params *q = p;
    q->ranges_out = f->where;
}

/* "abcd" (L = 4 tokens) with bytes [1, 3) regenerated by a character
 * tokenizer of the model's S = 5 tokens: the rest kept, and ranges_out
 * (the last field) read and written. */
static nctmc_status call_infill(fixture *f, void *p, const char **message)
{
    *message = nctmc_sampler_last_error(f->sampler);
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(NULL, "abcde", 5, &tok);
    nctmc_text_range r = {1, 3};
    f->where[0] = (nctmc_text_range){9, 9};
    char out[64];
    size_t len = 0;
    nctmc_status st = nctmc_infill(f->sampler, tok, "abcd", 4, &r, 1, p, out, sizeof out, &len);
    if (st == NCTMC_OK)
        CHECK(len == 4 && out[0] == 'a' && memcmp(out + 3, "d", 2) == 0 &&
                  f->where[0].start == 1 && f->where[0].end == 3,
              "infill kept the text and wrote ranges_out");
    nctmc_tokenizer_free(tok);
    return st;
}

/* ---- the cases ------------------------------------------------------------- */


/* The trainer checkpoint, read through the caller's reader from memory. */
typedef struct memory_file {
    unsigned char *data;
    int64_t size;
} memory_file;

static int64_t memory_read_at(void *user_data, void *dst, size_t n, int64_t offset)
{
    const memory_file *m = user_data;
    if (offset < 0 || offset > m->size)
        return -1;
    size_t left = (size_t)(m->size - offset);
    size_t k = n < left ? n : left;
    memcpy(dst, m->data + offset, k);
    return (int64_t)k;
}

static memory_file checkpoint_bytes;

static void prep_reader(fixture *f, void *p)
{
    if (!checkpoint_bytes.data) {
        FILE *file = fopen(f->trainer_path, "rb");
        if (file && fseek(file, 0, SEEK_END) == 0) {
            long n = ftell(file);
            checkpoint_bytes.data = n > 0 ? malloc((size_t)n) : NULL;
            if (checkpoint_bytes.data && fseek(file, 0, SEEK_SET) == 0 &&
                fread(checkpoint_bytes.data, 1, (size_t)n, file) == (size_t)n)
                checkpoint_bytes.size = n;
        }
        if (file)
            fclose(file);
    }
    nctmc_reader *q = p;
    q->size = checkpoint_bytes.size;
    q->read_at = memory_read_at;
    q->user_data = &checkpoint_bytes;
}

static nctmc_status call_load_reader(fixture *f, void *p, const char **message)
{
    *message = nctmc_context_last_error(f->ctx);
    nctmc_model *m = (nctmc_model *)f;
    nctmc_status st = nctmc_model_load_reader(f->ctx, p, &m);
    if (st != NCTMC_OK) {
        CHECK(m == NULL, "*out is NULL on failure");
        return st;
    }
    CHECK(nctmc_model_seq_len(m) == L, "the reader's model was loaded");
    nctmc_model_free(m);
    return st;
}

static void prep_load(fixture *f, void *p)
{
    (void)f;
    ((nctmc_load_params *)p)->mapping = NCTMC_LOAD_COPY;
}

static nctmc_status call_load_ex(fixture *f, void *p, const char **message)
{
    *message = nctmc_context_last_error(f->ctx);
    nctmc_model *m = (nctmc_model *)f;
    nctmc_status st = nctmc_model_load_ex(f->ctx, f->trainer_path, p, &m);
    if (st != NCTMC_OK) {
        CHECK(m == NULL, "*out is NULL on failure");
        return st;
    }
    /* the default maps: a copy shows the field was read */
    CHECK(nctmc_model_seq_len(m) == L && !nctmc_model_is_mapped(m),
          "the model was loaded as the params say");
    nctmc_model_free(m);
    return st;
}


typedef struct abi_case {
    const char *call_name;
    const abi_sizes *d;
    size_t pre_size, old_size, now_size, new_size;
    size_t last_offset;     /* where the last field of the current layout starts */
    init_fn init;
    prepare_fn prepare;
    call_fn call;
    bool output;            /* the call fills the struct (else it only reads it) */
    bool old_reports;       /* a too-small struct's error can be read back */
} abi_case;

#define CASE(call_name, name, prepare, call, output, old_reports)                      \
    {call_name, &sizes_##name, sizeof(name##_pre), sizeof(name##_old), sizeof(name##_now), \
     sizeof(name##_new), name##_last_offset, init_##name, prepare, call, output,          \
     old_reports}

static const abi_case cases[] = {
    CASE("nctmc_context_create", context_params, prep_context, call_context_create, false,
         false),
    CASE("nctmc_model_create", model_config, prep_config, call_model_create, false, true),
    CASE("nctmc_model_get_config", model_config, prep_none, call_get_config, true, true),
    CASE("nctmc_model_tensor_info", tensor_info, prep_none, call_tensor_info, true, true),
    CASE("nctmc_model_forward", forward_params, prep_forward, call_forward, false, true),
    CASE("nctmc_model_forward_ex", forward_params, prep_forward, call_forward_ex, false,
         true),
    CASE("nctmc_dataset_get_info", dataset_info, prep_none, call_dataset_info, true, true),
    CASE("nctmc_trainer_create", trainer_params, prep_trainer, call_trainer_create, false,
         true),
    CASE("nctmc_trainer_resume", trainer_params, prep_trainer, call_trainer_resume, false,
         true),
    CASE("nctmc_trainer_get_params", trainer_params, prep_none, call_get_params, true, true),
    CASE("nctmc_trainer_step", train_stats, prep_none, call_train_step, true, true),
    CASE("nctmc_trainer_get_state", trainer_state, prep_none, call_trainer_state, true, true),
    CASE("nctmc_eval (params)", eval_params, prep_eval, call_eval_params, false, true),
    CASE("nctmc_eval (result)", eval_result, prep_none, call_eval_result, true, true),
    CASE("nctmc_sampler_create", sampler_params, prep_sampler, call_sampler_create, false,
         true),
    CASE("nctmc_sample", sample_params, prep_sample, call_sample, false, true),
    CASE("nctmc_model_load_reader", reader, prep_reader, call_load_reader, false, true),
    CASE("nctmc_model_load_ex", load_params, prep_load, call_load_ex, false, true),
    CASE("nctmc_infill", infill_params, prep_infill, call_infill, false, true),
};

/* ---- byte helpers ----------------------------------------------------------- */

#define GUARD 64
#define PATTERN 0xAB
#define SENTINEL 0x5A

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t k = 0; k < n; k++)
        if (p[k] != v)
            return false;
    return true;
}

static size_t size_of(const void *p)
{
    size_t size;
    memcpy(&size, p, sizeof size);
    return size;
}

static void set_size(void *p, size_t size)
{
    memcpy(p, &size, sizeof size);
}

/* `size` bytes at the very end of a heap block of exactly that size. */
static unsigned char *exact_block(size_t size)
{
    unsigned char *p = malloc(size);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, PATTERN, size);
    return p;
}

/* ---- the checks ------------------------------------------------------------- */

/* init_sized writes exactly `size` bytes and refuses what it must. */
static void check_init(const abi_case *c)
{
    const char *name = c->d->name;
    size_t total = c->new_size + GUARD;
    unsigned char *ref = exact_block(c->now_size), *buf = exact_block(total);
    CHECK(c->init(NULL, c->now_size) == NCTMC_ERR_INVALID_ARGUMENT, "%s: init(NULL)", name);
    size_t small[] = {0, sizeof(size_t), c->pre_size, c->d->first_size - 1};
    for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
        memset(buf, PATTERN, total);
        CHECK(c->init(buf, small[k]) == NCTMC_ERR_INVALID_ARGUMENT &&
                  all_bytes(buf, total, PATTERN),
              "%s: init with %zu bytes (first published size %zu) writes nothing", name,
              small[k], c->d->first_size);
    }
    CHECK(c->init(ref, c->now_size) == NCTMC_OK && size_of(ref) == c->now_size,
          "%s: init at the current size", name);
    CHECK(all_bytes(ref + c->d->known_size, c->now_size - c->d->known_size, 0),
          "%s: trailing padding is zero", name);
    memset(buf, PATTERN, total);
    CHECK(c->init(buf, c->now_size) == NCTMC_OK &&
              all_bytes(buf + c->now_size, total - c->now_size, PATTERN),
          "%s: init(current size) writes no byte past it", name);
    memset(buf, PATTERN, total);
    CHECK(c->init(buf, c->new_size) == NCTMC_OK && size_of(buf) == c->new_size &&
              all_bytes(buf + c->new_size, GUARD, PATTERN),
          "%s: init(newer size %zu) writes exactly that many bytes", name, c->new_size);
    CHECK(memcmp(buf + sizeof(size_t), ref + sizeof(size_t), c->d->known_size - sizeof(size_t)) ==
                  0 &&
              all_bytes(buf + c->d->known_size, c->new_size - c->d->known_size, 0),
          "%s: init(newer size): the known fields' defaults, zeros after them", name);
    free(ref);
    free(buf);
}

/* One call on a caller struct of `size` bytes: in an exact block (AddressSanitizer
 * sees any access past it) and in front of guard bytes (any build sees a write
 * past it). `edit` runs after init and prepare. Returns the first status. */
typedef void (*edit_fn)(const abi_case *c, unsigned char *p, size_t size);

static nctmc_status call_at(fixture *f, const abi_case *c, size_t size, bool initialise,
                            edit_fn edit, char *message, size_t message_size)
{
    nctmc_status first = NCTMC_OK;
    for (int pass = 0; pass < 2; pass++) {
        size_t total = pass == 0 ? size : size + GUARD;
        unsigned char *p = exact_block(total);
        unsigned char *before = exact_block(size);
        if (initialise) {
            c->init(p, size);
            c->prepare(f, p);
        } else {
            set_size(p, size);
        }
        if (edit)
            edit(c, p, size);
        memcpy(before, p, size);
        const char *msg = "";
        nctmc_status st = c->call(f, p, &msg);
        CHECK(pass == 0 || all_bytes(p + size, GUARD, PATTERN),
              "%s: %s wrote past the caller's %zu bytes", c->d->name, c->call_name, size);
        if (st != NCTMC_OK)
            CHECK(memcmp(before, p, size) == 0, "%s: %s failed but wrote the struct",
                  c->d->name, c->call_name);
        if (pass == 0) {
            first = st;
            snprintf(message, message_size, "%s", msg);
        } else {
            CHECK(st == first, "%s: %s: the same status with guard bytes", c->d->name,
                  c->call_name);
        }
        free(before);
        free(p);
    }
    return first;
}

static void check_too_small(fixture *f, const abi_case *c)
{
    char msg[512];
    size_t sizes[] = {sizeof(size_t), c->pre_size, c->d->first_size - 1};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        nctmc_status st = call_at(f, c, sizes[k], false, NULL, msg, sizeof msg);
        CHECK(st == NCTMC_ERR_INVALID_ARGUMENT,
              "%s: %s below the first published layout (%zu bytes): %d",
              c->d->name, c->call_name, sizes[k], st);
        if (c->old_reports)
            CHECK(strstr(msg, c->d->name) && strstr(msg, "struct_size"),
                  "%s: %s: the message names the struct: \"%s\"", c->d->name, c->call_name,
                  msg);
    }
}

static void check_current(fixture *f, const abi_case *c)
{
    char msg[512];
    nctmc_status st = call_at(f, c, c->now_size, true, NULL, msg, sizeof msg);
    CHECK(st == NCTMC_OK, "%s: %s with the current layout: %d (%s)", c->d->name,
          c->call_name, st, msg);
    if (c->d->first_size < c->d->known_size && !c->output) {
        /* a caller built against the first published header still works
         * (outputs: test_abi_internal.c's check_history covers them; the
         * calls' checks read the current layout's fields) */
        st = call_at(f, c, c->d->first_size, true, NULL, msg, sizeof msg);
        CHECK(st == NCTMC_OK, "%s: %s with the first published layout (%zu bytes): %d (%s)",
              c->d->name, c->call_name, c->d->first_size, st, msg);
    }
}

/* An output's fields the library does not know keep what the caller had. */
static void fill_unknown(const abi_case *c, unsigned char *p, size_t size)
{
    memset(p + c->d->known_size, SENTINEL, size - c->d->known_size);
}

static void set_first_unknown_byte(const abi_case *c, unsigned char *p, size_t size)
{
    (void)size;
    p[c->d->known_size] = 1;
}

static void set_last_byte(const abi_case *c, unsigned char *p, size_t size)
{
    (void)c;
    p[size - 1] = 0x80;
}

static void check_newer(fixture *f, const abi_case *c)
{
    char msg[512];
    const char *name = c->d->name;
    nctmc_status st = call_at(f, c, c->new_size, true, NULL, msg, sizeof msg);
    CHECK(st == NCTMC_OK, "%s: %s with the newer layout, new fields 0: %d (%s)", name,
          c->call_name, st, msg);
    if (c->output) {
        /* the call succeeds whatever the unknown fields hold; call_at's
         * callback checked the known ones, this checks the rest */
        unsigned char *p = exact_block(c->new_size);
        c->init(p, c->new_size);
        fill_unknown(c, p, c->new_size);
        const char *m = "";
        st = c->call(f, p, &m);
        CHECK(st == NCTMC_OK && size_of(p) == c->new_size &&
                  all_bytes(p + c->d->known_size, c->new_size - c->d->known_size, SENTINEL),
              "%s: %s leaves struct_size and the unknown fields alone: %d", name,
              c->call_name, st);
        free(p);
        return;
    }
    edit_fn edits[] = {set_first_unknown_byte, set_last_byte};
    for (size_t k = 0; k < 2; k++) {
        st = call_at(f, c, c->new_size, true, edits[k], msg, sizeof msg);
        CHECK(st == NCTMC_ERR_UNSUPPORTED, "%s: %s with a non-zero new field: %d", name,
              c->call_name, st);
        CHECK(strstr(msg, name) && strstr(msg, nctmc_version()),
              "%s: %s: the message names the struct and the version: \"%s\"", name,
              c->call_name, msg);
    }
}

int main(void)
{
    fixture f;
    bool ok = fixture_open(&f);
    CHECK(ok, "fixture: %s / %s", nctmc_context_last_error(f.ctx),
          nctmc_model_last_error(f.model));
    if (!ok) {
        fixture_close(&f);
        return test_finish("abi");
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const abi_case *c = &cases[k];
        check_init(c);
        check_too_small(&f, c);
        check_current(&f, c);
        check_newer(&f, c);
    }
    free(checkpoint_bytes.data);
    fixture_close(&f);
    return test_finish("abi");
}
