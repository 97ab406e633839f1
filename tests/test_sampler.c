/*
 * test_sampler.c — nctmc_sample() on small random models, through the public
 * API only (libnctmc.so and nctmc.h): bad parameters give clear errors,
 * infilling never changes a fixed token (every method, with correction),
 * cancelling, determinism (seeds, threads), and a sequence alone versus
 * inside a batch of 64. The per-row math and the backend's sample_step op
 * are test_sampler_math.c's.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

static const char *proc_name(int32_t process)
{
    return process == NCTMC_PROCESS_UNIFORM ? "uniform"
           : process == NCTMC_PROCESS_MASKED ? "masked"
                                             : "mixture";
}

static const int32_t procs[3] = {NCTMC_PROCESS_UNIFORM, NCTMC_PROCESS_MASKED,
                                 NCTMC_PROCESS_MIXTURE};

/* ------------------------------------------------------------------------ */
/* nctmc_sample() on small random models                                    */
/* ------------------------------------------------------------------------ */

static nctmc_context *make_context(int n_threads)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = n_threads;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    CHECK(st == NCTMC_OK && ctx, "context_create: %s", nctmc_status_string(st));
    return ctx;
}

static nctmc_model_config tiny_config(nctmc_process process, int32_t n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 11;
    c.seq_len = 12;
    c.n_layers = 2;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 8;
    c.n_classes = n_classes;
    c.process = process;
    c.mixture_uniform = 0.3f;
    c.seed = 5;
    return c;
}

/* Every tensor random, so outputs depend on every weight and the output
 * layer and rate head are not zero; zero_output_weights then zeroes the
 * output projection's and rate head's weights (keeping random biases), so
 * the outputs no longer depend on the input at all. */
static void randomize_weights(nctmc_model *m, uint64_t seed, bool zero_output_weights)
{
    test_rng rng = test_rng_seed(seed);
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc((size_t)info.n_elements * sizeof(float));
        test_fill_uniform(&rng, v, (size_t)info.n_elements, -0.5f, 0.5f);
        if (zero_output_weights && (strcmp(info.name, "output_layer.linear.weight") == 0 ||
                                    strcmp(info.name, "output_layer.rate_head.weight") == 0))
            memset(v, 0, (size_t)info.n_elements * sizeof(float));
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

static nctmc_model *make_model(nctmc_context *ctx, nctmc_process process, int32_t n_classes,
                               bool zero_output_weights)
{
    nctmc_model_config c = tiny_config(process, n_classes);
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_create(ctx, &c, &m);
    CHECK(st == NCTMC_OK && m, "model_create: %s", nctmc_context_last_error(ctx));
    if (m)
        randomize_weights(m, 100 + (uint64_t)process, zero_output_weights);
    return m;
}

static nctmc_sampler *make_sampler(nctmc_model *m, nctmc_context *ctx, int32_t max_batch)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = max_batch;
    sp.ctx = ctx;
    nctmc_sampler *s = NULL;
    nctmc_status st = nctmc_sampler_create(m, &sp, &s);
    CHECK(st == NCTMC_OK && s, "sampler_create: %s", nctmc_context_last_error(ctx));
    return s;
}

/* ---- bad parameters ------------------------------------------------------ */

typedef struct bad_case {
    const char *name;      /* what is wrong */
    const char *keyword;   /* the message must mention it */
    void (*apply)(nctmc_sample_params *p);
} bad_case;

static int32_t fixed_tokens_bad[64];
static uint8_t fixed_mask_one[64] = {1};
static int32_t labels_bad[2] = {99, 0};

