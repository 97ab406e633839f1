/*
 * test_bpe_internal.c — the byte-level BPE tokenizer's internals
 * (lib/text/tokenizer_bpe.c): the GPT-2 pre-tokenizer on cases checked
 * against Hugging Face `tokenizers`, the byte-to-unicode map (and
 * bpe_json.h's copy of it), token byte offsets. Split out of
 * test_tokenizer_bpe.c, which tests the tokenizer through the public API.
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
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"

static char scratch[256];
static nctmc_context *ctx;

/* A path in the scratch directory; two rotating buffers, so that a call may
 * take two paths. */
static const char *path_of(const char *name)
{
    static char buf[2][512];
    static int next;
    next ^= 1;
    return test_path(buf[next], sizeof buf[next], scratch, name);
}

/* ---- the pre-tokenizer --------------------------------------------------- */

/* The pre-tokens of text, joined with '|' (text must not contain '|'). */
static void pretokens(const char *text, char *out, size_t size)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t n = strlen(text), at = 0, k = 0;
    while (at < n && k + 8 < size) {
        size_t end = bpe_pretoken_end(s, n, at);
        if (end <= at || end > n) {
            snprintf(out, size, "(no progress at %zu)", at);
            return;
        }
        if (at > 0)
            out[k++] = '|';
        for (; at < end && k + 1 < size; at++)
            out[k++] = text[at];
    }
    out[k] = '\0';
}

static void test_pretokenizer(void)
{
    /* expected splits from tokenizers' ByteLevel pre_tokenize_str() */
    static const char *const cases[][2] = {
        {"Hello world", "Hello| world"},
        {"I'm here's", "I|'m| here|'s"},
        {"a  b", "a| | b"},
        {"a \n b", "a| \n| b"},
        {"x   ", "x|   "},
        {"12abc", "12|abc"},
        {" 123", " 123"},
        {"!!'s", "!!'|s"},
        {"don't", "don|'t"},
        {"caf\xc3\xa9 au", "caf\xc3\xa9| au"},
        {"a\xc2\xa0" "b", "a|\xc2\xa0|b"},
        {"  \t\n", "  \t\n"},
        {"'S 'll'", "'|S| '|ll|'"},
        {" ?! x", " ?!| x"},
        {"a1", "a|1"},
        {"\xe3\x80\x80\xe3\x80\x80x", "\xe3\x80\x80|\xe3\x80\x80|x"},
        {"ab  ", "ab|  "},
        /* invalid UTF-8: each byte an "other" character */
        {"a\xff\xfe" "b", "a|\xff\xfe|b"},
        {"x \xe2\x82", "x| \xe2\x82"},
        {"\xed\xa0\x80z", "\xed\xa0\x80|z"},
    };
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pretokens(cases[i][0], got, sizeof got);
        CHECK(strcmp(got, cases[i][1]) == 0, "case %zu: got \"%s\" want \"%s\"", i, got,
              cases[i][1]);
    }
    /* the map: printable bytes stand for themselves, space is U+0120 'Ġ' */
    CHECK(bpe_byte_to_unicode('a') == 'a' && bpe_byte_to_unicode(' ') == 0x120 &&
              bpe_byte_to_unicode(0) == 0x100 && bpe_byte_to_unicode(0xAD) == 0x143,
          "byte-to-unicode: %x %x", bpe_byte_to_unicode(' '), bpe_byte_to_unicode(0xAD));
    int bijective = 1;
    for (int b = 0; b < 256; b++)
        bijective &= bpe_unicode_to_byte(bpe_byte_to_unicode((uint8_t)b)) == b;
    CHECK(bijective && bpe_unicode_to_byte(0x200) == -1 && bpe_unicode_to_byte(' ') == -1,
          "the map is a bijection onto its 256 symbols");
}

/* bpe_json.h spells its files with its own copy of the map: the same. */
static void test_map_copy(void)
{
    int same = 1;
    for (int b = 0; b < 256; b++)
        same &= test_byte_to_unicode((uint8_t)b) == bpe_byte_to_unicode((uint8_t)b);
    CHECK(same, "bpe_json.h's byte-to-unicode map is the library's");
}

static nctmc_tokenizer *load_small(void)
{
    write_json(path_of("small.json"), "", PRE_OK, NULL);
    nctmc_tokenizer *tok = NULL;
    nctmc_status st = nctmc_tokenizer_load_hf_json(ctx, path_of("small.json"), &tok);
    CHECK(st == NCTMC_OK, "load the small tokenizer.json: %s", nctmc_context_last_error(ctx));
    return tok;
}

/* Token byte offsets (the infilling groundwork): contiguous, covering all. */
static void test_offsets(nctmc_tokenizer *tok)
{
    const char text[] = "It's the <|endoftext|>aaaaa  \xf0\x9f\x98\x80 caf\xc3\xa9\xff!";
    size_t n = sizeof text - 1, count = 0, starts[64];
    int32_t ids[64];
    char err[256];
    nctmc_status st =
        bpe_encode(tok->bpe, (const uint8_t *)text, n, ids, starts, &count, err, sizeof err);
    bool contiguous = st == NCTMC_OK && count > 0 && starts[0] == 0;
    for (size_t k = 0; contiguous && k < count; k++) {
        size_t len;
        const uint8_t *b = bpe_token_bytes(tok->bpe, ids[k], &len);
        size_t next = k + 1 < count ? starts[k + 1] : n;
        contiguous = starts[k] + len == next && memcmp(text + starts[k], b, len) == 0;
    }
    CHECK(contiguous, "each token's offset and bytes tile the text (%zu tokens)", count);
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
    cp.n_threads = 1;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    test_pretokenizer();
    test_map_copy();
    nctmc_tokenizer *tok = load_small();
    if (tok)
        test_offsets(tok);
    nctmc_tokenizer_free(tok);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("bpe_internal");
}
