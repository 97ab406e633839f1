/*
 * bench_quant_step.c — one sampling step (tau-leaping, through the public
 * nctmc_sample()) of a float model and of its bf16 and int8 conversions,
 * each reduced model with the AVX512-BF16 kernel (where the CPU has it) and
 * with the portable one, measured in one run with the repetitions
 * interleaved (f32, bf16, ..., f32, bf16, ...) so that a busy machine slows
 * every variant alike.
 *
 * Output: one line per (batch, variant), key=value pairs:
 *   bench=quant_step config=cpu-small batch=B threads=T steps=N variant=V
 *     weight_mib=... ms_per_step=... speedup_vs_f32=...
 * ms_per_step is the median over the repetitions of (time of nctmc_sample
 * with N steps, no final denoise) / N; speedup_vs_f32 = the f32 median over
 * this variant's; weight_mib = the model's float slab plus packed weights.
 *
 * Then, because a shared machine's load blurs whole steps, each linear
 * layer shape of the model alone (rows = batch * L), as the minimum over
 * the repetitions (the least disturbed run) of each variant:
 *   bench=quant_linear config=cpu-small batch=B threads=T layer=NAME
 *     in=.. out=.. variant=V ms=... gflops=... speedup_vs_f32=...
 *
 * Usage: bench_quant_step [--threads N] [--batches 1,4] [--steps N]
 *        [--reps R] [--config cpu-small|tiny]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "bench_util.h"

#define MAX_BATCHES 8
#define N_VARIANTS 5

typedef struct bench_args {
    int threads, steps, reps;
    int batches[MAX_BATCHES];
    int n_batches;
    const char *config;
} bench_args;

static bench_args parse_args(int argc, char **argv)
{
    bench_args a = {2, 8, 5, {1, 4}, 2, "cpu-small"};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) {
            a.threads = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--batches") == 0) {
            a.n_batches = 0;
            for (const char *s = argv[i + 1]; s && a.n_batches < MAX_BATCHES;) {
                int b = atoi(s);
                a.batches[a.n_batches++] = b < 1 ? 1 : b;
                s = strchr(s, ',');
                s = s ? s + 1 : NULL;
            }
        } else if (strcmp(argv[i], "--steps") == 0) {
            a.steps = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--reps") == 0) {
            a.reps = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--config") == 0) {
            a.config = argv[i + 1];
        }
    }
    a.threads = a.threads < 1 ? 1 : a.threads;
    a.steps = a.steps < 1 ? 1 : a.steps;
    a.reps = a.reps < 1 ? 1 : a.reps;
    return a;
}

/* The same pseudo-random weights as bench_sample_step. */
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

typedef struct variant {
    const char *name;
    const nctmc_model *model;
    bool bf16_dot;           /* the kernel asked for */
    nctmc_sampler *sampler;
    double *times;
} variant;

static double time_once(variant *v, nctmc_backend *be, const bench_args *a, int batch,
                        int rep, int32_t *out)
{
    cpu_backend_set_bf16_dot(be, v->bf16_dot);
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = batch;
    p.method = NCTMC_SAMPLE_TAU_LEAPING;
    p.n_steps = a->steps;
    p.final_denoise = false;
    p.tokens_out = out;
    p.seed = (uint64_t)(rep + 2);
    double t0 = now_s();
    if (nctmc_sample(v->sampler, &p) != NCTMC_OK) {
        fprintf(stderr, "bench: %s\n", nctmc_sampler_last_error(v->sampler));
        exit(1);
    }
    return (now_s() - t0) / a->steps;
}

/* One shape of linear layer, every variant, min over reps. */
static void time_layer(nctmc_backend *be, const bench_args *a, int batch, int64_t rows,
                       const char *name, const nctmc_model *bf16, const nctmc_model *int8,
                       int32_t tensor, float *x, float *y, void *scratch)
{
    const model_tensor *t = &bf16->tensors[tensor];
    int32_t out = (int32_t)t->shape[0], in = (int32_t)t->shape[1];
    size_t nw = (size_t)out * (size_t)in;
    float *w = malloc(sizeof(float) * nw);
    for (size_t e = 0; e < nw; e++)
        w[e] = (float)((e * 2654435761u) % 1000) / 1000.0f - 0.5f;
    const struct {
        const char *name;
        const nctmc_packed_weight *pw;
        bool bf16_dot;
    } v[N_VARIANTS] = {
        {"f32", NULL, false},
        {"bf16-avx512bf16", &bf16->packed[tensor], true},
        {"bf16-portable", &bf16->packed[tensor], false},
        {"int8-avx512bf16", &int8->packed[tensor], true},
        {"int8-portable", &int8->packed[tensor], false},
    };
    double best[N_VARIANTS];
    for (int i = 0; i < N_VARIANTS; i++)
        best[i] = INFINITY;
    for (int r = 0; r < 4 * a->reps; r++)
        for (int i = 0; i < N_VARIANTS; i++) {
            cpu_backend_set_bf16_dot(be, v[i].bf16_dot);
            double t0 = now_s();
            if (v[i].pw)
                cpu_linear_forward_packed(be, rows, in, out, x, v[i].pw, NULL, y, scratch);
            else
                cpu_linear_forward(be, rows, in, out, x, w, NULL, y);
            double dt = now_s() - t0;
            best[i] = dt < best[i] ? dt : best[i];
        }
    for (int i = 0; i < N_VARIANTS; i++)
        printf("bench=quant_linear config=%s batch=%d threads=%d layer=%s in=%d out=%d "
               "variant=%s ms=%.3f gflops=%.1f speedup_vs_f32=%.2f\n",
               a->config, batch, a->threads, name, in, out, v[i].name, 1e3 * best[i],
               2.0 * (double)rows * in * out / best[i] / 1e9, best[0] / best[i]);
    free(w);
}

