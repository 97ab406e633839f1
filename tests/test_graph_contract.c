/*
 * test_graph_contract.c — the core's side of graph capture (backend.h,
 * nctmc_graph_key and backend_graph_run), checked on the CPU backend with
 * no GPU: the CPU backend's table is copied into one with recording
 * graph_begin / graph_end / graph_reset entries, so every sequence the core
 * hands to a backend for capture runs as a "capture", and:
 * 1. nothing inside a captured sequence touches the host (alloc, free,
 *    upload, download, synchronize, sum_squares; fill_zero is a device
 *    operation, a memset node in a CUDA graph): a GPU capture would fail or
 *    record a stale copy;
 * 2. the keys name the shapes: a trainer with gradient accumulation uses
 *    two keys (gradient slab, partial), dit_loss at batch 4 and 2 two more,
 *    a sampler at batch 4 and 3 two forward keys; the same call again uses
 *    the same key;
 * 3. a failed capture (graph_end answering false) runs the sequence again
 *    and the results are the same bits as without capture (in this
 *    emulation the "failed" capture also ran, so the check is on
 *    sequences that overwrite their outputs: dit_forward, dit_loss without
 *    accumulation);
 * 4. dit_workspace_free resets the graphs.
 * Every result (trainer weights, losses, sampled tokens) equals the one
 * from an unpatched CPU context bit for bit. What only a GPU can check
 * (replay gives the same bits) is tests/test_cuda_graphs.c.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/context.h"
#include "dit/dit.h"
#include "test_util.h"

/* The recording backend's state (a test program's own). */
#define MAX_KEYS 32
static struct {
    nctmc_backend_ops inner;   /* the CPU backend's table */
    nctmc_backend_ops table;   /* the patched one */
    bool capturing;
    bool fail_next_end;        /* graph_end answers false once */
    int host_calls_in_capture;
    const char *last_host_op;
    int captures, begins, resets;
    nctmc_graph_key keys[MAX_KEYS];
    int n_keys;
} R;

static void host_op(const char *what)
{
    if (R.capturing) {
        R.host_calls_in_capture++;
        R.last_host_op = what;
    }
}

static void *rec_alloc(nctmc_backend *be, size_t bytes)
{
    host_op("alloc");
    return R.inner.alloc(be, bytes);
}
static void rec_free(nctmc_backend *be, void *p)
{
    host_op("free");
    R.inner.free(be, p);
}
static void rec_upload(nctmc_backend *be, void *d, const void *s, size_t n)
{
    host_op("upload");
    R.inner.upload(be, d, s, n);
}
static void rec_download(nctmc_backend *be, void *d, const void *s, size_t n)
{
    host_op("download");
    R.inner.download(be, d, s, n);
}
static nctmc_status rec_synchronize(nctmc_backend *be)
{
    host_op("synchronize");
    return R.inner.synchronize(be);
}
static double rec_sum_squares(nctmc_backend *be, int64_t n, const float *x)
{
    host_op("sum_squares");
    return R.inner.sum_squares(be, n, x);
}

/* First use of a key: eager; later ones: "captured" (run and recorded). */
static int rec_graph_begin(nctmc_backend *be, const nctmc_graph_key *key)
{
    (void)be;
    R.begins++;
    CHECK(!R.capturing, "graph_begin inside a capture");
    for (int i = 0; i < R.n_keys; i++)
        if (memcmp(&R.keys[i], key, sizeof *key) == 0) {
            R.capturing = true;
            return NCTMC_GRAPH_CAPTURING;
        }
    if (R.n_keys < MAX_KEYS)
        R.keys[R.n_keys++] = *key;
    return NCTMC_GRAPH_EAGER;
}

static bool rec_graph_end(nctmc_backend *be)
{
    (void)be;
    CHECK(R.capturing, "graph_end without a capture");
    R.capturing = false;
    R.captures++;
    if (R.fail_next_end) {
        R.fail_next_end = false;
        return false;
    }
    return true;
}

