/*
 * test_log_hook.c — nctmc_set_log_callback() (nctmc.h, "The process-wide log
 * callback"): the errors of calls made without a context (a tokenizer or a
 * dataset with a NULL ctx, nctmc_context_create() without a log_fn) reach
 * it, at or above its level; calls with a context do not; fn NULL removes
 * it; a bad level is refused; the callback may call back into the library
 * (a nested failing call, and setting the hook itself); and several threads
 * that log while one thread swaps the callback never see a callback after
 * the call that replaced it returned, nor a callback with another's user
 * data (run under ThreadSanitizer by scripts/test.sh).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

#define MISSING "/nonexistent/nctmc-log-hook-test.tok"

typedef struct sink {
    int n;
    nctmc_log_level last_level;
    char last[512];
} sink;

static void to_sink(nctmc_log_level level, const char *msg, void *user)
{
    sink *s = user;
    s->n++;
    s->last_level = level;
    snprintf(s->last, sizeof s->last, "%s", msg);
}

static nctmc_status load_missing(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_status st = nctmc_tokenizer_load(ctx, MISSING, &tok);
    nctmc_tokenizer_free(tok);
    return st;
}

/* ---- a callback that calls back into the library --------------------- */

static int reentry_depth;
static sink reentry_sink;

static void reentrant(nctmc_log_level level, const char *msg, void *user)
{
    to_sink(level, msg, user);
    if (reentry_depth++ == 0) {
        /* a nested failing call logs again, to this same callback */
        load_missing(NULL);
        /* and the callback replaces itself: this call finishes */
        nctmc_set_log_callback(to_sink, &reentry_sink, NCTMC_LOG_ERROR);
    }
}

/* ---- several threads ------------------------------------------------- */

#define N_WORKERS 4
#define N_SWAPS 400

typedef struct counted {
    atomic_int inside;  /* threads in the callback now */
    atomic_int calls;
    atomic_int wrong_user;
} counted;

static counted cb_a, cb_b;

/* Stays a moment inside the callback, so that a setter that did not wait
 * for it would see it still running. */
static atomic_uint linger_sink;

static void linger(void)
{
    unsigned x = 0;
    for (int k = 0; k < 20000; k++)
        x = x * 31u + (unsigned)k;
    atomic_fetch_add_explicit(&linger_sink, x, memory_order_relaxed);
}

static void call_a(nctmc_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    atomic_fetch_add(&cb_a.inside, 1);
    if (user != &cb_a)
        atomic_fetch_add(&cb_a.wrong_user, 1);
    atomic_fetch_add(&cb_a.calls, 1);
    linger();
    atomic_fetch_sub(&cb_a.inside, 1);
}

static void call_b(nctmc_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    atomic_fetch_add(&cb_b.inside, 1);
    if (user != &cb_b)
        atomic_fetch_add(&cb_b.wrong_user, 1);
    atomic_fetch_add(&cb_b.calls, 1);
    linger();
    atomic_fetch_sub(&cb_b.inside, 1);
}

static atomic_int stop_workers;

static void *worker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_workers))
        load_missing(NULL);
    return NULL;
}

static void concurrent(void)
{
    pthread_t th[N_WORKERS];
    for (int k = 0; k < N_WORKERS; k++)
        CHECK(pthread_create(&th[k], NULL, worker, NULL) == 0, "thread");
    int late = 0, swaps = 0;
    /* at least N_SWAPS swaps, and on until the workers' messages have
     * arrived under both callbacks (bounded: a hook that never delivers
     * fails below) */
    for (int i = 0; i < N_SWAPS || ((atomic_load(&cb_a.calls) < 100 ||
                                     atomic_load(&cb_b.calls) < 100) && i < 50000000);
         i++) {
        swaps++;
        bool to_a = i % 2 == 0;
        nctmc_set_log_callback(to_a ? call_a : call_b, to_a ? &cb_a : &cb_b, NCTMC_LOG_ERROR);
        /* only this thread sets the hook: the replaced one cannot be
         * running now, nor start again before the next swap */
        if (atomic_load(to_a ? &cb_b.inside : &cb_a.inside) != 0)
            late++;
    }
    nctmc_set_log_callback(NULL, NULL, NCTMC_LOG_ERROR);
    atomic_store(&stop_workers, 1);
    for (int k = 0; k < N_WORKERS; k++)
        pthread_join(th[k], NULL);
    int calls_a = atomic_load(&cb_a.calls), calls_b = atomic_load(&cb_b.calls);
    CHECK(late == 0, "a replaced callback ran after the swap returned (%d times)", late);
    CHECK(atomic_load(&cb_a.wrong_user) == 0 && atomic_load(&cb_b.wrong_user) == 0,
          "a callback got another's user data");
    CHECK(calls_a >= 100 && calls_b >= 100, "the workers' messages arrived (%d + %d)", calls_a,
          calls_b);
    /* removed: nothing more arrives */
    load_missing(NULL);
    CHECK(atomic_load(&cb_a.calls) == calls_a && atomic_load(&cb_b.calls) == calls_b,
          "no delivery after the callback was removed");
    printf("concurrent: %d + %d deliveries over %d swaps\n", calls_a, calls_b, swaps);
}

