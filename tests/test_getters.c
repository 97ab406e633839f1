/*
 * test_getters.c — what bindings need without the config struct (issue 8
 * §4):
 *
 *  1. nctmc_model_seq_len / vocab_size / mask_token / n_classes / process
 *     agree with nctmc_model_get_config() for each process, and answer NULL.
 *  2. nctmc_tokenizer_set_mask_placeholder(): the token equal to the
 *     vocabulary's size decodes as the placeholder (bytes, chars, image;
 *     measuring and writing agree), NULL restores the error, bad
 *     placeholders are refused and leave the old one, clones and a model's
 *     copy carry it, a saved tokenizer does not.
 *  3. The point of it: the tokens a masked model's sampling callback sees
 *     mid-run decode, with one placeholder per mask token.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "tiny_model.h"

static char tmp_dir[512];

/* ---- 1 ---------------------------------------------------------------------- */

static void check_getters(nctmc_context *ctx, int32_t process, int32_t n_classes)
{
    nctmc_model_config c = tiny_model_config(process, n_classes);
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model: %s",
          nctmc_context_last_error(ctx));
    if (!m)
        return;
    nctmc_model_config got;
    nctmc_model_config_init(&got);
    CHECK(nctmc_model_get_config(m, &got) == NCTMC_OK, "get_config");
    CHECK(nctmc_model_seq_len(m) == got.seq_len && got.seq_len == TINY_L, "seq_len %d",
          nctmc_model_seq_len(m));
    CHECK(nctmc_model_vocab_size(m) == got.vocab_size && got.vocab_size == TINY_S,
          "vocab_size %d", nctmc_model_vocab_size(m));
    CHECK(nctmc_model_n_classes(m) == n_classes, "n_classes %d, expected %d",
          nctmc_model_n_classes(m), n_classes);
    CHECK(nctmc_model_process(m) == process && nctmc_model_process(m) == (int32_t)got.process,
          "process %d, expected %d", nctmc_model_process(m), process);
    int32_t want_mask = process == NCTMC_PROCESS_UNIFORM ? -1 : TINY_S - 1;
    CHECK(nctmc_model_mask_token(m) == want_mask, "mask token %d, expected %d (process %d)",
          nctmc_model_mask_token(m), want_mask, process);
    nctmc_model_free(m);
}

static void test_model_getters(nctmc_context *ctx)
{
    check_getters(ctx, NCTMC_PROCESS_UNIFORM, 0);
    check_getters(ctx, NCTMC_PROCESS_MASKED, 0);
    check_getters(ctx, NCTMC_PROCESS_MIXTURE, 3);
    CHECK(nctmc_model_seq_len(NULL) == 0 && nctmc_model_vocab_size(NULL) == 0 &&
              nctmc_model_mask_token(NULL) == -1 && nctmc_model_n_classes(NULL) == 0 &&
              nctmc_model_process(NULL) == -1,
          "getters of NULL");
}

/* ---- 2 ---------------------------------------------------------------------- */

/* Decodes n tokens, measuring first; the text (or NULL on failure) in out. */
static nctmc_status decode(nctmc_tokenizer *tok, const int32_t *tokens, size_t n, char *out,
                           size_t capacity)
{
    size_t need = 0, got = 0;
    nctmc_status st = nctmc_tokenizer_decode(tok, tokens, n, NULL, 0, &need);
    if (st != NCTMC_OK)
        return st;
    st = nctmc_tokenizer_decode(tok, tokens, n, out, capacity, &got);
    CHECK(st != NCTMC_OK || (got == need && strlen(out) == need),
          "measured %zu bytes, wrote %zu", need, got);
    return st;
}

