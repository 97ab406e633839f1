/*
 * test_tokenizer.c — tokenizers: round trips of every kind (bytes, characters
 * with multi-byte UTF-8, images of every pixel width), strict UTF-8, errors
 * that name the byte offset or token index, the count/measure buffer
 * protocol, the tokenizer file (round trip, every truncation, corruptions)
 * and the tokenizer a model carries.
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

/* ---- logging ---------------------------------------------------------------- */

typedef struct log_capture {
    int n_errors;
    char last[512];
} log_capture;

static void capture_log(nctmc_log_level level, const char *message, void *user)
{
    log_capture *c = user;
    if (level == NCTMC_LOG_ERROR) {
        c->n_errors++;
        snprintf(c->last, sizeof c->last, "%s", message);
    }
}

/* ---- helpers ------------------------------------------------------------- */

/* Encodes then decodes; checks the text comes back byte for byte. */
static void check_text_round_trip(nctmc_tokenizer *tok, const char *text, size_t n,
                                  const char *what)
{
    size_t n_tokens = 0;
    nctmc_status st = nctmc_tokenizer_encode(tok, text, n, NULL, 0, &n_tokens);
    CHECK(st == NCTMC_OK, "%s: count: %s", what, nctmc_tokenizer_last_error(tok));
    int32_t *tokens = malloc(sizeof(int32_t) * (n_tokens + 1));
    size_t got = 0;
    st = nctmc_tokenizer_encode(tok, text, n, tokens, n_tokens, &got);
    CHECK(st == NCTMC_OK && got == n_tokens, "%s: encode: %s", what,
          nctmc_tokenizer_last_error(tok));
    for (size_t i = 0; i < got; i++)
        CHECK(tokens[i] >= 0 && tokens[i] < nctmc_tokenizer_vocab_size(tok),
              "%s: token %zu = %d out of range", what, i, tokens[i]);
    size_t need = 0;
    st = nctmc_tokenizer_decode(tok, tokens, got, NULL, 0, &need);
    CHECK(st == NCTMC_OK && need == n, "%s: measure gives %zu, want %zu", what, need, n);
    char *back = malloc(need + 1);
    size_t len = 0;
    st = nctmc_tokenizer_decode(tok, tokens, got, back, need + 1, &len);
    CHECK(st == NCTMC_OK && len == n && memcmp(back, text, n) == 0 && back[n] == '\0',
          "%s: text does not come back", what);
    free(back);
    free(tokens);
}

static bool message_has(const char *msg, const char *part)
{
    return strstr(msg, part) != NULL;
}

/* ---- bytes ----------------------------------------------------------------- */

static void test_bytes(void)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_bytes(NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL out");
    CHECK(nctmc_tokenizer_create_bytes(&tok) == NCTMC_OK && tok, "create");
    CHECK(nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_BYTES, "kind");
    CHECK(nctmc_tokenizer_vocab_size(tok) == 256, "vocab");
    static const char text[] = "h\xc3\xa9llo\0\xff\x80 bytes";
    check_text_round_trip(tok, text, sizeof text - 1, "bytes");
    int32_t t[3];
    size_t n = 0;
    CHECK(nctmc_tokenizer_encode(tok, "\x00\xff", 2, t, 3, &n) == NCTMC_OK && n == 2 &&
              t[0] == 0 && t[1] == 255,
          "byte values are the tokens");
    int32_t bad[3] = {1, 256, 2};
    char out[8];
    CHECK(nctmc_tokenizer_decode(tok, bad, 3, out, sizeof out, &n) ==
                  NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "token 1"),
          "token 256 rejected by index: %s", nctmc_tokenizer_last_error(tok));
    bad[1] = -1;
    CHECK(nctmc_tokenizer_decode(tok, bad, 3, NULL, 0, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "negative token");
    int32_t dummy;
    CHECK(nctmc_tokenizer_image_shape(tok, &dummy, NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "image shape of a byte tokenizer");
    nctmc_tokenizer_free(tok);
}

/* ---- characters -------------------------------------------------------------- */

/* é (2 bytes), € (3 bytes), 😀 (4 bytes), 中 (3 bytes) */
static const char corpus[] = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad! abc";

static void test_chars_round_trip(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok) == NCTMC_OK,
          "create_chars: %s", nctmc_context_last_error(ctx));
    if (!tok)
        return;
    /* distinct: c a f é ' ' € 😀 中 ! b = 10 */
    CHECK(nctmc_tokenizer_vocab_size(tok) == 10, "alphabet size %d",
          nctmc_tokenizer_vocab_size(tok));
    CHECK(nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_CHARS, "kind");
    check_text_round_trip(tok, corpus, sizeof corpus - 1, "corpus");
    static const char text[] = "\xf0\x9f\x98\x80\xf0\x9f\x98\x80 caf\xc3\xa9!";
    check_text_round_trip(tok, text, sizeof text - 1, "multi-byte text");
    /* code-point order: ' ' (0x20) < '!' < 'a' < ... < 😀 (the largest) */
    int32_t t[4];
    size_t n = 0;
    CHECK(nctmc_tokenizer_encode(tok, " !a\xf0\x9f\x98\x80", 7, t, 4, &n) == NCTMC_OK &&
              n == 4 && t[0] == 0 && t[1] == 1 && t[2] == 2 && t[3] == 9,
          "alphabet in code-point order (%d %d %d %d)", t[0], t[1], t[2], t[3]);
    check_text_round_trip(tok, "", 0, "empty text");
    nctmc_tokenizer_free(tok);
}

