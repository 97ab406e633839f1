/*
 * test_bf16_logits_contract.c — the model's side of bf16 logits (backend.h:
 * linear_forward_bf16, linear_backward_bf16, nctmc_lcond_args.logits_bf16;
 * lib/dit/dit_loss.c), checked on the CPU backend with no GPU. The CPU
 * backend's table is copied into one whose bf16 entries emulate the CUDA
 * backend's contract on the host: linear_forward_bf16 runs the float
 * product and rounds it to bfloat16 (to nearest even) into the logits
 * buffer, lcond with logits_bf16 widens the row, runs the float lcond and
 * rounds the gradients to bfloat16 in place, linear_backward_bf16 widens
 * dy and runs the float backward. Checked:
 * 1. switch on, a training step (dit_loss with gradients) for uniform
 *    (sigma link), masked (noise-posterior) and mixture (sigma): the step
 *    takes the bf16 path (one bf16 product, one bf16 lcond, one bf16
 *    backward), and its loss and every parameter gradient are within the
 *    bf16 tolerance below of the float path's (an unpatched CPU context);
 *    two runs give the same bits;
 * 2. the same with the denoiser link, a loss without gradients (the
 *    evaluation) and dit_forward (sampling, nctmc_model_forward): no bf16
 *    call, the float path's bits;
 * 3. switch off (linear_forward_bf16 declines): the float path's bits.
 * What the GPU computes is checked by tests/test_cuda_bf16_logits.c.
 *
 * Tolerance: the logits and their gradients each rounded once to bfloat16
 * (relative 2^-9 of an element); through the backward's sums the
 * gradients of the parameters move by a few times that: 1e-2 of the
 * largest (max |got - want| / max |want| per tensor; measured 2.4e-3 to
 * 2.9e-3), the loss 1e-3 (measured 1.6e-4 to 2.3e-4).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/context.h"
#include "dit/dit.h"
#include "dit/dit_internal.h"
#include "test_util.h"

#define TOL_LOSS 1e-3
#define TOL_GRADS 1e-2

static struct {
    nctmc_backend_ops inner; /* the CPU backend's table */
    nctmc_backend_ops table; /* the patched one */
    bool on;                 /* linear_forward_bf16 accepts */
    int forwards, losses, backwards;
} R;

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float *widen(const void *p, size_t n)
{
    const uint16_t *h = p;
    float *f = malloc(n * sizeof *f);
    CHECK(f != NULL, "out of memory");
    for (size_t i = 0; f && i < n; i++)
        f[i] = from_bf16(h[i]);
    return f;
}

static bool emu_forward_bf16(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                             const float *x, const float *w, const float *bias, void *y)
{
    if (!R.on)
        return false;
    if (rows <= 0)
        return true;
    R.forwards++;
    size_t n = (size_t)rows * (size_t)out;
    float *tmp = malloc(n * sizeof *tmp);
    R.inner.linear_forward(be, rows, in, out, x, w, bias, tmp);
    uint16_t *h = y;
    for (size_t i = 0; i < n; i++)
        h[i] = to_bf16(tmp[i]);
    free(tmp);
    return true;
}

static void emu_backward_bf16(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                              const float *x, const float *w, const void *dy, float *dx,
                              bool accumulate_dx, float *dw, float *dbias, bool accumulate_params)
{
    R.backwards++;
    float *f = widen(dy, (size_t)rows * (size_t)out);
    R.inner.linear_backward(be, rows, in, out, x, w, f, dx, accumulate_dx, dw, dbias,
                            accumulate_params);
    free(f);
}

static void emu_lcond(nctmc_backend *be, const nctmc_lcond_args *args)
{
    if (!args->logits_bf16) {
        R.inner.lcond(be, args);
        return;
    }
    R.losses++;
    size_t n = (size_t)args->n_rows * (size_t)args->row_stride;
    float *z = widen(args->logits, n);
    nctmc_lcond_args a = *args;
    a.logits = z;
    a.logits_bf16 = false;
    a.d_logits = args->d_logits ? z : NULL;
    R.inner.lcond(be, &a);
    if (args->d_logits) {
        uint16_t *d = (uint16_t *)args->d_logits;
        for (size_t i = 0; i < n; i++)
            d[i] = to_bf16(z[i]);
    }
    free(z);
}

