/*
 * thread_pool.h — the CPU backend's own pool of worker threads.
 *
 * A job is a number of independent tasks; task k always does the same work
 * whatever thread runs it, so results never depend on the thread count.
 * The calling thread works too: a pool of n threads starts n - 1 workers.
 */
#ifndef NCTMC_THREAD_POOL_H
#define NCTMC_THREAD_POOL_H

#include <stdint.h>

struct nctmc_allocator; /* alloc.h */

typedef struct cpu_pool cpu_pool;

/* fn(arg, task, worker): worker is in [0, n_threads) and identifies the
 * thread (for per-thread scratch), never the work to do. */
typedef void (*cpu_pool_fn)(void *arg, int64_t task, int worker);

/* Starts n_threads - 1 workers (n_threads >= 1); the pool's memory comes
 * from alloc (NULL = the C library), which must outlive it. NULL on
 * failure. */
cpu_pool *cpu_pool_create(int n_threads, const struct nctmc_allocator *alloc);

/* Stops and joins the workers. NULL is accepted. */
void cpu_pool_free(cpu_pool *pool);

int cpu_pool_size(const cpu_pool *pool);

/* Runs tasks 0 .. n_tasks - 1 and returns when all are done. Calls from
 * several threads at once are serialised. How many of the pool's threads
 * take part is the width controller's choice (pool_width.h); which thread
 * runs a task never changes what it computes. */
void cpu_pool_run(cpu_pool *pool, int64_t n_tasks, cpu_pool_fn fn, void *arg);

/* The number of cores this process may run on: its CPU affinity where the
 * system reports one, else the online cores (at least 1). */
int cpu_online_cores(void);

#endif /* NCTMC_THREAD_POOL_H */
