/*
 * prepare_stream.h — `nctmc prepare` on text: a corpus of any size streamed
 * through a pool of tokenizing threads into the shards, in a fixed memory
 * budget, with output bytes that depend only on the input (not on the
 * thread count or the budget). docs/cli.md, "Corpora larger than memory".
 */
#ifndef NCTMC_CLI_PREPARE_STREAM_H
#define NCTMC_CLI_PREPARE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "nctmc.h"

typedef struct stream_options {
    const char *out_dir;
    int tokenizer;               /* NCTMC_TOKENIZER_BYTES or _CHARS, unless tokenizer_file */
    const char *tokenizer_file;  /* a saved tokenizer of any kind, or NULL */
    float val_fraction;
    int32_t seq_len;
    const char *jsonl_field;     /* NULL: plain text */
    const char *split_line;      /* NULL: a file is a document */
    int32_t threads;             /* 0: every online CPU */
    int32_t memory_mb;
    bool progress;               /* log progress off a terminal too */
    bool val_fraction_given;     /* named on the command line: no split is refused */
} stream_options;

/** Runs the whole text prepare; returns the exit status. */
int prepare_stream(nctmc_context *ctx, const stream_options *o, char *const *args,
                   int n_args);

/** Saves tok as DIR/tokenizer.txt and prints its line of the summary
 *  (`shown` is the directory named to the user: the final one, not the
 *  staging one); false after printing the reason. */
bool prepare_write_tokenizer(nctmc_tokenizer *tok, const char *dir, const char *shown);

/** Item i of n goes to validation: exactly floor(n * f) of any n first
 *  items, spread evenly (every 10th for f = 0.1), the first at index 9. */
bool prepare_goes_to_validation(int64_t i, double fraction);

/** The smallest --memory-mb that `threads` tokenizing threads need. */
int32_t prepare_stream_min_memory_mb(int32_t threads);

#endif /* NCTMC_CLI_PREPARE_STREAM_H */
