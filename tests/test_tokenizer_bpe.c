/*
 * test_tokenizer_bpe.c — the byte-level BPE tokenizer: the GPT-2
 * pre-tokenizer on cases checked against Hugging Face `tokenizers`, merges
 * by rank on a small hand-made vocabulary, added tokens, exact round trips
 * of any bytes (invalid UTF-8, text cut mid-character), token byte offsets,
 * a megabyte without spaces, loader errors (tokenizer.json, vocab.json +
 * merges.txt, our own file), padding, and the tokenizer file and checkpoint
 * round trips. tests/check_bpe_tokenizers.py compares ids with `tokenizers`
 * on megabytes of text. The pre-tokenizer's splits, the byte map and the
 * token byte offsets are internals: test_bpe_internal.c.
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

static bool has(const char *msg, const char *part)
{
    return strstr(msg, part) != NULL;
}

/* ---- a small tokenizer.json (bpe_json.h) ------------------------------------ */

static nctmc_tokenizer *load_small(void)
{
    write_json(path_of("small.json"), "", PRE_OK, NULL);
    nctmc_tokenizer *tok = NULL;
    nctmc_status st = nctmc_tokenizer_load_hf_json(ctx, path_of("small.json"), &tok);
    CHECK(st == NCTMC_OK, "load the small tokenizer.json: %s", nctmc_context_last_error(ctx));
    return tok;
}

