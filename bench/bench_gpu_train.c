/*
 * bench_gpu_train.c — training and sampling throughput of the CUDA backend,
 * to set beside tests/reference/bench_reference_gpu.py (the PyTorch
 * reference on the same GPU).
 *
 * Measurements (each the median of --reps runs after --warmup runs):
 *   forward     dit_forward: the backbone to the logits and the exit-rate head;
 *   train_step  one optimiser step as the trainer takes it: forward, the
 *               fused L_cond loss, backward to every parameter (dit_loss),
 *               then the gradient norm, gradient scaling, AdamW and the EMA
 *               over the whole parameter slab;
 *   sample_step nctmc_sample() with --sample-steps steps and no final
 *               denoising, divided by the steps: one model evaluation plus
 *               the fused sampling operation per step;
 *   kernel      the two row kernels alone on --kernel-batch sequences of
 *               random logits of the config's shape (paper-small: 16 x 512
 *               rows of 50304): sample_step for tau-leaping (a 16-step
 *               grid at t = 0.5, and one step from t = 0.999 where most
 *               rows jump), posterior and denoise, with the fraction of rows
 *               that moved; lcond with the logits' gradients;
 *   lcond split (--lcond-split B, 0 skips) the default L_cond kernel and the
 *               split one ($NCTMC_CUDA_LCOND=split, backends/cuda/cuda_loss.cu)
 *               on the same B sequences of random logits, each on a backend
 *               of its own, with the largest difference of their per-position
 *               losses and gradients relative to the largest value;
 *   lcond link  (--lcond-link B, 0 skips) the denoiser link's training
 *               chain on B sequences of random head logits: denoiser_forward,
 *               then lcond + denoiser_backward, then lcond_denoiser
 *               ($NCTMC_CUDA_LCOND_LINK=fused, backends/cuda/cuda_denoiser.cu),
 *               which replaces all three in a training step;
 *   memory      the device memory in use at most while training (the whole
 *               device as nvidia-smi counts it, CUDA context included).
 * Each is run in TF32 and in bf16 mode (--precision).
 * --fused 1: the backend with its fused block kernels (NCTMC_CUDA_FUSED=1:
 * cuBLASLt GELU epilogues, adaLN with the gated residual; issue 38), forward
 * and train step only, reported as bench=forward_fused / train_step_fused
 * and bench=memory_fused (so bench/compare_torch_gpu.py keeps them apart
 * from the default rows).
 *
 * Model FLOPs, the standard count (Kaplan et al. / PaLM's MFU):
 *   per token, forward + backward = 6 N + 12 n_layers L d,
 *   N = n_layers 12 d^2 + d (V + 1): the weights every token multiplies
 *   (attention qkv 3d^2 and output d^2, MLP 8d^2, the output projection and
 *   the exit-rate head); the time MLP and the adaLN modulations act once
 *   per sequence and the embedding is a lookup, so they are left out;
 *   12 n_layers L d counts the attention scores and their weighted sum
 *   (4 L d per token and layer forward, three times that with backward).
 * A forward pass is a third of it. mfu_bf16 = achieved model FLOP/s over
 * the GPU's dense bfloat16 peak (H100 SXM and H200: 989 TFLOP/s; override
 * with --peak-tflops), in both precisions, so the two read on one scale.
 *
 * Output, key=value per line:
 *   bench=gpu_device peak_bf16_tflops=... name="..."
 *   bench=forward impl=libnctmc precision=tf32 config=paper-small batch=16 ms=...
 *        tokens_per_s=... model_tflops=... mfu_bf16=...
 *   bench=train_step ... (the same fields)
 *   bench=sample_step impl=libnctmc precision=... method=tau-leaping batch=...
 *        steps=... ms_per_step=... steps_per_s=... tokens_per_s=...
 *   bench=memory impl=libnctmc precision=... config=... batch=...
 *        peak_device_mib=... device_total_mib=...
 *   bench=kernel impl=libnctmc op=sample_step method=... rows=... vocab=...
 *        ms=... gb_per_s=... moved=...   (op=lcond: no method, no moved)
 *   bench=kernel impl=libnctmc op=lcond_default|lcond_split rows=... vocab=...
 *        ms=... gb_per_s=... min_bytes_per_row=...
 *   bench=lcond_split_vs_default loss_diff=... grad_diff=...
 *   bench=kernel impl=libnctmc op=denoiser_forward|lcond+denoiser_backward|
 *        lcond_denoiser rows=... vocab=... ms=...
 *   bench=lcond_link_fused_vs_chain speedup=... loss_diff=... grad_diff=...
 * Exits 77 ("skipped", with the reason) when no usable GPU is present.
 *
 * --graphs 1: instead of all the above, CUDA graph capture against eager
 * launches (bench_graphs below): the forward, the train step (as above)
 * and the sampling step (tau-leaping, --sample-steps steps, batch --batch)
 * in a context without and one with NCTMC_CUDA_GRAPHS=1, in --precision
 * (tf32 when "both"), for --config and for "d256" (cpu-small at d 256, 4
 * heads: the launch-bound small model); lines
 *   bench=graphs config=... precision=... batch=... mode=eager|graph
 *        forward_ms=... train_step_ms=... sample_ms_per_step=...
 *   bench=graphs_speedup config=... forward=... train_step=... sample_step=...
 *        (eager time / graph time)
 *   # graph context: <the backend's description, with its graph counts>
 *
 * Usage: bench_gpu_train [--config paper-small|cpu-small|tiny|d256] [--batch B]
 *        [--reps R] [--warmup W] [--precision tf32|bf16|both]
 *        [--sample-batch B] [--sample-steps N] [--kernel-batch B]
 *        [--peak-tflops X] [--fused 0|1] [--lcond-split B] [--lcond-link B]
 *        [--graphs 1] [--fast-sample-batch B] [--bf16-logits B]
 *
 * --bf16-logits B: instead of all the above, bf16 logits
 * (NCTMC_CUDA_BF16_LOGITS=1, backends/cuda/cuda_loss.cu): L_cond with the
 * gradients in place on B sequences of float32 and of bfloat16 logits, the
 * default and the split kernel, then the bf16 train step at batch 16 and
 * 64 in a "cuda-bf16" context without and with the switch; lines
 *   bench=kernel impl=libnctmc op=lcond_default|lcond_split logits=float32|bf16
 *        rows=... vocab=... ms=... gb_per_s=... min_bytes_per_row=...
 *   bench=lcond_bf16_vs_float kernel=... speedup=...
 *   bench=train_step_bf16_logits precision=bf16 config=... batch=... switch=0|1 ms=...
 *   bench=bf16_logits_speedup config=... batch=... train_step=... (off / on)
 *
 * --fast-sample-batch B (default 0: not run): sample_step alone on B
 * sequences of random logits, exp_mode double (the default path) beside
 * float (sm_fast_jump_draw), tau-leaping on a 16-step grid at t = 0.5 and
 * one step from t = 0.999, and Euler from t = 0.999; and the float path's
 * first 256 rows against the host's per-row math (the CPU backend's):
 *   bench=kernel_fast impl=libnctmc op=sample_step method=... exp=double|float
 *        rows=... vocab=... ms=... gb_per_s=... moved=... [cpu_equal=K/256]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_module.h"
#include "core/context.h"
#include "cuda/cuda_backend.h"
#include "dit/dit.h"
#include "dit/dit_internal.h"
#include "math/sample_math.h"
#include "bench_util.h"

typedef struct bench_args {
    const char *config;
    const char *precision;
    int batch, reps, warmup, sample_batch, sample_steps, kernel_batch, lcond_split,
        lcond_link, fast_sample_batch;
    double peak_tflops;
    int fused; /* --fused 1: the fused block kernels, forward and train step only */
    int graphs;     /* --graphs 1: bench_graphs only */
    int bf16_logits; /* --bf16-logits B: bench_bf16_logits only, lcond on B sequences */
} bench_args;

