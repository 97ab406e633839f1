/*
 * safetensors.h — reading and writing safetensors files (docs/formats.md):
 * 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range (plus a "__metadata__" map of strings), then
 * the raw little-endian data. Only what libnctmc needs: F32 tensors and
 * string metadata; the reader checks everything and trusts nothing.
 */
#ifndef NCTMC_SAFETENSORS_H
#define NCTMC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

/* One metadata entry: both strings are copied by the writer. */
typedef struct st_meta {
    const char *key;
    const char *value;
} st_meta;

/* One F32 tensor to write, from host memory. */
typedef struct st_tensor_ref {
    const char *name;
    const float *data;
    int32_t n_dims;
    int64_t shape[NCTMC_MAX_DIMS];
} st_tensor_ref;

/*
 * Writes a safetensors file atomically: a temporary file next to `path`,
 * fsync, rename over `path`, fsync of the directory. On failure the
 * temporary file is removed and `path` is untouched. Tensors are written in
 * the given order, contiguously; names
 * must be unique (checked). Returns NCTMC_ERR_IO with the system's reason.
 */
nctmc_status st_write_file(const char *path, const st_meta *meta, int32_t n_meta,
                           const st_tensor_ref *tensors, int32_t n_tensors, char *err,
                           size_t err_size);

typedef struct st_file st_file;

/* Reads and validates a whole file: header length within the file, JSON
 * well-formed (bounded depth and size), every tensor's dtype known, shape
 * consistent with its byte range, ranges inside the data section, not
 * overlapping, and covering it. NCTMC_ERR_IO if it cannot be read,
 * NCTMC_ERR_FORMAT otherwise. */
nctmc_status st_read_file(const char *path, st_file **out, char *err, size_t err_size);
void st_file_free(st_file *file);

/* The metadata value of `key`, or NULL. Owned by the file. */
const char *st_file_meta(const st_file *file, const char *key);

/* Number of tensors, and the name of tensor `index` (file order). */
int32_t st_file_n_tensors(const st_file *file);
const char *st_file_tensor_name(const st_file *file, int32_t index);

/*
 * Finds tensor `name`, which must be F32 with exactly the given shape, and
 * copies its values (converted from little-endian) into dst (n_elements of
 * the shape). NCTMC_ERR_NOT_FOUND if absent, NCTMC_ERR_FORMAT for the wrong
 * dtype or shape.
 */
nctmc_status st_file_read_f32(const st_file *file, const char *name, int32_t n_dims,
                              const int64_t *shape, float *dst, char *err, size_t err_size);

#endif /* NCTMC_SAFETENSORS_H */
