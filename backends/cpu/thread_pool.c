/*
 * thread_pool.c — a small fork-join pool built to share its cores.
 *
 * A job is published as a ticket, (generation << 32) | next task, and every
 * thread — the caller too — claims task numbers from it with a
 * compare-and-swap. The caller returns when the job's tasks are FINISHED,
 * not when every worker has checked in: a worker that the operating system
 * has not run yet (the host application holds its core, or it is still
 * waking) holds nothing, and the caller and the awake workers take all the
 * tasks between them. A late worker sees a new generation, or no task left,
 * and goes back to waiting.
 *
 * The job's description (function, argument, task count) sits beside the
 * ticket, so a late worker can read the NEXT job's description while the
 * ticket still names the finished one; with the next job's larger task
 * count it would then claim a task of the finished job. The caller
 * therefore works like a seqlock: it closes the ticket (an odd generation)
 * before it rewrites the description and opens it (the next even
 * generation) after; a worker reads the description between its load of
 * the ticket and its claim, and any rewrite it saw has closed the ticket
 * under it, so the claim fails (see read_job). The only wait left is for a
 * task a worker has started.
 *
 * Between jobs the workers spin briefly on the ticket (a layer runs a dozen
 * short operations in a row, and waking a sleeping thread costs tens of
 * microseconds), then sleep on a condition variable. The spin is bounded in
 * time, not in iterations (a pause instruction costs 10 to 140 cycles
 * depending on the processor): inside a host application an idle pool must
 * give its cores back at once.
 */
#include "thread_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "base/alloc.h"
#include "platform/platform.h"
#include "pool_width.h"

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
/* Task numbers live in the ticket's low 32 bits; a larger job runs as
 * several rounds of at most this many tasks. */
#define POOL_ROUND_TASKS ((int64_t)1 << 31)

typedef struct worker_start {
    struct cpu_pool *pool;
    int index;
} worker_start;

/* What a worker read of the current job, checked against the ticket. */
typedef struct job_view {
    uint32_t generation;
    cpu_pool_fn fn;
    void *arg;
    int64_t first, n_tasks;
    int width;              /* threads 0 .. width - 1 take part */
} job_view;

struct cpu_pool {
    int n_threads;
    pthread_t *threads;
    /* each worker's start arguments, owned by the pool so that no worker
     * thread ever allocates or frees */
    worker_start *starts;
    const nctmc_allocator *alloc;

    pthread_mutex_t run_lock;   /* serialises callers of cpu_pool_run */
    pool_width width_ctl;       /* guarded by run_lock */

    pthread_mutex_t lock;       /* guards sleeping and waking */
    pthread_cond_t wake;        /* workers: a job was posted */
    pthread_cond_t done;        /* the caller: the job's tasks are finished */

    /* The current job. The caller writes it before the ticket that
     * publishes it; a worker may read it while the caller already writes the
     * next one, but then its claim fails (the ticket moved on) and it drops
     * what it read — hence atomics, read relaxed. */
    _Atomic(cpu_pool_fn) fn;
    _Atomic(void *) arg;
    atomic_llong first_task;    /* task number of the round's task 0 */
    atomic_llong n_tasks;       /* tasks in the round */
    atomic_int width;           /* threads taking part in the round */
    _Atomic(uint64_t) ticket;   /* generation << 32 | next task to claim */
    atomic_llong finished;      /* tasks of the round finished */
    atomic_bool stopping;
};

