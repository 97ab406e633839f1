/*
 * test_infill.c — nctmc_infill(): on random texts and random byte ranges
 * (mid-word, mid-character, empty, touching, at either end) every byte
 * outside the ranges comes back unchanged, for a BPE, a byte and a character
 * tokenizer; the same seed gives the same text; the auto slot count; the
 * buffer protocol; and every error with its code and message. The models
 * are untrained (random weights): the property does not depend on them.
 *
 *   test_infill                     runs the tests
 *   test_infill checkpoint PATH [masked]  writes a tiny BPE model (uniform
 *                                   process, or masked) for the example's
 *                                   test (examples/check_infill.py)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_json.h"
#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "tiny_model.h"

#define SEQ 96

/* A small byte-level BPE: the 256 bytes, merges that make tokens span a
 * word start (" t", " the"), a run ("aa") and a two-byte character ("é"):
 * ids 0..255 the bytes, 256.. the merges in rank order, written as GPT-2's
 * vocab.json and merges.txt and loaded through the public API. */
static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* the byte symbols are all below U+0800 */
}

static size_t put_symbols_utf8(char *out, const char *s)
{
    size_t k = 0;
    for (; *s; s++)
        k += put_utf8(out + k, test_byte_to_unicode((uint8_t)*s));
    return k;
}

static nctmc_tokenizer *make_bpe(nctmc_context *ctx)
{
    static const char *const merged[] = {" t", "he", " the", "aa", "in", "\xc3\xa9"};
    static const char *const pairs[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"},
                                           {"a", "a"}, {"i", "n"}, {"\xc3", "\xa9"}};
    enum { N_PAIRS = 6 };
    char dir[256], vocab_path[512], merges_path[512];
    nctmc_tokenizer *tok = NULL;
    if (!test_make_temp_dir(dir, sizeof dir)) {
        CHECK(0, "bpe: a scratch directory");
        return NULL;
    }
    test_path(vocab_path, sizeof vocab_path, dir, "vocab.json");
    test_path(merges_path, sizeof merges_path, dir, "merges.txt");
    char vocab[16384], merges[512];
    size_t k = 0, km = 0;
    vocab[k++] = '{';
    for (int b = 0; b < 256; b++) {
        char one[2] = {(char)b, 0};
        if (b == 0) /* a C string cannot hold byte 0: spell it directly */
            k += (size_t)sprintf(vocab + k, "\"\\u0100\"");
        else
            k += put_symbols(vocab + k, one);
        k += (size_t)sprintf(vocab + k, ": %d, ", b);
    }
    km += (size_t)sprintf(merges, "#version: 0.2\n");
    for (int m = 0; m < N_PAIRS; m++) {
        k += put_symbols(vocab + k, merged[m]);
        k += (size_t)sprintf(vocab + k, m + 1 < N_PAIRS ? ": %d, " : ": %d}", 256 + m);
        km += put_symbols_utf8(merges + km, pairs[m][0]);
        merges[km++] = ' ';
        km += put_symbols_utf8(merges + km, pairs[m][1]);
        merges[km++] = '\n';
    }
    nctmc_status st = NCTMC_ERR_IO;
    if (test_write_bytes(vocab_path, vocab, k) && test_write_bytes(merges_path, merges, km))
        st = nctmc_tokenizer_load_gpt2(ctx, vocab_path, merges_path, &tok);
    CHECK(st == NCTMC_OK, "bpe load: %s", nctmc_context_last_error(ctx));
    CHECK(tok != NULL && nctmc_tokenizer_vocab_size(tok) == 256 + N_PAIRS,
          "a tokenizer of %d tokens", 256 + N_PAIRS);
    test_remove_dir(dir);
    return tok;
}

static const char chars_corpus[] = "abc the é日\n.";

static nctmc_tokenizer *make_chars(void)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_chars(NULL, chars_corpus, strlen(chars_corpus), &tok) ==
              NCTMC_OK,
          "create_chars");
    return tok;
}

