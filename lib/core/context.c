/*
 * context.c — context creation (backend selection), logging and errors.
 */
#include "context.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "backend/backend_module.h"
#include "base/text_escape.h"
#include "log_hook.h"

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

void ctx_log(const nctmc_context *ctx, nctmc_log_level level, const char *fmt, ...)
{
    if (!ctx) {
        /* a call without a context: the process-wide callback, if any */
        va_list ap;
        va_start(ap, fmt);
        log_hook_vemit(level, fmt, ap);
        va_end(ap);
        return;
    }
    /* The lock is taken on a const context: it guards the callback, which
     * nctmc_context_free() may detach from another thread. */
    nctmc_context *c = (nctmc_context *)ctx;
    pthread_mutex_lock(&c->log_mutex);
    va_list ap;
    va_start(ap, fmt);
    log_message(c->log_fn, c->log_user_data, c->log_level, level, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&c->log_mutex);
}

/* The caller's error buffer, when its struct is recent enough to have one
 * and it gave one: the message, NUL-terminated, truncated to fit. */
static void write_error_buffer(const nctmc_context_params *p, const char *msg)
{
    size_t end = offsetof(nctmc_context_params, error_buffer_size) + sizeof p->error_buffer_size;
    if (!p || p->struct_size < end || !p->error_buffer || p->error_buffer_size == 0)
        return;
    snprintf(p->error_buffer, p->error_buffer_size, "%s", msg);
}

/* Before a context exists the only channels for a message are the error
 * buffer and the log callback in the caller's parameters. */
static nctmc_status fail_params(const nctmc_context_params *p, nctmc_status status,
                                const char *fmt, ...) NCTMC_PRINTF(3, 4);
