/*
 * staged_dir.h — the output directory of `nctmc prepare`, replaced as a
 * whole. The tokenizer and the shards must come from one run: a stale
 * val.bin beside a new train.bin would have training validate on another
 * corpus, and a run stopped half-way (full disk, Ctrl-C) would leave a new
 * tokenizer beside old shards. So the files go into a fresh sibling
 * directory "<out>.tmp-XXXXXX", and only when all are written does it take
 * the place of <out> (docs/cli.md says why this and not a manifest).
 */
#ifndef NCTMC_CLI_STAGED_DIR_H
#define NCTMC_CLI_STAGED_DIR_H

#include <stdbool.h>

#include "cli_platform.h"

typedef struct staged_dir {
    char *final;    /* the output directory, canonical */
    char *staging;  /* where the files are written until the commit */
    cli_dir_lock lock; /* staging, held until then (cli_platform.h) */
} staged_dir;

/**
 * Checks, before any work, that `out` can be replaced: a non-empty name; an
 * existing directory holding nothing but prepare's own files (it is
 * replaced whole, so anything else would be lost) and none of them one of
 * inputs[0 .. n_inputs); or a missing one whose nearest existing parent we
 * can write. Reports failures itself.
 */
bool staged_dir_check(const char *cmd, const char *out, const char *const *inputs, int n_inputs);

/** Creates the staging directory (and missing parents of out), and removes
 *  staging directories of out that a killed prepare left. */
bool staged_dir_begin(const char *cmd, const char *out, staged_dir *sd);

/** Puts the staging directory in the place of out; the old directory and
 *  its files are removed. Releases sd; on failure the staging directory
 *  is removed and out is untouched. */
bool staged_dir_commit(const char *cmd, staged_dir *sd);

/** Removes the staging directory and releases sd. */
void staged_dir_abort(staged_dir *sd);

#endif /* NCTMC_CLI_STAGED_DIR_H */
