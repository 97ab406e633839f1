/*
 * ctx_report.c — see ctx_report.h.
 */
#include "ctx_report.h"

#include <stdarg.h>
#include <stdio.h>

#include "base/text_escape.h"

nctmc_status ctx_report_fail(nctmc_context *ctx, nctmc_status status, const char *fmt, ...)
{
    if (!ctx)
        return status;
    char raw[NCTMC_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
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
