/*
 * test_api.c — the public API: versions and status strings, context and model
 * creation, every entry point driven with bad input (an error code and a
 * message, never a crash), parameter introspection, tensor access, the
 * seeded initialisation, and nctmc_model_forward's outputs.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

/* ---- helpers -------------------------------------------------------------- */

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

static nctmc_model_config tiny_config(void)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 7;
    c.seq_len = 6;
    c.n_layers = 2;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 8;
    c.seed = 11;
    return c;
}

static nctmc_model *make_model(nctmc_context *ctx, const nctmc_model_config *c)
{
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_create(ctx, c, &m);
    CHECK(st == NCTMC_OK && m, "model_create: %s (%s)", nctmc_status_string(st),
          nctmc_context_last_error(ctx));
    return m;
}

/* Gives every tensor random values so outputs depend on every weight. */
static void randomize_weights(nctmc_model *m, uint64_t seed)
{
    test_rng rng = test_rng_seed(seed);
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc((size_t)info.n_elements * sizeof(float));
        test_fill_uniform(&rng, v, (size_t)info.n_elements, -0.4f, 0.4f);
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

static int n_errors_logged;
static char last_logged[512];

static void record_log(nctmc_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == NCTMC_LOG_ERROR) {
        n_errors_logged++;
        snprintf(last_logged, sizeof last_logged, "%s", msg);
    }
}

/* ---- versions and status ------------------------------------------------- */

static void test_version_and_status(void)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", NCTMC_VERSION_MAJOR, NCTMC_VERSION_MINOR,
             NCTMC_VERSION_PATCH);
    CHECK(strcmp(nctmc_version(), want) == 0, "version %s != %s", nctmc_version(), want);
    CHECK(nctmc_version_number() == NCTMC_VERSION_NUMBER, "version number");
    nctmc_status codes[] = {NCTMC_OK, NCTMC_ERR_INVALID_ARGUMENT, NCTMC_ERR_OUT_OF_MEMORY,
                            NCTMC_ERR_UNSUPPORTED, NCTMC_ERR_NOT_FOUND, NCTMC_ERR_BACKEND};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = nctmc_status_string(codes[i]);
        CHECK(s && *s && strcmp(s, "unknown status") != 0, "status %d has no name", codes[i]);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(s, nctmc_status_string(codes[j])) != 0, "duplicate status string");
    }
    CHECK(strcmp(nctmc_status_string((nctmc_status)999), "unknown status") == 0, "unknown");
}

/* ---- context ------------------------------------------------------------- */

static void test_context_errors(void)
{
    nctmc_context *ctx = (nctmc_context *)&ctx; /* must be reset to NULL on failure */
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.log_fn = record_log;

    CHECK(nctmc_context_create(&p, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out");

    /* A struct_size below the first published size: rejected, and not
     * logged, since the callback lies past the struct's declared end and
     * the library reads no byte there (tests/test_abi.c has the rest). */
    p.struct_size = 3;
    n_errors_logged = 0;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_INVALID_ARGUMENT && ctx == NULL,
          "bad struct_size");
    CHECK(n_errors_logged == 0, "logged %d", n_errors_logged);
    p.struct_size = sizeof p;

    p.n_threads = -1;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_INVALID_ARGUMENT, "negative threads");
    p.n_threads = 0;

    p.backend = "no-such-backend";
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_NOT_FOUND, "unknown backend");
    CHECK(strstr(last_logged, "no-such-backend") != NULL, "logged: %s", last_logged);
    p.backend = "cuda";
#ifdef NCTMC_HAVE_CUDA
    {
        /* built with the CUDA backend: a context, or "no CUDA device" */
        nctmc_status st = nctmc_context_create(&p, &ctx);
        CHECK(st == NCTMC_OK || (st == NCTMC_ERR_BACKEND && strstr(last_logged, "CUDA")),
              "cuda in a CUDA build: status %d, logged: %s", (int)st, last_logged);
        nctmc_context_free(ctx);
        ctx = NULL;
    }
