/*
 * log_hook.h — the process-wide log callback (nctmc_set_log_callback()): the
 * one channel for messages of calls made without a context. It is the
 * library's only process-wide mutable state (nctmc.h says why).
 */
#ifndef NCTMC_LOG_HOOK_H
#define NCTMC_LOG_HOOK_H

#include <stdarg.h>

#include "base/fail.h"
#include "nctmc.h"

/* Delivers a message (printf format; escaped to one line, truncated to
 * NCTMC_ERROR_SIZE) to the process-wide callback when one is set and level
 * is at or above its level. Any thread; the callback may call back into
 * the library. */
void log_hook_emit(nctmc_log_level level, const char *fmt, ...) NCTMC_PRINTF(2, 3);
void log_hook_vemit(nctmc_log_level level, const char *fmt, va_list ap);

#endif /* NCTMC_LOG_HOOK_H */
