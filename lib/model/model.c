/*
 * model.c — the model handle: creation, introspection, tensor access and the
 * public forward call.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "dit/dit.h"
#include "model.h"
#include "model_map.h"
#include "model_quant.h"

/* Every failure on a model goes through the lock: the same helpers serve
 * const calls, which may run on several threads at once. */
nctmc_status model_fail(const nctmc_model *model, nctmc_status status, const char *fmt, ...)
{
    /* last_error is the one part of a const model that calls write */
    nctmc_model *m = (nctmc_model *)model;
    pthread_mutex_lock(&m->error_mutex);
    va_list ap;
    va_start(ap, fmt);
    fail_vformat(m->last_error, sizeof m->last_error, status, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&m->error_mutex);
    return status;
}

void model_clear_error(nctmc_model *model)
{
    model->last_error[0] = '\0';
}

void model_retain(const nctmc_model *model)
{
    /* the count is the other part a const model's calls change */
    nctmc_model *m = (nctmc_model *)model;
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

/* Frees everything the model owns, then gives up its context. */
static void model_destroy(nctmc_model *m)
{
    if (m->weights_map.base)
        file_map_close(&m->weights_map);
    else if (m->weights)
        m->ctx->backend->ops->free(m->ctx->backend, m->weights);
    quant_model_free(m);
    /* a copy: the context, and its allocator, may go with ctx_release */
    nctmc_allocator alloc = mem_copy(&m->ctx->alloc);
    mem_free(&alloc, m->view.blocks);
    mem_free(&alloc, m->tensors);
    nctmc_tokenizer_free(m->tokenizer);
    pthread_mutex_destroy(&m->error_mutex);
    ctx_release(m->ctx);
    mem_free(&alloc, m);
}

void model_release(const nctmc_model *model)
{
    if (!model)
        return;
    nctmc_model *m = (nctmc_model *)model;
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
        model_destroy(m);
}

/* Allocates the weight slab (unless MODEL_WEIGHTS_NONE) and, for
 * MODEL_WEIGHTS_INIT, fills it with the seeded initial weights (a loader
 * that overwrites every weight skips that: it is a third of the time to
 * load a large model). */
static nctmc_status upload_initial_weights(nctmc_model *m, model_weights_kind weights, char *err,
                                           size_t err_size)
{
    if (weights == MODEL_WEIGHTS_NONE)
        return NCTMC_OK;
    size_t bytes;
    if (!checked_mul(m->slab_floats, sizeof(float), &bytes))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                          "parameter slab of %zu floats overflows", m->slab_floats);
    nctmc_backend *be = m->ctx->backend;
    m->weights = be->ops->alloc(be, bytes);
    if (!m->weights)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                          "cannot allocate %zu bytes of weights on the %s backend", bytes,
                          be->name);
    if (weights == MODEL_WEIGHTS_ZERO)
        return NCTMC_OK; /* alloc gives zeros; the caller uploads every weight */
    float *host = mem_alloc(&m->ctx->alloc, bytes);
    if (!host)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                          "cannot allocate %zu bytes of host memory for initialisation",
                          bytes);
    model_init_weights(m, host);
    be->ops->upload(be, m->weights, host, bytes);
    mem_free(&m->ctx->alloc, host);
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "uploading weights: %s", be->error);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_model_create(nctmc_context *ctx, const nctmc_model_config *config,
                                          nctmc_model **out)
{
    return model_create(ctx, config, true, out);
}

static nctmc_status model_build(nctmc_context *ctx, const nctmc_model_config *config,
                                 model_weights_kind weights, nctmc_weight_type weight_type,
                                 nctmc_model **out);

nctmc_status model_create(nctmc_context *ctx, const nctmc_model_config *config,
                              bool initialise, nctmc_model **out)
{
    return model_build(ctx, config, initialise ? MODEL_WEIGHTS_INIT : MODEL_WEIGHTS_ZERO,
                        NCTMC_WEIGHT_F32, out);
}

nctmc_status model_create_ex(nctmc_context *ctx, const nctmc_model_config *config,
                                 model_weights_kind weights, nctmc_model **out)
{
    return model_build(ctx, config, weights, NCTMC_WEIGHT_F32, out);
}

nctmc_status model_create_as(nctmc_context *ctx, const nctmc_model_config *config,
                                 nctmc_weight_type weight_type, nctmc_model **out)
{
    return model_build(ctx, config, MODEL_WEIGHTS_ZERO, weight_type, out);
}

