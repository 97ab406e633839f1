/*
 * fuzz_added_tokens.c — encoding against hostile added tokens (issue 37,
 * item 1): each input builds a Hugging Face tokenizer.json whose
 * added_tokens are thousands of strings derived from a short fuzzer-chosen
 * seed — prefixes of each other, suffixes of each other, overlapping
 * windows, near misses that fail on their last character, or a mix — and
 * encodes a long text repeated from a fuzzer-chosen pattern over the same
 * small alphabet, so that almost every position starts many partial
 * matches. Matching added tokens naively costs O(text × tokens × token
 * length) on such inputs (89 s per MB in the issue); the library's
 * automaton (lib/text/bpe_added.h) keeps it linear.
 *
 * What it checks: the tokenizer loads, or is refused with a message; a
 * loaded one encodes the text into added tokens that are the text where
 * they stand and bytes between them, the first-listed longest added token
 * wherever one starts (checked against a naive scan at the first
 * positions), and decode(encode(text)) gives the text back. What bounds the time: the
 * libFuzzer build runs with -timeout (tests/meson.build), a per-input limit
 * far above a linear encode and far below a quadratic one
 * (docs/dev/testing.md has the measurements).
 *
 * Built two ways, as tests/fuzz_api.c is: a libFuzzer target
 * (FUZZ_LIBFUZZER), and an ordinary test whose main() feeds it seeded
 * inputs. Public API only.
 *
 * An input: [generator][count hi][count lo][seed length][seed ...][text pattern ...]
 * Missing bytes read as 0, and 0 picks the hardest case (2000 nested
 * prefixes of "aaa..." against "aaa...": the input).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"

/* Text encoded per input, and the most added-token bytes written (the
 * loader refuses over 2 MiB). */
#define TEXT_BYTES ((size_t)512 << 10)
#define MAX_TOKEN_BYTES ((size_t)500000)
#define MAX_TOKENS 4000
#define MAX_TOKEN_CHARS 2000
#define MAX_TOKEN_LEN 4096 /* bytes: the loader's limit for one token */
#define MAX_SEED 32

/* The alphabet every seed and pattern byte maps to: ASCII, the pieces of
 * GPT-2's <|endoftext|>, a two- and a four-byte character. */
static const char *const alphabet[8] = {"a", "b", "<", "|", ">", " ", "\xc3\xa9",
                                        "\xf0\x9f\x98\x80"};

typedef struct byte_reader {
    const uint8_t *data;
    size_t size, at;
} byte_reader;

static uint8_t next_u8(byte_reader *r)
{
    return r->at < r->size ? r->data[r->at++] : 0u;
}

/* A growing buffer; out of memory ends the process (a test, not the library). */
typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "fuzz_added_tokens: out of memory\n");
            abort();
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* The i-th character (0-based) of seed repeated forever. */
static const char *seed_char(const uint8_t *seed, size_t n_seed, size_t i)
{
    return alphabet[seed[i % n_seed] & 7];
}

