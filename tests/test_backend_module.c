/*
 * test_backend_module.c — how the core finds, checks and uses the CUDA
 * backend module (lib/backend/backend_module.c), on any machine: stand-in modules
 * (tests/module/fake_backend_module.c) for a well-formed module without a
 * device, a module built for another backend interface, and a shared object
 * without the entry point; a path where nothing is installed; the module
 * found next to the program that holds the core; and, in a CUDA build, the
 * real libnctmc-cuda.so.
 *
 *   test_backend_module NO_DEVICE.so WRONG_ABI.so NO_ENTRY.so [libnctmc-cuda.so]
 *   test_backend_module --child-expect-fake|--child-expect-missing
 *                                            (a copy of it, run by the test)
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend_module.h"
#include "core/context.h"
#include "nctmc.h"
#include "platform/platform.h"
#include "test_util.h"

/* Every message the library logged since the last reset, one per line, and
 * the highest level among them. */
typedef struct log_record {
    char text[4096];
    int max_level;
} log_record;

static void record_log(nctmc_log_level level, const char *message, void *user_data)
{
    log_record *r = user_data;
    size_t used = strlen(r->text);
    snprintf(r->text + used, sizeof r->text - used, "[%d] %s\n", (int)level, message);
    if ((int)level > r->max_level)
        r->max_level = (int)level;
}

/* Creates a context for `backend` with every message recorded into *log;
 * returns the status and frees the context (its backend name in name). */
static nctmc_status try_backend(const char *backend, log_record *log, char *name, size_t size)
{
    memset(log, 0, sizeof *log);
    log->max_level = -1;
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = backend;
    p.n_threads = 1;
    p.log_fn = record_log;
    p.log_user_data = log;
    p.log_level = NCTMC_LOG_DEBUG;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    snprintf(name, size, "%s", nctmc_context_backend(ctx));
    nctmc_context_free(ctx);
    return st;
}

/* The level of the first logged line that contains `text`, or -1. */
static int level_of(const log_record *log, const char *text)
{
    const char *hit = strstr(log->text, text);
    if (!hit)
        return -1;
    while (hit > log->text && hit[-1] != '\n')
        hit--;
    return hit[0] == '[' ? atoi(hit + 1) : -1;
}

static void use_module(const char *path)
{
    if (path)
        setenv(NCTMC_CUDA_MODULE_ENV, path, 1);
    else
        unsetenv(NCTMC_CUDA_MODULE_ENV);
}

/* "auto" always gives a context: the CPU one here, the reason at INFO. */
static void check_auto_falls_back(const char *label)
{
    log_record log;
    char name[32];
    nctmc_status st = try_backend("auto", &log, name, sizeof name);
    CHECK(st == NCTMC_OK && strcmp(name, "cpu") == 0, "%s: auto gives %d \"%s\"", label,
          (int)st, name);
    CHECK(level_of(&log, "using the CPU backend") == NCTMC_LOG_INFO,
          "%s: auto says why at INFO: %s", label, log.text);
}

static void test_not_installed(void)
{
    const char *path = "/nonexistent-nctmc/libnctmc-cuda.so";
    use_module(path);
    const nctmc_backend_module *m = (const nctmc_backend_module *)&m;
    char err[NCTMC_ERROR_SIZE];
    CHECK(cuda_module_load(&m, err, sizeof err) == NCTMC_ERR_UNSUPPORTED && m == NULL,
          "a missing module is NCTMC_ERR_UNSUPPORTED with *out NULL");
    CHECK(strstr(err, "is not installed") && strstr(err, path), "message: %s", err);
    for (int k = 0; k < 2; k++) {
        const char *backend = k ? "cuda-bf16" : "cuda";
        log_record log;
        char name[32];
        CHECK(try_backend(backend, &log, name, sizeof name) == NCTMC_ERR_UNSUPPORTED,
              "%s without the module", backend);
        CHECK(level_of(&log, "the CUDA backend module") == NCTMC_LOG_ERROR &&
                  strstr(log.text, "is not installed"),
              "%s: logged: %s", backend, log.text);
    }
    check_auto_falls_back("not installed");
}

static void test_refused(const char *path, const char *why, const char *label)
{
    use_module(path);
    const nctmc_backend_module *m = NULL;
    char err[NCTMC_ERROR_SIZE];
    CHECK(cuda_module_load(&m, err, sizeof err) == NCTMC_ERR_UNSUPPORTED && m == NULL,
          "%s: refused", label);
    CHECK(strstr(err, why) && strstr(err, path), "%s: message: %s", label, err);
    log_record log;
    char name[32];
    CHECK(try_backend("cuda", &log, name, sizeof name) == NCTMC_ERR_UNSUPPORTED,
          "%s: \"cuda\" is NCTMC_ERR_UNSUPPORTED", label);
    CHECK(strstr(log.text, why), "%s: logged: %s", label, log.text);
    check_auto_falls_back(label);
}

