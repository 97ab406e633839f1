/*
 * dataset_internal.h — the token shard format (docs/formats.md) shared by
 * the whole-array writer and opener (dataset.c), the streaming writer
 * (dataset_writer.c) and the read-only file mapping (dataset_mmap.c).
 */
#ifndef NCTMC_DATASET_INTERNAL_H
#define NCTMC_DATASET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/file_io.h"
#include "nctmc.h"

#define SHARD_MAGIC "NCTMCTOK"
#define SHARD_VERSION 1u
#define SHARD_HEADER_SIZE 48
/* Tokens are encoded through a buffer of this many bytes. */
#define SHARD_CHUNK 65536

typedef struct shard_header {
    uint32_t version;
    uint32_t token_bytes;
    uint32_t vocab_size;
    uint32_t seq_len;
    uint32_t n_classes;
    uint32_t crc;
    uint64_t n_tokens;
    uint64_t reserved;
} shard_header;

void shard_encode_header(const shard_header *h, uint8_t out[SHARD_HEADER_SIZE]);

/* The narrowest width that holds every token of the vocabulary. */
uint32_t shard_token_width(uint32_t vocab_size);

/* Appends values (tokens or labels) in their file encoding, updating the
 * checksum of the body as it goes. */
nctmc_status shard_write_values(file_atomic *af, const int32_t *v, int64_t n, uint32_t width,
                                uint32_t *crc, char *err, size_t err_size);

/* A read-only mapping of a whole file. */
typedef struct shard_map {
    uint8_t *base;    /* NULL: not mapped */
    size_t size;
    size_t released;  /* pages below this offset were handed back */
} shard_map;

/* Maps size bytes of fd read-only. Fails (without a message: the caller
 * falls back to reading) where the file system cannot map files. */
nctmc_status shard_map_file(int fd, uint64_t size, shard_map *m);

/* Hands the whole pages below `upto` back to the kernel: the checks at
 * open read every byte once, and without this a large shard would stay
 * resident after them (the pages come back from the page cache or the
 * file when read again). */
void shard_map_release(shard_map *m, size_t upto);

void shard_unmap(shard_map *m);

#endif /* NCTMC_DATASET_INTERNAL_H */
