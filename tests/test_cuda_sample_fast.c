/*
 * test_cuda_sample_fast.c — the fast jump draw (nctmc_sample_step_args.
 * exp_mode = SM_EXP_FLOAT, lib/math/sample_math.h) on the CUDA backend
 * against the CPU backend with the same switch: tau-leaping and Euler rows
 * that nearly all jump, on paper-small's vocabulary (50304, rows 16-byte
 * aligned: the float4 path) and on odd strides (the scalar path), with
 * temperature, classifier-free guidance and -inf logits. Tolerance: none —
 * every row's token must be the CPU's (both run the same float operations
 * in the same order), and a second GPU run must repeat the first.
 *
 * Without a usable GPU: "cuda_sample_fast: skipped: <reason>", exit 77.
 * backends/cuda/device_check.sh runs it on one.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_module.h"
#include "math/sample_math.h"
#include "cuda_test_util.h"

typedef struct fast_case {
    const char *name;
    int32_t B, L, S, V;
    int32_t method;
    bool guided;
    float temperature;
    bool neg_inf; /* every 5th logit -inf */
} fast_case;

typedef struct case_data {
    int32_t N;
    float *logits, *logits_u, *h, *hu;
    int32_t *x_t;
} case_data;

static case_data make_data(const fast_case *c, test_rng *r)
{
    case_data d;
    d.N = c->B * c->L;
    size_t NV = (size_t)d.N * (size_t)c->V;
    d.logits = malloc(sizeof(float) * NV);
    d.logits_u = malloc(sizeof(float) * NV);
    d.h = malloc(sizeof(float) * (size_t)d.N);
    d.hu = malloc(sizeof(float) * (size_t)d.N);
    d.x_t = malloc(sizeof(int32_t) * (size_t)d.N);
    test_fill_uniform(r, d.logits, NV, -6.0f, 6.0f);
    test_fill_uniform(r, d.logits_u, NV, -6.0f, 6.0f);
    if (c->neg_inf)
        for (size_t k = 0; k < NV; k += 5)
            d.logits[k] = d.logits_u[k] = -INFINITY;
    test_fill_uniform(r, d.h, (size_t)d.N, 1.0f, 3.0f);
    test_fill_uniform(r, d.hu, (size_t)d.N, 1.0f, 3.0f);
    for (int32_t k = 0; k < d.N; k++)
        d.x_t[k] = test_randint(r, c->S);
    return d;
}

static void free_data(case_data *d)
{
    free(d->logits);
    free(d->logits_u);
    free(d->h);
    free(d->hu);
    free(d->x_t);
}

static void *dev_copy(nctmc_backend *be, const void *src, size_t bytes)
{
    void *p = be->ops->alloc(be, bytes);
    if (p && src)
        be->ops->upload(be, p, src, bytes);
    return p;
}

/* Runs the op on `be` and downloads x_out. */
static bool run_case(nctmc_backend *be, const fast_case *c, const case_data *d, int32_t *out)
{
    size_t NV = sizeof(float) * (size_t)d->N * (size_t)c->V, N = (size_t)d->N;
    float *lg = dev_copy(be, d->logits, NV), *lu = dev_copy(be, d->logits_u, NV);
    float *h = dev_copy(be, d->h, N * sizeof(float)), *hu = dev_copy(be, d->hu, N * sizeof(float));
    int32_t *x = dev_copy(be, d->x_t, N * sizeof(int32_t));
    int32_t *xo = dev_copy(be, NULL, N * sizeof(int32_t));
    bool ok = lg && lu && h && hu && x && xo;
    if (ok) {
        nctmc_sample_step_args a;
        memset(&a, 0, sizeof a);
        a.n_rows = d->N;
        a.seq_len = c->L;
        a.row_stride = c->V;
        a.method = c->method;
        a.logits = lg;
        a.rate_h = h;
        a.logits_uncond = c->guided ? lu : NULL;
        a.rate_h_uncond = c->guided ? hu : NULL;
        a.cfg_scale = c->guided ? 1.7f : 1.0f;
        a.cfg_rule = SM_CFG_SEPARATE;
        a.x_t = x;
        a.t = 0.999;
        a.s = 0.001;
        a.temperature = c->temperature;
        a.correction_temperature = 1.0f;
        a.seed = 20261128;
        a.step = 5;
        a.first_sequence = 11;
        nctmc_fp fp = {NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, c->S, 0.0f, 1e-3f,
                       NCTMC_FP_LINK_SIGMA};
        a.fp = fp;
        a.x_out = xo;
        a.exp_mode = SM_EXP_FLOAT;
        be->ops->sample_step(be, &a);
        ok = be->ops->synchronize(be) == NCTMC_OK;
        if (ok)
            be->ops->download(be, out, xo, N * sizeof(int32_t));
        else
            fprintf(stderr, "cuda_sample_fast: %s: %s\n", c->name, be->error);
    }
    void *bufs[] = {lg, lu, h, hu, x, xo};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k])
            be->ops->free(be, bufs[k]);
    return ok;
}