static void test_no_device(const char *path)
{
    use_module(path);
    const nctmc_backend_module *m = NULL;
    char err[NCTMC_ERROR_SIZE] = "";
    CHECK(cuda_module_load(&m, err, sizeof err) == NCTMC_OK && m, "well-formed: %s",
          err);
    if (m) {
        CHECK(strcmp(m->name, "fake") == 0 && m->abi_version == NCTMC_BACKEND_ABI_VERSION,
              "the descriptor is the fake module's");
        bool no_device = false;
        char why[256] = "";
        CHECK(m->create(0, false, why, sizeof why, &no_device) == NULL && no_device,
              "its create finds no device");
    }
    /* without a driver the core says so before asking the module; with one,
     * the module's own "no CUDA device" comes back: NCTMC_ERR_BACKEND both */
    log_record log;
    char name[32];
    CHECK(try_backend("cuda", &log, name, sizeof name) == NCTMC_ERR_BACKEND,
          "no device: \"cuda\" is NCTMC_ERR_BACKEND");
    CHECK(level_of(&log, "no CUDA device: ") == NCTMC_LOG_ERROR, "logged: %s", log.text);
    check_auto_falls_back("no device");
}

/* Without $NCTMC_CUDA_MODULE the module is looked for in the folder of the
 * file holding the core, here this program, then on the loader's path. A
 * copy of this program in a scratch folder, run without LD_LIBRARY_PATH
 * (meson's puts the build's real module on it), must report the folder it
 * looked in, and find the fake module once it lies beside it as
 * libnctmc-cuda.so. */
static bool copy_file(const char *from, const char *to, mode_t mode)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    bool ok = in && out;
    char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = false;
    return ok && chmod(to, mode) == 0;
}

/* Runs `prog mode` without LD_LIBRARY_PATH and $NCTMC_CUDA_MODULE; true
 * when it exits 0. */
static bool run_child(const char *prog, const char *mode)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("LD_LIBRARY_PATH");
        unsetenv(NCTMC_CUDA_MODULE_ENV);
        execl(prog, prog, mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

static void test_found_beside_core(const char *fake)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0, "/proc/self/exe");
    if (n <= 0)
        return;
    self[n] = '\0';
    char made[] = "/tmp/nctmc-module-test-XXXXXX", dir[PATH_MAX];
    bool have_dir = mkdtemp(made) && realpath(made, dir);
    CHECK(have_dir, "scratch folder %s", made);
    if (!have_dir)
        return;
    char prog[PATH_MAX + 16], module[PATH_MAX + 80];
    snprintf(prog, sizeof prog, "%s/prog", dir);
    char file[64];
    plat_module_file_name(NCTMC_CUDA_MODULE_STEM, file, sizeof file);
    snprintf(module, sizeof module, "%s/%s", dir, file);
    if (copy_file(self, prog, 0755)) {
        CHECK(run_child(prog, "--child-expect-missing"), "nothing beside the copy: reported");
        CHECK(copy_file(fake, module, 0644), "module copied into %s", dir);
        CHECK(run_child(prog, "--child-expect-fake"), "the copy found the module beside it");
    } else {
        CHECK(false, "copy of the test program into %s", dir);
    }
    unlink(prog);
    unlink(module);
    rmdir(made);
}

/* In the copy: no module beside it, none on the loader's path. */
static int child_expect_missing(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    const nctmc_backend_module *m = NULL;
    char err[NCTMC_ERROR_SIZE] = "";
    if (cuda_module_load(&m, err, sizeof err) == NCTMC_ERR_UNSUPPORTED &&
        strstr(err, "is not installed") && strstr(err, self) &&
        strstr(err, "loader's search path"))
        return 0;
    fprintf(stderr, "child: expected \"not installed\" naming %s: %s\n", self, err);
    return 1;
}

/* In the copy, with the fake module beside it. */
static int child_expect_fake(void)
{
    const nctmc_backend_module *m = NULL;
    char err[NCTMC_ERROR_SIZE] = "";
    if (cuda_module_load(&m, err, sizeof err) != NCTMC_OK || strcmp(m->name, "fake")) {
        fprintf(stderr, "child: %s\n", err);
        return 1;
    }
    return 0;
}

/* The real module: it loads and matches; "cuda" gives a CUDA context or,
 * without a device, NCTMC_ERR_BACKEND "no CUDA device". */
static void test_real_module(const char *path)
{
    use_module(path);
    const nctmc_backend_module *m = NULL;
    char err[NCTMC_ERROR_SIZE] = "";
    CHECK(cuda_module_load(&m, err, sizeof err) == NCTMC_OK && m, "real module: %s",
          err);
    if (m)
        CHECK(strcmp(m->name, "cuda") == 0 && m->version_number == NCTMC_VERSION_NUMBER,
              "the descriptor is the CUDA backend's");
    for (int k = 0; k < 2; k++) {
        const char *backend = k ? "cuda-bf16" : "cuda";
        log_record log;
        char name[32];
        nctmc_status st = try_backend(backend, &log, name, sizeof name);
        CHECK((st == NCTMC_OK && strcmp(name, backend) == 0) ||
                  (st == NCTMC_ERR_BACKEND && strstr(log.text, "no CUDA device: ")),
              "%s: status %d, logged: %s", backend, (int)st, log.text);
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--child-expect-fake") == 0)
        return child_expect_fake();
    if (argc == 2 && strcmp(argv[1], "--child-expect-missing") == 0)
        return child_expect_missing();
    if (argc < 4) {
        fprintf(stderr, "usage: %s NO_DEVICE.so WRONG_ABI.so NO_ENTRY.so [CUDA.so]\n", argv[0]);
        return 2;
    }
    test_not_installed();
    test_no_device(argv[1]);
    test_refused(argv[2], "backend interface version", "wrong ABI");
    test_refused(argv[3], "is not a libnctmc backend module", "no entry point");
    test_found_beside_core(argv[1]);
    if (argc > 4)
        test_real_module(argv[4]);
    return test_finish("backend_module");
}
