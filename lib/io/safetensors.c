/*
 * safetensors.c — the safetensors container (see safetensors.h and
 * docs/formats.md), written so that Python's `safetensors` reads our files
 * and we read theirs: the header starts with '{', is padded with spaces so
 * that the data starts at a multiple of 64 bytes (8 would do for them), and
 * tensor byte ranges are contiguous in offset order and cover the data
 * section exactly.
 *
 * The reader keeps the file open and reads each tensor when asked, so a
 * checkpoint is never held in memory twice.
 */
#include "safetensors.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "byte_source.h"
#include "base/checked.h"
#include "core/context.h"
#include "base/crc32.h"
#include "file_io.h"
#include "json.h"
#include "base/utf8.h"

/* Python's safetensors refuses larger headers; so do we. */
#define ST_MAX_HEADER 100000000u
/* The data section starts at a multiple of this many bytes (safetensors
 * asks for 8): a loader that maps the file then sees every tensor whose
 * offset is a multiple of 64 on a cache line of its own (model_map.c). */
#define ST_ALIGN 64
#define ST_META_KEY "__metadata__"
/* Data is converted to little-endian through a buffer of this many floats. */
#define ST_CHUNK_FLOATS 65536

typedef struct st_dtype {
    const char *name;
    uint32_t size;
} st_dtype;

/* Every dtype safetensors defines with a whole number of bytes. */
static const st_dtype st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))
#define ST_F32 12

_Static_assert(sizeof(float) == 4, "safetensors F32 needs a 4-byte float");

typedef struct st_entry {
    char *name;
    int dtype;
    int32_t n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;    /* relative to the data section */
} st_entry;

typedef struct st_meta_entry {
    char *key;
    char *value;
    size_t raw_offset;      /* the value's bytes in the header, as written */
    size_t raw_len;
} st_meta_entry;

struct st_file {
    const nctmc_allocator *alloc;   /* of everything below (alloc.h) */
    byte_source src;        /* every read goes through it */
    char *path;             /* the file's name in messages */
    uint64_t data_start;    /* 8 + header length */
    uint64_t file_size;
    st_entry *tensors;      /* file order */
    int32_t n_tensors;
    int32_t tensor_cap;
    int32_t *by_name;       /* indices into tensors, sorted by name */
    st_meta_entry *meta;    /* sorted by key after reading */
    int32_t n_meta;
    int32_t meta_cap;
};

/* ---- little-endian conversion ------------------------------------------- */

static void f32_to_le(const float *src, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        dst[4 * i] = (uint8_t)u;
        dst[4 * i + 1] = (uint8_t)(u >> 8);
        dst[4 * i + 2] = (uint8_t)(u >> 16);
        dst[4 * i + 3] = (uint8_t)(u >> 24);
    }
}

/* In place: the buffer holds n little-endian floats' bytes. */
static void f32_from_le(float *buf, size_t n)
{
    uint8_t *b = (uint8_t *)buf;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                     (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
        memcpy(&buf[i], &u, 4);
    }
}

static uint64_t u64_from_le(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static void u64_to_le(uint64_t v, uint8_t *b)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- writing ------------------------------------------------------------ */

/* The written dtype's name and element size; NULL for an unknown one. */
static const char *write_dtype(const st_tensor_ref *t, size_t *size)
{
    switch (t->dtype) {
    case ST_WRITE_F32: *size = 4; return "F32";
    case ST_WRITE_BF16: *size = 2; return "BF16";
    case ST_WRITE_I8: *size = 1; return "I8";
    default: *size = 0; return NULL;
    }
}

/* Bytes of a tensor's data, or false if the shape is invalid or overflows. */
static bool tensor_bytes(const st_tensor_ref *t, uint64_t *bytes)
{
    size_t n = 1, size;
    if (t->n_dims < 0 || t->n_dims > NCTMC_MAX_DIMS || !write_dtype(t, &size))
        return false;
    for (int32_t k = 0; k < t->n_dims; k++)
        if (t->shape[k] < 0 || !checked_mul(n, (size_t)t->shape[k], &n))
            return false;
    if (!checked_mul(n, size, &n) || n > (size_t)INT64_MAX)
        return false;
    *bytes = n;
    return true;
}

static bool valid_text(const char *s)
{
    size_t n = strlen(s);
    return utf8_first_invalid((const uint8_t *)s, n) == n;
}

/* Finds a duplicate among n strings; returns it or NULL. */
static nctmc_status find_duplicate(const nctmc_allocator *alloc, const char **names, int32_t n,
                                   const char **dup)
{
    *dup = NULL;
    if (n < 2)
        return NCTMC_OK;
    const char **sorted = mem_alloc(alloc, sizeof *sorted * (size_t)n);
    if (!sorted)
        return NCTMC_ERR_OUT_OF_MEMORY;
    memcpy(sorted, names, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_strings);
    for (int32_t i = 1; i < n && !*dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            *dup = sorted[i];
    mem_free(alloc, sorted);
    return NCTMC_OK;
}

static nctmc_status check_meta(const st_meta *meta, int32_t n_meta, char *err, size_t err_size)
{
    if (n_meta < 0 || (n_meta > 0 && !meta))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "safetensors: bad metadata array (%d entries)", n_meta);
    for (int32_t i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "safetensors: metadata entry %d has a NULL key or value", i);
        if (!valid_text(meta[i].key) || !valid_text(meta[i].value))
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "safetensors: metadata \"%.64s\" is not valid UTF-8", meta[i].key);
    }
    return NCTMC_OK;
}

