/*
 * tokenizer_bpe.c — the byte-level BPE model: building and checking it,
 * and encoding (added tokens, found by the automaton of bpe_added.c, then
 * pre-tokens, merges by rank).
 *
 * Merging follows Hugging Face `tokenizers` (models/bpe/word.rs) exactly,
 * because ids must match it: a min-heap of candidate pairs ordered by
 * (rank, position), an entry is applied when the pair now at its position
 * still merges into the same token, and each merge proposes the pairs it
 * forms with its neighbours. O(m log m) for a pre-token of m bytes, so a
 * megabyte without spaces is one long word and still fast. Short words are
 * cached per handle.
 */
#include "tokenizer_bpe.h"

#include <stdio.h>
#include <string.h>

#include "base/checked.h"
#include "core/context.h"

#define BPE_EMPTY_KEY UINT64_MAX

/* ---- hashing ------------------------------------------------------------- */

static inline uint32_t hash_bytes(const uint8_t *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

static inline uint32_t hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

/* The smallest power of two >= 2 n (load factor at most 1/2). */
static uint32_t table_size(int32_t n)
{
    uint32_t size = 16;
    while (size < 2u * (uint32_t)n)
        size <<= 1;
    return size;
}

static inline const bpe_merge_slot *find_merge(const bpe_model *m, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint32_t i = hash_pair(key) & m->table_mask;; i = (i + 1) & m->table_mask) {
        const bpe_merge_slot *s = &m->table[i];
        if (s->key == key)
            return s;
        if (s->key == BPE_EMPTY_KEY)
            return NULL;
    }
}

/* ---- building -------------------------------------------------------------- */

/* An index from the bytes of the ordinary tokens to their ids (building
 * only: merges name their result by its bytes). */
typedef struct byte_index {
    int32_t *slots; /* -1 free */
    uint32_t mask;
} byte_index;

static int32_t index_find(const byte_index *ix, const bpe_parts *p, const uint8_t *s, size_t n)
{
    for (uint32_t i = hash_bytes(s, n) & ix->mask;; i = (i + 1) & ix->mask) {
        int32_t id = ix->slots[i];
        if (id < 0)
            return -1;
        size_t len = p->offsets[id + 1] - p->offsets[id];
        if (len == n && memcmp(p->bytes + p->offsets[id], s, n) == 0)
            return id;
    }
}

static nctmc_status index_build(const nctmc_allocator *alloc, const bpe_parts *p,
                                byte_index *ix, char *err, size_t err_size)
{
    uint32_t size = table_size(p->n_tokens);
    ix->mask = size - 1;
    ix->slots = mem_alloc(alloc, sizeof *ix->slots * size);
    if (!ix->slots)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    memset(ix->slots, 0xff, sizeof *ix->slots * size);
    for (int32_t id = 0; id < p->n_tokens; id++) {
        if (p->special[id])
            continue;
        const uint8_t *s = p->bytes + p->offsets[id];
        size_t n = p->offsets[id + 1] - p->offsets[id];
        int32_t other = index_find(ix, p, s, n);
        if (other >= 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "BPE: tokens %d and %d have the same bytes", other, id);
        uint32_t i = hash_bytes(s, n) & ix->mask;
        while (ix->slots[i] >= 0)
            i = (i + 1) & ix->mask;
        ix->slots[i] = id;
    }
    return NCTMC_OK;
}

static nctmc_status check_tokens(const bpe_parts *p, char *err, size_t err_size)
{
    if (p->n_tokens < 1 || p->n_tokens > BPE_MAX_TOKENS || p->offsets[0] != 0)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "BPE: %d tokens is not in [1, %d]", p->n_tokens, BPE_MAX_TOKENS);
    if (p->n_merges < 0 || p->n_merges > BPE_MAX_TOKENS)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "BPE: %d merges is not in [0, %d]", p->n_merges, BPE_MAX_TOKENS);
    for (int32_t id = 0; id < p->n_tokens; id++) {
        uint32_t len = p->offsets[id + 1] - p->offsets[id];
        if (p->offsets[id + 1] < p->offsets[id] || len == 0 || len > BPE_MAX_TOKEN_BYTES)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "BPE: token %d has %u bytes (1 .. %d allowed)", id, len,
                               BPE_MAX_TOKEN_BYTES);
    }
    return NCTMC_OK;
}

