/*
 * trainer.h — the trainer handle's internals, shared by the training step
 * (trainer.c) and its checkpoints (trainer_checkpoint.c).
 */
#ifndef NCTMC_TRAINER_H
#define NCTMC_TRAINER_H

#include "dit.h"
#include "model.h"

struct nctmc_trainer {
    nctmc_model *model;         /* updated in place; one reference held */
    nctmc_backend *be;          /* the model's backend */
    nctmc_trainer_params params;
    int32_t seq_len;            /* L of every batch */
    dit_workspace *ws;          /* training activation arena */
    /* Backend slabs with the model's parameter layout. */
    float *grads;
    float *adam_m;
    float *adam_v;
    float *ema;                 /* NULL when params.ema_decay is 0 */
    /* Host staging for one batch, allocated once. */
    int32_t *host_x0;           /* [B * L] */
    int32_t *host_xt;           /* [B * L] */
    int32_t *host_labels;       /* [B], or NULL for an unconditional model */
    float *host_times;          /* [B] */
    float *host_rate_h;         /* [B * L] for the mean log rate */
    nctmc_trainer_state state;
    char last_error[512];
};

/* Reads a caller's trainer parameters of any struct_size into *p (this
 * build's struct, defaults where the caller's struct ends); writes why on
 * failure. */
nctmc_status trainer_params_read(const nctmc_trainer_params *given, nctmc_trainer_params *p,
                                 char *err, size_t err_size);

/* Checks trainer parameters (read with trainer_params_read()) against a
 * model; writes why on failure. */
nctmc_status trainer_params_validate(const nctmc_trainer_params *p, const nctmc_model *model,
                                     char *err, size_t err_size);

/* Bytes of one parameter slab. */
size_t trainer_slab_bytes(const nctmc_trainer *t);

#endif /* NCTMC_TRAINER_H */
