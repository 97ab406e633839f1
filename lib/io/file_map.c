/*
 * file_map.c — read-only file maps (see file_map.h) with POSIX mmap; a
 * build without <sys/mman.h> reports NCTMC_ERR_UNSUPPORTED and its callers
 * copy.
 */
#include "file_map.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define FILE_MAP_POSIX 1
#else
#define FILE_MAP_POSIX 0
#endif

bool file_map_supported(void)
{
    return FILE_MAP_POSIX;
}

#if FILE_MAP_POSIX

static nctmc_status system_fail(const char *what, int errnum, char *err, size_t err_size)
{
    char reason[128];
    if (strerror_r(errnum, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", errnum);
    return fail_format(err, err_size, NCTMC_ERR_IO, "%s: %s", what, reason);
}

nctmc_status file_map_open(int fd, uint64_t file_size, uint64_t offset, size_t size,
                           file_map *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return system_fail("cannot map the file", errno, err, err_size);
    /* the header and ranges were checked against file_size: a file that
     * has shrunk since would put mapped pages past its end */
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != file_size)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "the file changed size while it was being loaded (%llu bytes, "
                           "then %llu)",
                           (unsigned long long)file_size, (unsigned long long)sb.st_size);
    if (offset > file_size || size > file_size - offset)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "file_map_open: bytes [%llu, +%zu) lie outside the file",
                           (unsigned long long)offset, size);
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED, "no page size");
    /* mmap wants a page-aligned file offset: map from the page holding
     * `offset`, and at least one byte (a zero-length map is an error) */
    uint64_t start = offset / (uint64_t)page * (uint64_t)page;
    size_t length = (size_t)(offset - start) + (size > 0 ? size : 1);
    if (start + length > file_size)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                           "nothing to map in an empty range at the end of the file");
    void *p = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (p == MAP_FAILED)
        return system_fail("cannot map the file", errno, err, err_size);
    out->base = p;
    out->length = length;
    out->data = (const uint8_t *)p + (offset - start);
    out->offset = offset;
    out->size = size;
    return NCTMC_OK;
}

void file_map_close(file_map *map)
{
    if (map->base)
        munmap(map->base, map->length);
    memset(map, 0, sizeof *map);
}

#else /* no file maps: callers copy */

nctmc_status file_map_open(int fd, uint64_t file_size, uint64_t offset, size_t size,
                           file_map *out, char *err, size_t err_size)
{
    (void)fd;
    (void)file_size;
    (void)offset;
    (void)size;
    memset(out, 0, sizeof *out);
    return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                       "this platform has no memory-mapped files");
}

void file_map_close(file_map *map)
{
    memset(map, 0, sizeof *map);
}

#endif
