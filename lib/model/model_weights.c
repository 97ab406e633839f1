/*
 * model_weights.c — a model's weights by tensor name: nctmc_model_find_tensor,
 * nctmc_model_read_tensor (a reduced model's packed tensors dequantised) and
 * nctmc_model_write_tensor (a mapped model's weights copied out of the file
 * first, model_map.c). Every failure is recorded on the model.
 */
#include <math.h>

#include "model.h"
#include "model_map.h"
#include "model_quant.h"

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
    if (quant_is_packed(m, (int32_t)(t - m->tensors))) {
        char err[NCTMC_ERROR_SIZE];
        st = quant_read_tensor(m, (int32_t)(t - m->tensors), dst, err, sizeof err);
        return st == NCTMC_OK ? NCTMC_OK : model_fail(m, st, "%s", err);
    }
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
