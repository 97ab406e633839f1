/*
 * tokenizer_io.c — a tokenizer's flat key/value form, and the small text file
 * `nctmc prepare` writes for `nctmc train` (docs/formats.md):
 *
 *     nctmc-tokenizer 1
 *     kind chars
 *     vocab_size 3
 *     alphabet a 20 61
 *
 * one "key value" line per field of the flat form. Checkpoints hold the same
 * fields as "nctmc.tokenizer.<key>" metadata.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "core/ctx_report.h"
#include "io/file_io.h"
#include "io/numtext.h"
#include "tokenizer.h"
#include "tokenizer_bpe_io.h"
#include "base/utf8.h"

/* Version 1 holds the kinds bytes, chars and image (0.3.0 reads it),
 * version 2 the kind bpe: each file says exactly which form it is. */
#define TOKENIZER_FILE_MAGIC "nctmc-tokenizer 1"
#define TOKENIZER_FILE_MAGIC_2 "nctmc-tokenizer 2"
/* A BPE vocabulary in hex is a few MB (GPT-2's: 0.9 MB of tokens and merges). */
#define TOKENIZER_FILE_MAX (256u << 20)

static const char *const kind_names[] = {"bytes", "chars", "image", "bpe"};
#define N_KINDS 4
static const char *const field_names[] = {"kind",   "vocab_size", "alphabet",   "width",
                                          "height", "levels",     "bpe_tokens", "bpe_merges",
                                          "bpe_added"};
#define N_FIELD_NAMES ((int32_t)(sizeof field_names / sizeof field_names[0]))

bool tokenizer_is_field(const char *key)
{
    for (int32_t i = 0; i < N_FIELD_NAMES; i++)
        if (strcmp(key, field_names[i]) == 0)
            return true;
    return false;
}

/* ---- to the flat form ---------------------------------------------------- */

static bool add_field(tokenizer_fields *f, const char *key, const char *value)
{
    char *copy = mem_strdup(&f->alloc, value);
    if (!copy)
        return false;
    f->keys[f->n] = key;
    f->values[f->n++] = copy;
    return true;
}

static bool add_int_field(tokenizer_fields *f, const char *key, int32_t v)
{
    char text[NUMTEXT_MAX];
    snprintf(text, sizeof text, "%d", (int)v);
    return add_field(f, key, text);
}

/* "61 62 63": each code point in lowercase hex, one space between. */
static char *alphabet_text(const nctmc_tokenizer *tok)
{
    char *text = mem_alloc(&tok->alloc, (size_t)tok->vocab * 7 + 1);
    if (!text)
        return NULL;
    size_t at = 0;
    for (int32_t i = 0; i < tok->vocab; i++)
        at += (size_t)sprintf(text + at, i ? " %x" : "%x", (unsigned)tok->alphabet[i]);
    text[at] = '\0';
    return text;
}

nctmc_status tokenizer_to_fields(const nctmc_tokenizer *tok, tokenizer_fields *out, char *err,
                                 size_t err_size)
{
    memset(out, 0, sizeof *out);
    out->alloc = tok->alloc;
    bool ok = add_field(out, "kind", kind_names[tok->kind]) &&
              add_int_field(out, "vocab_size", tok->vocab);
    if (ok && tok->kind == NCTMC_TOKENIZER_CHARS) {
        char *text = alphabet_text(tok);
        ok = text && add_field(out, "alphabet", text);
        mem_free(&tok->alloc, text);
    }
    if (ok && tok->kind == NCTMC_TOKENIZER_BPE) {
        char *tokens, *merges, *added;
        ok = bpe_to_texts(tok->bpe, &tok->alloc, &tokens, &merges, &added);
        ok = ok && add_field(out, "bpe_tokens", tokens) && add_field(out, "bpe_merges", merges) &&
             (!added || add_field(out, "bpe_added", added));
        if (tokens) {
            mem_free(&tok->alloc, tokens);
            mem_free(&tok->alloc, merges);
            mem_free(&tok->alloc, added);
        }
    }
    if (ok && tok->kind == NCTMC_TOKENIZER_IMAGE)
        ok = add_int_field(out, "width", tok->width) &&
             add_int_field(out, "height", tok->height) &&
             add_int_field(out, "levels", tok->levels);
    if (!ok) {
        tokenizer_fields_free(out);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory writing the tokenizer");
    }
    return NCTMC_OK;
}

void tokenizer_fields_free(tokenizer_fields *f)
{
    for (int32_t i = 0; i < f->n; i++)
        mem_free(&f->alloc, f->values[i]);
    f->n = 0;
}

