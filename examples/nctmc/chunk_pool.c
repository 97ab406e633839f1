/*
 * chunk_pool.c — the worker threads of `nctmc prepare` (chunk_pool.h).
 */
#include "chunk_pool.h"

#include <stdlib.h>
#include <string.h>

enum { SLOT_FREE, SLOT_QUEUED, SLOT_BUSY, SLOT_DONE };

static chunk_slot *slot_of(const chunk_pool *p, int64_t seq)
{
    return &p->slots[seq % p->n_slots];
}

/* The oldest queued slot, so that results come back in order early. */
static chunk_slot *next_queued(chunk_pool *p)
{
    for (int64_t s = p->next_take; s < p->next_fill; s++)
        if (slot_of(p, s)->state == SLOT_QUEUED)
            return slot_of(p, s);
    return NULL;
}

typedef struct worker_arg {
    chunk_pool *pool;
    int index;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg *a = arg;
    chunk_pool *p = a->pool;
    nctmc_tokenizer *tok = p->toks ? p->toks[a->index] : NULL;
    free(a);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        chunk_slot *s = NULL;
        while (!p->stop && !(s = next_queued(p)))
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop)
            break;
        s->state = SLOT_BUSY;
        pthread_mutex_unlock(&p->mu);
        p->job(p, s, tok);
        pthread_mutex_lock(&p->mu);
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static bool alloc_slots(chunk_pool *p, size_t chunk_bytes)
{
    p->slots = calloc((size_t)p->n_slots, sizeof *p->slots);
    if (!p->slots)
        return false;
    for (int i = 0; i < p->n_slots; i++) {
        chunk_slot *s = &p->slots[i];
        if (!corpus_chunk_alloc(&s->chunk, chunk_bytes))
            return false;
        s->seg_tokens = malloc(s->chunk.max_segs * sizeof *s->seg_tokens);
        if (!s->seg_tokens)
            return false;
    }
    return true;
}

static bool start_threads(chunk_pool *p, const nctmc_tokenizer *tok)
{
    p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    if (!p->threads)
        return false;
    if (tok) {
        p->toks = calloc((size_t)p->n_threads, sizeof *p->toks);
        if (!p->toks)
            return false;
        /* encode records errors in its handle: each thread needs its own */
        for (int i = 0; i < p->n_threads; i++)
            if (nctmc_tokenizer_clone(tok, &p->toks[i]) != NCTMC_OK)
                return false;
    }
    for (int i = 0; i < p->n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a)
            return false;
        a->pool = p;
        a->index = i;
        if (pthread_create(&p->threads[i], NULL, worker, a) != 0) {
            free(a);
            return false;
        }
        p->started++;
    }
    return true;
}

bool chunk_pool_start(chunk_pool *p, int n_threads, int n_slots, size_t chunk_bytes,
                      const nctmc_tokenizer *tok, chunk_job job, const void *job_data)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n_threads = n_threads;
    p->n_slots = n_slots;
    p->job = job;
    p->job_data = job_data;
    if (!alloc_slots(p, chunk_bytes) || !start_threads(p, tok)) {
        chunk_pool_stop(p);
        return false;
    }
    return true;
}

chunk_slot *chunk_pool_free_slot(chunk_pool *p)
{
    if (p->next_fill - p->next_take >= p->n_slots)
        return NULL;
    return slot_of(p, p->next_fill);
}

void chunk_pool_submit(chunk_pool *p)
{
    pthread_mutex_lock(&p->mu);
    slot_of(p, p->next_fill)->state = SLOT_QUEUED;
    p->next_fill++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

bool chunk_pool_pending(const chunk_pool *p)
{
    return p->next_take < p->next_fill;
}

chunk_slot *chunk_pool_take(chunk_pool *p)
{
    chunk_slot *s = slot_of(p, p->next_take);
    pthread_mutex_lock(&p->mu);
    while (s->state != SLOT_DONE)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return s;
}

void chunk_pool_release(chunk_pool *p)
{
    chunk_slot *s = slot_of(p, p->next_take);
    free(s->text);
    s->text = NULL;
    pthread_mutex_lock(&p->mu);
    s->state = SLOT_FREE;
    p->next_take++;
    pthread_mutex_unlock(&p->mu);
}

void chunk_pool_stop(chunk_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    for (int i = 0; p->toks && i < p->n_threads; i++)
        nctmc_tokenizer_free(p->toks[i]);
    for (int i = 0; p->slots && i < p->n_slots; i++) {
        corpus_chunk_free(&p->slots[i].chunk);
        free(p->slots[i].tokens);
        free(p->slots[i].seg_tokens);
        free(p->slots[i].text);
    }
    free(p->toks);
    free(p->threads);
    free(p->slots);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    memset(p, 0, sizeof *p);
}
