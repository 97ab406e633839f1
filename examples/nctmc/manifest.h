/*
 * manifest.h — manifest.txt, the record `nctmc prepare` leaves beside its
 * shards (docs/formats.md, "The manifest"): where the text came from, how
 * it was cut and split, the tokenizer's hash, and every shard's token
 * count, size and checksum. `train` and `eval --data` check the directory
 * against it before use; a directory without one (an older prepare) is
 * read as before.
 */
#ifndef NCTMC_CLI_MANIFEST_H
#define NCTMC_CLI_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "corpus.h"
#include "nctmc.h"

#define CLI_MANIFEST_FILE "manifest.txt"

typedef struct manifest_shard {
    const char *name;           /* CLI_TRAIN_SHARD or CLI_VAL_SHARD */
    nctmc_dataset_info info;    /* as written (checksum included) */
    int64_t documents;          /* documents (or segments of them) it holds */
} manifest_shard;

typedef struct manifest_info {
    const char *input;          /* "text", "jsonl", "split-at" or "digits" */
    const char *input_arg;      /* the field or the split line, or NULL */
    double val_fraction;
    int32_t seq_len;
    const int32_t *separator;   /* the document separator's tokens */
    size_t n_separator;
    const corpus_stats *stats;  /* NULL for digits */
    int64_t dropped_tokens;     /* tail tokens that did not fill a sequence */
    const manifest_shard *shards;
    int n_shards;
    const corpus_file *files;
    int n_files;
} manifest_info;

/** Writes dir/manifest.txt, hashing dir/tokenizer.txt (already written). */
bool manifest_write(const char *cmd, nctmc_context *ctx, const char *dir, const char *shown,
                    const manifest_info *m);

/** Checks dir against its manifest (reports failures): the tokenizer's
 *  hash, and every shard listed — present, the size, token count and
 *  checksum recorded — and none present that is not listed. True when
 *  there is no manifest. */
bool manifest_check(const char *cmd, nctmc_context *ctx, const char *dir);

#endif /* NCTMC_CLI_MANIFEST_H */
