/*
 * test_trainer.c — the trainer: parameter checks, the learning-rate
 * schedule (and its constant mode), that training lowers the loss,
 * determinism across runs and thread counts, bit-exact resume (20 steps =
 * 10 + save + resume + 10), skipped non-finite steps, clipping, the EMA,
 * dataset batches, activation recomputation, and gradient accumulation.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

#define S_TOKENS 6
#define SEQ_LEN 8
#define BATCH 4

static char tmp_dir[256];

static nctmc_context *make_ctx(int threads)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = threads;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&p, &ctx) != NCTMC_OK)
        return NULL;
    return ctx;
}

static nctmc_model_config tiny_config(nctmc_process process, int32_t n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = S_TOKENS;
    c.seq_len = SEQ_LEN;
    c.n_layers = 1;
    c.d_model = 32;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.n_classes = n_classes;
    c.process = process;
    c.seed = 7;
    return c;
}

static nctmc_trainer_params tiny_params(void)
{
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = BATCH;
    p.learning_rate = 3e-3f;
    p.warmup_steps = 3;
    p.total_steps = 40;
    p.seed = 11;
    return p;
}

/* A fixed batch with structure to learn: token p of sequence b is
 * (b + p) % n_data. */
static void fill_batch(int32_t *tokens, int32_t n_data)
{
    for (int b = 0; b < BATCH; b++)
        for (int p = 0; p < SEQ_LEN; p++)
            tokens[b * SEQ_LEN + p] = (b + p) % n_data;
}

/* All weights of a model as one host array (tensor order). */
static float *dump_weights(const nctmc_model *m, size_t *n_out)
{
    int64_t total = nctmc_model_n_params(m);
    float *all = malloc((size_t)total * sizeof(float));
    size_t at = 0;
    for (int32_t i = 0; i < nctmc_model_n_tensors(m); i++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, i, &info);
        nctmc_model_read_tensor(m, info.name, all + at, info.n_elements);
        at += (size_t)info.n_elements;
    }
    *n_out = at;
    return all;
}

static bool same_weights(const nctmc_model *a, const nctmc_model *b)
{
    size_t na, nb;
    float *wa = dump_weights(a, &na), *wb = dump_weights(b, &nb);
    bool same = na == nb && memcmp(wa, wb, na * sizeof(float)) == 0;
    free(wa);
    free(wb);
    return same;
}