static nctmc_status check_tensors(const st_tensor_ref *t, int32_t n, char *err, size_t err_size)
{
    if (n < 0 || (n > 0 && !t))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "safetensors: bad tensor array (%d entries)", n);
    for (int32_t i = 0; i < n; i++) {
        uint64_t bytes = 0;
        if (!t[i].name || !t[i].name[0] || !valid_text(t[i].name) ||
            strcmp(t[i].name, ST_META_KEY) == 0)
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "safetensors: tensor %d has no usable name", i);
        if (!tensor_bytes(&t[i], &bytes))
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "safetensors: tensor \"%.64s\" has a bad shape", t[i].name);
        if (bytes > 0 && !(t[i].dtype == ST_WRITE_F32 ? (const void *)t[i].data : t[i].raw))
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "safetensors: tensor \"%.64s\" has no data", t[i].name);
    }
    return NCTMC_OK;
}

/* Both name sets must be free of duplicates: a JSON object with two equal
 * keys means different things to different readers. */
static nctmc_status check_unique(const nctmc_allocator *alloc, const st_meta *meta,
                                 int32_t n_meta, const st_tensor_ref *t, int32_t n, char *err,
                                 size_t err_size)
{
    int32_t most = n_meta > n ? n_meta : n;
    const char **names = mem_alloc(alloc, sizeof *names * (size_t)(most > 0 ? most : 1));
    if (!names)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    const char *dup = NULL;
    nctmc_status st;
    for (int32_t i = 0; i < n_meta; i++)
        names[i] = meta[i].key;
    st = find_duplicate(alloc, names, n_meta, &dup);
    if (st == NCTMC_OK && dup)
        st = fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                         "safetensors: metadata key \"%.64s\" appears twice", dup);
    for (int32_t i = 0; st == NCTMC_OK && i < n; i++)
        names[i] = t[i].name;
    if (st == NCTMC_OK)
        st = find_duplicate(alloc, names, n, &dup);
    if (st == NCTMC_OK && dup)
        st = fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                         "safetensors: tensor \"%.64s\" appears twice", dup);
    mem_free(alloc, (void *)names);
    if (st == NCTMC_ERR_OUT_OF_MEMORY)
        return fail_format(err, err_size, st, "out of memory");
    return st;
}

/* What one write needs, gathered so the steps below take one argument. */
typedef struct st_writer {
    const st_meta *meta;
    int32_t n_meta;
    const st_tensor_ref *tensors;
    int32_t n_tensors;
    int32_t checksum_index;     /* the meta entry holding the file's CRC-32, or -1 */
    size_t checksum_offset;     /* where its 8 hex digits start in the header */
    uint32_t crc;               /* of everything written so far */
    const nctmc_allocator *alloc;   /* of the writer's buffers (alloc.h) */
} st_writer;

static void build_meta_header(st_writer *w, json_buf *b)
{
    json_buf_puts(b, "\"" ST_META_KEY "\":{");
    for (int32_t i = 0; i < w->n_meta; i++) {
        json_buf_puts(b, i ? "," : "");
        json_buf_string(b, w->meta[i].key);
        json_buf_puts(b, ":");
        if (i == w->checksum_index)
            w->checksum_offset = b->len + 1; /* after the opening quote */
        json_buf_string(b, w->meta[i].value);
    }
    json_buf_puts(b, "}");
}

/* The JSON header, padded with spaces (JSON whitespace, which every
 * safetensors reader skips) so the data starts ST_ALIGN-byte aligned. */
static nctmc_status build_header(st_writer *w, json_buf *b, char *err, size_t err_size)
{
    json_buf_puts(b, "{");
    if (w->n_meta > 0)
        build_meta_header(w, b);
    uint64_t offset = 0;
    for (int32_t i = 0; i < w->n_tensors; i++) {
        const st_tensor_ref *t = &w->tensors[i];
        uint64_t bytes = 0;
        tensor_bytes(t, &bytes);
        json_buf_puts(b, i || w->n_meta > 0 ? "," : "");
        json_buf_string(b, t->name);
        size_t elem;
        json_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", write_dtype(t, &elem));
        for (int32_t k = 0; k < t->n_dims; k++)
            json_buf_printf(b, "%s%lld", k ? "," : "", (long long)t->shape[k]);
        if (offset > (uint64_t)INT64_MAX - bytes)
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "safetensors: the tensors' total size overflows");
        json_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                        (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    json_buf_puts(b, "}");
    while (!b->failed && (8 + b->len) % ST_ALIGN != 0)
        json_buf_puts(b, " ");
    if (b->failed)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory building a safetensors header");
    if (b->len > ST_MAX_HEADER)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "safetensors: header of %zu bytes exceeds the format's limit", b->len);
    return NCTMC_OK;
}

static nctmc_status write_hashed(file_atomic *af, st_writer *w, const void *data, size_t n,
                                 char *err, size_t err_size)
{
    w->crc = crc32_update(w->crc, data, n);
    return file_atomic_write(af, data, n, err, err_size);
}

