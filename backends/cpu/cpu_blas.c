/*
 * cpu_blas.c — loads OpenBLAS when the first CPU backend is created, not
 * when the host program starts.
 *
 * A library the program links is loaded, and its constructor run, before
 * main(). OpenBLAS's constructor (0.3.21) starts a thread server with one
 * thread per CPU but one the process may use, each mapping a 128 MiB
 * buffer: under an address-space limit (ulimit -v) a thread stack that
 * cannot be mapped makes it raise SIGINT before main() (a host using
 * libnctmc died with status 130 at 50 MB), and a buffer that cannot be
 * mapped leaves a server thread retrying for ever, which hangs the process
 * when OpenBLAS joins its threads at exit. libnctmc never uses that server
 * (it calls OpenBLAS single-threaded from its own pool). So on Linux
 * libnctmc has no link to OpenBLAS: it loads it here, by its soname
 * (NCTMC_OPENBLAS_SONAME, from the build), with the loading thread allowed
 * on one CPU while OpenBLAS's constructor runs (plat_module_open_one_cpu),
 * so that the server starts no thread; then sets OpenBLAS to one thread.
 * The same library does the same arithmetic, so results do not change.
 * Where OpenBLAS is linked instead (NCTMC_OPENBLAS_LINKED: the Windows
 * build), the table holds the linked functions; so it does in a program
 * linked with the static libnctmc.a, which carries cpu_blas_linked.c's
 * table of the functions the program links (a fully static program has no
 * loader to load OpenBLAS with).
 *
 * The table is process-wide, written once under a lock and read-only after;
 * a failed load is not remembered (a later context, after the limit was
 * raised or OpenBLAS installed, tries again). A program that already has
 * OpenBLAS loaded gets that copy.
 */
#include "cpu_blas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "platform/platform.h"

#ifndef NCTMC_OPENBLAS_SONAME
#define NCTMC_OPENBLAS_SONAME "libopenblas.so.0"
#endif

static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_blas blas_table;
static atomic_bool blas_loaded;

#ifdef NCTMC_OPENBLAS_LINKED
static bool blas_init(char *err, size_t err_size)
{
    (void)err;
    (void)err_size;
    blas_table.sgemm = cblas_sgemm;
    blas_table.set_num_threads = openblas_set_num_threads;
    blas_table.get_config = openblas_get_config;
    return true;
}
#else
/* Defined only in the static libnctmc.a (cpu_blas_linked.c). */
extern const cpu_blas cpu_blas_linked __attribute__((weak));

/* The address of `name` in module, or NULL with the reason in err. */
static void *blas_symbol(void *module, const char *name, char *err, size_t err_size)
{
    char why[200];
    void *p = plat_module_symbol(module, name, why, sizeof why);
    if (!p)
        snprintf(err, err_size, "%s has no %s: %s", NCTMC_OPENBLAS_SONAME, name, why);
    return p;
}

static bool blas_init(char *err, size_t err_size)
{
    if (&cpu_blas_linked != NULL) {
        blas_table = cpu_blas_linked;
        return true;
    }
    char why[200];
    void *module = plat_module_open_one_cpu(NCTMC_OPENBLAS_SONAME, why, sizeof why);
    if (!module) {
        /* the loader's reason says which: a file not found, or a segment
         * that could not be mapped (an address-space limit) */
        snprintf(err, err_size,
                 "cannot load OpenBLAS (%s: %s); is it installed, and is the address "
                 "space large enough for it?",
                 NCTMC_OPENBLAS_SONAME, why);
        return false;
    }
    void *sgemm = blas_symbol(module, "cblas_sgemm", err, err_size);
    void *threads = sgemm ? blas_symbol(module, "openblas_set_num_threads", err, err_size)
                          : NULL;
    void *config = threads ? blas_symbol(module, "openblas_get_config", err, err_size) : NULL;
    if (!config) {
        plat_module_close(module);
        return false;
    }
    /* object pointers to function pointers: POSIX guarantees dlsym's work */
    *(void **)&blas_table.sgemm = sgemm;
    *(void **)&blas_table.set_num_threads = threads;
    *(void **)&blas_table.get_config = config;
    return true;
}
#endif

bool cpu_blas_load(char *err, size_t err_size)
{
    if (atomic_load(&blas_loaded))
        return true;
    pthread_mutex_lock(&blas_lock);
    bool loaded = atomic_load(&blas_loaded) || blas_init(err, err_size);
    atomic_store(&blas_loaded, loaded);
    pthread_mutex_unlock(&blas_lock);
    return loaded;
}

const cpu_blas *cpu_blas_functions(void)
{
    return &blas_table;
}
