/*
 * test_model_grad.c — the whole model + L_cond loss: gradients against
 * central finite differences (per element for a sample of every tensor, and
 * along random directions through all parameters at once), for every forward
 * process; per-sequence loss weights (importance sampling of t); gradient
 * accumulation; bitwise determinism run after run and across thread
 * counts; activation recomputation giving the same bits; and the backward
 * pass's stages (dit_workspace_on_grads_ready, dit_grad_stage_tail): each
 * reported in order, when the slab's tail it names already holds its final
 * gradients.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "test_util.h"

typedef struct grad_fixture {
    nctmc_context *ctx;
    nctmc_model *model;
    dit_workspace *ws;
    float *grads;        /* backend slab */
    float *host_grads;   /* host copy */
    float *host_weights; /* host copy of the weights slab */
    int32_t B, L;
    int32_t *x_t, *x_0, *labels;
    float *times;
    float *weights;      /* [B] loss weights, or NULL */
} grad_fixture;

static nctmc_model_config small_config(nctmc_process process, int32_t n_classes,
                                       int32_t n_layers, nctmc_exit_link link)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 9;
    c.vocab_pad_multiple = 4; /* V = 12 > S: padding must stay out of the math */
    c.seq_len = 5;
    c.n_layers = n_layers;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 8;
    c.n_classes = n_classes;
    c.process = process;
    c.schedule = process == NCTMC_PROCESS_MASKED ? NCTMC_SCHEDULE_COSINE : NCTMC_SCHEDULE_LINEAR;
    c.mixture_uniform = 0.4f;
    c.seed = 3;
    c.exit_link = link;
    return c;
}

static size_t slab_bytes(const nctmc_model *m)
{
    return m->slab_floats * sizeof(float);
}

/* Random weights everywhere (zero-initialised tensors included, so every
 * gradient path carries signal), a random batch with x_t ~ q(. | x0). */
static void fixture_init_layers(grad_fixture *f, nctmc_process process, int32_t n_classes,
                                int n_threads, uint64_t seed, int32_t n_layers,
                                nctmc_exit_link link)
{
    memset(f, 0, sizeof *f);
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = n_threads;
    nctmc_context_create(&p, &f->ctx);
    nctmc_model_config cfg = small_config(process, n_classes, n_layers, link);
    CHECK(nctmc_model_create(f->ctx, &cfg, &f->model) == NCTMC_OK, "create: %s",
          nctmc_context_last_error(f->ctx));
    nctmc_model *m = f->model;
    test_rng rng = test_rng_seed(seed);
    f->host_weights = calloc(m->slab_floats, sizeof(float));
    for (int32_t k = 0; k < m->n_tensors; k++)
        test_fill_uniform(&rng, f->host_weights + m->tensors[k].offset,
                          (size_t)m->tensors[k].n_elements, -0.3f, 0.3f);
    nctmc_backend *be = f->ctx->backend;
    be->ops->upload(be, m->weights, f->host_weights, slab_bytes(m));

    f->B = 3;
    f->L = 5;
    int32_t N = f->B * f->L, S = cfg.vocab_size;
    f->x_t = malloc(sizeof(int32_t) * (size_t)N);
    f->x_0 = malloc(sizeof(int32_t) * (size_t)N);
    f->times = malloc(sizeof(float) * (size_t)f->B);
    f->labels = n_classes ? malloc(sizeof(int32_t) * (size_t)f->B) : NULL;
    int32_t n_data = process == NCTMC_PROCESS_UNIFORM ? S : S - 1;
    for (int32_t b = 0; b < f->B; b++) {
        f->times[b] = 0.2f + 0.3f * (float)b;
        if (f->labels)
            f->labels[b] = b % (n_classes + 1);
    }
    for (int32_t r = 0; r < N; r++) {
        f->x_0[r] = test_randint(&rng, n_data);
        /* half the positions noised: to the mask, or to a random state */
        if (r % 2 == 0)
            f->x_t[r] = f->x_0[r];
        else if (process == NCTMC_PROCESS_UNIFORM)
            f->x_t[r] = test_randint(&rng, S);
        else
            f->x_t[r] = (r % 4 == 1 || process == NCTMC_PROCESS_MASKED) ? S - 1
                                                                        : test_randint(&rng, S);
    }
    char err[256];
    CHECK(dit_workspace_create(m, be, f->B, f->L, DIT_WS_TRAINING, &f->ws, err, sizeof err) == NCTMC_OK,
          "workspace: %s", err);
    f->grads = be->ops->alloc(be, slab_bytes(m));
    f->host_grads = calloc(m->slab_floats, sizeof(float));
}

