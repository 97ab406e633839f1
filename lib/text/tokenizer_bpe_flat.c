/*
 * tokenizer_bpe_flat.c — a BPE model as the three text values of the flat
 * form (tokenizer files, checkpoint metadata; docs/formats.md): token bytes
 * in hex, merges as id pairs, added-token ids. Plain ASCII, so the values
 * travel through JSON metadata unescaped; strictly parsed on the way back.
 */
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "io/json.h"
#include "tokenizer_bpe_io.h"

/* ---- writing ------------------------------------------------------------------ */

static char *finish(json_buf *b)
{
    json_buf_append(b, "", 1); /* the NUL */
    if (b->failed) {
        json_buf_free(b);
        return NULL;
    }
    return b->data;
}

static char *tokens_text(const bpe_model *m, const nctmc_allocator *alloc)
{
    static const char hex[] = "0123456789abcdef";
    json_buf b = {.alloc = alloc};
    for (int32_t id = 0; id < m->n_tokens && !b.failed; id++) {
        size_t len;
        const uint8_t *p = bpe_token_bytes(m, id, &len);
        if (id > 0)
            json_buf_append(&b, " ", 1);
        for (size_t i = 0; i < len; i++) {
            char two[2] = {hex[p[i] >> 4], hex[p[i] & 15]};
            json_buf_append(&b, two, 2);
        }
    }
    return finish(&b);
}

static char *ids_text(const int32_t *ids, size_t n, const nctmc_allocator *alloc)
{
    json_buf b = {.alloc = alloc};
    for (size_t i = 0; i < n && !b.failed; i++)
        json_buf_printf(&b, i ? " %d" : "%d", (int)ids[i]);
    return finish(&b);
}

bool bpe_to_texts(const bpe_model *m, const nctmc_allocator *alloc, char **tokens,
                  char **merges, char **added)
{
    *tokens = tokens_text(m, alloc);
    *merges = ids_text(m->merges, 2 * (size_t)m->n_merges, alloc);
    *added = NULL;
    bool ok = *tokens && *merges;
    if (ok && m->n_specials > 0) {
        int32_t *ids = mem_alloc(alloc, sizeof *ids * (size_t)m->n_specials);
        int32_t k = 0;
        for (int32_t id = 0; ids && id < m->n_tokens; id++)
            if (m->special[id])
                ids[k++] = id;
        *added = ids ? ids_text(ids, (size_t)k, alloc) : NULL;
        mem_free(alloc, ids);
        ok = *added != NULL;
    }
    if (!ok) {
        mem_free(alloc, *tokens);
        mem_free(alloc, *merges);
        mem_free(alloc, *added);
        *tokens = *merges = *added = NULL;
    }
    return ok;
}

/* ---- reading ------------------------------------------------------------------ */

/* Items separated by exactly one space; "" has none. */
static size_t count_items(const char *s)
{
    if (!*s)
        return 0;
    size_t n = 1;
    for (; *s; s++)
        n += *s == ' ';
    return n;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static nctmc_status parse_tokens(const char *s, int32_t n, uint32_t *offsets, uint8_t *bytes,
                                 char *err, size_t err_size)
{
    size_t at = 0;
    for (int32_t id = 0; id < n; id++) {
        offsets[id] = (uint32_t)at;
        while (*s && *s != ' ') {
            int hi = hex_value(s[0]), lo = hi < 0 ? -1 : hex_value(s[1]);
            if (hi < 0 || lo < 0)
                return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                                   "tokenizer: bpe_tokens entry %d is not lowercase hex bytes",
                                   id);
            bytes[at++] = (uint8_t)(hi << 4 | lo);
            s += 2;
        }
        if (at == offsets[id] || (*s == ' ' && id + 1 == n))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer: bpe_tokens entry %d is empty", id);
        if (*s == ' ')
            s++;
    }
    offsets[n] = (uint32_t)at;
    return NCTMC_OK;
}

