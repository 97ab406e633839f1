/*
 * bench_allreduce.c — the gradient sum over MPI ranks (issue 35), run by
 * bench/distributed.sh under mpirun; a benchmark, not a test.
 *
 * 1. Bandwidth: libnctmc's fixed-order sum (comm_sum: reduce-scatter,
 *    adding in rank order, all-gather; lib/comm/comm.h) beside Open MPI's
 *    own MPI_Allreduce(MPI_SUM) on the same float buffers, 64 KiB to
 *    16 MiB: the median time and the algorithm bandwidth (bytes / time).
 * 2. Overlap: a buffer of --overlap-bytes (the bench model's gradient slab,
 *    2 MiB) in --buckets buckets, each "finished" by a slice of computation
 *    (a fixed floating-point loop standing in for a block's backward pass;
 *    all slices together take --compute times the blocking sum), then:
 *      after  : compute everything, then one blocking sum (no overlap);
 *      test   : start each bucket's sum as its slice ends (sum_start),
 *               MPI_Test at each slice boundary (sum_progress), wait at the
 *               end — what the trainer does;
 *      thread : a second thread runs each bucket's blocking sum as its
 *               slice ends, while the main thread computes on
 *               (MPI_THREAD_SERIALIZED).
 *    "hidden" = (compute + sum - time) / sum: the share of the sum's time
 *    that computation covered (1 = all; the last bucket can never be).
 *    Each time is the 10th percentile of the repetitions (each the slowest
 *    rank's), the runs that other load disturbed least; the bandwidths are
 *    medians.
 *
 *   mpirun -n 2 bench_allreduce [--reps R] [--overlap-bytes B] [--buckets K]
 *                               [--compute X]
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median (q = 0.5) or another quantile of t[0..n) over the ranks'
 * maxima (each repetition takes its slowest rank's time). */
static double quantile_max(double *t, int n, double q)
{
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[(int)(q * (n - 1) + 0.5)];
}

static double median_max(double *t, int n)
{
    return quantile_max(t, n, 0.5);
}

static void fill(float *x, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 7 + (size_t)rank * 13) % 101) * 0.01f;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_allreduce: %s: %s\n", what, why);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- 1. bandwidth -------------------------------------------------------- */

static void bandwidth(nctmc_comm *c, int reps, int rank)
{
    static const size_t sizes[] = {64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20};
    float *buf = malloc(sizes[4]);
    double *t = malloc(sizeof(double) * (size_t)reps);
    char err[NCTMC_ERROR_SIZE];
    if (!buf || !t)
        die("bandwidth", "out of memory");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s] / sizeof(float);
        double med[2];
        for (int which = 0; which < 2; which++) {
            for (int r = -1; r < reps; r++) { /* r = -1: a warm-up */
                fill(buf, n, rank);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now();
                if (which == 0) {
                    if (comm_sum(c, buf, (int64_t)n, COMM_FLOAT, err, sizeof err) != NCTMC_OK)
                        die("comm_sum", err);
                } else {
                    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
                }
                if (r >= 0)
                    t[r] = now() - t0;
            }
            med[which] = median_max(t, reps);
        }
        if (rank == 0)
            printf("allreduce %6zu KiB: fixed-order sum %7.3f ms %6.2f GB/s, "
                   "MPI_Allreduce %7.3f ms %6.2f GB/s, fixed-order / MPI %.2fx\n",
                   sizes[s] >> 10, 1e3 * med[0], (double)sizes[s] / med[0] * 1e-9,
                   1e3 * med[1], (double)sizes[s] / med[1] * 1e-9, med[1] / med[0]);
    }
    free(buf);
    free(t);
}

/* ---- 2. overlap ---------------------------------------------------------- */

static float work_sink; /* keeps the loop's result alive (one thread) */

/* A fixed amount of floating-point work: `iters` passes over 16 KiB. */
static void compute(long iters)
{
    enum { N = 4096 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 1e-4f;
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < N; i++)
            x[i] = x[i] * 0.9999f + 1e-4f;
    work_sink += x[N / 2];
}

