/*
 * utf8.h — strict UTF-8 decoding and encoding (RFC 3629): overlong forms,
 * surrogates (U+D800..U+DFFF) and code points above U+10FFFF are invalid,
 * because text that two decoders read differently must not reach a model or
 * a file header.
 */
#ifndef NCTMC_UTF8_H
#define NCTMC_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define UTF8_MAX_CODE_POINT 0x10FFFFu

static inline int utf8_is_continuation(uint8_t b)
{
    return (b & 0xC0u) == 0x80u;
}

/*
 * Decodes one character from s[0 .. n) (n >= 1). Returns its length in
 * bytes (1 .. 4) and stores the code point, or returns 0 when the bytes at
 * s do not start a valid character (including a sequence cut off by n).
 */
static inline size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    size_t len;
    uint32_t v, min;
    if (b < 0x80u) {
        *cp = b;
        return 1;
    } else if (b >= 0xC2u && b <= 0xDFu) {
        len = 2, v = b & 0x1Fu, min = 0x80u;
    } else if (b >= 0xE0u && b <= 0xEFu) {
        len = 3, v = b & 0x0Fu, min = 0x800u;
    } else if (b >= 0xF0u && b <= 0xF4u) {
        len = 4, v = b & 0x07u, min = 0x10000u;
    } else {
        return 0; /* continuation byte, 0xC0/0xC1 (always overlong), 0xF5.. */
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if (!utf8_is_continuation(s[i]))
            return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if (v < min || v > UTF8_MAX_CODE_POINT || (v >= 0xD800u && v <= 0xDFFFu))
        return 0;
    *cp = v;
    return len;
}

/* The number of bytes utf8_encode() writes for cp (a valid code point). */
static inline size_t utf8_length(uint32_t cp)
{
    return cp < 0x80u ? 1 : cp < 0x800u ? 2 : cp < 0x10000u ? 3 : 4;
}

/* Writes cp (a valid code point) to out, which has room for 4 bytes, and
 * returns the number of bytes written. */
static inline size_t utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80u) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800u) {
        out[0] = (uint8_t)(0xC0u | (cp >> 6));
        out[1] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 2;
    }
    if (cp < 0x10000u) {
        out[0] = (uint8_t)(0xE0u | (cp >> 12));
        out[1] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
        out[2] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 3;
    }
    out[0] = (uint8_t)(0xF0u | (cp >> 18));
    out[1] = (uint8_t)(0x80u | ((cp >> 12) & 0x3Fu));
    out[2] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
    out[3] = (uint8_t)(0x80u | (cp & 0x3Fu));
    return 4;
}

/* True when cp may appear in text: at most U+10FFFF and not a surrogate. */
static inline int utf8_valid_code_point(uint32_t cp)
{
    return cp <= UTF8_MAX_CODE_POINT && !(cp >= 0xD800u && cp <= 0xDFFFu);
}

/* The offset of the first byte of s[0 .. n) that does not start a valid
 * character, or n when all of it is valid UTF-8. */
static inline size_t utf8_first_invalid(const uint8_t *s, size_t n)
{
    size_t at = 0;
    uint32_t cp;
    while (at < n) {
        size_t len = utf8_decode(s + at, n - at, &cp);
        if (len == 0)
            return at;
        at += len;
    }
    return n;
}

#endif /* NCTMC_UTF8_H */