static void fixture_init(grad_fixture *f, nctmc_process process, int32_t n_classes,
                         int n_threads, uint64_t seed)
{
    fixture_init_layers(f, process, n_classes, n_threads, seed, 2, NCTMC_EXIT_LINK_NOISE_POSTERIOR);
}

static void fixture_free(grad_fixture *f)
{
    nctmc_backend *be = f->ctx->backend;
    be->ops->free(be, f->grads);
    dit_workspace_free(f->ws);
    nctmc_model_free(f->model);
    nctmc_context_free(f->ctx);
    free(f->host_grads);
    free(f->host_weights);
    free(f->x_t);
    free(f->x_0);
    free(f->times);
    free(f->labels);
}

static dit_batch fixture_batch(const grad_fixture *f)
{
    dit_batch b = {f->B, f->L, f->x_t, f->times, f->labels, f->x_0, f->weights};
    return b;
}

/* The mean loss at the current weights; with_grads also fills host_grads. */
static double eval_loss(grad_fixture *f, bool with_grads)
{
    dit_batch b = fixture_batch(f);
    double loss = NAN;
    char err[256];
    nctmc_status st = dit_loss(f->model, f->ws, &b, with_grads ? f->grads : NULL, false, &loss,
                               err, sizeof err);
    CHECK(st == NCTMC_OK, "dit_loss: %s", err);
    if (with_grads) {
        nctmc_backend *be = f->ctx->backend;
        be->ops->download(be, f->host_grads, f->grads, slab_bytes(f->model));
    }
    return loss;
}

static void set_weight(grad_fixture *f, size_t at, float value)
{
    nctmc_backend *be = f->ctx->backend;
    be->ops->upload(be, f->model->weights + at, &value, sizeof value);
}

/* Central difference of the loss in one weight. */
static double fd_element(grad_fixture *f, size_t at, float eps)
{
    float w0 = f->host_weights[at];
    set_weight(f, at, w0 + eps);
    double up = eval_loss(f, false);
    set_weight(f, at, w0 - eps);
    double down = eval_loss(f, false);
    set_weight(f, at, w0);
    return (up - down) / (2.0 * (double)eps);
}

/* Per-element checks on a few entries of every tensor. Float32 forward
 * passes make the difference noisy at the 1e-5 level of the loss, so the
 * tolerance combines a relative part and an absolute floor. */
static void check_elements(grad_fixture *f, const char *what)
{
    nctmc_model *m = f->model;
    double loss = eval_loss(f, true);
    CHECK(isfinite(loss) && loss > 0.0, "%s: loss %g", what, loss);
    test_rng rng = test_rng_seed(99);
    int checked = 0, failed = 0;
    double worst = 0.0;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        /* the masked process's exit rate is exact, the denoiser link's
         * comes from the logits: the exit-rate head has no effect */
        bool masked_rate = (m->fp.process == NCTMC_FP_MASKED ||
                            model_config_denoiser(&m->config)) &&
                           strstr(t->name, "rate_head");
        for (int s = 0; s < 3; s++) {
            size_t at = t->offset + (size_t)test_randint(&rng, (int32_t)t->n_elements);
            double g = f->host_grads[at];
            double fd = fd_element(f, at, 2e-3f);
            double err = fabs(g - fd);
            double tol = 2e-2 * fabs(fd) + 2e-4 * fmax(1.0, loss);
            if (masked_rate)
                tol = 0.0; /* exact zero expected */
            checked++;
            if (!(err <= tol)) {
                failed++;
                fprintf(stderr, "  %s %s[%zu]: grad %.6g fd %.6g\n", what, t->name,
                        at - t->offset, g, fd);
            }
            worst = fmax(worst, err / (fabs(fd) + 1e-3));
        }
    }
    CHECK(failed == 0, "%s: %d of %d sampled gradients disagree with finite differences",
          what, failed, checked);
    printf("%s: %d elements checked, worst relative error %.2e\n", what, checked, worst);
}

