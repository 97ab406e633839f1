/*
 * byte_source.c — files, memory and the caller's readers as one positional
 * byte range (see byte_source.h), and nctmc_reader_init_sized().
 */
#include "byte_source.h"

#include <stdio.h>
#include <string.h>

#include "base/abi.h"
#include "core/context.h"
#include "file_io.h"

/* One read_at call asks for at most this much (the header promises it). */
#define SOURCE_CHUNK ((size_t)1 << 30)

NCTMC_API nctmc_status nctmc_reader_init_sized(nctmc_reader *reader, size_t size)
{
    return abi_init(reader, size, NULL, &abi_reader);
}

static int64_t file_read_at(void *user_data, void *dst, size_t n, int64_t offset)
{
    byte_source *s = user_data;
    int error = 0;
    int64_t r = offset < 0 ? -1 : plat_read_at(s->fd, dst, n, (uint64_t)offset, &error);
    if (r < 0)
        s->errnum = error;
    return r;
}

static int64_t memory_read_at(void *user_data, void *dst, size_t n, int64_t offset)
{
    const byte_source *s = user_data;
    uint64_t size = (uint64_t)s->reader.size;
    if (offset < 0 || (uint64_t)offset >= size)
        return 0;
    size_t k = (uint64_t)n < size - (uint64_t)offset ? n : (size_t)(size - (uint64_t)offset);
    memcpy(dst, s->data + offset, k);
    return (int64_t)k;
}

static void init_empty(byte_source *s, const char *name)
{
    memset(s, 0, sizeof *s);
    s->reader.struct_size = sizeof s->reader;
    s->reader.user_data = s;
    s->name = name;
    s->fd = -1;
}

nctmc_status byte_source_open_file(byte_source *s, const char *path, char *err,
                                   size_t err_size)
{
    init_empty(s, path);
    uint64_t size = 0;
    nctmc_status st = file_open_read(path, &s->fd, &size, err, err_size);
    if (st != NCTMC_OK) {
        s->fd = -1;
        return st;
    }
    s->reader.size = (int64_t)size; /* st_size is an off_t: never above INT64_MAX */
    s->reader.read_at = file_read_at;
    return NCTMC_OK;
}

void byte_source_init_memory(byte_source *s, const void *data, size_t size, const char *name)
{
    init_empty(s, name);
    s->data = data;
    s->reader.size = (int64_t)size; /* callers check size <= INT64_MAX */
    s->reader.read_at = memory_read_at;
}

nctmc_status byte_source_init_reader(byte_source *s, const nctmc_reader *reader,
                                     const char *name, char *err, size_t err_size)
{
    init_empty(s, name);
    if (!reader)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "reader is NULL");
    nctmc_reader_init(&s->reader);
    nctmc_status st = abi_read(reader, &s->reader, sizeof s->reader, &abi_reader, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (s->reader.size < 0 || !s->reader.read_at)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_reader: size must be >= 0 (got %lld) and read_at set",
                           (long long)s->reader.size);
    return NCTMC_OK;
}

void byte_source_close(byte_source *s)
{
    if (s->fd >= 0)
        file_close(s->fd);
    s->fd = -1;
}

uint64_t byte_source_size(const byte_source *s)
{
    return (uint64_t)s->reader.size;
}

static nctmc_status read_failed(const byte_source *s, uint64_t offset, int64_t got, char *err,
                                size_t err_size)
{
    char reason[128] = "";
    if (s->errnum)
        plat_error_text(s->errnum, reason, sizeof reason);
    if (reason[0])
        return fail_format(err, err_size, NCTMC_ERR_IO, "reading \"%.300s\": %s", s->name,
                           reason);
    return fail_format(err, err_size, NCTMC_ERR_IO,
                       "reading \"%.300s\" at byte %llu failed (read_at returned %lld)", s->name,
                       (unsigned long long)offset, (long long)got);
}

nctmc_status byte_source_read(const byte_source *s, uint64_t offset, void *dst, size_t n,
                              char *err, size_t err_size)
{
    uint64_t size = byte_source_size(s);
    if (offset > size || (uint64_t)n > size - offset)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "\"%.300s\": %zu bytes at byte %llu lie past its %llu bytes", s->name,
                           n, (unsigned long long)offset, (unsigned long long)size);
    uint8_t *p = dst;
    while (n > 0) {
        size_t ask = n < SOURCE_CHUNK ? n : SOURCE_CHUNK;
        int64_t got = s->reader.read_at(s->reader.user_data, p, ask, (int64_t)offset);
        if (got < 0)
            return read_failed(s, offset, got, err, err_size);
        if ((uint64_t)got > (uint64_t)ask)
            return fail_format(err, err_size, NCTMC_ERR_IO,
                               "reading \"%.300s\": read_at returned %lld for a read of %zu "
                               "bytes",
                               s->name, (long long)got, ask);
        if (got == 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "\"%.300s\" ends early (at byte %llu of the %llu it claims; was "
                               "it truncated?)",
                               s->name, (unsigned long long)offset, (unsigned long long)size);
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return NCTMC_OK;
}