static void rec_graph_reset(nctmc_backend *be)
{
    (void)be;
    R.resets++;
    R.n_keys = 0;
}

static nctmc_context *make_context(bool recording)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 2;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&p, &ctx) != NCTMC_OK) {
        CHECK(false, "cpu context");
        return NULL;
    }
    if (recording) {
        nctmc_backend *be = ctx->backend;
        R.inner = *be->ops;
        R.table = *be->ops;
        R.table.alloc = rec_alloc;
        R.table.free = rec_free;
        R.table.upload = rec_upload;
        R.table.download = rec_download;
        R.table.synchronize = rec_synchronize;
        R.table.sum_squares = rec_sum_squares;
        R.table.graph_begin = rec_graph_begin;
        R.table.graph_end = rec_graph_end;
        R.table.graph_reset = rec_graph_reset;
        be->ops = &R.table;
    }
    return ctx;
}

static nctmc_model_config tiny_config(int32_t n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 20;
    c.seq_len = 12;
    c.n_layers = 2;
    c.d_model = 32;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.n_classes = n_classes;
    c.seed = 3;
    return c;
}

static float *weights_of(nctmc_model *m)
{
    size_t n = m->slab_floats;
    float *h = calloc(n, sizeof *h);
    nctmc_backend *be = m->ctx->backend;
    be->ops->download(be, h, m->weights, n * sizeof(float));
    CHECK(be->ops->synchronize(be) == NCTMC_OK, "download");
    return h;
}

/* A trainer with accumulation 2 and recomputation, 4 steps. */
static float *train(nctmc_context *ctx, double *losses)
{
    nctmc_model_config cfg = tiny_config(0);
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &cfg, &m) == NCTMC_OK, "model");
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = 2;
    p.accumulation = 2;
    p.activation_recompute = 1;
    p.warmup_steps = 1;
    p.seed = 9;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(m, &p, &t) == NCTMC_OK, "trainer: %s",
          nctmc_context_last_error(ctx));
    int32_t tokens[4 * 12];
    test_rng rng = test_rng_seed(1);
    for (int s = 0; s < 4 && t; s++) {
        for (int i = 0; i < 4 * 12; i++)
            tokens[i] = test_randint(&rng, 20);
        nctmc_train_stats st;
        nctmc_train_stats_init(&st);
        CHECK(nctmc_trainer_step(t, tokens, NULL, &st) == NCTMC_OK, "step: %s",
              nctmc_trainer_last_error(t));
        losses[s] = st.loss;
    }
    float *w = weights_of(m);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    return w;
}

/* A sampler with CFG at batch 4 then 3: the tokens of both calls. */
static void sample(nctmc_context *ctx, int32_t *out)
{
    nctmc_model_config cfg = tiny_config(2);
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &cfg, &m) == NCTMC_OK, "model");
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 4;
    nctmc_sampler *s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK, "sampler");
    int32_t labels[4] = {0, 1, 1, 0};
    for (int r = 0; r < 2 && s; r++) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = r == 0 ? 4 : 3;
        p.method = NCTMC_SAMPLE_TAU_LEAPING;
        p.n_steps = 6;
        p.seed = 5;
        p.labels = labels;
        p.cfg_scale = 2.0f;
        p.tokens_out = out + r * 4 * 12;
        CHECK(nctmc_sample(s, &p) == NCTMC_OK, "sample: %s", nctmc_sampler_last_error(s));
    }
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

/* dit_loss at batch 4, 2, 4 with a failed capture in the middle: the mean
 * losses. */
