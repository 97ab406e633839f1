/*
 * dataset.c — token shards (docs/formats.md): a fixed 48-byte little-endian
 * header, the tokens in the narrowest width that holds the vocabulary, then
 * one u32 label per sequence. The file is mapped read-only (read into
 * memory only where it cannot be mapped) and checked whole at open (size,
 * checksum, every token and label in range), so readers afterwards need no
 * checks beyond their index bounds.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "base/crc32.h"
#include "core/ctx_report.h"
#include "dataset_internal.h"
#include "io/file_io.h"

/* The open-time checks go through a mapped shard in windows of this many
 * bytes, handing each back to the kernel after it (dataset_internal.h). */
#define SHARD_CHECK_WINDOW ((size_t)16 << 20)

struct nctmc_dataset {
    int32_t vocab_size;
    int32_t seq_len;
    int32_t n_classes;
    uint32_t token_bytes;
    int64_t n_tokens;
    int64_t n_sequences;
    uint32_t crc;           /* the header's checksum of the body */
    shard_map map;          /* the mapped file, or base NULL when read */
    uint8_t *data;          /* the file after the header: tokens, then labels */
    const uint8_t *labels;  /* inside data, or NULL */
    char last_error[NCTMC_ERROR_SIZE];
    /* a copy of the opening context's allocator (alloc.h) */
    nctmc_allocator alloc;
};

/* ---- little-endian fields -------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

void shard_encode_header(const shard_header *h, uint8_t out[SHARD_HEADER_SIZE])
{
    memcpy(out, SHARD_MAGIC, 8);
    put_u32(out + 8, h->version);
    put_u32(out + 12, h->token_bytes);
    put_u32(out + 16, h->vocab_size);
    put_u32(out + 20, h->seq_len);
    put_u32(out + 24, h->n_classes);
    put_u32(out + 28, h->crc);
    put_u64(out + 32, h->n_tokens);
    put_u64(out + 40, h->reserved);
}

static bool decode_header(const uint8_t in[SHARD_HEADER_SIZE], shard_header *h)
{
    if (memcmp(in, SHARD_MAGIC, 8) != 0)
        return false;
    h->version = get_u32(in + 8);
    h->token_bytes = get_u32(in + 12);
    h->vocab_size = get_u32(in + 16);
    h->seq_len = get_u32(in + 20);
    h->n_classes = get_u32(in + 24);
    h->crc = get_u32(in + 28);
    h->n_tokens = get_u64(in + 32);
    h->reserved = get_u64(in + 40);
    return true;
}

uint32_t shard_token_width(uint32_t vocab_size)
{
    return vocab_size <= 256u ? 1u : vocab_size <= 65536u ? 2u : 4u;
}

static uint32_t get_token(const uint8_t *p, uint32_t width)
{
    return width == 1 ? p[0] : width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get_u32(p);
}

static void put_token(uint8_t *p, uint32_t width, uint32_t v)
{
    p[0] = (uint8_t)v;
    if (width >= 2)
        p[1] = (uint8_t)(v >> 8);
    if (width == 4) {
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
    }
}

/* ---- write ------------------------------------------------------------------ */

static nctmc_status check_write_args(nctmc_context *ctx, const char *path,
                                     const int32_t *tokens, int64_t n_tokens,
                                     int32_t vocab_size, int32_t seq_len,
                                     const int32_t *labels, int32_t n_classes)
{
    if (!path || !path[0] || !tokens)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_write: path and tokens must not be NULL");
    if (n_tokens < 1 || vocab_size < 1 || seq_len < 0 || n_classes < 0)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_write: n_tokens = %lld and vocab_size = %d must "
                               "be >= 1, seq_len = %d and n_classes = %d >= 0",
                               (long long)n_tokens, vocab_size, seq_len, n_classes);
    if (seq_len > 0 && n_tokens % seq_len != 0)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_write: %lld tokens are not whole sequences of %d",
                               (long long)n_tokens, seq_len);
    if ((n_classes > 0) != (labels != NULL) || (n_classes > 0 && seq_len == 0))
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_write: labels need n_classes > 0 and a seq_len "
                               "(one label per sequence), and n_classes > 0 needs labels");
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab_size)
            return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                                   "nctmc_dataset_write: token %lld = %d is outside [0, %d)",
                                   (long long)i, tokens[i], vocab_size);
    int64_t n_seq = seq_len > 0 ? n_tokens / seq_len : 0;
    for (int64_t i = 0; labels && i < n_seq; i++)
        if (labels[i] < 0 || labels[i] >= n_classes)
            return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                                   "nctmc_dataset_write: label %lld = %d is outside [0, %d)",
                                   (long long)i, labels[i], n_classes);
    return NCTMC_OK;
}

