/*
 * jsonl.c — one field of a JSON Lines record (jsonl.h). A recursive-descent
 * scan over the line: values are validated and skipped in place; only the
 * wanted string is decoded. Nesting is bounded so a hostile line cannot
 * exhaust the stack.
 */
#include "jsonl.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define JSONL_MAX_DEPTH 128

typedef struct scan {
    const unsigned char *p, *end;
    const char *why;
} scan;

static bool fail(scan *s, const char *why)
{
    if (!s->why)
        s->why = why;
    return false;
}

static void skip_space(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
        s->p++;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits after "\u". */
static bool read_hex4(scan *s, uint32_t *v)
{
    if (s->end - s->p < 4)
        return fail(s, "a \\u escape needs four hex digits");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(s->p[i]);
        if (h < 0)
            return fail(s, "a \\u escape needs four hex digits");
        *v = *v << 4 | (uint32_t)h;
    }
    s->p += 4;
    return true;
}

static size_t put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* After "\u": one code point, pairing a high surrogate with the low one
 * that follows; a lone surrogate is U+FFFD. */
static bool read_unicode_escape(scan *s, uint32_t *cp)
{
    if (!read_hex4(s, cp))
        return false;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
        *cp = 0xFFFD;
    } else if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t low = 0;
        const unsigned char *save = s->p;
        if (s->end - s->p >= 6 && s->p[0] == '\\' && s->p[1] == 'u') {
            s->p += 2;
            if (!read_hex4(s, &low))
                return false;
        }
        if (low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
        } else {
            s->p = save; /* the next escape is read on its own */
            *cp = 0xFFFD;
        }
    }
    return true;
}

size_t jsonl_utf8_length(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) || (c == 0xF0 && p[1] < 0x90) ||
        (c == 0xF4 && p[1] > 0x8F))
        return 0; /* overlong, a surrogate, or past U+10FFFF */
    return len;
}

/* A string after its opening quote, decoded into out (when not NULL). The
 * decoded form is never longer than the JSON text it came from. */
static bool read_string(scan *s, char *out, size_t *n)
{
    size_t k = 0;
    while (s->p < s->end) {
        unsigned char c = *s->p++;
        if (c == '"') {
            if (n)
                *n = k;
            return true;
        }
        if (c < 0x20)
            return fail(s, "a raw control character in a string");
        if (c >= 0x80) {
            /* raw bytes must be UTF-8 (RFC 8259 section 8.1): a record with
             * invalid UTF-8 is a bad record, not text for the tokenizer */
            size_t len = jsonl_utf8_length(s->p - 1, (size_t)(s->end - (s->p - 1)));
            if (len == 0)
                return fail(s, "invalid UTF-8 in a string");
            if (out)
                memcpy(out + k, s->p - 1, len);
            k += len;
            s->p += len - 1;
            continue;
        }
        if (c != '\\') {
            if (out)
                out[k] = (char)c;
            k++;
            continue;
        }
        if (s->p == s->end)
            break;
        unsigned char e = *s->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e != 0 && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            if (out)
                out[k] = decoded[simple - "\"\\/bfnrt"];
            k++;
        } else if (e == 'u') {
            uint32_t cp;
            char buf[4];
            if (!read_unicode_escape(s, &cp))
                return false;
            size_t m = put_utf8(out ? out + k : buf, cp);
            k += m;
        } else {
            return fail(s, "an unknown escape in a string");
        }
    }
    return fail(s, "a string without its closing quote");
}

static bool skip_value(scan *s, int depth);

static bool skip_number(scan *s)
{
    const unsigned char *start = s->p;
    if (s->p < s->end && *s->p == '-')
        s->p++;
    const unsigned char *digits = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    if (s->p == digits)
        return fail(s, "an invalid value");
    if (*digits == '0' && s->p > digits + 1) /* RFC 8259: 0|[1-9][0-9]* */
        return fail(s, "a number with a leading zero");
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        const unsigned char *frac = s->p;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
        if (s->p == frac)
            return fail(s, "an invalid number");
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        const unsigned char *exp = s->p;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
        if (s->p == exp)
            return fail(s, "an invalid number");
    }
    return s->p > start;
}

static bool skip_word(scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return fail(s, "an invalid value");
    s->p += n;
    return true;
}

