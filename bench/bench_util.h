/*
 * bench_util.h — the benchmarks' shared clock and median.
 */
#ifndef NCTMC_BENCH_UTIL_H
#define NCTMC_BENCH_UTIL_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nctmc.h"

/* Monotonic seconds. */
static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The benchmarks' configurations by name: "cpu-small" (the default config:
 * 6 layers, d 384, 6 heads, L 256, S 256), "tiny", and "paper-small"
 * (docs/model.md, "Reference sizes": 12 layers, d 768, 12 heads, L 512,
 * V 50304). Unknown names give cpu-small. */
static inline nctmc_model_config config_named(const char *name)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    if (strcmp(name, "paper-small") == 0) {
        c.vocab_size = 50257;
        c.vocab_pad_multiple = 128; /* V = 50304 */
        c.seq_len = 512;
        c.n_layers = 12;
        c.d_model = 768;
        c.n_heads = 12;
    } else if (strcmp(name, "tiny") == 0) {
        c.n_layers = 2;
        c.d_model = 64;
        c.n_heads = 2;
        c.seq_len = 32;
        c.vocab_size = 32;
    }
    return c;
}

#endif /* NCTMC_BENCH_UTIL_H */