static void test_chars_unknown(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok);
    if (!tok)
        return;
    int32_t t[16];
    size_t n = 99;
    /* "café" is 5 bytes, so 'z' sits at byte offset 5 */
    nctmc_status st = nctmc_tokenizer_encode(tok, "caf\xc3\xa9z", 6, t, 16, &n);
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "byte offset 5"),
          "unknown character named by offset: %s", nctmc_tokenizer_last_error(tok));
    CHECK(n == 0, "n_tokens is 0 after invalid text (%zu)", n);
    st = nctmc_tokenizer_encode(tok, "ab\xc3\xa8", 4, NULL, 0, &n);
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "U+00E8") &&
              message_has(nctmc_tokenizer_last_error(tok), "offset 2"),
          "unknown è: %s", nctmc_tokenizer_last_error(tok));
    int32_t bad = 10;
    char out[8];
    CHECK(nctmc_tokenizer_decode(tok, &bad, 1, out, sizeof out, &n) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "token == vocab rejected");
    nctmc_tokenizer_free(tok);
}

/* Invalid UTF-8, each with the offset where it starts. */
static const struct {
    const char *bytes;
    size_t n;
    size_t offset;
    const char *what;
} bad_utf8[] = {
    {"ab\x80", 3, 2, "lone continuation byte"},
    {"a\xc0\xaf", 3, 1, "overlong 2-byte '/'"},
    {"a\xc1\xbf", 3, 1, "overlong 2-byte"},
    {"\xe0\x80\xaf", 3, 0, "overlong 3-byte"},
    {"ab\xf0\x80\x80\xaf", 6, 2, "overlong 4-byte"},
    {"a\xed\xa0\x80", 4, 1, "high surrogate U+D800"},
    {"a\xed\xbf\xbf", 4, 1, "low surrogate U+DFFF"},
    {"\xf4\x90\x80\x80", 4, 0, "U+110000"},
    {"a\xf5\x80\x80\x80", 5, 1, "lead byte 0xF5"},
    {"a\xff", 2, 1, "byte 0xFF"},
    {"abc\xe4\xb8", 5, 3, "truncated 3-byte sequence"},
    {"\xe4\x41\xad", 3, 0, "bad continuation"},
};
#define N_BAD_UTF8 (sizeof bad_utf8 / sizeof bad_utf8[0])

