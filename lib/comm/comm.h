/*
 * comm.h — the communicator the trainer uses for data-parallel training:
 * rank, size, and the collective operations it needs (a fixed-order sum of
 * float and double buffers, broadcast, barrier, abort). A world of one
 * process needs no engine: every operation is then a no-op. Otherwise the
 * engine is a run-time module (comm_module.h); the trainer never knows
 * which.
 */
#ifndef NCTMC_COMM_H
#define NCTMC_COMM_H

#include <stdbool.h>

#include "base/fail.h"
#include "comm_module.h"

struct nctmc_comm {
    int32_t rank;
    int32_t size;
    const nctmc_comm_module *module; /* NULL for a world of one */
    comm_engine *engine;
    char launcher[64];               /* what started the job, for messages */
    bool overlap;                    /* the trainer sums gradient buckets during
                                        its backward pass (NCTMC_COMM_OVERLAP=1;
                                        unset or 0, the default: after it) */
    int64_t bucket_bytes;            /* the smallest such bucket
                                        (NCTMC_COMM_BUCKET_BYTES; 0: the
                                        trainer's default) */
    char last_error[NCTMC_ERROR_SIZE];
};

/* The rank and size of c; a NULL c is the world of one. */
int32_t comm_rank(const nctmc_comm *c);
int32_t comm_size(const nctmc_comm *c);

/* buf[0..n) := the sum over ranks in rank order (comm_module.h). Writes why
 * into err on failure. */
nctmc_status comm_sum(nctmc_comm *c, void *buf, int64_t n, comm_type type, char *err,
                      size_t err_size);

/* Started sums (comm_module.h): comm_sum_start begins buf[0..n) := the sum
 * over ranks; comm_sum_progress moves the started sums along; comm_sum_wait
 * returns when all are complete. buf stays untouched until then. No-ops in
 * a world of one. */
nctmc_status comm_sum_start(nctmc_comm *c, void *buf, int64_t n, comm_type type, char *err,
                            size_t err_size);
nctmc_status comm_sum_progress(nctmc_comm *c, char *err, size_t err_size);
nctmc_status comm_sum_wait(nctmc_comm *c, char *err, size_t err_size);

/* Whether the trainer should sum its gradients in buckets during the
 * backward pass: a world of several ranks with NCTMC_COMM_OVERLAP=1 (the
 * default, unset or 0, sums the whole slab after the backward pass). */
bool comm_overlap(const nctmc_comm *c);

/* The smallest gradient bucket the caller asked for in bytes
 * (NCTMC_COMM_BUCKET_BYTES, for tests and measurements), or 0: the
 * trainer's own. */
int64_t comm_bucket_bytes(const nctmc_comm *c);

/* buf[0..bytes) := rank `root`'s. */
nctmc_status comm_broadcast(nctmc_comm *c, void *buf, int64_t bytes, int32_t root, char *err,
                            size_t err_size);

#endif /* NCTMC_COMM_H */
