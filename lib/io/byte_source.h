/*
 * byte_source.h — a byte range read by position, the one way checkpoints
 * are read: a file, the caller's memory and the caller's nctmc_reader all
 * become an nctmc_reader here, and every read goes through
 * byte_source_read(), which owns the checks (short reads, failures,
 * readers that return more than asked, data that ends before its size).
 */
#ifndef NCTMC_BYTE_SOURCE_H
#define NCTMC_BYTE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

typedef struct byte_source {
    nctmc_reader reader;    /* every read goes through reader.read_at */
    const char *name;       /* for messages: a path or "<memory>"; not owned */
    int fd;                 /* a file: its descriptor (closed by close), else -1 */
    int errnum;             /* a file: the system's code of the last failed read, else 0 */
    const uint8_t *data;    /* memory: the caller's bytes */
} byte_source;

/* Each initialiser works in place: the source's reader may point at the
 * source itself, so it must not be copied or moved afterwards. */

/* Opens a regular file (NCTMC_ERR_IO when it cannot be). */
nctmc_status byte_source_open_file(byte_source *s, const char *path, char *err,
                                   size_t err_size);

/* size bytes at data, read only while the source is in use. */
void byte_source_init_memory(byte_source *s, const void *data, size_t size, const char *name);

/* A copy of the caller's reader after checking it: struct_size (see
 * nctmc_model_load_reader()), size >= 0, read_at set. */
nctmc_status byte_source_init_reader(byte_source *s, const nctmc_reader *reader,
                                     const char *name, char *err, size_t err_size);

/* Closes a file source; nothing for the others. Idempotent. */
void byte_source_close(byte_source *s);

/* The size the source claims. */
uint64_t byte_source_size(const byte_source *s);

/* Reads exactly n bytes at offset: NCTMC_ERR_FORMAT when the range lies
 * past the claimed size or the data ends early (a truncated file, a size
 * that lies), NCTMC_ERR_IO when a read fails or returns more than asked. */
nctmc_status byte_source_read(const byte_source *s, uint64_t offset, void *dst, size_t n,
                              char *err, size_t err_size);

#endif /* NCTMC_BYTE_SOURCE_H */
