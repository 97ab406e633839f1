/*
 * mpi_comm.c — the MPI communication engine, built as the module
 * libnctmc-mpi.so that the core loads at run time (lib/comm/comm.c), so
 * that libnctmc itself never links MPI. Host buffers only.
 *
 * The sum is in a fixed order, not MPI_Allreduce's (whose order MPI leaves
 * to the implementation and the network): the buffer is cut into one slice
 * per rank; MPI_Alltoallv brings every rank's copy of slice j to rank j,
 * which adds them in rank order (x_0 + x_1 + ... with one rounding per
 * addition); MPI_Allgatherv hands the summed slices to everyone. That is a
 * reduce-scatter and an all-gather — the same bytes on the wire as a ring
 * all-reduce — and the same bits on every rank, run and network.
 *
 * Started sums (sum_start) run the same two steps as nonblocking
 * collectives (MPI_Ialltoallv, the addition, MPI_Iallgatherv), moved along
 * by MPI_Test whenever the caller calls sum_progress (the trainer does at
 * each block boundary of its backward pass) and finished by sum_wait. The
 * reduce-scatters go on one duplicate communicator and the all-gathers on
 * another, each started in the order of the sums on every rank (a sum's
 * all-gather starts only after the previous sum's), as MPI requires of
 * collectives on one communicator. It needs no thread support from MPI
 * (the caller's thread does every call), so an MPI_Comm from a caller that
 * initialised MPI at any thread level works. Measured with Open MPI 4.1 over
 * shared memory on a 2-core machine with both cores computing
 * (bench/bench_allreduce.c, docs/distributed.md): neither this nor a
 * communication thread hid any of the sum there (shared memory moves the
 * bytes with the same cores that compute), and both cost a little more
 * than one sum after the computation (the thread slightly less than this).
 * This design stays because it asks nothing of MPI's thread support; a
 * thread would need MPI_THREAD_SERIALIZED, which a caller's MPI_Comm from
 * MPI_Init (MPI_THREAD_SINGLE) does not give.
 *
 * Errors are returned (MPI_ERRORS_RETURN on the engine's communicator),
 * with MPI's message, never left to abort the process by default.
 */
#include <limits.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_module.h"

/* A started sum: its buffer, the slices, and where it is. */
typedef enum { SUM_IDLE = 0, SUM_SCATTER, SUM_GATHER, SUM_DONE } sum_phase;

typedef struct started_sum {
    char *buf;
    comm_type type;
    sum_phase phase;
    MPI_Request req;
    int *counts, *displs;  /* [size] the slices (MPI reads them until done) */
    int *rcounts, *rdispls;
    char *scratch;         /* size x one slice, grown on demand, kept */
    size_t scratch_bytes;
} started_sum;

struct comm_engine {
    MPI_Comm comm;         /* a duplicate: our messages never meet the caller's */
    MPI_Comm comm_rs, comm_ag; /* the started sums' reduce-scatters, all-gathers */
    int rank, size;
    bool finalize;         /* this engine initialised MPI */
    int *counts, *displs;  /* [size] the slices of the current sum */
    int *rcounts, *rdispls;
    char *scratch;         /* size x one slice, grown on demand */
    size_t scratch_bytes;
    started_sum started[COMM_MAX_STARTED];
    int n_started;         /* sums started since the last sum_wait */
    int n_gathering;       /* the first n_gathering have reached SUM_GATHER */
    int *ints;             /* every started sum's four [size] arrays */
};

static nctmc_status mpi_fail(int rc, const char *what, char *err, size_t err_size)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    snprintf(err, err_size, "MPI: %s failed: %s (another rank may have failed or died)", what,
             text);
    return NCTMC_ERR_BACKEND;
}

static void engine_free(comm_engine *e)
{
    for (int k = 0; k < COMM_MAX_STARTED; k++)
        free(e->started[k].scratch);
    free(e->ints);
    free(e->counts);
    free(e->displs);
    free(e->rcounts);
    free(e->rdispls);
    free(e->scratch);
    free(e);
}