static void test_invalid_utf8(nctmc_context *ctx, log_capture *logs)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok);
    for (size_t k = 0; k < N_BAD_UTF8 && tok; k++) {
        char offset[48];
        snprintf(offset, sizeof offset, "byte offset %zu", bad_utf8[k].offset);
        nctmc_tokenizer *made = (nctmc_tokenizer *)&made;
        int before = logs->n_errors;
        nctmc_status st = nctmc_tokenizer_create_chars(ctx, bad_utf8[k].bytes, bad_utf8[k].n,
                                                       &made);
        CHECK(st == NCTMC_ERR_INVALID_ARGUMENT && made == NULL &&
                  message_has(nctmc_context_last_error(ctx), offset),
              "create_chars, %s: %s", bad_utf8[k].what, nctmc_context_last_error(ctx));
        CHECK(logs->n_errors == before + 1 && message_has(logs->last, offset),
              "create_chars, %s: logged", bad_utf8[k].what);
        size_t n = 0;
        st = nctmc_tokenizer_encode(tok, bad_utf8[k].bytes, bad_utf8[k].n, NULL, 0, &n);
        CHECK(st == NCTMC_ERR_INVALID_ARGUMENT &&
                  message_has(nctmc_tokenizer_last_error(tok), offset),
              "encode, %s: %s", bad_utf8[k].what, nctmc_tokenizer_last_error(tok));
    }
    /* the largest valid code points are accepted */
    static const char edge[] = "\xf4\x8f\xbf\xbf\xee\x80\x80\xed\x9f\xbf\x7f";
    nctmc_tokenizer *e = NULL;
    CHECK(nctmc_tokenizer_create_chars(ctx, edge, sizeof edge - 1, &e) == NCTMC_OK &&
              nctmc_tokenizer_vocab_size(e) == 4,
          "U+10FFFF, U+E000, U+D7FF, U+007F are valid");
    if (e)
        check_text_round_trip(e, edge, sizeof edge - 1, "edge code points");
    nctmc_tokenizer_free(e);
    nctmc_tokenizer_free(tok);
    /* NULL context: still an error, nowhere to store it */
    nctmc_tokenizer *made = NULL;
    CHECK(nctmc_tokenizer_create_chars(NULL, "\xff", 1, &made) == NCTMC_ERR_INVALID_ARGUMENT &&
              !made,
          "NULL ctx");
    CHECK(nctmc_tokenizer_create_chars(ctx, "", 0, &made) == NCTMC_ERR_INVALID_ARGUMENT,
          "empty corpus");
    CHECK(nctmc_tokenizer_create_chars(ctx, NULL, 3, &made) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL corpus");
}

