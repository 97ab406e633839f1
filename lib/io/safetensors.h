/*
 * safetensors.h — reading and writing safetensors files (docs/formats.md):
 * 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range (plus a "__metadata__" map of strings), then
 * the raw little-endian data. Only what libnctmc needs: F32 tensors and
 * string metadata; the reader checks everything and trusts nothing.
 */
#ifndef NCTMC_SAFETENSORS_H
#define NCTMC_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

struct nctmc_allocator; /* alloc.h */

/* One metadata entry: both strings are copied by the writer. */
typedef struct st_meta {
    const char *key;
    const char *value;
} st_meta;

/* The dtypes the writer writes. */
enum { ST_WRITE_F32 = 0, ST_WRITE_BF16 = 1, ST_WRITE_I8 = 2 };

/* One tensor to write, from host memory: F32 from `data`, or (dtype
 * ST_WRITE_BF16 / ST_WRITE_I8) bf16 bit patterns (uint16_t) / int8 values
 * from `raw`. A zero-initialised dtype is F32. */
typedef struct st_tensor_ref {
    const char *name;
    const float *data;
    int32_t n_dims;
    int64_t shape[NCTMC_MAX_DIMS];
    int32_t dtype;
    const void *raw;
} st_tensor_ref;

/*
 * Writes a safetensors file atomically: a temporary file next to `path`,
 * fsync, rename over `path`, fsync of the directory. On failure the
 * temporary file is removed and `path` is untouched. Tensors are written in
 * the given order, contiguously; names
 * must be unique (checked). Returns NCTMC_ERR_IO with the system's reason;
 * NCTMC_ERR_INVALID_ARGUMENT for a NULL, duplicate, "__metadata__" or
 * non-UTF-8 name or value, or a bad shape (nothing is written then).
 */
nctmc_status st_write_file(const char *path, const st_meta *meta, int32_t n_meta,
                           const st_tensor_ref *tensors, int32_t n_tensors, char *err,
                           size_t err_size);

/*
 * As st_write_file(), and adds the metadata entry checksum_key whose value
 * is the CRC-32 (8 lowercase hex digits) of the whole file as written with
 * those 8 digits set to '0' — so every byte of the file, header included,
 * is covered. st_file_verify_checksum() checks it.
 */
nctmc_status st_write_file_checksummed(const char *path, const st_meta *meta, int32_t n_meta,
                                       const char *checksum_key, const st_tensor_ref *tensors,
                                       int32_t n_tensors, char *err, size_t err_size);

/* The same with its buffers from alloc (alloc.h; NULL = the C library). */
nctmc_status st_write_file_checksummed_with(const struct nctmc_allocator *alloc,
                                            const char *path, const st_meta *meta,
                                            int32_t n_meta, const char *checksum_key,
                                            const st_tensor_ref *tensors, int32_t n_tensors,
                                            char *err, size_t err_size);

typedef struct st_file st_file;

/* Reads and validates a whole file: header length within the file, JSON
 * well-formed (bounded depth and size), every tensor's dtype known, shape
 * consistent with its byte range, ranges inside the data section, not
 * overlapping, and covering it. NCTMC_ERR_IO if it cannot be read,
 * NCTMC_ERR_FORMAT otherwise. The file stays open until st_file_free(),
 * and tensors are read from it when asked. */
nctmc_status st_read_file(const char *path, st_file **out, char *err, size_t err_size);

/* st_read_file() with the st_file's memory from alloc (alloc.h; NULL = the
 * C library). */
nctmc_status st_open_file(const struct nctmc_allocator *alloc, const char *path, st_file **out,
                          char *err, size_t err_size);

/* The same checks on size bytes at data, which must stay readable until
 * st_file_free(); `name` stands for the file in messages. */
nctmc_status st_open_memory(const struct nctmc_allocator *alloc, const void *data, size_t size,
                            const char *name, st_file **out, char *err, size_t err_size);

/* The same checks reading through the caller's reader (validated and copied;
 * its read_at is called until st_file_free()). */
nctmc_status st_open_reader(const struct nctmc_allocator *alloc, const nctmc_reader *reader,
                            const char *name, st_file **out, char *err, size_t err_size);

void st_file_free(st_file *file);

/* The metadata value of `key`, or NULL. Owned by the file. */
const char *st_file_meta(const st_file *file, const char *key);

/* Number of tensors, and the name of tensor `index` (file order). */
int32_t st_file_n_tensors(const st_file *file);
const char *st_file_tensor_name(const st_file *file, int32_t index);

/* Dimensions a tensor of a file being read may have (files from other tools
 * may hold tensors of more dimensions than a model uses). */
#define ST_MAX_DIMS 8

/* Number of metadata entries, and the key of entry `index` (sorted by key);
 * NULL out of range. */
int32_t st_file_n_meta(const st_file *file);
const char *st_file_meta_key(const st_file *file, int32_t index);

/* The index (file order) of tensor `name`, or -1. */
int32_t st_file_find_tensor(const st_file *file, const char *name);

/* What the header says about one tensor; strings owned by the file. */
typedef struct st_tensor_desc {
    const char *name;
    const char *dtype;      /* "F32", "F16", "I64", ... */
    int32_t n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t n_bytes;
} st_tensor_desc;

/* Describes tensor `index`; false when the index is out of range. */
bool st_file_tensor_desc(const st_file *file, int32_t index, st_tensor_desc *desc);

/*
 * Finds tensor `name`, which must be F32 with exactly the given shape, and
 * copies its values (converted from little-endian) into dst (n_elements of
 * the shape). NCTMC_ERR_NOT_FOUND if absent, NCTMC_ERR_FORMAT for the wrong
 * dtype or shape.
 */
nctmc_status st_file_read_f32(const st_file *file, const char *name, int32_t n_dims,
                              const int64_t *shape, float *dst, char *err, size_t err_size);

/*
 * As st_file_read_f32() for a "BF16" tensor (dst: uint16_t bit patterns,
 * converted from little-endian) or an "I8" one (dst: int8_t), named by
 * dtype; NCTMC_ERR_FORMAT for another dtype or shape.
 */
nctmc_status st_file_read_raw(const st_file *file, const char *name, const char *dtype,
                              int32_t n_dims, const int64_t *shape, void *dst, char *err,
                              size_t err_size);

/* Recomputes the checksum st_write_file_checksummed() stored under key
 * (reading the whole file once). NCTMC_ERR_FORMAT when it is missing, not
 * written as exactly 8 lowercase hex digits, or different. */
nctmc_status st_file_verify_checksum(const st_file *file, const char *key, char *err,
                                     size_t err_size);

/* ---- for loaders that map the file (model_map.c) -------------------------- */

/* The descriptor of a file opened with st_open_file(), or -1 for memory
 * and reader sources. Owned by the file: closed by st_file_free(). */
int st_file_fd(const st_file *file);

/* The size of the file or buffer, as its header was checked against. */
uint64_t st_file_size(const st_file *file);

/* Where tensor `index`'s data starts, in bytes from the start of the file;
 * false when the index is out of range. */
bool st_file_tensor_offset(const st_file *file, int32_t index, uint64_t *offset);

/* Copies n raw bytes at file byte `offset` into dst (the checks of every
 * read: NCTMC_ERR_FORMAT past the end or for a file that ends early,
 * NCTMC_ERR_IO when a read fails). */
nctmc_status st_file_read_bytes(const st_file *file, uint64_t offset, void *dst, size_t n,
                                char *err, size_t err_size);

#endif /* NCTMC_SAFETENSORS_H */
