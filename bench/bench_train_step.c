/*
 * bench_train_step.c — forward and forward + loss + backward of the DiT on
 * the CPU backend, next to the OpenBLAS sgemm rate for exactly the matrix
 * products of the same step (same shapes, same count) in the same run.
 *
 * Output: one line per measurement, key=value pairs:
 *   bench=sgemm_reference ... gflops=...
 *   bench=forward ... ms=... tokens_per_s=... gflops=... sgemm_fraction=...
 *   bench=train_step ... ms=... tokens_per_s=... gflops=... sgemm_fraction=...
 * sgemm_fraction = (time of the step's products alone in OpenBLAS) / (time
 * of the step): the share of the sgemm rate the whole step achieves. The
 * step's time is the median of the repetitions, the reference's the fastest.
 *
 * Usage: bench_train_step [--threads N] [--batch B] [--reps R] [--config cpu-small|tiny]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dit/dit.h"
#include "bench_util.h"

typedef struct gemm_shape {
    int transa, transb;
    int m, n, k;
    int count;
} gemm_shape;

#define MAX_SHAPES 512

typedef struct gemm_list {
    gemm_shape s[MAX_SHAPES];
    int n;
} gemm_list;

static void add(gemm_list *g, int ta, int tb, int m, int n, int k, int count)
{
    if (g->n == MAX_SHAPES) {
        fprintf(stderr, "bench: more than %d product shapes\n", MAX_SHAPES);
        exit(1);
    }
    g->s[g->n++] = (gemm_shape){ta, tb, m, n, k, count};
}

/* y = x w^T: forward; backward dx = dy w, dw = dy^T x. */
static void add_linear(gemm_list *g, int rows, int in, int out, bool backward, bool need_dx)
{
    add(g, 0, 1, rows, out, in, 1);
    if (backward) {
        if (need_dx)
            add(g, 0, 0, rows, in, out, 1);
        add(g, 1, 0, out, in, rows, 1);
    }
}

/* Every matrix product of one pass of the model, as the CPU backend does them. */
static gemm_list step_gemms(const model_dims *z, int B, int L, bool backward)
{
    gemm_list g = {.n = 0};
    int N = B * L, d = z->d, c = z->c, pairs = B * z->H;
    add_linear(&g, B, 256, c, backward, false);
    add_linear(&g, B, c, c, backward, true);
    for (int layer = 0; layer < z->n_layers; layer++) {
        add_linear(&g, B, c, 6 * d, backward, true);
        add_linear(&g, N, d, 3 * d, backward, true);
        add(&g, 0, 1, L, L, z->D, pairs);         /* S = Q K^T */
        add(&g, 0, 0, L, z->D, L, pairs);         /* O = P V */
        if (backward) {
            add(&g, 1, 0, L, z->D, L, pairs);     /* dV = P^T dO */
            add(&g, 0, 1, L, L, z->D, pairs);     /* dP = dO V^T */
            add(&g, 0, 0, L, z->D, L, pairs);     /* dQ = dS K */
            add(&g, 1, 0, L, z->D, L, pairs);     /* dK = dS^T Q */
        }
        add_linear(&g, N, d, d, backward, true);
        add_linear(&g, N, d, z->F, backward, true);
        add_linear(&g, N, z->F, d, backward, true);
    }
    add_linear(&g, B, c, 2 * d, backward, true);
    add_linear(&g, N, d, z->V, backward, true);
    add_linear(&g, N, d, 1, backward, true);
    return g;
}

static double gemm_flops(const gemm_list *g)
{
    double f = 0.0;
    for (int i = 0; i < g->n; i++)
        f += 2.0 * g->s[i].m * (double)g->s[i].n * g->s[i].k * g->s[i].count;
    return f;
}

/* Runs the listed products back to back with OpenBLAS's own threading. */
static double time_sgemm(const gemm_list *g, int threads, int reps)
{
    size_t biggest = 0;
    for (int i = 0; i < g->n; i++) {
        size_t a = (size_t)g->s[i].m * g->s[i].k, b = (size_t)g->s[i].k * g->s[i].n,
               c = (size_t)g->s[i].m * g->s[i].n;
        if (a > biggest) biggest = a;
        if (b > biggest) biggest = b;
        if (c > biggest) biggest = c;
    }
    float *A = malloc(biggest * sizeof(float)), *Bm = malloc(biggest * sizeof(float)),
          *C = malloc(biggest * sizeof(float));
    for (size_t i = 0; i < biggest; i++) {
        A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        Bm[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        C[i] = 0.0f;
    }
    openblas_set_num_threads(threads);
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < g->n; i++) {
            const gemm_shape *s = &g->s[i];
            int lda = s->transa ? s->m : s->k, ldb = s->transb ? s->k : s->n;
            for (int c = 0; c < s->count; c++)
                cblas_sgemm(CblasRowMajor, s->transa ? CblasTrans : CblasNoTrans,
                            s->transb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1.0f, A,
                            lda, Bm, ldb, 0.0f, C, s->n);
        }
        if (r >= 0)
            times[r] = now_s() - t0;
    }
    openblas_set_num_threads(1);
    /* the fastest repetition: a disturbed reference would flatter the
     * fraction, so the reference gets the benefit of the doubt */
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    double t = times[0];
    free(times);
    free(A);
    free(Bm);
    free(C);
    return t;
}