static void put_merge(bpe_model *m, uint64_t key, int32_t rank, int32_t result)
{
    uint32_t i = hash_pair(key) & m->table_mask;
    while (m->table[i].key != BPE_EMPTY_KEY)
        i = (i + 1) & m->table_mask;
    m->table[i] = (bpe_merge_slot){key, rank, result};
}

/* Enters every merge into the pair table, finding its result by bytes. */
static nctmc_status build_merges(bpe_model *m, const bpe_parts *p, const byte_index *ix,
                                 char *err, size_t err_size)
{
    uint8_t joined[2 * BPE_MAX_TOKEN_BYTES];
    for (int32_t r = 0; r < p->n_merges; r++) {
        int32_t a = p->merges[2 * r], b = p->merges[2 * r + 1];
        if (a < 0 || a >= p->n_tokens || b < 0 || b >= p->n_tokens)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "BPE: merge %d names token %d, outside [0, %d)", r,
                               (a < 0 || a >= p->n_tokens) ? a : b, p->n_tokens);
        if (p->special[a] || p->special[b])
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "BPE: merge %d uses the added token %d", r,
                               p->special[a] ? a : b);
        size_t la = p->offsets[a + 1] - p->offsets[a], lb = p->offsets[b + 1] - p->offsets[b];
        memcpy(joined, p->bytes + p->offsets[a], la);
        memcpy(joined + la, p->bytes + p->offsets[b], lb);
        int32_t result = index_find(ix, p, joined, la + lb);
        if (result < 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "BPE: merge %d (%d %d) makes a token the vocabulary lacks", r,
                               a, b);
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        if (find_merge(m, a, b))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "BPE: merge %d (%d %d) is listed twice", r, a, b);
        put_merge(m, key, r, result);
    }
    return NCTMC_OK;
}

/* The added tokens' matcher, over their ids in id order (so that of two
 * with the same bytes the lower id wins, as before). */
static nctmc_status build_specials(bpe_model *m, char *err, size_t err_size)
{
    m->n_specials = 0;
    for (int32_t id = 0; id < m->n_tokens; id++)
        m->n_specials += m->special[id];
    if (m->n_specials == 0)
        return NCTMC_OK;
    int32_t *ids = mem_alloc(&m->alloc, sizeof *ids * (size_t)m->n_specials);
    if (!ids)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t k = 0;
    for (int32_t id = 0; id < m->n_tokens; id++)
        if (m->special[id])
            ids[k++] = id;
    nctmc_status st =
        bpe_added_build(&m->alloc, m->offsets, m->bytes, ids, k, &m->added, err, err_size);
    mem_free(&m->alloc, ids);
    return st;
}

static nctmc_status copy_parts(bpe_model *m, const bpe_parts *p, char *err, size_t err_size)
{
    size_t n = (size_t)p->n_tokens, n_bytes = p->offsets[n];
    m->n_tokens = p->n_tokens;
    m->n_merges = p->n_merges;
    m->offsets = mem_alloc(&m->alloc, sizeof *m->offsets * (n + 1));
    m->bytes = mem_alloc(&m->alloc, n_bytes);
    m->special = mem_alloc(&m->alloc, n);
    m->merges = mem_alloc(&m->alloc, sizeof *m->merges * 2 * (size_t)p->n_merges);
    m->table_mask = table_size(p->n_merges) - 1;
    m->table = mem_alloc(&m->alloc, sizeof *m->table * ((size_t)m->table_mask + 1));
    if (!m->offsets || !m->bytes || !m->special || !m->merges || !m->table)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(m->offsets, p->offsets, sizeof *m->offsets * (n + 1));
    memcpy(m->bytes, p->bytes, n_bytes);
    memcpy(m->special, p->special, n);
    if (p->n_merges > 0) /* a model may have no merges: then p->merges is NULL */
        memcpy(m->merges, p->merges, sizeof *m->merges * 2 * (size_t)p->n_merges);
    for (uint32_t i = 0; i <= m->table_mask; i++)
        m->table[i].key = BPE_EMPTY_KEY;
    return NCTMC_OK;
}