/* GPT-2's byte symbols: the code point standing for byte b. */
static unsigned byte_symbol(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    unsigned n = 0;
    for (unsigned k = 0; k < b; k++)
        n += !((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174);
    return 256 + n;
}

/* Added token k's characters [from, to) of the seed's repetition, and for
 * a near miss one more character that differs from the seed's next. */
typedef struct token_shape {
    size_t from, to;
    int near_miss;
} token_shape;

static token_shape shape_of(int generator, size_t k, size_t n_tokens, size_t width,
                            uint64_t *rng)
{
    token_shape t = {0, k + 1, 0};
    switch (generator) {
    case 1: /* suffixes of each other: all end at the same character */
        t.from = n_tokens - 1 - k;
        t.to = n_tokens;
        break;
    case 2: /* overlapping windows of one width */
        t.from = k;
        t.to = k + width;
        break;
    case 3: /* prefixes that fail on their last character */
        t.near_miss = 1;
        break;
    case 4: /* a mix: any window of 1 .. MAX_TOKEN_CHARS characters */
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        t.from = (size_t)(*rng % 64);
        t.to = t.from + 1 + (size_t)((*rng >> 8) % MAX_TOKEN_CHARS);
        break;
    default: /* prefixes of each other */
        break;
    }
    return t;
}

/* The added tokens as written: token k is bytes.p[off[k] .. off[k + 1]). */
typedef struct token_list {
    buf bytes;
    size_t *off;
    size_t n;
} token_list;

/* The tokenizer.json: 256 byte symbols, no merges, the added tokens (also
 * kept in list, ids 256 ..). */
static void write_json(buf *j, token_list *list, int generator, size_t n_tokens, size_t width,
                       const uint8_t *seed, size_t n_seed)
{
    list->off = malloc(sizeof *list->off * (n_tokens + 1));
    if (!list->off)
        abort();
    list->off[0] = 0;
    puts_(j, "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
             "\"add_prefix_space\": false, \"use_regex\": true}, \"decoder\": {\"type\": "
             "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    char tmp[64];
    for (unsigned b = 0; b < 256; b++) {
        snprintf(tmp, sizeof tmp, "%s\"\\u%04x\": %u", b ? ", " : "", byte_symbol(b), b);
        puts_(j, tmp);
    }
    puts_(j, "}}, \"added_tokens\": [");
    size_t total = 0;
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)n_tokens;
    for (size_t k = 0; k < n_tokens; k++) {
        token_shape t = shape_of(generator, k, n_tokens, width, &rng);
        /* cut to the loader's length limit (the near miss's character too) */
        size_t bytes = 0, i = t.from;
        for (; i < t.to + (size_t)t.near_miss; i++) {
            size_t len = strlen(seed_char(seed, n_seed, i));
            if (bytes + len > MAX_TOKEN_LEN)
                break;
            bytes += len;
        }
        if (i < t.to + (size_t)t.near_miss)
            t.to = i - (size_t)t.near_miss;
        if (total + bytes > MAX_TOKEN_BYTES)
            break;
        total += bytes;
        snprintf(tmp, sizeof tmp, "%s{\"id\": %zu, \"special\": true, \"content\": \"",
                 k ? ", " : "", 256 + k);
        puts_(j, tmp);
        size_t start = list->bytes.len;
        for (size_t i = t.from; i < t.to; i++)
            puts_(&list->bytes, seed_char(seed, n_seed, i));
        if (t.near_miss) { /* the next alphabet letter after the seed's own */
            uint8_t next = (uint8_t)(seed[t.to % n_seed] + 1);
            puts_(&list->bytes, seed_char(&next, 1, 0));
        }
        put(j, list->bytes.p + start, list->bytes.len - start);
        list->off[++list->n] = list->bytes.len;
        puts_(j, "\"}");
    }
    puts_(j, "]}\n");
}

/* How far inputs got, for the seeded driver's report. */
static struct {
    long loaded, refused, encoded;
    nctmc_context *ctx; /* for the loader's messages */
    char first_refusal[256];
    char dir[256];
    char path[512];
} fz;

static void cleanup(void)
{
    if (fz.dir[0])
        test_remove_dir(fz.dir);
    nctmc_context_free(fz.ctx);
}

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_added_tokens: %s: %s\n", what, detail ? detail : "");
    abort();
}

/* The first listed of the longest added tokens that text[at ..] starts
 * with, or -1: the naive scan the library must not do, here only at a few
 * positions. */
static long naive_longest(const token_list *list, const buf *text, size_t at)
{
    long best = -1;
    size_t best_len = 0;
    for (size_t k = 0; k < list->n; k++) {
        size_t len = list->off[k + 1] - list->off[k];
        if (len > best_len && len <= text->len - at &&
            memcmp(text->p + at, list->bytes.p + list->off[k], len) == 0) {
            best = (long)k;
            best_len = len;
        }
    }
    return best;
}

/* Without merges, the tokens are the added tokens found leftmost-longest
 * and single bytes (id = the byte) between them: every token is checked
 * against the text, and at the first CHECKED positions against the naive
 * scan. */
#define CHECKED 48
static void check_tokens(const token_list *list, const buf *text, const int32_t *ids, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (at >= text->len)
            fail("tokens", "more than the text");
        long want = at < CHECKED ? naive_longest(list, text, at) : -2;
        if (ids[i] >= 256) {
            size_t k = (size_t)ids[i] - 256;
            if (k >= list->n)
                fail("tokens", "an id past the added tokens");
            size_t len = list->off[k + 1] - list->off[k];
            if (len > text->len - at || memcmp(text->p + at, list->bytes.p + list->off[k], len))
                fail("tokens", "an added token that is not the text there");
            if (want != -2 && want != (long)k)
                fail("tokens", "not the first-listed longest added token there");
            at += len;
        } else {
            if (ids[i] < 0 || (uint8_t)text->p[at] != (uint32_t)ids[i])
                fail("tokens", "a byte token that is not the text's byte");
            if (want >= 0)
                fail("tokens", "a byte where an added token starts");
            at++;
        }
    }
    if (at != text->len)
        fail("tokens", "do not cover the text");
}

