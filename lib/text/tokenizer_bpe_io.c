/*
 * tokenizer_bpe_io.c — reading byte-level BPE tokenizers: Hugging Face
 * tokenizer.json, GPT-2's vocab.json + merges.txt, and the flat form our
 * tokenizer files and checkpoints hold (docs/formats.md).
 *
 * The Hugging Face files spell each token with GPT-2's byte-to-unicode map
 * and name merges by token text; all of it is collected into a bpe_source
 * (strings back to back in one pool), then assembled into ids and bytes and
 * handed to bpe_model_build(), which checks the rest.
 */
#include "tokenizer_bpe_io.h"

#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "io/file_io.h"
#include "io/json.h"
#include "base/utf8.h"

#define BPE_FILE_MAX (256u << 20)

/* ---- the collected source ------------------------------------------------- */

typedef struct str_ref {
    size_t off, len; /* in the pool */
} str_ref;

typedef struct named_id {
    str_ref text;
    int64_t id;
} named_id;

typedef struct bpe_source {
    const nctmc_allocator *alloc;
    json_buf pool;
    named_id *vocab;
    size_t n_vocab, cap_vocab;
    named_id *added;
    size_t n_added, cap_added;
    str_ref *merges; /* pairs */
    size_t n_merges, cap_merges;
    bool infer_added; /* vocab.json: unreachable tokens are added tokens */
} bpe_source;

static void source_free(bpe_source *s)
{
    json_buf_free(&s->pool);
    mem_free(s->alloc, s->vocab);
    mem_free(s->alloc, s->added);
    mem_free(s->alloc, s->merges);
}

/* Room for one more element of size `elem` in *array (doubling). */
static bool grow(const nctmc_allocator *alloc, void **array, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t new_cap = *cap ? 2 * *cap : 1024;
    if (new_cap > SIZE_MAX / elem)
        return false;
    void *p = mem_realloc(alloc, *array, *cap * elem, new_cap * elem);
    if (!p)
        return false;
    *array = p;
    *cap = new_cap;
    return true;
}

static str_ref pool_add(bpe_source *s, const char *text, size_t len)
{
    str_ref ref = {s->pool.len, len};
    json_buf_append(&s->pool, text, len);
    return ref;
}

static const char *str_at(const bpe_source *s, str_ref r)
{
    return s->pool.data + r.off;
}

/* How much of a pool string or file line (not NUL-terminated) a message
 * quotes: "%.*s" with this length. */
static int quoted(size_t len)
{
    return len < 60 ? (int)len : 60;
}

static nctmc_status oom(char *err, size_t err_size)
{
    return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
}

static nctmc_status add_named(bpe_source *s, named_id **list, size_t *n, size_t *cap,
                              const char *text, size_t len, int64_t id, char *err,
                              size_t err_size)
{
    if (!grow(s->alloc, (void **)list, cap, *n, sizeof **list))
        return oom(err, err_size);
    (*list)[(*n)++] = (named_id){pool_add(s, text, len), id};
    return s->pool.failed ? oom(err, err_size) : NCTMC_OK;
}

static nctmc_status add_merge(bpe_source *s, const char *a, size_t la, const char *b,
                              size_t lb, char *err, size_t err_size)
{
    if (!grow(s->alloc, (void **)&s->merges, &s->cap_merges, 2 * s->n_merges + 1,
              sizeof *s->merges))
        return oom(err, err_size);
    s->merges[2 * s->n_merges] = pool_add(s, a, la);
    s->merges[2 * s->n_merges + 1] = pool_add(s, b, lb);
    s->n_merges++;
    return s->pool.failed ? oom(err, err_size) : NCTMC_OK;
}

/* "a b" with exactly one space, both sides non-empty. */
static nctmc_status add_merge_line(bpe_source *s, const char *line, size_t len, size_t number,
                                   char *err, size_t err_size)
{
    const char *space = memchr(line, ' ', len);
    if (!space || space == line || space == line + len - 1 ||
        memchr(space + 1, ' ', len - (size_t)(space + 1 - line)))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "merge %zu \"%.*s\" is not two tokens separated by one space",
                           number, quoted(len), line);
    return add_merge(s, line, (size_t)(space - line), space + 1,
                     len - (size_t)(space + 1 - line), err, err_size);
}

