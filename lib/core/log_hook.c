/*
 * log_hook.c — the process-wide log callback (log_hook.h,
 * nctmc_set_log_callback()). A recursive mutex, made once (pthread_once),
 * guards the callback and is held while it runs, so that once
 * nctmc_set_log_callback() returns no other thread is still inside the
 * callback it replaced; recursive, so that the callback may call back into
 * the library (and set the hook) on its own thread. An atomic copy of the
 * level lets a message nobody will receive skip the lock and the
 * formatting.
 */
#include "log_hook.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "base/text_escape.h"

/* The library's one piece of process-wide mutable state (nctmc.h, "The
 * process-wide log callback"). */
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t hook_mutex;
static bool hook_mutex_ok;
static nctmc_log_fn hook_fn;    /* guarded by hook_mutex */
static void *hook_user;         /* guarded by hook_mutex */
/* the lowest level delivered; INT_MAX while no callback is set */
static atomic_int hook_level = INT_MAX;

static void hook_init(void)
{
    pthread_mutexattr_t attr;
    if (pthread_mutexattr_init(&attr) != 0)
        return;
    hook_mutex_ok = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE) == 0 &&
                    pthread_mutex_init(&hook_mutex, &attr) == 0;
    pthread_mutexattr_destroy(&attr);
}

NCTMC_API nctmc_status nctmc_set_log_callback(nctmc_log_fn fn, void *user_data,
                                              nctmc_log_level level)
{
    if (fn && (level < NCTMC_LOG_DEBUG || level > NCTMC_LOG_ERROR))
        return NCTMC_ERR_INVALID_ARGUMENT;
    pthread_once(&hook_once, hook_init);
    if (!hook_mutex_ok)
        return NCTMC_ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&hook_mutex);
    hook_fn = fn;
    hook_user = fn ? user_data : NULL;
    atomic_store_explicit(&hook_level, fn ? (int)level : INT_MAX, memory_order_release);
    pthread_mutex_unlock(&hook_mutex);
    return NCTMC_OK;
}

void log_hook_vemit(nctmc_log_level level, const char *fmt, va_list ap)
{
    if (level < atomic_load_explicit(&hook_level, memory_order_acquire))
        return;
    /* a level was stored, so nctmc_set_log_callback() made the mutex */
    char raw[NCTMC_ERROR_SIZE], msg[NCTMC_ERROR_SIZE];
    vsnprintf(raw, sizeof raw, fmt, ap);
    text_escape(msg, sizeof msg, raw);
    pthread_mutex_lock(&hook_mutex);
    /* the callback may have changed since the first look */
    if (hook_fn && level >= atomic_load_explicit(&hook_level, memory_order_relaxed))
        hook_fn(level, msg, hook_user);
    pthread_mutex_unlock(&hook_mutex);
}

void log_hook_emit(nctmc_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_hook_vemit(level, fmt, ap);
    va_end(ap);
}
