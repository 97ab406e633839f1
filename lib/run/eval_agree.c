/*
 * eval_agree.c — the ranks of a data-parallel nctmc_eval() agree before
 * they start: each hashes what must be the same everywhere, rank 0's hashes
 * are broadcast, and every rank's differences and refusals are summed, so
 * that all of them return alike (eval_agree.h).
 */
#include "eval_agree.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"

enum {
    AGREE_VERSION,
    AGREE_CONFIG,
    AGREE_PARAMS,
    AGREE_DATA,
    AGREE_REFUSED,   /* not a hash: 1 where the rank refused its own call */
    AGREE_COUNT
};

static const char *const agree_names[AGREE_REFUSED] = {
    "the library version",
    "the model's configuration",
    "the eval parameters",
    "the held-out tokens or labels",
};

/* FNV-1a, 64 bits. */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t k = 0; k < n; k++) {
        h ^= b[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define HASH_START 0xcbf29ce484222325ull
#define HASH_VALUE(h, v) ((h) = hash_bytes((h), &(v), sizeof(v)))

static uint64_t hash_params(const nctmc_eval_params *p)
{
    uint64_t h = HASH_START;
    int32_t has_labels = p->labels != NULL;
    HASH_VALUE(h, p->n_sequences);
    HASH_VALUE(h, p->length);
    HASH_VALUE(h, p->batch_size);
    HASH_VALUE(h, p->n_time_samples);
    HASH_VALUE(h, p->t_max);
    HASH_VALUE(h, p->seed);
    HASH_VALUE(h, p->time_sampling);
    HASH_VALUE(h, has_labels);
    return h;
}

/* Only once the call's own checks passed: the sizes are then sane. */
static uint64_t hash_data(const nctmc_eval_params *p)
{
    uint64_t h = hash_bytes(HASH_START, p->tokens,
                            (size_t)p->n_sequences * (size_t)p->length * sizeof(int32_t));
    if (p->labels)
        h = hash_bytes(h, p->labels, (size_t)p->n_sequences * sizeof(int32_t));
    return h;
}

static void hash_all(const nctmc_model *m, const nctmc_eval_params *p, bool checked,
                     uint64_t *d)
{
    const char *version = nctmc_version();
    d[AGREE_VERSION] = hash_bytes(HASH_START, version, strlen(version));
    uint64_t h = hash_bytes(HASH_START, &m->dims, sizeof m->dims);
    HASH_VALUE(h, m->fp.process);
    HASH_VALUE(h, m->fp.schedule);
    d[AGREE_CONFIG] = h;
    d[AGREE_PARAMS] = hash_params(p);
    d[AGREE_DATA] = checked ? hash_data(p) : 0;
    d[AGREE_REFUSED] = 0;
}

/* "a (2 of 3 ranks); b (1 of 3 ranks)" for the counts that are not 0 */
static void name_differences(const double *count, int32_t ranks, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < AGREE_REFUSED && used < size; k++)
        if (count[k] > 0.0)
            used += (size_t)snprintf(out + used, size - used, "%s%s (%d of %d ranks)",
                                     used ? "; " : "", agree_names[k], (int)count[k],
                                     (int)ranks);
}

nctmc_status eval_agree(nctmc_model *m, const nctmc_eval_params *p, nctmc_status local)
{
    nctmc_comm *comm = p->comm;
    int32_t rank = comm_rank(comm), ranks = comm_size(comm);
    if (ranks == 1)
        return local;
    uint64_t mine[AGREE_COUNT], root[AGREE_COUNT];
    hash_all(m, p, local == NCTMC_OK, mine);
    memcpy(root, mine, sizeof root);
    char why[NCTMC_ERROR_SIZE];
    nctmc_status st = comm_broadcast(comm, root, (int64_t)sizeof root, 0, why, sizeof why);
    double count[AGREE_COUNT];
    for (int k = 0; k < AGREE_REFUSED; k++)
        count[k] = mine[k] != root[k] && local == NCTMC_OK ? 1.0 : 0.0;
    count[AGREE_REFUSED] = local != NCTMC_OK ? 1.0 : 0.0;
    if (st == NCTMC_OK)
        st = comm_sum(comm, count, AGREE_COUNT, COMM_DOUBLE, why, sizeof why);
    if (st != NCTMC_OK)
        return FAIL_INTO(m, st, "eval, rank %d of %d: comparing the ranks' calls: %s", (int)rank,
                         (int)ranks, why);
    if (local != NCTMC_OK)
        return local;  /* its own message stays */
    if (count[AGREE_REFUSED] > 0.0)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "eval, rank %d of %d: %d of %d ranks refused their call (their "
                         "errors say why); no rank evaluated",
                         (int)rank, (int)ranks, (int)count[AGREE_REFUSED], (int)ranks);
    char what[NCTMC_ERROR_SIZE];
    name_differences(count, ranks, what, sizeof what);
    if (what[0])
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "eval, rank %d of %d: the ranks do not evaluate the same thing; they "
                         "differ from rank 0 in %s%s",
                         (int)rank, (int)ranks, what,
                         memcmp(mine, root, sizeof mine) ? " (this rank among them)" : "");
    return NCTMC_OK;
}
