/*
 * bpe_pretokenize.c — the GPT-2 pre-tokenizer pattern, matched by hand (no
 * regex engine) over UTF-8, and GPT-2's byte-to-unicode map.
 *
 * The pattern, as Hugging Face `tokenizers` runs it (Oniguruma, leftmost-
 * first alternation):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * It matches at every position, so the pre-tokens tile the text.
 */
#include "tokenizer_bpe.h"

#include "unicode_tables.h"
#include "base/utf8.h"

/* Classes of the ASCII characters: letters, digits, \t \n \v \f \r and
 * space; everything else is "other". */
static int ascii_class(uint8_t b)
{
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'))
        return UNICODE_LETTER;
    if (b >= '0' && b <= '9')
        return UNICODE_NUMBER;
    if (b == ' ' || (b >= 0x09 && b <= 0x0D))
        return UNICODE_SPACE;
    return UNICODE_OTHER;
}

/* The character at s[i]: its class and length. Invalid UTF-8 (HF never sees
 * it: it takes Rust strings) is one "other" character per byte, so such
 * bytes join runs of punctuation and symbols. */
static inline size_t char_at(const uint8_t *s, size_t n, size_t i, int *klass)
{
    uint8_t b = s[i];
    if (b < 0x80u) {
        *klass = ascii_class(b);
        return 1;
    }
    uint32_t cp;
    size_t len = utf8_decode(s + i, n - i, &cp);
    if (len == 0) {
        *klass = UNICODE_OTHER;
        return 1;
    }
    *klass = unicode_class_above_ascii(cp);
    return len;
}

/* The end of the run of characters of class `klass` starting at i. */
static size_t run_end(const uint8_t *s, size_t n, size_t i, int klass)
{
    while (i < n) {
        int k;
        size_t len = char_at(s, n, i, &k);
        if (k != klass)
            break;
        i += len;
    }
    return i;
}

/* 's 't 're 've 'm 'll 'd at s[i] (an apostrophe): the length, or 0. */
static size_t contraction(const uint8_t *s, size_t n, size_t i)
{
    if (i + 1 >= n)
        return 0;
    uint8_t c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
        return 2;
    if (i + 2 < n && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
                      (c == 'l' && s[i + 2] == 'l')))
        return 3;
    return 0;
}

size_t bpe_pretoken_end(const uint8_t *s, size_t n, size_t i)
{
    if (s[i] == '\'') {
        size_t len = contraction(s, n, i);
        if (len)
            return i + len;
    }
    int k0;
    size_t len0 = char_at(s, n, i, &k0);
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with the space taken:
     * a space and one non-space character start a run of that class */
    if (s[i] == ' ' && i + 1 < n) {
        int k1;
        size_t len1 = char_at(s, n, i + 1, &k1);
        if (k1 != UNICODE_SPACE)
            return run_end(s, n, i + 1 + len1, k1);
    }
    if (k0 != UNICODE_SPACE)
        return run_end(s, n, i + len0, k0);
    /* whitespace: "\s+(?!\S)" keeps the run's last character for the next
     * pre-token when a non-space follows (so " word" stays together);
     * "\s+" takes a single whitespace character before a non-space */
    size_t end = i + len0, last = i;
    while (end < n) {
        int k;
        size_t len = char_at(s, n, end, &k);
        if (k != UNICODE_SPACE)
            break;
        last = end;
        end += len;
    }
    if (end == n || last == i)
        return end;
    return last;
}

/* GPT-2's map: the printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand for
 * themselves; the other 68 bytes, in increasing order, for U+0100 onwards. */
static bool printable_byte(uint32_t b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t bpe_byte_to_unicode(uint8_t b)
{
    if (printable_byte(b))
        return b;
    uint32_t rank = 0; /* how many non-printable bytes come before b */
    for (uint32_t c = 0; c < b; c++)
        rank += !printable_byte(c);
    return 0x100u + rank;
}

int32_t bpe_unicode_to_byte(uint32_t cp)
{
    if (cp < 0x100u)
        return printable_byte(cp) ? (int32_t)cp : -1;
    if (cp >= 0x100u + 68u)
        return -1;
    uint32_t rank = cp - 0x100u;
    for (uint32_t c = 0; c < 256; c++)
        if (!printable_byte(c) && rank-- == 0)
            return (int32_t)c;
    return -1;
}
