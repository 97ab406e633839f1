/*
 * eval_agree.c — the ranks of a data-parallel nctmc_eval() agree before
 * they start: each hashes what must be the same everywhere, rank 0's hashes
 * are broadcast, and every rank's differences and refusals are summed, so
 * that all of them return alike (eval_agree.h).
 */
#include "eval_agree.h"

#include <string.h>

#include "comm/comm_agree.h"

enum {
    AGREE_VERSION,
    AGREE_CONFIG,
    AGREE_PARAMS,
    AGREE_DATA,
    AGREE_REFUSED,   /* not a hash: the ranks that refused their own call */
    AGREE_COUNT
};

static const char *const agree_names[AGREE_REFUSED] = {
    "the library version",
    "the model's configuration",
    "the eval parameters",
    "the held-out tokens or labels",
};

static uint64_t hash_params(const nctmc_eval_params *p)
{
    uint64_t h = COMM_HASH_START;
    int32_t has_labels = p->labels != NULL;
    COMM_HASH_VALUE(h, p->n_sequences);
    COMM_HASH_VALUE(h, p->length);
    COMM_HASH_VALUE(h, p->batch_size);
    COMM_HASH_VALUE(h, p->n_time_samples);
    COMM_HASH_VALUE(h, p->t_max);
    COMM_HASH_VALUE(h, p->seed);
    COMM_HASH_VALUE(h, p->time_sampling);
    COMM_HASH_VALUE(h, has_labels);
    return h;
}

/* Only once the call's own checks passed: the sizes are then sane. */
static uint64_t hash_data(const nctmc_eval_params *p)
{
    uint64_t h = comm_hash_bytes(COMM_HASH_START, p->tokens,
                                 (size_t)p->n_sequences * (size_t)p->length * sizeof(int32_t));
    if (p->labels)
        h = comm_hash_bytes(h, p->labels, (size_t)p->n_sequences * sizeof(int32_t));
    return h;
}

static void hash_all(const nctmc_model *m, const nctmc_eval_params *p, bool checked,
                     uint64_t *d)
{
    const char *version = nctmc_version();
    d[AGREE_VERSION] = comm_hash_bytes(COMM_HASH_START, version, strlen(version));
    uint64_t h = comm_hash_bytes(COMM_HASH_START, &m->dims, sizeof m->dims);
    COMM_HASH_VALUE(h, m->fp.process);
    COMM_HASH_VALUE(h, m->fp.schedule);
    d[AGREE_CONFIG] = h;
    d[AGREE_PARAMS] = hash_params(p);
    d[AGREE_DATA] = checked ? hash_data(p) : 0;
}

nctmc_status eval_agree(nctmc_model *m, const nctmc_eval_params *p, nctmc_status local)
{
    nctmc_comm *comm = p->comm;
    int32_t rank = comm_rank(comm), ranks = comm_size(comm);
    if (ranks == 1)
        return local;
    uint64_t mine[AGREE_REFUSED];
    hash_all(m, p, local == NCTMC_OK, mine);
    char why[NCTMC_ERROR_SIZE];
    double count[AGREE_COUNT];
    bool differs = false;
    nctmc_status st = comm_agree(comm, mine, AGREE_REFUSED, local == NCTMC_OK, count, &differs,
                                 why, sizeof why);
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
    comm_agree_names(count, agree_names, AGREE_REFUSED, ranks, what, sizeof what);
    if (what[0])
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "eval, rank %d of %d: the ranks do not evaluate the same thing; they "
                         "differ from rank 0 in %s%s",
                         (int)rank, (int)ranks, what, differs ? " (this rank among them)" : "");
    return NCTMC_OK;
}
