/*
 * test_thread_pool.c — the CPU backend's worker pool: every task runs exactly
 * once for any pool size, callers on several threads are serialised, an
 * idle pool sleeps instead of spinning (a host application gets its cores
 * back between calls), a stalled thread's share of a job is taken over by
 * the others, late workers never run a task with another job's arguments,
 * and a pool whose workers keep stalling stops waiting for them.
 */
#include "cpu/pool_width.h"
#include "test_util.h"
#include "cpu/thread_pool.h"

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

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The job of the stalled-thread test: whichever thread takes task 0 sleeps
 * (as if the operating system had descheduled it), every task writes a
 * value that depends on its number only. */
typedef struct stall_job {
    int64_t n;
    double *out;
    atomic_int task0_worker;
    atomic_int tasks_by[64];
} stall_job;

static void stall_task(void *arg, int64_t task, int worker)
{
    stall_job *job = arg;
    if (task == 0) {
        atomic_store(&job->task0_worker, worker);
        sleep_ms(200);
    }
    atomic_fetch_add(&job->tasks_by[worker], 1);
    double v = 0.0;
    for (int64_t k = 1; k <= 50; k++)
        v += 1.0 / (double)(task * 50 + k);
    job->out[task] = v;
}

/* A thread stalled inside task 0 for 200 ms holds only that task: the other
 * 255 (microseconds of work) are run by the other threads meanwhile, and
 * the output is the single-thread output. */
static void test_stalled_thread_share_taken_over(void)
{
    enum { N = 256 };
    static double want[N], got[N];
    static const int pools[] = {2, 3, 8};
    static stall_job job;
    memset(&job, 0, sizeof job);
    job.n = N;
    job.out = want;
    cpu_pool *solo = cpu_pool_create(1, NULL);
    cpu_pool_run(solo, N, stall_task, &job);
    cpu_pool_free(solo);
    for (size_t p = 0; p < sizeof pools / sizeof pools[0]; p++) {
        cpu_pool *pool = cpu_pool_create(pools[p], NULL);
        memset(&job, 0, sizeof job);
        job.n = N;
        job.out = got;
        cpu_pool_run(pool, N, stall_task, &job);
        int stalled = atomic_load(&job.task0_worker);
        CHECK(memcmp(want, got, sizeof want) == 0, "%d threads, one stalled: the bits of one "
              "thread", pools[p]);
        CHECK(atomic_load(&job.tasks_by[stalled]) == 1,
              "%d threads: the thread stalled in task 0 ran %d task(s), the others the "
              "other %d", pools[p], atomic_load(&job.tasks_by[stalled]), N - 1);
        cpu_pool_free(pool);
    }
}

/* Jobs back to back, each with its own arguments and task count, on more
 * threads than cores: workers keep arriving after their job is finished and
 * the next one posted. Each task of job j must run once, with job j's
 * arguments. */
typedef struct tagged_job {
    int id;
    int64_t n;
    atomic_int *runs;   /* [n] */
    atomic_int *wrong;
} tagged_job;

static void tagged_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    tagged_job *job = arg;
    if (task < 0 || task >= job->n)
        atomic_fetch_add(job->wrong, 1);
    else
        atomic_fetch_add(&job->runs[task], 1);
}

static void test_late_workers(void)
{
    enum { JOBS = 3000, MAX_N = 40 };
    static atomic_int runs[JOBS][MAX_N];
    static tagged_job jobs[JOBS];
    atomic_int wrong;
    atomic_init(&wrong, 0);
    memset(runs, 0, sizeof runs);
    cpu_pool *pool = cpu_pool_create(8, NULL);
    for (int j = 0; j < JOBS; j++) {
        jobs[j] = (tagged_job){j, 2 + j % (MAX_N - 1), runs[j], &wrong};
        cpu_pool_run(pool, jobs[j].n, tagged_task, &jobs[j]);
    }
    cpu_pool_free(pool);
    int64_t bad = 0;
    for (int j = 0; j < JOBS; j++)
        for (int64_t k = 0; k < MAX_N; k++)
            bad += atomic_load(&runs[j][k]) != (k < jobs[j].n ? 1 : 0);
    CHECK(bad == 0 && atomic_load(&wrong) == 0,
          "%d jobs back to back on 8 threads: every task of every job once, with its own "
          "arguments (%lld wrong counts, %d out of range)", JOBS, (long long)bad,
          atomic_load(&wrong));
}

/* Workers that stall in every task they take (5 ms, a descheduled thread)
 * while the caller's tasks take no time: the pool must soon run its jobs on
 * the caller alone, trying the workers again only now and then. */
typedef struct width_job {
    atomic_int worker_tasks;
} width_job;

