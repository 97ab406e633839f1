/*
 * eval_median.h — medians for nctmc_eval's per-bucket exit-rate statistics, in
 * memory that does not grow with the data: each (time bucket, clean/noisy)
 * keeps at most `cap` values — every value while there are fewer, beyond
 * that a uniform random subset (reservoir sampling, Vitter's algorithm R,
 * with Philox draws so the subset is reproducible) — and the median of what
 * is kept is then found exactly by selection in O(n).
 */
#ifndef NCTMC_EVAL_MEDIAN_H
#define NCTMC_EVAL_MEDIAN_H

#include <math.h>
#include <stdint.h>

#include "math/philox.h"

typedef struct eval_reservoir {
    float *values;   /* cap slots */
    int64_t cap;
    int64_t n_seen;  /* values offered so far (kept or not) */
} eval_reservoir;

/* Offers v. Past the cap, the n-th value (0-based) replaces a random slot
 * with probability cap / (n + 1), which keeps every value seen so far in
 * the reservoir with the same probability. `key` and `slot` name the
 * reservoir's Philox stream (the first counter word is `purpose`). */
static inline void eval_reservoir_add(eval_reservoir *r, float v, uint64_t key,
                                      uint32_t purpose, uint32_t slot)
{
    int64_t n = r->n_seen++;
    if (n < r->cap) {
        r->values[n] = v;
        return;
    }
    philox4x32 c = {{purpose, slot, (uint32_t)n, (uint32_t)((uint64_t)n >> 32)}};
    philox4x32 d = philox4x32_10(c, key);
    uint64_t bits = (uint64_t)d.v[0] << 32 | d.v[1];
    uint64_t j = bits % ((uint64_t)n + 1);
    if (j < (uint64_t)r->cap)
        r->values[j] = v;
}

static inline int64_t eval_reservoir_size(const eval_reservoir *r)
{
    return r->n_seen < r->cap ? r->n_seen : r->cap;
}

static inline void eval_swap(float *a, int64_t i, int64_t j)
{
    float t = a[i];
    a[i] = a[j];
    a[j] = t;
}

static inline float eval_median_of_3(float a, float b, float c)
{
    if (a > b) {
        float t = a;
        a = b;
        b = t;
    }
    return c < a ? a : (c > b ? b : c);
}

/* Reorders a[0, n) so that a[k] is the k-th smallest, everything before it
 * <= a[k] and everything after >= a[k] (Hoare partitioning around a
 * median-of-three pivot). No NaN allowed. */
static inline float eval_select(float *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = eval_median_of_3(a[lo], a[lo + (hi - lo) / 2], a[hi]);
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j)
                eval_swap(a, i++, j--);
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;  /* j < k < i: a[k] equals the pivot and is in place */
    }
    return a[k];
}

/* The median of a[0, n) (reordering it): the middle value, or the mean of
 * the two middle values for even n; NaN for n = 0. */
static inline double eval_median(float *a, int64_t n)
{
    if (n <= 0)
        return NAN;
    int64_t k = n / 2;
    double upper = (double)eval_select(a, n, k);
    if (n % 2 == 1)
        return upper;
    double lower = (double)a[0];  /* the largest of a[0, k) */
    for (int64_t i = 1; i < k; i++)
        lower = (double)a[i] > lower ? (double)a[i] : lower;
    return 0.5 * (lower + upper);
}

#endif /* NCTMC_EVAL_MEDIAN_H */
