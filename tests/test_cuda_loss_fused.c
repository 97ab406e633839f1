/*
 * test_cuda_loss_fused.c — the CUDA backend's new loss kernels against the
 * CPU backend: the split L_cond kernel ($NCTMC_CUDA_LCOND=split: each row
 * cached and reduced by a cluster of two blocks, backends/cuda/cuda_loss.cu)
 * and lcond_denoiser ($NCTMC_CUDA_LCOND_LINK=fused: the denoiser link, the
 * loss and the link's backward in one pass, backends/cuda/cuda_denoiser.cu).
 *
 * The program sets both variables before it creates any CUDA backend (a
 * backend reads them at its first call), then, for each
 * forward process (uniform, masked, mixture), each exit link (sigma,
 * noise-posterior, and the denoiser link: denoiser forward, the loss, the
 * denoiser backward in a chain) and row shapes that reach every branch of
 * the kernel (16-byte rows and odd strides, a second block with no columns
 * at S = 3, the paper's S = 50304, S = 60000 which the default kernel can
 * no longer cache), compares the per-position loss, the logits' gradients
 * (into a separate buffer and in place), the exit-rate head's gradient, the
 * loss alone, and the per-sequence weighted gradients with the CPU's, and
 * the CUDA results of two runs bit for bit. A bad value of the variable
 * must be reported as an error.
 * lcond_denoiser against the CPU's chain denoiser_forward, lcond (gradients
 * in place), denoiser_backward: the loss, the link's h and dL/dz, with and
 * without per-sequence weights, into another buffer and in place over z,
 * the loss alone; and the whole model with the denoiser link through a
 * "cuda" context (dit_loss must take the fused operation, leaving the link
 * out of the forward pass) against a "cpu" one: loss, h, every gradient.
 *
 * The split kernel needs compute capability 9.0; on an older device (where
 * the backend runs its default kernel) and without a usable GPU the program
 * prints "cuda_loss_fused: skipped: <reason>" and exits 77.
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

/* Float reductions summed in another order than the CPU's (rows of up to
 * 60000): the conformance test's tolerance for the default kernel. */
#define TOL_REDUCTION 1e-4
/* The denoiser chain: the reduction error above passed through the
 * denoiser backward's own float reductions. */
#define TOL_CHAIN 2e-4
/* The whole model: TF32 products against the CPU's float32 over two blocks
 * (the conformance test's tolerance for the model). */
#define TOL_MODEL 5e-2

static nctmc_backend *CPU, *GPU;

static float *dnew(nctmc_backend *be, size_t n)
{
    float *zero = xcalloc(n, sizeof(float));
    float *d = dput(be, zero, n * sizeof(float));
    free(zero);
    return d;
}

typedef struct loss_case {
    nctmc_fp fp;
    int32_t B, L, V;
    bool denoiser;          /* the logits are the head's z of the denoiser link */
    float *logits, *rate_h, *times, *upstream_w;
    int32_t *x_t, *x_0;
} loss_case;

