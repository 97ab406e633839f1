/*
 * test_cuda_graphs.c — CUDA graph capture (NCTMC_CUDA_GRAPHS=1,
 * backends/cuda/cuda_graph.cu) against the eager CUDA backend: the same
 * bits, or the graph is wrong.
 *
 * Two "cuda" contexts, one created with NCTMC_CUDA_GRAPHS unset (eager), one
 * with it set to 1 (graphs), each holding the same model weights:
 * 1. Training: N steps of nctmc_trainer_step on the same batches in both;
 *    every step's loss and gradient norm, and at the end every weight, both
 *    AdamW moments and the EMA, bit-identical. For the three forward
 *    processes (labels on one), the denoiser link, activation recomputation,
 *    gradient accumulation (two graphs per step: the first micro-batch
 *    writes the gradient slab, the next one a partial), and bf16 products.
 * 2. Shapes: dit_loss with gradients on one workspace at batch 4, then 2,
 *    then 4 again (each shape its own graph; a graph replayed for the wrong
 *    shape would give other numbers), the per-position losses and every
 *    gradient bit-identical to the eager context's.
 * 3. Sampling: nctmc_sample (tau-leaping and masked Euler, with CFG on
 *    labels) at batch 4 and then 3 on the same sampler: the same tokens.
 * Each part also checks, from the backend's description, that the graph
 * context really captured and replayed graphs and that no capture failed
 * (so a switch that silently stayed eager fails the test).
 *
 * Without a usable GPU: "cuda_graphs: skipped: <reason>", exit 77.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_module.h"
#include "core/context.h"
#include "dit/dit.h"
#include "cuda_test_util.h"
#include "train/trainer.h"

static const nctmc_backend_module *CUDA;

/* A "cuda" (or "cuda-bf16") context with graph capture on or off: the
 * backend reads NCTMC_CUDA_GRAPHS once, when the context creates it. */
static nctmc_context *make_context(const char *backend, bool graphs)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = backend;
    if (graphs)
        setenv("NCTMC_CUDA_GRAPHS", "1", 1);
    else
        unsetenv("NCTMC_CUDA_GRAPHS");
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    unsetenv("NCTMC_CUDA_GRAPHS");
    CHECK(st == NCTMC_OK, "context \"%s\" (graphs %d) could not be created", backend, graphs);
    return st == NCTMC_OK ? ctx : NULL;
}

typedef struct graph_counts {
    bool on;
    long long captured, replays, failed;
    char line[1024];
} graph_counts;

static graph_counts counts_of(nctmc_context *ctx)
{
    graph_counts c;
    memset(&c, 0, sizeof c);
    CUDA->describe(ctx->backend, c.line, sizeof c.line);
    const char *g = strstr(c.line, "graphs on: ");
    c.on = g != NULL;
    if (g && sscanf(g, "graphs on: %lld captured, %lld replays, %lld failed", &c.captured,
                    &c.replays, &c.failed) != 3)
        c.on = false;
    return c;
}

/* The graph context captured at least one new graph, replayed more than
 * `min_replays` times since `before`, and no capture failed. */
static void check_graphs_used(nctmc_context *ctx, const graph_counts *before,
                              long long min_replays, const char *label)
{
    graph_counts now = counts_of(ctx);
    CHECK(now.on, "%s: the graph context reports no graph capture: %s", label, now.line);
    CHECK(now.captured > before->captured, "%s: no graph was captured: %s", label, now.line);
    CHECK(now.replays - before->replays >= min_replays,
          "%s: %lld replays, expected at least %lld: %s", label, now.replays - before->replays,
          min_replays, now.line);
    CHECK(now.failed == 0, "%s: a capture failed: %s", label, now.line);
}

static int count_float_differences(const float *a, const float *b, size_t n)
{
    int d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static float *download(nctmc_context *ctx, const float *src, size_t n)
{
    float *h = xcalloc(n, sizeof *h);
    nctmc_backend *be = ctx->backend;
    be->ops->download(be, h, src, n * sizeof(float));
    CHECK(be->ops->synchronize(be) == NCTMC_OK, "download: %s", be->error);
    return h;
}

/* Backend slab `a` of context ca and `b` of cb: the same bits. */
static void check_same_slab(nctmc_context *ca, const float *a, nctmc_context *cb,
                            const float *b, size_t n, const char *what, const char *label)
{
    float *ha = download(ca, a, n), *hb = download(cb, b, n);
    int d = count_float_differences(ha, hb, n);
    CHECK(d == 0, "%s: %s: %d of %zu floats differ between eager and graph", label, what, d, n);
    free(ha);
    free(hb);
}

typedef struct case_config {
    const char *label;
    const char *backend;        /* "cuda" or "cuda-bf16" */
    nctmc_process process;
    nctmc_exit_link link;
    int32_t n_classes;
    int32_t recompute;
    int32_t accumulation;
} case_config;

static nctmc_model_config model_config(const case_config *k)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 50;
    c.vocab_pad_multiple = 32;
    c.seq_len = 24;
    c.n_layers = 2;
    c.d_model = 64;
    c.n_heads = 4;
    c.cond_dim = 32;
    c.n_classes = k->n_classes;
    c.process = k->process;
    c.exit_link = k->link;
    c.mixture_uniform = 0.3f;
    c.seed = 11;
    return c;
}