/* ---- from the flat form -------------------------------------------------- */

static nctmc_status field_int(tokenizer_get_fn get, const void *src, const char *key,
                              int64_t lo, int64_t hi, int32_t *out, char *err, size_t err_size)
{
    const char *text = get(src, key);
    int64_t v;
    if (!text)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "tokenizer: \"%s\" is missing", key);
    if (!numtext_parse_i64(text, lo, hi, &v))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tokenizer: %s = \"%.40s\" is not an integer in [%lld, %lld]", key,
                           text, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return NCTMC_OK;
}

/* Fields that belong to another kind must be absent: a file that says more
 * than its kind uses was not written by us. */
static nctmc_status only_fields(tokenizer_get_fn get, const void *src, const char *const *allowed,
                                int32_t n_allowed, char *err, size_t err_size)
{
    for (int32_t i = 0; i < N_FIELD_NAMES; i++) {
        bool ok = get(src, field_names[i]) == NULL;
        for (int32_t k = 0; k < n_allowed && !ok; k++)
            ok = strcmp(field_names[i], allowed[k]) == 0;
        if (!ok)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer: \"%s\" does not belong to this kind", field_names[i]);
    }
    return NCTMC_OK;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Parses the alphabet: lowercase hex without leading zeros, one space
 * between, strictly increasing valid code points, exactly vocab of them. */
static nctmc_status parse_alphabet(const char *s, uint32_t *alphabet, int32_t vocab, char *err,
                                   size_t err_size)
{
    int32_t count = 0;
    const char *p = s;
    while (*p) {
        if (count > 0) {
            if (*p != ' ')
                break;
            p++;
        }
        uint32_t cp = 0;
        int digits = 0;
        for (int h; (h = hex_digit(*p)) >= 0 && digits <= 6; p++, digits++)
            cp = cp * 16 + (uint32_t)h;
        if (digits == 0 || digits > 6 || (digits > 1 && p[-digits] == '0') ||
            !utf8_valid_code_point(cp) || count >= vocab ||
            (count > 0 && cp <= alphabet[count - 1]))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer: alphabet entry %d is not a code point above the one "
                               "before it",
                               count);
        alphabet[count++] = cp;
    }
    if (*p || count != vocab)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tokenizer: the alphabet lists %d characters, vocab_size says %d",
                           count, vocab);
    return NCTMC_OK;
}

static nctmc_status chars_from_fields(const nctmc_allocator *alloc, tokenizer_get_fn get,
                                      const void *src, int32_t vocab, nctmc_tokenizer **out,
                                      char *err, size_t err_size)
{
    static const char *const allowed[] = {"kind", "vocab_size", "alphabet"};
    nctmc_status st = only_fields(get, src, allowed, 3, err, err_size);
    const char *text = get(src, "alphabet");
    if (st == NCTMC_OK && !text)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT, "tokenizer: \"alphabet\" is missing");
    if (st == NCTMC_OK && vocab > TOKENIZER_MAX_ALPHABET)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "tokenizer: %d characters is more than %d", vocab,
                         TOKENIZER_MAX_ALPHABET);
    if (st != NCTMC_OK)
        return st;
    nctmc_tokenizer *tok = tokenizer_new(alloc, NCTMC_TOKENIZER_CHARS, vocab);
    if (tok)
        tok->alphabet = mem_alloc(alloc, sizeof *tok->alphabet * (size_t)vocab);
    if (!tok || !tok->alphabet)
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == NCTMC_OK)
        st = parse_alphabet(text, tok->alphabet, vocab, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return NCTMC_OK;
}

static nctmc_status image_from_fields(const nctmc_allocator *alloc, tokenizer_get_fn get,
                                      const void *src, int32_t vocab, nctmc_tokenizer **out,
                                      char *err, size_t err_size)
{
    static const char *const allowed[] = {"kind", "vocab_size", "width", "height", "levels"};
    int32_t w = 0, h = 0, levels = 0;
    nctmc_status st = only_fields(get, src, allowed, 5, err, err_size);
    if (st == NCTMC_OK)
        st = field_int(get, src, "width", 1, TOKENIZER_MAX_PIXELS, &w, err, err_size);
    if (st == NCTMC_OK)
        st = field_int(get, src, "height", 1, TOKENIZER_MAX_PIXELS, &h, err, err_size);
    if (st == NCTMC_OK)
        st = field_int(get, src, "levels", 2, TOKENIZER_MAX_LEVELS, &levels, err, err_size);
    if (st == NCTMC_OK && (int64_t)w * h > TOKENIZER_MAX_PIXELS)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "tokenizer: %d x %d pixels is more than %d", w, h, TOKENIZER_MAX_PIXELS);
    if (st == NCTMC_OK && levels != vocab)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "tokenizer: %d levels but vocab_size %d", levels, vocab);
    if (st != NCTMC_OK)
        return st;
    nctmc_tokenizer *tok = tokenizer_new(alloc, NCTMC_TOKENIZER_IMAGE, vocab);
    if (!tok)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    tok->width = w;
    tok->height = h;
    tok->levels = levels;
    tok->pixel_chars = tokenizer_image_pixel_chars(levels);
    *out = tok;
    return NCTMC_OK;
}

