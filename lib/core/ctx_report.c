/*
 * ctx_report.c — see ctx_report.h. Without a context the message goes to
 * the process-wide log callback (log_hook.h).
 */
#include "ctx_report.h"

#include <stdarg.h>
#include <stdio.h>

#include "base/text_escape.h"
#include "log_hook.h"

nctmc_status ctx_report_fail(nctmc_context *ctx, nctmc_status status, const char *fmt, ...)
{
    char raw[NCTMC_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (!ctx) {
        /* no context to hold it: the process-wide callback, if any */
        log_hook_emit(NCTMC_LOG_ERROR, "%s", raw);
        return status;
    }
    text_escape(ctx->last_error, sizeof ctx->last_error, raw);
    return ctx_report_logged(ctx, status);
}

void ctx_report_ok(nctmc_context *ctx)
{
    if (ctx)
        ctx->last_error[0] = '\0';
}

nctmc_status ctx_report_logged(nctmc_context *ctx, nctmc_status status)
{
    if (ctx)
        ctx_log(ctx, NCTMC_LOG_ERROR, "%s", ctx->last_error);
    return status;
}
