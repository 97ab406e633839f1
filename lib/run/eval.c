/*
 * eval.c — nctmc_eval(): the NELBO of held-out sequences in bits per token,
 * by Monte Carlo over stratified times and x_t ~ q_{t|0}, the exit-rate
 * reliability table and the per-bucket rate statistics (docs/math.md,
 * "NELBO").
 *
 * The work is a list of rows, one per (sequence, time sample), in
 * sequence-major order; a forward pass takes batch_size of them. Every
 * random number is a Philox draw named by (stream, time sample, sequence,
 * position) under the seed, and each sequence's sum runs over its rows in
 * order, so batch_size changes no draw and no order of summation.
 *
 * Over N ranks (params.comm) the forward passes are dealt out round-robin:
 * in each round of N passes rank q runs pass q of the round and broadcasts
 * its per-position outputs (L_cond and h); every rank then folds all N
 * passes into its sums in pass order, exactly as one process would, so
 * every rank returns one process's result bit for bit. A rank's failure
 * and a progress callback's stop travel with the round, so that no rank
 * waits for one that has left.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "comm/comm.h"
#include "core/context.h"
#include "dit/dit.h"
#include "eval_agree.h"
#include "eval_median.h"
#include "eval_reliability.h"
#include "model/model.h"
#include "math/nelbo_math.h"
#include "math/philox.h"
#include "math/time_sampling.h"

/* Where the prior sits by default: where the sampler starts by default. */
#define EVAL_DEFAULT_T_MAX 0.999f
/* Values kept per (bucket, clean/noisy) for the medians: 16 x 64 Ki floats,
 * 4 MiB at most, whatever the data size. */
#define EVAL_MEDIAN_CAP 65536
/* The sequence index's high 16 bits share the first counter word with the
 * purpose and the stream. */
#define EVAL_MAX_SEQUENCES ((int64_t)1 << 48)

#define EVAL_LN2 0.69314718055994530942

/* Sub-streams of NCTMC_RNG_EVAL (second byte of the first counter word). */
enum { EVAL_STREAM_TIME = 0, EVAL_STREAM_NOISE = 1, EVAL_STREAM_TOKEN = 2,
       EVAL_STREAM_RESERVOIR = 3 };

/* ---- randomness ------------------------------------------------------------ */

static philox4x32 eval_draw(uint64_t seed, uint32_t stream, uint32_t k, int64_t seq,
                            uint32_t pos)
{
    uint32_t seq_hi = (uint32_t)((uint64_t)seq >> 32);
    philox4x32 c = {{(uint32_t)NCTMC_RNG_EVAL | stream << 8 | seq_hi << 16, k, (uint32_t)seq,
                     pos}};
    return philox4x32_10(c, seed);
}

/* A double uniform on (0, 1) from 53 random bits: noise probabilities
 * 1 - a_t go far below float's 2^-24 near t = 0. */
static double eval_uniform53(uint32_t hi, uint32_t lo)
{
    uint64_t bits = (uint64_t)(hi >> 5) << 26 | (uint64_t)(lo >> 6);
    return ((double)bits + 0.5) * (1.0 / 9007199254740992.0);
}

/* Time of sample k of sequence s, rounded to the float the model sees (and
 * kept below 1, which the model refuses); every formula then uses this
 * value, so the model and the bound agree on t. Stratum k of (0, 1) maps
 * to t / T through the trainer's inverse CDF on (0, 1) (eps = 0); the even
 * spread keeps its 0.5 expression, so that it draws the same times. */
static float eval_time(uint64_t seed, double T, nctmc_time_sampling mode, int32_t n, int32_t k,
                       int64_t s)
{
    philox4x32 r = eval_draw(seed, EVAL_STREAM_TIME, (uint32_t)k, s, 0);
    double u = eval_uniform53(r.v[0], r.v[1]);
    float t = (float)(mode == NCTMC_TIME_SAMPLING_UNIFORM
                          ? T * ((double)k + u) / (double)n
                          : T * ts_inverse_cdf(mode, 0.0, ((double)k + u) / (double)n));
    return t < 1.0f ? t : nextafterf(1.0f, 0.0f);
}

/* x_t ~ q_{t|0}(. | x0) at one position: x0 with probability a_t, else a
 * draw from pi. */
