/*
 * context.c — context creation (backend selection), logging and errors.
 */
#include "context.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_module.h"

nctmc_status nctmc_fail(char *buf, size_t size, nctmc_status status, const char *fmt, ...)
{
    if (buf && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, size, fmt, ap);
        va_end(ap);
    }
    return status;
}

static void log_message(nctmc_log_fn fn, void *user, nctmc_log_level min_level,
                        nctmc_log_level level, const char *fmt, va_list ap)
{
    if (!fn || level < min_level)
        return;
    char msg[NCTMC_ERROR_SIZE];
    vsnprintf(msg, sizeof msg, fmt, ap);
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

/* NCTMC_OK when the NVIDIA driver loads, else NCTMC_ERR_BACKEND with "no
 * CUDA device: <why>" (clearer than the CUDA runtime's "insufficient
 * driver", which is what it says when there is none). */
static nctmc_status check_driver(char *err, size_t err_size, bool *no_device)
{
    char why[NCTMC_ERROR_SIZE - 32];
    if (nctmc_cuda_driver_present(why, sizeof why))
        return NCTMC_OK;
    snprintf(err, err_size, "no CUDA device: %s", why);
    *no_device = true;
    return NCTMC_ERR_BACKEND;
}

/* "cuda" / "cuda-bf16" from the CUDA backend module: the backend, or
 * NCTMC_ERR_UNSUPPORTED (no module) / NCTMC_ERR_BACKEND (no device, or the
 * device failed) with the reason in err and *no_device set when there is
 * no usable device. */
static nctmc_status create_cuda_backend(bool bf16, nctmc_backend **out, char *err,
                                        size_t err_size, bool *no_device)
{
    const nctmc_backend_module *module = NULL;
    *no_device = false;
    nctmc_status st = nctmc_cuda_module_load(&module, err, err_size);
    if (st == NCTMC_OK)
        st = check_driver(err, err_size, no_device);
    if (st != NCTMC_OK)
        return st;
    char why[256] = "";
    *out = module->create(0, bf16, why, sizeof why, no_device);
    if (*out)
        return NCTMC_OK;
    /* the module says "no CUDA device: ..." itself where that is the reason */
    snprintf(err, err_size, "%s%s", *no_device ? "" : "cuda backend: ", why);
    return NCTMC_ERR_BACKEND;
}

/* "cuda" / "cuda-bf16": the CUDA backend or an error; "auto": the CUDA
 * backend when the driver loads, the module is installed and a device
 * answers, else the CPU, with the reason at INFO (WARN when a device exists
 * but failed). "auto" asks for the driver before the module so that a
 * machine without one never loads CUDA's libraries (hundreds of MB). */
static nctmc_status create_backend(const nctmc_context_params *p, nctmc_backend **out)
{
    const char *name = p->backend ? p->backend : "auto";
    char err[NCTMC_ERROR_SIZE] = "";
    bool is_auto = strcmp(name, "auto") == 0;
    bool bf16 = strcmp(name, "cuda-bf16") == 0;
    bool no_device = false;
    if (bf16 || strcmp(name, "cuda") == 0) {
        nctmc_status st = create_cuda_backend(bf16, out, err, sizeof err, &no_device);
        return st == NCTMC_OK ? st : fail_params(p, st, "%s", err);
    }
    if (is_auto) {
        nctmc_status st = check_driver(err, sizeof err, &no_device);
        if (st == NCTMC_OK)
            st = create_cuda_backend(false, out, err, sizeof err, &no_device);
        if (st == NCTMC_OK) {
            log_params(p, NCTMC_LOG_INFO, "backend auto: using the CUDA backend");
            return NCTMC_OK;
        }
        /* a device that exists but failed deserves a warning */
        bool failed_device = st == NCTMC_ERR_BACKEND && !no_device;
        log_params(p, failed_device ? NCTMC_LOG_WARN : NCTMC_LOG_INFO,
                   "backend auto: %s; using the CPU backend", err);
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
