/*
 * digits.h — reads examples/data/digits.txt (scripts/convert_digits.py):
 * '#' comment lines, then one 8x8 image per line as "<label>:<64 base-17
 * digits>".
 */
#ifndef NCTMC_CLI_DIGITS_H
#define NCTMC_CLI_DIGITS_H

#include <stddef.h>
#include <stdint.h>

#define DIGITS_WIDTH 8
#define DIGITS_HEIGHT 8
#define DIGITS_PIXELS (DIGITS_WIDTH * DIGITS_HEIGHT)
#define DIGITS_LEVELS 17
#define DIGITS_CLASSES 10

typedef struct digits_set {
    int32_t *pixels;  /* [n * DIGITS_PIXELS] grey levels 0 .. 16, row-major */
    int32_t *labels;  /* [n] 0 .. 9 */
    int64_t n;
} digits_set;

/**
 * Parses the text of a digits file. Returns 0, or -1 with a message naming
 * the line in err (errlen bytes).
 */
int digits_parse(const char *text, size_t len, digits_set *out, char *err, size_t errlen);

/** Releases what digits_parse() allocated. */
void digits_free(digits_set *set);

#endif /* NCTMC_CLI_DIGITS_H */