static int32_t eval_noise(const nctmc_fp *fp, uint64_t seed, int32_t k, int64_t s,
                          int32_t pos, double one_minus_a, int32_t x0)
{
    philox4x32 r = eval_draw(seed, EVAL_STREAM_NOISE, (uint32_t)k, s, (uint32_t)pos);
    if (!(eval_uniform53(r.v[0], r.v[1]) < one_minus_a))
        return x0;
    if (fp->process == NCTMC_FP_MASKED)
        return fp_mask(fp);
    if (fp->process == NCTMC_FP_MIXTURE &&
        !(((double)r.v[2] + 0.5) * (1.0 / 4294967296.0) < (double)fp->mixture_uniform))
        return fp_mask(fp);
    philox4x32 d = eval_draw(seed, EVAL_STREAM_TOKEN, (uint32_t)k, s, (uint32_t)pos);
    uint64_t bits = (uint64_t)d.v[0] << 32 | d.v[1];
    return (int32_t)(bits % (uint64_t)fp_n_data(fp));
}

/* ---- parameters ------------------------------------------------------------ */

NCTMC_API nctmc_status nctmc_eval_params_init_sized(nctmc_eval_params *params, size_t size)
{
    nctmc_eval_params d;
    memset(&d, 0, sizeof d);
    d.batch_size = 8;
    d.n_time_samples = 16;
    return abi_init(params, size, &d, &abi_eval_params);
}

NCTMC_API nctmc_status nctmc_eval_result_init_sized(nctmc_eval_result *result, size_t size)
{
    return abi_init(result, size, NULL, &abi_eval_result);
}

static const char *schedule_name(int32_t schedule)
{
    switch (schedule) {
    case NCTMC_FP_COSINE: return "cosine";
    case NCTMC_FP_LOGLINEAR: return "loglinear";
    default: return "linear";
    }
}

/* T, the upper end of the time integral. The bound is finite only where
 * pi can produce q_{T|0}'s support and the rates stay bounded up to T. */
static nctmc_status eval_resolve_t_max(nctmc_model *m, float t_max, double *T)
{
    const nctmc_fp *fp = &m->fp;
    if (!(t_max >= 0.0f && t_max <= 1.0f))
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "t_max = %g must be 0 (automatic) or in (0, 1]", (double)t_max);
    if (fp->process == NCTMC_FP_MASKED) {
        if (fp->schedule == NCTMC_FP_LOGLINEAR)
            return FAIL_INTO(m, NCTMC_ERR_UNSUPPORTED,
                             "the masked process with the loglinear schedule has no finite "
                             "NELBO: q_{1|0} leaves the clean token with probability eps = %g, "
                             "which the all-mask prior cannot produce (use the linear or "
                             "cosine schedule)",
                             (double)fp->schedule_eps);
        if (t_max != 0.0f && t_max != 1.0f)
            return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                             "t_max = %g: the masked process needs t_max = 1 (or 0, "
                             "automatic); before t = 1 a token is still clean with "
                             "probability a_t > 0, which the all-mask prior cannot produce, "
                             "so the bound would be infinite",
                             (double)t_max);
        *T = 1.0;
        return NCTMC_OK;
    }
    double T_used = t_max == 0.0f ? (double)EVAL_DEFAULT_T_MAX : (double)t_max;
    if (T_used >= 1.0 && fp->schedule != NCTMC_FP_LOGLINEAR)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "t_max = 1 with the %s schedule: sigma_t diverges at t = 1, and "
                         "so does the time integral unless the learned rates are exact "
                         "there; use t_max < 1 (0 = automatic = %g, the sampler's start)",
                         schedule_name(fp->schedule), (double)EVAL_DEFAULT_T_MAX);
    *T = T_used;
    return NCTMC_OK;
}

static nctmc_status eval_check_sizes(nctmc_model *m, const nctmc_eval_params *p)
{
    if (p->n_sequences < 1 || p->n_sequences > EVAL_MAX_SEQUENCES)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "n_sequences = %lld must be in [1, 2^48]", (long long)p->n_sequences);
    if (p->length < 1 || p->length > m->dims.L)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "length = %d must be in [1, %d] (the model's seq_len)", p->length,
                         m->dims.L);
    if (p->batch_size < 1)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT, "batch_size = %d must be >= 1",
                         p->batch_size);
    if (p->time_sampling == NCTMC_TIME_SAMPLING_LOGIT)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "time_sampling = 1 (logit): its density cannot be normalised on "
                         "(0, t_max]; use 0 (uniform) or 2 (sqrt)");
    if (!ts_mode_valid(p->time_sampling))
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "time_sampling = %d is not one of 0 (uniform), 2 (sqrt)",
                         (int)p->time_sampling);
    if (p->n_time_samples < 1)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT, "n_time_samples = %d must be >= 1",
                         p->n_time_samples);
    int64_t n_tokens, n_rows;
    if (__builtin_mul_overflow(p->n_sequences, (int64_t)p->length, &n_tokens) ||
        __builtin_mul_overflow(p->n_sequences, (int64_t)p->n_time_samples, &n_rows) ||
        (uint64_t)n_tokens > SIZE_MAX / sizeof(int32_t))
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "n_sequences = %lld with length %d and %d time samples overflows",
                         (long long)p->n_sequences, p->length, p->n_time_samples);
    if (!p->tokens)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT, "tokens is NULL");
    return NCTMC_OK;
}

