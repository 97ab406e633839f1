/*
 * comm.c — the public communicator (nctmc_comm_*): made from the launcher's
 * environment (mpirun, srun, torchrun-style variables) or from an MPI_Comm
 * given by pointer; a job of one process is the world of one with no
 * engine, a larger one loads the MPI module (libnctmc-mpi.so; mpirun, srun)
 * or the NCCL module (libnctmc-nccl.so; a torchrun-style launcher) beside
 * the core and checks it was built for this library.
 */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_module.h"

int32_t comm_rank(const nctmc_comm *c)
{
    return c ? c->rank : 0;
}

int32_t comm_size(const nctmc_comm *c)
{
    return c ? c->size : 1;
}

nctmc_status comm_sum(nctmc_comm *c, void *buf, int64_t n, comm_type type, char *err,
                      size_t err_size)
{
    if (!c || !c->module)
        return NCTMC_OK;
    return c->module->allreduce_sum(c->engine, buf, n, type, err, err_size);
}

nctmc_status comm_sum_start(nctmc_comm *c, void *buf, int64_t n, comm_type type, char *err,
                            size_t err_size)
{
    if (!c || !c->module)
        return NCTMC_OK;
    return c->module->sum_start(c->engine, buf, n, type, err, err_size);
}

nctmc_status comm_sum_progress(nctmc_comm *c, char *err, size_t err_size)
{
    if (!c || !c->module)
        return NCTMC_OK;
    return c->module->sum_progress(c->engine, err, err_size);
}

nctmc_status comm_sum_wait(nctmc_comm *c, char *err, size_t err_size)
{
    if (!c || !c->module)
        return NCTMC_OK;
    return c->module->sum_wait(c->engine, err, err_size);
}

bool comm_overlap(const nctmc_comm *c)
{
    return c && c->module && c->size > 1 && c->overlap;
}

int64_t comm_bucket_bytes(const nctmc_comm *c)
{
    return c ? c->bucket_bytes : 0;
}

nctmc_status comm_broadcast(nctmc_comm *c, void *buf, int64_t bytes, int32_t root, char *err,
                            size_t err_size)
{
    if (!c || !c->module)
        return NCTMC_OK;
    return c->module->broadcast(c->engine, buf, bytes, root, err, err_size);
}

/* ---- the engine module --------------------------------------------------- */

static nctmc_status check_module(const nctmc_comm_module *m, const char *where, char *err,
                                 size_t err_size)
{
    if (!m || m->abi_version != NCTMC_COMM_MODULE_ABI_VERSION ||
        m->module_size != sizeof(nctmc_comm_module) ||
        m->library_version != NCTMC_VERSION_NUMBER)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                           "%s was built for another libnctmc (interface %u, version %d; this "
                           "is %s, interface %u): install the module of the same libnctmc "
                           "build",
                           where, m ? (unsigned)m->abi_version : 0u,
                           m ? (int)m->library_version : 0, nctmc_version(),
                           (unsigned)NCTMC_COMM_MODULE_ABI_VERSION);
    return NCTMC_OK;
}

/* The engine module of `stem` (NCTMC_MPI_MODULE_STEM, NCTMC_NCCL_MODULE_STEM),
 * or the file `env` names. */
static nctmc_status load_engine(const char *stem, const char *env, const char *what,
                                const nctmc_comm_module **out, char *err, size_t err_size)
{
    char where[4096 + 64]; /* a path (PATH_MAX on Linux) and a note */
    void *handle = NULL;
    nctmc_status st = module_open(stem, env, what, &handle, where, sizeof where, err, err_size);
    if (st != NCTMC_OK)
        return st;
    union {
        void *object;
        nctmc_comm_module_entry_fn fn;
    } entry; /* the loader returns an object pointer; POSIX allows the cast */
    char why[256];
    entry.object = module_symbol(handle, NCTMC_COMM_MODULE_ENTRY, why, sizeof why);
    if (!entry.object) {
        st = fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                         "%s is not a libnctmc communication module (no %s: %s)", where,
                         NCTMC_COMM_MODULE_ENTRY, why);
    } else {
        *out = entry.fn();
        st = check_module(*out, where, err, err_size);
    }
    module_close(handle);
    return st;
}

