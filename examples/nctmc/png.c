/*
 * png.c — writes greyscale PNGs with stored deflate blocks (png.h).
 *
 * Layout (PNG 1.2 / RFC 1950 / RFC 1951): the 8-byte signature; an IHDR
 * chunk; one IDAT chunk holding a zlib stream — header 78 01, the filtered
 * scanlines (filter byte 0 then the row) cut into stored blocks of at most
 * 65535 bytes, the Adler-32 of the scanlines; an empty IEND chunk. Every
 * chunk ends with the CRC-32 of its type and data.
 */
#include "png.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { STORED_BLOCK_MAX = 65535 };

uint32_t png_crc32(uint32_t crc, const uint8_t *data, size_t n)
{
    static uint32_t table[256];
    static bool table_ready = false;
    if (!table_ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        table_ready = true;
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t png_adler32(uint32_t adler, const uint8_t *data, size_t n)
{
    /* 5552 bytes is the most that can be summed before s2 could overflow
     * 32 bits, as zlib does it */
    uint32_t s1 = adler & 0xFFFF, s2 = adler >> 16;
    while (n > 0) {
        size_t chunk = n < 5552 ? n : 5552;
        n -= chunk;
        while (chunk--) {
            s1 += *data++;
            s2 += s1;
        }
        s1 %= 65521;
        s2 %= 65521;
    }
    return (s2 << 16) | s1;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A PNG file being assembled in memory. */
typedef struct png_buffer {
    uint8_t *data;
    size_t len;
} png_buffer;

static void put_bytes(png_buffer *b, const void *src, size_t n)
{
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

/* Appends a complete chunk: length, type, data, CRC of type + data. */
static void put_chunk(png_buffer *b, const char type[4], const uint8_t *data, uint32_t n)
{
    uint8_t word[4];
    put_be32(word, n);
    put_bytes(b, word, 4);
    size_t type_at = b->len;
    put_bytes(b, type, 4);
    if (n > 0)
        put_bytes(b, data, n);
    put_be32(word, png_crc32(0, b->data + type_at, 4 + (size_t)n));
    put_bytes(b, word, 4);
}

/* The raw scanlines: each row preceded by filter type 0 (none). */
static uint8_t *filtered_rows(uint32_t width, uint32_t height, const uint8_t *pixels)
{
    size_t row = (size_t)width + 1;
    uint8_t *raw = malloc(row * height);
    if (raw == NULL)
        return NULL;
    for (uint32_t y = 0; y < height; y++) {
        raw[y * row] = 0;
        memcpy(raw + y * row + 1, pixels + (size_t)y * width, width);
    }
    return raw;
}

/* The zlib stream of `raw` in stored blocks into out (sized by the
 * caller with zlib_stored_size()); returns its length. */
static size_t zlib_stored(uint8_t *out, const uint8_t *raw, size_t n)
{
    size_t at = 0;
    out[at++] = 0x78; /* deflate, 32 KiB window */
    out[at++] = 0x01; /* no dictionary, fastest; (0x7801 % 31 == 0) */
    size_t done = 0;
    do {
        size_t len = n - done < STORED_BLOCK_MAX ? n - done : STORED_BLOCK_MAX;
        bool final = done + len == n;
        out[at++] = final ? 0x01 : 0x00; /* BFINAL, BTYPE 00, padding */
        out[at++] = (uint8_t)len;
        out[at++] = (uint8_t)(len >> 8);
        out[at++] = (uint8_t)~len;
        out[at++] = (uint8_t)(~len >> 8);
        memcpy(out + at, raw + done, len);
        at += len;
        done += len;
    } while (done < n);
    put_be32(out + at, png_adler32(1, raw, n));
    return at + 4;
}

static size_t zlib_stored_size(size_t n)
{
    size_t blocks = n / STORED_BLOCK_MAX + 1;
    return 2 + blocks * 5 + n + 4;
}

uint8_t *png_encode_grey(uint32_t width, uint32_t height, const uint8_t *pixels, size_t *size)
{
    /* PNG sizes are at most 2^31 - 1; the limit here also keeps every size
     * below comfortably inside size_t and the IDAT length in 32 bits */
    if (width == 0 || height == 0 || width > 16384 || height > 16384 ||
        (uint64_t)(width + 1) * height > 0x7FFF0000u) {
        errno = EINVAL;
        return NULL;
    }
    size_t raw_len = ((size_t)width + 1) * height;
    uint8_t *raw = filtered_rows(width, height, pixels);
    uint8_t *idat = malloc(zlib_stored_size(raw_len));
    png_buffer file = {malloc(8 + 25 + 12 + zlib_stored_size(raw_len) + 12), 0};
    if (raw != NULL && idat != NULL && file.data != NULL) {
        static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
        uint8_t ihdr[13];
        put_be32(ihdr, width);
        put_be32(ihdr + 4, height);
        ihdr[8] = 8;   /* bits per sample */
        ihdr[9] = 0;   /* colour type: greyscale */
        ihdr[10] = 0;  /* compression: deflate */
        ihdr[11] = 0;  /* filter method 0 */
        ihdr[12] = 0;  /* not interlaced */
        put_bytes(&file, signature, 8);
        put_chunk(&file, "IHDR", ihdr, 13);
        size_t idat_len = zlib_stored(idat, raw, raw_len);
        put_chunk(&file, "IDAT", idat, (uint32_t)idat_len);
        put_chunk(&file, "IEND", NULL, 0);
        *size = file.len;
    } else {
        free(file.data);
        file.data = NULL;
    }
    free(raw);
    free(idat);
    if (file.data == NULL)
        errno = ENOMEM;
    return file.data;
}

nctmc_status png_write_grey(nctmc_context *ctx, const char *path, uint32_t width,
                            uint32_t height, const uint8_t *pixels)
{
    size_t size = 0;
    uint8_t *data = png_encode_grey(width, height, pixels, &size);
    if (data == NULL)
        return errno == EINVAL ? NCTMC_ERR_INVALID_ARGUMENT : NCTMC_ERR_OUT_OF_MEMORY;
    nctmc_status st = nctmc_write_file(ctx, path, data, size);
    free(data);
    return st;
}
