/*
 * test_lifetimes.c — every order of *_free is safe (issue 8 §2). Contexts and
 * models are reference counted: a model holds its context, a sampler its
 * model and its own context, a trainer its model. Checked here:
 *
 *  1. All 120 orders of freeing {context, model, sampler, the sampler's own
 *     context, trainer}: after every single free, each surviving handle is
 *     used — the sampler draws (the same tokens as before any free), the
 *     trainer steps and saves (a checkpoint whose weights are the model's),
 *     the model is read back, the context makes a new model.
 *  2. The same with the sampler on the model's context (24 orders).
 *  3. nctmc_trainer_resume()'s context, model and trainer in all 6 orders.
 *  4. No log callback after nctmc_context_free(), while the model lives on;
 *     a failed sampler_create() is then readable on the model.
 *  5. Threads: samplers on one model in four threads keep drawing while the
 *     main thread frees the model and both contexts, then free themselves.
 *
 * Run in the plain build and under ASan (detect_leaks=1): any read of freed
 * memory or any leak fails there.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "tiny_model.h"

#define N_OUT (TINY_BATCH * TINY_L)

/* What the handles produced before anything was freed. */
typedef struct reference {
    int32_t sample[N_OUT];
    float tensor[TINY_S * 16];   /* vocab_embed.embedding, [S, d] */
} reference;

static char tmp_dir[512];

static bool read_embedding(const nctmc_model *m, float *out)
{
    return nctmc_model_read_tensor(m, "vocab_embed.embedding", out, TINY_S * 16) == NCTMC_OK;
}

/* ---- 1, 2: the five (or four) handles in every order ---------------------- */

enum { H_CTX, H_MODEL, H_SAMPLER, H_SAMPLER_CTX, H_TRAINER, N_HANDLES };
static const char *const handle_names[N_HANDLES] = {"context", "model", "sampler",
                                                    "sampler context", "trainer"};

typedef struct handles {
    nctmc_context *ctx;
    nctmc_model *model;
    nctmc_sampler *sampler;
    nctmc_context *sampler_ctx;   /* NULL: the sampler computes on the model's */
    nctmc_trainer *trainer;
} handles;

static void free_handle(handles *h, int which)
{
    switch (which) {
    case H_CTX: nctmc_context_free(h->ctx); h->ctx = NULL; break;
    case H_MODEL: nctmc_model_free(h->model); h->model = NULL; break;
    case H_SAMPLER: nctmc_sampler_free(h->sampler); h->sampler = NULL; break;
    case H_SAMPLER_CTX: nctmc_context_free(h->sampler_ctx); h->sampler_ctx = NULL; break;
    case H_TRAINER: nctmc_trainer_free(h->trainer); h->trainer = NULL; break;
    }
}

/* The trainer's checkpoint holds the model's weights (the learning rate is
 * 0, so raw and EMA weights are the initial ones): load it on a fresh
 * context and compare one tensor. */
static void check_checkpoint(const char *path, const reference *ref, const char *order)
{
    nctmc_context *ctx = tiny_context();
    nctmc_model *m = NULL;
    nctmc_status st = ctx ? nctmc_model_load(ctx, path, &m) : NCTMC_ERR_BACKEND;
    CHECK(st == NCTMC_OK, "%s: loading the trainer's checkpoint: %s", order,
          nctmc_context_last_error(ctx));
    float emb[TINY_S * 16];
    if (m) {
        CHECK(read_embedding(m, emb) && memcmp(emb, ref->tensor, sizeof emb) == 0,
              "%s: the checkpoint's weights differ from the model's", order);
    }
    nctmc_context_free(ctx);   /* before its model: the model keeps it */
    nctmc_model_free(m);
}

