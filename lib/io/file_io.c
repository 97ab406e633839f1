/*
 * file_io.c — atomic file replacement and bounded reading (see file_io.h);
 * the system calls behind them are the platform layer's
 * (platform/platform.h).
 */
#include "file_io.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "core/context.h"
#include "core/ctx_report.h"

nctmc_status file_atomic_begin(file_atomic *af, const nctmc_allocator *alloc,
                               const char *path, char *err, size_t err_size)
{
    return plat_atomic_begin(af, alloc, path, err, err_size);
}

nctmc_status file_atomic_write(file_atomic *af, const void *data, size_t n, char *err,
                               size_t err_size)
{
    return plat_atomic_write(af, data, n, err, err_size);
}

nctmc_status file_atomic_write_at(file_atomic *af, uint64_t offset, const void *data,
                                  size_t n, char *err, size_t err_size)
{
    return plat_atomic_write_at(af, offset, data, n, err, err_size);
}

nctmc_status file_atomic_commit(file_atomic *af, char *err, size_t err_size)
{
    return plat_atomic_commit(af, err, err_size);
}

void file_atomic_abort(file_atomic *af)
{
    plat_atomic_abort(af);
}

nctmc_status file_open_read(const char *path, int *fd, uint64_t *size, char *err,
                            size_t err_size)
{
    return plat_open_read(path, fd, size, err, err_size);
}

nctmc_status file_pread(int fd, uint64_t offset, void *buf, size_t n, const char *path,
                        char *err, size_t err_size)
{
    return plat_pread(fd, offset, buf, n, path, err, err_size);
}

void file_close(int fd)
{
    plat_close(fd);
}

nctmc_status file_read_all(const nctmc_allocator *alloc, const char *path, size_t max_bytes,
                           uint8_t **data, size_t *size, char *err, size_t err_size)
{
    int fd = -1;
    uint64_t n = 0;
    nctmc_status st = file_open_read(path, &fd, &n, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (n > (uint64_t)max_bytes || n >= (uint64_t)SIZE_MAX) {
        plat_close(fd);
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "\"%.300s\" has %llu bytes, more than the %zu this kind of file may "
                           "have",
                           path, (unsigned long long)n, max_bytes);
    }
    uint8_t *buf = mem_alloc(alloc, (size_t)n + 1);
    if (!buf) {
        plat_close(fd);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate %llu bytes to read \"%.300s\"",
                           (unsigned long long)n + 1, path);
    }
    st = file_pread(fd, 0, buf, (size_t)n, path, err, err_size);
    plat_close(fd);
    if (st != NCTMC_OK) {
        mem_free(alloc, buf);
        return st;
    }
    buf[n] = 0;
    *data = buf;
    *size = (size_t)n;
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_write_file(nctmc_context *ctx, const char *path, const void *data,
                                        size_t size)
{
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!path || (!data && size > 0))
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_write_file: path is NULL, or data is NULL with size > 0");
    char err[NCTMC_ERROR_SIZE];
    file_atomic af;
    nctmc_status st = file_atomic_begin(&af, &ctx->alloc, path, err, sizeof err);
    if (st == NCTMC_OK) {
        st = file_atomic_write(&af, data, size, err, sizeof err);
        if (st == NCTMC_OK)
            st = file_atomic_commit(&af, err, sizeof err);
        else
            file_atomic_abort(&af);
    }
    if (st != NCTMC_OK)
        return ctx_report_fail(ctx, st, "nctmc_write_file: %s", err);
    return NCTMC_OK;
}
