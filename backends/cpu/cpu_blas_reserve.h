/*
 * cpu_blas_reserve.h — OpenBLAS's matrix-product buffers taken at backend
 * creation, where running out of address space can be reported instead of
 * hanging (cpu_blas_reserve.c says why).
 */
#ifndef NCTMC_CPU_BLAS_RESERVE_H
#define NCTMC_CPU_BLAS_RESERVE_H

#include <stdbool.h>
#include <stddef.h>

#include "thread_pool.h"

struct nctmc_allocator;

/* Checks the address space for one OpenBLAS buffer per pool thread, then
 * runs one product on every thread at once. false (err filled) when the
 * address space or memory is short; nothing is left allocated then. */
bool cpu_blas_reserve(cpu_pool *pool, const struct nctmc_allocator *alloc, char *err,
                      size_t err_size);

#endif
