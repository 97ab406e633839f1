/*
 * image_grid.h — sampled images (tokens of an image tokenizer) as a PNG
 * grid and as an ASCII preview.
 */
#ifndef NCTMC_CLI_IMAGE_GRID_H
#define NCTMC_CLI_IMAGE_GRID_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "nctmc.h"

/** n images of the tokenizer's shape, laid out per_row to a row. */
typedef struct image_grid {
    const int32_t *tokens;   /* [n * width * height] grey levels */
    int64_t n;
    int32_t per_row;
    int32_t width, height, levels;
} image_grid;

/** Fills the shape fields from an image tokenizer; false for other kinds. */
bool image_grid_shape(image_grid *grid, const nctmc_tokenizer *tok);

/**
 * Writes the grid as a greyscale PNG (with the library's atomic writer):
 * each pixel scaled up to a scale x scale block, level 0 white and the top
 * level black, images separated by grey lines. On failure the reason is in
 * nctmc_context_last_error(ctx).
 */
nctmc_status image_grid_write_png(nctmc_context *ctx, const image_grid *grid, int32_t scale,
                                  const char *path);

/**
 * Prints the images as the tokenizer decodes them, side by side, one grid
 * row per line of pictures; row_titles (one per grid row) may be NULL.
 * Returns false when decoding fails (reported).
 */
bool image_grid_print_preview(FILE *out, const image_grid *grid, nctmc_tokenizer *tok,
                              const char *const *row_titles, int width);

#endif /* NCTMC_CLI_IMAGE_GRID_H */
