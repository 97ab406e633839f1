/*
 * backend_module.c — finds and loads run-time modules with the dynamic
 * loader (the CUDA backend libnctmc-cuda.so, the MPI communicator
 * libnctmc-mpi.so of lib/comm), the way ggml loads its backends, and checks
 * the CUDA backend's: the core itself links no CUDA or MPI library, so a
 * CPU-only program pays nothing for an engine it does not use.
 */
#define _GNU_SOURCE /* dladdr1, RTLD_DL_LINKMAP, dl_iterate_phdr */
#include "backend_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * A program linked fully statically (-static, -static-pie) has no dynamic
 * loader of its own: glibc's static dlopen would have to bring a second C
 * library (and CUDA's C++ libraries) in beside the program's, which neither
 * glibc nor CUDA supports, so the module is not loaded there. Such a
 * program has no PT_INTERP header; a dynamically linked one has it, also
 * when started through ld.so explicitly. The first object dl_iterate_phdr
 * reports is the program.
 */
static int program_has_interp(struct dl_phdr_info *info, size_t size, void *found)
{
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_INTERP)
            *(bool *)found = true;
    return 1; /* stop after the program */
}

static bool loader_available(void)
{
    bool found = false;
    dl_iterate_phdr(program_has_interp, &found);
    return found;
}

static const char *last_dl_error(void)
{
    const char *e = dlerror();
    return e ? e : "unknown dynamic loader error";
}

/*
 * The folder of the file that holds this code: libnctmc.so when the core
 * is the shared library, the program when it linked libnctmc.a. The loader
 * names the main program "" in its link map, so its path comes from
 * /proc/self/exe. Writes "" when neither is known.
 */
static void core_folder(char *dir, size_t size)
{
    dir[0] = '\0';
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1((void *)&cuda_module_load, &info, (void **)&map, RTLD_DL_LINKMAP) ||
        !map)
        return;
    char path[PATH_MAX];
    if (map->l_name && map->l_name[0]) {
        snprintf(path, sizeof path, "%s", map->l_name);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0)
            return;
        path[n] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash)
        return;
    *slash = '\0';
    snprintf(dir, size, "%s", slash == path ? "/" : path);
}

/* Resolves the entry point of an opened module and checks that it was built
 * for this core's backend interface. */
static nctmc_status check_module(void *handle, const char *where,
                                 const nctmc_backend_module **out, char *err, size_t err_size)
{
    union {
        void *object;
        nctmc_backend_module_entry_fn fn;
    } entry; /* dlsym returns an object pointer; POSIX allows the cast */
    dlerror();
    entry.object = dlsym(handle, NCTMC_BACKEND_MODULE_ENTRY);
    if (!entry.object) {
        snprintf(err, err_size, "%s is not a libnctmc backend module (no %s: %s)", where,
                 NCTMC_BACKEND_MODULE_ENTRY, last_dl_error());
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

/* dlopen's flags: a module and the libraries it brings are never unloaded
 * (RTLD_NODELETE), so closing the handle after the check only balances the
 * loader's count; RTLD_LOCAL keeps their symbols out of the program's
 * namespace. */
#define MODULE_FLAGS (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)

static nctmc_status open_at(const char *path, const char *where, const char *what,
                            void **handle, char *err, size_t err_size)
{
    *handle = dlopen(path, MODULE_FLAGS);
    if (!*handle) {
        snprintf(err, err_size, "the %s module %s cannot be loaded: %s", what, where,
                 last_dl_error());
        return NCTMC_ERR_UNSUPPORTED;
    }
    return NCTMC_OK;
}

nctmc_status module_open(const char *file, const char *env_name, const char *what,
                         void **handle, char *where, size_t where_size, char *err,
                         size_t err_size)
{
    *handle = NULL;
    if (!loader_available()) {
        snprintf(err, err_size,
                 "the %s module %s cannot be loaded: this program is statically linked and "
                 "has no dynamic loader",
                 what, file);
        return NCTMC_ERR_UNSUPPORTED;
    }
    const char *env = getenv(env_name);
    if (env && env[0]) {
        snprintf(where, where_size, "%s (%s)", env, env_name);
        if (access(env, F_OK) != 0) {
            snprintf(err, err_size, "the %s module %s is not installed: no such file", what,
                     where);
            return NCTMC_ERR_UNSUPPORTED;
        }
        return open_at(env, where, what, handle, err, err_size);
    }
    /* next to the core: what an installed libnctmc (any prefix, DESTDIR
     * copies included) uses without help from the loader's path */
    char dir[PATH_MAX];
    core_folder(dir, sizeof dir);
    if (dir[0]) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (access(path, F_OK) == 0) {
            snprintf(where, where_size, "%s", path);
            return open_at(path, path, what, handle, err, err_size);
        }
    }
    snprintf(where, where_size, "%s", file);
    *handle = dlopen(file, MODULE_FLAGS);
    if (!*handle) {
        snprintf(err, err_size,
                 "the %s module %s is not installed (looked in %s and on the loader's search "
                 "path): %s",
                 what, file, dir[0] ? dir : "the core's folder (unknown)", last_dl_error());
        return NCTMC_ERR_UNSUPPORTED;
    }
    return NCTMC_OK;
}

void *module_symbol(void *handle, const char *name)
{
    dlerror();
    return dlsym(handle, name);
}

const char *module_error(void)
{
    return last_dl_error();
}

void module_close(void *handle)
{
    if (handle)
        dlclose(handle);
}

nctmc_status cuda_module_load(const nctmc_backend_module **out, char *err,
                              size_t err_size)
{
    *out = NULL;
    char where[PATH_MAX + 64];
    void *handle = NULL;
    nctmc_status st = module_open(NCTMC_CUDA_MODULE_FILE, NCTMC_CUDA_MODULE_ENV,
                                  "CUDA backend", &handle, where, sizeof where, err, err_size);
    if (st != NCTMC_OK)
        return st;
    st = check_module(handle, where, out, err, err_size);
    dlclose(handle);
    return st;
}

bool cuda_driver_present(char *err, size_t err_size)
{
    if (!loader_available()) {
        snprintf(err, err_size, "this program is statically linked and cannot load the "
                                "NVIDIA driver");
        return false;
    }
    /* RTLD_LAZY: only whether it loads matters; the CUDA runtime opens it
     * again by the same name when the module starts */
    void *handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!handle) {
        snprintf(err, err_size, "the NVIDIA driver is not installed: %s", last_dl_error());
        return false;
    }
    dlclose(handle);
    return true;
}