static void time_layers(nctmc_backend *be, const bench_args *a, int batch,
                        const nctmc_model *bf16, const nctmc_model *int8)
{
    static const char *const layers[][2] = {
        {"qkv", "blocks.0.attn_qkv.weight"}, {"attn_out", "blocks.0.attn_out.weight"},
        {"mlp0", "blocks.0.mlp.0.weight"},   {"mlp2", "blocks.0.mlp.2.weight"},
        {"output", "output_layer.linear.weight"},
    };
    int64_t rows = (int64_t)batch * bf16->dims.L;
    size_t widest = (size_t)bf16->dims.F > (size_t)bf16->dims.V ? (size_t)bf16->dims.F
                                                                 : (size_t)bf16->dims.V;
    float *x = malloc(sizeof(float) * (size_t)rows * widest);
    float *y = malloc(sizeof(float) * (size_t)rows * widest);
    size_t bytes = cpu_linear_packed_scratch_bytes(be, bf16->dims.F);
    void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    for (size_t e = 0; e < (size_t)rows * widest; e++)
        x[e] = (float)((e * 40503u) % 1000) / 500.0f - 1.0f;
    for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++)
        time_layer(be, a, batch, rows, layers[k][0], bf16, int8,
                   model_find_tensor(bf16, layers[k][1]), x, y, scratch);
    free(x);
    free(y);
    free(scratch);
}

static double weight_mib(const nctmc_model *m)
{
    return ((double)m->slab_floats * sizeof(float) + (double)m->packed_bytes) /
           (1024.0 * 1024.0);
}

int main(int argc, char **argv)
{
    bench_args a = parse_args(argc, argv);
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = a.threads;
    nctmc_context *ctx = NULL;
    nctmc_model *f32 = NULL, *bf16 = NULL, *int8 = NULL;
    nctmc_model_config cfg = config_named(a.config);
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &f32) != NCTMC_OK) {
        fprintf(stderr, "bench: cannot create the model: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    randomize(f32);
    if (nctmc_model_convert(f32, NCTMC_WEIGHT_BF16, &bf16) != NCTMC_OK ||
        nctmc_model_convert(f32, NCTMC_WEIGHT_INT8, &int8) != NCTMC_OK) {
        fprintf(stderr, "bench: convert: %s\n", nctmc_model_last_error(f32));
        return 1;
    }
    nctmc_backend *be = ctx->backend;
    bool has_bf16 = cpu_backend_set_bf16_dot(be, true);
    variant v[N_VARIANTS] = {
        {"f32", f32, false, NULL, NULL},
        {"bf16-avx512bf16", bf16, true, NULL, NULL},
        {"bf16-portable", bf16, false, NULL, NULL},
        {"int8-avx512bf16", int8, true, NULL, NULL},
        {"int8-portable", int8, false, NULL, NULL},
    };
    int max_batch = 1;
    for (int k = 0; k < a.n_batches; k++)
        max_batch = a.batches[k] > max_batch ? a.batches[k] : max_batch;
    for (int i = 0; i < N_VARIANTS; i++) {
        nctmc_sampler_params sp;
        nctmc_sampler_params_init(&sp);
        sp.max_batch = max_batch;
        v[i].times = malloc(sizeof(double) * (size_t)a.reps);
        if (nctmc_sampler_create(v[i].model, &sp, &v[i].sampler) != NCTMC_OK) {
            fprintf(stderr, "bench: %s\n", nctmc_model_last_error(v[i].model));
            return 1;
        }
    }
    printf("# AVX512-BF16 kernel %s on this CPU\n", has_bf16 ? "available" : "NOT available "
           "(its variants ran the portable kernel)");
    int32_t *out = malloc(sizeof(int32_t) * (size_t)max_batch * (size_t)cfg.seq_len);
    for (int k = 0; k < a.n_batches; k++) {
        int batch = a.batches[k];
        for (int r = -1; r < a.reps; r++)
            for (int i = 0; i < N_VARIANTS; i++) {
                double t = time_once(&v[i], be, &a, batch, r, out);
                if (r >= 0)
                    v[i].times[r] = t;
            }
        double base = 0;
        for (int i = 0; i < N_VARIANTS; i++) {
            double t = median(v[i].times, a.reps);
            base = i == 0 ? t : base;
            printf("bench=quant_step config=%s batch=%d threads=%d steps=%d variant=%s "
                   "weight_mib=%.2f ms_per_step=%.2f speedup_vs_f32=%.2f\n",
                   a.config, batch, a.threads, a.steps, v[i].name, weight_mib(v[i].model),
                   1e3 * t, base / t);
        }
    }
    for (int k = 0; k < a.n_batches; k++)
        time_layers(be, &a, a.batches[k], bf16, int8);
    free(out);
    for (int i = 0; i < N_VARIANTS; i++) {
        nctmc_sampler_free(v[i].sampler);
        free(v[i].times);
    }
    nctmc_model_free(int8);
    nctmc_model_free(bf16);
    nctmc_model_free(f32);
    nctmc_context_free(ctx);
    return 0;
}
