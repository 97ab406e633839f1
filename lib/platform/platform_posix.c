/*
 * platform_posix.c — platform.h for POSIX systems: files and maps (open,
 * pread, mmap; mkstemp + flock + rename + fsync for atomic replacement).
 * Modules and the core count, which need GNU extensions, are in
 * platform_posix_loader.c.
 */
/* realpath() is an X/Open function, beyond the POSIX base the build asks
 * for; madvise() and MAP_ANONYMOUS are in the default (BSD) set. */
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE

#include "platform.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdarg.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/fail.h"

/* One system call moves at most this much, well inside ssize_t everywhere. */
#define IO_CHUNK ((size_t)1 << 30)
/* Permissions of a new file (mkstemp creates 0600); an existing file keeps
 * its own. */
#define NEW_FILE_MODE 0644
/* A temporary file is named "<target>" TMP_TAG + TMP_RANDOM_CHARS random
 * characters (mkstemp's "XXXXXX"). */
#define TMP_TAG ".tmp-"
#define TMP_RANDOM_CHARS 6

/* ---- memory ---------------------------------------------------------------- */

bool plat_address_space_available(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    munmap(p, bytes);
    return true;
}

void *plat_sys_alloc(size_t size, size_t alignment)
{
    if (alignment <= alignof(max_align_t))
        return malloc(size);
    /* C11 wants a multiple of the alignment */
    size_t rounded = (size + alignment - 1) / alignment * alignment;
    return rounded < size ? NULL : aligned_alloc(alignment, rounded);
}

void *plat_sys_realloc(void *p, size_t size)
{
    return realloc(p, size);
}

void plat_sys_free(void *p)
{
    free(p);
}

/* ---- the "C" numeric locale ------------------------------------------------ */

bool plat_c_numeric_enter(plat_c_numeric *scope)
{
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (c == (locale_t)0)
        return false;
    locale_t previous = uselocale(c);
    if (previous == (locale_t)0) {
        freelocale(c);
        return false;
    }
    scope->c_locale = (void *)c;
    scope->previous = (void *)previous;
    return true;
}

void plat_c_numeric_leave(plat_c_numeric *scope)
{
    uselocale((locale_t)scope->previous);
    freelocale((locale_t)scope->c_locale);
}

/* ---- files ------------------------------------------------------------------ */

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
    return fail_format(err, err_size, status, "%s: %s", what, reason);
}

static void release(plat_atomic *af)
{
    mem_free(af->alloc, af->tmp_path);
    mem_free(af->alloc, af->path);
    af->tmp_path = NULL;
    af->path = NULL;
    af->fd = -1;
}

/* ---- where the new file goes ---------------------------------------------- */

/* The file a write to `path` replaces: path itself when it is absent or a
 * regular file; the (canonical) target of a symbolic link to an existing
 * regular file, so the link survives and its target gets the new data.
 * Anything else — a directory, a FIFO, a device, a socket, a link to one of
 * those or to nothing — is refused: renaming over it would silently replace
 * it by a regular file (as root, /dev/full with the checkpoint), and writing
 * into it is not an atomic replacement. */
static nctmc_status resolve_target(const nctmc_allocator *alloc, const char *path,
                                   char **target, char *err, size_t err_size)
{
    struct stat st;
    *target = NULL;
    if (!path[0])
        return fail_format(err, err_size, NCTMC_ERR_IO, "cannot write a file with an empty name");
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return sys_fail(err, err_size, NCTMC_ERR_IO, errno, "cannot examine \"%.300s\"",
                            path);
    } else if (S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real)
            return sys_fail(err, err_size, NCTMC_ERR_IO, errno,
                            "\"%.300s\" is a symbolic link whose target cannot be resolved "
                            "(refusing to write through it)",
                            path);
        bool regular = stat(real, &st) == 0 && S_ISREG(st.st_mode);
        *target = regular ? mem_strdup(alloc, real) : NULL;
        free(real); /* realpath()'s own malloc */
        if (!regular)
            return fail_format(err, err_size, NCTMC_ERR_IO,
                               "\"%.300s\" is a symbolic link to something that is not a "
                               "regular file; refusing to replace it",
                               path);
        return *target ? NCTMC_OK
                       : fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    } else if (!S_ISREG(st.st_mode)) {
        return fail_format(err, err_size, NCTMC_ERR_IO,
                           "\"%.300s\" exists and is not a regular file (a directory, FIFO, "
                           "device or socket); refusing to replace it",
                           path);
    }
    *target = mem_strdup(alloc, path); /* absent (created) or a regular file */
    return *target ? NCTMC_OK
                   : fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
}

