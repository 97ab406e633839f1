/*
 * checked.h — size arithmetic that reports overflow instead of wrapping, for
 * every byte count derived from user-supplied sizes.
 */
#ifndef NCTMC_CHECKED_H
#define NCTMC_CHECKED_H

#include <stdbool.h>
#include <stddef.h>

/* *out = a * b; false on overflow. */
static inline bool checked_mul(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* *out = a + b; false on overflow. */
static inline bool checked_add(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* *out = a * b * c; false on overflow. */
static inline bool checked_mul3(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    return checked_mul(a, b, &ab) && checked_mul(ab, c, out);
}

#endif /* NCTMC_CHECKED_H */