/* The vocabulary is the model's (padding included); bpe_tokens gives the
 * ids that have text. */
static nctmc_status bpe_from_fields(const nctmc_allocator *alloc, tokenizer_get_fn get,
                                    const void *src, int32_t vocab, nctmc_tokenizer **out,
                                    char *err, size_t err_size)
{
    static const char *const allowed[] = {"kind", "vocab_size", "bpe_tokens", "bpe_merges",
                                          "bpe_added"};
    nctmc_status st = only_fields(get, src, allowed, 5, err, err_size);
    const char *tokens = get(src, "bpe_tokens"), *merges = get(src, "bpe_merges");
    if (st == NCTMC_OK && (!tokens || !merges))
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "tokenizer: \"bpe_tokens\" or \"bpe_merges\" is missing");
    bpe_model *m = NULL;
    if (st == NCTMC_OK)
        st = bpe_from_texts(alloc, tokens, merges, get(src, "bpe_added"), &m, err, err_size);
    if (st == NCTMC_OK && m->n_tokens > vocab)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "tokenizer: %d BPE tokens but vocab_size %d", m->n_tokens, vocab);
    nctmc_tokenizer *tok = NULL;
    if (st == NCTMC_OK && !(tok = tokenizer_new(alloc, NCTMC_TOKENIZER_BPE, vocab)))
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    if (st != NCTMC_OK) {
        bpe_model_free(m);
        return st;
    }
    tok->bpe = m;
    *out = tok;
    return NCTMC_OK;
}

nctmc_status tokenizer_from_fields(const nctmc_allocator *alloc, tokenizer_get_fn get,
                                   const void *src, nctmc_tokenizer **out, char *err,
                                   size_t err_size)
{
    const char *kind = get(src, "kind");
    int k = 0;
    while (kind && k < N_KINDS && strcmp(kind, kind_names[k]) != 0)
        k++;
    if (!kind || k == N_KINDS)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tokenizer: kind \"%.40s\" is not bytes, chars, image or bpe",
                           kind ? kind : "(missing)");
    int32_t vocab = 0;
    nctmc_status st = field_int(get, src, "vocab_size", 1, 1 << 24, &vocab, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (k == NCTMC_TOKENIZER_CHARS)
        return chars_from_fields(alloc, get, src, vocab, out, err, err_size);
    if (k == NCTMC_TOKENIZER_IMAGE)
        return image_from_fields(alloc, get, src, vocab, out, err, err_size);
    if (k == NCTMC_TOKENIZER_BPE)
        return bpe_from_fields(alloc, get, src, vocab, out, err, err_size);
    static const char *const allowed[] = {"kind", "vocab_size"};
    st = only_fields(get, src, allowed, 2, err, err_size);
    if (st == NCTMC_OK && vocab != 256)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "tokenizer: a byte tokenizer has 256 tokens, not %d", vocab);
    if (st == NCTMC_OK && !(*out = tokenizer_new(alloc, NCTMC_TOKENIZER_BYTES, 256)))
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    return st;
}

/* ---- the text file ------------------------------------------------------- */