/* Uses every handle that is still held. */
static void use_survivors(const handles *h, const reference *ref, const char *order)
{
    if (h->sampler) {
        int32_t out[N_OUT];
        nctmc_sample_params p = tiny_sample_params(out);
        nctmc_status st = nctmc_sample(h->sampler, &p);
        CHECK(st == NCTMC_OK, "%s: sample: %s", order, nctmc_sampler_last_error(h->sampler));
        CHECK(st != NCTMC_OK || memcmp(out, ref->sample, sizeof out) == 0,
              "%s: the sampler draws other tokens than before", order);
    }
    if (h->trainer) {
        int32_t tokens[2 * TINY_L];
        tiny_batch(tokens, TINY_S);
        nctmc_train_stats stats;
        nctmc_train_stats_init(&stats);
        nctmc_status st = nctmc_trainer_step(h->trainer, tokens, NULL, &stats);
        CHECK(st == NCTMC_OK && isfinite(stats.loss) && stats.loss > 0.0, "%s: step: %s (%g)",
              order, nctmc_trainer_last_error(h->trainer), stats.loss);
        char path[600];
        test_path(path, sizeof path, tmp_dir, "trainer.ckpt");
        st = nctmc_trainer_save(h->trainer, path);
        CHECK(st == NCTMC_OK, "%s: save: %s", order, nctmc_trainer_last_error(h->trainer));
        if (st == NCTMC_OK && !h->model)
            check_checkpoint(path, ref, order);
    }
    if (h->model) {
        float emb[TINY_S * 16];
        CHECK(read_embedding(h->model, emb) && memcmp(emb, ref->tensor, sizeof emb) == 0,
              "%s: the model's weights changed", order);
    }
    if (h->ctx) {
        nctmc_model *m = NULL;
        nctmc_model_config c = tiny_model_config(NCTMC_PROCESS_UNIFORM, 0);
        CHECK(nctmc_model_create(h->ctx, &c, &m) == NCTMC_OK, "%s: the context makes no model",
              order);
        nctmc_model_free(m);
    }
    if (h->sampler_ctx)
        CHECK(strcmp(nctmc_context_backend(h->sampler_ctx), "cpu") == 0,
              "%s: the sampler's context lost its backend", order);
}

static bool make_handles(handles *h, bool own_sampler_ctx, reference *ref)
{
    memset(h, 0, sizeof *h);
    h->ctx = tiny_context();
    h->model = h->ctx ? tiny_model(h->ctx, NCTMC_PROCESS_UNIFORM, 0) : NULL;
    h->sampler_ctx = own_sampler_ctx ? tiny_context() : NULL;
    h->sampler = h->model ? tiny_sampler(h->model, h->sampler_ctx) : NULL;
    h->trainer = h->model ? tiny_trainer(h->model) : NULL;
    if (!h->sampler || !h->trainer || (own_sampler_ctx && !h->sampler_ctx))
        return false;
    nctmc_sample_params p = tiny_sample_params(ref->sample);
    return nctmc_sample(h->sampler, &p) == NCTMC_OK && read_embedding(h->model, ref->tensor);
}

/* Frees the handles in `order` (n of them), using the survivors after each
 * free. */
static void run_order(const int *order, int n, bool own_sampler_ctx)
{
    handles h;
    reference ref;
    bool ok = make_handles(&h, own_sampler_ctx, &ref);
    CHECK(ok, "setting up the handles");
    char name[200] = "";
    for (int k = 0; k < n && ok; k++) {
        size_t len = strlen(name);
        snprintf(name + len, sizeof name - len, "%s%s", k ? " > " : "free ",
                 handle_names[order[k]]);
        free_handle(&h, order[k]);
        use_survivors(&h, &ref, name);
    }
    for (int k = 0; k < N_HANDLES; k++)
        free_handle(&h, k);
}

/* Calls fn with every permutation of items[0 .. n) (Heap's algorithm). */
static void permute(int *items, int n, int k, void (*fn)(const int *, int, void *), void *user)
{
    if (k == 1) {
        fn(items, n, user);
        return;
    }
    for (int i = 0; i < k; i++) {
        permute(items, n, k - 1, fn, user);
        int j = k % 2 == 0 ? i : 0;
        int tmp = items[j];
        items[j] = items[k - 1];
        items[k - 1] = tmp;
    }
}

static int n_orders;

static void order_callback(const int *order, int n, void *user)
{
    run_order(order, n, *(const bool *)user);
    n_orders++;
}

