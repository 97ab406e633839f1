/*
 * backend_module.c — finds and loads run-time modules with the system's
 * module loader (platform/platform.h): the CUDA backend (libnctmc-cuda.so;
 * libnctmc-cuda.dll on Windows) and the MPI communicator of lib/comm
 * (libnctmc-mpi.so), the way ggml loads its backends, and checks the CUDA
 * backend's: the core itself links no CUDA or MPI library, so a CPU-only
 * program pays nothing for an engine it does not use.
 */
#include "backend_module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

/* Room for a path (Linux's PATH_MAX; Windows' is shorter). */
#define MODULE_PATH_MAX 4096

/* Resolves the entry point of an opened module and checks that it was built
 * for this core's backend interface. */
static nctmc_status check_module(void *handle, const char *where,
                                 const nctmc_backend_module **out, char *err, size_t err_size)
{
    union {
        void *object;
        nctmc_backend_module_entry_fn fn;
    } entry; /* the loader returns an object pointer; POSIX allows the cast */
    char why[256];
    entry.object = plat_module_symbol(handle, NCTMC_BACKEND_MODULE_ENTRY, why, sizeof why);
    if (!entry.object) {
        snprintf(err, err_size, "%s is not a libnctmc backend module (no %s: %s)", where,
                 NCTMC_BACKEND_MODULE_ENTRY, why);
        return NCTMC_ERR_UNSUPPORTED;
    }
    const nctmc_backend_module *m = entry.fn();
    if (!m || m->abi_version != NCTMC_BACKEND_ABI_VERSION) {
        snprintf(err, err_size,
                 "%s was built for backend interface version %u, this libnctmc (%s) needs "
                 "version %u: install the module of the same libnctmc build",
                 where, m ? (unsigned)m->abi_version : 0u, nctmc_version(),
                 (unsigned)NCTMC_BACKEND_ABI_VERSION);
        return NCTMC_ERR_UNSUPPORTED;
    }
    if (m->backend_size != sizeof(nctmc_backend) || m->ops_size != sizeof(nctmc_backend_ops) ||
        m->sample_args_size != sizeof(nctmc_sample_step_args) || !m->create) {
        snprintf(err, err_size,
                 "%s declares backend interface version %u but its structures differ from "
                 "this libnctmc's (%s): install the module of the same libnctmc build",
                 where, (unsigned)m->abi_version, nctmc_version());
        return NCTMC_ERR_UNSUPPORTED;
    }
    *out = m;
    return NCTMC_OK;
}

/* A module and the libraries it brings are never unloaded
 * (plat_module_open()), so closing the handle after a check only balances
 * the loader's count. */
static nctmc_status open_at(const char *path, const char *where, const char *what,
                            void **handle, char *err, size_t err_size)
{
    char why[256];
    *handle = plat_module_open(path, false, why, sizeof why);
    if (!*handle) {
        snprintf(err, err_size, "the %s module %s cannot be loaded: %s", what, where, why);
        return NCTMC_ERR_UNSUPPORTED;
    }
    return NCTMC_OK;
}

nctmc_status module_open(const char *stem, const char *env_name, const char *what,
                         void **handle, char *where, size_t where_size, char *err,
                         size_t err_size)
{
    *handle = NULL;
    char file[64];
    plat_module_file_name(stem, file, sizeof file);
    if (!plat_module_loader_available()) {
        snprintf(err, err_size,
                 "the %s module %s cannot be loaded: this program is statically linked and "
                 "has no dynamic loader",
                 what, file);
        return NCTMC_ERR_UNSUPPORTED;
    }
    const char *env = getenv(env_name);
    if (env && env[0]) {
        snprintf(where, where_size, "%s (%s)", env, env_name);
        if (!plat_path_exists(env)) {
            snprintf(err, err_size, "the %s module %s is not installed: no such file", what,
                     where);
            return NCTMC_ERR_UNSUPPORTED;
        }
        return open_at(env, where, what, handle, err, err_size);
    }
    /* next to the core: what an installed libnctmc (any prefix, DESTDIR
     * copies included) uses without help from the loader's path */
    char dir[MODULE_PATH_MAX];
    plat_module_folder((const void *)&module_open, dir, sizeof dir);
    if (dir[0]) {
        char path[MODULE_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (plat_path_exists(path)) {
            snprintf(where, where_size, "%s", path);
            return open_at(path, path, what, handle, err, err_size);
        }
    }
    snprintf(where, where_size, "%s", file);
    char why[256];
    *handle = plat_module_open(file, false, why, sizeof why);
    if (!*handle) {
        snprintf(err, err_size,
                 "the %s module %s is not installed (looked in %s and on the loader's search "
                 "path): %s",
                 what, file, dir[0] ? dir : "the core's folder (unknown)", why);
        return NCTMC_ERR_UNSUPPORTED;
    }
    return NCTMC_OK;
}

void *module_symbol(void *handle, const char *name, char *why, size_t why_size)
{
    return plat_module_symbol(handle, name, why, why_size);
}

void module_close(void *handle)
{
    if (handle)
        plat_module_close(handle);
}

nctmc_status cuda_module_load(const nctmc_backend_module **out, char *err,
                              size_t err_size)
{
    *out = NULL;
    char where[MODULE_PATH_MAX + 64];
    void *handle = NULL;
    nctmc_status st = module_open(NCTMC_CUDA_MODULE_STEM, NCTMC_CUDA_MODULE_ENV,
                                  "CUDA backend", &handle, where, sizeof where, err, err_size);
    if (st != NCTMC_OK)
        return st;
    st = check_module(handle, where, out, err, err_size);
    module_close(handle);
    return st;
}

bool cuda_driver_present(char *err, size_t err_size)
{
    if (!plat_module_loader_available()) {
        snprintf(err, err_size, "this program is statically linked and cannot load the "
                                "NVIDIA driver");
        return false;
    }
    /* RTLD_LAZY: only whether it loads matters; the CUDA runtime opens it
     * again by the same name when the module starts */
    char why[256];
    void *handle = plat_module_open(plat_cuda_driver_file(), true, why, sizeof why);
    if (!handle) {
        snprintf(err, err_size, "the NVIDIA driver is not installed: %s", why);
        return false;
    }
    plat_module_close(handle);
    return true;
}
