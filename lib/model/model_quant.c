/*
 * model_quant.c — reduced-precision (bf16, int8) linear weights: the
 * rounding and the packed storage of a converted model. Only the linear
 * layers that carry nearly all of a model's multiply-adds are reduced; the
 * rest (embeddings, norms, adaLN, the time MLP, the exit-rate head, biases)
 * is small and stays float, in the model's slab as usual. Building a
 * reduced copy of a float model is model_convert.c.
 */
#include "model_quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "text/tokenizer.h"

/* The slab's own per-tensor alignment (model_tensors.c). */
#define SLAB_ALIGN_FLOATS 16

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool quant_is_linear(const char *name)
{
    if (strcmp(name, "output_layer.linear.weight") == 0)
        return true;
    if (strncmp(name, "blocks.", 7) != 0)
        return false;
    return ends_with(name, ".attn_qkv.weight") || ends_with(name, ".attn_out.weight") ||
           ends_with(name, ".mlp.0.weight") || ends_with(name, ".mlp.2.weight");
}

bool quant_is_packed(const nctmc_model *m, int32_t k)
{
    return m->packed && k >= 0 && k < m->n_tensors && m->packed[k].type != NCTMC_WEIGHT_F32;
}

static const char *const type_names[] = {"f32", "bf16", "int8"};

const char *quant_type_name(nctmc_weight_type type)
{
    return type >= 0 && type <= NCTMC_WEIGHT_INT8 ? type_names[type] : NULL;
}

nctmc_weight_type quant_type_from_name(const char *name)
{
    for (int32_t t = 0; t <= NCTMC_WEIGHT_INT8; t++)
        if (name && strcmp(name, type_names[t]) == 0)
            return t;
    return -1;
}

uint16_t quant_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float quant_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float quant_int8_row(const float *w, int64_t n, int8_t *q)
{
    float amax = 0.0f;
    for (int64_t e = 0; e < n; e++)
        amax = fabsf(w[e]) > amax ? fabsf(w[e]) : amax;
    float scale = amax > 0.0f ? amax / (float)QUANT_INT8_MAX : 1.0f;
    /* a subnormal amax could give scale 0; the smallest positive float
     * still maps every weight into range */
    if (!(scale > 0.0f))
        scale = 1.4e-45f;
    for (int64_t e = 0; e < n; e++) {
        float r = rintf(w[e] / scale);
        r = r > (float)QUANT_INT8_MAX ? (float)QUANT_INT8_MAX : r;
        r = r < -(float)QUANT_INT8_MAX ? -(float)QUANT_INT8_MAX : r;
        q[e] = (int8_t)r;
    }
    return scale;
}

static size_t align_up(size_t n)
{
    return (n + QUANT_PACK_ALIGN - 1) / QUANT_PACK_ALIGN * QUANT_PACK_ALIGN;
}

quant_place quant_place_of(const nctmc_model *m, int32_t k)
{
    const nctmc_packed_weight *p = &m->packed[k];
    const unsigned char *base = m->packed_data;
    const model_tensor *t = &m->tensors[k];
    quant_place q = {0, 0, 0, 0};
    q.data_offset = (size_t)((const unsigned char *)p->data - base);
    q.data_bytes = (size_t)t->n_elements * (p->type == NCTMC_WEIGHT_BF16 ? 2u : 1u);
    if (p->scales) {
        q.scale_offset = (size_t)((const unsigned char *)p->scales - base);
        q.scale_bytes = sizeof(float) * (size_t)quant_rows_of(t);
    }
    return q;
}

/* New slab offsets without the reduced tensors, and the packed layout. */
static void plan_layout(nctmc_model *m, nctmc_weight_type type, size_t *data_at,
                        size_t *scale_at, size_t *packed_bytes)
{
    size_t floats = 0, bytes = 0;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        model_tensor *t = &m->tensors[k];
        data_at[k] = scale_at[k] = 0;
        if (!quant_is_linear(t->name)) {
            t->offset = floats;
            floats += ((size_t)t->n_elements + SLAB_ALIGN_FLOATS - 1) / SLAB_ALIGN_FLOATS *
                      SLAB_ALIGN_FLOATS;
            continue;
        }
        t->offset = 0; /* not in the slab: the view's pointer is cleared */
        data_at[k] = bytes;
        bytes += align_up((size_t)t->n_elements * (type == NCTMC_WEIGHT_BF16 ? 2u : 1u));
        if (type == NCTMC_WEIGHT_INT8) {
            scale_at[k] = bytes;
            bytes += align_up(sizeof(float) * (size_t)quant_rows_of(t));
        }
    }
    m->slab_floats = floats;
    *packed_bytes = bytes;
}

