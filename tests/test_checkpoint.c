/*
 * test_checkpoint.c — model checkpoints through the public API only
 * (libnctmc.so and nctmc.h): a bit-exact round trip (weights,
 * configuration, tokenizer, forward outputs) for every process and
 * schedule; every truncation and every single-byte corruption of a small
 * checkpoint rejected; files that are no checkpoint rejected; atomic writes
 * that leave no temporary file and never damage the file they would
 * replace. Trainer-style files, crafted files and the safetensors container
 * itself are test_checkpoint_internal.c's.
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

static char scratch[256];

static nctmc_model_config tiny_config(nctmc_process process, nctmc_schedule schedule)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 7;
    cfg.vocab_pad_multiple = 4;
    cfg.seq_len = 4;
    cfg.n_layers = 2;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.cond_dim = 4;
    cfg.n_classes = 2;
    cfg.process = process;
    cfg.schedule = schedule;
    cfg.mixture_uniform = 0.3f;
    cfg.schedule_eps = 0.0123456789f;
    cfg.seed = 0xFEDCBA9876543210ull;
    return cfg;
}

/* Every weight random (a fresh model has zero blocks that would hide a
 * mix-up between tensors). */
static void randomise(nctmc_model *m, test_rng *rng)
{
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc(sizeof(float) * (size_t)info.n_elements);
        test_fill_uniform(rng, v, (size_t)info.n_elements, -0.5f, 0.5f);
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

/* A model of cfg with random weights and, if the vocabulary allows, a
 * character tokenizer of its data tokens. */
static nctmc_model *make_model(nctmc_context *ctx, const nctmc_model_config *cfg,
                               test_rng *rng)
{
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, cfg, &m) != NCTMC_OK)
        return NULL;
    randomise(m, rng);
    int32_t data = cfg->process == NCTMC_PROCESS_UNIFORM ? cfg->vocab_size : cfg->vocab_size - 1;
    static const char letters[] = "ab\xc3\xa9" "cdefgh";
    char corpus[32];
    size_t n = 0;
    for (int32_t i = 0, taken = 0; taken < data; taken++) { /* é counts as one */
        size_t len = letters[i] & 0x80 ? 2 : 1;
        memcpy(corpus + n, letters + i, len);
        n += len;
        i += (int32_t)len;
    }
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, n, &tok);
    nctmc_model_set_tokenizer(m, tok);
    nctmc_tokenizer_free(tok);
    return m;
}

static bool same_config(const nctmc_model_config *a, const nctmc_model_config *b)
{
    return a->vocab_size == b->vocab_size && a->vocab_pad_multiple == b->vocab_pad_multiple &&
           a->seq_len == b->seq_len && a->n_layers == b->n_layers &&
           a->d_model == b->d_model && a->n_heads == b->n_heads &&
           a->cond_dim == b->cond_dim && a->n_classes == b->n_classes &&
           a->process == b->process && a->schedule == b->schedule &&
           memcmp(&a->mixture_uniform, &b->mixture_uniform, sizeof(float)) == 0 &&
           memcmp(&a->schedule_eps, &b->schedule_eps, sizeof(float)) == 0 &&
           a->seed == b->seed && a->time_input == b->time_input &&
           a->exit_link == b->exit_link;
}

static bool same_weights(const nctmc_model *a, const nctmc_model *b)
{
    if (nctmc_model_n_tensors(a) != nctmc_model_n_tensors(b))
        return false;
    bool same = true;
    for (int32_t k = 0; k < nctmc_model_n_tensors(a) && same; k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(a, k, &info);
        size_t n = (size_t)info.n_elements;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        same = nctmc_model_read_tensor(a, info.name, x, info.n_elements) == NCTMC_OK &&
               nctmc_model_read_tensor(b, info.name, y, info.n_elements) == NCTMC_OK &&
               memcmp(x, y, sizeof(float) * n) == 0;
        free(x);
        free(y);
    }
    return same;
}

