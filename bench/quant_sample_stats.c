/*
 * quant_sample_stats.c — how much a reduced-precision checkpoint changes
 * the samples: draws the same samples (same seed, labels and parameters)
 * from a float checkpoint and from each reduced one, and reports
 *   identical   share of samples equal to the float model's, token for token
 *   agree       share of positions equal to the float model's
 *   tv          total variation distance between the token histograms
 *               (over all positions) of the two sets of samples
 * and, as the floor that sampling noise alone gives, the same figures for
 * the float model against itself with another seed.
 *
 * Usage: quant_sample_stats F32.safetensors [REDUCED.safetensors ...]
 *        [--n N] [--steps K] [--seed S] [--threads T] [--portable]
 * --portable: the reduced models run the portable kernel even where the CPU
 * has AVX512-BF16.
 * Class-conditional models draw labels 0, 1, ..., n_classes - 1 in turn.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "cpu/cpu_backend.h"
#include "nctmc.h"

#define MAX_MODELS 8

typedef struct opts {
    const char *paths[MAX_MODELS];
    int n_paths;
    int n, steps, threads;
    uint64_t seed;
    bool portable;
} opts;

static opts parse(int argc, char **argv)
{
    opts o = {{NULL}, 0, 200, 64, 2, 1, false};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            o.n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            o.steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            o.threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--portable") == 0)
            o.portable = true;
        else if (o.n_paths < MAX_MODELS)
            o.paths[o.n_paths++] = argv[i];
    }
    return o;
}

/* n samples of the model's length into out; labels cycle over the classes. */
static int draw(const nctmc_model *m, const opts *o, uint64_t seed, int32_t *out)
{
    int32_t L = nctmc_model_seq_len(m), classes = nctmc_model_n_classes(m);
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = o->n;
    nctmc_sampler *s = NULL;
    if (nctmc_sampler_create(m, &sp, &s) != NCTMC_OK)
        return -1;
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)o->n);
    for (int i = 0; i < o->n; i++)
        labels[i] = classes > 0 ? i % classes : 0;
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = o->n;
    p.n_steps = o->steps;
    p.seed = seed;
    p.labels = classes > 0 ? labels : NULL;
    p.tokens_out = out;
    nctmc_status st = nctmc_sample(s, &p);
    if (st != NCTMC_OK)
        fprintf(stderr, "sample: %s\n", nctmc_sampler_last_error(s));
    free(labels);
    nctmc_sampler_free(s);
    (void)L;
    return st == NCTMC_OK ? 0 : -1;
}

static void compare(const char *what, const int32_t *a, const int32_t *b, int n, int L, int S)
{
    int identical = 0;
    long agree = 0;
    double *ha = calloc((size_t)S, sizeof(double)), *hb = calloc((size_t)S, sizeof(double));
    for (int i = 0; i < n; i++) {
        int same = 1;
        for (int p = 0; p < L; p++) {
            int32_t x = a[i * L + p], y = b[i * L + p];
            same &= x == y;
            agree += x == y;
            ha[x] += 1.0;
            hb[y] += 1.0;
        }
        identical += same;
    }
    double tv = 0;
    for (int v = 0; v < S; v++)
        tv += fabs(ha[v] - hb[v]) / ((double)n * L);
    printf("%-40s identical=%.3f agree=%.3f tv=%.4f\n", what, (double)identical / n,
           (double)agree / ((double)n * L), 0.5 * tv);
    free(ha);
    free(hb);
}

int main(int argc, char **argv)
{
    opts o = parse(argc, argv);
    if (o.n_paths < 1 || o.n < 1) {
        fprintf(stderr, "usage: quant_sample_stats F32.safetensors [REDUCED ...] [--n N] "
                        "[--steps K] [--seed S] [--threads T]\n");
        return 2;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = o.threads;
    nctmc_context *ctx = NULL;
    nctmc_model *m[MAX_MODELS] = {NULL};
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return 1;
    bool fast = cpu_backend_set_bf16_dot(ctx->backend, !o.portable);
    for (int k = 0; k < o.n_paths; k++)
        if (nctmc_model_load(ctx, o.paths[k], &m[k]) != NCTMC_OK) {
            fprintf(stderr, "%s: %s\n", o.paths[k], nctmc_context_last_error(ctx));
            return 1;
        }
    int L = nctmc_model_seq_len(m[0]), S = nctmc_model_vocab_size(m[0]);
    size_t n_tok = (size_t)o.n * (size_t)L;
    int32_t *ref = malloc(sizeof(int32_t) * n_tok), *other = malloc(sizeof(int32_t) * n_tok);
    if (draw(m[0], &o, o.seed, ref) != 0 || draw(m[0], &o, o.seed + 1000, other) != 0)
        return 1;
    printf("%d samples, %d steps, seed %llu, %s kernel; reference %s\n", o.n, o.steps,
           (unsigned long long)o.seed, fast ? "AVX512-BF16" : "portable", o.paths[0]);
    compare("f32, another seed (sampling noise)", ref, other, o.n, L, S);
    for (int k = 1; k < o.n_paths; k++) {
        if (draw(m[k], &o, o.seed, other) != 0)
            return 1;
        compare(o.paths[k], ref, other, o.n, L, S);
    }
    free(ref);
    free(other);
    for (int k = 0; k < o.n_paths; k++)
        nctmc_model_free(m[k]);
    nctmc_context_free(ctx);
    return 0;
}