/* Every token and label, before any work: an error names the first bad one. */
static nctmc_status eval_check_data(nctmc_model *m, const nctmc_eval_params *p)
{
    int64_t n = p->n_sequences * (int64_t)p->length;
    int32_t n_data = fp_n_data(&m->fp);
    for (int64_t r = 0; r < n; r++)
        if (p->tokens[r] < 0 || p->tokens[r] >= n_data)
            return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                             "tokens[%lld] = %d is not a data token: must be in [0, %d)%s",
                             (long long)r, p->tokens[r], n_data,
                             m->fp.process == NCTMC_FP_UNIFORM ? ""
                                                               : " (the mask is not data)");
    if (!p->labels)
        return NCTMC_OK;
    int32_t n_classes = m->config.n_classes;
    if (n_classes == 0)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                         "labels were given but the model has no classes");
    for (int64_t s = 0; s < p->n_sequences; s++)
        if (p->labels[s] < 0 || p->labels[s] > n_classes)
            return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT,
                             "labels[%lld] = %d is out of range [0, %d] (%d = null label)",
                             (long long)s, p->labels[s], n_classes, n_classes);
    return NCTMC_OK;
}

/* Reads the caller's parameters into *p (this build's struct). */
static nctmc_status eval_read_params(nctmc_model *m, const nctmc_eval_params *given,
                                     nctmc_eval_params *p)
{
    if (!given)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_eval: params is NULL");
    nctmc_eval_params_init(p);
    return abi_read(given, p, sizeof *p, &abi_eval_params, m->last_error, sizeof m->last_error);
}

/* Checks the parameters read and the result struct's size, and resolves T. */
static nctmc_status eval_check_params(nctmc_model *m, const nctmc_eval_params *p,
                                      const nctmc_eval_result *r, double *T)
{
    nctmc_status st;
    if (!r)
        return FAIL_INTO(m, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_eval: result is NULL");
    st = abi_check_output(r, &abi_eval_result, m->last_error, sizeof m->last_error);
    if (st == NCTMC_OK)
        st = eval_check_sizes(m, p);
    if (st == NCTMC_OK)
        st = eval_resolve_t_max(m, p->t_max, T);
    if (st == NCTMC_OK)
        st = eval_check_data(m, p);
    return st;
}

/* ---- state --------------------------------------------------------------- */

/* Running mean and variance of the per-sequence estimates (Welford). */
typedef struct eval_moments {
    int64_t n;
    int64_t n_infinite;   /* estimates that were +inf (overflowing rates) */
    double mean;
    double m2;
} eval_moments;

typedef struct eval_state {
    nctmc_model *m;
    const nctmc_eval_params *p;
    nctmc_fp fp;
    double T;
    int32_t B;            /* rows per forward pass */
    int32_t L;
    int64_t n_rows;       /* n_sequences * n_time_samples */
    double seq_prior;     /* sum over a sequence's positions of the prior term */
    bool with_d;          /* the integrand carries D_t (see eval_state_init) */
    dit_workspace *ws;
    /* host staging, B rows */
    int32_t *x0, *x_t, *labels;
    float *times, *loss, *rate_h;
    /* accumulators */
    double seq_sum;       /* integrand samples of the current sequence */
    eval_moments est;
    double loss_sum;
    int64_t loss_count;
    eval_reservoir res[NCTMC_EVAL_BUCKETS][2];   /* [bucket][noisy] log rates */
    eval_reliability rel;
    /* over several ranks: one slot per rank of a round (eval_slot_floats) */
    int32_t rank, ranks;
    float *slots;
    double *stops;        /* [ranks]: whose progress callback said stop */
} eval_state;

static void eval_state_free(eval_state *e)
{
    const nctmc_allocator *a = &e->m->ctx->alloc;
    dit_workspace_free(e->ws);
    mem_free(a, e->x0);
    mem_free(a, e->x_t);
    mem_free(a, e->labels);
    mem_free(a, e->times);
    mem_free(a, e->loss);
    mem_free(a, e->rate_h);
    mem_free(a, e->slots);
    mem_free(a, e->stops);
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++)
        for (int c = 0; c < 2; c++)
            mem_free(a, e->res[b][c].values);
}