/* d/de loss(w + e v) against g . v for a random direction v over all
 * parameters at once: a single number that every gradient contributes to. */
static void check_directions(grad_fixture *f, const char *what)
{
    nctmc_model *m = f->model;
    nctmc_backend *be = f->ctx->backend;
    double loss = eval_loss(f, true);
    test_rng rng = test_rng_seed(7);
    float *dir = calloc(m->slab_floats, sizeof(float));
    float *moved = calloc(m->slab_floats, sizeof(float));
    for (int rep = 0; rep < 3; rep++) {
        double gv = 0.0;
        for (int32_t k = 0; k < m->n_tensors; k++) {
            const model_tensor *t = &m->tensors[k];
            for (int64_t e = 0; e < t->n_elements; e++) {
                size_t at = t->offset + (size_t)e;
                dir[at] = test_uniform(&rng, -1.0f, 1.0f);
                gv += (double)dir[at] * f->host_grads[at];
            }
        }
        const float eps = 1e-3f;
        double val[2];
        for (int side = 0; side < 2; side++) {
            float s = side == 0 ? eps : -eps;
            for (size_t i = 0; i < m->slab_floats; i++)
                moved[i] = f->host_weights[i] + s * dir[i];
            be->ops->upload(be, m->weights, moved, slab_bytes(m));
            val[side] = eval_loss(f, false);
        }
        be->ops->upload(be, m->weights, f->host_weights, slab_bytes(m));
        double fd = (val[0] - val[1]) / (2.0 * eps);
        CHECK_CLOSE(gv, fd, 1e-2, 1e-3 * fmax(1.0, loss), what);
    }
    free(dir);
    free(moved);
}

static void test_gradients(nctmc_process process, int32_t n_classes, nctmc_exit_link link,
                           const char *what)
{
    grad_fixture f;
    fixture_init_layers(&f, process, n_classes, 2, 1234 + (uint64_t)process, 2, link);
    check_elements(&f, what);
    check_directions(&f, what);
    fixture_free(&f);
}

/* Per-sequence weights: the mean loss is the weighted mean of the
 * (unchanged) per-position losses, and the gradients are the gradients of
 * that weighted mean (finite differences of it), a zero weight included. */
static void test_weighted(void)
{
    grad_fixture f;
    fixture_init(&f, NCTMC_PROCESS_UNIFORM, 0, 2, 77);
    nctmc_backend *be = f.ctx->backend;
    size_t N = (size_t)f.B * (size_t)f.L;
    float *plain_rows = malloc(N * sizeof(float)), *weighted_rows = malloc(N * sizeof(float));
    double plain = eval_loss(&f, false);
    be->ops->download(be, plain_rows, dit_ws_loss(f.ws), N * sizeof(float));
    float w[3] = {0.5f, 2.25f, 0.0f};
    f.weights = w;
    double weighted = eval_loss(&f, false);
    be->ops->download(be, weighted_rows, dit_ws_loss(f.ws), N * sizeof(float));
    double want = 0.0;
    for (size_t r = 0; r < N; r++)
        want += (double)w[r / (size_t)f.L] * (double)plain_rows[r];
    want /= (double)N;
    CHECK(memcmp(plain_rows, weighted_rows, N * sizeof(float)) == 0,
          "weights change the per-position losses");
    CHECK_CLOSE(weighted, want, 1e-12, 1e-12, "weighted mean loss");
    CHECK(fabs(weighted - plain) > 1e-3 * plain, "weights leave the loss at %g (weighted %g)",
          plain, weighted);
    check_elements(&f, "uniform, weighted");
    check_directions(&f, "uniform, weighted");
    free(plain_rows);
    free(weighted_rows);
    fixture_free(&f);
}