static nctmc_status model_build(nctmc_context *ctx, const nctmc_model_config *config,
                                 model_weights_kind weights, nctmc_weight_type weight_type,
                                 nctmc_model **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!out)
        return fail_format(ctx->last_error, sizeof ctx->last_error,
                          NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_create: out is NULL");
    if (!config)
        return fail_format(ctx->last_error, sizeof ctx->last_error,
                          NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_create: config is NULL");
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_status st = abi_read(config, &cfg, sizeof cfg, &abi_model_config, ctx->last_error,
                               sizeof ctx->last_error);
    config = &cfg;
    model_dims dims;
    if (st == NCTMC_OK)
        st = model_config_validate(config, &dims, ctx->last_error, sizeof ctx->last_error);
    if (st != NCTMC_OK)
        return st;
    nctmc_model *m = mem_calloc(&ctx->alloc, 1, sizeof *m);
    if (m && pthread_mutex_init(&m->error_mutex, NULL) != 0) {
        mem_free(&ctx->alloc, m);
        m = NULL;
    }
    if (!m)
        return fail_format(ctx->last_error, sizeof ctx->last_error, NCTMC_ERR_OUT_OF_MEMORY,
                          "out of memory");
    atomic_init(&m->refs, 1);
    ctx_retain(ctx);
    m->ctx = ctx;
    m->config = *config;
    m->dims = dims;
    m->fp = model_config_fp(config);
    st = model_tensor_table(&ctx->alloc, &dims, &m->tensors, &m->n_tensors, &m->slab_floats,
                          &m->n_params);
    if (st == NCTMC_OK) {
        m->view.blocks = mem_calloc(&ctx->alloc, (size_t)dims.n_layers,
                                          sizeof(model_block_view));
        if (!m->view.blocks)
            st = NCTMC_ERR_OUT_OF_MEMORY;
    }
    if (st != NCTMC_OK) {
        nctmc_model_free(m);
        return fail_format(ctx->last_error, sizeof ctx->last_error, st,
                          "out of memory building the tensor table");
    }
    if (weight_type != NCTMC_WEIGHT_F32)
        st = quant_model_setup(m, weight_type, ctx->last_error, sizeof ctx->last_error);
    if (st == NCTMC_OK)
        st = upload_initial_weights(m, weights, ctx->last_error, sizeof ctx->last_error);
    if (st != NCTMC_OK) {
        nctmc_model_free(m);
        return st;
    }
    if (m->weights)
        model_view_bind(m, m->weights, m->view.blocks, &m->view);
    quant_model_bind(m);
    /* Every way to make a model (create, load, resume) passes here; what
     * fails after this point writes its own message. */
    ctx->last_error[0] = '\0';
    ctx_log(ctx, NCTMC_LOG_INFO, "model: %d layers, d=%d, %d heads, S=%d, L=%d, %lld params",
              dims.n_layers, dims.d, dims.H, dims.S, dims.L, (long long)m->n_params);
    *out = m;
    return NCTMC_OK;
}

NCTMC_API void nctmc_model_free(nctmc_model *model)
{
    model_release(model);
}

NCTMC_API nctmc_status nctmc_model_get_config(const nctmc_model *model,
                                              nctmc_model_config *config)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_model *m = (nctmc_model *)model;
    if (!config)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_get_config: config is NULL");
    nctmc_status st = abi_check_output(config, &abi_model_config, m->last_error,
                                       sizeof m->last_error);
    if (st == NCTMC_OK)
        abi_write(config, &model->config, &abi_model_config);
    return st;
}

NCTMC_API const char *nctmc_model_last_error(const nctmc_model *model)
{
    return model ? model->last_error : "";
}

NCTMC_API int64_t nctmc_model_n_params(const nctmc_model *model)
{
    return model ? model->n_params : 0;
}

NCTMC_API int32_t nctmc_model_n_tensors(const nctmc_model *model)
{
    return model ? model->n_tensors : 0;
}

NCTMC_API nctmc_status nctmc_model_tensor_info(const nctmc_model *model, int32_t index,
                                               nctmc_tensor_info *info)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_model *m = (nctmc_model *)model;
    if (!info)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_tensor_info: info is NULL");
    nctmc_status st = abi_check_output(info, &abi_tensor_info, m->last_error,
                                       sizeof m->last_error);
    if (st != NCTMC_OK)
        return st;
    if (index < 0 || index >= model->n_tensors)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT,
                          "tensor index %d is out of range [0, %d)", index, model->n_tensors);
    const model_tensor *t = &model->tensors[index];
    nctmc_tensor_info full;
    nctmc_tensor_info_init(&full);
    full.name = t->name;
    full.n_dims = t->n_dims;
    memcpy(full.shape, t->shape, sizeof full.shape);
    full.n_elements = t->n_elements;
    abi_write(info, &full, &abi_tensor_info);
    return NCTMC_OK;
}