/* Both models give the same bits on one forward call. */
static bool same_forward(nctmc_model *a, nctmc_model *b, const nctmc_model_config *cfg)
{
    enum { B = 2, L = 4 };
    int32_t tokens[B * L];
    for (int i = 0; i < B * L; i++)
        tokens[i] = (i * 3) % cfg->vocab_size;
    float times[B] = {0.3f, 0.8f};
    int32_t labels[B] = {0, 2};
    size_t S = (size_t)cfg->vocab_size;
    float *out[2][2];
    bool ok = true;
    nctmc_model *m[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        out[k][0] = malloc(sizeof(float) * B * L);
        out[k][1] = malloc(sizeof(float) * B * L * S);
        nctmc_forward_params p;
        nctmc_forward_params_init(&p);
        p.batch = B;
        p.length = L;
        p.tokens = tokens;
        p.times = times;
        p.labels = labels;
        p.log_rate = out[k][0];
        p.jump_logprobs = out[k][1];
        ok &= nctmc_model_forward(m[k], &p) == NCTMC_OK;
    }
    ok = ok && memcmp(out[0][0], out[1][0], sizeof(float) * B * L) == 0 &&
         memcmp(out[0][1], out[1][1], sizeof(float) * B * L * S) == 0;
    for (int k = 0; k < 2; k++) {
        free(out[k][0]);
        free(out[k][1]);
    }
    return ok;
}

static bool same_tokenizer(const nctmc_model *a, const nctmc_model *b)
{
    const nctmc_tokenizer *ta = nctmc_model_get_tokenizer(a);
    const nctmc_tokenizer *tb = nctmc_model_get_tokenizer(b);
    if (!ta || !tb)
        return ta == tb;
    int32_t n = nctmc_tokenizer_vocab_size(ta);
    if (n != nctmc_tokenizer_vocab_size(tb) ||
        nctmc_tokenizer_get_kind(ta) != nctmc_tokenizer_get_kind(tb))
        return false;
    int32_t ids[16];
    char x[64], y[64];
    size_t nx = 0, ny = 0;
    for (int32_t i = 0; i < n; i++)
        ids[i] = i;
    nctmc_tokenizer_decode((nctmc_tokenizer *)ta, ids, (size_t)n, x, sizeof x, &nx);
    nctmc_tokenizer_decode((nctmc_tokenizer *)tb, ids, (size_t)n, y, sizeof y, &ny);
    return nx == ny && memcmp(x, y, nx) == 0;
}

/* ---- round trips ------------------------------------------------------------ */

static void test_round_trips(nctmc_context *ctx, test_rng *rng)
{
    char path[512];
    test_path(path, sizeof path, scratch, "model.safetensors");
    for (int p = 0; p < 3; p++) {
        for (int s = 0; s < 3; s++) {
            nctmc_model_config cfg = tiny_config((nctmc_process)p, (nctmc_schedule)s);
            /* every combination of time input and exit link, both formats */
            cfg.time_input = (p + s) % 2;
            cfg.exit_link = (nctmc_exit_link)((p + 2 * s) % 3); /* each link on each */
            nctmc_model *m = make_model(ctx, &cfg, rng);
            CHECK(m && nctmc_model_get_tokenizer(m), "process %d schedule %d: model", p, s);
            if (!m)
                continue;
            CHECK(nctmc_model_save(m, path) == NCTMC_OK, "save: %s", nctmc_model_last_error(m));
            nctmc_model *back = NULL;
            CHECK(nctmc_model_load(ctx, path, &back) == NCTMC_OK && back, "load: %s",
                  nctmc_context_last_error(ctx));
            if (back) {
                nctmc_model_config got;
                nctmc_model_config_init(&got);
                nctmc_model_get_config(back, &got);
                CHECK(same_config(&cfg, &got), "process %d schedule %d: configuration", p, s);
                CHECK(same_weights(m, back), "process %d schedule %d: weights bit-exact", p,
                      s);
                CHECK(same_tokenizer(m, back), "process %d schedule %d: tokenizer", p, s);
                CHECK(same_forward(m, back, &cfg), "process %d schedule %d: forward bits", p,
                      s);
            }
            nctmc_model_free(back);
            nctmc_model_free(m);
        }
    }
    /* no tokenizer: none comes back */
    nctmc_model_config cfg = tiny_config(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR);
    cfg.n_classes = 0;
    nctmc_model *m = make_model(ctx, &cfg, rng);
    nctmc_model_set_tokenizer(m, NULL);
    nctmc_model *back = NULL;
    CHECK(nctmc_model_save(m, path) == NCTMC_OK &&
              nctmc_model_load(ctx, path, &back) == NCTMC_OK &&
              nctmc_model_get_tokenizer(back) == NULL && same_weights(m, back),
          "a model without a tokenizer");
    nctmc_model_free(back);
    nctmc_model_free(m);
    CHECK(test_count_entries(scratch) == 1, "only the checkpoint is left in the directory");
    unlink(path);
}