static void bad_batch0(nctmc_sample_params *p) { p->batch = 0; }
static void bad_batch_big(nctmc_sample_params *p) { p->batch = 3; }
static void bad_length_neg(nctmc_sample_params *p) { p->length = -1; }
static void bad_length_big(nctmc_sample_params *p) { p->length = 13; }
static void bad_method(nctmc_sample_params *p) { p->method = (nctmc_sample_method)7; }
static void bad_grid(nctmc_sample_params *p) { p->grid = (nctmc_time_grid)5; }
static void bad_steps(nctmc_sample_params *p) { p->n_steps = 0; }
static void bad_tmin0(nctmc_sample_params *p) { p->t_min = 0.0f; }
static void bad_order(nctmc_sample_params *p) { p->t_min = 0.6f; p->t_max = 0.5f; }
static void bad_tmax1(nctmc_sample_params *p) { p->t_max = 1.0f; }
static void bad_tnan(nctmc_sample_params *p) { p->t_max = NAN; }
static void bad_temp0(nctmc_sample_params *p) { p->temperature = 0.0f; }
static void bad_temp_inf(nctmc_sample_params *p) { p->temperature = INFINITY; }
static void bad_fixed_no_tokens(nctmc_sample_params *p) { p->fixed_mask = fixed_mask_one; }
static void bad_fixed_range(nctmc_sample_params *p)
{
    fixed_tokens_bad[0] = 11;
    p->fixed_mask = fixed_mask_one;
    p->fixed_tokens = fixed_tokens_bad;
}
static void bad_fixed_neg(nctmc_sample_params *p)
{
    fixed_tokens_bad[0] = -1;
    p->fixed_mask = fixed_mask_one;
    p->fixed_tokens = fixed_tokens_bad;
}
static void bad_labels(nctmc_sample_params *p) { p->labels = labels_bad; }
static void bad_cfg(nctmc_sample_params *p) { p->cfg_scale = 2.0f; }
static void bad_cfg_nan(nctmc_sample_params *p) { p->cfg_scale = NAN; }
static void bad_corr_steps(nctmc_sample_params *p) { p->correction_steps = -1; }
static void bad_corr_temp(nctmc_sample_params *p)
{
    p->correction_steps = 2;
    p->correction_temperature = 0.0f;
}
static void bad_corr_time(nctmc_sample_params *p)
{
    p->correction_steps = 2;
    p->correction_time = 1.0f;
}
static void bad_first_seq(nctmc_sample_params *p) { p->first_sequence = -1; }
static void bad_out(nctmc_sample_params *p) { p->tokens_out = NULL; }
static void bad_size(nctmc_sample_params *p) { p->struct_size = 3; }

static const bad_case bad_cases[] = {
    {"batch 0", "batch", bad_batch0},
    {"batch above max_batch", "max_batch", bad_batch_big},
    {"negative length", "length", bad_length_neg},
    {"length above max_length", "max_length", bad_length_big},
    {"unknown method", "method", bad_method},
    {"unknown grid", "grid", bad_grid},
    {"no steps", "n_steps", bad_steps},
    {"t_min 0", "t_min", bad_tmin0},
    {"t_min > t_max", "t_max", bad_order},
    {"t_max 1", "t_max", bad_tmax1},
    {"t_max NaN", "t_max", bad_tnan},
    {"temperature 0", "temperature", bad_temp0},
    {"temperature inf", "temperature", bad_temp_inf},
    {"fixed_mask without fixed_tokens", "fixed_tokens", bad_fixed_no_tokens},
    {"fixed token = S", "fixed_tokens[0]", bad_fixed_range},
    {"fixed token -1", "fixed_tokens[0]", bad_fixed_neg},
    {"labels on an unconditional model", "labels", bad_labels},
    {"cfg without classes", "cfg_scale", bad_cfg},
    {"cfg NaN", "cfg_scale", bad_cfg_nan},
    {"negative correction_steps", "correction_steps", bad_corr_steps},
    {"correction_temperature 0", "correction_temperature", bad_corr_temp},
    {"correction_time 1", "correction_time", bad_corr_time},
    {"negative first_sequence", "first_sequence", bad_first_seq},
    {"tokens_out NULL", "tokens_out", bad_out},
    {"struct_size", "struct_size", bad_size},
};