/* More than 65536 distinct characters are refused. */
static void test_alphabet_limit(nctmc_context *ctx)
{
    size_t n_chars = 65537;
    uint8_t *text = malloc(n_chars * 4);
    size_t len = 0;
    for (uint32_t cp = 0x10000; cp < 0x10000 + n_chars; cp++) {
        text[len++] = (uint8_t)(0xF0 | (cp >> 18));
        text[len++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        text[len++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        text[len++] = (uint8_t)(0x80 | (cp & 0x3F));
    }
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_chars(ctx, (const char *)text, len, &tok) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "65537 characters refused");
    CHECK(nctmc_tokenizer_create_chars(ctx, (const char *)text, len - 4, &tok) == NCTMC_OK &&
              nctmc_tokenizer_vocab_size(tok) == 65536,
          "65536 characters accepted");
    nctmc_tokenizer_free(tok);
    free(text);
}

/* ---- the buffer protocol ------------------------------------------------------ */

static void test_buffer_protocol(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok);
    if (!tok)
        return;
    const char *text = "caf\xc3\xa9 abc"; /* 8 characters, 9 bytes */
    size_t n = 0;
    CHECK(nctmc_tokenizer_encode(tok, text, 9, NULL, 0, &n) == NCTMC_OK && n == 8,
          "count only: %zu", n);
    int32_t small[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    n = 0;
    CHECK(nctmc_tokenizer_encode(tok, text, 9, small, 7, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              n == 8,
          "too small a buffer still reports the count (%zu)", n);
    CHECK(small[0] == -7 && small[6] == -7, "nothing written into a too small buffer");
    CHECK(nctmc_tokenizer_encode(tok, text, 9, small, 8, &n) == NCTMC_OK && n == 8,
          "exact capacity");
    CHECK(nctmc_tokenizer_encode(tok, text, 9, NULL, 5, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL tokens with a capacity");
    CHECK(nctmc_tokenizer_encode(tok, NULL, 3, NULL, 0, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL text");
    CHECK(nctmc_tokenizer_encode(tok, text, 9, small, 8, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL n_tokens");
    CHECK(nctmc_tokenizer_encode(NULL, text, 9, small, 8, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL tokenizer");

    size_t need = 0;
    CHECK(nctmc_tokenizer_decode(tok, small, 8, NULL, 0, &need) == NCTMC_OK && need == 9,
          "measure: %zu", need);
    char out[16];
    memset(out, 'X', sizeof out);
    size_t len = 0;
    CHECK(nctmc_tokenizer_decode(tok, small, 8, out, 9, &len) == NCTMC_ERR_INVALID_ARGUMENT &&
              len == 9 && out[0] == 'X',
          "capacity must leave room for the NUL");
    CHECK(nctmc_tokenizer_decode(tok, small, 8, out, 10, &len) == NCTMC_OK && len == 9 &&
              memcmp(out, text, 9) == 0 && out[9] == '\0' && out[10] == 'X',
          "exact capacity + NUL");
    CHECK(nctmc_tokenizer_decode(tok, NULL, 0, out, 1, &len) == NCTMC_OK && len == 0 &&
              out[0] == '\0',
          "no tokens");
    CHECK(nctmc_tokenizer_decode(tok, NULL, 2, out, 10, &len) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL tokens");
    CHECK(nctmc_tokenizer_decode(tok, small, 8, NULL, 10, &len) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL text with a capacity");
    CHECK(nctmc_tokenizer_decode(tok, small, 8, out, 10, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL n_bytes");
    nctmc_tokenizer_free(tok);
}

/* ---- images ----------------------------------------------------------------- */

static void image_round_trip(nctmc_context *ctx, int32_t w, int32_t h, int32_t levels,
                             test_rng *rng)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_image(ctx, w, h, levels, &tok) == NCTMC_OK, "create %dx%d/%d",
          w, h, levels);
    if (!tok)
        return;
    int32_t gw = 0, gh = 0, gl = 0;
    CHECK(nctmc_tokenizer_image_shape(tok, &gw, &gh, &gl) == NCTMC_OK && gw == w && gh == h &&
              gl == levels,
          "shape");
    CHECK(nctmc_tokenizer_vocab_size(tok) == levels, "vocab is the level count");
    size_t n = (size_t)w * (size_t)h * 2; /* two images */
    int32_t *tokens = malloc(sizeof(int32_t) * n);
    for (size_t i = 0; i < n; i++)
        tokens[i] = test_randint(rng, levels);
    tokens[0] = 0;
    tokens[1 % n] = levels - 1;
    size_t len = 0;
    CHECK(nctmc_tokenizer_decode(tok, tokens, n, NULL, 0, &len) == NCTMC_OK, "measure");
    char *text = malloc(len + 1);
    CHECK(nctmc_tokenizer_decode(tok, tokens, n, text, len + 1, &len) == NCTMC_OK, "decode");
    /* one line per row, all rows the same width, level 0 drawn as spaces */
    size_t rows = 0, pc = (len - (size_t)(2 * h)) / n;
    for (size_t i = 0; i < len; i++)
        rows += text[i] == '\n';
    CHECK(rows == (size_t)(2 * h) && len == n * pc + rows && text[len - 1] == '\n',
          "%dx%d/%d: %zu lines of %zu-character pixels", w, h, levels, rows, pc);
    for (size_t i = 0; i < pc; i++)
        CHECK(text[i] == ' ', "level 0 is white");
    if (levels <= 70 && w > 1)
        CHECK(text[pc] == '$', "the darkest level is the ramp's end ('%c')", text[pc]);
    size_t m = 0;
    int32_t *back = malloc(sizeof(int32_t) * n);
    CHECK(nctmc_tokenizer_encode(tok, text, len, back, n, &m) == NCTMC_OK && m == n &&
              memcmp(back, tokens, sizeof(int32_t) * n) == 0,
          "%dx%d/%d: encode(decode(x)) == x: %s", w, h, levels,
          nctmc_tokenizer_last_error(tok));
    free(back);
    free(text);
    free(tokens);
    nctmc_tokenizer_free(tok);
}

/* Darker levels never take a lighter ramp character (the first character of
 * a pixel is its coarse place on the ramp). */
static void test_image_monotone(nctmc_context *ctx)
{
    static const char ramp[] =
        " .'`^\",:;Il!i><~+_-?][}{1)(|\\/tfjrxnuvczXYUJCLQ0OZmwqpdbkhao*#MW&8%B@$";
    const int32_t levels_list[] = {2, 16, 70, 71, 256, 4901, 65536};
    for (size_t k = 0; k < sizeof levels_list / sizeof levels_list[0]; k++) {
        int32_t levels = levels_list[k];
        nctmc_tokenizer *tok = NULL;
        nctmc_tokenizer_create_image(ctx, 1, 1, levels, &tok);
        if (!tok)
            continue;
        int prev = -1, ok = 1, distinct_first = 0;
        for (int32_t lv = 0; lv < levels; lv++) {
            char text[8];
            size_t len;
            nctmc_tokenizer_decode(tok, &lv, 1, text, sizeof text, &len);
            int pos = (int)(strchr(ramp, text[0]) - ramp);
            ok &= pos >= prev;
            distinct_first += pos != prev;
            prev = pos;
        }
        CHECK(ok && prev == 69, "levels %d: darkness is monotone and ends at '$'", levels);
        CHECK(distinct_first == (levels < 70 ? levels : 70),
              "levels %d: the ramp is used evenly (%d first characters)", levels,
              distinct_first);
        nctmc_tokenizer_free(tok);
    }
}

static void test_image_errors(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_image(ctx, 0, 4, 2, &tok) == NCTMC_ERR_INVALID_ARGUMENT,
          "width 0");
    CHECK(nctmc_tokenizer_create_image(ctx, 257, 256, 2, &tok) == NCTMC_ERR_INVALID_ARGUMENT,
          "more than 65536 pixels");
    CHECK(nctmc_tokenizer_create_image(ctx, 4, 4, 1, &tok) == NCTMC_ERR_INVALID_ARGUMENT,
          "one level");
    CHECK(nctmc_tokenizer_create_image(ctx, 4, 4, 65537, &tok) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_context_last_error(ctx), "levels"),
          "65537 levels: %s", nctmc_context_last_error(ctx));
    CHECK(nctmc_tokenizer_create_image(ctx, 4, 4, 2, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL out");
    CHECK(nctmc_tokenizer_create_image(ctx, 256, 256, 65536, &tok) == NCTMC_OK, "largest");
    nctmc_tokenizer_free(tok);

    nctmc_tokenizer_create_image(ctx, 3, 2, 2, &tok);
    if (!tok)
        return;
    size_t n;
    int32_t t[6];
    CHECK(nctmc_tokenizer_encode(tok, " $ \n$$$\n", 8, t, 6, &n) == NCTMC_OK && n == 6 &&
              t[0] == 0 && t[1] == 1 && t[3] == 1,
          "a 2-level picture");
    CHECK(nctmc_tokenizer_encode(tok, " $ \n$$$", 7, t, 6, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "offset 7"),
          "missing final newline: %s", nctmc_tokenizer_last_error(tok));
    CHECK(nctmc_tokenizer_encode(tok, " $\n", 3, t, 6, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "offset 2"),
          "short row: %s", nctmc_tokenizer_last_error(tok));
    CHECK(nctmc_tokenizer_encode(tok, " $  \n", 5, t, 6, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "offset 3"),
          "long row: %s", nctmc_tokenizer_last_error(tok));
    CHECK(nctmc_tokenizer_encode(tok, " @ \n", 4, t, 6, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "offset 1"),
          "'@' is not one of the two levels' characters: %s", nctmc_tokenizer_last_error(tok));
    CHECK(nctmc_tokenizer_encode(tok, " \xc3\xa9 \n", 5, t, 6, &n) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "non-ASCII");
    CHECK(nctmc_tokenizer_encode(tok, " $ \r\n", 5, t, 6, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "CR LF is not the form decode writes");
    int32_t five[5] = {0, 1, 0, 1, 0};
    CHECK(nctmc_tokenizer_decode(tok, five, 5, NULL, 0, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "5 tokens are not whole rows of 3");
    int32_t bad[3] = {0, 2, 0};
    CHECK(nctmc_tokenizer_decode(tok, bad, 3, NULL, 0, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_tokenizer_last_error(tok), "token 1"),
          "level 2 of 2: %s", nctmc_tokenizer_last_error(tok));
    nctmc_tokenizer_free(tok);

    /* multi-character pixels: a spelling past the end of a bucket is no level */
    nctmc_tokenizer_create_image(ctx, 1, 1, 256, &tok);
    if (!tok)
        return;
    CHECK(nctmc_tokenizer_encode(tok, "  \n", 3, t, 1, &n) == NCTMC_OK && t[0] == 0,
          "level 0 of 256");
    CHECK(nctmc_tokenizer_encode(tok, " $\n", 3, t, 1, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "offset 69 inside a bucket of 4 levels");
    CHECK(nctmc_tokenizer_encode(tok, " \n", 2, t, 1, &n) == NCTMC_ERR_INVALID_ARGUMENT,
          "a pixel cut short");
    nctmc_tokenizer_free(tok);
}

/* ---- files -------------------------------------------------------------------- */

static bool same_tokenizer(const nctmc_tokenizer *a, nctmc_tokenizer *b, const char *sample,
                           size_t n)
{
    if (nctmc_tokenizer_get_kind(a) != nctmc_tokenizer_get_kind(b) ||
        nctmc_tokenizer_vocab_size(a) != nctmc_tokenizer_vocab_size(b))
        return false;
    int32_t wa = 0, ha = 0, la = 0, wb = 0, hb = 0, lb = 0;
    nctmc_tokenizer_image_shape(a, &wa, &ha, &la);
    nctmc_tokenizer_image_shape(b, &wb, &hb, &lb);
    if (wa != wb || ha != hb || la != lb)
        return false;
    int32_t ta[64], tb[64];
    size_t na = 0, nb = 0;
    nctmc_status sa = nctmc_tokenizer_encode((nctmc_tokenizer *)a, sample, n, ta, 64, &na);
    nctmc_status sb = nctmc_tokenizer_encode(b, sample, n, tb, 64, &nb);
    return sa == sb && na == nb && memcmp(ta, tb, sizeof(int32_t) * na) == 0;
}

static void test_save_load(nctmc_context *ctx)
{
    char path[512];
    test_path(path, sizeof path, scratch, "tok.txt");
    nctmc_tokenizer *toks[3] = {NULL, NULL, NULL};
    nctmc_tokenizer_create_bytes(&toks[0]);
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &toks[1]);
    nctmc_tokenizer_create_image(ctx, 5, 3, 300, &toks[2]);
    const char *samples[3] = {"any\xff bytes", "caf\xc3\xa9 \xf0\x9f\x98\x80", NULL};
    for (int k = 0; k < 3; k++) {
        if (!toks[k])
            continue;
        CHECK(nctmc_tokenizer_save(toks[k], path) == NCTMC_OK, "save kind %d: %s", k,
              nctmc_tokenizer_last_error(toks[k]));
        nctmc_tokenizer *back = NULL;
        CHECK(nctmc_tokenizer_load(ctx, path, &back) == NCTMC_OK, "load kind %d: %s", k,
              nctmc_context_last_error(ctx));
        const char *s = samples[k] ? samples[k] : "";
        CHECK(back && same_tokenizer(toks[k], back, s, strlen(s)), "kind %d comes back", k);
        nctmc_tokenizer_free(back);
    }
    CHECK(test_count_entries(scratch) == 1, "no temporary files left beside the tokenizer");
    /* the chars file is plain text */
    static const char expected[] = "nctmc-tokenizer 1\nkind chars\nvocab_size 10\n"
                                   "alphabet 20 21 61 62 63 66 e9 20ac 4e2d 1f600\n";
    size_t n = 0;
    nctmc_tokenizer_save(toks[1], path);
    uint8_t *text = test_read_bytes(path, &n);
    CHECK(text && n == sizeof expected - 1 && memcmp(text, expected, n) == 0,
          "the file format is as documented");
    free(text);
    CHECK(nctmc_tokenizer_save(toks[0], "/nonexistent-dir/x/tok.txt") == NCTMC_ERR_IO,
          "save into a missing directory");
    CHECK(nctmc_tokenizer_save(toks[0], NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL path");
    for (int k = 0; k < 3; k++)
        nctmc_tokenizer_free(toks[k]);
}

/* Every prefix of a valid file is invalid (the last line is never
 * complete), and none crashes. */
static void test_truncations(nctmc_context *ctx)
{
    char path[512], cut[512];
    test_path(path, sizeof path, scratch, "whole.txt");
    test_path(cut, sizeof cut, scratch, "cut.txt");
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok);
    nctmc_tokenizer_save(tok, path);
    nctmc_tokenizer_free(tok);
    size_t n = 0;
    uint8_t *bytes = test_read_bytes(path, &n);
    int rejected = 0;
    for (size_t len = 0; bytes && len < n; len++) {
        test_write_bytes(cut, bytes, len);
        nctmc_tokenizer *t = NULL;
        nctmc_status st = nctmc_tokenizer_load(ctx, cut, &t);
        rejected += st == NCTMC_ERR_FORMAT && t == NULL;
        nctmc_tokenizer_free(t);
    }
    CHECK(bytes && rejected == (int)n, "%d of %zu truncations rejected", rejected, n);
    free(bytes);
    unlink(cut);
    unlink(path);
}

static void test_corrupt_files(nctmc_context *ctx)
{
    static const char *const bad[] = {
        "",
        "nctmc-tokenizer 2\nkind bytes\nvocab_size 256\n",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size 256",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size 255\n",
        "nctmc-tokenizer 1\nkind bpe\nvocab_size 256\n",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size 256\nvocab_size 256\n",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size 256\ncolour blue\n",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size 256\nwidth 4\n",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size  256\n",
        "nctmc-tokenizer 1\nkind bytes\nvocab_size 256 \n",
        "nctmc-tokenizer 1\nkind bytes\n\nvocab_size 256\n",
        "nctmc-tokenizer 1\r\nkind bytes\r\nvocab_size 256\r\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 3\nalphabet 61 62\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 62 61\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61 61\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61 6A\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61 062\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61  62\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61 62 \n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61 d800\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\nalphabet 61 110000\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 1\nalphabet 61x\n",
        "nctmc-tokenizer 1\nkind chars\nvocab_size 2\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 2\nheight 2\nlevels 5\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 0\nheight 2\nlevels 4\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 300\nheight 300\nlevels 4\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 2\nlevels 4\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 2\nheight 2\nlevels 4\nalphabet 61\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 1\nwidth 2\nheight 2\nlevels 1\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth +2\nheight 2\nlevels 4\n",
        "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 2\nheight 2\nlevels 04\n",
    };
    char path[512];
    test_path(path, sizeof path, scratch, "bad.txt");
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        test_write_bytes(path, bad[k], strlen(bad[k]));
        nctmc_tokenizer *t = NULL;
        nctmc_status st = nctmc_tokenizer_load(ctx, path, &t);
        CHECK(st == NCTMC_ERR_FORMAT && t == NULL && nctmc_context_last_error(ctx)[0],
              "bad file %zu rejected (status %d)", k, (int)st);
        nctmc_tokenizer_free(t);
    }
    /* a NUL inside; a file too large to be a tokenizer */
    test_write_bytes(path, "nctmc-tokenizer 1\nkind bytes\0\nvocab_size 256\n", 45);
    nctmc_tokenizer *t = NULL;
    CHECK(nctmc_tokenizer_load(ctx, path, &t) == NCTMC_ERR_FORMAT, "NUL byte");
    size_t big = (1u << 20) + 1;
    char *huge = malloc(big);
    memset(huge, 'a', big);
    test_write_bytes(path, huge, big);
    free(huge);
    CHECK(nctmc_tokenizer_load(ctx, path, &t) == NCTMC_ERR_FORMAT, "1 MiB of 'a'");
    unlink(path);
    CHECK(nctmc_tokenizer_load(ctx, path, &t) == NCTMC_ERR_IO && !t, "missing file is IO");
    CHECK(nctmc_tokenizer_load(ctx, scratch, &t) == NCTMC_ERR_IO, "a directory is IO");
    CHECK(nctmc_tokenizer_load(ctx, NULL, &t) == NCTMC_ERR_INVALID_ARGUMENT, "NULL path");
    CHECK(nctmc_tokenizer_load(NULL, scratch, &t) == NCTMC_ERR_IO, "NULL ctx is allowed");
    /* a valid hand-written image file */
    const char *good = "nctmc-tokenizer 1\nkind image\nvocab_size 4\nwidth 2\nheight 3\nlevels 4\n";
    test_write_bytes(path, good, strlen(good));
    CHECK(nctmc_tokenizer_load(ctx, path, &t) == NCTMC_OK && t &&
              nctmc_tokenizer_vocab_size(t) == 4,
          "hand-written image tokenizer");
    nctmc_tokenizer_free(t);
    unlink(path);
}

/* ---- the model's tokenizer --------------------------------------------------- */

static void test_model_tokenizer(nctmc_context *ctx)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 11;
    cfg.seq_len = 4;
    cfg.n_layers = 1;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.cond_dim = 4;
    cfg.process = NCTMC_PROCESS_MASKED;
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &cfg, &m) != NCTMC_OK)
        return;
    CHECK(nctmc_model_get_tokenizer(m) == NULL, "a new model has no tokenizer");
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok); /* 10 characters */
    CHECK(nctmc_model_set_tokenizer(m, tok) == NCTMC_OK, "10 data tokens + mask = S 11: %s",
          nctmc_model_last_error(m));
    nctmc_tokenizer_free(tok);
    const nctmc_tokenizer *own = nctmc_model_get_tokenizer(m);
    CHECK(own && nctmc_tokenizer_vocab_size(own) == 10, "the model keeps its own copy");
    nctmc_tokenizer *bytes = NULL;
    nctmc_tokenizer_create_bytes(&bytes);
    CHECK(nctmc_model_set_tokenizer(m, bytes) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_model_last_error(m), "256"),
          "256 tokens do not fit S = 11: %s", nctmc_model_last_error(m));
    CHECK(nctmc_model_get_tokenizer(m) == own, "a refused tokenizer changes nothing");
    CHECK(nctmc_model_set_tokenizer(m, NULL) == NCTMC_OK && !nctmc_model_get_tokenizer(m),
          "detach");
    CHECK(nctmc_model_set_tokenizer(NULL, bytes) == NCTMC_ERR_INVALID_ARGUMENT, "NULL model");
    /* an image is one sequence: 10 grey levels fit S = 11, but only a shape
     * of seq_len = 4 pixels does (a 16-pixel picture of a 4-token sequence
     * made `nctmc sample` read past its tokens) */
    nctmc_tokenizer *img = NULL;
    nctmc_tokenizer_create_image(ctx, 4, 4, 10, &img);
    CHECK(nctmc_model_set_tokenizer(m, img) == NCTMC_ERR_INVALID_ARGUMENT &&
              message_has(nctmc_model_last_error(m), "4 x 4"),
          "a 4 x 4 image on 4-token sequences: %s", nctmc_model_last_error(m));
    nctmc_tokenizer_free(img);
    nctmc_tokenizer_create_image(ctx, 1, 2, 10, &img);
    CHECK(nctmc_model_set_tokenizer(m, img) == NCTMC_ERR_INVALID_ARGUMENT,
          "a 1 x 2 image on 4-token sequences");
    nctmc_tokenizer_free(img);
    nctmc_tokenizer_create_image(ctx, 2, 2, 10, &img);
    CHECK(nctmc_model_set_tokenizer(m, img) == NCTMC_OK, "a 2 x 2 image on 4-token sequences: %s",
          nctmc_model_last_error(m));
    nctmc_tokenizer_free(img);
    nctmc_model_free(m);
    /* uniform: the tokenizer's vocabulary is S itself */
    cfg.process = NCTMC_PROCESS_UNIFORM;
    cfg.vocab_size = 256;
    if (nctmc_model_create(ctx, &cfg, &m) == NCTMC_OK) {
        CHECK(nctmc_model_set_tokenizer(m, bytes) == NCTMC_OK, "bytes on a uniform S = 256");
        nctmc_model_free(m); /* frees the model's copy (ASan checks) */
    }
    nctmc_tokenizer_free(bytes);
    CHECK(nctmc_model_get_tokenizer(NULL) == NULL, "NULL model has none");
}

static void test_null_handles(void)
{
    CHECK(nctmc_tokenizer_get_kind(NULL) == NCTMC_TOKENIZER_BYTES, "kind of NULL");
    CHECK(nctmc_tokenizer_vocab_size(NULL) == 0, "vocab of NULL");
    CHECK(strcmp(nctmc_tokenizer_last_error(NULL), "") == 0, "error of NULL");
    CHECK(nctmc_tokenizer_image_shape(NULL, NULL, NULL, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "shape of NULL");
    CHECK(nctmc_tokenizer_save(NULL, "x") == NCTMC_ERR_INVALID_ARGUMENT, "save NULL");
    nctmc_tokenizer_free(NULL);
}

int main(void)
{
    if (!test_make_temp_dir(scratch, sizeof scratch)) {
        fprintf(stderr, "cannot create a scratch directory\n");
        return 1;
    }
    log_capture logs = {0, ""};
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    cp.log_fn = capture_log;
    cp.log_user_data = &logs;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    test_rng rng = test_rng_seed(11);
    test_bytes();
    test_chars_round_trip(ctx);
    test_chars_unknown(ctx);
    test_invalid_utf8(ctx, &logs);
    test_alphabet_limit(ctx);
    test_buffer_protocol(ctx);
    const int32_t shapes[][3] = {{1, 1, 2},  {3, 2, 2},   {4, 4, 16},   {7, 3, 70},
                                 {5, 2, 71}, {6, 6, 256}, {2, 3, 4900}, {2, 2, 4901},
                                 {3, 1, 65536}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        image_round_trip(ctx, shapes[k][0], shapes[k][1], shapes[k][2], &rng);
    test_image_monotone(ctx);
    test_image_errors(ctx);
    test_save_load(ctx);
    test_truncations(ctx);
    test_corrupt_files(ctx);
    test_model_tokenizer(ctx);
    test_null_handles();
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("tokenizer");
}
