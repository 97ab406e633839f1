/*
 * no_mmap.c — `--no-mmap`: checkpoints and shards read into this process's
 * own memory instead of mapped, so that another process truncating the
 * file in place cannot kill this one with SIGBUS (docs/cli.md, "Mapped
 * files").
 *
 * A checkpoint: nctmc_model_load_ex() with NCTMC_LOAD_COPY. A shard:
 * nctmc_dataset_open() always maps, so the shard is first copied into an
 * anonymous in-memory file (Linux memfd_create) that only this process
 * holds, and that copy is opened (and mapped) instead; elsewhere the tool
 * says it cannot and stops.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "cli.h"

nctmc_status cli_load_model(nctmc_context *ctx, const char *path, bool no_mmap,
                            nctmc_model **out)
{
    if (!no_mmap)
        return nctmc_model_load(ctx, path, out);
    nctmc_load_params p;
    nctmc_load_params_init(&p);
    p.mapping = NCTMC_LOAD_COPY;
    return nctmc_model_load_ex(ctx, path, &p, out);
}

#ifdef __linux__
/* Copies the file at path into a new memfd: its descriptor, or -1 (errno). */
static int copy_to_memfd(const char *path)
{
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int fd = memfd_create("nctmc-shard", MFD_CLOEXEC);
    char buf[1 << 16];
    ssize_t n = 0;
    while (fd >= 0 && (n = read(in, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        ssize_t done = 0;
        while (n > 0 && done < n) {
            ssize_t w = write(fd, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            done += w;
        }
        if (n < 0 || done < n) {
            int e = errno;
            close(fd);
            fd = -1;
            errno = e;
        }
    }
    int e = errno;
    close(in);
    errno = e;
    return fd;
}
#endif

bool cli_open_dataset(const char *cmd, nctmc_context *ctx, const char *path, bool no_mmap,
                      nctmc_dataset **out)
{
    nctmc_status st;
    if (!no_mmap) {
        st = nctmc_dataset_open(ctx, path, out);
        if (st != NCTMC_OK)
            cli_fail(cmd, path, st, nctmc_context_last_error(ctx));
        return st == NCTMC_OK;
    }
#ifdef __linux__
    int fd = copy_to_memfd(path);
    if (fd < 0) {
        cli_error(cmd, "--no-mmap: cannot copy %s into memory: %s", path, strerror(errno));
        return false;
    }
    char copy[64];
    snprintf(copy, sizeof copy, "/proc/self/fd/%d", fd);
    st = nctmc_dataset_open(ctx, copy, out);
    close(fd); /* the dataset holds the copy open while it needs it */
    if (st != NCTMC_OK)
        cli_fail(cmd, path, st, nctmc_context_last_error(ctx));
    return st == NCTMC_OK;
#else
    (void)ctx;
    (void)out;
    cli_error(cmd, "--no-mmap for a shard (%s) needs Linux's memfd_create", path);
    return false;
#endif
}