/* accumulate = true adds to the slab: two passes give twice one pass (to
 * rounding). */
static void test_accumulation(void)
{
    grad_fixture f;
    fixture_init(&f, NCTMC_PROCESS_UNIFORM, 2, 2, 5);
    nctmc_model *m = f.model;
    nctmc_backend *be = f.ctx->backend;
    eval_loss(&f, true);
    float *once = malloc(slab_bytes(m));
    memcpy(once, f.host_grads, slab_bytes(m));
    dit_batch b = fixture_batch(&f);
    double loss;
    char err[256];
    dit_loss(m, f.ws, &b, f.grads, true, &loss, err, sizeof err);
    be->ops->download(be, f.host_grads, f.grads, slab_bytes(m));
    int bad = 0;
    for (int32_t k = 0; k < m->n_tensors; k++)
        for (int64_t e = 0; e < m->tensors[k].n_elements; e++) {
            size_t at = m->tensors[k].offset + (size_t)e;
            /* adding term by term into a non-zero slab rounds differently
             * from adding the finished sum, hence the tolerance */
            double want = 2.0 * (double)once[at];
            if (!(fabs(f.host_grads[at] - want) <= 1e-5 * fabs(want) + 1e-9)) {
                bad++;
                fprintf(stderr, "  %s[%lld]: %.9g vs 2 x %.9g\n", m->tensors[k].name,
                        (long long)e, f.host_grads[at], once[at]);
            }
        }
    CHECK(bad == 0, "accumulated gradient != 2 x single: %d entries", bad);
    free(once);
    fixture_free(&f);
}

/* The same inputs give the same bits, run after run and on 1, 2, 3, 8 or 32
 * threads (every split of the work is fixed by the shapes). */
static void test_determinism(void)
{
    static const int thread_counts[] = {1, 2, 3, 8, 32};
    float *ref = NULL;
    double ref_loss = 0.0;
    for (size_t ti = 0; ti < sizeof thread_counts / sizeof thread_counts[0]; ti++) {
        int threads = thread_counts[ti];
        for (int rep = 0; rep < 2; rep++) {
            grad_fixture f;
            fixture_init(&f, NCTMC_PROCESS_MIXTURE, 3, threads, 42);
            double loss = eval_loss(&f, true);
            size_t bytes = slab_bytes(f.model);
            if (!ref) {
                ref = malloc(bytes);
                memcpy(ref, f.host_grads, bytes);
                ref_loss = loss;
            } else {
                CHECK(memcmp(&loss, &ref_loss, sizeof loss) == 0,
                      "loss differs (threads %d, run %d)", threads, rep);
                CHECK(memcmp(ref, f.host_grads, bytes) == 0,
                      "gradients differ (threads %d, run %d)", threads, rep);
            }
            fixture_free(&f);
        }
    }
    free(ref);
}

/* A recomputing workspace (DIT_WS_TRAINING_RECOMPUTE) gives the loss and
 * the gradients of a full one bit for bit — for a 4-layer model (three
 * blocks run again), twice in a row (the second forward starts with block
 * 0's activations in the shared set), with accumulation — in a smaller
 * arena. */
