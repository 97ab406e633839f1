/*
 * test_cpu_dense.c — the CPU backend's dense operations: GEMM, linear,
 * attention, rotary, embeddings and timestep features.
 *
 * Every operation is compared with a double-precision reference written
 * here, every backward pass with central finite differences of its forward
 * pass, every accumulate flag both ways, and every output bit for bit across
 * backends of 1, 2 and 3 threads. Inputs are random and non-zero; sizes are
 * odd so that no tile, chunk or vector lane divides them evenly. The CPU
 * backend's memory is host memory, so the buffers here are plain malloc.
 */
#include "cpu/cpu_backend.h"
#include "cpu/cpu_gemm.h"
#include "test_util.h"

#include <string.h>

#define N_BACKENDS 3
/* Float finite differences: a step of 1e-3 leaves truncation error near
 * 1e-6 and rounding error near 1e-4 relative for objectives of this size. */
#define FD_EPS 1e-3f
#define FD_PROBES 24

typedef struct backends {
    nctmc_backend *be[N_BACKENDS]; /* 1, 2 and 3 threads */
} backends;

/* ---- buffers and comparisons ---------------------------------------- */

static void *checked_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_cpu_dense: out of memory\n");
        exit(2);
    }
    return p;
}

static float *new_floats(size_t n)
{
    return checked_malloc(n * sizeof(float));
}

static double *new_doubles(size_t n)
{
    return checked_malloc(n * sizeof(double));
}

static float *random_floats(test_rng *rng, size_t n, float lo, float hi)
{
    float *x = new_floats(n);
    test_fill_uniform(rng, x, n, lo, hi);
    return x;
}

