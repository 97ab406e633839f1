/*
 * dataset_mmap.c — shards are mapped read-only instead of read into memory,
 * so a shard larger than memory trains: only the pages a batch touches are
 * resident, and the kernel may drop them again (they are clean file pages).
 */
#include <stdint.h>

#include "dataset_internal.h"
#include "platform/platform.h"

nctmc_status shard_map_file(int fd, uint64_t size, shard_map *m)
{
    m->base = NULL;
    m->size = 0;
    m->released = 0;
    if (size == 0 || size > SIZE_MAX)
        return NCTMC_ERR_IO;
    char err[256]; /* unused: the callers copy when there is no map */
    void *p = NULL;
    if (plat_map(fd, 0, (size_t)size, true, &p, err, sizeof err) != NCTMC_OK)
        return NCTMC_ERR_IO;
    m->base = p;
    m->size = (size_t)size;
    return NCTMC_OK;
}

void shard_map_release(shard_map *m, size_t upto)
{
    size_t page = plat_map_alignment();
    if (!m->base)
        return;
    size_t end = upto > m->size ? m->size : upto;
    end -= end % page;
    if (end > m->released) {
        plat_map_discard(m->base + m->released, end - m->released);
        m->released = end;
    }
}

void shard_unmap(shard_map *m)
{
    plat_unmap(m->base, m->size);
    m->base = NULL;
    m->size = 0;
}
