/*
 * bpe_added.h — the added-token matcher of the BPE encoder: for every
 * position of a text, the longest added token that starts there, in time
 * linear in the text whatever the tokenizer file lists.
 *
 * An Aho–Corasick automaton over the added tokens' bytes reversed, run
 * backwards over a window of the text: the state at position i stands for
 * the longest text[i .. i + k) that ends some added token, so the longest
 * added token that is a prefix of it (precomputed per state) is the
 * longest one starting at i. A window of W positions costs W + (longest
 * token - 1) transitions and at most as many failure steps, so encoding
 * finds the leftmost, then longest added token (Hugging Face `tokenizers`'
 * LeftmostLongest) in O(text) for any list of added tokens.
 */
#ifndef NCTMC_BPE_ADDED_H
#define NCTMC_BPE_ADDED_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "nctmc.h"

/* The most bytes all added tokens together may have (2000 nested tokens
 * of 1 .. 2000 bytes fit): the automaton has at most this many states,
 * about 35 bytes each while it is built. */
#define BPE_ADDED_MAX_BYTES (1u << 21)

/* Positions matched per window (the scratch holds one int32 each). */
#define BPE_ADDED_WINDOW 65536u

typedef struct bpe_added {
    uint32_t n_states;    /* 0: no added tokens */
    uint32_t max_len;     /* bytes of the longest added token */
    uint32_t *edge_start; /* n_states + 1: state s's edges are [edge_start[s], edge_start[s+1]) */
    uint8_t *edge_byte;   /* n_states - 1 edges, by byte within a state */
    uint32_t *edge_to;
    uint32_t *fail;       /* n_states: the longest proper suffix that is a state */
    int32_t *longest;     /* n_states: the longest added token that is a prefix of the
                           * state's text (read forwards), or -1 */
} bpe_added;

/* Builds the automaton of tokens ids[0 .. n_ids): token id is
 * bytes[offsets[id] .. offsets[id + 1]), non-empty. Of tokens with the
 * same bytes the first listed wins. NCTMC_ERR_FORMAT when they have more
 * than BPE_ADDED_MAX_BYTES bytes together, with the figure. */
nctmc_status bpe_added_build(const nctmc_allocator *alloc, const uint32_t *offsets,
                             const uint8_t *bytes, const int32_t *ids, int32_t n_ids,
                             bpe_added *out, char *err, size_t err_size);

void bpe_added_free(const nctmc_allocator *alloc, bpe_added *a);

/* A deep copy; false when out of memory (then *out holds nothing). */
int bpe_added_clone(const nctmc_allocator *alloc, const bpe_added *src, bpe_added *out);

/*
 * For every i in [from, to): best[i - from] = the id of the longest added
 * token text[i ..] starts with, or -1 (text has n bytes, from < to <= n).
 * Returns the automaton steps taken (transitions plus failure steps), at
 * most 2 (to - from + max_len).
 */
uint64_t bpe_added_scan(const bpe_added *a, const uint8_t *text, size_t n, size_t from,
                        size_t to, int32_t *best);

#endif /* NCTMC_BPE_ADDED_H */
