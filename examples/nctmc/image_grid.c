/*
 * image_grid.c — renders sampled images to a PNG grid and to the terminal
 * (image_grid.h).
 */
#include "image_grid.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "png.h"
#include "preview.h"

/* Grey of the lines between images: darker than the white background of
 * a digit, lighter than its ink, so each cell's edge shows. */
enum { SEPARATOR_GREY = 160 };

bool image_grid_shape(image_grid *grid, const nctmc_tokenizer *tok)
{
    return tok != NULL && nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_IMAGE &&
           nctmc_tokenizer_image_shape(tok, &grid->width, &grid->height, &grid->levels) ==
               NCTMC_OK &&
           grid->levels >= 2;
}

/* Level 0 is white, levels - 1 black (the image tokenizer's convention);
 * a token outside the levels (a leftover mask) shows as white. */
static uint8_t grey_of(int32_t level, int32_t levels)
{
    if (level < 0 || level >= levels)
        return 255;
    return (uint8_t)(255 - (level * 255 + (levels - 1) / 2) / (levels - 1));
}

static void paint_image(const image_grid *g, int64_t index, int32_t scale, int32_t gap,
                        uint8_t *pixels, uint32_t stride)
{
    int64_t col = index % g->per_row, row = index / g->per_row;
    size_t x0 = (size_t)(gap + col * ((int64_t)g->width * scale + gap));
    size_t y0 = (size_t)(gap + row * ((int64_t)g->height * scale + gap));
    const int32_t *img = g->tokens + index * g->width * g->height;
    for (int32_t y = 0; y < g->height * scale; y++) {
        uint8_t *line = pixels + (y0 + (size_t)y) * stride + x0;
        for (int32_t x = 0; x < g->width * scale; x++)
            line[x] = grey_of(img[(y / scale) * g->width + x / scale], g->levels);
    }
}

nctmc_status image_grid_write_png(nctmc_context *ctx, const image_grid *g, int32_t scale,
                                  const char *path)
{
    int64_t cols = g->n < g->per_row ? g->n : g->per_row;
    int64_t rows = (g->n + g->per_row - 1) / g->per_row;
    int32_t gap = scale > 1 ? scale / 2 : 1;
    int64_t w = gap + cols * ((int64_t)g->width * scale + gap);
    int64_t h = gap + rows * ((int64_t)g->height * scale + gap);
    if (g->n <= 0 || scale < 1 || w > 16384 || h > 16384)
        return NCTMC_ERR_INVALID_ARGUMENT;
    uint8_t *pixels = malloc((size_t)(w * h));
    if (pixels == NULL)
        return NCTMC_ERR_OUT_OF_MEMORY;
    memset(pixels, SEPARATOR_GREY, (size_t)(w * h));
    for (int64_t i = 0; i < g->n; i++)
        paint_image(g, i, scale, gap, pixels, (uint32_t)w);
    nctmc_status st = png_write_grey(ctx, path, (uint32_t)w, (uint32_t)h, pixels);
    free(pixels);
    return st;
}

/* One image as text for the terminal: two characters per pixel (terminal
 * cells are about twice as tall as wide) from a ten-step ramp that reads
 * from light to dark at a glance. This is a view, not the tokenizer's
 * decodable form (`--out` writes that). */
static char *render_picture(const image_grid *g, const int32_t *pixels)
{
    static const char shades[] = " .:-=+*#%@";
    const int32_t n_shades = (int32_t)sizeof shades - 1;
    size_t line = 2 * (size_t)g->width + 1;
    char *text = malloc(line * (size_t)g->height + 1);
    if (text == NULL)
        return NULL;
    char *at = text;
    for (int32_t y = 0; y < g->height; y++) {
        for (int32_t x = 0; x < g->width; x++) {
            int64_t level = pixels[(size_t)y * (size_t)g->width + (size_t)x];
            int64_t k = g->levels > 1 ? level * (n_shades - 1) / (g->levels - 1) : 0;
            char c = shades[k < 0 ? 0 : k >= n_shades ? n_shades - 1 : k];
            *at++ = c;
            *at++ = c;
        }
        *at++ = '\n';
    }
    *at = '\0';
    return text;
}

bool image_grid_print_preview(FILE *out, const image_grid *g, nctmc_tokenizer *tok,
                              const char *const *row_titles, int width)
{
    (void)tok; /* the shape is in g; kept for callers that decode */
    char **pictures = calloc((size_t)(g->n > 0 ? g->n : 1), sizeof *pictures);
    bool ok = pictures != NULL;
    size_t pixels = (size_t)g->width * (size_t)g->height;
    for (int64_t i = 0; ok && i < g->n; i++) {
        pictures[i] = render_picture(g, g->tokens + (size_t)i * pixels);
        ok = pictures[i] != NULL;
    }
    if (ok)
        preview_print(out, (const char *const *)pictures, (int)g->n, g->per_row, row_titles,
                      width);
    for (int64_t i = 0; pictures != NULL && i < g->n; i++)
        free(pictures[i]);
    free(pictures);
    return ok;
}