static loss_case case_make(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V,
                           bool denoiser)
{
    loss_case c = {fp, B, L, V, denoiser, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t N = (size_t)B * L;
    c.logits = xcalloc(N * (size_t)V, sizeof(float));
    test_fill_uniform(rng, c.logits, N * (size_t)V, -3.0f, 3.0f);
    for (int32_t k = 0; k < V; k++) /* one row far from zero */
        c.logits[k] += 40.0f;
    c.rate_h = xcalloc(N, sizeof(float));
    test_fill_uniform(rng, c.rate_h, N, -2.0f, 2.0f);
    c.times = xcalloc((size_t)B, sizeof(float));
    test_fill_uniform(rng, c.times, (size_t)B, 0.05f, 0.95f);
    c.upstream_w = xcalloc((size_t)B, sizeof(float));
    for (int32_t b = 0; b < B; b++) /* per-sequence weights, a zero among them */
        c.upstream_w[b] = b % 3 == 1 ? 0.0f : 0.4f + 0.7f * (float)b;
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
    free(c->rate_h);
    free(c->times);
    free(c->upstream_w);
    free(c->x_t);
    free(c->x_0);
}

enum { OUT_LOSS, OUT_DLOGITS, OUT_DRATE, OUT_INPLACE, OUT_LOSS_ONLY, OUT_DLOGITS_W,
       OUT_DRATE_W, OUT_DZ, OUT_COUNT };
static const char *const out_names[OUT_COUNT] = {
    "loss", "d_logits", "d_rate_h", "d_logits in place", "loss without grads",
    "d_logits weighted", "d_rate_h weighted", "denoiser d_z (chain)"};

/* The loss's inputs on `be`: the case's logits and h, or for the denoiser
 * link the denoiser forward's outputs from them. */
typedef struct loss_inputs {
    float *z, *logits, *rate_h, *times;
    int32_t *x_t, *x_0;
} loss_inputs;

static loss_inputs inputs_make(nctmc_backend *be, const loss_case *c)
{
    size_t N = (size_t)c->B * c->L, NV = N * (size_t)c->V;
    loss_inputs in;
    in.z = dput(be, c->logits, NV * 4);
    in.times = dput(be, c->times, (size_t)c->B * 4);
    in.x_t = dput(be, c->x_t, N * 4);
    in.x_0 = dput(be, c->x_0, N * 4);
    if (c->denoiser) {
        in.logits = dnew(be, NV);
        in.rate_h = dnew(be, N);
        nctmc_denoiser_args d = {(int64_t)N, c->L, c->V, in.z, in.x_t, in.times, c->fp,
                                 in.logits, in.rate_h};
        be->ops->denoiser_forward(be, &d);
    } else {
        in.logits = in.z;
        in.rate_h = dput(be, c->rate_h, N * 4);
    }
    return in;
}

static void inputs_free(nctmc_backend *be, loss_inputs *in)
{
    if (in->logits != in->z)
        be->ops->free(be, in->logits);
    void *bufs[] = {in->z, in->rate_h, in->times, in->x_t, in->x_0};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
}

static void run_case(nctmc_backend *be, const loss_case *c, float *out[OUT_COUNT])
{
    size_t N = (size_t)c->B * c->L, NV = N * (size_t)c->V;
    bool masked = c->fp.process == NCTMC_FP_MASKED;
    loss_inputs in = inputs_make(be, c);
    float *loss = dnew(be, N), *loss2 = dnew(be, N), *wloss = dnew(be, N);
    float *dlog = dnew(be, NV), *wlog = dnew(be, NV), *drate = dnew(be, N), *wrate = dnew(be, N);
    float *seq_w = dput(be, c->upstream_w, (size_t)c->B * 4);
    nctmc_lcond_args a = {(int64_t)N, c->L, c->V, in.logits, masked ? NULL : in.rate_h,
                          in.x_t, in.x_0, in.times, c->fp, 1.0f / (float)N, loss, dlog,
                          masked ? NULL : drate, NULL, false};
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
    /* in place, as the training step runs it: the gradients over the logits */
    nctmc_lcond_args p = a;
    p.d_logits = in.logits;
    p.loss = NULL;
    be->ops->lcond(be, &p);
    sync_ok(be, "lcond");
    out[OUT_LOSS] = dget(be, loss, N);
    out[OUT_DLOGITS] = dget(be, dlog, NV);
    out[OUT_DRATE] = dget(be, drate, N);
    out[OUT_INPLACE] = dget(be, in.logits, NV);
    out[OUT_LOSS_ONLY] = dget(be, loss2, N);
    out[OUT_DLOGITS_W] = dget(be, wlog, NV);
    out[OUT_DRATE_W] = dget(be, wrate, N);
    if (c->denoiser) {
        /* the chain of the training step: dL/dl (in place) and dL/dh into
         * the denoiser backward, which overwrites them with dL/dz */
        nctmc_denoiser_args d = {(int64_t)N, c->L, c->V, in.z, in.x_t, in.times, c->fp,
                                 in.logits, drate};
        be->ops->denoiser_backward(be, &d);
        sync_ok(be, "denoiser_backward");
        out[OUT_DZ] = dget(be, in.logits, NV);
    } else {
        out[OUT_DZ] = xcalloc(NV, sizeof(float));
    }
    void *bufs[] = {loss, loss2, wloss, dlog, wlog, drate, wrate, seq_w};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    inputs_free(be, &in);
}

static nctmc_fp make_fp(int32_t process, int32_t schedule, int32_t S, int32_t link)
{
    nctmc_fp fp = {process, schedule, S, 0.4f, 1e-3f, link};
    return fp;
}

static void test_case(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V,
                      bool denoiser, const char *label)
{
    loss_case c = case_make(rng, fp, B, L, V, denoiser);
    float *want[OUT_COUNT], *got[OUT_COUNT], *again[OUT_COUNT];
    run_case(CPU, &c, want);
    run_case(GPU, &c, got);
    run_case(GPU, &c, again);
    size_t N = (size_t)B * L, NV = N * (size_t)V;
    size_t sizes[OUT_COUNT] = {N, NV, N, NV, N, NV, N, NV};
    for (int k = 0; k < OUT_COUNT; k++) {
        char what[160];
        snprintf(what, sizeof what, "%s S%d V%d %s", label, fp.vocab, V, out_names[k]);
        double tol = k == OUT_DZ ? TOL_CHAIN : TOL_REDUCTION;
        double e = scaled_err(got[k], want[k], sizes[k]);
        CHECK(e <= tol, "%s: scaled error %.3g above %.1g", what, e, tol);
        CHECK(memcmp(got[k], again[k], sizes[k] * sizeof(float)) == 0,
              "%s: two CUDA runs differ", what);
        printf("  %-64s %9.2e  (tol %.0e)\n", what, e, tol);
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    case_free(&c);
}

/* ---- lcond_denoiser ---------------------------------------------------- */

enum { FL_LOSS, FL_DZ, FL_LOSS_W, FL_DZ_W, FL_DZ_INPLACE, FL_LOSS_ONLY, FL_H, FL_COUNT };
static const char *const fl_names[FL_COUNT] = {"loss", "d_z", "loss weighted", "d_z weighted",
                                               "d_z in place", "loss without grads",
                                               "the link's h"};

/* The CPU's chain for one set of arguments: the loss, and dL/dz in dz (the
 * link's outputs, then their gradients, pass through it). */
static void cpu_chain(const loss_case *c, const loss_inputs *in, const float *seq_w,
                      float *loss, float *dz, float *h)
{
    size_t N = (size_t)c->B * c->L;
    float *l = dz, *dh = dnew(CPU, N);
    nctmc_denoiser_args d = {(int64_t)N, c->L, c->V, in->z, in->x_t, in->times, c->fp, l, h};
    CPU->ops->denoiser_forward(CPU, &d);
    nctmc_lcond_args a = {(int64_t)N, c->L, c->V, l, h, in->x_t, in->x_0, in->times, c->fp,
                          1.0f / (float)N, loss, l, dh, seq_w, false};
    CPU->ops->lcond(CPU, &a);
    d.rate_h = dh;
    CPU->ops->denoiser_backward(CPU, &d);
    sync_ok(CPU, "the denoiser chain");
    void *bufs[] = {dh};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        CPU->ops->free(CPU, bufs[k]);
}

/* One lcond_denoiser call on the GPU; it must not decline. */
static void gpu_fused(const loss_case *c, const loss_inputs *in, const float *seq_w,
                      float *loss, float *dz, float *h)
{
    size_t N = (size_t)c->B * c->L;
    nctmc_lcond_denoiser_args a = {(int64_t)N, c->L, c->V, in->z, in->x_t, in->x_0, in->times,
                                   c->fp, 1.0f / (float)N, loss, dz, seq_w, h};
    CHECK(GPU->ops->lcond_denoiser && GPU->ops->lcond_denoiser(GPU, &a),
          "lcond_denoiser declined with NCTMC_CUDA_LCOND_LINK=fused");
    sync_ok(GPU, "lcond_denoiser");
}

static void run_fused_link(nctmc_backend *be, const loss_case *c, float *out[FL_COUNT])
{
    size_t N = (size_t)c->B * c->L, NV = N * (size_t)c->V;
    loss_case plain = *c;
    plain.denoiser = false; /* the inputs: z itself */
    loss_inputs in = inputs_make(be, &plain);
    float *seq_w = dput(be, c->upstream_w, (size_t)c->B * 4);
    float *loss = dnew(be, N), *dz = dnew(be, NV), *h = dnew(be, N);
    if (be == CPU) {
        cpu_chain(c, &in, NULL, loss, dz, h);
        out[FL_LOSS] = dget(be, loss, N);
        out[FL_DZ] = dget(be, dz, NV);
        out[FL_H] = dget(be, h, N);
        cpu_chain(c, &in, seq_w, loss, dz, h);
        out[FL_LOSS_W] = dget(be, loss, N);
        out[FL_DZ_W] = dget(be, dz, NV);
        /* the same values, computed in place or alone on the GPU */
        out[FL_DZ_INPLACE] = dget(be, dz, NV);
        out[FL_LOSS_ONLY] = dget(be, loss, N);
        memcpy(out[FL_DZ_INPLACE], out[FL_DZ], NV * 4);
        memcpy(out[FL_LOSS_ONLY], out[FL_LOSS], N * 4);
    } else {
        gpu_fused(c, &in, NULL, loss, dz, h);
        out[FL_LOSS] = dget(be, loss, N);
        out[FL_DZ] = dget(be, dz, NV);
        out[FL_H] = dget(be, h, N);
        gpu_fused(c, &in, seq_w, loss, dz, NULL);
        out[FL_LOSS_W] = dget(be, loss, N);
        out[FL_DZ_W] = dget(be, dz, NV);
        float *loss2 = dnew(be, N);
        gpu_fused(c, &in, NULL, loss2, NULL, NULL);
        out[FL_LOSS_ONLY] = dget(be, loss2, N);
        be->ops->free(be, loss2);
        gpu_fused(c, &in, NULL, NULL, in.z, NULL);   /* last: it overwrites z */
        out[FL_DZ_INPLACE] = dget(be, in.z, NV);
    }
    void *bufs[] = {seq_w, loss, dz, h};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    inputs_free(be, &in);
}

static void test_fused_link(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V,
                            const char *label)
{
    loss_case c = case_make(rng, fp, B, L, V, false);
    float *want[FL_COUNT], *got[FL_COUNT], *again[FL_COUNT];
    run_fused_link(CPU, &c, want);
    run_fused_link(GPU, &c, got);
    run_fused_link(GPU, &c, again);
    size_t N = (size_t)B * L, NV = N * (size_t)V;
    for (int k = 0; k < FL_COUNT; k++) {
        size_t n = k == FL_LOSS || k == FL_LOSS_W || k == FL_LOSS_ONLY || k == FL_H ? N : NV;
        char what[160];
        snprintf(what, sizeof what, "%s S%d V%d fused link %s", label, fp.vocab, V, fl_names[k]);
        double e = scaled_err(got[k], want[k], n);
        CHECK(e <= TOL_CHAIN, "%s: scaled error %.3g above %.1g", what, e, TOL_CHAIN);
        CHECK(memcmp(got[k], again[k], n * sizeof(float)) == 0, "%s: two CUDA runs differ",
              what);
        printf("  %-64s %9.2e  (tol %.0e)\n", what, e, TOL_CHAIN);
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    case_free(&c);
}

/* ---- the whole model with the denoiser link ------------------------------ */

typedef struct model_run {
    nctmc_context *ctx;
    nctmc_model *model;
    dit_workspace *ws;
    float *grads;
    float *loss, *rate_h, *grads_host;
    double mean;
    bool fused;
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
    r->rate_h = dget(be, dit_ws_rate_h(r->ws), N);
    r->grads_host = dget(be, r->grads, slab);
    r->fused = r->ws->link_fused_last;
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
    free(r->rate_h);
    free(r->grads_host);
}

static void test_model_link(test_rng *rng, nctmc_process process, const char *label)
{
    nctmc_model_config cfg;
    cuda_test_model_config(&cfg, process, NCTMC_EXIT_LINK_DENOISER);
    int32_t B = 3, N = B * cfg.seq_len;
    int32_t *x_t = xcalloc((size_t)N, 4), *x_0 = xcalloc((size_t)N, 4);
    float times[3] = {0.15f, 0.5f, 0.85f};
    cuda_test_tokens(rng, process, cfg.vocab_size, N, x_t, x_0);
    dit_batch b = {B, cfg.seq_len, x_t, times, NULL, x_0, NULL};
    model_run cpu, gpu, again;
    memset(&gpu, 0, sizeof gpu);
    memset(&again, 0, sizeof again);
    if (model_start(&cpu, "cpu", &cfg, NULL, &b)) {
        float *w = dget(cpu.ctx->backend, cpu.model->weights, cpu.model->slab_floats);
        if (model_start(&gpu, "cuda", &cfg, w, &b) && model_start(&again, "cuda", &cfg, w, &b)) {
            CHECK(gpu.fused && !cpu.fused, "model %s: dit_loss did not take lcond_denoiser",
                  label);
            double e = scaled_err(gpu.loss, cpu.loss, (size_t)N);
            CHECK(e <= TOL_MODEL, "model %s: loss: scaled error %.3g", label, e);
            printf("  %-64s %9.2e  (tol %.0e)\n", "model loss", e, TOL_MODEL);
            e = scaled_err(gpu.rate_h, cpu.rate_h, (size_t)N);
            CHECK(e <= TOL_MODEL, "model %s: the link's h: scaled error %.3g", label, e);
            printf("  %-64s %9.2e  (tol %.0e)\n", "model h", e, TOL_MODEL);
            double worst = 0.0;
            const char *worst_name = "";
            for (int32_t k = 0; k < cpu.model->n_tensors; k++) {
                const model_tensor *t = &cpu.model->tensors[k];
                double te = scaled_err(gpu.grads_host + t->offset, cpu.grads_host + t->offset,
                                       (size_t)t->n_elements);
                CHECK(te <= TOL_MODEL, "model %s: gradient of %s: scaled error %.3g", label,
                      t->name, te);
                if (te > worst) {
                    worst = te;
                    worst_name = t->name;
                }
            }
            printf("  model %-40s gradients %9.2e  (tol %.0e, worst: %s)\n", label, worst,
                   TOL_MODEL, worst_name);
            CHECK(gpu.mean == again.mean &&
                      memcmp(gpu.grads_host, again.grads_host,
                             gpu.model->slab_floats * sizeof(float)) == 0,
                  "model %s: two CUDA runs differ", label);
        }
        free(w);
        model_run_free(&gpu);
        model_run_free(&again);
    }
    model_run_free(&cpu);
    free(x_t);
    free(x_0);
}

/* A value of NCTMC_CUDA_LCOND other than "split" or "default" is an error
 * that names the variable. */
static void test_bad_switch(const nctmc_backend_module *cuda)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    setenv("NCTMC_CUDA_LCOND", "splitt", 1);
    nctmc_backend *be = cuda->create(0, false, err, sizeof err, &no_device);
    CHECK(be != NULL, "cannot create a second CUDA backend: %s", err);
    if (!be)
        return;
    int32_t x[2] = {0, 1};
    float f[2] = {0.5f, 0.5f}, logits[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    float *d_logits = dput(be, logits, sizeof logits), *d_f = dput(be, f, sizeof f);
    float *d_loss = dnew(be, 2);
    int32_t *d_x = dput(be, x, sizeof x);
    nctmc_lcond_args a = {2, 2, 2, d_logits, d_f, d_x, d_x, d_f,
                          make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 2, NCTMC_FP_LINK_SIGMA),
                          1.0f, d_loss, NULL, NULL, NULL, false};
    be->ops->lcond(be, &a);
    nctmc_status st = be->ops->synchronize(be);
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT && strstr(be->error, "NCTMC_CUDA_LCOND=splitt"),
          "a bad NCTMC_CUDA_LCOND: status %d, \"%s\"", (int)st, be->error);
    printf("  bad switch: %s\n", be->error);
    void *bufs[] = {d_logits, d_f, d_loss, d_x};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    be->ops->destroy(be);
    setenv("NCTMC_CUDA_LCOND", "split", 1);
}

/* The compute capability's major from cuda_backend_describe's "(sm_XY". */
static int sm_major(const nctmc_backend_module *cuda, nctmc_backend *be)
{
    char desc[512];
    cuda->describe(be, desc, sizeof desc);
    printf("device: %s\n", desc);
    const char *p = strstr(desc, "(sm_");
    return p ? atoi(p + 4) / 10 : 0;
}

int main(void)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    const nctmc_backend_module *cuda = NULL;
    if (!cuda_test_load("cuda_loss_fused", &cuda, err, sizeof err))
        return 1;
    setenv("NCTMC_CUDA_LCOND", "split", 1);
    setenv("NCTMC_CUDA_LCOND_LINK", "fused", 1);
    GPU = cuda->create(0, false, err, sizeof err, &no_device);
    int rc = cuda_test_started("cuda_loss_fused", GPU, no_device, err);
    if (rc)
        return rc;
    if (sm_major(cuda, GPU) < 9) {
        printf("cuda_loss_fused: skipped: the split kernel needs compute capability 9.0\n");
        GPU->ops->destroy(GPU);
        return 77;
    }
    CPU = cpu_backend_create(0, err, sizeof err);
    if (!CPU) {
        fprintf(stderr, "cuda_loss_fused: CPU backend: %s\n", err);
        return 1;
    }
    test_rng rng = test_rng_seed(3838);
    const int32_t sg = NCTMC_FP_LINK_SIGMA, np = NCTMC_FP_LINK_NOISE_POSTERIOR;
    const int32_t U = NCTMC_FP_UNIFORM, M = NCTMC_FP_MASKED, X = NCTMC_FP_MIXTURE;
    const int32_t LIN = NCTMC_FP_LINEAR, COS = NCTMC_FP_COSINE, LOG = NCTMC_FP_LOGLINEAR;

    printf("the switch\n");
    test_bad_switch(cuda);

    printf("split L_cond: small rows (16-byte rows, odd strides, an empty second block)\n");
    test_case(&rng, make_fp(U, LIN, 37, sg), 3, 7, 40, false, "uniform/linear");
    test_case(&rng, make_fp(U, LIN, 37, sg), 3, 7, 37, false, "uniform/linear odd stride");
    test_case(&rng, make_fp(M, COS, 37, sg), 3, 7, 40, false, "masked/cosine");
    test_case(&rng, make_fp(X, LOG, 37, sg), 3, 7, 37, false, "mixture/loglinear");
    test_case(&rng, make_fp(U, LIN, 37, np), 3, 7, 40, false, "uniform/noise-posterior");
    test_case(&rng, make_fp(X, COS, 37, np), 3, 7, 40, false, "mixture/noise-posterior");
    test_case(&rng, make_fp(U, COS, 3, sg), 2, 5, 4, false, "uniform/cosine tiny");
    test_case(&rng, make_fp(U, LIN, 37, sg), 3, 7, 40, true, "uniform/denoiser link");
    test_case(&rng, make_fp(X, COS, 37, sg), 3, 7, 37, true, "mixture/denoiser link");

    printf("split L_cond: rows of paper size and beyond the default kernel's cache\n");
    test_case(&rng, make_fp(U, COS, 50304, sg), 2, 3, 50304, false, "uniform/cosine");
    test_case(&rng, make_fp(M, LIN, 50304, sg), 2, 3, 50304, false, "masked/linear");
    test_case(&rng, make_fp(X, LOG, 50304, np), 2, 3, 50304, false, "mixture/noise-posterior");
    test_case(&rng, make_fp(U, LIN, 50304, np), 2, 3, 50307, false, "uniform/np odd stride");
    test_case(&rng, make_fp(M, COS, 60000, sg), 2, 3, 60000, false, "masked/cosine");
    test_case(&rng, make_fp(U, COS, 50304, sg), 2, 3, 50304, true, "uniform/denoiser link");
    test_case(&rng, make_fp(X, LIN, 50304, sg), 2, 3, 50307, true, "mixture/denoiser odd");

    printf("lcond_denoiser: the link, the loss and its backward in one pass\n");
    nctmc_lcond_denoiser_args probe = {.n_rows = 0};
    CHECK(!CPU->ops->lcond_denoiser && GPU->ops->lcond_denoiser &&
              GPU->ops->lcond_denoiser(GPU, &probe),
          "the CUDA backend does not take lcond_denoiser with NCTMC_CUDA_LCOND_LINK=fused");
    test_fused_link(&rng, make_fp(U, LIN, 37, sg), 3, 7, 40, "uniform/linear");
    test_fused_link(&rng, make_fp(X, COS, 37, sg), 3, 7, 37, "mixture/cosine odd stride");
    test_fused_link(&rng, make_fp(U, COS, 50304, sg), 2, 3, 50304, "uniform/cosine");
    test_fused_link(&rng, make_fp(X, LOG, 50304, sg), 2, 3, 50307, "mixture/loglinear odd");
    test_fused_link(&rng, make_fp(U, LIN, 60000, sg), 2, 3, 60000, "uniform beyond the cache");
    test_model_link(&rng, NCTMC_PROCESS_UNIFORM, "uniform/denoiser link");
    test_model_link(&rng, NCTMC_PROCESS_MIXTURE, "mixture/denoiser link");

    CPU->ops->destroy(CPU);
    GPU->ops->destroy(GPU);
    return test_finish("cuda_loss_fused");
}