nctmc_status shard_write_values(file_atomic *af, const int32_t *v, int64_t n, uint32_t width,
                                 uint32_t *crc, char *err, size_t err_size)
{
    uint8_t buf[SHARD_CHUNK];
    size_t per_chunk = SHARD_CHUNK / width;
    for (int64_t done = 0; done < n;) {
        size_t k = (uint64_t)(n - done) < per_chunk ? (size_t)(n - done) : per_chunk;
        for (size_t i = 0; i < k; i++)
            put_token(buf + i * width, width, (uint32_t)v[done + (int64_t)i]);
        *crc = crc32_update(*crc, buf, k * width);
        nctmc_status st = file_atomic_write(af, buf, k * width, err, err_size);
        if (st != NCTMC_OK)
            return st;
        done += (int64_t)k;
    }
    return NCTMC_OK;
}

static nctmc_status write_shard(file_atomic *af, const shard_header *h, const int32_t *tokens,
                                const int32_t *labels, char *err, size_t err_size)
{
    uint8_t head[SHARD_HEADER_SIZE] = {0};
    shard_header final = *h;
    /* the header goes first as zeros; its checksum is known only at the end */
    nctmc_status st = file_atomic_write(af, head, sizeof head, err, err_size);
    if (st == NCTMC_OK)
        st = shard_write_values(af, tokens, (int64_t)h->n_tokens, h->token_bytes, &final.crc, err,
                          err_size);
    if (st == NCTMC_OK && labels)
        st = shard_write_values(af, labels, (int64_t)(h->n_tokens / h->seq_len), 4, &final.crc, err,
                          err_size);
    if (st == NCTMC_OK) {
        shard_encode_header(&final, head);
        st = file_atomic_write_at(af, 0, head, sizeof head, err, err_size);
    }
    return st;
}

NCTMC_API nctmc_status nctmc_dataset_write(nctmc_context *ctx, const char *path,
                                           const int32_t *tokens, int64_t n_tokens,
                                           int32_t vocab_size, int32_t seq_len,
                                           const int32_t *labels, int32_t n_classes)
{
    nctmc_status st = check_write_args(ctx, path, tokens, n_tokens, vocab_size, seq_len, labels,
                                       n_classes);
    if (st != NCTMC_OK)
        return st;
    shard_header h = {SHARD_VERSION, shard_token_width((uint32_t)vocab_size), (uint32_t)vocab_size,
                      (uint32_t)seq_len, (uint32_t)n_classes, 0, (uint64_t)n_tokens, 0};
    char err[NCTMC_ERROR_SIZE];
    file_atomic af;
    st = file_atomic_begin(&af, ctx ? &ctx->alloc : NULL, path, err, sizeof err);
    if (st == NCTMC_OK) {
        st = write_shard(&af, &h, tokens, labels, err, sizeof err);
        if (st == NCTMC_OK)
            st = file_atomic_commit(&af, err, sizeof err);
        else
            file_atomic_abort(&af);
    }
    if (st != NCTMC_OK)
        return ctx_report_fail(ctx, st, "nctmc_dataset_write: %s", err);
    ctx_report_ok(ctx);
    return NCTMC_OK;
}

/* ---- open ------------------------------------------------------------------- */

