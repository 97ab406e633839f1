/*
 * test_dataset.c — token shards: round trips at 1, 2 and 4 bytes per token,
 * streams and labelled sequences, the byte layout of docs/formats.md (the
 * CRC-32 itself: test_crc32.c), truncated / corrupted /
 * out-of-range files rejected at open, bad arguments rejected by write and
 * by the readers.
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

/* how many values test_crc32.c draws from the generator seeded with 7 */
#define CRC32_TEST_DRAWS (1000 + 1100 + 300007)

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The CRC-32 of the body, recomputed into the header (for crafted files). */
static void fix_crc(uint8_t *file, size_t n)
{
    put32(file + 28, test_crc32_of(file + 48, n - 48));
}

/* ---- round trips ------------------------------------------------------------- */

static void round_trip(nctmc_context *ctx, test_rng *rng, int32_t vocab, int32_t seq_len,
                       int32_t n_classes, int64_t n_tokens, uint32_t expect_width)
{
    char path[512];
    test_path(path, sizeof path, scratch, "shard.tok");
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_tokens);
    for (int64_t i = 0; i < n_tokens; i++)
        tokens[i] = test_randint(rng, vocab);
    tokens[0] = vocab - 1;
    tokens[n_tokens - 1] = 0;
    int64_t n_seq = seq_len ? n_tokens / seq_len : 0;
    int32_t *labels = NULL;
    if (n_classes) {
        labels = malloc(sizeof(int32_t) * (size_t)n_seq);
        for (int64_t i = 0; i < n_seq; i++)
            labels[i] = test_randint(rng, n_classes);
        labels[0] = n_classes - 1;
    }
    CHECK(nctmc_dataset_write(ctx, path, tokens, n_tokens, vocab, seq_len, labels, n_classes) ==
              NCTMC_OK,
          "vocab %d: write: %s", vocab, nctmc_context_last_error(ctx));
    CHECK(test_count_entries(scratch) == 1, "no temporary file left");

    /* the byte layout */
    size_t size = 0;
    uint8_t *file = test_read_bytes(path, &size);
    size_t want = 48 + (size_t)n_tokens * expect_width + (size_t)(n_classes ? n_seq : 0) * 4;
    CHECK(file && size == want, "vocab %d: %zu bytes, want %zu", vocab, size, want);
    if (file && size == want) {
        CHECK(memcmp(file, "NCTMCTOK", 8) == 0 && le32(file + 8) == 1 &&
                  le32(file + 12) == expect_width && le32(file + 16) == (uint32_t)vocab &&
                  le32(file + 20) == (uint32_t)seq_len && le32(file + 24) == (uint32_t)n_classes &&
                  le64(file + 32) == (uint64_t)n_tokens && le64(file + 40) == 0,
              "vocab %d: header fields", vocab);
        CHECK(le32(file + 28) == test_crc32_of(file + 48, size - 48), "vocab %d: checksum", vocab);
        uint32_t first = expect_width == 1 ? file[48]
                         : expect_width == 2 ? (uint32_t)file[48] | (uint32_t)file[49] << 8
                                             : le32(file + 48);
        CHECK(first == (uint32_t)(vocab - 1), "vocab %d: little-endian tokens", vocab);
    }
    free(file);

    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(ctx, path, &ds) == NCTMC_OK && ds, "vocab %d: open: %s", vocab,
          nctmc_context_last_error(ctx));
    if (ds) {
        nctmc_dataset_info info;
        nctmc_dataset_info_init(&info);
        CHECK(nctmc_dataset_get_info(ds, &info) == NCTMC_OK && info.vocab_size == vocab &&
                  info.seq_len == seq_len && info.n_classes == n_classes &&
                  info.n_tokens == n_tokens && info.n_sequences == n_seq,
              "vocab %d: info", vocab);
        int32_t *back = malloc(sizeof(int32_t) * (size_t)n_tokens);
        CHECK(nctmc_dataset_read_tokens(ds, 0, n_tokens, back) == NCTMC_OK &&
                  memcmp(back, tokens, sizeof(int32_t) * (size_t)n_tokens) == 0,
              "vocab %d: every token comes back", vocab);
        int32_t window[5];
        CHECK(nctmc_dataset_read_tokens(ds, n_tokens - 5, 5, window) == NCTMC_OK &&
                  memcmp(window, tokens + n_tokens - 5, sizeof window) == 0,
              "vocab %d: the last window", vocab);
        bool labels_ok = true;
        for (int64_t i = 0; i < n_seq && n_classes; i++) {
            int32_t l = -1;
            labels_ok &= nctmc_dataset_read_label(ds, i, &l) == NCTMC_OK && l == labels[i];
        }
        CHECK(labels_ok, "vocab %d: labels", vocab);
        free(back);
        nctmc_dataset_free(ds);
    }
    free(labels);
    free(tokens);
    unlink(path);
}

