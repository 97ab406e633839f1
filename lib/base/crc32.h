/*
 * crc32.h — the CRC-32 of zlib, PNG and gzip (reflected polynomial
 * 0xEDB88320), so a shard's checksum can be checked with any standard tool.
 */
#ifndef NCTMC_CRC32_H
#define NCTMC_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC over n more bytes: start with crc = 0, feed the data in
 * any number of pieces; the result is the checksum of their concatenation. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

#endif /* NCTMC_CRC32_H */