/* The header's fields must be what a writer would have written. */
static nctmc_status check_header(const shard_header *h, char *err, size_t err_size)
{
    if (h->version != SHARD_VERSION)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "shard version %u is not %u",
                           h->version, SHARD_VERSION);
    if (h->vocab_size < 1 || h->vocab_size > INT32_MAX || h->seq_len > INT32_MAX ||
        h->n_classes > INT32_MAX)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "vocab_size %u, seq_len %u or n_classes %u is out of range",
                           h->vocab_size, h->seq_len, h->n_classes);
    if (h->token_bytes != shard_token_width(h->vocab_size))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "%u bytes per token for a vocabulary of %u (expected %u)",
                           h->token_bytes, h->vocab_size, shard_token_width(h->vocab_size));
    if (h->n_tokens < 1 || h->n_tokens > (uint64_t)INT64_MAX || h->reserved != 0)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "token count %llu or reserved field %llu is invalid",
                           (unsigned long long)h->n_tokens, (unsigned long long)h->reserved);
    if ((h->seq_len > 0 && h->n_tokens % h->seq_len != 0) ||
        (h->n_classes > 0 && h->seq_len == 0))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "%llu tokens, sequence length %u and %u classes do not fit together",
                           (unsigned long long)h->n_tokens, h->seq_len, h->n_classes);
    return NCTMC_OK;
}

/* Body size implied by the header, or false when it overflows. */
static bool body_size(const shard_header *h, uint64_t *bytes)
{
    size_t tok, lab = 0;
    if (h->n_tokens > SIZE_MAX || !checked_mul((size_t)h->n_tokens, h->token_bytes, &tok))
        return false;
    if (h->n_classes > 0 && !checked_mul((size_t)(h->n_tokens / h->seq_len), 4, &lab))
        return false;
    size_t total;
    if (!checked_add(tok, lab, &total) || !checked_add(total, SHARD_HEADER_SIZE, &total))
        return false;
    *bytes = total - SHARD_HEADER_SIZE;
    return true;
}

/* The first token of [first, last) outside the vocabulary, as an error. A
 * vocabulary that fills its width needs no look. */
static nctmc_status check_tokens(const shard_header *h, const uint8_t *body, uint64_t first,
                                 uint64_t last, char *err, size_t err_size)
{
    if (h->token_bytes < 4 && (uint64_t)h->vocab_size >= (uint64_t)1 << (8 * h->token_bytes))
        return NCTMC_OK;
    for (uint64_t i = first; i < last; i++) {
        uint32_t v = get_token(body + i * h->token_bytes, h->token_bytes);
        if (v >= h->vocab_size)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "token %llu = %u is outside the vocabulary [0, %u)",
                               (unsigned long long)i, v, h->vocab_size);
    }
    return NCTMC_OK;
}

static nctmc_status check_labels(const shard_header *h, const uint8_t *body, char *err,
                                 size_t err_size)
{
    const uint8_t *labels = body + h->n_tokens * h->token_bytes;
    uint64_t n_seq = h->n_classes > 0 ? h->n_tokens / h->seq_len : 0;
    for (uint64_t i = 0; i < n_seq; i++) {
        uint32_t v = get_u32(labels + 4 * i);
        if (v >= h->n_classes)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "label %llu = %u is outside [0, %u)", (unsigned long long)i, v,
                               h->n_classes);
    }
    return NCTMC_OK;
}

/* The checksum and every token's range in one pass over windows of the
 * body (a mapped one handed back to the kernel window by window), then the
 * labels. A wrong checksum is reported before a token out of range: it
 * says more (the file is damaged, not written by a wrong writer). */
static nctmc_status check_body(const shard_header *h, const uint8_t *body, uint64_t bytes,
                               shard_map *map, char *err, size_t err_size)
{
    uint64_t token_end = h->n_tokens * h->token_bytes;
    uint32_t crc = 0;
    nctmc_status range = NCTMC_OK;
    char range_err[NCTMC_ERROR_SIZE] = "";
    for (uint64_t at = 0; at < bytes;) {
        size_t n = bytes - at < SHARD_CHECK_WINDOW ? (size_t)(bytes - at) : SHARD_CHECK_WINDOW;
        crc = crc32_update(crc, body + at, n);
        if (range == NCTMC_OK && at < token_end) {
            uint64_t end = at + n < token_end ? at + n : token_end;
            range = check_tokens(h, body, at / h->token_bytes, end / h->token_bytes, range_err,
                                 sizeof range_err);
        }
        if (map)
            shard_map_release(map, SHARD_HEADER_SIZE + (size_t)(at + n));
        at += n;
    }
    if (crc != h->crc)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "checksum mismatch (corrupt shard)");
    if (range != NCTMC_OK)
        return fail_format(err, err_size, range, "%s", range_err);
    nctmc_status st = check_labels(h, body, err, err_size);
    if (map)
        shard_map_release(map, map->size);
    return st;
}