static void test_every_order(void)
{
    bool own = true;
    int all[N_HANDLES] = {H_CTX, H_MODEL, H_SAMPLER, H_SAMPLER_CTX, H_TRAINER};
    n_orders = 0;
    permute(all, N_HANDLES, N_HANDLES, order_callback, &own);
    CHECK(n_orders == 120, "%d orders of five handles, expected 120", n_orders);
    own = false;
    int four[4] = {H_CTX, H_MODEL, H_SAMPLER, H_TRAINER};
    n_orders = 0;
    permute(four, 4, 4, order_callback, &own);
    CHECK(n_orders == 24, "%d orders of four handles, expected 24", n_orders);
}

/* ---- 3: what nctmc_trainer_resume() returns -------------------------------- */

static void resume_order(const int *order, int n, void *user)
{
    const char *path = user;
    nctmc_context *ctx = tiny_context();
    nctmc_model *model = NULL;
    nctmc_trainer *trainer = NULL;
    nctmc_status st = ctx ? nctmc_trainer_resume(ctx, path, NULL, &model, &trainer)
                          : NCTMC_ERR_BACKEND;
    CHECK(st == NCTMC_OK, "resume: %s", nctmc_context_last_error(ctx));
    nctmc_trainer_state state;
    nctmc_trainer_state_init(&state);
    int64_t step0 = trainer && nctmc_trainer_get_state(trainer, &state) == NCTMC_OK
                        ? state.step
                        : -1;
    for (int k = 0; k < n && st == NCTMC_OK; k++) {
        switch (order[k]) {
        case 0: nctmc_context_free(ctx); ctx = NULL; break;
        case 1: nctmc_model_free(model); model = NULL; break;
        case 2: nctmc_trainer_free(trainer); trainer = NULL; break;
        }
        if (trainer) {
            int32_t tokens[2 * TINY_L];
            tiny_batch(tokens, TINY_S);
            CHECK(nctmc_trainer_step(trainer, tokens, NULL, NULL) == NCTMC_OK,
                  "resumed trainer, step after %d frees: %s", k + 1,
                  nctmc_trainer_last_error(trainer));
            CHECK(nctmc_trainer_get_state(trainer, &state) == NCTMC_OK &&
                      state.step == step0 + k + 1,
                  "resumed trainer: step %lld, expected %lld", (long long)state.step,
                  (long long)(step0 + k + 1));
        }
        if (model) {
            float emb[TINY_S * 16];
            CHECK(read_embedding(model, emb) && isfinite(emb[0]),
                  "resumed model, read after %d frees", k + 1);
        }
        if (ctx)
            CHECK(nctmc_context_n_threads(ctx) == 1, "resume's context after %d frees", k + 1);
    }
    nctmc_trainer_free(trainer);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    n_orders++;
}

static void test_resume_orders(void)
{
    handles h;
    reference ref;
    CHECK(make_handles(&h, false, &ref), "setting up the handles");
    char path[600];
    test_path(path, sizeof path, tmp_dir, "resume.ckpt");
    CHECK(h.trainer && nctmc_trainer_save(h.trainer, path) == NCTMC_OK, "save: %s",
          nctmc_trainer_last_error(h.trainer));
    for (int k = 0; k < N_HANDLES; k++)
        free_handle(&h, k);
    int three[3] = {0, 1, 2};
    n_orders = 0;
    permute(three, 3, 3, resume_order, path);
    CHECK(n_orders == 6, "%d resume orders, expected 6", n_orders);
}

/* ---- 4: the log callback ends with the caller's context --------------------- */

static void count_log(nctmc_log_level level, const char *message, void *user_data)
{
    (void)level;
    (void)message;
    (*(int *)user_data)++;
}