static void test_case(nctmc_backend *gpu, nctmc_backend *cpu, const fast_case *c, test_rng *r)
{
    case_data d = make_data(c, r);
    size_t bytes = sizeof(int32_t) * (size_t)d.N;
    int32_t *g1 = malloc(bytes), *g2 = malloc(bytes), *ref = malloc(bytes);
    bool ok = run_case(cpu, c, &d, ref) && run_case(gpu, c, &d, g1) && run_case(gpu, c, &d, g2);
    CHECK(ok, "%s: an operation failed", c->name);
    if (ok) {
        int differ = 0, moved = 0, first = -1;
        for (int32_t k = 0; k < d.N; k++) {
            moved += ref[k] != d.x_t[k];
            if (g1[k] != ref[k]) {
                differ++;
                if (first < 0)
                    first = k;
            }
        }
        printf("sample_fast %s: %d rows, %d moved, %d differ from the CPU\n", c->name, d.N,
               moved, differ);
        CHECK(differ == 0, "%s: %d of %d rows differ from the CPU (first: row %d, gpu %d cpu %d)",
              c->name, differ, d.N, first, first >= 0 ? g1[first] : 0,
              first >= 0 ? ref[first] : 0);
        CHECK(memcmp(g1, g2, bytes) == 0, "%s: two GPU runs differ", c->name);
        CHECK(moved > d.N / 2, "%s: only %d of %d rows moved (the draws were not exercised)",
              c->name, moved, d.N);
    }
    free(g1);
    free(g2);
    free(ref);
    free_data(&d);
}

int main(void)
{
    char err[512];
    bool no_device = false;
    const nctmc_backend_module *cuda = NULL;
    if (!cuda_test_load("cuda_sample_fast", &cuda, err, sizeof err))
        return 1;
    nctmc_backend *gpu = cuda->create(0, false, err, sizeof err, &no_device);
    int rc = cuda_test_started("cuda_sample_fast", gpu, no_device, err);
    if (rc)
        return rc;
    nctmc_backend *cpu = cpu_backend_create(0, err, sizeof err);
    if (!cpu) {
        fprintf(stderr, "cuda_sample_fast: CPU backend: %s\n", err);
        gpu->ops->destroy(gpu);
        return 1;
    }
    static const fast_case cases[] = {
        {"paper-small V 50304", 2, 64, 50304, 50304, SM_METHOD_TAU_LEAPING, false, 1.0f, false},
        {"temperature 0.7", 1, 64, 50304, 50304, SM_METHOD_TAU_LEAPING, false, 0.7f, false},
        {"euler", 1, 64, 50304, 50304, SM_METHOD_EULER, false, 1.0f, false},
        {"guided", 1, 48, 50257, 50304, SM_METHOD_TAU_LEAPING, true, 0.9f, false},
        {"odd stride", 2, 33, 5000, 5003, SM_METHOD_TAU_LEAPING, false, 1.0f, false},
        {"-inf logits", 1, 40, 3001, 3004, SM_METHOD_TAU_LEAPING, false, 1.0f, true},
        {"tiny vocab", 4, 50, 7, 8, SM_METHOD_TAU_LEAPING, false, 1.0f, false},
    };
    test_rng r = test_rng_seed(38);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        test_case(gpu, cpu, &cases[k], &r);
    cpu->ops->destroy(cpu);
    gpu->ops->destroy(gpu);
    return test_finish("cuda_sample_fast");
}
