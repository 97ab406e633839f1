/*
 * tokenizer_image.c — grey-level images as ASCII pictures: one text line per
 * image row, each pixel drawn with characters of a 70-step ramp from light
 * (level 0, white, ' ') to dark ('$'), so a sample can be looked at in a
 * terminal and typed back in.
 *
 * Up to 70 levels a pixel is one character, the levels spread evenly over the
 * ramp. Beyond that a pixel is 1 + d characters: the first is the level's
 * coarse place on the ramp (so the picture still reads as an image), the
 * next d the level's offset inside that coarse bucket, in base 70 with the
 * ramp characters as digits. Every level has exactly one spelling, so
 * encode(decode(x)) == x (docs/formats.md has the details).
 */
#include <string.h>

#include "base/checked.h"
#include "tokenizer.h"

static const char ramp[] =
    " .'`^\",:;Il!i><~+_-?][}{1)(|\\/tfjrxnuvczXYUJCLQ0OZmwqpdbkhao*#MW&8%B@$";
#define RAMP_LEN 70
_Static_assert(sizeof ramp == RAMP_LEN + 1, "the ramp has 70 characters");

int32_t tokenizer_image_pixel_chars(int32_t levels)
{
    if (levels <= RAMP_LEN)
        return 1;
    int64_t bucket = ((int64_t)levels + RAMP_LEN - 1) / RAMP_LEN;
    int32_t digits = 0;
    for (int64_t span = 1; span < bucket; span *= RAMP_LEN)
        digits++;
    return 1 + digits;
}

/* The ramp position of level k: rounded spread over the ramp up to 70
 * levels (k -> position is strictly increasing then), the bucket above. */
static int32_t coarse_position(int32_t k, int32_t levels)
{
    if (levels <= RAMP_LEN)
        return (int32_t)(((int64_t)k * (RAMP_LEN - 1) + (levels - 1) / 2) / (levels - 1));
    return (int32_t)((int64_t)k * RAMP_LEN / levels);
}

/* The first level whose coarse position is c (levels > 70; c may be 70,
 * giving levels). */
static int32_t bucket_start(int32_t c, int32_t levels)
{
    return (int32_t)(((int64_t)c * levels + RAMP_LEN - 1) / RAMP_LEN);
}

static void draw_pixel(int32_t k, int32_t levels, int32_t n_chars, char *out)
{
    int32_t c = coarse_position(k, levels);
    out[0] = ramp[c];
    int32_t r = k - (n_chars > 1 ? bucket_start(c, levels) : k);
    for (int32_t i = n_chars - 1; i >= 1; i--) {
        out[i] = ramp[r % RAMP_LEN];
        r /= RAMP_LEN;
    }
}

/* Lookup tables for reading pixels back, built per call (tiny). */
typedef struct pixel_reader {
    int8_t ramp_index[256];         /* byte -> ramp position, or -1 */
    int32_t single_level[RAMP_LEN]; /* one-character pixels: position -> level */
} pixel_reader;

static void pixel_reader_init(pixel_reader *pr, int32_t levels)
{
    memset(pr->ramp_index, -1, sizeof pr->ramp_index);
    for (int32_t i = 0; i < RAMP_LEN; i++) {
        pr->ramp_index[(uint8_t)ramp[i]] = (int8_t)i;
        pr->single_level[i] = -1;
    }
    if (levels <= RAMP_LEN)
        for (int32_t k = 0; k < levels; k++)
            pr->single_level[coarse_position(k, levels)] = k;
}

/* The level spelled by s[0 .. n_chars), or -1 when no level is. */
static int32_t read_pixel(const pixel_reader *pr, const uint8_t *s, int32_t levels,
                          int32_t n_chars)
{
    int32_t c = pr->ramp_index[s[0]];
    if (c < 0)
        return -1;
    if (n_chars == 1)
        return pr->single_level[c];
    int64_t r = 0;
    for (int32_t i = 1; i < n_chars; i++) {
        int32_t d = pr->ramp_index[s[i]];
        if (d < 0)
            return -1;
        r = r * RAMP_LEN + d;
    }
    int32_t lo = bucket_start(c, levels), hi = bucket_start(c + 1, levels);
    return r < hi - lo ? lo + (int32_t)r : -1;
}

nctmc_status tokenizer_encode_image(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                                    int32_t *tokens, size_t *n_tokens)
{
    pixel_reader pr;
    pixel_reader_init(&pr, tok->levels);
    size_t pc = (size_t)tok->pixel_chars, at = 0, count = 0;
    int32_t col = 0;
    while (at < n) {
        if (col == tok->width) {
            if (text[at] != '\n')
                return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "byte offset %zu: a row has more than %d pixels", at,
                                 tok->width);
            at++;
            col = 0;
            continue;
        }
        if (text[at] == '\n')
            return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "byte offset %zu: a row ends after %d of %d pixels", at, col,
                             tok->width);
        int32_t level = n - at >= pc ? read_pixel(&pr, text + at, tok->levels, tok->pixel_chars)
                                     : -1;
        if (level < 0)
            return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "byte offset %zu: not a pixel of a %d-level picture", at,
                             tok->levels);
        if (tokens)
            tokens[count] = level;
        count++;
        col++;
        at += pc;
    }
    if (col != 0)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "byte offset %zu: the text ends inside a row (every row ends "
                         "with a newline)",
                         n);
    *n_tokens = count;
    return NCTMC_OK;
}

/* A masked pixel: the placeholder character once per character of a
 * pixel, so the row keeps its width. */
static char *draw_mask(const nctmc_tokenizer *tok, char *out)
{
    for (int32_t c = 0; c < tok->pixel_chars; c++) {
        memcpy(out, tok->mask_text, tok->mask_len);
        out += tok->mask_len;
    }
    return out;
}

nctmc_status tokenizer_decode_image(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                    char *text, size_t *n_bytes)
{
    size_t w = (size_t)tok->width, pc = (size_t)tok->pixel_chars, bytes, n_masked = 0;
    if (n % w != 0)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "%zu tokens are not whole rows of %d pixels", n, tok->width);
    for (size_t i = 0; i < n; i++) {
        if (tokenizer_renders_mask(tok, tokens[i]))
            n_masked++;
        else if (tokens[i] < 0 || tokens[i] >= tok->levels)
            return tokenizer_bad_token(tok, i, tokens[i]);
    }
    /* (n - masked) pixels of pc bytes, masked ones of pc placeholders, and
     * one newline per row */
    size_t mask_bytes;
    if (!checked_mul(n - n_masked, pc, &bytes) ||
        !checked_mul3(n_masked, pc, tok->mask_len, &mask_bytes) ||
        !checked_add(bytes, mask_bytes, &bytes) || !checked_add(bytes, n / w, &bytes))
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "the picture of %zu tokens is too large", n);
    if (text) {
        char *out = text;
        for (size_t i = 0; i < n; i++) {
            if (tokenizer_renders_mask(tok, tokens[i])) {
                out = draw_mask(tok, out);
            } else {
                draw_pixel(tokens[i], tok->levels, tok->pixel_chars, out);
                out += pc;
            }
            if ((i + 1) % w == 0)
                *out++ = '\n';
        }
    }
    *n_bytes = bytes;
    return NCTMC_OK;
}
