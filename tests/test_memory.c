/*
 * test_memory.c — nctmc_sampler_memory() and nctmc_trainer_memory()
 * (nctmc.h): on the CPU backend, whose memory goes through the context's
 * allocator hook, the figures equal to the byte what creation then takes
 * through the hook and holds until the handle is freed (counted by a hook
 * that records each block's size), for several shapes: unconditional and
 * conditional (classifier-free guidance doubles the workspace), time input
 * t and log-SNR, the denoiser link, bf16 and int8 weights, the trainer
 * with and without EMA and activation recomputation. The query allocates
 * nothing; bad parameters give creation's error; NULL pointers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

/* A hook that knows each block's size: a header of `alignment` bytes in
 * front of the block holds it. */
typedef struct tally {
    size_t live;      /* bytes handed out and not freed */
    int64_t n_allocs; /* calls of alloc */
    size_t limit;     /* 0, or no block that would take live past it */
} tally;

static void *tally_alloc(size_t size, size_t alignment, void *user)
{
    tally *t = user;
    if (t->limit > 0 && t->live + size > t->limit)
        return NULL;
    if (alignment < 2 * sizeof(size_t))
        alignment = 2 * sizeof(size_t);
    size_t total = (size + 2 * alignment - 1) / alignment * alignment;
    char *base = aligned_alloc(alignment, total);
    if (!base)
        return NULL;
    char *p = base + alignment;
    ((size_t *)(void *)p)[-1] = size;
    ((size_t *)(void *)p)[-2] = alignment;
    t->live += size;
    t->n_allocs++;
    return p;
}

static void tally_free(void *ptr, void *user)
{
    tally *t = user;
    char *p = ptr;
    t->live -= ((size_t *)(void *)p)[-1];
    free(p - ((size_t *)(void *)p)[-2]);
}

static nctmc_model *make_model(nctmc_context *ctx, int32_t n_classes, nctmc_time_input ti,
                               nctmc_exit_link link)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 13;
    c.seq_len = 24;
    c.n_layers = 2;
    c.d_model = 32;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.n_classes = n_classes;
    c.time_input = ti;
    c.exit_link = link;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model: %s", nctmc_context_last_error(ctx));
    return m;
}

/* The query's figures against what creation takes through the hook. */
static void check_sampler(nctmc_model *m, tally *t, int32_t max_batch, int32_t max_length,
                          const char *what)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = max_batch;
    sp.max_length = max_length;
    size_t be = 0, host = 0;
    int64_t allocs = t->n_allocs;
    CHECK(nctmc_sampler_memory(m, &sp, &be, &host) == NCTMC_OK, "%s: sampler_memory: %s", what,
          nctmc_model_last_error(m));
    CHECK(t->n_allocs == allocs, "%s: the query allocates nothing", what);
    size_t before = t->live;
    nctmc_sampler *s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK, "%s: sampler_create", what);
    size_t taken = t->live - before;
    CHECK(be > 0 && host > 0 && taken == be + host,
          "%s: sampler: query %zu backend + %zu host = %zu, creation took %zu", what, be, host,
          be + host, taken);
    printf("%s: sampler %d x %d: %zu backend + %zu host bytes\n", what, max_batch, max_length,
           be, host);
    nctmc_sampler_free(s);
    CHECK(t->live == before, "%s: the sampler gave everything back", what);
}

static void check_trainer(nctmc_model *m, tally *t, int32_t batch, float ema, int32_t recompute,
                          const char *what)
{
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = batch;
    tp.ema_decay = ema;
    tp.activation_recompute = recompute;
    size_t be = 0, host = 0;
    int64_t allocs = t->n_allocs;
    CHECK(nctmc_trainer_memory(m, &tp, &be, &host) == NCTMC_OK, "%s: trainer_memory: %s", what,
          nctmc_model_last_error(m));
    CHECK(t->n_allocs == allocs, "%s: the query allocates nothing", what);
    size_t before = t->live;
    nctmc_trainer *tr = NULL;
    CHECK(nctmc_trainer_create(m, &tp, &tr) == NCTMC_OK, "%s: trainer_create: %s", what,
          nctmc_model_last_error(m));
    size_t taken = t->live - before;
    CHECK(be > 0 && host > 0 && taken == be + host,
          "%s: trainer: query %zu backend + %zu host = %zu, creation took %zu", what, be, host,
          be + host, taken);
    printf("%s: trainer batch %d ema %g recompute %d: %zu backend + %zu host bytes\n", what,
           batch, (double)ema, recompute, be, host);
    nctmc_trainer_free(tr);
    CHECK(t->live == before, "%s: the trainer gave everything back", what);
}

/* A trainer that cannot get its memory fails with the bytes it asked for
 * (nctmc_trainer_memory's figures) in its message (issue 37 item 4). */
