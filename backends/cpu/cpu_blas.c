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
 * build), the table holds the linked functions.
 *
 * The table is process-wide, written once under pthread_once and read-only
 * after; a program that already has OpenBLAS loaded gets that copy.
 */
#include "cpu_blas.h"

#include <pthread.h>
#include <stdio.h>

#include "platform/platform.h"

#ifndef NCTMC_OPENBLAS_SONAME
#define NCTMC_OPENBLAS_SONAME "libopenblas.so.0"
#endif

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static cpu_blas blas_table;
static bool blas_loaded;
static char blas_why[256];

#ifdef NCTMC_OPENBLAS_LINKED
static void blas_init(void)
{
    blas_table.sgemm = cblas_sgemm;
    blas_table.set_num_threads = openblas_set_num_threads;
    blas_table.get_config = openblas_get_config;
    blas_loaded = true;
}
#else
/* The address of `name` in module, or NULL with blas_why written. */
static void *blas_symbol(void *module, const char *name)
{
    char why[200];
    void *p = plat_module_symbol(module, name, why, sizeof why);
    if (!p)
        snprintf(blas_why, sizeof blas_why, "%s has no %s: %s", NCTMC_OPENBLAS_SONAME, name,
                 why);
    return p;
}

static void blas_init(void)
{
    char why[200];
    void *module = plat_module_open_one_cpu(NCTMC_OPENBLAS_SONAME, why, sizeof why);
    if (!module) {
        snprintf(blas_why, sizeof blas_why, "cannot load OpenBLAS (%s): %s",
                 NCTMC_OPENBLAS_SONAME, why);
        return;
    }
    void *sgemm = blas_symbol(module, "cblas_sgemm");
    void *threads = sgemm ? blas_symbol(module, "openblas_set_num_threads") : NULL;
    void *config = threads ? blas_symbol(module, "openblas_get_config") : NULL;
    if (!config)
        return;
    /* object pointers to function pointers: POSIX guarantees dlsym's work */
    *(void **)&blas_table.sgemm = sgemm;
    *(void **)&blas_table.set_num_threads = threads;
    *(void **)&blas_table.get_config = config;
    blas_loaded = true;
}
#endif

bool cpu_blas_load(char *err, size_t err_size)
{
    pthread_once(&blas_once, blas_init);
    if (!blas_loaded)
        snprintf(err, err_size, "%s", blas_why);
    return blas_loaded;
}

const cpu_blas *cpu_blas_functions(void)
{
    return &blas_table;
}
