/*
 * digits.c — the parser of digits.txt (digits.h).
 */
#include "digits.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A base-17 digit 0-9a-g, or -1. */
static int level_of(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'g')
        return c - 'a' + 10;
    return -1;
}

static bool parse_image_line(const char *line, size_t len, int32_t *pixels, int32_t *label)
{
    if (len != 2 + DIGITS_PIXELS || line[0] < '0' || line[0] > '9' || line[1] != ':')
        return false;
    *label = line[0] - '0';
    for (int i = 0; i < DIGITS_PIXELS; i++) {
        int level = level_of(line[2 + i]);
        if (level < 0)
            return false;
        pixels[i] = level;
    }
    return true;
}

static size_t count_lines(const char *text, size_t len)
{
    size_t n = 1;
    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n';
    return n;
}

int digits_parse(const char *text, size_t len, digits_set *out, char *err, size_t errlen)
{
    size_t cap = count_lines(text, len);
    digits_set set = {malloc(cap * DIGITS_PIXELS * sizeof(int32_t)),
                      malloc(cap * sizeof(int32_t)), 0};
    if (set.pixels == NULL || set.labels == NULL) {
        snprintf(err, errlen, "out of memory");
        digits_free(&set);
        return -1;
    }
    size_t line_no = 0;
    for (size_t at = 0; at < len;) {
        const char *line = text + at;
        const char *nl = memchr(line, '\n', len - at);
        size_t line_len = nl ? (size_t)(nl - line) : len - at;
        at += line_len + 1;
        line_no++;
        if (line_len > 0 && line[line_len - 1] == '\r')
            line_len--; /* tolerate a file that went through Windows */
        if (line_len == 0 || line[0] == '#')
            continue;
        if (!parse_image_line(line, line_len, set.pixels + set.n * DIGITS_PIXELS,
                              set.labels + set.n)) {
            snprintf(err, errlen,
                     "line %zu: expected \"<label 0-9>:<64 characters 0-9a-g>\"", line_no);
            digits_free(&set);
            return -1;
        }
        set.n++;
    }
    if (set.n == 0) {
        snprintf(err, errlen, "no images in the file");
        digits_free(&set);
        return -1;
    }
    *out = set;
    return 0;
}

void digits_free(digits_set *set)
{
    free(set->pixels);
    free(set->labels);
    set->pixels = NULL;
    set->labels = NULL;
    set->n = 0;
}