static void test_bytes_placeholder(void)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_bytes(&tok);
    int32_t t[4] = {'A', 256, 'B', 256};
    char text[64];
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "the mask token decoded without a placeholder");
    CHECK(strstr(nctmc_tokenizer_last_error(tok), "nctmc_tokenizer_set_mask_placeholder"),
          "the error does not say how to render the mask token: \"%s\"",
          nctmc_tokenizer_last_error(tok));
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "_") == NCTMC_OK, "set \"_\"");
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_OK && strcmp(text, "A_B_") == 0,
          "decoded \"%s\"", text);
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "<mask>") == NCTMC_OK, "set \"<mask>\"");
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_OK &&
              strcmp(text, "A<mask>B<mask>") == 0,
          "decoded \"%s\"", text);
    size_t n = 0;
    CHECK(nctmc_tokenizer_decode(tok, t, 4, text, 14, &n) == NCTMC_ERR_INVALID_ARGUMENT &&
              n == 14,
          "a buffer one byte short was accepted (n = %zu)", n);
    int32_t beyond[2] = {'A', 257};
    CHECK(decode(tok, beyond, 2, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "token 257 decoded");
    int32_t negative[1] = {-1};
    CHECK(decode(tok, negative, 1, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "token -1 decoded");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "") == NCTMC_OK, "set \"\"");
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_OK && strcmp(text, "AB") == 0,
          "decoded \"%s\"", text);

    /* refused placeholders keep the old one */
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "?") == NCTMC_OK, "set \"?\"");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "\xff") == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_tokenizer_last_error(tok), "UTF-8"),
          "invalid UTF-8 accepted");
    char long_text[300];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, long_text) == NCTMC_ERR_INVALID_ARGUMENT,
          "a 299-byte placeholder accepted");
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_OK && strcmp(text, "A?B?") == 0,
          "after refusals decoded \"%s\"", text);

    /* clones carry it; NULL restores the error */
    nctmc_tokenizer *copy = NULL;
    CHECK(nctmc_tokenizer_clone(tok, &copy) == NCTMC_OK, "clone");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, NULL) == NCTMC_OK, "set NULL");
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "the mask token decoded after the placeholder was removed");
    CHECK(copy && decode(copy, t, 4, text, sizeof text) == NCTMC_OK &&
              strcmp(text, "A?B?") == 0,
          "the clone decoded \"%s\"", text);
    CHECK(nctmc_tokenizer_set_mask_placeholder(NULL, "x") == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL tokenizer");
    nctmc_tokenizer_free(copy);
    nctmc_tokenizer_free(tok);
}

static void test_chars_placeholder(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_chars(ctx, "ab\xc3\xa9", 4, &tok) == NCTMC_OK, "chars");
    if (!tok)
        return;
    int32_t t[4] = {0, 3, 2, 3};   /* a, mask, é, mask */
    char text[64];
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "the mask token decoded without a placeholder");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "\xe2\x96\x92") == NCTMC_OK, "set U+2592");
    CHECK(decode(tok, t, 4, text, sizeof text) == NCTMC_OK &&
              strcmp(text, "a\xe2\x96\x92\xc3\xa9\xe2\x96\x92") == 0,
          "decoded \"%s\"", text);
    int32_t beyond[1] = {4};
    CHECK(decode(tok, beyond, 1, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "token 4 of a 3-character alphabet decoded");

    /* the copy a model keeps carries the placeholder; a saved file does not */
    nctmc_model_config c = tiny_model_config(NCTMC_PROCESS_MASKED, 0);
    c.vocab_size = 4;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model: %s",
          nctmc_context_last_error(ctx));
    CHECK(m && nctmc_model_set_tokenizer(m, tok) == NCTMC_OK, "set_tokenizer: %s",
          nctmc_model_last_error(m));
    nctmc_tokenizer *mine = NULL;
    CHECK(m && nctmc_tokenizer_clone(nctmc_model_get_tokenizer(m), &mine) == NCTMC_OK,
          "clone of the model's tokenizer");
    CHECK(mine && decode(mine, t, 4, text, sizeof text) == NCTMC_OK, "the model's copy: %s",
          mine ? nctmc_tokenizer_last_error(mine) : "");
    char path[600];
    test_path(path, sizeof path, tmp_dir, "chars.tok");
    nctmc_tokenizer *loaded = NULL;
    CHECK(nctmc_tokenizer_save(tok, path) == NCTMC_OK &&
              nctmc_tokenizer_load(ctx, path, &loaded) == NCTMC_OK,
          "save and load: %s", nctmc_tokenizer_last_error(tok));
    CHECK(loaded && decode(loaded, t, 4, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "a loaded tokenizer has a placeholder");
    nctmc_tokenizer_free(loaded);
    nctmc_tokenizer_free(mine);
    nctmc_model_free(m);
    nctmc_tokenizer_free(tok);
}