/* The members of an array or object after its opening bracket. */
static bool skip_members(scan *s, int depth, bool object)
{
    char close = object ? '}' : ']';
    skip_space(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return true;
    }
    for (;;) {
        skip_space(s);
        if (object) {
            if (s->p == s->end || *s->p != '"')
                return fail(s, "an object key is not a string");
            s->p++;
            if (!read_string(s, NULL, NULL))
                return false;
            skip_space(s);
            if (s->p == s->end || *s->p++ != ':')
                return fail(s, "a key without ':'");
        }
        if (!skip_value(s, depth + 1))
            return false;
        skip_space(s);
        if (s->p == s->end)
            return fail(s, "the line ends inside an object or array");
        unsigned char c = *s->p++;
        if (c == (unsigned char)close)
            return true;
        if (c != ',')
            return fail(s, "a missing ',' between members");
    }
}

static bool skip_value(scan *s, int depth)
{
    if (depth > JSONL_MAX_DEPTH)
        return fail(s, "nested too deeply");
    skip_space(s);
    if (s->p == s->end)
        return fail(s, "a missing value");
    switch (*s->p) {
    case '"': s->p++; return read_string(s, NULL, NULL);
    case '{': s->p++; return skip_members(s, depth, true);
    case '[': s->p++; return skip_members(s, depth, false);
    case 't': return skip_word(s, "true");
    case 'f': return skip_word(s, "false");
    case 'n': return skip_word(s, "null");
    default: return skip_number(s);
    }
}

/* Whether the key just read (undecoded, between s->p - len - 1 and the
 * quote) equals field: keys with escapes are decoded into a small buffer. */
static bool key_matches(const unsigned char *key, size_t raw_len, const char *field)
{
    size_t want = strlen(field);
    if (memchr(key, '\\', raw_len) == NULL)
        return raw_len == want && memcmp(key, field, want) == 0;
    char buf[256];
    if (raw_len > sizeof buf)
        return false; /* decodes to more than 256 bytes: longer than any --jsonl-field */
    scan k = {key, key + raw_len + 1, NULL};
    size_t n = 0;
    return read_string(&k, buf, &n) && n == want && memcmp(buf, field, want) == 0;
}

jsonl_result jsonl_extract(const char *line, size_t len, const char *field, char *out,
                           size_t *out_len, const char **why)
{
    scan s = {(const unsigned char *)line, (const unsigned char *)line + len, NULL};
    bool found = false;
    *why = NULL;
    skip_space(&s);
    if (s.p == s.end)
        return JSONL_BLANK;
    if (*s.p++ != '{') {
        *why = "not a JSON object";
        return JSONL_BAD;
    }
    skip_space(&s);
    bool ok = true, empty = s.p < s.end && *s.p == '}';
    if (empty)
        s.p++;
    while (ok && !empty) {
        skip_space(&s);
        if (s.p == s.end || *s.p != '"') {
            ok = fail(&s, "an object key is not a string");
            break;
        }
        const unsigned char *key = ++s.p;
        ok = read_string(&s, NULL, NULL);
        bool wanted = ok && !found && key_matches(key, (size_t)(s.p - key - 1), field);
        skip_space(&s);
        if (ok && (s.p == s.end || *s.p++ != ':'))
            ok = fail(&s, "a key without ':'");
        skip_space(&s);
        if (ok && wanted) {
            if (s.p == s.end || *s.p != '"') {
                ok = fail(&s, "the field is not a string");
                break;
            }
            s.p++;
            ok = read_string(&s, out, out_len);
            found = ok;
        } else if (ok) {
            ok = skip_value(&s, 1);
        }
        skip_space(&s);
        if (ok && s.p == s.end)
            ok = fail(&s, "the line ends inside the object");
        if (!ok)
            break;
        unsigned char c = *s.p++;
        if (c == '}')
            break;
        if (c != ',')
            ok = fail(&s, "a missing ',' between members");
    }
    skip_space(&s);
    if (ok && s.p != s.end)
        ok = fail(&s, "text after the object");
    if (ok && !found)
        ok = fail(&s, "no field of that name");
    if (!ok) {
        *why = s.why ? s.why : "invalid JSON";
        return JSONL_BAD;
    }
    return JSONL_TEXT;
}
