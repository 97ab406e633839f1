/*
 * philox_ref.h — Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3", SC 2011) for the tests, written from
 * the published algorithm without the library's headers, so that a test of
 * the public API can re-derive the draws the library documents
 * (docs/math.md, "Random numbers"). The 64-bit key is the pair (low 32
 * bits, high 32 bits). test_eval.c checks it against Random123's
 * known-answer vectors, test_eval_math.c against the library's own
 * philox4x32_10 (lib/math/philox.h). Public only: system headers.
 */
#ifndef NCTMC_TEST_PHILOX_REF_H
#define NCTMC_TEST_PHILOX_REF_H

#include <stdint.h>

typedef struct philox_ref_block {
    uint32_t w[4];
} philox_ref_block;

/* the two round multipliers and the Weyl key increments (golden ratio,
 * sqrt(3) - 1) of Philox4x32 */
#define PHILOX_REF_M0 0xD2511F53u
#define PHILOX_REF_M1 0xCD9E8D57u
#define PHILOX_REF_W0 0x9E3779B9u
#define PHILOX_REF_W1 0xBB67AE85u

/* One round: two 32x32 -> 64-bit products, the words permuted and the high
 * halves mixed with the other words and the round key. */
static inline philox_ref_block philox_ref_round(philox_ref_block x, uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)PHILOX_REF_M0 * (uint64_t)x.w[0];
    uint64_t p1 = (uint64_t)PHILOX_REF_M1 * (uint64_t)x.w[2];
    philox_ref_block y;
    y.w[0] = (uint32_t)(p1 >> 32) ^ x.w[1] ^ k0;
    y.w[1] = (uint32_t)p1;
    y.w[2] = (uint32_t)(p0 >> 32) ^ x.w[3] ^ k1;
    y.w[3] = (uint32_t)p0;
    return y;
}

/* Ten rounds of the counter (c0, c1, c2, c3) under `key`; round r uses the
 * key plus r times the Weyl increments (mod 2^32). */
static inline philox_ref_block philox_ref(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                          uint64_t key)
{
    philox_ref_block x = {{c0, c1, c2, c3}};
    uint32_t k0 = (uint32_t)(key & 0xFFFFFFFFu), k1 = (uint32_t)(key >> 32);
    for (uint32_t r = 0; r < 10; r++)
        x = philox_ref_round(x, k0 + r * PHILOX_REF_W0, k1 + r * PHILOX_REF_W1);
    return x;
}

#endif /* NCTMC_TEST_PHILOX_REF_H */
