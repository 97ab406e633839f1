/*
 * sampler.h — the sampler handle's internals, shared by the file that runs
 * the sampling loop (sampler.c) and the one that checks a call's parameters
 * and lays out its time grid (sampler_params.c).
 */
#ifndef NCTMC_SAMPLER_H
#define NCTMC_SAMPLER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/context.h"
#include "dit/dit.h"
#include "nctmc.h"

/* Everything a call needs is allocated when the sampler is created, for
 * max_batch x max_length (the model input twice over when classifier-free
 * guidance may need an unconditional pass): the step loop never allocates. */
struct nctmc_sampler {
    const nctmc_model *model;  /* one reference held */
    nctmc_context *ctx;        /* where errors are logged; one reference held */
    nctmc_backend *be;         /* ctx's backend: where everything runs */
    /* set by nctmc_sampler_cancel() from any thread, cleared when a call
     * starts and when a call stops because of it */
    atomic_int cancel;
    int32_t max_batch;
    int32_t max_length;
    int32_t ws_batch;          /* 2 * max_batch with classes (CFG), else max_batch */
    dit_workspace *ws;         /* inference workspace for ws_batch x max_length */

    /* backend memory, [max_batch * max_length] */
    int32_t *d_tokens;         /* the op's new states */
    uint8_t *d_fixed_mask;
    int32_t *d_fixed_tokens;
    int32_t *d_proposal;       /* correction proposals */
    float *d_prob;             /* and their p0 */

    /* host memory */
    int32_t *h_tokens;         /* [ws_batch * max_length] model input; the first
                                  batch * length entries are the current state */
    float *h_times;            /* [ws_batch] */
    int32_t *h_labels;         /* [ws_batch] */
    int32_t *h_proposal;       /* [max_batch * max_length] */
    float *h_prob;             /* [max_batch * max_length] */
    bool *h_done;              /* [max_batch] correction finished per sequence */

    char last_error[NCTMC_ERROR_SIZE];
};

/* One call's parameters after checking, with the defaults resolved. */
typedef struct sample_run {
    nctmc_sample_params params;  /* the caller's, read into this build's struct */
    const nctmc_sample_params *p;  /* &params */
    int32_t batch;
    int32_t length;
    int64_t n_rows;            /* batch * length */
    bool cfg;                  /* a second, unconditional pass per evaluation */
    bool has_fixed;
} sample_run;

/* Reads the caller's *p (any struct_size) into run->params and checks
 * every field against the sampler and its model; on failure writes a message
 * naming the field into err. */
nctmc_status sampler_check_params(const nctmc_sampler *s, const nctmc_sample_params *p,
                                  sample_run *run, char *err, size_t err_size);

/* Time k of the grid, k = 0 .. n_steps: t_0 = t_max, t_{n_steps} = t_min,
 * evenly spaced in t (uniform) or in log t (geometric); rounded to float,
 * the precision the model is conditioned on. */
float sampler_grid_time(nctmc_time_grid grid, float t_max, float t_min, int32_t n_steps,
                        int32_t k);

#endif /* NCTMC_SAMPLER_H */
