/*
 * chunk_pool.h — a few threads working on a ring of corpus chunks. The
 * caller (one thread) fills slots in order, the workers process any queued
 * slot with their own tokenizer, and the caller takes results back in the
 * order it filled them: the output is the same for any number of threads,
 * and at most n_slots chunks exist at once (the memory bound).
 */
#ifndef NCTMC_CLI_CHUNK_POOL_H
#define NCTMC_CLI_CHUNK_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "corpus.h"
#include "nctmc.h"

typedef struct chunk_slot {
    corpus_chunk chunk;
    int state;                  /* internal */
    /* results of the job */
    int32_t *tokens;
    size_t n_tokens, tokens_cap;
    size_t *seg_tokens;         /* tokens of each segment, its separator included */
    char *text;                 /* the alphabet job's characters (malloc'ed) */
    size_t text_len;
    nctmc_status status;
    char error[512];
} chunk_slot;

struct chunk_pool;
typedef void (*chunk_job)(const struct chunk_pool *pool, chunk_slot *slot,
                          nctmc_tokenizer *tok);

typedef struct chunk_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    chunk_slot *slots;
    int n_slots;
    int64_t next_fill, next_take;  /* slot of sequence number s: s % n_slots */
    pthread_t *threads;
    int n_threads, started;
    nctmc_tokenizer **toks;        /* one clone per thread (NULL: the job needs none) */
    chunk_job job;
    const void *job_data;          /* for the job: separator, split */
    bool stop;
} chunk_pool;

/** Allocates n_slots chunks of chunk_bytes and starts n_threads workers,
 *  each with its own clone of tok (which may be NULL). */
bool chunk_pool_start(chunk_pool *p, int n_threads, int n_slots, size_t chunk_bytes,
                      const nctmc_tokenizer *tok, chunk_job job, const void *job_data);

/** The next slot to fill, or NULL while all are in use. */
chunk_slot *chunk_pool_free_slot(chunk_pool *p);

/** Hands the slot chunk_pool_free_slot() gave to the workers. */
void chunk_pool_submit(chunk_pool *p);

/** Whether a submitted chunk has not been taken back yet. */
bool chunk_pool_pending(const chunk_pool *p);

/** Waits for the oldest submitted chunk and returns it (done). */
chunk_slot *chunk_pool_take(chunk_pool *p);

/** Returns the slot chunk_pool_take() gave to the ring. */
void chunk_pool_release(chunk_pool *p);

/** Stops the workers and frees everything. */
void chunk_pool_stop(chunk_pool *p);

#endif /* NCTMC_CLI_CHUNK_POOL_H */
