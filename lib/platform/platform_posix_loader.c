/*
 * platform_posix_loader.c — platform.h for POSIX systems, the part that
 * needs GNU extensions: modules (dlopen, dladdr1, dl_iterate_phdr) and the
 * core count (sched_getaffinity). Files and maps are in platform_posix.c.
 */
#define _GNU_SOURCE /* dladdr1, RTLD_DL_LINKMAP, dl_iterate_phdr, sched_getaffinity */

#include "platform.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- cores ------------------------------------------------------ */

int plat_cpu_count(void)
{
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1)
        return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}

/* ---- modules -------------------------------------------------------------------- */

void plat_module_file_name(const char *stem, char *name, size_t size)
{
    snprintf(name, size, "lib%s.so", stem);
}

const char *plat_cuda_driver_file(void)
{
    return "libcuda.so.1";
}

/*
 * A program linked fully statically (-static, -static-pie) has no dynamic
 * loader of its own: glibc's static dlopen would have to bring a second C
 * library (and CUDA's C++ libraries) in beside the program's, which neither
 * glibc nor CUDA supports, so no module is loaded there. Such a program has
 * no PT_INTERP header; a dynamically linked one has it, also when started
 * through ld.so explicitly. The first object dl_iterate_phdr reports is the
 * program.
 */
static int program_has_interp(struct dl_phdr_info *info, size_t size, void *found)
{
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_INTERP)
            *(bool *)found = true;
    return 1; /* stop after the program */
}

bool plat_module_loader_available(void)
{
    bool found = false;
    dl_iterate_phdr(program_has_interp, &found);
    return found;
}

/* The loader names the main program "" in its link map, so its path comes
 * from /proc/self/exe. */
void plat_module_folder(const void *code, char *dir, size_t size)
{
    dir[0] = '\0';
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1(code, &info, (void **)&map, RTLD_DL_LINKMAP) || !map)
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

bool plat_path_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static void dl_reason(char *why, size_t why_size)
{
    const char *e = dlerror();
    snprintf(why, why_size, "%s", e ? e : "unknown dynamic loader error");
}

/* RTLD_NODELETE: the module and the libraries it brings are never unloaded;
 * RTLD_LOCAL keeps their symbols out of the program's namespace. */
void *plat_module_open(const char *path, bool lazy, char *why, size_t why_size)
{
    void *handle = dlopen(path, lazy ? RTLD_LAZY | RTLD_LOCAL
                                     : RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle)
        dl_reason(why, why_size);
    return handle;
}

void *plat_module_symbol(void *module, const char *name, char *why, size_t why_size)
{
    dlerror();
    void *p = dlsym(module, name);
    if (!p)
        dl_reason(why, why_size);
    return p;
}

void plat_module_close(void *module)
{
    dlclose(module);
}

void *plat_module_open_one_cpu(const char *path, char *why, size_t why_size)
{
#if defined(__linux__)
    /* sched_setaffinity(0) is the calling thread's mask, not the process's */
    cpu_set_t all, one;
    bool narrowed = false;
    if (sched_getaffinity(0, sizeof all, &all) == 0 && CPU_COUNT(&all) > 1) {
        CPU_ZERO(&one);
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &all)) {
                CPU_SET(c, &one);
                break;
            }
        narrowed = sched_setaffinity(0, sizeof one, &one) == 0;
    }
    void *handle = plat_module_open(path, false, why, why_size);
    if (narrowed)
        sched_setaffinity(0, sizeof all, &all);
    return handle;
#else
    return plat_module_open(path, false, why, why_size);
#endif
}
