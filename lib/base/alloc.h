/*
 * alloc.h — the one route of the library's host memory: every allocation
 * made on behalf of a context goes through its allocator, the caller's hook
 * (nctmc_context_params.alloc_fn / free_fn) or the C library's.
 *
 * An allocator pointer may be NULL, and so may both hooks inside it: that
 * is the C library (malloc / aligned_alloc / free). Memory is released
 * through the same allocator that gave it.
 *
 * What each handle uses:
 *   context          the hook in its parameters (the context struct itself,
 *                    the CPU backend, its thread pool's bookkeeping)
 *   backend memory   the context's allocator via nctmc_backend.alloc (CPU
 *                    slabs, workspaces, activation arenas: 64-byte aligned)
 *   model, sampler,  the allocator of the context they compute on (their
 *   trainer, eval    structs, tensor tables, host staging, temporary
 *                    buffers of load / save)
 *   tokenizer,       a copy of the allocator of the context they were
 *   dataset          created or opened with (the C library's without one);
 *                    a clone keeps its source's, a model's copy the model's
 *
 * What does not come through here: OpenBLAS's own buffers (it maps its
 * memory itself), the stacks of the pool's threads (pthread_create), the
 * CUDA backend's handle and everything the CUDA runtime and driver
 * allocate, the C library's internal buffers (stdio, qsort).
 *
 * Alignments requested: NCTMC_MEM_ALIGN (alignof(max_align_t), 16 on
 * x86-64) for host structs and buffers, NCTMC_MEM_SLAB_ALIGN (64) for the
 * CPU backend's memory. Sizes passed to a hook are never 0.
 */
#ifndef NCTMC_ALLOC_H
#define NCTMC_ALLOC_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NCTMC_MEM_ALIGN (alignof(max_align_t))
#define NCTMC_MEM_SLAB_ALIGN 64

/* The caller's hook, as nctmc_context_params carries it; both NULL means
 * the C library. */
typedef struct nctmc_allocator {
    void *(*alloc_fn)(size_t size, size_t alignment, void *user_data);
    void (*free_fn)(void *ptr, void *user_data);
    void *user_data;
} nctmc_allocator;

/* The C library's memory when no hook is set: implemented by the platform
 * layer (lib/platform/platform.h), because Windows' C library has no
 * aligned_alloc() whose memory free() takes back. Declared here so that
 * base/ needs no include from above; no file of base/ calls them. */
void *plat_sys_alloc(size_t size, size_t alignment);
void *plat_sys_realloc(void *p, size_t size);
void plat_sys_free(void *p);

static inline int mem_is_hooked(const nctmc_allocator *a)
{
    return a && a->alloc_fn && a->free_fn;
}

/* A copy of *a (the C library's for NULL), for release functions: a handle
 * freed after it dropped the context its allocator lives in must not read
 * that context again. */
static inline nctmc_allocator mem_copy(const nctmc_allocator *a)
{
    nctmc_allocator c = {NULL, NULL, NULL};
    return a ? *a : c;
}

/* `size` bytes aligned to `alignment` (a power of two); NULL on failure.
 * Size 0 asks for 1 byte, so success is always a distinct pointer. A hook
 * that returns memory not aligned as asked counts as failing (the memory is
 * handed back). */
static inline void *mem_alloc_aligned(const nctmc_allocator *a, size_t size,
                                      size_t alignment)
{
    if (size == 0)
        size = 1;
    if (alignment < NCTMC_MEM_ALIGN)
        alignment = NCTMC_MEM_ALIGN;
    if (mem_is_hooked(a)) {
        void *p = a->alloc_fn(size, alignment, a->user_data);
        if (p && (uintptr_t)p % alignment != 0) {
            a->free_fn(p, a->user_data);
            p = NULL;
        }
        return p;
    }
    return plat_sys_alloc(size, alignment);
}

static inline void *mem_alloc(const nctmc_allocator *a, size_t size)
{
    return mem_alloc_aligned(a, size, NCTMC_MEM_ALIGN);
}

/* Zero-filled n * size bytes; NULL when out of memory or the product
 * overflows. */
static inline void *mem_calloc(const nctmc_allocator *a, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    void *p = mem_alloc(a, bytes);
    if (p && bytes > 0)
        memset(p, 0, bytes);
    return p;
}

/* NULL is accepted. */
static inline void mem_free(const nctmc_allocator *a, void *p)
{
    if (!p)
        return;
    if (mem_is_hooked(a))
        a->free_fn(p, a->user_data);
    else
        plat_sys_free(p);
}

/* Grows or shrinks a block of old_size bytes (p may be NULL with old_size
 * 0) to new_size, keeping min(old_size, new_size) bytes. On failure returns
 * NULL and p is untouched. A hook has no realloc, hence the explicit old
 * size: allocate, copy, free. */
static inline void *mem_realloc(const nctmc_allocator *a, void *p, size_t old_size,
                                size_t new_size)
{
    if (!mem_is_hooked(a))
        return plat_sys_realloc(p, new_size ? new_size : 1);
    void *q = mem_alloc(a, new_size);
    if (!q)
        return NULL;
    if (p) {
        memcpy(q, p, old_size < new_size ? old_size : new_size);
        mem_free(a, p);
    }
    return q;
}

/* A copy of a NUL-terminated string, or NULL. */
static inline char *mem_strdup(const nctmc_allocator *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = (char *)mem_alloc(a, n);
    if (c)
        memcpy(c, s, n);
    return c;
}

/* The memory a handle will take, added up by the same code that allocates
 * it (nctmc_sampler_memory(), nctmc_trainer_memory()): host bytes as
 * mem_alloc is asked for them (0 counts as 1), backend bytes as the CPU
 * backend allocates them (each request rounded up to NCTMC_MEM_SLAB_ALIGN,
 * 0 as one granule). overflow: some size did not fit a size_t. */
typedef struct mem_need {
    size_t backend_bytes;
    size_t host_bytes;
    int overflow;
} mem_need;

static inline void mem_need_add(size_t *total, int *overflow, size_t n, size_t elem,
                                size_t granule)
{
    if (elem != 0 && n > SIZE_MAX / elem) {
        *overflow = 1;
        return;
    }
    size_t bytes = n * elem;
    if (bytes == 0)
        bytes = 1;
    size_t rounded = (bytes + granule - 1) / granule * granule;
    if (rounded < bytes || *total > SIZE_MAX - rounded)
        *overflow = 1;
    else
        *total += rounded;
}

/* Counts n * elem host bytes. */
static inline void mem_need_host(mem_need *need, size_t n, size_t elem)
{
    mem_need_add(&need->host_bytes, &need->overflow, n, elem, 1);
}

/* Counts n * elem backend bytes. */
static inline void mem_need_backend(mem_need *need, size_t n, size_t elem)
{
    mem_need_add(&need->backend_bytes, &need->overflow, n, elem, NCTMC_MEM_SLAB_ALIGN);
}

#endif /* NCTMC_ALLOC_H */
