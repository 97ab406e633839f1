/*
 * test_quant.c — models with reduced-precision weights through the public
 * API only (libnctmc.so and nctmc.h): nctmc_model_convert(), its forward
 * pass against the float model's, sampling, the format-3 checkpoint (round
 * trip bit for bit; copied, never mapped, with the reason logged at INFO)
 * and the calls a sampling-only model refuses. What a
 * converted model holds against the library's own rounding, the file's
 * layout and every damaged variant are test_quant_internal.c's.
 */
#include <string.h>
#include <unistd.h>

#include "tiny_model.h"


#define WIDE_D 64

static char tmp_dir[] = "/tmp/nctmc_quant_XXXXXX";

static void tmp_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_dir, name);
}

/* A model wide enough that the linear layers dominate, with random weights
 * (tiny_randomize's +-0.3). */
static nctmc_model *float_model(nctmc_context *ctx)
{
    nctmc_model_config c = tiny_model_config(NCTMC_PROCESS_MIXTURE, 3);
    c.d_model = WIDE_D;
    c.n_heads = 4;
    c.n_layers = 2;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "create: %s",
          nctmc_context_last_error(ctx));
    if (m)
        tiny_randomize(m, 5);
    return m;
}

static float *read_all(const nctmc_model *m, const char *name, int64_t *n)
{
    int32_t k = -1;
    nctmc_tensor_info info;
    nctmc_tensor_info_init(&info);
    if (nctmc_model_find_tensor(m, name, &k) != NCTMC_OK ||
        nctmc_model_tensor_info(m, k, &info) != NCTMC_OK)
        return NULL;
    float *v = malloc(sizeof(float) * (size_t)info.n_elements);
    if (v && nctmc_model_read_tensor(m, name, v, info.n_elements) != NCTMC_OK) {
        free(v);
        return NULL;
    }
    *n = info.n_elements;
    return v;
}

/* Max |difference| of log-probabilities between two models' forward. */
static double forward_gap(nctmc_model *a, nctmc_model *b)
{
    enum { B = 2, L = TINY_L, S = TINY_S };
    int32_t tokens[B * L];
    float times[B] = {0.3f, 0.8f}, rate_a[B * L], rate_b[B * L];
    int32_t labels[B] = {0, 3};
    static float jump_a[B * L * S], jump_b[B * L * S];
    for (int32_t i = 0; i < B * L; i++)
        tokens[i] = (i * 7 + 2) % S;
    nctmc_forward_params p;
    nctmc_forward_params_init(&p);
    p.batch = B;
    p.length = L;
    p.tokens = tokens;
    p.times = times;
    p.labels = labels;
    p.log_rate = rate_a;
    p.jump_logprobs = jump_a;
    CHECK(nctmc_model_forward(a, &p) == NCTMC_OK, "forward a: %s", nctmc_model_last_error(a));
    p.log_rate = rate_b;
    p.jump_logprobs = jump_b;
    CHECK(nctmc_model_forward(b, &p) == NCTMC_OK, "forward b: %s", nctmc_model_last_error(b));
    double gap = 0;
    for (int32_t i = 0; i < B * L * S; i++)
        if (isfinite(jump_a[i]) || isfinite(jump_b[i]))
            gap = fmax(gap, fabs((double)jump_a[i] - (double)jump_b[i]));
    for (int32_t i = 0; i < B * L; i++)
        gap = fmax(gap, fabs((double)rate_a[i] - (double)rate_b[i]));
    return gap;
}

static void sample(const nctmc_model *m, int32_t *out)
{
    nctmc_sampler *s = tiny_sampler(m, NULL);
    nctmc_sample_params p = tiny_sample_params(out);
    CHECK(s && nctmc_sample(s, &p) == NCTMC_OK, "sample: %s", nctmc_model_last_error(m));
    nctmc_sampler_free(s);
}