/* BF16 and I8 data: bytes as little-endian 16-bit words or as they are. */
static nctmc_status write_raw_data(file_atomic *af, st_writer *w, const st_tensor_ref *t,
                                   uint64_t bytes, uint8_t *chunk, char *err, size_t err_size)
{
    if (t->dtype == ST_WRITE_I8)
        return write_hashed(af, w, t->raw, (size_t)bytes, err, err_size);
    const uint16_t *src = t->raw;
    size_t n = (size_t)(bytes / 2);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < 2 * ST_CHUNK_FLOATS ? n - done : 2 * ST_CHUNK_FLOATS;
        for (size_t i = 0; i < k; i++) {
            chunk[2 * i] = (uint8_t)src[done + i];
            chunk[2 * i + 1] = (uint8_t)(src[done + i] >> 8);
        }
        nctmc_status st = write_hashed(af, w, chunk, 2 * k, err, err_size);
        if (st != NCTMC_OK)
            return st;
        done += k;
    }
    return NCTMC_OK;
}

static nctmc_status write_tensor_data(file_atomic *af, st_writer *w, const st_tensor_ref *t,
                                      uint8_t *chunk, char *err, size_t err_size)
{
    uint64_t bytes = 0;
    tensor_bytes(t, &bytes);
    if (t->dtype != ST_WRITE_F32)
        return write_raw_data(af, w, t, bytes, chunk, err, err_size);
    size_t n = (size_t)(bytes / 4);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < ST_CHUNK_FLOATS ? n - done : ST_CHUNK_FLOATS;
        f32_to_le(t->data + done, chunk, k);
        nctmc_status st = write_hashed(af, w, chunk, 4 * k, err, err_size);
        if (st != NCTMC_OK)
            return st;
        done += k;
    }
    return NCTMC_OK;
}

/* Length, header (checksum digits still "00000000"), data; then the
 * checksum of all of that goes into its place. */
static nctmc_status write_body(file_atomic *af, st_writer *w, const json_buf *header, char *err,
                               size_t err_size)
{
    uint8_t len[8];
    u64_to_le(header->len, len);
    w->crc = 0;
    nctmc_status st = write_hashed(af, w, len, 8, err, err_size);
    if (st == NCTMC_OK)
        st = write_hashed(af, w, header->data, header->len, err, err_size);
    uint8_t *chunk = st == NCTMC_OK ? mem_alloc(w->alloc, 4 * (size_t)ST_CHUNK_FLOATS)
                                    : NULL;
    if (st == NCTMC_OK && !chunk)
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    for (int32_t i = 0; st == NCTMC_OK && i < w->n_tensors; i++)
        st = write_tensor_data(af, w, &w->tensors[i], chunk, err, err_size);
    mem_free(w->alloc, chunk);
    if (st == NCTMC_OK && w->checksum_index >= 0) {
        char digits[9];
        snprintf(digits, sizeof digits, "%08x", (unsigned)w->crc);
        st = file_atomic_write_at(af, 8 + (uint64_t)w->checksum_offset, digits, 8, err,
                                  err_size);
    }
    return st;
}

static nctmc_status write_file(st_writer *w, const char *path, char *err, size_t err_size)
{
    nctmc_status st = check_meta(w->meta, w->n_meta, err, err_size);
    if (st == NCTMC_OK)
        st = check_tensors(w->tensors, w->n_tensors, err, err_size);
    if (st == NCTMC_OK)
        st = check_unique(w->alloc, w->meta, w->n_meta, w->tensors, w->n_tensors, err,
                          err_size);
    json_buf header = {0};
    header.alloc = w->alloc;
    if (st == NCTMC_OK)
        st = build_header(w, &header, err, err_size);
    file_atomic af;
    if (st == NCTMC_OK)
        st = file_atomic_begin(&af, w->alloc, path, err, err_size);
    if (st == NCTMC_OK) {
        st = write_body(&af, w, &header, err, err_size);
        if (st == NCTMC_OK)
            st = file_atomic_commit(&af, err, err_size);
        else
            file_atomic_abort(&af);
    }
    json_buf_free(&header);
    return st;
}

nctmc_status st_write_file(const char *path, const st_meta *meta, int32_t n_meta,
                           const st_tensor_ref *tensors, int32_t n_tensors, char *err,
                           size_t err_size)
{
    if (!path || !path[0])
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "safetensors: no file name");
    st_writer w = {meta, n_meta, tensors, n_tensors, -1, 0, 0, NULL};
    return write_file(&w, path, err, err_size);
}

nctmc_status st_write_file_checksummed(const char *path, const st_meta *meta, int32_t n_meta,
                                       const char *checksum_key, const st_tensor_ref *tensors,
                                       int32_t n_tensors, char *err, size_t err_size)
{
    return st_write_file_checksummed_with(NULL, path, meta, n_meta, checksum_key, tensors,
                                          n_tensors, err, err_size);
}

nctmc_status st_write_file_checksummed_with(const nctmc_allocator *alloc, const char *path,
                                            const st_meta *meta, int32_t n_meta,
                                            const char *checksum_key,
                                            const st_tensor_ref *tensors, int32_t n_tensors,
                                            char *err, size_t err_size)
{
    if (!path || !path[0] || !checksum_key || n_meta < 0 || n_meta == INT32_MAX ||
        (n_meta > 0 && !meta))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "safetensors: bad arguments");
    /* the checksum is one more metadata entry, so names are checked as one */
    st_meta *all = mem_alloc(alloc, sizeof *all * ((size_t)n_meta + 1));
    if (!all)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    if (n_meta > 0)
        memcpy(all, meta, sizeof *all * (size_t)n_meta);
    all[n_meta] = (st_meta){checksum_key, "00000000"};
    st_writer w = {all, n_meta + 1, tensors, n_tensors, n_meta, 0, 0, alloc};
    nctmc_status st = write_file(&w, path, err, err_size);
    mem_free(alloc, all);
    return st;
}