static void encode_and_check(nctmc_tokenizer *tok, const token_list *list, const buf *text)
{
    int32_t *ids = malloc(sizeof *ids * text->len);
    char *back = malloc(text->len + 1);
    size_t n = 0, n_back = 0;
    if (!ids || !back)
        fail("out of memory", "");
    if (nctmc_tokenizer_encode(tok, text->p, text->len, ids, text->len, &n) != NCTMC_OK)
        fail("encode failed", nctmc_tokenizer_last_error(tok));
    if (n == 0 || n > text->len)
        fail("encode", "not 1 .. n_bytes tokens");
    check_tokens(list, text, ids, n);
    if (nctmc_tokenizer_decode(tok, ids, n, back, text->len + 1, &n_back) != NCTMC_OK)
        fail("decode failed", nctmc_tokenizer_last_error(tok));
    if (n_back != text->len || memcmp(back, text->p, text->len) != 0)
        fail("decode(encode(text))", "is not the text");
    fz.encoded++;
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz.dir[0]) {
        if (!test_make_temp_dir(fz.dir, sizeof fz.dir))
            fail("no scratch directory", "");
        test_path(fz.path, sizeof fz.path, fz.dir, "tokenizer.json");
        nctmc_context_params cp;
        nctmc_context_params_init(&cp);
        cp.backend = "cpu";
        cp.n_threads = 1;
        if (nctmc_context_create(&cp, &fz.ctx) != NCTMC_OK)
            fail("no context", "");
        atexit(cleanup);
    }
    byte_reader r = {data, size, 0};
    int generator = next_u8(&r) % 5;
    unsigned count = (unsigned)next_u8(&r) << 8;
    count |= next_u8(&r);
    size_t n_tokens = MAX_TOKENS / 2 - count % (MAX_TOKENS / 2); /* 0: 2000 */
    if (generator == 2 || generator == 4)
        n_tokens *= 2; /* short tokens: more of them fit */
    uint8_t seed[MAX_SEED] = {0};
    size_t n_seed = next_u8(&r) % MAX_SEED;
    size_t have = size - r.at < n_seed ? size - r.at : n_seed; /* the rest reads as 0 */
    if (have > 0)
        memcpy(seed, data + r.at, have);
    r.at += have;
    n_seed += n_seed == 0;
    size_t width = 1 + (size_t)seed[0] % 64;
    /* the pattern: the rest of the input, or the seed when there is none */
    const uint8_t *pattern = r.at < size ? data + r.at : seed;
    size_t n_pattern = r.at < size ? size - r.at : n_seed;
    if (n_pattern > 4096)
        n_pattern = 4096;

    buf json = {0}, text = {0};
    token_list list = {{0}, NULL, 0};
    write_json(&json, &list, generator, n_tokens, width, seed, n_seed);
    for (size_t i = 0; text.len < TEXT_BYTES; i++)
        puts_(&text, seed_char(pattern, n_pattern, i));
    if (!test_write_bytes(fz.path, json.p, json.len))
        fail("cannot write", fz.path);
    nctmc_tokenizer *tok = NULL;
    nctmc_status st = nctmc_tokenizer_load_hf_json(fz.ctx, fz.path, &tok);
    if (st == NCTMC_OK) {
        fz.loaded++;
        encode_and_check(tok, &list, &text);
    } else {
        const char *why = nctmc_context_last_error(fz.ctx);
        if (fz.refused++ == 0)
            snprintf(fz.first_refusal, sizeof fz.first_refusal, "%s", why);
        if (!why || !why[0])
            fail("a refused tokenizer", "has no message");
        if (tok)
            fail("a refused tokenizer", "came back anyway");
    }
    nctmc_tokenizer_free(tok);
    free(json.p);
    free(text.p);
    free(list.bytes.p);
    free(list.off);
    return 0;
}

#ifndef FUZZ_LIBFUZZER
/* Seeded inputs: the case first, then short random inputs. */
int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 24;
    uint64_t s = 0x2545F4914F6CDD1Dull;
    uint8_t in[64];
    for (int run = 0; run < runs; run++) {
        size_t n = run == 0 ? 0 : (size_t)(run % (int)sizeof in);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            in[i] = (uint8_t)(s >> 24);
        }
        if (n > 0)
            in[0] = (uint8_t)run; /* every generator in turn */
        LLVMFuzzerTestOneInput(in, n);
    }
    printf("%d inputs: %ld tokenizers loaded and encoded %ld texts of %zu bytes, %ld refused\n",
           runs, fz.loaded, fz.encoded, TEXT_BYTES, fz.refused);
    if (fz.refused > 0)
        printf("the first refusal: %s\n", fz.first_refusal);
    /* nearly every input must reach the encoder, or the target tests nothing */
    int ok = fz.encoded >= runs - runs / 10;
    printf("fuzz_added_tokens: %d passed, %d failed\n", runs + ok, !ok);
    return ok ? 0 : 1;
}
#endif