/* The communication thread of the `thread` mode: sums bucket after bucket
 * as the main thread posts them. */
typedef struct helper {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    nctmc_comm *c;
    float *buf;
    size_t *lo;      /* [buckets + 1]: bucket k is [lo[k + 1], lo[k]) */
    int posted, done, quit;
    char err[NCTMC_ERROR_SIZE];
} helper;

static void *helper_main(void *arg)
{
    helper *h = arg;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->done == h->posted && !h->quit)
            pthread_cond_wait(&h->cond, &h->lock);
        if (h->done == h->posted && h->quit)
            break;
        int k = h->done;
        pthread_mutex_unlock(&h->lock);
        /* buckets are posted from the slab's end, as the trainer does */
        if (comm_sum(h->c, h->buf + h->lo[k + 1], (int64_t)(h->lo[k] - h->lo[k + 1]),
                     COMM_FLOAT, h->err, sizeof h->err) != NCTMC_OK)
            die("comm_sum (thread)", h->err);
        pthread_mutex_lock(&h->lock);
        h->done++;
        pthread_cond_broadcast(&h->cond);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

enum { MODE_COMPUTE, MODE_SUM, MODE_AFTER, MODE_TEST, MODE_THREAD, N_MODES };
static const char *const mode_names[] = {"compute", "sum", "after", "test", "thread"};

/* One run of `mode`: the time it took on this rank. */
static double run_mode(int mode, nctmc_comm *c, helper *h, float *buf, size_t n,
                       const size_t *lo, int buckets, long slice)
{
    char err[NCTMC_ERROR_SIZE];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int k = 0; k < buckets && mode != MODE_SUM; k++) {
        compute(slice);
        if (mode == MODE_TEST) {
            if (comm_sum_start(c, buf + lo[k + 1], (int64_t)(lo[k] - lo[k + 1]), COMM_FLOAT,
                               err, sizeof err) != NCTMC_OK ||
                comm_sum_progress(c, err, sizeof err) != NCTMC_OK)
                die("comm_sum_start", err);
        } else if (mode == MODE_THREAD) {
            pthread_mutex_lock(&h->lock);
            h->posted++;
            pthread_cond_broadcast(&h->cond);
            pthread_mutex_unlock(&h->lock);
        }
    }
    if (mode == MODE_SUM || mode == MODE_AFTER) {
        if (comm_sum(c, buf, (int64_t)n, COMM_FLOAT, err, sizeof err) != NCTMC_OK)
            die("comm_sum", err);
    } else if (mode == MODE_TEST) {
        if (comm_sum_wait(c, err, sizeof err) != NCTMC_OK)
            die("comm_sum_wait", err);
    } else if (mode == MODE_THREAD) {
        pthread_mutex_lock(&h->lock);
        while (h->done < h->posted)
            pthread_cond_wait(&h->cond, &h->lock);
        h->posted = h->done = 0;
        pthread_mutex_unlock(&h->lock);
    }
    return now() - t0;
}

/* Passes of compute() that take `seconds` (rank 0's, for every rank; the
 * fastest of five tries, so that a busy machine's pauses do not count). */
