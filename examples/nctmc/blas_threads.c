/*
 * blas_threads.c — runs the tool with OpenBLAS's own threads turned off.
 *
 * libnctmc calls OpenBLAS single-threaded and parallelises around it, so
 * OpenBLAS's thread server is never used; but OpenBLAS starts it when the
 * library loads, before main(), and each server thread maps a 128 MiB work
 * buffer as it starts. Under an address-space limit that mapping fails and
 * OpenBLAS (0.3.21) retries it forever: the thread spins, and the exit
 * handler that joins it hangs the process, even for `nctmc --version`.
 * OPENBLAS_NUM_THREADS is read only at load time, so the tool sets it to 1
 * and executes itself again, once, before doing anything else.
 */
#define _DEFAULT_SOURCE   /* setenv */

#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_single_threaded_blas(char **argv)
{
#ifdef __linux__
    const char *set = getenv("OPENBLAS_NUM_THREADS");
    if (set && strcmp(set, "1") == 0)
        return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return;
    /* on success this does not return; on failure (no /proc) the tool
     * carries on as it is, with OpenBLAS's idle threads */
    execv("/proc/self/exe", argv);
#else
    (void)argv;
#endif
}
