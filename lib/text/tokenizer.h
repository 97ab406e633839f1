/*
 * tokenizer.h — the tokenizer handle's internals, the codecs of each kind,
 * and the flat key/value form a tokenizer takes inside files (the
 * tokenizer file and checkpoint metadata; docs/formats.md).
 */
#ifndef NCTMC_TOKENIZER_H
#define NCTMC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/context.h"
#include "nctmc.h"

#define TOKENIZER_MAX_ALPHABET 65536
#define TOKENIZER_MAX_PIXELS 65536
#define TOKENIZER_MAX_LEVELS 65536
#define TOKENIZER_MAX_PLACEHOLDER 256   /* bytes of a mask placeholder */

struct nctmc_tokenizer {
    nctmc_tokenizer_kind kind;
    int32_t vocab;          /* data tokens: 256, the alphabet's size, or levels */
    uint32_t *alphabet;     /* CHARS: `vocab` code points, strictly increasing */
    int32_t width;          /* IMAGE */
    int32_t height;
    int32_t levels;
    int32_t pixel_chars;    /* IMAGE: characters per pixel in the ASCII picture */
    /* BPE: the model (tokenizer_bpe.h); `vocab` may exceed its token count
     * (padding: ids without text, which decode to nothing) */
    struct bpe_model *bpe;
    /* What decoding renders for token `vocab` (the mask token of a masked or
     * mixture model), or NULL: then that token is an error. Display only:
     * not part of the flat form. */
    char *mask_text;
    size_t mask_len;
    char last_error[NCTMC_ERROR_SIZE];
    /* where the tokenizer and its alphabet live: a copy of the allocator of
     * the context it was made with, the C library's without one */
    nctmc_allocator alloc;
};

/* A zeroed tokenizer of this kind and vocabulary (other fields for the
 * caller to fill) allocated from alloc (NULL = the C library), or NULL when
 * out of memory. */
nctmc_tokenizer *tokenizer_new(const nctmc_allocator *alloc, nctmc_tokenizer_kind kind,
                               int32_t vocab);

/* A deep copy (last_error cleared) allocated from alloc. */
nctmc_status tokenizer_clone(const nctmc_allocator *alloc, const nctmc_tokenizer *src,
                             nctmc_tokenizer **out);

/* True when `token` is the mask token and tok renders it as mask_text. */
static inline bool tokenizer_renders_mask(const nctmc_tokenizer *tok, int32_t token)
{
    return tok->mask_text != NULL && token == tok->vocab;
}

/* The error for token number i, which is outside the vocabulary (and not a
 * rendered mask token): names the index, and for the mask token says how to
 * render it. */
nctmc_status tokenizer_bad_token(nctmc_tokenizer *tok, size_t i, int32_t token);

/* The token of code point cp in a CHARS tokenizer's alphabet, or -1. */
int32_t tokenizer_char_index(const nctmc_tokenizer *tok, uint32_t cp);

/* Checks that tok's vocabulary is the data tokens of a model with this
 * configuration: S for the uniform process, S - 1 (all but the mask)
 * otherwise. */
nctmc_status tokenizer_check_model(const nctmc_tokenizer *tok, const nctmc_model_config *cfg,
                                   nctmc_status status, char *err, size_t err_size);

/* ---- codecs (one per kind) ------------------------------------------------
 * Encoders validate the whole text and count its tokens; they write tokens
 * only when `tokens` is not NULL (the caller has checked the capacity).
 * Decoders likewise count bytes and write text (without a NUL) only when
 * `text` is not NULL. Errors name a byte offset or token index. */

nctmc_status tokenizer_encode_chars(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                                    int32_t *tokens, size_t *n_tokens);
nctmc_status tokenizer_decode_chars(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                    char *text, size_t *n_bytes);

/* Characters per pixel for `levels` grey levels (1 up to 70 levels). */
int32_t tokenizer_image_pixel_chars(int32_t levels);
nctmc_status tokenizer_encode_image(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                                    int32_t *tokens, size_t *n_tokens);
nctmc_status tokenizer_decode_image(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                    char *text, size_t *n_bytes);

nctmc_status tokenizer_encode_bpe(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                                  int32_t *tokens, size_t *n_tokens);
nctmc_status tokenizer_decode_bpe(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                  char *text, size_t *n_bytes);

/* Appends the mask placeholder at text + *len (when text is not NULL). */
nctmc_status tokenizer_put_mask(nctmc_tokenizer *tok, char *text, size_t *len);

/* ---- the flat form ----------------------------------------------------- */

#define TOKENIZER_MAX_FIELDS 6

/* Keys are the constant names below; values come from alloc. */
typedef struct tokenizer_fields {
    int32_t n;
    const char *keys[TOKENIZER_MAX_FIELDS];
    char *values[TOKENIZER_MAX_FIELDS];
    nctmc_allocator alloc;
} tokenizer_fields;

/* True for the keys a tokenizer's flat form may have: "kind",
 * "vocab_size", "alphabet", "width", "height", "levels", "bpe_tokens",
 * "bpe_merges", "bpe_added". */
bool tokenizer_is_field(const char *key);

/* The flat form of tok: kind and vocab_size, then the alphabet (CHARS, as
 * lowercase hexadecimal code points separated by one space), width,
 * height and levels (IMAGE), or bpe_tokens, bpe_merges and bpe_added (BPE,
 * tokenizer_bpe_io.c). The values come from tok's allocator. */
nctmc_status tokenizer_to_fields(const nctmc_tokenizer *tok, tokenizer_fields *out, char *err,
                                 size_t err_size);
void tokenizer_fields_free(tokenizer_fields *fields);

/* Looks a field up by key in whatever holds the flat form; NULL if absent. */
typedef const char *(*tokenizer_get_fn)(const void *source, const char *key);

/* Builds a tokenizer (allocated from alloc) from its flat form, checking
 * every field strictly (a field of another kind present, values out of
 * range, an alphabet not strictly increasing): NCTMC_ERR_FORMAT with the
 * reason. */
nctmc_status tokenizer_from_fields(const nctmc_allocator *alloc, tokenizer_get_fn get,
                                   const void *source, nctmc_tokenizer **out, char *err,
                                   size_t err_size);

#endif /* NCTMC_TOKENIZER_H */
