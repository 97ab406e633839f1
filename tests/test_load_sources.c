/*
 * test_load_sources.c — one checkpoint loaded three ways: from its path,
 * from memory (nctmc_model_load_memory) and through the caller's reader
 * (nctmc_model_load_reader, here an entry inside a larger "archive" read in
 * small pieces); every tensor, the configuration, the tokenizer, a forward
 * call and a sample agree bit for bit. Readers that fail, return more than
 * asked, end early or claim a wrong size, every truncation and a corrupt
 * byte are rejected with NCTMC_ERR_IO / NCTMC_ERR_FORMAT, *out left NULL;
 * the versioned nctmc_reader struct follows the struct_size rules.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

static char scratch[256];

static nctmc_model_config small_config(void)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 9;
    cfg.seq_len = 8;
    cfg.n_layers = 2;
    cfg.d_model = 16;
    cfg.n_heads = 2;
    cfg.cond_dim = 8;
    cfg.n_classes = 3;
    cfg.process = NCTMC_PROCESS_MIXTURE;
    cfg.seed = 77;
    return cfg;
}

/* A model with every weight random and a character tokenizer. */
static nctmc_model *make_model(nctmc_context *ctx, test_rng *rng)
{
    nctmc_model_config cfg = small_config();
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &cfg, &m) != NCTMC_OK)
        return NULL;
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc(sizeof(float) * (size_t)info.n_elements);
        test_fill_uniform(rng, v, (size_t)info.n_elements, -0.5f, 0.5f);
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, "abcdefgh", 8, &tok);
    nctmc_model_set_tokenizer(m, tok);
    nctmc_tokenizer_free(tok);
    return m;
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

static bool same_config(const nctmc_model *a, const nctmc_model *b)
{
    nctmc_model_config x, y;
    nctmc_model_config_init(&x);
    nctmc_model_config_init(&y);
    return nctmc_model_get_config(a, &x) == NCTMC_OK &&
           nctmc_model_get_config(b, &y) == NCTMC_OK && memcmp(&x, &y, sizeof x) == 0;
}

static bool same_tokenizer(const nctmc_model *a, const nctmc_model *b)
{
    nctmc_tokenizer *ta = NULL, *tb = NULL;
    if (nctmc_tokenizer_clone(nctmc_model_get_tokenizer(a), &ta) != NCTMC_OK ||
        nctmc_tokenizer_clone(nctmc_model_get_tokenizer(b), &tb) != NCTMC_OK) {
        nctmc_tokenizer_free(ta);
        return false;
    }
    int32_t ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    char x[32], y[32];
    size_t nx = 0, ny = 0;
    bool same = nctmc_tokenizer_decode(ta, ids, 8, x, sizeof x, &nx) == NCTMC_OK &&
                nctmc_tokenizer_decode(tb, ids, 8, y, sizeof y, &ny) == NCTMC_OK && nx == ny &&
                memcmp(x, y, nx) == 0 && strcmp(x, "abcdefgh") == 0;
    nctmc_tokenizer_free(ta);
    nctmc_tokenizer_free(tb);
    return same;
}

enum { FB = 2, FL = 8, FS = 9 };

/* One forward call's outputs, log rates then jump log-probabilities. */
static bool forward_bits(nctmc_model *m, float out[FB * FL * (FS + 1)])
{
    int32_t tokens[FB * FL];
    for (int i = 0; i < FB * FL; i++)
        tokens[i] = (i * 5) % FS;
    float times[FB] = {0.25f, 0.9f};
    int32_t labels[FB] = {1, 3};
    nctmc_forward_params p;
    nctmc_forward_params_init(&p);
    p.batch = FB;
    p.length = FL;
    p.tokens = tokens;
    p.times = times;
    p.labels = labels;
    p.log_rate = out;
    p.jump_logprobs = out + FB * FL;
    return nctmc_model_forward(m, &p) == NCTMC_OK;
}

enum { SB = 3 };

