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
 *
 * The re-execution comes too late for a tighter limit: OpenBLAS's load-time
 * constructor, which the dynamic loader runs before main(), starts one
 * server thread per CPU but one, and when a thread's stack cannot be mapped
 * (`ulimit -v 50000`) it raises SIGINT, killing even `nctmc --version` with
 * status 130 before main() could say why. OpenBLAS sizes that server by the
 * CPUs the process may run on (its affinity mask, capped again by
 * OPENBLAS_NUM_THREADS). So on Linux the executable's .preinit_array (run
 * by the loader before any shared library's constructor) narrows the
 * affinity mask to one CPU, OpenBLAS then starts no server thread at all,
 * and the executable's own constructor (run after every library's) puts
 * the mask back before main(). Nothing else runs in between.
 */
#define _GNU_SOURCE   /* setenv, sched_setaffinity */

#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <sched.h>

/* The mask the process started with, while OpenBLAS loads on one CPU. */
static cpu_set_t start_mask;
static int mask_narrowed;

static void one_cpu_while_loading(int argc, char **argv, char **envp)
{
    (void)argc;
    (void)argv;
    (void)envp;
    cpu_set_t one;
    if (sched_getaffinity(0, sizeof start_mask, &start_mask) != 0 ||
        CPU_COUNT(&start_mask) <= 1)
        return;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &start_mask)) {
            CPU_SET(c, &one);
            break;
        }
    mask_narrowed = sched_setaffinity(0, sizeof one, &one) == 0;
}

__attribute__((section(".preinit_array"), used)) static void (*const narrow_at_load)(
    int, char **, char **) = one_cpu_while_loading;

__attribute__((constructor)) static void restore_after_load(void)
{
    if (mask_narrowed)
        sched_setaffinity(0, sizeof start_mask, &start_mask);
    mask_narrowed = 0;
}
#endif

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