static void slow_worker_task(void *arg, int64_t task, int worker)
{
    (void)task;
    width_job *job = arg;
    if (worker != 0) {
        atomic_fetch_add(&job->worker_tasks, 1);
        sleep_ms(5);
    }
}

static void test_stalling_workers_dropped(void)
{
    static width_job job;
    atomic_init(&job.worker_tasks, 0);
    cpu_pool *pool = cpu_pool_create(2, NULL);
    for (int j = 0; j < 100; j++)
        cpu_pool_run(pool, 8, slow_worker_task, &job);
    int early = atomic_load(&job.worker_tasks);
    atomic_store(&job.worker_tasks, 0);
    for (int j = 0; j < 400; j++)
        cpu_pool_run(pool, 8, slow_worker_task, &job);
    int late = atomic_load(&job.worker_tasks);
    /* 400 jobs of 8 tasks: a pool that kept waiting would let the worker
     * take a task in nearly every one of them */
    CHECK(late <= 40, "stalling worker: it ran %d task(s) in the first 100 jobs and %d in the "
          "next 400 (at most 40: the pool runs alone and only tries it now and then)", early,
          late);
    cpu_pool_free(pool);
}

/* Workers that keep pace: the team stays (a few stray decisions on a busy
 * machine aside, the worker runs a fair share of 300 jobs). */
static void even_task(void *arg, int64_t task, int worker)
{
    (void)task;
    width_job *job = arg;
    if (worker != 0)
        atomic_fetch_add(&job->worker_tasks, 1);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
}

static void test_working_team_kept(void)
{
    static width_job job;
    atomic_init(&job.worker_tasks, 0);
    cpu_pool *pool = cpu_pool_create(2, NULL);
    for (int j = 0; j < 300; j++)
        cpu_pool_run(pool, 32, even_task, &job);
    int ran = atomic_load(&job.worker_tasks);
    CHECK(ran >= 300, "a worker that keeps pace ran %d of 9600 tasks (at least 300)", ran);
    cpu_pool_free(pool);
}

/* The controller alone, on made-up measurements. */
static void test_width_controller(void)
{
    pool_width w;
    pool_width_init(&w, 8);
    CHECK(w.width == 8, "the controller starts with every thread");
    /* the others ran 7 tasks of 1 ms for the caller's one and the caller
     * waited 0.1 ms: a gain, the width stays */
    for (int j = 0; j < 10 * POOL_WIDTH_WINDOW; j++)
        pool_width_record(&w, 8, 1, 1000000, 100000);
    CHECK(w.width == 8, "gaining jobs keep the width (%d)", w.width);
    /* the caller ran 7 of 8 tasks of 1 ms and then waited 3 ms */
    for (int j = 0; j < POOL_WIDTH_WINDOW; j++)
        pool_width_record(&w, 8, 7, 7000000, 3000000);
    CHECK(w.width == 4, "one losing window halves the width (%d)", w.width);
    for (int j = 0; j < 2 * POOL_WIDTH_WINDOW; j++)
        pool_width_record(&w, 8, 7, 7000000, 3000000);
    CHECK(w.width == 1, "more losing windows go down to one thread (%d)", w.width);
    int64_t jobs = 0;
    while (w.width == 1 && jobs < 100000) {
        pool_width_record_solo(&w);
        jobs++;
    }
    CHECK(w.width == 2 && jobs >= POOL_WIDTH_MIN_HOLD,
          "alone, the controller tries two threads after %lld jobs", (long long)jobs);
    for (int j = 0; j < POOL_WIDTH_WINDOW; j++)
        pool_width_record(&w, 8, 7, 7000000, 3000000);
    int64_t again = 0;
    while (w.width == 1 && again < 100000) {
        pool_width_record_solo(&w);
        again++;
    }
    CHECK(again > jobs, "a failed try doubles the next hold (%lld jobs after %lld)",
          (long long)again, (long long)jobs);
    for (int j = 0; j < 1000000 && w.width < 8; j++) {
        if (w.width == 1)
            pool_width_record_solo(&w);
        else
            pool_width_record(&w, 8, 1, 1000000, 0);
    }
    CHECK(w.width == 8, "when the others gain again the width climbs back to 8 (%d)", w.width);
    pool_width_init(&w, 1);
    CHECK(w.width == 1, "a pool of one thread has width 1");
}

int main(void)
{
    test_every_task_once();
    test_concurrent_callers();
    test_idle_pool_sleeps();
    test_stalled_thread_share_taken_over();
    test_late_workers();
    test_stalling_workers_dropped();
    test_working_team_kept();
    test_width_controller();
    return test_finish("thread_pool");
}
