/*
 * file_map.h — a read-only memory map of part of a file (docs/formats.md,
 * "Memory-mapped loading"): the one place that knows how the platform maps
 * files, so that the rest of the library sees a pointer and a length. Where
 * the platform cannot map files, file_map_open() says so with
 * NCTMC_ERR_UNSUPPORTED and the caller copies the data instead.
 *
 * A map shares the page cache with every other process that maps or reads
 * the same file: pages are read from disk when first touched and count
 * towards a process's resident memory only once it touches them. The map
 * stays valid after the file is renamed over or unlinked (it holds the
 * file itself, not its name); a file truncated while mapped makes the pages
 * past its new end unreadable (SIGBUS on Linux), which the caller cannot
 * catch — the price every mmap-ing loader pays.
 */
#ifndef NCTMC_FILE_MAP_H
#define NCTMC_FILE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

/* A live map, or all zero (base NULL) for none. Plain data: the owner
 * embeds it and calls file_map_close() once. */
typedef struct file_map {
    void *base;         /* the start of the mapped pages */
    size_t length;      /* their length in bytes */
    const uint8_t *data;/* file byte `offset`, inside [base, base + length) */
    uint64_t offset;    /* the file offset the caller asked for */
    size_t size;        /* bytes from data the caller asked for */
} file_map;

/* Whether this build maps files at all. */
bool file_map_supported(void);

/*
 * Maps `size` bytes of the open file fd starting at file byte `offset`,
 * read-only, after checking that fd is still a regular file of exactly
 * file_size bytes (the size its header was checked against: a file that
 * changed size since is NCTMC_ERR_FORMAT). NCTMC_ERR_UNSUPPORTED when the
 * platform has no file maps, NCTMC_ERR_IO when the system refuses this one
 * (the reason in err). fd may be closed afterwards; the map stays.
 */
nctmc_status file_map_open(int fd, uint64_t file_size, uint64_t offset, size_t size,
                           file_map *out, char *err, size_t err_size);

/* Unmaps; all-zero maps are ignored. Leaves *map all zero. */
void file_map_close(file_map *map);

#endif /* NCTMC_FILE_MAP_H */
