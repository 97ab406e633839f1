/*
 * eval_ranks_check.c — nctmc_eval() over the ranks of an MPI job, through
 * the public API only; run by examples/nctmc/test_distributed_eval.sh under
 * `mpirun -n N` (N = 1, 2, 3). Every rank evaluates a tiny random model on
 * the same held-out set twice — once with params.comm (the job's ranks),
 * once with comm = NULL (this process alone) — and checks:
 *
 *  1. every byte of nctmc_eval_result equal: the NELBO, its standard error,
 *     mean_loss, the counts, the median rates, the reliability table and
 *     ECEs (uniform process with labels; masked process with sqrt time
 *     sampling; a batch larger than the whole set, so that ranks idle);
 *  2. every rank's result equal to rank 0's (broadcast);
 *  3. a stop from the last rank's progress callback stops every rank with
 *     NCTMC_ERR_CANCELLED and the partial result of one process that stops
 *     after the same rows;
 *  4. a rank whose parameters differ (seed), or that refuses its own call
 *     (a bad token), makes every rank fail, none waiting: the others name
 *     the difference or the refusal.
 *
 *   eval_ranks_check   (under mpirun; alone it is the world of one)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

#define N_SEQ 13
#define LEN 12
#define VOCAB 8

static int g_rank, g_ranks;
static nctmc_comm *g_comm;

static nctmc_model *make_model(nctmc_context *ctx, nctmc_process process, int n_classes)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = VOCAB;
    c.vocab_pad_multiple = 0;
    c.seq_len = LEN;
    c.n_layers = 1;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.n_classes = n_classes;
    c.process = process;
    c.seed = 11;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "model_create: %s",
          nctmc_context_last_error(ctx));
    return m;
}

/* Compares this rank's result with rank 0's, byte for byte. */
static void check_same_as_rank0(const nctmc_eval_result *r, const char *what)
{
    nctmc_eval_result root = *r;
    CHECK(nctmc_comm_broadcast(g_comm, &root, (int64_t)sizeof root, 0) == NCTMC_OK,
          "broadcast: %s", nctmc_comm_last_error(g_comm));
    CHECK(memcmp(&root, r, sizeof root) == 0, "%s: rank %d's result differs from rank 0's",
          what, g_rank);
}

/* (1) and (2) for one model and one set of parameters. */
static void check_equal(nctmc_model *m, nctmc_eval_params p, const char *what)
{
    nctmc_eval_result alone, ranks;
    nctmc_eval_result_init(&alone);
    nctmc_eval_result_init(&ranks);
    p.comm = NULL;
    CHECK(nctmc_eval(m, &p, &alone) == NCTMC_OK, "%s alone: %s", what,
          nctmc_model_last_error(m));
    p.comm = g_comm;
    CHECK(nctmc_eval(m, &p, &ranks) == NCTMC_OK, "%s over ranks: %s", what,
          nctmc_model_last_error(m));
    CHECK(alone.n_tokens == (int64_t)p.n_sequences * p.length, "%s: n_tokens %lld", what,
          (long long)alone.n_tokens);
    CHECK(memcmp(&alone, &ranks, sizeof alone) == 0,
          "%s, rank %d of %d: the result differs from one process's: NELBO %.17g vs %.17g, "
          "std error %.17g vs %.17g, mean loss %.17g vs %.17g, median clean[0] %.17g vs "
          "%.17g, ece %.17g vs %.17g",
          what, g_rank, g_ranks, ranks.nelbo_bits_per_token, alone.nelbo_bits_per_token,
          ranks.std_error_bits, alone.std_error_bits, ranks.mean_loss, alone.mean_loss,
          ranks.buckets[0].median_rate_clean, alone.buckets[0].median_rate_clean, ranks.ece,
          alone.ece);
    check_same_as_rank0(&ranks, what);
    if (g_rank == 0)
        printf("%s: NELBO %.17g +- %.17g bits/token, mean loss %.17g, %lld positions in "
               "the table\n",
               what, ranks.nelbo_bits_per_token, ranks.std_error_bits, ranks.mean_loss,
               (long long)ranks.n_reliability);
}

typedef struct stopper {
    int64_t stop_at;   /* stop once this many rows are done (0 = never) */
    int calls;
} stopper;

static int32_t stop_progress(int64_t done, int64_t total, void *user_data)
{
    stopper *s = user_data;
    (void)total;
    s->calls++;
    return !(s->stop_at > 0 && done >= s->stop_at);
}

