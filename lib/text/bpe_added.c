/*
 * bpe_added.c — the added-token matcher (bpe_added.h): an Aho–Corasick
 * automaton over the added tokens reversed, built once at load time, and
 * its backward scan that gives the longest added token at each position.
 *
 * Building: a trie of the reversed tokens (children found through a hash
 * of (state, byte) while it grows), then its edges sorted per state
 * (counting sorts, no comparisons), then failure links and each state's
 * longest token in breadth-first order. Memory is bounded by
 * BPE_ADDED_MAX_BYTES: at most about 70 bytes per state while building
 * (140 MB for the largest list allowed), 17 after.
 */
#include "bpe_added.h"

#include <string.h>

#include "base/fail.h"

#define NO_STATE UINT32_MAX

/* ---- building ---------------------------------------------------------------- */

typedef struct trie_build {
    const nctmc_allocator *alloc;
    uint32_t n_states, cap;
    uint32_t *parent;
    uint8_t *byte;
    uint32_t *depth;
    int32_t *term;     /* the token that ends here, or -1 */
    uint32_t *keys;    /* hash of edges: (parent << 8 | byte) + 1, 0 free */
    uint32_t *child;
    uint64_t mask;
} trie_build;

static void build_free(trie_build *t)
{
    mem_free(t->alloc, t->parent);
    mem_free(t->alloc, t->byte);
    mem_free(t->alloc, t->depth);
    mem_free(t->alloc, t->term);
    mem_free(t->alloc, t->keys);
    mem_free(t->alloc, t->child);
}

static inline uint64_t edge_hash(uint32_t key)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return h ^ h >> 29;
}

/* The child of state p by byte c, created when absent. */
static uint32_t trie_step(trie_build *t, uint32_t p, uint8_t c)
{
    uint32_t key = (p << 8 | c) + 1; /* p < 2^22: no overflow */
    uint64_t i = edge_hash(key) & t->mask;
    while (t->keys[i] != 0) {
        if (t->keys[i] == key)
            return t->child[i];
        i = (i + 1) & t->mask;
    }
    uint32_t s = t->n_states++;
    t->parent[s] = p;
    t->byte[s] = c;
    t->depth[s] = t->depth[p] + 1;
    t->term[s] = -1;
    t->keys[i] = key;
    t->child[i] = s;
    return s;
}

static nctmc_status build_alloc(trie_build *t, uint64_t total, char *err, size_t err_size)
{
    t->cap = (uint32_t)total + 1;
    uint64_t slots = 16;
    while (slots < 2 * (uint64_t)t->cap)
        slots <<= 1;
    t->mask = slots - 1;
    t->parent = mem_alloc(t->alloc, sizeof *t->parent * t->cap);
    t->byte = mem_alloc(t->alloc, t->cap);
    t->depth = mem_alloc(t->alloc, sizeof *t->depth * t->cap);
    t->term = mem_alloc(t->alloc, sizeof *t->term * t->cap);
    t->keys = mem_calloc(t->alloc, (size_t)slots, sizeof *t->keys);
    t->child = mem_alloc(t->alloc, sizeof *t->child * (size_t)slots);
    if (!t->parent || !t->byte || !t->depth || !t->term || !t->keys || !t->child)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the added-token automaton (%u states)", t->cap);
    t->n_states = 1;
    t->depth[0] = 0;
    t->term[0] = -1;
    t->parent[0] = NO_STATE;
    return NCTMC_OK;
}

/* Edges sorted by (state, byte): a counting sort by byte, then a stable one
 * by parent. */
static nctmc_status sort_edges(const trie_build *t, bpe_added *a, char *err, size_t err_size)
{
    uint32_t n = t->n_states, n_edges = n - 1;
    uint32_t *by_byte = mem_alloc(t->alloc, sizeof *by_byte * (n_edges + 1));
    a->edge_start = mem_calloc(t->alloc, (size_t)n + 1, sizeof *a->edge_start);
    a->edge_byte = mem_alloc(t->alloc, n_edges + 1);
    a->edge_to = mem_alloc(t->alloc, sizeof *a->edge_to * (n_edges + 1));
    if (!by_byte || !a->edge_start || !a->edge_byte || !a->edge_to) {
        mem_free(t->alloc, by_byte);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the added-token automaton");
    }
    uint32_t count[257] = {0};
    for (uint32_t s = 1; s < n; s++)
        count[t->byte[s] + 1]++;
    for (int b = 0; b < 256; b++)
        count[b + 1] += count[b];
    for (uint32_t s = 1; s < n; s++)
        by_byte[count[t->byte[s]]++] = s;
    for (uint32_t s = 1; s < n; s++)
        a->edge_start[t->parent[s] + 1]++;
    for (uint32_t s = 0; s < n; s++)
        a->edge_start[s + 1] += a->edge_start[s];
    /* fill each state's run in byte order, then shift the starts back */
    for (uint32_t k = 0; k < n_edges; k++) {
        uint32_t s = by_byte[k], at = a->edge_start[t->parent[s]]++;
        a->edge_byte[at] = t->byte[s];
        a->edge_to[at] = s;
    }
    for (uint32_t s = n; s > 0; s--)
        a->edge_start[s] = a->edge_start[s - 1];
    a->edge_start[0] = 0;
    mem_free(t->alloc, by_byte);
    return NCTMC_OK;
}