static nctmc_status load_mpi(const nctmc_comm_module **out, char *err, size_t err_size)
{
    return load_engine(NCTMC_MPI_MODULE_STEM, NCTMC_MPI_MODULE_ENV, "MPI", out, err, err_size);
}

/* ---- the launcher's environment ------------------------------------------ */

/* The variables launchers set, most specific first. */
static const struct {
    const char *size, *rank, *launcher;
    int mpi; /* whether MPI_Init joins such a job */
} launchers[] = {
    {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "mpirun (Open MPI)", 1},
    {"PMI_SIZE", "PMI_RANK", "an MPI launcher (PMI)", 1},
    {"SLURM_NTASKS", "SLURM_PROCID", "Slurm (srun)", 1},
    {"WORLD_SIZE", "RANK", "a torchrun-style launcher", 0},
};

/* The value of an integer variable in [lo, hi], or -1 when it is unset;
 * -2 when it is set but not such an integer. */
static long env_int(const char *name, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !s[0])
        return -1;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        return -2;
    return v;
}

static nctmc_status comm_alloc(nctmc_comm **out, char *err, size_t err_size)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    (*out)->size = 1;
    snprintf((*out)->launcher, sizeof (*out)->launcher, "a single process");
    /* the gradient sum runs after the backward pass unless asked to
     * overlap it (docs/distributed.md: on CPU ranks over shared memory the
     * overlap hid nothing, and the engine's started sums allocate) */
    long overlap = env_int("NCTMC_COMM_OVERLAP", 0, 1);
    if (overlap == -2)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "NCTMC_COMM_OVERLAP=\"%.40s\" is neither 0 (sum the gradients "
                           "after the backward pass, the default) nor 1 (overlap the sum "
                           "with the backward pass)",
                           getenv("NCTMC_COMM_OVERLAP"));
    (*out)->overlap = overlap == 1;
    long bucket = env_int("NCTMC_COMM_BUCKET_BYTES", 1, 1L << 30);
    if (bucket == -2)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "NCTMC_COMM_BUCKET_BYTES=\"%.40s\" is not a number of bytes from 1 "
                           "to 1073741824",
                           getenv("NCTMC_COMM_BUCKET_BYTES"));
    (*out)->bucket_bytes = bucket > 0 ? bucket : 0;
    return NCTMC_OK;
}

/* Starts the launcher's engine (MPI, or NCCL for a torchrun-style start) on
 * the job and checks it sees what the launcher said. */
static nctmc_status join_engine(nctmc_comm *c, int mpi, long size, long rank, char *err,
                                size_t err_size)
{
    nctmc_status st = mpi ? load_mpi(&c->module, err, err_size)
                          : load_engine(NCTMC_NCCL_MODULE_STEM, NCTMC_NCCL_MODULE_ENV, "NCCL",
                                        &c->module, err, err_size);
    if (st == NCTMC_OK)
        st = c->module->create_world(&c->engine, err, err_size);
    if (st != NCTMC_OK) {
        c->module = NULL;
        return st;
    }
    c->rank = c->module->rank(c->engine);
    c->size = c->module->size(c->engine);
    if (c->size != size || c->rank != rank)
        return fail_format(err, err_size, NCTMC_ERR_BACKEND,
                           "%s started rank %ld of %ld processes but %s sees rank %d of %d: "
                           "the engine and the launcher do not match (use the mpirun of "
                           "the Open MPI that libnctmc-mpi.so links, or srun --mpi=pmix)",
                           c->launcher, rank, size, c->module->name, (int)c->rank,
                           (int)c->size);
    return NCTMC_OK;
}

static nctmc_status from_env(nctmc_comm *c, char *err, size_t err_size)
{
    for (size_t k = 0; k < sizeof launchers / sizeof launchers[0]; k++) {
        long size = env_int(launchers[k].size, 1, 1 << 20);
        if (size == -1)
            continue;
        long rank = env_int(launchers[k].rank, 0, size > 0 ? size - 1 : 0);
        if (size < 0 || rank < 0)
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s=\"%.40s\" and %s=\"%.40s\" are not a rank of a job size",
                               launchers[k].size, getenv(launchers[k].size),
                               launchers[k].rank,
                               getenv(launchers[k].rank) ? getenv(launchers[k].rank) : "");
        snprintf(c->launcher, sizeof c->launcher, "%s", launchers[k].launcher);
        if (size == 1)
            return NCTMC_OK;
        return join_engine(c, launchers[k].mpi, size, rank, err, err_size);
    }
    return NCTMC_OK;
}

