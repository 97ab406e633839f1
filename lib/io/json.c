/*
 * json.c — bounded JSON reading and escaped writing (see json.h).
 */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "core/context.h"
#include "base/utf8.h"

static nctmc_status json_fail(json_reader *r, const char *what)
{
    return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT, "JSON header, byte %zu: %s",
                       r->at, what);
}

void json_skip_ws(json_reader *r)
{
    while (r->at < r->n) {
        uint8_t c = r->s[r->at];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
            break;
        r->at++;
    }
}

bool json_peek(json_reader *r, char c)
{
    json_skip_ws(r);
    return r->at < r->n && r->s[r->at] == (uint8_t)c;
}

bool json_accept(json_reader *r, char c)
{
    if (!json_peek(r, c))
        return false;
    r->at++;
    return true;
}

nctmc_status json_expect(json_reader *r, char c, const char *what)
{
    if (json_accept(r, c))
        return NCTMC_OK;
    char msg[96];
    snprintf(msg, sizeof msg, "expected '%c' %s", c, what);
    return json_fail(r, msg);
}

static int hex_value(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads the four hex digits of a \u escape at r->at. */
static bool read_hex4(json_reader *r, uint32_t *out)
{
    if (r->n - r->at < 4)
        return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(r->s[r->at + (size_t)i]);
        if (h < 0)
            return false;
        v = (v << 4) | (uint32_t)h;
    }
    r->at += 4;
    *out = v;
    return true;
}

/* Decodes \uXXXX (r->at just past the 'u'), joining a surrogate pair. */
static nctmc_status read_unicode_escape(json_reader *r, uint32_t *cp)
{
    uint32_t hi;
    if (!read_hex4(r, &hi))
        return json_fail(r, "bad \\u escape");
    if (hi >= 0xDC00u && hi <= 0xDFFFu)
        return json_fail(r, "\\u escape is a lone low surrogate");
    if (hi >= 0xD800u && hi <= 0xDBFFu) {
        uint32_t lo;
        if (r->n - r->at < 2 || r->s[r->at] != '\\' || r->s[r->at + 1] != 'u')
            return json_fail(r, "high surrogate not followed by a low one");
        r->at += 2;
        if (!read_hex4(r, &lo) || lo < 0xDC00u || lo > 0xDFFFu)
            return json_fail(r, "high surrogate not followed by a low one");
        hi = 0x10000u + ((hi - 0xD800u) << 10) + (lo - 0xDC00u);
    }
    if (hi == 0)
        return json_fail(r, "\\u0000 in a string");
    *cp = hi;
    return NCTMC_OK;
}

/* Decodes one escape (r->at at the byte after '\') into out; returns bytes. */
static nctmc_status read_escape(json_reader *r, uint8_t *out, size_t *len)
{
    if (r->at >= r->n)
        return json_fail(r, "unterminated string");
    uint8_t c = r->s[r->at++];
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
        out[0] = (uint8_t)to[k - from];
        *len = 1;
        return NCTMC_OK;
    }
    if (c != 'u')
        return json_fail(r, "unknown escape in a string");
    uint32_t cp = 0;
    nctmc_status st = read_unicode_escape(r, &cp);
    if (st == NCTMC_OK)
        *len = utf8_encode(cp, out);
    return st;
}

/* Finds the closing quote from r->at (just past the opening one), so the
 * output can be sized before decoding: decoding never lengthens. memchr
 * jumps from quote to backslash rather than testing every byte: a
 * checkpoint header is hundreds of tensor names long and read on every
 * load. */
static bool find_string_end(const json_reader *r, size_t *end)
{
    size_t i = r->at;
    while (i < r->n) {
        const uint8_t *quote = memchr(r->s + i, '"', r->n - i);
        if (!quote)
            return false;
        size_t q = (size_t)(quote - r->s);
        const uint8_t *slash = memchr(r->s + i, '\\', q - i);
        if (!slash) {
            *end = q;
            return true;
        }
        i = (size_t)(slash - r->s) + 2; /* past the escaped byte */
    }
    return false;
}

/* The length of the leading run of s[0..n) that is printable ASCII
 * (0x20..0x7F), which is copied as it is: 8 bytes are tested at once (none
 * with the top bit set, none below 0x20). The caller stops n at the next
 * backslash; the closing quote is past it. */
static size_t ascii_run(const uint8_t *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101u, tops = 0x8080808080808080u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        /* (w - 0x20 per byte) & ~w has a top bit set iff a byte is < 0x20 */
        if ((w | ((w - 0x20u * ones) & ~w)) & tops)
            break;
    }
    while (i < n && s[i] >= 0x20u && s[i] < 0x80u)
        i++;
    return i;
}

/* Where the next backslash from r->at is, or end if none before it. Kept
 * by the caller between characters, so a long string is searched once. */
static size_t next_backslash(const json_reader *r, size_t end)
{
    const uint8_t *p = memchr(r->s + r->at, '\\', end - r->at);
    return p ? (size_t)(p - r->s) : end;
}

