/*
 * thread_pool.c — a small fork-join pool.
 *
 * Workers take task numbers from one atomic counter. Between jobs they spin
 * briefly on the job generation (a layer runs a dozen short operations in a
 * row, and waking a sleeping thread costs tens of microseconds), then sleep
 * on a condition variable. The spin is bounded in time, not in iterations
 * (a pause instruction costs 10 to 140 cycles depending on the processor):
 * inside a host application an idle pool must give its cores back at once.
 */
#include "thread_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spins before sleeping: long enough to cover the gap between two operations
 * of one layer, short enough not to steal a core from other work. */
#define POOL_SPIN_NS 50000
/* The clock is read once per this many pauses. */
#define POOL_SPIN_CHECK_EVERY 64

typedef struct worker_start {
    struct cpu_pool *pool;
    int index;
} worker_start;

struct cpu_pool {
    int n_threads;
    pthread_t *threads;
    /* each worker's start arguments, owned by the pool so that no worker
     * thread ever allocates or frees */
    worker_start *starts;
    const nctmc_allocator *alloc;

    pthread_mutex_t run_lock;   /* serialises callers of cpu_pool_run */

    pthread_mutex_t lock;       /* guards sleeping and waking */
    pthread_cond_t wake;
    pthread_cond_t done;

    /* the current job */
    cpu_pool_fn fn;
    void *arg;
    int64_t n_tasks;
    atomic_llong next_task;
    atomic_int busy_workers;    /* workers still inside the current job */
    atomic_uint generation;     /* bumped once per job */
    atomic_bool stopping;
};

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until done(pool, arg) or POOL_SPIN_NS have passed; true if done. */
static bool spin_until(bool (*done)(cpu_pool *, unsigned), cpu_pool *pool, unsigned arg)
{
    int64_t deadline = monotonic_ns() + POOL_SPIN_NS;
    for (int spin = 1;; spin++) {
        if (done(pool, arg))
            return true;
        if (spin % POOL_SPIN_CHECK_EVERY == 0 && monotonic_ns() >= deadline)
            return false;
        CPU_RELAX();
    }
}

static bool job_posted(cpu_pool *pool, unsigned seen)
{
    return atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
           atomic_load(&pool->stopping);
}

static bool workers_left(cpu_pool *pool, unsigned unused)
{
    (void)unused;
    return atomic_load_explicit(&pool->busy_workers, memory_order_acquire) == 0;
}

static void run_tasks(cpu_pool *pool, int worker)
{
    for (;;) {
        int64_t task = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
        if (task >= pool->n_tasks)
            break;
        pool->fn(pool->arg, task, worker);
    }
}

/* Waits until the generation differs from `seen` or the pool stops. */
static unsigned wait_for_job(cpu_pool *pool, unsigned seen)
{
    if (spin_until(job_posted, pool, seen))
        return atomic_load_explicit(&pool->generation, memory_order_acquire);
    pthread_mutex_lock(&pool->lock);
    unsigned g;
    while ((g = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stopping))
        pthread_cond_wait(&pool->wake, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    return g;
}

static void *worker_main(void *p)
{
    worker_start start = *(worker_start *)p;
    cpu_pool *pool = start.pool;
    /* not the current generation: a job may have been posted before this
     * thread got to run, and it must still take part in it */
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(pool, seen);
        if (atomic_load(&pool->stopping))
            break;
        run_tasks(pool, start.index);
        if (atomic_fetch_sub_explicit(&pool->busy_workers, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    return NULL;
}

int cpu_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}

cpu_pool *cpu_pool_create(int n_threads, const nctmc_allocator *alloc)
{
    if (n_threads < 1)
        return NULL;
    cpu_pool *pool = nctmc_mem_calloc(alloc, 1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->alloc = alloc;
    pool->n_threads = 1;
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->busy_workers, 0);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->stopping, false);
    if (n_threads > 1) {
        pool->threads = nctmc_mem_calloc(alloc, (size_t)n_threads - 1, sizeof *pool->threads);
        pool->starts = nctmc_mem_calloc(alloc, (size_t)n_threads - 1, sizeof *pool->starts);
        if (!pool->threads || !pool->starts) {
            cpu_pool_free(pool);
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_start *start = &pool->starts[i - 1];
        start->pool = pool;
        start->index = i;
        if (pthread_create(&pool->threads[i - 1], NULL, worker_main, start) != 0) {
            cpu_pool_free(pool);
            return NULL;
        }
        pool->n_threads = i + 1;
    }
    return pool;
}

void cpu_pool_free(cpu_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stopping, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n_threads; i++)
        pthread_join(pool->threads[i - 1], NULL);
    nctmc_mem_free(pool->alloc, pool->threads);
    nctmc_mem_free(pool->alloc, pool->starts);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->run_lock);
    nctmc_mem_free(pool->alloc, pool);
}

int cpu_pool_size(const cpu_pool *pool)
{
    return pool ? pool->n_threads : 0;
}

void cpu_pool_run(cpu_pool *pool, int64_t n_tasks, cpu_pool_fn fn, void *arg)
{
    if (n_tasks <= 0)
        return;
    int workers = pool->n_threads - 1;
    if (workers == 0 || n_tasks == 1) {
        pthread_mutex_lock(&pool->run_lock);
        for (int64_t k = 0; k < n_tasks; k++)
            fn(arg, k, 0);
        pthread_mutex_unlock(&pool->run_lock);
        return;
    }
    pthread_mutex_lock(&pool->run_lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->busy_workers, workers, memory_order_relaxed);
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    run_tasks(pool, 0);

    /* wait for the workers to leave the job before it is overwritten */
    if (!spin_until(workers_left, pool, 0)) {
        pthread_mutex_lock(&pool->lock);
        while (atomic_load(&pool->busy_workers) != 0)
            pthread_cond_wait(&pool->done, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->run_lock);
}