/* --fused 1: the switch the CUDA backend reads when the context creates it
 * (NCTMC_CUDA_FUSED=1), and only the forward and the train step. */
static bench_args fused_selection(bench_args a)
{
    if (!a.fused)
        return a;
    setenv("NCTMC_CUDA_FUSED", "1", 1);
    a.sample_batch = 0;
    a.kernel_batch = 0;
    return a;
}

static bench_args parse_args(int argc, char **argv)
{
    bench_args a = {"paper-small", "both", 16, 5, 2, 16, 16, 16, 0, 0, 0, 0.0, 0, 0, 0};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--config") == 0) a.config = v;
        else if (strcmp(k, "--precision") == 0) a.precision = v;
        else if (strcmp(k, "--batch") == 0) a.batch = atoi(v);
        else if (strcmp(k, "--reps") == 0) a.reps = atoi(v);
        else if (strcmp(k, "--warmup") == 0) a.warmup = atoi(v);
        else if (strcmp(k, "--sample-batch") == 0) a.sample_batch = atoi(v);
        else if (strcmp(k, "--sample-steps") == 0) a.sample_steps = atoi(v);
        else if (strcmp(k, "--peak-tflops") == 0) a.peak_tflops = atof(v);
        else if (strcmp(k, "--kernel-batch") == 0) a.kernel_batch = atoi(v);
        else if (strcmp(k, "--fused") == 0) a.fused = atoi(v) != 0;
        else if (strcmp(k, "--lcond-split") == 0) a.lcond_split = atoi(v);
        else if (strcmp(k, "--lcond-link") == 0) a.lcond_link = atoi(v);
        else if (strcmp(k, "--graphs") == 0) a.graphs = atoi(v);
        else if (strcmp(k, "--fast-sample-batch") == 0) a.fast_sample_batch = atoi(v);
        else if (strcmp(k, "--bf16-logits") == 0) a.bf16_logits = atoi(v);
    }
    if (a.batch < 1) a.batch = 1;
    if (a.reps < 1) a.reps = 1;
    if (a.warmup < 0) a.warmup = 0;
    if (a.sample_batch < 0) a.sample_batch = 0;
    if (a.sample_steps < 1) a.sample_steps = 1;
    if (a.kernel_batch < 0) a.kernel_batch = 0;
    if (a.lcond_split < 0) a.lcond_split = 0;
    if (a.lcond_link < 0) a.lcond_link = 0;
    if (a.fast_sample_batch < 0) a.fast_sample_batch = 0;
    return fused_selection(a);
}

/* Dense bf16 tensor-core peak of known parts, from the device's name. */
static double peak_for(const char *desc)
{
    if (strstr(desc, "H100") && strstr(desc, "PCIe"))
        return 756.0;
    if (strstr(desc, "H100") || strstr(desc, "H200") || strstr(desc, "H800") ||
        strstr(desc, "GH200"))
        return 989.0;
    if (strstr(desc, "A100"))
        return 312.0;
    return 0.0;
}

typedef struct train_state {
    nctmc_model *model;
    dit_workspace *ws;
    float *grads, *m, *v, *ema;
    dit_batch batch;
    int64_t step;
} train_state;

/* What the trainer does after the gradients: norm, clip to 1, AdamW, EMA. */
static void optimiser_step(train_state *s, nctmc_backend *be)
{
    int64_t n = (int64_t)s->model->slab_floats;
    double norm = sqrt(be->ops->sum_squares(be, n, s->grads));
    if (norm > 1.0)
        be->ops->scale(be, n, s->grads, (float)(1.0 / norm));
    be->ops->adamw(be, n, s->model->weights, s->grads, s->m, s->v, 3e-4f, 0.9f, 0.999f, 1e-8f,
                   0.01f, ++s->step);
    be->ops->ema_update(be, n, s->ema, s->model->weights, 0.9999f);
}

static double time_pass(train_state *s, nctmc_backend *be, bool train, const bench_args *a)
{
    double *times = malloc(sizeof(double) * (size_t)a->reps), loss;
    char err[256];
    for (int i = -a->warmup; i < a->reps; i++) {
        double t0 = now_s();
        if (train) {
            if (dit_loss(s->model, s->ws, &s->batch, s->grads, false, &loss, err, sizeof err) !=
                NCTMC_OK) {
                fprintf(stderr, "bench_gpu_train: %s\n", err);
                exit(1);
            }
            optimiser_step(s, be);
        } else {
            dit_forward(s->model, s->ws, &s->batch);
        }
        if (be->ops->synchronize(be) != NCTMC_OK) {
            fprintf(stderr, "bench_gpu_train: %s\n", be->error);
            exit(1);
        }
        if (i >= 0)
            times[i] = now_s() - t0;
    }
    double t = median(times, a->reps);
    free(times);
    return t;
}

static void report(const char *what, const char *precision, const bench_args *a,
                   const model_dims *z, double t, double flops_per_token, double peak)
{
    double tokens = (double)a->batch * z->L;
    double tflops = flops_per_token * tokens / t * 1e-12;
    printf("bench=%s impl=libnctmc precision=%s config=%s batch=%d ms=%.2f tokens_per_s=%.1f "
           "model_tflops=%.1f mfu_bf16=%.4f\n",
           what, precision, a->config, a->batch, 1e3 * t, tokens / t, tflops,
           peak > 0.0 ? tflops / peak : NAN);
    fflush(stdout);
}