/* The body, mapped or, where the file cannot be mapped, read. */
static nctmc_status load_body(const nctmc_allocator *alloc, int fd, uint64_t file_size,
                              uint64_t bytes, const char *path, shard_map *map, uint8_t **body,
                              char *err, size_t err_size)
{
    if (shard_map_file(fd, file_size, map) == NCTMC_OK) {
        *body = map->base + SHARD_HEADER_SIZE;
        return NCTMC_OK;
    }
    *body = mem_alloc(alloc, (size_t)bytes);
    if (!*body)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate %llu bytes for the shard", (unsigned long long)bytes);
    nctmc_status st = file_pread(fd, SHARD_HEADER_SIZE, *body, (size_t)bytes, path, err,
                                 err_size);
    if (st != NCTMC_OK) {
        mem_free(alloc, *body);
        *body = NULL;
    }
    return st;
}

static void release_body(const nctmc_allocator *alloc, shard_map *map, uint8_t *body)
{
    if (map->base)
        shard_unmap(map);
    else
        mem_free(alloc, body);
}

/* Reads the header, maps the body it implies and checks size and checksum. */
static nctmc_status read_shard(const nctmc_allocator *alloc, int fd, uint64_t file_size,
                               const char *path, shard_header *h, shard_map *map, uint8_t **body,
                               char *err, size_t err_size)
{
    uint8_t head[SHARD_HEADER_SIZE];
    if (file_size < SHARD_HEADER_SIZE)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "%llu bytes is too short for a token shard",
                           (unsigned long long)file_size);
    nctmc_status st = file_pread(fd, 0, head, sizeof head, path, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (!decode_header(head, h))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "not a token shard (bad magic)");
    st = check_header(h, err, err_size);
    uint64_t bytes = 0;
    if (st == NCTMC_OK && (!body_size(h, &bytes) || bytes != file_size - SHARD_HEADER_SIZE))
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "the file has %llu bytes, its header implies %llu (truncated?)",
                         (unsigned long long)file_size,
                         (unsigned long long)(bytes + SHARD_HEADER_SIZE));
    if (st == NCTMC_OK)
        st = load_body(alloc, fd, file_size, bytes, path, map, body, err, err_size);
    if (st != NCTMC_OK)
        return st;
    st = check_body(h, *body, bytes, map->base ? map : NULL, err, err_size);
    if (st != NCTMC_OK) {
        release_body(alloc, map, *body);
        *body = NULL;
    }
    return st;
}

