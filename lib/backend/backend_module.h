/*
 * backend_module.h — finding and loading backend modules (the CUDA backend,
 * libnctmc-cuda.so) at run time, so that the core library links no GPU
 * library. The module's interface is in backend.h; where it is looked for
 * is documented in docs/backends.md.
 */
#ifndef NCTMC_BACKEND_MODULE_H
#define NCTMC_BACKEND_MODULE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

/* The CUDA backend module's name (its file: plat_module_file_name(), e.g.
 * libnctmc-cuda.so, libnctmc-cuda.dll), and the environment variable that
 * names its path instead (tests, unusual installs). */
#define NCTMC_CUDA_MODULE_STEM "nctmc-cuda"
#define NCTMC_CUDA_MODULE_ENV "NCTMC_CUDA_MODULE"

/*
 * Loads the CUDA backend module and returns its descriptor in *out. Looked
 * for, in this order:
 *   1. at the path in $NCTMC_CUDA_MODULE when it is set and not empty (and
 *      then only there);
 *   2. in the folder of the file that holds the core (libnctmc.so, or the
 *      program that linked libnctmc.a), found with dladdr (GetModuleHandleEx on Windows);
 *   3. by name on the dynamic loader's search path.
 * Once loaded the module stays loaded for the rest of the process (the CUDA
 * libraries keep process-wide state that is not made to be unloaded), so
 * the descriptor and the backends it creates stay valid.
 * Fails with NCTMC_ERR_UNSUPPORTED and the reason in err: not found ("...
 * is not installed: <the loader's reason>"), found but not loadable, no entry point,
 * or a backend interface other than this core's (NCTMC_BACKEND_ABI_VERSION).
 */
nctmc_status cuda_module_load(const nctmc_backend_module **out, char *err,
                              size_t err_size);

/*
 * Opens the module named by `stem` ("nctmc-mpi": libnctmc-mpi.so, or
 * libnctmc-mpi.dll on Windows; for messages `what`, "MPI") by the same
 * search as the CUDA module, with $env_name in place of $NCTMC_CUDA_MODULE,
 * and writes where it was found into `where`. The module stays loaded for
 * the rest of the process: the caller resolves its entry point with
 * module_symbol() and may then module_close() the handle. Fails with
 * NCTMC_ERR_UNSUPPORTED and the reason in err.
 */
nctmc_status module_open(const char *stem, const char *env_name, const char *what,
                         void **handle, char *where, size_t where_size, char *err,
                         size_t err_size);

/* A symbol of an opened module, or NULL with the loader's reason in why. */
void *module_symbol(void *handle, const char *name, char *why, size_t why_size);

/* Balances module_open() (the module itself stays loaded). */
void module_close(void *handle);

/* Whether the NVIDIA driver's library (libcuda.so.1) can be loaded: a
 * cheap test, before loading the module and CUDA's libraries (hundreds of
 * megabytes), that a CUDA device could exist at all. On false, err says
 * why. */
bool cuda_driver_present(char *err, size_t err_size);

#endif /* NCTMC_BACKEND_MODULE_H */