/* Duplicates `base` into a new engine whose errors are returned. */
static nctmc_status engine_make(MPI_Comm base, bool finalize, comm_engine **out, char *err,
                                size_t err_size)
{
    comm_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_size, "out of memory");
        return NCTMC_ERR_OUT_OF_MEMORY;
    }
    e->finalize = finalize;
    int rc = MPI_Comm_dup(base, &e->comm);
    if (rc != MPI_SUCCESS) {
        free(e);
        return mpi_fail(rc, "MPI_Comm_dup", err, err_size);
    }
    MPI_Comm_set_errhandler(e->comm, MPI_ERRORS_RETURN);
    rc = MPI_Comm_dup(e->comm, &e->comm_rs);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Comm_dup(e->comm, &e->comm_ag);
        if (rc != MPI_SUCCESS)
            MPI_Comm_free(&e->comm_rs);
    }
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&e->comm);
        free(e);
        return mpi_fail(rc, "MPI_Comm_dup", err, err_size);
    }
    MPI_Comm_rank(e->comm, &e->rank);
    MPI_Comm_size(e->comm, &e->size);
    size_t n = (size_t)e->size;
    e->counts = calloc(n, sizeof(int));
    e->displs = calloc(n, sizeof(int));
    e->rcounts = calloc(n, sizeof(int));
    e->rdispls = calloc(n, sizeof(int));
    e->ints = calloc((size_t)COMM_MAX_STARTED * 4 * n, sizeof(int));
    for (int k = 0; e->ints && k < COMM_MAX_STARTED; k++) {
        int *a = e->ints + (size_t)k * 4 * n;
        e->started[k].counts = a;
        e->started[k].displs = a + n;
        e->started[k].rcounts = a + 2 * n;
        e->started[k].rdispls = a + 3 * n;
    }
    if (!e->counts || !e->displs || !e->rcounts || !e->rdispls || !e->ints) {
        MPI_Comm_free(&e->comm_ag);
        MPI_Comm_free(&e->comm_rs);
        MPI_Comm_free(&e->comm);
        engine_free(e);
        snprintf(err, err_size, "out of memory");
        return NCTMC_ERR_OUT_OF_MEMORY;
    }
    *out = e;
    return NCTMC_OK;
}

static nctmc_status create_world(comm_engine **out, char *err, size_t err_size)
{
    int ready = 0;
    MPI_Initialized(&ready);
    bool finalize = false;
    if (!ready) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Init_thread", err, err_size);
        finalize = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    nctmc_status st = engine_make(MPI_COMM_WORLD, finalize, out, err, err_size);
    if (st != NCTMC_OK && finalize)
        MPI_Finalize();
    return st;
}

static nctmc_status create_from(const void *native, comm_engine **out, char *err,
                                size_t err_size)
{
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
        snprintf(err, err_size, "MPI is not initialised: call MPI_Init before passing an "
                                "MPI_Comm");
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    return engine_make(*(const MPI_Comm *)native, false, out, err, err_size);
}

static int32_t engine_rank(const comm_engine *e)
{
    return e->rank;
}

static int32_t engine_size(const comm_engine *e)
{
    return e->size;
}

/* Sums `count` elements of `size` slices (rank order) from src into dst. */
static void add_slices(void *dst, const char *src, int count, int size, comm_type type)
{
    size_t n = (size_t)count;
    if (type == COMM_FLOAT) {
        float *d = dst;
        const float *s = (const float *)(const void *)src;
        memcpy(d, s, n * sizeof *d);
        for (int r = 1; r < size; r++)
            for (size_t k = 0; k < n; k++)
                d[k] += s[(size_t)r * n + k];
    } else {
        double *d = dst;
        const double *s = (const double *)(const void *)src;
        memcpy(d, s, n * sizeof *d);
        for (int r = 1; r < size; r++)
            for (size_t k = 0; k < n; k++)
                d[k] += s[(size_t)r * n + k];
    }
}

static size_t type_size(comm_type type)
{
    return type == COMM_FLOAT ? sizeof(float) : sizeof(double);
}