nctmc_status bpe_model_build(const nctmc_allocator *alloc, const bpe_parts *parts,
                             bpe_model **out, char *err, size_t err_size)
{
    *out = NULL;
    nctmc_status st = check_tokens(parts, err, err_size);
    if (st != NCTMC_OK)
        return st;
    bpe_model *m = mem_calloc(alloc, 1, sizeof *m);
    if (!m)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    m->alloc = mem_copy(alloc);
    byte_index ix = {NULL, 0};
    st = copy_parts(m, parts, err, err_size);
    if (st == NCTMC_OK)
        st = index_build(alloc, parts, &ix, err, err_size);
    if (st == NCTMC_OK)
        st = build_merges(m, parts, &ix, err, err_size);
    if (st == NCTMC_OK)
        st = build_specials(m, err, err_size);
    if (st == NCTMC_OK)
        for (int b = 0; b < 256; b++) {
            uint8_t byte = (uint8_t)b;
            m->byte_token[b] = index_find(&ix, parts, &byte, 1);
        }
    mem_free(alloc, ix.slots);
    if (st != NCTMC_OK) {
        bpe_model_free(m);
        return st;
    }
    *out = m;
    return NCTMC_OK;
}

/* ---- per-handle state: the word cache and the merge scratch ------------------ */

#define CACHE_SLOTS 8192
#define CACHE_WORD 24 /* longest cached word, in bytes */

typedef struct cache_slot {
    uint8_t len;      /* 0: empty */
    uint8_t n_ids;
    uint8_t word[CACHE_WORD];
    int32_t ids[CACHE_WORD];
} cache_slot;

struct bpe_cache {
    cache_slot slots[CACHE_SLOTS];
};

typedef struct bpe_symbol {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes; 0 once merged into its left neighbour */
} bpe_symbol;

typedef struct heap_item {
    int32_t rank;
    int32_t pos;
    int32_t result;
} heap_item;

struct bpe_work {
    size_t cap;         /* bytes of the longest word it has room for */
    bpe_symbol *sym;    /* cap */
    heap_item *heap;    /* 3 cap: the initial pairs plus two per merge */
    size_t n_heap;
};

static void work_free(const nctmc_allocator *alloc, bpe_work *w)
{
    if (!w)
        return;
    mem_free(alloc, w->sym);
    mem_free(alloc, w->heap);
    mem_free(alloc, w);
}

void bpe_model_free(bpe_model *m)
{
    if (!m)
        return;
    nctmc_allocator a = m->alloc;
    mem_free(&a, m->offsets);
    mem_free(&a, m->bytes);
    mem_free(&a, m->special);
    mem_free(&a, m->merges);
    mem_free(&a, m->table);
    bpe_added_free(&a, &m->added);
    mem_free(&a, m->added_best);
    mem_free(&a, m->cache);
    work_free(&a, m->work);
    mem_free(&a, m);
}

static void *dup_block(const nctmc_allocator *alloc, const void *src, size_t bytes)
{
    void *p = mem_alloc(alloc, bytes);
    if (p && bytes)
        memcpy(p, src, bytes);
    return p;
}

bpe_model *bpe_model_clone(const nctmc_allocator *alloc, const bpe_model *src)
{
    bpe_model *m = mem_alloc(alloc, sizeof *m);
    if (!m)
        return NULL;
    *m = *src;
    m->alloc = mem_copy(alloc);
    m->cache = NULL;
    m->work = NULL;
    m->added_best = NULL;
    m->added_steps = 0;
    memset(&m->added, 0, sizeof m->added);
    size_t n = (size_t)src->n_tokens;
    m->offsets = dup_block(alloc, src->offsets, sizeof *m->offsets * (n + 1));
    m->bytes = dup_block(alloc, src->bytes, src->offsets[n]);
    m->special = dup_block(alloc, src->special, n);
    m->merges = dup_block(alloc, src->merges, sizeof *m->merges * 2 * (size_t)src->n_merges);
    m->table = dup_block(alloc, src->table, sizeof *m->table * ((size_t)src->table_mask + 1));
    bool added = bpe_added_clone(alloc, &src->added, &m->added);
    if (!m->offsets || !m->bytes || !m->special || !m->merges || !m->table || !added) {
        bpe_model_free(m);
        return NULL;
    }
    return m;
}

