/*
 * ctx_report.h — failing from an entry point whose errors belong to a
 * context that may be NULL (tokenizer creation and loading, datasets): the
 * message is stored in the context and logged at NCTMC_LOG_ERROR; with a
 * NULL context it goes to the process-wide log callback
 * (nctmc_set_log_callback()).
 */
#ifndef NCTMC_CTX_REPORT_H
#define NCTMC_CTX_REPORT_H

#include "context.h"

nctmc_status ctx_report_fail(nctmc_context *ctx, nctmc_status status, const char *fmt, ...)
    NCTMC_PRINTF(3, 4);

/* Logs the message already in ctx->last_error (after a helper stored it
 * there) and returns status. */
nctmc_status ctx_report_logged(nctmc_context *ctx, nctmc_status status);

/* A call whose errors belong to ctx succeeded: clears its last error (ctx
 * may be NULL). */
void ctx_report_ok(nctmc_context *ctx);

#endif /* NCTMC_CTX_REPORT_H */