static nctmc_status eval_alloc_reservoirs(eval_state *e)
{
    /* never more slots than positions the call will see */
    int64_t positions = e->n_rows > INT64_MAX / e->L ? INT64_MAX : e->n_rows * e->L;
    int64_t cap = positions < EVAL_MEDIAN_CAP ? positions : EVAL_MEDIAN_CAP;
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++)
        for (int c = 0; c < 2; c++) {
            e->res[b][c].cap = cap;
            e->res[b][c].values = mem_alloc(&e->m->ctx->alloc, (size_t)cap * sizeof(float));
            if (!e->res[b][c].values)
                return FAIL_INTO(e->m, NCTMC_ERR_OUT_OF_MEMORY,
                                 "out of memory for the exit-rate medians");
        }
    return NCTMC_OK;
}

/* A rank's slot in a round: its status and pass size, then L_cond and h of
 * each position of the pass (the bytes eval_run_model brings home). */
#define EVAL_SLOT_HEAD 2
static size_t eval_slot_floats(const eval_state *e)
{
    return EVAL_SLOT_HEAD + 2 * (size_t)e->B * (size_t)e->L;
}

static nctmc_status eval_alloc_slots(eval_state *e, nctmc_comm *comm)
{
    e->rank = comm_rank(comm);
    e->ranks = comm_size(comm);
    if (e->ranks == 1)
        return NCTMC_OK;
    const nctmc_allocator *a = &e->m->ctx->alloc;
    size_t n;
    if (__builtin_mul_overflow(eval_slot_floats(e), (size_t)e->ranks * sizeof(float), &n))
        n = SIZE_MAX;
    e->slots = mem_alloc(a, n);
    e->stops = mem_alloc(a, (size_t)e->ranks * sizeof *e->stops);
    if (!e->slots || !e->stops)
        return FAIL_INTO(e->m, NCTMC_ERR_OUT_OF_MEMORY,
                         "out of host memory for the rows of %d ranks", (int)e->ranks);
    memset(e->slots, 0, n);  /* a short or failed pass sends defined bytes */
    return NCTMC_OK;
}

static nctmc_status eval_state_init(eval_state *e, nctmc_model *m, const nctmc_eval_params *p,
                                    double T)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    e->p = p;
    e->fp = m->fp;
    e->T = T;
    e->L = p->length;
    e->n_rows = p->n_sequences * (int64_t)p->n_time_samples;
    e->B = (int64_t)p->batch_size < e->n_rows ? p->batch_size : (int32_t)e->n_rows;
    nelbo_marginal g = nelbo_marginal_at(&e->fp, T);
    /* The bound is KL(q_T || pi) + int E[L_cond]. Adding D_t to the
     * integrand changes its integral over [0, T] by exactly -H(q_T) (so the
     * prior becomes the cross-entropy KL + H) but not its mean: D is a
     * control variate. Where the exit rate is learned it cancels L_cond's
     * (log t)/t growth at noisy positions near t = 0 (measured: standard
     * errors up to 3x smaller, docs/math.md); the masked process's exact
     * rate has no such growth and D would add it (2.5x larger), so there
     * it is left out. The prior terms are the same for every data token. */
    e->with_d = e->fp.process != NCTMC_FP_MASKED;
    e->seq_prior = (double)e->L * (e->with_d ? nelbo_prior_cross_entropy(&e->fp, &g)
                                             : nelbo_prior_kl(&e->fp, &g));
    nctmc_status st = dit_workspace_create(m, m->ctx->backend, e->B, e->L, DIT_WS_INFERENCE, &e->ws,
                                           m->last_error, sizeof m->last_error);
    if (st != NCTMC_OK)
        return st;
    size_t N = (size_t)e->B * (size_t)e->L, B = (size_t)e->B;
    const nctmc_allocator *a = &m->ctx->alloc;
    e->x0 = mem_alloc(a, N * sizeof *e->x0);
    e->x_t = mem_alloc(a, N * sizeof *e->x_t);
    e->labels = mem_alloc(a, B * sizeof *e->labels);
    e->times = mem_alloc(a, B * sizeof *e->times);
    e->loss = mem_alloc(a, N * sizeof *e->loss);
    e->rate_h = mem_alloc(a, N * sizeof *e->rate_h);
    if (!e->x0 || !e->x_t || !e->labels || !e->times || !e->loss || !e->rate_h)
        return FAIL_INTO(m, NCTMC_ERR_OUT_OF_MEMORY, "out of host memory for eval batches");
    st = eval_alloc_slots(e, p->comm);
    return st == NCTMC_OK ? eval_alloc_reservoirs(e) : st;
}

