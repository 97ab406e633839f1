/*
 * file_io.c — atomic file replacement and bounded reading (see file_io.h).
 */
#include "file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "context.h"

/* One system call moves at most this much, well inside ssize_t everywhere. */
#define IO_CHUNK ((size_t)1 << 30)
/* Permissions of a new file (mkstemp creates 0600); an existing file keeps
 * its own. */
#define NEW_FILE_MODE 0644

/* Fails with status and "<formatted>: <strerror(errnum)>". */
static nctmc_status sys_fail(char *err, size_t err_size, nctmc_status status, int errnum,
                             const char *fmt, ...) NCTMC_PRINTF(5, 6);
static nctmc_status sys_fail(char *err, size_t err_size, nctmc_status status, int errnum,
                             const char *fmt, ...)
{
    char what[NCTMC_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char reason[128];
    if (strerror_r(errnum, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", errnum);
    return nctmc_fail(err, err_size, status, "%s: %s", what, reason);
}

static void release(atomic_file *af)
{
    nctmc_mem_free(af->alloc, af->tmp_path);
    nctmc_mem_free(af->alloc, af->path);
    af->tmp_path = NULL;
    af->path = NULL;
    af->fd = -1;
}

nctmc_status atomic_file_begin(atomic_file *af, const nctmc_allocator *alloc,
                               const char *path, char *err, size_t err_size)
{
    static const char suffix[] = ".tmp-XXXXXX";
    af->fd = -1;
    af->alloc = alloc;
    af->path = nctmc_mem_strdup(alloc, path);
    af->tmp_path = nctmc_mem_alloc(alloc, strlen(path) + sizeof suffix);
    if (!af->path || !af->tmp_path) {
        release(af);
        return nctmc_fail(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    strcpy(af->tmp_path, path);
    strcat(af->tmp_path, suffix);
    af->fd = mkstemp(af->tmp_path);
    if (af->fd < 0) {
        int e = errno;
        release(af);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e,
                        "cannot create a temporary file next to \"%.300s\"", path);
    }
    struct stat st;
    mode_t mode = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (st.st_mode & 07777)
                                                               : NEW_FILE_MODE;
    if (fchmod(af->fd, mode) != 0) {
        int e = errno;
        atomic_file_abort(af);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "cannot set the mode of \"%.300s\"",
                        path);
    }
    return NCTMC_OK;
}

nctmc_status atomic_file_write(atomic_file *af, const void *data, size_t n, char *err,
                               size_t err_size)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(af->fd, p, n < IO_CHUNK ? n : IO_CHUNK);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return sys_fail(err, err_size, NCTMC_ERR_IO, w < 0 ? errno : EIO,
                            "writing \"%.300s\"", af->path);
        p += w;
        n -= (size_t)w;
    }
    return NCTMC_OK;
}

nctmc_status atomic_file_write_at(atomic_file *af, uint64_t offset, const void *data,
                                  size_t n, char *err, size_t err_size)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (offset > (uint64_t)INT64_MAX)
            return nctmc_fail(err, err_size, NCTMC_ERR_IO, "writing \"%.300s\": offset too large",
                              af->path);
        ssize_t w = pwrite(af->fd, p, n < IO_CHUNK ? n : IO_CHUNK, (off_t)offset);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return sys_fail(err, err_size, NCTMC_ERR_IO, w < 0 ? errno : EIO,
                            "writing \"%.300s\"", af->path);
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return NCTMC_OK;
}

/* The directory entry of the rename must reach the disk too, or a crash can
 * bring the old file back. Filesystems that cannot fsync a directory say
 * EINVAL; that is no failure of ours. The directory's name is cut out of
 * path in place (and put back): this runs after the rename, where an
 * allocation that fails would report a failure for a file already written. */
static nctmc_status sync_parent_dir(char *path, char *err, size_t err_size)
{
    char *slash = strrchr(path, '/');
    char *cut = !slash ? NULL : slash == path ? slash + 1 : slash;
    char saved = cut ? *cut : '\0';
    if (cut)
        *cut = '\0';
    int fd = open(cut ? path : ".", O_RDONLY | O_CLOEXEC);
    if (cut)
        *cut = saved;
    nctmc_status st = NCTMC_OK;
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL && errno != EROFS))
        st = sys_fail(err, err_size, NCTMC_ERR_IO, errno,
                      "\"%.300s\" was written, but syncing its directory failed", path);
    if (fd >= 0)
        close(fd);
    return st;
}

nctmc_status atomic_file_commit(atomic_file *af, char *err, size_t err_size)
{
    if (fsync(af->fd) != 0) {
        int e = errno;
        atomic_file_abort(af);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "flushing a new file to disk");
    }
    int fd = af->fd;
    af->fd = -1;
    if (close(fd) != 0) {
        int e = errno;
        atomic_file_abort(af);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "closing a new file");
    }
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        nctmc_status st = sys_fail(err, err_size, NCTMC_ERR_IO, e,
                                   "cannot replace \"%.300s\"", af->path);
        atomic_file_abort(af);
        return st;
    }
    nctmc_status st = sync_parent_dir(af->path, err, err_size);
    release(af);
    return st;
}

void atomic_file_abort(atomic_file *af)
{
    if (af->fd >= 0)
        close(af->fd);
    if (af->tmp_path)
        unlink(af->tmp_path);
    release(af);
}

nctmc_status file_open_read(const char *path, int *fd, uint64_t *size, char *err,
                            size_t err_size)
{
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return sys_fail(err, err_size, NCTMC_ERR_IO, errno, "cannot open \"%.300s\"", path);
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "cannot stat \"%.300s\"", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return nctmc_fail(err, err_size, NCTMC_ERR_IO, "\"%.300s\" is not a regular file", path);
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return NCTMC_OK;
}

nctmc_status file_pread(int fd, uint64_t offset, void *buf, size_t n, const char *path,
                        char *err, size_t err_size)
{
    uint8_t *p = buf;
    while (n > 0) {
        if (offset > (uint64_t)INT64_MAX)
            return nctmc_fail(err, err_size, NCTMC_ERR_FORMAT,
                              "\"%.300s\": offset %llu is past any file", path,
                              (unsigned long long)offset);
        ssize_t r = pread(fd, p, n < IO_CHUNK ? n : IO_CHUNK, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sys_fail(err, err_size, NCTMC_ERR_IO, errno, "reading \"%.300s\"", path);
        if (r == 0)
            return nctmc_fail(err, err_size, NCTMC_ERR_FORMAT,
                              "\"%.300s\" ends early (at byte %llu; was it truncated?)", path,
                              (unsigned long long)offset);
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return NCTMC_OK;
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
        close(fd);
        return nctmc_fail(err, err_size, NCTMC_ERR_FORMAT,
                          "\"%.300s\" has %llu bytes, more than the %zu this kind of file may "
                          "have",
                          path, (unsigned long long)n, max_bytes);
    }
    uint8_t *buf = nctmc_mem_alloc(alloc, (size_t)n + 1);
    if (!buf) {
        close(fd);
        return nctmc_fail(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                          "cannot allocate %llu bytes to read \"%.300s\"",
                          (unsigned long long)n + 1, path);
    }
    st = file_pread(fd, 0, buf, (size_t)n, path, err, err_size);
    close(fd);
    if (st != NCTMC_OK) {
        nctmc_mem_free(alloc, buf);
        return st;
    }
    buf[n] = 0;
    *data = buf;
    *size = (size_t)n;
    return NCTMC_OK;
}
