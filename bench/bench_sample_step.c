/*
 * bench_sample_step.c — the cost of one sampling step (one model evaluation
 * plus the fused sampling op, the token upload and download) through the
 * public nctmc_sample(), and of the sampling op alone, on the CPU backend.
 *
 * Output: one line per (batch, method), key=value pairs:
 *   bench=sample_step config=cpu-small batch=B threads=T steps=N method=M weights=W
 *     sample_ms=... ms_per_step=... tokens_per_s=... forward_ms=... op_ms=...
 * sample_ms is the median over the repetitions of the time of nctmc_sample
 * with N steps, no final denoise, no correction (the latency of a whole
 * N-step sampling call); ms_per_step = sample_ms / N; tokens_per_s =
 * batch * length / (ms_per_step / 1000): token positions advanced by one
 * step per second. forward_ms is the median time of the model evaluation
 * alone and op_ms that of the sampling op alone, on the same shape: the
 * rest of a step is moving tokens and checking them.
 *
 * The weights are random (the output layer and rate head included) so the
 * rates, and with them the op's work, are those of a model that jumps.
 *
 * Usage: bench_sample_step [--threads N] [--batches 1,8] [--steps N]
 *        [--reps R] [--method tau|euler|posterior|all] [--config cpu-small|tiny]
 *        [--parts all|sample] [--weights f32|bf16|int8]
 * --parts sample times the sampling call only (forward_ms and op_ms print
 * as 0). --weights samples with a copy of the random model converted by
 * nctmc_model_convert() (bf16 or int8 linear layers; the CPU backend picks
 * its AVX512-BF16 or portable kernel at run time), printed as weights=.
 *
 * --fast-rows N (only this, then exit): the sampling op alone on N rows of
 * paper-small's vocabulary (50304) of random logits, tau-leaping one step
 * from t = 0.999 (every row jumps), with exp_mode double (the default) and
 * float (the fast jump draw shared with the GPU):
 *   bench=sample_op_exp threads=T rows=N vocab=50304 exp=double|float ms=... ms_per_row=...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dit/dit.h"
#include "math/sample_math.h"
#include "run/sampler.h"
#include "bench_util.h"

#define MAX_BATCHES 8

typedef struct bench_args {
    int threads, steps, reps;
    int batches[MAX_BATCHES];
    int n_batches;
    int method;   /* -1: all */
    const char *config;
    int sample_only;
    const char *weights;   /* "f32", "bf16" or "int8" */
    int fast_rows;         /* > 0: the exp_mode comparison only */
} bench_args;

static const char *method_names[] = {"tau-leaping", "euler", "posterior"};

static int parse_batches(const char *s, int *out)
{
    int n = 0;
    while (*s && n < MAX_BATCHES) {
        int b = atoi(s);
        out[n++] = b < 1 ? 1 : b;
        const char *comma = strchr(s, ',');
        if (!comma)
            break;
        s = comma + 1;
    }
    return n;
}

static int parse_method(const char *s)
{
    if (strcmp(s, "tau") == 0) return 0;
    if (strcmp(s, "euler") == 0) return 1;
    if (strcmp(s, "posterior") == 0) return 2;
    return -1;
}

static bench_args parse_args(int argc, char **argv)
{
    bench_args a = {2, 8, 3, {1, 8}, 2, -1, "cpu-small", 0, "f32", 0};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) a.threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batches") == 0) a.n_batches = parse_batches(argv[i + 1], a.batches);
        else if (strcmp(argv[i], "--steps") == 0) a.steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) a.reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--method") == 0) a.method = parse_method(argv[i + 1]);
        else if (strcmp(argv[i], "--config") == 0) a.config = argv[i + 1];
        else if (strcmp(argv[i], "--parts") == 0) a.sample_only = strcmp(argv[i + 1], "sample") == 0;
        else if (strcmp(argv[i], "--weights") == 0) a.weights = argv[i + 1];
        else if (strcmp(argv[i], "--fast-rows") == 0) a.fast_rows = atoi(argv[i + 1]);
    }
    if (a.threads < 1) a.threads = 1;
    if (a.steps < 1) a.steps = 1;
    if (a.reps < 1) a.reps = 1;
    return a;
}

/* Deterministic pseudo-random weights in +-scale/sqrt(fan-in)-ish ranges:
 * every tensor gets values, so h and the logits vary across positions. */