static bool sample_bits(nctmc_model *m, int32_t out[SB * FL])
{
    nctmc_sampler *s = NULL;
    if (nctmc_sampler_create(m, NULL, &s) != NCTMC_OK)
        return false;
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = SB;
    p.n_steps = 12;
    p.seed = 4242;
    p.correction_steps = 2;
    p.tokens_out = out;
    bool ok = nctmc_sample(s, &p) == NCTMC_OK;
    nctmc_sampler_free(s);
    return ok;
}

/* ---- readers ------------------------------------------------------------ */

/* An "archive": the checkpoint's bytes at some offset inside a larger
 * buffer, read at most `piece` bytes per call. The failure knobs make it a
 * broken reader. */
typedef struct archive_entry {
    const uint8_t *archive;
    size_t begin;           /* where the entry starts in the archive */
    size_t length;          /* the entry's real length */
    size_t piece;           /* most bytes one call returns */
    int64_t calls;          /* read_at calls so far */
    int64_t fail_at_call;   /* this call returns fail_value (-1 = never) */
    int64_t fail_value;
    bool overreport;        /* claim one byte more than asked (never written) */
    uint64_t piece_rng;     /* != 0: random piece sizes 1 .. piece */
} archive_entry;

static int64_t entry_read_at(void *user_data, void *dst, size_t n, int64_t offset)
{
    archive_entry *e = user_data;
    int64_t call = e->calls++;
    if (call == e->fail_at_call)
        return e->fail_value;
    if (offset < 0 || (uint64_t)offset >= e->length)
        return 0;
    size_t k = e->length - (size_t)offset;
    if (k > n)
        k = n;
    size_t piece = e->piece;
    if (e->piece_rng) {
        e->piece_rng ^= e->piece_rng << 13;
        e->piece_rng ^= e->piece_rng >> 7;
        e->piece_rng ^= e->piece_rng << 17;
        piece = 1 + (size_t)(e->piece_rng % e->piece);
    }
    if (k > piece)
        k = piece;
    memcpy(dst, e->archive + e->begin + (size_t)offset, k);
    return e->overreport ? (int64_t)n + 1 : (int64_t)k;
}

static archive_entry entry_of(const uint8_t *archive, size_t begin, size_t length, size_t piece)
{
    archive_entry e = {archive, begin, length, piece, 0, -1, -1, false, 0};
    return e;
}

static nctmc_reader reader_of(archive_entry *e, int64_t claimed_size)
{
    nctmc_reader r;
    nctmc_reader_init(&r);
    r.size = claimed_size;
    r.read_at = entry_read_at;
    r.user_data = e;
    return r;
}

/* A load that must fail: the status, and *out set to NULL. */
static nctmc_status load_reader_status(nctmc_context *ctx, const nctmc_reader *r)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1; /* must be overwritten */
    nctmc_status st = nctmc_model_load_reader(ctx, r, &m);
    if (st == NCTMC_OK)
        nctmc_model_free(m);
    else if (m != NULL)
        return (nctmc_status)-1;
    return st;
}

static nctmc_status load_memory_status(nctmc_context *ctx, const void *data, size_t n)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_load_memory(ctx, data, n, &m);
    if (st == NCTMC_OK)
        nctmc_model_free(m);
    else if (m != NULL)
        return (nctmc_status)-1;
    return st;
}

/* ---- the three ways agree --------------------------------------------------- */