static nctmc_status fail_params(const nctmc_context_params *p, nctmc_status status,
                                const char *fmt, ...)
{
    char msg[NCTMC_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_error_buffer(p, msg);
    if (p && p->log_fn)
        p->log_fn(NCTMC_LOG_ERROR, msg, p->log_user_data);
    else
        log_hook_emit(NCTMC_LOG_ERROR, "%s", msg);
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

static bool init_log_mutex(pthread_mutex_t *mutex)
{
    pthread_mutexattr_t attr;
    if (pthread_mutexattr_init(&attr) != 0)
        return false;
    bool ok = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE) == 0 &&
              pthread_mutex_init(mutex, &attr) == 0;
    pthread_mutexattr_destroy(&attr);
    return ok;
}

NCTMC_API nctmc_status nctmc_context_params_init_sized(nctmc_context_params *params,
                                                      size_t size)
{
    nctmc_context_params d;
    memset(&d, 0, sizeof d);
    d.backend = "auto";
    d.n_threads = 0;
    d.log_level = NCTMC_LOG_WARN;
    return abi_init(params, size, &d, &abi_context_params);
}

/* The allocator hook of the parameters; a caller's struct too short to
 * hold it gets the C library's. */
static nctmc_allocator params_allocator(const nctmc_context_params *p)
{
    nctmc_allocator a = {NULL, NULL, NULL};
    if (p->struct_size >= offsetof(nctmc_context_params, alloc_user_data) + sizeof(void *)) {
        a.alloc_fn = p->alloc_fn;
        a.free_fn = p->free_fn;
        a.user_data = p->alloc_user_data;
    }
    return a;
}

static nctmc_status check_context_params(const nctmc_context_params *p)
{
    if (p->n_threads < 0 || p->n_threads > 4096)
        return fail_params(p, NCTMC_ERR_INVALID_ARGUMENT,
                           "n_threads must be in [0, 4096] (0 = all cores), got %d",
                           p->n_threads);
    if (p->log_level < NCTMC_LOG_DEBUG || p->log_level > NCTMC_LOG_ERROR)
        return fail_params(p, NCTMC_ERR_INVALID_ARGUMENT, "log_level %d is not a level",
                           (int)p->log_level);
    nctmc_allocator a = params_allocator(p);
    if (!a.alloc_fn != !a.free_fn)
        return fail_params(p, NCTMC_ERR_INVALID_ARGUMENT,
                           "alloc_fn and free_fn must both be set or both be NULL");
    return NCTMC_OK;
}

/* NCTMC_OK when the NVIDIA driver loads, else NCTMC_ERR_BACKEND with "no
 * CUDA device: <why>" (clearer than the CUDA runtime's "insufficient
 * driver", which is what it says when there is none). */
static nctmc_status check_driver(char *err, size_t err_size, bool *no_device)
{
    char why[NCTMC_ERROR_SIZE - 32];
    if (cuda_driver_present(why, sizeof why))
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
    nctmc_status st = cuda_module_load(&module, err, err_size);
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
static nctmc_status create_backend(const nctmc_context_params *p, const nctmc_allocator *alloc,
                                   nctmc_backend **out)
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
        *out = cpu_backend_create_with(p->n_threads, alloc, err, sizeof err);
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
    /* The caller's struct, whatever its size, read into one of this build's
     * (the fields an older caller lacks keep their defaults). Its log
     * callback can report a failure to read it only when the struct is at
     * least the first published size, which holds the callback. */
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    if (params) {
        char err[NCTMC_ERROR_SIZE];
        nctmc_status st = abi_read(params, &p, sizeof p, &abi_context_params, err, sizeof err);
        if (st != NCTMC_OK) {
            if (out)
                *out = NULL;
            if (abi_size(params) >= abi_context_params.first_size)
                fail_params(params, st, "%s", err);
            return st;
        }
    }
    params = &p;
    write_error_buffer(params, "");
    if (!out)
        return fail_params(params, NCTMC_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    nctmc_status st = check_context_params(params);
    if (st != NCTMC_OK)
        return st;
    nctmc_allocator alloc = params_allocator(params);
    nctmc_context *ctx = mem_calloc(&alloc, 1, sizeof *ctx);
    if (!ctx)
        return fail_params(params, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    ctx->alloc = alloc;
    if (!init_log_mutex(&ctx->log_mutex)) {
        mem_free(&alloc, ctx);
        return fail_params(params, NCTMC_ERR_OUT_OF_MEMORY, "cannot create a mutex");
    }
    atomic_init(&ctx->refs, 1);
    st = create_backend(params, &ctx->alloc, &ctx->backend);
    if (st != NCTMC_OK) {
        pthread_mutex_destroy(&ctx->log_mutex);
        mem_free(&alloc, ctx);
        return st;
    }
    ctx->backend->alloc = &ctx->alloc;
    ctx->log_fn = params->log_fn;
    ctx->log_user_data = params->log_user_data;
    ctx->log_level = params->log_level;
    ctx_log(ctx, NCTMC_LOG_INFO, "libnctmc %s: backend %s with %d threads", nctmc_version(),
            ctx->backend->name, ctx->backend->n_threads);
    *out = ctx;
    return NCTMC_OK;
}

void ctx_retain(nctmc_context *ctx)
{
    atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
}

void ctx_release(nctmc_context *ctx)
{
    if (!ctx)
        return;
    /* acq_rel: whatever a releasing thread did with the context happens
     * before the destruction by whichever thread drops the last reference */
    if (atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (ctx->backend)
        ctx->backend->ops->destroy(ctx->backend);
    pthread_mutex_destroy(&ctx->log_mutex);
    nctmc_allocator alloc = ctx->alloc;
    mem_free(&alloc, ctx);
}

/* The caller gives up its handle: models and samplers may keep the backend
 * alive, but no message reaches the caller's callback any more. */
NCTMC_API void nctmc_context_free(nctmc_context *ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&ctx->log_mutex);
    ctx->log_fn = NULL;
    ctx->log_user_data = NULL;
    pthread_mutex_unlock(&ctx->log_mutex);
    ctx_release(ctx);
}

NCTMC_API const char *nctmc_context_backend(const nctmc_context *ctx)
{
    return ctx && ctx->backend ? ctx->backend->name : "";
}

NCTMC_API int32_t nctmc_context_n_threads(const nctmc_context *ctx)
{
    return ctx && ctx->backend ? ctx->backend->n_threads : 0;
}

NCTMC_API const char *nctmc_context_last_error(const nctmc_context *ctx)
{
    return ctx ? ctx->last_error : "";
}