static void check_trainer_out_of_memory(nctmc_model *m, tally *t)
{
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 8;
    size_t be = 0, host = 0;
    CHECK(nctmc_trainer_memory(m, &tp, &be, &host) == NCTMC_OK, "trainer_memory: %s",
          nctmc_model_last_error(m));
    char want[200];
    snprintf(want, sizeof want, "asks for %zu bytes of backend memory and %zu bytes of host memory",
             be, host);
    /* half of what it needs, then all of it but the workspace's last part */
    size_t room[2] = {(be + host) / 2, be + host - 64};
    for (int i = 0; i < 2; i++) {
        t->limit = t->live + room[i];
        nctmc_trainer *tr = NULL;
        nctmc_status st = nctmc_trainer_create(m, &tp, &tr);
        t->limit = 0;
        const char *msg = nctmc_model_last_error(m);
        CHECK(st == NCTMC_ERR_OUT_OF_MEMORY && tr == NULL && strstr(msg, want),
              "trainer in %zu of %zu bytes: status %d, \"%s\" (want \"%s\")", room[i],
              be + host, (int)st, msg, want);
        printf("trainer out of memory: %s\n", msg);
        nctmc_trainer_free(tr);
    }
}

int main(void)
{
    tally t = {0, 0, 0};
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    cp.alloc_fn = tally_alloc;
    cp.free_fn = tally_free;
    cp.alloc_user_data = &t;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");

    nctmc_model *plain = make_model(ctx, 0, NCTMC_TIME_INPUT_T, NCTMC_EXIT_LINK_SIGMA);
    nctmc_model *cond = make_model(ctx, 4, NCTMC_TIME_INPUT_LOG_SNR,
                                   NCTMC_EXIT_LINK_NOISE_POSTERIOR);
    nctmc_model *den = make_model(ctx, 0, NCTMC_TIME_INPUT_LOG_SNR, NCTMC_EXIT_LINK_DENOISER);
    check_sampler(plain, &t, 3, 0, "plain");
    check_sampler(plain, &t, 1, 7, "plain short");
    check_sampler(cond, &t, 5, 0, "conditional");
    check_sampler(den, &t, 2, 11, "denoiser");
    check_trainer(plain, &t, 4, 0.999f, 0, "plain");
    check_trainer(cond, &t, 3, 0.0f, 0, "conditional no EMA");
    check_trainer(den, &t, 2, 0.99f, 1, "denoiser recompute");
    check_trainer_out_of_memory(plain, &t);

    /* reduced weights: the packed kernels' scratch is in the workspace */
    nctmc_weight_type kinds[] = {NCTMC_WEIGHT_BF16, NCTMC_WEIGHT_INT8};
    for (size_t k = 0; k < 2; k++) {
        nctmc_model *q = NULL;
        CHECK(nctmc_model_convert(cond, kinds[k], &q) == NCTMC_OK, "convert");
        check_sampler(q, &t, 4, 0, kinds[k] == NCTMC_WEIGHT_BF16 ? "bf16" : "int8");
        /* a reduced model cannot be trained: the query says so as creation does */
        size_t be = 1, host = 1;
        CHECK(nctmc_trainer_memory(q, NULL, &be, &host) == NCTMC_ERR_INVALID_ARGUMENT &&
                  be == 0 && host == 0 &&
                  strstr(nctmc_model_last_error(q), "reduced-precision"),
              "trainer_memory on a reduced model: %s", nctmc_model_last_error(q));
        nctmc_model_free(q);
    }

    /* a bigger shape grows the figure */
    size_t small_be = 0, big_be = 0;
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 2;
    CHECK(nctmc_sampler_memory(plain, &sp, &small_be, NULL) == NCTMC_OK, "NULL host pointer");
    sp.max_batch = 4;
    CHECK(nctmc_sampler_memory(plain, &sp, &big_be, NULL) == NCTMC_OK, "bigger batch");
    CHECK(big_be > small_be, "batch 4 (%zu) needs more than batch 2 (%zu)", big_be, small_be);
    CHECK(nctmc_sampler_memory(plain, NULL, NULL, NULL) == NCTMC_OK, "defaults, no outputs");

    /* bad parameters: creation's errors, in the same place */
    size_t be = 1, host = 1;
    sp.max_batch = 0;
    CHECK(nctmc_sampler_memory(plain, &sp, &be, &host) == NCTMC_ERR_INVALID_ARGUMENT && be == 0 &&
              host == 0 && strstr(nctmc_model_last_error(plain), "max_batch = 0"),
          "max_batch 0: %s", nctmc_model_last_error(plain));
    sp.max_batch = 1;
    sp.max_length = 25;
    CHECK(nctmc_sampler_memory(plain, &sp, &be, &host) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_model_last_error(plain), "max_length = 25"),
          "max_length 25: %s", nctmc_model_last_error(plain));
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 0;
    CHECK(nctmc_trainer_memory(plain, &tp, &be, &host) == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_model_last_error(plain), "batch_size"),
          "batch_size 0: %s", nctmc_model_last_error(plain));
    CHECK(nctmc_sampler_memory(NULL, NULL, &be, &host) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL model");
    CHECK(nctmc_trainer_memory(NULL, NULL, &be, &host) == NCTMC_ERR_INVALID_ARGUMENT,
          "NULL model (trainer)");

    nctmc_model_free(plain);
    nctmc_model_free(cond);
    nctmc_model_free(den);
    nctmc_context_free(ctx);
    CHECK(t.live == 0, "everything freed: %zu bytes live", t.live);
    return test_finish("memory");
}
