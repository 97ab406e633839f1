/*
 * platform.h — everything the library needs from the operating system that
 * differs between POSIX systems and Windows, in one place: reading files,
 * read-only file maps, atomic replacement of a file, loading a module,
 * counting cores, reserving address space. One implementation per system
 * (platform_posix.c, platform_win32.c), chosen by lib/meson.build; no other
 * file of the library asks which system it runs on.
 *
 * Paths are UTF-8 everywhere; the Windows implementation converts them to
 * UTF-16 and calls the wide ("W") functions. File descriptors are the C
 * runtime's (open() on POSIX, _open_osfhandle() on Windows), so the callers
 * keep one int per open file on both. Threads, mutexes and condition
 * variables are POSIX threads on both systems (MinGW-w64's winpthreads on
 * Windows, linked statically into nctmc.dll), so they need no wrapper here.
 *
 * Failures come back as a status and one line in err: "<what>: <the
 * system's reason>".
 */
#ifndef NCTMC_PLATFORM_H
#define NCTMC_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

struct nctmc_allocator; /* base/alloc.h */

/* ---- cores and memory ------------------------------------------------------ */

/* Seconds on a monotonic clock from an arbitrary start (for measuring). */
double plat_seconds(void);

/* The cores this process may run on (its affinity mask where the system has
 * one, else the cores online); at least 1. */
int plat_cpu_count(void);

/* Whether `bytes` of private read-write address space can be reserved now
 * (reserved and released again, never touched). */
bool plat_address_space_available(size_t bytes);

/* The C library's memory (base/alloc.h declares these too, for its
 * allocator without a hook): `size` bytes aligned to `alignment` (a power
 * of two, at least alignof(max_align_t)), resized (default alignment only)
 * and freed. POSIX: malloc/aligned_alloc, realloc, free; Windows:
 * _aligned_malloc, _aligned_realloc, _aligned_free, one family for all. */
void *plat_sys_alloc(size_t size, size_t alignment);
void *plat_sys_realloc(void *p, size_t size);
void plat_sys_free(void *p);

/* ---- the "C" numeric locale ------------------------------------------------ */

/* A scope in which this thread's number text (strtof, snprintf) uses the
 * "C" locale's decimal point whatever the program set, other threads
 * undisturbed: uselocale() on POSIX, a per-thread locale
 * (_configthreadlocale) on Windows. Plain data for the implementation. */
typedef struct plat_c_numeric {
    void *c_locale;     /* POSIX: the locale_t made; Windows: unused */
    void *previous;     /* POSIX: the thread's locale_t before */
    int mode;           /* Windows: the thread's locale mode before */
    char name[128];     /* Windows: the thread's LC_NUMERIC before */
} plat_c_numeric;

/* Enters the scope; false when it cannot (the caller then fails). */
bool plat_c_numeric_enter(plat_c_numeric *scope);

void plat_c_numeric_leave(plat_c_numeric *scope);

/* ---- reading files ------------------------------------------------------------ */

/* Opens a regular file for reading and reports its size. Anything else
 * (directory, FIFO, device, socket) is NCTMC_ERR_IO, found without blocking. */
nctmc_status plat_open_read(const char *path, int *fd, uint64_t *size, char *err,
                            size_t err_size);

/* Reads exactly n bytes at offset; a file that ends early is
 * NCTMC_ERR_FORMAT (it was truncated), a read error NCTMC_ERR_IO. */
nctmc_status plat_pread(int fd, uint64_t offset, void *buf, size_t n, const char *path,
                        char *err, size_t err_size);

/* One read of at most n bytes at offset (interrupted reads are retried):
 * the bytes read, 0 at the end of the file, -1 on failure with the system's
 * error code in *error (plat_error_text() says it in words). */
int64_t plat_read_at(int fd, void *dst, size_t n, uint64_t offset, int *error);

/* The system's words for an error code from plat_read_at(). */
void plat_error_text(int error, char *text, size_t size);

/* Closes a descriptor from plat_open_read(). */
void plat_close(int fd);

/* ---- read-only file maps ------------------------------------------------------ */

/* The alignment a map's file offset needs (the page size on POSIX, the
 * allocation granularity on Windows). */
size_t plat_map_alignment(void);

/* The size of the open file fd and whether it is a regular file; false
 * (with the reason in err) when the system cannot say. */
bool plat_file_size(int fd, uint64_t *size, bool *regular, char *err, size_t err_size);

/* Maps length bytes of fd from start (a multiple of plat_map_alignment())
 * read-only into *base. private_map asks for a private map where the system
 * distinguishes (POSIX MAP_PRIVATE; the data are never written either way).
 * NCTMC_ERR_IO with the system's reason on failure. */