static void write_error(char *error_buffer, size_t error_size, const char *msg)
{
    if (error_buffer && error_size > 0)
        snprintf(error_buffer, error_size, "%s", msg);
}

NCTMC_API nctmc_status nctmc_comm_from_env(nctmc_comm **out, char *error_buffer,
                                           size_t error_size)
{
    char err[NCTMC_ERROR_SIZE] = "";
    if (!out) {
        write_error(error_buffer, error_size, "nctmc_comm_from_env: out is NULL");
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    nctmc_status st = comm_alloc(out, err, sizeof err);
    if (st == NCTMC_OK)
        st = from_env(*out, err, sizeof err);
    if (st != NCTMC_OK) {
        nctmc_comm_free(*out);
        *out = NULL;
        write_error(error_buffer, error_size, err);
    }
    return st;
}

NCTMC_API nctmc_status nctmc_comm_from_mpi(const void *mpi_comm, nctmc_comm **out,
                                           char *error_buffer, size_t error_size)
{
    char err[NCTMC_ERROR_SIZE] = "";
    if (!out || !mpi_comm) {
        write_error(error_buffer, error_size, "nctmc_comm_from_mpi: mpi_comm and out must not "
                                              "be NULL");
        if (out)
            *out = NULL;
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    nctmc_status st = comm_alloc(out, err, sizeof err);
    nctmc_comm *c = *out;
    if (st == NCTMC_OK)
        st = load_mpi(&c->module, err, sizeof err);
    if (st == NCTMC_OK) {
        st = c->module->create_from(mpi_comm, &c->engine, err, sizeof err);
        if (st != NCTMC_OK)
            c->module = NULL;
    }
    if (st != NCTMC_OK) {
        nctmc_comm_free(c);
        *out = NULL;
        write_error(error_buffer, error_size, err);
        return st;
    }
    snprintf(c->launcher, sizeof c->launcher, "the caller's MPI communicator");
    c->rank = c->module->rank(c->engine);
    c->size = c->module->size(c->engine);
    return NCTMC_OK;
}

NCTMC_API int32_t nctmc_comm_rank(const nctmc_comm *c)
{
    return comm_rank(c);
}

NCTMC_API int32_t nctmc_comm_size(const nctmc_comm *c)
{
    return comm_size(c);
}

NCTMC_API const char *nctmc_comm_engine(const nctmc_comm *c)
{
    return c && c->module ? c->module->name : "none";
}

NCTMC_API nctmc_status nctmc_comm_broadcast(nctmc_comm *c, void *buf, int64_t bytes,
                                            int32_t root)
{
    if (!c)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if ((!buf && bytes > 0) || bytes < 0 || root < 0 || root >= c->size)
        return FAIL_INTO(c, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_comm_broadcast: %lld bytes at %s from rank %d of %d",
                         (long long)bytes, buf ? "a buffer" : "NULL", (int)root, (int)c->size);
    c->last_error[0] = '\0';
    return comm_broadcast(c, buf, bytes, root, c->last_error, sizeof c->last_error);
}

NCTMC_API nctmc_status nctmc_comm_barrier(nctmc_comm *c)
{
    if (!c)
        return NCTMC_ERR_INVALID_ARGUMENT;
    c->last_error[0] = '\0';
    if (!c->module)
        return NCTMC_OK;
    return c->module->barrier(c->engine, c->last_error, sizeof c->last_error);
}

NCTMC_API void nctmc_comm_abort(nctmc_comm *c, int32_t code)
{
    if (c && c->module)
        c->module->abort_job(c->engine, code);
}

NCTMC_API const char *nctmc_comm_last_error(const nctmc_comm *c)
{
    return c ? c->last_error : "";
}

NCTMC_API void nctmc_comm_free(nctmc_comm *c)
{
    if (!c)
        return;
    if (c->module && c->engine)
        c->module->destroy(c->engine);
    free(c);
}
