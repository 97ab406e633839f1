/*
 * test_cancel.c — nctmc_sampler_cancel() (issue 8 §4):
 *
 *  1. From another thread while nctmc_sample() runs: the call returns
 *     NCTMC_ERR_CANCELLED within a step, with the tokens of the last step
 *     (those the callback was shown) in tokens_out, and says why.
 *  2. The rule for a cancel made while no call runs: the next call starts
 *     with the request cleared and draws exactly what a fresh sampler draws.
 *  3. From inside the callback: the call stops after that step.
 *  4. A cancelled sampler draws the same tokens as before afterwards;
 *     cancel(NULL) does nothing.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "nctmc.h"
#include "test_util.h"
#include "tiny_model.h"

#define N_OUT (TINY_BATCH * TINY_L)
#define LONG_RUN 1000000     /* steps: minutes on the tiny model, never reached */
#define SAFETY_STOP 200000   /* the callback gives up here if cancel is ignored */

typedef struct watch {
    atomic_int steps_seen;
    int32_t last_tokens[N_OUT];
    nctmc_sampler *cancel_at_step_of;   /* callback cancels itself at step 2 */
} watch;

static int32_t watch_step(int32_t step, int32_t n_steps, const int32_t *tokens,
                          int32_t batch, int32_t length, void *user_data)
{
    (void)n_steps;
    watch *w = user_data;
    memcpy(w->last_tokens, tokens, (size_t)batch * (size_t)length * sizeof(int32_t));
    atomic_store(&w->steps_seen, step);
    if (w->cancel_at_step_of && step == 2)
        nctmc_sampler_cancel(w->cancel_at_step_of);
    return step < SAFETY_STOP;
}

typedef struct job {
    nctmc_sampler *sampler;
    nctmc_sample_params params;
    nctmc_status status;
} job;

static void *job_main(void *arg)
{
    job *j = arg;
    j->status = nctmc_sample(j->sampler, &j->params);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* 1 */
static void test_cancel_from_thread(nctmc_sampler *s)
{
    watch w;
    memset(&w, 0, sizeof w);
    atomic_init(&w.steps_seen, 0);
    int32_t out[N_OUT];
    for (int i = 0; i < N_OUT; i++)
        out[i] = -1;
    job j = {.sampler = s, .params = tiny_sample_params(out)};
    j.params.n_steps = LONG_RUN;
    j.params.callback = watch_step;
    j.params.user_data = &w;
    pthread_t thread;
    if (pthread_create(&thread, NULL, job_main, &j) != 0) {
        CHECK(0, "cannot start a thread");
        return;
    }
    /* cancel once the call is surely running: its callback has been seen */
    for (int k = 0; k < 30000 && atomic_load(&w.steps_seen) < 3; k++)
        sleep_ms(1);
    int seen_at_cancel = atomic_load(&w.steps_seen);
    nctmc_sampler_cancel(s);
    pthread_join(thread, NULL);
    int last = atomic_load(&w.steps_seen);
    CHECK(seen_at_cancel >= 3, "the running call showed no step within 30 s");
    CHECK(j.status == NCTMC_ERR_CANCELLED, "status %s", nctmc_status_string(j.status));
    CHECK(last >= seen_at_cancel && last <= seen_at_cancel + 2,
          "cancelled at step %d, the callback had seen step %d when cancel was called", last,
          seen_at_cancel);
    CHECK(memcmp(out, w.last_tokens, sizeof out) == 0,
          "tokens_out is not the last step's tokens");
    CHECK(strstr(nctmc_sampler_last_error(s), "nctmc_sampler_cancel") != NULL,
          "message \"%s\"", nctmc_sampler_last_error(s));
    for (int i = 0; i < N_OUT; i++)
        CHECK(out[i] >= 0 && out[i] < TINY_S, "tokens_out[%d] = %d", i, out[i]);
}

/* 2, 4 */
static void test_cancel_before_call(nctmc_sampler *s, const int32_t *reference)
{
    int32_t out[N_OUT];
    nctmc_sample_params p = tiny_sample_params(out);
    nctmc_sampler_cancel(s);
    nctmc_sampler_cancel(s);
    CHECK(nctmc_sample(s, &p) == NCTMC_OK, "a cancel made before the call stopped it: %s",
          nctmc_sampler_last_error(s));
    CHECK(memcmp(out, reference, sizeof out) == 0,
          "after a cancel the sampler draws other tokens");
    CHECK(strcmp(nctmc_sampler_last_error(s), "") == 0, "message \"%s\" after a success",
          nctmc_sampler_last_error(s));
    nctmc_sampler_cancel(NULL);
}

/* 3 */
static void test_cancel_in_callback(nctmc_sampler *s)
{
    watch w;
    memset(&w, 0, sizeof w);
    atomic_init(&w.steps_seen, 0);
    w.cancel_at_step_of = s;
    int32_t out[N_OUT];
    nctmc_sample_params p = tiny_sample_params(out);
    p.n_steps = 50;
    p.callback = watch_step;
    p.user_data = &w;
    CHECK(nctmc_sample(s, &p) == NCTMC_ERR_CANCELLED, "a cancel from the callback was ignored");
    CHECK(atomic_load(&w.steps_seen) == 2, "stopped after step %d, expected 2",
          atomic_load(&w.steps_seen));
    CHECK(memcmp(out, w.last_tokens, sizeof out) == 0, "tokens_out is not step 2's tokens");
    CHECK(strstr(nctmc_sampler_last_error(s), "after step 2") != NULL, "message \"%s\"",
          nctmc_sampler_last_error(s));
}

int main(void)
{
    nctmc_context *ctx = tiny_context();
    nctmc_model *m = ctx ? tiny_model(ctx, NCTMC_PROCESS_MASKED, 0) : NULL;
    nctmc_sampler *s = m ? tiny_sampler(m, NULL) : NULL;
    nctmc_sampler *fresh = m ? tiny_sampler(m, NULL) : NULL;
    if (s && fresh) {
        int32_t reference[N_OUT];
        nctmc_sample_params p = tiny_sample_params(reference);
        CHECK(nctmc_sample(fresh, &p) == NCTMC_OK, "reference draw");
        test_cancel_from_thread(s);
        test_cancel_before_call(s, reference);
        test_cancel_in_callback(s);
        test_cancel_before_call(s, reference);
    }
    nctmc_sampler_free(fresh);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return test_finish("cancel");
}
