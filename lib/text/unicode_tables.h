/*
 * unicode_tables.h — the character classes of the GPT-2 pre-tokenizer
 * pattern (letter \p{L}, number \p{N}, whitespace \s, other), from the
 * generated table lib/text/unicode_tables.c (scripts/gen_unicode_tables.py).
 */
#ifndef NCTMC_UNICODE_TABLES_H
#define NCTMC_UNICODE_TABLES_H

#include <stdint.h>

enum { UNICODE_OTHER = 0, UNICODE_LETTER = 1, UNICODE_NUMBER = 2, UNICODE_SPACE = 3 };

typedef struct unicode_range {
    uint32_t lo, hi;    /* inclusive */
    uint8_t klass;
} unicode_range;

extern const unicode_range unicode_ranges[];
extern const int32_t unicode_n_ranges;
/* The Unicode version the table was generated from, e.g. "14.0.0". */
extern const char unicode_tables_version[];

/* The class of a code point >= U+0080 (binary search of the ranges). */
static inline int unicode_class_above_ascii(uint32_t cp)
{
    int32_t lo = 0, hi = unicode_n_ranges - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_ranges[mid].lo)
            hi = mid - 1;
        else if (cp > unicode_ranges[mid].hi)
            lo = mid + 1;
        else
            return unicode_ranges[mid].klass;
    }
    return UNICODE_OTHER;
}

#endif /* NCTMC_UNICODE_TABLES_H */
