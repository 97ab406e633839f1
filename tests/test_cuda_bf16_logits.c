/*
 * test_cuda_bf16_logits.c — the CUDA backend's bf16 logits
 * ($NCTMC_CUDA_BF16_LOGITS=1, read at the backend's creation): the training
 * loss's output projection writes the logits in bfloat16
 * (linear_forward_bf16, backends/cuda/cuda_linear.cu), lcond reads them and
 * writes their gradients in bfloat16 (lcond_kernel<__nv_bfloat16> and
 * lcond_split_kernel<__nv_bfloat16>, backends/cuda/cuda_loss.cu), and the
 * projection's backward multiplies those (linear_backward_bf16).
 *
 * lcond, against the CPU backend's float32 lcond on the same values (the
 * logits rounded to bfloat16, widened to float for the CPU): the default
 * kernel ($NCTMC_CUDA_LCOND unset) and the split one (=split), for each
 * forward process and the sigma and noise-posterior links, rows with and
 * without 16-byte vectors (V a multiple of 8 or odd; S = 37 ends inside a
 * vector), the paper's S = 50304, and S = 60000 (the float kernel cannot
 * cache that row, the bfloat16 one can): the loss, the logits' gradients
 * (into a separate buffer and in place, which must be the same bits), the
 * exit-rate head's gradient, the loss alone, the weighted gradients; two
 * runs bit for bit.
 * The output projection: linear_forward_bf16 and linear_backward_bf16
 * against the CPU's linear_forward / linear_backward (bf16 dy widened).
 * The whole model: dit_loss on a "cuda" and a "cuda-bf16" context against
 * a "cpu" one, uniform, masked and mixture with the sigma and
 * noise-posterior links (the switch must apply: ws->logits_bf16_last) and
 * the denoiser link (it must not, nor to a loss without gradients); loss
 * and every parameter gradient; two runs bit for bit. Without the
 * variable linear_forward_bf16 declines.
 *
 * Tolerances (max |got - want| / max |want|):
 *   loss and d_rate_h of lcond: the same bfloat16 inputs on both sides, so
 *     the float reduction order alone: 1e-4 (the conformance test's);
 *   the logits' gradient: that, plus one rounding to bfloat16 (relative
 *     2^-9 of an element, so at most 2^-9 of the largest): 4e-3;
 *   the linear products: bfloat16 operands, float32 accumulation: 4e-2
 *     (the conformance test's TOL_BF16);
 *   the whole model: TF32 products with a bfloat16 output projection and
 *     bfloat16 logits and gradients: 1e-1 (between the conformance test's
 *     TF32 5e-2 and bf16 2e-1); on "cuda-bf16" 2e-1 (its TOL_MODEL_BF16).
 *
 * Without a usable GPU the program prints "cuda_bf16_logits: skipped:
 * <reason>" and exits 77; the split cases are skipped below compute
 * capability 9.0 (the backend then runs the default kernel, checked too).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_module.h"
#include "base/fail.h"
#include "core/context.h"
#include "dit/dit.h"
#include "dit/dit_internal.h"
#include "cuda_test_util.h"

#define TOL_REDUCTION 1e-4
#define TOL_GRAD_BF16 4e-3
#define TOL_LINEAR_BF16 4e-2
#define TOL_MODEL 1e-1
#define TOL_MODEL_BF16 2e-1

static nctmc_backend *CPU;

static void *dnew(nctmc_backend *be, size_t bytes)
{
    void *zero = xcalloc(bytes, 1);
    void *d = dput(be, zero, bytes);
    free(zero);
    return d;
}

/* float -> bfloat16 bits, rounded to nearest even (finite values). */
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