/* ---- one forward pass ---------------------------------------------------------- */

/* Fills the staging rows [g0, g0 + nb) with x0, t, labels and x_t. */
static void eval_fill_rows(eval_state *e, int64_t g0, int32_t nb)
{
    const nctmc_eval_params *p = e->p;
    int32_t n = p->n_time_samples, L = e->L;
    for (int32_t b = 0; b < nb; b++) {
        int64_t s = (g0 + b) / n;
        int32_t k = (int32_t)((g0 + b) % n);
        float t = eval_time(p->seed, e->T, p->time_sampling, n, k, s);
        double om = fp_one_minus_alpha(&e->fp, (double)t);
        e->times[b] = t;
        if (p->labels)
            e->labels[b] = p->labels[s];
        const int32_t *x0 = p->tokens + s * L;
        for (int32_t pos = 0; pos < L; pos++) {
            e->x0[b * L + pos] = x0[pos];
            e->x_t[b * L + pos] = eval_noise(&e->fp, p->seed, k, s, pos, om, x0[pos]);
        }
    }
}

/* Runs the model and the loss op; brings per-position L_cond and h home. */
static nctmc_status eval_run_model(eval_state *e, int32_t nb)
{
    nctmc_model *m = e->m;
    dit_batch batch = {nb, e->L, e->x_t, e->times, e->p->labels ? e->labels : NULL, e->x0, NULL};
    nctmc_status st =
        dit_batch_validate(m, e->ws, &batch, true, m->last_error, sizeof m->last_error);
    double mean;
    if (st == NCTMC_OK)
        st = dit_loss(m, e->ws, &batch, NULL, false, &mean, m->last_error,
                      sizeof m->last_error);
    if (st != NCTMC_OK)
        return st;
    nctmc_backend *be = m->ctx->backend;
    size_t N = (size_t)nb * (size_t)e->L;
    be->ops->download(be, e->loss, dit_ws_loss(e->ws), N * sizeof(float));
    be->ops->download(be, e->rate_h, dit_ws_rate_h(e->ws), N * sizeof(float));
    st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return FAIL_INTO(m, st, "eval: %s", be->error);
    return NCTMC_OK;
}

static int eval_bucket(double t, double T)
{
    int b = (int)(t / T * NCTMC_EVAL_BUCKETS);
    return b < 0 ? 0 : (b >= NCTMC_EVAL_BUCKETS ? NCTMC_EVAL_BUCKETS - 1 : b);
}

/* Records the log exit rate of every position of a row for the medians,
 * and its implied noise probability for the reliability table. */
static void eval_collect_rates(eval_state *e, int32_t b, double t)
{
    int bucket = eval_bucket(t, e->T);
    for (int32_t pos = 0; pos < e->L; pos++) {
        int32_t r = b * e->L + pos;
        int32_t i = e->x_t[r];
        int noisy = i != e->x0[r];
        double log_rate = fp_model_log_rate(&e->fp, t, i, e->rate_h[r]);
        eval_reservoir_add(&e->res[bucket][noisy], (float)log_rate, e->p->seed,
                           (uint32_t)NCTMC_RNG_EVAL | EVAL_STREAM_RESERVOIR << 8,
                           (uint32_t)(bucket * 2 + noisy));
        double nu = eval_implied_noise(&e->fp, t, i, log_rate);
        if (!isnan(nu))
            eval_reliability_add(&e->rel, bucket, nu, noisy);
    }
}

/* Sum over a row's positions of L_cond + D_t: the integrand of the
 * theorem's time integral at this (x_t, t), after the conditional swap. */
static double eval_row_integrand(eval_state *e, int32_t b, double t)
{
    nelbo_marginal g = nelbo_marginal_at(&e->fp, t);
    double sum = 0.0;
    for (int32_t pos = 0; pos < e->L; pos++) {
        int32_t r = b * e->L + pos;
        double loss = (double)e->loss[r];
        e->loss_sum += loss;
        sum += loss;
        if (e->with_d)
            sum += nelbo_d(&e->fp, &g, e->x_t[r], e->x0[r]);
    }
    e->loss_count += e->L;
    return sum;
}