static void bench_sampling(nctmc_model *model, const char *precision, const bench_args *a)
{
    if (a->sample_batch == 0)
        return;
    static const struct {
        nctmc_sample_method method;
        const char *name;
    } methods[] = {{NCTMC_SAMPLE_TAU_LEAPING, "tau-leaping"},
                   {NCTMC_SAMPLE_POSTERIOR, "posterior"}};
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = a->sample_batch;
    nctmc_sampler *s = NULL;
    if (nctmc_sampler_create(model, &sp, &s) != NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: sampler: %s\n", nctmc_model_last_error(model));
        exit(1);
    }
    int32_t L = model->dims.L;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)a->sample_batch * (size_t)L);
    for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = a->sample_batch;
        p.method = methods[k].method;
        p.n_steps = a->sample_steps;
        p.final_denoise = false;
        p.seed = 7;
        p.tokens_out = tokens;
        double *times = malloc(sizeof(double) * (size_t)a->reps);
        for (int i = -1; i < a->reps; i++) {
            double t0 = now_s();
            if (nctmc_sample(s, &p) != NCTMC_OK) {
                fprintf(stderr, "bench_gpu_train: sample: %s\n", nctmc_sampler_last_error(s));
                exit(1);
            }
            if (i >= 0)
                times[i] = now_s() - t0;
        }
        double step = median(times, a->reps) / a->sample_steps;
        printf("bench=sample_step impl=libnctmc precision=%s config=%s method=%s batch=%d "
               "steps=%d ms_per_step=%.3f steps_per_s=%.2f tokens_per_s=%.1f\n",
               precision, a->config, methods[k].name, a->sample_batch, a->sample_steps,
               1e3 * step, 1.0 / step, (double)a->sample_batch * L / step);
        fflush(stdout);
        free(times);
    }
    free(tokens);
    nctmc_sampler_free(s);
}