static void test_bad_params(void)
{
    nctmc_context *ctx = make_ctx(1);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_trainer *t = NULL;
    nctmc_trainer_params p = tiny_params();
    CHECK(nctmc_trainer_create(m, &p, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out");
    CHECK(nctmc_trainer_create(m, NULL, &t) == NCTMC_ERR_INVALID_ARGUMENT, "NULL params");
    nctmc_trainer_params bad = p;
    bad.batch_size = 0;
    CHECK(nctmc_trainer_create(m, &bad, &t) == NCTMC_ERR_INVALID_ARGUMENT, "batch 0");
    CHECK(strstr(nctmc_model_last_error(m), "batch_size") != NULL, "message: %s",
          nctmc_model_last_error(m));
    bad = p;
    bad.seq_len = SEQ_LEN + 1;
    CHECK(nctmc_trainer_create(m, &bad, &t) == NCTMC_ERR_INVALID_ARGUMENT, "seq_len too long");
    bad = p;
    bad.learning_rate = NAN;
    CHECK(nctmc_trainer_create(m, &bad, &t) == NCTMC_ERR_INVALID_ARGUMENT, "NaN lr");
    bad = p;
    bad.time_eps = 0.0f;
    CHECK(nctmc_trainer_create(m, &bad, &t) == NCTMC_ERR_INVALID_ARGUMENT, "time_eps 0");
    bad = p;
    bad.beta2 = 1.0f;
    CHECK(nctmc_trainer_create(m, &bad, &t) == NCTMC_ERR_INVALID_ARGUMENT, "beta2 1");
    bad = p;
    bad.struct_size = 3;
    CHECK(nctmc_trainer_create(m, &bad, &t) == NCTMC_ERR_INVALID_ARGUMENT, "struct_size");
    CHECK(t == NULL, "no trainer on failure");

    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "create: %s", nctmc_model_last_error(m));
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    tokens[5] = S_TOKENS;
    CHECK(nctmc_trainer_step(t, tokens, NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "token out of range");
    tokens[5] = 0;
    int32_t labels[BATCH] = {0, 0, 0, 0};
    CHECK(nctmc_trainer_step(t, tokens, labels, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "labels for an unconditional model");
    CHECK(nctmc_trainer_step(t, NULL, NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL tokens");
    nctmc_train_stats stats = {.struct_size = 1};
    CHECK(nctmc_trainer_step(t, tokens, NULL, &stats) == NCTMC_ERR_INVALID_ARGUMENT,
          "stats struct_size");
    nctmc_trainer_state state;
    nctmc_trainer_state_init(&state);
    nctmc_trainer_get_state(t, &state);
    CHECK(state.step == 0, "rejected calls take no step (%lld)", (long long)state.step);
    nctmc_trainer_free(t);
    nctmc_trainer_free(NULL);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* With the legacy sigma link most of the early gain is the exit rate
 * finding its context-free level, which the noise-posterior link starts
 * at: that run gets the whole cosine schedule (120 steps) so that the jump
 * distribution and h have time to learn the batch's structure. */
static void test_schedule_and_learning(nctmc_process process, nctmc_exit_link link)
{
    nctmc_context *ctx = make_ctx(2);
    nctmc_model_config c = tiny_config(process, 0);
    c.exit_link = link;
    c.time_input = link == NCTMC_EXIT_LINK_SIGMA ? NCTMC_TIME_INPUT_T : NCTMC_TIME_INPUT_LOG_SNR;
    int32_t n_data = process == NCTMC_PROCESS_UNIFORM ? S_TOKENS : S_TOKENS - 1;
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_trainer_params p = tiny_params();
    if (link != NCTMC_EXIT_LINK_SIGMA)
        p.total_steps = 120;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "create");
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, n_data);
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    double first = 0.0, last = 0.0;
    int steps = 120;
    for (int k = 0; k < steps; k++) {
        nctmc_status st = nctmc_trainer_step(t, tokens, NULL, &s);
        CHECK(st == NCTMC_OK, "step %d: %s", k, nctmc_trainer_last_error(t));
        CHECK(s.step == k + 1, "step counter");
        double peak = p.learning_rate, floor_lr = peak * p.min_lr_ratio;
        double want;
        if (k < p.warmup_steps)
            want = peak * (k + 1) / (double)p.warmup_steps;
        else if (k >= p.total_steps)
            want = floor_lr;
        else
            want = floor_lr + (peak - floor_lr) * 0.5 *
                                  (1.0 + cos(3.14159265358979323846 * (k - p.warmup_steps) /
                                             (double)(p.total_steps - p.warmup_steps)));
        CHECK_CLOSE(s.learning_rate, want, 1e-9, 1e-12, "learning rate");
        CHECK(isfinite(s.grad_norm) && s.grad_norm > 0.0, "gradient norm %g", s.grad_norm);
        CHECK(isfinite(s.mean_log_rate), "mean log rate");
        if (k < 20)
            first += s.loss / 20.0;
        if (k >= steps - 20)
            last += s.loss / 20.0;
    }
    printf("  %s, %s link: mean loss of the first 20 steps %.4f, of the last 20 %.4f\n",
           process == NCTMC_PROCESS_UNIFORM ? "uniform" : "masked",
           link == NCTMC_EXIT_LINK_SIGMA ? "sigma" : "noise-posterior", first, last);
    CHECK(last < 0.95 * first, "training lowers the loss: %.4f -> %.4f", first, last);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* min_lr_ratio = 1: after the warm-up the rate is the peak exactly, at
 * every step up to total_steps and past it (the paper's constant rate). */
static void test_constant_rate(void)
{
    nctmc_context *ctx = make_ctx(1);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_trainer_params p = tiny_params();
    p.min_lr_ratio = 1.0f;
    p.warmup_steps = 4;
    p.total_steps = 12;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "create");
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    bool warm = true, flat = true;
    for (int k = 0; k < 20 && t; k++) {
        nctmc_trainer_step(t, tokens, NULL, &s);
        if (k < p.warmup_steps)
            warm = warm && s.learning_rate == (double)p.learning_rate * (k + 1) / 4.0;
        else
            flat = flat && s.learning_rate == (double)p.learning_rate;
    }
    CHECK(warm, "the warm-up still rises linearly");
    CHECK(flat, "min_lr_ratio 1 keeps the peak rate exactly after the warm-up (last %.17g)",
          s.learning_rate);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* Runs `steps` steps from a fresh model; returns the model (trainer freed). */
static nctmc_model *train_fresh(nctmc_context *ctx, int steps, double *losses)
{
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 3);
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_trainer_params p = tiny_params();
    nctmc_trainer *t = NULL;
    nctmc_trainer_create(m, &p, &t);
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    int32_t labels[BATCH] = {0, 1, 2, 1};
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    for (int k = 0; k < steps; k++) {
        nctmc_trainer_step(t, tokens, labels, &s);
        losses[k] = s.loss;
    }
    nctmc_trainer_free(t);
    return m;
}

/* nctmc_trainer_params.activation_recompute: the same losses and weights,
 * bit for bit, on a 3-layer model (two blocks run again in the backward
 * pass), through the public API. */
static void test_activation_recompute(void)
{
    nctmc_context *ctx = make_ctx(2);
    double losses[2][5];
    nctmc_model *models[2] = {NULL, NULL};
    for (int recompute = 0; recompute < 2; recompute++) {
        nctmc_model_config c = tiny_config(NCTMC_PROCESS_MIXTURE, 3);
        c.n_layers = 3;
        nctmc_model_create(ctx, &c, &models[recompute]);
        nctmc_trainer_params p = tiny_params();
        p.activation_recompute = recompute;
        nctmc_trainer *t = NULL;
        CHECK(nctmc_trainer_create(models[recompute], &p, &t) == NCTMC_OK, "create: %s",
              nctmc_model_last_error(models[recompute]));
        nctmc_trainer_params got;
        nctmc_trainer_params_init(&got);
        nctmc_trainer_get_params(t, &got);
        CHECK(got.activation_recompute == recompute, "get_params reports recompute %d",
              recompute);
        int32_t tokens[BATCH * SEQ_LEN];
        fill_batch(tokens, S_TOKENS - 1); /* the mixture's last state is the mask */
        int32_t labels[BATCH] = {0, 2, 2, 1};
        nctmc_train_stats s;
        nctmc_train_stats_init(&s);
        for (int k = 0; k < 5; k++) {
            CHECK(nctmc_trainer_step(t, tokens, labels, &s) == NCTMC_OK, "step: %s",
                  nctmc_trainer_last_error(t));
            losses[recompute][k] = s.loss;
        }
        nctmc_trainer_free(t);
    }
    CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0,
          "recomputation: identical losses");
    CHECK(same_weights(models[0], models[1]), "recomputation: identical weights");
    nctmc_model_free(models[0]);
    nctmc_model_free(models[1]);
    nctmc_context_free(ctx);
}

static void test_determinism(void)
{
    nctmc_context *c1 = make_ctx(1), *c2 = make_ctx(2), *c3 = make_ctx(3);
    double l1[6], l2[6], l3[6];
    nctmc_model *a = train_fresh(c1, 6, l1);
    nctmc_model *b = train_fresh(c2, 6, l2);
    nctmc_model *c = train_fresh(c3, 6, l3);
    CHECK(same_weights(a, b) && same_weights(a, c),
          "1, 2 and 3 threads train to identical bits");
    CHECK(memcmp(l1, l2, sizeof l1) == 0 && memcmp(l1, l3, sizeof l1) == 0,
          "identical losses across thread counts");
    nctmc_model_free(a);
    nctmc_model_free(b);
    nctmc_model_free(c);
    nctmc_context_free(c1);
    nctmc_context_free(c2);
    nctmc_context_free(c3);
}

/* 20 steps straight equal 10 steps, save, resume, 10 steps — weights, EMA,
 * losses and state, bit for bit. */
static void test_resume(void)
{
    nctmc_context *ctx = make_ctx(2);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 3);
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    int32_t labels[BATCH] = {2, 0, 1, 1};
    nctmc_trainer_params p = tiny_params();
    p.weight_decay = 0.01f;

    nctmc_model *straight = NULL;
    nctmc_model_create(ctx, &c, &straight);
    nctmc_trainer *ts = NULL;
    nctmc_trainer_create(straight, &p, &ts);
    double loss_straight[20];
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    for (int k = 0; k < 20; k++) {
        nctmc_trainer_step(ts, tokens, labels, &s);
        loss_straight[k] = s.loss;
    }

    nctmc_model *first = NULL;
    nctmc_model_create(ctx, &c, &first);
    nctmc_trainer *tf = NULL;
    nctmc_trainer_create(first, &p, &tf);
    double loss_split[20];
    for (int k = 0; k < 10; k++) {
        nctmc_trainer_step(tf, tokens, labels, &s);
        loss_split[k] = s.loss;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/resume.safetensors", tmp_dir);
    CHECK(nctmc_trainer_save(tf, path) == NCTMC_OK, "save: %s", nctmc_trainer_last_error(tf));
    nctmc_trainer_free(tf);
    nctmc_model_free(first);

    nctmc_model *resumed = NULL;
    nctmc_trainer *tr = NULL;
    nctmc_status st = nctmc_trainer_resume(ctx, path, NULL, &resumed, &tr);
    CHECK(st == NCTMC_OK, "resume: %s", nctmc_context_last_error(ctx));
    if (st != NCTMC_OK)
        goto done;
    nctmc_trainer_state state;
    nctmc_trainer_state_init(&state);
    nctmc_trainer_get_state(tr, &state);
    CHECK(state.step == 10 && state.optimizer_steps == 10 && state.seed == p.seed,
          "resumed state: step %lld", (long long)state.step);
    for (int k = 10; k < 20; k++) {
        nctmc_trainer_step(tr, tokens, labels, &s);
        loss_split[k] = s.loss;
    }
    CHECK(memcmp(loss_straight, loss_split, sizeof loss_split) == 0,
          "the same 20 losses, bit for bit");
    CHECK(same_weights(straight, resumed), "the same raw weights, bit for bit");
    nctmc_model *ema_a = NULL, *ema_b = NULL;
    nctmc_model_create(ctx, &c, &ema_a);
    nctmc_model_create(ctx, &c, &ema_b);
    nctmc_trainer_copy_weights(ts, ema_a, 1);
    nctmc_trainer_copy_weights(tr, ema_b, 1);
    CHECK(same_weights(ema_a, ema_b), "the same EMA weights, bit for bit");

    /* nctmc_model_load reads the EMA from a trainer checkpoint */
    snprintf(path, sizeof path, "%s/resume20.safetensors", tmp_dir);
    nctmc_trainer_save(tr, path);
    nctmc_model *loaded = NULL;
    CHECK(nctmc_model_load(ctx, path, &loaded) == NCTMC_OK, "load: %s",
          nctmc_context_last_error(ctx));
    CHECK(loaded && same_weights(loaded, ema_b), "model_load gives the EMA weights");
    nctmc_model_free(loaded);

    nctmc_trainer_params wrong = p;
    wrong.batch_size = BATCH + 1;
    nctmc_model *m2 = NULL;
    nctmc_trainer *t2 = NULL;
    CHECK(nctmc_trainer_resume(ctx, path, &wrong, &m2, &t2) == NCTMC_ERR_INVALID_ARGUMENT,
          "a different batch size is refused on resume");
    CHECK(m2 == NULL && t2 == NULL, "nothing returned on failure");

    /* a model checkpoint is not a trainer checkpoint */
    snprintf(path, sizeof path, "%s/model_only.safetensors", tmp_dir);
    nctmc_model_save(straight, path);
    CHECK(nctmc_trainer_resume(ctx, path, NULL, &m2, &t2) == NCTMC_ERR_FORMAT,
          "resuming from a model checkpoint: %s", nctmc_context_last_error(ctx));
    nctmc_model_free(ema_a);
    nctmc_model_free(ema_b);
    nctmc_trainer_free(tr);
    nctmc_model_free(resumed);
done:
    nctmc_trainer_free(ts);
    nctmc_model_free(straight);
    nctmc_context_free(ctx);
}

/* A rate head that overflows exp() gives a non-finite loss: the step is
 * reported and skipped with the weights untouched. (Under the sigma link:
 * the noise-posterior link keeps lambda between lam_c and lam_n whatever h
 * is, see test_bounded_noise_link.) */
static void test_non_finite_skip(void)
{
    nctmc_context *ctx = make_ctx(1);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    c.exit_link = NCTMC_EXIT_LINK_SIGMA;
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    float huge = 1e30f;
    nctmc_model_write_tensor(m, "output_layer.rate_head.bias", &huge, 1);
    size_t n_before;
    float *before = dump_weights(m, &n_before);
    nctmc_trainer_params p = tiny_params();
    nctmc_trainer *t = NULL;
    nctmc_trainer_create(m, &p, &t);
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    nctmc_status st = nctmc_trainer_step(t, tokens, NULL, &s);
    CHECK(st == NCTMC_ERR_NON_FINITE, "status %d", st);
    CHECK(s.skipped && s.n_skipped == 1 && s.step == 1, "stats say skipped");
    CHECK(strstr(nctmc_trainer_last_error(t), "skipped") != NULL, "message: %s",
          nctmc_trainer_last_error(t));
    size_t n_after;
    float *after = dump_weights(m, &n_after);
    CHECK(n_before == n_after && memcmp(before, after, n_after * sizeof(float)) == 0,
          "weights untouched");
    nctmc_trainer_state state;
    nctmc_trainer_state_init(&state);
    nctmc_trainer_get_state(t, &state);
    CHECK(state.step == 1 && state.optimizer_steps == 0, "no optimizer step taken");
    free(before);
    free(after);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* The noise-posterior link bounds lambda by lam_c and lam_n: a rate head at
 * +-1e30 trains on with a finite loss and gradient. */
static void test_bounded_noise_link(void)
{
    nctmc_context *ctx = make_ctx(1);
    static const float biases[] = {1e30f, -1e30f};
    for (int k = 0; k < 2; k++) {
        nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
        c.exit_link = NCTMC_EXIT_LINK_NOISE_POSTERIOR;
        nctmc_model *m = NULL;
        nctmc_model_create(ctx, &c, &m);
        nctmc_model_write_tensor(m, "output_layer.rate_head.bias", &biases[k], 1);
        nctmc_trainer_params p = tiny_params();
        nctmc_trainer *t = NULL;
        nctmc_trainer_create(m, &p, &t);
        int32_t tokens[BATCH * SEQ_LEN];
        fill_batch(tokens, S_TOKENS);
        nctmc_train_stats s;
        nctmc_train_stats_init(&s);
        nctmc_status st = nctmc_trainer_step(t, tokens, NULL, &s);
        CHECK(st == NCTMC_OK && !s.skipped && isfinite(s.loss) && isfinite(s.grad_norm) &&
                  isfinite(s.mean_log_rate),
              "bias %g: status %d, loss %g, grad norm %g", (double)biases[k], st, s.loss,
              s.grad_norm);
        nctmc_trainer_free(t);
        nctmc_model_free(m);
    }
    nctmc_context_free(ctx);
}

/* Size of the first update of all weights (in L2), with the given clip. */
static double first_update_size(float clip)
{
    nctmc_context *ctx = make_ctx(1);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    size_t n;
    float *before = dump_weights(m, &n);
    nctmc_trainer_params p = tiny_params();
    p.grad_clip = clip;
    p.adam_eps = 1.0f; /* large eps: the update is ~ lr * g, so clipping shows */
    p.warmup_steps = 0;
    nctmc_trainer *t = NULL;
    nctmc_trainer_create(m, &p, &t);
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    nctmc_trainer_step(t, tokens, NULL, NULL);
    float *after = dump_weights(m, &n);
    double sum = 0.0;
    for (size_t k = 0; k < n; k++)
        sum += ((double)after[k] - before[k]) * ((double)after[k] - before[k]);
    free(before);
    free(after);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return sqrt(sum);
}

static void test_clipping(void)
{
    double free_size = first_update_size(0.0f);
    double clipped = first_update_size(1e-3f);
    CHECK(free_size > 0.0 && clipped < 0.1 * free_size,
          "clipping to 1e-3 shrinks the update: %g vs %g", clipped, free_size);
}

/* After one step the EMA is d w0 + (1 - d) w1 with the warm-up decay
 * d = min(ema_decay, 2 / 11). */
static void test_ema(void)
{
    nctmc_context *ctx = make_ctx(1);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    /* a link that uses the rate head (the default, the denoiser link for
     * this process, leaves it untouched) */
    c.exit_link = NCTMC_EXIT_LINK_NOISE_POSTERIOR;
    nctmc_model *m = NULL, *ema = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_model_create(ctx, &c, &ema);
    /* a tensor that moves on the first step (the blocks' weights do not:
     * their zero-initialised gates hide them) */
    const char *name = "output_layer.rate_head.weight";
    int32_t index = -1;
    nctmc_model_find_tensor(m, name, &index);
    nctmc_tensor_info info = {.struct_size = sizeof info};
    nctmc_model_tensor_info(m, index, &info);
    int64_t n = info.n_elements;
    float *w0 = malloc((size_t)n * sizeof(float)), *w1 = malloc((size_t)n * sizeof(float)),
          *e = malloc((size_t)n * sizeof(float));
    nctmc_model_read_tensor(m, name, w0, n);
    nctmc_trainer_params p = tiny_params();
    nctmc_trainer *t = NULL;
    nctmc_trainer_create(m, &p, &t);
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS);
    nctmc_trainer_step(t, tokens, NULL, NULL);
    nctmc_model_read_tensor(m, name, w1, n);
    CHECK(nctmc_trainer_copy_weights(t, ema, 1) == NCTMC_OK, "copy EMA");
    nctmc_model_read_tensor(ema, name, e, n);
    float d = 2.0f / 11.0f;
    double worst = 0.0;
    bool moved = false;
    for (int64_t k = 0; k < n; k++) {
        double want = (double)(d * w0[k] + (1.0f - d) * w1[k]);
        worst = fmax(worst, fabs(e[k] - want));
        moved |= w1[k] != w0[k];
    }
    CHECK(moved, "the step changed the weights");
    CHECK(worst < 1e-6, "EMA after one step, worst error %g", worst);
    nctmc_trainer_params no_ema = p;
    no_ema.ema_decay = 0.0f;
    nctmc_trainer *t2 = NULL;
    nctmc_trainer_create(m, &no_ema, &t2);
    CHECK(nctmc_trainer_copy_weights(t2, ema, 1) == NCTMC_ERR_INVALID_ARGUMENT,
          "no EMA to copy");
    nctmc_model_config other = c;
    other.d_model = 64;
    nctmc_model *m_other = NULL;
    nctmc_model_create(ctx, &other, &m_other);
    CHECK(nctmc_trainer_copy_weights(t, m_other, 0) == NCTMC_ERR_INVALID_ARGUMENT,
          "different configuration refused");
    free(w0);
    free(w1);
    free(e);
    nctmc_trainer_free(t);
    nctmc_trainer_free(t2);
    nctmc_model_free(m_other);
    nctmc_model_free(m);
    nctmc_model_free(ema);
    nctmc_context_free(ctx);
}

static void test_dataset_steps(void)
{
    nctmc_context *ctx = make_ctx(2);
    char stream_path[512], seq_path[512];
    snprintf(stream_path, sizeof stream_path, "%s/stream.tok", tmp_dir);
    snprintf(seq_path, sizeof seq_path, "%s/seq.tok", tmp_dir);
    int32_t stream[200];
    for (int k = 0; k < 200; k++)
        stream[k] = (k * 7 + k / 3) % S_TOKENS;
    CHECK(nctmc_dataset_write(ctx, stream_path, stream, 200, S_TOKENS, 0, NULL, 0) == NCTMC_OK,
          "write stream: %s", nctmc_context_last_error(ctx));
    int32_t seqs[10 * SEQ_LEN], labels[10];
    for (int k = 0; k < 10 * SEQ_LEN; k++)
        seqs[k] = (k * 5) % S_TOKENS;
    for (int k = 0; k < 10; k++)
        labels[k] = k % 3;
    CHECK(nctmc_dataset_write(ctx, seq_path, seqs, 10 * SEQ_LEN, S_TOKENS, SEQ_LEN, labels,
                              3) == NCTMC_OK,
          "write sequences: %s", nctmc_context_last_error(ctx));
    nctmc_dataset *ds_stream = NULL, *ds_seq = NULL;
    nctmc_dataset_open(ctx, stream_path, &ds_stream);
    nctmc_dataset_open(ctx, seq_path, &ds_seq);
    CHECK(ds_stream && ds_seq, "open: %s", nctmc_context_last_error(ctx));
    if (!ds_stream || !ds_seq)
        goto done;

    nctmc_model_config uc = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    nctmc_model_config cc = tiny_config(NCTMC_PROCESS_UNIFORM, 3);
    nctmc_model *mu = NULL, *mc = NULL, *mc2 = NULL;
    nctmc_model_create(ctx, &uc, &mu);
    nctmc_model_create(ctx, &cc, &mc);
    nctmc_model_create(ctx, &cc, &mc2);
    nctmc_trainer_params p = tiny_params();
    nctmc_trainer *tu = NULL, *tc = NULL, *tc2 = NULL;
    nctmc_trainer_create(mu, &p, &tu);
    nctmc_trainer_create(mc, &p, &tc);
    nctmc_trainer_create(mc2, &p, &tc2);
    for (int k = 0; k < 3; k++) {
        CHECK(nctmc_trainer_step_dataset(tu, ds_stream, NULL) == NCTMC_OK, "stream step: %s",
              nctmc_trainer_last_error(tu));
        CHECK(nctmc_trainer_step_dataset(tu, ds_seq, NULL) == NCTMC_OK,
              "labelled sequences, unconditional model: %s", nctmc_trainer_last_error(tu));
        CHECK(nctmc_trainer_step_dataset(tc, ds_seq, NULL) == NCTMC_OK, "sequence step: %s",
              nctmc_trainer_last_error(tc));
        nctmc_trainer_step_dataset(tc2, ds_seq, NULL);
    }
    nctmc_trainer_state state;
    nctmc_trainer_state_init(&state);
    nctmc_trainer_get_state(tu, &state);
    CHECK(state.data_position == 6 * BATCH, "data position %lld", (long long)state.data_position);
    CHECK(same_weights(mc, mc2), "dataset batches are deterministic");
    CHECK(nctmc_trainer_step_dataset(tc, ds_stream, NULL) == NCTMC_ERR_FORMAT,
          "a conditional model needs labels: %s", nctmc_trainer_last_error(tc));

    nctmc_model_config wide = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    wide.vocab_size = S_TOKENS + 1;
    nctmc_model *mw = NULL;
    nctmc_model_create(ctx, &wide, &mw);
    nctmc_trainer *tw = NULL;
    nctmc_trainer_create(mw, &p, &tw);
    CHECK(nctmc_trainer_step_dataset(tw, ds_stream, NULL) == NCTMC_ERR_FORMAT,
          "wrong vocabulary refused: %s", nctmc_trainer_last_error(tw));
    nctmc_trainer_params shorter = p;
    shorter.seq_len = SEQ_LEN - 2;
    nctmc_trainer *ts = NULL;
    nctmc_trainer_create(mc2, &shorter, &ts);
    CHECK(nctmc_trainer_step_dataset(ts, ds_seq, NULL) == NCTMC_ERR_FORMAT,
          "sequence length mismatch refused");
    nctmc_trainer_free(ts);
    nctmc_trainer_free(tw);
    nctmc_model_free(mw);
    nctmc_trainer_free(tu);
    nctmc_trainer_free(tc);
    nctmc_trainer_free(tc2);
    nctmc_model_free(mu);
    nctmc_model_free(mc);
    nctmc_model_free(mc2);
done:
    nctmc_dataset_free(ds_stream);
    nctmc_dataset_free(ds_seq);
    nctmc_context_free(ctx);
}

/* One trainer of batch_size b and accumulation a on a 4-sequence global
 * batch (mixture process, classes, label dropout, logit time sampling, a
 * clip that binds): the first step's stats, and the weights after `steps`
 * steps with n_threads threads. */
static nctmc_model *accumulated_run(int32_t b, int32_t a, int n_threads, int steps,
                                    nctmc_train_stats *first)
{
    nctmc_context *ctx = make_ctx(n_threads);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_MIXTURE, 3);
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_trainer_params p = tiny_params();
    p.batch_size = b;
    p.accumulation = a;
    p.label_dropout = 0.5f;
    p.grad_clip = 0.05f;
    p.time_sampling = NCTMC_TIME_SAMPLING_LOGIT;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "create (batch %d x %d): %s", b, a,
          nctmc_model_last_error(m));
    int32_t tokens[BATCH * SEQ_LEN];
    fill_batch(tokens, S_TOKENS - 1);
    int32_t labels[BATCH] = {0, 2, 1, 1};
    nctmc_train_stats s;
    nctmc_train_stats_init(&s);
    for (int k = 0; k < steps && t; k++) {
        CHECK(nctmc_trainer_step(t, tokens, labels, &s) == NCTMC_OK, "step: %s",
              nctmc_trainer_last_error(t));
        if (k == 0)
            *first = s;
    }
    nctmc_trainer_free(t);
    nctmc_context_free(ctx);
    return m;
}

/* nctmc_trainer_params.accumulation: 2 micro-batches of 2 draw what one
 * batch of 4 draws (same times, noise, label dropout: the first step's loss
 * and gradient norm agree to float rounding, the norm well above the clip);
 * the accumulated run is the same bits on 1 and 3 threads; the parameter is
 * checked. */
static void test_accumulation(void)
{
    nctmc_train_stats one, two, three;
    nctmc_model *m_one = accumulated_run(BATCH, 1, 1, 1, &one);
    nctmc_model *m_two = accumulated_run(BATCH / 2, 2, 1, 4, &two);
    nctmc_model *m_three = accumulated_run(BATCH / 2, 2, 3, 4, &three);
    CHECK_CLOSE(two.loss, one.loss, 1e-6, 0.0, "accumulated loss vs one batch");
    CHECK_CLOSE(two.grad_norm, one.grad_norm, 1e-4, 0.0, "accumulated gradient norm");
    CHECK_CLOSE(two.mean_log_rate, one.mean_log_rate, 1e-6, 0.0, "accumulated log rate");
    CHECK(one.grad_norm > 0.05 * 2.0, "the clip binds (norm %g)", one.grad_norm);
    CHECK(two.loss == three.loss && same_weights(m_two, m_three),
          "accumulation: the same bits on 1 and 3 threads");
    nctmc_model_free(m_one);
    nctmc_model_free(m_two);
    nctmc_model_free(m_three);

    nctmc_context *ctx = make_ctx(1);
    nctmc_model_config c = tiny_config(NCTMC_PROCESS_UNIFORM, 0);
    nctmc_model *m = NULL;
    nctmc_model_create(ctx, &c, &m);
    nctmc_trainer_params p = tiny_params();
    nctmc_trainer *t = NULL;
    p.accumulation = -1;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_model_last_error(m), "accumulation -1") != NULL,
          "accumulation -1 refused: %s", nctmc_model_last_error(m));
    p.accumulation = 0; /* an appended field's 0: the default, 1 */
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "accumulation 0");
    nctmc_trainer_params got;
    nctmc_trainer_params_init(&got);
    nctmc_trainer_get_params(t, &got);
    CHECK(got.accumulation == 1, "accumulation 0 means 1 (got %d)", got.accumulation);
    nctmc_trainer_free(t);
    p.accumulation = 3;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "accumulation 3");
    nctmc_trainer_params_init(&got);
    nctmc_trainer_get_params(t, &got);
    CHECK(got.accumulation == 3, "get_params reports accumulation %d", got.accumulation);
    /* a resume keeps the global batch (4 x 3) but may split it otherwise */
    char path[400];
    snprintf(path, sizeof path, "%s/accumulated.safetensors", tmp_dir);
    CHECK(nctmc_trainer_save(t, path) == NCTMC_OK, "save: %s", nctmc_trainer_last_error(t));
    nctmc_trainer_free(t);
    nctmc_model *rm = NULL;
    nctmc_trainer *rt = NULL;
    CHECK(nctmc_trainer_resume(ctx, path, NULL, &rm, &rt) == NCTMC_OK, "resume as saved");
    nctmc_trainer_params_init(&got);
    nctmc_trainer_get_params(rt, &got);
    CHECK(got.accumulation == 3 && got.batch_size == BATCH, "the saved split comes back");
    nctmc_trainer_free(rt);
    nctmc_model_free(rm);
    p.accumulation = 1;
    CHECK(nctmc_trainer_resume(ctx, path, &p, &rm, &rt) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_context_last_error(ctx), "global batch 12") != NULL,
          "another global batch refused: %s", nctmc_context_last_error(ctx));
    p.batch_size = 3 * BATCH;
    CHECK(nctmc_trainer_resume(ctx, path, &p, &rm, &rt) == NCTMC_OK,
          "the same global batch in one micro-batch: %s", nctmc_context_last_error(ctx));
    nctmc_trainer_free(rt);
    nctmc_model_free(rm);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

int main(void)
{
    if (!test_make_temp_dir(tmp_dir, sizeof tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_bad_params();
    test_schedule_and_learning(NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_SIGMA);
    test_schedule_and_learning(NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_NOISE_POSTERIOR);
    test_constant_rate();
    test_schedule_and_learning(NCTMC_PROCESS_MASKED, NCTMC_EXIT_LINK_SIGMA);
    test_determinism();
    test_activation_recompute();
    test_accumulation();
    test_resume();
    test_non_finite_skip();
    test_bounded_noise_link();
    test_clipping();
    test_ema();
    test_dataset_steps();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return test_finish("trainer");
}
