/*
 * numtext.h — numbers to and from the text of file metadata, strictly and
 * independently of the host's locale (a program that sets LC_NUMERIC to a
 * comma locale must still read and write the same files).
 */
#ifndef NCTMC_NUMTEXT_H
#define NCTMC_NUMTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest text numtext_format_* writes, with the NUL. */
#define NUMTEXT_MAX 32

/* Decimal integer: an optional '-', then digits without leading zeros,
 * nothing else (no spaces, '+', or trailing characters), within [lo, hi]. */
bool numtext_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Unsigned decimal integer, the same grammar without '-'. */
bool numtext_parse_u64(const char *s, uint64_t *out);

/* A finite float in JSON number syntax (no "nan", "inf", hex or spaces)
 * whose value is within float range. */
bool numtext_parse_f32(const char *s, float *out);

/* Writes v so that numtext_parse_f32 gives back the same bits (9
 * significant digits); false if v is not finite. */
bool numtext_format_f32(float v, char out[NUMTEXT_MAX]);

#endif /* NCTMC_NUMTEXT_H */