static void test_bad_sample_params(nctmc_context *ctx)
{
    nctmc_model *m = make_model(ctx, NCTMC_PROCESS_UNIFORM, 0, false);
    nctmc_sampler *s = m ? make_sampler(m, ctx, 2) : NULL;
    if (!s) {
        nctmc_model_free(m);
        return;
    }
    int32_t out[64];
    for (size_t k = 0; k < sizeof bad_cases / sizeof bad_cases[0]; k++) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.n_steps = 2;
        p.tokens_out = out;
        bad_cases[k].apply(&p);
        for (int r = 0; r < 64; r++)
            out[r] = -7;
        nctmc_status st = nctmc_sample(s, &p);
        const char *msg = nctmc_sampler_last_error(s);
        CHECK(st == NCTMC_ERR_INVALID_ARGUMENT, "%s: status %s", bad_cases[k].name,
              nctmc_status_string(st));
        CHECK(strstr(msg, bad_cases[k].keyword) != NULL, "%s: message \"%s\" does not name %s",
              bad_cases[k].name, msg, bad_cases[k].keyword);
        CHECK(out[0] == -7 && out[63] == -7, "%s: tokens_out was written", bad_cases[k].name);
    }
    CHECK(nctmc_sample(NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL sampler accepted");
    CHECK(nctmc_sample(s, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL params accepted");
    CHECK(strcmp(nctmc_sampler_last_error(NULL), "") == 0, "last_error(NULL) is not \"\"");
    nctmc_sampler_free(s);
    nctmc_sampler_free(NULL);

    /* the mask token cannot be fixed; labels out of range; cfg accepted
     * with classes */
    nctmc_model *mm = make_model(ctx, NCTMC_PROCESS_MASKED, 3, false);
    nctmc_sampler *ms = mm ? make_sampler(mm, ctx, 2) : NULL;
    if (ms) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.n_steps = 2;
        p.tokens_out = out;
        fixed_tokens_bad[0] = 10;
        p.fixed_mask = fixed_mask_one;
        p.fixed_tokens = fixed_tokens_bad;
        CHECK(nctmc_sample(ms, &p) == NCTMC_ERR_INVALID_ARGUMENT &&
                  strstr(nctmc_sampler_last_error(ms), "mask token"),
              "fixing the mask token: %s", nctmc_sampler_last_error(ms));
        nctmc_sample_params_init(&p);
        p.n_steps = 2;
        p.tokens_out = out;
        p.labels = labels_bad;
        CHECK(nctmc_sample(ms, &p) == NCTMC_ERR_INVALID_ARGUMENT &&
                  strstr(nctmc_sampler_last_error(ms), "labels[0] = 99"),
              "label out of range: %s", nctmc_sampler_last_error(ms));
        p.labels = NULL;
        p.cfg_scale = -1.0f;
        CHECK(nctmc_sample(ms, &p) == NCTMC_ERR_INVALID_ARGUMENT, "negative cfg accepted");
        p.cfg_scale = 2.5f;
        CHECK(nctmc_sample(ms, &p) == NCTMC_OK, "cfg with classes: %s",
              nctmc_sampler_last_error(ms));
    }
    nctmc_sampler_free(ms);
    nctmc_model_free(mm);
    nctmc_model_free(m);
}

static void test_bad_sampler_create(nctmc_context *ctx)
{
    nctmc_model *m = make_model(ctx, NCTMC_PROCESS_UNIFORM, 0, false);
    if (!m)
        return;
    nctmc_sampler *s = (nctmc_sampler *)&s;
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.ctx = ctx;
    CHECK(nctmc_sampler_create(NULL, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT && s == NULL &&
              strstr(nctmc_context_last_error(ctx), "model"),
          "NULL model: %s", nctmc_context_last_error(ctx));
    CHECK(nctmc_sampler_create(m, &sp, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out accepted");
    sp.max_batch = 0;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_context_last_error(ctx), "max_batch"),
          "max_batch 0: %s", nctmc_context_last_error(ctx));
    sp.max_batch = 2;
    sp.max_length = 13;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_context_last_error(ctx), "max_length"),
          "max_length 13: %s", nctmc_context_last_error(ctx));
    sp.max_length = 0;
    sp.struct_size = 1;
    /* too small to hold its ctx field: the failure is reported to the model */
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_model_last_error(m), "struct_size"),
          "struct_size: %s", nctmc_model_last_error(m));
    CHECK(nctmc_sampler_create(m, NULL, &s) == NCTMC_OK && s, "default params: %s",
          nctmc_context_last_error(ctx));
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

/* ---- infilling ----------------------------------------------------------- */

typedef struct fixed_watch {
    const uint8_t *mask;
    const int32_t *tokens;
    int violations;
    int calls;
    int32_t S;
    int out_of_range;
} fixed_watch;