static void *alloc_or_die(nctmc_backend *be, size_t bytes)
{
    void *p = be->ops->alloc(be, bytes);
    if (!p) {
        fprintf(stderr, "bench_gpu_train: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* A pseudo-random float in [lo, hi) from a 32-bit hash of k. */
static float hash_uniform(uint32_t k, float lo, float hi)
{
    k ^= k >> 16;
    k *= 0x7feb352du;
    k ^= k >> 15;
    k *= 0x846ca68bu;
    k ^= k >> 16;
    return lo + (hi - lo) * (float)(k >> 8) * (1.0f / 16777216.0f);
}

/* Median seconds of one call of `op` (synchronised each time). */
typedef void (*kernel_fn)(nctmc_backend *be, const void *args);

static void call_sample_step(nctmc_backend *be, const void *args)
{
    be->ops->sample_step(be, (const nctmc_sample_step_args *)args);
}

static void call_lcond(nctmc_backend *be, const void *args)
{
    be->ops->lcond(be, (const nctmc_lcond_args *)args);
}

static double time_kernel(nctmc_backend *be, kernel_fn fn, const void *args, int reps)
{
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (int i = -2; i < reps; i++) {
        double t0 = now_s();
        fn(be, args);
        if (be->ops->synchronize(be) != NCTMC_OK) {
            fprintf(stderr, "bench_gpu_train: %s\n", be->error);
            exit(1);
        }
        if (i >= 0)
            times[i] = now_s() - t0;
    }
    double t = median(times, reps);
    free(times);
    return t;
}

/* Random logits on the device: a block of distinct rows uploaded once per
 * slot (uploading all of paper scale's 1.6 GB from the host would take
 * longer than the benchmark). */
static float *random_logits(nctmc_backend *be, int64_t N, int32_t V)
{
    const int64_t block_rows = 64;
    float *block = malloc(sizeof(float) * (size_t)(block_rows * V));
    for (int64_t k = 0; k < block_rows * V; k++)
        block[k] = hash_uniform((uint32_t)k * 2654435761u + 12345u, -4.0f, 4.0f);
    float *d = alloc_or_die(be, sizeof(float) * (size_t)N * (size_t)V);
    for (int64_t r = 0; r < N; r += block_rows) {
        int64_t n = N - r < block_rows ? N - r : block_rows;
        be->ops->upload(be, d + r * V, block, sizeof(float) * (size_t)(n * V));
    }
    free(block);
    return d;
}

/* The benchmark's tokens over N positions of vocabulary S: x_0 hashed, x_t
 * another token at every third position. */
static void fill_tokens(int32_t *x_t, int32_t *x_0, int64_t N, int32_t S)
{
    for (int64_t r = 0; r < N; r++) {
        x_0[r] = (int32_t)(((uint32_t)r * 2654435761u) % (uint32_t)S);
        x_t[r] = r % 3 ? x_0[r] : (int32_t)(((uint32_t)r * 40503u) % (uint32_t)S);
    }
}

/* B sequences' times, spread evenly over (0, 1). */
static void fill_times(float *times, int B)
{
    for (int b = 0; b < B; b++)
        times[b] = (float)(b + 0.5) / (float)B;
}

/* L_cond's inputs other than the logits for B sequences of L positions:
 * the tokens (kept on the host too), exit-rate heads in [-2, 2), the times
 * on the device, and the device's loss and d_rate_h outputs. */
typedef struct lcond_inputs {
    int64_t N;
    int32_t *x_t, *x_0; /* host */
    int32_t *d_xt, *d_x0;
    float *d_h, *d_times, *d_loss, *d_dh;
    nctmc_fp fp;
} lcond_inputs;

static lcond_inputs lcond_inputs_make(nctmc_backend *be, const model_dims *z, int B)
{
    lcond_inputs in;
    int64_t N = (int64_t)B * z->L;
    in.N = N;
    in.x_t = malloc(sizeof(int32_t) * (size_t)N);
    in.x_0 = malloc(sizeof(int32_t) * (size_t)N);
    float *h = malloc(sizeof(float) * (size_t)N), *times = malloc(sizeof(float) * (size_t)B);
    fill_tokens(in.x_t, in.x_0, N, z->S);
    for (int64_t r = 0; r < N; r++)
        h[r] = hash_uniform((uint32_t)r + 77u, -2.0f, 2.0f);
    fill_times(times, B);
    in.d_xt = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    in.d_x0 = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    in.d_h = alloc_or_die(be, sizeof(float) * (size_t)N);
    in.d_times = alloc_or_die(be, sizeof(float) * (size_t)B);
    in.d_loss = alloc_or_die(be, sizeof(float) * (size_t)N);
    in.d_dh = alloc_or_die(be, sizeof(float) * (size_t)N);
    be->ops->upload(be, in.d_xt, in.x_t, sizeof(int32_t) * (size_t)N);
    be->ops->upload(be, in.d_x0, in.x_0, sizeof(int32_t) * (size_t)N);
    be->ops->upload(be, in.d_h, h, sizeof(float) * (size_t)N);
    be->ops->upload(be, in.d_times, times, sizeof(float) * (size_t)B);
    in.fp = (nctmc_fp){NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, z->S, 0.0f, 1e-3f,
                       NCTMC_FP_LINK_SIGMA};
    free(h);
    free(times);
    return in;
}

static void lcond_inputs_free(nctmc_backend *be, lcond_inputs *in)
{
    void *bufs[] = {in->d_xt, in->d_x0, in->d_h, in->d_times, in->d_loss, in->d_dh};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    free(in->x_t);
    free(in->x_0);
}

static void bench_kernels(nctmc_backend *be, const model_dims *z, const bench_args *a)
{
    if (a->kernel_batch == 0)
        return;
    int32_t V = z->V;
    lcond_inputs in = lcond_inputs_make(be, z, a->kernel_batch);
    int64_t N = in.N;
    float *logits = random_logits(be, N, V);
    float *grads = alloc_or_die(be, sizeof(float) * (size_t)N * (size_t)V);
    int32_t *d_out = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    double row_gb = (double)N * V * sizeof(float) * 1e-9;
    int reps = a->reps < 10 ? 10 : a->reps;

    static const struct {
        int32_t method;
        double t, s;
        const char *name;
    } runs[] = {{SM_METHOD_TAU_LEAPING, 0.5, 0.5 - 1.0 / 16, "tau-leaping"},
                {SM_METHOD_TAU_LEAPING, 0.999, 0.001, "tau-leaping-one-step"},
                {SM_METHOD_POSTERIOR, 0.5, 0.5 - 1.0 / 16, "posterior"},
                {SM_METHOD_DENOISE, 0.001, 0.001, "denoise"}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        nctmc_sample_step_args sa;
        memset(&sa, 0, sizeof sa);
        sa.n_rows = N;
        sa.seq_len = z->L;
        sa.row_stride = V;
        sa.method = runs[k].method;
        sa.logits = logits;
        sa.rate_h = in.d_h;
        sa.cfg_scale = 1.0f;
        sa.x_t = in.d_xt;
        sa.t = runs[k].t;
        sa.s = runs[k].s;
        sa.temperature = 1.0f;
        sa.correction_temperature = 1.0f;
        sa.seed = 99;
        sa.step = 3;
        sa.fp = in.fp;
        sa.x_out = d_out;
        double t = time_kernel(be, call_sample_step, &sa, reps);
        int32_t *out = malloc(sizeof(int32_t) * (size_t)N);
        be->ops->download(be, out, d_out, sizeof(int32_t) * (size_t)N);
        int64_t moved = 0;
        for (int64_t r = 0; r < N; r++)
            moved += out[r] != in.x_t[r];
        free(out);
        printf("bench=kernel impl=libnctmc op=sample_step method=%s rows=%lld vocab=%d ms=%.3f "
               "gb_per_s=%.0f moved=%.3f\n",
               runs[k].name, (long long)N, V, 1e3 * t, row_gb / t, (double)moved / (double)N);
        fflush(stdout);
    }

    nctmc_lcond_args la = {N,         z->L,      V,     logits,   in.d_h,  in.d_xt,
                           in.d_x0,   in.d_times, in.fp, 1e-4f,    in.d_loss, grads,
                           in.d_dh,   NULL,      false};
    double t = time_kernel(be, call_lcond, &la, reps);
    /* read once and written once when the row stays in shared memory */
    printf("bench=kernel impl=libnctmc op=lcond rows=%lld vocab=%d ms=%.3f gb_per_s=%.0f\n",
           (long long)N, V, 1e3 * t, 2.0 * row_gb / t);
    fflush(stdout);

    void *bufs[] = {logits, grads, d_out};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    lcond_inputs_free(be, &in);
}

/* One L_cond run of --lcond-split sequences on a backend of its own with
 * $NCTMC_CUDA_LCOND = mode (read at its first lcond call): the median time,
 * and the per-position losses and the first row's gradients. */
typedef struct lcond_run {
    double t;
    float *loss, *grad_row;
} lcond_run;

static lcond_run time_lcond_mode(const nctmc_backend_module *cuda, const char *mode,
                                 const model_dims *z, const bench_args *a)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    setenv("NCTMC_CUDA_LCOND", mode, 1);
    nctmc_backend *be = cuda->create(0, false, err, sizeof err, &no_device);
    if (!be) {
        fprintf(stderr, "bench_gpu_train: %s\n", err);
        exit(1);
    }
    int32_t V = z->V, S = z->S;
    lcond_inputs in = lcond_inputs_make(be, z, a->lcond_split);
    int64_t N = in.N;
    float *logits = random_logits(be, N, V);
    float *grads = alloc_or_die(be, sizeof(float) * (size_t)N * (size_t)V);
    nctmc_lcond_args la = {N,         z->L,      V,     logits,   in.d_h,  in.d_xt,
                           in.d_x0,   in.d_times, in.fp, 1e-4f,    in.d_loss, grads,
                           in.d_dh,   NULL,      false};
    lcond_run run;
    run.t = time_kernel(be, call_lcond, &la, a->reps < 10 ? 10 : a->reps);
    run.loss = malloc(sizeof(float) * (size_t)N);
    run.grad_row = malloc(sizeof(float) * (size_t)V);
    be->ops->download(be, run.loss, in.d_loss, sizeof(float) * (size_t)N);
    be->ops->download(be, run.grad_row, grads, sizeof(float) * (size_t)V);
    /* the minimum: every logit read once, every gradient written once */
    double row_bytes = 4.0 * S + 4.0 * V;
    printf("bench=kernel impl=libnctmc op=lcond_%s rows=%lld vocab=%d ms=%.3f gb_per_s=%.0f "
           "min_bytes_per_row=%.0f\n",
           mode, (long long)N, V, 1e3 * run.t, (double)N * row_bytes * 1e-9 / run.t, row_bytes);
    fflush(stdout);
    be->ops->free(be, logits);
    be->ops->free(be, grads);
    lcond_inputs_free(be, &in);
    be->ops->destroy(be);
    unsetenv("NCTMC_CUDA_LCOND");
    return run;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *x, const float *y, int64_t n)
{
    double d = 0.0, m = 0.0;
    for (int64_t k = 0; k < n; k++) {
        d = fmax(d, fabs((double)x[k] - (double)y[k]));
        m = fmax(m, fabs((double)y[k]));
    }
    return m > 0.0 ? d / m : d;
}

static void bench_lcond_split(const nctmc_backend_module *cuda, const model_dims *z,
                              const bench_args *a)
{
    if (a->lcond_split == 0)
        return;
    lcond_run d = time_lcond_mode(cuda, "default", z, a);
    lcond_run s = time_lcond_mode(cuda, "split", z, a);
    int64_t N = (int64_t)a->lcond_split * z->L;
    printf("bench=lcond_split_vs_default speedup=%.2f loss_diff=%.2e grad_diff=%.2e\n",
           d.t / s.t, rel_diff(s.loss, d.loss, N), rel_diff(s.grad_row, d.grad_row, z->V));
    fflush(stdout);
    free(d.loss);
    free(d.grad_row);
    free(s.loss);
    free(s.grad_row);
}

/* The denoiser link's training chain, step by step, and fused. */
typedef struct link_bench {
    nctmc_backend *be;
    nctmc_denoiser_args d;      /* z -> (logits, rate_h), then back into logits */
    nctmc_lcond_args l;         /* on the link's outputs, gradients in place */
    nctmc_lcond_denoiser_args f;
} link_bench;

static void call_denoiser_forward(nctmc_backend *be, const void *p)
{
    be->ops->denoiser_forward(be, &((const link_bench *)p)->d);
}

static void call_loss_and_backward(nctmc_backend *be, const void *p)
{
    const link_bench *b = p;
    be->ops->lcond(be, &b->l);
    nctmc_denoiser_args d = b->d;
    d.rate_h = b->l.d_rate_h;
    be->ops->denoiser_backward(be, &d);
}

static void call_lcond_denoiser(nctmc_backend *be, const void *p)
{
    if (!be->ops->lcond_denoiser(be, &((const link_bench *)p)->f)) {
        fprintf(stderr, "bench_gpu_train: lcond_denoiser declined\n");
        exit(1);
    }
}

static void bench_lcond_link(const nctmc_backend_module *cuda, const model_dims *z,
                             const bench_args *a)
{
    if (a->lcond_link == 0)
        return;
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    setenv("NCTMC_CUDA_LCOND_LINK", "fused", 1);
    nctmc_backend *be = cuda->create(0, false, err, sizeof err, &no_device);
    if (!be) {
        fprintf(stderr, "bench_gpu_train: %s\n", err);
        exit(1);
    }
    int64_t N = (int64_t)a->lcond_link * z->L;
    int32_t V = z->V, S = z->S, B = a->lcond_link;
    float *x0_logits = random_logits(be, N, V);
    float *logits = alloc_or_die(be, sizeof(float) * (size_t)N * (size_t)V);
    float *dz = alloc_or_die(be, sizeof(float) * (size_t)N * (size_t)V);
    int32_t *x_t = malloc(sizeof(int32_t) * (size_t)N), *x_0 = malloc(sizeof(int32_t) * (size_t)N);
    float *times = malloc(sizeof(float) * (size_t)B);
    fill_tokens(x_t, x_0, N, S);
    fill_times(times, B);
    int32_t *d_xt = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    int32_t *d_x0 = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    float *d_times = alloc_or_die(be, sizeof(float) * (size_t)B);
    float *h = alloc_or_die(be, sizeof(float) * (size_t)N);
    float *dh = alloc_or_die(be, sizeof(float) * (size_t)N);
    float *loss = alloc_or_die(be, sizeof(float) * (size_t)N);
    float *loss_f = alloc_or_die(be, sizeof(float) * (size_t)N);
    be->ops->upload(be, d_xt, x_t, sizeof(int32_t) * (size_t)N);
    be->ops->upload(be, d_x0, x_0, sizeof(int32_t) * (size_t)N);
    be->ops->upload(be, d_times, times, sizeof(float) * (size_t)B);
    nctmc_fp fp = {NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, S, 0.0f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    float scale = 1.0f / (float)N;
    link_bench lb;
    lb.be = be;
    lb.d = (nctmc_denoiser_args){N, z->L, V, x0_logits, d_xt, d_times, fp, logits, h};
    lb.l = (nctmc_lcond_args){N, z->L, V, logits, h, d_xt, d_x0, d_times, fp, scale, loss,
                              logits, dh, NULL, false};
    lb.f = (nctmc_lcond_denoiser_args){N, z->L, V, x0_logits, d_xt, d_x0, d_times, fp, scale,
                                       loss_f, dz, NULL, h};
    int reps = a->reps < 10 ? 10 : a->reps;
    /* each step of the chain needs the previous one's outputs: the link's
     * forward first, so the loss sees its logits */
    double t_fwd = time_kernel(be, call_denoiser_forward, &lb, reps);
    double t_rest = 0.0;
    {
        double *ts = malloc(sizeof(double) * (size_t)reps);
        for (int i = 0; i < reps; i++) {
            call_denoiser_forward(be, &lb);
            be->ops->synchronize(be);
            double t0 = now_s();
            call_loss_and_backward(be, &lb);
            if (be->ops->synchronize(be) != NCTMC_OK) {
                fprintf(stderr, "bench_gpu_train: %s\n", be->error);
                exit(1);
            }
            ts[i] = now_s() - t0;
        }
        t_rest = median(ts, reps);
        free(ts);
    }
    double t_fused = time_kernel(be, call_lcond_denoiser, &lb, reps);
    static const char *const names[3] = {"denoiser_forward", "lcond+denoiser_backward",
                                         "lcond_denoiser"};
    double t[3] = {t_fwd, t_rest, t_fused};
    for (int k = 0; k < 3; k++)
        printf("bench=kernel impl=libnctmc op=%s rows=%lld vocab=%d ms=%.3f\n", names[k],
               (long long)N, V, 1e3 * t[k]);
    float *l_chain = malloc(sizeof(float) * (size_t)N);
    float *l_fused = malloc(sizeof(float) * (size_t)N);
    float *g_chain = malloc(sizeof(float) * (size_t)V);
    float *g_fused = malloc(sizeof(float) * (size_t)V);
    be->ops->download(be, l_chain, loss, sizeof(float) * (size_t)N);
    be->ops->download(be, l_fused, loss_f, sizeof(float) * (size_t)N);
    be->ops->download(be, g_chain, logits, sizeof(float) * (size_t)V);
    be->ops->download(be, g_fused, dz, sizeof(float) * (size_t)V);
    /* a training step with the fused operation leaves out all three */
    printf("bench=lcond_link_fused_vs_chain speedup=%.2f loss_diff=%.2e grad_diff=%.2e\n",
           (t_fwd + t_rest) / t_fused, rel_diff(l_fused, l_chain, N), rel_diff(g_fused, g_chain, V));
    fflush(stdout);
    void *bufs[] = {x0_logits, logits, dz, d_xt, d_x0, d_times, h, dh, loss, loss_f};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    be->ops->destroy(be);
    unsetenv("NCTMC_CUDA_LCOND_LINK");
    free(x_t);
    free(x_0);
    free(times);
    free(l_chain);
    free(l_fused);
    free(g_chain);
    free(g_fused);
}

/* ---- --bf16-logits: NCTMC_CUDA_BF16_LOGITS ------------------------------- */

/* random_logits' values rounded to bfloat16 (bit patterns), on the device. */
static void *random_logits_bf16(nctmc_backend *be, int64_t N, int32_t V)
{
    const int64_t block_rows = 64;
    uint16_t *block = malloc(sizeof(uint16_t) * (size_t)(block_rows * V));
    for (int64_t k = 0; k < block_rows * V; k++) {
        float f = hash_uniform((uint32_t)k * 2654435761u + 12345u, -4.0f, 4.0f);
        uint32_t u;
        memcpy(&u, &f, 4);
        block[k] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    uint16_t *d = alloc_or_die(be, sizeof(uint16_t) * (size_t)N * (size_t)V);
    for (int64_t r = 0; r < N; r += block_rows) {
        int64_t n = N - r < block_rows ? N - r : block_rows;
        be->ops->upload(be, d + r * V, block, sizeof(uint16_t) * (size_t)(n * V));
    }
    free(block);
    return d;
}

/* L_cond with the gradients in place, as the training step runs it, on
 * --bf16-logits sequences of float32 and of bfloat16 logits, on a backend
 * with $NCTMC_CUDA_LCOND = mode; the minimum bytes a row: 4 S + 4 V and
 * 2 S + 2 V. */
static void time_lcond_bf16(const nctmc_backend_module *cuda, const char *mode,
                            const model_dims *z, const bench_args *a)
{
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    setenv("NCTMC_CUDA_LCOND", mode, 1);
    nctmc_backend *be = cuda->create(0, false, err, sizeof err, &no_device);
    unsetenv("NCTMC_CUDA_LCOND");
    if (!be) {
        fprintf(stderr, "bench_gpu_train: %s\n", err);
        exit(1);
    }
    int32_t V = z->V, S = z->S;
    lcond_inputs in = lcond_inputs_make(be, z, a->bf16_logits);
    int64_t N = in.N;
    double t[2];
    for (int bf16 = 0; bf16 < 2; bf16++) {
        /* in place: each timed call overwrites the logits with gradients,
         * which are as cheap to read again */
        void *logits = bf16 ? random_logits_bf16(be, N, V) : (void *)random_logits(be, N, V);
        nctmc_lcond_args la = {N,         z->L,       V,     logits,    in.d_h,    in.d_xt,
                               in.d_x0,   in.d_times, in.fp, 1e-4f,     in.d_loss, logits,
                               in.d_dh,   NULL,       bf16 != 0};
        t[bf16] = time_kernel(be, call_lcond, &la, a->reps < 10 ? 10 : a->reps);
        double row_bytes = (bf16 ? 2.0 : 4.0) * ((double)S + (double)V);
        printf("bench=kernel impl=libnctmc op=lcond_%s logits=%s rows=%lld vocab=%d ms=%.3f "
               "gb_per_s=%.0f min_bytes_per_row=%.0f\n",
               mode, bf16 ? "bf16" : "float32", (long long)N, V, 1e3 * t[bf16],
               (double)N * row_bytes * 1e-9 / t[bf16], row_bytes);
        fflush(stdout);
        be->ops->free(be, logits);
    }
    printf("bench=lcond_bf16_vs_float kernel=%s speedup=%.2f\n", mode, t[0] / t[1]);
    lcond_inputs_free(be, &in);
    be->ops->destroy(be);
}

/* The bf16 train step of --config at `batch` in a fresh "cuda-bf16"
 * context, with NCTMC_CUDA_BF16_LOGITS=1 or without (read when the context
 * creates the backend): the median seconds. */
static double time_train_bf16_logits(const bench_args *a, int32_t batch, bool on, char *desc,
                                     size_t desc_size, const nctmc_backend_module *cuda)
{
    if (on)
        setenv("NCTMC_CUDA_BF16_LOGITS", "1", 1);
    else
        unsetenv("NCTMC_CUDA_BF16_LOGITS");
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cuda-bf16";
    nctmc_context *ctx = NULL;
    nctmc_model_config cfg = config_named(a->config);
    train_state s;
    memset(&s, 0, sizeof s);
    char err[256];
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &s.model) != NCTMC_OK ||
        dit_workspace_create(s.model, ctx->backend, batch, s.model->dims.L, DIT_WS_TRAINING,
                             &s.ws, err, sizeof err) != NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: --bf16-logits: %s\n", nctmc_context_last_error(ctx));
        exit(1);
    }
    unsetenv("NCTMC_CUDA_BF16_LOGITS");
    nctmc_backend *be = ctx->backend;
    const model_dims *z = &s.model->dims;
    int32_t N = batch * z->L;
    int32_t *x_t = malloc(sizeof(int32_t) * (size_t)N), *x_0 = malloc(sizeof(int32_t) * (size_t)N);
    float *times = malloc(sizeof(float) * (size_t)batch);
    fill_tokens(x_t, x_0, N, z->S);
    fill_times(times, batch);
    s.batch = (dit_batch){batch, z->L, x_t, times, NULL, x_0, NULL};
    size_t slab = s.model->slab_floats * sizeof(float);
    s.grads = alloc_or_die(be, slab);
    s.m = alloc_or_die(be, slab);
    s.v = alloc_or_die(be, slab);
    s.ema = alloc_or_die(be, slab);
    double t = time_pass(&s, be, true, a);
    if (on && !s.ws->logits_bf16_last) {
        fprintf(stderr, "bench_gpu_train: --bf16-logits: the train step did not take them\n");
        exit(1);
    }
    cuda->describe(be, desc, desc_size);
    be->ops->free(be, s.grads);
    be->ops->free(be, s.m);
    be->ops->free(be, s.v);
    be->ops->free(be, s.ema);
    dit_workspace_free(s.ws);
    nctmc_model_free(s.model);
    nctmc_context_free(ctx);
    free(x_t);
    free(x_0);
    free(times);
    return t;
}

/* --bf16-logits B: lcond on B sequences of float32 and of bf16 logits
 * (default and split kernels), then the bf16 train step at batch 16 and 64
 * without and with the switch. */
static void bench_bf16_logits(const nctmc_backend_module *cuda, const model_dims *z,
                              const bench_args *a)
{
    time_lcond_bf16(cuda, "default", z, a);
    time_lcond_bf16(cuda, "split", z, a);
    static const int32_t batches[2] = {16, 64};
    char desc[1024];
    for (int k = 0; k < 2; k++) {
        double t[2];
        for (int on = 0; on < 2; on++) {
            t[on] = time_train_bf16_logits(a, batches[k], on != 0, desc, sizeof desc, cuda);
            printf("bench=train_step_bf16_logits precision=bf16 config=%s batch=%d switch=%d "
                   "ms=%.2f\n",
                   a->config, batches[k], on, 1e3 * t[on]);
            fflush(stdout);
        }
        printf("bench=bf16_logits_speedup config=%s batch=%d train_step=%.3f\n# %s\n",
               a->config, batches[k], t[0] / t[1], desc);
        fflush(stdout);
    }
}

/* ---- --graphs: CUDA graph capture against eager launches ---------------- */

/* The named config, or "d256": cpu-small at d 256 with 4 heads. */
static nctmc_model_config graphs_config(const char *name)
{
    if (strcmp(name, "d256") != 0)
        return config_named(name);
    nctmc_model_config c = config_named("cpu-small");
    c.d_model = 256;
    c.n_heads = 4;
    return c;
}

typedef struct graph_times {
    double forward, train_step, sample_step;
} graph_times;

/* The three timings in a fresh context, graph capture on or off (the
 * backend reads NCTMC_CUDA_GRAPHS when the context creates it). */
static graph_times time_graph_mode(const nctmc_backend_module *cuda, const char *config,
                                   bool graphs, bool bf16, const bench_args *a, char *desc,
                                   size_t desc_size)
{
    if (graphs)
        setenv("NCTMC_CUDA_GRAPHS", "1", 1);
    else
        unsetenv("NCTMC_CUDA_GRAPHS");
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = bf16 ? "cuda-bf16" : "cuda";
    nctmc_context *ctx = NULL;
    nctmc_model_config cfg = graphs_config(config);
    train_state s;
    memset(&s, 0, sizeof s);
    char err[256];
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &s.model) != NCTMC_OK ||
        dit_workspace_create(s.model, ctx->backend, a->batch, s.model->dims.L, DIT_WS_TRAINING,
                             &s.ws, err, sizeof err) != NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: --graphs: %s\n", nctmc_context_last_error(ctx));
        exit(1);
    }
    unsetenv("NCTMC_CUDA_GRAPHS");
    nctmc_backend *be = ctx->backend;
    const model_dims *z = &s.model->dims;
    int32_t N = a->batch * z->L;
    int32_t *x_t = malloc(sizeof(int32_t) * (size_t)N), *x_0 = malloc(sizeof(int32_t) * (size_t)N);
    float *times = malloc(sizeof(float) * (size_t)a->batch);
    fill_tokens(x_t, x_0, N, z->S);
    fill_times(times, a->batch);
    s.batch = (dit_batch){a->batch, z->L, x_t, times, NULL, x_0, NULL};
    size_t slab = s.model->slab_floats * sizeof(float);
    s.grads = alloc_or_die(be, slab);
    s.m = alloc_or_die(be, slab);
    s.v = alloc_or_die(be, slab);
    s.ema = alloc_or_die(be, slab);
    /* at least two warm-ups: a key's first use is eager, its second captures */
    bench_args w = *a;
    if (w.warmup < 2)
        w.warmup = 2;
    graph_times t;
    t.forward = time_pass(&s, be, false, &w);
    t.train_step = time_pass(&s, be, true, &w);
    /* the sampler: nctmc_sample with tau-leaping, its first call a warm-up */
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = a->batch;
    nctmc_sampler *smp = NULL;
    if (nctmc_sampler_create(s.model, &sp, &smp) != NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: sampler: %s\n", nctmc_model_last_error(s.model));
        exit(1);
    }
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)N);
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = a->batch;
    p.method = NCTMC_SAMPLE_TAU_LEAPING;
    p.n_steps = a->sample_steps;
    p.final_denoise = false;
    p.seed = 7;
    p.tokens_out = tokens;
    double *st = malloc(sizeof(double) * (size_t)a->reps);
    for (int i = -1; i < a->reps; i++) {
        double t0 = now_s();
        if (nctmc_sample(smp, &p) != NCTMC_OK) {
            fprintf(stderr, "bench_gpu_train: sample: %s\n", nctmc_sampler_last_error(smp));
            exit(1);
        }
        if (i >= 0)
            st[i] = now_s() - t0;
    }
    t.sample_step = median(st, a->reps) / a->sample_steps;
    cuda->describe(be, desc, desc_size);
    free(st);
    free(tokens);
    nctmc_sampler_free(smp);
    be->ops->free(be, s.grads);
    be->ops->free(be, s.m);
    be->ops->free(be, s.v);
    be->ops->free(be, s.ema);
    dit_workspace_free(s.ws);
    nctmc_model_free(s.model);
    nctmc_context_free(ctx);
    free(x_t);
    free(x_0);
    free(times);
    return t;
}