/* Copies one raw (unescaped) character after checking it. */
static nctmc_status copy_raw_char(json_reader *r, size_t end, uint8_t *out, size_t *len)
{
    uint8_t c = r->s[r->at];
    if (c < 0x20u)
        return json_fail(r, "control character in a string");
    uint32_t cp;
    size_t n = utf8_decode(r->s + r->at, end - r->at, &cp);
    if (n == 0)
        return json_fail(r, "invalid UTF-8 in a string");
    memcpy(out, r->s + r->at, n);
    r->at += n;
    *len = n;
    return NCTMC_OK;
}

nctmc_status json_parse_string(json_reader *r, char **out, size_t *len)
{
    nctmc_status st = json_expect(r, '"', "(a string)");
    if (st != NCTMC_OK)
        return st;
    size_t end;
    if (!find_string_end(r, &end))
        return json_fail(r, "unterminated string");
    uint8_t *buf = mem_alloc(r->alloc, end - r->at + 1);
    if (!buf)
        return fail_format(r->err, r->err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    size_t n = 0, slash = next_backslash(r, end);
    while (st == NCTMC_OK && r->at < end) {
        if (slash < r->at)
            slash = next_backslash(r, end);
        size_t k = ascii_run(r->s + r->at, slash - r->at);
        if (k > 0) {
            memcpy(buf + n, r->s + r->at, k);
            r->at += k;
        } else if (r->s[r->at] == '\\') {
            r->at++;
            st = read_escape(r, buf + n, &k);
        } else {
            st = copy_raw_char(r, end, buf + n, &k);
        }
        n += k;
    }
    if (st != NCTMC_OK) {
        mem_free(r->alloc, buf);
        return st;
    }
    r->at = end + 1;
    buf[n] = 0;
    *out = (char *)buf;
    if (len)
        *len = n;
    return NCTMC_OK;
}

nctmc_status json_parse_u64(json_reader *r, uint64_t *out)
{
    json_skip_ws(r);
    size_t start = r->at;
    uint64_t v = 0;
    while (r->at < r->n && r->s[r->at] >= '0' && r->s[r->at] <= '9') {
        uint64_t d = r->s[r->at] - (uint64_t)'0';
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return json_fail(r, "integer too large");
        v = v * 10 + d;
        r->at++;
    }
    size_t digits = r->at - start;
    if (digits == 0)
        return json_fail(r, "expected a non-negative integer");
    if (digits > 1 && r->s[start] == '0')
        return json_fail(r, "integer with a leading zero");
    if (r->at < r->n && (r->s[r->at] == '.' || r->s[r->at] == 'e' || r->s[r->at] == 'E'))
        return json_fail(r, "expected an integer, found a fraction or exponent");
    *out = v;
    return NCTMC_OK;
}

static nctmc_status skip_literal(json_reader *r)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t len = strlen(words[k]);
        if (r->n - r->at >= len && memcmp(r->s + r->at, words[k], len) == 0) {
            r->at += len;
            return NCTMC_OK;
        }
    }
    return json_fail(r, "unexpected character");
}

/* The end of a run of digits starting at i. */
static size_t digits_end(const json_reader *r, size_t i)
{
    while (i < r->n && r->s[i] >= '0' && r->s[i] <= '9')
        i++;
    return i;
}

/* Any JSON number: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)? */
static nctmc_status skip_number(json_reader *r)
{
    size_t i = r->at;
    if (i < r->n && r->s[i] == '-')
        i++;
    size_t j = digits_end(r, i);
    if (j == i || (r->s[i] == '0' && j > i + 1))
        return json_fail(r, "bad number");
    i = j;
    if (i < r->n && r->s[i] == '.') {
        j = digits_end(r, i + 1);
        if (j == i + 1)
            return json_fail(r, "bad number");
        i = j;
    }
    if (i < r->n && (r->s[i] == 'e' || r->s[i] == 'E')) {
        i++;
        if (i < r->n && (r->s[i] == '+' || r->s[i] == '-'))
            i++;
        j = digits_end(r, i);
        if (j == i)
            return json_fail(r, "bad number");
        i = j;
    }
    r->at = i;
    return NCTMC_OK;
}

/* ---- objects: keys seen, so that a repeated key is refused ----------------- */

/* An object's keys, checked for a repeat once the object is read: sorted,
 * so that no choice of keys (a hash can be made to collide) costs more
 * than O(n log n) comparisons. */
typedef struct key_set {
    const struct nctmc_allocator *alloc;
    char **keys;
    size_t n, cap;
    size_t start; /* the object's first byte, for the message */
} key_set;

static void key_set_free(key_set *k)
{
    for (size_t i = 0; i < k->n; i++)
        mem_free(k->alloc, k->keys[i]);
    mem_free(k->alloc, k->keys);
}