static int32_t watch_fixed(int32_t step, int32_t n_steps, const int32_t *tokens,
                           int32_t batch, int32_t length, void *user)
{
    (void)step;
    (void)n_steps;
    fixed_watch *w = user;
    w->calls++;
    for (int32_t r = 0; r < batch * length; r++) {
        if (w->mask[r] && tokens[r] != w->tokens[r])
            w->violations++;
        if (tokens[r] < 0 || tokens[r] >= w->S)
            w->out_of_range++;
    }
    return true;
}

static void test_infilling(nctmc_context *ctx)
{
    enum { B = 3, L = 12 };
    static const char *mname[] = {"tau-leaping", "euler", "posterior"};
    test_rng rng = test_rng_seed(12);
    for (int pr = 0; pr < 3; pr++) {
        nctmc_model *m = make_model(ctx, (nctmc_process)procs[pr], 0, false);
        nctmc_sampler *s = m ? make_sampler(m, ctx, B) : NULL;
        if (!s) {
            nctmc_model_free(m);
            continue;
        }
        int32_t n_data = procs[pr] == NCTMC_PROCESS_UNIFORM ? 11 : 10;
        for (int method = 0; method < 3; method++) {
            uint8_t mask[B * L];
            int32_t fixed[B * L], out[B * L];
            for (int r = 0; r < B * L; r++) {
                /* a prefix, a suffix and scattered positions */
                int l = r % L;
                mask[r] = l < 3 || l == L - 1 || test_randint(&rng, 4) == 0;
                fixed[r] = mask[r] ? test_randint(&rng, n_data) : 999;
            }
            fixed_watch w = {mask, fixed, 0, 0, 11, 0};
            nctmc_sample_params p;
            nctmc_sample_params_init(&p);
            p.batch = B;
            p.method = (nctmc_sample_method)method;
            p.n_steps = 12;
            p.grid = method == 1 ? NCTMC_GRID_GEOMETRIC : NCTMC_GRID_UNIFORM;
            p.fixed_mask = mask;
            p.fixed_tokens = fixed;
            p.correction_steps = 4;
            p.correction_temperature = 0.5f;
            p.seed = 21 + (uint64_t)method;
            p.callback = watch_fixed;
            p.user_data = &w;
            p.tokens_out = out;
            nctmc_status st = nctmc_sample(s, &p);
            CHECK(st == NCTMC_OK, "infill %s/%s: %s", mname[method], proc_name(procs[pr]),
                  nctmc_sampler_last_error(s));
            int changed = 0, masks_left = 0;
            for (int r = 0; r < B * L; r++) {
                changed += mask[r] && out[r] != fixed[r];
                masks_left += procs[pr] != NCTMC_PROCESS_UNIFORM && out[r] == 10;
            }
            CHECK(changed == 0 && w.violations == 0,
                  "infill %s/%s: %d fixed tokens changed in the output, %d in callbacks",
                  mname[method], proc_name(procs[pr]), changed, w.violations);
            CHECK(w.calls >= 12 && w.out_of_range == 0,
                  "infill %s/%s: %d callbacks, %d tokens out of range", mname[method],
                  proc_name(procs[pr]), w.calls, w.out_of_range);
            CHECK(masks_left == 0, "infill %s/%s: %d mask tokens survive the final denoise",
                  mname[method], proc_name(procs[pr]), masks_left);
        }
        nctmc_sampler_free(s);
        nctmc_model_free(m);
    }
}

/* A length below max_length: only batch * length tokens are produced and
 * written, each a valid state. */