/* (3): the last rank stops after the second round. */
static void check_cancel(nctmc_model *m, nctmc_eval_params p)
{
    int64_t rows = p.n_sequences * p.n_time_samples;
    int64_t at = 2 * (int64_t)g_ranks * p.batch_size;
    if (at >= rows)
        return;
    stopper mine = {g_rank == g_ranks - 1 ? at : 0, 0}, alone = {at, 0};
    nctmc_eval_result r, ref;
    nctmc_eval_result_init(&r);
    nctmc_eval_result_init(&ref);
    p.progress = stop_progress;
    p.user_data = &alone;
    p.comm = NULL;
    CHECK(nctmc_eval(m, &p, &ref) == NCTMC_ERR_CANCELLED, "cancel alone: %s",
          nctmc_model_last_error(m));
    p.user_data = &mine;
    p.comm = g_comm;
    nctmc_status st = nctmc_eval(m, &p, &r);
    CHECK(st == NCTMC_ERR_CANCELLED, "rank %d: a stop on rank %d gave status %d: %s", g_rank,
          g_ranks - 1, (int)st, nctmc_model_last_error(m));
    CHECK(mine.calls == 2, "rank %d: progress called %d times, not 2 (once per round)", g_rank,
          mine.calls);
    CHECK(memcmp(&r, &ref, sizeof r) == 0 && r.n_tokens > 0 && r.n_tokens < (int64_t)N_SEQ * LEN,
          "rank %d: the cancelled result (%lld tokens) is not one process's stopped after %lld "
          "rows (%lld tokens)",
          g_rank, (long long)r.n_tokens, (long long)at, (long long)ref.n_tokens);
    if (g_ranks > 1 && g_rank != g_ranks - 1)
        CHECK(strstr(nctmc_model_last_error(m), "rank") != NULL, "rank %d: message: %s", g_rank,
              nctmc_model_last_error(m));
    check_same_as_rank0(&r, "cancelled");
}

/* (4): disagreement and a refused call fail every rank. */
static void check_refusals(nctmc_model *m, nctmc_eval_params p, int32_t *tokens)
{
    if (g_ranks == 1)
        return;
    nctmc_eval_result r;
    nctmc_eval_result_init(&r);
    p.comm = g_comm;
    p.seed = g_rank == g_ranks - 1 ? 99 : p.seed;
    nctmc_status st = nctmc_eval(m, &p, &r);
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT &&
              strstr(nctmc_model_last_error(m), "differ from rank 0 in the eval parameters"),
          "rank %d: a different seed on one rank gave %d: %s", g_rank, (int)st,
          nctmc_model_last_error(m));
    p.seed = 5;
    int32_t saved = tokens[3];
    if (g_rank == 1)
        tokens[3] = VOCAB + 5;
    st = nctmc_eval(m, &p, &r);
    const char *want = g_rank == 1 ? "is not a data token" : "1 of";
    CHECK(st == NCTMC_ERR_INVALID_ARGUMENT && strstr(nctmc_model_last_error(m), want),
          "rank %d: a bad token on rank 1 gave %d: %s", g_rank, (int)st,
          nctmc_model_last_error(m));
    tokens[3] = saved;
}

int main(void)
{
    char why[512];
    if (nctmc_comm_from_env(&g_comm, why, sizeof why) != NCTMC_OK) {
        fprintf(stderr, "comm_from_env: %s\n", why);
        return 1;
    }
    g_rank = nctmc_comm_rank(g_comm);
    g_ranks = nctmc_comm_size(g_comm);
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.n_threads = 1;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&cp, &ctx) == NCTMC_OK, "context");
    int32_t tokens[N_SEQ * LEN], labels[N_SEQ];
    test_rng rng = test_rng_seed(3);
    for (int k = 0; k < N_SEQ * LEN; k++)
        tokens[k] = (int32_t)(test_rng_next(&rng) % (VOCAB - 1));
    for (int s = 0; s < N_SEQ; s++)
        labels[s] = s % 4;  /* 3 = the null label */

    nctmc_eval_params p;
    nctmc_eval_params_init(&p);
    p.n_sequences = N_SEQ;
    p.length = LEN;
    p.tokens = tokens;
    p.labels = labels;
    p.batch_size = 3;      /* 13 x 5 = 65 rows: 22 passes, 21 of 3 and one of 2 */
    p.n_time_samples = 5;
    p.seed = 5;

    nctmc_model *u = make_model(ctx, NCTMC_PROCESS_UNIFORM, 3);
    if (u) {
        check_equal(u, p, "uniform, labels, batch 3");
        nctmc_eval_params big = p;
        big.batch_size = 100;  /* one pass: the other ranks idle */
        check_equal(u, big, "uniform, batch 100");
        check_cancel(u, p);
        check_refusals(u, p, tokens);
        /* after the refusals, the ranks still evaluate together */
        check_equal(u, p, "uniform again");
    }
    nctmc_model *mk = make_model(ctx, NCTMC_PROCESS_MASKED, 0);
    if (mk) {
        nctmc_eval_params q = p;
        q.labels = NULL;
        q.batch_size = 4;
        q.time_sampling = NCTMC_TIME_SAMPLING_SQRT;
        check_equal(mk, q, "masked, sqrt, batch 4");
    }
    nctmc_model_free(u);
    nctmc_model_free(mk);
    nctmc_context_free(ctx);
    char suite[64];
    snprintf(suite, sizeof suite, "eval_ranks_check rank %d of %d", g_rank, g_ranks);
    int rc = test_finish(suite);
    nctmc_comm_free(g_comm);
    return rc;
}