static void test_forward_and_sample(nctmc_model *f, nctmc_model *b, nctmc_model *q)
{
    double gb = forward_gap(f, b), gq = forward_gap(f, q);
    printf("forward vs float: max |log-prob difference| bf16 %.3g, int8 %.3g\n", gb, gq);
    /* the weights move by 2^-8 (bf16) and 1/254 of a row's maximum (int8)
     * relative; log-probabilities of a 2-block model move about as much */
    CHECK(gb > 0 && gb < 0.05, "bf16 forward close to the float one (%g)", gb);
    CHECK(gq > 0 && gq < 0.1, "int8 forward close to the float one (%g)", gq);
    int32_t tokens[TINY_BATCH * TINY_L];
    sample(q, tokens);
    int ok = 1;
    for (int32_t i = 0; i < TINY_BATCH * TINY_L; i++)
        ok &= tokens[i] >= 0 && tokens[i] < TINY_S - 1;
    CHECK(ok, "an int8 model samples data tokens");
}

static void test_refusals(nctmc_context *ctx, nctmc_model *f, nctmc_model *b)
{
    nctmc_model *out = (nctmc_model *)1;
    CHECK(nctmc_model_convert(b, NCTMC_WEIGHT_INT8, &out) == NCTMC_ERR_INVALID_ARGUMENT &&
              out == NULL,
          "a converted model is not converted again");
    CHECK(strstr(nctmc_model_last_error(b), "already") != NULL, "why: %s",
          nctmc_model_last_error(b));
    CHECK(nctmc_model_convert(f, NCTMC_WEIGHT_F32, &out) == NCTMC_ERR_INVALID_ARGUMENT,
          "F32 is no conversion target");
    CHECK(nctmc_model_convert(f, 7, &out) == NCTMC_ERR_INVALID_ARGUMENT, "unknown type");
    CHECK(nctmc_model_convert(f, NCTMC_WEIGHT_BF16, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "out NULL");
    CHECK(nctmc_model_convert(NULL, NCTMC_WEIGHT_BF16, &out) == NCTMC_ERR_INVALID_ARGUMENT,
          "model NULL");
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 2;
    nctmc_trainer *t = (nctmc_trainer *)1;
    CHECK(nctmc_trainer_create(b, &tp, &t) == NCTMC_ERR_INVALID_ARGUMENT && t == NULL,
          "no trainer on a bf16 model");
    CHECK(strstr(nctmc_model_last_error(b), "sampling only") != NULL, "why: %s",
          nctmc_model_last_error(b));
    float v[WIDE_D * WIDE_D];
    memset(v, 0, sizeof v);
    CHECK(nctmc_model_write_tensor(b, "blocks.0.attn_out.weight", v, WIDE_D * WIDE_D) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "a reduced tensor is not written");
    CHECK(nctmc_model_write_tensor(b, "blocks.0.norm1.weight", v, WIDE_D) == NCTMC_OK,
          "a float tensor of a reduced model is: %s", nctmc_model_last_error(b));
    /* a trainer's weights cannot be copied into a reduced model */
    nctmc_trainer *ft = NULL;
    CHECK(nctmc_trainer_create(f, &tp, &ft) == NCTMC_OK, "trainer on the float model");
    if (ft) {
        CHECK(nctmc_trainer_copy_weights(ft, b, 0) == NCTMC_ERR_INVALID_ARGUMENT,
              "copy_weights into a reduced model");
        nctmc_trainer_free(ft);
    }
    (void)ctx;
}

/* ---- checkpoints ---------------------------------------------------------- */

static char copy_note[512];

static void keep_copy_note(nctmc_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == NCTMC_LOG_INFO && strstr(msg, "copying the weights"))
        snprintf(copy_note, sizeof copy_note, "%s", msg);
}

/* A reduced checkpoint is copied, never mapped, and a mapped load says why
 * at NCTMC_LOG_INFO (docs/formats.md, "Memory-mapped loading"). */