/* ---- assembling ids and bytes ----------------------------------------------- */

/* The vocabulary by text: open addressing over indexes into s->vocab. */
typedef struct text_index {
    int64_t *slots; /* index into vocab, -1 free */
    uint32_t mask;
} text_index;

static uint32_t hash_text(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

static int64_t text_find(const text_index *ix, const bpe_source *s, const char *p, size_t n)
{
    for (uint32_t i = hash_text(p, n) & ix->mask;; i = (i + 1) & ix->mask) {
        int64_t k = ix->slots[i];
        if (k < 0)
            return -1;
        if (s->vocab[k].text.len == n && memcmp(str_at(s, s->vocab[k].text), p, n) == 0)
            return k;
    }
}

static nctmc_status text_index_build(const bpe_source *s, text_index *ix, char *err,
                                     size_t err_size)
{
    uint32_t size = 16;
    while (size < 2 * s->n_vocab)
        size <<= 1;
    ix->mask = size - 1;
    ix->slots = mem_alloc(s->alloc, sizeof *ix->slots * size);
    if (!ix->slots)
        return oom(err, err_size);
    memset(ix->slots, 0xff, sizeof *ix->slots * size);
    for (size_t k = 0; k < s->n_vocab; k++) {
        const char *p = str_at(s, s->vocab[k].text);
        size_t n = s->vocab[k].text.len;
        if (text_find(ix, s, p, n) >= 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "the vocabulary lists \"%.*s\" twice", quoted(n), p);
        uint32_t i = hash_text(p, n) & ix->mask;
        while (ix->slots[i] >= 0)
            i = (i + 1) & ix->mask;
        ix->slots[i] = (int64_t)k;
    }
    return NCTMC_OK;
}

/* Everything the assembly makes; freed together. */
typedef struct assembly {
    const nctmc_allocator *alloc;
    int32_t n;
    str_ref *text;      /* n: each id's text */
    uint8_t *special;   /* n */
    int32_t *merges;    /* 2 * n_merges ids */
    uint32_t *offsets;  /* n + 1 */
    uint8_t *bytes;
    text_index ix;
} assembly;

static void assembly_free(assembly *a)
{
    mem_free(a->alloc, a->text);
    mem_free(a->alloc, a->special);
    mem_free(a->alloc, a->merges);
    mem_free(a->alloc, a->offsets);
    mem_free(a->alloc, a->bytes);
    mem_free(a->alloc, a->ix.slots);
}

/* Gives each id its text: ids 0 .. n - 1 each exactly once, an added token
 * either new or the same text as the vocabulary's entry of its id. */
static nctmc_status assign_ids(const bpe_source *s, assembly *a, char *err, size_t err_size)
{
    int64_t max = -1;
    for (size_t k = 0; k < s->n_vocab; k++)
        max = s->vocab[k].id > max ? s->vocab[k].id : max;
    for (size_t k = 0; k < s->n_added; k++)
        max = s->added[k].id > max ? s->added[k].id : max;
    if (max < 0 || max >= BPE_MAX_TOKENS)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "the vocabulary's largest id %lld is not in [0, %d)", (long long)max,
                           BPE_MAX_TOKENS);
    a->n = (int32_t)max + 1;
    a->text = mem_alloc(a->alloc, sizeof *a->text * (size_t)a->n);
    a->special = mem_calloc(a->alloc, (size_t)a->n, 1);
    if (!a->text || !a->special)
        return oom(err, err_size);
    for (int32_t i = 0; i < a->n; i++)
        a->text[i].len = SIZE_MAX;
    for (size_t k = 0; k < s->n_vocab; k++) {
        named_id v = s->vocab[k];
        if (a->text[v.id].len != SIZE_MAX)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "id %lld is given to two tokens (\"%.*s\" and \"%.*s\")",
                               (long long)v.id, quoted(a->text[v.id].len),
                               str_at(s, a->text[v.id]), quoted(v.text.len), str_at(s, v.text));
        a->text[v.id] = v.text;
    }
    for (size_t k = 0; k < s->n_added; k++) {
        named_id v = s->added[k];
        str_ref have = a->text[v.id];
        if (a->special[v.id] ||
            (have.len != SIZE_MAX &&
             (have.len != v.text.len ||
              memcmp(str_at(s, have), str_at(s, v.text), have.len) != 0)))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "added token \"%.*s\" has id %lld, which is another token's",
                               quoted(v.text.len), str_at(s, v.text), (long long)v.id);
        a->text[v.id] = v.text;
        a->special[v.id] = 1;
    }
    for (int32_t i = 0; i < a->n; i++)
        if (a->text[i].len == SIZE_MAX)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "no token has id %d: ids must be 0 .. %d, each once", i,
                               a->n - 1);
    return NCTMC_OK;
}

