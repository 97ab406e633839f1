/*
 * test_png.c — drives the tool's PNG writer (png.c): checks CRC-32 and
 * Adler-32 against published check values, then writes pictures of sizes
 * chosen to hit the stored-block edges (one block, exactly 65535 bytes,
 * 65536 bytes, several blocks) into a directory, for check_png.py to decode
 * with Python's zlib and compare pixel by pixel. Also checks that the
 * writer goes through the library's atomic writer: a planted
 * "<png>.tmp" symbolic link is not followed, a FIFO at the path is refused.
 *
 *   test_png OUTDIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "png.h"

static nctmc_context *ctx;

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
    nctmc_status st = png_write_grey(ctx, path, w, h, pixels);
    if (st != NCTMC_OK)
        fprintf(stderr, "%s: %s\n", path, nctmc_context_last_error(ctx));
    free(pixels);
    return st != NCTMC_OK;
}

static int file_is(const char *path, const char *text)
{
    char buf[64] = "";
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    return n == strlen(text) && memcmp(buf, text, n) == 0;
}

/* Issue 10, item 6: the old writer opened a fixed "<png>.tmp" with fopen,
 * which follows a symbolic link planted there onto any file. */
static int check_hostile_paths(const char *dir)
{
    char victim[4096], planted[4096], png[4096], fifo[4096];
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    snprintf(png, sizeof png, "%s/grid.png", dir);
    snprintf(planted, sizeof planted, "%s/grid.png.tmp", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo.png", dir);
    FILE *f = fopen(victim, "wb");
    if (f == NULL || fputs("precious", f) < 0 || fclose(f) != 0 || symlink(victim, planted) != 0 ||
        mkfifo(fifo, 0600) != 0) {
        fprintf(stderr, "cannot set up the hostile paths\n");
        return 1;
    }
    uint8_t pixels[4] = {0, 80, 160, 255};
    int failed = 0;
    if (png_write_grey(ctx, png, 2, 2, pixels) != NCTMC_OK || !file_is(victim, "precious")) {
        fprintf(stderr, "a planted <png>.tmp link was followed onto its target\n");
        failed++;
    }
    struct stat st;
    if (png_write_grey(ctx, fifo, 2, 2, pixels) != NCTMC_ERR_IO || stat(fifo, &st) != 0 ||
        !S_ISFIFO(st.st_mode)) {
        fprintf(stderr, "a FIFO at the path was not refused\n");
        failed++;
    }
    unlink(victim);
    unlink(planted);
    unlink(png);
    unlink(fifo);
    return failed;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_png OUTDIR\n");
        return 2;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    int failed = check_sums() + check_hostile_paths(argv[1]);
    /* (w + 1) * h raw bytes: 2, 32, 65535 (one full block), 65536 (a full
     * block and a 1-byte one), 90300 (two blocks) */
    static const uint32_t sizes[][2] = {{1, 1}, {7, 4}, {254, 257}, {255, 256}, {300, 300}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        failed += write_pattern(argv[1], sizes[i][0], sizes[i][1]);
    uint8_t one = 0;
    if (png_write_grey(ctx, "/nonexistent-dir/x.png", 1, 1, &one) != NCTMC_ERR_IO ||
        png_write_grey(ctx, "unused.png", 0, 1, &one) != NCTMC_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "bad paths or sizes must fail\n");
        failed++;
    }
    nctmc_context_free(ctx);
    printf("test_png: %d failed\n", failed);
    return failed ? 1 : 0;
}