static void randomize(nctmc_model *m)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc((size_t)info.n_elements * sizeof(float));
        float scale = info.n_dims == 2 ? 1.0f / sqrtf((float)info.shape[1]) : 0.1f;
        for (int64_t e = 0; e < info.n_elements; e++) {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            double u = (double)((s * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
            v[e] = (float)((2.0 * u - 1.0) * scale);
        }
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

/* The model to sample with: `model` itself for f32, else a converted copy
 * (the float model is freed); NULL after an error, already reported. */
static nctmc_model *convert_weights(nctmc_model *model, const char *weights)
{
    nctmc_weight_type to;
    if (strcmp(weights, "f32") == 0)
        return model;
    else if (strcmp(weights, "bf16") == 0)
        to = NCTMC_WEIGHT_BF16;
    else if (strcmp(weights, "int8") == 0)
        to = NCTMC_WEIGHT_INT8;
    else {
        fprintf(stderr, "bench: --weights %s: expected f32, bf16 or int8\n", weights);
        nctmc_model_free(model);
        return NULL;
    }
    nctmc_model *reduced = NULL;
    if (nctmc_model_convert(model, to, &reduced) != NCTMC_OK)
        fprintf(stderr, "bench: convert: %s\n", nctmc_model_last_error(model));
    nctmc_model_free(model);
    return reduced;
}

static double time_sampling(nctmc_sampler *s, const bench_args *a, int batch, int method,
                            int32_t *out)
{
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = batch;
    p.method = (nctmc_sample_method)method;
    p.n_steps = a->steps;
    p.final_denoise = false;
    p.tokens_out = out;
    double *times = malloc(sizeof(double) * (size_t)a->reps);
    for (int r = -1; r < a->reps; r++) {
        p.seed = (uint64_t)(r + 2);
        double t0 = now_s();
        if (nctmc_sample(s, &p) != NCTMC_OK) {
            fprintf(stderr, "bench: %s\n", nctmc_sampler_last_error(s));
            exit(1);
        }
        if (r >= 0)
            times[r] = (now_s() - t0) / a->steps;
    }
    double t = median(times, a->reps);
    free(times);
    return t;
}

/* The model evaluation alone, on the sampler's workspace and last tokens. */
static double time_forward(nctmc_sampler *s, int batch, int reps)
{
    dit_batch b = {batch, s->max_length, s->h_tokens, s->h_times, NULL, NULL, NULL};
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        dit_forward(s->model, s->ws, &b);
        s->be->ops->synchronize(s->be);
        if (r >= 0)
            times[r] = now_s() - t0;
    }
    double t = median(times, reps);
    free(times);
    return t;
}

/* The op alone on the outputs of the sampler's last evaluation. */
static double time_op(nctmc_sampler *s, int batch, int method, int reps)
{
    const nctmc_model *m = s->model;
    int64_t N = (int64_t)batch * s->max_length;
    nctmc_sample_step_args a;
    memset(&a, 0, sizeof a);
    a.n_rows = N;
    a.seq_len = s->max_length;
    a.row_stride = m->dims.V;
    a.method = method;
    a.logits = dit_ws_logits(s->ws);
    a.rate_h = dit_ws_rate_h(s->ws);
    a.cfg_scale = 1.0f;
    a.x_t = dit_ws_x_t(s->ws);
    a.t = 0.5;
    a.s = 0.5 - 1.0 / 128;
    a.temperature = 1.0f;
    a.fp = m->fp;
    a.x_out = s->d_tokens;
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        a.step = (uint32_t)(r + 2);
        double t0 = now_s();
        s->be->ops->sample_step(s->be, &a);
        s->be->ops->synchronize(s->be);
        if (r >= 0)
            times[r] = now_s() - t0;
    }
    double t = median(times, reps);
    free(times);
    return t;
}

