/*
 * bench_mmap.c — loading a large checkpoint by copying vs by mapping it
 * (nctmc_model_load_ex(), docs/performance.md "Loading"): load time and the
 * process's resident memory (VmRSS) right after the load, before any
 * forward pass, then after one forward pass.
 *
 * The model (default "paper-small": 12 layers, d 768, L 512, V 50304,
 * 162M parameters, a 650 MB file) is created, saved to a private temporary
 * folder and freed; each measurement then runs in a fresh child process
 * (so resident memory starts from nothing), with the file's pages dropped
 * from the page cache first (posix_fadvise DONTNEED: "cold", as after a
 * reboot) or left there ("warm", as when another process uses the model).
 * The file and its folder are removed at the end, on failure, and on
 * SIGINT / SIGTERM.
 *
 * Each (mode, cache) is measured --reps times (default 3); the lines give
 * the medians.
 *
 * Output: one line per (mode, cache), key=value pairs:
 *   bench=load config=... mode=copy|auto|lazy cache=cold|warm file_mb=...
 *     load_s=... rss_load_mb=... rss_ratio=... forward_s=... rss_forward_mb=...
 * rss_load_mb is VmRSS after the load minus VmRSS before it (context
 * created), rss_ratio that over the file's size; forward_s and
 * rss_forward_mb are the first forward pass (batch 1, --length positions)
 * and the resident growth after it. Then, for copy and auto, two
 * processes hold the model at once after a forward pass each:
 *   bench=share config=... mode=... processes=2 rss_mb_each=...
 *     pss_mb_each=... pss_over_rss=...
 * (Pss counts a page shared by n processes as 1/n of a page: about 0.5 of
 * the Rss when the weights are one shared copy, about 1 when each process
 * has its own). A last line says whether the mapped load ("auto") stayed
 * within 10% of the file size.
 *
 * Usage: bench_mmap [--config paper-small|cpu-small|tiny] [--threads N]
 *        [--length L] [--reps R] [--dir DIR]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

/* The file the signal handler removes, and the sharing runs that failed:
 * a benchmark program's globals. */
static char g_dir[512], g_file[600];
static int g_share_failures;

static void cleanup(void)
{
    if (g_file[0])
        unlink(g_file);
    if (g_dir[0])
        rmdir(g_dir);
}

static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* VmRSS of this process in bytes, or -1. */
static long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static void drop_from_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

typedef struct result {
    double load_s, forward_s;
    long long rss_load, rss_forward;
    int ok;
} result;

static const char *mode_names[] = {"copy", "auto", "lazy"};
static const nctmc_load_mapping modes[] = {NCTMC_LOAD_COPY, NCTMC_LOAD_MAP_AUTO,
                                           NCTMC_LOAD_MAP_LAZY};

/* The child's side: load, measure, one forward pass; the model and its
 * context stay in *ctx_out and *model_out (NULL on failure). */
static result load_and_forward(int mode, int threads, int length, nctmc_context **ctx_out,
                               nctmc_model **model_out)
{
    result r = {0, 0, 0, 0, 0};
    *ctx_out = NULL;
    *model_out = NULL;
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = threads;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return r;
    nctmc_load_params lp;
    nctmc_load_params_init(&lp);
    lp.mapping = modes[mode];
    long long before = rss_bytes();
    double t0 = now_s();
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_load_ex(ctx, g_file, &lp, &m);
    r.load_s = now_s() - t0;
    r.rss_load = rss_bytes() - before;
    if (st != NCTMC_OK) {
        fprintf(stderr, "load: %s\n", nctmc_context_last_error(ctx));
        nctmc_context_free(ctx);
        return r;
    }
    int32_t S = nctmc_model_vocab_size(m);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)length);
    for (int i = 0; i < length; i++)
        tokens[i] = (i * 7919) % S;
    float t = 0.5f, *log_rate = malloc(sizeof(float) * (size_t)length);
    nctmc_forward_params fp;
    nctmc_forward_params_init(&fp);
    fp.batch = 1;
    fp.length = length;
    fp.tokens = tokens;
    fp.times = &t;
    fp.log_rate = log_rate;
    t0 = now_s();
    st = nctmc_model_forward(m, &fp);
    r.forward_s = now_s() - t0;
    r.rss_forward = rss_bytes() - before;
    r.ok = st == NCTMC_OK && nctmc_model_is_mapped(m) == (modes[mode] != NCTMC_LOAD_COPY);
    if (st != NCTMC_OK)
        fprintf(stderr, "forward: %s\n", nctmc_model_last_error(m));
    free(tokens);
    free(log_rate);
    *ctx_out = ctx;
    *model_out = m;
    return r;
}