/* An untrained model of the tokenizer's vocabulary with the tokenizer
 * attached, and a sampler for it. */
static nctmc_model *make_model(nctmc_context *ctx, const nctmc_tokenizer *tok, int32_t process)
{
    nctmc_model_config c = tiny_model_config(process, 0);
    c.vocab_size = nctmc_tokenizer_vocab_size(tok) + (process != NCTMC_PROCESS_UNIFORM);
    c.seq_len = SEQ;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model_create: %s",
          nctmc_context_last_error(ctx));
    tiny_randomize(m, 5);
    CHECK(nctmc_model_set_tokenizer(m, tok) == NCTMC_OK, "set_tokenizer: %s",
          nctmc_model_last_error(m));
    return m;
}

static nctmc_sampler *make_sampler(const nctmc_model *m)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 1;
    nctmc_sampler *s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK, "sampler_create");
    return s;
}

/* ---- random texts and ranges ------------------------------------------------ */

/* Pieces with multi-byte characters, word starts the merges span, runs. */
static const char *const pieces[] = {"the", " the", " t", "he", "aa", "aaa", "é", "日",
                                     "😀",  " ",    "  ", "\n", ".",  "in", "c",  "b"};
#define N_PIECES (sizeof pieces / sizeof pieces[0])

static size_t random_text(test_rng *rng, char *out, size_t cap, bool chars_only)
{
    size_t n = 0, want = (size_t)test_randint(rng, 30);
    while (n < want) {
        const char *p = pieces[test_randint(rng, (int32_t)N_PIECES)];
        if (chars_only && strstr(chars_corpus, p) == NULL && strcmp(p, " ") != 0)
            continue; /* a piece with a character outside the alphabet */
        size_t len = strlen(p);
        if (n + len >= cap)
            break;
        memcpy(out + n, p, len);
        n += len;
    }
    return n;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* 1 .. 4 sorted ranges from 2n random boundaries: empty, touching and
 * end ranges all come up. `on_char` keeps boundaries on character starts. */
static int32_t random_ranges(test_rng *rng, const char *text, size_t len, bool on_char,
                             nctmc_text_range *r)
{
    int32_t n = 1 + test_randint(rng, 4);
    size_t cut[8];
    for (int32_t i = 0; i < 2 * n; i++) {
        size_t c = (size_t)test_randint(rng, (int32_t)len + 1);
        while (on_char && c < len && ((uint8_t)text[c] & 0xC0) == 0x80)
            c++;
        cut[i] = c;
    }
    qsort(cut, (size_t)(2 * n), sizeof cut[0], cmp_size);
    for (int32_t k = 0; k < n; k++)
        r[k] = (nctmc_text_range){cut[2 * k], cut[2 * k + 1]};
    return n;
}

/* ---- the property ----------------------------------------------------------- */

static size_t seen_length; /* the sequence length the callback saw */

static int32_t note_length(int32_t step, int32_t n_steps, const int32_t *tokens, int32_t batch,
                           int32_t length, void *user_data)
{
    (void)step, (void)n_steps, (void)tokens, (void)batch, (void)user_data;
    seen_length = (size_t)length;
    return 1;
}

/* Every fixed segment of text is at its place in out, by the output's own
 * ranges, and out's start and end are the text's (independently of them). */
static void check_kept(const char *text, size_t len, const nctmc_text_range *r, int32_t n,
                       const char *out, size_t out_len, const nctmc_text_range *ro,
                       const char *what)
{
    size_t head = r[0].start, tail = len - r[n - 1].end;
    CHECK(out_len >= head + tail && memcmp(out, text, head) == 0 &&
              memcmp(out + out_len - tail, text + r[n - 1].end, tail) == 0,
          "%s: the text before the first / after the last range changed", what);
    size_t prev_out = 0, prev_in = 0;
    for (int32_t k = 0; k <= n; k++) {
        size_t in_end = k < n ? r[k].start : len, out_end = k < n ? ro[k].start : out_len;
        CHECK(out_end >= prev_out && out_end - prev_out == in_end - prev_in &&
                  memcmp(out + prev_out, text + prev_in, in_end - prev_in) == 0,
              "%s: fixed segment %d changed", what, (int)k);
        if (k < n) {
            CHECK(ro[k].end >= ro[k].start, "%s: range %d out of order", what, (int)k);
            prev_out = ro[k].end, prev_in = r[k].end;
        }
    }
    CHECK(out[out_len] == '\0', "%s: no NUL", what);
}

static nctmc_status infill(nctmc_sampler *s, const char *text, size_t len,
                           const nctmc_text_range *r, int32_t n, const int32_t *counts,
                           uint64_t seed, char *out, size_t cap, size_t *out_len,
                           nctmc_text_range *ro)
{
    nctmc_sample_params sp;
    nctmc_sample_params_init(&sp);
    sp.n_steps = 3;
    sp.seed = seed;
    sp.callback = note_length;
    nctmc_infill_params ip;
    nctmc_infill_params_init(&ip);
    ip.sample = &sp;
    ip.range_tokens = counts;
    ip.ranges_out = ro;
    return nctmc_infill(s, NULL, text, len, r, n, &ip, out, cap, out_len);
}

/* Random texts and ranges: bytes kept, and the same seed gives the same. */
static void test_random(nctmc_sampler *s, bool chars, const char *what, uint64_t seed)
{
    test_rng rng = test_rng_seed(seed);
    static char text[128], out[8192], again[8192];
    for (int trial = 0; trial < 150; trial++) {
        size_t len = random_text(&rng, text, 64, chars);
        nctmc_text_range r[4], ro[4], ro2[4];
        int32_t n = random_ranges(&rng, text, len, chars, r);
        int32_t counts[4];
        for (int32_t k = 0; k < n; k++)
            counts[k] = test_randint(&rng, 3) == 0 ? NCTMC_INFILL_AUTO_TOKENS
                                                   : test_randint(&rng, 5);
        size_t out_len = 0, len2 = 0;
        nctmc_status st = infill(s, text, len, r, n, trial % 2 ? counts : NULL, (uint64_t)trial,
                                 out, sizeof out, &out_len, ro);
        if (st != NCTMC_OK && len == 0 && trial % 2) /* every count 0 on an empty text */
            continue;
        CHECK(st == NCTMC_OK, "%s trial %d: %s", what, trial, nctmc_sampler_last_error(s));
        if (st != NCTMC_OK)
            continue;
        check_kept(text, len, r, n, out, out_len, ro, what);
        st = infill(s, text, len, r, n, trial % 2 ? counts : NULL, (uint64_t)trial, again,
                    sizeof again, &len2, ro2);
        CHECK(st == NCTMC_OK && len2 == out_len && memcmp(out, again, out_len) == 0 &&
                  memcmp(ro, ro2, (size_t)n * sizeof ro[0]) == 0,
              "%s trial %d: the same seed gave another text", what, trial);
    }
}

/* Auto slots of the byte tokenizer: one per byte, at least one. */
static void test_auto_bytes(nctmc_sampler *s)
{
    const char *text = "hello world";
    nctmc_text_range r[] = {{0, 0}, {2, 5}, {11, 11}};
    char out[256];
    size_t out_len = 0;
    nctmc_text_range ro[3];
    CHECK(infill(s, text, 11, r, 3, NULL, 1, out, sizeof out, &out_len, ro) == NCTMC_OK,
          "bytes auto: %s", nctmc_sampler_last_error(s));
    CHECK(seen_length == 8 + 1 + 3 + 1, "bytes auto: the sequence has %zu tokens, not 13",
          seen_length);
    CHECK(out_len == 8 + 1 + 3 + 1 && ro[1].end - ro[1].start == 3,
          "bytes: one byte per token (%zu)", out_len);
    int32_t counts[] = {0, 7, 2};
    CHECK(infill(s, text, 11, r, 3, counts, 1, out, sizeof out, &out_len, ro) == NCTMC_OK &&
              seen_length == 8 + 9 && out_len == 17 && ro[0].start == 0 && ro[0].end == 0,
          "bytes counts: %zu tokens", seen_length);
}

/* The BPE auto count is the range's own tokens: " the" is one. */
static void test_auto_bpe(nctmc_sampler *s)
{
    const char *text = "say the word";
    nctmc_text_range r[] = {{3, 7}};
    char out[512];
    size_t out_len = 0;
    nctmc_text_range ro[1];
    CHECK(infill(s, text, strlen(text), r, 1, NULL, 2, out, sizeof out, &out_len, ro) ==
              NCTMC_OK,
          "bpe auto: %s", nctmc_sampler_last_error(s));
    /* "say" 3 tokens, " the" 1 slot, " word" 5 */
    CHECK(seen_length == 3 + 1 + 5, "bpe auto: %zu tokens, expected 9", seen_length);
}

/* The two-call buffer protocol. */
static void test_buffer(nctmc_sampler *s)
{
    const char *text = "abc the é";
    nctmc_text_range r[] = {{1, 2}, {4, 7}};
    size_t need = 0, got = 0;
    nctmc_text_range ro[2], ro2[2];
    CHECK(infill(s, text, strlen(text), r, 2, NULL, 3, NULL, 0, &need, ro) == NCTMC_OK,
          "measure: %s", nctmc_sampler_last_error(s));
    char *small = malloc(need);
    memset(small, 'Z', need);
    bool untouched = true;
    CHECK(infill(s, text, strlen(text), r, 2, NULL, 3, small, need, &got, ro2) ==
                  NCTMC_ERR_INVALID_ARGUMENT &&
              got == need && strstr(nctmc_sampler_last_error(s), "out_cap") != NULL,
          "a buffer without room for the NUL: %zu", got);
    for (size_t i = 0; i < need; i++)
        untouched = untouched && small[i] == 'Z';
    CHECK(untouched, "a too small buffer is left untouched");
    char *exact = malloc(need + 1);
    CHECK(infill(s, text, strlen(text), r, 2, NULL, 3, exact, need + 1, &got, ro2) ==
                  NCTMC_OK &&
              got == need && memcmp(ro, ro2, sizeof ro) == 0 && exact[need] == '\0',
          "the exact buffer");
    free(small);
    free(exact);
}

/* ---- errors --------------------------------------------------------------- */

static void expect(nctmc_sampler *s, nctmc_status got, nctmc_status want, const char *part,
                   const char *what)
{
    const char *msg = nctmc_sampler_last_error(s);
    CHECK(got == want && strstr(msg, part) != NULL, "%s: status %s, message \"%s\"", what,
          nctmc_status_string(got), msg);
}

static void test_errors(nctmc_sampler *s, nctmc_sampler *chars_s, nctmc_context *ctx)
{
    const char *text = "abc the end";
    size_t len = strlen(text), out_len = 0;
    char out[512];
    nctmc_status E = NCTMC_ERR_INVALID_ARGUMENT;
#define RUN(samp, ranges, n) \
    nctmc_infill(samp, NULL, text, len, ranges, n, NULL, out, sizeof out, &out_len)
    nctmc_text_range unsorted[] = {{5, 6}, {1, 2}}, overlap[] = {{1, 4}, {3, 6}};
    nctmc_text_range past[] = {{3, 12}}, backwards[] = {{4, 3}}, ok[] = {{1, 2}};
    expect(s, RUN(s, unsorted, 2), E, "sorted", "unsorted");
    expect(s, RUN(s, overlap, 2), E, "overlaps", "overlapping");
    expect(s, RUN(s, past, 1), E, "not within", "past the end");
    expect(s, RUN(s, backwards, 1), E, "not within", "start > end");
    expect(s, RUN(s, ok, 0), E, "n_ranges", "no ranges");
    expect(s, RUN(s, NULL, 1), E, "ranges is NULL", "NULL ranges");
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, NULL, out, sizeof out, NULL), E,
           "out_len", "NULL out_len");
    expect(s, nctmc_infill(s, NULL, NULL, 3, ok, 1, NULL, out, sizeof out, &out_len), E,
           "text is NULL", "NULL text");
    CHECK(nctmc_infill(NULL, NULL, text, len, ok, 1, NULL, out, sizeof out, &out_len) == E,
          "NULL sampler");
    nctmc_infill_params ip;
    nctmc_infill_params_init(&ip);
    int32_t too_many[] = {SEQ}, negative[] = {-2};
    ip.range_tokens = too_many;
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, &ip, out, sizeof out, &out_len), E,
           "max_length", "more tokens than seq_len");
    ip.range_tokens = negative;
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, &ip, out, sizeof out, &out_len), E,
           "range_tokens[0]", "negative count");
    ip.range_tokens = NULL;
    nctmc_sample_params sp;
    nctmc_sample_params_init(&sp);
    sp.batch = 2;
    ip.sample = &sp;
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, &ip, out, sizeof out, &out_len), E,
           "set by the call", "sample.batch");
    sp.batch = 1;
    sp.n_steps = 0;
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, &ip, out, sizeof out, &out_len), E,
           "n_steps", "the sampler's own check");
    ip.sample = NULL;
    nctmc_infill_params small = ip;
    small.struct_size = sizeof(size_t);
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, &small, out, sizeof out, &out_len), E,
           "nctmc_infill_params", "struct_size too small");
    struct {
        nctmc_infill_params p;
        int64_t future;
    } newer;
    memset(&newer, 0, sizeof newer);
    nctmc_infill_params_init_sized(&newer.p, sizeof newer);
    newer.future = 1;
    expect(s, nctmc_infill(s, NULL, text, len, ok, 1, &newer.p, out, sizeof out, &out_len),
           NCTMC_ERR_UNSUPPORTED, "nctmc_infill_params", "unknown field");
    newer.future = 0;
    CHECK(nctmc_infill(s, NULL, text, len, ok, 1, &newer.p, out, sizeof out, &out_len) ==
              NCTMC_OK,
          "a newer struct with zero tail: %s", nctmc_sampler_last_error(s));
    CHECK(nctmc_sampler_last_error(s)[0] == '\0', "success clears the message");

    /* a tokenizer that is not the model's, and an image tokenizer */
    nctmc_tokenizer *bytes = NULL, *image = NULL;
    nctmc_tokenizer_create_bytes(&bytes);
    nctmc_tokenizer_create_image(ctx, 2, 2, 4, &image);
    expect(s, nctmc_infill(s, bytes, text, len, ok, 1, NULL, out, sizeof out, &out_len), E,
           "does not fit the model", "another vocabulary");
    expect(s, nctmc_infill(s, image, text, len, ok, 1, NULL, out, sizeof out, &out_len), E,
           "image", "image tokenizer");
    nctmc_tokenizer_free(bytes);
    nctmc_tokenizer_free(image);

    /* character tokenizer: a boundary inside "é" (bytes 8, 9) and a character
     * outside the alphabet, each named by its offset in the whole text */
    const char *ct = "abc the éz";
    nctmc_text_range mid[] = {{9, 10}}, before_z[] = {{0, 1}}, over_z[] = {{10, 11}};
    expect(chars_s, nctmc_infill(chars_s, NULL, ct, 11, mid, 1, NULL, out, sizeof out, &out_len),
           E, "invalid UTF-8 at byte 8", "chars: range inside a character");
    expect(chars_s,
           nctmc_infill(chars_s, NULL, ct, 11, before_z, 1, NULL, out, sizeof out, &out_len), E,
           "U+007A at byte 10", "chars: character outside the alphabet");
    CHECK(nctmc_infill(chars_s, NULL, ct, 11, over_z, 1, NULL, out, sizeof out, &out_len) ==
                  NCTMC_OK &&
              out_len >= 10 && memcmp(out, ct, 10) == 0,
          "chars: a character outside the alphabet inside a range is replaced: %s",
          nctmc_sampler_last_error(chars_s));