/* Takes key (allocated from r->alloc) into the set. */
static nctmc_status key_add(json_reader *r, key_set *k, char *key)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 16;
        char **grown = mem_alloc(k->alloc, cap * sizeof *grown);
        if (!grown) {
            mem_free(r->alloc, key);
            return fail_format(r->err, r->err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
        }
        if (k->n)
            memcpy(grown, k->keys, k->n * sizeof *grown);
        mem_free(k->alloc, k->keys);
        k->keys = grown;
        k->cap = cap;
    }
    k->keys[k->n++] = key;
    return NCTMC_OK;
}

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* NCTMC_ERR_FORMAT when two of the keys are the same. */
static nctmc_status keys_unique(json_reader *r, key_set *k)
{
    if (k->n < 2)
        return NCTMC_OK;
    qsort(k->keys, k->n, sizeof *k->keys, compare_keys);
    for (size_t i = 1; i < k->n; i++)
        if (strcmp(k->keys[i - 1], k->keys[i]) == 0)
            return fail_format(r->err, r->err_size, NCTMC_ERR_FORMAT,
                               "JSON header, the object at byte %zu: the key \"%.60s\" "
                               "appears twice",
                               k->start, k->keys[i]);
    return NCTMC_OK;
}

nctmc_status json_parse_object(json_reader *r, json_member_fn fn, void *user)
{
    json_skip_ws(r);
    key_set seen = {r->alloc, NULL, 0, 0, r->at};
    nctmc_status st = json_expect(r, '{', "an object");
    if (st != NCTMC_OK || json_accept(r, '}'))
        return st;
    do {
        char *key = NULL;
        st = json_parse_string(r, &key, NULL);
        if (st == NCTMC_OK)
            st = key_add(r, &seen, key);
        if (st == NCTMC_OK)
            st = json_expect(r, ':', "':'");
        if (st == NCTMC_OK)
            st = fn(r, key, user);
    } while (st == NCTMC_OK && json_accept(r, ','));
    if (st == NCTMC_OK)
        st = json_expect(r, '}', "',' or '}'");
    if (st == NCTMC_OK)
        st = keys_unique(r, &seen);
    key_set_free(&seen);
    return st;
}

/* Skips the members of an object or the elements of an array whose opening
 * bracket was consumed. An object's keys must differ. */
static nctmc_status skip_container(json_reader *r, bool object, int depth)
{
    char close = object ? '}' : ']';
    key_set seen = {r->alloc, NULL, 0, 0, r->at - 1};
    if (json_accept(r, close))
        return NCTMC_OK;
    nctmc_status st = NCTMC_OK;
    for (;;) {
        if (object) {
            char *key = NULL;
            st = json_parse_string(r, &key, NULL);
            if (st == NCTMC_OK)
                st = key_add(r, &seen, key);
            if (st == NCTMC_OK)
                st = json_expect(r, ':', "after an object key");
        }
        if (st == NCTMC_OK)
            st = json_skip_value(r, depth + 1);
        if (st != NCTMC_OK)
            break;
        if (json_accept(r, close)) {
            st = keys_unique(r, &seen);
            break;
        }
        st = json_expect(r, ',', object ? "or '}' in an object" : "or ']' in an array");
        if (st != NCTMC_OK)
            break;
    }
    key_set_free(&seen);
    return st;
}

nctmc_status json_skip_value(json_reader *r, int depth)
{
    if (depth > JSON_MAX_DEPTH)
        return json_fail(r, "nesting too deep");
    json_skip_ws(r);
    if (r->at >= r->n)
        return json_fail(r, "unexpected end");
    uint8_t c = r->s[r->at];
    if (c == '"') {
        char *s = NULL;
        nctmc_status st = json_parse_string(r, &s, NULL);
        mem_free(r->alloc, s);
        return st;
    }
    if (c == '{' || c == '[') {
        r->at++;
        return skip_container(r, c == '{', depth);
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return skip_number(r);
    return skip_literal(r);
}

/* ---- writing ------------------------------------------------------------ */

void json_buf_append(json_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len <= n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len <= n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            cap *= 2;
        }
        char *d = mem_realloc(b->alloc, b->data, b->cap, cap);
        if (!d) {
            b->failed = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void json_buf_puts(json_buf *b, const char *s)
{
    json_buf_append(b, s, strlen(s));
}

void json_buf_printf(json_buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->failed = true;
    else
        json_buf_append(b, tmp, (size_t)n);
}

void json_buf_string(json_buf *b, const char *s)
{
    json_buf_append(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c != '"' && c != '\\' && c >= 0x20u)
            continue;
        json_buf_append(b, run, (size_t)(s - run));
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            json_buf_append(b, esc, 2);
        } else {
            json_buf_printf(b, "\\u%04x", c);
        }
        run = s + 1;
    }
    json_buf_append(b, run, (size_t)(s - run));
    json_buf_append(b, "\"", 1);
}

void json_buf_free(json_buf *b)
{
    mem_free(b->alloc, b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}
