/*
 * cpu_blas_reserve.c — makes OpenBLAS take its GEMM buffers while a failure
 * can still be reported.
 *
 * OpenBLAS (0.3.21, Debian 12's) gives every sgemm call a large work buffer
 * (BUFFER_SIZE: 128 MiB of address space on x86-64) from a process-wide set
 * of slots, and maps a new slot's buffer the first time it is needed. When
 * that mapping fails it does not return an error: it retries forever, so an
 * address-space limit (ulimit -v, a container's memory cap with
 * overcommit off) turns the first product into a hang. Buffers are never
 * given back, so once as many products as the pool has threads have run at
 * the same moment, products at that concurrency never map again.
 *
 * So, when the CPU backend is created: first check that the address space
 * for one buffer per pool thread (and the C library's per-thread malloc
 * arena OpenBLAS falls back on) can be mapped, and fail with a clear message
 * if not; then run one product on every pool thread, all at once, so the
 * buffers exist before any real work. What remains uncovered is written in
 * include/nctmc.h (several contexts computing at once can need more buffers
 * than each one reserved).
 */
#include "cpu_blas_reserve.h"

#include "cpu_blas.h"
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "base/alloc.h"
#include "platform/platform.h"

/* Address space per pool thread: OpenBLAS's buffer plus its guard page, and
 * the 64 MiB heap glibc reserves for a thread's first malloc (OpenBLAS's
 * fallback when its own mapping fails). */
#define RESERVE_BYTES_PER_THREAD (((size_t)128 << 20) + 4096 + ((size_t)64 << 20))
/* The product each thread runs: large enough to take a buffer (OpenBLAS's
 * small-matrix path takes none) and to last while the others start. */
#define RESERVE_DIM 256
/* Rounds of products until one has all of them running at once. */
#define RESERVE_ROUNDS 4
/* How long a thread waits for the others before running its product alone
 * (a pool whose threads cannot all start must not hang the reservation). */
#define RESERVE_WAIT_NS 2000000000LL

typedef struct reserve_job {
    int n_threads;
    int dim;
    const float *a, *b;     /* dim x dim, shared and read-only */
    float *c;               /* n_threads x dim x dim, one block each */
    atomic_int arrived;
    int64_t *start_ns, *end_ns;
} reserve_job;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One pool task: wait until every thread has a task (each task then runs on
 * its own thread), then hold an OpenBLAS buffer for one product. */
static void reserve_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    reserve_job *job = arg;
    atomic_fetch_add(&job->arrived, 1);
    int64_t deadline = now_ns() + RESERVE_WAIT_NS;
    while (atomic_load(&job->arrived) < job->n_threads && now_ns() < deadline)
        sched_yield();
    int d = job->dim;
    job->start_ns[task] = now_ns();
    cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, d, d, 1.0f, job->a, d, job->b,
                d, 0.0f, job->c + (size_t)task * (size_t)d * (size_t)d, d);
    job->end_ns[task] = now_ns();
}

/* True when every product of the round ran at one common moment. */
static bool all_overlapped(const reserve_job *job)
{
    int64_t last_start = job->start_ns[0], first_end = job->end_ns[0];
    for (int i = 1; i < job->n_threads; i++) {
        if (job->start_ns[i] > last_start)
            last_start = job->start_ns[i];
        if (job->end_ns[i] < first_end)
            first_end = job->end_ns[i];
    }
    return last_start < first_end;
}

/* Can n_threads buffers (and arenas) be mapped now? Mapped with OpenBLAS's
 * own protection and flags, so the same limits apply, and never touched. */
static bool address_space_available(int n_threads)
{
    size_t bytes = (size_t)n_threads * RESERVE_BYTES_PER_THREAD;
    return plat_address_space_available(bytes);
}

bool cpu_blas_reserve(cpu_pool *pool, const nctmc_allocator *alloc, char *err, size_t err_size)
{
    int n = cpu_pool_size(pool);
    if (!address_space_available(n)) {
        snprintf(err, err_size,
                 "out of address space: OpenBLAS needs about %zu MiB per CPU thread for its "
                 "matrix-product buffers (%d threads); use fewer threads or raise the "
                 "memory limit",
                 RESERVE_BYTES_PER_THREAD >> 20, n);
        return false;
    }
    size_t block = (size_t)RESERVE_DIM * RESERVE_DIM;
    float *a = mem_calloc(alloc, block * (size_t)(n + 2), sizeof *a);
    int64_t *times = mem_calloc(alloc, 2 * (size_t)n, sizeof *times);
    if (!a || !times) {
        mem_free(alloc, a);
        mem_free(alloc, times);
        snprintf(err, err_size, "out of memory reserving OpenBLAS buffers");
        return false;
    }
    reserve_job job = {.n_threads = n, .dim = RESERVE_DIM, .a = a, .b = a + block,
                       .c = a + 2 * block, .start_ns = times, .end_ns = times + n};
    for (int round = 0; round < RESERVE_ROUNDS; round++) {
        atomic_store(&job.arrived, 0);
        cpu_pool_run(pool, n, reserve_task, &job);
        if (n == 1 || all_overlapped(&job))
            break;
    }
    mem_free(alloc, a);
    mem_free(alloc, times);
    return true;
}