/* n bfloat16 values of backend memory, widened to float on the host. */
static float *dget_bf16(nctmc_backend *be, const void *d, size_t n)
{
    uint16_t *h = xcalloc(n, 2);
    be->ops->download(be, h, d, n * 2);
    float *f = xcalloc(n, sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = from_bf16(h[i]);
    free(h);
    return f;
}

static void report(const char *what, double e, double tol)
{
    check_scaled(what, e, tol, 66);
}

/* ---- lcond on bfloat16 logits ------------------------------------------ */

typedef struct loss_case {
    nctmc_fp fp;
    int32_t B, L, V;
    float *logits;      /* the bfloat16 values, widened */
    uint16_t *logits16;
    float *rate_h, *times, *seq_w;
    int32_t *x_t, *x_0;
} loss_case;

static loss_case case_make(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V)
{
    loss_case c;
    memset(&c, 0, sizeof c);
    c.fp = fp;
    c.B = B;
    c.L = L;
    c.V = V;
    size_t N = (size_t)B * L, NV = N * (size_t)V;
    c.logits = xcalloc(NV, sizeof(float));
    c.logits16 = xcalloc(NV, 2);
    test_fill_uniform(rng, c.logits, NV, -3.0f, 3.0f);
    for (int32_t k = 0; k < V; k++) /* one row far from zero */
        c.logits[k] += 40.0f;
    for (size_t k = 0; k < NV; k++) {
        c.logits16[k] = to_bf16(c.logits[k]);
        c.logits[k] = from_bf16(c.logits16[k]);
    }
    c.rate_h = xcalloc(N, sizeof(float));
    test_fill_uniform(rng, c.rate_h, N, -2.0f, 2.0f);
    c.times = xcalloc((size_t)B, sizeof(float));
    test_fill_uniform(rng, c.times, (size_t)B, 0.05f, 0.95f);
    c.seq_w = xcalloc((size_t)B, sizeof(float));
    for (int32_t b = 0; b < B; b++) /* a zero among them */
        c.seq_w[b] = b % 3 == 1 ? 0.0f : 0.4f + 0.7f * (float)b;
    c.x_t = xcalloc(N, sizeof(int32_t));
    c.x_0 = xcalloc(N, sizeof(int32_t));
    int32_t n_data = fp_n_data(&fp), mask = fp_mask(&fp);
    for (size_t r = 0; r < N; r++) {
        c.x_0[r] = test_randint(rng, n_data);
        int32_t kind = test_randint(rng, 3);
        c.x_t[r] = kind == 0 ? c.x_0[r]
                   : (kind == 1 && fp.process != NCTMC_FP_MASKED) ? test_randint(rng, fp.vocab)
                   : mask >= 0 ? mask
                               : test_randint(rng, fp.vocab);
    }
    return c;
}

static void case_free(loss_case *c)
{
    free(c->logits);
    free(c->logits16);
    free(c->rate_h);
    free(c->times);
    free(c->seq_w);
    free(c->x_t);
    free(c->x_0);
}

enum { OUT_LOSS, OUT_DLOGITS, OUT_DRATE, OUT_INPLACE, OUT_LOSS_ONLY, OUT_DLOGITS_W,
       OUT_DRATE_W, OUT_COUNT };
static const char *const out_names[OUT_COUNT] = {"loss", "d_logits", "d_rate_h",
                                                 "d_logits in place", "loss without grads",
                                                 "d_logits weighted", "d_rate_h weighted"};

/* The case on `be`: float logits on the CPU, bfloat16 on the GPU. */
static void run_case(nctmc_backend *be, const loss_case *c, float *out[OUT_COUNT])
{
    bool bf16 = be != CPU;
    size_t N = (size_t)c->B * c->L, NV = N * (size_t)c->V, elem = bf16 ? 2 : 4;
    bool masked = c->fp.process == NCTMC_FP_MASKED;
    void *logits = dput(be, bf16 ? (const void *)c->logits16 : (const void *)c->logits, NV * elem);
    float *rate_h = dput(be, c->rate_h, N * 4), *times = dput(be, c->times, (size_t)c->B * 4);
    float *seq_w = dput(be, c->seq_w, (size_t)c->B * 4);
    int32_t *x_t = dput(be, c->x_t, N * 4), *x_0 = dput(be, c->x_0, N * 4);
    float *loss = dnew(be, N * 4), *loss2 = dnew(be, N * 4), *wloss = dnew(be, N * 4);
    float *drate = dnew(be, N * 4), *wrate = dnew(be, N * 4);
    void *dlog = dnew(be, NV * elem), *wlog = dnew(be, NV * elem);
    nctmc_lcond_args a = {(int64_t)N, c->L, c->V, logits, masked ? NULL : rate_h, x_t, x_0,
                          times, c->fp, 1.0f / (float)N, loss, dlog, masked ? NULL : drate,
                          NULL, bf16};
    be->ops->lcond(be, &a);
    nctmc_lcond_args w = a;
    w.seq_weight = seq_w;
    w.loss = wloss;
    w.d_logits = wlog;
    w.d_rate_h = masked ? NULL : wrate;
    be->ops->lcond(be, &w);
    nctmc_lcond_args l = a;
    l.d_logits = NULL;
    l.d_rate_h = NULL;
    l.loss = loss2;
    be->ops->lcond(be, &l);
    nctmc_lcond_args p = a; /* in place, as the training step runs it */
    p.d_logits = logits;
    p.loss = NULL;
    be->ops->lcond(be, &p);
    sync_ok(be, "lcond");
    out[OUT_LOSS] = dget(be, loss, N);
    out[OUT_DLOGITS] = bf16 ? dget_bf16(be, dlog, NV) : dget(be, dlog, NV);
    out[OUT_DRATE] = dget(be, drate, N);
    out[OUT_INPLACE] = bf16 ? dget_bf16(be, logits, NV) : dget(be, logits, NV);
    out[OUT_LOSS_ONLY] = dget(be, loss2, N);
    out[OUT_DLOGITS_W] = bf16 ? dget_bf16(be, wlog, NV) : dget(be, wlog, NV);
    out[OUT_DRATE_W] = dget(be, wrate, N);
    void *bufs[] = {logits, rate_h, times, seq_w, x_t,   x_0,  loss,
                    loss2,  wloss,  drate, wrate, dlog, wlog};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
}

static nctmc_fp make_fp(int32_t process, int32_t schedule, int32_t S, int32_t link)
{
    nctmc_fp fp = {process, schedule, S, 0.4f, 1e-3f, link};
    return fp;
}

static void test_case(nctmc_backend *gpu, const char *kernel, test_rng *rng, nctmc_fp fp,
                      int32_t B, int32_t L, int32_t V, const char *label)
{
    loss_case c = case_make(rng, fp, B, L, V);
    float *want[OUT_COUNT], *got[OUT_COUNT], *again[OUT_COUNT];
    run_case(CPU, &c, want);
    run_case(gpu, &c, got);
    run_case(gpu, &c, again);
    size_t N = (size_t)B * L, NV = N * (size_t)V;
    size_t sizes[OUT_COUNT] = {N, NV, N, NV, N, NV, N};
    for (int k = 0; k < OUT_COUNT; k++) {
        char what[160];
        snprintf(what, sizeof what, "%s %s S%d V%d %s", kernel, label, fp.vocab, V,
                 out_names[k]);
        bool grad = k == OUT_DLOGITS || k == OUT_INPLACE || k == OUT_DLOGITS_W;
        report(what, scaled_err(got[k], want[k], sizes[k]), grad ? TOL_GRAD_BF16 : TOL_REDUCTION);
        CHECK(memcmp(got[k], again[k], sizes[k] * sizeof(float)) == 0,
              "%s: two CUDA runs differ", what);
    }
    CHECK(memcmp(got[OUT_INPLACE], got[OUT_DLOGITS], NV * sizeof(float)) == 0,
          "%s %s: the gradients in place differ from those into another buffer", kernel, label);
    CHECK(memcmp(got[OUT_LOSS_ONLY], got[OUT_LOSS], N * sizeof(float)) == 0,
          "%s %s: the loss alone differs from the loss with gradients", kernel, label);
    for (int k = 0; k < OUT_COUNT; k++) {
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    case_free(&c);
}

static void test_lcond_cases(nctmc_backend *gpu, const char *kernel, test_rng *rng)
{
    const int32_t sg = NCTMC_FP_LINK_SIGMA, np = NCTMC_FP_LINK_NOISE_POSTERIOR;
    const int32_t U = NCTMC_FP_UNIFORM, M = NCTMC_FP_MASKED, X = NCTMC_FP_MIXTURE;
    const int32_t LIN = NCTMC_FP_LINEAR, COS = NCTMC_FP_COSINE, LOG = NCTMC_FP_LOGLINEAR;
    test_case(gpu, kernel, rng, make_fp(U, LIN, 37, sg), 3, 7, 40, "uniform/linear");
    test_case(gpu, kernel, rng, make_fp(U, LIN, 37, sg), 3, 7, 37, "uniform/linear odd stride");
    test_case(gpu, kernel, rng, make_fp(M, COS, 37, sg), 3, 7, 40, "masked/cosine");
    test_case(gpu, kernel, rng, make_fp(X, LOG, 37, sg), 3, 7, 37, "mixture/loglinear");
    test_case(gpu, kernel, rng, make_fp(U, LIN, 37, np), 3, 7, 40, "uniform/noise-posterior");
    test_case(gpu, kernel, rng, make_fp(X, COS, 37, np), 3, 7, 48, "mixture/noise-posterior");
    test_case(gpu, kernel, rng, make_fp(U, COS, 3, sg), 2, 5, 8, "uniform/cosine tiny");
    test_case(gpu, kernel, rng, make_fp(U, COS, 50304, sg), 2, 3, 50304, "uniform/cosine");
    test_case(gpu, kernel, rng, make_fp(M, LIN, 50304, sg), 2, 3, 50304, "masked/linear");
    test_case(gpu, kernel, rng, make_fp(X, LOG, 50304, np), 2, 3, 50304, "mixture/np");
    test_case(gpu, kernel, rng, make_fp(U, LIN, 50304, np), 2, 3, 50307, "uniform/np odd");
    test_case(gpu, kernel, rng, make_fp(M, COS, 60000, sg), 2, 3, 60000, "masked/cosine");
}

/* ---- the output projection --------------------------------------------- */

static void test_linear(nctmc_backend *gpu, test_rng *rng, int64_t rows, int32_t in,
                        int32_t out, bool bias)
{
    size_t nx = (size_t)rows * in, nw = (size_t)out * in, ny = (size_t)rows * out;
    float *x = xcalloc(nx, 4), *w = xcalloc(nw, 4), *b = xcalloc((size_t)out, 4);
    float *dy = xcalloc(ny, 4);
    uint16_t *dy16 = xcalloc(ny, 2);
    test_fill_uniform(rng, x, nx, -1.0f, 1.0f);
    test_fill_uniform(rng, w, nw, -0.5f, 0.5f);
    test_fill_uniform(rng, b, (size_t)out, -1.0f, 1.0f);
    test_fill_uniform(rng, dy, ny, -1.0f, 1.0f);
    for (size_t k = 0; k < ny; k++) {
        dy16[k] = to_bf16(dy[k]);
        dy[k] = from_bf16(dy16[k]);
    }
    float *want[4], *got[4], *again[4];
    for (int run = 0; run < 3; run++) {
        nctmc_backend *be = run == 0 ? CPU : gpu;
        float **o = run == 0 ? want : run == 1 ? got : again;
        float *dx_ = dput(be, x, nx * 4), *dw_ = dput(be, w, nw * 4);
        float *db_ = bias ? dput(be, b, (size_t)out * 4) : NULL;
        void *y = dnew(be, ny * 4);
        float *gx = dnew(be, nx * 4), *gw = dnew(be, nw * 4), *gb = dnew(be, (size_t)out * 4);
        void *ddy = run == 0 ? dput(be, dy, ny * 4) : dput(be, dy16, ny * 2);
        if (run == 0) {
            be->ops->linear_forward(be, rows, in, out, dx_, dw_, db_, y);
            be->ops->linear_backward(be, rows, in, out, dx_, dw_, ddy, gx, false, gw,
                                     bias ? gb : NULL, false);
        } else {
            CHECK(be->ops->linear_forward_bf16(be, rows, in, out, dx_, dw_, db_, y),
                  "linear_forward_bf16 declined with NCTMC_CUDA_BF16_LOGITS=1");
            be->ops->linear_backward_bf16(be, rows, in, out, dx_, dw_, ddy, gx, false, gw,
                                          bias ? gb : NULL, false);
        }
        sync_ok(be, "linear bf16");
        o[0] = run == 0 ? dget(be, y, ny) : dget_bf16(be, y, ny);
        o[1] = dget(be, gx, nx);
        o[2] = dget(be, gw, nw);
        o[3] = dget(be, gb, (size_t)out);
        void *bufs[] = {dx_, dw_, db_, y, gx, gw, gb, ddy};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
            if (bufs[k])
                be->ops->free(be, bufs[k]);
    }
    static const char *const names[4] = {"y (bf16)", "dx", "dw", "dbias"};
    size_t sizes[4] = {ny, nx, nw, (size_t)out};
    for (int k = 0; k < 4; k++) {
        char what[160];
        snprintf(what, sizeof what, "linear %lldx%d->%d%s %s", (long long)rows, in, out,
                 bias ? " bias" : "", names[k]);
        /* dbias: double sums of the same bfloat16 values on both sides */
        report(what, scaled_err(got[k], want[k], sizes[k]),
               k == 3 ? TOL_REDUCTION : TOL_LINEAR_BF16);
        CHECK(memcmp(got[k], again[k], sizes[k] * 4) == 0, "%s: two CUDA runs differ", what);
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    free(x);
    free(w);
    free(b);
    free(dy);
    free(dy16);
}

/* ---- the whole model ----------------------------------------------------- */

typedef struct model_run {
    nctmc_context *ctx;
    nctmc_model *model;
    dit_workspace *ws;
    float *grads;
    float *loss, *grads_host;
    double mean;
    bool bf16_logits;
} model_run;

/* dit_loss with gradients on a new context of `backend`; host weights
 * (when given) replace the model's. */
static bool model_start(model_run *r, const char *backend, const nctmc_model_config *cfg,
                        const float *weights, const dit_batch *b)
{
    memset(r, 0, sizeof *r);
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = backend;
    char err[256];
    if (nctmc_context_create(&p, &r->ctx) != NCTMC_OK ||
        nctmc_model_create(r->ctx, cfg, &r->model) != NCTMC_OK) {
        CHECK(false, "%s: context or model: %s", backend,
              r->ctx ? nctmc_context_last_error(r->ctx) : "no context");
        return false;
    }
    nctmc_backend *be = r->ctx->backend;
    size_t slab = r->model->slab_floats;
    if (weights)
        be->ops->upload(be, r->model->weights, weights, slab * sizeof(float));
    r->grads = be->ops->alloc(be, slab * sizeof(float));
    if (!r->grads || dit_workspace_create(r->model, be, b->batch, b->length, DIT_WS_TRAINING,
                                          &r->ws, err, sizeof err) != NCTMC_OK) {
        CHECK(false, "%s: workspace: %s", backend, err);
        return false;
    }
    nctmc_status st = dit_loss(r->model, r->ws, b, r->grads, false, &r->mean, err, sizeof err);
    CHECK(st == NCTMC_OK, "dit_loss on %s: %s", backend, err);
    size_t N = (size_t)b->batch * b->length;
    r->loss = dget(be, dit_ws_loss(r->ws), N);
    r->grads_host = dget(be, r->grads, slab);
    r->bf16_logits = r->ws->logits_bf16_last;
    /* the loss alone (the evaluation's) keeps float logits */
    double mean2 = 0.0;
    st = dit_loss(r->model, r->ws, b, NULL, false, &mean2, err, sizeof err);
    CHECK(st == NCTMC_OK && !r->ws->logits_bf16_last,
          "%s: a loss without gradients ran on bf16 logits", backend);
    return true;
}

static void model_run_free(model_run *r)
{
    nctmc_backend *be = r->ctx ? r->ctx->backend : NULL;
    if (be && r->grads)
        be->ops->free(be, r->grads);
    dit_workspace_free(r->ws);
    nctmc_model_free(r->model);
    nctmc_context_free(r->ctx);
    free(r->loss);
    free(r->grads_host);
}

static void compare_model(const model_run *cpu, const model_run *gpu, const model_run *again,
                          int32_t N, double tol, const char *label)
{
    char what[160];
    snprintf(what, sizeof what, "model %s loss", label);
    report(what, scaled_err(gpu->loss, cpu->loss, (size_t)N), tol);
    double worst = 0.0;
    const char *worst_name = "";
    for (int32_t k = 0; k < cpu->model->n_tensors; k++) {
        const model_tensor *t = &cpu->model->tensors[k];
        double te = scaled_err(gpu->grads_host + t->offset, cpu->grads_host + t->offset,
                               (size_t)t->n_elements);
        CHECK(te <= tol, "model %s: gradient of %s: scaled error %.3g", label, t->name, te);
        if (te > worst) {
            worst = te;
            worst_name = t->name;
        }
    }
    printf("  model %-44s gradients %9.2e  (tol %.0e, worst: %s)\n", label, worst, tol,
           worst_name);
    CHECK(gpu->mean == again->mean &&
              memcmp(gpu->grads_host, again->grads_host,
                     gpu->model->slab_floats * sizeof(float)) == 0,
          "model %s: two CUDA runs differ", label);
}

static void test_model(test_rng *rng, const char *backend, nctmc_process process,
                       nctmc_exit_link link, const char *label)
{
    nctmc_model_config cfg;
    cuda_test_model_config(&cfg, process, link);
    int32_t B = 3, N = B * cfg.seq_len;
    int32_t *x_t = xcalloc((size_t)N, 4), *x_0 = xcalloc((size_t)N, 4);
    float times[3] = {0.15f, 0.5f, 0.85f};
    cuda_test_tokens(rng, process, cfg.vocab_size, N, x_t, x_0);
    dit_batch b = {B, cfg.seq_len, x_t, times, NULL, x_0, NULL};
    bool want_bf16 = link != NCTMC_EXIT_LINK_DENOISER;
    char name[160];
    snprintf(name, sizeof name, "%s %s", backend, label);
    model_run cpu, gpu, again;
    memset(&gpu, 0, sizeof gpu);
    memset(&again, 0, sizeof again);
    if (model_start(&cpu, "cpu", &cfg, NULL, &b)) {
        float *w = dget(cpu.ctx->backend, cpu.model->weights, cpu.model->slab_floats);
        if (model_start(&gpu, backend, &cfg, w, &b) &&
            model_start(&again, backend, &cfg, w, &b)) {
            CHECK(gpu.bf16_logits == want_bf16 && !cpu.bf16_logits,
                  "model %s: dit_loss %s bf16 logits", name,
                  gpu.bf16_logits ? "took" : "did not take");
            bool bf16 = strcmp(backend, "cuda-bf16") == 0;
            compare_model(&cpu, &gpu, &again, N, bf16 ? TOL_MODEL_BF16 : TOL_MODEL, name);
        }
        free(w);
        model_run_free(&gpu);
        model_run_free(&again);
    }
    model_run_free(&cpu);
    free(x_t);
    free(x_0);
}

static void test_models(test_rng *rng)
{
    static const char *const backends[2] = {"cuda", "cuda-bf16"};
    for (int k = 0; k < 2; k++) {
        const char *be = backends[k];
        test_model(rng, be, NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_SIGMA, "uniform/sigma");
        test_model(rng, be, NCTMC_PROCESS_MASKED, NCTMC_EXIT_LINK_NOISE_POSTERIOR,
                   "masked/noise-posterior");
        test_model(rng, be, NCTMC_PROCESS_MIXTURE, NCTMC_EXIT_LINK_SIGMA, "mixture/sigma");
        test_model(rng, be, NCTMC_PROCESS_MIXTURE, NCTMC_EXIT_LINK_NOISE_POSTERIOR,
                   "mixture/noise-posterior");
        test_model(rng, be, NCTMC_PROCESS_UNIFORM, NCTMC_EXIT_LINK_DENOISER,
                   "uniform/denoiser (float logits)");
    }
}

/* A CUDA backend created now, its lcond kernel latched (a call with no
 * rows reads $NCTMC_CUDA_LCOND); NULL with the reason in err. */
static nctmc_backend *gpu_create(const nctmc_backend_module *cuda, char *err, size_t size,
                                 bool *no_device)
{
    nctmc_backend *be = cuda->create(0, false, err, size, no_device);
    if (be) {
        nctmc_lcond_args none;
        memset(&none, 0, sizeof none);
        be->ops->lcond(be, &none);
        sync_ok(be, "latching the lcond kernel");
    }
    return be;
}

int main(void)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    const nctmc_backend_module *cuda = NULL;
    if (!cuda_test_load("cuda_bf16_logits", &cuda, err, sizeof err))
        return 1;
    unsetenv("NCTMC_CUDA_LCOND");
    unsetenv("NCTMC_CUDA_LCOND_LINK");
    unsetenv("NCTMC_CUDA_BF16_LOGITS");
    nctmc_backend *off = cuda->create(0, false, err, sizeof err, &no_device);
    int rc = cuda_test_started("cuda_bf16_logits", off, no_device, err);
    if (rc)
        return rc;
    char desc[512];
    cuda->describe(off, desc, sizeof desc);
    printf("device: %s\n", desc);
    const char *sm = strstr(desc, "(sm_");
    int major = sm ? atoi(sm + 4) / 10 : 0;
    CHECK(off->ops->linear_forward_bf16 &&
              !off->ops->linear_forward_bf16(off, 0, 8, 8, NULL, NULL, NULL, NULL),
          "linear_forward_bf16 accepts without NCTMC_CUDA_BF16_LOGITS");
    off->ops->destroy(off);

    setenv("NCTMC_CUDA_BF16_LOGITS", "1", 1);
    nctmc_backend *def = gpu_create(cuda, err, sizeof err, &no_device);
    setenv("NCTMC_CUDA_LCOND", "split", 1);
    nctmc_backend *split = gpu_create(cuda, err, sizeof err, &no_device);
    unsetenv("NCTMC_CUDA_LCOND");
    CPU = cpu_backend_create(0, err, sizeof err);
    if (!def || !split || !CPU) {
        fprintf(stderr, "cuda_bf16_logits: backends: %s\n", err);
        return 1;
    }
    CHECK(!CPU->ops->linear_forward_bf16, "the CPU backend offers bf16 logits");
    CHECK(def->ops->linear_forward_bf16(def, 0, 8, 8, NULL, NULL, NULL, NULL),
          "linear_forward_bf16 declines with NCTMC_CUDA_BF16_LOGITS=1");
    test_rng rng = test_rng_seed(3839);

    printf("lcond on bf16 logits, the default kernel\n");
    test_lcond_cases(def, "default", &rng);
    if (major >= 9) {
        printf("lcond on bf16 logits, the split kernel\n");
        test_lcond_cases(split, "split", &rng);
    } else {
        printf("the split kernel: skipped (compute capability %d, 9.0 needed)\n", major);
    }

    printf("the output projection in bf16\n");
    test_linear(def, &rng, 72, 64, 64, true);
    test_linear(def, &rng, 37, 48, 50, true);
    test_linear(def, &rng, 40, 64, 50304, false);

    printf("the whole model\n");
    test_models(&rng);

    CPU->ops->destroy(CPU);
    def->ops->destroy(def);
    split->ops->destroy(split);
    return test_finish("cuda_bf16_logits");
}
