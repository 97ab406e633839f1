/*
 * test_bpe_internal.c — the byte-level BPE tokenizer's internals
 * (lib/text/tokenizer_bpe.c): the GPT-2 pre-tokenizer on cases checked
 * against Hugging Face `tokenizers`, the byte-to-unicode map (and
 * bpe_json.h's copy of it), token byte offsets, the added-token matcher
 * (lib/text/bpe_added.c: the same splits as a brute-force leftmost-longest
 * search, and automaton steps linear in the text for a hostile list of
 * 2000 nested added tokens). Split out of
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

/* ---- the added-token matcher ------------------------------------------------- */

/* A model of the 256 bytes (id = byte), no merges, and n_added added tokens
 * (ids 256 on) whose bytes are added[k][0 .. len[k]). */
static bpe_model *model_with_added(const uint8_t *const *added, const uint32_t *len,
                                   int32_t n_added)
{
    int32_t n = 256 + n_added;
    size_t total = 256;
    for (int32_t k = 0; k < n_added; k++)
        total += len[k];
    uint32_t *offsets = malloc(sizeof *offsets * (size_t)(n + 1));
    uint8_t *bytes = malloc(total), *special = calloc((size_t)n, 1);
    uint32_t at = 0;
    for (int32_t id = 0; id < n; id++) {
        offsets[id] = at;
        if (id < 256) {
            bytes[at++] = (uint8_t)id;
            continue;
        }
        memcpy(bytes + at, added[id - 256], len[id - 256]);
        at += len[id - 256];
        special[id] = 1;
    }
    offsets[n] = at;
    bpe_parts parts = {n, offsets, bytes, special, 0, NULL};
    bpe_model *m = NULL;
    char err[256];
    nctmc_status st = bpe_model_build(&(nctmc_allocator){0}, &parts, &m, err, sizeof err);
    CHECK(st == NCTMC_OK, "build a model with %d added tokens: %s", n_added, err);
    free(offsets);
    free(bytes);
    free(special);
    return st == NCTMC_OK ? m : NULL;
}

/* The added tokens' (offset, id) in text as the brute-force search finds
 * them: at each position from the left, the longest added token there (the
 * lowest id of equal ones), then on past it. Returns how many. */
static size_t brute_force(const uint8_t *const *added, const uint32_t *len, int32_t n_added,
                          const uint8_t *text, size_t n, size_t *where, int32_t *ids)
{
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        int32_t best = -1;
        for (int32_t k = 0; k < n_added; k++)
            if (len[k] <= n - i && memcmp(text + i, added[k], len[k]) == 0 &&
                (best < 0 || len[k] > len[best]))
                best = k;
        if (best < 0) {
            i++;
            continue;
        }
        where[count] = i;
        ids[count++] = 256 + best;
        i += len[best];
    }
    return count;
}

/* Random added tokens over a 3-letter alphabet (nested, overlapping, some
 * equal) on random text: bpe_encode splits where the brute force does. */
static void test_added_matches_brute_force(void)
{
    uint32_t seed = 12345;
    int bad = 0;
    for (int round = 0; round < 300 && !bad; round++) {
        uint8_t store[12][8];
        const uint8_t *added[12];
        uint32_t len[12];
        seed = seed * 1664525u + 1013904223u;
        int32_t n_added = 1 + (int32_t)(seed >> 28) % 12;
        for (int32_t k = 0; k < n_added; k++) {
            seed = seed * 1664525u + 1013904223u;
            len[k] = 1 + (seed >> 24) % 7;
            for (uint32_t b = 0; b < len[k]; b++) {
                seed = seed * 1664525u + 1013904223u;
                store[k][b] = (uint8_t)('a' + (seed >> 27) % 3);
            }
            added[k] = store[k];
        }
        uint8_t text[200];
        for (size_t i = 0; i < sizeof text; i++) {
            seed = seed * 1664525u + 1013904223u;
            text[i] = (uint8_t)('a' + (seed >> 27) % 3);
        }
        bpe_model *m = model_with_added(added, len, n_added);
        if (!m)
            return;
        int32_t ids[200], want_ids[200];
        size_t starts[200], want_where[200], count = 0;
        char err[256];
        nctmc_status st = bpe_encode(m, text, sizeof text, ids, starts, &count, err, sizeof err);
        size_t want = brute_force(added, len, n_added, text, sizeof text, want_where, want_ids);
        size_t got = 0;
        for (size_t k = 0; st == NCTMC_OK && k < count && !bad; k++) {
            if (ids[k] < 256)
                continue;
            bad = got >= want || starts[k] != want_where[got] || ids[k] != want_ids[got];
            got++;
        }
        bad |= st != NCTMC_OK || got != want;
        bpe_model_free(m);
    }
    CHECK(!bad, "the added tokens are split as the brute-force leftmost-longest search does");
}