/* ---- the readers' bounds --------------------------------------------------------- */

static void test_readers(nctmc_context *ctx)
{
    char path[512];
    test_path(path, sizeof path, scratch, "r.tok");
    int32_t tokens[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int32_t labels[3] = {2, 0, 1};
    nctmc_dataset_write(ctx, path, tokens, 12, 12, 4, labels, 3);
    nctmc_dataset *ds = NULL;
    if (nctmc_dataset_open(ctx, path, &ds) != NCTMC_OK)
        return;
    int32_t out[12], label = 77;
    CHECK(nctmc_dataset_read_tokens(ds, -1, 2, out) == NCTMC_ERR_INVALID_ARGUMENT &&
              nctmc_dataset_last_error(ds)[0],
          "negative first");
    CHECK(nctmc_dataset_read_tokens(ds, 0, -1, out) == NCTMC_ERR_INVALID_ARGUMENT,
          "negative count");
    CHECK(nctmc_dataset_read_tokens(ds, 10, 3, out) == NCTMC_ERR_INVALID_ARGUMENT,
          "past the end");
    CHECK(nctmc_dataset_read_tokens(ds, 1, INT64_MAX, out) == NCTMC_ERR_INVALID_ARGUMENT,
          "first + count overflows");
    CHECK(nctmc_dataset_read_tokens(ds, 0, 2, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL dst");
    CHECK(nctmc_dataset_read_tokens(ds, 12, 0, NULL) == NCTMC_OK, "empty read at the end");
    CHECK(nctmc_dataset_read_label(ds, 3, &label) == NCTMC_ERR_INVALID_ARGUMENT && label == 77,
          "label index out of range");
    CHECK(nctmc_dataset_read_label(ds, -1, &label) == NCTMC_ERR_INVALID_ARGUMENT, "negative");
    CHECK(nctmc_dataset_read_label(ds, 0, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL label");
    CHECK(nctmc_dataset_read_label(ds, 2, &label) == NCTMC_OK && label == 1, "label 2");
    nctmc_dataset_info info;
    nctmc_dataset_info_init(&info);
    info.struct_size = 3;
    CHECK(nctmc_dataset_get_info(ds, &info) == NCTMC_ERR_INVALID_ARGUMENT, "bad struct_size");
    CHECK(nctmc_dataset_get_info(ds, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL info");
    nctmc_dataset_free(ds);
    /* a stream has no labels */
    nctmc_dataset_write(NULL, path, tokens, 12, 12, 0, NULL, 0);
    CHECK(nctmc_dataset_open(NULL, path, &ds) == NCTMC_OK, "NULL ctx is allowed");
    CHECK(ds && nctmc_dataset_read_label(ds, 0, &label) == NCTMC_ERR_INVALID_ARGUMENT,
          "a stream has no labels");
    nctmc_dataset_free(ds);
    nctmc_dataset_free(NULL);
    CHECK(nctmc_dataset_read_tokens(NULL, 0, 1, out) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ds");
    CHECK(nctmc_dataset_read_label(NULL, 0, &label) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ds");
    CHECK(nctmc_dataset_get_info(NULL, &info) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ds");
    CHECK(strcmp(nctmc_dataset_last_error(NULL), "") == 0, "NULL ds error");
    nctmc_dataset_info_init(NULL);
    unlink(path);
}

/* ---- write rejects bad input ------------------------------------------------------ */

static void test_write_rejects(nctmc_context *ctx)
{
    char path[512];
    test_path(path, sizeof path, scratch, "w.tok");
    int32_t t[6] = {0, 1, 2, 3, 4, 5};
    int32_t l[3] = {0, 1, 1};
    struct {
        const char *what;
        const char *path;
        const int32_t *tokens;
        int64_t n;
        int32_t vocab, seq_len;
        const int32_t *labels;
        int32_t n_classes;
    } cases[] = {
        {"NULL path", NULL, t, 6, 6, 0, NULL, 0},
        {"NULL tokens", path, NULL, 6, 6, 0, NULL, 0},
        {"no tokens", path, t, 0, 6, 0, NULL, 0},
        {"negative count", path, t, -6, 6, 0, NULL, 0},
        {"vocab 0", path, t, 6, 0, 0, NULL, 0},
        {"token == vocab", path, t, 6, 5, 0, NULL, 0},
        {"negative seq_len", path, t, 6, 6, -2, NULL, 0},
        {"not whole sequences", path, t, 6, 6, 4, NULL, 0},
        {"labels without classes", path, t, 6, 6, 2, l, 0},
        {"classes without labels", path, t, 6, 6, 2, NULL, 2},
        {"labels on a stream", path, t, 6, 6, 0, l, 2},
        {"label == n_classes", path, t, 6, 6, 2, l, 1},
        {"negative classes", path, t, 6, 6, 2, NULL, -1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        CHECK(nctmc_dataset_write(ctx, cases[k].path, cases[k].tokens, cases[k].n,
                                  cases[k].vocab, cases[k].seq_len, cases[k].labels,
                                  cases[k].n_classes) == NCTMC_ERR_INVALID_ARGUMENT &&
                  nctmc_context_last_error(ctx)[0],
              "%s rejected", cases[k].what);
    int32_t neg[2] = {1, -1};
    CHECK(nctmc_dataset_write(ctx, path, neg, 2, 6, 0, NULL, 0) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_context_last_error(ctx), "token 1"),
          "negative token named: %s", nctmc_context_last_error(ctx));
    CHECK(test_count_entries(scratch) == 0, "nothing written");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope/w.tok", scratch);
    CHECK(nctmc_dataset_write(ctx, missing, t, 6, 6, 0, NULL, 0) == NCTMC_ERR_IO,
          "missing directory: %s", nctmc_context_last_error(ctx));
    CHECK(test_count_entries(scratch) == 0, "nothing left behind");
}

/* ---- damaged files ----------------------------------------------------------------- */

static uint8_t *valid_shard(nctmc_context *ctx, const char *path, size_t *n, int32_t vocab)
{
    int32_t tokens[24];
    int32_t labels[4] = {1, 0, 2, 1};
    for (int i = 0; i < 24; i++)
        tokens[i] = (i * 7) % vocab;
    nctmc_dataset_write(ctx, path, tokens, 24, vocab, 6, labels, 3);
    return test_read_bytes(path, n);
}

static nctmc_status open_status(nctmc_context *ctx, const char *path)
{
    nctmc_dataset *ds = (nctmc_dataset *)&ds;
    nctmc_status st = nctmc_dataset_open(ctx, path, &ds);
    if (st != NCTMC_OK && (ds != NULL || !nctmc_context_last_error(ctx)[0]))
        return (nctmc_status)-1;
    nctmc_dataset_free(ds);
    return st;
}

static void test_damaged(nctmc_context *ctx, test_rng *rng)
{
    char path[512], bad[512];
    test_path(path, sizeof path, scratch, "good.tok");
    test_path(bad, sizeof bad, scratch, "bad.tok");
    const int32_t vocabs[3] = {200, 300, 70000};
    for (int v = 0; v < 3; v++) {
        size_t n = 0;
        uint8_t *good = valid_shard(ctx, path, &n, vocabs[v]);
        CHECK(good && open_status(ctx, path) == NCTMC_OK, "vocab %d: valid shard", vocabs[v]);
        if (!good)
            continue;
        int rejected = 0;
        for (size_t len = 0; len < n; len++) {
            test_write_bytes(bad, good, len);
            rejected += open_status(ctx, bad) == NCTMC_ERR_FORMAT;
        }
        CHECK(rejected == (int)n, "vocab %d: %d of %zu truncations rejected", vocabs[v],
              rejected, n);
        /* every body byte is under the checksum; header bytes are checked for
         * consistency (some header changes describe another valid shard) */
        uint8_t *copy = malloc(n + 1);
        int body_rejected = 0, crashed = 0;
        for (size_t at = 0; at < n; at++) {
            memcpy(copy, good, n);
            copy[at] ^= (uint8_t)(1 + test_randint(rng, 255));
            test_write_bytes(bad, copy, n);
            nctmc_status st = open_status(ctx, bad);
            crashed += st == (nctmc_status)-1;
            body_rejected += at >= 48 && st == NCTMC_ERR_FORMAT;
        }
        CHECK(crashed == 0 && body_rejected == (int)(n - 48),
              "vocab %d: %d of %zu body corruptions rejected", vocabs[v], body_rejected, n - 48);
        memcpy(copy, good, n);
        copy[n] = 0;
        test_write_bytes(bad, copy, n + 1);
        CHECK(open_status(ctx, bad) == NCTMC_ERR_FORMAT, "vocab %d: a trailing byte", vocabs[v]);
        free(copy);
        free(good);
    }

    /* crafted with a correct checksum: values out of range, bad header fields */
    size_t n = 0;
    uint8_t *good = valid_shard(ctx, path, &n, 200); /* 1 byte per token */
    struct {
        const char *what;
        size_t at;
        uint32_t value;
    } edits[] = {
        {"token >= vocab", 48 + 5, 200},
        {"label >= n_classes", 48 + 24 + 4, 3},
        {"version 2", 8, 2},
        {"2 bytes per token for vocab 200", 12, 2},
        {"3 bytes per token", 12, 3},
        {"vocab 0", 16, 0},
        {"vocab past int32", 16, 0x80000000u},
        {"seq_len not dividing", 20, 5},
        {"classes on a stream", 20, 0},
        {"reserved field", 40, 1},
        {"token count past the file", 32, 25},
        {"magic", 0, 0x4e4e4e4e},
    };
    for (size_t k = 0; good && k < sizeof edits / sizeof edits[0]; k++) {
        uint8_t *copy = malloc(n);
        memcpy(copy, good, n);
        if (edits[k].at >= 48)
            copy[edits[k].at] = (uint8_t)edits[k].value;
        else
            put32(copy + edits[k].at, edits[k].value);
        fix_crc(copy, n);
        test_write_bytes(bad, copy, n);
        CHECK(open_status(ctx, bad) == NCTMC_ERR_FORMAT, "%s rejected: %s", edits[k].what,
              nctmc_context_last_error(ctx));
        free(copy);
    }
    free(good);
    CHECK(open_status(ctx, scratch) == NCTMC_ERR_IO, "a directory");
    unlink(bad);
    CHECK(open_status(ctx, bad) == NCTMC_ERR_IO, "a missing file");
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(ctx, NULL, &ds) == NCTMC_ERR_INVALID_ARGUMENT, "NULL path");
    CHECK(nctmc_dataset_open(ctx, path, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out");
    unlink(path);
}

int main(void)
{
    if (!test_make_temp_dir(scratch, sizeof scratch)) {
        fprintf(stderr, "cannot create a scratch directory\n");
        return 1;
    }
    nctmc_context *ctx = NULL;
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    test_rng rng = test_rng_seed(7);
    /* the draws test_crc32.c's checks took here when they were part of
     * this program, so that the shards below keep their contents */
    for (long i = 0; i < CRC32_TEST_DRAWS; i++)
        test_rng_next(&rng);
    round_trip(ctx, &rng, 2, 0, 0, 1000, 1);
    round_trip(ctx, &rng, 256, 0, 0, 100001, 1);
    round_trip(ctx, &rng, 257, 16, 0, 4096, 2);
    round_trip(ctx, &rng, 65536, 8, 10, 800, 2);
    round_trip(ctx, &rng, 65537, 0, 0, 300, 4);
    round_trip(ctx, &rng, 16777216, 5, 3, 500, 4);
    round_trip(ctx, &rng, 50304, 64, 1000, 64 * 40, 2);
    test_readers(ctx);
    test_write_rejects(ctx);
    test_damaged(ctx, &rng);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("dataset");
}
