/*
 * cuda_test_util.h — what the CUDA test programs (tests/test_cuda_*.c)
 * share: loading the CUDA module and the start of a backend with its
 * "skipped" exit (77) without a usable GPU, random host buffers,
 * copies to and from backend memory, the scaled error
 * max|got - want| / max|want| and its reporting line, and the small
 * two-block model the whole-model checks train.
 * Each test keeps its own assertions and tolerances; an allocation that
 * fails here ends the program with status 2 (a test harness, not the
 * library).
 */
#ifndef NCTMC_CUDA_TEST_UTIL_H
#define NCTMC_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/backend_module.h"
#include "nctmc.h"
#include "test_util.h"

static inline void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* n floats uniform in [lo, hi). */
static inline float *hrand(test_rng *rng, size_t n, float lo, float hi)
{
    float *p = xcalloc(n, sizeof *p);
    test_fill_uniform(rng, p, n, lo, hi);
    return p;
}

/* Backend memory holding a copy of `bytes` of host data (both backends
 * round an allocation up to their minimum, so none is empty). */
static inline void *dput(nctmc_backend *be, const void *host, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes ? bytes : 4);
    if (!d) {
        fprintf(stderr, "%s: cannot allocate %zu bytes\n", be->name, bytes);
        exit(2);
    }
    if (bytes)
        be->ops->upload(be, d, host, bytes);
    return d;
}

static inline float *dputf(nctmc_backend *be, const float *host, size_t n)
{
    return dput(be, host, n * sizeof(float));
}

/* n floats of backend memory on the host. */
static inline float *dget(nctmc_backend *be, const void *d, size_t n)
{
    float *h = xcalloc(n, sizeof *h);
    be->ops->download(be, h, d, n * sizeof *h);
    return h;
}

static inline void sync_ok(nctmc_backend *be, const char *what)
{
    nctmc_status st = be->ops->synchronize(be);
    CHECK(st == NCTMC_OK, "%s on %s: %s", what, be->name, be->error);
}

/* max |got - want| / max |want|; infinities must match exactly. */
static inline double scaled_err(const float *got, const float *want, size_t n)
{
    double max_want = 0.0, max_diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (isinf(g) || isinf(w)) {
            if (g != w)
                return INFINITY;
            continue;
        }
        if (isnan(g) || isnan(w))
            return INFINITY;
        max_want = fmax(max_want, fabs(w));
        max_diff = fmax(max_diff, fabs(g - w));
    }
    return max_want > 0.0 ? max_diff / max_want : max_diff;
}

/* Checks a scaled error e against tol and prints it, `what` padded to
 * `width` columns. */
static inline void check_scaled(const char *what, double e, double tol, int width)
{
    CHECK(e <= tol, "%s: scaled error %.3g above %.1g", what, e, tol);
    printf("  %-*s %9.2e  (tol %.0e)\n", width, what, e, tol);
}

/* Loads the CUDA module; false, the reason printed as "<test>: <reason>",
 * when it cannot be loaded (a failure, never a skip). */
static inline bool cuda_test_load(const char *test, const nctmc_backend_module **cuda, char *err,
                                  size_t err_size)
{
    if (cuda_module_load(cuda, err, err_size) == NCTMC_OK)
        return true;
    fprintf(stderr, "%s: %s\n", test, err);
    return false;
}

/* After the CUDA module's create: 0 when `be` started; without a usable GPU
 * (no_device) 77 with "<test>: skipped: <err>"; otherwise 1 with the
 * failure printed. */
static inline int cuda_test_started(const char *test, const nctmc_backend *be, bool no_device,
                                    const char *err)
{
    if (be)
        return 0;
    if (no_device) {
        printf("%s: skipped: %s\n", test, err);
        return 77;
    }
    fprintf(stderr, "%s: the CUDA backend failed to start: %s\n", test, err);
    return 1;
}

/* The whole-model checks' model: two blocks, d 64, S 50 padded to V 64,
 * length 24, seed 11. */
static inline void cuda_test_model_config(nctmc_model_config *cfg, nctmc_process process,
                                          nctmc_exit_link link)
{
    nctmc_model_config_init(cfg);
    cfg->vocab_size = 50;
    cfg->vocab_pad_multiple = 32; /* V = 64 > S */
    cfg->seq_len = 24;
    cfg->n_layers = 2;
    cfg->d_model = 64;
    cfg->n_heads = 4;
    cfg->cond_dim = 32;
    cfg->process = process;
    cfg->schedule = NCTMC_SCHEDULE_LINEAR;
    cfg->mixture_uniform = 0.3f;
    cfg->exit_link = link;
    cfg->seed = 11;
}

/* N clean tokens x_0 (data tokens of S states) and noisy x_t: x_0 or, at
 * random, a uniform token (uniform process) or the mask S - 1. */
static inline void cuda_test_tokens(test_rng *rng, nctmc_process process, int32_t S, int32_t N,
                                    int32_t *x_t, int32_t *x_0)
{
    int32_t n_data = process == NCTMC_PROCESS_UNIFORM ? S : S - 1;
    for (int32_t r = 0; r < N; r++) {
        x_0[r] = test_randint(rng, n_data);
        x_t[r] = !test_randint(rng, 2) ? x_0[r]
                 : process == NCTMC_PROCESS_UNIFORM ? test_randint(rng, S)
                                                    : S - 1;
    }
}

#endif