/* The same model in both contexts: the eager one's initial weights copied
 * into the graph one. */
static bool make_models(nctmc_context *ce, nctmc_context *cg, const case_config *k,
                        nctmc_model **me, nctmc_model **mg)
{
    nctmc_model_config cfg = model_config(k);
    *me = *mg = NULL;
    if (nctmc_model_create(ce, &cfg, me) != NCTMC_OK ||
        nctmc_model_create(cg, &cfg, mg) != NCTMC_OK) {
        CHECK(false, "%s: model: %s / %s", k->label, nctmc_context_last_error(ce),
              nctmc_context_last_error(cg));
        return false;
    }
    float *w = download(ce, (*me)->weights, (*me)->slab_floats);
    cg->backend->ops->upload(cg->backend, (*mg)->weights, w, (*mg)->slab_floats * sizeof(float));
    free(w);
    return true;
}

/* 1. N training steps in each context. */
static void test_training(const case_config *k)
{
    nctmc_context *ce = make_context(k->backend, false), *cg = make_context(k->backend, true);
    nctmc_model *me = NULL, *mg = NULL;
    if (!ce || !cg || !make_models(ce, cg, k, &me, &mg))
        goto done;
    graph_counts before = counts_of(cg), eager = counts_of(ce);
    /* the switch is per backend: the eager context must not capture */
    CHECK(!eager.on && strstr(eager.line, "graphs off"), "%s: the eager context: %s", k->label,
          eager.line);
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = 4;
    p.warmup_steps = 2; /* the rate changes every step: a host scalar */
    p.total_steps = 20;
    p.grad_clip = 0.5f;  /* clipping on: the gradient is rescaled */
    p.ema_decay = 0.99f;
    p.label_dropout = k->n_classes > 0 ? 0.3f : 0.0f;
    p.activation_recompute = k->recompute;
    p.accumulation = k->accumulation;
    p.seed = 5;
    nctmc_trainer *te = NULL, *tg = NULL;
    CHECK(nctmc_trainer_create(me, &p, &te) == NCTMC_OK, "%s: trainer: %s", k->label,
          nctmc_context_last_error(ce));
    CHECK(nctmc_trainer_create(mg, &p, &tg) == NCTMC_OK, "%s: trainer: %s", k->label,
          nctmc_context_last_error(cg));
    if (!te || !tg)
        goto trainers;
    const int32_t steps = 6, L = me->config.seq_len;
    int32_t rows = p.batch_size * k->accumulation;
    int32_t n_data = k->process == NCTMC_PROCESS_UNIFORM ? 50 : 49;
    int32_t *tokens = xcalloc((size_t)rows * (size_t)L, sizeof(int32_t));
    int32_t *labels = xcalloc((size_t)rows, sizeof(int32_t));
    test_rng rng = test_rng_seed(77);
    for (int32_t s = 0; s < steps; s++) {
        for (int32_t i = 0; i < rows * L; i++)
            tokens[i] = (int32_t)(test_rng_next(&rng) % (uint64_t)n_data);
        for (int32_t b = 0; b < rows; b++)
            labels[b] = k->n_classes > 0 ? (int32_t)(test_rng_next(&rng) % (uint64_t)k->n_classes)
                                         : 0;
        const int32_t *lab = k->n_classes > 0 ? labels : NULL;
        nctmc_train_stats se, sg;
        nctmc_train_stats_init(&se);
        nctmc_train_stats_init(&sg);
        nctmc_status ste = nctmc_trainer_step(te, tokens, lab, &se);
        nctmc_status stg = nctmc_trainer_step(tg, tokens, lab, &sg);
        CHECK(ste == NCTMC_OK && stg == NCTMC_OK, "%s step %d: %s / %s", k->label, s,
              nctmc_trainer_last_error(te), nctmc_trainer_last_error(tg));
        CHECK(memcmp(&se.loss, &sg.loss, sizeof se.loss) == 0 &&
                  memcmp(&se.grad_norm, &sg.grad_norm, sizeof se.grad_norm) == 0,
              "%s step %d: loss %.17g / %.17g, gradient norm %.17g / %.17g (eager / graph)",
              k->label, s, se.loss, sg.loss, se.grad_norm, sg.grad_norm);
    }
    size_t n = me->slab_floats;
    check_same_slab(ce, me->weights, cg, mg->weights, n, "weights", k->label);
    check_same_slab(ce, te->adam_m, cg, tg->adam_m, n, "AdamW first moment", k->label);
    check_same_slab(ce, te->adam_v, cg, tg->adam_v, n, "AdamW second moment", k->label);
    CHECK(te->ema && tg->ema, "%s: no EMA", k->label);
    if (te->ema && tg->ema)
        check_same_slab(ce, te->ema, cg, tg->ema, n, "EMA", k->label);
    /* step 1 of each micro-batch key runs eagerly, step 2 captures, the
     * rest replay */
    check_graphs_used(cg, &before, (long long)(steps - 2) * k->accumulation, k->label);
    printf("  training %-34s %d steps: eager = graph, bit for bit\n", k->label, steps);
    free(tokens);
    free(labels);
trainers:
    nctmc_trainer_free(te);
    nctmc_trainer_free(tg);
done:
    nctmc_model_free(me);
    nctmc_model_free(mg);
    nctmc_context_free(ce);
    nctmc_context_free(cg);
}

