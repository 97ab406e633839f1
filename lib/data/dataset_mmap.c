/*
 * dataset_mmap.c — shards are mapped read-only instead of read into memory,
 * so a shard larger than memory trains: only the pages a batch touches are
 * resident, and the kernel may drop them again (they are clean file pages).
 */
/* madvise() is not in the POSIX base the build asks for. */
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dataset_internal.h"

nctmc_status shard_map_file(int fd, uint64_t size, shard_map *m)
{
    m->base = NULL;
    m->size = 0;
    m->released = 0;
    if (size == 0 || size > SIZE_MAX)
        return NCTMC_ERR_IO;
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return NCTMC_ERR_IO;
    m->base = p;
    m->size = (size_t)size;
    return NCTMC_OK;
}

void shard_map_release(shard_map *m, size_t upto)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!m->base || page <= 0)
        return;
    size_t end = upto > m->size ? m->size : upto;
    end -= end % (size_t)page;
    if (end > m->released) {
        /* advice only: a failure just leaves the pages resident */
        (void)madvise(m->base + m->released, end - m->released, MADV_DONTNEED);
        m->released = end;
    }
}

void shard_unmap(shard_map *m)
{
    if (m->base)
        munmap(m->base, m->size);
    m->base = NULL;
    m->size = 0;
}