static bool work_reserve(bpe_model *m, size_t len)
{
    if (!m->work) {
        m->work = mem_calloc(&m->alloc, 1, sizeof *m->work);
        if (!m->work)
            return false;
    }
    bpe_work *w = m->work;
    if (len <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < len)
        cap *= 2;
    size_t heap_bytes;
    if (!checked_mul(cap, 3 * sizeof *w->heap, &heap_bytes))
        return false;
    bpe_symbol *sym = mem_alloc(&m->alloc, sizeof *sym * cap);
    heap_item *heap = mem_alloc(&m->alloc, heap_bytes);
    if (!sym || !heap) {
        mem_free(&m->alloc, sym);
        mem_free(&m->alloc, heap);
        return false;
    }
    mem_free(&m->alloc, w->sym);
    mem_free(&m->alloc, w->heap);
    w->sym = sym;
    w->heap = heap;
    w->cap = cap;
    return true;
}

/* ---- the heap of candidate merges ------------------------------------------- */

static inline bool heap_before(const heap_item *a, const heap_item *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(bpe_work *w, heap_item item)
{
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_before(&item, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = item;
}

static heap_item heap_pop(bpe_work *w)
{
    heap_item top = w->heap[0];
    heap_item last = w->heap[--w->n_heap];
    size_t n = w->n_heap, i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && heap_before(&w->heap[child + 1], &w->heap[child]))
            child++;
        if (!heap_before(&w->heap[child], &last))
            break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* Proposes merging the symbols at pos and its right neighbour. */
static inline void propose(const bpe_model *m, bpe_work *w, int32_t pos)
{
    const bpe_symbol *s = &w->sym[pos];
    const bpe_merge_slot *slot = find_merge(m, s->id, w->sym[s->next].id);
    if (slot)
        heap_push(w, (heap_item){slot->rank, pos, slot->result});
}

/* Merges word[0 .. len) (len >= 1, every byte has a token) into w->sym. */
static void merge_word(const bpe_model *m, bpe_work *w, const uint8_t *word, size_t len)
{
    int32_t n = (int32_t)len;
    for (int32_t i = 0; i < n; i++)
        w->sym[i] = (bpe_symbol){m->byte_token[word[i]], i - 1, i + 1 < n ? i + 1 : -1, 1};
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        propose(m, w, i);
    while (w->n_heap > 0) {
        heap_item top = heap_pop(w);
        bpe_symbol *s = &w->sym[top.pos];
        if (s->len == 0 || s->next < 0)
            continue;
        bpe_symbol *right = &w->sym[s->next];
        /* a stale entry: the pair at this position has changed since */
        const bpe_merge_slot *now = find_merge(m, s->id, right->id);
        if (!now || now->result != top.result)
            continue;
        s->id = top.result;
        s->len += right->len;
        right->len = 0;
        s->next = right->next;
        if (s->next >= 0)
            w->sym[s->next].prev = top.pos;
        if (s->prev >= 0)
            propose(m, w, s->prev);
        if (s->next >= 0)
            propose(m, w, top.pos);
    }
}

/* ---- encoding --------------------------------------------------------------- */

typedef struct emitter {
    int32_t *tokens;
    size_t *starts;
    size_t count;
} emitter;

static inline void emit(emitter *e, int32_t id, size_t start)
{
    if (e->tokens)
        e->tokens[e->count] = id;
    if (e->starts)
        e->starts[e->count] = start;
    e->count++;
}

static bool cache_lookup(const bpe_model *m, const uint8_t *word, size_t len, uint32_t h,
                         emitter *e, size_t start)
{
    const cache_slot *c = &m->cache->slots[h & (CACHE_SLOTS - 1)];
    if (c->len != len || memcmp(c->word, word, len) != 0)
        return false;
    for (int32_t k = 0; k < c->n_ids; k++) {
        emit(e, c->ids[k], start);
        start += m->offsets[c->ids[k] + 1] - m->offsets[c->ids[k]];
    }
    return true;
}

static void cache_store(bpe_model *m, const uint8_t *word, size_t len, uint32_t h)
{
    cache_slot *c = &m->cache->slots[h & (CACHE_SLOTS - 1)];
    c->len = (uint8_t)len;
    memcpy(c->word, word, len);
    uint8_t k = 0;
    for (int32_t i = 0; i >= 0; i = m->work->sym[i].next)
        c->ids[k++] = m->work->sym[i].id;
    c->n_ids = k;
}

/* Encodes one pre-token starting at text offset `start`. */
static nctmc_status encode_word(bpe_model *m, const uint8_t *word, size_t len, size_t start,
                                emitter *e, char *err, size_t err_size)
{
    uint32_t h = 0;
    bool cacheable = len <= CACHE_WORD;
    if (cacheable) {
        h = hash_bytes(word, len);
        if (cache_lookup(m, word, len, h, e, start))
            return NCTMC_OK;
    }
    for (size_t i = 0; i < len; i++)
        if (m->byte_token[word[i]] < 0)
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "byte 0x%02x at byte offset %zu has no token in this vocabulary",
                               word[i], start + i);
    if (len > (size_t)INT32_MAX)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "a pre-token of %zu bytes (at byte offset %zu) is too long", len,
                           start);
    if (!work_reserve(m, len))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory merging a pre-token of %zu bytes", len);
    merge_word(m, m->work, word, len);
    for (int32_t i = 0; i >= 0; i = m->work->sym[i].next)
        emit(e, m->work->sym[i].id, start + (size_t)i);
    if (cacheable)
        cache_store(m, word, len, h);
    return NCTMC_OK;
}