static void test_recompute(nctmc_process process, int32_t n_classes, nctmc_exit_link link,
                           const char *what)
{
    grad_fixture f;
    fixture_init_layers(&f, process, n_classes, 2, 4321 + (uint64_t)process, 4, link);
    nctmc_model *m = f.model;
    nctmc_backend *be = f.ctx->backend;
    size_t n = m->slab_floats;
    double want_loss = eval_loss(&f, true);
    float *want = malloc(slab_bytes(m)), *want_acc = malloc(slab_bytes(m));
    memcpy(want, f.host_grads, slab_bytes(m));
    dit_batch b = fixture_batch(&f);
    double loss = 0.0;
    char err[256];
    /* a second batch accumulated onto the slab of the first */
    CHECK(dit_loss(m, f.ws, &b, f.grads, true, &loss, err, sizeof err) == NCTMC_OK, "%s", err);
    be->ops->download(be, want_acc, f.grads, slab_bytes(m));
    size_t full_bytes = dit_workspace_bytes(f.ws);
    dit_workspace_free(f.ws);
    CHECK(dit_workspace_create(m, be, f.B, f.L, DIT_WS_TRAINING_RECOMPUTE, &f.ws, err,
                               sizeof err) == NCTMC_OK,
          "recomputing workspace: %s", err);
    for (int round = 0; round < 2; round++) {
        memset(f.host_grads, 0xff, slab_bytes(m));
        double loss = eval_loss(&f, true);
        CHECK(memcmp(&loss, &want_loss, sizeof loss) == 0, "%s recompute round %d: loss %.17g "
              "vs %.17g", what, round, loss, want_loss);
        CHECK(memcmp(f.host_grads, want, slab_bytes(m)) == 0,
              "%s recompute round %d: gradients identical", what, round);
    }
    /* accumulation onto an existing slab: the same sums */
    CHECK(dit_loss(m, f.ws, &b, f.grads, true, &loss, err, sizeof err) == NCTMC_OK, "%s", err);
    be->ops->download(be, f.host_grads, f.grads, slab_bytes(m));
    CHECK(memcmp(f.host_grads, want_acc, n * sizeof(float)) == 0,
          "%s recompute: accumulated gradients identical", what);
    size_t re_bytes = dit_workspace_bytes(f.ws);
    CHECK(re_bytes < full_bytes, "%s recompute: arena %zu bytes < %zu", what, re_bytes,
          full_bytes);
    printf("  %s: recomputing arena %zu bytes, full %zu\n", what, re_bytes, full_bytes);
    dit_workspace *bad = NULL;
    CHECK(dit_workspace_create(m, be, f.B, f.L, 7, &bad, err, sizeof err) ==
                  NCTMC_ERR_INVALID_ARGUMENT &&
              bad == NULL,
          "an unknown workspace mode is refused");
    free(want);
    free(want_acc);
    fixture_free(&f);
}

/* What the grads-ready callback saw: the stages in order, and whether each
 * stage's tail of the slab already held the final gradients. */
typedef struct ready_log {
    grad_fixture *f;
    const float *want;      /* the final gradients (host) */
    float *seen;            /* host scratch */
    int32_t calls, order_ok, final_ok;
} ready_log;

/* Whether a and b (host copies of the slab from float `lo` on) agree in
 * every tensor of that part (the padding between tensors is never written). */
static bool tail_equal(const nctmc_model *m, const float *a, const float *b, size_t lo)
{
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        if (t->offset >= lo &&
            memcmp(a + t->offset - lo, b + t->offset - lo,
                   (size_t)t->n_elements * sizeof(float)) != 0)
            return false;
    }
    return true;
}

static void on_ready(void *user, int32_t stage)
{
    ready_log *r = user;
    nctmc_model *m = r->f->model;
    nctmc_backend *be = r->f->ctx->backend;
    size_t lo = dit_grad_stage_tail(m, stage);
    if (stage != r->calls || lo == SIZE_MAX) {
        r->order_ok = 0;
    } else {
        size_t bytes = (m->slab_floats - lo) * sizeof(float);
        be->ops->download(be, r->seen, r->f->grads + lo, bytes);
        if (!tail_equal(m, r->seen, r->want + lo, lo))
            r->final_ok = 0;
    }
    r->calls++;
}