/* The child of s by byte c, or 0 (the root is nobody's child). */
static inline uint32_t next_state(const bpe_added *a, uint32_t s, uint8_t c)
{
    uint32_t lo = a->edge_start[s], hi = a->edge_start[s + 1];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a->edge_byte[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < a->edge_start[s + 1] && a->edge_byte[lo] == c ? a->edge_to[lo] : 0;
}

/* Failure links and longest tokens, states taken by depth (a counting sort). */
static nctmc_status link_states(const trie_build *t, bpe_added *a, char *err, size_t err_size)
{
    uint32_t n = t->n_states;
    uint32_t *order = mem_alloc(t->alloc, sizeof *order * n);
    uint32_t *count = mem_calloc(t->alloc, (size_t)a->max_len + 2, sizeof *count);
    a->fail = mem_alloc(t->alloc, sizeof *a->fail * n);
    a->longest = mem_alloc(t->alloc, sizeof *a->longest * n);
    if (!order || !count || !a->fail || !a->longest) {
        mem_free(t->alloc, order);
        mem_free(t->alloc, count);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the added-token automaton");
    }
    for (uint32_t s = 0; s < n; s++)
        count[t->depth[s] + 1]++;
    for (uint32_t d = 0; d <= a->max_len; d++)
        count[d + 1] += count[d];
    for (uint32_t s = 0; s < n; s++)
        order[count[t->depth[s]]++] = s;
    a->fail[0] = 0;
    a->longest[0] = -1;
    for (uint32_t k = 1; k < n; k++) {
        uint32_t v = order[k], p = t->parent[v], f = 0;
        if (p != 0)
            for (f = a->fail[p];; f = a->fail[f]) {
                uint32_t c = next_state(a, f, t->byte[v]);
                if (c != 0 || f == 0) {
                    f = c;
                    break;
                }
            }
        a->fail[v] = f;
        a->longest[v] = t->term[v] >= 0 ? t->term[v] : a->longest[f];
    }
    mem_free(t->alloc, order);
    mem_free(t->alloc, count);
    return NCTMC_OK;
}

nctmc_status bpe_added_build(const nctmc_allocator *alloc, const uint32_t *offsets,
                             const uint8_t *bytes, const int32_t *ids, int32_t n_ids,
                             bpe_added *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    if (n_ids <= 0)
        return NCTMC_OK;
    uint64_t total = 0;
    for (int32_t k = 0; k < n_ids; k++) {
        uint32_t len = offsets[ids[k] + 1] - offsets[ids[k]];
        total += len;
        out->max_len = len > out->max_len ? len : out->max_len;
    }
    if (total > BPE_ADDED_MAX_BYTES)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "BPE: the %d added tokens have %llu bytes together, more than the "
                           "%u a tokenizer may have",
                           n_ids, (unsigned long long)total, BPE_ADDED_MAX_BYTES);
    trie_build t = {.alloc = alloc};
    nctmc_status st = build_alloc(&t, total, err, err_size);
    for (int32_t k = 0; st == NCTMC_OK && k < n_ids; k++) {
        uint32_t s = 0;
        for (uint32_t i = offsets[ids[k] + 1]; i > offsets[ids[k]]; i--)
            s = trie_step(&t, s, bytes[i - 1]);
        if (t.term[s] < 0)
            t.term[s] = ids[k];
    }
    if (st == NCTMC_OK) {
        out->n_states = t.n_states;
        st = sort_edges(&t, out, err, err_size);
    }
    if (st == NCTMC_OK)
        st = link_states(&t, out, err, err_size);
    build_free(&t);
    if (st != NCTMC_OK)
        bpe_added_free(alloc, out);
    return st;
}

void bpe_added_free(const nctmc_allocator *alloc, bpe_added *a)
{
    mem_free(alloc, a->edge_start);
    mem_free(alloc, a->edge_byte);
    mem_free(alloc, a->edge_to);
    mem_free(alloc, a->fail);
    mem_free(alloc, a->longest);
    memset(a, 0, sizeof *a);
}

static void *copy_of(const nctmc_allocator *alloc, const void *src, size_t bytes)
{
    void *p = mem_alloc(alloc, bytes ? bytes : 1);
    if (p && bytes)
        memcpy(p, src, bytes);
    return p;
}

int bpe_added_clone(const nctmc_allocator *alloc, const bpe_added *src, bpe_added *out)
{
    *out = *src;
    if (src->n_states == 0)
        return 1;
    size_t n = src->n_states;
    out->edge_start = copy_of(alloc, src->edge_start, sizeof *src->edge_start * (n + 1));
    out->edge_byte = copy_of(alloc, src->edge_byte, n - 1);
    out->edge_to = copy_of(alloc, src->edge_to, sizeof *src->edge_to * (n - 1));
    out->fail = copy_of(alloc, src->fail, sizeof *src->fail * n);
    out->longest = copy_of(alloc, src->longest, sizeof *src->longest * n);
    if (!out->edge_start || !out->edge_byte || !out->edge_to || !out->fail || !out->longest) {
        bpe_added_free(alloc, out);
        return 0;
    }
    return 1;
}

/* ---- scanning ---------------------------------------------------------------- */

uint64_t bpe_added_scan(const bpe_added *a, const uint8_t *text, size_t n, size_t from,
                        size_t to, int32_t *best)
{
    size_t end = to + a->max_len - 1 < n ? to + a->max_len - 1 : n;
    uint64_t steps = 0;
    uint32_t s = 0;
    for (size_t j = end; j-- > from;) {
        uint8_t c = text[j];
        for (;;) {
            steps++;
            uint32_t next = next_state(a, s, c);
            if (next != 0 || s == 0) {
                s = next;
                break;
            }
            s = a->fail[s];
        }
        if (j < to)
            best[j - from] = a->longest[s];
    }
    return steps;
}
