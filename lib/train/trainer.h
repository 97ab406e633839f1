/*
 * trainer.h — the trainer handle's internals, shared by the training step
 * (trainer.c) and its checkpoints (trainer_checkpoint.c).
 */
#ifndef NCTMC_TRAINER_H
#define NCTMC_TRAINER_H

#include "comm/comm.h"
#include "dit/dit.h"
#include "model/model.h"

struct nctmc_trainer {
    nctmc_model *model;         /* updated in place; one reference held */
    nctmc_backend *be;          /* the model's backend */
    nctmc_trainer_params params;
    int32_t seq_len;            /* L of every batch */
    dit_workspace *ws;          /* training activation arena */
    /* The step's share of the global batch: rows (sequences) [row0, row0 +
     * rows) of global_rows, in micro-batches of params.batch_size. */
    int32_t rows;               /* batch_size x accumulation */
    int64_t row0;
    int64_t global_rows;
    int32_t micro_total;        /* micro-batches of the global batch */
    /* Backend slabs with the model's parameter layout. */
    float *grads;
    float *grad_part;           /* a micro-batch's gradient; NULL without
                                   accumulation */
    float *adam_m;
    float *adam_v;
    float *ema;                 /* NULL when params.ema_decay is 0 */
    /* Host staging for the step's rows R = rows (all its micro-batches),
     * allocated once. */
    int32_t *host_x0;           /* [R * L] */
    int32_t *host_xt;           /* [R * L] */
    int32_t *host_labels;       /* [R], or NULL for an unconditional model */
    float *host_times;          /* [R] */
    float *host_weights;        /* [R] importance weights of the times */
    float *host_rate_h;         /* [B * L] for the mean log rate */
    /* Data-parallel (params.comm of several ranks; else NULL / unused): the
     * host copy of the gradient slab the ranks sum, and what the ranks last
     * agreed on (trainer_agree.c): none yet, or the dataset of the steps. */
    float *host_reduce;
    /* Overlap (comm_overlap): the last micro-batch's backward pass hands each
     * bucket of the slab to the sum as soon as its gradients are final.
     * bucket_lo[s]: where the bucket that stage s completes begins (floats),
     * -1 when stage s completes none; reduce_next: the end of the next
     * bucket during the pass; add_part: that micro-batch's grad_part is
     * added into grads bucket by bucket; reduce_status / reduce_error: the
     * first failure in the pass. comm_seconds: this step's exposed time. */
    int64_t *bucket_lo;         /* [dit_grad_stages], or NULL without overlap */
    size_t reduce_next;
    bool add_part;
    nctmc_status reduce_status;
    char reduce_error[NCTMC_ERROR_SIZE];
    double comm_seconds;
    bool agreed;
    const nctmc_dataset *agreed_ds;
    nctmc_trainer_state state;
    char last_error[NCTMC_ERROR_SIZE];
};

/* Reads a caller's trainer parameters of any struct_size into *p (this
 * build's struct, defaults where the caller's struct ends); writes why on
 * failure. */
nctmc_status trainer_params_read(const nctmc_trainer_params *given, nctmc_trainer_params *p,
                                 char *err, size_t err_size);

/* The most a run's counters (step, optimizer_steps, data_position,
 * n_skipped) may reach: 2^62, beyond any real run, with room left for a
 * step's increments. A trainer refuses a step that would pass it and the
 * checkpoint loader refuses larger values, so every checkpoint a trainer
 * saves loads again, and no counter can overflow. */
#define TRAINER_COUNTER_MAX ((int64_t)1 << 62)

/* The most tokens one step may hold (batch_size x seq_len): the training
 * workspace grows with it, and a checkpoint's metadata names it, so it is
 * bounded like every size a file can ask for (docs/api.md). */
#define TRAINER_MAX_BATCH_TOKENS ((int64_t)1 << 22)

/* The most micro-batches per step (nctmc_trainer_params.accumulation), and
 * the most tokens one step's micro-batches together may hold (the host
 * staging of x_0 and x_t grows with it). */
#define TRAINER_MAX_ACCUMULATION 4096
#define TRAINER_MAX_STEP_TOKENS ((int64_t)1 << 26)

/* Checks trainer parameters for a model of sequence length model_seq_len;
 * writes why on failure. */
nctmc_status trainer_params_validate(const nctmc_trainer_params *p, int32_t model_seq_len,
                                     char *err, size_t err_size);

/* Before the first step of a data-parallel run and whenever the dataset
 * changes (ds NULL: the caller's batches), the ranks compare digests of the
 * library version, the model's configuration, its weights and optimizer
 * state, the parameters, the seed, the run's position and the dataset with
 * rank 0's; collective. Any difference fails on every rank, naming it. A
 * world of one agrees with itself. */
nctmc_status trainer_agree(nctmc_trainer *t, nctmc_dataset *ds);

/* Bytes of one parameter slab. */
size_t trainer_slab_bytes(const nctmc_trainer *t);

#endif /* NCTMC_TRAINER_H */