/* ---- damaged files --------------------------------------------------------------- */

static nctmc_status load_status(nctmc_context *ctx, const char *path)
{
    nctmc_model *m = (nctmc_model *)&m; /* must come back NULL */
    nctmc_status st = nctmc_model_load(ctx, path, &m);
    if (st != NCTMC_OK && (m != NULL || !nctmc_context_last_error(ctx)[0]))
        return (nctmc_status)-1;
    nctmc_model_free(m);
    return st;
}

static bool is_file_error(nctmc_status st)
{
    return st == NCTMC_ERR_FORMAT || st == NCTMC_ERR_IO;
}

static uint8_t *small_checkpoint(nctmc_context *ctx, test_rng *rng, const char *path,
                                 size_t *n)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 5;
    cfg.seq_len = 2;
    cfg.n_layers = 1;
    cfg.d_model = 4;
    cfg.n_heads = 1;
    cfg.cond_dim = 2;
    cfg.process = NCTMC_PROCESS_MIXTURE;
    nctmc_model *m = make_model(ctx, &cfg, rng);
    nctmc_status st = m ? nctmc_model_save(m, path) : NCTMC_ERR_BACKEND;
    nctmc_model_free(m);
    return st == NCTMC_OK ? test_read_bytes(path, n) : NULL;
}

static void test_truncations(nctmc_context *ctx, test_rng *rng)
{
    char path[512], cut[512];
    test_path(path, sizeof path, scratch, "small.safetensors");
    test_path(cut, sizeof cut, scratch, "cut.safetensors");
    size_t n = 0;
    uint8_t *bytes = small_checkpoint(ctx, rng, path, &n);
    CHECK(bytes && load_status(ctx, path) == NCTMC_OK, "the small checkpoint loads");
    int rejected = 0;
    for (size_t len = 0; bytes && len < n; len++) {
        test_write_bytes(cut, bytes, len);
        rejected += is_file_error(load_status(ctx, cut));
    }
    CHECK(bytes && rejected == (int)n, "%d of %zu truncations rejected", rejected, n);
    /* one byte more is as wrong as one less */
    if (bytes) {
        uint8_t *longer = malloc(n + 1);
        memcpy(longer, bytes, n);
        longer[n] = 0;
        test_write_bytes(cut, longer, n + 1);
        CHECK(load_status(ctx, cut) == NCTMC_ERR_FORMAT, "a trailing byte is rejected");
        free(longer);
    }
    free(bytes);
    unlink(cut);
    unlink(path);
}

/* The checksum covers every byte, so every single-byte change is caught —
 * the header's JSON, the padding, the data. */
static void test_corruptions(nctmc_context *ctx, test_rng *rng)
{
    char path[512], bad[512];
    test_path(path, sizeof path, scratch, "small.safetensors");
    test_path(bad, sizeof bad, scratch, "bad.safetensors");
    size_t n = 0;
    uint8_t *bytes = small_checkpoint(ctx, rng, path, &n);
    if (!bytes) {
        CHECK(0, "no checkpoint");
        return;
    }
    uint8_t *copy = malloc(n);
    int tried = 0, rejected = 0, crashed = 0;
    /* every position once, then random ones */
    for (size_t k = 0; k < n + 2000; k++) {
        size_t at = k < n ? k : (size_t)test_randint(rng, (int32_t)n);
        memcpy(copy, bytes, n);
        copy[at] ^= (uint8_t)(1 + test_randint(rng, 255));
        test_write_bytes(bad, copy, n);
        nctmc_status st = load_status(ctx, bad);
        tried++;
        rejected += is_file_error(st);
        crashed += st == (nctmc_status)-1;
    }
    CHECK(rejected == tried && crashed == 0, "%d of %d single-byte corruptions rejected",
          rejected, tried);
    free(copy);
    free(bytes);
    unlink(bad);
    unlink(path);
}

