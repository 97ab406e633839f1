/*
 * comm_module.h — the interface between the core's communicator (comm.c)
 * and a communication engine built as a run-time module: libnctmc-mpi.so
 * (backends/mpi/mpi_comm.c) and libnctmc-nccl.so (backends/nccl/nccl_comm.c).
 * The module links its engine's library
 * (Open MPI) and nothing of the core; the core finds it beside itself
 * (lib/backend/backend_module.h, module_open) and checks that it was built
 * from the same libnctmc version and interface before calling it.
 *
 * Every operation is collective over the engine's ranks and on host memory
 * (the NCCL engine also takes device memory); all are blocking except the
 * started sums (sum_start, sum_progress, sum_wait), which let the trainer
 * reduce gradient buckets while its backward pass still runs. Every rank
 * starts the same sums in the same order. The sum is in a fixed order:
 * element i of the result is
 * (((x_0[i] + x_1[i]) + x_2[i]) + ...) over ranks 0, 1, 2, ... with one
 * rounding per addition, the same bits on every rank and every run,
 * whatever the network does — and whatever ranges of a buffer are summed
 * apart, so a buffer summed in buckets has the bits of one sum.
 */
#ifndef NCTMC_COMM_MODULE_H
#define NCTMC_COMM_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

#define NCTMC_COMM_MODULE_ABI_VERSION 2u
#define NCTMC_COMM_MODULE_ENTRY "nctmc_comm_module_entry"
#define NCTMC_MPI_MODULE_STEM "nctmc-mpi"
#define NCTMC_MPI_MODULE_ENV "NCTMC_MPI_MODULE"
#define NCTMC_NCCL_MODULE_STEM "nctmc-nccl"
#define NCTMC_NCCL_MODULE_ENV "NCTMC_NCCL_MODULE"

/* The most started sums an engine holds at once (sum_start refuses more). */
#define COMM_MAX_STARTED 64

/* The element types of a sum. */
typedef enum comm_type { COMM_FLOAT = 0, COMM_DOUBLE = 1 } comm_type;

/* An engine's state (the module's own type). */
typedef struct comm_engine comm_engine;

typedef struct nctmc_comm_module {
    uint32_t abi_version;      /* NCTMC_COMM_MODULE_ABI_VERSION */
    uint32_t module_size;      /* sizeof(nctmc_comm_module) */
    int32_t library_version;   /* NCTMC_VERSION_NUMBER it was built with */
    const char *name;          /* "mpi" */
    /* Joins the job its launcher started (MPI: MPI_Init when not yet
     * initialised, which destroy() then finalises; MPI_COMM_WORLD. NCCL:
     * RANK, WORLD_SIZE, LOCAL_RANK and a rendezvous at MASTER_ADDR:MASTER_PORT). */
    nctmc_status (*create_world)(comm_engine **out, char *err, size_t err_size);
    /* Uses an existing native communicator (MPI: a const MPI_Comm *), which
     * the engine duplicates; the caller keeps MPI initialised. */
    nctmc_status (*create_from)(const void *native, comm_engine **out, char *err,
                                size_t err_size);
    int32_t (*rank)(const comm_engine *e);
    int32_t (*size)(const comm_engine *e);
    /* buf[0..n) := the fixed-order sum over ranks of everyone's buf. */
    nctmc_status (*allreduce_sum)(comm_engine *e, void *buf, int64_t n, comm_type type,
                                  char *err, size_t err_size);
    /* Starts buf[0..n) := the fixed-order sum; buf must stay untouched until
     * sum_wait returns. At most COMM_MAX_STARTED at once. The engine keeps
     * what a started sum needs from one step to the next, so a sequence of
     * starts of the same sizes allocates only the first time. */
    nctmc_status (*sum_start)(comm_engine *e, void *buf, int64_t n, comm_type type, char *err,
                              size_t err_size);
    /* Moves the started sums along without waiting (MPI: MPI_Test), for a
     * caller that computes between its calls. */
    nctmc_status (*sum_progress)(comm_engine *e, char *err, size_t err_size);
    /* Returns when every started sum is complete. */
    nctmc_status (*sum_wait)(comm_engine *e, char *err, size_t err_size);
    /* buf[0..bytes) := root's. */
    nctmc_status (*broadcast)(comm_engine *e, void *buf, int64_t bytes, int32_t root,
                              char *err, size_t err_size);
    nctmc_status (*barrier)(comm_engine *e, char *err, size_t err_size);
    /* Ends every rank's process with `code` (MPI_Abort). */
    void (*abort_job)(comm_engine *e, int32_t code);
    void (*destroy)(comm_engine *e);
} nctmc_comm_module;

typedef const nctmc_comm_module *(*nctmc_comm_module_entry_fn)(void);

#endif /* NCTMC_COMM_MODULE_H */