static result measure(int mode, int threads, int length)
{
    nctmc_context *ctx;
    nctmc_model *m;
    result r = load_and_forward(mode, threads, length, &ctx, &m);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return r;
}

/* Rss and Pss (the resident pages, shared ones divided by the number of
 * processes that map them) of this process, in bytes. */
static void rss_pss(long long *rss, long long *pss)
{
    *rss = *pss = -1;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return;
    char line[256];
    long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Rss: %lld kB", &kb) == 1)
            *rss = kb * 1024;
        else if (sscanf(line, "Pss: %lld kB", &kb) == 1)
            *pss = kb * 1024;
    }
    fclose(f);
}

#define SHARERS 2

/* SHARERS processes load the model at once and run a forward pass; while
 * all of them hold it (two barriers: every process has finished its pass
 * before any reads its numbers, and has read them before any lets go),
 * each reads its Rss and Pss. Mapped, the weights are
 * one set of page-cache pages: each process's Pss is about its Rss divided
 * by SHARERS; copied, each process holds its own. */
static void measure_sharing(const char *config, int mode, int threads, int length)
{
    /* one pipe per direction and barrier, so that no process can take a
     * byte meant for another; each side closes the ends it does not use,
     * so that a process that dies ends the others' reads */
    int ready[2], go[2], done[2], back[2];
    if (pipe(ready) != 0 || pipe(go) != 0 || pipe(done) != 0 || pipe(back) != 0)
        return;
    pid_t pids[SHARERS];
    for (int k = 0; k < SHARERS; k++) {
        pids[k] = fork();
        if (pids[k] != 0)
            continue;
        close(ready[0]);
        close(go[1]);
        close(done[1]);
        close(back[0]);
        nctmc_context *ctx;
        nctmc_model *m;
        result r = load_and_forward(mode, threads, length, &ctx, &m);
        char c = r.ok ? 'y' : 'n';
        long long v[2] = {-1, -1};
        if (write(ready[1], &c, 1) == 1 && read(go[0], &c, 1) == 1)
            rss_pss(&v[0], &v[1]);
        ssize_t w = write(back[1], v, sizeof v);
        /* hold the map until every process has read its numbers */
        if (read(done[0], &c, 1) != 1)
            w = -1;
        nctmc_model_free(m);
        nctmc_context_free(ctx);
        _exit(w == (ssize_t)sizeof v ? 0 : 1);
    }
    close(ready[1]);
    close(go[0]);
    close(done[0]);
    close(back[1]);
    int ok = 1;
    char c;
    for (int k = 0; k < SHARERS; k++)
        ok &= read(ready[0], &c, 1) == 1 && c == 'y';
    for (int k = 0; k < SHARERS; k++)
        ok &= write(go[1], "g", 1) == 1;
    long long rss = 0, pss = 0, v[2];
    for (int k = 0; k < SHARERS; k++) {
        ok &= read(back[0], v, sizeof v) == (ssize_t)sizeof v && v[0] >= 0 && v[1] >= 0;
        rss += v[0];
        pss += v[1];
    }
    for (int k = 0; k < SHARERS; k++)
        ok &= write(done[1], "d", 1) == 1;
    close(ready[0]);
    close(go[1]);
    close(done[1]);
    close(back[0]);
    for (int k = 0; k < SHARERS; k++)
        if (pids[k] > 0)
            waitpid(pids[k], NULL, 0);
    printf("bench=share config=%s mode=%s processes=%d rss_mb_each=%.1f pss_mb_each=%.1f "
           "pss_over_rss=%.3f%s\n",
           config, mode_names[mode], SHARERS, (double)rss / SHARERS / 1e6,
           (double)pss / SHARERS / 1e6, rss > 0 ? (double)pss / (double)rss : 0.0,
           ok ? "" : " FAILED");
    fflush(stdout);
    g_share_failures += !ok;
}