static size_t encode(nctmc_tokenizer *tok, const char *text, size_t n, int32_t *ids,
                     size_t cap)
{
    size_t got = 0;
    nctmc_status st = nctmc_tokenizer_encode(tok, text, n, ids, cap, &got);
    CHECK(st == NCTMC_OK, "encode: %s", nctmc_tokenizer_last_error(tok));
    return got;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void test_merges(nctmc_tokenizer *tok)
{
    static const struct {
        const char *text;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        {"the", {'t', 257}, 2},                    /* "he", no " t" */
        {" the", {258}, 1},                        /* " t" + "he" -> " the" */
        {"aaa", {259, 'a'}, 2},                    /* leftmost pair first */
        {"aaaa", {260}, 1},                        /* aa aa -> aaaa */
        {"aaaaa", {260, 'a'}, 1 + 1},
        {"it's", {'i', 't', 261}, 3},              /* contraction 's, then merged */
        {"x<|endoftext|>y", {'x', ID_EOT, 'y'}, 3},
        {"<|endoftext|><|endoftext|>", {ID_EOT, ID_EOT}, 2},
        {"<|endoftext", {'<', '|', 'e', 'n', 'd', 'o', 'f', 't'}, 8}, /* first 8 only */
    };
    int32_t ids[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = encode(tok, cases[i].text, strlen(cases[i].text), ids, 64);
        size_t want = cases[i].n;
        bool ok = i == 8 ? n == strlen(cases[i].text) && same_ids(ids, 8, cases[i].ids, 8)
                         : same_ids(ids, n, cases[i].ids, want);
        CHECK(ok, "\"%s\": %zu ids, first %d %d", cases[i].text, n, n ? ids[0] : -1,
              n > 1 ? ids[1] : -1);
    }
    CHECK(nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_BPE &&
              nctmc_tokenizer_vocab_size(tok) == ID_EOT + 1,
          "kind BPE, %d tokens", nctmc_tokenizer_vocab_size(tok));
}

/* ---- round trips of any bytes ------------------------------------------------ */

static void round_trip(nctmc_tokenizer *tok, const char *text, size_t n, const char *what)
{
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t count = 0;
    CHECK(nctmc_tokenizer_encode(tok, text, n, NULL, 0, &count) == NCTMC_OK, "%s: count",
          what);
    size_t got = encode(tok, text, n, ids, n + 1);
    CHECK(got == count && got <= n, "%s: one pass gives %zu ids, counting %zu", what, got,
          count);
    size_t len = 0;
    char *back = malloc(n + 1);
    nctmc_status st = nctmc_tokenizer_decode(tok, ids, got, back, n + 1, &len);
    CHECK(st == NCTMC_OK && len == n && memcmp(back, text, n) == 0,
          "%s: decode(encode(x)) != x (%zu bytes back of %zu)", what, len, n);
    /* and encode(decode(ids)) == ids */
    int32_t *again = malloc((n + 1) * sizeof *again);
    size_t n_again = encode(tok, back, len, again, n + 1);
    CHECK(same_ids(ids, got, again, n_again), "%s: encode(decode(ids)) != ids", what);
    free(again);
    free(back);
    free(ids);
}

static void test_round_trips(nctmc_tokenizer *tok, test_rng *rng)
{
    char buf[512];
    for (int rep = 0; rep < 300; rep++) {
        size_t n = (size_t)test_randint(rng, 400);
        for (size_t i = 0; i < n; i++) {
            /* mostly text-like bytes, with every byte value possible */
            int kind = test_randint(rng, 4);
            buf[i] = kind == 0   ? (char)test_randint(rng, 256)
                     : kind == 1 ? " aeht's<|>"[test_randint(rng, 10)]
                     : kind == 2 ? (char)(0x80 + test_randint(rng, 0x40))
                                 : (char)('a' + test_randint(rng, 26));
        }
        round_trip(tok, buf, n, "random bytes");
    }
    const char euro_cut[] = "price: 5 \xe2\x82"; /* € cut after two of its bytes */
    round_trip(tok, euro_cut, sizeof euro_cut - 1, "text cut mid-character");
    const char nul[] = "a\0b\0\0 c";
    round_trip(tok, nul, sizeof nul - 1, "NUL bytes");
}

/* A megabyte without spaces is one pre-token: merging it must stay fast
 * (O(n log n)); the test only checks the result, the meson timeout the time. */
static void test_long_word(nctmc_tokenizer *tok, test_rng *rng)
{
    size_t n = 1 << 20;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = i < n / 2 ? 'a' : (char)('a' + test_randint(rng, 8));
    round_trip(tok, text, n, "1 MiB without spaces");
    int32_t *ids = malloc(n * sizeof *ids);
    size_t got = encode(tok, text, n / 2, ids, n);
    bool all_aaaa = got == n / 8;
    for (size_t i = 0; all_aaaa && i < got; i++)
        all_aaaa = ids[i] == 260;
    CHECK(all_aaaa, "512 KiB of 'a' is %zu tokens \"aaaa\" (got %zu)", n / 8, got);
    free(ids);
    free(text);
}

/* ---- buffers, padding, mask ------------------------------------------------------- */

static void test_buffers_and_padding(nctmc_tokenizer *tok)
{
    int32_t ids[4] = {-7, -7, -7, -7};
    size_t need = 0;
    nctmc_status st = nctmc_tokenizer_encode(tok, "the cat", 7, ids, 2, &need);
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT && need == 6 && ids[0] == -7,
          "a short buffer: refused, count given, nothing written (need %zu)", need);
    CHECK(nctmc_tokenizer_pad_vocab(tok, 100) == NCTMC_ERR_INVALID_ARGUMENT &&
              has(nctmc_tokenizer_last_error(tok), "263"),
          "padding below the token count: %s", nctmc_tokenizer_last_error(tok));
    CHECK(nctmc_tokenizer_pad_vocab(tok, 320) == NCTMC_OK &&
              nctmc_tokenizer_vocab_size(tok) == 320,
          "padded to 320");
    int32_t pad_ids[] = {'h', 300, 'i', 319};
    char out[16];
    size_t len = 0;
    st = nctmc_tokenizer_decode(tok, pad_ids, 4, out, sizeof out, &len);
    CHECK(st == NCTMC_OK && len == 2 && memcmp(out, "hi", 2) == 0,
          "padding ids decode to nothing");
    int32_t mask_ids[] = {'h', 320};
    st = nctmc_tokenizer_decode(tok, mask_ids, 2, out, sizeof out, &len);
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT && has(nctmc_tokenizer_last_error(tok), "mask"),
          "id 320 (the mask of a padded model) is an error without a placeholder");
    nctmc_tokenizer_set_mask_placeholder(tok, "_");
    st = nctmc_tokenizer_decode(tok, mask_ids, 2, out, sizeof out, &len);
    CHECK(st == NCTMC_OK && len == 2 && memcmp(out, "h_", 2) == 0, "placeholder renders it");
    nctmc_tokenizer_set_mask_placeholder(tok, NULL);
    int32_t bad[] = {-1};
    CHECK(nctmc_tokenizer_decode(tok, bad, 1, out, sizeof out, &len) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "negative id");
    nctmc_tokenizer *bytes = NULL;
    nctmc_tokenizer_create_bytes(&bytes);
    CHECK(nctmc_tokenizer_pad_vocab(bytes, 300) == NCTMC_ERR_INVALID_ARGUMENT,
          "only BPE pads");
    nctmc_tokenizer_free(bytes);
    CHECK(nctmc_tokenizer_pad_vocab(NULL, 300) == NCTMC_ERR_INVALID_ARGUMENT, "NULL");
}

