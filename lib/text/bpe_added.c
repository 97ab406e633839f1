/*
 * bpe_added.c — the added-token matcher (bpe_added.h): an Aho–Corasick
 * automaton over the added tokens reversed, built once at load time, and
 * its backward scan that gives the longest added token at each position.
 *
 * Building: the tokens sorted by their bytes read backwards (a merge sort),
 * the trie of the reversed tokens from that order (each token shares the
 * path of the one before as far as they agree), its edges sorted per state
 * (counting sorts), then failure links and each state's longest token in
 * breadth-first order. No hashing, so no list of tokens can make building
 * slower than O(bytes log tokens). Memory is bounded by
 * BPE_ADDED_MAX_BYTES: about 35 bytes per state while building (70 MB for
 * the largest list allowed), 17 after.
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
} trie_build;

static void build_free(trie_build *t)
{
    mem_free(t->alloc, t->parent);
    mem_free(t->alloc, t->byte);
    mem_free(t->alloc, t->depth);
    mem_free(t->alloc, t->term);
}

static nctmc_status build_alloc(trie_build *t, uint64_t total, char *err, size_t err_size)
{
    t->cap = (uint32_t)total + 1;
    t->parent = mem_alloc(t->alloc, sizeof *t->parent * t->cap);
    t->byte = mem_alloc(t->alloc, t->cap);
    t->depth = mem_alloc(t->alloc, sizeof *t->depth * t->cap);
    t->term = mem_alloc(t->alloc, sizeof *t->term * t->cap);
    if (!t->parent || !t->byte || !t->depth || !t->term)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the added-token automaton (%u states)", t->cap);
    t->n_states = 1;
    t->depth[0] = 0;
    t->term[0] = -1;
    t->parent[0] = NO_STATE;
    return NCTMC_OK;
}

/* The tokens' bytes, read backwards. */
typedef struct reversed {
    const uint32_t *offsets;
    const uint8_t *bytes;
} reversed;

/* Compares tokens a and b read backwards; ties go to the earlier listed
 * (lower index k). */
static int compare_reversed(const reversed *rv, const int32_t *ids, int32_t a, int32_t b)
{
    uint32_t ia = rv->offsets[ids[a] + 1], ea = rv->offsets[ids[a]];
    uint32_t ib = rv->offsets[ids[b] + 1], eb = rv->offsets[ids[b]];
    for (; ia > ea && ib > eb; ia--, ib--)
        if (rv->bytes[ia - 1] != rv->bytes[ib - 1])
            return rv->bytes[ia - 1] < rv->bytes[ib - 1] ? -1 : 1;
    if (ia > ea || ib > eb)
        return ia > ea ? 1 : -1; /* the shorter, a prefix of the other, first */
    return a < b ? -1 : a > b;
}

/* Sorts order[0 .. n) (indices into ids) by the tokens read backwards: a
 * merge sort, O(n log n) comparisons whatever the tokens. */
static void sort_reversed(const reversed *rv, const int32_t *ids, int32_t *order,
                          int32_t *scratch, int32_t n)
{
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = lo + width < n ? lo + width : n;
            int32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                scratch[k++] = compare_reversed(rv, ids, order[i], order[j]) <= 0 ? order[i++]
                                                                                  : order[j++];
            while (i < mid)
                scratch[k++] = order[i++];
            while (j < hi)
                scratch[k++] = order[j++];
        }
        memcpy(order, scratch, sizeof *order * (size_t)n);
    }
}

/* The trie of the tokens read backwards, built from them in sorted order:
 * each shares its path with the one before as far as they agree and adds
 * states for the rest, so the work is the total of their bytes. */
static nctmc_status build_trie(trie_build *t, const reversed *rv, const int32_t *ids,
                               int32_t n_ids, uint32_t max_len, char *err, size_t err_size)
{
    int32_t *order = mem_alloc(t->alloc, sizeof *order * (size_t)n_ids);
    int32_t *scratch = mem_alloc(t->alloc, sizeof *scratch * (size_t)n_ids);
    uint32_t *path = mem_alloc(t->alloc, sizeof *path * ((size_t)max_len + 1));
    if (!order || !scratch || !path) {
        mem_free(t->alloc, order);
        mem_free(t->alloc, scratch);
        mem_free(t->alloc, path);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the added-token automaton");
    }
    for (int32_t k = 0; k < n_ids; k++)
        order[k] = k;
    sort_reversed(rv, ids, order, scratch, n_ids);
    path[0] = 0; /* path[d]: the state at depth d of the previous token */
    uint32_t prev_len = 0;
    int32_t prev = -1;
    for (int32_t k = 0; k < n_ids; k++) {
        int32_t id = ids[order[k]];
        uint32_t start = rv->offsets[id], len = rv->offsets[id + 1] - start;
        uint32_t common = 0; /* bytes shared with the previous token, from the end */
        if (prev >= 0) {
            uint32_t p_end = rv->offsets[prev + 1];
            while (common < len && common < prev_len &&
                   rv->bytes[start + len - 1 - common] == rv->bytes[p_end - 1 - common])
                common++;
        }
        for (uint32_t d = common; d < len; d++) {
            uint32_t s = t->n_states++;
            t->parent[s] = path[d];
            t->byte[s] = rv->bytes[start + len - 1 - d];
            t->depth[s] = d + 1;
            t->term[s] = -1;
            path[d + 1] = s;
        }
        if (t->term[path[len]] < 0) /* equal tokens: the first listed */
            t->term[path[len]] = id;
        prev = id;
        prev_len = len;
    }
    mem_free(t->alloc, order);
    mem_free(t->alloc, scratch);
    mem_free(t->alloc, path);
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
    reversed rv = {offsets, bytes};
    nctmc_status st = build_alloc(&t, total, err, err_size);
    if (st == NCTMC_OK)
        st = build_trie(&t, &rv, ids, n_ids, out->max_len, err, err_size);
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