static void test_image_placeholder(nctmc_context *ctx)
{
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_image(ctx, 3, 2, 4, &tok) == NCTMC_OK, "image 3x2x4");
    if (!tok)
        return;
    int32_t t[6] = {0, 4, 3, 4, 4, 0};
    char text[64];
    CHECK(decode(tok, t, 6, text, sizeof text) == NCTMC_ERR_INVALID_ARGUMENT,
          "the mask token decoded without a placeholder");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "ab") == NCTMC_ERR_INVALID_ARGUMENT,
          "two characters accepted for a pixel");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "") == NCTMC_ERR_INVALID_ARGUMENT,
          "no character accepted for a pixel");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "\n") == NCTMC_ERR_INVALID_ARGUMENT,
          "a newline accepted for a pixel");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "?") == NCTMC_OK, "set \"?\"");
    /* level 0 is ' ', level 3 of 4 is the ramp's last character '$' */
    CHECK(decode(tok, t, 6, text, sizeof text) == NCTMC_OK && strcmp(text, " ?$\n?? \n") == 0,
          "decoded \"%s\"", text);
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "\xc2\xb7") == NCTMC_OK, "set U+00B7");
    CHECK(decode(tok, t, 6, text, sizeof text) == NCTMC_OK &&
              strcmp(text, " \xc2\xb7$\n\xc2\xb7\xc2\xb7 \n") == 0,
          "decoded \"%s\"", text);
    nctmc_tokenizer_free(tok);

    /* 100 levels: two characters a pixel, a masked pixel is two placeholders */
    CHECK(nctmc_tokenizer_create_image(ctx, 2, 1, 100, &tok) == NCTMC_OK, "image 2x1x100");
    int32_t wide[2] = {100, 0};
    CHECK(tok && nctmc_tokenizer_set_mask_placeholder(tok, "?") == NCTMC_OK, "set \"?\"");
    CHECK(tok && decode(tok, wide, 2, text, sizeof text) == NCTMC_OK &&
              strncmp(text, "??", 2) == 0 && strlen(text) == 5 && text[4] == '\n',
          "decoded \"%s\"", text);
    nctmc_tokenizer_free(tok);
}

/* ---- 3 ---------------------------------------------------------------------- */

typedef struct capture {
    int32_t tokens[TINY_BATCH * TINY_L];
    bool done;
} capture;

static int32_t capture_first(int32_t step, int32_t n_steps, const int32_t *tokens,
                             int32_t batch, int32_t length, void *user_data)
{
    (void)n_steps;
    capture *c = user_data;
    if (step == 1) {
        memcpy(c->tokens, tokens, (size_t)batch * (size_t)length * sizeof(int32_t));
        c->done = true;
    }
    return 1;
}

static void test_partial_sample_decodes(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_MASKED, 0);
    nctmc_sampler *s = m ? tiny_sampler(m, NULL) : NULL;
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_chars(ctx, "abcdefghijk", 11, &tok) == NCTMC_OK,
          "an 11-character alphabet");
    if (!s || !tok) {
        nctmc_sampler_free(s);
        nctmc_model_free(m);
        nctmc_tokenizer_free(tok);
        return;
    }
    capture c = {{0}, false};
    int32_t out[TINY_BATCH * TINY_L];
    nctmc_sample_params p = tiny_sample_params(out);
    p.n_steps = 16;
    p.callback = capture_first;
    p.user_data = &c;
    CHECK(nctmc_sample(s, &p) == NCTMC_OK, "sample: %s", nctmc_sampler_last_error(s));
    int32_t mask = nctmc_model_mask_token(m);
    int n_mask = 0;
    for (int i = 0; i < TINY_BATCH * TINY_L; i++)
        n_mask += c.tokens[i] == mask;
    CHECK(c.done && n_mask > 0, "step 1 of 16 left no mask token (%d)", n_mask);
    CHECK(nctmc_tokenizer_vocab_size(tok) == mask, "the tokenizer's vocabulary is the mask");
    CHECK(nctmc_tokenizer_set_mask_placeholder(tok, "_") == NCTMC_OK, "set \"_\"");
    char text[TINY_BATCH * TINY_L + 1];
    CHECK(decode(tok, c.tokens, TINY_BATCH * TINY_L, text, sizeof text) == NCTMC_OK,
          "the partial sample does not decode: %s", nctmc_tokenizer_last_error(tok));
    int n_placeholders = 0;
    for (const char *q = text; *q; q++)
        n_placeholders += *q == '_';
    CHECK(n_placeholders == n_mask, "%d placeholders for %d mask tokens", n_placeholders,
          n_mask);
    nctmc_tokenizer_free(tok);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

int main(void)
{
    if (!test_make_temp_dir(tmp_dir, sizeof tmp_dir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    nctmc_context *ctx = tiny_context();
    if (ctx) {
        test_model_getters(ctx);
        test_bytes_placeholder();
        test_chars_placeholder(ctx);
        test_image_placeholder(ctx);
        test_partial_sample_decodes(ctx);
    }
    nctmc_context_free(ctx);
    test_remove_dir(tmp_dir);
    return test_finish("getters");
}