/* ---- files: tokenizer file and checkpoint ------------------------------------- */

static const char sample_text[] = "It's the end, aaaa! <|endoftext|> \xf0\x9f\x98\x80\xff end";

static void check_same_encoding(nctmc_tokenizer *a, nctmc_tokenizer *b, const char *what)
{
    int32_t x[128], y[128];
    size_t nx = encode(a, sample_text, sizeof sample_text - 1, x, 128);
    size_t ny = encode(b, sample_text, sizeof sample_text - 1, y, 128);
    CHECK(same_ids(x, nx, y, ny) &&
              nctmc_tokenizer_vocab_size(a) == nctmc_tokenizer_vocab_size(b) &&
              nctmc_tokenizer_get_kind(b) == NCTMC_TOKENIZER_BPE,
          "%s: the same encoding and vocabulary", what);
}

static void test_tokenizer_file(nctmc_tokenizer *tok)
{
    const char *path = path_of("bpe.tok");
    CHECK(nctmc_tokenizer_save(tok, path) == NCTMC_OK, "save: %s",
          nctmc_tokenizer_last_error(tok));
    nctmc_tokenizer *back = NULL;
    CHECK(nctmc_tokenizer_load(ctx, path, &back) == NCTMC_OK, "load: %s",
          nctmc_context_last_error(ctx));
    if (back)
        check_same_encoding(tok, back, "tokenizer file");
    nctmc_tokenizer_free(back);
    size_t n = 0;
    uint8_t *data = test_read_bytes(path, &n);
    CHECK(data && n > 20 && memcmp(data, "nctmc-tokenizer 2\n", 18) == 0,
          "a BPE tokenizer file is version 2");
    if (!data)
        return;
    /* version 1 cannot hold BPE (0.3.0 would not read it) */
    data[16] = '1';
    test_write_bytes(path, data, n);
    CHECK(nctmc_tokenizer_load(ctx, path, &back) == NCTMC_ERR_FORMAT &&
              has(nctmc_context_last_error(ctx), "version 1 cannot hold a bpe"),
          "BPE in a version-1 file: %s", nctmc_context_last_error(ctx));
    data[16] = '2';
    /* a merge naming an id outside the tokens */
    char *merges = strstr((char *)data, "bpe_merges ");
    if (merges) {
        memcpy(merges + 11, "999", 3);
        test_write_bytes(path, data, n);
        CHECK(nctmc_tokenizer_load(ctx, path, &back) == NCTMC_ERR_FORMAT &&
                  has(nctmc_context_last_error(ctx), "bpe_merges"),
              "a bad merge id: %s", nctmc_context_last_error(ctx));
    }
    free(data);
    static const char *const bad_files[][2] = {
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61 61\nbpe_merges \n",
         "same bytes"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 1\nbpe_tokens 61 62\nbpe_merges \n",
         "vocab_size 1"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 3\nbpe_tokens 61 62 6162\nbpe_merges 0 1 0 "
         "1\n",
         "twice"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 3\nbpe_tokens 61 62 6263\nbpe_merges 0 1\n",
         "lacks"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61 6G\nbpe_merges \n", "hex"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61  62\nbpe_merges \n",
         "empty"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61 62\n", "missing"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61 62\nbpe_merges 0\n",
         "pairs"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61 62\nbpe_merges \n"
         "bpe_added 1 0\n",
         "increasing"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 3\nbpe_tokens 61 62 6162\nbpe_merges 0 1\n"
         "bpe_added 0\n",
         "added token"},
        {"nctmc-tokenizer 2\nkind bpe\nvocab_size 2\nbpe_tokens 61 62\nbpe_merges \n"
         "alphabet 61\n",
         "does not belong"},
    };
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        test_write_bytes(path, bad_files[i][0], strlen(bad_files[i][0]));
        nctmc_status st = nctmc_tokenizer_load(ctx, path, &back);
        CHECK(st == NCTMC_ERR_FORMAT && back == NULL &&
                  has(nctmc_context_last_error(ctx), bad_files[i][1]),
              "bad file %zu: want \"%s\" in \"%s\"", i, bad_files[i][1],
              nctmc_context_last_error(ctx));
    }
}