typedef struct bench_args {
    int threads, batch, reps;
    const char *config;
} bench_args;

static bench_args parse_args(int argc, char **argv)
{
    bench_args a = {2, 8, 5, "cpu-small"};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) a.threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0) a.batch = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) a.reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--config") == 0) a.config = argv[i + 1];
    }
    if (a.threads < 1) a.threads = 1;
    if (a.batch < 1) a.batch = 1;
    if (a.reps < 1) a.reps = 1;
    return a;
}

typedef struct bench_run {
    nctmc_model *model;
    dit_workspace *ws;
    float *grads;
    dit_batch batch;
} bench_run;

static double time_pass(bench_run *r, bool train, int reps)
{
    double *times = malloc(sizeof(double) * (size_t)reps), loss;
    char err[256];
    for (int i = -1; i < reps; i++) {
        double t0 = now_s();
        if (train)
            dit_loss(r->model, r->ws, &r->batch, r->grads, false, &loss, err, sizeof err);
        else
            dit_forward(r->model, r->ws, &r->batch);
        if (i >= 0)
            times[i] = now_s() - t0;
    }
    double t = median(times, reps);
    free(times);
    return t;
}

static void report(const char *what, const bench_args *a, const model_dims *z, double t,
                   double flops, double t_sgemm)
{
    double tokens = (double)a->batch * z->L;
    printf("bench=%s impl=libnctmc config=%s threads=%d batch=%d ms=%.2f tokens_per_s=%.1f "
           "gflops=%.2f sgemm_gflops=%.2f sgemm_fraction=%.3f\n",
           what, a->config, a->threads, a->batch, 1e3 * t, tokens / t, flops / t * 1e-9,
           flops / t_sgemm * 1e-9, t_sgemm / t);
}

int main(int argc, char **argv)
{
    bench_args a = parse_args(argc, argv);
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = a.threads;
    nctmc_context *ctx = NULL;
    nctmc_model_config cfg = config_named(a.config);
    bench_run r = {0};
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &r.model) != NCTMC_OK) {
        fprintf(stderr, "bench: cannot create the model: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    const model_dims *z = &r.model->dims;
    int32_t N = a.batch * z->L;
    int32_t *x_t = malloc(sizeof(int32_t) * (size_t)N), *x_0 = malloc(sizeof(int32_t) * (size_t)N);
    float *times = malloc(sizeof(float) * (size_t)a.batch);
    for (int32_t i = 0; i < N; i++) {
        x_0[i] = (int32_t)((i * 2654435761u) % (uint32_t)z->S);
        x_t[i] = i % 3 ? x_0[i] : (int32_t)((i * 40503u) % (uint32_t)z->S);
    }
    for (int b = 0; b < a.batch; b++)
        times[b] = (float)(b + 0.5) / (float)a.batch;
    r.batch = (dit_batch){a.batch, z->L, x_t, times, NULL, x_0, NULL};
    nctmc_backend *be = ctx->backend;
    char err[256];
    if (dit_workspace_create(r.model, be, a.batch, z->L, DIT_WS_TRAINING, &r.ws, err, sizeof err) !=
            NCTMC_OK ||
        !(r.grads = be->ops->alloc(be, r.model->slab_floats * sizeof(float)))) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }

    gemm_list fwd = step_gemms(z, a.batch, z->L, false), step = step_gemms(z, a.batch, z->L, true);
    double t_fwd = time_pass(&r, false, a.reps), t_step = time_pass(&r, true, a.reps);
    double s_fwd = time_sgemm(&fwd, a.threads, a.reps), s_step = time_sgemm(&step, a.threads, a.reps);
    printf("bench=sgemm_reference impl=openblas config=%s threads=%d batch=%d forward_ms=%.2f "
           "train_step_ms=%.2f gflops=%.2f\n",
           a.config, a.threads, a.batch, 1e3 * s_fwd, 1e3 * s_step,
           gemm_flops(&step) / s_step * 1e-9);
    report("forward", &a, z, t_fwd, gemm_flops(&fwd), s_fwd);
    report("train_step", &a, z, t_step, gemm_flops(&step), s_step);

    be->ops->free(be, r.grads);
    dit_workspace_free(r.ws);
    nctmc_model_free(r.model);
    nctmc_context_free(ctx);
    free(x_t);
    free(x_0);
    free(times);
    return 0;
}