/* Looks a tensor up for read/write, recording why it cannot be used. */
static nctmc_status lookup_tensor(nctmc_model *m, const char *name, int64_t n_elements,
                                  const void *buffer, const model_tensor **out)
{
    if (!name)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT, "tensor name is NULL");
    if (!buffer)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT, "buffer for tensor \"%.64s\" is NULL",
                          name);
    int32_t k = model_find_tensor(m, name);
    if (k < 0)
        return model_fail(m, NCTMC_ERR_NOT_FOUND, "no tensor named \"%.64s\"", name);
    const model_tensor *t = &m->tensors[k];
    if (n_elements != t->n_elements)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT,
                          "tensor \"%s\" has %lld elements, the buffer was given as %lld",
                          t->name, (long long)t->n_elements, (long long)n_elements);
    *out = t;
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_model_find_tensor(const nctmc_model *model, const char *name,
                                               int32_t *index)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_model *m = (nctmc_model *)model;
    if (!name || !index)
        return model_fail(m, NCTMC_ERR_INVALID_ARGUMENT,
                          "nctmc_model_find_tensor: name and index must not be NULL");
    int32_t k = model_find_tensor(model, name);
    if (k < 0)
        return model_fail(m, NCTMC_ERR_NOT_FOUND, "no tensor named \"%.64s\"", name);
    *index = k;
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_model_read_tensor(const nctmc_model *model, const char *name,
                                               float *dst, int64_t n_elements)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_model *m = (nctmc_model *)model;
    const model_tensor *t = NULL;
    nctmc_status st = lookup_tensor(m, name, n_elements, dst, &t);
    if (st != NCTMC_OK)
        return st;
    if (quant_is_packed(m, (int32_t)(t - m->tensors)))
        return quant_read_tensor(m, (int32_t)(t - m->tensors), dst);
    nctmc_backend *be = m->ctx->backend;
    be->ops->download(be, dst, m->weights + t->offset, (size_t)t->n_elements * sizeof(float));
    st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return model_fail(m, st, "reading \"%s\": %s", t->name, be->error);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_model_write_tensor(nctmc_model *model, const char *name,
                                                const float *src, int64_t n_elements)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    const model_tensor *t = NULL;
    nctmc_status st = lookup_tensor(model, name, n_elements, src, &t);
    if (st != NCTMC_OK)
        return st;
    if (quant_is_packed(model, (int32_t)(t - model->tensors)))
        return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT,
                          "tensor \"%s\" holds %s weights, which are for sampling only; "
                          "write the float model's and convert it again",
                          t->name, quant_type_name(model->weight_type));
    for (int64_t e = 0; e < n_elements; e++)
        if (!isfinite(src[e]))
            return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT,
                              "tensor \"%s\": element %lld is not finite", t->name,
                              (long long)e);
    /* a mapped model's weights are the file's read-only pages: copy them
     * first (which moves every tensor, so look this one up again) */
    char err[NCTMC_ERROR_SIZE];
    st = model_make_writable(model, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(model, st, "writing \"%s\": %s", t->name, err);
    t = &model->tensors[model_find_tensor(model, name)];
    nctmc_backend *be = model->ctx->backend;
    be->ops->upload(be, model->weights + t->offset, src, (size_t)n_elements * sizeof(float));
    st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return model_fail(model, st, "writing \"%s\": %s", t->name, be->error);
    model_clear_error(model);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_tensor_info_init_sized(nctmc_tensor_info *info, size_t size)
{
    return abi_init(info, size, NULL, &abi_tensor_info);
}

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

NCTMC_API int32_t nctmc_model_seq_len(const nctmc_model *model)
{
    return model ? model->config.seq_len : 0;
}

NCTMC_API int32_t nctmc_model_vocab_size(const nctmc_model *model)
{
    return model ? model->config.vocab_size : 0;
}

NCTMC_API int32_t nctmc_model_mask_token(const nctmc_model *model)
{
    return model ? fp_mask(&model->fp) : -1;
}

NCTMC_API int32_t nctmc_model_n_classes(const nctmc_model *model)
{
    return model ? model->config.n_classes : 0;
}

NCTMC_API int32_t nctmc_model_process(const nctmc_model *model)
{
    return model ? (int32_t)model->config.process : -1;
}
