/*
 * forward.c — nctmc_model_forward() and nctmc_model_forward_ex(): one
 * evaluation of the model on the caller's batch, with the exit-rate and
 * jump outputs copied to the caller's buffers. The graph itself is
 * lib/dit/dit_forward.c; this file owns the public call's checks and its
 * output buffers.
 */
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "dit/dit.h"
#include "model/model.h"

NCTMC_API nctmc_status nctmc_forward_params_init_sized(nctmc_forward_params *params,
                                                      size_t size)
{
    return abi_init(params, size, NULL, &abi_forward_params);
}

/* Backend buffers for the two public outputs of one forward call. */
typedef struct forward_outputs {
    float *log_rate;
    float *jump_logprobs;
    size_t log_rate_bytes;
    size_t jump_bytes;
} forward_outputs;

static nctmc_status alloc_forward_outputs(nctmc_backend *be, const nctmc_forward_params *p,
                                          int32_t S, forward_outputs *o, char *err,
                                          size_t err_size)
{
    memset(o, 0, sizeof *o);
    size_t rows = (size_t)p->batch * (size_t)p->length;
    if (!checked_mul(rows, sizeof(float), &o->log_rate_bytes) ||
        !checked_mul3(rows, (size_t)S, sizeof(float), &o->jump_bytes))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "forward outputs for batch %d x length %d overflow", p->batch,
                           p->length);
    if (p->log_rate && !(o->log_rate = be->ops->alloc(be, o->log_rate_bytes)))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate %zu bytes for log_rate", o->log_rate_bytes);
    if (p->jump_logprobs && !(o->jump_logprobs = be->ops->alloc(be, o->jump_bytes)))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate %zu bytes for jump_logprobs", o->jump_bytes);
    return NCTMC_OK;
}

static void free_forward_outputs(nctmc_backend *be, forward_outputs *o)
{
    if (o->log_rate)
        be->ops->free(be, o->log_rate);
    if (o->jump_logprobs)
        be->ops->free(be, o->jump_logprobs);
}

/* Reads the caller's parameters into *p (this build's struct) and checks
 * them. */
static nctmc_status read_forward_params(const nctmc_forward_params *params,
                                        nctmc_forward_params *p, char *err, size_t err_size)
{
    if (!params)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "params is NULL");
    nctmc_forward_params_init(p);
    nctmc_status st = abi_read(params, p, sizeof *p, &abi_forward_params, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (!p->log_rate && !p->jump_logprobs)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "neither log_rate nor jump_logprobs is requested");
    return NCTMC_OK;
}

/* Runs the model and the output op, then copies the results to the host. */
static nctmc_status run_forward(const nctmc_model *m, nctmc_backend *be,
                                const nctmc_forward_params *p, char *err, size_t err_size)
{
    dit_workspace *ws = NULL;
    nctmc_status st = dit_workspace_create(m, be, p->batch, p->length, DIT_WS_INFERENCE, &ws, err, err_size);
    if (st != NCTMC_OK)
        return st;
    dit_batch batch = {p->batch, p->length, p->tokens, p->times, p->labels, NULL, NULL};
    st = dit_batch_validate(m, ws, &batch, false, err, err_size);
    forward_outputs o;
    if (st == NCTMC_OK)
        st = alloc_forward_outputs(be, p, m->dims.S, &o, err, err_size);
    else
        memset(&o, 0, sizeof o);
    if (st == NCTMC_OK) {
        dit_forward(m, ws, &batch);
        nctmc_jump_output_args a = {
            .n_rows = (int64_t)p->batch * p->length,
            .seq_len = p->length,
                .row_stride = m->dims.V,
            .logits = dit_ws_logits(ws),
            .rate_h = m->fp.process == NCTMC_FP_MASKED ? NULL : dit_ws_rate_h(ws),
            .x_t = dit_ws_x_t(ws),
            .times = dit_ws_times(ws),
            .fp = m->fp,
            .log_rate = o.log_rate,
            .jump_logprobs = o.jump_logprobs,
        };
        be->ops->jump_output(be, &a);
        if (p->log_rate)
            be->ops->download(be, p->log_rate, o.log_rate, o.log_rate_bytes);
        if (p->jump_logprobs)
            be->ops->download(be, p->jump_logprobs, o.jump_logprobs, o.jump_bytes);
        st = be->ops->synchronize(be);
        if (st != NCTMC_OK)
            fail_format(err, err_size, st, "forward: %s", be->error);
    }
    free_forward_outputs(be, &o);
    dit_workspace_free(ws);
    return st;
}

NCTMC_API nctmc_status nctmc_model_forward(nctmc_model *model, const nctmc_forward_params *params)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_forward_params p;
    nctmc_status st = read_forward_params(params, &p, model->last_error,
                                          sizeof model->last_error);
    if (st == NCTMC_OK)
        st = run_forward(model, model->ctx->backend, &p, model->last_error,
                         sizeof model->last_error);
    if (st == NCTMC_OK)
        model_clear_error(model);
    return st;
}

NCTMC_API nctmc_status nctmc_model_forward_ex(const nctmc_model *model, nctmc_context *ctx,
                                              const nctmc_forward_params *params)
{
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!model)
        return fail_format(ctx->last_error, sizeof ctx->last_error, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_model_forward_ex: model is NULL");
    if (strcmp(ctx->backend->name, model->ctx->backend->name) != 0)
        return fail_format(ctx->last_error, sizeof ctx->last_error, NCTMC_ERR_INVALID_ARGUMENT,
                           "the model lives on the %s backend, the context is %s",
                           model->ctx->backend->name, ctx->backend->name);
    nctmc_forward_params p;
    nctmc_status st = read_forward_params(params, &p, ctx->last_error, sizeof ctx->last_error);
    if (st == NCTMC_OK)
        st = run_forward(model, ctx->backend, &p, ctx->last_error, sizeof ctx->last_error);
    if (st == NCTMC_OK)
        ctx->last_error[0] = '\0';
    return st;
}

/* ---- plain getters for bindings ----------------------------------------- */
