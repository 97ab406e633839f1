/*
 * comm_agree.c — the ranks compare hashes of what must be the same on all
 * of them and name the differences (comm_agree.h).
 */
#include "comm_agree.h"

#include <stdio.h>
#include <string.h>

enum { AGREE_MAX = 32 };

uint64_t comm_hash_bytes(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t k = 0; k < n; k++) {
        h ^= b[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

nctmc_status comm_agree(nctmc_comm *c, const uint64_t *mine, int32_t n, bool take_part,
                        double *count, bool *differs, char *err, size_t err_size)
{
    uint64_t root[AGREE_MAX];
    if (n < 0 || n > AGREE_MAX) {
        snprintf(err, err_size, "comparing %d hashes, at most %d", (int)n, (int)AGREE_MAX);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    size_t bytes = (size_t)n * sizeof *mine;
    memcpy(root, mine, bytes);
    nctmc_status st = comm_broadcast(c, root, (int64_t)bytes, 0, err, err_size);
    for (int32_t k = 0; k < n; k++)
        count[k] = mine[k] != root[k] && take_part ? 1.0 : 0.0;
    count[n] = take_part ? 0.0 : 1.0;
    *differs = memcmp(mine, root, bytes) != 0;
    if (st == NCTMC_OK)
        st = comm_sum(c, count, (int64_t)n + 1, COMM_DOUBLE, err, err_size);
    return st;
}

void comm_agree_names(const double *count, const char *const *names, int32_t n, int32_t ranks,
                      char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int32_t k = 0; k < n && used < size; k++)
        if (count[k] > 0.0)
            used += (size_t)snprintf(out + used, size - used, "%s%s (%d of %d ranks)",
                                     used ? "; " : "", names[k], (int)count[k], (int)ranks);
}
