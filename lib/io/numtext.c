/*
 * numtext.c — strict, locale-independent number text (see numtext.h).
 * Floats go through the C library in the "C" numeric locale, set for the
 * calling thread only (platform/platform.h: uselocale on POSIX, a
 * per-thread locale on Windows), so other threads are not disturbed.
 */
#include "numtext.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Digits without a leading zero (a lone "0" is fine); returns the end. */
static const char *scan_digits(const char *s, bool allow_leading_zero)
{
    if (!is_digit(*s))
        return NULL;
    if (*s == '0' && is_digit(s[1]) && !allow_leading_zero)
        return NULL;
    while (is_digit(*s))
        s++;
    return s;
}

bool numtext_parse_u64(const char *s, uint64_t *out)
{
    if (!s)
        return false;
    const char *end = scan_digits(s, false);
    if (!end || *end != '\0')
        return false;
    uint64_t v = 0;
    for (; s < end; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool numtext_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s)
        return false;
    bool negative = *s == '-';
    uint64_t mag;
    if (!numtext_parse_u64(negative ? s + 1 : s, &mag))
        return false;
    int64_t v;
    if (negative) {
        if (mag > (uint64_t)INT64_MAX + 1)
            return false;
        v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX)
            return false;
        v = (int64_t)mag;
    }
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool json_number_syntax(const char *s)
{
    if (*s == '-')
        s++;
    s = scan_digits(s, false);
    if (!s)
        return false;
    if (*s == '.' && !(s = scan_digits(s + 1, true)))
        return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!(s = scan_digits(s, true)))
            return false;
    }
    return *s == '\0';
}

bool numtext_parse_f32(const char *s, float *out)
{
    if (!s || strlen(s) >= 64 || !json_number_syntax(s))
        return false;
    plat_c_numeric scope;
    if (!plat_c_numeric_enter(&scope))
        return false;
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    int e = errno;
    plat_c_numeric_leave(&scope);
    /* ERANGE also flags underflow to a denormal or zero; only overflow is
     * out of range for us, and it shows as an infinite result. */
    if (!end || *end != '\0' || !isfinite(v) || (e == ERANGE && fabsf(v) > 1.0f))
        return false;
    *out = v;
    return true;
}

bool numtext_format_f32(float v, char out[NUMTEXT_MAX])
{
    if (!isfinite(v))
        return false;
    plat_c_numeric scope;
    if (!plat_c_numeric_enter(&scope))
        return false;
    int n = snprintf(out, NUMTEXT_MAX, "%.9g", (double)v);
    plat_c_numeric_leave(&scope);
    return n > 0 && n < NUMTEXT_MAX;
}
