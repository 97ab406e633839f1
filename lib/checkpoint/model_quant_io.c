/*
 * model_quant_io.c — checkpoints of reduced-precision models (format 3,
 * docs/formats.md): each reduced linear weight is stored as BF16, or as I8
 * with an F32 tensor "<name>.scale" of its output rows' scales. model_io.c
 * calls these for everything that differs from a float checkpoint.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "model/model_quant.h"

int32_t quant_n_scale_tensors(const nctmc_model *m)
{
    if (m->weight_type != NCTMC_WEIGHT_INT8)
        return 0;
    int32_t n = 0;
    for (int32_t k = 0; k < m->n_tensors; k++)
        n += quant_is_packed(m, k) ? 1 : 0;
    return n;
}

nctmc_status quant_save_refs(const nctmc_model *m, st_tensor_ref *refs,
                             st_tensor_ref *scale_refs, quant_save *qs, char *err,
                             size_t err_size)
{
    qs->alloc = &m->ctx->alloc;
    qs->host = NULL;
    qs->names = NULL;
    if (m->weight_type == NCTMC_WEIGHT_F32)
        return NCTMC_OK;
    int32_t n_scales = quant_n_scale_tensors(m);
    qs->host = mem_alloc_aligned(qs->alloc, m->packed_bytes + 64, 64);
    qs->names = mem_calloc(qs->alloc, (size_t)n_scales + 1, sizeof *qs->names);
    if (!qs->host || !qs->names)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory copying the weights");
    nctmc_backend *be = m->ctx->backend;
    be->ops->download(be, qs->host, m->packed_data, m->packed_bytes);
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "reading the weights: %s", be->error);
    int32_t s = 0;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        if (!quant_is_packed(m, k))
            continue;
        quant_place q = quant_place_of(m, k);
        refs[k].data = NULL;
        refs[k].raw = qs->host + q.data_offset;
        refs[k].dtype = m->weight_type == NCTMC_WEIGHT_BF16 ? ST_WRITE_BF16 : ST_WRITE_I8;
        if (!q.scale_bytes)
            continue;
        snprintf(qs->names[s], sizeof qs->names[s], "%s" QUANT_SCALE_SUFFIX,
                 m->tensors[k].name);
        st_tensor_ref *r = &scale_refs[s++];
        memset(r, 0, sizeof *r);
        r->name = qs->names[s - 1];
        r->data = (const float *)(qs->host + q.scale_offset);
        r->n_dims = 1;
        r->shape[0] = m->tensors[k].shape[0];
    }
    return NCTMC_OK;
}

void quant_save_free(quant_save *qs)
{
    mem_free(qs->alloc, qs->host);
    mem_free(qs->alloc, qs->names);
    qs->host = NULL;
    qs->names = NULL;
}

const char *quant_stored_dtype(const model_tensor *t, nctmc_weight_type type)
{
    if (type == NCTMC_WEIGHT_F32 || !quant_is_linear(t->name))
        return "F32";
    return type == NCTMC_WEIGHT_BF16 ? "BF16" : "I8";
}

nctmc_status quant_check_scales(const st_file *file, const model_tensor *table, int32_t n,
                                nctmc_weight_type type, int32_t *n_found, char *err,
                                size_t err_size)
{
    *n_found = 0;
    if (type != NCTMC_WEIGHT_INT8)
        return NCTMC_OK;
    char name[NCTMC_TENSOR_NAME_MAX + 8];
    for (int32_t k = 0; k < n; k++) {
        if (!quant_is_linear(table[k].name))
            continue;
        snprintf(name, sizeof name, "%s" QUANT_SCALE_SUFFIX, table[k].name);
        int32_t idx = st_file_find_tensor(file, name);
        st_tensor_desc d;
        if (idx < 0 || !st_file_tensor_desc(file, idx, &d))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT, "tensor \"%s\" is missing",
                               name);
        if (strcmp(d.dtype, "F32") != 0 || d.n_dims != 1 || d.shape[0] != table[k].shape[0])
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tensor \"%s\" is not F32 of shape [%lld]", name,
                               (long long)table[k].shape[0]);
        (*n_found)++;
    }
    return NCTMC_OK;
}

/* bf16 data must be finite, int8 data in [-127, 127]. */
static nctmc_status check_values(const nctmc_model *m, int32_t k, const void *data, char *err,
                                 size_t err_size)
{
    const model_tensor *t = &m->tensors[k];
    for (int64_t e = 0; e < t->n_elements; e++) {
        bool ok = m->weight_type == NCTMC_WEIGHT_BF16
                      ? (((const uint16_t *)data)[e] & 0x7f80u) != 0x7f80u
                      : ((const int8_t *)data)[e] >= -QUANT_INT8_MAX;
        if (!ok)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               m->weight_type == NCTMC_WEIGHT_BF16
                               ? "tensor \"%s\": element %lld is not finite"
                               : "tensor \"%s\": element %lld is -128 (outside -127..127)",
                               t->name, (long long)e);
    }
    return NCTMC_OK;
}