/* ---- reading: the header ------------------------------------------------ */

static nctmc_status grow(void **items, int32_t *cap, int32_t count, size_t size,
                         json_reader *r)
{
    if (count < *cap)
        return NCTMC_OK;
    if (*cap > INT32_MAX / 2)
        return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT, "too many header entries");
    int32_t new_cap = *cap ? *cap * 2 : 16;
    void *p = mem_realloc(r->alloc, *items, size * (size_t)*cap, size * (size_t)new_cap);
    if (!p)
        return fail_format(r->err, r->err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    *items = p;
    *cap = new_cap;
    return NCTMC_OK;
}

static nctmc_status header_fail(json_reader *r, const char *what, const char *name)
{
    return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT, "header, byte %zu: %s \"%.64s\"",
                       r->at, what, name);
}

/* "__metadata__": an object of strings, or null. */
static nctmc_status parse_metadata(json_reader *r, st_file *f)
{
    json_skip_ws(r);
    if (r->n - r->at >= 4 && memcmp(r->s + r->at, "null", 4) == 0) {
        r->at += 4;
        return NCTMC_OK;
    }
    nctmc_status st = json_expect(r, '{', "to open " ST_META_KEY);
    if (st != NCTMC_OK || json_accept(r, '}'))
        return st;
    do {
        st = grow((void **)&f->meta, &f->meta_cap, f->n_meta, sizeof *f->meta, r);
        if (st != NCTMC_OK)
            return st;
        st_meta_entry *m = &f->meta[f->n_meta];
        m->key = m->value = NULL;
        st = json_parse_string(r, &m->key, NULL);
        if (st == NCTMC_OK)
            st = json_expect(r, ':', "after a metadata key");
        if (st == NCTMC_OK && !json_peek(r, '"'))
            st = header_fail(r, "metadata value is not a string:", m->key ? m->key : "");
        m->raw_offset = r->at + 1;
        if (st == NCTMC_OK)
            st = json_parse_string(r, &m->value, NULL);
        m->raw_len = st == NCTMC_OK ? r->at - 1 - m->raw_offset : 0;
        f->n_meta++; /* counted even when half-parsed, so st_file_free frees it */
        if (st != NCTMC_OK)
            return st;
    } while (json_accept(r, ','));
    return json_expect(r, '}', "or ',' in " ST_META_KEY);
}

static int find_dtype(const char *name)
{
    for (int k = 0; k < ST_N_DTYPES; k++)
        if (strcmp(st_dtypes[k].name, name) == 0)
            return k;
    return -1;
}

/* An array of at most `max` integers; *count receives how many. */
static nctmc_status parse_int_array(json_reader *r, uint64_t *v, int32_t max, int32_t *count)
{
    nctmc_status st = json_expect(r, '[', "to open an array");
    *count = 0;
    if (st != NCTMC_OK || json_accept(r, ']'))
        return st;
    do {
        if (*count >= max)
            return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                               "header, byte %zu: array longer than %d", r->at, max);
        st = json_parse_u64(r, &v[*count]);
        if (st != NCTMC_OK)
            return st;
        (*count)++;
    } while (json_accept(r, ','));
    return json_expect(r, ']', "or ',' in an array");
}

static nctmc_status parse_dtype(json_reader *r, st_entry *e)
{
    char *dtype = NULL;
    nctmc_status st = json_parse_string(r, &dtype, NULL);
    if (st == NCTMC_OK && (e->dtype = find_dtype(dtype)) < 0)
        st = header_fail(r, "unknown dtype", dtype);
    mem_free(r->alloc, dtype);
    return st;
}

static nctmc_status parse_shape(json_reader *r, st_entry *e)
{
    uint64_t dims[ST_MAX_DIMS];
    nctmc_status st = parse_int_array(r, dims, ST_MAX_DIMS, &e->n_dims);
    for (int32_t k = 0; st == NCTMC_OK && k < e->n_dims; k++)
        e->shape[k] = (int64_t)dims[k];
    return st;
}

static nctmc_status parse_offsets(json_reader *r, st_entry *e)
{
    uint64_t v[2];
    int32_t count;
    nctmc_status st = parse_int_array(r, v, 2, &count);
    if (st == NCTMC_OK && count != 2)
        return header_fail(r, "data_offsets needs two numbers for", e->name);
    e->begin = v[0];
    e->end = v[1];
    return st;
}

/* One field of a tensor's object; unknown ones are skipped, as Python's
 * reader does. seen: bit 0 dtype, 1 shape, 2 data_offsets. */
static nctmc_status parse_tensor_field(json_reader *r, st_entry *e, unsigned *seen)
{
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    char *key = NULL;
    nctmc_status st = json_parse_string(r, &key, NULL);
    if (st == NCTMC_OK)
        st = json_expect(r, ':', "after a key");
    int k = 0;
    while (st == NCTMC_OK && k < 3 && strcmp(key, fields[k]) != 0)
        k++;
    mem_free(r->alloc, key);
    if (st != NCTMC_OK)
        return st;
    if (k == 3)
        return json_skip_value(r, 2);
    if (*seen & (1u << k))
        return header_fail(r, "a field appears twice in tensor", e->name);
    *seen |= 1u << k;
    return k == 0 ? parse_dtype(r, e) : k == 1 ? parse_shape(r, e) : parse_offsets(r, e);
}