/* Decimal ids without sign or leading zeros, below `limit`. */
static nctmc_status parse_ids(const char *s, const char *what, int32_t *ids, size_t n,
                              int32_t limit, char *err, size_t err_size)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        const char *start = s;
        while (*s >= '0' && *s <= '9' && s - start < 9)
            v = v * 10 + (*s++ - '0');
        bool sep_ok = i + 1 < n ? *s == ' ' : *s == '\0';
        if (s == start || (start[0] == '0' && s - start > 1) || !sep_ok || v >= limit)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer: %s entry %zu is not a token id below %d", what, i,
                               limit);
        ids[i] = (int32_t)v;
        if (*s == ' ')
            s++;
    }
    return NCTMC_OK;
}

/* The arrays parsed from the texts, freed together. */
typedef struct flat_parts {
    const nctmc_allocator *alloc;
    uint32_t *offsets;
    uint8_t *bytes;
    uint8_t *special;
    int32_t *merges;
    int32_t *added;
} flat_parts;

static void flat_parts_free(flat_parts *f)
{
    mem_free(f->alloc, f->offsets);
    mem_free(f->alloc, f->bytes);
    mem_free(f->alloc, f->special);
    mem_free(f->alloc, f->merges);
    mem_free(f->alloc, f->added);
}

static nctmc_status mark_added(flat_parts *f, const char *added, int32_t n, char *err,
                               size_t err_size)
{
    size_t n_added = count_items(added);
    if (n_added == 0 || n_added > (size_t)n)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tokenizer: bpe_added lists %zu ids for %d tokens", n_added, n);
    f->added = mem_alloc(f->alloc, sizeof *f->added * n_added);
    if (!f->added)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_status st = parse_ids(added, "bpe_added", f->added, n_added, n, err, err_size);
    for (size_t i = 0; st == NCTMC_OK && i < n_added; i++) {
        if (i > 0 && f->added[i] <= f->added[i - 1])
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tokenizer: bpe_added is not increasing");
        f->special[f->added[i]] = 1;
    }
    return st;
}

nctmc_status bpe_from_texts(const nctmc_allocator *alloc, const char *tokens,
                            const char *merges, const char *added, bpe_model **out,
                            char *err, size_t err_size)
{
    size_t n = count_items(tokens), n_ids = count_items(merges), len = strlen(tokens);
    if (n == 0 || n > BPE_MAX_TOKENS || n_ids % 2 != 0 || n_ids / 2 > BPE_MAX_TOKENS)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tokenizer: bpe_tokens lists %zu tokens and bpe_merges %zu ids "
                           "(1 .. %d tokens, id pairs)",
                           n, n_ids, BPE_MAX_TOKENS);
    flat_parts f = {.alloc = alloc};
    f.offsets = mem_alloc(alloc, sizeof *f.offsets * (n + 1));
    f.bytes = mem_alloc(alloc, len / 2 + 1);
    f.special = mem_calloc(alloc, n, 1);
    f.merges = mem_alloc(alloc, sizeof *f.merges * (n_ids + 1));
    nctmc_status st = NCTMC_OK;
    if (!f.offsets || !f.bytes || !f.special || !f.merges)
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == NCTMC_OK)
        st = parse_tokens(tokens, (int32_t)n, f.offsets, f.bytes, err, err_size);
    if (st == NCTMC_OK)
        st = parse_ids(merges, "bpe_merges", f.merges, n_ids, (int32_t)n, err, err_size);
    if (st == NCTMC_OK && added)
        st = mark_added(&f, added, (int32_t)n, err, err_size);
    if (st == NCTMC_OK) {
        bpe_parts parts = {(int32_t)n, f.offsets, f.bytes, f.special, (int32_t)(n_ids / 2),
                           f.merges};
        char why[NCTMC_ERROR_SIZE];
        st = bpe_model_build(alloc, &parts, out, why, sizeof why);
        if (st != NCTMC_OK)
            fail_format(err, err_size, st, "tokenizer: %s", why);
    }
    flat_parts_free(&f);
    return st;
}