/* --fast-rows: exp_mode double against float on the CPU backend. */
static int bench_exp_modes(const bench_args *ba)
{
    enum { V = 50304 };
    char err[256];
    nctmc_backend *be = cpu_backend_create(ba->threads, err, sizeof err);
    if (!be) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    int64_t N = ba->fast_rows;
    float *z = be->ops->alloc(be, sizeof(float) * (size_t)N * V);
    float *h = be->ops->alloc(be, sizeof(float) * (size_t)N);
    int32_t *x = be->ops->alloc(be, sizeof(int32_t) * (size_t)N);
    int32_t *xo = be->ops->alloc(be, sizeof(int32_t) * (size_t)N);
    if (!z || !h || !x || !xo) {
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    uint64_t k64 = 88172645463325252ull;
    for (int64_t k = 0; k < N * V; k++) {
        k64 ^= k64 << 13, k64 ^= k64 >> 7, k64 ^= k64 << 17;
        z[k] = (float)(k64 >> 40) * (8.0f / 16777216.0f) - 4.0f;
    }
    for (int64_t r = 0; r < N; r++) {
        h[r] = 2.0f;
        x[r] = (int32_t)((r * 7919) % V);
    }
    nctmc_fp fp = {NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, V, 0.0f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    int reps = ba->reps < 3 ? 3 : ba->reps;
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int mode = SM_EXP_DOUBLE; mode <= SM_EXP_FLOAT; mode++) {
        nctmc_sample_step_args a;
        memset(&a, 0, sizeof a);
        a.n_rows = N;
        a.seq_len = (int32_t)N;
        a.row_stride = V;
        a.method = SM_METHOD_TAU_LEAPING;
        a.logits = z;
        a.rate_h = h;
        a.cfg_scale = 1.0f;
        a.x_t = x;
        a.t = 0.999;
        a.s = 0.001;
        a.temperature = 1.0f;
        a.correction_temperature = 1.0f;
        a.seed = 5;
        a.fp = fp;
        a.x_out = xo;
        a.exp_mode = mode;
        for (int r = -1; r < reps; r++) {
            double t0 = now_s();
            be->ops->sample_step(be, &a);
            be->ops->synchronize(be);
            if (r >= 0)
                times[r] = now_s() - t0;
        }
        double t = median(times, reps);
        printf("bench=sample_op_exp threads=%d rows=%lld vocab=%d exp=%s ms=%.2f "
               "ms_per_row=%.3f\n",
               ba->threads, (long long)N, V, mode == SM_EXP_FLOAT ? "float" : "double",
               1e3 * t, 1e3 * t / (double)N);
    }
    free(times);
    void *bufs[] = {z, h, x, xo};
    for (size_t k = 0; k < 4; k++)
        be->ops->free(be, bufs[k]);
    be->ops->destroy(be);
    return 0;
}

int main(int argc, char **argv)
{
    bench_args a = parse_args(argc, argv);
    if (a.fast_rows > 0)
        return bench_exp_modes(&a);
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = a.threads;
    nctmc_context *ctx = NULL;
    nctmc_model *model = NULL;
    nctmc_model_config cfg = config_named(a.config);
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &model) != NCTMC_OK) {
        fprintf(stderr, "bench: cannot create the model: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    randomize(model);
    model = convert_weights(model, a.weights);
    if (!model)
        return 1;
    int max_batch = 1;
    for (int k = 0; k < a.n_batches; k++)
        max_batch = a.batches[k] > max_batch ? a.batches[k] : max_batch;
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = max_batch;
    nctmc_sampler *s = NULL;
    if (nctmc_sampler_create(model, &sp, &s) != NCTMC_OK) {
        fprintf(stderr, "bench: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    int32_t *out = malloc(sizeof(int32_t) * (size_t)max_batch * (size_t)cfg.seq_len);
    for (int k = 0; k < a.n_batches; k++)
        for (int method = 0; method < 3; method++) {
            if (a.method >= 0 && method != a.method)
                continue;
            int batch = a.batches[k];
            double t = time_sampling(s, &a, batch, method, out);
            double fwd = a.sample_only ? 0.0 : time_forward(s, batch, a.reps);
            double op = a.sample_only ? 0.0 : time_op(s, batch, method, 20);
            printf("bench=sample_step config=%s batch=%d threads=%d steps=%d method=%s "
                   "weights=%s sample_ms=%.1f ms_per_step=%.2f tokens_per_s=%.1f "
                   "forward_ms=%.2f op_ms=%.3f\n",
                   a.config, batch, a.threads, a.steps, method_names[method], a.weights,
                   1e3 * t * a.steps, 1e3 * t,
                   (double)batch * cfg.seq_len / t, 1e3 * fwd, 1e3 * op);
        }
    free(out);
    nctmc_sampler_free(s);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    return 0;
}
