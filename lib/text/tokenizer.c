/*
 * tokenizer.c — the public tokenizer calls: creation of the byte, character
 * and image kinds, the byte and character codecs, the mask placeholder, and
 * the encode/decode buffer protocol shared by every kind, which hands each
 * kind to its codec (tokenizer_bpe_api.c, tokenizer_image.c). The handle's
 * memory and the errors every codec reports are tokenizer_handle.c.
 */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "core/ctx_report.h"
#include "tokenizer_bpe.h"
#include "base/utf8.h"

/* The allocator of whatever is made with ctx, which may be NULL. */
static const nctmc_allocator *ctx_alloc(const nctmc_context *ctx)
{
    return ctx ? &ctx->alloc : NULL;
}

NCTMC_API nctmc_status nctmc_tokenizer_create_bytes(nctmc_tokenizer **out)
{
    if (!out)
        return NCTMC_ERR_INVALID_ARGUMENT;
    *out = tokenizer_new(NULL, NCTMC_TOKENIZER_BYTES, 256);
    return *out ? NCTMC_OK : NCTMC_ERR_OUT_OF_MEMORY;
}

/* Marks every code point of the corpus in a bitmap (0x110000 bits). */
static nctmc_status mark_characters(nctmc_context *ctx, const uint8_t *s, size_t n,
                                    uint8_t *seen, int32_t *distinct)
{
    *distinct = 0;
    for (size_t at = 0; at < n;) {
        uint32_t cp;
        size_t len = utf8_decode(s + at, n - at, &cp);
        if (len == 0)
            return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                            "nctmc_tokenizer_create_chars: invalid UTF-8 at byte offset %zu",
                            at);
        if (!(seen[cp >> 3] & (1u << (cp & 7)))) {
            seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
            if (++*distinct > TOKENIZER_MAX_ALPHABET)
                return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                                "nctmc_tokenizer_create_chars: the corpus has more than %d "
                                "distinct characters",
                                TOKENIZER_MAX_ALPHABET);
        }
        at += len;
    }
    if (*distinct == 0)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                        "nctmc_tokenizer_create_chars: the corpus is empty");
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_tokenizer_create_chars(nctmc_context *ctx, const char *corpus,
                                                    size_t n_bytes, nctmc_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!out || (!corpus && n_bytes > 0))
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                        "nctmc_tokenizer_create_chars: out and corpus must not be NULL");
    uint8_t *seen = mem_calloc(ctx_alloc(ctx), (UTF8_MAX_CODE_POINT >> 3) + 1, 1);
    if (!seen)
        return ctx_report_fail(ctx, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t distinct = 0;
    nctmc_status st = mark_characters(ctx, (const uint8_t *)corpus, n_bytes, seen, &distinct);
    nctmc_tokenizer *tok = NULL;
    if (st == NCTMC_OK) {
        tok = tokenizer_new(ctx_alloc(ctx), NCTMC_TOKENIZER_CHARS, distinct);
        if (tok)
            tok->alphabet =
                mem_alloc(ctx_alloc(ctx), sizeof *tok->alphabet * (size_t)distinct);
        if (!tok || !tok->alphabet)
            st = ctx_report_fail(ctx, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == NCTMC_OK) {
        /* walking the bitmap upwards gives the alphabet in code-point order */
        int32_t k = 0;
        for (uint32_t cp = 0; cp <= UTF8_MAX_CODE_POINT; cp++)
            if (seen[cp >> 3] & (1u << (cp & 7)))
                tok->alphabet[k++] = cp;
        *out = tok;
        tok = NULL;
        ctx_report_ok(ctx);
    }
    nctmc_tokenizer_free(tok);
    mem_free(ctx_alloc(ctx), seen);
    return st;
}

NCTMC_API nctmc_status nctmc_tokenizer_create_image(nctmc_context *ctx, int32_t width,
                                                    int32_t height, int32_t levels,
                                                    nctmc_tokenizer **out)
{
    if (!out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                        "nctmc_tokenizer_create_image: out is NULL");
    *out = NULL;
    if (width < 1 || height < 1 || (int64_t)width * height > TOKENIZER_MAX_PIXELS)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                        "image tokenizer: width %d x height %d must be 1 .. %d pixels", width,
                        height, TOKENIZER_MAX_PIXELS);
    if (levels < 2 || levels > TOKENIZER_MAX_LEVELS)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                        "image tokenizer: levels = %d must be in [2, %d]", levels,
                        TOKENIZER_MAX_LEVELS);
    nctmc_tokenizer *tok = tokenizer_new(ctx_alloc(ctx), NCTMC_TOKENIZER_IMAGE, levels);
    if (!tok)
        return ctx_report_fail(ctx, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    tok->width = width;
    tok->height = height;
    tok->levels = levels;
    tok->pixel_chars = tokenizer_image_pixel_chars(levels);
    *out = tok;
    ctx_report_ok(ctx);
    return NCTMC_OK;
}