static nctmc_status parse_tensor(json_reader *r, st_entry *e)
{
    nctmc_status st = json_expect(r, '{', "to open a tensor's description");
    unsigned seen = 0;
    if (st != NCTMC_OK)
        return st;
    if (!json_accept(r, '}')) {
        do
            st = parse_tensor_field(r, e, &seen);
        while (st == NCTMC_OK && json_accept(r, ','));
        if (st == NCTMC_OK)
            st = json_expect(r, '}', "or ',' in a tensor's description");
    }
    if (st == NCTMC_OK && seen != 7)
        return header_fail(r, "dtype, shape or data_offsets missing for tensor", e->name);
    return st;
}

/* One member of the top-level object. */
static nctmc_status parse_member(json_reader *r, st_file *f, bool *seen_meta)
{
    char *name = NULL;
    nctmc_status st = json_parse_string(r, &name, NULL);
    if (st == NCTMC_OK)
        st = json_expect(r, ':', "after a tensor name");
    if (st == NCTMC_OK && strcmp(name, ST_META_KEY) == 0) {
        mem_free(r->alloc, name);
        if (*seen_meta)
            return header_fail(r, "two", ST_META_KEY);
        *seen_meta = true;
        return parse_metadata(r, f);
    }
    if (st == NCTMC_OK)
        st = grow((void **)&f->tensors, &f->tensor_cap, f->n_tensors, sizeof *f->tensors, r);
    if (st != NCTMC_OK) {
        mem_free(r->alloc, name);
        return st;
    }
    st_entry *e = &f->tensors[f->n_tensors++];
    memset(e, 0, sizeof *e);
    e->name = name;
    return parse_tensor(r, e);
}

static nctmc_status parse_header(json_reader *r, st_file *f)
{
    if (r->n == 0 || r->s[0] != '{')
        return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                           "header does not start with '{': not a safetensors file");
    r->at = 1;
    bool seen_meta = false;
    nctmc_status st = NCTMC_OK;
    if (!json_accept(r, '}')) {
        do
            st = parse_member(r, f, &seen_meta);
        while (st == NCTMC_OK && json_accept(r, ','));
        if (st == NCTMC_OK)
            st = json_expect(r, '}', "or ',' at the top level");
    }
    json_skip_ws(r);
    if (st == NCTMC_OK && r->at != r->n)
        return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                           "header, byte %zu: data after the JSON object", r->at);
    return st;
}

/* ---- reading: checks ---------------------------------------------------- */

static nctmc_status check_entry(const st_entry *e, char *err, size_t err_size)
{
    uint64_t n = st_dtypes[e->dtype].size;
    for (int32_t k = 0; k < e->n_dims; k++) {
        uint64_t d = (uint64_t)e->shape[k];
        if (d != 0 && n > (uint64_t)INT64_MAX / d)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tensor \"%.64s\": shape overflows", e->name);
        n *= d;
    }
    if (e->end < e->begin || e->end - e->begin != n)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tensor \"%.64s\": data_offsets [%llu, %llu] do not hold its %llu "
                           "bytes",
                           e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)n);
    return NCTMC_OK;
}

/* Sorts indices by (begin, end), so a zero-sized tensor comes before a sized
 * one at the same offset. idx has room for 2n entries (the second half is
 * scratch). */
static void sort_by_offset(const st_entry *t, int32_t *idx, int32_t n)
{
    /* a bottom-up merge sort: qsort has no context argument in C11, and
     * the comparison needs the entries */
    int32_t *tmp = idx + n;
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int32_t a = lo, b = mid, o = lo;
            while (a < mid || b < hi) {
                bool take_a = b >= hi ||
                              (a < mid && (t[idx[a]].begin < t[idx[b]].begin ||
                                           (t[idx[a]].begin == t[idx[b]].begin &&
                                            t[idx[a]].end <= t[idx[b]].end)));
                tmp[o++] = take_a ? idx[a++] : idx[b++];
            }
        }
        memcpy(idx, tmp, sizeof *idx * (size_t)n);
    }
}

/* Ranges in offset order must tile [0, data_size) exactly: no gap (hidden
 * bytes), no overlap (one byte, two meanings), nothing past the end. */
static nctmc_status check_ranges(const st_file *f, uint64_t data_size, char *err,
                                 size_t err_size)
{
    int32_t n = f->n_tensors;
    int32_t *idx = mem_alloc(f->alloc, sizeof *idx * 2 * (size_t)(n > 0 ? n : 1));
    if (!idx)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    for (int32_t i = 0; i < n; i++)
        idx[i] = i;
    sort_by_offset(f->tensors, idx, n);
    uint64_t at = 0;
    nctmc_status st = NCTMC_OK;
    for (int32_t i = 0; i < n && st == NCTMC_OK; i++) {
        const st_entry *e = &f->tensors[idx[i]];
        if (e->begin != at)
            st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                             "tensor \"%.64s\" starts at data byte %llu, expected %llu (a gap "
                             "or an overlap)",
                             e->name, (unsigned long long)e->begin, (unsigned long long)at);
        at = e->end;
    }
    if (st == NCTMC_OK && at != data_size)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "the tensors cover %llu data bytes, the file has %llu",
                         (unsigned long long)at, (unsigned long long)data_size);
    mem_free(f->alloc, idx);
    return st;
}

