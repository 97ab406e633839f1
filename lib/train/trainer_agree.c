/*
 * trainer_agree.c — ranks of a data-parallel run check that they train the
 * same thing before they sum anything: each hashes what must be the same
 * everywhere (the library version, the model's configuration, its weights,
 * optimizer moments and EMA, the parameters, the seed, the run's position,
 * the dataset), rank 0's hashes are broadcast, and the ranks' differences
 * are summed, so that every rank fails alike and names what differs.
 */
#include <string.h>

#include "comm/comm_agree.h"
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

static uint64_t hash_params(const nctmc_trainer_params *p)
{
    uint64_t h = COMM_HASH_START;
    COMM_HASH_VALUE(h, p->batch_size);
    COMM_HASH_VALUE(h, p->seq_len);
    COMM_HASH_VALUE(h, p->learning_rate);
    COMM_HASH_VALUE(h, p->min_lr_ratio);
    COMM_HASH_VALUE(h, p->warmup_steps);
    COMM_HASH_VALUE(h, p->total_steps);
    COMM_HASH_VALUE(h, p->beta1);
    COMM_HASH_VALUE(h, p->beta2);
    COMM_HASH_VALUE(h, p->adam_eps);
    COMM_HASH_VALUE(h, p->weight_decay);
    COMM_HASH_VALUE(h, p->grad_clip);
    COMM_HASH_VALUE(h, p->ema_decay);
    COMM_HASH_VALUE(h, p->time_eps);
    COMM_HASH_VALUE(h, p->label_dropout);
    COMM_HASH_VALUE(h, p->time_sampling);
    COMM_HASH_VALUE(h, p->accumulation);
    return h;
}

/* The weights, both moments and the EMA, through the reduction buffer. */
static nctmc_status hash_slabs(nctmc_trainer *t, uint64_t *out)
{
    const float *slabs[] = {t->model->weights, t->adam_m, t->adam_v, t->ema};
    size_t bytes = t->model->slab_floats * sizeof(float);
    uint64_t h = COMM_HASH_START;
    for (size_t k = 0; k < sizeof slabs / sizeof slabs[0]; k++) {
        if (!slabs[k])
            continue;
        t->be->ops->download(t->be, t->host_reduce, slabs[k], bytes);
        nctmc_status st = t->be->ops->synchronize(t->be);
        if (st != NCTMC_OK)
            return FAIL_INTO(t, st, "reading the weights: %s", t->be->error);
        h = comm_hash_bytes(h, t->host_reduce, bytes);
    }
    *out = h;
    return NCTMC_OK;
}

static nctmc_status hash_all(nctmc_trainer *t, nctmc_dataset *ds, uint64_t *d)
{
    const nctmc_model *m = t->model;
    const char *version = nctmc_version();
    d[AGREE_VERSION] = comm_hash_bytes(COMM_HASH_START, version, strlen(version));
    uint64_t h = comm_hash_bytes(COMM_HASH_START, &m->dims, sizeof m->dims);
    COMM_HASH_VALUE(h, m->fp.process);
    COMM_HASH_VALUE(h, m->fp.schedule);
    d[AGREE_CONFIG] = h;
    d[AGREE_PARAMS] = hash_params(&t->params);
    /* every rank must start the same sums, or the collectives mismatch */
    d[AGREE_BUCKETS] = t->bucket_lo
                           ? comm_hash_bytes(COMM_HASH_START, t->bucket_lo,
                                             (size_t)dit_grad_stages(m) * sizeof(int64_t))
                           : COMM_HASH_START;
    d[AGREE_SEED] = comm_hash_bytes(COMM_HASH_START, &t->params.seed, sizeof t->params.seed);
    h = COMM_HASH_START;
    COMM_HASH_VALUE(h, t->state.step);
    COMM_HASH_VALUE(h, t->state.optimizer_steps);
    COMM_HASH_VALUE(h, t->state.data_position);
    d[AGREE_POSITION] = h;
    h = COMM_HASH_START;
    if (ds) {
        nctmc_dataset_info info;
        nctmc_dataset_info_init(&info);
        nctmc_status st = nctmc_dataset_get_info(ds, &info);
        if (st != NCTMC_OK)
            return FAIL_INTO(t, st, "dataset: %s", nctmc_dataset_last_error(ds));
        COMM_HASH_VALUE(h, info.vocab_size);
        COMM_HASH_VALUE(h, info.seq_len);
        COMM_HASH_VALUE(h, info.n_classes);
        COMM_HASH_VALUE(h, info.n_tokens);
        COMM_HASH_VALUE(h, info.n_sequences);
        COMM_HASH_VALUE(h, info.checksum);
    }
    d[AGREE_DATA] = h;
    return hash_slabs(t, &d[AGREE_WEIGHTS]);
}

nctmc_status trainer_agree(nctmc_trainer *t, nctmc_dataset *ds)
{
    nctmc_comm *comm = t->params.comm;
    if (comm_size(comm) == 1) {
        t->agreed = true;
        t->agreed_ds = ds;
        return NCTMC_OK;
    }
    uint64_t mine[AGREE_COUNT];
    nctmc_status st = hash_all(t, ds, mine);
    if (st != NCTMC_OK)
        return st;
    char why[NCTMC_ERROR_SIZE];
    double count[AGREE_COUNT + 1]; /* the last: ranks not taking part, none here */
    bool differs = false;
    st = comm_agree(comm, mine, AGREE_COUNT, true, count, &differs, why, sizeof why);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "rank %d of %d: comparing the ranks' runs: %s",
                         (int)comm_rank(comm), (int)comm_size(comm), why);
    char what[NCTMC_ERROR_SIZE];
    comm_agree_names(count, agree_names, AGREE_COUNT, comm_size(comm), what, sizeof what);
    if (what[0])
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "rank %d of %d: the ranks do not train the same run; they differ "
                         "from rank 0 in %s%s",
                         (int)comm_rank(comm), (int)comm_size(comm), what,
                         differs ? " (this rank among them)" : "");
    t->agreed = true;
    t->agreed_ds = ds;
    return NCTMC_OK;
}
