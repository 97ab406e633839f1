/*
 * context.c — context creation (backend selection), logging and errors.
 */
#include "context.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text_escape.h"

#ifdef NCTMC_HAVE_CUDA
#include "cuda_backend.h"
#endif

nctmc_status nctmc_fail(char *buf, size_t size, nctmc_status status, const char *fmt, ...)
{
    if (buf && size) {
        /* messages quote file contents: escaped here, once for every
         * message, so none can carry a terminal control sequence */
        char raw[NCTMC_ERROR_SIZE];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        text_escape(buf, size, raw);
    }
    return status;
}

static void log_message(nctmc_log_fn fn, void *user, nctmc_log_level min_level,
                        nctmc_log_level level, const char *fmt, va_list ap)
{
    if (!fn || level < min_level)
        return;
    char raw[NCTMC_ERROR_SIZE], msg[NCTMC_ERROR_SIZE];
    vsnprintf(raw, sizeof raw, fmt, ap);
    text_escape(msg, sizeof msg, raw);
    fn(level, msg, user);
}

void nctmc_log(const nctmc_context *ctx, nctmc_log_level level, const char *fmt, ...)
{
    if (!ctx)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_message(ctx->log_fn, ctx->log_user_data, ctx->log_level, level, fmt, ap);
    va_end(ap);
}

/* Before a context exists the only channel for a message is the callback in
 * the caller's parameters. */
static nctmc_status fail_params(const nctmc_context_params *p, nctmc_status status,
                                const char *fmt, ...) NCTMC_PRINTF(3, 4);
static nctmc_status fail_params(const nctmc_context_params *p, nctmc_status status,
                                const char *fmt, ...)
{
    if (p && p->log_fn) {
        va_list ap;
        va_start(ap, fmt);
        log_message(p->log_fn, p->log_user_data, NCTMC_LOG_DEBUG, NCTMC_LOG_ERROR, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* A message to the callback in the caller's parameters, at its log level. */
static void log_params(const nctmc_context_params *p, nctmc_log_level level, const char *fmt,
                       ...) NCTMC_PRINTF(3, 4);
static void log_params(const nctmc_context_params *p, nctmc_log_level level, const char *fmt,
                       ...)
{
    if (p && p->log_fn) {
        va_list ap;
        va_start(ap, fmt);
        log_message(p->log_fn, p->log_user_data, p->log_level, level, fmt, ap);
        va_end(ap);
    }
}

NCTMC_API void nctmc_context_params_init(nctmc_context_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->backend = "auto";
    params->n_threads = 0;
    params->log_level = NCTMC_LOG_WARN;
}

static nctmc_status check_context_params(const nctmc_context_params *p)
{
    if (p->struct_size != sizeof *p)
        return fail_params(p, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_context_params.struct_size is %zu, expected %zu (call "
                           "nctmc_context_params_init)",
                           p->struct_size, sizeof *p);
    if (p->n_threads < 0 || p->n_threads > 4096)
        return fail_params(p, NCTMC_ERR_INVALID_ARGUMENT,
                           "n_threads must be in [0, 4096] (0 = all cores), got %d",
                           p->n_threads);
    if (p->log_level < NCTMC_LOG_DEBUG || p->log_level > NCTMC_LOG_ERROR)
        return fail_params(p, NCTMC_ERR_INVALID_ARGUMENT, "log_level %d is not a level",
                           (int)p->log_level);
    return NCTMC_OK;
}

/* "cuda" / "cuda-bf16": the CUDA backend or an error; "auto": the CUDA
 * backend when this build has it and a device answers, else the CPU. */
static nctmc_status create_backend(const nctmc_context_params *p, nctmc_backend **out)
{
    const char *name = p->backend ? p->backend : "auto";
    char err[256] = "";
    bool is_auto = strcmp(name, "auto") == 0;
    bool bf16 = strcmp(name, "cuda-bf16") == 0;
    if (bf16 || strcmp(name, "cuda") == 0 || is_auto) {
#ifdef NCTMC_HAVE_CUDA
        bool no_device = false;
        *out = nctmc_cuda_backend_create(0, bf16, err, sizeof err, &no_device);
        if (*out) {
            if (is_auto)
                log_params(p, NCTMC_LOG_INFO, "backend auto: using the CUDA backend");
            return NCTMC_OK;
        }
        if (!is_auto)
            return fail_params(p, NCTMC_ERR_BACKEND, "cuda backend: %s", err);
        log_params(p, no_device ? NCTMC_LOG_INFO : NCTMC_LOG_WARN,
                   "backend auto: CUDA backend unavailable (%s); using the CPU backend", err);
#else
        if (!is_auto)
            return fail_params(p, NCTMC_ERR_UNSUPPORTED,
                               "this build of libnctmc has no CUDA backend (it is built when "
                               "the CUDA toolkit is found: -Dcuda=auto|enabled)");
        log_params(p, NCTMC_LOG_INFO,
                   "backend auto: this build has no CUDA backend; using the CPU backend");
#endif
    }
    if (strcmp(name, "cpu") == 0 || is_auto) {
        *out = nctmc_cpu_backend_create(p->n_threads, err, sizeof err);
        if (!*out)
            return fail_params(p, NCTMC_ERR_OUT_OF_MEMORY, "cpu backend: %s", err);
        return NCTMC_OK;
    }
    return fail_params(p, NCTMC_ERR_NOT_FOUND,
                       "unknown backend \"%.64s\" (known: \"cpu\", \"cuda\", "
                       "\"cuda-bf16\", \"auto\")",
                       name);
}

NCTMC_API nctmc_status nctmc_context_create(const nctmc_context_params *params,
                                            nctmc_context **out)
{
    nctmc_context_params defaults;
    if (!params) {
        nctmc_context_params_init(&defaults);
        params = &defaults;
    }
    if (!out)
        return fail_params(params, NCTMC_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    nctmc_status st = check_context_params(params);
    if (st != NCTMC_OK)
        return st;
    nctmc_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fail_params(params, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    st = create_backend(params, &ctx->backend);
    if (st != NCTMC_OK) {
        free(ctx);
        return st;
    }
    ctx->log_fn = params->log_fn;
    ctx->log_user_data = params->log_user_data;
    ctx->log_level = params->log_level;
    nctmc_log(ctx, NCTMC_LOG_INFO, "libnctmc %s: backend %s with %d threads", nctmc_version(),
              ctx->backend->name, ctx->backend->n_threads);
    *out = ctx;
    return NCTMC_OK;
}

NCTMC_API void nctmc_context_free(nctmc_context *ctx)
{
    if (!ctx)
        return;
    if (ctx->backend)
        ctx->backend->ops->destroy(ctx->backend);
    free(ctx);
}

NCTMC_API const char *nctmc_context_backend(const nctmc_context *ctx)
{
    return ctx && ctx->backend ? ctx->backend->name : "";
}

NCTMC_API int nctmc_context_n_threads(const nctmc_context *ctx)
{
    return ctx && ctx->backend ? ctx->backend->n_threads : 0;
}

NCTMC_API const char *nctmc_context_last_error(const nctmc_context *ctx)
{
    return ctx ? ctx->last_error : "";
}
