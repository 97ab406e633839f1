/*
 * json.h — the small JSON subset file headers need (RFC 8259): a bounded
 * reader over a byte range that never reads past it, and a growable text
 * buffer that writes escaped strings. No DOM: callers parse the structure
 * they expect and skip the rest with a depth limit.
 */
#ifndef NCTMC_JSON_H
#define NCTMC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

struct nctmc_allocator; /* alloc.h */

/* Nesting deeper than this in a skipped value is rejected (a stack bound). */
#define JSON_MAX_DEPTH 32

typedef struct json_reader {
    const uint8_t *s;
    size_t n;
    size_t at;
    char *err;
    size_t err_size;
    /* where parsed strings are allocated (alloc.h); NULL = the C library */
    const struct nctmc_allocator *alloc;
} json_reader;

/* Skips spaces, tabs, CR and LF. */
void json_skip_ws(json_reader *r);

/* After whitespace, true and consumes c if it is next. */
bool json_accept(json_reader *r, char c);

/* After whitespace, consumes c or fails (NCTMC_ERR_FORMAT, naming `what`). */
nctmc_status json_expect(json_reader *r, char c, const char *what);

/* True if, after whitespace, the next byte is c (not consumed). */
bool json_peek(json_reader *r, char c);

/*
 * Parses a string into a NUL-terminated UTF-8 copy allocated from r->alloc
 * (release it with mem_free(r->alloc, ...)): escapes
 * decoded (\uXXXX with surrogate pairs), raw bytes checked as strict UTF-8,
 * control characters and \u0000 rejected (a C string cannot carry NUL).
 * *len receives the length (may be NULL).
 */
nctmc_status json_parse_string(json_reader *r, char **out, size_t *len);

/* An unsigned integer with digits only (no sign, fraction or exponent),
 * at most INT64_MAX. */
nctmc_status json_parse_u64(json_reader *r, uint64_t *out);

/* One member of an object: called with the key (valid during the call)
 * and r at its value, which it must consume. */
typedef nctmc_status (*json_member_fn)(json_reader *r, const char *key, void *user);

/* Parses an object, calling fn for each member in order (a repeated key
 * too: fn must tolerate it), then NCTMC_ERR_FORMAT when a key appeared
 * twice (as a strict reader refuses it; which of two values would win is
 * not something a file should leave open). The keys are compared sorted,
 * O(n log n) whatever they are. */
nctmc_status json_parse_object(json_reader *r, json_member_fn fn, void *user);

/* Skips any value, rejecting nesting deeper than JSON_MAX_DEPTH and
 * objects with a repeated key. */
nctmc_status json_skip_value(json_reader *r, int depth);

/* A growable text buffer. On allocation failure it records `failed` and
 * ignores further appends, so a writer checks once at the end. */
typedef struct json_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
    /* where the text is allocated (alloc.h); NULL = the C library */
    const struct nctmc_allocator *alloc;
} json_buf;

void json_buf_append(json_buf *b, const char *s, size_t n);
void json_buf_puts(json_buf *b, const char *s);
void json_buf_printf(json_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends s (NUL-terminated UTF-8) as a quoted JSON string: '"' and '\'
 * escaped, control characters as \u00XX, everything else as is. */
void json_buf_string(json_buf *b, const char *s);

void json_buf_free(json_buf *b);

#endif /* NCTMC_JSON_H */