#else
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_UNSUPPORTED, "cuda in a CPU build");
#endif

    p.backend = "auto";
    p.log_level = (nctmc_log_level)17;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_INVALID_ARGUMENT, "bad log level");

    /* NULL is accepted everywhere a handle is read or released */
    nctmc_context_free(NULL);
    nctmc_model_free(NULL);
    CHECK(nctmc_context_params_init_sized(NULL, sizeof(nctmc_context_params)) ==
                  NCTMC_ERR_INVALID_ARGUMENT &&
              nctmc_model_config_init_sized(NULL, sizeof(nctmc_model_config)) ==
                  NCTMC_ERR_INVALID_ARGUMENT &&
              nctmc_forward_params_init_sized(NULL, sizeof(nctmc_forward_params)) ==
                  NCTMC_ERR_INVALID_ARGUMENT,
          "init of NULL");
    CHECK(strcmp(nctmc_context_backend(NULL), "") == 0, "backend(NULL)");
    CHECK(nctmc_context_n_threads(NULL) == 0, "n_threads(NULL)");
    CHECK(strcmp(nctmc_context_last_error(NULL), "") == 0, "last_error(NULL)");
    CHECK(strcmp(nctmc_model_last_error(NULL), "") == 0, "model last_error(NULL)");
    CHECK(nctmc_model_n_params(NULL) == 0 && nctmc_model_n_tensors(NULL) == 0, "NULL model");
}

static void test_context_defaults(void)
{
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(NULL, &ctx) == NCTMC_OK && ctx, "defaults");
    CHECK(strcmp(nctmc_context_backend(ctx), "cpu") == 0, "auto gives cpu here");
    CHECK(nctmc_context_n_threads(ctx) >= 1, "all cores");
    nctmc_context_free(ctx);
    ctx = make_context(3);
    CHECK(nctmc_context_n_threads(ctx) == 3, "3 threads, got %d", nctmc_context_n_threads(ctx));
    nctmc_context_free(ctx);
}

/* ---- model configuration ------------------------------------------------- */

typedef void (*config_edit)(nctmc_model_config *c);
static void vocab_one(nctmc_model_config *c) { c->vocab_size = 1; }
static void vocab_negative(nctmc_model_config *c) { c->vocab_size = -5; }
static void vocab_huge(nctmc_model_config *c) { c->vocab_size = INT32_MAX; }
static void layers_zero(nctmc_model_config *c) { c->n_layers = 0; }
static void heads_not_dividing(nctmc_model_config *c) { c->n_heads = 3; }
static void odd_head_width(nctmc_model_config *c) { c->d_model = 18; c->n_heads = 6; }
static void seq_len_zero(nctmc_model_config *c) { c->seq_len = 0; }
static void cond_negative(nctmc_model_config *c) { c->cond_dim = -1; }
static void classes_negative(nctmc_model_config *c) { c->n_classes = -2; }
static void bad_process(nctmc_model_config *c) { c->process = (nctmc_process)9; }
static void bad_schedule(nctmc_model_config *c) { c->schedule = (nctmc_schedule)-1; }
static void mixture_zero(nctmc_model_config *c)
{
    c->process = NCTMC_PROCESS_MIXTURE;
    c->mixture_uniform = 0.0f;
}
static void mixture_nan(nctmc_model_config *c)
{
    c->process = NCTMC_PROCESS_MIXTURE;
    c->mixture_uniform = NAN;
}
static void eps_one(nctmc_model_config *c)
{
    c->schedule = NCTMC_SCHEDULE_LOGLINEAR;
    c->schedule_eps = 1.0f;
}
static void pad_negative(nctmc_model_config *c) { c->vocab_pad_multiple = -8; }
/* smaller than the first published layout: the last field missing */
static void struct_size_wrong(nctmc_model_config *c)
{
    c->struct_size = offsetof(nctmc_model_config, seed);
}

