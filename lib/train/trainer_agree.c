/*
 * trainer_agree.c — ranks of a data-parallel run check that they train the
 * same thing before they sum anything: each hashes what must be the same
 * everywhere (the library version, the model's configuration, its weights,
 * optimizer moments and EMA, the parameters, the seed, the run's position,
 * the dataset), rank 0's hashes are broadcast, and the ranks' differences
 * are summed, so that every rank fails alike and names what differs.
 */
#include <stdio.h>
#include <string.h>

#include "trainer.h"

enum {
    AGREE_VERSION,
    AGREE_CONFIG,
    AGREE_WEIGHTS,
    AGREE_PARAMS,
    AGREE_SEED,
    AGREE_POSITION,
    AGREE_DATA,
    AGREE_BUCKETS,
    AGREE_COUNT
};

static const char *const agree_names[AGREE_COUNT] = {
    "the library version",
    "the model's configuration",
    "the model's weights or optimizer state (initialisation or checkpoint)",
    "the trainer parameters",
    "the seed",
    "the run's position (step, data position)",
    "the dataset",
    "the gradient buckets (NCTMC_COMM_OVERLAP, NCTMC_COMM_BUCKET_BYTES)",
};

/* FNV-1a, 64 bits. */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t k = 0; k < n; k++) {
        h ^= p[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define HASH_START 0xcbf29ce484222325ull
#define HASH_VALUE(h, v) ((h) = hash_bytes((h), &(v), sizeof(v)))

static uint64_t hash_params(const nctmc_trainer_params *p)
{
    uint64_t h = HASH_START;
    HASH_VALUE(h, p->batch_size);
    HASH_VALUE(h, p->seq_len);
    HASH_VALUE(h, p->learning_rate);
    HASH_VALUE(h, p->min_lr_ratio);
    HASH_VALUE(h, p->warmup_steps);
    HASH_VALUE(h, p->total_steps);
    HASH_VALUE(h, p->beta1);
    HASH_VALUE(h, p->beta2);
    HASH_VALUE(h, p->adam_eps);
    HASH_VALUE(h, p->weight_decay);
    HASH_VALUE(h, p->grad_clip);
    HASH_VALUE(h, p->ema_decay);
    HASH_VALUE(h, p->time_eps);
    HASH_VALUE(h, p->label_dropout);
    HASH_VALUE(h, p->time_sampling);
    HASH_VALUE(h, p->accumulation);
    return h;
}

/* The weights, both moments and the EMA, through the reduction buffer. */
static nctmc_status hash_slabs(nctmc_trainer *t, uint64_t *out)
{
    const float *slabs[] = {t->model->weights, t->adam_m, t->adam_v, t->ema};
    size_t bytes = t->model->slab_floats * sizeof(float);
    uint64_t h = HASH_START;
    for (size_t k = 0; k < sizeof slabs / sizeof slabs[0]; k++) {
        if (!slabs[k])
            continue;
        t->be->ops->download(t->be, t->host_reduce, slabs[k], bytes);
        nctmc_status st = t->be->ops->synchronize(t->be);
        if (st != NCTMC_OK)
            return FAIL_INTO(t, st, "reading the weights: %s", t->be->error);
        h = hash_bytes(h, t->host_reduce, bytes);
    }
    *out = h;
    return NCTMC_OK;
}

static nctmc_status hash_all(nctmc_trainer *t, nctmc_dataset *ds, uint64_t *d)
{
    const nctmc_model *m = t->model;
    const char *version = nctmc_version();
    d[AGREE_VERSION] = hash_bytes(HASH_START, version, strlen(version));
    uint64_t h = hash_bytes(HASH_START, &m->dims, sizeof m->dims);
    HASH_VALUE(h, m->fp.process);
    HASH_VALUE(h, m->fp.schedule);
    d[AGREE_CONFIG] = h;
    d[AGREE_PARAMS] = hash_params(&t->params);
    /* every rank must start the same sums, or the collectives mismatch */
    d[AGREE_BUCKETS] = t->bucket_lo ? hash_bytes(HASH_START, t->bucket_lo,
                                                 (size_t)dit_grad_stages(m) * sizeof(int64_t))
                                    : HASH_START;
    d[AGREE_SEED] = hash_bytes(HASH_START, &t->params.seed, sizeof t->params.seed);
    h = HASH_START;
    HASH_VALUE(h, t->state.step);
    HASH_VALUE(h, t->state.optimizer_steps);
    HASH_VALUE(h, t->state.data_position);
    d[AGREE_POSITION] = h;
    h = HASH_START;
    if (ds) {
        nctmc_dataset_info info;
        nctmc_dataset_info_init(&info);
        nctmc_status st = nctmc_dataset_get_info(ds, &info);
        if (st != NCTMC_OK)
            return FAIL_INTO(t, st, "dataset: %s", nctmc_dataset_last_error(ds));
        HASH_VALUE(h, info.vocab_size);
        HASH_VALUE(h, info.seq_len);
        HASH_VALUE(h, info.n_classes);
        HASH_VALUE(h, info.n_tokens);
        HASH_VALUE(h, info.n_sequences);
        HASH_VALUE(h, info.checksum);
    }
    d[AGREE_DATA] = h;
    return hash_slabs(t, &d[AGREE_WEIGHTS]);
}

/* "a (2 of 3 ranks), b (1 of 3 ranks)" for the counts that are not 0 */
static void name_differences(const double *count, int32_t ranks, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < AGREE_COUNT && used < size; k++)
        if (count[k] > 0.0)
            used += (size_t)snprintf(out + used, size - used, "%s%s (%d of %d ranks)",
                                     used ? "; " : "", agree_names[k], (int)count[k],
                                     (int)ranks);
}

nctmc_status trainer_agree(nctmc_trainer *t, nctmc_dataset *ds)
{
    nctmc_comm *comm = t->params.comm;
    if (comm_size(comm) == 1) {
        t->agreed = true;
        t->agreed_ds = ds;
        return NCTMC_OK;
    }
    uint64_t mine[AGREE_COUNT], root[AGREE_COUNT];
    nctmc_status st = hash_all(t, ds, mine);
    if (st != NCTMC_OK)
        return st;
    memcpy(root, mine, sizeof root);
    char why[NCTMC_ERROR_SIZE];
    double count[AGREE_COUNT];
    st = comm_broadcast(comm, root, (int64_t)sizeof root, 0, why, sizeof why);
    for (int k = 0; k < AGREE_COUNT; k++)
        count[k] = mine[k] != root[k] ? 1.0 : 0.0;
    if (st == NCTMC_OK)
        st = comm_sum(comm, count, AGREE_COUNT, COMM_DOUBLE, why, sizeof why);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "rank %d of %d: comparing the ranks' runs: %s",
                         (int)comm_rank(comm), (int)comm_size(comm), why);
    char what[NCTMC_ERROR_SIZE];
    name_differences(count, comm_size(comm), what, sizeof what);
    if (what[0])
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "rank %d of %d: the ranks do not train the same run; they differ "
                         "from rank 0 in %s%s",
                         (int)comm_rank(comm), (int)comm_size(comm), what,
                         memcmp(mine, root, sizeof mine) ? " (this rank among them)" : "");
    t->agreed = true;
    t->agreed_ds = ds;
    return NCTMC_OK;
}
