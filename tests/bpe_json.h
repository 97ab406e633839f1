/*
 * bpe_json.h — a small byte-level BPE tokenizer.json for the BPE tests
 * (test_tokenizer_bpe.c through the public API, test_bpe_internal.c for the
 * internals): the 256 byte symbols, six merges, <|endoftext|>. Spelled with
 * its own copy of GPT-2's byte-to-unicode map, so that it needs only the
 * public header; test_bpe_internal.c checks the copy against the library's.
 */
#ifndef NCTMC_BPE_JSON_H
#define NCTMC_BPE_JSON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_files.h"

/* GPT-2's byte-to-unicode map: the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves, the other 68 bytes for U+0100 on, in
 * byte order. */
static inline uint32_t test_byte_to_unicode(uint8_t b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    uint32_t n = 0;
    for (int k = 0; k < b; k++)
        if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE))
            n++;
    return 0x100 + n;
}

/* Appends the JSON string of bytes s as GPT-2's byte symbols spell it. */
static inline size_t put_symbols(char *out, const char *s)
{
    size_t k = 0;
    out[k++] = '"';
    for (; *s; s++) {
        uint32_t cp = test_byte_to_unicode((uint8_t)*s);
        if (cp == '"' || cp == '\\')
            out[k++] = '\\', out[k++] = (char)cp;
        else
            k += (size_t)sprintf(out + k, "\\u%04x", (unsigned)cp);
    }
    out[k++] = '"';
    return k;
}

/* The merges of the test vocabulary (ids 256 on, in this order) and its
 * added token (id 262). */
static const char *const merge_pairs[][2] = {
    {" ", "t"}, {"h", "e"}, {" t", "he"}, {"a", "a"}, {"aa", "aa"}, {"'", "s"}};
#define N_MERGES 6
#define ID_EOT 262

/* Writes a tokenizer.json: 256 bytes (id = byte), the merges, <|endoftext|>,
 * with `model_extra` spliced into the model object and `pre` as the
 * pre_tokenizer; merges_override replaces the merges array when not NULL. */
static inline void write_json(const char *path, const char *model_extra, const char *pre,
                       const char *merges_override)
{
    size_t cap = 1 << 16, k = 0;
    char *j = malloc(cap);
    k += (size_t)sprintf(j + k, "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": %d, "
                                "\"content\": \"<|endoftext|>\", \"single_word\": false, "
                                "\"lstrip\": false, \"rstrip\": false, \"normalized\": true, "
                                "\"special\": true}], \"normalizer\": null, \"pre_tokenizer\": "
                                "%s, \"post_processor\": null, \"decoder\": {\"type\": "
                                "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"dropout\": "
                                "null, %s \"vocab\": {",
                         ID_EOT, pre, model_extra);
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        if (b == 0) /* a C string cannot hold byte 0: spell it directly */
            k += (size_t)sprintf(j + k, "\"\\u0100\"");
        else
            k += put_symbols(j + k, s);
        k += (size_t)sprintf(j + k, ": %d, ", b);
    }
    for (int m = 0; m < N_MERGES; m++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", merge_pairs[m][0], merge_pairs[m][1]);
        k += put_symbols(j + k, joined);
        k += (size_t)sprintf(j + k, ": %d, ", 256 + m);
    }
    k += (size_t)sprintf(j + k, "\"<|endoftext|>\": %d}, \"merges\": ", ID_EOT);
    if (merges_override) {
        k += (size_t)sprintf(j + k, "%s", merges_override);
    } else {
        j[k++] = '[';
        for (int m = 0; m < N_MERGES; m++) {
            j[k++] = m ? ',' : ' ';
            j[k++] = '[';
            k += put_symbols(j + k, merge_pairs[m][0]);
            j[k++] = ',';
            k += put_symbols(j + k, merge_pairs[m][1]);
            j[k++] = ']';
        }
        j[k++] = ']';
    }
    k += (size_t)sprintf(j + k, "}}\n");
    test_write_bytes(path, j, k);
    free(j);
}

#define PRE_OK "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, " \
               "\"use_regex\": true}"

#endif /* NCTMC_BPE_JSON_H */