static void losses_by_shape(nctmc_context *ctx, bool fail_one, double *out)
{
    nctmc_model_config cfg = tiny_config(0);
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &cfg, &m) == NCTMC_OK, "model");
    dit_workspace *ws = NULL;
    char err[256];
    CHECK(dit_workspace_create(m, ctx->backend, 4, 12, DIT_WS_TRAINING, &ws, err, sizeof err) ==
              NCTMC_OK,
          "workspace: %s", err);
    float *grads = ctx->backend->ops->alloc(ctx->backend, m->slab_floats * sizeof(float));
    int32_t x_t[48], x_0[48];
    float times[4] = {0.2f, 0.5f, 0.7f, 0.9f};
    test_rng rng = test_rng_seed(4);
    static const int32_t batches[] = {4, 4, 2, 2, 2, 4};
    for (int k = 0; k < 6 && ws && grads; k++) {
        for (int i = 0; i < 48; i++) {
            x_0[i] = test_randint(&rng, 20);
            x_t[i] = test_randint(&rng, 2) ? x_0[i] : test_randint(&rng, 20);
        }
        dit_batch b = {batches[k], 12, x_t, times, NULL, x_0, NULL};
        R.fail_next_end = fail_one && k == 3;
        CHECK(dit_loss(m, ws, &b, grads, false, &out[k], err, sizeof err) == NCTMC_OK,
              "dit_loss: %s", err);
    }
    ctx->backend->ops->free(ctx->backend, grads);
    int resets = R.resets;
    dit_workspace_free(ws);
    if (ctx->backend->ops->graph_reset)
        CHECK(R.resets == resets + 1, "dit_workspace_free did not reset the graphs");
    nctmc_model_free(m);
}

int main(void)
{
    nctmc_context *plain = make_context(false), *rec = make_context(true);
    if (!plain || !rec)
        return test_finish("graph_contract");

    double la[4], lb[4];
    float *wa = train(plain, la);
    int begins = R.begins, captures = R.captures;
    float *wb = train(rec, lb);
    nctmc_model *probe = NULL;
    nctmc_model_config cfg = tiny_config(0);
    CHECK(nctmc_model_create(plain, &cfg, &probe) == NCTMC_OK, "model");
    size_t n = probe->slab_floats;
    nctmc_model_free(probe);
    CHECK(memcmp(la, lb, sizeof la) == 0, "trainer losses differ with capture");
    CHECK(memcmp(wa, wb, n * sizeof(float)) == 0, "trainer weights differ with capture");
    /* 4 steps x 2 micro-batches; 2 keys, each eager once */
    CHECK(R.begins - begins == 8, "trainer: %d sequences, expected 8", R.begins - begins);
    CHECK(R.captures - captures == 6, "trainer: %d captures, expected 6",
          R.captures - captures);
    free(wa);
    free(wb);
    printf("  trainer (accumulation 2, recompute): 2 keys, 6 captures, same bits\n");

    /* the second call (batch 3) fills 36 of its 48 entries: the rest stays 0 */
    int32_t ta[2 * 48] = {0}, tb[2 * 48] = {0};
    sample(plain, ta);
    begins = R.begins;
    captures = R.captures;
    sample(rec, tb);
    CHECK(memcmp(ta, tb, sizeof ta) == 0, "sampled tokens differ with capture");
    /* the default correction steps evaluate the model too: at least the
     * 6 grid steps per call, each batch size eager once */
    CHECK(R.begins - begins >= 12 && R.captures - captures == R.begins - begins - 2,
          "sampler: %d sequences, %d captures", R.begins - begins, R.captures - captures);
    printf("  sampler (CFG, batch 4 then 3): 2 keys, %d captures, same tokens\n",
           R.captures - captures);

    double ma[6], mb[6];
    losses_by_shape(plain, false, ma);
    captures = R.captures;
    losses_by_shape(rec, true, mb);
    CHECK(memcmp(ma, mb, sizeof ma) == 0, "dit_loss by shape differs with capture");
    /* batch 4: eager, capture, capture; batch 2: eager, failed capture
     * (run again), capture */
    CHECK(R.captures - captures == 4, "dit_loss: %d captures, expected 4", R.captures - captures);
    printf("  dit_loss at batch 4, 2 (one failed capture run again): same bits\n");

    CHECK(R.host_calls_in_capture == 0, "%d host operations inside a captured sequence (last: %s)",
          R.host_calls_in_capture, R.last_host_op ? R.last_host_op : "");
    nctmc_context_free(rec);
    nctmc_context_free(plain);
    return test_finish("graph_contract");
}