static void test_log_detached(void)
{
    int n_logs = 0;
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    cp.log_fn = count_log;
    cp.log_user_data = &n_logs;
    cp.log_level = NCTMC_LOG_DEBUG;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context with a log callback");
    nctmc_model *m = ctx ? tiny_model(ctx, NCTMC_PROCESS_MASKED, 0) : NULL;
    CHECK(n_logs > 0, "creating a context and a model logged nothing at DEBUG");
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_length = TINY_L + 1;
    nctmc_sampler *s = (nctmc_sampler *)&s;
    int before = n_logs;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT && s == NULL,
          "max_length beyond seq_len accepted");
    CHECK(n_logs > before, "a failed sampler_create was not logged while the context is held");
    nctmc_context_free(ctx);
    before = n_logs;
    s = (nctmc_sampler *)&s;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT && s == NULL,
          "max_length beyond seq_len accepted after the context was freed");
    CHECK(strstr(nctmc_model_last_error(m), "max_length") != NULL,
          "the failure is not readable on the model: \"%s\"", nctmc_model_last_error(m));
    sp.max_length = 0;
    s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK && s, "sampler after the context");
    int32_t out[N_OUT];
    nctmc_sample_params p = tiny_sample_params(out);
    CHECK(s && nctmc_sample(s, &p) == NCTMC_OK, "sample on a freed context: %s",
          nctmc_sampler_last_error(s));
    nctmc_model_free(m);
    p.n_steps = 0;   /* invalid: the failure would be logged if the callback were live */
    CHECK(s && nctmc_sample(s, &p) == NCTMC_ERR_INVALID_ARGUMENT, "n_steps 0 accepted");
    CHECK(n_logs == before, "%d messages reached the callback after nctmc_context_free()",
          n_logs - before);
    nctmc_sampler_free(s);
}

/* ---- 5: threads ------------------------------------------------------------ */

#define N_THREADS 4
#define N_DRAWS 30

typedef struct worker {
    pthread_t thread;
    nctmc_sampler *sampler;
    pthread_mutex_t *gate;      /* held by main until it has freed its handles */
    const int32_t *expected;
    int mismatches;
    int failures;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    int32_t out[N_OUT];
    for (int k = 0; k < N_DRAWS; k++) {
        if (k == N_DRAWS / 2) {   /* wait here until the main thread has let go */
            pthread_mutex_lock(w->gate);
            pthread_mutex_unlock(w->gate);
        }
        nctmc_sample_params p = tiny_sample_params(out);
        if (nctmc_sample(w->sampler, &p) != NCTMC_OK)
            w->failures++;
        else if (memcmp(out, w->expected, sizeof out) != 0)
            w->mismatches++;
    }
    nctmc_sampler_free(w->sampler);
    return NULL;
}

static void test_threads(void)
{
    nctmc_context *ctx = tiny_context();
    nctmc_model *m = ctx ? tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0) : NULL;
    nctmc_context *own = tiny_context();
    if (!m || !own) {
        nctmc_model_free(m);
        nctmc_context_free(ctx);
        nctmc_context_free(own);
        return;
    }
    int32_t expected[N_OUT];
    nctmc_sampler *probe = tiny_sampler(m, own);
    nctmc_sample_params p = tiny_sample_params(expected);
    CHECK(probe && nctmc_sample(probe, &p) == NCTMC_OK, "reference draw");
    nctmc_sampler_free(probe);
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&gate);
    worker w[N_THREADS];
    nctmc_context *ctxs[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ctxs[i] = tiny_context();
        w[i] = (worker){.sampler = ctxs[i] ? tiny_sampler(m, ctxs[i]) : NULL,
                        .gate = &gate,
                        .expected = expected};
    }
    int started = 0;
    for (int i = 0; i < N_THREADS; i++)
        if (w[i].sampler && pthread_create(&w[i].thread, NULL, worker_main, &w[i]) == 0)
            started++;
    CHECK(started == N_THREADS, "%d of %d threads started", started, N_THREADS);
    /* drop every handle the main thread holds while the workers draw */
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    nctmc_context_free(own);
    for (int i = 0; i < N_THREADS; i++)
        nctmc_context_free(ctxs[i]);
    pthread_mutex_unlock(&gate);
    for (int i = 0; i < N_THREADS; i++) {
        if (!w[i].sampler)
            continue;
        pthread_join(w[i].thread, NULL);
        CHECK(w[i].failures == 0 && w[i].mismatches == 0,
              "thread %d: %d failed draws, %d differing draws", i, w[i].failures,
              w[i].mismatches);
    }
    pthread_mutex_destroy(&gate);
}

int main(void)
{
    if (!test_make_temp_dir(tmp_dir, sizeof tmp_dir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    test_every_order();
    test_resume_orders();
    test_log_detached();
    test_threads();
    test_remove_dir(tmp_dir);
    return test_finish("lifetimes");
}