static void bench_graphs(const nctmc_backend_module *cuda, const bench_args *a)
{
    const char *configs[2] = {"d256", a->config};
    int n_configs = strcmp(a->config, "d256") == 0 ? 1 : 2;
    bool bf16 = strcmp(a->precision, "bf16") == 0;
    const char *precision = bf16 ? "bf16" : "tf32";
    for (int c = 0; c < n_configs; c++) {
        graph_times t[2];
        char desc[1024];
        for (int g = 0; g < 2; g++) {
            t[g] = time_graph_mode(cuda, configs[c], g == 1, bf16, a, desc, sizeof desc);
            printf("bench=graphs config=%s precision=%s batch=%d mode=%s forward_ms=%.3f "
                   "train_step_ms=%.3f sample_ms_per_step=%.3f\n",
                   configs[c], precision, a->batch, g ? "graph" : "eager", 1e3 * t[g].forward,
                   1e3 * t[g].train_step, 1e3 * t[g].sample_step);
            fflush(stdout);
        }
        printf("bench=graphs_speedup config=%s precision=%s batch=%d forward=%.3f "
               "train_step=%.3f sample_step=%.3f\n# graph context: %s\n",
               configs[c], precision, a->batch, t[0].forward / t[1].forward,
               t[0].train_step / t[1].train_step, t[0].sample_step / t[1].sample_step, desc);
        fflush(stdout);
    }
}

