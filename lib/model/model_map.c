/*
 * model_map.c — mapped models (see model_map.h). A checkpoint's tensors are
 * float32 little-endian and, as this library writes them, back to back in
 * the model's table order; the safetensors format does not let the file
 * carry the 64-byte padding of the standard slab (its tensors must tile the
 * data section), so a mapped model keeps the file's layout instead: its
 * tensor table's offsets become the file's, its slab the span of file bytes
 * from its first tensor to the end of its last. Everything that reads
 * weights goes through those offsets or the view, so it reads the map as it
 * reads a slab; everything that writes them calls model_make_writable()
 * first, which copies into the standard layout.
 */
#include "model_map.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/checked.h"
#include "io/file_map.h"

/* Floats read per piece when checking values through the file. */
#define CHECK_CHUNK_FLOATS 65536

static bool host_is_little_endian(void)
{
    const uint32_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* Why this file cannot be mapped on ctx, or NULL when it can. */
static const char *unmappable(const nctmc_context *ctx, const st_file *file)
{
    if (!file_map_supported())
        return "this platform has no memory-mapped files";
    /* the CPU backend's memory is host memory, so a map of the file can
     * stand for it; a GPU backend computes on its own copy */
    if (strcmp(ctx->backend->name, "cpu") != 0)
        return "the backend keeps the weights in its own memory";
    if (!host_is_little_endian())
        return "the file's little-endian floats are not this host's";
    if (st_file_fd(file) < 0)
        return "not a file";
    return NULL;
}

/* Each table tensor's file offset; the span [*lo, *hi) they cover. */
static nctmc_status locate_tensors(const st_file *file, const nctmc_model *m,
                                   uint64_t *offsets, uint64_t *lo, uint64_t *hi, char *err,
                                   size_t err_size)
{
    *lo = UINT64_MAX;
    *hi = 0;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        int32_t idx = st_file_find_tensor(file, t->name);
        if (idx < 0 || !st_file_tensor_offset(file, idx, &offsets[k]))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT, "tensor \"%s\" is missing",
                               t->name);
        /* a float read in place must sit at a multiple of its size (the
         * map itself starts on a page) */
        if (offsets[k] % sizeof(float) != 0)
            return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                               "tensor \"%s\" starts at byte %llu, not a multiple of %zu",
                               t->name, (unsigned long long)offsets[k], sizeof(float));
        uint64_t end = offsets[k] + (uint64_t)t->n_elements * sizeof(float);
        *lo = offsets[k] < *lo ? offsets[k] : *lo;
        *hi = end > *hi ? end : *hi;
    }
    if (m->n_tensors == 0 || *hi - *lo > (uint64_t)SIZE_MAX)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                           "the tensors span more than this host can map");
    return NCTMC_OK;
}

static nctmc_status not_finite(const char *name, int64_t element, char *err, size_t err_size)
{
    return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                       "tensor \"%s\": element %lld is not finite", name, (long long)element);
}

/* Every value finite, read through the file in pieces rather than through
 * the map: the check then leaves nothing resident in this process (the
 * pages it reads stay in the shared page cache, where the map finds them). */
static nctmc_status check_values_finite(const st_file *file, const nctmc_model *m,
                                        const uint64_t *offsets, work_progress *progress,
                                        char *err, size_t err_size)
{
    float *buf = mem_alloc(&m->ctx->alloc, sizeof(float) * CHECK_CHUNK_FLOATS);
    if (!buf)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_status st = NCTMC_OK;
    for (int32_t k = 0; k < m->n_tensors && st == NCTMC_OK; k++) {
        const model_tensor *t = &m->tensors[k];
        for (int64_t done = 0; done < t->n_elements && st == NCTMC_OK;) {
            int64_t n = t->n_elements - done < CHECK_CHUNK_FLOATS ? t->n_elements - done
                                                                  : CHECK_CHUNK_FLOATS;
            st = st_file_read_bytes(file, offsets[k] + (uint64_t)done * sizeof(float), buf,
                                    (size_t)n * sizeof(float), err, err_size);
            for (int64_t e = 0; e < n && st == NCTMC_OK; e++)
                if (!isfinite(buf[e]))
                    st = not_finite(t->name, done + e, err, err_size);
            done += n;
        }
        if (st == NCTMC_OK && !progress_step(progress, 1))
            st = fail_format(err, err_size, NCTMC_ERR_CANCELLED, "stopped by the progress callback");
    }
    mem_free(&m->ctx->alloc, buf);
    return st;
}

