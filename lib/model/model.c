/*
 * model.c — the model handle: creation, references and destruction, its
 * error, and introspection (configuration, tensor table, getters). Access to
 * weights by name is model_weights.c, the forward call lib/run/forward.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "model.h"
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
                                nctmc_model **out, char *err, size_t err_size);

nctmc_status model_create(nctmc_context *ctx, const nctmc_model_config *config,
                          bool initialise, nctmc_model **out)
{
    return model_build(ctx, config, initialise ? MODEL_WEIGHTS_INIT : MODEL_WEIGHTS_ZERO,
                       NCTMC_WEIGHT_F32, out, ctx ? ctx->last_error : NULL,
                       sizeof ctx->last_error);
}

nctmc_status model_create_ex(nctmc_context *ctx, const nctmc_model_config *config,
                             model_weights_kind weights, nctmc_model **out)
{
    return model_build(ctx, config, weights, NCTMC_WEIGHT_F32, out,
                       ctx ? ctx->last_error : NULL, sizeof ctx->last_error);
}

nctmc_status model_create_as(nctmc_context *ctx, const nctmc_model_config *config,
                             nctmc_weight_type weight_type, nctmc_model **out, char *err,
                             size_t err_size)
{
    return model_build(ctx, config, MODEL_WEIGHTS_ZERO, weight_type, out, err, err_size);
}

/* Errors go to err (ctx->last_error for the public calls; a caller's own
 * buffer for nctmc_model_convert(), a const call that must not write the
 * context it shares with other threads). */
static nctmc_status model_build(nctmc_context *ctx, const nctmc_model_config *config,
                                model_weights_kind weights, nctmc_weight_type weight_type,
                                nctmc_model **out, char *err, size_t err_size)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!out)
        return fail_format(err, err_size,
                           NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_create: out is NULL");
    if (!config)
        return fail_format(err, err_size,
                           NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_create: config is NULL");
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_status st = abi_read(config, &cfg, sizeof cfg, &abi_model_config, ctx->last_error,
                               sizeof ctx->last_error);
    config = &cfg;
    model_config_resolve(&cfg);
    model_dims dims;
    if (st == NCTMC_OK)
        st = model_config_validate(config, &dims, err, err_size);
    if (st != NCTMC_OK)
        return st;
    nctmc_model *m = mem_calloc(&ctx->alloc, 1, sizeof *m);
    if (m && pthread_mutex_init(&m->error_mutex, NULL) != 0) {
        mem_free(&ctx->alloc, m);
        m = NULL;
    }
    if (!m)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
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
        return fail_format(err, err_size, st,
                           "out of memory building the tensor table");
    }
    if (weight_type != NCTMC_WEIGHT_F32)
        st = quant_model_setup(m, weight_type, err, err_size);
    if (st == NCTMC_OK)
        st = upload_initial_weights(m, weights, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_model_free(m);
        return st;
    }
    if (m->weights)
        model_view_bind(m, m->weights, m->view.blocks, &m->view);
    quant_model_bind(m);
    /* Every way to make a model (create, load, resume) passes here; what
     * fails after this point writes its own message. */
    err[0] = '\0';
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
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = abi_check_output(config, &abi_model_config, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(m, st, "%s", err);
    abi_write(config, &model->config, &abi_model_config);
    return NCTMC_OK;
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
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = abi_check_output(info, &abi_tensor_info, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(m, st, "%s", err);
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

NCTMC_API nctmc_status nctmc_tensor_info_init_sized(nctmc_tensor_info *info, size_t size)
{
    return abi_init(info, size, NULL, &abi_tensor_info);
}

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