/* The id of vocabulary text p[0 .. n), or -1. */
static int32_t vocab_id(const bpe_source *s, const assembly *a, const char *p, size_t n)
{
    int64_t k = text_find(&a->ix, s, p, n);
    return k < 0 ? -1 : (int32_t)s->vocab[k].id;
}

static nctmc_status resolve_merges(const bpe_source *s, assembly *a, char *err,
                                   size_t err_size)
{
    if (s->n_merges > BPE_MAX_TOKENS)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "more than %d merges",
                           BPE_MAX_TOKENS);
    a->merges = mem_alloc(a->alloc, sizeof *a->merges * 2 * (s->n_merges + 1));
    if (!a->merges)
        return oom(err, err_size);
    for (size_t r = 0; r < 2 * s->n_merges; r++) {
        str_ref t = s->merges[r];
        a->merges[r] = vocab_id(s, a, str_at(s, t), t.len);
        if (a->merges[r] < 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "merge %zu names \"%.*s\", which is not in the vocabulary",
                               r / 2, quoted(t.len), str_at(s, t));
    }
    return NCTMC_OK;
}

/* The byte-level text of a token as bytes (n code points give n bytes), or
 * false when a character is not one of the 256 byte symbols. */
static bool unmap_text(const char *p, size_t n, uint8_t *out, size_t *out_len)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode((const uint8_t *)p + i, n - i, &cp);
        int32_t b = len ? bpe_unicode_to_byte(cp) : -1;
        if (b < 0)
            return false;
        out[k++] = (uint8_t)b;
        i += len;
    }
    *out_len = k;
    return true;
}

/* GPT-2's vocab.json has no list of added tokens: a token that is neither a
 * byte symbol nor the result of a merge can only be one. */
static nctmc_status infer_added(const bpe_source *s, assembly *a, char *err, size_t err_size)
{
    uint8_t *reachable = mem_calloc(a->alloc, (size_t)a->n, 1);
    json_buf joined = {.alloc = a->alloc};
    if (!reachable)
        return oom(err, err_size);
    for (int32_t i = 0; i < a->n; i++) {
        uint8_t bytes[4]; /* at most 4 characters in 4 bytes of UTF-8 */
        size_t len;
        const char *p = str_at(s, a->text[i]);
        if (a->text[i].len <= 4 && unmap_text(p, a->text[i].len, bytes, &len) && len == 1)
            reachable[i] = 1;
    }
    for (size_t r = 0; r < s->n_merges && !joined.failed; r++) {
        joined.len = 0;
        for (int side = 0; side < 2; side++)
            json_buf_append(&joined, str_at(s, s->merges[2 * r + side]),
                            s->merges[2 * r + side].len);
        int32_t id = joined.failed ? -1 : vocab_id(s, a, joined.data, joined.len);
        if (id >= 0)
            reachable[id] = 1;
    }
    for (int32_t i = 0; i < a->n; i++)
        a->special[i] = !reachable[i];
    bool failed = joined.failed;
    json_buf_free(&joined);
    mem_free(a->alloc, reachable);
    return failed ? oom(err, err_size) : NCTMC_OK;
}

/* Each token's bytes: an added token's text as it is, the others unmapped
 * from GPT-2's byte symbols. */