/* Points the model at the map: the file's offsets become the table's. */
static void attach(nctmc_model *m, const uint64_t *offsets, uint64_t lo, uint64_t hi)
{
    for (int32_t k = 0; k < m->n_tensors; k++)
        m->tensors[k].offset = (size_t)((offsets[k] - lo) / sizeof(float));
    m->slab_floats = (size_t)((hi - lo) / sizeof(float));
    /* read-only memory behind a float *: model_make_writable() guards
     * every write */
    m->weights = (float *)(uintptr_t)m->weights_map.data;
    model_view_bind(m, m->weights, m->view.blocks, &m->view);
}

static nctmc_status map_weights(const st_file *file, nctmc_model *m, bool check_values,
                                work_progress *progress, char *err, size_t err_size)
{
    uint64_t *offsets =
        mem_alloc(&m->ctx->alloc, sizeof *offsets * (size_t)m->n_tensors);
    if (!offsets)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    uint64_t lo = 0, hi = 0;
    nctmc_status st = locate_tensors(file, m, offsets, &lo, &hi, err, err_size);
    if (st == NCTMC_OK && check_values)
        st = check_values_finite(file, m, offsets, progress, err, err_size);
    if (st == NCTMC_OK)
        st = file_map_open(st_file_fd(file), st_file_size(file), lo, (size_t)(hi - lo),
                           &m->weights_map, err, err_size);
    if (st == NCTMC_OK)
        attach(m, offsets, lo, hi);
    mem_free(&m->ctx->alloc, offsets);
    return st;
}

nctmc_status model_map_create(nctmc_context *ctx, const st_file *file,
                              const nctmc_model_config *cfg, bool check_values,
                              work_progress *progress, nctmc_model **out, char *err,
                              size_t err_size)
{
    *out = NULL;
    const char *why = unmappable(ctx, file);
    if (why)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED, "%s", why);
    nctmc_model *m = NULL;
    nctmc_status st = model_create_ex(ctx, cfg, MODEL_WEIGHTS_NONE, &m);
    if (st != NCTMC_OK) {
        if (err != ctx->last_error)
            fail_format(err, err_size, st, "%s", ctx->last_error);
        return st;
    }
    st = map_weights(file, m, check_values, progress, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_model_free(m);
        return st;
    }
    ctx_log(ctx, NCTMC_LOG_INFO, "model: weights mapped from the file (%zu bytes%s)",
            m->weights_map.size, check_values ? "" : ", values not checked");
    *out = m;
    return NCTMC_OK;
}

/* Copies the mapped weights into w (standard layout `table`), checking
 * every value. */
static nctmc_status copy_out(const nctmc_model *m, const model_tensor *table, float *w, char *err,
                             size_t err_size)
{
    nctmc_backend *be = m->ctx->backend;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        const float *src = m->weights + t->offset;
        for (int64_t e = 0; e < t->n_elements; e++)
            if (!isfinite(src[e]))
                return not_finite(t->name, e, err, err_size);
        be->ops->upload(be, w + table[k].offset, src, (size_t)t->n_elements * sizeof(float));
    }
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "copying the mapped weights: %s", be->error);
    return NCTMC_OK;
}

nctmc_status model_make_writable(nctmc_model *m, char *err, size_t err_size)
{
    if (!m->weights_map.base)
        return NCTMC_OK;
    const nctmc_allocator *alloc = &m->ctx->alloc;
    model_tensor *table = NULL;
    int32_t n = 0;
    size_t slab_floats = 0, bytes = 0;
    int64_t n_params = 0;
    if (model_tensor_table(alloc, &m->dims, &table, &n, &slab_floats, &n_params) != NCTMC_OK)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_backend *be = m->ctx->backend;
    float *w = checked_mul(slab_floats, sizeof(float), &bytes) ? be->ops->alloc(be, bytes) : NULL;
    if (!w) {
        mem_free(alloc, table);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate %zu floats to copy the mapped weights into",
                           slab_floats);
    }
    nctmc_status st = copy_out(m, table, w, err, err_size);
    if (st != NCTMC_OK) {
        be->ops->free(be, w);
        mem_free(alloc, table);
        return st;
    }
    mem_free(alloc, m->tensors);
    m->tensors = table;
    m->slab_floats = slab_floats;
    file_map_close(&m->weights_map);
    m->weights = w;
    model_view_bind(m, m->weights, m->view.blocks, &m->view);
    ctx_log(m->ctx, NCTMC_LOG_INFO, "model: mapped weights copied for writing");
    return NCTMC_OK;
}

NCTMC_API int32_t nctmc_model_is_mapped(const nctmc_model *model)
{
    return model && model->weights_map.base ? 1 : 0;
}