static nctmc_status read_scales(const st_file *file, const nctmc_model *m, int32_t k,
                                float *dst, char *err, size_t err_size)
{
    const model_tensor *t = &m->tensors[k];
    char name[NCTMC_TENSOR_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s" QUANT_SCALE_SUFFIX, t->name);
    nctmc_status st = st_file_read_f32(file, name, 1, t->shape, dst, err, err_size);
    if (st != NCTMC_OK)
        return st == NCTMC_ERR_NOT_FOUND ? NCTMC_ERR_FORMAT : st;
    for (int64_t r = 0; r < t->shape[0]; r++)
        if (!(isfinite(dst[r]) && dst[r] > 0.0f))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tensor \"%s\": scale %lld is %g, not finite and > 0", name,
                               (long long)r, (double)dst[r]);
    return NCTMC_OK;
}

static nctmc_status read_packed(const st_file *file, const nctmc_model *m, unsigned char *host,
                                work_progress *progress, char *err, size_t err_size)
{
    for (int32_t k = 0; k < m->n_tensors; k++) {
        if (!quant_is_packed(m, k))
            continue;
        const model_tensor *t = &m->tensors[k];
        quant_place q = quant_place_of(m, k);
        nctmc_status st = st_file_read_raw(file, t->name, quant_stored_dtype(t, m->weight_type),
                                           t->n_dims, t->shape, host + q.data_offset, err,
                                           err_size);
        if (st != NCTMC_OK)
            return st == NCTMC_ERR_NOT_FOUND ? NCTMC_ERR_FORMAT : st;
        st = check_values(m, k, host + q.data_offset, err, err_size);
        if (st == NCTMC_OK && q.scale_bytes)
            st = read_scales(file, m, k, (float *)(host + q.scale_offset), err, err_size);
        if (st != NCTMC_OK)
            return st;
        if (!progress_step(progress, 1))
            return fail_format(err, err_size, NCTMC_ERR_CANCELLED, "stopped by the progress callback");
    }
    return NCTMC_OK;
}

nctmc_status quant_fill_model(nctmc_model *m, const st_file *file, work_progress *progress,
                              char *err, size_t err_size)
{
    if (m->weight_type == NCTMC_WEIGHT_F32)
        return NCTMC_OK;
    unsigned char *host = mem_alloc_aligned(&m->ctx->alloc, m->packed_bytes + 64, 64);
    if (!host)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory reading the weights");
    memset(host, 0, m->packed_bytes);
    nctmc_status st = read_packed(file, m, host, progress, err, err_size);
    if (st == NCTMC_OK) {
        nctmc_backend *be = m->ctx->backend;
        be->ops->upload(be, m->packed_data, host, m->packed_bytes);
        st = be->ops->synchronize(be);
        if (st != NCTMC_OK)
            fail_format(err, err_size, st, "uploading the weights: %s", be->error);
    }
    mem_free(&m->ctx->alloc, host);
    return st;
}
