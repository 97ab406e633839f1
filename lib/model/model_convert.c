/*
 * model_convert.c — nctmc_model_convert(): a float model's reduced-precision
 * (bf16, int8) copy for sampling, built as a new model whose linear layers
 * are packed by model_quant.c and whose other tensors are copied as they are.
 */
#include <string.h>

#include "base/alloc.h"
#include "model.h"
#include "model_quant.h"
#include "text/tokenizer.h"

/* Reduces float tensor k (host src) into the host packed storage. */
static void reduce_tensor(const nctmc_model *dst, int32_t k, const float *src,
                          unsigned char *host)
{
    const model_tensor *t = &dst->tensors[k];
    quant_place q = quant_place_of(dst, k);
    if (dst->packed[k].type == NCTMC_WEIGHT_BF16) {
        uint16_t *out = (uint16_t *)(host + q.data_offset);
        for (int64_t e = 0; e < t->n_elements; e++)
            out[e] = quant_bf16_round(src[e]);
        return;
    }
    int8_t *out = (int8_t *)(host + q.data_offset);
    float *scale = (float *)(host + q.scale_offset);
    int64_t cols = t->shape[1];
    for (int64_t r = 0; r < quant_rows_of(t); r++)
        scale[r] = quant_int8_row(src + r * cols, cols, out + r * cols);
}

/* Host buffers of a conversion. */
typedef struct convert_buffers {
    float *src;             /* the float model's slab */
    float *slab;            /* the reduced model's slab */
    unsigned char *packed;  /* its packed storage */
} convert_buffers;

static nctmc_status fill_converted(const nctmc_model *src, nctmc_model *dst,
                                   convert_buffers *b, char *err, size_t err_size)
{
    const nctmc_allocator *alloc = &src->ctx->alloc;
    b->src = mem_calloc(alloc, src->slab_floats, sizeof(float));
    b->slab = mem_calloc(alloc, dst->slab_floats + 1, sizeof(float));
    b->packed = mem_alloc_aligned(alloc, dst->packed_bytes + QUANT_PACK_ALIGN,
                                  QUANT_PACK_ALIGN);
    if (!b->src || !b->slab || !b->packed)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory converting the weights");
    memset(b->packed, 0, dst->packed_bytes);
    nctmc_backend *be = src->ctx->backend;
    be->ops->download(be, b->src, src->weights, sizeof(float) * src->slab_floats);
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "reading the weights: %s", be->error);
    for (int32_t k = 0; k < dst->n_tensors; k++) {
        const float *w = b->src + src->tensors[k].offset;
        if (quant_is_packed(dst, k))
            reduce_tensor(dst, k, w, b->packed);
        else
            memcpy(b->slab + dst->tensors[k].offset, w,
                   sizeof(float) * (size_t)dst->tensors[k].n_elements);
    }
    be->ops->upload(be, dst->weights, b->slab, sizeof(float) * dst->slab_floats);
    be->ops->upload(be, dst->packed_data, b->packed, dst->packed_bytes);
    st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "uploading the weights: %s", be->error);
    dst->sampling = src->sampling;
    if (src->tokenizer)
        st = tokenizer_clone(&dst->ctx->alloc, src->tokenizer, &dst->tokenizer);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "out of memory copying the tokenizer");
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_model_convert(const nctmc_model *model, nctmc_weight_type to,
                                           nctmc_model **out)
{
    if (out)
        *out = NULL;
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!out)
        return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT,
                          "nctmc_model_convert: out is NULL");
    if (to != NCTMC_WEIGHT_BF16 && to != NCTMC_WEIGHT_INT8)
        return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT,
                          "nctmc_model_convert: weight type %d is not "
                          "NCTMC_WEIGHT_BF16 or NCTMC_WEIGHT_INT8",
                          (int)to);
    if (model->weight_type != NCTMC_WEIGHT_F32)
        return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT,
                          "nctmc_model_convert: the model already holds %s weights; "
                          "convert its float original",
                          quant_type_name(model->weight_type));
    char err[NCTMC_ERROR_SIZE];
    nctmc_model *dst = NULL;
    nctmc_status st = model_create_as(model->ctx, &model->config, to, &dst, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(model, st, "nctmc_model_convert: %s", err);
    convert_buffers b = {NULL, NULL, NULL};
    st = fill_converted(model, dst, &b, err, sizeof err);
    const nctmc_allocator *alloc = &model->ctx->alloc;
    mem_free(alloc, b.src);
    mem_free(alloc, b.slab);
    mem_free(alloc, b.packed);
    if (st != NCTMC_OK) {
        nctmc_model_free(dst);
        return model_fail(model, st, "nctmc_model_convert: %s", err);
    }
    *out = dst;
    return NCTMC_OK;
}