/* Where the added tokens are: the longest one at each position of the
 * current window of the text, filled one window at a time as the encoder
 * moves on (bpe_added.h). */
typedef struct added_window {
    size_t from, to; /* positions [from, to) of m->added_best are filled */
} added_window;

/* The first added token in text[at .. n): its offset and id (the longest
 * of those starting there), or *id = -1 and *where = n. */
static void find_special(bpe_model *m, added_window *w, const uint8_t *text, size_t at,
                         size_t n, size_t *where, int32_t *id)
{
    *id = -1;
    *where = n;
    if (m->n_specials == 0)
        return;
    for (size_t i = at; i < n; i++) {
        if (i < w->from || i >= w->to) {
            w->from = i;
            w->to = n - i < BPE_ADDED_WINDOW ? n : i + BPE_ADDED_WINDOW;
            m->added_steps += bpe_added_scan(&m->added, text, n, w->from, w->to, m->added_best);
        }
        int32_t best = m->added_best[i - w->from];
        if (best >= 0) {
            *where = i;
            *id = best;
            return;
        }
    }
}

/* Pre-tokenizes and encodes the piece text[at .. end), free of added tokens. */
static nctmc_status encode_piece(bpe_model *m, const uint8_t *text, size_t at, size_t end,
                                 emitter *e, char *err, size_t err_size)
{
    const uint8_t *piece = text + at;
    size_t n = end - at;
    for (size_t i = 0; i < n;) {
        size_t stop = bpe_pretoken_end(piece, n, i);
        nctmc_status st = encode_word(m, piece + i, stop - i, at + i, e, err, err_size);
        if (st != NCTMC_OK)
            return st;
        i = stop;
    }
    return NCTMC_OK;
}

nctmc_status bpe_encode(bpe_model *m, const uint8_t *text, size_t n, int32_t *tokens,
                        size_t *starts, size_t *n_tokens, char *err, size_t err_size)
{
    if (!m->cache && !(m->cache = mem_calloc(&m->alloc, 1, sizeof *m->cache)))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the word cache");
    if (m->n_specials > 0 && !m->added_best &&
        !(m->added_best = mem_alloc(&m->alloc, sizeof *m->added_best * BPE_ADDED_WINDOW)))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory for the added-token window");
    emitter e = {tokens, starts, 0};
    added_window w = {0, 0};
    for (size_t at = 0; at < n;) {
        size_t where;
        int32_t id;
        find_special(m, &w, text, at, n, &where, &id);
        nctmc_status st = encode_piece(m, text, at, where, &e, err, err_size);
        if (st != NCTMC_OK)
            return st;
        at = where;
        if (id >= 0) {
            emit(&e, id, where);
            at += m->offsets[id + 1] - m->offsets[id];
        }
    }
    *n_tokens = e.count;
    return NCTMC_OK;
}
