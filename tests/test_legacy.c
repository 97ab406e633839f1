/*
 * test_legacy.c — checkpoints written by libnctmc 0.2.0 load and sample as
 * they did. tests/legacy/ holds two models that 0.2.0 saved (uniform, and
 * mixture with classes and guidance) with the forward outputs and sampled
 * tokens 0.2.0 computed from them (make_legacy_fixture.c wrote them). This
 * build must read the raw-t time input and the sigma exit link those files
 * imply, reproduce the outputs, draw the same tokens with every sampler, and
 * write such a model back as format 1 so that 0.2.0 can still read it.
 *
 *   test_legacy DIR
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

#define B 3
#define L 6
#define S 7
#define STEPS 12

typedef struct legacy_outputs {
    float log_rate[B * L];
    float logp[B * L * S];
    int32_t sampled[3][B * L];
} legacy_outputs;

static int read_outputs(const char *path, legacy_outputs *o)
{
    size_t n = 0;
    uint8_t *bytes = test_read_bytes(path, &n);
    int ok = bytes && n == sizeof *o;
    if (ok)
        memcpy(o, bytes, sizeof *o);
    free(bytes);
    return ok;
}

/* The same inputs make_legacy_fixture.c used. */
static void check_forward(nctmc_model *m, int32_t n_classes, const legacy_outputs *want,
                          const char *name)
{
    int32_t tokens[B * L];
    float times[B] = {0.002f, 0.4f, 0.97f};
    int32_t labels[B] = {0, 1, n_classes};
    for (int i = 0; i < B * L; i++)
        tokens[i] = (i * 5 + 3) % S;
    float log_rate[B * L], logp[B * L * S];
    nctmc_forward_params f;
    nctmc_forward_params_init(&f);
    f.batch = B;
    f.length = L;
    f.tokens = tokens;
    f.times = times;
    f.labels = n_classes ? labels : NULL;
    f.log_rate = log_rate;
    f.jump_logprobs = logp;
    CHECK(nctmc_model_forward(m, &f) == NCTMC_OK, "%s: forward: %s", name,
          nctmc_model_last_error(m));
    /* the same arithmetic in the same order: equal to the bit on the machine
     * that wrote the fixture; another OpenBLAS kernel may round the
     * products differently, hence the (tight) tolerance */
    double e1 = test_max_rel_err(log_rate, want->log_rate, B * L, 1.0);
    size_t n_logp = 0;
    float a[B * L * S], b[B * L * S];
    for (int i = 0; i < B * L * S; i++) {
        if (isinf(want->logp[i]) || isinf(logp[i])) {
            CHECK(isinf(want->logp[i]) && isinf(logp[i]), "%s: -inf at the same entries",
                  name);
            continue;
        }
        a[n_logp] = logp[i];
        b[n_logp++] = want->logp[i];
    }
    double e2 = test_max_rel_err(a, b, n_logp, 1.0);
    CHECK(e1 < 1e-5 && e2 < 1e-5, "%s: forward outputs as 0.2.0 computed them (%.3g, %.3g)",
          name, e1, e2);
}

static void check_samples(nctmc_model *m, int32_t n_classes, const legacy_outputs *want,
                          const char *name)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = B;
    nctmc_sampler *s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK, "%s: sampler", name);
    int32_t labels[B] = {0, 1, n_classes};
    for (int method = 0; method < 3; method++) {
        int32_t got[B * L];
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = B;
        p.method = method;
        p.n_steps = STEPS;
        p.seed = 9;
        p.labels = n_classes ? labels : NULL;
        p.cfg_scale = n_classes ? 1.5f : 1.0f;
        p.tokens_out = got;
        CHECK(nctmc_sample(s, &p) == NCTMC_OK, "%s: sample: %s", name,
              nctmc_sampler_last_error(s));
        CHECK(memcmp(got, want->sampled[method], sizeof got) == 0,
              "%s: method %d draws the tokens 0.2.0 drew", name, method);
    }
    nctmc_sampler_free(s);
}

/* Saved again, a legacy model is format 1 with no 0.3.0 keys. */
static void check_resave(nctmc_model *m, const char *dir, const char *name)
{
    char path[1024];
    test_path(path, sizeof path, dir, "resaved.safetensors");
    CHECK(nctmc_model_save(m, path) == NCTMC_OK, "%s: save", name);
    size_t n = 0;
    uint8_t *bytes = test_read_bytes(path, &n);
    CHECK(bytes && n > 8, "%s: read back", name);
    if (bytes) {
        uint64_t hlen = 0;
        for (int k = 7; k >= 0; k--)
            hlen = hlen << 8 | bytes[k];
        char *header = NULL;
        if (hlen < n - 8 && (header = malloc(hlen + 1))) {
            memcpy(header, bytes + 8, hlen);
            header[hlen] = 0;
            CHECK(strstr(header, "\"nctmc.format\":\"1\"") && !strstr(header, "time_input") &&
                      !strstr(header, "exit_link"),
                  "%s: written as format 1 without the 0.3.0 keys", name);
        }
        free(header);
    }
    free(bytes);
    unlink(path);
}

static void check_case(nctmc_context *ctx, const char *dir, const char *scratch,
                       const char *name, int32_t n_classes)
{
    char path[1024], outputs[1024];
    snprintf(path, sizeof path, "%s/v0.2.0-%s.safetensors", dir, name);
    snprintf(outputs, sizeof outputs, "%s/v0.2.0-%s.outputs", dir, name);
    legacy_outputs want;
    CHECK(read_outputs(outputs, &want), "%s: %s", name, outputs);
    nctmc_model *m = NULL;
    CHECK(nctmc_model_load(ctx, path, &m) == NCTMC_OK, "%s: load: %s", name,
          nctmc_context_last_error(ctx));
    if (!m)
        return;
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(m, &c);
    CHECK(c.time_input == NCTMC_TIME_INPUT_T && c.exit_link == NCTMC_EXIT_LINK_SIGMA &&
              c.n_classes == n_classes,
          "%s: a format-1 file means raw-t input and the sigma link (%d, %d)", name,
          (int)c.time_input, (int)c.exit_link);
    check_forward(m, n_classes, &want, name);
    check_samples(m, n_classes, &want, name);
    check_resave(m, scratch, name);
    nctmc_model_free(m);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_legacy DIR\n");
        return 2;
    }
    char scratch[512];
    CHECK(test_make_temp_dir(scratch, sizeof scratch), "scratch directory");
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");
    check_case(ctx, argv[1], scratch, "uniform", 0);
    check_case(ctx, argv[1], scratch, "mixture", 2);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("legacy");
}