static void test_grads_ready(void)
{
    grad_fixture f;
    fixture_init_layers(&f, NCTMC_PROCESS_MIXTURE, 3, 2, 99, 4, NCTMC_EXIT_LINK_NOISE_POSTERIOR);
    nctmc_model *m = f.model;
    nctmc_backend *be = f.ctx->backend;
    int32_t n = m->dims.n_layers, stages = dit_grad_stages(m);
    CHECK(stages == n + 2, "stages: %d for %d blocks", stages, n);
    /* the standard layout: every stage's part is a tail, starting at the
     * output layer's first tensor, then each block's, then the slab's start */
    int32_t out = model_find_tensor(m, "output_layer.norm_final.weight");
    CHECK(out >= 0 && dit_grad_stage_tail(m, 0) == m->tensors[out].offset,
          "stage 0 starts at the output layer");
    for (int32_t s = 1; s <= n; s++) {
        char name[64];
        snprintf(name, sizeof name, "blocks.%d.norm1.weight", (int)(n - s));
        int32_t k = model_find_tensor(m, name);
        CHECK(k >= 0 && dit_grad_stage_tail(m, s) == m->tensors[k].offset,
              "stage %d starts at %s", (int)s, name);
    }
    CHECK(dit_grad_stage_tail(m, n + 1) == 0, "the last stage's part is the whole slab");
    (void)eval_loss(&f, true);
    float *want = malloc(slab_bytes(m)), *seen = malloc(slab_bytes(m));
    memcpy(want, f.host_grads, slab_bytes(m));
    /* a slab of garbage: a stage reported before its gradients are written
     * shows it */
    memset(f.host_grads, 0xff, slab_bytes(m));
    be->ops->upload(be, f.grads, f.host_grads, slab_bytes(m));
    ready_log r = {&f, want, seen, 0, 1, 1};
    dit_workspace_on_grads_ready(f.ws, on_ready, &r);
    (void)eval_loss(&f, true);
    CHECK(r.calls == stages && r.order_ok, "grads ready: %d calls in order (want %d)", r.calls,
          stages);
    CHECK(r.final_ok, "grads ready: each stage's tail final when reported");
    CHECK(tail_equal(m, f.host_grads, want, 0), "the callback changes no gradient");
    dit_workspace_on_grads_ready(f.ws, NULL, NULL);
    r.calls = 0;
    (void)eval_loss(&f, true);
    CHECK(r.calls == 0, "no callback once it is removed");
    free(want);
    free(seen);
    fixture_free(&f);
}

int main(void)
{
    const nctmc_exit_link np = NCTMC_EXIT_LINK_NOISE_POSTERIOR, dn = NCTMC_EXIT_LINK_DENOISER;
    test_gradients(NCTMC_PROCESS_UNIFORM, 0, np, "uniform");
    test_gradients(NCTMC_PROCESS_MASKED, 0, np, "masked");
    test_gradients(NCTMC_PROCESS_MIXTURE, 3, np, "mixture+labels");
    test_gradients(NCTMC_PROCESS_UNIFORM, 0, dn, "uniform/denoiser");
    test_gradients(NCTMC_PROCESS_MIXTURE, 3, dn, "mixture+labels/denoiser");
    test_weighted();
    test_accumulation();
    test_determinism();
    test_recompute(NCTMC_PROCESS_UNIFORM, 0, np, "uniform");
    test_recompute(NCTMC_PROCESS_MASKED, 0, np, "masked");
    test_recompute(NCTMC_PROCESS_MIXTURE, 3, np, "mixture+labels");
    test_recompute(NCTMC_PROCESS_UNIFORM, 0, dn, "uniform/denoiser");
    test_grads_ready();
    return test_finish("model_grad");
}