#undef RUN
}

/* A masked model without the final denoise may leave mask tokens: they
 * decode to nothing and the fixed text is still kept. */
static void test_masked(nctmc_context *ctx, const nctmc_tokenizer *bpe)
{
    nctmc_model *m = make_model(ctx, bpe, NCTMC_PROCESS_MASKED);
    nctmc_sampler *s = make_sampler(m);
    nctmc_sample_params sp;
    nctmc_sample_params_init(&sp);
    sp.n_steps = 2;
    sp.final_denoise = 0;
    nctmc_infill_params ip;
    nctmc_infill_params_init(&ip);
    ip.sample = &sp;
    nctmc_text_range r[] = {{2, 9}}, ro[1];
    ip.ranges_out = ro;
    const char *text = "a the b the c";
    char out[512];
    size_t out_len = 0;
    CHECK(nctmc_infill(s, NULL, text, strlen(text), r, 1, &ip, out, sizeof out, &out_len) ==
              NCTMC_OK,
          "masked: %s", nctmc_sampler_last_error(s));
    check_kept(text, strlen(text), r, 1, out, out_len, ro, "masked");
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

static int write_checkpoint(const char *path, int32_t process)
{
    nctmc_context *ctx = tiny_context();
    nctmc_tokenizer *bpe = make_bpe(ctx);
    nctmc_model *m = make_model(ctx, bpe, process);
    nctmc_status st = nctmc_model_save(m, path);
    if (st != NCTMC_OK)
        fprintf(stderr, "save: %s\n", nctmc_model_last_error(m));
    nctmc_model_free(m);
    nctmc_tokenizer_free(bpe);
    nctmc_context_free(ctx);
    return st == NCTMC_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "checkpoint") == 0)
        return write_checkpoint(argv[2], argc == 4 && strcmp(argv[3], "masked") == 0
                                             ? NCTMC_PROCESS_MASKED
                                             : NCTMC_PROCESS_UNIFORM);
    nctmc_context *ctx = tiny_context();
    nctmc_tokenizer *bpe = make_bpe(ctx), *chars = make_chars(), *bytes = NULL;
    nctmc_tokenizer_create_bytes(&bytes);
    nctmc_model *mb = make_model(ctx, bpe, NCTMC_PROCESS_UNIFORM);
    nctmc_model *mc = make_model(ctx, chars, NCTMC_PROCESS_UNIFORM);
    nctmc_model *my = make_model(ctx, bytes, NCTMC_PROCESS_UNIFORM);
    nctmc_sampler *sb = make_sampler(mb), *sc = make_sampler(mc), *sy = make_sampler(my);

    test_random(sb, false, "bpe", 1);
    test_random(sy, false, "bytes", 2);
    test_random(sc, true, "chars", 3);
    test_auto_bytes(sy);
    test_auto_bpe(sb);
    test_buffer(sb);
    test_errors(sb, sc, ctx);
    test_masked(ctx, bpe);

    nctmc_sampler_free(sb);
    nctmc_sampler_free(sc);
    nctmc_sampler_free(sy);
    nctmc_model_free(mb);
    nctmc_model_free(mc);
    nctmc_model_free(my);
    nctmc_tokenizer_free(bpe);
    nctmc_tokenizer_free(chars);
    nctmc_tokenizer_free(bytes);
    nctmc_context_free(ctx);
    return test_finish("infill");
}