static nctmc_context *make_context(bool patched)
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
    if (patched) {
        nctmc_backend *be = ctx->backend;
        R.inner = *be->ops;
        R.table = *be->ops;
        R.table.linear_forward_bf16 = emu_forward_bf16;
        R.table.linear_backward_bf16 = emu_backward_bf16;
        R.table.lcond = emu_lcond;
        be->ops = &R.table;
    }
    return ctx;
}

static float *dget(nctmc_backend *be, const void *d, size_t n)
{
    float *h = calloc(n ? n : 1, sizeof *h);
    be->ops->download(be, h, d, n * sizeof *h);
    return h;
}

typedef struct step_out {
    double mean, mean_nograd;
    float *loss, *grads, *logits; /* logits: dit_forward's */
    size_t n_grads, n_logits;
    bool bf16, bf16_nograd;
} step_out;

/* A training step, a loss without gradients and a forward pass of the
 * model `cfg` (weights from its seed) on `ctx`. */
static step_out run(nctmc_context *ctx, const nctmc_model_config *cfg)
{
    step_out o;
    memset(&o, 0, sizeof o);
    nctmc_model *m = NULL;
    dit_workspace *ws = NULL;
    char err[256];
    CHECK(nctmc_model_create(ctx, cfg, &m) == NCTMC_OK, "model");
    nctmc_backend *be = ctx->backend;
    /* the initial weights plus noise: the zero-initialised output layer
     * would make every logit 0, which bfloat16 holds exactly */
    float *w = dget(be, m->weights, m->slab_floats);
    test_rng wr = test_rng_seed(99);
    for (size_t k = 0; k < m->slab_floats; k++)
        w[k] += test_uniform(&wr, -0.1f, 0.1f);
    be->ops->upload(be, m->weights, w, m->slab_floats * sizeof(float));
    free(w);
    const int32_t B = 3, L = cfg->seq_len, N = B * L;
    CHECK(dit_workspace_create(m, be, B, L, DIT_WS_TRAINING, &ws, err, sizeof err) == NCTMC_OK,
          "workspace: %s", err);
    float *grads = be->ops->alloc(be, m->slab_floats * sizeof(float));
    int32_t x_t[3 * 24], x_0[3 * 24];
    float times[3] = {0.15f, 0.5f, 0.85f};
    test_rng rng = test_rng_seed(38);
    int32_t S = cfg->vocab_size, n_data = cfg->process == NCTMC_PROCESS_UNIFORM ? S : S - 1;
    for (int32_t r = 0; r < N; r++) {
        x_0[r] = test_randint(&rng, n_data);
        x_t[r] = test_randint(&rng, 2) ? x_0[r]
                 : cfg->process == NCTMC_PROCESS_UNIFORM ? test_randint(&rng, S)
                                                         : S - 1;
    }
    dit_batch b = {B, L, x_t, times, NULL, x_0, NULL};
    CHECK(dit_loss(m, ws, &b, grads, false, &o.mean, err, sizeof err) == NCTMC_OK,
          "dit_loss: %s", err);
    o.bf16 = ws->logits_bf16_last;
    o.loss = dget(be, dit_ws_loss(ws), (size_t)N);
    o.n_grads = m->slab_floats;
    o.grads = dget(be, grads, o.n_grads);
    CHECK(dit_loss(m, ws, &b, NULL, false, &o.mean_nograd, err, sizeof err) == NCTMC_OK,
          "dit_loss without gradients: %s", err);
    o.bf16_nograd = ws->logits_bf16_last;
    dit_forward(m, ws, &b);
    o.n_logits = (size_t)N * (size_t)m->dims.V;
    o.logits = dget(be, dit_ws_logits(ws), o.n_logits);
    CHECK(be->ops->synchronize(be) == NCTMC_OK, "synchronize: %s", be->error);
    be->ops->free(be, grads);
    dit_workspace_free(ws);
    nctmc_model_free(m);
    return o;
}

static void step_free(step_out *o)
{
    free(o->loss);
    free(o->grads);
    free(o->logits);
}

static double scaled_err(const float *got, const float *want, size_t n)
{
    double max_want = 0.0, max_diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        max_want = fmax(max_want, fabs((double)want[i]));
        max_diff = fmax(max_diff, fabs((double)got[i] - (double)want[i]));
    }
    return max_want > 0.0 ? max_diff / max_want : max_diff;
}

