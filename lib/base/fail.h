/*
 * fail.h — the one way the library fails: a message formatted into an error
 * buffer, escaped so that it stays one printable line whatever it quotes
 * (file contents, a caller's strings), and the status returned with it.
 * Every handle keeps its last message in `char last_error[NCTMC_ERROR_SIZE]`;
 * FAIL_INTO writes there. A handle shared between threads (the model) wraps
 * fail_vformat in its own lock instead (lib/model/model.c, model_fail).
 */
#ifndef NCTMC_FAIL_H
#define NCTMC_FAIL_H

#include <stdarg.h>
#include <stddef.h>

#include "nctmc.h"

/* The size of every handle's last_error and of the library's message
 * buffers. */
#define NCTMC_ERROR_SIZE 512

#if defined(__GNUC__)
#define NCTMC_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define NCTMC_PRINTF(fmt_index, first_arg)
#endif

/* Formats a message into buf (always terminated, escaped to one printable
 * line, truncated to size) and returns status. buf may be NULL or size 0:
 * then only the status is returned. */
nctmc_status fail_format(char *buf, size_t size, nctmc_status status, const char *fmt, ...)
    NCTMC_PRINTF(4, 5);

/* fail_format with a va_list. */
nctmc_status fail_vformat(char *buf, size_t size, nctmc_status status, const char *fmt,
                          va_list ap) NCTMC_PRINTF(4, 0);

/* Fails into a handle's own last_error: FAIL_INTO(tok, NCTMC_ERR_IO, "...", ...). */
#define FAIL_INTO(holder, status, ...) \
    fail_format((holder)->last_error, sizeof (holder)->last_error, (status), __VA_ARGS__)

#endif /* NCTMC_FAIL_H */