/* 2. dit_loss with gradients at changing batch sizes on one workspace. */
static void test_shapes(void)
{
    case_config k = {"shapes", "cuda", NCTMC_PROCESS_MIXTURE, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 0,
                     0, 1};
    nctmc_context *ctx[2] = {make_context("cuda", false), make_context("cuda", true)};
    nctmc_model *m[2] = {NULL, NULL};
    dit_workspace *ws[2] = {NULL, NULL};
    float *grads[2] = {NULL, NULL};
    if (!ctx[0] || !ctx[1] || !make_models(ctx[0], ctx[1], &k, &m[0], &m[1]))
        goto done;
    graph_counts before = counts_of(ctx[1]);
    const int32_t L = m[0]->config.seq_len, max_b = 4;
    for (int i = 0; i < 2; i++) {
        char err[256];
        CHECK(dit_workspace_create(m[i], ctx[i]->backend, max_b, L, DIT_WS_TRAINING, &ws[i], err,
                                   sizeof err) == NCTMC_OK,
              "workspace: %s", err);
        grads[i] = ctx[i]->backend->ops->alloc(ctx[i]->backend, m[i]->slab_floats * sizeof(float));
        CHECK(ws[i] && grads[i], "workspace or gradient slab");
        if (!ws[i] || !grads[i])
            goto done;
    }
    static const int32_t batches[] = {4, 4, 2, 2, 4, 2, 2, 4};
    test_rng rng = test_rng_seed(3);
    int32_t *x_t = xcalloc((size_t)max_b * L, sizeof(int32_t));
    int32_t *x_0 = xcalloc((size_t)max_b * L, sizeof(int32_t));
    float times[4];
    for (size_t s = 0; s < sizeof batches / sizeof batches[0]; s++) {
        int32_t B = batches[s];
        for (int32_t i = 0; i < B * L; i++) {
            x_0[i] = (int32_t)(test_rng_next(&rng) % 50u);
            x_t[i] = test_rng_next(&rng) % 2u ? x_0[i] : (int32_t)(test_rng_next(&rng) % 51u);
        }
        for (int32_t b = 0; b < B; b++)
            times[b] = 0.05f + 0.9f * (float)(test_rng_next(&rng) % 1000u) / 1000.0f;
        dit_batch batch = {B, L, x_t, times, NULL, x_0, NULL};
        double mean[2];
        for (int i = 0; i < 2; i++) {
            char err[256];
            CHECK(dit_loss(m[i], ws[i], &batch, grads[i], false, &mean[i], err, sizeof err) ==
                      NCTMC_OK,
                  "dit_loss: %s", err);
        }
        CHECK(memcmp(&mean[0], &mean[1], sizeof mean[0]) == 0,
              "shapes: call %zu (batch %d): mean loss %.17g eager, %.17g graph", s, B, mean[0],
              mean[1]);
        check_same_slab(ctx[0], dit_ws_loss(ws[0]), ctx[1], dit_ws_loss(ws[1]),
                        (size_t)B * (size_t)L, "per-position losses", "shapes");
        check_same_slab(ctx[0], grads[0], ctx[1], grads[1], m[0]->slab_floats, "gradients",
                        "shapes");
    }
    /* batch 4: eager, capture, then 2 replays; batch 2: eager, capture, 2 */
    check_graphs_used(ctx[1], &before, 4, "shapes");
    printf("  dit_loss at batch 4, 2, 4, ...: eager = graph, bit for bit\n");
    free(x_t);
    free(x_0);
done:
    for (int i = 0; i < 2; i++) {
        if (grads[i])
            ctx[i]->backend->ops->free(ctx[i]->backend, grads[i]);
        dit_workspace_free(ws[i]);
        nctmc_model_free(m[i]);
        nctmc_context_free(ctx[i]);
    }
}