NCTMC_API nctmc_tokenizer_kind nctmc_tokenizer_get_kind(const nctmc_tokenizer *tok)
{
    return tok ? tok->kind : NCTMC_TOKENIZER_BYTES;
}

NCTMC_API int32_t nctmc_tokenizer_vocab_size(const nctmc_tokenizer *tok)
{
    return tok ? tok->vocab : 0;
}

NCTMC_API nctmc_status nctmc_tokenizer_image_shape(const nctmc_tokenizer *tok, int32_t *width,
                                                   int32_t *height, int32_t *levels)
{
    if (!tok)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (tok->kind != NCTMC_TOKENIZER_IMAGE)
        return FAIL_INTO((nctmc_tokenizer *)tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_image_shape: not an image tokenizer");
    if (width)
        *width = tok->width;
    if (height)
        *height = tok->height;
    if (levels)
        *levels = tok->levels;
    return NCTMC_OK;
}

NCTMC_API const char *nctmc_tokenizer_last_error(const nctmc_tokenizer *tok)
{
    return tok ? tok->last_error : "";
}

/* An image pixel is one character (repeated to the pixel's width): rows
 * keep their width, so a partial sample still reads as a picture. */
static nctmc_status check_placeholder(nctmc_tokenizer *tok, const char *text, size_t len)
{
    if (len > TOKENIZER_MAX_PLACEHOLDER)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_set_mask_placeholder: the placeholder is longer "
                         "than %d bytes",
                         TOKENIZER_MAX_PLACEHOLDER);
    size_t bad = utf8_first_invalid((const uint8_t *)text, len);
    if (bad < len)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_set_mask_placeholder: invalid UTF-8 at byte offset "
                         "%zu",
                         bad);
    uint32_t cp;
    if (tok->kind == NCTMC_TOKENIZER_IMAGE &&
        (len == 0 || utf8_decode((const uint8_t *)text, len, &cp) != len || text[0] == '\n'))
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_set_mask_placeholder: an image tokenizer's "
                         "placeholder must be exactly one character (not a newline): it "
                         "stands for one pixel");
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_tokenizer_set_mask_placeholder(nctmc_tokenizer *tok,
                                                            const char *text)
{
    if (!tok)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char *copy = NULL;
    size_t len = 0;
    if (text) {
        /* bounded: a long text is refused without measuring all of it */
        len = strnlen(text, TOKENIZER_MAX_PLACEHOLDER + 1);
        nctmc_status st = check_placeholder(tok, text, len);
        if (st != NCTMC_OK)
            return st;
        copy = mem_alloc(&tok->alloc, len + 1);
        if (!copy)
            return FAIL_INTO(tok, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
        memcpy(copy, text, len);
        copy[len] = '\0';
    }
    mem_free(&tok->alloc, tok->mask_text);
    tok->mask_text = copy;
    tok->mask_len = len;
    tok->last_error[0] = '\0';
    return NCTMC_OK;
}

int32_t tokenizer_char_index(const nctmc_tokenizer *tok, uint32_t cp)
{
    int32_t lo = 0, hi = tok->vocab - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (tok->alphabet[mid] == cp)
            return mid;
        if (tok->alphabet[mid] < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* ---- the byte and character codecs -------------------------------------- */

static nctmc_status encode_bytes(const uint8_t *text, size_t n, int32_t *tokens,
                                 size_t *n_tokens)
{
    if (tokens)
        for (size_t i = 0; i < n; i++)
            tokens[i] = text[i];
    *n_tokens = n;
    return NCTMC_OK;
}

static nctmc_status decode_bytes(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                 char *text, size_t *n_bytes)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokenizer_renders_mask(tok, tokens[i])) {
            nctmc_status st = tokenizer_put_mask(tok, text, &len);
            if (st != NCTMC_OK)
                return st;
            continue;
        }
        if (tokens[i] < 0 || tokens[i] > 255)
            return tokenizer_bad_token(tok, i, tokens[i]);
        if (text)
            text[len] = (char)(uint8_t)tokens[i];
        len++;
    }
    *n_bytes = len;
    return NCTMC_OK;
}

