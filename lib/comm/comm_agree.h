/*
 * comm_agree.h — ranks that must do the same thing check it before they
 * start: each hashes what must be the same everywhere (FNV-1a, 64 bits),
 * rank 0's hashes are broadcast, and the ranks' differences are summed, so
 * that every rank sees the same counts and fails alike; then the counts
 * name what differs. The evaluation (run/eval_agree.c) and the trainer
 * (train/trainer_agree.c) use it, each with its own fields and messages.
 */
#ifndef NCTMC_COMM_AGREE_H
#define NCTMC_COMM_AGREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"

#define COMM_HASH_START 0xcbf29ce484222325ull
#define COMM_HASH_VALUE(h, v) ((h) = comm_hash_bytes((h), &(v), sizeof(v)))

/* h continued over data[0..n): FNV-1a, 64 bits (start at COMM_HASH_START). */
uint64_t comm_hash_bytes(uint64_t h, const void *data, size_t n);

/* Collective (every rank calls it with the same n): count[k], k < n, := the
 * number of ranks taking part (`take_part`) whose mine[k] differs from rank
 * 0's; count[n] := the number of ranks not taking part (they refused their
 * own call). count has n + 1 entries. *differs: this rank's hashes differ
 * from rank 0's. Writes why into err when a collective fails. */
nctmc_status comm_agree(nctmc_comm *c, const uint64_t *mine, int32_t n, bool take_part,
                        double *count, bool *differs, char *err, size_t err_size);

/* out := "a (2 of 3 ranks); b (1 of 3 ranks)": names[k] for each of the n
 * counts that is not 0 (empty when none is). */
void comm_agree_names(const double *count, const char *const *names, int32_t n, int32_t ranks,
                      char *out, size_t size);

#endif /* NCTMC_COMM_AGREE_H */