static nctmc_status token_bytes(const bpe_source *s, assembly *a, char *err, size_t err_size)
{
    size_t total = 0;
    for (int32_t i = 0; i < a->n; i++)
        total += a->text[i].len; /* unmapping never makes text longer */
    if (total > UINT32_MAX)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "the tokens are too long");
    a->offsets = mem_alloc(a->alloc, sizeof *a->offsets * ((size_t)a->n + 1));
    a->bytes = mem_alloc(a->alloc, total + 1);
    if (!a->offsets || !a->bytes)
        return oom(err, err_size);
    size_t at = 0;
    for (int32_t i = 0; i < a->n; i++) {
        const char *p = str_at(s, a->text[i]);
        size_t len = a->text[i].len;
        a->offsets[i] = (uint32_t)at;
        if (a->special[i])
            memcpy(a->bytes + at, p, len);
        else if (!unmap_text(p, len, a->bytes + at, &len))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "token %d \"%.*s\" is not byte-level text (a character "
                               "outside GPT-2's 256 byte symbols) and not an added token",
                               i, quoted(a->text[i].len), p);
        at += len;
    }
    a->offsets[a->n] = (uint32_t)at;
    return NCTMC_OK;
}

static nctmc_status source_assemble(const bpe_source *s, bpe_model **out, char *err,
                                    size_t err_size)
{
    if (s->pool.failed)
        return oom(err, err_size);
    assembly a = {.alloc = s->alloc};
    nctmc_status st = assign_ids(s, &a, err, err_size);
    if (st == NCTMC_OK)
        st = text_index_build(s, &a.ix, err, err_size);
    if (st == NCTMC_OK)
        st = resolve_merges(s, &a, err, err_size);
    if (st == NCTMC_OK && s->infer_added)
        st = infer_added(s, &a, err, err_size);
    if (st == NCTMC_OK)
        st = token_bytes(s, &a, err, err_size);
    if (st == NCTMC_OK) {
        bpe_parts parts = {a.n,         a.offsets,          a.bytes, a.special,
                           (int32_t)s->n_merges, a.merges};
        st = bpe_model_build(s->alloc, &parts, out, err, err_size);
    }
    assembly_free(&a);
    return st;
}

/* ---- JSON helpers -------------------------------------------------------- */

/* Consumes the literal word (true, false, null) if it is next. */
static bool accept_word(json_reader *r, const char *word)
{
    json_skip_ws(r);
    size_t n = strlen(word);
    if (r->n - r->at < n || memcmp(r->s + r->at, word, n) != 0)
        return false;
    r->at += n;
    return true;
}

static nctmc_status parse_bool(json_reader *r, const char *key, bool *out)
{
    if (accept_word(r, "true"))
        *out = true;
    else if (accept_word(r, "false"))
        *out = false;
    else
        return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                           "byte %zu: \"%s\" must be true or false", r->at, key);
    return NCTMC_OK;
}

typedef json_member_fn member_fn;

/* Parses an object, calling fn for each member with the reader before its
 * value (fn parses or skips it); a key given twice is refused
 * (json_parse_object()). */
static nctmc_status parse_object(json_reader *r, member_fn fn, void *user)
{
    return json_parse_object(r, fn, user);
}

/* ---- vocab and merges ---------------------------------------------------- */

static nctmc_status vocab_member(json_reader *r, const char *key, void *user)
{
    bpe_source *s = user;
    uint64_t id;
    nctmc_status st = json_parse_u64(r, &id);
    if (st != NCTMC_OK)
        return st;
    if (id >= BPE_MAX_TOKENS)
        return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                           "token \"%.40s\" has id %llu, more than %d", key,
                           (unsigned long long)id, BPE_MAX_TOKENS - 1);
    return add_named(s, &s->vocab, &s->n_vocab, &s->cap_vocab, key, strlen(key), (int64_t)id,
                     r->err, r->err_size);
}