static int compare_meta(const void *a, const void *b)
{
    return strcmp(((const st_meta_entry *)a)->key, ((const st_meta_entry *)b)->key);
}

/* Name index for lookups, and the duplicate check that comes with it. */
static nctmc_status index_names(st_file *f, char *err, size_t err_size)
{
    if (f->n_meta > 0) /* an empty array may be NULL, which qsort must not see */
        qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, compare_meta);
    for (int32_t i = 1; i < f->n_meta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "metadata key \"%.64s\" appears twice", f->meta[i].key);
    size_t n = (size_t)(f->n_tensors > 0 ? f->n_tensors : 1);
    const char **names = mem_alloc(f->alloc, sizeof *names * n);
    f->by_name = mem_alloc(f->alloc, sizeof *f->by_name * n);
    if (!names || !f->by_name) {
        mem_free(f->alloc, (void *)names);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int32_t i = 0; i < f->n_tensors; i++)
        names[i] = f->tensors[i].name;
    qsort(names, (size_t)f->n_tensors, sizeof *names, compare_strings);
    nctmc_status st = NCTMC_OK;
    for (int32_t i = 1; i < f->n_tensors && st == NCTMC_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            st = fail_format(err, err_size, NCTMC_ERR_FORMAT, "tensor \"%.64s\" appears twice",
                             names[i]);
    /* names are unique now, so each entry's name has exactly one slot */
    for (int32_t e = 0; e < f->n_tensors && st == NCTMC_OK; e++) {
        const char *key = f->tensors[e].name;
        const char **hit =
            bsearch(&key, names, (size_t)f->n_tensors, sizeof *names, compare_strings);
        f->by_name[hit - names] = e;
    }
    mem_free(f->alloc, (void *)names);
    return st;
}

/* ---- reading: the file -------------------------------------------------- */

static nctmc_status read_header(st_file *f, uint64_t file_size, char *err, size_t err_size)
{
    uint8_t len_bytes[8];
    if (file_size < 8)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "%llu bytes is too short for a safetensors file",
                           (unsigned long long)file_size);
    nctmc_status st = byte_source_read(&f->src, 0, len_bytes, 8, err, err_size);
    if (st != NCTMC_OK)
        return st;
    uint64_t n = u64_from_le(len_bytes);
    if (n < 2 || n > ST_MAX_HEADER || n > file_size - 8)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "header length %llu is impossible for a file of %llu bytes",
                           (unsigned long long)n, (unsigned long long)file_size);
    uint8_t *header = mem_alloc(f->alloc, (size_t)n);
    if (!header)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    st = byte_source_read(&f->src, 8, header, (size_t)n, err, err_size);
    json_reader r = {header, (size_t)n, 0, err, err_size, f->alloc};
    if (st == NCTMC_OK)
        st = parse_header(&r, f);
    mem_free(f->alloc, header);
    f->data_start = 8 + n;
    for (int32_t i = 0; i < f->n_tensors && st == NCTMC_OK; i++)
        st = check_entry(&f->tensors[i], err, err_size);
    if (st == NCTMC_OK)
        st = check_ranges(f, file_size - f->data_start, err, err_size);
    if (st == NCTMC_OK)
        st = index_names(f, err, err_size);
    return st;
}

/* Puts the file name in front of a message (which may be in err itself). */
static nctmc_status with_path(nctmc_status st, const char *path, char *err, size_t err_size)
{
    if (!err || !err_size)
        return st;
    char msg[NCTMC_ERROR_SIZE];
    snprintf(msg, sizeof msg, "%s", err);
    if (strstr(msg, path))
        return st;
    return fail_format(err, err_size, st, "\"%.300s\": %s", path, msg);
}

/* A new st_file named `name` (copied), its source not yet set up. */
static st_file *st_file_new(const nctmc_allocator *alloc, const char *name)
{
    st_file *f = mem_calloc(alloc, 1, sizeof *f);
    if (!f)
        return NULL;
    f->alloc = alloc;
    f->src.fd = -1;
    f->path = mem_strdup(alloc, name);
    if (!f->path) {
        mem_free(alloc, f);
        return NULL;
    }
    return f;
}

/* Reads and checks the header through f->src, which the caller has set
 * up: the one path of every kind of source. Frees f on failure. */
static nctmc_status st_file_finish(st_file *f, nctmc_status st, st_file **out, char *err,
                                   size_t err_size)
{
    if (st == NCTMC_OK) {
        f->file_size = byte_source_size(&f->src);
        st = read_header(f, f->file_size, err, err_size);
    }
    if (st != NCTMC_OK) {
        st = with_path(st, f->path, err, err_size);
        st_file_free(f);
        return st;
    }
    *out = f;
    return NCTMC_OK;
}

nctmc_status st_open_file(const nctmc_allocator *alloc, const char *path, st_file **out,
                          char *err, size_t err_size)
{
    if (!path || !out)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_read_file: path and out must not be NULL");
    *out = NULL;
    st_file *f = st_file_new(alloc, path);
    if (!f)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_status st = byte_source_open_file(&f->src, f->path, err, err_size);
    return st_file_finish(f, st, out, err, err_size);
}

