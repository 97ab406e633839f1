/*
 * context.h — the context handle's internals, logging, and the error helper
 * every public entry point uses.
 */
#ifndef NCTMC_CONTEXT_H
#define NCTMC_CONTEXT_H

#include <stddef.h>

#include "alloc.h"
#include "backend.h"
#include "nctmc.h"

#define NCTMC_ERROR_SIZE 512

struct nctmc_context {
    nctmc_backend *backend;
    nctmc_log_fn log_fn;
    void *log_user_data;
    nctmc_log_level log_level;
    char last_error[NCTMC_ERROR_SIZE];
    /* the caller's allocator hook; the backend points at it (alloc.h) */
    nctmc_allocator alloc;
};

#if defined(__GNUC__)
#define NCTMC_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define NCTMC_PRINTF(fmt_index, first_arg)
#endif

/* Formats a message into buf (always terminated) and returns status: the
 * one-line way to fail from an entry point. */
nctmc_status nctmc_fail(char *buf, size_t size, nctmc_status status, const char *fmt, ...)
    NCTMC_PRINTF(4, 5);

/* Delivers a message to the context's log callback if its level is enabled. */
void nctmc_log(const nctmc_context *ctx, nctmc_log_level level, const char *fmt, ...)
    NCTMC_PRINTF(3, 4);

#endif /* NCTMC_CONTEXT_H */