/* One merge: "a b", or ["a", "b"] (tokenizers >= 0.20). */
static nctmc_status parse_merge(json_reader *r, bpe_source *s)
{
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    nctmc_status st;
    if (json_accept(r, '[')) {
        st = json_parse_string(r, &a, &la);
        if (st == NCTMC_OK)
            st = json_expect(r, ',', "','");
        if (st == NCTMC_OK)
            st = json_parse_string(r, &b, &lb);
        if (st == NCTMC_OK)
            st = json_expect(r, ']', "']' after a merge's two tokens");
        if (st == NCTMC_OK && (la == 0 || lb == 0))
            st = fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                             "merge %zu names an empty token", s->n_merges);
        if (st == NCTMC_OK)
            st = add_merge(s, a, la, b, lb, r->err, r->err_size);
    } else {
        st = json_parse_string(r, &a, &la);
        if (st == NCTMC_OK)
            st = add_merge_line(s, a, la, s->n_merges, r->err, r->err_size);
    }
    mem_free(r->alloc, a);
    mem_free(r->alloc, b);
    return st;
}

static nctmc_status parse_merges(json_reader *r, bpe_source *s)
{
    nctmc_status st = json_expect(r, '[', "the merges array");
    if (st != NCTMC_OK || json_accept(r, ']'))
        return st;
    do {
        st = parse_merge(r, s);
        if (st != NCTMC_OK)
            return st;
    } while (json_accept(r, ','));
    return json_expect(r, ']', "',' or ']'");
}

/* ---- tokenizer.json ---------------------------------------------------------- */

/* What the pre_tokenizer, decoder, post_processor and normalizer say. */
typedef struct component {
    bool present;       /* not null */
    char type[32];
    bool add_prefix_space;
    bool use_regex;
} component;

static nctmc_status component_member(json_reader *r, const char *key, void *user)
{
    component *c = user;
    if (strcmp(key, "type") == 0) {
        char *type = NULL;
        nctmc_status st = json_parse_string(r, &type, NULL);
        if (st == NCTMC_OK)
            snprintf(c->type, sizeof c->type, "%s", type);
        mem_free(r->alloc, type);
        return st;
    }
    if (strcmp(key, "add_prefix_space") == 0)
        return parse_bool(r, key, &c->add_prefix_space);
    if (strcmp(key, "use_regex") == 0)
        return parse_bool(r, key, &c->use_regex);
    return json_skip_value(r, 0);
}

static nctmc_status parse_component(json_reader *r, component *c)
{
    *c = (component){.use_regex = true};
    if (accept_word(r, "null"))
        return NCTMC_OK;
    c->present = true;
    return parse_object(r, component_member, c);
}

typedef struct added_token {
    bool have_id, have_content;
    uint64_t id;
    char *content;
    size_t len;
    bool single_word, lstrip, rstrip;
} added_token;

static nctmc_status added_member(json_reader *r, const char *key, void *user)
{
    added_token *t = user;
    if (strcmp(key, "id") == 0) {
        t->have_id = true;
        return json_parse_u64(r, &t->id);
    }
    if (strcmp(key, "content") == 0 && !t->have_content) {
        t->have_content = true;
        return json_parse_string(r, &t->content, &t->len);
    }
    if (strcmp(key, "single_word") == 0)
        return parse_bool(r, key, &t->single_word);
    if (strcmp(key, "lstrip") == 0)
        return parse_bool(r, key, &t->lstrip);
    if (strcmp(key, "rstrip") == 0)
        return parse_bool(r, key, &t->rstrip);
    return json_skip_value(r, 0);
}

static nctmc_status parse_added_token(json_reader *r, bpe_source *s)
{
    added_token t = {0};
    nctmc_status st = parse_object(r, added_member, &t);
    if (st == NCTMC_OK && (!t.have_id || !t.have_content || t.len == 0 ||
                           t.id >= BPE_MAX_TOKENS))
        st = fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                         "added token %zu needs an id below %d and non-empty content",
                         s->n_added, BPE_MAX_TOKENS);
    if (st == NCTMC_OK && (t.single_word || t.lstrip || t.rstrip))
        st = fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                         "added token \"%.40s\": single_word, lstrip and rstrip are not "
                         "supported",
                         t.content);
    if (st == NCTMC_OK)
        st = add_named(s, &s->added, &s->n_added, &s->cap_added, t.content, t.len,
                       (int64_t)t.id, r->err, r->err_size);
    mem_free(r->alloc, t.content);
    return st;
}

