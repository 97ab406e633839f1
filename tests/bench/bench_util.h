/*
 * bench_util.h — the benchmarks' shared clock and median.
 */
#ifndef NCTMC_BENCH_UTIL_H
#define NCTMC_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

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

#endif /* NCTMC_BENCH_UTIL_H */
