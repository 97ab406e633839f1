/*
 * file_io.h — the file operations every format shares: atomic replacement
 * of a file (temporary file in the same directory, fsync, rename, fsync of
 * the directory) and bounded reading. Messages carry the system's reason.
 */
#ifndef NCTMC_FILE_IO_H
#define NCTMC_FILE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"
#include "platform/platform.h"

struct nctmc_allocator; /* alloc.h */

/* A file being written (platform/platform.h says how: data goes to a
 * temporary file next to the target until commit renames it over path;
 * readers see the old file or the complete new one). */
typedef plat_atomic file_atomic;

/* Creates the temporary file next to the target of path: path itself when
 * absent or a regular file, the target of a symbolic link to a regular file.
 * Anything else (directory, FIFO, device, socket, dangling link) is refused
 * with NCTMC_ERR_IO. Then removes stale temporary files of the same target
 * (platform/platform_posix.c says which are safe to remove). The names af keeps come from
 * alloc (NULL = the C library). On failure nothing is left and af->path is
 * NULL. */
nctmc_status file_atomic_begin(file_atomic *af, const struct nctmc_allocator *alloc,
                               const char *path, char *err, size_t err_size);

/* Appends n bytes. */
nctmc_status file_atomic_write(file_atomic *af, const void *data, size_t n, char *err,
                               size_t err_size);

/* Writes n bytes at a byte offset (to fill in a header after the data). */
nctmc_status file_atomic_write_at(file_atomic *af, uint64_t offset, const void *data,
                                  size_t n, char *err, size_t err_size);

/* Flushes the data to disk and renames the file over path. On failure the
 * temporary file is removed and path is untouched (unless only the final
 * directory fsync failed, which the message says). Always releases af. */
nctmc_status file_atomic_commit(file_atomic *af, char *err, size_t err_size);

/* Removes the temporary file and releases af; does nothing after commit. */
void file_atomic_abort(file_atomic *af);

/* Opens a regular file for reading and reports its size. Anything else is
 * NCTMC_ERR_IO, found without blocking (a FIFO is opened non-blocking, seen
 * to be one and refused). */
nctmc_status file_open_read(const char *path, int *fd, uint64_t *size, char *err,
                            size_t err_size);

/* Reads exactly n bytes at offset; a file that ends early is
 * NCTMC_ERR_FORMAT (it was truncated), a read error NCTMC_ERR_IO. */
nctmc_status file_pread(int fd, uint64_t offset, void *buf, size_t n, const char *path,
                        char *err, size_t err_size);

/* Closes a descriptor from file_open_read(). */
void file_close(int fd);

/* Reads a whole regular file of at most max_bytes (larger ones are
 * NCTMC_ERR_FORMAT) into a buffer from alloc (alloc.h; NULL = the C
 * library) with one NUL byte after the data, so text parsers may rely on a
 * terminator. */
nctmc_status file_read_all(const struct nctmc_allocator *alloc, const char *path,
                           size_t max_bytes, uint8_t **data, size_t *size, char *err,
                           size_t err_size);

#endif /* NCTMC_FILE_IO_H */
