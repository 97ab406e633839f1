/*
 * file_map.c — read-only file maps (see file_map.h) over the platform
 * layer's maps (platform/platform.h): mmap on POSIX, a file-mapping view
 * on Windows.
 */
#include "file_map.h"

#include <string.h>

#include "core/context.h"
#include "platform/platform.h"

bool file_map_supported(void)
{
    return true;
}

nctmc_status file_map_open(int fd, uint64_t file_size, uint64_t offset, size_t size,
                           file_map *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    uint64_t now = 0;
    bool regular = false;
    if (!plat_file_size(fd, &now, &regular, err, err_size))
        return NCTMC_ERR_IO;
    /* the header and ranges were checked against file_size: a file that
     * has shrunk since would put mapped pages past its end */
    if (!regular || now != file_size)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "the file changed size while it was being loaded (%llu bytes, "
                           "then %llu)",
                           (unsigned long long)file_size, (unsigned long long)now);
    if (offset > file_size || size > file_size - offset)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "file_map_open: bytes [%llu, +%zu) lie outside the file",
                           (unsigned long long)offset, size);
    uint64_t align = plat_map_alignment();
    /* maps want an aligned file offset: map from the page holding
     * `offset`, and at least one byte (a zero-length map is an error) */
    uint64_t start = offset / align * align;
    size_t length = (size_t)(offset - start) + (size > 0 ? size : 1);
    if (start + length > file_size)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                           "nothing to map in an empty range at the end of the file");
    void *p = NULL;
    nctmc_status st = plat_map(fd, start, length, false, &p, err, err_size);
    if (st != NCTMC_OK)
        return st;
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
        plat_unmap(map->base, map->length);
    memset(map, 0, sizeof *map);
}
