/*
 * png.h — a minimal PNG writer: 8-bit greyscale, no zlib needed.
 *
 * The image data go into "stored" (uncompressed) deflate blocks, which
 * every PNG reader accepts; the files are larger than compressed ones, but
 * the tool's pictures are small and the tool stays free of dependencies.
 */
#ifndef NCTMC_CLI_PNG_H
#define NCTMC_CLI_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"

/** CRC-32 (ISO 3309, as PNG chunks use it) of data, continuing from crc
 *  (start with 0). */
uint32_t png_crc32(uint32_t crc, const uint8_t *data, size_t n);

/** Adler-32 (as zlib streams use it) of data, continuing from adler
 *  (start with 1). */
uint32_t png_adler32(uint32_t adler, const uint8_t *data, size_t n);

/**
 * Encodes an 8-bit greyscale PNG of width x height pixels (row-major, one
 * byte each, 0 = black, 255 = white) into a malloc'd buffer; its length
 * goes to *size. NULL with errno set: EINVAL for a bad size, ENOMEM.
 */
uint8_t *png_encode_grey(uint32_t width, uint32_t height, const uint8_t *pixels, size_t *size);

/**
 * Encodes the picture and writes it to path with the library's atomic
 * writer (nctmc_write_file(): a fresh temporary file beside the target,
 * renamed over it; a symbolic link written through; anything but a regular
 * file refused), so path never holds half a picture and concurrent writers
 * never mix theirs. The reason of a failure is in nctmc_context_last_error.
 */
nctmc_status png_write_grey(nctmc_context *ctx, const char *path, uint32_t width,
                            uint32_t height, const uint8_t *pixels);

#endif /* NCTMC_CLI_PNG_H */
