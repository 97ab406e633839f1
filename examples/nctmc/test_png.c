/*
 * test_png.c — drives the tool's PNG writer (png.c): checks CRC-32 and
 * Adler-32 against published check values, then writes pictures of sizes
 * chosen to hit the stored-block edges (one block, exactly 65535 bytes,
 * 65536 bytes, several blocks) into a directory, for check_png.py to decode
 * with Python's zlib and compare pixel by pixel.
 *
 *   test_png OUTDIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "png.h"

/* The pattern check_png.py expects: every byte value occurs, and rows
 * differ, so a swapped or shifted row would show. */
static uint8_t pattern(uint32_t x, uint32_t y)
{
    return (uint8_t)((x * 7u + y * 13u + x * y) & 0xFFu);
}

static int check_sums(void)
{
    const uint8_t *digits = (const uint8_t *)"123456789";
    const uint8_t *wiki = (const uint8_t *)"Wikipedia";
    int failed = 0;
    if (png_crc32(0, digits, 9) != 0xCBF43926u) {
        fprintf(stderr, "crc32(\"123456789\") = %08x, want cbf43926\n", png_crc32(0, digits, 9));
        failed++;
    }
    /* computed in two pieces: the running form must continue correctly */
    if (png_crc32(png_crc32(0, digits, 4), digits + 4, 5) != 0xCBF43926u) {
        fprintf(stderr, "crc32 in two pieces differs\n");
        failed++;
    }
    if (png_adler32(1, wiki, 9) != 0x11E60398u) {
        fprintf(stderr, "adler32(\"Wikipedia\") = %08x, want 11e60398\n",
                png_adler32(1, wiki, 9));
        failed++;
    }
    return failed;
}

static int write_pattern(const char *dir, uint32_t w, uint32_t h)
{
    uint8_t *pixels = malloc((size_t)w * h);
    char path[4096];
    if (pixels == NULL)
        return 1;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            pixels[(size_t)y * w + x] = pattern(x, y);
    snprintf(path, sizeof path, "%s/pattern_%ux%u.png", dir, w, h);
    int rc = png_write_grey(path, w, h, pixels);
    if (rc != 0)
        perror(path);
    free(pixels);
    return rc != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_png OUTDIR\n");
        return 2;
    }
    int failed = check_sums();
    /* (w + 1) * h raw bytes: 2, 32, 65535 (one full block), 65536 (a full
     * block and a 1-byte one), 90300 (two blocks) */
    static const uint32_t sizes[][2] = {{1, 1}, {7, 4}, {254, 257}, {255, 256}, {300, 300}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        failed += write_pattern(argv[1], sizes[i][0], sizes[i][1]);
    uint8_t one = 0;
    if (png_write_grey("/nonexistent-dir/x.png", 1, 1, &one) == 0 ||
        png_write_grey("unused.png", 0, 1, &one) == 0) {
        fprintf(stderr, "bad paths or sizes must fail\n");
        failed++;
    }
    printf("test_png: %d failed\n", failed);
    return failed ? 1 : 0;
}