nctmc_status tokenizer_encode_chars(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                                    int32_t *tokens, size_t *n_tokens)
{
    size_t count = 0;
    for (size_t at = 0; at < n; count++) {
        uint32_t cp;
        size_t len = utf8_decode(text + at, n - at, &cp);
        if (len == 0)
            return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "invalid UTF-8 at byte offset %zu",
                             at);
        int32_t id = tokenizer_char_index(tok, cp);
        if (id < 0)
            return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                             "character U+%04X at byte offset %zu is not in the alphabet",
                             (unsigned)cp, at);
        if (tokens)
            tokens[count] = id;
        at += len;
    }
    *n_tokens = count;
    return NCTMC_OK;
}

nctmc_status tokenizer_decode_chars(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                    char *text, size_t *n_bytes)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokenizer_renders_mask(tok, tokens[i])) {
            nctmc_status st = tokenizer_put_mask(tok, text, &len);
            if (st != NCTMC_OK)
                return st;
            continue;
        }
        if (tokens[i] < 0 || tokens[i] >= tok->vocab)
            return tokenizer_bad_token(tok, i, tokens[i]);
        uint32_t cp = tok->alphabet[tokens[i]];
        /* n tokens give at most 4n bytes: overflow needs n > SIZE_MAX / 4 */
        if (!checked_add(len, utf8_length(cp), &len))
            return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "decoded text is too long");
        if (text)
            utf8_encode(cp, (uint8_t *)text + len - utf8_length(cp));
    }
    *n_bytes = len;
    return NCTMC_OK;
}

/* ---- the buffer protocol ------------------------------------------------- */

static nctmc_status encode_any(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                               int32_t *tokens, size_t *n_tokens)
{
    switch (tok->kind) {
    case NCTMC_TOKENIZER_BYTES: return encode_bytes(text, n, tokens, n_tokens);
    case NCTMC_TOKENIZER_CHARS: return tokenizer_encode_chars(tok, text, n, tokens, n_tokens);
    case NCTMC_TOKENIZER_IMAGE: return tokenizer_encode_image(tok, text, n, tokens, n_tokens);
    case NCTMC_TOKENIZER_BPE: return tokenizer_encode_bpe(tok, text, n, tokens, n_tokens);
    }
    return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "unknown tokenizer kind");
}

static nctmc_status decode_any(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                               char *text, size_t *n_bytes)
{
    switch (tok->kind) {
    case NCTMC_TOKENIZER_BYTES: return decode_bytes(tok, tokens, n, text, n_bytes);
    case NCTMC_TOKENIZER_CHARS: return tokenizer_decode_chars(tok, tokens, n, text, n_bytes);
    case NCTMC_TOKENIZER_IMAGE: return tokenizer_decode_image(tok, tokens, n, text, n_bytes);
    case NCTMC_TOKENIZER_BPE: return tokenizer_decode_bpe(tok, tokens, n, text, n_bytes);
    }
    return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "unknown tokenizer kind");
}

/* Encoding runs twice — count and validate, then write — so nothing is
 * written unless the whole text is valid and fits. BPE is the exception
 * when it cannot fail on the text: its vocabulary has a token for every
 * byte, so every text is valid, and it gives at most one token per byte,
 * so a buffer of n_bytes tokens fits any result — then one pass does. */
static bool encode_in_one_pass(const nctmc_tokenizer *tok, size_t n_bytes, size_t capacity)
{
    if (tok->kind != NCTMC_TOKENIZER_BPE || capacity < n_bytes)
        return false;
    for (int b = 0; b < 256; b++)
        if (tok->bpe->byte_token[b] < 0)
            return false;
    return true;
}