static long calibrate(double seconds)
{
    long iters = 64;
    double t0 = now();
    compute(iters);
    while (now() - t0 < 0.01) {
        iters *= 2;
        t0 = now();
        compute(iters);
    }
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        t0 = now();
        compute(iters);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    long per = (long)((double)iters * seconds / best);
    if (per < 1)
        per = 1;
    MPI_Bcast(&per, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return per;
}

static void overlap(nctmc_comm *c, int reps, int rank, size_t bytes, int buckets,
                    double compute_ratio, int thread_ok)
{
    size_t n = bytes / sizeof(float);
    float *buf = malloc(n * sizeof(float));
    size_t *lo = malloc(sizeof(size_t) * (size_t)(buckets + 1));
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!buf || !lo || !t)
        die("overlap", "out of memory");
    /* bucket k is [lo[k + 1], lo[k]): the k-th part from the slab's end */
    for (int k = 0; k <= buckets; k++)
        lo[k] = n - n * (size_t)k / (size_t)buckets;
    /* the sum's own time sets the computation's */
    for (int r = 0; r < reps; r++)
        t[r] = run_mode(MODE_SUM, c, NULL, buf, n, lo, buckets, 0);
    double sum_time = quantile_max(t, reps, 0.1);
    long slice = calibrate(compute_ratio * sum_time / buckets);
    helper h = {.c = c, .buf = buf, .lo = lo};
    pthread_t thread;
    pthread_mutex_init(&h.lock, NULL);
    pthread_cond_init(&h.cond, NULL);
    if (thread_ok && pthread_create(&thread, NULL, helper_main, &h) != 0)
        die("overlap", "pthread_create failed");
    double med[N_MODES];
    for (int m = 0; m < N_MODES; m++) {
        if (m == MODE_THREAD && !thread_ok)
            continue;
        for (int r = 0; r < reps; r++) {
            fill(buf, n, rank);
            t[r] = run_mode(m, c, &h, buf, n, lo, buckets, slice);
        }
        /* the fastest tenth: the runs a busy machine disturbed least */
        med[m] = quantile_max(t, reps, 0.1);
    }
    if (thread_ok) {
        pthread_mutex_lock(&h.lock);
        h.quit = 1;
        pthread_cond_broadcast(&h.cond);
        pthread_mutex_unlock(&h.lock);
        pthread_join(thread, NULL);
    }
    if (rank == 0) {
        printf("overlap: %zu KiB in %d buckets, computation %.1fx the sum: compute %.3f ms, "
               "sum %.3f ms\n",
               bytes >> 10, buckets, compute_ratio, 1e3 * med[MODE_COMPUTE],
               1e3 * med[MODE_SUM]);
        for (int m = MODE_AFTER; m < N_MODES; m++) {
            if (m == MODE_THREAD && !thread_ok) {
                printf("overlap %-6s: not run (MPI gave less than MPI_THREAD_SERIALIZED)\n",
                       mode_names[m]);
                continue;
            }
            double hidden = (med[MODE_COMPUTE] + med[MODE_SUM] - med[m]) / med[MODE_SUM];
            printf("overlap %-6s: %.3f ms, sum hidden %3.0f%% (at most %.0f%%: the last "
                   "bucket is not)\n",
                   mode_names[m], 1e3 * med[m], 100.0 * hidden,
                   m == MODE_AFTER ? 0.0 : 100.0 * (buckets - 1) / buckets);
        }
    }
    pthread_cond_destroy(&h.cond);
    pthread_mutex_destroy(&h.lock);
    free(buf);
    free(lo);
    free(t);
}

int main(int argc, char **argv)
{
    int reps = 21, buckets = 4;
    size_t bytes = 2u << 20;
    double ratio = 2.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--overlap-bytes") == 0)
            bytes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--buckets") == 0)
            buckets = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--compute") == 0)
            ratio = atof(argv[i + 1]);
    }
    if (reps < 1 || buckets < 1 || buckets > 32 || bytes < 4096 || ratio <= 0.0) {
        fprintf(stderr, "bench_allreduce: bad arguments\n");
        return 2;
    }
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    nctmc_comm *c = NULL;
    char err[NCTMC_ERROR_SIZE];
    MPI_Comm world = MPI_COMM_WORLD;
    if (nctmc_comm_from_mpi(&world, &c, err, sizeof err) != NCTMC_OK)
        die("nctmc_comm_from_mpi", err);
    if (rank == 0)
        printf("bench_allreduce: %d ranks (%s), median of %d\n", size, nctmc_comm_engine(c),
               reps);
    bandwidth(c, reps, rank);
    overlap(c, reps, rank, bytes, buckets, ratio, provided >= MPI_THREAD_SERIALIZED);
    nctmc_comm_free(c);
    MPI_Finalize();
    return 0;
}
