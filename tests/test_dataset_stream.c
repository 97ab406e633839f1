/*
 * test_dataset_stream.c — shards for corpora larger than memory: the
 * streaming writer (nctmc_dataset_writer_*) makes byte for byte the file
 * nctmc_dataset_write() makes, whatever the pieces; nothing appears before
 * the commit; bad pieces and incomplete shards are refused; the checksum
 * it reports is the one nctmc_dataset_get_info() reads back; and an open
 * shard is mapped, not loaded (resident memory stays far below its size).
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

static bool exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Writes tokens through the streaming writer in random pieces. */
static nctmc_status write_in_pieces(nctmc_context *ctx, test_rng *rng, const char *path,
                                    const int32_t *tokens, int64_t n, int32_t vocab,
                                    int32_t seq_len, nctmc_dataset_info *info)
{
    nctmc_dataset_writer *w = NULL;
    nctmc_status st = nctmc_dataset_writer_create(ctx, path, vocab, seq_len, &w);
    for (int64_t at = 0; st == NCTMC_OK && at < n;) {
        int64_t k = 1 + test_randint(rng, 5000);
        if (k > n - at)
            k = n - at;
        st = nctmc_dataset_writer_append(w, tokens + at, k);
        at += k;
    }
    if (st == NCTMC_OK)
        CHECK(test_count_entries(scratch) == 1 && !exists(path),
              "nothing at the path before the commit");
    if (st == NCTMC_OK)
        st = nctmc_dataset_writer_commit(w, info);
    nctmc_dataset_writer_free(w);
    return st;
}

static void same_as_whole_write(nctmc_context *ctx, test_rng *rng, int32_t vocab,
                                int32_t seq_len, int64_t n)
{
    char whole[512], streamed[512];
    test_path(whole, sizeof whole, scratch, "whole.tok");
    test_path(streamed, sizeof streamed, scratch, "streamed.tok");
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = test_randint(rng, vocab);
    CHECK(nctmc_dataset_write(ctx, whole, tokens, n, vocab, seq_len, NULL, 0) == NCTMC_OK,
          "vocab %d: whole write", vocab);
    size_t a_size = 0, b_size = 0;
    uint8_t *a = test_read_bytes(whole, &a_size);
    unlink(whole);
    nctmc_dataset_info info;
    nctmc_dataset_info_init(&info);
    CHECK(write_in_pieces(ctx, rng, streamed, tokens, n, vocab, seq_len, &info) == NCTMC_OK,
          "vocab %d: streamed write: %s", vocab, nctmc_context_last_error(ctx));
    uint8_t *b = test_read_bytes(streamed, &b_size);
    CHECK(a && b && a_size == b_size && memcmp(a, b, a_size) == 0,
          "vocab %d seq_len %d: the streamed shard is byte for byte the whole one", vocab,
          seq_len);
    CHECK(b && info.checksum == le32(b + 28) && info.n_tokens == n &&
              info.vocab_size == vocab && info.seq_len == seq_len &&
              info.n_sequences == (seq_len ? n / seq_len : 0),
          "vocab %d: the commit reports what it wrote", vocab);
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(ctx, streamed, &ds) == NCTMC_OK, "vocab %d: opens", vocab);
    if (ds) {
        nctmc_dataset_info back;
        nctmc_dataset_info_init(&back);
        CHECK(nctmc_dataset_get_info(ds, &back) == NCTMC_OK && back.checksum == info.checksum,
              "vocab %d: get_info reads the same checksum", vocab);
        nctmc_dataset_free(ds);
    }
    unlink(streamed);
    free(a);
    free(b);
    free(tokens);
}