static nctmc_status parse_added_tokens(json_reader *r, bpe_source *s)
{
    nctmc_status st = json_expect(r, '[', "the added_tokens array");
    if (st != NCTMC_OK || json_accept(r, ']'))
        return st;
    do {
        st = parse_added_token(r, s);
        if (st != NCTMC_OK)
            return st;
    } while (json_accept(r, ','));
    return json_expect(r, ']', "',' or ']'");
}

typedef struct model_section {
    bpe_source *src;
    char type[16];
    bool have_vocab, have_merges;
} model_section;

/* A member that must be null (or, for the affix strings, ""), false, or
 * absent: what makes BPE behave other than GPT-2's. */
static nctmc_status must_be_plain(json_reader *r, const char *key)
{
    if (accept_word(r, "null") || accept_word(r, "false"))
        return NCTMC_OK;
    if (accept_word(r, "\"\"") &&
        (strcmp(key, "continuing_subword_prefix") == 0 || strcmp(key, "end_of_word_suffix") == 0))
        return NCTMC_OK;
    return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                       "model.%s: only GPT-2's setting (null, \"\" or false) is supported", key);
}

static nctmc_status model_member(json_reader *r, const char *key, void *user)
{
    model_section *m = user;
    if (strcmp(key, "type") == 0) {
        char *type = NULL;
        nctmc_status st = json_parse_string(r, &type, NULL);
        if (st == NCTMC_OK)
            snprintf(m->type, sizeof m->type, "%s", type);
        mem_free(r->alloc, type);
        return st;
    }
    if (strcmp(key, "vocab") == 0 && !m->have_vocab) {
        m->have_vocab = true;
        return parse_object(r, vocab_member, m->src);
    }
    if (strcmp(key, "merges") == 0 && !m->have_merges) {
        m->have_merges = true;
        return parse_merges(r, m->src);
    }
    if (strcmp(key, "dropout") == 0 || strcmp(key, "continuing_subword_prefix") == 0 ||
        strcmp(key, "end_of_word_suffix") == 0 || strcmp(key, "byte_fallback") == 0 ||
        strcmp(key, "ignore_merges") == 0)
        return must_be_plain(r, key);
    /* unk_token is never used when every byte has a token (encoding a byte
     * without one is an error here); fuse_unk only concerns it */
    return json_skip_value(r, 0);
}

typedef struct hf_file {
    bpe_source *src;
    model_section model;
    component pre, dec, post, norm;
    bool have_model;
} hf_file;

static nctmc_status hf_member(json_reader *r, const char *key, void *user)
{
    hf_file *f = user;
    if (strcmp(key, "added_tokens") == 0)
        return parse_added_tokens(r, f->src);
    if (strcmp(key, "model") == 0 && !f->have_model) {
        f->have_model = true;
        return parse_object(r, model_member, &f->model);
    }
    if (strcmp(key, "pre_tokenizer") == 0)
        return parse_component(r, &f->pre);
    if (strcmp(key, "decoder") == 0)
        return parse_component(r, &f->dec);
    if (strcmp(key, "post_processor") == 0)
        return parse_component(r, &f->post);
    if (strcmp(key, "normalizer") == 0)
        return parse_component(r, &f->norm);
    return json_skip_value(r, 0);
}

/* The pipeline must be GPT-2's: what else it may say would change ids. */
static nctmc_status check_pipeline(const hf_file *f, char *err, size_t err_size)
{
    const char *why = NULL;
    if (!f->have_model || strcmp(f->model.type, "BPE") != 0)
        why = "model.type must be \"BPE\"";
    else if (!f->model.have_vocab || !f->model.have_merges)
        why = "model.vocab or model.merges is missing";
    else if (!f->pre.present || strcmp(f->pre.type, "ByteLevel") != 0)
        why = "the pre_tokenizer must be ByteLevel";
    else if (f->pre.add_prefix_space || !f->pre.use_regex)
        why = "the ByteLevel pre_tokenizer must have add_prefix_space false and use_regex true";
    else if (f->norm.present)
        why = "a normalizer is not supported";
    else if (f->dec.present && strcmp(f->dec.type, "ByteLevel") != 0)
        why = "the decoder must be ByteLevel or null";
    else if (f->post.present && strcmp(f->post.type, "ByteLevel") != 0)
        why = "the post_processor must be ByteLevel or null";
    if (why)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "%s", why);
    return NCTMC_OK;
}