/* 3. The sampler at batch 4 then 3, CFG on labels. */
static void test_sampling(nctmc_process process, nctmc_sample_method method, const char *label)
{
    case_config k = {label, "cuda", process, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 3, 0, 1};
    nctmc_context *ce = make_context("cuda", false), *cg = make_context("cuda", true);
    nctmc_model *m[2] = {NULL, NULL};
    nctmc_sampler *s[2] = {NULL, NULL};
    if (!ce || !cg || !make_models(ce, cg, &k, &m[0], &m[1]))
        goto done;
    graph_counts before = counts_of(cg);
    for (int i = 0; i < 2; i++) {
        nctmc_sampler_params sp;
        nctmc_sampler_params_init(&sp);
        sp.max_batch = 4;
        CHECK(nctmc_sampler_create(m[i], &sp, &s[i]) == NCTMC_OK, "sampler: %s",
              nctmc_context_last_error(i ? cg : ce));
        if (!s[i])
            goto done;
    }
    const int32_t L = m[0]->config.seq_len, n_steps = 12;
    static const int32_t batches[] = {4, 3};
    int32_t labels[4] = {0, 2, 1, 2};
    for (size_t r = 0; r < 2; r++) {
        int32_t B = batches[r];
        int32_t *tok[2];
        for (int i = 0; i < 2; i++) {
            tok[i] = xcalloc((size_t)B * (size_t)L, sizeof(int32_t));
            nctmc_sample_params p;
            nctmc_sample_params_init(&p);
            p.batch = B;
            p.method = method;
            p.n_steps = n_steps;
            p.seed = 42 + (uint64_t)r;
            p.labels = labels;
            p.cfg_scale = 1.5f;
            p.tokens_out = tok[i];
            CHECK(nctmc_sample(s[i], &p) == NCTMC_OK, "sample %s: %s", label,
                  nctmc_sampler_last_error(s[i]));
        }
        int d = 0;
        for (int32_t j = 0; j < B * L; j++)
            d += tok[0][j] != tok[1][j];
        CHECK(d == 0, "sampler %s batch %d: %d of %d tokens differ between eager and graph",
              label, B, d, B * L);
        free(tok[0]);
        free(tok[1]);
    }
    /* per batch size: one eager step, one capture, n_steps - 2 replays */
    check_graphs_used(cg, &before, 2 * (n_steps - 2), label);
    printf("  sampler %-35s batch 4 then 3: eager = graph, the same tokens\n", label);
done:
    for (int i = 0; i < 2; i++) {
        nctmc_sampler_free(s[i]);
        nctmc_model_free(m[i]);
    }
    nctmc_context_free(ce);
    nctmc_context_free(cg);
}

int main(void)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    if (!cuda_test_load("cuda_graphs", &CUDA, err, sizeof err))
        return 1;
    nctmc_backend *probe = CUDA->create(0, false, err, sizeof err, &no_device);
    int rc = cuda_test_started("cuda_graphs", probe, no_device, err);
    if (rc)
        return rc;
    probe->ops->destroy(probe);

    printf("training steps\n");
    static const case_config cases[] = {
        {"uniform", "cuda", NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 0, 0, 1},
        {"masked", "cuda", NCTMC_PROCESS_MASKED, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 0, 0, 1},
        {"mixture+labels", "cuda", NCTMC_PROCESS_MIXTURE, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 3, 0, 1},
        {"uniform denoiser link", "cuda", NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_DENOISER, 0, 0, 1},
        {"uniform recompute", "cuda", NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 0, 1,
         1},
        {"masked accumulation 2", "cuda", NCTMC_PROCESS_MASKED, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 0,
         0, 2},
        {"uniform bf16", "cuda-bf16", NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_NOISE_POSTERIOR, 0, 0,
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_training(&cases[i]);

    printf("shapes\n");
    test_shapes();

    printf("samplers\n");
    test_sampling(NCTMC_PROCESS_UNIFORM, NCTMC_SAMPLE_TAU_LEAPING, "uniform tau-leaping cfg");
    test_sampling(NCTMC_PROCESS_MASKED, NCTMC_SAMPLE_EULER, "masked euler cfg");
    return test_finish("cuda_graphs");
}
