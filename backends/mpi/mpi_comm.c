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

struct comm_engine {
    MPI_Comm comm;         /* a duplicate: our messages never meet the caller's */
    int rank, size;
    bool finalize;         /* this engine initialised MPI */
    int *counts, *displs;  /* [size] the slices of the current sum */
    int *rcounts, *rdispls;
    char *scratch;         /* size x one slice, grown on demand */
    size_t scratch_bytes;
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
    MPI_Comm_rank(e->comm, &e->rank);
    MPI_Comm_size(e->comm, &e->size);
    size_t n = (size_t)e->size;
    e->counts = calloc(n, sizeof(int));
    e->displs = calloc(n, sizeof(int));
    e->rcounts = calloc(n, sizeof(int));
    e->rdispls = calloc(n, sizeof(int));
    if (!e->counts || !e->displs || !e->rcounts || !e->rdispls) {
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
    size_t esz = type == COMM_FLOAT ? sizeof(float) : sizeof(double);
    MPI_Datatype dt = type == COMM_FLOAT ? MPI_FLOAT : MPI_DOUBLE;
    int N = e->size;
    for (int j = 0; j < N; j++) {
        int64_t lo = n * j / N, hi = n * (j + 1) / N;
        e->counts[j] = (int)(hi - lo);
        e->displs[j] = (int)lo;
    }
    int mine = e->counts[e->rank];
    for (int i = 0; i < N; i++) {
        e->rcounts[i] = mine;
        e->rdispls[i] = i * mine;
    }
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