static void test_checkpoint(nctmc_tokenizer *tok)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 321; /* 320 data tokens (263 padded) + the mask */
    cfg.seq_len = 8;
    cfg.n_layers = 1;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.cond_dim = 4;
    cfg.process = NCTMC_PROCESS_MASKED;
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &cfg, &m) != NCTMC_OK) {
        CHECK(false, "model: %s", nctmc_context_last_error(ctx));
        return;
    }
    CHECK(nctmc_model_set_tokenizer(m, tok) == NCTMC_OK, "a padded BPE on S = 321: %s",
          nctmc_model_last_error(m));
    const char *path = path_of("bpe.safetensors");
    CHECK(nctmc_model_save(m, path) == NCTMC_OK, "save: %s", nctmc_model_last_error(m));
    nctmc_model_free(m);
    m = NULL;
    CHECK(nctmc_model_load(ctx, path, &m) == NCTMC_OK, "load: %s",
          nctmc_context_last_error(ctx));
    nctmc_tokenizer *back = NULL;
    if (m && nctmc_tokenizer_clone(nctmc_model_get_tokenizer(m), &back) == NCTMC_OK)
        check_same_encoding(tok, back, "checkpoint");
    else
        CHECK(false, "the loaded model has a tokenizer");
    nctmc_tokenizer_free(back);
    nctmc_model_free(m);
    /* unpadded, it does not fit the model */
    nctmc_tokenizer *unpadded = NULL;
    nctmc_tokenizer_clone(tok, &unpadded);
    nctmc_tokenizer_pad_vocab(unpadded, 263);
    if (nctmc_model_create(ctx, &cfg, &m) == NCTMC_OK) {
        CHECK(nctmc_model_set_tokenizer(m, unpadded) == NCTMC_ERR_INVALID_ARGUMENT &&
                  has(nctmc_model_last_error(m), "263"),
              "263 tokens on S = 321: %s", nctmc_model_last_error(m));
        nctmc_model_free(m);
    }
    nctmc_tokenizer_free(unpadded);
}

/* ---- loader errors ------------------------------------------------------------ */

static void expect_json_error(const char *name, nctmc_status want, const char *part)
{
    nctmc_tokenizer *tok = (nctmc_tokenizer *)1;
    nctmc_status st = nctmc_tokenizer_load_hf_json(ctx, path_of(name), &tok);
    CHECK(st == want && tok == NULL && has(nctmc_context_last_error(ctx), part),
          "%s: status %d, want \"%s\" in \"%s\"", name, (int)st, part,
          nctmc_context_last_error(ctx));
}

