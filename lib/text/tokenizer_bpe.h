/*
 * tokenizer_bpe.h — GPT-2 style byte-level BPE: the model (token byte
 * strings, merges by rank, added tokens matched literally), its encoder and
 * decoder, the GPT-2 pre-tokenizer and the byte-to-unicode map that
 * vocab.json / tokenizer.json spell tokens with.
 */
#ifndef NCTMC_TOKENIZER_BPE_H
#define NCTMC_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "bpe_added.h"
#include "nctmc.h"

/* Limits of what a file may describe: ids are int32 and a merge pair is
 * hashed as two 32-bit halves. */
#define BPE_MAX_TOKENS (1 << 24)
#define BPE_MAX_TOKEN_BYTES 4096

/* One merge in the pair table: `left`, `right` merge into `result` at
 * priority `rank` (lower first). */
typedef struct bpe_merge_slot {
    uint64_t key; /* (uint64_t)left << 32 | right; BPE_EMPTY_KEY when free */
    int32_t rank;
    int32_t result;
} bpe_merge_slot;

typedef struct bpe_cache bpe_cache;
typedef struct bpe_work bpe_work;

typedef struct bpe_model {
    int32_t n_tokens;       /* ids 0 .. n_tokens - 1 have text */
    uint32_t *offsets;      /* n_tokens + 1: token i is bytes[offsets[i] .. offsets[i+1]) */
    uint8_t *bytes;
    uint8_t *special;       /* n_tokens flags: an added token, matched literally */
    int32_t byte_token[256]; /* the token of each single byte, or -1 */
    int32_t n_merges;
    int32_t *merges;        /* 2 * n_merges: left, right ids in rank order */
    bpe_merge_slot *table;  /* open addressing, table_mask + 1 slots */
    uint32_t table_mask;
    int32_t n_specials;
    bpe_added added;        /* the added-token matcher (bpe_added.h) */
    /* per handle, mutable: a cache of short words, the merge scratch, the
     * added-token window (BPE_ADDED_WINDOW ids) and the matcher's step
     * count (tests check it is linear in the text); clones start without
     * them */
    bpe_cache *cache;
    bpe_work *work;
    int32_t *added_best;
    uint64_t added_steps;
    nctmc_allocator alloc;
} bpe_model;

/* What a loader hands bpe_model_build(): every token's bytes (id order),
 * which are added tokens, and the merges as id pairs in rank order. The
 * arrays stay the caller's. */
typedef struct bpe_parts {
    int32_t n_tokens;
    const uint32_t *offsets;
    const uint8_t *bytes;
    const uint8_t *special;
    int32_t n_merges;
    const int32_t *merges;
} bpe_parts;

/* Builds the model, checking what the encoder relies on: tokens non-empty
 * and at most BPE_MAX_TOKEN_BYTES, no two ordinary tokens with the same
 * bytes, merges naming ordinary tokens whose concatenation is a token, no
 * merge listed twice. NCTMC_ERR_FORMAT with the reason. */
nctmc_status bpe_model_build(const nctmc_allocator *alloc, const bpe_parts *parts,
                             bpe_model **out, char *err, size_t err_size);

void bpe_model_free(bpe_model *m);

/* A deep copy (without cache or scratch) from alloc; NULL when out of
 * memory. */
bpe_model *bpe_model_clone(const nctmc_allocator *alloc, const bpe_model *m);

/* The bytes of token id (0 <= id < n_tokens). */
static inline const uint8_t *bpe_token_bytes(const bpe_model *m, int32_t id, size_t *len)
{
    *len = m->offsets[id + 1] - m->offsets[id];
    return m->bytes + m->offsets[id];
}

/*
 * Encodes text[0 .. n): added tokens split the text first (leftmost, then
 * longest), each piece between them is pre-tokenized with the GPT-2 pattern
 * and each pre-token merged by rank. Writes ids to tokens and, when `starts`
 * is not NULL, each token's first byte offset in text (a token covers
 * starts[k] .. starts[k] + its byte length); both may be NULL to count, and
 * otherwise hold at least n entries (a token covers at least one byte).
 * Fails (NCTMC_ERR_INVALID_ARGUMENT, message in err) only for a byte the
 * vocabulary has no token for, or out of memory.
 */
nctmc_status bpe_encode(bpe_model *m, const uint8_t *text, size_t n, int32_t *tokens,
                        size_t *starts, size_t *n_tokens, char *err, size_t err_size);

/* ---- the GPT-2 pre-tokenizer (bpe_pretokenize.c) ------------------------ */

/*
 * The end of the pre-token starting at s[i] of the piece s[0 .. n), as
 * `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
 * matches it (leftmost-first alternation, greedy). A byte that does not
 * start valid UTF-8 counts as one character of class "other".
 */
size_t bpe_pretoken_end(const uint8_t *s, size_t n, size_t i);

/* GPT-2's byte-to-unicode map: the code point that stands for byte b in
 * vocab.json, merges.txt and tokenizer.json. */
uint32_t bpe_byte_to_unicode(uint8_t b);

/* The inverse: the byte code point cp stands for, or -1. */
int32_t bpe_unicode_to_byte(uint32_t cp);

#endif /* NCTMC_TOKENIZER_BPE_H */