NCTMC_API nctmc_status nctmc_dataset_open(nctmc_context *ctx, const char *path,
                                          nctmc_dataset **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_open: path and out must not be NULL");
    char err[NCTMC_ERROR_SIZE];
    int fd = -1;
    uint64_t size = 0;
    shard_header h = {0};
    shard_map map = {NULL, 0, 0};
    uint8_t *body = NULL;
    const nctmc_allocator *alloc = ctx ? &ctx->alloc : NULL;
    nctmc_status st = file_open_read(path, &fd, &size, err, sizeof err);
    if (st == NCTMC_OK) {
        /* a mapping outlives its descriptor */
        st = read_shard(alloc, fd, size, path, &h, &map, &body, err, sizeof err);
        file_close(fd);
    }
    nctmc_dataset *ds = st == NCTMC_OK ? mem_calloc(alloc, 1, sizeof *ds) : NULL;
    if (st == NCTMC_OK && !ds)
        st = fail_format(err, sizeof err, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    if (st != NCTMC_OK) {
        if (body)
            release_body(alloc, &map, body);
        return ctx_report_fail(ctx, st, "token shard \"%.300s\": %s", path, err);
    }
    if (alloc)
        ds->alloc = *alloc;
    ds->vocab_size = (int32_t)h.vocab_size;
    ds->seq_len = (int32_t)h.seq_len;
    ds->n_classes = (int32_t)h.n_classes;
    ds->token_bytes = h.token_bytes;
    ds->n_tokens = (int64_t)h.n_tokens;
    ds->n_sequences = h.seq_len > 0 ? (int64_t)(h.n_tokens / h.seq_len) : 0;
    ds->crc = h.crc;
    ds->map = map;
    ds->data = body;
    ds->labels = h.n_classes > 0 ? body + h.n_tokens * h.token_bytes : NULL;
    *out = ds;
    ctx_report_ok(ctx);
    return NCTMC_OK;
}

/* ---- access ----------------------------------------------------------------- */

NCTMC_API nctmc_status nctmc_dataset_info_init_sized(nctmc_dataset_info *info, size_t size)
{
    return abi_init(info, size, NULL, &abi_dataset_info);
}

NCTMC_API void nctmc_dataset_free(nctmc_dataset *ds)
{
    if (!ds)
        return;
    nctmc_allocator alloc = ds->alloc;
    release_body(&alloc, &ds->map, ds->data);
    mem_free(&alloc, ds);
}

NCTMC_API nctmc_status nctmc_dataset_get_info(const nctmc_dataset *ds, nctmc_dataset_info *info)
{
    if (!ds)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_dataset *d = (nctmc_dataset *)ds;
    if (!info)
        return FAIL_INTO(d, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_dataset_get_info: info is NULL");
    nctmc_status st = abi_check_output(info, &abi_dataset_info, d->last_error,
                                       sizeof d->last_error);
    if (st != NCTMC_OK)
        return st;
    nctmc_dataset_info full;
    nctmc_dataset_info_init(&full);
    full.vocab_size = ds->vocab_size;
    full.seq_len = ds->seq_len;
    full.n_classes = ds->n_classes;
    full.n_tokens = ds->n_tokens;
    full.n_sequences = ds->n_sequences;
    full.checksum = ds->crc;
    abi_write(info, &full, &abi_dataset_info);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_dataset_read_tokens(nctmc_dataset *ds, int64_t first, int64_t count,
                                                 int32_t *dst)
{
    if (!ds)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (first < 0 || count < 0 || first > ds->n_tokens || count > ds->n_tokens - first)
        return FAIL_INTO(ds, NCTMC_ERR_INVALID_ARGUMENT, "tokens [%lld, %lld + %lld) are outside [0, %lld)", (long long)first,
                         (long long)first, (long long)count, (long long)ds->n_tokens);
    if (!dst && count > 0)
        return FAIL_INTO(ds, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_dataset_read_tokens: dst is NULL");
    const uint8_t *p = ds->data + (size_t)first * ds->token_bytes;
    for (int64_t i = 0; i < count; i++, p += ds->token_bytes)
        dst[i] = (int32_t)get_token(p, ds->token_bytes);
    ds->last_error[0] = '\0';
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_dataset_read_label(nctmc_dataset *ds, int64_t index,
                                                int32_t *label)
{
    if (!ds)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!ds->labels)
        return FAIL_INTO(ds, NCTMC_ERR_INVALID_ARGUMENT, "the dataset has no labels");
    if (index < 0 || index >= ds->n_sequences || !label)
        return FAIL_INTO(ds, NCTMC_ERR_INVALID_ARGUMENT, "label index %lld is outside [0, %lld) or label is NULL",
                         (long long)index, (long long)ds->n_sequences);
    *label = (int32_t)get_u32(ds->labels + 4 * (size_t)index);
    ds->last_error[0] = '\0';
    return NCTMC_OK;
}

NCTMC_API const char *nctmc_dataset_last_error(const nctmc_dataset *ds)
{
    return ds ? ds->last_error : "";
}