/* --fast-sample-batch: the double and the float jump draws side by side
 * (random_logits' rows repeat a block of 64, rebuilt here for the host's
 * reference). */
static void bench_fast_sampling(nctmc_backend *be, const model_dims *z, const bench_args *a)
{
    if (a->fast_sample_batch == 0)
        return;
    int64_t N = (int64_t)a->fast_sample_batch * z->L;
    int32_t V = z->V, S = z->S;
    float *logits = random_logits(be, N, V);
    float *block = malloc(sizeof(float) * (size_t)64 * (size_t)V);
    for (int64_t k = 0; k < 64 * (int64_t)V; k++)
        block[k] = hash_uniform((uint32_t)k * 2654435761u + 12345u, -4.0f, 4.0f);
    int32_t *x_t = malloc(sizeof(int32_t) * (size_t)N), *out = malloc(sizeof(int32_t) * (size_t)N);
    float *h = malloc(sizeof(float) * (size_t)N);
    for (int64_t r = 0; r < N; r++) {
        x_t[r] = (int32_t)(((uint32_t)r * 2654435761u) % (uint32_t)S);
        h[r] = hash_uniform((uint32_t)r + 77u, -2.0f, 2.0f);
    }
    int32_t *d_xt = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    int32_t *d_out = alloc_or_die(be, sizeof(int32_t) * (size_t)N);
    float *d_h = alloc_or_die(be, sizeof(float) * (size_t)N);
    be->ops->upload(be, d_xt, x_t, sizeof(int32_t) * (size_t)N);
    be->ops->upload(be, d_h, h, sizeof(float) * (size_t)N);
    nctmc_fp fp = {NCTMC_FP_UNIFORM, NCTMC_FP_LINEAR, S, 0.0f, 1e-3f, NCTMC_FP_LINK_SIGMA};
    double row_gb = (double)N * V * sizeof(float) * 1e-9;
    int reps = a->reps < 10 ? 10 : a->reps;
    static const struct {
        int32_t method;
        double t, s;
        const char *name;
    } runs[] = {{SM_METHOD_TAU_LEAPING, 0.5, 0.5 - 1.0 / 16, "tau-leaping"},
                {SM_METHOD_TAU_LEAPING, 0.999, 0.001, "tau-leaping-one-step"},
                {SM_METHOD_EULER, 0.999, 0.001, "euler-one-step"}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
        for (int32_t mode = SM_EXP_DOUBLE; mode <= SM_EXP_FLOAT; mode++) {
            nctmc_sample_step_args sa;
            memset(&sa, 0, sizeof sa);
            sa.n_rows = N;
            sa.seq_len = z->L;
            sa.row_stride = V;
            sa.method = runs[k].method;
            sa.logits = logits;
            sa.rate_h = d_h;
            sa.cfg_scale = 1.0f;
            sa.x_t = d_xt;
            sa.t = runs[k].t;
            sa.s = runs[k].s;
            sa.temperature = 1.0f;
            sa.correction_temperature = 1.0f;
            sa.seed = 99;
            sa.step = 3;
            sa.fp = fp;
            sa.x_out = d_out;
            sa.exp_mode = mode;
            double t = time_kernel(be, call_sample_step, &sa, reps);
            be->ops->download(be, out, d_out, sizeof(int32_t) * (size_t)N);
            int64_t moved = 0;
            for (int64_t r = 0; r < N; r++)
                moved += out[r] != x_t[r];
            printf("bench=kernel_fast impl=libnctmc op=sample_step method=%s exp=%s rows=%lld "
                   "vocab=%d ms=%.3f gb_per_s=%.0f moved=%.3f",
                   runs[k].name, mode == SM_EXP_FLOAT ? "float" : "double", (long long)N, V,
                   1e3 * t, row_gb / t, (double)moved / (double)N);
            if (mode == SM_EXP_FLOAT) {
                sm_step st = sm_step_prepare(fp, runs[k].method, runs[k].t, runs[k].s, 1.0,
                                             SM_CFG_SEPARATE, 1.0, 1.0, 99, 3);
                st.fast = 1;
                int64_t n_check = N < 256 ? N : 256, equal = 0;
                for (int64_t r = 0; r < n_check; r++) {
                    sm_row_in in = {block + (r % 64) * V, NULL, h[r], 0.0f, x_t[r],
                                    r / z->L, (int32_t)(r % z->L)};
                    int32_t x = in.i;
                    sm_sample_row(&st, &in, &x, NULL, NULL);
                    equal += x == out[r];
                }
                printf(" cpu_equal=%lld/%lld", (long long)equal, (long long)n_check);
            }
            printf("\n");
            fflush(stdout);
        }
    void *bufs[] = {logits, d_xt, d_out, d_h};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->ops->free(be, bufs[k]);
    free(block);
    free(x_t);
    free(out);
    free(h);
}

int main(int argc, char **argv)
{
    bench_args a = parse_args(argc, argv);
    char err[NCTMC_ERROR_SIZE];
    bool no_device = false;
    /* the CUDA backend module, found as the core finds it */
    const nctmc_backend_module *cuda = NULL;
    if (cuda_module_load(&cuda, err, sizeof err) != NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: %s\n", err);
        return 1;
    }
    nctmc_backend *probe = cuda->create(0, false, err, sizeof err, &no_device);
    if (!probe) {
        printf("bench_gpu_train: skipped: %s\n", err);
        return no_device ? 77 : 1;
    }
    probe->ops->destroy(probe);
    if (a.graphs) {
        bench_graphs(cuda, &a);
        return 0;
    }
    if (a.bf16_logits > 0) {
        /* the config's dims from a model on a throwaway CPU context */
        nctmc_context_params pp;
        nctmc_context_params_init(&pp);
        pp.backend = "cpu";
        nctmc_context *c0 = NULL;
        nctmc_model *m0 = NULL;
        nctmc_model_config cfg0 = config_named(a.config);
        if (nctmc_context_create(&pp, &c0) != NCTMC_OK ||
            nctmc_model_create(c0, &cfg0, &m0) != NCTMC_OK) {
            fprintf(stderr, "bench_gpu_train: --bf16-logits: %s\n", nctmc_context_last_error(c0));
            return 1;
        }
        model_dims z0 = m0->dims;
        nctmc_model_free(m0);
        nctmc_context_free(c0);
        bench_bf16_logits(cuda, &z0, &a);
        return 0;
    }

    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cuda";
    nctmc_context *ctx = NULL;
    nctmc_model_config cfg = config_named(a.config);
    train_state s;
    memset(&s, 0, sizeof s);
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &s.model) != NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: cannot create the model: %s\n",
                nctmc_context_last_error(ctx));
        return 1;
    }
    nctmc_backend *be = ctx->backend;
    const model_dims *z = &s.model->dims;
    char desc[512];
    cuda->describe(be, desc, sizeof desc);
    double peak = a.peak_tflops > 0.0 ? a.peak_tflops : peak_for(desc);
    printf("bench=gpu_device peak_bf16_tflops=%.1f params=%lld name=\"%.200s\"\n", peak,
           (long long)s.model->n_params, desc);

    int32_t N = a.batch * z->L;
    int32_t *x_t = malloc(sizeof(int32_t) * (size_t)N), *x_0 = malloc(sizeof(int32_t) * (size_t)N);
    float *times = malloc(sizeof(float) * (size_t)a.batch);
    fill_tokens(x_t, x_0, N, z->S);
    fill_times(times, a.batch);
    s.batch = (dit_batch){a.batch, z->L, x_t, times, NULL, x_0, NULL};
    size_t slab = s.model->slab_floats * sizeof(float);
    if (dit_workspace_create(s.model, be, a.batch, z->L, DIT_WS_TRAINING, &s.ws, err, sizeof err) !=
        NCTMC_OK) {
        fprintf(stderr, "bench_gpu_train: %s\n", err);
        return 1;
    }
    s.grads = alloc_or_die(be, slab);
    s.m = alloc_or_die(be, slab);
    s.v = alloc_or_die(be, slab);
    s.ema = alloc_or_die(be, slab);

    double matmul_params = (double)z->n_layers * 12.0 * z->d * z->d + (double)z->d * (z->V + 1);
    double train_flops = 6.0 * matmul_params + 12.0 * z->n_layers * (double)z->L * z->d;
    printf("bench=model_flops config=%s flops_per_token_train=%.4g flops_per_token_forward=%.4g "
           "matmul_params=%.4g\n",
           a.config, train_flops, train_flops / 3.0, matmul_params);

    for (int bf16 = 0; bf16 < 2; bf16++) {
        const char *precision = bf16 ? "bf16" : "tf32";
        if (strcmp(a.precision, "both") != 0 && strcmp(a.precision, precision) != 0)
            continue;
        cuda->set_bf16(be, bf16 != 0);
        double t_fwd = time_pass(&s, be, false, &a);
        report(a.fused ? "forward_fused" : "forward", precision, &a, z, t_fwd,
               train_flops / 3.0, peak);
        double t_step = time_pass(&s, be, true, &a);
        report(a.fused ? "train_step_fused" : "train_step", precision, &a, z, t_step,
               train_flops, peak);
        size_t peak_used = 0, total = 0;
        cuda->memory(be, &peak_used, &total);
        printf("bench=%s impl=libnctmc precision=%s config=%s batch=%d peak_device_mib=%.0f "
               "device_total_mib=%.0f\n",
               a.fused ? "memory_fused" : "memory", precision, a.config, a.batch, (double)peak_used / 1048576.0,
               (double)total / 1048576.0);
        cuda->describe(be, desc, sizeof desc);
        printf("# %s: %s\n", precision, desc);
        bench_sampling(s.model, precision, &a);
    }

    cuda->set_bf16(be, false);
    bench_kernels(be, z, &a);
    bench_lcond_split(cuda, z, &a);
    bench_lcond_link(cuda, z, &a);
    bench_fast_sampling(be, z, &a);

    be->ops->free(be, s.grads);
    be->ops->free(be, s.m);
    be->ops->free(be, s.v);
    be->ops->free(be, s.ema);
    dit_workspace_free(s.ws);
    nctmc_model_free(s.model);
    nctmc_context_free(ctx);
    free(x_t);
    free(x_0);
    free(times);
    return 0;
}
