/*
 * context.h — the context handle's internals, logging, and the error helper
 * every public entry point uses.
 */
#ifndef NCTMC_CONTEXT_H
#define NCTMC_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "base/alloc.h"
#include "base/fail.h"
#include "backend/backend.h"
#include "nctmc.h"

/* A context is reference counted: the caller's handle is one reference, and
 * every model and sampler computing on it holds another, so the backend
 * lives until the last of them is released, in any order, on any thread. */
struct nctmc_context {
    atomic_int refs;
    nctmc_backend *backend;
    /* Guards the log callback: nctmc_context_free() detaches it under this
     * lock, so that no message is delivered after the caller has released
     * its handle (and maybe the callback's user data). Recursive, so that a
     * callback may call back into the library. */
    pthread_mutex_t log_mutex;
    nctmc_log_fn log_fn;
    void *log_user_data;
    nctmc_log_level log_level;
    char last_error[NCTMC_ERROR_SIZE];
    /* the caller's allocator hook; the backend points at it (alloc.h) */
    nctmc_allocator alloc;
};

/* Takes one more reference to ctx (a model or sampler that computes on
 * it). */
void ctx_retain(nctmc_context *ctx);

/* Drops one reference; the last one destroys the backend and the context.
 * NULL does nothing. */
void ctx_release(nctmc_context *ctx);

/* Delivers a message to the context's log callback if its level is enabled;
 * with a NULL ctx (a call made without a context), to the process-wide
 * callback (nctmc_set_log_callback()) if one is set. */
void ctx_log(const nctmc_context *ctx, nctmc_log_level level, const char *fmt, ...)
    NCTMC_PRINTF(3, 4);

#endif /* NCTMC_CONTEXT_H */