static uint32_t ticket_generation(uint64_t ticket)
{
    return (uint32_t)(ticket >> 32);
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until done(pool, arg) or POOL_SPIN_NS have passed; true if done. */
static bool spin_until(bool (*done)(cpu_pool *, uint64_t), cpu_pool *pool, uint64_t arg)
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

/* An open job other than `seen`: an even generation that differs. */
static bool job_open(uint32_t g, uint32_t seen)
{
    return g != seen && g % 2 == 0;
}

static bool job_posted(cpu_pool *pool, uint64_t seen)
{
    uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    return job_open(ticket_generation(t), (uint32_t)seen) || atomic_load(&pool->stopping);
}

static bool round_finished(cpu_pool *pool, uint64_t n_tasks)
{
    return atomic_load_explicit(&pool->finished, memory_order_acquire) == (int64_t)n_tasks;
}

/* Reads the job of generation g as the worker sees it now; claim() tells
 * whether that was the job of generation g. The loads acquire the caller's
 * release stores of the description: a value of the next job's description
 * brings the closing of the ticket (stored before it) with it, so the claim
 * sees the closed ticket. (Fences would say the same, but ThreadSanitizer
 * does not model them.) */
static job_view read_job(cpu_pool *pool, uint32_t g)
{
    job_view v;
    v.generation = g;
    v.fn = atomic_load_explicit(&pool->fn, memory_order_acquire);
    v.arg = atomic_load_explicit(&pool->arg, memory_order_acquire);
    v.first = atomic_load_explicit(&pool->first_task, memory_order_acquire);
    v.n_tasks = atomic_load_explicit(&pool->n_tasks, memory_order_acquire);
    v.width = atomic_load_explicit(&pool->width, memory_order_acquire);
    return v;
}

/* Claims the next task of job v: its number in the round, or -1 when the
 * round has no task left or the ticket has moved past generation v (closed
 * for a rewrite, or a later job). A successful claim proves v is the job of
 * its generation (see the top of the file). */
static int64_t claim(cpu_pool *pool, const job_view *v)
{
    uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    for (;;) {
        if (ticket_generation(t) != v->generation)
            return -1;
        int64_t task = (int64_t)(t & 0xffffffffu);
        if (task >= v->n_tasks)
            return -1;
        if (atomic_compare_exchange_weak_explicit(&pool->ticket, &t, t + 1,
                                                  memory_order_acq_rel, memory_order_acquire))
            return task;
    }
}

/* Runs tasks of job v until none is left; wakes the caller after the last
 * task of the round if it is not the one finishing it. Returns the number
 * of tasks run. */
static int64_t run_tasks(cpu_pool *pool, const job_view *v, int worker)
{
    int64_t task, ran = 0;
    while ((task = claim(pool, v)) >= 0) {
        ran++;
        v->fn(v->arg, v->first + task, worker);
        int64_t done = atomic_fetch_add_explicit(&pool->finished, 1, memory_order_acq_rel) + 1;
        if (done == v->n_tasks && worker != 0) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    return ran;
}

/* Waits until a job other than `seen` is open or the pool stops; returns
 * that job's generation (`seen` when stopping). */
static uint32_t wait_for_job(cpu_pool *pool, uint32_t seen)
{
    for (;;) {
        if (!spin_until(job_posted, pool, seen)) {
            pthread_mutex_lock(&pool->lock);
            while (!job_posted(pool, seen))
                pthread_cond_wait(&pool->wake, &pool->lock);
            pthread_mutex_unlock(&pool->lock);
        }
        if (atomic_load(&pool->stopping))
            return seen;
        uint32_t g = ticket_generation(atomic_load_explicit(&pool->ticket, memory_order_acquire));
        /* closed again since: the caller is already posting the next one */
        if (job_open(g, seen))
            return g;
    }
}

static void *worker_main(void *p)
{
    worker_start start = *(worker_start *)p;
    cpu_pool *pool = start.pool;
    /* generation 0 is the pool before its first job */
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_job(pool, seen);
        if (atomic_load(&pool->stopping))
            break;
        job_view v = read_job(pool, seen);
        if (start.index < v.width)
            run_tasks(pool, &v, start.index);
    }
    return NULL;
}

/* The cores this process may run on: a process confined to fewer cores than
 * the machine has (taskset, a container's cpuset) gains nothing from threads
 * beyond them, and each extra one is a thread the others wait for. */
int cpu_online_cores(void)
{
    return plat_cpu_count();
}

cpu_pool *cpu_pool_create(int n_threads, const nctmc_allocator *alloc)
{
    if (n_threads < 1)
        return NULL;
    cpu_pool *pool = mem_calloc(alloc, 1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->alloc = alloc;
    pool->n_threads = 1;
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->fn, NULL);
    atomic_init(&pool->arg, NULL);
    atomic_init(&pool->first_task, 0);
    atomic_init(&pool->n_tasks, 0);
    atomic_init(&pool->width, n_threads);
    pool_width_init(&pool->width_ctl, n_threads);
    atomic_init(&pool->ticket, 0);
    atomic_init(&pool->finished, 0);
    atomic_init(&pool->stopping, false);
    if (n_threads > 1) {
        pool->threads = mem_calloc(alloc, (size_t)n_threads - 1, sizeof *pool->threads);
        pool->starts = mem_calloc(alloc, (size_t)n_threads - 1, sizeof *pool->starts);
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
    mem_free(pool->alloc, pool->threads);
    mem_free(pool->alloc, pool->starts);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->run_lock);
    mem_free(pool->alloc, pool);
}

int cpu_pool_size(const cpu_pool *pool)
{
    return pool ? pool->n_threads : 0;
}

/* Publishes one round of n_tasks tasks (first .. first + n_tasks - 1) for
 * the controller's number of threads, takes part in it and returns when all
 * of them are finished; reports the round to the controller. */
static void run_round(cpu_pool *pool, int64_t first, int64_t n_tasks, cpu_pool_fn fn,
                      void *arg)
{
    int width = pool->width_ctl.width;
    /* close the ticket before the description changes (see the top) */
    uint32_t g = ticket_generation(atomic_load_explicit(&pool->ticket, memory_order_relaxed));
    atomic_store_explicit(&pool->ticket, (uint64_t)(g + 1) << 32, memory_order_relaxed);
    g += 2;
    atomic_store_explicit(&pool->fn, fn, memory_order_release);
    atomic_store_explicit(&pool->arg, arg, memory_order_release);
    atomic_store_explicit(&pool->first_task, first, memory_order_release);
    atomic_store_explicit(&pool->n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&pool->width, width, memory_order_release);
    atomic_store_explicit(&pool->finished, 0, memory_order_relaxed);
    int64_t t0 = monotonic_ns();
    pthread_mutex_lock(&pool->lock);
    atomic_store_explicit(&pool->ticket, (uint64_t)g << 32, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    job_view v = {g, fn, arg, first, n_tasks, width};
    int64_t ran = run_tasks(pool, &v, 0);
    int64_t t1 = monotonic_ns();

    /* only tasks that workers have started can be left */
    if (!spin_until(round_finished, pool, (uint64_t)n_tasks)) {
        pthread_mutex_lock(&pool->lock);
        while (!round_finished(pool, (uint64_t)n_tasks))
            pthread_cond_wait(&pool->done, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
    pool_width_record(&pool->width_ctl, n_tasks, ran, t1 - t0, monotonic_ns() - t1);
}

/* One round run by the caller alone. */
static void run_solo(cpu_pool *pool, int64_t first, int64_t n_tasks, cpu_pool_fn fn, void *arg)
{
    for (int64_t k = 0; k < n_tasks; k++)
        fn(arg, first + k, 0);
    pool_width_record_solo(&pool->width_ctl);
}

void cpu_pool_run(cpu_pool *pool, int64_t n_tasks, cpu_pool_fn fn, void *arg)
{
    if (n_tasks <= 0)
        return;
    pthread_mutex_lock(&pool->run_lock);
    if (pool->n_threads == 1 || n_tasks == 1) {
        for (int64_t k = 0; k < n_tasks; k++)
            fn(arg, k, 0);
    } else {
        for (int64_t first = 0; first < n_tasks; first += POOL_ROUND_TASKS) {
            int64_t left = n_tasks - first;
            int64_t n = left < POOL_ROUND_TASKS ? left : POOL_ROUND_TASKS;
            if (pool->width_ctl.width > 1)
                run_round(pool, first, n, fn, arg);
            else
                run_solo(pool, first, n, fn, arg);
        }
    }
    pthread_mutex_unlock(&pool->run_lock);
}