static void test_config_errors(void)
{
    nctmc_context *ctx = make_context(1);
    struct {
        config_edit edit;
        const char *word; /* the message must name the problem */
    } cases[] = {
        {vocab_one, "vocab_size"},      {vocab_negative, "vocab_size"},
        {vocab_huge, "vocab_size"},     {layers_zero, "n_layers"},
        {heads_not_dividing, "divisible"}, {odd_head_width, "even"},
        {seq_len_zero, "seq_len"},      {cond_negative, "cond_dim"},
        {classes_negative, "n_classes"}, {bad_process, "process"},
        {bad_schedule, "schedule"},     {mixture_zero, "mixture_uniform"},
        {mixture_nan, "mixture_uniform"}, {eps_one, "schedule_eps"},
        {pad_negative, "vocab_pad_multiple"}, {struct_size_wrong, "struct_size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nctmc_model_config c = tiny_config();
        cases[i].edit(&c);
        nctmc_model *m = (nctmc_model *)&c;
        nctmc_status st = nctmc_model_create(ctx, &c, &m);
        CHECK(st == NCTMC_ERR_INVALID_ARGUMENT && m == NULL, "case %zu: status %d", i, st);
        CHECK(strstr(nctmc_context_last_error(ctx), cases[i].word) != NULL,
              "case %zu: message \"%s\" does not name %s", i, nctmc_context_last_error(ctx),
              cases[i].word);
    }
    nctmc_model_config c = tiny_config();
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(NULL, &c, &m) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ctx");
    CHECK(nctmc_model_create(ctx, NULL, &m) == NCTMC_ERR_INVALID_ARGUMENT, "NULL config");
    CHECK(nctmc_model_create(ctx, &c, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out");

    /* sizes that are each legal but whose byte count cannot be allocated */
    c.vocab_size = 1 << 24;
    c.d_model = 65536;
    c.n_heads = 1;
    nctmc_status st = nctmc_model_create(ctx, &c, &m);
    CHECK(st == NCTMC_ERR_OUT_OF_MEMORY && m == NULL, "absurd model: %d (%s)", st,
          nctmc_context_last_error(ctx));
    nctmc_context_free(ctx);
}

/* ---- introspection, tensor access, initialisation ------------------------ */

static int64_t expected_params(const nctmc_model_config *c)
{
    int64_t d = c->d_model, cd = c->cond_dim, V = c->vocab_size, F = 4 * d;
    int64_t pad = c->vocab_pad_multiple > 1 ? c->vocab_pad_multiple : 1;
    V = (V + pad - 1) / pad * pad;
    int64_t block = d + 3 * d * d + d * d + d + F * d + F + d * F + d + 6 * d * cd + 6 * d;
    int64_t labels = c->n_classes > 0 ? (int64_t)(c->n_classes + 1) * cd : 0;
    return V * d + (cd * 256 + cd + cd * cd + cd) + labels + c->n_layers * block +
           (d + 2 * d * cd + 2 * d + V * d + V + d + 1);
}

static void test_introspection(void)
{
    nctmc_context *ctx = make_context(2);
    nctmc_model_config c;
    nctmc_model_config_init(&c); /* the CPU-small reference size */
    nctmc_model *m = make_model(ctx, &c);
    CHECK(nctmc_model_n_params(m) == expected_params(&c), "cpu-small params %lld != %lld",
          (long long)nctmc_model_n_params(m), (long long)expected_params(&c));
    CHECK(nctmc_model_n_params(m) > 12700000 && nctmc_model_n_params(m) < 12900000,
          "cpu-small is about 12.8M parameters, got %lld", (long long)nctmc_model_n_params(m));
    CHECK(nctmc_model_n_tensors(m) == 5 + 6 * 10 + 7, "tensor count %d",
          nctmc_model_n_tensors(m));
    int64_t total = 0;
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        CHECK(nctmc_model_tensor_info(m, k, &info) == NCTMC_OK, "info %d", k);
        int64_t prod = 1;
        for (int32_t i = 0; i < info.n_dims; i++)
            prod *= info.shape[i];
        CHECK(prod == info.n_elements, "%s: shape product", info.name);
        total += info.n_elements;
        int32_t idx = -1;
        CHECK(nctmc_model_find_tensor(m, info.name, &idx) == NCTMC_OK && idx == k,
              "find %s", info.name);
    }
    CHECK(total == nctmc_model_n_params(m), "sum of tensors");

    nctmc_tensor_info info = {.struct_size = sizeof info};
    CHECK(nctmc_model_tensor_info(m, -1, &info) == NCTMC_ERR_INVALID_ARGUMENT, "index -1");
    CHECK(nctmc_model_tensor_info(m, nctmc_model_n_tensors(m), &info) ==
              NCTMC_ERR_INVALID_ARGUMENT, "index n");
    CHECK(nctmc_model_tensor_info(m, 0, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL info");
    info.struct_size = 1;
    CHECK(nctmc_model_tensor_info(m, 0, &info) == NCTMC_ERR_INVALID_ARGUMENT, "info size");
    int32_t idx;
    CHECK(nctmc_model_find_tensor(m, "blocks.6.norm1.weight", &idx) == NCTMC_ERR_NOT_FOUND,
          "no block 6");
    CHECK(strstr(nctmc_model_last_error(m), "blocks.6.norm1.weight") != NULL, "names it");
    CHECK(nctmc_model_find_tensor(m, NULL, &idx) == NCTMC_ERR_INVALID_ARGUMENT, "NULL name");

    nctmc_model_config got;
    nctmc_model_config_init(&got);
    CHECK(nctmc_model_get_config(m, &got) == NCTMC_OK && got.d_model == 384 &&
              got.n_layers == 6, "get_config");
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

static void test_tensor_access(void)
{
    nctmc_context *ctx = make_context(1);
    nctmc_model_config c = tiny_config();
    nctmc_model *m = make_model(ctx, &c);
    const char *name = "blocks.1.attn_qkv.weight";
    int64_t n = 3 * 16 * 16;
    float *v = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
    test_rng rng = test_rng_seed(3);
    test_fill_uniform(&rng, v, (size_t)n, -1.0f, 1.0f);
    CHECK(nctmc_model_write_tensor(m, name, v, n) == NCTMC_OK, "write");
    CHECK(nctmc_model_read_tensor(m, name, back, n) == NCTMC_OK, "read");
    CHECK(memcmp(v, back, (size_t)n * sizeof(float)) == 0, "round trip");

    CHECK(nctmc_model_write_tensor(m, name, v, n - 1) == NCTMC_ERR_INVALID_ARGUMENT, "short");
    CHECK(nctmc_model_read_tensor(m, name, back, n + 1) == NCTMC_ERR_INVALID_ARGUMENT, "long");
    CHECK(nctmc_model_write_tensor(m, "nope", v, n) == NCTMC_ERR_NOT_FOUND, "unknown name");
    CHECK(nctmc_model_write_tensor(m, name, NULL, n) == NCTMC_ERR_INVALID_ARGUMENT, "NULL src");
    CHECK(nctmc_model_read_tensor(m, name, NULL, n) == NCTMC_ERR_INVALID_ARGUMENT, "NULL dst");
    CHECK(nctmc_model_write_tensor(NULL, name, v, n) == NCTMC_ERR_INVALID_ARGUMENT, "NULL m");
    float keep = v[5];
    v[5] = NAN;
    CHECK(nctmc_model_write_tensor(m, name, v, n) == NCTMC_ERR_INVALID_ARGUMENT, "NaN");
    CHECK(strstr(nctmc_model_last_error(m), "not finite") != NULL, "NaN message");
    v[5] = keep;
    nctmc_model_read_tensor(m, name, back, n);
    CHECK(memcmp(v, back, (size_t)n * sizeof(float)) == 0, "rejected write changed nothing");
    free(v);
    free(back);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* Reads a tensor into a fresh buffer. */
static float *read_all(nctmc_model *m, const char *name, int64_t *n)
{
    int32_t idx;
    nctmc_tensor_info info = {.struct_size = sizeof info};
    nctmc_model_find_tensor(m, name, &idx);
    nctmc_model_tensor_info(m, idx, &info);
    float *v = malloc((size_t)info.n_elements * sizeof(float));
    nctmc_model_read_tensor(m, name, v, info.n_elements);
    *n = info.n_elements;
    return v;
}

static void test_initialisation(void)
{
    nctmc_context *c1 = make_context(1), *c2 = make_context(2);
    nctmc_model_config cfg = tiny_config();
    nctmc_model *a = make_model(c1, &cfg), *b = make_model(c2, &cfg);
    cfg.seed = 12;
    nctmc_model *other = make_model(c1, &cfg);
    for (int32_t k = 0; k < nctmc_model_n_tensors(a); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(a, k, &info);
        int64_t n;
        float *va = read_all(a, info.name, &n), *vb = read_all(b, info.name, &n);
        float *vo = read_all(other, info.name, &n);
        CHECK(memcmp(va, vb, (size_t)n * sizeof(float)) == 0, "%s: same seed differs",
              info.name);
        bool zero = strstr(info.name, "adaLN") || strstr(info.name, "output_layer.linear") ||
                    strstr(info.name, "rate_head") ||
                    (strstr(info.name, ".bias") != NULL);
        bool one = strstr(info.name, "norm") != NULL;
        double bound = info.n_dims == 2 ? 1.0 / sqrt((double)info.shape[1]) : 0.0;
        int n_bad = 0, n_nonzero = 0, n_diff = 0;
        for (int64_t e = 0; e < n; e++) {
            if (zero)
                n_bad += va[e] != 0.0f;
            else if (one)
                n_bad += va[e] != 1.0f;
            else
                n_bad += !(fabs(va[e]) <= bound);
            n_nonzero += va[e] != 0.0f;
            n_diff += va[e] != vo[e];
        }
        CHECK(n_bad == 0, "%s: %d values violate its initialisation", info.name, n_bad);
        if (!zero && !one) {
            CHECK(n_nonzero == n, "%s: uniform init has zeros", info.name);
            CHECK(n_diff > n / 2, "%s: another seed gives the same values", info.name);
        }
        free(va);
        free(vb);
        free(vo);
    }
    nctmc_model_free(a);
    nctmc_model_free(b);
    nctmc_model_free(other);
    nctmc_context_free(c1);
    nctmc_context_free(c2);
}

/* ---- forward -------------------------------------------------------------- */

typedef struct forward_io {
    int32_t B, L, S;
    int32_t *tokens;
    float *times;
    int32_t *labels;
    float *log_rate;
    float *logp;
} forward_io;

static forward_io make_io(int32_t B, int32_t L, int32_t S, uint64_t seed)
{
    forward_io io = {B, L, S, malloc(sizeof(int32_t) * (size_t)(B * L)),
                     malloc(sizeof(float) * (size_t)B), NULL,
                     malloc(sizeof(float) * (size_t)(B * L)),
                     malloc(sizeof(float) * (size_t)(B * L * S))};
    test_rng rng = test_rng_seed(seed);
    for (int32_t i = 0; i < B * L; i++)
        io.tokens[i] = test_randint(&rng, S);
    for (int32_t b = 0; b < B; b++)
        io.times[b] = test_uniform(&rng, 0.05f, 0.95f);
    return io;
}

static void free_io(forward_io *io)
{
    free(io->tokens);
    free(io->times);
    free(io->labels);
    free(io->log_rate);
    free(io->logp);
}

static nctmc_forward_params params_of(forward_io *io)
{
    nctmc_forward_params p;
    nctmc_forward_params_init(&p);
    p.batch = io->B;
    p.length = io->L;
    p.tokens = io->tokens;
    p.times = io->times;
    p.labels = io->labels;
    p.log_rate = io->log_rate;
    p.jump_logprobs = io->logp;
    return p;
}

static double sigma_linear(double t) { return 1.0 / (1.0 - t); }

/* A fresh model has zero output projections: uniform jumps, h = 0, which
 * is lambda = sigma under the sigma link and the context-free optimum
 * sigma (1 - 1/S) of the uniform process under the noise-posterior link.
 * Under the denoiser link zero logits are the context-free posterior
 * p(x0 | x_t) of uniform x0, and its average of the conditional rates is
 * that same optimum. */
static double fresh_rate_factor(nctmc_exit_link link, double S)
{
    return link == NCTMC_EXIT_LINK_SIGMA ? 1.0 : 1.0 - 1.0 / S;
}

static void test_forward_fresh(nctmc_exit_link link)
{
    nctmc_context *ctx = make_context(2);
    nctmc_model_config cfg = tiny_config();
    cfg.exit_link = link;
    nctmc_model *m = make_model(ctx, &cfg);
    forward_io io = make_io(3, 6, 7, 5);
    nctmc_forward_params p = params_of(&io);
    CHECK(nctmc_model_forward(m, &p) == NCTMC_OK, "forward: %s", nctmc_model_last_error(m));
    int bad = 0;
    for (int32_t r = 0; r < 18; r++) {
        double t = io.times[r / 6];
        double want = log(fresh_rate_factor(link, 7.0) * sigma_linear(t));
        bad += fabs(io.log_rate[r] - want) > 1e-5;
        for (int32_t j = 0; j < 7; j++) {
            float lp = io.logp[r * 7 + j];
            if (j == io.tokens[r])
                bad += !(isinf(lp) && lp < 0);
            else
                bad += fabs(lp + log(6.0)) > 1e-5;
        }
    }
    CHECK(bad == 0, "fresh model, link %d: %d outputs wrong", (int)link, bad);
    free_io(&io);
    nctmc_model_free(m);

    cfg.process = NCTMC_PROCESS_MASKED;
    m = make_model(ctx, &cfg);
    io = make_io(2, 6, 7, 6);
    io.tokens[0] = 6;
    io.tokens[7] = 6;
    p = params_of(&io);
    CHECK(nctmc_model_forward(m, &p) == NCTMC_OK, "masked forward");
    bad = 0;
    for (int32_t r = 0; r < 12; r++) {
        double t = io.times[r / 6], a = 1.0 - t;
        if (io.tokens[r] == 6)
            bad += fabs(io.log_rate[r] - log(sigma_linear(t) * a / (1.0 - a))) > 1e-5;
        else
            bad += !(isinf(io.log_rate[r]) && io.log_rate[r] < 0);
    }
    CHECK(bad == 0, "masked exit rates: %d wrong", bad);
    free_io(&io);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* With random weights: distributions normalise, a sequence's output does not
 * depend on the rest of the batch, and the thread count changes no bit. */
static void test_forward_random(void)
{
    nctmc_context *c1 = make_context(1), *c2 = make_context(2);
    nctmc_model_config cfg = tiny_config();
    cfg.n_classes = 3;
    cfg.process = NCTMC_PROCESS_MIXTURE;
    nctmc_model *m = make_model(c1, &cfg);
    randomize_weights(m, 77);
    forward_io io = make_io(4, 6, 7, 8);
    io.labels = malloc(4 * sizeof(int32_t));
    int32_t labels[4] = {0, 3, 2, 1};
    memcpy(io.labels, labels, sizeof labels);
    nctmc_forward_params p = params_of(&io);
    CHECK(nctmc_model_forward(m, &p) == NCTMC_OK, "forward: %s", nctmc_model_last_error(m));
    int bad = 0;
    for (int32_t r = 0; r < 24; r++) {
        double sum = 0.0;
        for (int32_t j = 0; j < 7; j++)
            sum += exp((double)io.logp[r * 7 + j]);
        bad += fabs(sum - 1.0) > 1e-5 || !isfinite(io.log_rate[r]);
    }
    CHECK(bad == 0, "%d rows do not normalise", bad);

    /* the same batch on a 2-thread context through forward_ex: same bits */
    forward_io io2 = make_io(4, 6, 7, 8);
    io2.labels = malloc(4 * sizeof(int32_t));
    memcpy(io2.labels, labels, sizeof labels);
    nctmc_forward_params p2 = params_of(&io2);
    CHECK(nctmc_model_forward_ex(m, c2, &p2) == NCTMC_OK, "forward_ex");
    CHECK(memcmp(io.logp, io2.logp, sizeof(float) * 24 * 7) == 0 &&
              memcmp(io.log_rate, io2.log_rate, sizeof(float) * 24) == 0,
          "1 and 2 threads differ");

    /* sequence 2 alone */
    forward_io one = make_io(1, 6, 7, 9);
    memcpy(one.tokens, io.tokens + 12, 6 * sizeof(int32_t));
    one.times[0] = io.times[2];
    one.labels = malloc(sizeof(int32_t));
    one.labels[0] = labels[2];
    nctmc_forward_params p1 = params_of(&one);
    CHECK(nctmc_model_forward(m, &p1) == NCTMC_OK, "forward alone");
    double worst = 0.0;
    for (int32_t i = 0; i < 6 * 7; i++)
        if (isfinite(one.logp[i]))
            worst = fmax(worst, fabs(one.logp[i] - io.logp[12 * 7 + i]));
    CHECK(worst < 1e-5, "sequence alone vs in batch: %g", worst);

    /* labels change the output (the label embedding is wired in) */
    io2.labels[2] = 0;
    CHECK(nctmc_model_forward_ex(m, c2, &p2) == NCTMC_OK, "forward_ex 2");
    CHECK(memcmp(io.logp + 12 * 7, io2.logp + 12 * 7, 6 * 7 * sizeof(float)) != 0,
          "label has no effect");
    free_io(&one);
    free_io(&io);
    free_io(&io2);
    nctmc_model_free(m);
    nctmc_context_free(c1);
    nctmc_context_free(c2);
}

typedef struct thread_job {
    nctmc_model *model;
    nctmc_context *ctx;
    forward_io io;
    nctmc_status status;
} thread_job;

static void *forward_thread(void *arg)
{
    thread_job *job = arg;
    nctmc_forward_params p = params_of(&job->io);
    for (int rep = 0; rep < 5 && job->status == NCTMC_OK; rep++)
        job->status = nctmc_model_forward_ex(job->model, job->ctx, &p);
    return NULL;
}

/* Several threads share one model, each with its own context. */
static void test_forward_shared_model(void)
{
    nctmc_context *owner = make_context(1);
    nctmc_model_config cfg = tiny_config();
    nctmc_model *m = make_model(owner, &cfg);
    randomize_weights(m, 5);
    forward_io ref = make_io(2, 6, 7, 21);
    nctmc_forward_params p = params_of(&ref);
    CHECK(nctmc_model_forward(m, &p) == NCTMC_OK, "reference forward");
    thread_job jobs[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (thread_job){m, make_context(1 + i % 2), make_io(2, 6, 7, 21), NCTMC_OK};
        pthread_create(&th[i], NULL, forward_thread, &jobs[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].status == NCTMC_OK, "thread %d: %s", i,
              nctmc_context_last_error(jobs[i].ctx));
        CHECK(memcmp(jobs[i].io.logp, ref.logp, sizeof(float) * 12 * 7) == 0,
              "thread %d result differs", i);
        nctmc_context_free(jobs[i].ctx);
        free_io(&jobs[i].io);
    }
    free_io(&ref);
    nctmc_model_free(m);
    nctmc_context_free(owner);
}

static void test_forward_errors(void)
{
    nctmc_context *ctx = make_context(1);
    nctmc_model_config cfg = tiny_config();
    nctmc_model *m = make_model(ctx, &cfg);
    forward_io io = make_io(2, 6, 7, 3);
    nctmc_forward_params p = params_of(&io);

    CHECK(nctmc_model_forward(NULL, &p) == NCTMC_ERR_INVALID_ARGUMENT, "NULL model");
    CHECK(nctmc_model_forward(m, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL params");
    CHECK(nctmc_model_forward_ex(m, NULL, &p) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ctx");
    CHECK(nctmc_model_forward_ex(NULL, ctx, &p) == NCTMC_ERR_INVALID_ARGUMENT, "NULL model ex");

#define EXPECT_BAD(edit, word)                                                           \
    do {                                                                                 \
        nctmc_forward_params q = params_of(&io);                                         \
        edit;                                                                            \
        nctmc_status st_ = nctmc_model_forward(m, &q);                                   \
        CHECK(st_ == NCTMC_ERR_INVALID_ARGUMENT, #edit ": status %d", st_);              \
        CHECK(strstr(nctmc_model_last_error(m), word) != NULL, #edit ": message \"%s\"", \
              nctmc_model_last_error(m));                                                \
    } while (0)

    EXPECT_BAD(q.struct_size = 0, "struct_size");
    EXPECT_BAD(q.batch = 0, "batch");
    EXPECT_BAD(q.batch = -3, "batch");
    EXPECT_BAD(q.length = 7, "length");
    EXPECT_BAD(q.length = 0, "length");
    EXPECT_BAD(q.tokens = NULL, "NULL");
    EXPECT_BAD(q.times = NULL, "NULL");
    EXPECT_BAD((q.log_rate = NULL, q.jump_logprobs = NULL), "requested");
    int32_t labels[2] = {0, 0};
    EXPECT_BAD(q.labels = labels, "no classes");
    io.tokens[4] = 7;
    EXPECT_BAD((void)0, "tokens[4]");
    io.tokens[4] = -1;
    EXPECT_BAD((void)0, "tokens[4]");
    io.tokens[4] = 0;
    float t0 = io.times[1];
    io.times[1] = 0.0f;
    EXPECT_BAD((void)0, "times[1]");
    io.times[1] = 1.0f;
    EXPECT_BAD((void)0, "times[1]");
    io.times[1] = NAN;
    EXPECT_BAD((void)0, "times[1]");
    io.times[1] = t0;

    /* a batch whose buffers cannot exist: an error, not a crash */
    nctmc_forward_params q = params_of(&io);
    q.batch = INT32_MAX;
    nctmc_status st = nctmc_model_forward(m, &q);
    CHECK(st == NCTMC_ERR_OUT_OF_MEMORY, "huge batch: %d (%s)", st, nctmc_model_last_error(m));

    /* and the model still works afterwards */
    CHECK(nctmc_model_forward(m, &p) == NCTMC_OK, "forward after a huge batch");

    /* a batch whose byte counts overflow size_t: caught, not wrapped */
    nctmc_model_config wide = tiny_config();
    wide.vocab_size = 1 << 20;
    wide.seq_len = 1 << 20;
    wide.n_layers = 1;
    wide.d_model = 2;
    wide.n_heads = 1;
    wide.cond_dim = 1;
    nctmc_model *wm = make_model(ctx, &wide);
    q = params_of(&io);
    q.batch = INT32_MAX;
    q.length = 1 << 20;
    st = nctmc_model_forward(wm, &q);
    CHECK(st == NCTMC_ERR_OUT_OF_MEMORY && strstr(nctmc_model_last_error(wm), "overflow"),
          "overflowing batch: %d (%s)", st, nctmc_model_last_error(wm));
    nctmc_model_free(wm);

    CHECK(nctmc_model_forward(m, &p) == NCTMC_OK, "forward after errors");
    free_io(&io);
    nctmc_model_free(m);

    cfg.n_classes = 2;
    m = make_model(ctx, &cfg);
    io = make_io(2, 6, 7, 4);
    int32_t bad_labels[2] = {0, 3};
    EXPECT_BAD(q.labels = bad_labels, "labels[1]");
    bad_labels[1] = -1;
    EXPECT_BAD(q.labels = bad_labels, "labels[1]");
    bad_labels[1] = 2; /* the null label is allowed */
    nctmc_forward_params ok = params_of(&io);
    ok.labels = bad_labels;
    CHECK(nctmc_model_forward(m, &ok) == NCTMC_OK, "null label accepted");
#undef EXPECT_BAD
    free_io(&io);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
}

/* ---- *out on failure -------------------------------------------------------- */

/* Every function that creates a handle sets *out (and *model_out,
 * *trainer_out) to NULL on any failure, also when the failure is a NULL
 * handle or argument checked before anything else. */
static void test_out_null_on_failure(void)
{
    nctmc_context *ctx = make_context(1);
    nctmc_model_config c = tiny_config();
    nctmc_model *model = make_model(ctx, &c);
    void *stale = &ctx; /* what an unset output would still hold */
#define EXPECT_NULL_OUT(type, var, call)                                        \
    do {                                                                        \
        type *var = (type *)stale;                                              \
        nctmc_status st_ = (call);                                              \
        CHECK(st_ != NCTMC_OK && var == NULL, #call ": status %d, *out %s", st_, \
              var ? "left set" : "NULL");                                       \
    } while (0)
    EXPECT_NULL_OUT(nctmc_model, m, nctmc_model_create(NULL, &c, &m));
    EXPECT_NULL_OUT(nctmc_model, m, nctmc_model_create(ctx, NULL, &m));
    EXPECT_NULL_OUT(nctmc_model, m, nctmc_model_load(NULL, "x", &m));
    EXPECT_NULL_OUT(nctmc_model, m, nctmc_model_load(ctx, NULL, &m));
    EXPECT_NULL_OUT(nctmc_sampler, s, nctmc_sampler_create(NULL, NULL, &s));
    EXPECT_NULL_OUT(nctmc_trainer, t, nctmc_trainer_create(NULL, NULL, &t));
    EXPECT_NULL_OUT(nctmc_trainer, t, nctmc_trainer_create(model, NULL, &t));
    EXPECT_NULL_OUT(nctmc_tokenizer, k, nctmc_tokenizer_clone(NULL, &k));
    EXPECT_NULL_OUT(nctmc_tokenizer, k, nctmc_tokenizer_load(ctx, NULL, &k));
    EXPECT_NULL_OUT(nctmc_tokenizer, k, nctmc_tokenizer_create_chars(ctx, NULL, 3, &k));
    EXPECT_NULL_OUT(nctmc_tokenizer, k, nctmc_tokenizer_create_image(ctx, 0, 1, 2, &k));
    EXPECT_NULL_OUT(nctmc_dataset, d, nctmc_dataset_open(ctx, NULL, &d));
#undef EXPECT_NULL_OUT
    nctmc_model *m = (nctmc_model *)stale;
    nctmc_trainer *t = (nctmc_trainer *)stale;
    CHECK(nctmc_trainer_resume(NULL, "x", NULL, &m, &t) == NCTMC_ERR_INVALID_ARGUMENT &&
              m == NULL && t == NULL,
          "trainer_resume(NULL ctx) clears both outputs");
    m = (nctmc_model *)stale;
    t = (nctmc_trainer *)stale;
    CHECK(nctmc_trainer_resume(ctx, NULL, NULL, &m, &t) == NCTMC_ERR_INVALID_ARGUMENT &&
              m == NULL && t == NULL,
          "trainer_resume(NULL path) clears both outputs");
    nctmc_model_free(model);
    nctmc_context_free(ctx);
}

int main(void)
{
    test_version_and_status();
    test_context_errors();
    test_context_defaults();
    test_config_errors();
    test_introspection();
    test_tensor_access();
    test_initialisation();
    test_forward_fresh(NCTMC_EXIT_LINK_SIGMA);
    test_forward_fresh(NCTMC_EXIT_LINK_NOISE_POSTERIOR);
    test_forward_fresh(NCTMC_EXIT_LINK_DENOISER);
    test_forward_random();
    test_forward_shared_model();
    test_forward_errors();
    test_out_null_on_failure();
    return test_finish("api");
}
