/*
 * bench_sgemm_ceiling.c — how fast a float32 sampling step could possibly
 * be on this machine: OpenBLAS's own sgemm rate on the matrix products of a
 * cpu-small batch-1 step (6 layers, d 384, 6 heads, MLP 1536, L 256, S 256),
 * each product run alone with its operands hot in cache (the best of many
 * repetitions: a rate no real step reaches, since a step's weights come in
 * cold and it has softmax, GELU, norms and the sampling op besides), and the
 * step's time if every product ran at that rate and nothing else cost
 * anything.
 *
 * Output, key=value pairs:
 *   bench=sgemm_ceiling threads=T m=.. n=.. k=.. count=.. ms=.. gflops=..
 *       (one line per product shape; count = how many a step runs)
 *   bench=step_floor config=cpu-small batch=1 threads=T gflop=.. floor_ms=..
 * floor_ms is the lower bound on a float32 batch-1 step's time through
 * these products: a step measured beside another implementation cannot be
 * faster than that implementation by more than its time / floor_ms.
 *
 * Usage: bench_sgemm_ceiling [--threads 1,2] [--reps 50]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

typedef struct product {
    const char *what;
    int m, n, k; /* C[m x n] = A[m x k] B^T, B stored [n x k] like a weight */
    int count;   /* per batch-1 step of cpu-small */
} product;

/* cpu-small: L 256, d 384, 6 heads of 64, MLP 1536, S 256, 6 layers. The
 * per-head attention products (Q K^T and P V) are counted per head. */
static const product step_products[] = {
    {"qkv", 256, 1152, 384, 6},
    {"attn_out", 256, 384, 384, 6},
    {"mlp_in", 256, 1536, 384, 6},
    {"mlp_out", 256, 384, 1536, 6},
    {"scores", 256, 256, 64, 36},
    {"values", 256, 64, 256, 36},
    {"output", 256, 256, 384, 1},
};

static double best_ms(const product *p, int reps)
{
    size_t na = (size_t)p->m * p->k, nb = (size_t)p->n * p->k, nc = (size_t)p->m * p->n;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    for (size_t i = 0; i < na; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < nb; i++)
        b[i] = (float)(i % 5) * 0.1f;
    double best = 1e30;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->m, p->n, p->k, 1.0f, a, p->k,
                    b, p->k, 0.0f, c, p->n);
        double t = now_s() - t0;
        if (r >= 0 && t < best)
            best = t;
    }
    free(a);
    free(b);
    free(c);
    return 1e3 * best;
}

int main(int argc, char **argv)
{
    const char *threads = "1,2";
    int reps = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0)
            threads = argv[i + 1];
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]) > 0 ? atoi(argv[i + 1]) : 1;
    }
    for (const char *s = threads; s && *s;) {
        int t = atoi(s) > 0 ? atoi(s) : 1;
        openblas_set_num_threads(t);
        double gflop = 0.0, floor_ms = 0.0;
        for (size_t k = 0; k < sizeof step_products / sizeof *step_products; k++) {
            const product *p = &step_products[k];
            double ms = best_ms(p, reps), f = 2.0 * p->m * p->n * p->k;
            printf("bench=sgemm_ceiling threads=%d what=%s m=%d n=%d k=%d count=%d ms=%.4f "
                   "gflops=%.1f\n", t, p->what, p->m, p->n, p->k, p->count, ms, f / ms / 1e6);
            gflop += p->count * f / 1e9;
            floor_ms += p->count * ms;
        }
        printf("bench=step_floor config=cpu-small batch=1 threads=%d gflop=%.3f floor_ms=%.2f\n",
               t, gflop, floor_ms);
        s = strchr(s, ',');
        s = s ? s + 1 : NULL;
    }
    return 0;
}