/* 2000 nested added tokens ("x", "xy", "xyy", ...) on 1 MB of 'x' (every
 * position starts the first byte of all of them) and of the tokens'
 * prefixes: the automaton takes at most 3 steps per byte of text. The old
 * scan tried all 2000 tokens at every position. */
static void test_added_linear(void)
{
    enum { N_ADDED = 2000, TEXT = 1 << 20 };
    uint8_t *base = malloc(N_ADDED);
    const uint8_t **added = malloc(sizeof *added * N_ADDED);
    uint32_t *len = malloc(sizeof *len * N_ADDED);
    base[0] = 'x';
    memset(base + 1, 'y', N_ADDED - 1);
    for (int k = 0; k < N_ADDED; k++) {
        added[k] = base;
        len[k] = (uint32_t)k + 1;
    }
    bpe_model *m = model_with_added(added, len, N_ADDED);
    uint8_t *text = malloc(TEXT);
    int32_t *ids = malloc(sizeof *ids * TEXT);
    for (int kind = 0; m && kind < 2; kind++) {
        for (size_t i = 0; i < TEXT; i++) /* kind 1: the longest token less its last byte */
            text[i] = kind == 0 ? 'x' : base[i % (N_ADDED - 1)];
        size_t count = 0;
        char err[256];
        m->added_steps = 0;
        nctmc_status st = bpe_encode(m, text, TEXT, ids, NULL, &count, err, sizeof err);
        CHECK(st == NCTMC_OK && count > 0, "encode 1 MB against 2000 nested added tokens: %s",
              st == NCTMC_OK ? "" : err);
        CHECK(m->added_steps <= 3ull * TEXT,
              "text %d: %llu automaton steps for %d bytes (at most 3 per byte)", kind,
              (unsigned long long)m->added_steps, TEXT);
        CHECK(count == (kind == 0 ? (size_t)TEXT : (TEXT + N_ADDED - 2) / (N_ADDED - 1)),
              "text %d: %zu tokens, each the longest added token there", kind, count);
    }
    bpe_model_free(m);
    free(text);
    free(ids);
    free(base);
    free(added);
    free(len);
}

/* More added-token bytes than the automaton may hold: refused at load. */
static void test_added_too_many_bytes(void)
{
    enum { N_ADDED = 1100 };
    uint8_t *base = malloc(BPE_MAX_TOKEN_BYTES);
    memset(base, 'q', BPE_MAX_TOKEN_BYTES);
    const uint8_t **added = malloc(sizeof *added * N_ADDED);
    uint32_t *len = malloc(sizeof *len * N_ADDED);
    for (int k = 0; k < N_ADDED; k++) {
        added[k] = base;
        len[k] = BPE_MAX_TOKEN_BYTES;
    }
    int32_t n = 256 + N_ADDED;
    uint32_t *offsets = malloc(sizeof *offsets * (size_t)(n + 1));
    uint8_t *bytes = malloc(256 + (size_t)N_ADDED * BPE_MAX_TOKEN_BYTES);
    uint8_t *special = calloc((size_t)n, 1);
    uint32_t at = 0;
    for (int32_t id = 0; id < n; id++) {
        offsets[id] = at;
        if (id < 256) {
            bytes[at++] = (uint8_t)id;
        } else {
            memcpy(bytes + at, added[id - 256], len[id - 256]);
            at += len[id - 256];
            special[id] = 1;
        }
    }
    offsets[n] = at;
    bpe_parts parts = {n, offsets, bytes, special, 0, NULL};
    bpe_model *m = NULL;
    char err[256] = "";
    nctmc_status st = bpe_model_build(&(nctmc_allocator){0}, &parts, &m, err, sizeof err);
    CHECK(st == NCTMC_ERR_FORMAT && !m && strstr(err, "4505600 bytes"),
          "1100 added tokens of 4096 bytes are refused with the figure: %s", err);
    bpe_model_free(m);
    free(offsets);
    free(bytes);
    free(special);
    free(base);
    free(added);
    free(len);
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
    test_added_matches_brute_force();
    test_added_linear();
    test_added_too_many_bytes();
    nctmc_tokenizer *tok = load_small();
    if (tok)
        test_offsets(tok);
    nctmc_tokenizer_free(tok);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("bpe_internal");
}
