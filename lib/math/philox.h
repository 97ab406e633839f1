/*
 * philox.h — Philox4x32-10 counter-based random numbers (Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011), host+device.
 *
 * A draw is a pure function of (key, counter): the library keys it with the
 * user's seed and encodes in the counter what the numbers are for (purpose,
 * step, sequence, position), so results never depend on thread count, batch
 * composition or the order in which a backend does its work.
 */
#ifndef NCTMC_PHILOX_H
#define NCTMC_PHILOX_H

#include <stdint.h>

#include "forward_process.h" /* NCTMC_HD */

typedef struct philox4x32 {
    uint32_t v[4];
} philox4x32;

/* What a stream of numbers is for: the first counter word. */
enum {
    NCTMC_RNG_INIT = 1,          /* weight initialisation: (tensor, element block) */
    NCTMC_RNG_TRAIN_TIME = 2,    /* trainer: (step) -> stratified times offset */
    NCTMC_RNG_TRAIN_NOISE = 3,   /* trainer: (step, sequence, position) -> x_t */
    NCTMC_RNG_TRAIN_LABEL = 4,   /* trainer: (step, sequence) -> label dropout */
    NCTMC_RNG_TRAIN_DATA = 5,    /* trainer: (data position) -> which window */
    NCTMC_RNG_SAMPLE_PRIOR = 6,  /* sampler: (sequence, position) -> x at t_max */
    NCTMC_RNG_SAMPLE_STEP = 7,   /* sampler: (step, sequence, position) */
    NCTMC_RNG_SAMPLE_CORRECT = 8,/* sampler: (update, sequence, position) */
    NCTMC_RNG_EVAL = 9,          /* eval: (batch, sequence, position) */
};

static inline NCTMC_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* The ten-round Philox4x32 bijection of `counter` under `key`. */
static inline NCTMC_HD philox4x32 philox4x32_10(philox4x32 counter, uint64_t key)
{
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, &hi1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    philox4x32 out = {{c0, c1, c2, c3}};
    return out;
}

/* A float uniform on (0, 1), never exactly 0 or 1: 24 random bits + 1/2 ulp. */
static inline NCTMC_HD float philox_uniform(uint32_t bits)
{
    return ((float)(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

#endif /* NCTMC_PHILOX_H */