nctmc_status st_read_file(const char *path, st_file **out, char *err, size_t err_size)
{
    return st_open_file(NULL, path, out, err, err_size);
}

nctmc_status st_open_memory(const nctmc_allocator *alloc, const void *data, size_t size,
                            const char *name, st_file **out, char *err, size_t err_size)
{
    if ((!data && size > 0) || !name || !out || (uint64_t)size > (uint64_t)INT64_MAX)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_open_memory: bad arguments");
    *out = NULL;
    st_file *f = st_file_new(alloc, name);
    if (!f)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    byte_source_init_memory(&f->src, data, size, f->path);
    return st_file_finish(f, NCTMC_OK, out, err, err_size);
}

nctmc_status st_open_reader(const nctmc_allocator *alloc, const nctmc_reader *reader,
                            const char *name, st_file **out, char *err, size_t err_size)
{
    if (!name || !out)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_open_reader: bad arguments");
    *out = NULL;
    st_file *f = st_file_new(alloc, name);
    if (!f)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_status st = byte_source_init_reader(&f->src, reader, f->path, err, err_size);
    return st_file_finish(f, st, out, err, err_size);
}

void st_file_free(st_file *f)
{
    if (!f)
        return;
    const nctmc_allocator *a = f->alloc;
    byte_source_close(&f->src);
    for (int32_t i = 0; i < f->n_tensors; i++)
        mem_free(a, f->tensors[i].name);
    for (int32_t i = 0; i < f->n_meta; i++) {
        mem_free(a, f->meta[i].key);
        mem_free(a, f->meta[i].value);
    }
    mem_free(a, f->tensors);
    mem_free(a, f->by_name);
    mem_free(a, f->meta);
    mem_free(a, f->path);
    mem_free(a, f);
}

/* ---- queries ------------------------------------------------------------ */

static const st_meta_entry *find_meta(const st_file *f, const char *key)
{
    if (!f || !key || f->n_meta == 0)
        return NULL;
    st_meta_entry probe = {(char *)key, NULL, 0, 0};
    return bsearch(&probe, f->meta, (size_t)f->n_meta, sizeof *f->meta, compare_meta);
}

const char *st_file_meta(const st_file *f, const char *key)
{
    const st_meta_entry *hit = find_meta(f, key);
    return hit ? hit->value : NULL;
}

int32_t st_file_n_meta(const st_file *f)
{
    return f ? f->n_meta : 0;
}

const char *st_file_meta_key(const st_file *f, int32_t index)
{
    return f && index >= 0 && index < f->n_meta ? f->meta[index].key : NULL;
}

int32_t st_file_n_tensors(const st_file *f)
{
    return f ? f->n_tensors : 0;
}

const char *st_file_tensor_name(const st_file *f, int32_t index)
{
    return f && index >= 0 && index < f->n_tensors ? f->tensors[index].name : NULL;
}

int32_t st_file_find_tensor(const st_file *f, const char *name)
{
    if (!f || !name)
        return -1;
    int32_t lo = 0, hi = f->n_tensors - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[f->by_name[mid]].name, name);
        if (c == 0)
            return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

bool st_file_tensor_desc(const st_file *f, int32_t index, st_tensor_desc *desc)
{
    if (!f || !desc || index < 0 || index >= f->n_tensors)
        return false;
    const st_entry *e = &f->tensors[index];
    desc->name = e->name;
    desc->dtype = st_dtypes[e->dtype].name;
    desc->n_dims = e->n_dims;
    memset(desc->shape, 0, sizeof desc->shape);
    memcpy(desc->shape, e->shape, sizeof e->shape[0] * (size_t)e->n_dims);
    desc->n_bytes = e->end - e->begin;
    return true;
}

static bool same_shape(const st_entry *e, int32_t n_dims, const int64_t *shape)
{
    if (e->n_dims != n_dims)
        return false;
    for (int32_t k = 0; k < n_dims; k++)
        if (e->shape[k] != shape[k])
            return false;
    return true;
}

static void format_shape(char *out, size_t size, int32_t n_dims, const int64_t *shape)
{
    size_t at = (size_t)snprintf(out, size, "[");
    for (int32_t k = 0; k < n_dims && at < size; k++)
        at += (size_t)snprintf(out + at, size - at, "%s%lld", k ? ", " : "",
                               (long long)shape[k]);
    if (at < size)
        snprintf(out + at, size - at, "]");
}

nctmc_status st_file_read_f32(const st_file *f, const char *name, int32_t n_dims,
                              const int64_t *shape, float *dst, char *err, size_t err_size)
{
    if (!f || !name || n_dims < 0 || n_dims > ST_MAX_DIMS || (n_dims > 0 && !shape))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_file_read_f32: bad arguments");
    int32_t k = st_file_find_tensor(f, name);
    if (k < 0)
        return fail_format(err, err_size, NCTMC_ERR_NOT_FOUND,
                           "\"%.300s\" has no tensor \"%.64s\"", f->path, name);
    const st_entry *e = &f->tensors[k];
    if (e->dtype != ST_F32)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tensor \"%.64s\" is %s, expected F32", name, st_dtypes[e->dtype].name);
    if (!same_shape(e, n_dims, shape)) {
        char got[96], want[96];
        format_shape(got, sizeof got, e->n_dims, e->shape);
        format_shape(want, sizeof want, n_dims, shape);
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tensor \"%.64s\" has shape %s, expected %s", name, got, want);
    }
    size_t bytes = (size_t)(e->end - e->begin);
    if (bytes > 0 && !dst)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_file_read_f32: dst is NULL");
    nctmc_status st = byte_source_read(&f->src, f->data_start + e->begin, dst, bytes, err,
                                       err_size);
    if (st == NCTMC_OK)
        f32_from_le(dst, bytes / 4);
    return st;
}