nctmc_status quant_model_setup(nctmc_model *m, nctmc_weight_type type, char *err,
                               size_t err_size)
{
    nctmc_backend *be = m->ctx->backend;
    if (type != NCTMC_WEIGHT_BF16 && type != NCTMC_WEIGHT_INT8)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "weight type %d is not NCTMC_WEIGHT_BF16 or NCTMC_WEIGHT_INT8",
                           (int)type);
    if (!be->ops->linear_forward_packed || !be->ops->linear_packed_scratch_bytes)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                           "the %s backend cannot hold %s weights (the cpu backend can)",
                           be->name, quant_type_name(type));
    size_t n = (size_t)m->n_tensors;
    size_t *at = mem_calloc(&m->ctx->alloc, 2 * n, sizeof *at);
    m->packed = mem_calloc(&m->ctx->alloc, n, sizeof *m->packed);
    if (!at || !m->packed) {
        mem_free(&m->ctx->alloc, at);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    plan_layout(m, type, at, at + n, &m->packed_bytes);
    m->weight_type = type;
    m->packed_data = be->ops->alloc(be, m->packed_bytes);
    if (!m->packed_data) {
        mem_free(&m->ctx->alloc, at);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate %zu bytes of %s weights on the %s backend",
                           m->packed_bytes, quant_type_name(type), be->name);
    }
    unsigned char *base = m->packed_data;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        if (!quant_is_linear(m->tensors[k].name))
            continue;
        m->packed[k].type = type;
        m->packed[k].data = base + at[k];
        m->packed[k].scales = type == NCTMC_WEIGHT_INT8 ? (const float *)(base + at[n + k])
                                                        : NULL;
    }
    mem_free(&m->ctx->alloc, at);
    return NCTMC_OK;
}

void quant_model_bind(nctmc_model *m)
{
    if (m->weight_type == NCTMC_WEIGHT_F32)
        return;
    for (int32_t b = 0; b < m->dims.n_layers; b++) {
        model_block_view *v = &m->view.blocks[b];
        char name[NCTMC_TENSOR_NAME_MAX];
#define BIND(field_w, field_q, suffix)                                       \
    do {                                                                     \
        snprintf(name, sizeof name, "blocks.%d." suffix, (int)b);           \
        v->field_q = &m->packed[model_find_tensor(m, name)];                   \
        v->field_w = NULL;                                                   \
    } while (0)
        BIND(qkv_w, qkv_q, "attn_qkv.weight");
        BIND(out_w, out_q, "attn_out.weight");
        BIND(mlp0_w, mlp0_q, "mlp.0.weight");
        BIND(mlp2_w, mlp2_q, "mlp.2.weight");
#undef BIND
    }
    m->view.out_q = &m->packed[model_find_tensor(m, "output_layer.linear.weight")];
    m->view.out_w = NULL;
}

void quant_model_free(nctmc_model *m)
{
    if (m->packed_data)
        m->ctx->backend->ops->free(m->ctx->backend, m->packed_data);
    mem_free(&m->ctx->alloc, m->packed);
    m->packed_data = NULL;
    m->packed = NULL;
}

/* Dequantises packed tensor k from host copies of its data and scales. */
static void dequantise(const nctmc_model *m, int32_t k, const void *data, const float *scale,
                       float *dst)
{
    const model_tensor *t = &m->tensors[k];
    if (m->packed[k].type == NCTMC_WEIGHT_BF16) {
        const uint16_t *src = data;
        for (int64_t e = 0; e < t->n_elements; e++)
            dst[e] = quant_bf16_to_f32(src[e]);
        return;
    }
    const int8_t *src = data;
    int64_t cols = t->shape[1];
    for (int64_t e = 0; e < t->n_elements; e++)
        dst[e] = scale[e / cols] * (float)src[e];
}

nctmc_status quant_read_tensor(const nctmc_model *m, int32_t k, float *dst, char *err,
                               size_t err_size)
{
    quant_place q = quant_place_of(m, k);
    size_t bytes = q.scale_bytes ? q.scale_offset + q.scale_bytes - q.data_offset
                                 : q.data_bytes;
    unsigned char *host = mem_alloc_aligned(&m->ctx->alloc, bytes, QUANT_PACK_ALIGN);
    if (!host)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory reading \"%s\"", m->tensors[k].name);
    nctmc_backend *be = m->ctx->backend;
    be->ops->download(be, host, (const unsigned char *)m->packed_data + q.data_offset, bytes);
    nctmc_status st = be->ops->synchronize(be);
    if (st == NCTMC_OK)
        dequantise(m, k, host,
                   q.scale_bytes ? (const float *)(host + (q.scale_offset - q.data_offset))
                                 : NULL,
                   dst);
    mem_free(&m->ctx->alloc, host);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "reading \"%s\": %s", m->tensors[k].name,
                           be->error);
    return NCTMC_OK;
}

NCTMC_API nctmc_weight_type nctmc_model_weight_type(const nctmc_model *model)
{
    return model ? model->weight_type : -1;
}