static void test_json_errors(void)
{
    const char *p = path_of("bad.json");
    test_write_bytes(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", 42);
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "bad.json");
    write_json(p, "", PRE_OK, "[\"\\u0120 t\", \"\\u0120q z\"]");
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "not in the vocabulary");
    write_json(p, "", PRE_OK, "[[\"h\", \"e\"], [\"h\", \"e\"]]");
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "twice");
    write_json(p, "", PRE_OK, "[\"a a a\"]");
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "one space");
    write_json(p, "", PRE_OK, "[[\"e\", \"h\"]]"); /* "eh" is no token */
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "lacks");
    write_json(p, "\"dropout\": 0.1,", PRE_OK, NULL);
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "dropout");
    write_json(p, "\"ignore_merges\": true,", PRE_OK, NULL);
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "ignore_merges");
    write_json(p, "", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", NULL);
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "add_prefix_space");
    write_json(p, "", "{\"type\": \"Whitespace\"}", NULL);
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "ByteLevel");
    write_json(p, "", "null", NULL);
    expect_json_error("bad.json", NCTMC_ERR_FORMAT, "ByteLevel");
    /* a second id for the same text, a gap, a duplicate id, a text that is
     * not byte-level, a model that is not BPE, no merges */
    static const char *const small[][2] = {
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
         "\"b\": 0}, \"merges\": []}}",
         "two tokens"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
         "\"b\": 2}, \"merges\": []}}",
         "no token has id 1"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
         "\"a\": 1}, \"merges\": []}}",
         "twice"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a b\": "
         "0}, \"merges\": []}}",
         "not byte-level"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"WordPiece\", \"vocab\": "
         "{\"a\": 0}, \"merges\": []}}",
         "BPE"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}",
         "missing"},
        {"{\"added_tokens\": [{\"id\": 0, \"content\": \"X\"}], \"pre_tokenizer\": " PRE_OK
         ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "another token"},
        {"{\"added_tokens\": [{\"id\": 1, \"content\": \"X\", \"lstrip\": true}], "
         "\"pre_tokenizer\": " PRE_OK
         ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "lstrip"},
        {"{\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": " PRE_OK
         ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "normalizer"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
         "16777216}, \"merges\": []}}",
         "16777216"},
        /* a key given twice, anywhere (issue 37, item 5): refused, not
         * resolved first- or last-wins */
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
         "0}, \"merges\": []}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"b\": 0}, "
         "\"merges\": []}}",
         "the key \"model\" appears twice"},
        {"{\"added_tokens\": [{\"id\": 1, \"content\": \"X\", \"content\": \"Y\"}], "
         "\"pre_tokenizer\": " PRE_OK
         ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "the key \"content\" appears twice"},
        {"{\"decoder\": {\"type\": \"ByteLevel\", \"x\": 1, \"x\": 2}, \"pre_tokenizer\": "
         PRE_OK ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "the key \"x\" appears twice"},
        {"{\"pre_tokenizer\": " PRE_OK ", \"model\": {\"type\": \"BPE\", \"type\": \"BPE\", "
         "\"vocab\": {\"a\": 0}, \"merges\": []}}",
         "the key \"type\" appears twice"},
        {"[1, 2]", "object"},
        {"{} {}", "after"},
    };
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        test_write_bytes(p, small[i][0], strlen(small[i][0]));
        expect_json_error("bad.json", NCTMC_ERR_FORMAT, small[i][1]);
    }
    expect_json_error("no-such-file.json", NCTMC_ERR_IO, "no-such-file");
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_load_hf_json(ctx, NULL, &tok) == NCTMC_ERR_INVALID_ARGUMENT &&
              nctmc_tokenizer_load_hf_json(ctx, p, NULL) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL arguments");
}

