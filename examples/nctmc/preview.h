/*
 * preview.h — ASCII pictures side by side on a terminal.
 */
#ifndef NCTMC_CLI_PREVIEW_H
#define NCTMC_CLI_PREVIEW_H

#include <stdio.h>

/**
 * Prints n pictures (multi-line strings, as an image tokenizer decodes
 * them) side by side, per_row to a row, each row of pictures prefixed by
 * its title (row_titles may be NULL); a row that is wider than `width`
 * columns is wrapped into several.
 */
void preview_print(FILE *out, const char *const *pictures, int n, int per_row,
                   const char *const *row_titles, int width);

/** The number of columns `text` (UTF-8, up to `len` bytes) takes. */
int preview_text_columns(const char *text, size_t len);

#endif /* NCTMC_CLI_PREVIEW_H */
