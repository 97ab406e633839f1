/*
 * test_crc32.c — the library's CRC-32 (lib/base/crc32.c, internal): the
 * standard check value, pieces against one go, and both against a
 * bit-at-a-time reference around the lengths where its faster paths start.
 * (Split out of test_dataset.c, which tests the shards through the public
 * API only; it draws the same random bytes, from the generator seeded 7.)
 */
#include <stdint.h>
#include <stdlib.h>

#include "base/crc32.h"
#include "test_files.h"
#include "test_util.h"

static void test_crc32(test_rng *rng)
{
    CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u, "the standard check value");
    CHECK(crc32_update(0, "", 0) == 0, "empty");
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)test_rng_next(rng);
    uint32_t pieces = crc32_update(crc32_update(crc32_update(0, buf, 1), buf + 1, 500), buf + 501,
                                   499);
    CHECK(pieces == test_crc32_of(buf, sizeof buf) && crc32_update(0, buf, sizeof buf) == pieces,
          "in pieces, in one go and bit by bit agree");
    /* lengths around where the 8-bytes-at-a-time path starts (1 KiB) */
    uint8_t mid[1100];
    for (size_t i = 0; i < sizeof mid; i++)
        mid[i] = (uint8_t)test_rng_next(rng);
    for (size_t n = 1016; n <= 1040; n++)
        CHECK(crc32_update(0, mid, n) == test_crc32_of(mid, n) &&
                  crc32_update(crc32_update(0, mid, 3), mid + 3, n - 3) == test_crc32_of(mid, n),
              "%zu bytes, whole and split, match bit by bit", n);
    /* long inputs take the 8-bytes-at-a-time path; odd lengths and split
     * points exercise its tail */
    size_t big = 300007;
    uint8_t *large = malloc(big);
    for (size_t i = 0; i < big; i++)
        large[i] = (uint8_t)test_rng_next(rng);
    uint32_t whole = crc32_update(0, large, big);
    uint32_t split = crc32_update(crc32_update(0, large, 70001), large + 70001, big - 70001);
    CHECK(whole == test_crc32_of(large, big) && split == whole,
          "a long input, whole and split, matches bit by bit");
    free(large);
}

int main(void)
{
    test_rng rng = test_rng_seed(7);
    test_crc32(&rng);
    return test_finish("crc32");
}