/* ---- stale temporary files -------------------------------------------------- */

/* The six characters mkstemp() puts in place of "XXXXXX". */
static bool is_mkstemp_suffix(const char *s)
{
    for (int i = 0; i < TMP_RANDOM_CHARS; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            return false;
    }
    return s[TMP_RANDOM_CHARS] == '\0';
}

static bool older_than(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/*
 * A writer killed between creating its temporary file and renaming it
 * (kill -9, a second Ctrl-C, a crash) leaves "<target>.tmp-XXXXXX" behind,
 * often as large as the target. The next write to the same target removes
 * such files, but only those nobody can still be writing. A candidate is
 * removed only when all of these hold:
 *  - its name is exactly the target's name + ".tmp-" + six characters of
 *    mkstemp's alphabet, in the target's directory: no other file matches;
 *  - it is a regular file (lstat: a symbolic link is never followed),
 *    owned by our effective user, with a single link;
 *  - its modification time is older than our own temporary file's, which
 *    was made just now;
 *  - we can take an exclusive flock() on it without waiting. Every writer
 *    holds that lock on its temporary file from creation until the rename,
 *    and the kernel drops it when the writer dies, so a free lock means the
 *    writer is gone. (A writer between mkstemp() and flock() holds no lock
 *    yet: it checks after locking that its file is still the one under its
 *    name and starts over if not — see create_temp_file().)
 *  - the name still refers to the inode we opened (O_NOFOLLOW) and locked.
 * Failures here are not errors of the write: a file that cannot be removed
 * stays where it is.
 */
static void remove_if_stale(int dir_fd, const char *name, const struct timespec *own_mtime)
{
    struct stat st;
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid() || st.st_nlink != 1 || !older_than(&st.st_mtim, own_mtime))
        return;
    int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat opened, now;
    if (fstat(fd, &opened) == 0 && opened.st_dev == st.st_dev && opened.st_ino == st.st_ino &&
        flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
        now.st_ino == st.st_ino)
        unlinkat(dir_fd, name, 0);
    close(fd);
}

/* Copies the directory of path into dir ("." for a bare name) and points
 * *base at its last component; false when it does not fit (the cleanup is
 * then skipped: it is a courtesy, and allocating for it could fail). */
static bool split_dir(const char *path, char *dir, size_t dir_size, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    if (n + 1 > dir_size)
        return false;
    memcpy(dir, slash ? path : ".", n);
    dir[n] = '\0';
    return true;
}

static void clean_stale_temps(const plat_atomic *af)
{
    struct stat own;
    if (fstat(af->fd, &own) != 0)
        return;
    const char *base = NULL;
    char dir[4096];
    DIR *d = split_dir(af->path, dir, sizeof dir, &base) ? opendir(dir) : NULL;
    if (!d)
        return;
    size_t base_len = strlen(base), tag_len = strlen(TMP_TAG);
    const char *own_name = strrchr(af->tmp_path, '/');
    own_name = own_name ? own_name + 1 : af->tmp_path;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *n = e->d_name;
        if (strncmp(n, base, base_len) == 0 && strncmp(n + base_len, TMP_TAG, tag_len) == 0 &&
            is_mkstemp_suffix(n + base_len + tag_len) && strcmp(n, own_name) != 0)
            remove_if_stale(dirfd(d), n, &own.st_mtim);
    }
    closedir(d);
}