nctmc_status plat_map(int fd, uint64_t start, size_t length, bool private_map, void **base,
                      char *err, size_t err_size);

/* Tells the system the pages of [p, p + n) will not be read again soon
 * (advice only: nothing happens where it cannot be said). */
void plat_map_discard(void *p, size_t n);

void plat_unmap(void *base, size_t length);

/* ---- atomic replacement of a file ---------------------------------------------- */

/* A file being written: data goes to tmp_path until commit renames it over
 * path. Readers of `path` see the old file or the complete new one, never a
 * mixture, and a crash leaves at most a stray "<path>.tmp-XXXXXX", which the
 * next write to the same target removes. The writer holds a lock on its
 * temporary file until the rename (POSIX: an exclusive flock(); Windows: the
 * file is open without FILE_SHARE_DELETE, so nobody can remove it), and the
 * system drops that lock when the writer dies: how the cleanup tells a dead
 * writer's file from a live one's. */
typedef struct plat_atomic {
    int fd;             /* -1 when closed */
    char *tmp_path;     /* NULL once renamed or removed */
    char *path;         /* the file replaced: the caller's path, or the
                           target of the symbolic link it names */
    const struct nctmc_allocator *alloc;   /* of the two names (base/alloc.h) */
} plat_atomic;

/* Creates the temporary file next to the target of path: path itself when
 * absent or a regular file, the target of a symbolic link to a regular file.
 * Anything else (directory, FIFO, device, socket, dangling link) is refused
 * with NCTMC_ERR_IO. A new file gets mode 0644 (POSIX), an existing one keeps
 * its own. Then removes stale temporary files of the same target (only
 * those whose writer is gone). On failure nothing is left and af->path is
 * NULL. */
nctmc_status plat_atomic_begin(plat_atomic *af, const struct nctmc_allocator *alloc,
                               const char *path, char *err, size_t err_size);

/* Appends n bytes. */
nctmc_status plat_atomic_write(plat_atomic *af, const void *data, size_t n, char *err,
                               size_t err_size);

/* Writes n bytes at a byte offset (to fill in a header after the data). */
nctmc_status plat_atomic_write_at(plat_atomic *af, uint64_t offset, const void *data,
                                  size_t n, char *err, size_t err_size);

/* Flushes the data to disk and renames the file over path in one step (the
 * old file or the new one, never neither), then makes the rename itself
 * durable where the system needs that asked (POSIX: fsync of the
 * directory). On failure the temporary file is removed and path is
 * untouched (unless only that last step failed, which the message says).
 * Always releases af. */
nctmc_status plat_atomic_commit(plat_atomic *af, char *err, size_t err_size);

/* Removes the temporary file and releases af; does nothing after commit. */
void plat_atomic_abort(plat_atomic *af);

/* ---- modules -------------------------------------------------------------------- */

/* The file name a module called `stem` has on this system
 * ("lib<stem>.so", "lib<stem>.dll"), written into name. */
void plat_module_file_name(const char *stem, char *name, size_t size);

/* The file name of the NVIDIA driver's library (libcuda.so.1, nvcuda.dll). */
const char *plat_cuda_driver_file(void);

/* Whether this program can load modules at all (a fully static POSIX
 * program has no dynamic loader). */
bool plat_module_loader_available(void);

/* The folder of the file (shared library or program) that holds the code
 * at `code`; "" when unknown. */
void plat_module_folder(const void *code, char *dir, size_t size);

/* Whether a file (of any kind) exists at path. */
bool plat_path_exists(const char *path);

/* Loads a module by path, or by bare file name from the system's search
 * path; its symbols stay private to it, and it is never unloaded (closing
 * the handle only balances the loader's count). lazy: only whether it loads
 * matters. NULL with the loader's reason in why on failure. */
void *plat_module_open(const char *path, bool lazy, char *why, size_t why_size);

/* The address of the function `name` in module; NULL with the reason in
 * why when it has none. */
void *plat_module_symbol(void *module, const char *name, char *why, size_t why_size);

void plat_module_close(void *module);

/* plat_module_open (not lazy), with the calling thread allowed on one CPU
 * only while the module's load-time constructors run, and its affinity put
 * back after: a library that sizes a thread server by the CPUs its loader
 * may use (OpenBLAS) starts none. Where affinity cannot be narrowed, the
 * same as plat_module_open. */
void *plat_module_open_one_cpu(const char *path, char *why, size_t why_size);

#endif /* NCTMC_PLATFORM_H */