static MPI_Datatype type_mpi(comm_type type)
{
    return type == COMM_FLOAT ? MPI_FLOAT : MPI_DOUBLE;
}

/* Cuts n elements into one slice per rank; returns this rank's count. */
static int cut_slices(const comm_engine *e, int64_t n, int *counts, int *displs, int *rcounts,
                      int *rdispls)
{
    int N = e->size;
    for (int j = 0; j < N; j++) {
        int64_t lo = n * j / N, hi = n * (j + 1) / N;
        counts[j] = (int)(hi - lo);
        displs[j] = (int)lo;
    }
    int mine = counts[e->rank];
    for (int i = 0; i < N; i++) {
        rcounts[i] = mine;
        rdispls[i] = i * mine;
    }
    return mine;
}

static nctmc_status allreduce_sum(comm_engine *e, void *buf, int64_t n, comm_type type,
                                  char *err, size_t err_size)
{
    if (e->size == 1 || n == 0)
        return NCTMC_OK;
    if (n < 0 || n > INT_MAX) {
        snprintf(err, err_size, "MPI: a sum of %lld elements is more than MPI's int counts",
                 (long long)n);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    size_t esz = type_size(type);
    MPI_Datatype dt = type_mpi(type);
    int N = e->size;
    int mine = cut_slices(e, n, e->counts, e->displs, e->rcounts, e->rdispls);
    size_t need = (size_t)N * (size_t)mine * esz;
    if (need > e->scratch_bytes) {
        char *grown = realloc(e->scratch, need);
        if (!grown) {
            snprintf(err, err_size, "out of memory for the all-reduce's %zu bytes", need);
            return NCTMC_ERR_OUT_OF_MEMORY;
        }
        e->scratch = grown;
        e->scratch_bytes = need;
    }
    int rc = MPI_Alltoallv(buf, e->counts, e->displs, dt, e->scratch, e->rcounts, e->rdispls,
                           dt, e->comm);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Alltoallv (reduce-scatter)", err, err_size);
    add_slices((char *)buf + (size_t)e->displs[e->rank] * esz, e->scratch, mine, N, type);
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, dt, buf, e->counts, e->displs, dt, e->comm);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Allgatherv (all-gather)", err, err_size);
    return NCTMC_OK;
}

/* ---- started sums -------------------------------------------------------- */