static void test_not_mapped(const char *path, const char *type)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    cp.log_fn = keep_copy_note;
    cp.log_level = NCTMC_LOG_INFO;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");
    nctmc_load_mapping modes[] = {NCTMC_LOAD_MAP_AUTO, NCTMC_LOAD_MAP_LAZY};
    for (size_t i = 0; i < 2 && ctx; i++) {
        copy_note[0] = '\0';
        nctmc_load_params lp;
        nctmc_load_params_init(&lp);
        lp.mapping = modes[i];
        nctmc_model *m = NULL;
        CHECK(nctmc_model_load_ex(ctx, path, &lp, &m) == NCTMC_OK, "load %s", path);
        CHECK(m && nctmc_model_is_mapped(m) == 0, "%s weights are copied (mapping %d)", type,
              (int)modes[i]);
        char want[64];
        snprintf(want, sizeof want, "not mapped: %s weights", type);
        CHECK(strstr(copy_note, want), "%s, mapping %d: INFO says why: \"%s\"", type,
              (int)modes[i], copy_note);
        nctmc_model_free(m);
    }
    nctmc_context_free(ctx);
}

static void test_round_trip(nctmc_context *ctx, const nctmc_model *m, const char *name)
{
    char path[256];
    tmp_path(path, sizeof path, name);
    CHECK(nctmc_model_save(m, path) == NCTMC_OK, "save %s: %s", name, nctmc_model_last_error(m));
    nctmc_model *back = NULL;
    CHECK(nctmc_model_load(ctx, path, &back) == NCTMC_OK, "load %s: %s", name,
          nctmc_context_last_error(ctx));
    if (!back)
        return;
    CHECK(nctmc_model_weight_type(back) == nctmc_model_weight_type(m), "%s keeps its type",
          name);
    int same = 1;
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info;
        nctmc_tensor_info_init(&info);
        nctmc_model_tensor_info(m, k, &info);
        int64_t n1 = 0, n2 = 0;
        float *a = read_all(m, info.name, &n1), *b = read_all(back, info.name, &n2);
        same &= a && b && n1 == n2 && memcmp(a, b, sizeof(float) * (size_t)n1) == 0;
        free(a);
        free(b);
    }
    CHECK(same, "%s: every tensor the same bits after save and load", name);
    int32_t t1[TINY_BATCH * TINY_L], t2[TINY_BATCH * TINY_L];
    sample(m, t1);
    sample(back, t2);
    CHECK(memcmp(t1, t2, sizeof t1) == 0, "%s: the loaded model samples the same tokens", name);
    nctmc_model_free(back);
    test_not_mapped(path, nctmc_model_weight_type(m) == NCTMC_WEIGHT_BF16 ? "bf16" : "int8");
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    nctmc_context *ctx = tiny_context();
    nctmc_model *f = float_model(ctx), *b = NULL, *q = NULL;
    CHECK(nctmc_model_convert(f, NCTMC_WEIGHT_BF16, &b) == NCTMC_OK, "to bf16: %s",
          nctmc_model_last_error(f));
    CHECK(nctmc_model_convert(f, NCTMC_WEIGHT_INT8, &q) == NCTMC_OK, "to int8: %s",
          nctmc_model_last_error(f));
    if (f && b && q) {
        test_forward_and_sample(f, b, q);
        test_round_trip(ctx, b, "bf16.safetensors");
        test_round_trip(ctx, q, "int8.safetensors");
        test_refusals(ctx, f, b);
    }
    nctmc_model_free(q);
    nctmc_model_free(b);
    nctmc_model_free(f);
    nctmc_context_free(ctx);
    const char *names[] = {"bf16.safetensors", "int8.safetensors", "damaged.safetensors"};
    for (size_t i = 0; i < 3; i++) {
        char path[256];
        tmp_path(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(tmp_dir);
    return test_finish("quant");
}