NCTMC_API nctmc_status nctmc_tokenizer_encode(nctmc_tokenizer *tok, const char *text,
                                              size_t n_bytes, int32_t *tokens,
                                              size_t capacity, size_t *n_tokens)
{
    if (!tok)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!n_tokens || (!text && n_bytes > 0) || (!tokens && capacity > 0))
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_encode: n_tokens, text (unless empty) and tokens "
                         "(unless capacity is 0) must not be NULL");
    *n_tokens = 0;
    size_t count = 0;
    if (tokens && encode_in_one_pass(tok, n_bytes, capacity)) {
        nctmc_status st = encode_any(tok, (const uint8_t *)text, n_bytes, tokens, &count);
        if (st == NCTMC_OK) {
            *n_tokens = count;
            tok->last_error[0] = '\0';
        }
        return st;
    }
    nctmc_status st = encode_any(tok, (const uint8_t *)text, n_bytes, NULL, &count);
    if (st != NCTMC_OK)
        return st;
    *n_tokens = count;
    if (!tokens) {
        tok->last_error[0] = '\0';
        return NCTMC_OK;
    }
    if (capacity < count)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "the text needs %zu tokens, the buffer holds %zu", count, capacity);
    st = encode_any(tok, (const uint8_t *)text, n_bytes, tokens, &count);
    if (st == NCTMC_OK)
        tok->last_error[0] = '\0';
    return st;
}

NCTMC_API nctmc_status nctmc_tokenizer_decode(nctmc_tokenizer *tok, const int32_t *tokens,
                                              size_t n_tokens, char *text, size_t capacity,
                                              size_t *n_bytes)
{
    if (!tok)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!n_bytes || (!tokens && n_tokens > 0) || (!text && capacity > 0))
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_decode: n_bytes, tokens (unless n_tokens is 0) and "
                         "text (unless capacity is 0) must not be NULL");
    *n_bytes = 0;
    size_t len = 0;
    nctmc_status st = decode_any(tok, tokens, n_tokens, NULL, &len);
    if (st != NCTMC_OK)
        return st;
    *n_bytes = len;
    if (!text) {
        tok->last_error[0] = '\0';
        return NCTMC_OK;
    }
    if (capacity <= len)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "the text needs %zu bytes and a NUL, the buffer holds %zu", len,
                         capacity);
    st = decode_any(tok, tokens, n_tokens, text, &len);
    if (st == NCTMC_OK) {
        text[len] = '\0';
        tok->last_error[0] = '\0';
    }
    return st;
}

/* ---- the model's tokenizer ----------------------------------------------- */

nctmc_status tokenizer_check_model(const nctmc_tokenizer *tok, const nctmc_model_config *cfg,
                                   nctmc_status status, char *err, size_t err_size)
{
    int32_t data = cfg->process == NCTMC_PROCESS_UNIFORM ? cfg->vocab_size
                                                         : cfg->vocab_size - 1;
    if (tok->vocab != data)
        return fail_format(err, err_size, status,
                           "the tokenizer has %d tokens, the model (S = %d, %s process) has %d "
                           "data tokens%s",
                           tok->vocab, cfg->vocab_size,
                           cfg->process == NCTMC_PROCESS_UNIFORM ? "uniform" : "mask-token",
                           data,
                           tok->kind == NCTMC_TOKENIZER_BPE && tok->vocab < data
                           ? " (nctmc_tokenizer_pad_vocab() pads a BPE vocabulary)"
                           : "");
    /* an image is exactly one sequence: a shorter one would make every
     * reader of the picture run past the tokens, a longer one draw garbage */
    if (tok->kind == NCTMC_TOKENIZER_IMAGE &&
        (int64_t)tok->width * tok->height != (int64_t)cfg->seq_len)
        return fail_format(err, err_size, status,
                           "the image tokenizer is %d x %d = %lld pixels, the model's sequences "
                           "are %d tokens: they must be equal",
                           tok->width, tok->height, (long long)tok->width * tok->height,
                           cfg->seq_len);
    return NCTMC_OK;
}