/* ---- the writer ------------------------------------------------------------ */

/* Creates and locks the temporary file (see remove_if_stale() for why the
 * lock). Should another writer's cleanup have removed our file in the
 * instant between its creation and our lock, we make a new one. */
static nctmc_status create_temp_file(plat_atomic *af, char *err, size_t err_size)
{
    size_t n = strlen(af->path);
    for (int attempt = 0; attempt < 8; attempt++) {
        memcpy(af->tmp_path, af->path, n);
        memcpy(af->tmp_path + n, TMP_TAG "XXXXXX", sizeof TMP_TAG + TMP_RANDOM_CHARS);
        int fd = mkstemp(af->tmp_path);
        if (fd < 0)
            return sys_fail(err, err_size, NCTMC_ERR_IO, errno,
                            "cannot create a temporary file next to \"%.300s\"", af->path);
        struct stat mine, named;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &mine) == 0 &&
            lstat(af->tmp_path, &named) == 0 && mine.st_dev == named.st_dev &&
            mine.st_ino == named.st_ino) {
            af->fd = fd;
            return NCTMC_OK;
        }
        close(fd);
    }
    return fail_format(err, err_size, NCTMC_ERR_IO,
                       "cannot create a temporary file next to \"%.300s\": it kept "
                       "disappearing",
                       af->path);
}

nctmc_status plat_atomic_begin(plat_atomic *af, const nctmc_allocator *alloc,
                               const char *path, char *err, size_t err_size)
{
    af->fd = -1;
    af->tmp_path = NULL;
    af->alloc = alloc;
    nctmc_status st = resolve_target(alloc, path, &af->path, err, err_size);
    if (st != NCTMC_OK)
        return st;
    af->tmp_path = mem_alloc(alloc, strlen(af->path) + sizeof TMP_TAG + TMP_RANDOM_CHARS);
    if (!af->tmp_path) {
        release(af);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    st = create_temp_file(af, err, err_size);
    if (st != NCTMC_OK) {
        release(af);
        return st;
    }
    struct stat existing;
    mode_t mode = stat(af->path, &existing) == 0 && S_ISREG(existing.st_mode)
                      ? (existing.st_mode & 07777)
                      : NEW_FILE_MODE;
    if (fchmod(af->fd, mode) != 0) {
        int e = errno;
        plat_atomic_abort(af);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "cannot set the mode of \"%.300s\"",
                        path);
    }
    clean_stale_temps(af);
    return NCTMC_OK;
}

nctmc_status plat_atomic_write(plat_atomic *af, const void *data, size_t n, char *err,
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

nctmc_status plat_atomic_write_at(plat_atomic *af, uint64_t offset, const void *data,
                                  size_t n, char *err, size_t err_size)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (offset > (uint64_t)INT64_MAX)
            return fail_format(err, err_size, NCTMC_ERR_IO, "writing \"%.300s\": offset too large",
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
 * EINVAL; that is no failure of ours. */
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

nctmc_status plat_atomic_commit(plat_atomic *af, char *err, size_t err_size)
{
    if (fsync(af->fd) != 0) {
        int e = errno;
        plat_atomic_abort(af);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "flushing a new file to disk");
    }
    /* The file stays open (and locked) until it has its final name, so no
     * other writer's cleanup can take it for a dead writer's. */
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        nctmc_status st = sys_fail(err, err_size, NCTMC_ERR_IO, e,
                                   "cannot replace \"%.300s\"", af->path);
        plat_atomic_abort(af);
        return st;
    }
    mem_free(af->alloc, af->tmp_path);
    af->tmp_path = NULL;
    int fd = af->fd;
    af->fd = -1;
    nctmc_status st = NCTMC_OK;
    if (close(fd) != 0)
        st = sys_fail(err, err_size, NCTMC_ERR_IO, errno,
                      "\"%.300s\" was written, but closing it failed", af->path);
    if (st == NCTMC_OK)
        st = sync_parent_dir(af->path, err, err_size);
    release(af);
    return st;
}