static void eval_moments_add(eval_moments *mo, double x)
{
    if (isinf(x) && x > 0.0) {
        mo->n_infinite++;
        return;
    }
    mo->n++;
    double delta = x - mo->mean;
    mo->mean += delta / (double)mo->n;
    mo->m2 += delta * (x - mo->mean);
}

/* Folds the forward pass's rows into the sums; a sequence's estimate is
 * complete after its last time sample. */
static nctmc_status eval_consume_rows(eval_state *e, int64_t g0, int32_t nb)
{
    int32_t n = e->p->n_time_samples;
    double width = e->T / (double)n;  /* each stratum's share of [0, T] */
    for (int32_t b = 0; b < nb; b++) {
        double t = (double)e->times[b];
        double row = eval_row_integrand(e, b, t);
        if (isnan(row))
            return FAIL_INTO(e->m, NCTMC_ERR_NON_FINITE,
                             "the model's output is NaN for sequence %lld at t = %g",
                             (long long)((g0 + b) / n), t);
        eval_collect_rates(e, b, t);
        /* the importance weight, from the rounded t the model saw */
        e->seq_sum += row * ts_weight(e->p->time_sampling, 0.0, t / e->T);
        if ((g0 + b) % n == n - 1) {
            eval_moments_add(&e->est, e->seq_prior + width * e->seq_sum);
            e->seq_sum = 0.0;
        }
    }
    return NCTMC_OK;
}

/* ---- the report ------------------------------------------------------------------ */

/* The true conditional exit rates at time t: of a clean token (x0 = 0), and
 * the mean over noise states i != x0 weighted by q_{t|0}(i | x0). */
static void eval_true_rates(const nctmc_fp *fp, double t, double *clean, double *noisy)
{
    *clean = fp_conditional_rate(fp, t, 0, 0).lam_hat;
    nelbo_marginal g = nelbo_marginal_at(fp, t);
    double w_data = (double)(fp_n_data(fp) - 1) * g.q_data, w_mask = g.q_mask;
    double sum = 0.0;
    if (w_data > 0.0)
        sum += w_data * fp_conditional_rate(fp, t, 1, 0).lam_hat;
    if (w_mask > 0.0)
        sum += w_mask * fp_conditional_rate(fp, t, fp_mask(fp), 0).lam_hat;
    *noisy = w_data + w_mask > 0.0 ? sum / (w_data + w_mask) : NAN;
}

static void eval_fill_buckets(eval_state *e, nctmc_eval_result *r)
{
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++) {
        nctmc_rate_bucket *k = &r->buckets[b];
        k->t_lo = e->T * b / NCTMC_EVAL_BUCKETS;
        k->t_hi = e->T * (b + 1) / NCTMC_EVAL_BUCKETS;
        eval_true_rates(&e->fp, 0.5 * (k->t_lo + k->t_hi), &k->true_rate_clean,
                        &k->true_rate_noisy);
        eval_reservoir *c = &e->res[b][0], *z = &e->res[b][1];
        k->n_clean = c->n_seen;
        k->n_noisy = z->n_seen;
        /* a median of log rates is the log of the median rate */
        k->median_rate_clean = exp(eval_median(c->values, eval_reservoir_size(c)));
        k->median_rate_noisy = exp(eval_median(z->values, eval_reservoir_size(z)));
    }
}

/* Fills the caller's result (checked by abi_check_output()) up to its size. */
static void eval_fill_result(eval_state *e, nctmc_eval_result *caller)
{
    nctmc_eval_result full, *r = &full;
    nctmc_eval_result_init(r);
    double per_token = 1.0 / ((double)e->L * EVAL_LN2);
    const eval_moments *mo = &e->est;
    r->nelbo_bits_per_token = mo->n_infinite ? INFINITY
                              : mo->n ? mo->mean * per_token : NAN;
    r->std_error_bits = mo->n > 1 && !mo->n_infinite
                            ? sqrt(mo->m2 / (double)(mo->n - 1) / (double)mo->n) * per_token
                            : NAN;
    nelbo_marginal g = nelbo_marginal_at(&e->fp, e->T);
    r->prior_bits_per_token = nelbo_prior_kl(&e->fp, &g) / EVAL_LN2;
    r->mean_loss = e->loss_count ? e->loss_sum / (double)e->loss_count : NAN;
    r->n_tokens = (mo->n + mo->n_infinite) * e->L;
    r->t_max = e->T;
    eval_fill_buckets(e, r);
    eval_reliability_fill(&e->rel, r);
    abi_write(caller, r, &abi_eval_result);
}