static float *copy_floats(const float *x, size_t n)
{
    float *y = new_floats(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* Marks an output that must be overwritten: any NaN left shows through. */
static void fill_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

/* Largest |got - want| / max(|want|, 1) must be <= tol (NaN fails). */
static void check_near(const char *what, const float *got, const double *want, size_t n,
                       double tol)
{
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs(want[i]) > 1.0 ? fabs(want[i]) : 1.0;
        double e = fabs((double)got[i] - want[i]) / den;
        if (isnan(e))
            e = INFINITY;
        if (e > worst) {
            worst = e;
            at = i;
        }
    }
    CHECK(worst <= tol, "%s: worst error %.3g at %zu (got %.9g want %.9g)", what, worst, at,
          n ? (double)got[at] : 0.0, n ? want[at] : 0.0);
}

static void check_same_bits(const char *what, const float *a, const float *b, size_t n,
                            int threads)
{
    CHECK(memcmp(a, b, n * sizeof(float)) == 0, "%s: %d threads differ from 1 thread", what,
          threads);
}

static double weighted_sum(const float *g, const float *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * (double)y[i];
    return s;
}

/* ---- finite differences --------------------------------------------- */

typedef double (*objective_fn)(void *ctx);

/* Compares grad with central differences of f at up to FD_PROBES entries of
 * x (all of them when x is small). f must read x afresh on each call. */
static void check_gradient(const char *what, objective_fn f, void *ctx, float *x, size_t n,
                           const float *grad, test_rng *rng, double rtol, double atol)
{
    size_t probes = n < FD_PROBES ? n : FD_PROBES;
    double worst = 0.0, worst_fd = 0.0;
    size_t worst_i = 0;
    for (size_t p = 0; p < probes; p++) {
        size_t i = n <= FD_PROBES ? p : (size_t)test_randint(rng, (int32_t)n);
        float orig = x[i];
        float hi = orig + FD_EPS, lo = orig - FD_EPS;
        x[i] = hi;
        double jp = f(ctx);
        x[i] = lo;
        double jm = f(ctx);
        x[i] = orig;
        double fd = (jp - jm) / ((double)hi - (double)lo);
        double excess = fabs(fd - (double)grad[i]) - (atol + rtol * fabs(fd));
        if (isnan(excess))
            excess = INFINITY;
        if (excess > worst) {
            worst = excess;
            worst_i = i;
            worst_fd = fd;
        }
    }
    CHECK(worst <= 0.0, "%s: finite difference %.6g vs gradient %.6g at %zu", what, worst_fd,
          (double)grad[worst_i], worst_i);
}

/* ---- GEMM ----------------------------------------------------------- */

typedef struct gemm_case {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
} gemm_case;

static float a_at(const gemm_case *gc, const float *a, int64_t lda, int64_t i, int64_t p)
{
    return gc->ta ? a[p * lda + i] : a[i * lda + p];
}

static float b_at(const gemm_case *gc, const float *b, int64_t ldb, int64_t p, int64_t j)
{
    return gc->tb ? b[j * ldb + p] : b[p * ldb + j];
}

/* want[m, n] (dense) = alpha op(A) op(B) + beta C. */
static void gemm_ref(const gemm_case *gc, const float *a, int64_t lda, const float *b,
                     int64_t ldb, const float *c, int64_t ldc, double *want)
{
    for (int64_t i = 0; i < gc->m; i++)
        for (int64_t j = 0; j < gc->n; j++) {
            double s = 0.0;
            for (int64_t p = 0; p < gc->k; p++)
                s += (double)a_at(gc, a, lda, i, p) * (double)b_at(gc, b, ldb, p, j);
            want[i * gc->n + j] = gc->alpha * s + gc->beta * (double)c[i * ldc + j];
        }
}

/* Copies the m x n block of c at row stride ldc into a dense float array. */
static void gather(const float *c, int64_t ldc, int64_t m, int64_t n, float *dense)
{
    for (int64_t i = 0; i < m; i++)
        memcpy(dense + i * n, c + i * ldc, (size_t)n * sizeof(float));
}

/* Padded strides (+3) check that ld* are honoured and the padding left
 * alone; k = 0 checks C = beta C. */
static void test_gemm_case(const backends *bs, const gemm_case *gc, test_rng *rng)
{
    int64_t a_rows = gc->ta ? gc->k : gc->m, a_cols = gc->ta ? gc->m : gc->k;
    int64_t b_rows = gc->tb ? gc->n : gc->k, b_cols = gc->tb ? gc->k : gc->n;
    int64_t lda = a_cols + 3, ldb = b_cols + 3, ldc = gc->n + 3;
    size_t c_size = (size_t)(gc->m * ldc);
    float *a = random_floats(rng, (size_t)(a_rows * lda), -1.0f, 1.0f);
    float *b = random_floats(rng, (size_t)(b_rows * ldb), -1.0f, 1.0f);
    float *c0 = random_floats(rng, c_size, -1.0f, 1.0f);
    double *want = new_doubles((size_t)(gc->m * gc->n));
    float *dense = new_floats((size_t)(gc->m * gc->n));
    float *first = NULL;
    gemm_ref(gc, a, lda, b, ldb, c0, ldc, want);
    char what[96];
    snprintf(what, sizeof what, "gemm %c%c %ldx%ldx%ld", gc->ta ? 'T' : 'N', gc->tb ? 'T' : 'N',
             (long)gc->m, (long)gc->n, (long)gc->k);
    for (int t = 0; t < N_BACKENDS; t++) {
        float *c = copy_floats(c0, c_size);
        cpu_gemm(cpu_of(bs->be[t])->pool, gc->ta, gc->tb, gc->m, gc->n, gc->k, gc->alpha, a, lda, b,
                 ldb, gc->beta, c, ldc);
        gather(c, ldc, gc->m, gc->n, dense);
        check_near(what, dense, want, (size_t)(gc->m * gc->n), 1e-4);
        bool pad_kept = true;
        for (int64_t i = 0; i < gc->m; i++)
            for (int64_t j = gc->n; j < ldc; j++)
                pad_kept = pad_kept && c[i * ldc + j] == c0[i * ldc + j];
        CHECK(pad_kept, "%s: wrote outside the m x n block", what);
        if (t == 0)
            first = c;
        else {
            check_same_bits(what, first, c, c_size, t + 1);
            free(c);
        }
    }
    free(first);
    free(a);
    free(b);
    free(c0);
    free(want);
    free(dense);
}

static void test_gemm(const backends *bs, test_rng *rng)
{
    static const gemm_case cases[] = {
        /* big enough to be cut into ragged tiles in both directions */
        {false, false, 600, 290, 40, 1.0f, 0.0f},
        {false, true, 555, 301, 33, 0.75f, 1.0f},
        {true, false, 290, 600, 41, 1.0f, -0.5f},
        {true, true, 517, 263, 35, -1.25f, 0.25f},
        /* too small to split */
        {false, true, 7, 5, 3, 1.0f, 0.0f},
        {true, false, 1, 9, 13, 2.0f, 1.0f},
        /* an empty inner dimension */
        {false, false, 17, 150, 0, 1.0f, 0.5f},
        {true, true, 9, 4, 0, 1.0f, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_gemm_case(bs, &cases[i], rng);
}

/* The tile grid follows the product's shape only, so pools of any size give
 * the bits of one thread — whatever kernel OpenBLAS runs (CI repeats this
 * test with OPENBLAS_CORETYPE=Haswell, whose kernels round an element
 * differently depending on where it lies in a call's output). */
static void test_gemm_thread_invariance(test_rng *rng)
{
    static const gemm_case cases[] = {
        {false, true, 2048, 1152, 384, 1.0f, 0.0f},  /* qkv forward */
        {false, false, 2048, 384, 1536, 1.0f, 1.0f}, /* dx of mlp.2, accumulating */
        {true, false, 384, 1536, 2048, 1.0f, 0.0f},  /* dw of mlp.0 */
        {false, true, 256, 1536, 384, 1.0f, 0.0f},   /* mlp.0 of one sequence */
        {false, true, 256, 384, 1536, 1.0f, 0.0f},   /* mlp.2 of one sequence */
        {false, true, 200, 300, 100, 1.0f, 0.0f},    /* ragged, below the split */
        {false, true, 1000, 1000, 100, 0.5f, 1.0f},  /* ragged tiles */
    };
    enum { N_POOLS = 5 };
    static const int threads[N_POOLS] = {1, 2, 3, 8, 32};
    nctmc_backend *be[N_POOLS];
    char err[256];
    for (int t = 0; t < N_POOLS; t++)
        be[t] = cpu_backend_create(threads[t], err, sizeof err);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const gemm_case *gc = &cases[i];
        int64_t lda = gc->ta ? gc->m : gc->k, ldb = gc->tb ? gc->k : gc->n;
        size_t a_n = (size_t)(gc->m * gc->k), b_n = (size_t)(gc->k * gc->n);
        size_t c_n = (size_t)(gc->m * gc->n);
        float *a = random_floats(rng, a_n, -1.0f, 1.0f), *b = random_floats(rng, b_n, -1.0f, 1.0f);
        float *c0 = random_floats(rng, c_n, -1.0f, 1.0f), *c[N_POOLS];
        for (int t = 0; t < N_POOLS; t++) {
            c[t] = copy_floats(c0, c_n);
            cpu_gemm(cpu_of(be[t])->pool, gc->ta, gc->tb, gc->m, gc->n, gc->k, gc->alpha, a, lda, b,
                     ldb, gc->beta, c[t], gc->n);
        }
        char what[96];
        snprintf(what, sizeof what, "gemm %c%c %ldx%ldx%ld", gc->ta ? 'T' : 'N',
                 gc->tb ? 'T' : 'N', (long)gc->m, (long)gc->n, (long)gc->k);
        for (int t = 1; t < N_POOLS; t++)
            check_same_bits(what, c[0], c[t], c_n, threads[t]);
        for (int t = 0; t < N_POOLS; t++)
            free(c[t]);
        free(a);
        free(b);
        free(c0);
    }
    for (int t = 0; t < N_POOLS; t++)
        be[t]->ops->destroy(be[t]);
}

/* ---- linear --------------------------------------------------------- */

/* Float sums of up to ~500 products of numbers in [-1, 1], relative to
 * max(|value|, 1): observed errors stay under 2e-5. */
#define LINEAR_TOL 2e-4

typedef struct linear_shape {
    int64_t rows;
    int32_t in, out;
} linear_shape;

typedef struct linear_data {
    linear_shape s;
    float *x, *w, *bias, *dy;
} linear_data;

static linear_data linear_data_new(linear_shape s, test_rng *rng)
{
    linear_data d = {s, NULL, NULL, NULL, NULL};
    d.x = random_floats(rng, (size_t)(s.rows * s.in), -1.0f, 1.0f);
    d.w = random_floats(rng, (size_t)s.out * (size_t)s.in, -1.0f, 1.0f);
    d.bias = random_floats(rng, (size_t)s.out, -1.0f, 1.0f);
    d.dy = random_floats(rng, (size_t)(s.rows * s.out), -1.0f, 1.0f);
    return d;
}

static void linear_data_free(linear_data *d)
{
    free(d->x);
    free(d->w);
    free(d->bias);
    free(d->dy);
}

static void linear_forward_ref(const linear_data *d, bool with_bias, double *y)
{
    for (int64_t r = 0; r < d->s.rows; r++)
        for (int32_t o = 0; o < d->s.out; o++) {
            double s = with_bias ? (double)d->bias[o] : 0.0;
            for (int32_t i = 0; i < d->s.in; i++)
                s += (double)d->x[r * d->s.in + i] * (double)d->w[(int64_t)o * d->s.in + i];
            y[r * d->s.out + o] = s;
        }
}

/* dx, dw, dbias of y = x w^T + b for the upstream gradient d->dy, plus the
 * previous values where `prev_*` is not NULL (accumulation). */
static void linear_backward_ref(const linear_data *d, const float *prev_dx,
                                const float *prev_dw, const float *prev_db, double *dx,
                                double *dw, double *db)
{
    int64_t R = d->s.rows;
    int32_t I = d->s.in, O = d->s.out;
    for (int64_t r = 0; r < R; r++)
        for (int32_t i = 0; i < I; i++) {
            double s = prev_dx ? (double)prev_dx[r * I + i] : 0.0;
            for (int32_t o = 0; o < O; o++)
                s += (double)d->dy[r * O + o] * (double)d->w[(int64_t)o * I + i];
            dx[r * I + i] = s;
        }
    for (int32_t o = 0; o < O; o++) {
        double sb = prev_db ? (double)prev_db[o] : 0.0;
        for (int64_t r = 0; r < R; r++)
            sb += (double)d->dy[r * O + o];
        db[o] = sb;
        for (int32_t i = 0; i < I; i++) {
            double s = prev_dw ? (double)prev_dw[(int64_t)o * I + i] : 0.0;
            for (int64_t r = 0; r < R; r++)
                s += (double)d->dy[r * O + o] * (double)d->x[r * I + i];
            dw[(int64_t)o * I + i] = s;
        }
    }
}

static void test_linear_forward(const backends *bs, linear_shape s, test_rng *rng)
{
    linear_data d = linear_data_new(s, rng);
    size_t ny = (size_t)(s.rows * s.out);
    double *want = new_doubles(ny);
    float *y[N_BACKENDS];
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        linear_forward_ref(&d, with_bias, want);
        for (int t = 0; t < N_BACKENDS; t++) {
            y[t] = new_floats(ny);
            fill_nan(y[t], ny);
            bs->be[t]->ops->linear_forward(bs->be[t], s.rows, s.in, s.out, d.x, d.w,
                                           with_bias ? d.bias : NULL, y[t]);
            check_near(with_bias ? "linear_forward with bias" : "linear_forward", y[t], want,
                       ny, LINEAR_TOL);
            if (t > 0)
                check_same_bits("linear_forward", y[0], y[t], ny, t + 1);
        }
        for (int t = 0; t < N_BACKENDS; t++)
            free(y[t]);
    }
    free(want);
    linear_data_free(&d);
}

typedef struct linear_grads {
    float *dx, *dw, *db;
} linear_grads;

static linear_grads linear_grads_new(linear_shape s, const linear_grads *init)
{
    size_t nx = (size_t)(s.rows * s.in), nw = (size_t)s.out * (size_t)s.in;
    linear_grads g = {new_floats(nx), new_floats(nw), new_floats((size_t)s.out)};
    if (init) {
        memcpy(g.dx, init->dx, nx * sizeof(float));
        memcpy(g.dw, init->dw, nw * sizeof(float));
        memcpy(g.db, init->db, (size_t)s.out * sizeof(float));
    } else {
        fill_nan(g.dx, nx);
        fill_nan(g.dw, nw);
        fill_nan(g.db, (size_t)s.out);
    }
    return g;
}

static void linear_grads_free(linear_grads *g)
{
    free(g->dx);
    free(g->dw);
    free(g->db);
}

/* One accumulate combination: outputs start as `prev` (random) when the flag
 * accumulates and as NaN when it overwrites. */
static void test_linear_backward_flags(const backends *bs, const linear_data *d,
                                       const linear_grads *prev, bool acc_dx, bool acc_params)
{
    linear_shape s = d->s;
    size_t nx = (size_t)(s.rows * s.in), nw = (size_t)s.out * (size_t)s.in;
    double *dx = new_doubles(nx), *dw = new_doubles(nw), *db = new_doubles((size_t)s.out);
    linear_backward_ref(d, acc_dx ? prev->dx : NULL, acc_params ? prev->dw : NULL,
                        acc_params ? prev->db : NULL, dx, dw, db);
    linear_grads g[N_BACKENDS];
    char what[64];
    snprintf(what, sizeof what, "linear_backward acc_dx=%d acc_params=%d", acc_dx, acc_params);
    for (int t = 0; t < N_BACKENDS; t++) {
        g[t] = linear_grads_new(s, prev);
        if (!acc_dx)
            fill_nan(g[t].dx, nx);
        if (!acc_params) {
            fill_nan(g[t].dw, nw);
            fill_nan(g[t].db, (size_t)s.out);
        }
        bs->be[t]->ops->linear_backward(bs->be[t], s.rows, s.in, s.out, d->x, d->w, d->dy,
                                        g[t].dx, acc_dx, g[t].dw, g[t].db, acc_params);
        check_near(what, g[t].dx, dx, nx, LINEAR_TOL);
        check_near(what, g[t].dw, dw, nw, LINEAR_TOL);
        check_near(what, g[t].db, db, (size_t)s.out, 1e-5);
        if (t > 0) {
            check_same_bits("linear_backward dx", g[0].dx, g[t].dx, nx, t + 1);
            check_same_bits("linear_backward dw", g[0].dw, g[t].dw, nw, t + 1);
            check_same_bits("linear_backward dbias", g[0].db, g[t].db, (size_t)s.out, t + 1);
        }
    }
    for (int t = 0; t < N_BACKENDS; t++)
        linear_grads_free(&g[t]);
    free(dx);
    free(dw);
    free(db);
}

/* NULL outputs are skipped: the others are still right, and nothing is
 * written through the NULL ones (which would crash). */
static void test_linear_backward_nulls(const backends *bs, const linear_data *d)
{
    linear_shape s = d->s;
    size_t nx = (size_t)(s.rows * s.in), nw = (size_t)s.out * (size_t)s.in;
    double *dx = new_doubles(nx), *dw = new_doubles(nw), *db = new_doubles((size_t)s.out);
    linear_backward_ref(d, NULL, NULL, NULL, dx, dw, db);
    linear_grads g = linear_grads_new(s, NULL);
    nctmc_backend *be = bs->be[1];
    be->ops->linear_backward(be, s.rows, s.in, s.out, d->x, d->w, d->dy, NULL, false, g.dw,
                             NULL, false);
    check_near("linear_backward dw alone", g.dw, dw, nw, LINEAR_TOL);
    CHECK(isnan(g.db[0]), "linear_backward wrote dbias with dbias NULL");
    be->ops->linear_backward(be, s.rows, s.in, s.out, d->x, d->w, d->dy, g.dx, false, NULL,
                             g.db, false);
    check_near("linear_backward dx alone", g.dx, dx, nx, LINEAR_TOL);
    check_near("linear_backward dbias alone", g.db, db, (size_t)s.out, 1e-5);
    linear_grads_free(&g);
    free(dx);
    free(dw);
    free(db);
}

typedef struct linear_objective {
    nctmc_backend *be;
    const linear_data *d;
    float *y;
} linear_objective;

/* sum(dy * y): its gradient is exactly what linear_backward computes. */
static double linear_objective_value(void *arg)
{
    linear_objective *o = arg;
    const linear_data *d = o->d;
    o->be->ops->linear_forward(o->be, d->s.rows, d->s.in, d->s.out, d->x, d->w, d->bias, o->y);
    return weighted_sum(d->dy, o->y, (size_t)(d->s.rows * d->s.out));
}

static void test_linear_fd(const backends *bs, linear_data *d, test_rng *rng)
{
    linear_shape s = d->s;
    nctmc_backend *be = bs->be[1];
    linear_grads g = linear_grads_new(s, NULL);
    be->ops->linear_backward(be, s.rows, s.in, s.out, d->x, d->w, d->dy, g.dx, false, g.dw,
                             g.db, false);
    linear_objective o = {be, d, new_floats((size_t)(s.rows * s.out))};
    check_gradient("linear dx (fd)", linear_objective_value, &o, d->x,
                   (size_t)(s.rows * s.in), g.dx, rng, 1e-2, 2e-3);
    check_gradient("linear dw (fd)", linear_objective_value, &o, d->w,
                   (size_t)s.out * (size_t)s.in, g.dw, rng, 1e-2, 2e-3);
    check_gradient("linear dbias (fd)", linear_objective_value, &o, d->bias, (size_t)s.out,
                   g.db, rng, 1e-2, 2e-3);
    free(o.y);
    linear_grads_free(&g);
}

static void test_linear_backward(const backends *bs, linear_shape s, test_rng *rng)
{
    linear_data d = linear_data_new(s, rng);
    linear_grads prev = linear_grads_new(s, NULL);
    test_fill_uniform(rng, prev.dx, (size_t)(s.rows * s.in), -1.0f, 1.0f);
    test_fill_uniform(rng, prev.dw, (size_t)s.out * (size_t)s.in, -1.0f, 1.0f);
    test_fill_uniform(rng, prev.db, (size_t)s.out, -1.0f, 1.0f);
    for (int f = 0; f < 4; f++)
        test_linear_backward_flags(bs, &d, &prev, f & 1, f & 2);
    test_linear_backward_nulls(bs, &d);
    linear_grads_free(&prev);
    linear_data_free(&d);
}

static void test_linear(const backends *bs, test_rng *rng)
{
    /* one tiled in every GEMM of both passes, two far too small */
    static const linear_shape shapes[] = {{515, 200, 300}, {37, 19, 23}, {1, 5, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        test_linear_forward(bs, shapes[i], rng);
        test_linear_backward(bs, shapes[i], rng);
    }
    linear_shape small = {9, 7, 11};
    linear_data d = linear_data_new(small, rng);
    test_linear_fd(bs, &d, rng);
    linear_data_free(&d);
}

/* ---- attention ------------------------------------------------------ */

typedef struct attn_shape {
    int32_t batch, seq_len, heads, head_dim;
} attn_shape;

static size_t attn_rows(attn_shape s)
{
    return (size_t)s.batch * (size_t)s.seq_len;
}

static size_t attn_width(attn_shape s)
{
    return (size_t)s.heads * (size_t)s.head_dim;
}

/* Element (row i of sequence b, column c of head h) of part 0/1/2 = q/k/v. */
static size_t qkv_index(attn_shape s, int part, int32_t b, int32_t i, int32_t h, int32_t c)
{
    size_t d = attn_width(s);
    return ((size_t)b * (size_t)s.seq_len + (size_t)i) * 3 * d + (size_t)part * d +
           (size_t)h * (size_t)s.head_dim + (size_t)c;
}

static size_t out_index(attn_shape s, int32_t b, int32_t i, int32_t h, int32_t c)
{
    return ((size_t)b * (size_t)s.seq_len + (size_t)i) * attn_width(s) +
           (size_t)h * (size_t)s.head_dim + (size_t)c;
}

static double qkv_at(attn_shape s, const float *qkv, int part, int32_t b, int32_t i, int32_t h,
                     int32_t c)
{
    return (double)qkv[qkv_index(s, part, b, i, h, c)];
}

/* P of one (b, h) into p[L * L], in double. */
static void attention_probs_ref(attn_shape s, const float *qkv, int32_t b, int32_t h,
                                double *p)
{
    int32_t L = s.seq_len;
    double scale = 1.0 / sqrt((double)s.head_dim);
    for (int32_t i = 0; i < L; i++) {
        double m = -INFINITY, z = 0.0;
        for (int32_t j = 0; j < L; j++) {
            double dot = 0.0;
            for (int32_t c = 0; c < s.head_dim; c++)
                dot += qkv_at(s, qkv, 0, b, i, h, c) * qkv_at(s, qkv, 1, b, j, h, c);
            p[i * L + j] = scale * dot;
            m = p[i * L + j] > m ? p[i * L + j] : m;
        }
        for (int32_t j = 0; j < L; j++)
            z += p[i * L + j] = exp(p[i * L + j] - m);
        for (int32_t j = 0; j < L; j++)
            p[i * L + j] /= z;
    }
}

/* out and P [B, H, L, L] in double. */
static void attention_forward_ref(attn_shape s, const float *qkv, double *out, double *probs)
{
    int32_t L = s.seq_len;
    for (int32_t b = 0; b < s.batch; b++)
        for (int32_t h = 0; h < s.heads; h++) {
            double *p = probs + ((size_t)b * (size_t)s.heads + (size_t)h) * (size_t)L * L;
            attention_probs_ref(s, qkv, b, h, p);
            for (int32_t i = 0; i < L; i++)
                for (int32_t c = 0; c < s.head_dim; c++) {
                    double acc = 0.0;
                    for (int32_t j = 0; j < L; j++)
                        acc += p[i * L + j] * qkv_at(s, qkv, 2, b, j, h, c);
                    out[out_index(s, b, i, h, c)] = acc;
                }
        }
}

/* dS of one (b, h) into ds[L * L] given its P. */
static void attention_ds_ref(attn_shape s, const float *qkv, const float *dout, int32_t b,
                             int32_t h, const double *p, double *ds)
{
    int32_t L = s.seq_len;
    for (int32_t i = 0; i < L; i++) {
        double delta = 0.0;
        for (int32_t j = 0; j < L; j++) {
            double dp = 0.0;
            for (int32_t c = 0; c < s.head_dim; c++)
                dp += (double)dout[out_index(s, b, i, h, c)] * qkv_at(s, qkv, 2, b, j, h, c);
            ds[i * L + j] = dp;
            delta += dp * p[i * L + j];
        }
        for (int32_t j = 0; j < L; j++)
            ds[i * L + j] = p[i * L + j] * (ds[i * L + j] - delta);
    }
}

/* dQ, dK, dV of one (b, h) into dqkv (double, qkv layout). */
static void attention_head_backward_ref(attn_shape s, const float *qkv, const float *dout,
                                        int32_t b, int32_t h, const double *p,
                                        const double *ds, double *dqkv)
{
    int32_t L = s.seq_len;
    double scale = 1.0 / sqrt((double)s.head_dim);
    for (int32_t i = 0; i < L; i++)
        for (int32_t c = 0; c < s.head_dim; c++) {
            double dq = 0.0, dk = 0.0, dv = 0.0;
            for (int32_t j = 0; j < L; j++) {
                dq += ds[i * L + j] * qkv_at(s, qkv, 1, b, j, h, c);
                dk += ds[j * L + i] * qkv_at(s, qkv, 0, b, j, h, c);
                dv += p[j * L + i] * (double)dout[out_index(s, b, j, h, c)];
            }
            dqkv[qkv_index(s, 0, b, i, h, c)] = scale * dq;
            dqkv[qkv_index(s, 1, b, i, h, c)] = scale * dk;
            dqkv[qkv_index(s, 2, b, i, h, c)] = dv;
        }
}

static void attention_backward_ref(attn_shape s, const float *qkv, const float *dout,
                                   double *dqkv)
{
    size_t LL = (size_t)s.seq_len * (size_t)s.seq_len;
    double *p = new_doubles(LL), *ds = new_doubles(LL);
    for (int32_t b = 0; b < s.batch; b++)
        for (int32_t h = 0; h < s.heads; h++) {
            attention_probs_ref(s, qkv, b, h, p);
            attention_ds_ref(s, qkv, dout, b, h, p, ds);
            attention_head_backward_ref(s, qkv, dout, b, h, p, ds, dqkv);
        }
    free(p);
    free(ds);
}

typedef struct attn_buffers {
    float *out, *saved, *workspace, *dqkv;
} attn_buffers;

static attn_buffers attn_buffers_new(nctmc_backend *be, attn_shape s)
{
    size_t saved = be->ops->attention_saved_floats(be, s.batch, s.seq_len, s.heads, s.head_dim);
    size_t ws = be->ops->attention_workspace_floats(be, s.batch, s.seq_len, s.heads,
                                                    s.head_dim);
    attn_buffers a = {new_floats(attn_rows(s) * attn_width(s)), new_floats(saved),
                      new_floats(ws), new_floats(attn_rows(s) * 3 * attn_width(s))};
    fill_nan(a.out, attn_rows(s) * attn_width(s));
    fill_nan(a.saved, saved);
    fill_nan(a.workspace, ws);
    fill_nan(a.dqkv, attn_rows(s) * 3 * attn_width(s));
    return a;
}

static void attn_buffers_free(attn_buffers *a)
{
    free(a->out);
    free(a->saved);
    free(a->workspace);
    free(a->dqkv);
}

static void test_attention_sizes(const backends *bs, attn_shape s)
{
    size_t LL = (size_t)s.seq_len * (size_t)s.seq_len;
    for (int t = 0; t < N_BACKENDS; t++) {
        nctmc_backend *be = bs->be[t];
        size_t saved =
            be->ops->attention_saved_floats(be, s.batch, s.seq_len, s.heads, s.head_dim);
        size_t ws =
            be->ops->attention_workspace_floats(be, s.batch, s.seq_len, s.heads, s.head_dim);
        CHECK(saved == (size_t)s.batch * (size_t)s.heads * LL, "attention saved %zu floats",
              saved);
        CHECK(ws == (size_t)(t + 1) * LL, "attention workspace %zu floats for %d threads", ws,
              t + 1);
    }
}

/* q and k scaled by `gain` (large gains need the row max), v in [-1.5, 1.5]. */
static float *random_qkv(test_rng *rng, attn_shape s, float gain)
{
    size_t d = attn_width(s);
    float *qkv = random_floats(rng, attn_rows(s) * 3 * d, -1.5f, 1.5f);
    for (size_t r = 0; r < attn_rows(s); r++)
        for (size_t c = 0; c < 2 * d; c++)
            qkv[r * 3 * d + c] *= gain;
    return qkv;
}

/* Scores of 250 at one key, falling by 40 per position to a floor of 0
 * (plus a small term), the peak in the middle of the row for even (b, h)
 * and near its end for odd: e^score overflows unless the max of the whole
 * row is subtracted, and any smaller shift saturates the peak and its
 * neighbours alike. Column 0 of every q is 1, so score_ij ~ k_j0 / sqrt(D). */
static float *peaked_qkv(test_rng *rng, attn_shape s)
{
    float *qkv = random_qkv(rng, s, 0.1f);
    double unit = sqrt((double)s.head_dim);
    for (int32_t b = 0; b < s.batch; b++)
        for (int32_t h = 0; h < s.heads; h++) {
            int32_t peak = (b * s.heads + h) % 2 ? s.seq_len - 3 : s.seq_len / 2;
            for (int32_t j = 0; j < s.seq_len; j++) {
                double score = 250.0 - 40.0 * abs(j - peak);
                qkv[qkv_index(s, 0, b, j, h, 0)] = 1.0f;
                qkv[qkv_index(s, 1, b, j, h, 0)] = (float)(unit * (score > 0.0 ? score : 0.0));
            }
        }
    return qkv;
}

/* Forward against the reference (out and P), the saved = NULL path against
 * the saved one, then the backward pass; all outputs across threads. */
static void test_attention_case(const backends *bs, attn_shape s, const float *qkv, double tol,
                                test_rng *rng)
{
    size_t nqkv = attn_rows(s) * 3 * attn_width(s), nout = attn_rows(s) * attn_width(s);
    size_t nsaved = (size_t)s.batch * (size_t)s.heads * (size_t)s.seq_len * (size_t)s.seq_len;
    float *dout = random_floats(rng, nout, -1.0f, 1.0f);
    double *out_ref = new_doubles(nout), *p_ref = new_doubles(nsaved);
    double *dqkv_ref = new_doubles(nqkv);
    attention_forward_ref(s, qkv, out_ref, p_ref);
    attention_backward_ref(s, qkv, dout, dqkv_ref);
    attn_buffers a[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++) {
        nctmc_backend *be = bs->be[t];
        a[t] = attn_buffers_new(be, s);
        be->ops->attention_forward(be, s.batch, s.seq_len, s.heads, s.head_dim, qkv, a[t].out,
                                   a[t].saved, a[t].workspace);
        check_near("attention out", a[t].out, out_ref, nout, tol);
        check_near("attention probabilities", a[t].saved, p_ref, nsaved, tol);
        float *out_unsaved = new_floats(nout);
        be->ops->attention_forward(be, s.batch, s.seq_len, s.heads, s.head_dim, qkv,
                                   out_unsaved, NULL, a[t].workspace);
        check_same_bits("attention out without saved", a[t].out, out_unsaved, nout, t + 1);
        free(out_unsaved);
        if (t > 0) {
            check_same_bits("attention out", a[0].out, a[t].out, nout, t + 1);
            check_same_bits("attention saved", a[0].saved, a[t].saved, nsaved, t + 1);
        }
        be->ops->attention_backward(be, s.batch, s.seq_len, s.heads, s.head_dim, qkv,
                                    a[t].out, a[t].saved, dout, a[t].dqkv, a[t].workspace);
        check_near("attention dqkv", a[t].dqkv, dqkv_ref, nqkv, 10 * tol);
        if (t > 0)
            check_same_bits("attention dqkv", a[0].dqkv, a[t].dqkv, nqkv, t + 1);
    }
    for (int t = 0; t < N_BACKENDS; t++)
        attn_buffers_free(&a[t]);
    free(dout);
    free(out_ref);
    free(p_ref);
    free(dqkv_ref);
}

typedef struct attn_objective {
    nctmc_backend *be;
    attn_shape s;
    const float *qkv;
    const float *g;
    attn_buffers *a;
} attn_objective;

static double attn_objective_value(void *arg)
{
    attn_objective *o = arg;
    attn_shape s = o->s;
    o->be->ops->attention_forward(o->be, s.batch, s.seq_len, s.heads, s.head_dim, o->qkv,
                                  o->a->out, NULL, o->a->workspace);
    return weighted_sum(o->g, o->a->out, attn_rows(s) * attn_width(s));
}

static void test_attention_fd(const backends *bs, attn_shape s, test_rng *rng)
{
    nctmc_backend *be = bs->be[1];
    size_t nqkv = attn_rows(s) * 3 * attn_width(s), nout = attn_rows(s) * attn_width(s);
    float *qkv = random_floats(rng, nqkv, -1.5f, 1.5f);
    float *g = random_floats(rng, nout, -1.0f, 1.0f);
    attn_buffers a = attn_buffers_new(be, s);
    be->ops->attention_forward(be, s.batch, s.seq_len, s.heads, s.head_dim, qkv, a.out,
                               a.saved, a.workspace);
    be->ops->attention_backward(be, s.batch, s.seq_len, s.heads, s.head_dim, qkv, a.out,
                                a.saved, g, a.dqkv, a.workspace);
    attn_objective o = {be, s, qkv, g, &a};
    /* probe every part: q, k and v columns are all in the first rows */
    check_gradient("attention dqkv (fd)", attn_objective_value, &o, qkv, nqkv, a.dqkv, rng,
                   2e-2, 2e-3);
    check_gradient("attention dqkv row 0 (fd)", attn_objective_value, &o, qkv,
                   3 * attn_width(s), a.dqkv, rng, 2e-2, 2e-3);
    attn_buffers_free(&a);
    free(qkv);
    free(g);
}

static void test_attention(const backends *bs, test_rng *rng)
{
    static const attn_shape shapes[] = {
        {2, 5, 3, 6},   /* tiny and odd */
        {3, 37, 2, 16}, /* L not a multiple of the softmax lanes */
        {1, 64, 2, 32},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        test_attention_sizes(bs, shapes[i]);
        float *qkv = random_qkv(rng, shapes[i], 1.0f);
        test_attention_case(bs, shapes[i], qkv, 1e-5, rng);
        free(qkv);
    }
    attn_shape wide = {2, 19, 2, 8};
    float *qkv = random_qkv(rng, wide, 10.0f); /* scores in the hundreds */
    test_attention_case(bs, wide, qkv, 2e-4, rng);
    free(qkv);
    attn_shape peaked = {2, 41, 3, 4};
    qkv = peaked_qkv(rng, peaked);
    test_attention_case(bs, peaked, qkv, 2e-4, rng);
    free(qkv);
    test_attention_fd(bs, shapes[0], rng);
    test_attention_fd(bs, (attn_shape){1, 19, 2, 4}, rng);
}

/* ---- rotary --------------------------------------------------------- */

typedef struct rotary_shape {
    int64_t rows;
    int32_t seq_len, heads, head_dim;
    float base;
} rotary_shape;

static size_t rotary_size(rotary_shape s)
{
    return (size_t)s.rows * 3 * (size_t)s.heads * (size_t)s.head_dim;
}

/* The rotation (sign +1) or its transpose (sign -1) in double. */
static void rotary_ref(rotary_shape s, double sign, const float *x, double *y)
{
    int32_t half = s.head_dim / 2;
    size_t width = 3 * (size_t)s.heads * (size_t)s.head_dim;
    for (size_t i = 0; i < rotary_size(s); i++)
        y[i] = (double)x[i];
    for (int64_t r = 0; r < s.rows; r++)
        for (int32_t h = 0; h < 2 * s.heads; h++)
            for (int32_t a = 0; a < half; a++) {
                double angle = (double)(r % s.seq_len) *
                               pow((double)s.base, -2.0 * a / (double)s.head_dim);
                double c = cos(angle), sn = sign * sin(angle);
                size_t i1 = (size_t)r * width + (size_t)h * (size_t)s.head_dim + (size_t)a;
                size_t i2 = i1 + (size_t)half;
                y[i1] = (double)x[i1] * c - (double)x[i2] * sn;
                y[i2] = (double)x[i2] * c + (double)x[i1] * sn;
            }
}

static void test_rotary_direction(const backends *bs, rotary_shape s, bool forward,
                                  const float *x)
{
    size_t n = rotary_size(s);
    size_t v0 = 2 * (size_t)s.heads * (size_t)s.head_dim, width = v0 * 3 / 2;
    double *want = new_doubles(n);
    rotary_ref(s, forward ? 1.0 : -1.0, x, want);
    float *y[N_BACKENDS];
    const char *what = forward ? "rotary_forward" : "rotary_backward";
    for (int t = 0; t < N_BACKENDS; t++) {
        nctmc_backend *be = bs->be[t];
        y[t] = copy_floats(x, n);
        if (forward)
            be->ops->rotary_forward(be, s.rows, s.seq_len, s.heads, s.head_dim, s.base, y[t]);
        else
            be->ops->rotary_backward(be, s.rows, s.seq_len, s.heads, s.head_dim, s.base, y[t]);
        check_near(what, y[t], want, n, 2e-6);
        bool v_kept = true;
        for (int64_t r = 0; r < s.rows; r++)
            v_kept = v_kept && memcmp(y[t] + (size_t)r * width + v0, x + (size_t)r * width + v0,
                                      (width - v0) * sizeof(float)) == 0;
        CHECK(v_kept, "%s changed the v part", what);
        if (t > 0)
            check_same_bits(what, y[0], y[t], n, t + 1);
    }
    for (int t = 0; t < N_BACKENDS; t++)
        free(y[t]);
    free(want);
}

/* backward(forward(x)) = x up to rounding: the two are each other's
 * inverse, not merely both close to the reference. */
static void test_rotary_roundtrip(const backends *bs, rotary_shape s, const float *x)
{
    size_t n = rotary_size(s);
    float *y = copy_floats(x, n);
    double *want = new_doubles(n);
    for (size_t i = 0; i < n; i++)
        want[i] = (double)x[i];
    nctmc_backend *be = bs->be[1];
    be->ops->rotary_forward(be, s.rows, s.seq_len, s.heads, s.head_dim, s.base, y);
    be->ops->rotary_backward(be, s.rows, s.seq_len, s.heads, s.head_dim, s.base, y);
    check_near("rotary round trip", y, want, n, 1e-6);
    free(y);
    free(want);
}

/* The backend keeps the angles of the first shape it rotates; any other
 * shape computes them per call. Both ways give the same bits. */
static void test_rotary_table_bits(rotary_shape s, test_rng *rng)
{
    rotary_shape other = {2 * 29, 29, 3, 10, 10000.0f};
    size_t n = rotary_size(s);
    float *x = random_floats(rng, n, -1.0f, 1.0f);
    char err[256];
    nctmc_backend *fresh = cpu_backend_create(2, err, sizeof err);
    nctmc_backend *taken = cpu_backend_create(2, err, sizeof err);
    float *scratch = random_floats(rng, rotary_size(other), -1.0f, 1.0f);
    taken->ops->rotary_forward(taken, other.rows, other.seq_len, other.heads, other.head_dim,
                               other.base, scratch);
    for (int dir = 0; dir < 2; dir++) {
        float *a = copy_floats(x, n), *b = copy_floats(x, n);
        nctmc_backend *bes[2] = {fresh, taken};
        float *ys[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            if (dir == 0)
                bes[k]->ops->rotary_forward(bes[k], s.rows, s.seq_len, s.heads, s.head_dim,
                                            s.base, ys[k]);
            else
                bes[k]->ops->rotary_backward(bes[k], s.rows, s.seq_len, s.heads, s.head_dim,
                                             s.base, ys[k]);
        }
        CHECK(memcmp(a, b, n * sizeof *a) == 0,
              "rotary %s, head_dim %d: the table's angles give the bits of the per-call ones",
              dir == 0 ? "forward" : "backward", s.head_dim);
        free(a);
        free(b);
    }
    fresh->ops->destroy(fresh);
    taken->ops->destroy(taken);
    free(scratch);
    free(x);
}

typedef struct rotary_objective {
    nctmc_backend *be;
    rotary_shape s;
    const float *x;
    const float *g;
    float *y;
} rotary_objective;

static double rotary_objective_value(void *arg)
{
    rotary_objective *o = arg;
    rotary_shape s = o->s;
    memcpy(o->y, o->x, rotary_size(s) * sizeof(float));
    o->be->ops->rotary_forward(o->be, s.rows, s.seq_len, s.heads, s.head_dim, s.base, o->y);
    return weighted_sum(o->g, o->y, rotary_size(s));
}

static void test_rotary_fd(const backends *bs, rotary_shape s, test_rng *rng)
{
    size_t n = rotary_size(s);
    nctmc_backend *be = bs->be[1];
    float *x = random_floats(rng, n, -1.0f, 1.0f);
    float *g = random_floats(rng, n, -1.0f, 1.0f);
    float *grad = copy_floats(g, n);
    be->ops->rotary_backward(be, s.rows, s.seq_len, s.heads, s.head_dim, s.base, grad);
    rotary_objective o = {be, s, x, g, new_floats(n)};
    check_gradient("rotary (fd)", rotary_objective_value, &o, x, n, grad, rng, 1e-2, 1e-3);
    free(o.y);
    free(x);
    free(g);
    free(grad);
}

static void test_rotary(const backends *bs, test_rng *rng)
{
    static const rotary_shape shapes[] = {
        {3 * 7, 7, 2, 6, 10000.0f},
        {2 * 37, 37, 3, 64, 10000.0f},
        {5, 5, 1, 1030, 10000.0f}, /* more pairs than one frequency block */
        {4 * 6, 6, 2, 8, 100.0f},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        float *x = random_floats(rng, rotary_size(shapes[i]), -1.0f, 1.0f);
        test_rotary_direction(bs, shapes[i], true, x);
        test_rotary_direction(bs, shapes[i], false, x);
        test_rotary_roundtrip(bs, shapes[i], x);
        free(x);
    }
    test_rotary_fd(bs, shapes[0], rng);
    test_rotary_table_bits(shapes[1], rng);
    test_rotary_table_bits(shapes[2], rng);
}

/* ---- embeddings ----------------------------------------------------- */

typedef struct embed_shape {
    int64_t rows;
    int32_t dim, n_entries;
} embed_shape;

/* Ids use only the even entries, so the odd ones must come out zero from a
 * non-accumulating backward pass. */
static int32_t *even_ids(test_rng *rng, embed_shape s)
{
    int32_t *ids = checked_malloc((size_t)s.rows * sizeof *ids);
    for (int64_t r = 0; r < s.rows; r++)
        ids[r] = 2 * test_randint(rng, (s.n_entries + 1) / 2);
    return ids;
}

static void test_embedding_forward(const backends *bs, embed_shape s, const int32_t *ids,
                                   test_rng *rng)
{
    size_t nout = (size_t)s.rows * (size_t)s.dim;
    float *table = random_floats(rng, (size_t)s.n_entries * (size_t)s.dim, -1.0f, 1.0f);
    float *prev = random_floats(rng, nout, -1.0f, 1.0f);
    float *want = new_floats(nout), *out[N_BACKENDS];
    for (int acc = 0; acc < 2; acc++) {
        for (int64_t r = 0; r < s.rows; r++)
            for (int32_t c = 0; c < s.dim; c++) {
                float v = table[(size_t)ids[r] * (size_t)s.dim + (size_t)c];
                want[(size_t)r * (size_t)s.dim + (size_t)c] =
                    acc ? prev[(size_t)r * (size_t)s.dim + (size_t)c] + v : v;
            }
        for (int t = 0; t < N_BACKENDS; t++) {
            nctmc_backend *be = bs->be[t];
            out[t] = copy_floats(prev, nout);
            be->ops->embedding_forward(be, s.rows, s.dim, ids, table, out[t], acc);
            CHECK(memcmp(out[t], want, nout * sizeof(float)) == 0,
                  "embedding_forward (accumulate=%d, %d threads) is not the exact lookup", acc,
                  t + 1);
        }
        for (int t = 0; t < N_BACKENDS; t++)
            free(out[t]);
    }
    free(table);
    free(prev);
    free(want);
}

/* dtable in float with rows added in increasing order: the backend must
 * match it bit for bit, which pins the summation order. */
static void embedding_backward_ordered(embed_shape s, const int32_t *ids, const float *dout,
                                       const float *prev, float *dtable)
{
    size_t n = (size_t)s.n_entries * (size_t)s.dim;
    for (size_t i = 0; i < n; i++)
        dtable[i] = prev ? prev[i] : 0.0f;
    for (int64_t r = 0; r < s.rows; r++)
        for (int32_t c = 0; c < s.dim; c++)
            dtable[(size_t)ids[r] * (size_t)s.dim + (size_t)c] +=
                dout[(size_t)r * (size_t)s.dim + (size_t)c];
}

static void embedding_backward_ref(embed_shape s, const int32_t *ids, const float *dout,
                                   const float *prev, double *dtable)
{
    size_t n = (size_t)s.n_entries * (size_t)s.dim;
    for (size_t i = 0; i < n; i++)
        dtable[i] = prev ? (double)prev[i] : 0.0;
    for (int64_t r = 0; r < s.rows; r++)
        for (int32_t c = 0; c < s.dim; c++)
            dtable[(size_t)ids[r] * (size_t)s.dim + (size_t)c] +=
                (double)dout[(size_t)r * (size_t)s.dim + (size_t)c];
}

static bool unnamed_rows_zero(embed_shape s, const float *dtable)
{
    bool zero = true;
    for (int32_t v = 1; v < s.n_entries; v += 2)
        for (int32_t c = 0; c < s.dim; c++)
            zero = zero && dtable[(size_t)v * (size_t)s.dim + (size_t)c] == 0.0f;
    return zero;
}

static void test_embedding_backward(const backends *bs, embed_shape s, const int32_t *ids,
                                    test_rng *rng)
{
    size_t n = (size_t)s.n_entries * (size_t)s.dim;
    float *dout = random_floats(rng, (size_t)s.rows * (size_t)s.dim, -1.0f, 1.0f);
    float *prev = random_floats(rng, n, -1.0f, 1.0f);
    float *ordered = new_floats(n), *dt[N_BACKENDS];
    double *want = new_doubles(n);
    for (int acc = 0; acc < 2; acc++) {
        embedding_backward_ordered(s, ids, dout, acc ? prev : NULL, ordered);
        embedding_backward_ref(s, ids, dout, acc ? prev : NULL, want);
        for (int t = 0; t < N_BACKENDS; t++) {
            nctmc_backend *be = bs->be[t];
            dt[t] = copy_floats(prev, n);
            if (!acc)
                fill_nan(dt[t], n);
            be->ops->embedding_backward(be, s.rows, s.dim, s.n_entries, ids, dout, dt[t], acc);
            check_near("embedding_backward", dt[t], want, n, 1e-5);
            CHECK(memcmp(dt[t], ordered, n * sizeof(float)) == 0,
                  "embedding_backward (accumulate=%d, %d threads) not summed in row order", acc,
                  t + 1);
            if (!acc)
                CHECK(unnamed_rows_zero(s, dt[t]), "embedding_backward left unnamed rows");
        }
        for (int t = 0; t < N_BACKENDS; t++)
            free(dt[t]);
    }
    free(dout);
    free(prev);
    free(ordered);
    free(want);
}

typedef struct embed_objective {
    nctmc_backend *be;
    embed_shape s;
    const int32_t *ids;
    const float *table;
    const float *g;
    float *out;
} embed_objective;

static double embed_objective_value(void *arg)
{
    embed_objective *o = arg;
    o->be->ops->embedding_forward(o->be, o->s.rows, o->s.dim, o->ids, o->table, o->out, false);
    return weighted_sum(o->g, o->out, (size_t)o->s.rows * (size_t)o->s.dim);
}

static void test_embedding_fd(const backends *bs, embed_shape s, const int32_t *ids,
                              test_rng *rng)
{
    nctmc_backend *be = bs->be[1];
    size_t n = (size_t)s.n_entries * (size_t)s.dim, nout = (size_t)s.rows * (size_t)s.dim;
    float *table = random_floats(rng, n, -1.0f, 1.0f);
    float *g = random_floats(rng, nout, -1.0f, 1.0f);
    float *grad = new_floats(n);
    be->ops->embedding_backward(be, s.rows, s.dim, s.n_entries, ids, g, grad, false);
    embed_objective o = {be, s, ids, table, g, new_floats(nout)};
    check_gradient("embedding (fd)", embed_objective_value, &o, table, n, grad, rng, 1e-2,
                   1e-3);
    free(o.out);
    free(table);
    free(g);
    free(grad);
}

static void test_embedding(const backends *bs, test_rng *rng)
{
    /* dim not a multiple of the column bands; a tiny table for the fd check */
    static const embed_shape shapes[] = {{40, 150, 13}, {37, 7, 5}, {300, 64, 29}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int32_t *ids = even_ids(rng, shapes[i]);
        test_embedding_forward(bs, shapes[i], ids, rng);
        test_embedding_backward(bs, shapes[i], ids, rng);
        if (i == 1)
            test_embedding_fd(bs, shapes[i], ids, rng);
        free(ids);
    }
}

/* ---- timestep embedding --------------------------------------------- */

static void test_timestep_case(const backends *bs, int32_t batch, int32_t dim, test_rng *rng)
{
    size_t n = (size_t)batch * (size_t)dim;
    float *times = random_floats(rng, (size_t)batch, 0.0f, 1.0f);
    times[0] = 0.0f;
    if (batch > 1)
        times[1] = 731.25f; /* large arguments: the angle is computed in double */
    double *want = new_doubles(n);
    int32_t half = dim / 2;
    for (int32_t b = 0; b < batch; b++) {
        for (int32_t k = 0; k < half; k++) {
            double f = exp(-log(10000.0) * k / (double)half);
            want[(size_t)b * (size_t)dim + (size_t)k] = cos((double)times[b] * f);
            want[(size_t)b * (size_t)dim + (size_t)(half + k)] = sin((double)times[b] * f);
        }
        if (dim % 2)
            want[(size_t)b * (size_t)dim + (size_t)dim - 1] = 0.0;
    }
    float *out[N_BACKENDS];
    for (int t = 0; t < N_BACKENDS; t++) {
        nctmc_backend *be = bs->be[t];
        out[t] = new_floats(n);
        fill_nan(out[t], n);
        be->ops->timestep_embedding(be, batch, dim, times, out[t]);
        check_near("timestep_embedding", out[t], want, n, 1e-7);
        if (t > 0)
            check_same_bits("timestep_embedding", out[0], out[t], n, t + 1);
    }
    for (int t = 0; t < N_BACKENDS; t++)
        free(out[t]);
    free(times);
    free(want);
}

static void test_timestep(const backends *bs, test_rng *rng)
{
    test_timestep_case(bs, 9, 256, rng);
    test_timestep_case(bs, 3, 10, rng);
    test_timestep_case(bs, 2, 7, rng);
}

/* ---- main ----------------------------------------------------------- */

int main(void)
{
    backends bs;
    char err[256];
    for (int t = 0; t < N_BACKENDS; t++) {
        bs.be[t] = cpu_backend_create(t + 1, err, sizeof err);
        if (!bs.be[t]) {
            fprintf(stderr, "cpu backend with %d threads: %s\n", t + 1, err);
            return 1;
        }
    }
    test_rng rng = test_rng_seed(20240611);
    test_gemm(&bs, &rng);
    test_gemm_thread_invariance(&rng);
    test_linear(&bs, &rng);
    test_attention(&bs, &rng);
    test_rotary(&bs, &rng);
    test_embedding(&bs, &rng);
    test_timestep(&bs, &rng);
    for (int t = 0; t < N_BACKENDS; t++)
        bs.be[t]->ops->destroy(bs.be[t]);
    return test_finish("cpu_dense");
}