NCTMC_API nctmc_status nctmc_tokenizer_save(nctmc_tokenizer *tok, const char *path)
{
    if (!tok)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char *err = tok->last_error;
    size_t err_size = sizeof tok->last_error;
    if (!path || !path[0])
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_tokenizer_save: no path");
    tokenizer_fields f;
    nctmc_status st = tokenizer_to_fields(tok, &f, err, err_size);
    if (st != NCTMC_OK)
        return st;
    file_atomic af;
    st = file_atomic_begin(&af, &tok->alloc, path, err, err_size);
    const char *header = tok->kind == NCTMC_TOKENIZER_BPE ? TOKENIZER_FILE_MAGIC_2 "\n"
                                                          : TOKENIZER_FILE_MAGIC "\n";
    if (st == NCTMC_OK)
        st = file_atomic_write(&af, header, strlen(header), err, err_size);
    for (int32_t i = 0; i < f.n && st == NCTMC_OK; i++) {
        st = file_atomic_write(&af, f.keys[i], strlen(f.keys[i]), err, err_size);
        if (st == NCTMC_OK)
            st = file_atomic_write(&af, " ", 1, err, err_size);
        if (st == NCTMC_OK)
            st = file_atomic_write(&af, f.values[i], strlen(f.values[i]), err, err_size);
        if (st == NCTMC_OK)
            st = file_atomic_write(&af, "\n", 1, err, err_size);
    }
    if (st == NCTMC_OK)
        st = file_atomic_commit(&af, err, err_size);
    else if (af.path)
        file_atomic_abort(&af);
    tokenizer_fields_free(&f);
    if (st == NCTMC_OK)
        tok->last_error[0] = '\0';
    return st;
}

/* The parsed lines of a tokenizer file: pointers into its (modified) text. */
typedef struct file_fields {
    int32_t n;
    const char *keys[TOKENIZER_MAX_FIELDS];
    const char *values[TOKENIZER_MAX_FIELDS];
} file_fields;

static const char *file_fields_get(const void *source, const char *key)
{
    const file_fields *ff = source;
    for (int32_t i = 0; i < ff->n; i++)
        if (strcmp(ff->keys[i], key) == 0)
            return ff->values[i];
    return NULL;
}

/* Splits "key value\n" lines in place; every key known and given once.
 * *version receives the file's version (1 or 2). */
static nctmc_status parse_lines(char *text, size_t size, file_fields *ff, int *version,
                                char *err, size_t err_size)
{
    size_t magic_len = strlen(TOKENIZER_FILE_MAGIC);
    *version = 0;
    if (size > magic_len && memcmp(text, TOKENIZER_FILE_MAGIC "\n", magic_len + 1) == 0)
        *version = 1;
    if (size > magic_len && memcmp(text, TOKENIZER_FILE_MAGIC_2 "\n", magic_len + 1) == 0)
        *version = 2;
    if (*version == 0)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "not a tokenizer file (it must begin \"" TOKENIZER_FILE_MAGIC
                           "\" or \"" TOKENIZER_FILE_MAGIC_2 "\")");
    if (memchr(text, '\0', size) || text[size - 1] != '\n')
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "a tokenizer file is text ending with a newline");
    ff->n = 0;
    for (char *line = text + magic_len + 1; line < text + size;) {
        char *end = strchr(line, '\n');
        *end = '\0';
        char *space = strchr(line, ' ');
        if (!space || space == line || ff->n == TOKENIZER_MAX_FIELDS)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer file: line \"%.40s\" is not \"key value\"", line);
        *space = '\0';
        if (!tokenizer_is_field(line) || file_fields_get(ff, line))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer file: key \"%.40s\" is unknown or repeated", line);
        ff->keys[ff->n] = line;
        ff->values[ff->n++] = space + 1;
        line = end + 1;
    }
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_tokenizer_load(nctmc_context *ctx, const char *path,
                                            nctmc_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_tokenizer_load: path and out must not be NULL");
    char err[NCTMC_ERROR_SIZE];
    uint8_t *data = NULL;
    size_t size = 0;
    const nctmc_allocator *alloc = ctx ? &ctx->alloc : NULL;
    nctmc_status st =
        file_read_all(alloc, path, TOKENIZER_FILE_MAX, &data, &size, err, sizeof err);
    file_fields ff;
    int version = 0;
    if (st == NCTMC_OK)
        st = parse_lines((char *)data, size, &ff, &version, err, sizeof err);
    if (st == NCTMC_OK)
        st = tokenizer_from_fields(alloc, file_fields_get, &ff, out, err, sizeof err);
    if (st == NCTMC_OK && ((*out)->kind == NCTMC_TOKENIZER_BPE) != (version == 2)) {
        st = fail_format(err, sizeof err, NCTMC_ERR_FORMAT,
                         "a tokenizer file of version %d cannot hold a %s tokenizer (version "
                         "1: bytes, chars, image; version 2: bpe)",
                         version, kind_names[(*out)->kind]);
        nctmc_tokenizer_free(*out);
        *out = NULL;
    }
    mem_free(alloc, data);
    if (st != NCTMC_OK)
        return ctx_report_fail(ctx, st, "tokenizer \"%.300s\": %s", path, err);
    ctx_report_ok(ctx);
    return NCTMC_OK;
}