static nctmc_status sum_start(comm_engine *e, void *buf, int64_t n, comm_type type, char *err,
                              size_t err_size)
{
    if (e->n_started == COMM_MAX_STARTED) {
        snprintf(err, err_size, "MPI: more than %d sums started at once", COMM_MAX_STARTED);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    if (n < 0 || n > INT_MAX) {
        snprintf(err, err_size, "MPI: a sum of %lld elements is more than MPI's int counts",
                 (long long)n);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    started_sum *s = &e->started[e->n_started];
    int mine = cut_slices(e, n, s->counts, s->displs, s->rcounts, s->rdispls);
    size_t need = (size_t)e->size * (size_t)mine * type_size(type);
    if (need > s->scratch_bytes) {
        char *grown = realloc(s->scratch, need);
        if (!grown) {
            snprintf(err, err_size, "out of memory for the all-reduce's %zu bytes", need);
            return NCTMC_ERR_OUT_OF_MEMORY;
        }
        s->scratch = grown;
        s->scratch_bytes = need;
    }
    s->buf = buf;
    s->type = type;
    MPI_Datatype dt = type_mpi(type);
    int rc = MPI_Ialltoallv(buf, s->counts, s->displs, dt, s->scratch, s->rcounts, s->rdispls,
                            dt, e->comm_rs, &s->req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Ialltoallv (reduce-scatter)", err, err_size);
    s->phase = SUM_SCATTER;
    e->n_started++;
    return NCTMC_OK;
}

/* The reduce-scatter of s is done: add this rank's slice, start the
 * all-gather. */
static nctmc_status start_gather(comm_engine *e, started_sum *s, char *err, size_t err_size)
{
    size_t esz = type_size(s->type);
    int mine = s->counts[e->rank];
    add_slices(s->buf + (size_t)s->displs[e->rank] * esz, s->scratch, mine, e->size, s->type);
    MPI_Datatype dt = type_mpi(s->type);
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, dt, s->buf, s->counts, s->displs, dt, e->comm_ag,
                             &s->req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Iallgatherv (all-gather)", err, err_size);
    s->phase = SUM_GATHER;
    e->n_gathering++;
    return NCTMC_OK;
}

/* Moves every started sum along; `block`: wait for each in turn. The
 * all-gathers start in the order of the sums. */
static nctmc_status advance(comm_engine *e, bool block, char *err, size_t err_size)
{
    for (int k = 0; k < e->n_started; k++) {
        started_sum *s = &e->started[k];
        while (s->phase == SUM_SCATTER || s->phase == SUM_GATHER) {
            if (s->phase == SUM_SCATTER && k > e->n_gathering)
                break; /* an earlier sum's all-gather has not started yet */
            int done = 0, rc;
            if (block) {
                rc = MPI_Wait(&s->req, MPI_STATUS_IGNORE);
                done = 1;
            } else {
                rc = MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
            }
            if (rc != MPI_SUCCESS)
                return mpi_fail(rc, s->phase == SUM_SCATTER ? "the started reduce-scatter"
                                                             : "the started all-gather",
                                err, err_size);
            if (!done)
                break;
            if (s->phase == SUM_GATHER) {
                s->phase = SUM_DONE;
            } else {
                nctmc_status st = start_gather(e, s, err, err_size);
                if (st != NCTMC_OK)
                    return st;
            }
        }
    }
    return NCTMC_OK;
}

static nctmc_status sum_progress(comm_engine *e, char *err, size_t err_size)
{
    return advance(e, false, err, err_size);
}

static nctmc_status sum_wait(comm_engine *e, char *err, size_t err_size)
{
    nctmc_status st = advance(e, true, err, err_size);
    for (int k = 0; k < e->n_started; k++)
        e->started[k].phase = SUM_IDLE;
    e->n_started = 0;
    e->n_gathering = 0;
    return st;
}

static nctmc_status broadcast(comm_engine *e, void *buf, int64_t bytes, int32_t root,
                              char *err, size_t err_size)
{
    if (bytes < 0 || bytes > INT_MAX) {
        snprintf(err, err_size, "MPI: a broadcast of %lld bytes is more than MPI's int counts",
                 (long long)bytes);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, e->comm);
    return rc == MPI_SUCCESS ? NCTMC_OK : mpi_fail(rc, "MPI_Bcast", err, err_size);
}

static nctmc_status barrier(comm_engine *e, char *err, size_t err_size)
{
    int rc = MPI_Barrier(e->comm);
    return rc == MPI_SUCCESS ? NCTMC_OK : mpi_fail(rc, "MPI_Barrier", err, err_size);
}

static void abort_job(comm_engine *e, int32_t code)
{
    MPI_Abort(e->comm, code);
}

static void destroy(comm_engine *e)
{
    if (!e)
        return;
    MPI_Comm_free(&e->comm_ag);
    MPI_Comm_free(&e->comm_rs);
    MPI_Comm_free(&e->comm);
    bool finalize = e->finalize;
    engine_free(e);
    if (finalize)
        MPI_Finalize();
}

static const nctmc_comm_module mpi_module = {
    .abi_version = NCTMC_COMM_MODULE_ABI_VERSION,
    .module_size = sizeof(nctmc_comm_module),
    .library_version = NCTMC_VERSION_NUMBER,
    .name = "mpi",
    .create_world = create_world,
    .create_from = create_from,
    .rank = engine_rank,
    .size = engine_size,
    .allreduce_sum = allreduce_sum,
    .sum_start = sum_start,
    .sum_progress = sum_progress,
    .sum_wait = sum_wait,
    .broadcast = broadcast,
    .barrier = barrier,
    .abort_job = abort_job,
    .destroy = destroy,
};

__attribute__((visibility("default"))) const nctmc_comm_module *nctmc_comm_module_entry(void);

const nctmc_comm_module *nctmc_comm_module_entry(void)
{
    return &mpi_module;
}