void plat_atomic_abort(plat_atomic *af)
{
    if (af->fd >= 0)
        close(af->fd);
    if (af->tmp_path)
        unlink(af->tmp_path);
    release(af);
}

nctmc_status plat_open_read(const char *path, int *fd, uint64_t *size, char *err,
                            size_t err_size)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever; it is refused below, and the flag is cleared for the
     * regular file it must be. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
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
        return fail_format(err, err_size, NCTMC_ERR_IO,
                           "\"%.300s\" is not a regular file (a directory, FIFO, device or "
                           "socket)",
                           path);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return sys_fail(err, err_size, NCTMC_ERR_IO, e, "cannot read \"%.300s\"", path);
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return NCTMC_OK;
}

nctmc_status plat_pread(int fd, uint64_t offset, void *buf, size_t n, const char *path,
                        char *err, size_t err_size)
{
    uint8_t *p = buf;
    while (n > 0) {
        if (offset > (uint64_t)INT64_MAX)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "\"%.300s\": offset %llu is past any file", path,
                               (unsigned long long)offset);
        ssize_t r = pread(fd, p, n < IO_CHUNK ? n : IO_CHUNK, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sys_fail(err, err_size, NCTMC_ERR_IO, errno, "reading \"%.300s\"", path);
        if (r == 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "\"%.300s\" ends early (at byte %llu; was it truncated?)", path,
                               (unsigned long long)offset);
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return NCTMC_OK;
}

int64_t plat_read_at(int fd, void *dst, size_t n, uint64_t offset, int *error)
{
    if (offset > (uint64_t)INT64_MAX) {
        *error = EINVAL;
        return -1;
    }
    for (;;) {
        ssize_t r = pread(fd, dst, n < IO_CHUNK ? n : IO_CHUNK, (off_t)offset);
        if (r >= 0)
            return (int64_t)r;
        if (errno != EINTR) {
            *error = errno;
            return -1;
        }
    }
}

void plat_error_text(int error, char *text, size_t size)
{
    if (strerror_r(error, text, size) != 0)
        snprintf(text, size, "error %d", error);
}

void plat_close(int fd)
{
    close(fd);
}

/* ---- read-only file maps ------------------------------------------------------ */

size_t plat_map_alignment(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

bool plat_file_size(int fd, uint64_t *size, bool *regular, char *err, size_t err_size)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        sys_fail(err, err_size, NCTMC_ERR_IO, errno, "cannot map the file");
        return false;
    }
    *size = (uint64_t)sb.st_size;
    *regular = S_ISREG(sb.st_mode);
    return true;
}

nctmc_status plat_map(int fd, uint64_t start, size_t length, bool private_map, void **base,
                      char *err, size_t err_size)
{
    *base = NULL;
    if (start > (uint64_t)INT64_MAX)
        return fail_format(err, err_size, NCTMC_ERR_IO, "cannot map the file: offset too large");
    void *p = mmap(NULL, length, PROT_READ, private_map ? MAP_PRIVATE : MAP_SHARED, fd,
                   (off_t)start);
    if (p == MAP_FAILED)
        return sys_fail(err, err_size, NCTMC_ERR_IO, errno, "cannot map the file");
    *base = p;
    return NCTMC_OK;
}

void plat_map_discard(void *p, size_t n)
{
    /* advice only: a failure just leaves the pages resident */
    (void)madvise(p, n, MADV_DONTNEED);
}

void plat_unmap(void *base, size_t length)
{
    if (base)
        munmap(base, length);
}

double plat_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
