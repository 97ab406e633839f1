/*
 * jsonl.h — the text of one field of a JSON Lines record, for `nctmc
 * prepare --jsonl-field NAME`. One line is one JSON object; the field's
 * value must be a string. Only that string is decoded (escapes, \uXXXX
 * with surrogate pairs); everything else is checked for JSON syntax and
 * skipped, without building any tree.
 */
#ifndef NCTMC_CLI_JSONL_H
#define NCTMC_CLI_JSONL_H

#include <stddef.h>

typedef enum jsonl_result {
    JSONL_TEXT,   /* the field's string is in out */
    JSONL_BLANK,  /* an empty or all-whitespace line: not a record */
    JSONL_BAD     /* not a JSON object, or no string field of that name: why says why */
} jsonl_result;

/**
 * Extracts the string value of the top-level key `field` from the JSON
 * object on `line` (len bytes, without its newline) into out, which must
 * hold len bytes (a decoded string is never longer than its JSON text).
 * The first occurrence of a repeated key is taken. A lone surrogate escape
 * becomes U+FFFD; raw bytes are passed through unchecked (the tokenizer
 * judges the text). *why is a static description on JSONL_BAD.
 */
jsonl_result jsonl_extract(const char *line, size_t len, const char *field, char *out,
                           size_t *out_len, const char **why);

/**
 * The length of the UTF-8 sequence at p (n > 0 bytes left): 1 .. 4 bytes,
 * shortest form, no surrogates, at most U+10FFFF; 0 when it is not valid
 * UTF-8 or is cut off by the end of the n bytes. The one decoder of the
 * tool's input checks: JSON strings here, plain-text lines for the chars
 * tokenizer in corpus.c.
 */
size_t jsonl_utf8_length(const unsigned char *p, size_t n);

#endif /* NCTMC_CLI_JSONL_H */