/* ---- the entry point --------------------------------------------------------------- */

/* Fills the partial result and says who stopped: this rank's callback, or
 * rank `stopper`'s. */
static nctmc_status eval_cancelled(eval_state *e, nctmc_eval_result *result, int64_t done,
                                   int32_t stopper)
{
    eval_fill_result(e, result);
    char who[48] = "the progress callback";
    if (stopper != e->rank)
        snprintf(who, sizeof who, "rank %d's progress callback", (int)stopper);
    return FAIL_INTO(e->m, NCTMC_ERR_CANCELLED,
                     "eval cancelled by %s after %lld of %lld rows; the result covers the "
                     "%lld sequences finished",
                     who, (long long)done, (long long)e->n_rows,
                     (long long)(e->est.n + e->est.n_infinite));
}

static nctmc_status eval_run(eval_state *e, nctmc_eval_result *result)
{
    const nctmc_eval_params *p = e->p;
    for (int64_t g0 = 0; g0 < e->n_rows; g0 += e->B) {
        int32_t nb = e->n_rows - g0 < e->B ? (int32_t)(e->n_rows - g0) : e->B;
        eval_fill_rows(e, g0, nb);
        nctmc_status st = eval_run_model(e, nb);
        if (st == NCTMC_OK)
            st = eval_consume_rows(e, g0, nb);
        if (st != NCTMC_OK)
            return st;
        if (p->progress && !p->progress(g0 + nb, e->n_rows, p->user_data))
            return eval_cancelled(e, result, g0 + nb, e->rank);
    }
    eval_fill_result(e, result);
    return NCTMC_OK;
}

/* ---- over several ranks ------------------------------------------------------------ */

/* Forward pass j: its first row and its row count. */
static int32_t eval_pass_rows(const eval_state *e, int64_t j, int64_t *g0)
{
    *g0 = j * e->B;
    return e->n_rows - *g0 < e->B ? (int32_t)(e->n_rows - *g0) : e->B;
}

/* Runs pass j into this rank's slot, if there is such a pass; a failure
 * goes into the slot's status (the message stays in the model). */
static void eval_run_own_pass(eval_state *e, int64_t j, int64_t n_passes)
{
    float *slot = e->slots + (size_t)e->rank * eval_slot_floats(e);
    int32_t head[EVAL_SLOT_HEAD] = {NCTMC_OK, 0};
    if (j < n_passes) {
        int64_t g0;
        int32_t nb = eval_pass_rows(e, j, &g0);
        size_t N = (size_t)nb * (size_t)e->L;
        eval_fill_rows(e, g0, nb);
        head[0] = (int32_t)eval_run_model(e, nb);
        head[1] = nb;
        if (head[0] == NCTMC_OK) {
            memcpy(slot + EVAL_SLOT_HEAD, e->loss, N * sizeof(float));
            memcpy(slot + EVAL_SLOT_HEAD + (size_t)e->B * e->L, e->rate_h, N * sizeof(float));
        }
    }
    memcpy(slot, head, sizeof head);
}

/* Every rank's slot to every rank (byte copies: the bits travel as they
 * are); then the first rank whose pass failed fails every rank. */
static nctmc_status eval_share_round(eval_state *e)
{
    size_t floats = eval_slot_floats(e);
    char why[NCTMC_ERROR_SIZE];
    for (int32_t q = 0; q < e->ranks; q++) {
        nctmc_status st = comm_broadcast(e->p->comm, e->slots + (size_t)q * floats,
                                         (int64_t)(floats * sizeof(float)), q, why, sizeof why);
        if (st != NCTMC_OK)
            return FAIL_INTO(e->m, st, "eval, rank %d of %d: sharing the rows: %s",
                             (int)e->rank, (int)e->ranks, why);
    }
    for (int32_t q = 0; q < e->ranks; q++) {
        int32_t head[EVAL_SLOT_HEAD];
        memcpy(head, e->slots + (size_t)q * floats, sizeof head);
        if (head[0] != NCTMC_OK && q == e->rank)
            return (nctmc_status)head[0];
        if (head[0] != NCTMC_OK)
            return FAIL_INTO(e->m, (nctmc_status)head[0],
                             "eval, rank %d of %d: the forward pass of rank %d failed (its "
                             "error says why)",
                             (int)e->rank, (int)e->ranks, (int)q);
    }
    return NCTMC_OK;
}

