/*
 * test_util.h — the tests' small shared harness: checks that count and report,
 * a seeded random source for inputs (never all zeros), and the closing line
 * "N passed, N failed" that CI reads.
 */
#ifndef NCTMC_TEST_UTIL_H
#define NCTMC_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct test_counts {
    int passed;
    int failed;
} test_counts;

static test_counts test_counts_global;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (cond) {                                                             \
            test_counts_global.passed++;                                        \
        } else {                                                                \
            test_counts_global.failed++;                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)

/* |a - b| <= atol + rtol |b| */
#define CHECK_CLOSE(a, b, rtol, atol, what)                                     \
    do {                                                                        \
        double ca_ = (double)(a), cb_ = (double)(b);                            \
        CHECK(fabs(ca_ - cb_) <= (atol) + (rtol) * fabs(cb_),                   \
              "%s: got %.9g want %.9g (diff %.3g)", (what), ca_, cb_,            \
              fabs(ca_ - cb_));                                                 \
    } while (0)

/* Prints the closing line and returns the process exit code. */
static inline int test_finish(const char *suite)
{
    printf("%s: %d passed, %d failed\n", suite, test_counts_global.passed,
           test_counts_global.failed);
    return test_counts_global.failed == 0 ? 0 : 1;
}

/* xorshift64* — test inputs only (the library uses Philox). */
typedef struct test_rng {
    uint64_t s;
} test_rng;

static inline test_rng test_rng_seed(uint64_t seed)
{
    test_rng r = {seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull};
    if (r.s == 0)
        r.s = 1;
    return r;
}

static inline uint64_t test_rng_next(test_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* uniform in [lo, hi) */
static inline float test_uniform(test_rng *r, float lo, float hi)
{
    double u = (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

static inline int32_t test_randint(test_rng *r, int32_t n)
{
    return (int32_t)(test_rng_next(r) % (uint64_t)n);
}

static inline void test_fill_uniform(test_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = test_uniform(r, lo, hi);
}

/* Largest |a - b| / max(|b|, floor) over n values. */
static inline double test_max_rel_err(const float *a, const float *b, size_t n, double floor_)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs((double)b[i]);
        if (den < floor_)
            den = floor_;
        double e = fabs((double)a[i] - (double)b[i]) / den;
        if (isnan(e))
            return INFINITY;
        if (e > worst)
            worst = e;
    }
    return worst;
}

#endif /* NCTMC_TEST_UTIL_H */