static void test_refusals(nctmc_context *ctx)
{
    char path[512];
    test_path(path, sizeof path, scratch, "r.tok");
    nctmc_dataset_writer *w = NULL;
    CHECK(nctmc_dataset_writer_create(ctx, path, 0, 0, &w) == NCTMC_ERR_INVALID_ARGUMENT && !w,
          "vocab 0 refused");
    CHECK(nctmc_dataset_writer_create(ctx, NULL, 5, 0, &w) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL path refused");

    /* a token out of range appends nothing of its call */
    int32_t good[4] = {0, 1, 2, 3}, bad[3] = {1, 9, 2};
    nctmc_dataset_info info;
    nctmc_dataset_info_init(&info);
    CHECK(nctmc_dataset_writer_create(ctx, path, 5, 2, &w) == NCTMC_OK, "create");
    CHECK(nctmc_dataset_writer_append(w, good, 3) == NCTMC_OK, "append 3");
    CHECK(nctmc_dataset_writer_append(w, bad, 3) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_dataset_writer_last_error(w), "outside") != NULL,
          "token 9 of a vocabulary of 5 refused, with a message");
    CHECK(nctmc_dataset_writer_commit(w, &info) == NCTMC_ERR_INVALID_ARGUMENT &&
              !exists(path),
          "3 tokens are not whole sequences of 2: refused, nothing written");
    CHECK(nctmc_dataset_writer_append(w, good, 1) == NCTMC_ERR_INVALID_ARGUMENT,
          "no append after a commit");
    nctmc_dataset_writer_free(w);
    CHECK(test_count_entries(scratch) == 0, "no temporary file left");

    CHECK(nctmc_dataset_writer_create(ctx, path, 5, 2, &w) == NCTMC_OK, "create again");
    CHECK(nctmc_dataset_writer_append(w, good, 3) == NCTMC_OK &&
              nctmc_dataset_writer_append(w, bad, 3) == NCTMC_ERR_INVALID_ARGUMENT &&
              nctmc_dataset_writer_append(w, good + 3, 1) == NCTMC_OK &&
              nctmc_dataset_writer_commit(w, &info) == NCTMC_OK && info.n_tokens == 4,
          "after a refused piece the shard holds exactly the accepted ones");
    nctmc_dataset_writer_free(w);
    unlink(path);

    CHECK(nctmc_dataset_writer_create(ctx, path, 5, 0, &w) == NCTMC_OK &&
              nctmc_dataset_writer_commit(w, NULL) == NCTMC_ERR_INVALID_ARGUMENT &&
              !exists(path),
          "an empty shard is refused");
    nctmc_dataset_writer_free(w);

    CHECK(nctmc_dataset_writer_create(ctx, path, 5, 0, &w) == NCTMC_OK &&
              nctmc_dataset_writer_append(w, good, 4) == NCTMC_OK, "abandoned writer");
    nctmc_dataset_writer_free(w);
    CHECK(test_count_entries(scratch) == 0, "a writer freed without a commit leaves nothing");
}

/* Resident memory (kB) from /proc/self/status, or -1 without /proc. */
static long resident_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* A 96 MB shard opened and read from end to end: mapped, and handed back
 * after the open's checks, it must not become resident whole. */
static void test_mapped(nctmc_context *ctx)
{
    char path[512];
    test_path(path, sizeof path, scratch, "big.tok");
    const int64_t n = 48 << 20, piece = 1 << 20;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)piece);
    for (int64_t i = 0; i < piece; i++)
        tokens[i] = (int32_t)(i * 2654435761u % 300);
    nctmc_dataset_writer *w = NULL;
    nctmc_status st = nctmc_dataset_writer_create(ctx, path, 300, 0, &w);
    for (int64_t at = 0; st == NCTMC_OK && at < n; at += piece)
        st = nctmc_dataset_writer_append(w, tokens, piece);
    if (st == NCTMC_OK)
        st = nctmc_dataset_writer_commit(w, NULL);
    nctmc_dataset_writer_free(w);
    CHECK(st == NCTMC_OK, "a 96 MB shard written in pieces");
    long before = resident_kb();
    nctmc_dataset *ds = NULL;
    CHECK(nctmc_dataset_open(ctx, path, &ds) == NCTMC_OK, "the big shard opens");
    long after_open = resident_kb();
    bool same = ds != NULL;
    for (int64_t at = 0; ds && at < n; at += piece * 7) {
        int32_t back[64];
        same &= nctmc_dataset_read_tokens(ds, at, 64, back) == NCTMC_OK &&
                memcmp(back, tokens, sizeof back) == 0;
    }
    CHECK(same, "windows across the mapped shard read back");
    if (before >= 0 && after_open >= 0)
        CHECK(after_open - before < 32 * 1024,
              "open left %ld kB resident for a 96 MB shard (mapped and handed back)",
              after_open - before);
    nctmc_dataset_free(ds);
    free(tokens);
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
    test_rng rng = test_rng_seed(11);
    same_as_whole_write(ctx, &rng, 2, 0, 1);
    same_as_whole_write(ctx, &rng, 256, 0, 70001);
    same_as_whole_write(ctx, &rng, 300, 16, 16 * 2000);
    same_as_whole_write(ctx, &rng, 70000, 0, 40000);
    test_refusals(ctx);
    test_mapped(ctx);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("dataset_stream");
}