static nctmc_status parse_json_file(const nctmc_allocator *alloc, const uint8_t *data,
                                    size_t size, member_fn fn, void *user, char *err,
                                    size_t err_size)
{
    json_reader r = {data, size, 0, err, err_size, alloc};
    nctmc_status st = parse_object(&r, fn, user);
    if (st == NCTMC_OK) {
        json_skip_ws(&r);
        if (r.at != r.n)
            st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                             "byte %zu: text after the JSON object", r.at);
    }
    return st;
}

nctmc_status bpe_load_hf_json(const nctmc_allocator *alloc, const char *path, bpe_model **out,
                              char *err, size_t err_size)
{
    uint8_t *data = NULL;
    size_t size = 0;
    nctmc_status st = file_read_all(alloc, path, BPE_FILE_MAX, &data, &size, err, err_size);
    if (st != NCTMC_OK)
        return st;
    bpe_source src = {.alloc = alloc, .pool = {.alloc = alloc}};
    hf_file f = {.src = &src, .model = {.src = &src}};
    st = parse_json_file(alloc, data, size, hf_member, &f, err, err_size);
    if (st == NCTMC_OK)
        st = check_pipeline(&f, err, err_size);
    if (st == NCTMC_OK)
        st = source_assemble(&src, out, err, err_size);
    source_free(&src);
    mem_free(alloc, data);
    return st;
}

/* ---- vocab.json + merges.txt ------------------------------------------------- */

static nctmc_status parse_merges_txt(bpe_source *s, const uint8_t *data, size_t size,
                                     char *err, size_t err_size)
{
    if (memchr(data, '\0', size))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "merges.txt holds a NUL byte");
    size_t number = 0;
    for (size_t at = 0; at < size; number++) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size;
        size_t len = end - at;
        if (len > 0 && data[at + len - 1] == '\r')
            len--;
        const char *line = (const char *)data + at;
        at = end + 1;
        if (len >= 8 && memcmp(line, "#version", 8) == 0)
            continue;
        nctmc_status st = add_merge_line(s, line, len, number + 1, err, err_size);
        if (st != NCTMC_OK)
            return st;
    }
    return NCTMC_OK;
}

nctmc_status bpe_load_gpt2(const nctmc_allocator *alloc, const char *vocab_path,
                           const char *merges_path, bpe_model **out, char *err,
                           size_t err_size)
{
    uint8_t *vocab = NULL, *merges = NULL;
    size_t n_vocab = 0, n_merges = 0;
    char why[NCTMC_ERROR_SIZE];
    bpe_source src = {.alloc = alloc, .pool = {.alloc = alloc}, .infer_added = true};
    nctmc_status st = file_read_all(alloc, vocab_path, BPE_FILE_MAX, &vocab, &n_vocab, why,
                                    sizeof why);
    if (st == NCTMC_OK)
        st = parse_json_file(alloc, vocab, n_vocab, vocab_member, &src, why, sizeof why);
    if (st != NCTMC_OK) {
        fail_format(err, err_size, st, "\"%.200s\": %s", vocab_path, why);
    } else {
        st = file_read_all(alloc, merges_path, BPE_FILE_MAX, &merges, &n_merges, why,
                           sizeof why);
        if (st == NCTMC_OK)
            st = parse_merges_txt(&src, merges, n_merges, why, sizeof why);
        if (st != NCTMC_OK)
            fail_format(err, err_size, st, "\"%.200s\": %s", merges_path, why);
    }
    if (st == NCTMC_OK)
        st = source_assemble(&src, out, err, err_size);
    source_free(&src);
    mem_free(alloc, vocab);
    mem_free(alloc, merges);
    return st;
}