static bool same_bits(const step_out *a, const step_out *b)
{
    return a->mean == b->mean && a->mean_nograd == b->mean_nograd &&
           memcmp(a->loss, b->loss, 3 * 24 * sizeof(float)) == 0 &&
           memcmp(a->grads, b->grads, a->n_grads * sizeof(float)) == 0 &&
           memcmp(a->logits, b->logits, a->n_logits * sizeof(float)) == 0;
}

static nctmc_model_config config(nctmc_process process, nctmc_exit_link link)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 50;
    c.vocab_pad_multiple = 32; /* V = 64 > S */
    c.seq_len = 24;
    c.n_layers = 2;
    c.d_model = 32;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.process = process;
    c.schedule = NCTMC_SCHEDULE_LINEAR;
    c.mixture_uniform = 0.3f;
    c.exit_link = link;
    c.seed = 5;
    return c;
}

static void check_case(nctmc_context *plain, nctmc_context *emu, nctmc_process process,
                       nctmc_exit_link link, const char *label)
{
    nctmc_model_config cfg = config(process, link);
    bool applies = link != NCTMC_EXIT_LINK_DENOISER;
    step_out want = run(plain, &cfg);
    R.on = true;
    R.forwards = R.losses = R.backwards = 0;
    step_out got = run(emu, &cfg);
    int forwards = R.forwards, losses = R.losses, backwards = R.backwards;
    step_out again = run(emu, &cfg);
    R.on = false;
    step_out off = run(emu, &cfg);
    CHECK(got.bf16 == applies && !got.bf16_nograd && !want.bf16,
          "%s: bf16 logits %s (loss alone: %s)", label, got.bf16 ? "taken" : "not taken",
          got.bf16_nograd ? "taken" : "not taken");
    int expect = applies ? 1 : 0;
    CHECK(forwards == expect && losses == expect && backwards == expect,
          "%s: %d bf16 products, %d bf16 losses, %d bf16 backwards; expected %d each", label,
          forwards, losses, backwards, expect);
    CHECK(same_bits(&got, &again), "%s: two runs differ", label);
    CHECK(same_bits(&off, &want), "%s: the switch off differs from the float path", label);
    /* the loss alone and the forward pass never take bf16 logits */
    CHECK(got.mean_nograd == want.mean_nograd &&
              memcmp(got.logits, want.logits, want.n_logits * sizeof(float)) == 0,
          "%s: the loss alone or the forward pass differs from the float path", label);
    double e_loss = scaled_err(got.loss, want.loss, 3 * 24);
    double e_grads = 0.0;
    nctmc_model *probe = NULL;
    CHECK(nctmc_model_create(plain, &cfg, &probe) == NCTMC_OK, "model");
    for (int32_t k = 0; probe && k < probe->n_tensors; k++) {
        const model_tensor *t = &probe->tensors[k];
        double te = scaled_err(got.grads + t->offset, want.grads + t->offset,
                               (size_t)t->n_elements);
        CHECK(te <= TOL_GRADS, "%s: gradient of %s: scaled error %.3g above %.0e", label,
              t->name, te, TOL_GRADS);
        e_grads = fmax(e_grads, te);
    }
    nctmc_model_free(probe);
    CHECK(e_loss <= TOL_LOSS, "%s: loss: scaled error %.3g above %.0e", label, e_loss, TOL_LOSS);
    if (!applies)
        CHECK(same_bits(&got, &want), "%s: the denoiser link differs from the float path",
              label);
    printf("  %-32s bf16 %-3s loss %9.2e (tol %.0e) gradients %9.2e (tol %.0e)\n", label,
           got.bf16 ? "yes" : "no", e_loss, TOL_LOSS, e_grads, TOL_GRADS);
    step_free(&want);
    step_free(&got);
    step_free(&again);
    step_free(&off);
}

int main(void)
{
    nctmc_context *plain = make_context(false), *emu = make_context(true);
    if (!plain || !emu)
        return test_finish("bf16_logits_contract");
    check_case(plain, emu, NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_SIGMA, "uniform/sigma");
    check_case(plain, emu, NCTMC_PROCESS_MASKED, NCTMC_EXIT_LINK_NOISE_POSTERIOR,
               "masked/noise-posterior");
    check_case(plain, emu, NCTMC_PROCESS_MIXTURE, NCTMC_EXIT_LINK_SIGMA, "mixture/sigma");
    check_case(plain, emu, NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_DENOISER, "uniform/denoiser");
    nctmc_context_free(emu);
    nctmc_context_free(plain);
    return test_finish("bf16_logits_contract");
}