static void test_not_checkpoints(nctmc_context *ctx)
{
    char path[512];
    test_path(path, sizeof path, scratch, "junk");
    CHECK(load_status(ctx, path) == NCTMC_ERR_IO, "missing file");
    CHECK(load_status(ctx, scratch) == NCTMC_ERR_IO, "a directory");
    test_write_bytes(path, "", 0);
    CHECK(load_status(ctx, path) == NCTMC_ERR_FORMAT, "empty file");
    test_write_bytes(path, "\x02\0\0\0\0\0\0\0{}", 10);
    CHECK(load_status(ctx, path) == NCTMC_ERR_FORMAT, "empty safetensors: not ours");
    test_write_bytes(path, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    CHECK(load_status(ctx, path) == NCTMC_ERR_FORMAT, "header length past the end");
    nctmc_model *m = NULL;
    CHECK(nctmc_model_load(NULL, path, &m) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ctx");
    CHECK(nctmc_model_load(ctx, NULL, &m) == NCTMC_ERR_INVALID_ARGUMENT, "NULL path");
    CHECK(nctmc_model_load(ctx, path, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out");
    CHECK(nctmc_model_save(NULL, path) == NCTMC_ERR_INVALID_ARGUMENT, "save NULL model");
    unlink(path);
}

/* ---- atomic writes ------------------------------------------------------------- */

static void test_atomic(nctmc_context *ctx, test_rng *rng)
{
    char path[512], blocker[512], below[600];
    test_path(path, sizeof path, scratch, "keep.safetensors");
    test_path(blocker, sizeof blocker, scratch, "regular-file");
    snprintf(below, sizeof below, "%s/model.safetensors", blocker);
    nctmc_model_config cfg = tiny_config(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR);
    nctmc_model *small = make_model(ctx, &cfg, rng);
    cfg.d_model = 32;
    cfg.n_heads = 4;
    nctmc_model *big = make_model(ctx, &cfg, rng);
    if (!small || !big)
        return;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-dir/model.safetensors", scratch);
    CHECK(nctmc_model_save(small, missing) == NCTMC_ERR_IO &&
              strstr(nctmc_model_last_error(small), "No such file"),
          "save into a missing directory: %s", nctmc_model_last_error(small));
    CHECK(test_count_entries(scratch) == 0, "nothing left behind");
    test_write_bytes(blocker, "x", 1);
    CHECK(nctmc_model_save(small, below) == NCTMC_ERR_IO, "parent is a regular file: %s",
          nctmc_model_last_error(small));
    CHECK(test_count_entries(scratch) == 1, "nothing left behind but the blocker");
    unlink(blocker);

    /* a save that fails half-way (the file-size limit stops its writes) must
     * leave the file it would replace as it was */
    CHECK(nctmc_model_save(small, path) == NCTMC_OK, "first save");
    size_t n_before = 0, n_after = 0;
    uint8_t *before = test_read_bytes(path, &n_before);
    struct rlimit old_limit, limit;
    getrlimit(RLIMIT_FSIZE, &old_limit);
    limit = old_limit;
    limit.rlim_cur = (rlim_t)n_before; /* the big model needs more */
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    int limited = setrlimit(RLIMIT_FSIZE, &limit) == 0;
    nctmc_status st = nctmc_model_save(big, path);
    setrlimit(RLIMIT_FSIZE, &old_limit);
    signal(SIGXFSZ, old_handler);
    uint8_t *after = test_read_bytes(path, &n_after);
    CHECK(limited && st == NCTMC_ERR_IO, "the limited save fails with IO (%d): %s", (int)st,
          nctmc_model_last_error(big));
    CHECK(before && after && n_before == n_after && memcmp(before, after, n_after) == 0,
          "the old checkpoint is intact");
    CHECK(test_count_entries(scratch) == 1, "no temporary file is left");
    CHECK(load_status(ctx, path) == NCTMC_OK, "and it still loads");
    free(before);
    free(after);
    /* an existing file is replaced by a complete new one */
    nctmc_model *back = NULL;
    CHECK(nctmc_model_save(big, path) == NCTMC_OK &&
              nctmc_model_load(ctx, path, &back) == NCTMC_OK && same_weights(big, back),
          "overwrite");
    nctmc_model_free(back);
    unlink(path);
    nctmc_model_free(small);
    nctmc_model_free(big);
}

int main(void)
{
    if (!test_make_temp_dir(scratch, sizeof scratch)) {
        fprintf(stderr, "cannot create a scratch directory\n");
        return 1;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 2;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    test_rng rng = test_rng_seed(2024);
    test_round_trips(ctx, &rng);
    test_truncations(ctx, &rng);
    test_corruptions(ctx, &rng);
    test_not_checkpoints(ctx);
    test_atomic(ctx, &rng);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("checkpoint");
}