static void test_three_ways(nctmc_context *ctx, test_rng *rng)
{
    char path[512];
    test_path(path, sizeof path, scratch, "model.safetensors");
    nctmc_model *orig = make_model(ctx, rng);
    CHECK(orig && nctmc_model_save(orig, path) == NCTMC_OK, "save: %s",
          orig ? nctmc_model_last_error(orig) : "no model");
    size_t n = 0;
    uint8_t *bytes = test_read_bytes(path, &n);
    CHECK(bytes && n > 64, "read the checkpoint back");
    if (!orig || !bytes) {
        nctmc_model_free(orig);
        free(bytes);
        return;
    }
    /* the archive: junk, the entry, junk */
    size_t pad = 1000;
    uint8_t *archive = malloc(n + 2 * pad);
    for (size_t i = 0; i < n + 2 * pad; i++)
        archive[i] = (uint8_t)test_rng_next(rng);
    memcpy(archive + pad, bytes, n);

    nctmc_model *by_path = NULL, *by_memory = NULL, *by_reader = NULL, *by_random = NULL;
    CHECK(nctmc_model_load(ctx, path, &by_path) == NCTMC_OK, "path: %s",
          nctmc_context_last_error(ctx));
    /* a private copy, destroyed after the call: the model keeps nothing of it */
    uint8_t *copy = malloc(n);
    memcpy(copy, bytes, n);
    CHECK(nctmc_model_load_memory(ctx, copy, n, &by_memory) == NCTMC_OK, "memory: %s",
          nctmc_context_last_error(ctx));
    memset(copy, 0xA5, n);
    free(copy);
    archive_entry e = entry_of(archive, pad, n, 7);
    nctmc_reader r = reader_of(&e, (int64_t)n);
    CHECK(nctmc_model_load_reader(ctx, &r, &by_reader) == NCTMC_OK, "reader: %s",
          nctmc_context_last_error(ctx));
    CHECK(e.calls > (int64_t)(n / 7), "the reader was read in 7-byte pieces (%lld calls)",
          (long long)e.calls);
    archive_entry er = entry_of(archive, pad, n, 4096);
    er.piece_rng = 0x1234567;
    nctmc_reader rr = reader_of(&er, (int64_t)n);
    CHECK(nctmc_model_load_reader(ctx, &rr, &by_random) == NCTMC_OK,
          "reader with random short reads: %s", nctmc_context_last_error(ctx));

    nctmc_model *loaded[4] = {by_path, by_memory, by_reader, by_random};
    static const char *const names[4] = {"path", "memory", "reader", "random reader"};
    float f0[FB * FL * (FS + 1)], f1[FB * FL * (FS + 1)];
    int32_t s0[SB * FL], s1[SB * FL];
    CHECK(forward_bits(orig, f0) && sample_bits(orig, s0), "the original runs");
    for (int k = 0; k < 4; k++) {
        if (!loaded[k])
            continue;
        CHECK(same_weights(orig, loaded[k]), "%s: every tensor bit for bit", names[k]);
        CHECK(same_config(orig, loaded[k]), "%s: configuration", names[k]);
        CHECK(same_tokenizer(orig, loaded[k]), "%s: tokenizer", names[k]);
        memset(f1, 0, sizeof f1);
        CHECK(forward_bits(loaded[k], f1) && memcmp(f0, f1, sizeof f0) == 0,
              "%s: forward outputs bit for bit", names[k]);
        memset(s1, 0xFF, sizeof s1);
        CHECK(sample_bits(loaded[k], s1) && memcmp(s0, s1, sizeof s0) == 0,
              "%s: samples bit for bit", names[k]);
        nctmc_model_free(loaded[k]);
    }
    nctmc_model_free(orig);
    free(archive);
    free(bytes);
    unlink(path);
}

/* ---- broken readers and bad bytes ---------------------------------------- */

static uint8_t *checkpoint_bytes(nctmc_context *ctx, test_rng *rng, size_t *n)
{
    char path[512];
    test_path(path, sizeof path, scratch, "broken.safetensors");
    nctmc_model *m = make_model(ctx, rng);
    uint8_t *bytes = NULL;
    if (m && nctmc_model_save(m, path) == NCTMC_OK)
        bytes = test_read_bytes(path, n);
    nctmc_model_free(m);
    unlink(path);
    return bytes;
}

