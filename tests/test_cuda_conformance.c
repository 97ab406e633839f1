/*
 * test_cuda_conformance.c — the CUDA backend against the CPU backend.
 *
 * 1. Every vtable operation on random inputs (never zeros; odd sizes, a
 *    partial last sequence, accumulate flags and the aliasing backend.h
 *    allows), the CUDA result against the CPU result, then the same CUDA
 *    operation run again: the two runs must agree bit for bit.
 * 2. The whole model through two contexts ("cpu" and "cuda"): dit_forward's
 *    logits and exit-rate head, dit_loss's per-position losses, mean loss
 *    and every gradient tensor, for each forward process, in TF32 and bf16
 *    modes and with both attention implementations; and bitwise
 *    repeatability of the CUDA loss and gradients.
 *    Activation recomputation gives the same gradients bit for bit.
 * 3. The samplers: the fused sampling operation row by row against the CPU
 *    (same Philox streams, same per-row math: the same tokens), and the
 *    public sampler on the CUDA context giving the same samples twice.
 *
 * Errors are reported as the scaled error max|cuda - cpu| / max|cpu| of an
 * array; the tolerances below say why they are what they are. Without a
 * usable GPU the program prints "cuda_conformance: skipped: <reason>" and
 * exits 77 (meson's "skipped"), never "passed"; a module that cannot be
 * loaded is a failure.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_module.h"
#include "core/context.h"
#include "cuda/cuda_backend.h"
#include "dit/dit.h"
#include "math/sample_math.h"
#include "cuda_test_util.h"

/* Same float formulas; libm and FMA contraction differ in the last ulps. */
#define TOL_POINTWISE 1e-5
/* Float reductions summed in another order (rows of up to 50304). */
#define TOL_REDUCTION 1e-4
/* TF32 products: inputs rounded to 10 mantissa bits (2^-11 relative). */
#define TOL_TF32 1e-2
/* bfloat16 products: inputs rounded to 7 mantissa bits (2^-8 relative). */
#define TOL_BF16 4e-2
/* Attention in float16 (cuDNN) or TF32 (custom kernels). */
#define TOL_ATTENTION 1e-2
#define TOL_ATTENTION_BF16 5e-2
/* The whole model: the product errors above compounded over two blocks. */
#define TOL_MODEL 5e-2
#define TOL_MODEL_BF16 2e-1

static nctmc_backend *CPU, *GPU;
/* The CUDA backend module (libnctmc-cuda.so, found as the core finds it:
 * meson's test sets $NCTMC_CUDA_MODULE; device_check.sh carries it next to
 * this program). */
static const nctmc_backend_module *CUDA;

/* ------------------------------------------------------------------------
 * helpers
 * ---------------------------------------------------------------------- */

static int32_t *hints(test_rng *rng, size_t n, int32_t below)
{
    int32_t *p = xcalloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = test_randint(rng, below);
    return p;
}

static void dfree(nctmc_backend *be, void *d)
{
    be->ops->free(be, d);
}

static void compare(const char *what, const float *gpu, const float *cpu, size_t n, double tol)
{
    check_scaled(what, scaled_err(gpu, cpu, n), tol, 52);
}

static void same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    CHECK(memcmp(a, b, bytes) == 0, "%s: two CUDA runs differ", what);
}

/* ------------------------------------------------------------------------
 * dense: linear
 * ---------------------------------------------------------------------- */

typedef struct linear_case {
    int64_t rows;
    int32_t in, out;
    float *x, *w, *b, *dy, *dx0, *dw0, *db0;
} linear_case;

typedef struct linear_out {
    float *y, *y_nobias, *dx_acc, *dx, *dw, *db;
} linear_out;

static linear_out run_linear(nctmc_backend *be, const linear_case *c)
{
    size_t nx = (size_t)c->rows * c->in, nw = (size_t)c->out * c->in,
           ny = (size_t)c->rows * c->out;
    float *x = dputf(be, c->x, nx), *w = dputf(be, c->w, nw), *b = dputf(be, c->b, c->out);
    float *dy = dputf(be, c->dy, ny), *y = dputf(be, c->dy, ny), *y2 = dputf(be, c->dy, ny);
    float *dx_acc = dputf(be, c->dx0, nx), *dx = dputf(be, c->dx0, nx);
    float *dw = dputf(be, c->dw0, nw), *db = dputf(be, c->db0, c->out);
    be->ops->linear_forward(be, c->rows, c->in, c->out, x, w, b, y);
    be->ops->linear_forward(be, c->rows, c->in, c->out, x, w, NULL, y2);
    /* dx accumulated; dw and db accumulated onto their initial values */
    be->ops->linear_backward(be, c->rows, c->in, c->out, x, w, dy, dx_acc, true, dw, db, true);
    /* dx alone, overwritten */
    be->ops->linear_backward(be, c->rows, c->in, c->out, x, w, dy, dx, false, NULL, NULL, false);
    sync_ok(be, "linear");
    linear_out o = {dget(be, y, ny), dget(be, y2, ny), dget(be, dx_acc, nx), dget(be, dx, nx),
                    dget(be, dw, nw), dget(be, db, c->out)};
    float *bufs[] = {x, w, b, dy, y, y2, dx_acc, dx, dw, db};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(be, bufs[i]);
    return o;
}

static void linear_out_free(linear_out *o)
{
    free(o->y);
    free(o->y_nobias);
    free(o->dx_acc);
    free(o->dx);
    free(o->dw);
    free(o->db);
}

