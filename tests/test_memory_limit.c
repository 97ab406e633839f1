/*
 * test_memory_limit.c — a CPU context under an address-space limit fails with
 * NCTMC_ERR_OUT_OF_MEMORY instead of hanging (issue 10 item 8).
 *
 * OpenBLAS 0.3.21 retries a failed buffer mapping forever; the backend takes
 * its buffers when the context is created (backends/cpu/cpu_blas_reserve.c).
 * Each case runs in a child process with RLIMIT_AS set a little above what
 * the process already uses, and an alarm: a child that hangs is killed by
 * SIGALRM, which the parent reports as a failure. A limit with room to spare
 * must still give a working context that computes a forward pass.
 *
 * Not in sanitizer builds (meson.build): their runtimes reserve and map
 * memory in ways an address-space limit breaks.
 */
#define _DEFAULT_SOURCE   /* RLIMIT_AS, alarm */

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nctmc.h"
#include "test_util.h"

/* The child's exit codes. */
enum { CHILD_OK = 0, CHILD_OUT_OF_MEMORY = 10, CHILD_OTHER_ERROR = 11, CHILD_NO_LIMIT = 12 };

/* Seconds a child may take before it counts as hung. */
#define CHILD_ALARM_S 60

/* Address space the process maps now, in bytes (VmSize). */
static size_t mapped_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    size_t kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kib) == 1)
            break;
    fclose(f);
    return kib * 1024;
}

/* A one-block model: enough to run OpenBLAS products. */
static int run_forward(nctmc_context *ctx)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.n_layers = 1;
    cfg.d_model = 64;
    cfg.n_heads = 2;
    cfg.cond_dim = 32;
    cfg.vocab_size = 16;
    cfg.seq_len = 32;
    nctmc_model *model = NULL;
    if (nctmc_model_create(ctx, &cfg, &model) != NCTMC_OK)
        return CHILD_OTHER_ERROR;
    int32_t tokens[2 * 32];
    for (int i = 0; i < 2 * 32; i++)
        tokens[i] = i % 16;
    float t[2] = {0.3f, 0.7f};
    float logprobs[2 * 32 * 16], log_rate[2 * 32];
    nctmc_forward_params fp;
    nctmc_forward_params_init(&fp);
    fp.batch = 2;
    fp.length = 32;
    fp.tokens = tokens;
    fp.times = t;
    fp.log_rate = log_rate;
    fp.jump_logprobs = logprobs;
    nctmc_status st = nctmc_model_forward(model, &fp);
    nctmc_model_free(model);
    return st == NCTMC_OK ? CHILD_OK : CHILD_OTHER_ERROR;
}

/* In the child: limit the address space to what is mapped plus `headroom`,
 * create a context with `threads` threads, and run a forward pass. */
static int child(size_t headroom, int threads)
{
    alarm(CHILD_ALARM_S);
    struct rlimit lim = {.rlim_cur = mapped_bytes() + headroom,
                         .rlim_max = mapped_bytes() + headroom};
    if (setrlimit(RLIMIT_AS, &lim) != 0)
        return CHILD_NO_LIMIT;
    char error[512] = "";
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = threads;
    p.error_buffer = error;
    p.error_buffer_size = sizeof error;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    if (st == NCTMC_ERR_OUT_OF_MEMORY) {
        /* with a reason a user can act on: the address space, or (when even
         * the workers' stacks do not fit) the threads */
        bool said = strstr(error, "address space") || strstr(error, "threads");
        if (!said)
            fprintf(stderr, "child: out of memory without a reason: \"%s\"\n", error);
        return said ? CHILD_OUT_OF_MEMORY : CHILD_OTHER_ERROR;
    }
    if (st != NCTMC_OK)
        return CHILD_OTHER_ERROR;
    int rc = run_forward(ctx);
    nctmc_context_free(ctx);
    return rc;
}

/* Runs child() in a child process; its exit code, or -signal. */
static int in_child(size_t headroom, int threads)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child(headroom, threads));
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1000;
    if (WIFSIGNALED(status))
        return -WTERMSIG(status);
    return WEXITSTATUS(status);
}

int main(void)
{
    const size_t mib = (size_t)1 << 20;
    /* Too little room for OpenBLAS's 128 MiB buffer per thread: a clean
     * error, at every thread count, and never a hang (before the fix the
     * first product spun forever in OpenBLAS's blas_memory_alloc). */
    for (int threads = 1; threads <= 4; threads *= 2) {
        size_t tight[] = {16 * mib, 100 * mib, (size_t)threads * 130 * mib};
        for (size_t i = 0; i < sizeof tight / sizeof tight[0]; i++) {
            int rc = in_child(tight[i], threads);
            CHECK(rc == CHILD_OUT_OF_MEMORY,
                  "%d threads, %zu MiB of room: child status %d (want %d = out of memory; "
                  "-%d = killed by the alarm: a hang)",
                  threads, tight[i] / mib, rc, CHILD_OUT_OF_MEMORY, SIGALRM);
        }
        /* room to spare: the context works and computes */
        int rc = in_child((size_t)threads * 400 * mib + 512 * mib, threads);
        CHECK(rc == CHILD_OK, "%d threads with room to spare: child status %d", threads, rc);
    }
    return test_finish("memory_limit");
}