static void test_shorter_length(nctmc_context *ctx)
{
    nctmc_model *m = make_model(ctx, NCTMC_PROCESS_MIXTURE, 0, false);
    nctmc_sampler *s = m ? make_sampler(m, ctx, 3) : NULL;
    for (int method = 0; method < 3 && s; method++) {
        int32_t out[3 * 12];
        for (int r = 0; r < 36; r++)
            out[r] = -5;
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = 2;
        p.length = 5;
        p.method = (nctmc_sample_method)method;
        p.n_steps = 6;
        p.correction_steps = 2;
        p.tokens_out = out;
        nctmc_status st = nctmc_sample(s, &p);
        int bad = 0, untouched = 0;
        for (int r = 0; r < 10; r++)
            bad += out[r] < 0 || out[r] >= 10;
        for (int r = 10; r < 36; r++)
            untouched += out[r] == -5;
        CHECK(st == NCTMC_OK && bad == 0 && untouched == 26,
              "length 5, method %d: %s, %d bad tokens, %d of 26 past the end untouched", method,
              nctmc_sampler_last_error(s), bad, untouched);
    }
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

/* ---- cancelling ---------------------------------------------------------- */

typedef struct cancel_watch {
    int32_t stop_at;
    int32_t seen[64];
    int n_seen;
    int32_t last[64];
} cancel_watch;

static int32_t cancel_at(int32_t step, int32_t n_steps, const int32_t *tokens, int32_t batch,
                         int32_t length, void *user)
{
    (void)n_steps;
    cancel_watch *w = user;
    if (w->n_seen < 64)
        w->seen[w->n_seen++] = step;
    memcpy(w->last, tokens, (size_t)(batch * length) * sizeof(int32_t));
    return step < w->stop_at;
}

static void test_cancel(nctmc_context *ctx)
{
    nctmc_model *m = make_model(ctx, NCTMC_PROCESS_UNIFORM, 0, false);
    nctmc_sampler *s = m ? make_sampler(m, ctx, 2) : NULL;
    if (!s) {
        nctmc_model_free(m);
        return;
    }
    cancel_watch w;
    memset(&w, 0, sizeof w);
    w.stop_at = 3;
    int32_t out[24];
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = 2;
    p.n_steps = 10;
    p.callback = cancel_at;
    p.user_data = &w;
    p.tokens_out = out;
    nctmc_status st = nctmc_sample(s, &p);
    CHECK(st == NCTMC_ERR_CANCELLED, "cancel: status %s", nctmc_status_string(st));
    CHECK(w.n_seen == 3 && w.seen[0] == 1 && w.seen[1] == 2 && w.seen[2] == 3,
          "cancel: the callback saw %d steps (want 1, 2, 3)", w.n_seen);
    CHECK(memcmp(out, w.last, sizeof out) == 0, "cancel: tokens_out is not the state at step 3");
    CHECK(strstr(nctmc_sampler_last_error(s), "cancel") != NULL, "cancel message: \"%s\"",
          nctmc_sampler_last_error(s));

    /* cancelling inside the correction pass: steps n_steps + k */
    memset(&w, 0, sizeof w);
    w.stop_at = 12;
    p.correction_steps = 5;
    p.correction_temperature = 1.0f; /* proposals that differ, so no early finish */
    st = nctmc_sample(s, &p);
    CHECK(st == NCTMC_ERR_CANCELLED && w.n_seen == 12 && w.seen[10] == 11 && w.seen[11] == 12,
          "cancel in correction: status %s, %d steps seen", nctmc_status_string(st), w.n_seen);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

/* ---- determinism ----------------------------------------------------------- */

static nctmc_status sample_once(nctmc_sampler *s, int32_t method, int32_t batch,
                                int64_t first_sequence, uint64_t seed, int32_t correction,
                                float cfg, const int32_t *labels, int32_t *out)
{
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = batch;
    p.method = (nctmc_sample_method)method;
    p.n_steps = 8;
    p.seed = seed;
    p.first_sequence = first_sequence;
    p.correction_steps = correction;
    p.cfg_scale = cfg;
    p.labels = labels;
    p.tokens_out = out;
    nctmc_status st = nctmc_sample(s, &p);
    CHECK(st == NCTMC_OK, "sample: %s", nctmc_sampler_last_error(s));
    return st;
}

static void test_determinism(nctmc_context *ctx1, nctmc_context *ctx2)
{
    enum { B = 4, N = B * 12 };
    static const int32_t labels[B] = {0, 1, 2, 1};
    for (int pr = 0; pr < 3; pr++) {
        nctmc_model *m = make_model(ctx1, (nctmc_process)procs[pr], 3, false);
        nctmc_sampler *s1 = m ? make_sampler(m, ctx1, B) : NULL;
        nctmc_sampler *s2 = m ? make_sampler(m, ctx2, B) : NULL;
        for (int method = 0; method < 3 && s1 && s2; method++) {
            int32_t a[N], b[N], c[N], d[N];
            sample_once(s1, method, B, 0, 7, 3, 2.0f, labels, a);
            sample_once(s1, method, B, 0, 7, 3, 2.0f, labels, b);
            sample_once(s1, method, B, 0, 8, 3, 2.0f, labels, c);
            sample_once(s2, method, B, 0, 7, 3, 2.0f, labels, d);
            CHECK(memcmp(a, b, sizeof a) == 0, "%s method %d: same seed, different samples",
                  proc_name(procs[pr]), method);
            CHECK(memcmp(a, c, sizeof a) != 0, "%s method %d: seeds 7 and 8 give the same samples",
                  proc_name(procs[pr]), method);
            CHECK(memcmp(a, d, sizeof a) == 0, "%s method %d: 1 and 2 threads differ",
                  proc_name(procs[pr]), method);
        }
        nctmc_sampler_free(s1);
        nctmc_sampler_free(s2);
        nctmc_model_free(m);
    }
}

/*
 * Sequence k drawn alone (batch 1, first_sequence = k) against the same
 * sequence inside a batch of 64. The random numbers are keyed by sequence,
 * so any difference can only come from the model's outputs for that
 * sequence differing with the batch around it (rounding in batched
 * products), which a single flipped draw then propagates. With the output
 * projection's and rate head's weights zeroed the outputs are exactly the
 * biases, independent of every input: there the agreement must be exact.
 */
static double batch_agreement(nctmc_context *ctx, nctmc_process process, int32_t method,
                              bool zero_output)
{
    enum { BIG = 64, L = 12 };
    static const int64_t probes[] = {0, 17, 63};
    nctmc_model *m = make_model(ctx, process, 0, zero_output);
    nctmc_sampler *big = m ? make_sampler(m, ctx, BIG) : NULL;
    nctmc_sampler *one = m ? make_sampler(m, ctx, 1) : NULL;
    double agree = -1.0;
    int32_t *all = malloc(sizeof(int32_t) * BIG * L), alone[L];
    if (big && one && sample_once(big, method, BIG, 100, 5, 2, 1.0f, NULL, all) == NCTMC_OK) {
        long same = 0, total = 0;
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
            if (sample_once(one, method, 1, 100 + probes[k], 5, 2, 1.0f, NULL, alone) != NCTMC_OK)
                break;
            for (int l = 0; l < L; l++)
                same += alone[l] == all[probes[k] * L + l];
            total += L;
        }
        agree = total ? (double)same / (double)total : -1.0;
    }
    free(all);
    nctmc_sampler_free(big);
    nctmc_sampler_free(one);
    nctmc_model_free(m);
    return agree;
}

static void test_batch_independence(nctmc_context *ctx)
{
    static const char *mname[] = {"tau-leaping", "euler", "posterior"};
    for (int pr = 0; pr < 3; pr++)
        for (int method = 0; method < 3; method++) {
            double random_w = batch_agreement(ctx, (nctmc_process)procs[pr], method, false);
            double zero_w = batch_agreement(ctx, (nctmc_process)procs[pr], method, true);
            printf("batch independence %s/%s: agreement %.4f (random model), %.4f (zero output "
                   "weights)\n",
                   mname[method], proc_name(procs[pr]), random_w, zero_w);
            CHECK(random_w >= 0.9, "%s/%s: sequence alone vs in a batch of 64 agree on %.3f",
                  mname[method], proc_name(procs[pr]), random_w);
            CHECK(zero_w == 1.0, "%s/%s: input-independent model, agreement %.4f (want exactly 1)",
                  mname[method], proc_name(procs[pr]), zero_w);
        }
}


int main(void)
{
    nctmc_context *ctx1 = make_context(1), *ctx2 = make_context(2);
    if (ctx1 && ctx2) {
        test_bad_sample_params(ctx2);
        test_bad_sampler_create(ctx2);
        test_infilling(ctx2);
        test_cancel(ctx2);
        test_shorter_length(ctx2);
        test_determinism(ctx1, ctx2);
        test_batch_independence(ctx2);
    }
    nctmc_context_free(ctx1);
    nctmc_context_free(ctx2);
    return test_finish("sampler");
}
