/*
 * cpu_parallel.h — the work splits every kernel file of backends/cpu/
 * shares: rows cut into fixed blocks, and n items cut into fixed chunks run
 * as one job on the pool.
 *
 * The splits are functions of the sizes alone, never of the thread count,
 * so a kernel built on them computes the same bits on any pool. Below the
 * kernel files: cpu_parallel.c calls the pool (thread_pool.c) and nothing
 * else of this folder.
 */
#ifndef NCTMC_CPU_PARALLEL_H
#define NCTMC_CPU_PARALLEL_H

#include <stdint.h>

#include "thread_pool.h"

/* Rows per task for row-wise kernels: fixed, so the split of the work never
 * depends on the thread count. */
#define CPU_ROWS_PER_TASK 16

/* The rows [*r0, *r1) of task `task` when n_rows rows are cut into tasks of
 * CPU_ROWS_PER_TASK (the pieces cpu_parallel_chunks hands out). */
static inline void cpu_task_rows(int64_t task, int64_t n_rows, int64_t *r0, int64_t *r1)
{
    *r0 = task * CPU_ROWS_PER_TASK;
    *r1 = *r0 + CPU_ROWS_PER_TASK < n_rows ? *r0 + CPU_ROWS_PER_TASK : n_rows;
}

/* Runs fn on the pool over ceil(n / chunk) tasks; nothing when n <= 0. */
void cpu_parallel_chunks(cpu_pool *pool, int64_t n, int64_t chunk, cpu_pool_fn fn, void *arg);

#endif /* NCTMC_CPU_PARALLEL_H */