/* Runs measure() in a fresh process; its result comes back through a pipe. */
static result measure_in_child(int mode, int threads, int length)
{
    result r = {0, 0, 0, 0, 0};
    int fds[2];
    if (pipe(fds) != 0)
        return r;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        result c = measure(mode, threads, length);
        ssize_t w = write(fds[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fds[1]);
    if (pid > 0) {
        ssize_t got = read(fds[0], &r, sizeof r);
        if (got != (ssize_t)sizeof r)
            r.ok = 0;
        waitpid(pid, NULL, 0);
    }
    close(fds[0]);
    return r;
}

#define MAX_REPS 15

/* The medians of `reps` measurements, each in a fresh process. */
static result measure_reps(int mode, int cache, int threads, int length, int reps)
{
    double load[MAX_REPS], fwd[MAX_REPS], rl[MAX_REPS], rf[MAX_REPS];
    result r = {0, 0, 0, 0, 1};
    for (int k = 0; k < reps; k++) {
        if (cache == 0)
            drop_from_cache(g_file);
        result one = measure_in_child(mode, threads, length);
        r.ok &= one.ok;
        load[k] = one.load_s;
        fwd[k] = one.forward_s;
        rl[k] = (double)one.rss_load;
        rf[k] = (double)one.rss_forward;
    }
    r.load_s = median(load, reps);
    r.forward_s = median(fwd, reps);
    r.rss_load = (long long)median(rl, reps);
    r.rss_forward = (long long)median(rf, reps);
    return r;
}

static int save_model(const char *config, int threads, long long *file_size)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = threads;
    nctmc_context *ctx = NULL;
    nctmc_model_config c = config_named(config);
    nctmc_model *m = NULL;
    int ok = nctmc_context_create(&cp, &ctx) == NCTMC_OK &&
             nctmc_model_create(ctx, &c, &m) == NCTMC_OK && nctmc_model_save(m, g_file) == NCTMC_OK;
    if (!ok)
        fprintf(stderr, "creating the model: %s %s\n", ctx ? nctmc_context_last_error(ctx) : "",
                m ? nctmc_model_last_error(m) : "");
    else
        printf("# model: %s, %lld parameters\n", config, (long long)nctmc_model_n_params(m));
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    FILE *f = ok ? fopen(g_file, "rb") : NULL;
    if (f && fseek(f, 0, SEEK_END) == 0)
        *file_size = ftell(f);
    if (f)
        fclose(f);
    return ok;
}

int main(int argc, char **argv)
{
    const char *config = "paper-small", *base = getenv("TMPDIR");
    int threads = 2, length = 16, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--config") == 0)
            config = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--length") == 0)
            length = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dir") == 0)
            base = argv[i + 1];
    }
    if (length < 1)
        length = 1;
    if (reps < 1 || reps > MAX_REPS)
        reps = reps < 1 ? 1 : MAX_REPS;
    snprintf(g_dir, sizeof g_dir, "%s/nctmc-bench-mmap-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "cannot create a folder under %s\n", base ? base : "/tmp");
        return 1;
    }
    snprintf(g_file, sizeof g_file, "%s/model.safetensors", g_dir);
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    long long file_size = 0;
    if (!save_model(config, threads, &file_size))
        return 1;
    nctmc_model_config c = config_named(config);
    if (length > c.seq_len)
        length = c.seq_len;
    double auto_cold_ratio = -1.0;
    int failures = 0;
    for (int cache = 0; cache < 2; cache++)
        for (int mode = 0; mode < 3; mode++) {
            result r = measure_reps(mode, cache, threads, length, reps);
            failures += !r.ok;
            double ratio = (double)r.rss_load / (double)file_size;
            if (mode == 1 && cache == 0)
                auto_cold_ratio = ratio;
            printf("bench=load config=%s mode=%s cache=%s file_mb=%.1f load_s=%.3f "
                   "rss_load_mb=%.1f rss_ratio=%.4f forward_s=%.3f rss_forward_mb=%.1f%s\n",
                   config, mode_names[mode], cache ? "warm" : "cold", (double)file_size / 1e6,
                   r.load_s, (double)r.rss_load / 1e6, ratio, r.forward_s,
                   (double)r.rss_forward / 1e6, r.ok ? "" : " FAILED");
            fflush(stdout);
        }
    measure_sharing(config, 0, threads, length);
    measure_sharing(config, 1, threads, length);
    int within = auto_cold_ratio >= 0.0 && auto_cold_ratio <= 0.10;
    printf("# mapped load (auto, cold): resident %.2f%% of the file: %s\n",
           100.0 * auto_cold_ratio, within ? "within 10%" : "ABOVE 10%");
    return failures == 0 && g_share_failures == 0 && within ? 0 : 1;
}
