/*
 * test_thread_pool.c — the CPU backend's worker pool: every task runs exactly
 * once for any pool size, callers on several threads are serialised, and an
 * idle pool sleeps instead of spinning (a host application gets its cores
 * back between calls).
 */
#include "test_util.h"
#include "thread_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define MAX_TASKS 4096

typedef struct count_job {
    atomic_int runs[MAX_TASKS];
    atomic_int bad_worker;
    int n_threads;
} count_job;

static void count_task(void *arg, int64_t task, int worker)
{
    count_job *job = arg;
    atomic_fetch_add(&job->runs[task], 1);
    if (worker < 0 || worker >= job->n_threads)
        atomic_store(&job->bad_worker, 1);
}

static int64_t runs_not_once(count_job *job, int64_t n_tasks)
{
    int64_t bad = 0;
    for (int64_t k = 0; k < n_tasks; k++)
        bad += atomic_load(&job->runs[k]) != 1;
    return bad;
}

static void test_every_task_once(void)
{
    static const int pools[] = {1, 2, 3, 8, 32};
    static const int64_t task_counts[] = {1, 2, 7, 64, 1000, MAX_TASKS};
    static count_job job;
    for (size_t p = 0; p < sizeof pools / sizeof pools[0]; p++) {
        cpu_pool *pool = cpu_pool_create(pools[p], NULL);
        CHECK(pool && cpu_pool_size(pool) == pools[p], "pool of %d threads", pools[p]);
        if (!pool)
            continue;
        for (size_t t = 0; t < sizeof task_counts / sizeof task_counts[0]; t++) {
            memset(&job, 0, sizeof job);
            job.n_threads = pools[p];
            cpu_pool_run(pool, task_counts[t], count_task, &job);
            CHECK(runs_not_once(&job, task_counts[t]) == 0 && !atomic_load(&job.bad_worker),
                  "%d threads, %lld tasks: every task once, worker ids in range", pools[p],
                  (long long)task_counts[t]);
        }
        cpu_pool_free(pool);
    }
    CHECK(cpu_pool_create(0, NULL) == NULL, "a pool of 0 threads is refused");
}

typedef struct caller_arg {
    cpu_pool *pool;
    count_job *job;
    int repeats;
} caller_arg;

static void *caller_main(void *p)
{
    caller_arg *a = p;
    for (int r = 0; r < a->repeats; r++)
        cpu_pool_run(a->pool, 100, count_task, a->job);
    return NULL;
}

/* Two threads share one pool: their jobs must not mix. */
static void test_concurrent_callers(void)
{
    static count_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    cpu_pool *pool = cpu_pool_create(3, NULL);
    jobs[0].n_threads = jobs[1].n_threads = 3;
    caller_arg args[2] = {{pool, &jobs[0], 50}, {pool, &jobs[1], 50}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, caller_main, &args[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    int64_t wrong = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 100; k++)
            wrong += atomic_load(&jobs[i].runs[k]) != 50;
    CHECK(wrong == 0, "two callers: each of their tasks ran 50 times (%lld wrong)",
          (long long)wrong);
    cpu_pool_free(pool);
}

static double process_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a job, 8 workers left alone for 300 ms must use next to no CPU: a
 * pool that kept spinning would burn up to 8 x 300 ms. The bound (30 ms) is
 * generous for wake-ups and busy machines, and two orders of magnitude below
 * what spinning costs. */
static void test_idle_pool_sleeps(void)
{
    static count_job job;
    memset(&job, 0, sizeof job);
    job.n_threads = 9;
    cpu_pool *pool = cpu_pool_create(9, NULL);
    cpu_pool_run(pool, 64, count_task, &job);
    struct timespec settle = {0, 5 * 1000 * 1000};
    nanosleep(&settle, NULL); /* past the bounded spin */
    double before = process_cpu_seconds();
    struct timespec idle = {0, 300 * 1000 * 1000};
    nanosleep(&idle, NULL);
    double used = process_cpu_seconds() - before;
    CHECK(used < 0.030, "an idle pool of 9 threads used %.1f ms of CPU in 300 ms", used * 1e3);
    cpu_pool_free(pool);
}

int main(void)
{
    test_every_task_once();
    test_concurrent_callers();
    test_idle_pool_sleeps();
    return test_finish("thread_pool");
}