static void test_linear(test_rng *rng, int64_t rows, int32_t in, int32_t out, bool bf16)
{
    linear_case c = {rows, in, out, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    c.x = hrand(rng, (size_t)rows * in, -1.0f, 1.0f);
    c.w = hrand(rng, (size_t)out * in, -0.5f, 0.5f);
    c.b = hrand(rng, (size_t)out, -0.5f, 0.5f);
    c.dy = hrand(rng, (size_t)rows * out, -1.0f, 1.0f);
    c.dx0 = hrand(rng, (size_t)rows * in, -1.0f, 1.0f);
    c.dw0 = hrand(rng, (size_t)out * in, -1.0f, 1.0f);
    c.db0 = hrand(rng, (size_t)out, -1.0f, 1.0f);
    CUDA->set_bf16(GPU, bf16);
    linear_out want = run_linear(CPU, &c), got = run_linear(GPU, &c), again = run_linear(GPU, &c);
    CUDA->set_bf16(GPU, false);
    double tol = bf16 ? TOL_BF16 : TOL_TF32;
    char what[128];
    size_t nx = (size_t)rows * in, nw = (size_t)out * in, ny = (size_t)rows * out;
#define LIN_CMP(field, n, t)                                                                \
    do {                                                                                    \
        snprintf(what, sizeof what, "linear %s %lldx%dx%d %s", #field, (long long)rows, in, \
                 out, bf16 ? "bf16" : "tf32");                                              \
        compare(what, got.field, want.field, n, t);                                         \
        same_bits(what, got.field, again.field, (n) * sizeof(float));                       \
    } while (0)
    LIN_CMP(y, ny, tol);
    LIN_CMP(y_nobias, ny, tol);
    LIN_CMP(dx_acc, nx, tol);
    LIN_CMP(dx, nx, tol);
    LIN_CMP(dw, nw, tol);
    LIN_CMP(db, (size_t)out, TOL_POINTWISE); /* double sums on both sides */
#undef LIN_CMP
    linear_out_free(&want);
    linear_out_free(&got);
    linear_out_free(&again);
    free(c.x);
    free(c.w);
    free(c.b);
    free(c.dy);
    free(c.dx0);
    free(c.dw0);
    free(c.db0);
}

/* ------------------------------------------------------------------------
 * embeddings and timestep features
 * ---------------------------------------------------------------------- */

typedef struct embed_out {
    float *out, *out_acc, *dtable, *dtable_acc;
} embed_out;

static embed_out run_embedding(nctmc_backend *be, int64_t rows, int32_t dim, int32_t n_entries,
                               const int32_t *ids, const float *table, const float *dout,
                               const float *garbage)
{
    size_t nt = (size_t)n_entries * dim, no = (size_t)rows * dim;
    int32_t *d_ids = dput(be, ids, (size_t)rows * sizeof(int32_t));
    float *d_table = dputf(be, table, nt), *d_dout = dputf(be, dout, no);
    float *out = dputf(be, garbage, no), *out_acc = dputf(be, garbage, no);
    float *dt = dputf(be, garbage, nt), *dt_acc = dputf(be, garbage, nt);
    be->ops->embedding_forward(be, rows, dim, d_ids, d_table, out, false);
    be->ops->embedding_forward(be, rows, dim, d_ids, d_table, out_acc, true);
    be->ops->embedding_backward(be, rows, dim, n_entries, d_ids, d_dout, dt, false);
    be->ops->embedding_backward(be, rows, dim, n_entries, d_ids, d_dout, dt_acc, true);
    sync_ok(be, "embedding");
    embed_out o = {dget(be, out, no), dget(be, out_acc, no), dget(be, dt, nt), dget(be, dt_acc, nt)};
    dfree(be, d_ids);
    dfree(be, d_table);
    dfree(be, d_dout);
    dfree(be, out);
    dfree(be, out_acc);
    dfree(be, dt);
    dfree(be, dt_acc);
    return o;
}

static void test_embedding(test_rng *rng, int64_t rows, int32_t dim, int32_t n_entries,
                           int32_t id_range)
{
    size_t nt = (size_t)n_entries * dim, no = (size_t)rows * dim;
    size_t ng = nt > no ? nt : no;
    int32_t *ids = hints(rng, (size_t)rows, id_range);
    float *table = hrand(rng, nt, -1.0f, 1.0f), *dout = hrand(rng, no, -1.0f, 1.0f);
    float *garbage = hrand(rng, ng, -5.0f, 5.0f);
    embed_out want = run_embedding(CPU, rows, dim, n_entries, ids, table, dout, garbage);
    embed_out got = run_embedding(GPU, rows, dim, n_entries, ids, table, dout, garbage);
    embed_out again = run_embedding(GPU, rows, dim, n_entries, ids, table, dout, garbage);
    char what[128];
    snprintf(what, sizeof what, "embedding forward %lldx%d", (long long)rows, dim);
    compare(what, got.out, want.out, no, 0.0);
    compare("embedding forward, accumulate", got.out_acc, want.out_acc, no, 0.0);
    /* the same sums in the same row order as the CPU: the same bits */
    snprintf(what, sizeof what, "embedding backward %d entries, %d named", n_entries, id_range);
    compare(what, got.dtable, want.dtable, nt, 0.0);
    compare("embedding backward, accumulate", got.dtable_acc, want.dtable_acc, nt, 0.0);
    same_bits("embedding backward", got.dtable, again.dtable, nt * sizeof(float));
    same_bits("embedding backward acc", got.dtable_acc, again.dtable_acc, nt * sizeof(float));
    embed_out *all[] = {&want, &got, &again};
    for (int i = 0; i < 3; i++) {
        free(all[i]->out);
        free(all[i]->out_acc);
        free(all[i]->dtable);
        free(all[i]->dtable_acc);
    }
    free(ids);
    free(table);
    free(dout);
    free(garbage);
}

static float *run_timestep(nctmc_backend *be, int32_t batch, int32_t dim, const float *times)
{
    float *t = dputf(be, times, (size_t)batch);
    float *out = be->ops->alloc(be, (size_t)batch * dim * sizeof(float));
    be->ops->timestep_embedding(be, batch, dim, t, out);
    sync_ok(be, "timestep_embedding");
    float *h = dget(be, out, (size_t)batch * dim);
    dfree(be, t);
    dfree(be, out);
    return h;
}

static void test_timestep(test_rng *rng, int32_t batch, int32_t dim)
{
    float *times = hrand(rng, (size_t)batch, 0.001f, 0.999f);
    float *want = run_timestep(CPU, batch, dim, times), *got = run_timestep(GPU, batch, dim, times);
    float *again = run_timestep(GPU, batch, dim, times);
    char what[96];
    snprintf(what, sizeof what, "timestep_embedding %dx%d", batch, dim);
    compare(what, got, want, (size_t)batch * dim, TOL_POINTWISE);
    same_bits(what, got, again, (size_t)batch * dim * sizeof(float));
    free(times);
    free(want);
    free(got);
    free(again);
}

/* ------------------------------------------------------------------------
 * SiLU, GELU
 * ---------------------------------------------------------------------- */

enum { ACT_SILU_F, ACT_SILU_F_INPLACE, ACT_SILU_B, ACT_SILU_B_ACC, ACT_GELU_F, ACT_GELU_B,
       ACT_GELU_B_INPLACE, ACT_COUNT };
static const char *const act_names[ACT_COUNT] = {
    "silu forward", "silu forward in place", "silu backward", "silu backward accumulate",
    "gelu forward", "gelu backward", "gelu backward in place (dx = dy)"};

static void run_activations(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                            const float *dx0, float *out[ACT_COUNT])
{
    size_t sz = (size_t)n;
    float *dxv = dputf(be, x, sz), *ddy = dputf(be, dy, sz);
    float *r[ACT_COUNT];
    for (int k = 0; k < ACT_COUNT; k++)
        r[k] = dputf(be, dx0, sz);
    be->ops->upload(be, r[ACT_SILU_F_INPLACE], x, sz * sizeof(float));
    be->ops->upload(be, r[ACT_GELU_B_INPLACE], dy, sz * sizeof(float));
    be->ops->silu_forward(be, n, dxv, r[ACT_SILU_F]);
    be->ops->silu_forward(be, n, r[ACT_SILU_F_INPLACE], r[ACT_SILU_F_INPLACE]);
    be->ops->silu_backward(be, n, dxv, ddy, r[ACT_SILU_B], false);
    be->ops->silu_backward(be, n, dxv, ddy, r[ACT_SILU_B_ACC], true);
    be->ops->gelu_forward(be, n, dxv, r[ACT_GELU_F]);
    be->ops->gelu_backward(be, n, dxv, ddy, r[ACT_GELU_B]);
    be->ops->gelu_backward(be, n, dxv, r[ACT_GELU_B_INPLACE], r[ACT_GELU_B_INPLACE]);
    sync_ok(be, "activations");
    for (int k = 0; k < ACT_COUNT; k++) {
        out[k] = dget(be, r[k], sz);
        dfree(be, r[k]);
    }
    dfree(be, dxv);
    dfree(be, ddy);
}

static void test_activations(test_rng *rng, int64_t n)
{
    float *x = hrand(rng, (size_t)n, -8.0f, 8.0f), *dy = hrand(rng, (size_t)n, -1.0f, 1.0f);
    float *dx0 = hrand(rng, (size_t)n, -1.0f, 1.0f);
    float *want[ACT_COUNT], *got[ACT_COUNT], *again[ACT_COUNT];
    run_activations(CPU, n, x, dy, dx0, want);
    run_activations(GPU, n, x, dy, dx0, got);
    run_activations(GPU, n, x, dy, dx0, again);
    for (int k = 0; k < ACT_COUNT; k++) {
        compare(act_names[k], got[k], want[k], (size_t)n, TOL_POINTWISE);
        same_bits(act_names[k], got[k], again[k], (size_t)n * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    free(x);
    free(dy);
    free(dx0);
}

/* ------------------------------------------------------------------------
 * adaLN, gated residual, rotary
 * ---------------------------------------------------------------------- */

typedef struct rows_case {
    int64_t rows;
    int32_t seq_len, dim, mod_stride, n_seq;
    float *x, *y, *w, *mod, *dy, *dx0, *dw0, *garbage;
} rows_case;

static rows_case rows_case_make(test_rng *rng, int64_t rows, int32_t seq_len, int32_t dim)
{
    rows_case c;
    c.rows = rows;
    c.seq_len = seq_len;
    c.dim = dim;
    c.mod_stride = 6 * dim + 5;
    c.n_seq = (int32_t)((rows + seq_len - 1) / seq_len);
    size_t n = (size_t)rows * dim, nm = (size_t)c.n_seq * c.mod_stride;
    c.x = hrand(rng, n, -1.5f, 2.0f);
    for (int64_t r = 0; r < rows; r++) /* a per-row offset and spread */
        for (int32_t k = 0; k < dim; k++)
            c.x[r * dim + k] = c.x[r * dim + k] * (0.5f + 0.1f * (float)(r % 7)) +
                               0.3f * (float)(r % 5);
    c.y = hrand(rng, n, -1.0f, 1.0f);
    c.w = hrand(rng, (size_t)dim, 0.5f, 1.5f);
    c.mod = hrand(rng, nm, -0.8f, 0.8f);
    c.dy = hrand(rng, n, -1.0f, 1.0f);
    c.dx0 = hrand(rng, n, -1.0f, 1.0f);
    c.dw0 = hrand(rng, (size_t)dim, -1.0f, 1.0f);
    c.garbage = hrand(rng, nm > n ? nm : n, -3.0f, 3.0f);
    return c;
}

static void rows_case_free(rows_case *c)
{
    free(c->x);
    free(c->y);
    free(c->w);
    free(c->mod);
    free(c->dy);
    free(c->dx0);
    free(c->dw0);
    free(c->garbage);
}

enum { AD_Y, AD_MEAN, AD_RSTD, AD_DX, AD_DW, AD_DMOD, AD_COUNT };

/* adaLN forward then backward; shift / scale / dshift / dscale are chunks
 * of modulation rows at odd offsets. */
static void run_adaln(nctmc_backend *be, const rows_case *c, float *out[AD_COUNT])
{
    size_t n = (size_t)c->rows * c->dim, nm = (size_t)c->n_seq * c->mod_stride;
    int32_t off_shift = c->dim + 2, off_scale = 3 * c->dim + 1;
    float *x = dputf(be, c->x, n), *w = dputf(be, c->w, (size_t)c->dim);
    float *mod = dputf(be, c->mod, nm), *dy = dputf(be, c->dy, n);
    float *y = dputf(be, c->garbage, n), *mean = dputf(be, c->garbage, (size_t)c->rows);
    float *rstd = dputf(be, c->garbage, (size_t)c->rows), *dx = dputf(be, c->dx0, n);
    float *dw = dputf(be, c->dw0, (size_t)c->dim), *dmod = dputf(be, c->garbage, nm);
    be->ops->adaln_forward(be, c->rows, c->seq_len, c->dim, x, w, mod + off_shift,
                           mod + off_scale, c->mod_stride, y, mean, rstd);
    be->ops->adaln_backward(be, c->rows, c->seq_len, c->dim, x, w, mod + off_scale,
                            c->mod_stride, mean, rstd, dy, dx, true, dw, true, dmod + off_shift,
                            dmod + off_scale);
    sync_ok(be, "adaln");
    float *d[AD_COUNT] = {y, mean, rstd, dx, dw, dmod};
    size_t sizes[AD_COUNT] = {n, (size_t)c->rows, (size_t)c->rows, n, (size_t)c->dim, nm};
    for (int k = 0; k < AD_COUNT; k++) {
        out[k] = dget(be, d[k], sizes[k]);
        dfree(be, d[k]);
    }
    dfree(be, x);
    dfree(be, w);
    dfree(be, mod);
    dfree(be, dy);
}

static void test_adaln(test_rng *rng, int64_t rows, int32_t seq_len, int32_t dim)
{
    rows_case c = rows_case_make(rng, rows, seq_len, dim);
    float *want[AD_COUNT], *got[AD_COUNT], *again[AD_COUNT];
    run_adaln(CPU, &c, want);
    run_adaln(GPU, &c, got);
    run_adaln(GPU, &c, again);
    static const char *const names[AD_COUNT] = {"y", "mean", "rstd", "dx (accumulated)",
                                                "dw (accumulated)", "dshift/dscale"};
    size_t n = (size_t)rows * dim;
    size_t sizes[AD_COUNT] = {n, (size_t)rows, (size_t)rows, n, (size_t)dim,
                              (size_t)c.n_seq * c.mod_stride};
    for (int k = 0; k < AD_COUNT; k++) {
        char what[96];
        snprintf(what, sizeof what, "adaln %s %lldx%d L%d", names[k], (long long)rows, dim,
                 seq_len);
        compare(what, got[k], want[k], sizes[k], k == AD_Y ? TOL_POINTWISE * 10 : TOL_REDUCTION);
        same_bits(what, got[k], again[k], sizes[k] * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    rows_case_free(&c);
}

enum { RES_OUT, RES_INPLACE, RES_DY, RES_DMOD, RES_COUNT };

static void run_residual(nctmc_backend *be, const rows_case *c, float *out[RES_COUNT])
{
    size_t n = (size_t)c->rows * c->dim, nm = (size_t)c->n_seq * c->mod_stride;
    int32_t off_gate = 2 * c->dim + 3;
    float *x = dputf(be, c->x, n), *y = dputf(be, c->y, n), *mod = dputf(be, c->mod, nm);
    float *o = dputf(be, c->garbage, n), *inplace = dputf(be, c->x, n);
    float *dx = dputf(be, c->dy, n), *dy = dputf(be, c->garbage, n);
    float *dmod = dputf(be, c->garbage, nm);
    be->ops->gated_residual_forward(be, c->rows, c->seq_len, c->dim, x, y, mod + off_gate,
                                    c->mod_stride, o);
    be->ops->gated_residual_forward(be, c->rows, c->seq_len, c->dim, inplace, y, mod + off_gate,
                                    c->mod_stride, inplace);
    be->ops->gated_residual_backward(be, c->rows, c->seq_len, c->dim, y, mod + off_gate,
                                     c->mod_stride, dx, dy, dmod + off_gate);
    sync_ok(be, "gated_residual");
    float *d[RES_COUNT] = {o, inplace, dy, dmod};
    size_t sizes[RES_COUNT] = {n, n, n, nm};
    for (int k = 0; k < RES_COUNT; k++) {
        out[k] = dget(be, d[k], sizes[k]);
        dfree(be, d[k]);
    }
    dfree(be, x);
    dfree(be, y);
    dfree(be, mod);
    dfree(be, dx);
}

static void test_residual(test_rng *rng, int64_t rows, int32_t seq_len, int32_t dim)
{
    rows_case c = rows_case_make(rng, rows, seq_len, dim);
    float *want[RES_COUNT], *got[RES_COUNT], *again[RES_COUNT];
    run_residual(CPU, &c, want);
    run_residual(GPU, &c, got);
    run_residual(GPU, &c, again);
    static const char *const names[RES_COUNT] = {"forward", "forward in place", "dy", "dgate"};
    size_t n = (size_t)rows * dim;
    size_t sizes[RES_COUNT] = {n, n, n, (size_t)c.n_seq * c.mod_stride};
    for (int k = 0; k < RES_COUNT; k++) {
        char what[96];
        snprintf(what, sizeof what, "gated residual %s %lldx%d", names[k], (long long)rows, dim);
        compare(what, got[k], want[k], sizes[k], k == RES_DMOD ? TOL_REDUCTION : TOL_POINTWISE);
        same_bits(what, got[k], again[k], sizes[k] * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    rows_case_free(&c);
}

static void run_rotary(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                       int32_t head_dim, const float *qkv, float *out[2])
{
    size_t n = (size_t)rows * 3 * heads * head_dim;
    float *f = dputf(be, qkv, n), *b = dputf(be, qkv, n);
    be->ops->rotary_forward(be, rows, seq_len, heads, head_dim, 10000.0f, f);
    be->ops->rotary_backward(be, rows, seq_len, heads, head_dim, 10000.0f, b);
    sync_ok(be, "rotary");
    out[0] = dget(be, f, n);
    out[1] = dget(be, b, n);
    dfree(be, f);
    dfree(be, b);
}

static void test_rotary(test_rng *rng, int64_t rows, int32_t seq_len, int32_t heads,
                        int32_t head_dim)
{
    size_t n = (size_t)rows * 3 * heads * head_dim;
    float *qkv = hrand(rng, n, -2.0f, 2.0f);
    float *want[2], *got[2], *again[2];
    run_rotary(CPU, rows, seq_len, heads, head_dim, qkv, want);
    run_rotary(GPU, rows, seq_len, heads, head_dim, qkv, got);
    run_rotary(GPU, rows, seq_len, heads, head_dim, qkv, again);
    for (int k = 0; k < 2; k++) {
        char what[96];
        snprintf(what, sizeof what, "rotary %s %lld rows, %d heads of %d",
                 k ? "backward" : "forward", (long long)rows, heads, head_dim);
        compare(what, got[k], want[k], n, TOL_POINTWISE);
        same_bits(what, got[k], again[k], n * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    free(qkv);
}

/* ------------------------------------------------------------------------
 * attention
 * ---------------------------------------------------------------------- */

enum { ATT_OUT, ATT_OUT_NOSAVE, ATT_DQKV, ATT_COUNT };

static void run_attention(nctmc_backend *be, int32_t B, int32_t L, int32_t H, int32_t D,
                          const float *qkv, const float *dout, float *out[ATT_COUNT])
{
    size_t N = (size_t)B * L, d = (size_t)H * D;
    size_t n_saved = be->ops->attention_saved_floats(be, B, L, H, D);
    size_t n_work = be->ops->attention_workspace_floats(be, B, L, H, D);
    float *d_qkv = dputf(be, qkv, N * 3 * d), *d_dout = dputf(be, dout, N * d);
    float *o = be->ops->alloc(be, N * d * sizeof(float));
    float *o2 = be->ops->alloc(be, N * d * sizeof(float));
    float *dqkv = be->ops->alloc(be, N * 3 * d * sizeof(float));
    float *saved = be->ops->alloc(be, n_saved * sizeof(float));
    float *work = be->ops->alloc(be, n_work * sizeof(float));
    if (!o || !o2 || !dqkv || !saved || !work) {
        fprintf(stderr, "attention: out of memory on %s\n", be->name);
        exit(2);
    }
    be->ops->attention_forward(be, B, L, H, D, d_qkv, o2, NULL, work);
    be->ops->attention_forward(be, B, L, H, D, d_qkv, o, saved, work);
    be->ops->attention_backward(be, B, L, H, D, d_qkv, o, saved, d_dout, dqkv, work);
    sync_ok(be, "attention");
    out[ATT_OUT] = dget(be, o, N * d);
    out[ATT_OUT_NOSAVE] = dget(be, o2, N * d);
    out[ATT_DQKV] = dget(be, dqkv, N * 3 * d);
    void *bufs[] = {d_qkv, d_dout, o, o2, dqkv, saved, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(be, bufs[i]);
}

static void test_attention(test_rng *rng, int32_t B, int32_t L, int32_t H, int32_t D,
                           nctmc_cuda_attention mode, bool bf16)
{
    size_t N = (size_t)B * L, d = (size_t)H * D;
    size_t sizes[ATT_COUNT] = {N * d, N * d, N * 3 * d};
    float *qkv = hrand(rng, N * 3 * d, -2.0f, 2.0f), *dout = hrand(rng, N * d, -1.0f, 1.0f);
    float *want[ATT_COUNT], *got[ATT_COUNT], *again[ATT_COUNT];
    run_attention(CPU, B, L, H, D, qkv, dout, want);
    CUDA->set_attention(GPU, mode);
    CUDA->set_bf16(GPU, bf16);
    run_attention(GPU, B, L, H, D, qkv, dout, got);
    run_attention(GPU, B, L, H, D, qkv, dout, again);
    char desc[512];
    CUDA->describe(GPU, desc, sizeof desc);
    CUDA->set_attention(GPU, NCTMC_CUDA_ATTENTION_AUTO);
    CUDA->set_bf16(GPU, false);
    printf("  attention B%d L%d H%d D%d, %s: %s\n", B, L, H, D,
           mode == NCTMC_CUDA_ATTENTION_AUTO ? "auto" : "custom kernels", desc);
    static const char *const names[ATT_COUNT] = {"out", "out (no saved)", "dqkv"};
    for (int k = 0; k < ATT_COUNT; k++) {
        char what[128];
        snprintf(what, sizeof what, "attention %s B%d L%d H%d D%d %s%s", names[k], B, L, H, D,
                 mode == NCTMC_CUDA_ATTENTION_AUTO ? "auto" : "custom", bf16 ? " bf16" : "");
        compare(what, got[k], want[k], sizes[k], bf16 ? TOL_ATTENTION_BF16 : TOL_ATTENTION);
        same_bits(what, got[k], again[k], sizes[k] * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    free(qkv);
    free(dout);
}

/* ------------------------------------------------------------------------
 * L_cond loss and jump outputs
 * ---------------------------------------------------------------------- */

typedef struct loss_case {
    nctmc_fp fp;
    int32_t B, L, V;
    float *logits, *rate_h, *times;
    int32_t *x_t, *x_0;
} loss_case;

static nctmc_fp make_fp(int32_t process, int32_t schedule, int32_t S)
{
    nctmc_fp fp = {process, schedule, S, 0.4f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    return fp;
}

/* Clean tokens are data tokens; x_t follows the process: unchanged, a
 * random state, or the mask. */
/* The same process under the noise-posterior exit link. */
static nctmc_fp with_link(nctmc_fp fp)
{
    fp.exit_link = NCTMC_FP_LINK_NOISE_POSTERIOR;
    return fp;
}

static loss_case loss_case_make(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V)
{
    loss_case c = {fp, B, L, V, NULL, NULL, NULL, NULL, NULL};
    size_t N = (size_t)B * L;
    c.logits = hrand(rng, N * V, -3.0f, 3.0f);
    for (int32_t k = 0; k < V; k++) /* one row far from zero */
        c.logits[k] += 40.0f;
    c.rate_h = hrand(rng, N, -2.0f, 2.0f);
    c.times = hrand(rng, (size_t)B, 0.05f, 0.95f);
    c.x_t = xcalloc(N, sizeof(int32_t));
    c.x_0 = xcalloc(N, sizeof(int32_t));
    int32_t n_data = fp_n_data(&fp), mask = fp_mask(&fp);
    for (size_t r = 0; r < N; r++) {
        c.x_0[r] = test_randint(rng, n_data);
        int32_t kind = test_randint(rng, 3);
        c.x_t[r] = kind == 0 ? c.x_0[r] : (kind == 1 && fp.process != NCTMC_FP_MASKED)
                                              ? test_randint(rng, fp.vocab)
                                          : mask >= 0 ? mask
                                                      : test_randint(rng, fp.vocab);
    }
    return c;
}

static void loss_case_free(loss_case *c)
{
    free(c->logits);
    free(c->rate_h);
    free(c->times);
    free(c->x_t);
    free(c->x_0);
}

enum { LC_LOSS, LC_DLOGITS, LC_DRATE, LC_DLOGITS_INPLACE, LC_LOSS_ONLY, LC_LOGRATE,
       LC_JUMP, LC_DLOGITS_WEIGHTED, LC_DRATE_WEIGHTED, LC_COUNT };

static void run_loss(nctmc_backend *be, const loss_case *c, float *out[LC_COUNT])
{
    size_t N = (size_t)c->B * c->L, S = (size_t)c->fp.vocab;
    bool masked = c->fp.process == NCTMC_FP_MASKED;
    float *logits = dputf(be, c->logits, N * c->V), *inplace = dputf(be, c->logits, N * c->V);
    float *rate_h = dputf(be, c->rate_h, N), *times = dputf(be, c->times, (size_t)c->B);
    int32_t *x_t = dput(be, c->x_t, N * sizeof(int32_t)), *x_0 = dput(be, c->x_0, N * 4);
    float *loss = be->ops->alloc(be, N * 4), *loss2 = be->ops->alloc(be, N * 4);
    float *dlog = be->ops->alloc(be, N * c->V * 4), *drate = be->ops->alloc(be, N * 4);
    float *log_rate = be->ops->alloc(be, N * 4), *jump = be->ops->alloc(be, N * S * 4);
    nctmc_lcond_args a = {(int64_t)N, c->L, c->V, logits, masked ? NULL : rate_h, x_t, x_0,
                          times, c->fp, 1.0f / (float)N, loss, dlog, masked ? NULL : drate,
                          NULL, false};
    be->ops->lcond(be, &a);
    /* per-sequence weights (importance sampling of t), a zero among them */
    float *host_w = xcalloc((size_t)c->B, sizeof(float));
    for (int32_t b = 0; b < c->B; b++)
        host_w[b] = b % 3 == 1 ? 0.0f : 0.4f + 0.7f * (float)b;
    float *seq_w = dputf(be, host_w, (size_t)c->B);
    free(host_w);
    float *wlog = be->ops->alloc(be, N * c->V * 4), *wrate = be->ops->alloc(be, N * 4);
    float *wloss = be->ops->alloc(be, N * 4);
    nctmc_lcond_args w = a;
    w.seq_weight = seq_w;
    w.loss = wloss;
    w.d_logits = wlog;
    w.d_rate_h = masked ? NULL : wrate;
    be->ops->lcond(be, &w);
    a.logits = inplace;
    a.d_logits = inplace;
    a.d_rate_h = NULL;
    a.loss = NULL;
    be->ops->lcond(be, &a);
    a.logits = logits;
    a.d_logits = NULL;
    a.loss = loss2;
    be->ops->lcond(be, &a);
    nctmc_jump_output_args j = {(int64_t)N, c->L, c->V, logits, masked ? NULL : rate_h, x_t,
                                times, c->fp, log_rate, jump};
    be->ops->jump_output(be, &j);
    sync_ok(be, "lcond / jump_output");
    out[LC_LOSS] = dget(be, loss, N);
    out[LC_DLOGITS] = dget(be, dlog, N * c->V);
    out[LC_DRATE] = masked ? xcalloc(N, sizeof(float)) : dget(be, drate, N);
    out[LC_DLOGITS_INPLACE] = dget(be, inplace, N * c->V);
    out[LC_LOSS_ONLY] = dget(be, loss2, N);
    out[LC_LOGRATE] = dget(be, log_rate, N);
    out[LC_JUMP] = dget(be, jump, N * S);
    out[LC_DLOGITS_WEIGHTED] = dget(be, wlog, N * c->V);
    out[LC_DRATE_WEIGHTED] = masked ? xcalloc(N, sizeof(float)) : dget(be, wrate, N);
    void *bufs[] = {logits, inplace, rate_h, times, x_t, x_0, loss, loss2, dlog, drate,
                    log_rate, jump, seq_w, wlog, wrate, wloss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(be, bufs[i]);
}

static void test_loss(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V,
                      const char *label)
{
    loss_case c = loss_case_make(rng, fp, B, L, V);
    float *want[LC_COUNT], *got[LC_COUNT], *again[LC_COUNT];
    run_loss(CPU, &c, want);
    run_loss(GPU, &c, got);
    run_loss(GPU, &c, again);
    size_t N = (size_t)B * L;
    size_t sizes[LC_COUNT] = {N, N * V, N, N * V, N, N, N * (size_t)fp.vocab, N * V, N};
    static const char *const names[LC_COUNT] = {"loss", "d_logits", "d_rate_h",
                                                "d_logits in place", "loss without grads",
                                                "log_rate", "jump_logprobs",
                                                "d_logits weighted", "d_rate_h weighted"};
    for (int k = 0; k < LC_COUNT; k++) {
        char what[128];
        snprintf(what, sizeof what, "%s %s S%d", label, names[k], fp.vocab);
        double tol = k == LC_LOGRATE ? TOL_POINTWISE : TOL_REDUCTION;
        compare(what, got[k], want[k], sizes[k], tol);
        same_bits(what, got[k], again[k], sizes[k] * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    loss_case_free(&c);
}

/* The denoiser link: forward (the sigma link's logits and h from the head's
 * logits) and backward (the head's logits' gradient, in place), with
 * upstream gradients that are random everywhere, the current token's and
 * the padding's entries included (the backward must ignore them). */
enum { DN_LOGITS, DN_H, DN_DZ, DN_COUNT };

static void run_denoiser(nctmc_backend *be, const loss_case *c, const float *upstream,
                         float *out[DN_COUNT])
{
    size_t N = (size_t)c->B * c->L, NV = N * (size_t)c->V;
    float *z = dputf(be, c->logits, NV), *times = dputf(be, c->times, (size_t)c->B);
    int32_t *x_t = dput(be, c->x_t, N * sizeof(int32_t));
    float *l = be->ops->alloc(be, NV * 4), *h = be->ops->alloc(be, N * 4);
    nctmc_denoiser_args a = {(int64_t)N, c->L, c->V, z, x_t, times, c->fp, l, h};
    be->ops->denoiser_forward(be, &a);
    sync_ok(be, "denoiser_forward");
    out[DN_LOGITS] = dget(be, l, NV);
    out[DN_H] = dget(be, h, N);
    be->ops->upload(be, l, upstream, NV * 4);
    be->ops->upload(be, h, c->rate_h, N * 4);
    be->ops->denoiser_backward(be, &a);
    sync_ok(be, "denoiser_backward");
    out[DN_DZ] = dget(be, l, NV);
    void *bufs[] = {z, times, x_t, l, h};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(be, bufs[i]);
}

static void test_denoiser(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, int32_t V,
                          const char *label)
{
    loss_case c = loss_case_make(rng, fp, B, L, V);
    size_t N = (size_t)B * L, sizes[DN_COUNT] = {N * V, N, N * V};
    float *upstream = hrand(rng, N * V, -1.0f, 1.0f);
    float *want[DN_COUNT], *got[DN_COUNT], *again[DN_COUNT];
    run_denoiser(CPU, &c, upstream, want);
    run_denoiser(GPU, &c, upstream, got);
    run_denoiser(GPU, &c, upstream, again);
    static const char *const names[DN_COUNT] = {"denoiser logits", "denoiser h",
                                                "denoiser d_logits"};
    for (int k = 0; k < DN_COUNT; k++) {
        char what[128];
        snprintf(what, sizeof what, "%s %s S%d", label, names[k], fp.vocab);
        compare(what, got[k], want[k], sizes[k], TOL_REDUCTION);
        same_bits(what, got[k], again[k], sizes[k] * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    free(upstream);
    loss_case_free(&c);
}

/* ------------------------------------------------------------------------
 * optimiser
 * ---------------------------------------------------------------------- */

enum { OPT_SCALE, OPT_PARAM, OPT_M, OPT_V, OPT_EMA, OPT_COUNT };

static double run_optim(nctmc_backend *be, int64_t n, float *const in[4], float *out[OPT_COUNT])
{
    size_t sz = (size_t)n;
    float *x = dputf(be, in[0], sz), *g = dputf(be, in[1], sz), *m = dputf(be, in[2], sz);
    float *v = dputf(be, in[3], sz), *p = dputf(be, in[0], sz), *e = dputf(be, in[1], sz);
    double ss = be->ops->sum_squares(be, n, x);
    be->ops->scale(be, n, x, 0.37f);
    be->ops->add(be, n, x, g);
    be->ops->adamw(be, n, p, g, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3);
    be->ops->ema_update(be, n, e, p, 0.999f);
    sync_ok(be, "optimiser");
    float *d[OPT_COUNT] = {x, p, m, v, e};
    for (int k = 0; k < OPT_COUNT; k++) {
        out[k] = dget(be, d[k], sz);
        dfree(be, d[k]);
    }
    dfree(be, g);
    return ss;
}

static void test_optim(test_rng *rng, int64_t n)
{
    float *in[4] = {hrand(rng, (size_t)n, -1.0f, 1.0f), hrand(rng, (size_t)n, -0.1f, 0.1f),
                    hrand(rng, (size_t)n, -0.01f, 0.01f), hrand(rng, (size_t)n, 1e-6f, 1e-3f)};
    float *want[OPT_COUNT], *got[OPT_COUNT], *again[OPT_COUNT];
    double ss_want = run_optim(CPU, n, in, want), ss_got = run_optim(GPU, n, in, got);
    double ss_again = run_optim(GPU, n, in, again);
    CHECK(fabs(ss_got - ss_want) <= 1e-12 * ss_want, "sum_squares: %.17g want %.17g", ss_got,
          ss_want);
    CHECK(ss_got == ss_again, "sum_squares: two CUDA runs differ");
    printf("  %-52s %9.2e  (tol 1e-12)\n", "sum_squares (double)",
           fabs(ss_got - ss_want) / ss_want);
    static const char *const names[OPT_COUNT] = {"scale, add", "adamw param", "adamw m", "adamw v",
                                                 "ema"};
    for (int k = 0; k < OPT_COUNT; k++) {
        compare(names[k], got[k], want[k], (size_t)n, TOL_POINTWISE);
        same_bits(names[k], got[k], again[k], (size_t)n * sizeof(float));
        free(want[k]);
        free(got[k]);
        free(again[k]);
    }
    for (int k = 0; k < 4; k++)
        free(in[k]);
}

/* ------------------------------------------------------------------------
 * the fused sampling operation
 * ---------------------------------------------------------------------- */

typedef struct sample_out {
    int32_t *x, *x_alias, *proposal;
    float *prob;
} sample_out;

static sample_out run_sample(nctmc_backend *be, const loss_case *c, const float *uncond,
                             int32_t cfg_rule, const uint8_t *fixed, const int32_t *fixed_tokens,
                             int32_t method, double t, double s)
{
    size_t N = (size_t)c->B * c->L;
    bool masked = c->fp.process == NCTMC_FP_MASKED;
    float *logits = dputf(be, c->logits, N * c->V), *rate_h = dputf(be, c->rate_h, N);
    float *lu = uncond ? dputf(be, uncond, N * c->V) : NULL;
    float *hu = uncond ? dputf(be, c->rate_h, N) : NULL; /* same heads: only logits differ */
    int32_t *x_t = dput(be, c->x_t, N * 4), *alias = dput(be, c->x_t, N * 4);
    uint8_t *fm = fixed ? dput(be, fixed, N) : NULL;
    int32_t *ft = dput(be, fixed_tokens, N * 4);
    int32_t *x_out = be->ops->alloc(be, N * 4), *prop = be->ops->alloc(be, N * 4);
    float *prob = be->ops->alloc(be, N * 4);
    nctmc_sample_step_args a;
    memset(&a, 0, sizeof a);
    a.n_rows = (int64_t)N;
    a.seq_len = c->L;
    a.row_stride = c->V;
    a.method = method;
    a.logits = logits;
    a.rate_h = masked ? NULL : rate_h;
    a.logits_uncond = lu;
    a.rate_h_uncond = uncond && !masked ? hu : NULL;
    a.cfg_scale = uncond ? 1.5f : 1.0f;
    a.cfg_rule = cfg_rule;
    a.x_t = x_t;
    a.fixed_mask = fm;
    a.fixed_tokens = ft;
    a.t = t;
    a.s = s;
    a.temperature = 0.9f;
    a.correction_temperature = 0.5f;
    a.seed = 0x5eed1234abcdull;
    a.step = 7;
    a.first_sequence = 3;
    a.fp = c->fp;
    a.x_out = x_out;
    a.proposal = prop;
    a.proposal_prob = prob;
    be->ops->sample_step(be, &a);
    if (method != SM_METHOD_CORRECT) { /* x_out = x_t, in place */
        a.x_t = alias;
        a.x_out = alias;
        be->ops->sample_step(be, &a);
    }
    sync_ok(be, "sample_step");
    sample_out o;
    o.x = (int32_t *)dget(be, x_out, N);
    o.x_alias = (int32_t *)dget(be, alias, N);
    o.proposal = (int32_t *)dget(be, prop, N);
    o.prob = dget(be, prob, N);
    void *bufs[] = {logits, rate_h, lu, hu, x_t, alias, fm, ft, x_out, prop, prob};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            dfree(be, bufs[i]);
    return o;
}

static int count_differences(const int32_t *a, const int32_t *b, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += a[i] != b[i];
    return k;
}

/* cfg: the unconditional pass's logits differ from the conditional ones,
 * combined by cfg_rule (SM_CFG_*). */
static void test_sample_step(test_rng *rng, nctmc_fp fp, int32_t B, int32_t L, bool cfg,
                             int32_t cfg_rule, const char *label)
{
    loss_case c = loss_case_make(rng, fp, B, L, fp.vocab + 3);
    size_t N = (size_t)c.B * c.L;
    float *uncond = cfg ? hrand(rng, N * c.V, -3.0f, 3.0f) : NULL;
    uint8_t *fixed = xcalloc(N, 1);
    for (size_t r = 0; r < N; r++)
        fixed[r] = test_randint(rng, 5) == 0;
    int32_t *fixed_tokens = hints(rng, N, fp_n_data(&fp));
    static const struct {
        int32_t method;
        double t, s;
        const char *name;
    } runs[] = {{SM_METHOD_TAU_LEAPING, 0.7, 0.4, "tau-leaping"},
                {SM_METHOD_EULER, 0.7, 0.45, "euler"},
                {SM_METHOD_POSTERIOR, 0.6, 0.5, "posterior"},
                {SM_METHOD_DENOISE, 0.02, 0.02, "denoise"},
                {SM_METHOD_CORRECT, 0.05, 0.05, "correct"}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        sample_out want = run_sample(CPU, &c, uncond, cfg_rule, fixed, fixed_tokens,
                                     runs[k].method, runs[k].t, runs[k].s);
        sample_out got = run_sample(GPU, &c, uncond, cfg_rule, fixed, fixed_tokens,
                                    runs[k].method, runs[k].t, runs[k].s);
        sample_out again = run_sample(GPU, &c, uncond, cfg_rule, fixed, fixed_tokens,
                                      runs[k].method, runs[k].t, runs[k].s);
        bool correct = runs[k].method == SM_METHOD_CORRECT;
        const int32_t *w = correct ? want.proposal : want.x, *g = correct ? got.proposal : got.x;
        int diff = count_differences(g, w, N), moved = count_differences(w, c.x_t, N);
        /* the same per-row math on the same Philox numbers: the same
         * tokens, unless a uniform falls within rounding of a boundary */
        CHECK(diff == 0, "sample_step %s %s: %d of %zu rows differ from the CPU", label,
              runs[k].name, diff, N);
        CHECK(count_differences(g, correct ? again.proposal : again.x, N) == 0,
              "sample_step %s %s: two CUDA runs differ", label, runs[k].name);
        if (!correct)
            CHECK(count_differences(got.x_alias, got.x, N) == 0,
                  "sample_step %s %s: x_out = x_t in place differs", label, runs[k].name);
        else
            compare("sample_step correct: proposal p0", got.prob, want.prob, N, TOL_POINTWISE);
        printf("  sample_step %-18s %-12s %4d of %zu rows differ (%d moved)\n", label,
               runs[k].name, diff, N, moved);
        sample_out *all[] = {&want, &got, &again};
        for (int i = 0; i < 3; i++) {
            free(all[i]->x);
            free(all[i]->x_alias);
            free(all[i]->proposal);
            free(all[i]->prob);
        }
    }
    free(uncond);
    free(fixed);
    free(fixed_tokens);
    loss_case_free(&c);
}

/* ------------------------------------------------------------------------
 * the whole model through two contexts
 * ---------------------------------------------------------------------- */

typedef struct model_run {
    nctmc_context *ctx;
    nctmc_model *model;
    dit_workspace *ws;
    float *grads;
} model_run;

static nctmc_model_config model_config(nctmc_process process, nctmc_schedule schedule,
                                       int32_t n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 50;
    c.vocab_pad_multiple = 32; /* V = 64 > S: padding stays out of the math */
    c.seq_len = 24;
    c.n_layers = 2;
    c.d_model = 64;
    c.n_heads = 4; /* head width 16: a shape cuDNN takes */
    c.cond_dim = 32;
    c.n_classes = n_classes;
    c.process = process;
    c.schedule = schedule;
    c.mixture_uniform = 0.3f;
    c.seed = 11;
    return c;
}

static bool model_run_start(model_run *r, const char *backend, const nctmc_model_config *cfg,
                            const float *host_weights, int32_t B)
{
    memset(r, 0, sizeof *r);
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = backend;
    if (nctmc_context_create(&p, &r->ctx) != NCTMC_OK) {
        CHECK(false, "context \"%s\" could not be created", backend);
        return false;
    }
    if (nctmc_model_create(r->ctx, cfg, &r->model) != NCTMC_OK) {
        CHECK(false, "%s: model: %s", backend, nctmc_context_last_error(r->ctx));
        return false;
    }
    nctmc_backend *be = r->ctx->backend;
    if (host_weights)
        be->ops->upload(be, r->model->weights, host_weights,
                        r->model->slab_floats * sizeof(float));
    char err[256];
    if (dit_workspace_create(r->model, be, B, cfg->seq_len, DIT_WS_TRAINING, &r->ws, err, sizeof err) !=
        NCTMC_OK) {
        CHECK(false, "%s: workspace: %s", backend, err);
        return false;
    }
    r->grads = be->ops->alloc(be, r->model->slab_floats * sizeof(float));
    return r->grads != NULL;
}

static void model_run_stop(model_run *r)
{
    if (r->grads)
        r->ctx->backend->ops->free(r->ctx->backend, r->grads);
    dit_workspace_free(r->ws);
    nctmc_model_free(r->model);
    nctmc_context_free(r->ctx);
}

typedef struct model_result {
    float *logits, *rate_h, *loss, *grads;
    double mean_loss;
} model_result;

static model_result model_evaluate(model_run *r, const dit_batch *b)
{
    model_result o;
    nctmc_backend *be = r->ctx->backend;
    const model_dims *z = &r->model->dims;
    size_t N = (size_t)b->batch * b->length;
    char err[256];
    o.mean_loss = NAN;
    nctmc_status st = dit_loss(r->model, r->ws, b, r->grads, false, &o.mean_loss, err, sizeof err);
    CHECK(st == NCTMC_OK, "dit_loss on %s: %s", be->name, err);
    o.logits = dget(be, dit_ws_logits(r->ws), N * z->V);
    o.rate_h = dget(be, dit_ws_rate_h(r->ws), N);
    o.loss = dget(be, dit_ws_loss(r->ws), N);
    o.grads = dget(be, r->grads, r->model->slab_floats);
    sync_ok(be, "model");
    return o;
}

static void model_result_free(model_result *o)
{
    free(o->logits);
    free(o->rate_h);
    free(o->loss);
    free(o->grads);
}

/* x_0 data tokens, half the positions noised as the process noises. */
static dit_batch model_batch(test_rng *rng, const nctmc_model_config *cfg, int32_t B,
                             int32_t **x_t, int32_t **x_0, float **times, int32_t **labels)
{
    int32_t N = B * cfg->seq_len, S = cfg->vocab_size;
    int32_t n_data = cfg->process == NCTMC_PROCESS_UNIFORM ? S : S - 1;
    *x_t = xcalloc((size_t)N, sizeof(int32_t));
    *x_0 = xcalloc((size_t)N, sizeof(int32_t));
    *times = xcalloc((size_t)B, sizeof(float));
    *labels = cfg->n_classes ? xcalloc((size_t)B, sizeof(int32_t)) : NULL;
    for (int32_t b = 0; b < B; b++) {
        (*times)[b] = 0.1f + 0.8f * (float)b / (float)B;
        if (*labels)
            (*labels)[b] = b % (cfg->n_classes + 1);
    }
    for (int32_t r = 0; r < N; r++) {
        (*x_0)[r] = test_randint(rng, n_data);
        bool noised = test_randint(rng, 2);
        (*x_t)[r] = !noised ? (*x_0)[r]
                    : cfg->process == NCTMC_PROCESS_UNIFORM ? test_randint(rng, S)
                                                            : S - 1;
    }
    dit_batch b = {B, cfg->seq_len, *x_t, *times, *labels, *x_0, NULL};
    return b;
}

static void compare_grads(const char *label, const nctmc_model *m, const float *got,
                          const float *want, double tol)
{
    double worst = 0.0;
    const char *worst_name = "";
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        double e = scaled_err(got + t->offset, want + t->offset, (size_t)t->n_elements);
        /* the masked process's exit-rate head gets no gradient: both 0 */
        CHECK(e <= tol, "%s: gradient of %s: scaled error %.3g above %.1g", label, t->name, e,
              tol);
        if (e > worst) {
            worst = e;
            worst_name = t->name;
        }
    }
    printf("  %-52s %9.2e  (tol %.0e, worst: %s)\n", label, worst, tol, worst_name);
}

/* Activation recomputation (DIT_WS_TRAINING_RECOMPUTE) on the GPU: the loss
 * and gradients of the full workspace, bit for bit. */
static void check_recompute(model_run *r, const dit_batch *b, const model_result *full,
                            const char *label, const char *mode)
{
    nctmc_backend *be = r->ctx->backend;
    dit_workspace *kept = r->ws, *re = NULL;
    char err[256];
    if (dit_workspace_create(r->model, be, b->batch, b->length, DIT_WS_TRAINING_RECOMPUTE, &re,
                             err, sizeof err) != NCTMC_OK) {
        CHECK(false, "model %s %s: recomputing workspace: %s", label, mode, err);
        return;
    }
    r->ws = re;
    model_result got = model_evaluate(r, b);
    r->ws = kept;
    CHECK(got.mean_loss == full->mean_loss &&
              memcmp(got.grads, full->grads, r->model->slab_floats * sizeof(float)) == 0,
          "model %s %s: recomputation gives other gradients", label, mode);
    model_result_free(&got);
    dit_workspace_free(re);
}

static void test_model(test_rng *rng, nctmc_process process, nctmc_schedule schedule,
                       int32_t n_classes, nctmc_exit_link link, const char *label)
{
    const int32_t B = 3;
    nctmc_model_config cfg = model_config(process, schedule, n_classes);
    cfg.exit_link = link;
    model_run cpu, gpu;
    if (!model_run_start(&cpu, "cpu", &cfg, NULL, B))
        return;
    /* random weights everywhere (the zero-initialised tensors too) */
    float *w = hrand(rng, cpu.model->slab_floats, -0.3f, 0.3f);
    cpu.ctx->backend->ops->upload(cpu.ctx->backend, cpu.model->weights, w,
                                  cpu.model->slab_floats * sizeof(float));
    if (!model_run_start(&gpu, "cuda", &cfg, w, B)) {
        model_run_stop(&cpu);
        free(w);
        return;
    }
    int32_t *x_t, *x_0, *labels;
    float *times;
    dit_batch b = model_batch(rng, &cfg, B, &x_t, &x_0, &times, &labels);
    size_t N = (size_t)B * cfg.seq_len, V = (size_t)cpu.model->dims.V;
    model_result want = model_evaluate(&cpu, &b);
    nctmc_backend *be = gpu.ctx->backend;
    static const struct {
        bool bf16;
        nctmc_cuda_attention attention;
        const char *name;
    } modes[] = {{false, NCTMC_CUDA_ATTENTION_AUTO, "tf32"},
                 {false, NCTMC_CUDA_ATTENTION_FALLBACK, "tf32 custom attention"},
                 {true, NCTMC_CUDA_ATTENTION_AUTO, "bf16"}};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        CUDA->set_bf16(be, modes[k].bf16);
        CUDA->set_attention(be, modes[k].attention);
        model_result got = model_evaluate(&gpu, &b), again = model_evaluate(&gpu, &b);
        double tol = modes[k].bf16 ? TOL_MODEL_BF16 : TOL_MODEL;
        char what[128];
        snprintf(what, sizeof what, "model %s %s: logits", label, modes[k].name);
        compare(what, got.logits, want.logits, N * V, tol);
        snprintf(what, sizeof what, "model %s %s: exit-rate head", label, modes[k].name);
        compare(what, got.rate_h, want.rate_h, N, tol);
        snprintf(what, sizeof what, "model %s %s: per-position loss", label, modes[k].name);
        compare(what, got.loss, want.loss, N, tol);
        CHECK(fabs(got.mean_loss - want.mean_loss) <= tol * fabs(want.mean_loss),
              "model %s %s: mean loss %.9g want %.9g", label, modes[k].name, got.mean_loss,
              want.mean_loss);
        snprintf(what, sizeof what, "model %s %s: gradients", label, modes[k].name);
        compare_grads(what, gpu.model, got.grads, want.grads, tol);
        CHECK(got.mean_loss == again.mean_loss &&
                  memcmp(got.grads, again.grads, gpu.model->slab_floats * sizeof(float)) == 0 &&
                  memcmp(got.logits, again.logits, N * V * sizeof(float)) == 0,
              "model %s %s: two CUDA runs differ", label, modes[k].name);
        check_recompute(&gpu, &b, &got, label, modes[k].name);
        char desc[512];
        CUDA->describe(be, desc, sizeof desc);
        printf("    %s\n", desc);
        model_result_free(&got);
        model_result_free(&again);
    }
    CUDA->set_bf16(be, false);
    CUDA->set_attention(be, NCTMC_CUDA_ATTENTION_AUTO);
    model_result_free(&want);
    free(w);
    free(x_t);
    free(x_0);
    free(times);
    free(labels);
    model_run_stop(&gpu);
    model_run_stop(&cpu);
}

/* Fresh models on both contexts hold the same initial weights. */
static void test_model_init(void)
{
    nctmc_model_config cfg = model_config(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0);
    model_run cpu, gpu;
    if (!model_run_start(&cpu, "cpu", &cfg, NULL, 1))
        return;
    if (model_run_start(&gpu, "cuda", &cfg, NULL, 1)) {
        size_t n = cpu.model->slab_floats;
        float *a = dget(cpu.ctx->backend, cpu.model->weights, n);
        float *b = dget(gpu.ctx->backend, gpu.model->weights, n);
        CHECK(memcmp(a, b, n * sizeof(float)) == 0, "initial weights differ between backends");
        CHECK(strcmp(nctmc_context_backend(gpu.ctx), "cuda") == 0, "backend name \"%s\"",
              nctmc_context_backend(gpu.ctx));
        free(a);
        free(b);
    }
    model_run_stop(&gpu);
    model_run_stop(&cpu);
}

/* The public sampler on the CUDA context: the same samples twice, in
 * range; the CPU's samples beside them (their forward passes differ in
 * rounding, so only the agreement is reported). */
static void test_sampler(test_rng *rng, nctmc_process process, nctmc_sample_method method,
                         const char *label)
{
    nctmc_model_config cfg = model_config(process, NCTMC_SCHEDULE_LINEAR, 0);
    model_run cpu, gpu;
    if (!model_run_start(&cpu, "cpu", &cfg, NULL, 1))
        return;
    float *w = hrand(rng, cpu.model->slab_floats, -0.3f, 0.3f);
    cpu.ctx->backend->ops->upload(cpu.ctx->backend, cpu.model->weights, w,
                                  cpu.model->slab_floats * sizeof(float));
    if (!model_run_start(&gpu, "cuda", &cfg, w, 1)) {
        model_run_stop(&cpu);
        free(w);
        return;
    }
    const int32_t B = 4;
    size_t N = (size_t)B * cfg.seq_len;
    int32_t *tok[3];
    model_run *runs[3] = {&gpu, &gpu, &cpu};
    for (int k = 0; k < 3; k++) {
        nctmc_sampler_params sp;
        nctmc_sampler_params_init(&sp);
        sp.max_batch = B;
        nctmc_sampler *s = NULL;
        tok[k] = xcalloc(N, sizeof(int32_t));
        CHECK(nctmc_sampler_create(runs[k]->model, &sp, &s) == NCTMC_OK, "sampler: %s",
              nctmc_context_last_error(runs[k]->ctx));
        if (!s)
            continue;
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = B;
        p.method = method;
        p.n_steps = 16;
        p.seed = 42;
        p.correction_steps = 2;
        p.tokens_out = tok[k];
        CHECK(nctmc_sample(s, &p) == NCTMC_OK, "sample %s: %s", label,
              nctmc_sampler_last_error(s));
        nctmc_sampler_free(s);
    }
    int n_data = process == NCTMC_PROCESS_UNIFORM ? cfg.vocab_size : cfg.vocab_size - 1;
    int out_of_range = 0;
    for (size_t i = 0; i < N; i++)
        out_of_range += tok[0][i] < 0 || tok[0][i] >= n_data;
    CHECK(out_of_range == 0, "sampler %s: %d tokens out of range", label, out_of_range);
    CHECK(count_differences(tok[0], tok[1], N) == 0, "sampler %s: two CUDA runs differ", label);
    printf("  sampler %-40s CUDA = CUDA; %d of %zu tokens differ from the CPU run\n", label,
           count_differences(tok[0], tok[2], N), N);
    for (int k = 0; k < 3; k++)
        free(tok[k]);
    free(w);
    model_run_stop(&gpu);
    model_run_stop(&cpu);
}

/* ------------------------------------------------------------------------ */

static void test_contexts(void)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    static const char *const names[3][2] = {{"cuda", "cuda"}, {"cuda-bf16", "cuda-bf16"},
                                            {"auto", "cuda"}};
    for (int k = 0; k < 3; k++) {
        nctmc_context *ctx = NULL;
        p.backend = names[k][0];
        CHECK(nctmc_context_create(&p, &ctx) == NCTMC_OK, "context \"%s\"", names[k][0]);
        CHECK(ctx && strcmp(nctmc_context_backend(ctx), names[k][1]) == 0,
              "\"%s\" gives backend \"%s\"", names[k][0], ctx ? nctmc_context_backend(ctx) : "");
        nctmc_context_free(ctx);
    }
}

int main(void)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    if (!cuda_test_load("cuda_conformance", &CUDA, err, sizeof err))
        return 1;
    GPU = CUDA->create(0, false, err, sizeof err, &no_device);
    int rc = cuda_test_started("cuda_conformance", GPU, no_device, err);
    if (rc)
        return rc;
    CPU = cpu_backend_create(0, err, sizeof err);
    if (!CPU) {
        fprintf(stderr, "cuda_conformance: CPU backend: %s\n", err);
        return 1;
    }
    char desc[512];
    CUDA->describe(GPU, desc, sizeof desc);
    printf("device: %s\n", desc);
    test_rng rng = test_rng_seed(2024);

    printf("dense\n");
    test_linear(&rng, 37, 67, 45, false);
    test_linear(&rng, 300, 256, 384, false);
    test_linear(&rng, 3, 256, 32, false); /* the time MLP's shape */
    test_linear(&rng, 129, 64, 1, false); /* the exit-rate head */
    test_linear(&rng, 300, 256, 384, true);
    test_linear(&rng, 37, 67, 45, true);

    printf("embeddings, pointwise, adaLN, residual, rotary\n");
    test_embedding(&rng, 97, 70, 13, 13);
    test_embedding(&rng, 500, 64, 4096, 37); /* unnamed rows must be zeroed */
    test_embedding(&rng, 6, 32, 3, 1);       /* one id for every row */
    test_timestep(&rng, 5, 256);
    test_timestep(&rng, 4, 7);
    test_activations(&rng, 100003);
    test_adaln(&rng, 69, 29, 83);
    test_adaln(&rng, 256, 64, 768);
    test_residual(&rng, 69, 29, 83);
    test_residual(&rng, 256, 64, 768);
    test_rotary(&rng, 61, 20, 3, 10);
    test_rotary(&rng, 128, 64, 12, 64);

    printf("attention\n");
    static const int32_t shapes[][4] = {{2, 33, 3, 16}, {3, 50, 2, 64}, {2, 17, 2, 6},
                                        {1, 128, 4, 32}, {2, 256, 12, 64}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        test_attention(&rng, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3],
                       NCTMC_CUDA_ATTENTION_AUTO, false);
        test_attention(&rng, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3],
                       NCTMC_CUDA_ATTENTION_FALLBACK, false);
    }
    test_attention(&rng, 2, 256, 12, 64, NCTMC_CUDA_ATTENTION_AUTO, true);

    printf("loss and jump outputs\n");
    test_loss(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 37), 3, 7, 40, "uniform/linear");
    test_loss(&rng, make_fp(NCTMC_FP_MASKED, NCTMC_FP_COSINE, 37), 3, 7, 40, "masked/cosine");
    test_loss(&rng, make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_LOGLINEAR, 37), 3, 7, 37,
              "mixture/loglinear");
    test_loss(&rng, with_link(make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 37)), 3, 7, 40,
              "uniform/linear/noise-posterior link");
    test_loss(&rng, with_link(make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_COSINE, 37)), 3, 7, 37,
              "mixture/cosine/noise-posterior link");
    test_loss(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_COSINE, 50304), 2, 3, 50304,
              "uniform/cosine");
    /* the row cached in shared memory without vector loads (odd stride),
     * and a row too long for shared memory (read twice) */
    test_loss(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 50304), 2, 3, 50307,
              "uniform/linear odd stride");
    test_loss(&rng, make_fp(NCTMC_FP_MASKED, NCTMC_FP_COSINE, 60000), 2, 3, 60000,
              "masked/cosine beyond shared memory");
    test_denoiser(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 37), 3, 7, 40,
                  "uniform/linear");
    test_denoiser(&rng, make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_COSINE, 37), 3, 7, 37,
                  "mixture/cosine");
    test_denoiser(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_COSINE, 50304), 2, 3, 50307,
                  "uniform/cosine odd stride");

    printf("optimiser\n");
    test_optim(&rng, 1000003);

    printf("sampling operation\n");
    test_sample_step(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 37), 8, 32, false,
                     SM_CFG_SEPARATE, "uniform");
    test_sample_step(&rng, make_fp(NCTMC_FP_MASKED, NCTMC_FP_COSINE, 37), 8, 32, false,
                     SM_CFG_SEPARATE, "masked");
    test_sample_step(&rng, make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_LOGLINEAR, 37), 8, 32, false,
                     SM_CFG_SEPARATE, "mixture");
    test_sample_step(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_COSINE, 37), 8, 32, true,
                     SM_CFG_SEPARATE, "uniform cfg");
    /* rate-level guidance: the exit rate reads every logit of both passes */
    test_sample_step(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 37), 8, 32, true,
                     SM_CFG_RATES, "uniform cfg rates");
    test_sample_step(&rng, make_fp(NCTMC_FP_MASKED, NCTMC_FP_COSINE, 37), 8, 32, true, SM_CFG_RATES,
                     "masked cfg rates");
    test_sample_step(&rng, make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_LOGLINEAR, 37), 8, 32, true,
                     SM_CFG_RATES, "mixture cfg rates");
    test_sample_step(&rng, with_link(make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 37)), 8, 32, true,
                     SM_CFG_SEPARATE, "uniform noise-posterior link cfg");
    test_sample_step(&rng, with_link(make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_LOGLINEAR, 37)), 8, 32, true,
                     SM_CFG_RATES, "mixture noise-posterior link cfg rates");
    /* rows of paper size: every warp's chunk of the block loops in use */
    test_sample_step(&rng, make_fp(NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, 50304), 2, 64, false,
                     SM_CFG_SEPARATE, "uniform S50304");
    test_sample_step(&rng, make_fp(NCTMC_FP_MASKED, NCTMC_FP_COSINE, 50304), 2, 64, true,
                     SM_CFG_RATES, "masked cfg rates S50304");
    test_sample_step(&rng, make_fp(NCTMC_FP_MIXTURE, NCTMC_FP_LOGLINEAR, 5001), 2, 64, true,
                     SM_CFG_SEPARATE, "mixture cfg S5001");

    printf("contexts and the whole model\n");
    test_contexts();
    test_model_init();
    const nctmc_exit_link np = NCTMC_EXIT_LINK_NOISE_POSTERIOR;
    test_model(&rng, NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, np, "uniform/linear");
    test_model(&rng, NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_COSINE, 0, np, "masked/cosine");
    test_model(&rng, NCTMC_PROCESS_MIXTURE, NCTMC_SCHEDULE_LOGLINEAR, 3, np,
               "mixture/loglinear+labels");
    test_model(&rng, NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, NCTMC_EXIT_LINK_DENOISER,
               "uniform/linear/denoiser link");

    printf("samplers\n");
    test_sampler(&rng, NCTMC_PROCESS_UNIFORM, NCTMC_SAMPLE_TAU_LEAPING, "uniform tau-leaping");
    test_sampler(&rng, NCTMC_PROCESS_UNIFORM, NCTMC_SAMPLE_POSTERIOR, "uniform posterior");
    test_sampler(&rng, NCTMC_PROCESS_MASKED, NCTMC_SAMPLE_EULER, "masked euler");

    CPU->ops->destroy(CPU);
    GPU->ops->destroy(GPU);
    return test_finish("cuda_conformance");
}