int main(void)
{
    /* nothing set: a failing call is just an error code */
    CHECK(load_missing(NULL) == NCTMC_ERR_IO || load_missing(NULL) != NCTMC_OK, "missing file");

    sink s = {0, 0, ""};
    CHECK(nctmc_set_log_callback(to_sink, &s, 99) == NCTMC_ERR_INVALID_ARGUMENT,
          "level 99 refused");
    CHECK(nctmc_set_log_callback(to_sink, &s, -1) == NCTMC_ERR_INVALID_ARGUMENT,
          "level -1 refused");
    load_missing(NULL);
    CHECK(s.n == 0, "a refused callback is not set");

    CHECK(nctmc_set_log_callback(to_sink, &s, NCTMC_LOG_WARN) == NCTMC_OK, "set");
    CHECK(load_missing(NULL) != NCTMC_OK, "still fails");
    CHECK(s.n == 1 && s.last_level == NCTMC_LOG_ERROR && strstr(s.last, MISSING),
          "tokenizer without a context: %d \"%s\"", s.n, s.last);

    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(NULL, "/nonexistent/nctmc-log-hook-test.bin", &ds) != NCTMC_OK,
          "dataset open fails");
    CHECK(s.n == 2 && strstr(s.last, "nctmc-log-hook-test.bin"),
          "dataset without a context: %d \"%s\"", s.n, s.last);

    /* nctmc_context_create without a log_fn: the process-wide callback */
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "no-such-backend";
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) != NCTMC_OK && !ctx, "bad backend");
    CHECK(s.n == 3 && strstr(s.last, "no-such-backend"), "context creation: %d \"%s\"", s.n,
          s.last);
    /* with its own log_fn: that one only */
    sink own = {0, 0, ""};
    cp.log_fn = to_sink;
    cp.log_user_data = &own;
    CHECK(nctmc_context_create(&cp, &ctx) != NCTMC_OK, "bad backend, own log_fn");
    CHECK(s.n == 3 && own.n == 1, "own log_fn takes it: %d %d", s.n, own.n);

    /* a call with a context logs there, not to the process-wide callback */
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");
    CHECK(load_missing(ctx) != NCTMC_OK && s.n == 3 &&
              strstr(nctmc_context_last_error(ctx), MISSING),
          "with a context: %d, \"%s\"", s.n, nctmc_context_last_error(ctx));
    nctmc_context_free(ctx);

    /* the level filters: ERROR passes ERROR */
    CHECK(nctmc_set_log_callback(to_sink, &s, NCTMC_LOG_ERROR) == NCTMC_OK, "level error");
    load_missing(NULL);
    CHECK(s.n == 4, "ERROR at level ERROR: %d", s.n);

    /* removed */
    CHECK(nctmc_set_log_callback(NULL, NULL, 0) == NCTMC_OK, "remove");
    load_missing(NULL);
    CHECK(s.n == 4, "nothing after removal: %d", s.n);

    /* re-entry: a nested call and a self-replacement from the callback */
    sink first = {0, 0, ""};
    CHECK(nctmc_set_log_callback(reentrant, &first, NCTMC_LOG_DEBUG) == NCTMC_OK, "reentrant");
    load_missing(NULL);
    CHECK(first.n == 2 && reentry_sink.n == 0, "nested delivery to the same callback: %d %d",
          first.n, reentry_sink.n);
    load_missing(NULL);
    CHECK(first.n == 2 && reentry_sink.n == 1, "the callback replaced itself: %d %d", first.n,
          reentry_sink.n);
    nctmc_set_log_callback(NULL, NULL, 0);

    concurrent();
    return test_finish("log_hook");
}