static void test_broken_readers(nctmc_context *ctx, test_rng *rng)
{
    size_t n = 0;
    uint8_t *bytes = checkpoint_bytes(ctx, rng, &n);
    CHECK(bytes != NULL, "a checkpoint to break");
    if (!bytes)
        return;
    /* how many calls a good load makes with 64-byte pieces */
    archive_entry good = entry_of(bytes, 0, n, 64);
    nctmc_reader r = reader_of(&good, (int64_t)n);
    CHECK(load_reader_status(ctx, &r) == NCTMC_OK, "64-byte pieces load");
    int64_t calls = good.calls;
    /* a failure at every single call site of the load */
    int io = 0;
    for (int64_t c = 0; c < calls; c++) {
        archive_entry e = entry_of(bytes, 0, n, 64);
        e.fail_at_call = c;
        e.fail_value = c % 2 ? -1 : INT64_MIN;
        nctmc_reader b = reader_of(&e, (int64_t)n);
        io += load_reader_status(ctx, &b) == NCTMC_ERR_IO;
    }
    CHECK(io == calls, "%d of %lld failing calls give NCTMC_ERR_IO", io, (long long)calls);
    CHECK(strstr(nctmc_context_last_error(ctx), "read_at returned") != NULL,
          "the message names the reader's failure: %s", nctmc_context_last_error(ctx));
    /* more than asked */
    archive_entry over = entry_of(bytes, 0, n, 64);
    over.overreport = true;
    nctmc_reader ro = reader_of(&over, (int64_t)n);
    CHECK(load_reader_status(ctx, &ro) == NCTMC_ERR_IO, "a reader returning more than asked");
    /* sizes that lie: longer than the data, and every shorter claim */
    archive_entry e = entry_of(bytes, 0, n, 64);
    nctmc_reader longer = reader_of(&e, (int64_t)n + 100);
    CHECK(load_reader_status(ctx, &longer) == NCTMC_ERR_FORMAT,
          "a size larger than the data: %s", nctmc_context_last_error(ctx));
    int format = 0, format_memory = 0;
    for (size_t len = 0; len < n; len++) {
        archive_entry t = entry_of(bytes, 0, len, 64);
        nctmc_reader rt = reader_of(&t, (int64_t)len);
        format += load_reader_status(ctx, &rt) == NCTMC_ERR_FORMAT;
        format_memory += load_memory_status(ctx, bytes, len) == NCTMC_ERR_FORMAT;
    }
    CHECK(format == (int)n, "%d of %zu truncated readers rejected", format, n);
    CHECK(format_memory == (int)n, "%d of %zu truncated buffers rejected", format_memory, n);
    /* a reader that claims the whole size but whose data ends early */
    archive_entry shortdata = entry_of(bytes, 0, n / 2, 64);
    nctmc_reader rs = reader_of(&shortdata, (int64_t)n);
    CHECK(load_reader_status(ctx, &rs) == NCTMC_ERR_FORMAT, "data ending before the size");
    CHECK(strstr(nctmc_context_last_error(ctx), "ends early") != NULL, "says it ends early: %s",
          nctmc_context_last_error(ctx));
    /* one corrupt byte: the checksum catches it, whatever the source */
    uint8_t *bad = malloc(n);
    memcpy(bad, bytes, n);
    bad[n - 3] ^= 0x40;
    CHECK(load_memory_status(ctx, bad, n) == NCTMC_ERR_FORMAT, "a corrupt byte in memory");
    archive_entry eb = entry_of(bad, 0, n, 64);
    nctmc_reader rb = reader_of(&eb, (int64_t)n);
    CHECK(load_reader_status(ctx, &rb) == NCTMC_ERR_FORMAT, "a corrupt byte through a reader");
    free(bad);
    free(bytes);
}

