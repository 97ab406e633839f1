/*
 * test_cpu_pointwise.c — the CPU backend's row-wise and elementwise kernels:
 * adaLN, gated residual, SiLU / GELU, the fused L_cond loss, the jump
 * outputs and the optimiser operations.
 *
 * Every operation is checked against a double-precision reference written
 * here (for the loss: a brute force straight from the definition, calling
 * no function of lib/math/lcond_math.h or lib/math/forward_process.h), every backward
 * against central finite differences of the forward, accumulate flags and
 * aliasing as backend.h allows them, and bitwise equality of all outputs
 * for 1, 2 and 3 threads. Sizes are odd on purpose (partial tasks, partial
 * lane blocks, a partial last sequence).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test_util.h"

#define N_BACKENDS 3

typedef struct backends {
    nctmc_backend *be[N_BACKENDS]; /* 1, 2 and 3 threads */
} backends;

/* ------------------------------------------------------------------------
 * small helpers
 * ---------------------------------------------------------------------- */

static float *vec_new(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static double *dvec_new(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static float *vec_rand(test_rng *rng, size_t n, float lo, float hi)
{
    float *p = vec_new(n);
    test_fill_uniform(rng, p, n, lo, hi);
    return p;
}

static float *vec_copy(const float *src, size_t n)
{
    float *p = vec_new(n);
    memcpy(p, src, n * sizeof *p);
    return p;
}

static void vec_fill(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

static bool same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

static double weighted_sum(const float *w, const float *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)w[i] * (double)y[i];
    return s;
}

/* One check per array: every |got - want| <= atol + rtol |want|; the worst
 * element is reported. Infinities must match exactly. */
static void check_array(const float *got, const double *want, size_t n, double rtol,
                        double atol, const char *what)
{
    size_t worst = 0;
    double worst_excess = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        double excess;
        if (isinf(w) || isinf(g))
            excess = g == w ? -1.0 : INFINITY;
        else if (isnan(g) || isnan(w))
            excess = INFINITY;
        else
            excess = fabs(g - w) - (atol + rtol * fabs(w));
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    CHECK(worst_excess <= 0.0, "%s: element %zu got %.9g want %.9g (n %zu)", what, worst,
          n ? (double)got[worst] : 0.0, n ? want[worst] : 0.0, n);
}

static void check_same_bits(const float *a, const float *b, size_t n, const char *what)
{
    CHECK(same_bits(a, b, n), "%s differ bitwise", what);
}

/* ------------------------------------------------------------------------
 * adaLN
 * ---------------------------------------------------------------------- */

typedef struct adaln_case {
    int64_t rows;
    int32_t seq_len, dim, mod_stride, n_seq;
    int32_t off_shift, off_scale; /* chunk offsets inside a modulation row */
    float *x, *w, *mod, *wgt;     /* wgt: the objective's weights = dy */
} adaln_case;

static adaln_case adaln_case_make(test_rng *rng, int64_t rows, int32_t seq_len, int32_t dim)
{
    adaln_case c = {rows, seq_len, dim, 6 * dim + 5, (int32_t)((rows + seq_len - 1) / seq_len),
                    dim + 2, 3 * dim + 1, NULL, NULL, NULL, NULL};
    size_t n = (size_t)rows * (size_t)dim;
    c.x = vec_rand(rng, n, -1.5f, 2.0f);
    /* a per-row offset and spread, so mean and rstd matter */
    for (int64_t r = 0; r < rows; r++)
        for (int32_t k = 0; k < dim; k++)
            c.x[r * dim + k] = c.x[r * dim + k] * (0.5f + 0.1f * (float)(r % 7)) +
                               0.3f * (float)(r % 5);
    c.w = vec_rand(rng, (size_t)dim, 0.5f, 1.5f);
    c.mod = vec_rand(rng, (size_t)c.n_seq * (size_t)c.mod_stride, -0.8f, 0.8f);
    c.wgt = vec_rand(rng, n, -1.0f, 1.0f);
    return c;
}

static void adaln_case_free(adaln_case *c)
{
    free(c->x);
    free(c->w);
    free(c->mod);
    free(c->wgt);
}

static void adaln_fwd(nctmc_backend *be, const adaln_case *c, const float *x, const float *w,
                      const float *mod, float *y, float *mean, float *rstd)
{
    be->ops->adaln_forward(be, c->rows, c->seq_len, c->dim, x, w, mod + c->off_shift,
                           mod + c->off_scale, c->mod_stride, y, mean, rstd);
}

/* dmod receives dshift / dscale at the same offsets as shift / scale. */
static void adaln_bwd(nctmc_backend *be, const adaln_case *c, const float *mean,
                      const float *rstd, const float *dy, float *dx, bool acc_dx, float *dw,
                      bool acc_dw, float *dmod)
{
    be->ops->adaln_backward(be, c->rows, c->seq_len, c->dim, c->x, c->w, c->mod + c->off_scale,
                            c->mod_stride, mean, rstd, dy, dx, acc_dx, dw, acc_dw,
                            dmod + c->off_shift, dmod + c->off_scale);
}

typedef struct adaln_ref {
    double *y, *mean, *rstd, *dx, *dw, *dmod;
} adaln_ref;

static adaln_ref adaln_reference(const adaln_case *c)
{
    size_t n = (size_t)c->rows * (size_t)c->dim;
    adaln_ref f = {dvec_new(n), dvec_new((size_t)c->rows), dvec_new((size_t)c->rows),
                   dvec_new(n), dvec_new((size_t)c->dim),
                   dvec_new((size_t)c->n_seq * (size_t)c->mod_stride)};
    int32_t d = c->dim;
    double *xhat = dvec_new((size_t)d), *g = dvec_new((size_t)d);
    for (int64_t r = 0; r < c->rows; r++) {
        const float *x = c->x + r * d, *dy = c->wgt + r * d;
        int64_t b = r / c->seq_len;
        const float *sh = c->mod + b * c->mod_stride + c->off_shift;
        const float *sc = c->mod + b * c->mod_stride + c->off_scale;
        double mean = 0.0, var = 0.0, mg = 0.0, mgx = 0.0;
        for (int32_t k = 0; k < d; k++)
            mean += x[k];
        mean /= d;
        for (int32_t k = 0; k < d; k++)
            var += (x[k] - mean) * (x[k] - mean);
        var /= d;
        double rstd = 1.0 / sqrt(var + 1e-5);
        f.mean[r] = mean;
        f.rstd[r] = rstd;
        for (int32_t k = 0; k < d; k++) {
            xhat[k] = (x[k] - mean) * rstd;
            f.y[r * d + k] = xhat[k] * c->w[k] * (1.0 + sc[k]) + sh[k];
            g[k] = (double)dy[k] * c->w[k] * (1.0 + sc[k]);
            mg += g[k] / d;
            mgx += g[k] * xhat[k] / d;
            f.dw[k] += (double)dy[k] * xhat[k] * (1.0 + sc[k]);
            f.dmod[b * c->mod_stride + c->off_shift + k] += dy[k];
            f.dmod[b * c->mod_stride + c->off_scale + k] += (double)dy[k] * xhat[k] * c->w[k];
        }
        for (int32_t k = 0; k < d; k++)
            f.dx[r * d + k] = rstd * (g[k] - mg - xhat[k] * mgx);
    }
    free(xhat);
    free(g);
    return f;
}

static void adaln_ref_free(adaln_ref *f)
{
    free(f->y);
    free(f->mean);
    free(f->rstd);
    free(f->dx);
    free(f->dw);
    free(f->dmod);
}

/* sum(wgt * y) for the kernel's forward with one input perturbed. */
static double adaln_objective(nctmc_backend *be, const adaln_case *c, const float *x,
                              const float *w, const float *mod, float *y, float *mean,
                              float *rstd)
{
    adaln_fwd(be, c, x, w, mod, y, mean, rstd);
    return weighted_sum(c->wgt, y, (size_t)c->rows * (size_t)c->dim);
}

/* Central differences of the objective in every element of p (a copy of
 * one of the case's inputs, used in place of it by the forward). */
static void adaln_fd(nctmc_backend *be, const adaln_case *c, float *x, float *w, float *mod,
                     float *p, const int64_t *idx, size_t n_idx, double eps, double *out)
{
    size_t n = (size_t)c->rows * (size_t)c->dim;
    float *y = vec_new(n), *mean = vec_new((size_t)c->rows), *rstd = vec_new((size_t)c->rows);
    for (size_t e = 0; e < n_idx; e++) {
        float keep = p[idx[e]];
        p[idx[e]] = (float)(keep + eps);
        double up = adaln_objective(be, c, x, w, mod, y, mean, rstd);
        double hi = p[idx[e]];
        p[idx[e]] = (float)(keep - eps);
        double down = adaln_objective(be, c, x, w, mod, y, mean, rstd);
        double lo = p[idx[e]];
        p[idx[e]] = keep;
        out[e] = (up - down) / (hi - lo);
    }
    free(y);
    free(mean);
    free(rstd);
}

/* Indices of the shift and scale chunks inside the modulation matrix. */
static size_t adaln_mod_indices(const adaln_case *c, int32_t off, int64_t *idx)
{
    size_t n = 0;
    for (int32_t b = 0; b < c->n_seq; b++)
        for (int32_t k = 0; k < c->dim; k++)
            idx[n++] = (int64_t)b * c->mod_stride + off + k;
    return n;
}

static void adaln_check_fd(nctmc_backend *be, const adaln_case *c, const float *dx,
                           const float *dw, const float *dmod)
{
    size_t n = (size_t)c->rows * (size_t)c->dim;
    size_t n_mod = (size_t)c->n_seq * (size_t)c->mod_stride;
    float *x = vec_copy(c->x, n), *w = vec_copy(c->w, (size_t)c->dim);
    float *mod = vec_copy(c->mod, n_mod);
    int64_t *idx = calloc(n, sizeof *idx);
    double *fd = dvec_new(n);
    float *got = vec_new(n);
    for (size_t e = 0; e < n; e++)
        idx[e] = (int64_t)e;
    /* A step of 1e-2 keeps the float rounding of mean and rstd, which moves
     * every output of a row together, well below the tolerance. */
    adaln_fd(be, c, x, w, mod, x, idx, n, 1e-2, fd);
    check_array(dx, fd, n, 1e-2, 1e-3, "adaln dx vs finite differences");
    adaln_fd(be, c, x, w, mod, w, idx, (size_t)c->dim, 1e-2, fd);
    check_array(dw, fd, (size_t)c->dim, 1e-2, 2e-3, "adaln dw vs finite differences");
    const int32_t offs[2] = {c->off_shift, c->off_scale};
    const char *names[2] = {"adaln dshift vs finite differences",
                            "adaln dscale vs finite differences"};
    for (int part = 0; part < 2; part++) {
        size_t m = adaln_mod_indices(c, offs[part], idx);
        adaln_fd(be, c, x, w, mod, mod, idx, m, 1e-2, fd);
        for (size_t e = 0; e < m; e++)
            got[e] = dmod[idx[e]];
        check_array(got, fd, m, 5e-3, 1e-3, names[part]);
    }
    free(x);
    free(w);
    free(mod);
    free(idx);
    free(fd);
    free(got);
}

/* Entries of dmod outside the dshift / dscale chunks must keep `fill`. */
static bool adaln_outside_untouched(const adaln_case *c, const float *dmod, float fill)
{
    for (int32_t b = 0; b < c->n_seq; b++)
        for (int32_t k = 0; k < c->mod_stride; k++) {
            bool inside = (k >= c->off_shift && k < c->off_shift + c->dim) ||
                          (k >= c->off_scale && k < c->off_scale + c->dim);
            if (!inside && dmod[(size_t)b * c->mod_stride + k] != fill)
                return false;
        }
    return true;
}

typedef struct adaln_out {
    float *y, *mean, *rstd, *dx, *dw, *dmod;
} adaln_out;

static adaln_out adaln_run(nctmc_backend *be, const adaln_case *c, float fill)
{
    size_t n = (size_t)c->rows * (size_t)c->dim;
    size_t n_mod = (size_t)c->n_seq * (size_t)c->mod_stride;
    adaln_out o = {vec_new(n), vec_new((size_t)c->rows), vec_new((size_t)c->rows),
                   vec_new(n), vec_new((size_t)c->dim), vec_new(n_mod)};
    vec_fill(o.dx, n, NAN);
    vec_fill(o.dw, (size_t)c->dim, NAN);
    vec_fill(o.dmod, n_mod, fill);
    adaln_fwd(be, c, c->x, c->w, c->mod, o.y, o.mean, o.rstd);
    adaln_bwd(be, c, o.mean, o.rstd, c->wgt, o.dx, false, o.dw, false, o.dmod);
    return o;
}

static void adaln_out_free(adaln_out *o)
{
    free(o->y);
    free(o->mean);
    free(o->rstd);
    free(o->dx);
    free(o->dw);
    free(o->dmod);
}

static void adaln_check_accumulate(nctmc_backend *be, const adaln_case *c, const adaln_out *o,
                                   test_rng *rng)
{
    size_t n = (size_t)c->rows * (size_t)c->dim;
    size_t n_mod = (size_t)c->n_seq * (size_t)c->mod_stride;
    float *dx = vec_rand(rng, n, -1.0f, 1.0f), *dw = vec_rand(rng, (size_t)c->dim, -1.0f, 1.0f);
    float *want_dx = vec_new(n), *want_dw = vec_new((size_t)c->dim);
    for (size_t e = 0; e < n; e++)
        want_dx[e] = dx[e] + o->dx[e];
    for (int32_t k = 0; k < c->dim; k++)
        want_dw[k] = dw[k] + o->dw[k];
    /* stale values in the chunks, the run's fill outside them */
    float *dmod = vec_copy(o->dmod, n_mod);
    int64_t *idx = calloc(n_mod, sizeof *idx);
    size_t m = adaln_mod_indices(c, c->off_shift, idx);
    m += adaln_mod_indices(c, c->off_scale, idx + m);
    for (size_t e = 0; e < m; e++)
        dmod[idx[e]] = 5.0f;
    free(idx);
    adaln_bwd(be, c, o->mean, o->rstd, c->wgt, dx, true, dw, true, dmod);
    check_same_bits(dx, want_dx, n, "adaln accumulated dx vs dx + plain result");
    check_same_bits(dw, want_dw, (size_t)c->dim, "adaln accumulated dw vs dw + plain result");
    check_same_bits(dmod, o->dmod, n_mod, "adaln dshift/dscale are overwritten, not added");
    free(dx);
    free(dw);
    free(want_dx);
    free(want_dw);
    free(dmod);
}

static void test_adaln_shape(const backends *bs, test_rng *rng, int64_t rows, int32_t seq_len,
                             int32_t dim)
{
    adaln_case c = adaln_case_make(rng, rows, seq_len, dim);
    adaln_ref f = adaln_reference(&c);
    size_t n = (size_t)rows * (size_t)dim;
    size_t n_mod = (size_t)c.n_seq * (size_t)c.mod_stride;
    const float fill = -321.0f;
    adaln_out o[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++)
        o[t] = adaln_run(bs->be[t], &c, fill);
    check_array(o[0].y, f.y, n, 1e-5, 1e-5, "adaln y vs reference");
    check_array(o[0].mean, f.mean, (size_t)rows, 1e-5, 1e-6, "adaln mean vs reference");
    check_array(o[0].rstd, f.rstd, (size_t)rows, 1e-5, 0.0, "adaln rstd vs reference");
    check_array(o[0].dx, f.dx, n, 1e-4, 1e-5, "adaln dx vs reference");
    check_array(o[0].dw, f.dw, (size_t)dim, 1e-4, 1e-5, "adaln dw vs reference");
    double *want_mod = dvec_new(n_mod);
    for (size_t e = 0; e < n_mod; e++)
        want_mod[e] = f.dmod[e];
    float *got_mod = vec_copy(o[0].dmod, n_mod);
    for (size_t e = 0; e < n_mod; e++)
        if (got_mod[e] == fill)
            got_mod[e] = 0.0f; /* outside the chunks: checked below */
    check_array(got_mod, want_mod, n_mod, 1e-4, 1e-5, "adaln dshift/dscale vs reference");
    CHECK(adaln_outside_untouched(&c, o[0].dmod, fill),
          "adaln backward wrote outside the dshift/dscale chunks");
    adaln_check_fd(bs->be[0], &c, o[0].dx, o[0].dw, o[0].dmod);
    adaln_check_accumulate(bs->be[1], &c, &o[0], rng);
    for (int t = 1; t < N_BACKENDS; t++) {
        check_same_bits(o[t].y, o[0].y, n, "adaln y across thread counts");
        check_same_bits(o[t].mean, o[0].mean, (size_t)rows, "adaln mean across threads");
        check_same_bits(o[t].rstd, o[0].rstd, (size_t)rows, "adaln rstd across threads");
        check_same_bits(o[t].dx, o[0].dx, n, "adaln dx across thread counts");
        check_same_bits(o[t].dw, o[0].dw, (size_t)dim, "adaln dw across thread counts");
        check_same_bits(o[t].dmod, o[0].dmod, n_mod, "adaln dshift/dscale across threads");
    }
    for (int t = 0; t < N_BACKENDS; t++)
        adaln_out_free(&o[t]);
    free(want_mod);
    free(got_mod);
    adaln_ref_free(&f);
    adaln_case_free(&c);
}

static void test_adaln(const backends *bs, test_rng *rng)
{
    test_adaln_shape(bs, rng, 37, 5, 24);
    /* several column chunks, a partial one and a partial lane block */
    test_adaln_shape(bs, rng, 45, 9, 147);
}

/* ------------------------------------------------------------------------
 * gated residual
 * ---------------------------------------------------------------------- */

typedef struct residual_case {
    int64_t rows;
    int32_t seq_len, dim, mod_stride, n_seq, off_gate;
    float *x, *y, *mod, *wgt;
} residual_case;

static residual_case residual_case_make(test_rng *rng, int64_t rows, int32_t seq_len,
                                        int32_t dim)
{
    residual_case c = {rows, seq_len, dim, 3 * dim + 7, (int32_t)((rows + seq_len - 1) / seq_len),
                       dim + 3, NULL, NULL, NULL, NULL};
    size_t n = (size_t)rows * (size_t)dim;
    c.x = vec_rand(rng, n, -2.0f, 2.0f);
    c.y = vec_rand(rng, n, -2.0f, 2.0f);
    c.mod = vec_rand(rng, (size_t)c.n_seq * (size_t)c.mod_stride, -1.0f, 1.0f);
    c.wgt = vec_rand(rng, n, -1.0f, 1.0f);
    return c;
}

static void residual_case_free(residual_case *c)
{
    free(c->x);
    free(c->y);
    free(c->mod);
    free(c->wgt);
}

static void residual_fwd(nctmc_backend *be, const residual_case *c, const float *x,
                         const float *y, const float *mod, float *out)
{
    be->ops->gated_residual_forward(be, c->rows, c->seq_len, c->dim, x, y, mod + c->off_gate,
                                    c->mod_stride, out);
}

static void residual_bwd(nctmc_backend *be, const residual_case *c, const float *dx, float *dy,
                         float *dmod)
{
    be->ops->gated_residual_backward(be, c->rows, c->seq_len, c->dim, c->y,
                                     c->mod + c->off_gate, c->mod_stride, dx, dy,
                                     dmod + c->off_gate);
}

/* Central differences of sum(wgt * out) in y (all) and in the gate chunks. */
static void residual_check_fd(nctmc_backend *be, const residual_case *c, const float *dy,
                              const float *dmod)
{
    size_t n = (size_t)c->rows * (size_t)c->dim;
    size_t n_mod = (size_t)c->n_seq * (size_t)c->mod_stride;
    float *y = vec_copy(c->y, n), *mod = vec_copy(c->mod, n_mod), *out = vec_new(n);
    double *fd = dvec_new(n);
    const double eps = 1e-2;
    for (size_t e = 0; e < n; e++) {
        float keep = y[e];
        y[e] = (float)(keep + eps);
        residual_fwd(be, c, c->x, y, mod, out);
        double up = weighted_sum(c->wgt, out, n), hi = y[e];
        y[e] = (float)(keep - eps);
        residual_fwd(be, c, c->x, y, mod, out);
        double down = weighted_sum(c->wgt, out, n), lo = y[e];
        y[e] = keep;
        fd[e] = (up - down) / (hi - lo);
    }
    check_array(dy, fd, n, 1e-3, 1e-4, "residual dy vs finite differences");
    float *got = vec_new(n_mod);
    size_t m = 0;
    for (int32_t b = 0; b < c->n_seq; b++)
        for (int32_t k = 0; k < c->dim; k++, m++) {
            size_t e = (size_t)b * c->mod_stride + c->off_gate + k;
            float keep = mod[e];
            mod[e] = (float)(keep + eps);
            residual_fwd(be, c, c->x, c->y, mod, out);
            double up = weighted_sum(c->wgt, out, n), hi = mod[e];
            mod[e] = (float)(keep - eps);
            residual_fwd(be, c, c->x, c->y, mod, out);
            double down = weighted_sum(c->wgt, out, n), lo = mod[e];
            mod[e] = keep;
            fd[m] = (up - down) / (hi - lo);
            got[m] = dmod[e];
        }
    check_array(got, fd, m, 1e-3, 1e-3, "residual dgate vs finite differences");
    free(y);
    free(mod);
    free(out);
    free(fd);
    free(got);
}

static void test_residual_shape(const backends *bs, test_rng *rng, int64_t rows,
                                int32_t seq_len, int32_t dim)
{
    residual_case c = residual_case_make(rng, rows, seq_len, dim);
    size_t n = (size_t)rows * (size_t)dim;
    size_t n_mod = (size_t)c.n_seq * (size_t)c.mod_stride;
    double *want_out = dvec_new(n), *want_dy = dvec_new(n), *want_dgate = dvec_new(n_mod);
    for (int64_t r = 0; r < rows; r++) {
        const float *g = c.mod + (r / seq_len) * c.mod_stride + c.off_gate;
        double *dg = want_dgate + (r / seq_len) * c.mod_stride + c.off_gate;
        for (int32_t k = 0; k < dim; k++) {
            size_t e = (size_t)r * dim + k;
            want_out[e] = (double)c.x[e] + (double)g[k] * c.y[e];
            want_dy[e] = (double)g[k] * c.wgt[e];
            dg[k] += (double)c.wgt[e] * c.y[e];
        }
    }
    const float fill = 77.0f;
    float *out[N_BACKENDS], *dy[N_BACKENDS], *dmod[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++) {
        out[t] = vec_new(n);
        dy[t] = vec_new(n);
        vec_fill(dy[t], n, NAN);
        dmod[t] = vec_new(n_mod);
        vec_fill(dmod[t], n_mod, fill);
        residual_fwd(bs->be[t], &c, c.x, c.y, c.mod, out[t]);
        residual_bwd(bs->be[t], &c, c.wgt, dy[t], dmod[t]);
    }
    check_array(out[0], want_out, n, 1e-6, 1e-6, "residual out vs reference");
    check_array(dy[0], want_dy, n, 1e-6, 1e-7, "residual dy vs reference");
    float *dgate = vec_new(n_mod);
    bool outside_ok = true;
    for (size_t e = 0; e < n_mod; e++) {
        size_t k = e % (size_t)c.mod_stride;
        bool inside = k >= (size_t)c.off_gate && k < (size_t)(c.off_gate + dim);
        dgate[e] = inside ? dmod[0][e] : 0.0f;
        outside_ok = outside_ok && (inside || dmod[0][e] == fill);
    }
    check_array(dgate, want_dgate, n_mod, 1e-5, 1e-5, "residual dgate vs reference");
    CHECK(outside_ok, "residual backward wrote outside the dgate chunk");
    residual_check_fd(bs->be[0], &c, dy[0], dmod[0]);

    /* out may be x itself */
    float *inplace = vec_copy(c.x, n);
    residual_fwd(bs->be[1], &c, inplace, c.y, c.mod, inplace);
    check_same_bits(inplace, out[0], n, "residual in place vs out of place");
    /* the backward reads dx and leaves it alone */
    float *dx = vec_copy(c.wgt, n), *dy_s = vec_new(n), *dmod_s = vec_new(n_mod);
    residual_bwd(bs->be[2], &c, dx, dy_s, dmod_s);
    check_same_bits(dx, c.wgt, n, "residual backward leaves dx unchanged");
    free(dy_s);
    free(dmod_s);

    for (int t = 1; t < N_BACKENDS; t++) {
        check_same_bits(out[t], out[0], n, "residual out across thread counts");
        check_same_bits(dy[t], dy[0], n, "residual dy across thread counts");
        check_same_bits(dmod[t], dmod[0], n_mod, "residual dgate across thread counts");
    }
    for (int t = 0; t < N_BACKENDS; t++) {
        free(out[t]);
        free(dy[t]);
        free(dmod[t]);
    }
    free(want_out);
    free(want_dy);
    free(want_dgate);
    free(dgate);
    free(inplace);
    free(dx);
    residual_case_free(&c);
}

static void test_residual(const backends *bs, test_rng *rng)
{
    test_residual_shape(bs, rng, 37, 5, 24);
    test_residual_shape(bs, rng, 41, 8, 150);
}

/* ------------------------------------------------------------------------
 * SiLU and GELU
 * ---------------------------------------------------------------------- */

static double silu_ref(double x)
{
    return x / (1.0 + exp(-x));
}

static double silu_grad_ref(double x)
{
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

static const double GELU_C = 0.7978845608028654;

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x)
{
    double t = tanh(GELU_C * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * 0.044715 * x * x);
}

typedef struct act_fns {
    const char *name;
    double (*f)(double);
    double (*df)(double);
    bool is_silu;
} act_fns;

static void act_forward(nctmc_backend *be, const act_fns *a, int64_t n, const float *x,
                        float *y)
{
    if (a->is_silu)
        be->ops->silu_forward(be, n, x, y);
    else
        be->ops->gelu_forward(be, n, x, y);
}

static void act_backward(nctmc_backend *be, const act_fns *a, int64_t n, const float *x,
                         const float *dy, float *dx, bool accumulate)
{
    if (a->is_silu)
        be->ops->silu_backward(be, n, x, dy, dx, accumulate);
    else
        be->ops->gelu_backward(be, n, x, dy, dx);
}

static void act_check_reference(const act_fns *a, size_t n, const float *x, const float *dy,
                                const float *y, const float *dx)
{
    double *want_y = dvec_new(n), *want_dx = dvec_new(n);
    for (size_t e = 0; e < n; e++) {
        want_y[e] = a->f(x[e]);
        want_dx[e] = (double)dy[e] * a->df(x[e]);
    }
    char what[96];
    snprintf(what, sizeof what, "%s forward vs reference", a->name);
    check_array(y, want_y, n, 2e-6, 1e-6, what);
    snprintf(what, sizeof what, "%s backward vs reference", a->name);
    check_array(dx, want_dx, n, 1e-5, 2e-6, what);
    free(want_y);
    free(want_dx);
}

/* dx with dy = 1 against central differences of the kernel's own forward. */
static void act_check_fd(nctmc_backend *be, const act_fns *a, size_t n, const float *x)
{
    const double eps = 1e-2;
    float *xp = vec_new(n), *xm = vec_new(n), *yp = vec_new(n), *ym = vec_new(n);
    float *ones = vec_new(n), *dx = vec_new(n);
    vec_fill(ones, n, 1.0f);
    for (size_t e = 0; e < n; e++) {
        xp[e] = (float)(x[e] + eps);
        xm[e] = (float)(x[e] - eps);
    }
    act_forward(be, a, (int64_t)n, xp, yp);
    act_forward(be, a, (int64_t)n, xm, ym);
    act_backward(be, a, (int64_t)n, x, ones, dx, false);
    double *fd = dvec_new(n);
    for (size_t e = 0; e < n; e++)
        fd[e] = ((double)yp[e] - ym[e]) / ((double)xp[e] - xm[e]);
    char what[96];
    snprintf(what, sizeof what, "%s backward vs finite differences", a->name);
    check_array(dx, fd, n, 1e-3, 1e-3, what);
    free(xp);
    free(xm);
    free(yp);
    free(ym);
    free(ones);
    free(dx);
    free(fd);
}

static void act_check_aliasing(const backends *bs, const act_fns *a, size_t n, const float *x,
                               const float *dy, const float *y, const float *dx,
                               test_rng *rng)
{
    char what[96];
    float *buf = vec_copy(x, n);
    act_forward(bs->be[1], a, (int64_t)n, buf, buf);
    snprintf(what, sizeof what, "%s forward in place", a->name);
    check_same_bits(buf, y, n, what);
    memcpy(buf, dy, n * sizeof *buf);
    act_backward(bs->be[2], a, (int64_t)n, x, buf, buf, false);
    snprintf(what, sizeof what, "%s backward with dx == dy", a->name);
    check_same_bits(buf, dx, n, what);
    if (a->is_silu) {
        float *acc = vec_rand(rng, n, -1.0f, 1.0f), *want = vec_new(n);
        for (size_t e = 0; e < n; e++)
            want[e] = acc[e] + dx[e];
        act_backward(bs->be[0], a, (int64_t)n, x, dy, acc, true);
        check_same_bits(acc, want, n, "silu backward accumulate vs dx + plain result");
        free(acc);
        free(want);
    }
    free(buf);
}

static void test_activation(const backends *bs, test_rng *rng, const act_fns *a)
{
    /* several tasks of the kernels' fixed chunking, with a partial last one */
    const size_t n = 2 * 16384 + 1001;
    float *x = vec_rand(rng, n, -8.0f, 8.0f), *dy = vec_rand(rng, n, -1.0f, 1.0f);
    for (size_t e = 0; e < n; e += 97)
        x[e] = (e / 97) % 2 ? 60.0f + (float)(e % 30) : -60.0f - (float)(e % 30);
    float *y[N_BACKENDS], *dx[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++) {
        y[t] = vec_new(n);
        dx[t] = vec_new(n);
        vec_fill(dx[t], n, NAN);
        act_forward(bs->be[t], a, (int64_t)n, x, y[t]);
        act_backward(bs->be[t], a, (int64_t)n, x, dy, dx[t], false);
    }
    act_check_reference(a, n, x, dy, y[0], dx[0]);
    act_check_fd(bs->be[0], a, n, x);
    act_check_aliasing(bs, a, n, x, dy, y[0], dx[0], rng);
    char what[96];
    for (int t = 1; t < N_BACKENDS; t++) {
        snprintf(what, sizeof what, "%s forward across thread counts", a->name);
        check_same_bits(y[t], y[0], n, what);
        snprintf(what, sizeof what, "%s backward across thread counts", a->name);
        check_same_bits(dx[t], dx[0], n, what);
    }
    for (int t = 0; t < N_BACKENDS; t++) {
        free(y[t]);
        free(dx[t]);
    }
    free(x);
    free(dy);
}

static void test_activations(const backends *bs, test_rng *rng)
{
    const act_fns silu = {"silu", silu_ref, silu_grad_ref, true};
    const act_fns gelu = {"gelu", gelu_ref, gelu_grad_ref, false};
    test_activation(bs, rng, &silu);
    test_activation(bs, rng, &gelu);
}

/* ------------------------------------------------------------------------
 * L_cond and the jump outputs: a brute force from the definition
 *   l = sum_{j != i} f(Rhat_j, lambda r_j),  f(a, b) = a log(a / b) - a + b,
 *   Rhat_j = R_t(j, i) q(j | x0) / q(i | x0),  R_t(j, i) = sigma pi_i,
 *   r = softmax over j != i,
 * with the schedules, priors and rate link written out here again.
 * ---------------------------------------------------------------------- */

static const double TEST_PI = 3.14159265358979323846;

/* a_t and a'_t */
static double bf_alpha(const nctmc_fp *fp, double t, double *dalpha)
{
    switch (fp->schedule) {
    case NCTMC_FP_COSINE:
        *dalpha = -0.5 * TEST_PI * sin(0.5 * TEST_PI * t);
        return cos(0.5 * TEST_PI * t);
    case NCTMC_FP_LOGLINEAR:
        *dalpha = -(1.0 - (double)fp->schedule_eps);
        return 1.0 + *dalpha * t;
    default:
        *dalpha = -1.0;
        return 1.0 - t;
    }
}

static double bf_sigma(const nctmc_fp *fp, double t)
{
    double da, a = bf_alpha(fp, t, &da);
    return -da / a;
}

static double bf_prior(const nctmc_fp *fp, int32_t j)
{
    int32_t s = fp->vocab;
    switch (fp->process) {
    case NCTMC_FP_MASKED: return j == s - 1 ? 1.0 : 0.0;
    case NCTMC_FP_MIXTURE:
        return j == s - 1 ? 1.0 - fp->mixture_uniform : fp->mixture_uniform / (double)(s - 1);
    default: return 1.0 / s;
    }
}

static double bf_q(const nctmc_fp *fp, double a, int32_t j, int32_t x0)
{
    return (j == x0 ? a : 0.0) + (1.0 - a) * bf_prior(fp, j);
}

/* Rhat_j for j != i (0 at j = i) */
static double bf_rhat(const nctmc_fp *fp, double t, int32_t i, int32_t x0, int32_t j)
{
    if (j == i)
        return 0.0;
    double da, a = bf_alpha(fp, t, &da);
    double sigma = -da / a;
    return sigma * bf_prior(fp, i) * bf_q(fp, a, j, x0) / bf_q(fp, a, i, x0);
}

/* log lambda_theta: h + log sigma_t, or for the masked process the exact
 * exit rate (the conditional rate out of the mask, the same for every x0;
 * no rate out of a data token). */
static double bf_log_lambda(const nctmc_fp *fp, double t, int32_t i, double h)
{
    if (fp->process != NCTMC_FP_MASKED)
        return h + log(bf_sigma(fp, t));
    if (i != fp->vocab - 1)
        return -INFINITY;
    double lam = 0.0;
    for (int32_t j = 0; j < fp->vocab; j++)
        lam += bf_rhat(fp, t, i, 0, j);
    return log(lam);
}

static double bf_f(double a, double b)
{
    return a > 0.0 ? a * log(a / b) - a + b : b;
}

static double bf_lse(const double *z, int32_t s, int32_t i)
{
    double m = -INFINITY, sum = 0.0;
    for (int32_t j = 0; j < s; j++)
        if (j != i && z[j] > m)
            m = z[j];
    for (int32_t j = 0; j < s; j++)
        if (j != i)
            sum += exp(z[j] - m);
    return m + log(sum);
}

static double bf_loss(const nctmc_fp *fp, double t, int32_t i, int32_t x0, const double *z,
                      double log_lambda)
{
    int32_t s = fp->vocab;
    double lse = bf_lse(z, s, i), lam = exp(log_lambda), l = 0.0;
    for (int32_t j = 0; j < s; j++)
        if (j != i)
            l += bf_f(bf_rhat(fp, t, i, x0, j), lam * exp(z[j] - lse));
    return l;
}

/* The brute force's value and gradients (central differences in double). */
typedef struct bf_row {
    double loss, d_h, lam_hat;
    double *d_z; /* [S] */
} bf_row;

static bf_row bf_evaluate(const nctmc_fp *fp, double t, int32_t i, int32_t x0, const float *zf,
                          double h, double *z_scratch, double *d_z)
{
    int32_t s = fp->vocab;
    const double eps = 1e-5;
    for (int32_t j = 0; j < s; j++)
        z_scratch[j] = zf[j];
    bf_row b = {0.0, 0.0, 0.0, d_z};
    b.loss = bf_loss(fp, t, i, x0, z_scratch, bf_log_lambda(fp, t, i, h));
    for (int32_t j = 0; j < s; j++) {
        b.lam_hat += bf_rhat(fp, t, i, x0, j);
        double keep = z_scratch[j];
        z_scratch[j] = keep + eps;
        double up = bf_loss(fp, t, i, x0, z_scratch, bf_log_lambda(fp, t, i, h));
        z_scratch[j] = keep - eps;
        double down = bf_loss(fp, t, i, x0, z_scratch, bf_log_lambda(fp, t, i, h));
        z_scratch[j] = keep;
        d_z[j] = (up - down) / (2.0 * eps);
    }
    double up = bf_loss(fp, t, i, x0, z_scratch, bf_log_lambda(fp, t, i, h + eps));
    double down = bf_loss(fp, t, i, x0, z_scratch, bf_log_lambda(fp, t, i, h - eps));
    b.d_h = (up - down) / (2.0 * eps);
    return b;
}

typedef struct lcond_case {
    nctmc_fp fp;
    int64_t n;
    int32_t seq_len, vocab, stride, n_seq;
    float *logits, *rate_h, *times;
    int32_t *x_t, *x_0;
    float grad_scale;
} lcond_case;

static int32_t pick_state(test_rng *rng, const nctmc_fp *fp, int64_t r, int32_t x0)
{
    int32_t s = fp->vocab, mask = fp->process == NCTMC_FP_UNIFORM ? -1 : s - 1;
    int32_t n_data = mask < 0 ? s : s - 1;
    /* the masked process only ever holds x0 or the mask */
    if (fp->process == NCTMC_FP_MASKED)
        return r % 3 == 0 ? x0 : mask;
    switch (r % 4) {
    case 0: return x0;
    case 1: return mask >= 0 ? mask : (x0 + 1 + test_randint(rng, s - 1)) % s;
    case 2: return (x0 + 1 + test_randint(rng, n_data - 1)) % n_data;
    default: return test_randint(rng, s);
    }
}

static void fill_logit_row(test_rng *rng, float *z, int64_t r, int32_t s, int32_t stride,
                           int32_t i)
{
    for (int32_t j = 0; j < s; j++) {
        float noise = test_uniform(rng, -0.3f, 0.3f);
        switch (r % 5) {
        case 1: z[j] = -4.0f + 8.0f * (float)j / (float)s + noise; break;  /* max grows */
        case 2: z[j] = 4.0f - 8.0f * (float)j / (float)s + noise; break;
        default: z[j] = test_uniform(rng, -3.0f, 3.0f); break;
        }
    }
    /* the current token's logit must be excluded, not merely outweighed */
    if (r % 7 == 3)
        z[i] = 30.0f;
    for (int32_t j = s; j < stride; j++)
        z[j] = NAN;
}

static lcond_case lcond_case_make(test_rng *rng, int32_t process, int32_t schedule, int64_t n,
                                  int32_t seq_len, int32_t s, int32_t stride)
{
    lcond_case c;
    c.fp = (nctmc_fp){process, schedule, s, 0.3f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    c.n = n;
    c.seq_len = seq_len;
    c.vocab = s;
    c.stride = stride;
    c.n_seq = (int32_t)((n + seq_len - 1) / seq_len);
    c.logits = vec_new((size_t)n * (size_t)stride);
    c.rate_h = process == NCTMC_FP_MASKED ? NULL : vec_rand(rng, (size_t)n, -2.0f, 2.0f);
    c.times = vec_new((size_t)c.n_seq);
    c.x_t = calloc((size_t)n, sizeof *c.x_t);
    c.x_0 = calloc((size_t)n, sizeof *c.x_0);
    c.grad_scale = 1.0f / (float)n;
    int32_t n_data = process == NCTMC_FP_UNIFORM ? s : s - 1;
    for (int32_t b = 0; b < c.n_seq; b++)
        c.times[b] = 0.02f + 0.96f * ((float)b + test_uniform(rng, 0.0f, 1.0f)) / (float)c.n_seq;
    for (int64_t r = 0; r < n; r++) {
        c.x_0[r] = test_randint(rng, n_data);
        c.x_t[r] = pick_state(rng, &c.fp, r, c.x_0[r]);
        /* the ends and the chunk edges of the streaming pass as the excluded token */
        if (r < 4 && s > 64 && process != NCTMC_FP_MASKED)
            c.x_t[r] = (int32_t[]){0, 63, 64, s - 1}[r];
        fill_logit_row(rng, c.logits + r * stride, r, s, stride, c.x_t[r]);
    }
    return c;
}

static void lcond_case_free(lcond_case *c)
{
    free(c->logits);
    free(c->rate_h);
    free(c->times);
    free(c->x_t);
    free(c->x_0);
}

static nctmc_lcond_args lcond_args(const lcond_case *c, const float *logits,
                                   const float *rate_h, float *loss, float *d_logits,
                                   float *d_rate_h)
{
    nctmc_lcond_args a = {c->n,        c->seq_len, c->stride, logits,   rate_h,
                          c->x_t,      c->x_0,     c->times,  c->fp,    c->grad_scale,
                          loss,        d_logits,   d_rate_h,  NULL,   false};
    return a;
}

typedef struct lcond_out {
    float *loss, *d_logits, *d_rate_h;
} lcond_out;

static lcond_out lcond_run(nctmc_backend *be, const lcond_case *c)
{
    lcond_out o = {vec_new((size_t)c->n), vec_new((size_t)c->n * (size_t)c->stride),
                   vec_new((size_t)c->n)};
    vec_fill(o.d_logits, (size_t)c->n * (size_t)c->stride, NAN);
    vec_fill(o.d_rate_h, (size_t)c->n, NAN);
    nctmc_lcond_args a = lcond_args(c, c->logits, c->rate_h, o.loss, o.d_logits, o.d_rate_h);
    be->ops->lcond(be, &a);
    return o;
}

static void lcond_out_free(lcond_out *o)
{
    free(o->loss);
    free(o->d_logits);
    free(o->d_rate_h);
}

static const char *process_name(int32_t p)
{
    return p == NCTMC_FP_MASKED ? "masked" : p == NCTMC_FP_MIXTURE ? "mixture" : "uniform";
}

static const char *schedule_name(int32_t s)
{
    return s == NCTMC_FP_COSINE ? "cosine" : s == NCTMC_FP_LOGLINEAR ? "loglinear" : "linear";
}

/* Value and gradients against the brute force, row by row; the tolerance of
 * a row scales with its rates (the loss is a sum of rates). */
static void lcond_check_brute_force(const lcond_case *c, const lcond_out *o, const char *tag)
{
    int32_t s = c->vocab;
    double *zs = dvec_new((size_t)s), *dz = dvec_new((size_t)s);
    double worst_loss = 0.0, worst_dz = 0.0, worst_dh = 0.0;
    int64_t at_loss = 0, at_dz = 0, at_dh = 0;
    bool exact_zeros = true;
    for (int64_t r = 0; r < c->n; r++) {
        double t = c->times[r / c->seq_len];
        double h = c->rate_h ? c->rate_h[r] : 0.0;
        int32_t i = c->x_t[r];
        bf_row b = bf_evaluate(&c->fp, t, i, c->x_0[r], c->logits + r * c->stride, h, zs, dz);
        double scale = 1.0 + b.lam_hat + exp(bf_log_lambda(&c->fp, t, i, h));
        double e = fabs(o->loss[r] - b.loss) / (2e-6 * scale + 2e-6 * fabs(b.loss));
        if (e > worst_loss) {
            worst_loss = e;
            at_loss = r;
        }
        const float *d = o->d_logits + r * c->stride;
        for (int32_t j = 0; j < s; j++) {
            double g = d[j] / c->grad_scale;
            double ej = fabs(g - b.d_z[j]) / (1e-6 * scale + 1e-5 * fabs(b.d_z[j]));
            if (ej > worst_dz) {
                worst_dz = ej;
                at_dz = r;
            }
        }
        exact_zeros = exact_zeros && d[i] == 0.0f;
        for (int32_t j = s; j < c->stride; j++)
            exact_zeros = exact_zeros && d[j] == 0.0f;
        double want_dh = c->fp.process == NCTMC_FP_MASKED ? 0.0 : b.d_h;
        double eh = fabs(o->d_rate_h[r] / c->grad_scale - want_dh) /
                    (1e-6 * scale + 1e-6 * fabs(want_dh));
        if (c->fp.process == NCTMC_FP_MASKED)
            eh = o->d_rate_h[r] == 0.0f ? 0.0 : INFINITY;
        if (eh > worst_dh) {
            worst_dh = eh;
            at_dh = r;
        }
    }
    CHECK(worst_loss <= 1.0, "%s: loss vs brute force, worst row %lld is %.3g tolerances off",
          tag, (long long)at_loss, worst_loss);
    CHECK(worst_dz <= 1.0, "%s: d_logits vs brute force, worst row %lld is %.3g tolerances off",
          tag, (long long)at_dz, worst_dz);
    CHECK(worst_dh <= 1.0, "%s: d_rate_h vs brute force, worst row %lld is %.3g tolerances off",
          tag, (long long)at_dh, worst_dh);
    CHECK(exact_zeros, "%s: d_logits not exactly 0 at the current token or in the padding", tag);
    free(zs);
    free(dz);
}

/* d_logits and d_rate_h against central differences of the kernel's own
 * loss. Rows are independent, so one column is perturbed in all rows at
 * once. */
static void lcond_check_kernel_fd(nctmc_backend *be, const lcond_case *c, const lcond_out *o,
                                  const char *tag)
{
    size_t n_logits = (size_t)c->n * (size_t)c->stride;
    float *z = vec_copy(c->logits, n_logits);
    float *h = c->rate_h ? vec_copy(c->rate_h, (size_t)c->n) : NULL;
    float *up = vec_new((size_t)c->n), *down = vec_new((size_t)c->n);
    const float eps = 1e-2f;
    double worst = 0.0;
    for (int32_t j = 0; j <= c->vocab; j++) {
        bool is_h = j == c->vocab;
        if (is_h && !h)
            break;
        for (int sign = 0; sign < 2; sign++) {
            for (int64_t r = 0; r < c->n; r++) {
                float *p = is_h ? &h[r] : &z[r * c->stride + j];
                *p = (is_h ? c->rate_h[r] : c->logits[r * c->stride + j]) +
                     (sign ? -eps : eps);
            }
            nctmc_lcond_args a = lcond_args(c, z, h, sign ? down : up, NULL, NULL);
            be->ops->lcond(be, &a);
        }
        for (int64_t r = 0; r < c->n; r++) {
            float *p = is_h ? &h[r] : &z[r * c->stride + j];
            *p = is_h ? c->rate_h[r] : c->logits[r * c->stride + j];
            double fd = ((double)up[r] - down[r]) / (2.0 * eps);
            double an = (is_h ? o->d_rate_h[r] : o->d_logits[r * c->stride + j]) / c->grad_scale;
            double e = fabs(fd - an) / (1e-4 * (1.0 + fabs(o->loss[r])) + 1e-3 * fabs(an));
            worst = e > worst ? e : worst;
        }
    }
    CHECK(worst <= 1.0, "%s: gradients vs finite differences of the kernel's loss: %.3g "
          "tolerances off", tag, worst);
    free(z);
    free(h);
    free(up);
    free(down);
}

static void lcond_check_variants(const backends *bs, const lcond_case *c, const lcond_out *o,
                                 const char *tag)
{
    size_t n_logits = (size_t)c->n * (size_t)c->stride;
    /* gradients computed in place over the logits */
    float *buf = vec_copy(c->logits, n_logits), *loss = vec_new((size_t)c->n);
    float *d_h = vec_new((size_t)c->n);
    nctmc_lcond_args a = lcond_args(c, buf, c->rate_h, loss, buf, d_h);
    bs->be[1]->ops->lcond(bs->be[1], &a);
    CHECK(same_bits(buf, o->d_logits, n_logits) && same_bits(loss, o->loss, (size_t)c->n),
          "%s: in-place d_logits differ from out-of-place", tag);
    /* no gradients asked for: the same loss */
    vec_fill(loss, (size_t)c->n, NAN);
    a = lcond_args(c, c->logits, c->rate_h, loss, NULL, NULL);
    bs->be[2]->ops->lcond(bs->be[2], &a);
    CHECK(same_bits(loss, o->loss, (size_t)c->n), "%s: loss without gradients differs", tag);
    free(buf);
    free(loss);
    free(d_h);
}

/* Per-sequence weights (importance sampling of t): each row's gradients
 * are bit for bit those of an unweighted pass with grad_scale times its
 * sequence's weight (0 included), and the loss is untouched. */
static void lcond_check_seq_weight(nctmc_backend *be, const lcond_case *c, const lcond_out *o,
                                   const char *tag)
{
    size_t n = (size_t)c->n, n_logits = n * (size_t)c->stride;
    float *w = vec_new((size_t)c->n_seq);
    for (int32_t b = 0; b < c->n_seq; b++)
        w[b] = b % 3 == 1 ? 0.0f : 0.3f + 0.55f * (float)b;
    float *loss = vec_new(n), *dz = vec_new(n_logits), *dh = vec_new(n);
    nctmc_lcond_args a = lcond_args(c, c->logits, c->rate_h, loss, dz, dh);
    a.seq_weight = w;
    be->ops->lcond(be, &a);
    CHECK(same_bits(loss, o->loss, n), "%s: weights changed the per-position loss", tag);
    float *rl = vec_new(n), *rz = vec_new(n_logits), *rh = vec_new(n);
    bool same = true, weighted = false;
    for (int32_t b = 0; b < c->n_seq; b++) {
        lcond_case scaled = *c;
        scaled.grad_scale = c->grad_scale * w[b];
        a = lcond_args(&scaled, c->logits, c->rate_h, rl, rz, rh);
        be->ops->lcond(be, &a);
        size_t r0 = (size_t)b * (size_t)c->seq_len;
        size_t rows = n - r0 < (size_t)c->seq_len ? n - r0 : (size_t)c->seq_len;
        size_t at = r0 * (size_t)c->stride, len = rows * (size_t)c->stride;
        same = same && same_bits(dz + at, rz + at, len) && same_bits(dh + r0, rh + r0, rows);
        /* the weights did something: a weight other than 1 moved a gradient */
        weighted = weighted || (w[b] != 1.0f && !same_bits(dz + at, o->d_logits + at, len));
    }
    CHECK(same, "%s: weighted gradients differ from grad_scale x weight", tag);
    CHECK(weighted, "%s: the weights left every gradient as it was", tag);
    free(w);
    free(loss);
    free(dz);
    free(dh);
    free(rl);
    free(rz);
    free(rh);
}

static void test_lcond_case(const backends *bs, test_rng *rng, int32_t process,
                            int32_t schedule, int64_t n, int32_t seq_len, int32_t s,
                            int32_t stride, bool kernel_fd)
{
    lcond_case c = lcond_case_make(rng, process, schedule, n, seq_len, s, stride);
    char tag[96];
    snprintf(tag, sizeof tag, "lcond %s/%s S=%d V=%d", process_name(process),
             schedule_name(schedule), s, stride);
    lcond_out o[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++)
        o[t] = lcond_run(bs->be[t], &c);
    lcond_check_brute_force(&c, &o[0], tag);
    if (kernel_fd)
        lcond_check_kernel_fd(bs->be[0], &c, &o[0], tag);
    lcond_check_variants(bs, &c, &o[0], tag);
    lcond_check_seq_weight(bs->be[1], &c, &o[0], tag);
    size_t n_logits = (size_t)n * (size_t)stride;
    for (int t = 1; t < N_BACKENDS; t++)
        CHECK(same_bits(o[t].loss, o[0].loss, (size_t)n) &&
                  same_bits(o[t].d_logits, o[0].d_logits, n_logits) &&
                  same_bits(o[t].d_rate_h, o[0].d_rate_h, (size_t)n),
              "%s: outputs differ between 1 and %d threads", tag, t + 1);
    for (int t = 0; t < N_BACKENDS; t++)
        lcond_out_free(&o[t]);
    lcond_case_free(&c);
}

/* ---- jump outputs ---- */

static void jump_run(nctmc_backend *be, const lcond_case *c, float *log_rate, float *logprobs)
{
    nctmc_jump_output_args a = {c->n, c->seq_len, c->stride, c->logits, c->rate_h,
                                c->x_t, c->times, c->fp, log_rate, logprobs};
    be->ops->jump_output(be, &a);
}

static void test_jump_output_case(const backends *bs, test_rng *rng, int32_t process,
                                  int32_t schedule, int64_t n, int32_t seq_len, int32_t s,
                                  int32_t stride)
{
    lcond_case c = lcond_case_make(rng, process, schedule, n, seq_len, s, stride);
    char tag[96];
    snprintf(tag, sizeof tag, "jump_output %s/%s S=%d V=%d", process_name(process),
             schedule_name(schedule), s, stride);
    size_t n_lp = (size_t)n * (size_t)s;
    double *want_rate = dvec_new((size_t)n), *want_lp = dvec_new(n_lp);
    double *zs = dvec_new((size_t)s);
    for (int64_t r = 0; r < n; r++) {
        double t = c.times[r / seq_len];
        int32_t i = c.x_t[r];
        want_rate[r] = bf_log_lambda(&c.fp, t, i, c.rate_h ? c.rate_h[r] : 0.0);
        for (int32_t j = 0; j < s; j++)
            zs[j] = c.logits[r * stride + j];
        double lse = bf_lse(zs, s, i);
        for (int32_t j = 0; j < s; j++)
            want_lp[r * s + j] = j == i ? -INFINITY : zs[j] - lse;
    }
    float *rate[N_BACKENDS], *lp[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++) {
        rate[t] = vec_new((size_t)n);
        lp[t] = vec_new(n_lp);
        jump_run(bs->be[t], &c, rate[t], lp[t]);
    }
    char what[160];
    snprintf(what, sizeof what, "%s: log rate vs brute force", tag);
    check_array(rate[0], want_rate, (size_t)n, 1e-6, 1e-6, what);
    snprintf(what, sizeof what, "%s: jump log-probs vs brute force", tag);
    check_array(lp[0], want_lp, n_lp, 1e-6, 3e-6, what);
    for (int t = 1; t < N_BACKENDS; t++)
        CHECK(same_bits(rate[t], rate[0], (size_t)n) && same_bits(lp[t], lp[0], n_lp),
              "%s: outputs differ between 1 and %d threads", tag, t + 1);
    /* each output may be skipped alone */
    float *only_rate = vec_new((size_t)n), *only_lp = vec_new(n_lp);
    jump_run(bs->be[1], &c, only_rate, NULL);
    jump_run(bs->be[1], &c, NULL, only_lp);
    CHECK(same_bits(only_rate, rate[0], (size_t)n) && same_bits(only_lp, lp[0], n_lp),
          "%s: outputs change when the other one is skipped", tag);
    for (int t = 0; t < N_BACKENDS; t++) {
        free(rate[t]);
        free(lp[t]);
    }
    free(only_rate);
    free(only_lp);
    free(want_rate);
    free(want_lp);
    free(zs);
    lcond_case_free(&c);
}

static void test_loss(const backends *bs, test_rng *rng)
{
    for (int32_t p = NCTMC_FP_UNIFORM; p <= NCTMC_FP_MIXTURE; p++) {
        for (int32_t sch = NCTMC_FP_LINEAR; sch <= NCTMC_FP_LOGLINEAR; sch++) {
            test_lcond_case(bs, rng, p, sch, 37, 5, 13, 16, true);
            test_jump_output_case(bs, rng, p, sch, 37, 5, 13, 16);
        }
        /* several chunks of the streaming pass, with a partial one */
        test_lcond_case(bs, rng, p, (p + 1) % 3, 23, 4, 300, 320, false);
        test_jump_output_case(bs, rng, p, (p + 2) % 3, 23, 4, 300, 320);
    }
}

/* ------------------------------------------------------------------------
 * optimiser operations
 * ---------------------------------------------------------------------- */

static void test_sum_squares_size(const backends *bs, test_rng *rng, size_t n)
{
    float *x = vec_rand(rng, n, -2.0f, 2.0f);
    long double want = 0.0L;
    for (size_t e = 0; e < n; e++)
        want += (long double)x[e] * (long double)x[e];
    double got[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++)
        got[t] = bs->be[t]->ops->sum_squares(bs->be[t], (int64_t)n, x);
    char what[64];
    snprintf(what, sizeof what, "sum_squares of %zu floats", n);
    CHECK_CLOSE(got[0], (double)want, 1e-12, 0.0, what);
    for (int t = 1; t < N_BACKENDS; t++)
        CHECK(memcmp(&got[t], &got[0], sizeof got[0]) == 0,
              "sum_squares of %zu floats differs between 1 and %d threads", n, t + 1);
    free(x);
}

static void test_scale_ema(const backends *bs, test_rng *rng)
{
    const size_t n = 3 * 16384 + 333;
    float *x = vec_rand(rng, n, -3.0f, 3.0f), *p = vec_rand(rng, n, -3.0f, 3.0f);
    float *want = vec_new(n), *ema0 = vec_new(n);
    const float s = 0.7314f, decay = 0.9993f;
    for (int t = 0; t < N_BACKENDS; t++) {
        float *y = vec_copy(x, n);
        bs->be[t]->ops->scale(bs->be[t], (int64_t)n, y, s);
        for (size_t e = 0; e < n; e++)
            want[e] = x[e] * s;
        check_same_bits(y, want, n, "scale vs x * s");
        bs->be[t]->ops->add(bs->be[t], (int64_t)n, y, p);
        for (size_t e = 0; e < n; e++)
            want[e] = want[e] + p[e];
        check_same_bits(y, want, n, "add vs y + x, one rounding");
        memcpy(y, x, n * sizeof *y);
        bs->be[t]->ops->ema_update(bs->be[t], (int64_t)n, y, p, decay);
        double *ref = dvec_new(n);
        for (size_t e = 0; e < n; e++)
            ref[e] = (double)decay * x[e] + (1.0 - (double)decay) * p[e];
        check_array(y, ref, n, 1e-6, 1e-6, "ema_update vs reference");
        if (t == 0)
            memcpy(ema0, y, n * sizeof *y);
        else
            check_same_bits(y, ema0, n, "ema_update across thread counts");
        free(ref);
        free(y);
    }
    free(x);
    free(p);
    free(want);
    free(ema0);
}

/* Three AdamW steps against a double-precision reference of backend.h's
 * formula: bias correction by step, decay from the parameter before the
 * step. The decay and rate are large, so decaying the updated parameter
 * instead would be far outside the tolerance. */
static void test_adamw(const backends *bs, test_rng *rng)
{
    const size_t n = 2 * 16384 + 777;
    const float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-6f, wd = 0.5f;
    float *p0 = vec_rand(rng, n, -1.0f, 1.0f);
    float *g[3];
    for (int s = 0; s < 3; s++)
        g[s] = vec_rand(rng, n, -1.0f, 1.0f);
    double *rp = dvec_new(n), *rm = dvec_new(n), *rv = dvec_new(n);
    float *out_p[N_BACKENDS], *out_m[N_BACKENDS], *out_v[N_BACKENDS];
    for (size_t e = 0; e < n; e++)
        rp[e] = p0[e];
    for (int s = 0; s < 3; s++) {
        double bc1 = 1.0 - pow(b1, s + 1), bc2 = 1.0 - pow(b2, s + 1);
        for (size_t e = 0; e < n; e++) {
            rm[e] = b1 * rm[e] + (1.0 - b1) * g[s][e];
            rv[e] = b2 * rv[e] + (1.0 - b2) * (double)g[s][e] * g[s][e];
            double old = rp[e];
            rp[e] -= lr * (rm[e] / bc1) / (sqrt(rv[e] / bc2) + eps);
            rp[e] -= lr * wd * old;
        }
    }
    for (int t = 0; t < N_BACKENDS; t++) {
        out_p[t] = vec_copy(p0, n);
        out_m[t] = vec_new(n);
        out_v[t] = vec_new(n);
        for (int s = 0; s < 3; s++)
            bs->be[t]->ops->adamw(bs->be[t], (int64_t)n, out_p[t], g[s], out_m[t], out_v[t],
                                  lr, b1, b2, eps, wd, s + 1);
    }
    check_array(out_p[0], rp, n, 1e-5, 1e-6, "adamw parameters vs reference");
    check_array(out_m[0], rm, n, 1e-5, 1e-7, "adamw first moment vs reference");
    check_array(out_v[0], rv, n, 1e-5, 1e-8, "adamw second moment vs reference");
    for (int t = 1; t < N_BACKENDS; t++) {
        check_same_bits(out_p[t], out_p[0], n, "adamw parameters across thread counts");
        check_same_bits(out_m[t], out_m[0], n, "adamw first moment across thread counts");
        check_same_bits(out_v[t], out_v[0], n, "adamw second moment across thread counts");
    }
    for (int t = 0; t < N_BACKENDS; t++) {
        free(out_p[t]);
        free(out_m[t]);
        free(out_v[t]);
    }
    for (int s = 0; s < 3; s++)
        free(g[s]);
    free(p0);
    free(rp);
    free(rm);
    free(rv);
}

static void test_optim(const backends *bs, test_rng *rng)
{
    test_sum_squares_size(bs, rng, 1);
    test_sum_squares_size(bs, rng, 3 * 16384 + 77);
    /* more than SUMSQ_MAX_BLOCKS minimum-size blocks: the block size grows */
    test_sum_squares_size(bs, rng, (size_t)1024 * 16384 + 4099);
    test_scale_ema(bs, rng);
    test_adamw(bs, rng);
}

int main(void)
{
    backends bs;
    char err[256];
    for (int t = 0; t < N_BACKENDS; t++) {
        bs.be[t] = cpu_backend_create(t + 1, err, sizeof err);
        if (!bs.be[t]) {
            fprintf(stderr, "cannot create a %d-thread CPU backend: %s\n", t + 1, err);
            return 1;
        }
    }
    test_rng rng = test_rng_seed(20240611);
    test_adaln(&bs, &rng);
    test_residual(&bs, &rng);
    test_activations(&bs, &rng);
    test_loss(&bs, &rng);
    test_optim(&bs, &rng);
    for (int t = 0; t < N_BACKENDS; t++)
        bs.be[t]->ops->destroy(bs.be[t]);
    return test_finish("cpu_pointwise");
}