static void test_gpt2_files(nctmc_tokenizer *reference)
{
    /* vocab.json + merges.txt of the same small vocabulary: the added token
     * is inferred (neither a byte nor a merge's result) */
    char *vocab = malloc(1 << 16), *merges = malloc(4096);
    size_t k = 0, km = 0;
    vocab[k++] = '{';
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        if (b == 0)
            k += (size_t)sprintf(vocab + k, "\"\\u0100\"");
        else
            k += put_symbols(vocab + k, s);
        k += (size_t)sprintf(vocab + k, ": %d, ", b);
    }
    km += (size_t)sprintf(merges + km, "#version: 0.2\n");
    for (int m = 0; m < N_MERGES; m++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", merge_pairs[m][0], merge_pairs[m][1]);
        k += put_symbols(vocab + k, joined);
        k += (size_t)sprintf(vocab + k, ": %d, ", 256 + m);
        for (int side = 0; side < 2; side++) {
            for (const char *c = merge_pairs[m][side]; *c; c++) {
                uint32_t cp = test_byte_to_unicode((uint8_t)*c);
                km += cp < 0x80 ? (size_t)sprintf(merges + km, "%c", (char)cp)
                                : (size_t)sprintf(merges + km, "%c%c", 0xC0 | (cp >> 6),
                                                  0x80 | (cp & 0x3F));
            }
            merges[km++] = side ? '\n' : ' ';
        }
    }
    k += (size_t)sprintf(vocab + k, "\"<|endoftext|>\": %d}", ID_EOT);
    test_write_bytes(path_of("vocab.json"), vocab, k);
    test_write_bytes(path_of("merges.txt"), merges, km);
    nctmc_tokenizer *tok = NULL;
    nctmc_status st =
        nctmc_tokenizer_load_gpt2(ctx, path_of("vocab.json"), path_of("merges.txt"), &tok);
    CHECK(st == NCTMC_OK, "vocab.json + merges.txt: %s", nctmc_context_last_error(ctx));
    if (tok) {
        nctmc_tokenizer_pad_vocab(tok, nctmc_tokenizer_vocab_size(reference));
        check_same_encoding(reference, tok, "vocab.json + merges.txt");
    }
    nctmc_tokenizer_free(tok);
    /* a line of three tokens */
    memcpy(merges + km, "a b c\n", 6);
    test_write_bytes(path_of("merges.txt"), merges, km + 6);
    st = nctmc_tokenizer_load_gpt2(ctx, path_of("vocab.json"), path_of("merges.txt"), &tok);
    CHECK(st == NCTMC_ERR_FORMAT && has(nctmc_context_last_error(ctx), "merges.txt") &&
              has(nctmc_context_last_error(ctx), "merge 8"),
          "a bad merges line is named: %s", nctmc_context_last_error(ctx));
    test_write_bytes(path_of("vocab.json"), "[]", 2);
    st = nctmc_tokenizer_load_gpt2(ctx, path_of("vocab.json"), path_of("merges.txt"), &tok);
    CHECK(st == NCTMC_ERR_FORMAT && has(nctmc_context_last_error(ctx), "vocab.json"),
          "vocab.json not an object: %s", nctmc_context_last_error(ctx));
    CHECK(nctmc_tokenizer_load_gpt2(ctx, NULL, "x", &tok) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL path");
    free(vocab);
    free(merges);
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
    test_rng rng = test_rng_seed(5);
    nctmc_tokenizer *tok = load_small();
    if (tok) {
        test_merges(tok);
        test_round_trips(tok, &rng);
        test_long_word(tok, &rng);
        test_gpt2_files(tok);
        test_buffers_and_padding(tok);
        test_tokenizer_file(tok);
        test_checkpoint(tok);
        nctmc_tokenizer *copy = NULL;
        CHECK(nctmc_tokenizer_clone(tok, &copy) == NCTMC_OK, "clone");
        if (copy)
            check_same_encoding(tok, copy, "clone");
        nctmc_tokenizer_free(copy);
    }
    test_json_errors();
    nctmc_tokenizer_free(tok);
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("tokenizer_bpe");
}