static void test_arguments(nctmc_context *ctx)
{
    static const uint8_t junk[16] = {1, 2, 3};
    nctmc_model *m = NULL;
    CHECK(nctmc_model_load_memory(NULL, junk, sizeof junk, &m) == NCTMC_ERR_INVALID_ARGUMENT,
          "memory: NULL context");
    CHECK(load_memory_status(ctx, NULL, 10) == NCTMC_ERR_INVALID_ARGUMENT,
          "memory: NULL data with a size");
    CHECK(nctmc_model_load_memory(ctx, junk, sizeof junk, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "memory: NULL out");
    CHECK(load_memory_status(ctx, junk, 0) == NCTMC_ERR_FORMAT, "memory: zero bytes");
    CHECK(load_memory_status(ctx, junk, sizeof junk) == NCTMC_ERR_FORMAT, "memory: junk");

    CHECK(load_reader_status(ctx, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "reader: NULL");
    archive_entry e = entry_of(junk, 0, sizeof junk, 4);
    nctmc_reader r = reader_of(&e, sizeof junk);
    CHECK(nctmc_model_load_reader(NULL, &r, &m) == NCTMC_ERR_INVALID_ARGUMENT,
          "reader: NULL context");
    CHECK(nctmc_model_load_reader(ctx, &r, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "reader: NULL out");
    nctmc_reader bad = r;
    bad.size = -1;
    CHECK(load_reader_status(ctx, &bad) == NCTMC_ERR_INVALID_ARGUMENT, "reader: size < 0");
    bad = r;
    bad.read_at = NULL;
    CHECK(load_reader_status(ctx, &bad) == NCTMC_ERR_INVALID_ARGUMENT, "reader: no read_at");
    bad = r;
    bad.struct_size = sizeof(size_t);
    CHECK(load_reader_status(ctx, &bad) == NCTMC_ERR_INVALID_ARGUMENT,
          "reader: struct_size too small");
    CHECK(load_reader_status(ctx, &r) == NCTMC_ERR_FORMAT, "reader: junk bytes");

    /* a caller built against a newer, larger struct */
    struct {
        nctmc_reader r;
        uint64_t newer_field;
    } newer;
    newer.newer_field = 99;
    CHECK(nctmc_reader_init_sized(&newer.r, sizeof newer) == NCTMC_OK &&
              newer.r.struct_size == sizeof newer &&
              newer.newer_field == 0,
          "init fills the caller's size");
    memcpy(&newer.r.size, &r.size, sizeof r - offsetof(nctmc_reader, size));
    CHECK(load_reader_status(ctx, &newer.r) == NCTMC_ERR_FORMAT,
          "a larger struct with zero trailing bytes is accepted (then the junk is rejected)");
    newer.newer_field = 1;
    CHECK(load_reader_status(ctx, &newer.r) == NCTMC_ERR_UNSUPPORTED,
          "a larger struct that sets an unknown field is refused");

    nctmc_reader fresh;
    memset(&fresh, 0x5A, sizeof fresh);
    CHECK(nctmc_reader_init(&fresh) == NCTMC_OK && fresh.struct_size == sizeof fresh &&
              fresh.size == 0 && fresh.read_at == NULL && fresh.user_data == NULL,
          "nctmc_reader_init zeroes and sets struct_size");
    CHECK(nctmc_reader_init_sized(NULL, sizeof fresh) == NCTMC_ERR_INVALID_ARGUMENT,
          "init: NULL");
    CHECK(nctmc_reader_init_sized(&fresh, 2) == NCTMC_ERR_INVALID_ARGUMENT,
          "init: too small to hold struct_size");
}

/* A trainer checkpoint from memory gives what nctmc_model_load() gives. */
static void test_trainer_checkpoint(nctmc_context *ctx, test_rng *rng)
{
    char path[512];
    test_path(path, sizeof path, scratch, "trainer.safetensors");
    nctmc_model *m = make_model(ctx, rng);
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 2;
    tp.ema_decay = 0.5f;
    nctmc_trainer *t = NULL;
    int32_t tokens[2 * FL];
    for (int i = 0; i < 2 * FL; i++)
        tokens[i] = i % 8;
    bool ok = m && nctmc_trainer_create(m, &tp, &t) == NCTMC_OK &&
              nctmc_trainer_step(t, tokens, NULL, NULL) == NCTMC_OK &&
              nctmc_trainer_save(t, path) == NCTMC_OK;
    CHECK(ok, "a trainer checkpoint");
    size_t n = 0;
    uint8_t *bytes = ok ? test_read_bytes(path, &n) : NULL;
    nctmc_model *a = NULL, *b = NULL;
    CHECK(bytes && nctmc_model_load(ctx, path, &a) == NCTMC_OK &&
              nctmc_model_load_memory(ctx, bytes, n, &b) == NCTMC_OK && same_weights(a, b),
          "the EMA weights from memory equal those from the path");
    nctmc_model_free(a);
    nctmc_model_free(b);
    free(bytes);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    unlink(path);
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
    test_rng rng = test_rng_seed(808);
    test_three_ways(ctx, &rng);
    test_broken_readers(ctx, &rng);
    test_arguments(ctx);
    test_trainer_checkpoint(ctx, &rng);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("load_sources");
}
