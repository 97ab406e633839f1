/*
 * cpu_rotary.h — the rotary file's own state: the cache of the cosines and
 * sines of the first (seq_len, head_dim, base) rotated, which cpu_rotary.c
 * builds on first use and alone reads.
 *
 * The backend holds one (cpu_backend.h), starts it empty at creation and
 * frees it at destruction through the two calls below; it never looks
 * inside, so the calls go one way, from cpu_backend.c to cpu_rotary.c.
 */
#ifndef NCTMC_CPU_ROTARY_H
#define NCTMC_CPU_ROTARY_H

#include <stdatomic.h>

struct nctmc_allocator; /* alloc.h */

typedef struct cpu_rope_table cpu_rope_table; /* cpu_rotary.c */

typedef struct cpu_rope_cache {
    _Atomic(cpu_rope_table *) table; /* NULL until built */
} cpu_rope_cache;

/* An empty cache. */
void cpu_rope_cache_init(cpu_rope_cache *cache);

/* Frees the table, if one was built, from alloc (the backend's allocator,
 * which built it) and leaves the cache empty. */
void cpu_rope_cache_free(cpu_rope_cache *cache, const struct nctmc_allocator *alloc);

#endif /* NCTMC_CPU_ROTARY_H */