/* Folds the round's passes j0, j0 + 1, ... into the sums, in pass order:
 * the rows, draws and additions of one process. */
static nctmc_status eval_fold_round(eval_state *e, int64_t j0, int64_t n_passes)
{
    size_t floats = eval_slot_floats(e), half = (size_t)e->B * (size_t)e->L;
    for (int32_t q = 0; q < e->ranks && j0 + q < n_passes; q++) {
        const float *slot = e->slots + (size_t)q * floats;
        int64_t g0;
        int32_t nb = eval_pass_rows(e, j0 + q, &g0);
        size_t N = (size_t)nb * (size_t)e->L;
        eval_fill_rows(e, g0, nb);
        memcpy(e->loss, slot + EVAL_SLOT_HEAD, N * sizeof(float));
        memcpy(e->rate_h, slot + EVAL_SLOT_HEAD + half, N * sizeof(float));
        nctmc_status st = eval_consume_rows(e, g0, nb);
        if (st != NCTMC_OK)
            return st;
    }
    return NCTMC_OK;
}

/* Every rank's progress callback, then their verdicts summed: *stopper is
 * the first rank whose callback said stop, or -1. */
static nctmc_status eval_agree_stop(eval_state *e, int64_t done, int32_t *stopper)
{
    const nctmc_eval_params *p = e->p;
    memset(e->stops, 0, (size_t)e->ranks * sizeof *e->stops);
    e->stops[e->rank] = p->progress && !p->progress(done, e->n_rows, p->user_data) ? 1.0 : 0.0;
    char why[NCTMC_ERROR_SIZE];
    nctmc_status st = comm_sum(p->comm, e->stops, e->ranks, COMM_DOUBLE, why, sizeof why);
    if (st != NCTMC_OK)
        return FAIL_INTO(e->m, st, "eval, rank %d of %d: %s", (int)e->rank, (int)e->ranks, why);
    *stopper = -1;
    for (int32_t q = e->ranks - 1; q >= 0; q--)
        if (e->stops[q] > 0.0)
            *stopper = q;
    return NCTMC_OK;
}

/* Rounds of `ranks` passes: rank q runs pass q of each round. */
static nctmc_status eval_run_ranks(eval_state *e, nctmc_eval_result *result)
{
    int64_t n_passes = (e->n_rows + e->B - 1) / e->B;
    for (int64_t j0 = 0; j0 < n_passes; j0 += e->ranks) {
        eval_run_own_pass(e, j0 + e->rank, n_passes);
        nctmc_status st = eval_share_round(e);
        if (st == NCTMC_OK)
            st = eval_fold_round(e, j0, n_passes);
        int64_t done = n_passes - j0 <= e->ranks ? e->n_rows : (j0 + e->ranks) * e->B;
        int32_t stopper = -1;
        if (st == NCTMC_OK)
            st = eval_agree_stop(e, done, &stopper);
        if (st != NCTMC_OK)
            return st;
        if (stopper >= 0)
            return eval_cancelled(e, result, done, stopper);
    }
    eval_fill_result(e, result);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_eval(nctmc_model *model, const nctmc_eval_params *params,
                                  nctmc_eval_result *result)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    double T = 1.0;
    nctmc_eval_params p;
    nctmc_status st = eval_read_params(model, params, &p);
    if (st != NCTMC_OK)
        return st;
    /* from here on every rank of p.comm takes part, whatever happens */
    eval_state e;
    memset(&e, 0, sizeof e);
    e.m = model;
    st = eval_check_params(model, &p, result, &T);
    if (st == NCTMC_OK)
        st = eval_state_init(&e, model, &p, T);
    st = eval_agree(model, &p, st);
    if (st == NCTMC_OK)
        st = e.ranks > 1 ? eval_run_ranks(&e, result) : eval_run(&e, result);
    if (st == NCTMC_OK) {
        model_clear_error(model);
        ctx_log(model->ctx, NCTMC_LOG_INFO,
                "eval: %lld sequences, NELBO %.4f +- %.4f bits/token (prior %.3g)",
                (long long)p.n_sequences, result->nelbo_bits_per_token,
                result->std_error_bits, result->prior_bits_per_token);
    }
    eval_state_free(&e);
    return st;
}