nctmc_status st_file_read_raw(const st_file *f, const char *name, const char *dtype,
                              int32_t n_dims, const int64_t *shape, void *dst, char *err,
                              size_t err_size)
{
    int want = dtype ? find_dtype(dtype) : -1;
    if (!f || !name || n_dims < 0 || n_dims > ST_MAX_DIMS || (n_dims > 0 && !shape) ||
        want < 0 || st_dtypes[want].size > 2)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_file_read_raw: bad arguments");
    int32_t k = st_file_find_tensor(f, name);
    if (k < 0)
        return fail_format(err, err_size, NCTMC_ERR_NOT_FOUND,
                           "\"%.300s\" has no tensor \"%.64s\"", f->path, name);
    const st_entry *e = &f->tensors[k];
    if (e->dtype != want)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "tensor \"%.64s\" is %s, expected %s",
                           name, st_dtypes[e->dtype].name, st_dtypes[want].name);
    if (!same_shape(e, n_dims, shape)) {
        char got[96], wanted[96];
        format_shape(got, sizeof got, e->n_dims, e->shape);
        format_shape(wanted, sizeof wanted, n_dims, shape);
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "tensor \"%.64s\" has shape %s, expected %s", name, got, wanted);
    }
    size_t bytes = (size_t)(e->end - e->begin);
    if (bytes > 0 && !dst)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_file_read_raw: dst is NULL");
    nctmc_status st = byte_source_read(&f->src, f->data_start + e->begin, dst, bytes, err,
                                       err_size);
    if (st == NCTMC_OK && st_dtypes[want].size == 2) {
        uint8_t *b = dst;
        for (size_t i = 0; i < bytes / 2; i++) {
            uint16_t v = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
            memcpy(b + 2 * i, &v, 2);
        }
    }
    return st;
}

/* ---- the checksum --------------------------------------------------------- */

static bool parse_hex8(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return s[8] == '\0';
}

/* CRC-32 of the whole file with the checksum's own digits read as '0'. */
static nctmc_status file_crc(const st_file *f, uint64_t digits_at, uint32_t *crc, char *err,
                             size_t err_size)
{
    enum { CHUNK = 1 << 20 };
    /* no bigger than the file: a small checkpoint is checked on every load,
     * and a 1 MiB buffer for it costs more than reading it */
    size_t chunk = f->file_size < CHUNK ? (size_t)f->file_size : CHUNK;
    uint8_t *buf = mem_alloc(f->alloc, chunk ? chunk : 1);
    if (!buf)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_status st = NCTMC_OK;
    *crc = 0;
    for (uint64_t at = 0; at < f->file_size && st == NCTMC_OK;) {
        size_t n = f->file_size - at < chunk ? (size_t)(f->file_size - at) : chunk;
        st = byte_source_read(&f->src, at, buf, n, err, err_size);
        for (uint64_t k = digits_at; st == NCTMC_OK && k < digits_at + 8; k++)
            if (k >= at && k < at + n)
                buf[k - at] = '0';
        if (st == NCTMC_OK)
            *crc = crc32_update(*crc, buf, n);
        at += n;
    }
    mem_free(f->alloc, buf);
    return st;
}

nctmc_status st_file_verify_checksum(const st_file *f, const char *key, char *err,
                                     size_t err_size)
{
    const st_meta_entry *m = find_meta(f, key);
    uint32_t want = 0, got = 0;
    if (!m)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "no \"%.64s\" checksum metadata",
                           key ? key : "");
    if (m->raw_len != 8 || !parse_hex8(m->value, &want))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "checksum \"%.64s\" is not 8 lowercase hexadecimal digits", key);
    nctmc_status st = file_crc(f, 8 + (uint64_t)m->raw_offset, &got, err, err_size);
    if (st == NCTMC_OK && got != want)
        st = fail_format(err, err_size, NCTMC_ERR_FORMAT,
                         "checksum mismatch: the file's CRC-32 is %08x, it records %08x "
                         "(corrupt file)",
                         (unsigned)got, (unsigned)want);
    return st;
}

/* ---- for loaders that map the file ------------------------------------ */

int st_file_fd(const st_file *f)
{
    return f ? f->src.fd : -1;
}

uint64_t st_file_size(const st_file *f)
{
    return f ? f->file_size : 0;
}

bool st_file_tensor_offset(const st_file *f, int32_t index, uint64_t *offset)
{
    if (!f || !offset || index < 0 || index >= f->n_tensors)
        return false;
    *offset = f->data_start + f->tensors[index].begin;
    return true;
}

nctmc_status st_file_read_bytes(const st_file *f, uint64_t offset, void *dst, size_t n,
                                char *err, size_t err_size)
{
    if (!f || (n > 0 && !dst))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "st_file_read_bytes: bad arguments");
    return byte_source_read(&f->src, offset, dst, n, err, err_size);
}
