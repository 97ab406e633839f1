/*
 * cpu_parallel.c — chunked jobs on the pool (cpu_parallel.h), shared by the
 * kernel files of backends/cpu/. Calls the pool only.
 */
#include "cpu_parallel.h"

void cpu_parallel_chunks(cpu_pool *pool, int64_t n, int64_t chunk, cpu_pool_fn fn, void *arg)
{
    if (n <= 0)
        return;
    cpu_pool_run(pool, (n + chunk - 1) / chunk, fn, arg);
}
