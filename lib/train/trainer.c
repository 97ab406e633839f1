/*
 * trainer.c — the training step: draw times, noise and label dropout from
 * Philox streams keyed by (seed, step, global row), run the L_cond loss and
 * its gradients one micro-batch at a time (gradient accumulation: the
 * partials added in order), sum them over the ranks (bucket by bucket
 * during the last micro-batch's backward pass when overlapped), clip,
 * AdamW, EMA. Everything per step lives in buffers made at creation, so the
 * step loop never allocates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "platform/platform.h"
#include "model/model_map.h"
#include "math/philox.h"
#include "math/time_sampling.h"
#include "trainer.h"

NCTMC_API nctmc_status nctmc_trainer_params_init_sized(nctmc_trainer_params *params,
                                                      size_t size)
{
    nctmc_trainer_params d;
    memset(&d, 0, sizeof d);
    d.batch_size = 8;
    d.seq_len = 0;
    d.learning_rate = 3e-4f;
    d.min_lr_ratio = 0.1f;
    d.warmup_steps = 100;
    d.total_steps = 10000;
    d.beta1 = 0.9f;
    d.beta2 = 0.999f;
    d.adam_eps = 1e-8f;
    d.weight_decay = 0.0f;
    d.grad_clip = 1.0f;
    d.ema_decay = 0.999f;
    d.time_eps = 1e-3f;
    d.label_dropout = 0.1f;
    d.seed = 0;
    d.accumulation = 1;
    /* the best measured density for every process (docs/training.md,
     * "Defaults") */
    d.time_sampling = NCTMC_TIME_SAMPLING_SQRT;
    return abi_init(params, size, &d, &abi_trainer_params);
}

NCTMC_API nctmc_status nctmc_train_stats_init_sized(nctmc_train_stats *stats, size_t size)
{
    return abi_init(stats, size, NULL, &abi_train_stats);
}

NCTMC_API nctmc_status nctmc_trainer_state_init_sized(nctmc_trainer_state *state, size_t size)
{
    return abi_init(state, size, NULL, &abi_trainer_state);
}

nctmc_status trainer_params_read(const nctmc_trainer_params *given, nctmc_trainer_params *p,
                                 char *err, size_t err_size)
{
    if (!given)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "trainer params are NULL");
    nctmc_trainer_params_init(p);
    nctmc_status st = abi_read(given, p, sizeof *p, &abi_trainer_params, err, err_size);
    /* an appended field's 0 means its default (docs/api.md) */
    if (p->accumulation == 0)
        p->accumulation = 1;
    return st;
}

/* true when lo <= x <= hi (NaN fails) */
static bool in_range(double x, double lo, double hi)
{
    return x >= lo && x <= hi;
}

nctmc_status trainer_params_validate(const nctmc_trainer_params *p, int32_t model_seq_len,
                                     char *err, size_t err_size)
{
#define BAD(...) fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, __VA_ARGS__)
    if (p->batch_size < 1 || p->batch_size > 65536)
        return BAD("batch_size %d is outside [1, 65536]", p->batch_size);
    if (p->seq_len < 0 || p->seq_len > model_seq_len)
        return BAD("seq_len %d is outside [0, %d] (0 = the model's)", p->seq_len,
                   model_seq_len);
    int64_t tokens = (int64_t)p->batch_size * (p->seq_len > 0 ? p->seq_len : model_seq_len);
    if (tokens > TRAINER_MAX_BATCH_TOKENS)
        return BAD("batch_size %d x seq_len %d = %lld tokens per step is more than %lld",
                   p->batch_size, p->seq_len > 0 ? p->seq_len : model_seq_len,
                   (long long)tokens, (long long)TRAINER_MAX_BATCH_TOKENS);
    if (!in_range(p->learning_rate, 0.0, 10.0))
        return BAD("learning_rate %g is outside [0, 10]", (double)p->learning_rate);
    if (!in_range(p->min_lr_ratio, 0.0, 1.0))
        return BAD("min_lr_ratio %g is outside [0, 1]", (double)p->min_lr_ratio);
    if (p->warmup_steps < 0 || p->total_steps < 1)
        return BAD("warmup_steps must be >= 0 and total_steps >= 1 (got %lld, %lld)",
                   (long long)p->warmup_steps, (long long)p->total_steps);
    if (!in_range(p->beta1, 0.0, 0.999999) || !in_range(p->beta2, 0.0, 0.999999))
        return BAD("beta1 %g and beta2 %g must be in [0, 1)", (double)p->beta1,
                   (double)p->beta2);
    if (!in_range(p->adam_eps, 1e-30, 1.0))
        return BAD("adam_eps %g is outside (0, 1]", (double)p->adam_eps);
    if (!in_range(p->weight_decay, 0.0, 1.0))
        return BAD("weight_decay %g is outside [0, 1]", (double)p->weight_decay);
    if (!in_range(p->grad_clip, 0.0, 1e30))
        return BAD("grad_clip %g must be >= 0 (0 = off)", (double)p->grad_clip);
    if (!in_range(p->ema_decay, 0.0, 0.999999))
        return BAD("ema_decay %g is outside [0, 1) (0 = no EMA)", (double)p->ema_decay);
    if (!(p->time_eps > 0.0f && p->time_eps < 0.5f))
        return BAD("time_eps %g is outside (0, 0.5)", (double)p->time_eps);
    if (!in_range(p->label_dropout, 0.0, 1.0))
        return BAD("label_dropout %g is outside [0, 1]", (double)p->label_dropout);
    if (p->accumulation < 1 || p->accumulation > TRAINER_MAX_ACCUMULATION)
        return BAD("accumulation %d is outside [1, %d] (0 = 1)", p->accumulation,
                   TRAINER_MAX_ACCUMULATION);
    if (tokens * p->accumulation > TRAINER_MAX_STEP_TOKENS)
        return BAD("%lld tokens per micro-batch x accumulation %d is more than %lld tokens "
                   "per step",
                   (long long)tokens, p->accumulation, (long long)TRAINER_MAX_STEP_TOKENS);
    if (!ts_mode_valid(p->time_sampling))
        return BAD("time_sampling %d is not one of 0 (uniform), 1 (logit), 2 (sqrt)",
                   (int)p->time_sampling);
    return NCTMC_OK;
#undef BAD
}

size_t trainer_slab_bytes(const nctmc_trainer *t)
{
    return t->model->slab_floats * sizeof(float);
}

NCTMC_API void nctmc_trainer_free(nctmc_trainer *t)
{
    if (!t)
        return;
    nctmc_backend *be = t->be;
    float *slabs[] = {t->grads, t->grad_part, t->adam_m, t->adam_v, t->ema};
    for (size_t k = 0; k < sizeof slabs / sizeof slabs[0]; k++)
        if (slabs[k])
            be->ops->free(be, slabs[k]);
    dit_workspace_free(t->ws);
    /* a copy: the context, and its allocator, may go with model_release */
    nctmc_allocator alloc = mem_copy(be->alloc);
    mem_free(&alloc, t->host_x0);
    mem_free(&alloc, t->host_xt);
    mem_free(&alloc, t->host_labels);
    mem_free(&alloc, t->host_times);
    mem_free(&alloc, t->host_weights);
    mem_free(&alloc, t->host_rate_h);
    mem_free(&alloc, t->host_reduce);
    mem_free(&alloc, t->bucket_lo);
    model_release(t->model);
    mem_free(&alloc, t);
}

/* The trainer's slabs and staging are listed once, here: with `need` set
 * this only adds up their sizes (nctmc_trainer_memory()), without it
 * allocates them. */
static void *slab_alloc(nctmc_backend *be, mem_need *need, size_t bytes)
{
    if (need) {
        mem_need_backend(need, bytes, 1);
        return NULL;
    }
    return be->ops->alloc(be, bytes);
}

static void *staging_alloc(nctmc_backend *be, mem_need *need, size_t n, size_t elem)
{
    if (need) {
        mem_need_host(need, n, elem);
        return NULL;
    }
    size_t bytes;
    return checked_mul(n, elem, &bytes) ? mem_alloc(be->alloc, bytes) : NULL;
}

/* The smallest bucket the overlapped sum starts (DDP's first bucket is
 * 1 MiB; NCTMC_COMM_BUCKET_BYTES sets another, comm.h): smaller ones cost
 * more in per-sum latency than they hide. A larger slab gets larger
 * buckets, so that at most TRAINER_MAX_BUCKETS sums are started at once. */
#define TRAINER_BUCKET_BYTES ((size_t)1 << 20)
#define TRAINER_MAX_BUCKETS 48
_Static_assert(TRAINER_MAX_BUCKETS < COMM_MAX_STARTED, "the engine holds every bucket's sum");

/* Cuts the gradient slab into buckets at stage boundaries, from its end
 * (the output layer's gradients, final first) to its start: a bucket ends
 * at the first stage whose gradients make the slab's tail from there at
 * least a bucket long, the last one at the last stage (dit.h). */
static void cut_buckets(nctmc_trainer *t)
{
    const nctmc_model *m = t->model;
    int32_t stages = dit_grad_stages(m);
    size_t floats = m->slab_floats;
    int64_t asked = comm_bucket_bytes(t->params.comm);
    size_t min_floats = (asked > 0 ? (size_t)asked : TRAINER_BUCKET_BYTES) / sizeof(float);
    if (floats / TRAINER_MAX_BUCKETS > min_floats)
        min_floats = floats / TRAINER_MAX_BUCKETS;
    size_t end = floats;
    for (int32_t s = 0; s < stages; s++) {
        size_t lo = dit_grad_stage_tail(m, s);
        bool cut = lo != SIZE_MAX && lo < end && (end - lo >= min_floats || s == stages - 1);
        t->bucket_lo[s] = cut ? (int64_t)lo : -1;
        if (cut)
            end = lo;
    }
}

static nctmc_status allocate_buffers(nctmc_trainer *t, mem_need *need)
{
    size_t slab_bytes;
    if (!checked_mul(t->model->slab_floats, sizeof(float), &slab_bytes))
        return NCTMC_ERR_OUT_OF_MEMORY;
    nctmc_backend *be = t->be;
    t->grads = slab_alloc(be, need, slab_bytes);
    t->adam_m = slab_alloc(be, need, slab_bytes);
    t->adam_v = slab_alloc(be, need, slab_bytes);
    if (!need && (!t->grads || !t->adam_m || !t->adam_v))
        return NCTMC_ERR_OUT_OF_MEMORY;
    if (t->params.ema_decay > 0.0f) {
        t->ema = slab_alloc(be, need, slab_bytes);
        if (!need && !t->ema)
            return NCTMC_ERR_OUT_OF_MEMORY;
    }
    if (t->params.accumulation > 1) {
        t->grad_part = slab_alloc(be, need, slab_bytes);
        if (!need && !t->grad_part)
            return NCTMC_ERR_OUT_OF_MEMORY;
    }
    size_t R = (size_t)t->rows, L = (size_t)t->seq_len;
    size_t B = (size_t)t->params.batch_size;
    t->host_x0 = staging_alloc(be, need, R * L, sizeof(int32_t));
    t->host_xt = staging_alloc(be, need, R * L, sizeof(int32_t));
    t->host_times = staging_alloc(be, need, R, sizeof(float));
    t->host_weights = staging_alloc(be, need, R, sizeof(float));
    t->host_rate_h = staging_alloc(be, need, B * L, sizeof(float));
    if (t->model->dims.n_labels > 0)
        t->host_labels = staging_alloc(be, need, R, sizeof(int32_t));
    if (comm_size(t->params.comm) > 1)
        t->host_reduce = staging_alloc(be, need, slab_bytes, 1);
    bool overlap = comm_overlap(t->params.comm);
    if (overlap)
        t->bucket_lo =
            staging_alloc(be, need, (size_t)dit_grad_stages(t->model), sizeof(int64_t));
    if (need)
        return need->overflow ? NCTMC_ERR_OUT_OF_MEMORY : NCTMC_OK;
    if (overlap && t->bucket_lo)
        cut_buckets(t);
    if (!t->host_x0 || !t->host_xt || !t->host_times || !t->host_weights || !t->host_rate_h ||
        (comm_size(t->params.comm) > 1 && !t->host_reduce) || (overlap && !t->bucket_lo) ||
        (t->model->dims.n_labels > 0 && !t->host_labels))
        return NCTMC_ERR_OUT_OF_MEMORY;
    return NCTMC_OK;
}

/* The global batch of several ranks is saved as one process's split
 * (accumulation = ranks x accumulation), so it stays within one process's
 * limits: every checkpoint a run writes loads again. */
static nctmc_status check_world(const nctmc_trainer_params *p, int32_t model_seq_len,
                                char *err, size_t err_size)
{
    int64_t ranks = comm_size(p->comm);
    if (ranks == 1)
        return NCTMC_OK;
    int64_t micro = ranks * p->accumulation;
    int64_t tokens = (int64_t)p->batch_size * (p->seq_len > 0 ? p->seq_len : model_seq_len);
    if (micro > TRAINER_MAX_ACCUMULATION || tokens * micro > TRAINER_MAX_STEP_TOKENS)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "%lld ranks x accumulation %d = %lld micro-batches of %lld tokens "
                           "per step: more than %d micro-batches or %lld tokens",
                           (long long)ranks, p->accumulation, (long long)micro,
                           (long long)tokens, TRAINER_MAX_ACCUMULATION,
                           (long long)TRAINER_MAX_STEP_TOKENS);
    return NCTMC_OK;
}

/* The checks creation and nctmc_trainer_memory() share: the model's weight
 * type and the caller's parameters, read into *full. */
static nctmc_status trainer_check(const nctmc_model *model, const char *fn,
                                  const nctmc_trainer_params *params,
                                  nctmc_trainer_params *full, char *err, size_t err_size)
{
    if (model->weight_type != NCTMC_WEIGHT_F32)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "%s: the model holds reduced-precision (%s) "
                           "weights, which are for sampling only; train the float model",
                           fn, model->weight_type == NCTMC_WEIGHT_BF16 ? "bf16" : "int8");
    nctmc_status st = trainer_params_read(params, full, err, err_size);
    if (st == NCTMC_OK)
        st = trainer_params_validate(full, model->dims.L, err, err_size);
    if (st == NCTMC_OK)
        st = check_world(full, model->dims.L, err, err_size);
    return st;
}

static int32_t workspace_mode(const nctmc_trainer_params *p)
{
    return p->activation_recompute ? DIT_WS_TRAINING_RECOMPUTE : DIT_WS_TRAINING;
}

/* What nctmc_trainer_create() with these checked parameters allocates,
 * into *need: the same shape as creation's, on a trainer that owns nothing. */
static nctmc_status trainer_need(const nctmc_model *model, const nctmc_trainer_params *full,
                                 mem_need *need, char *err, size_t err_size)
{
    nctmc_trainer t;
    memset(&t, 0, sizeof t);
    t.model = (nctmc_model *)model;
    t.be = model->ctx->backend;
    t.params = *full;
    t.seq_len = full->seq_len > 0 ? full->seq_len : model->dims.L;
    t.rows = full->batch_size * full->accumulation;
    mem_need_host(need, 1, sizeof t);
    if (allocate_buffers(&t, need) != NCTMC_OK)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "the trainer's slabs for %d x %d tokens overflow", full->batch_size,
                           t.seq_len);
    return dit_workspace_need(model, t.be, full->batch_size, t.seq_len, workspace_mode(full),
                              need, err, err_size);
}

/* Creation ran out of memory (the reason in err): says how much it asked
 * for, as nctmc_trainer_memory() counts it. */
static nctmc_status fail_out_of_memory(const nctmc_model *model,
                                       const nctmc_trainer_params *full, char *err,
                                       size_t err_size)
{
    char cause[NCTMC_ERROR_SIZE / 2];
    snprintf(cause, sizeof cause, "%s", err);
    char why[NCTMC_ERROR_SIZE];
    mem_need need = {0, 0, 0};
    if (trainer_need(model, full, &need, why, sizeof why) != NCTMC_OK)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "%s", cause);
    int32_t L = full->seq_len > 0 ? full->seq_len : model->dims.L;
    return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                       "%s: the trainer asks for %zu bytes of backend memory and %zu bytes of "
                       "host memory (batch %d x %d tokens, accumulation %d)",
                       cause, need.backend_bytes, need.host_bytes, full->batch_size, (int)L,
                       full->accumulation);
}

NCTMC_API nctmc_status nctmc_trainer_create(nctmc_model *model,
                                            const nctmc_trainer_params *params,
                                            nctmc_trainer **out)
{
    if (out)
        *out = NULL;
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char *err = model->last_error;
    size_t err_size = sizeof model->last_error;
    if (!out)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_trainer_create: out is NULL");
    nctmc_trainer_params full;
    nctmc_status st = trainer_check(model, "nctmc_trainer_create", params, &full, err, err_size);
    params = &full;
    if (st != NCTMC_OK)
        return st;
    /* the trainer updates the weights in place: a mapped model's are the
     * file's read-only pages, so they are copied first */
    st = model_make_writable(model, err, err_size);
    if (st != NCTMC_OK)
        return st;
    /* what the trainer's checkpoints recommend for sampling
     * (nctmc_sample_params_from_model()): the model's own when its file had
     * one, else the best measured settings of its process */
    if (!model->sampling.stored) {
        model->sampling = model_sampling_default(model->config.process);
        model->sampling.stored = true;
    }
    nctmc_trainer *t = mem_calloc(model->ctx->backend->alloc, 1, sizeof *t);
    if (!t)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    /* the trainer keeps its model alive (in any order of *_free) */
    model_retain(model);
    t->model = model;
    t->be = model->ctx->backend;
    t->params = *params;
    t->seq_len = params->seq_len > 0 ? params->seq_len : model->dims.L;
    /* rank r of N takes rows [r R, (r + 1) R) of the global N R */
    int32_t rank = comm_rank(params->comm), ranks = comm_size(params->comm);
    t->rows = params->batch_size * params->accumulation;
    t->row0 = (int64_t)rank * t->rows;
    t->global_rows = (int64_t)ranks * t->rows;
    t->micro_total = ranks * params->accumulation;
    nctmc_trainer_state_init(&t->state);
    t->state.seed = params->seed;
    st = allocate_buffers(t, NULL);
    if (st != NCTMC_OK) {
        nctmc_trainer_free(t);
        fail_format(err, err_size, st, "out of memory allocating the trainer's slabs");
        return fail_out_of_memory(model, params, err, err_size);
    }
    st = dit_workspace_create(model, t->be, params->batch_size, t->seq_len,
                              workspace_mode(params), &t->ws, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_trainer_free(t);
        return st == NCTMC_ERR_OUT_OF_MEMORY ? fail_out_of_memory(model, params, err, err_size)
                                             : st;
    }
    /* The EMA starts at the initial weights (not at zero, which would bias
     * every early average towards zero). */
    if (t->ema) {
        size_t bytes = trainer_slab_bytes(t);
        float *host = mem_alloc(t->be->alloc, bytes);
        if (!host) {
            nctmc_trainer_free(t);
            return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
        }
        t->be->ops->download(t->be, host, model->weights, bytes);
        t->be->ops->upload(t->be, t->ema, host, bytes);
        mem_free(t->be->alloc, host);
    }
    st = t->be->ops->synchronize(t->be);
    if (st != NCTMC_OK) {
        fail_format(err, err_size, st, "creating the trainer: %s", t->be->error);
        nctmc_trainer_free(t);
        return st;
    }
    model_clear_error(model);
    *out = t;
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_trainer_memory(const nctmc_model *model,
                                            const nctmc_trainer_params *params,
                                            size_t *backend_bytes, size_t *host_bytes)
{
    if (backend_bytes)
        *backend_bytes = 0;
    if (host_bytes)
        *host_bytes = 0;
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char err[NCTMC_ERROR_SIZE];
    nctmc_trainer_params full;
    nctmc_status st = trainer_check(model, "nctmc_trainer_memory", params, &full, err, sizeof err);
    mem_need need = {0, 0, 0};
    if (st == NCTMC_OK)
        st = trainer_need(model, &full, &need, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(model, st, "%s", err);
    if (backend_bytes)
        *backend_bytes = need.backend_bytes;
    if (host_bytes)
        *host_bytes = need.host_bytes;
    return NCTMC_OK;
}

/* ---- the random parts of a step -------------------------------------- */

static philox4x32 draw(const nctmc_trainer *t, uint32_t purpose, uint32_t a, uint32_t b,
                       uint32_t c)
{
    philox4x32 counter = {{purpose, a, b, c}};
    return philox4x32_10(counter, t->params.seed);
}

/* Stratified times: one offset u per step, global row g of the G rows of
 * the global batch gets the stratum v = (g + u) / G of [0, 1) — low
 * discrepancy across the batch — mapped to (eps, 1 - eps) through the
 * inverse CDF of the time_sampling density, and the importance weight of
 * the time it gets (1 for the uniform mode, whose map is the affine one the
 * trainer always used). This trainer fills its rows [row0, row0 + rows). */
static void draw_times(nctmc_trainer *t)
{
    double G = (double)t->global_rows;
    double eps = t->params.time_eps;
    nctmc_time_sampling mode = t->params.time_sampling;
    philox4x32 r = draw(t, NCTMC_RNG_TRAIN_TIME, (uint32_t)t->state.step, 0, 0);
    double u = philox_uniform(r.v[0]);
    for (int32_t b = 0; b < t->rows; b++) {
        double t_b = ts_inverse_cdf(mode, eps, ((double)(t->row0 + b) + u) / G);
        t->host_times[b] = (float)t_b;
        /* the weight of the time the model actually sees */
        t->host_weights[b] = (float)ts_weight(mode, eps, (double)t->host_times[b]);
    }
}

/* A draw from the prior pi given two uniforms. */
static int32_t draw_prior(const nctmc_fp *fp, float u_choice, float u_token)
{
    int32_t n_data = fp_n_data(fp);
    int32_t data_token = (int32_t)((double)u_token * (double)n_data);
    if (data_token >= n_data)
        data_token = n_data - 1;
    switch (fp->process) {
    case NCTMC_FP_MASKED: return fp_mask(fp);
    case NCTMC_FP_MIXTURE:
        return (double)u_choice < (double)fp->mixture_uniform ? data_token : fp_mask(fp);
    default: return data_token;
    }
}

/* x_t ~ q_{t|0}(. | x0) = a_t e_{x0} + (1 - a_t) pi, one Philox block per
 * position keyed by (step, global row, position). */
static void draw_noise(nctmc_trainer *t)
{
    const nctmc_fp *fp = &t->model->fp;
    int32_t L = t->seq_len;
    for (int32_t b = 0; b < t->rows; b++) {
        double alpha = fp_alpha(fp, t->host_times[b]);
        for (int32_t p = 0; p < L; p++) {
            size_t r = (size_t)b * (size_t)L + (size_t)p;
            philox4x32 u = draw(t, NCTMC_RNG_TRAIN_NOISE, (uint32_t)t->state.step,
                                (uint32_t)(t->row0 + b), (uint32_t)p);
            bool keep = (double)philox_uniform(u.v[0]) < alpha;
            t->host_xt[r] = keep ? t->host_x0[r]
                                 : draw_prior(fp, philox_uniform(u.v[1]),
                                              philox_uniform(u.v[2]));
        }
    }
}

/* Replaces labels by the null label with probability label_dropout, one
 * draw per global row. */
static void drop_labels(nctmc_trainer *t)
{
    int32_t null_label = t->model->config.n_classes;
    for (int32_t b = 0; b < t->rows; b++) {
        philox4x32 u = draw(t, NCTMC_RNG_TRAIN_LABEL, (uint32_t)t->state.step,
                            (uint32_t)(t->row0 + b), 0);
        if ((double)philox_uniform(u.v[0]) < (double)t->params.label_dropout)
            t->host_labels[b] = null_label;
    }
}

/* ---- the update ------------------------------------------------------- */

/* Linear warm-up to the peak, then cosine decay to min_lr_ratio * peak at
 * total_steps, flat after. `step` counts from 0. min_lr_ratio = 1 gives a
 * constant rate after the warm-up, exactly the peak: the floor is then the
 * peak and the cosine term is multiplied by 0. */
static double learning_rate_at(const nctmc_trainer_params *p, int64_t step)
{
    double peak = p->learning_rate;
    if (step < p->warmup_steps)
        return peak * (double)(step + 1) / (double)p->warmup_steps;
    double floor_lr = peak * (double)p->min_lr_ratio;
    int64_t span = p->total_steps - p->warmup_steps;
    double progress = span > 0 ? (double)(step - p->warmup_steps) / (double)span : 1.0;
    if (progress > 1.0)
        progress = 1.0;
    return floor_lr + (peak - floor_lr) * 0.5 * (1.0 + cos(NCTMC_PI * progress));
}

/* Adds log lambda_theta of micro-batch k's positions whose rate is
 * non-zero to *sum and their number to *count (the last forward's). */
static void add_log_rates(nctmc_trainer *t, int32_t k, double *sum, double *count)
{
    const nctmc_fp *fp = &t->model->fp;
    int32_t B = t->params.batch_size, L = t->seq_len;
    size_t N = (size_t)B * (size_t)L, first = (size_t)k * N;
    t->be->ops->download(t->be, t->host_rate_h, dit_ws_rate_h(t->ws), N * sizeof(float));
    for (size_t r = 0; r < N; r++) {
        double lr = fp_model_log_rate(fp, t->host_times[(first + r) / (size_t)L],
                                      t->host_xt[first + r], t->host_rate_h[r]);
        if (isfinite(lr)) {
            *sum += lr;
            *count += 1.0;
        }
    }
}

static void apply_update(nctmc_trainer *t, double grad_norm, double lr)
{
    nctmc_backend *be = t->be;
    const nctmc_trainer_params *p = &t->params;
    int64_t n = (int64_t)t->model->slab_floats;
    if (p->grad_clip > 0.0f && grad_norm > (double)p->grad_clip)
        be->ops->scale(be, n, t->grads, (float)((double)p->grad_clip / (grad_norm + 1e-6)));
    int64_t step = t->state.optimizer_steps + 1;
    be->ops->adamw(be, n, t->model->weights, t->grads, t->adam_m, t->adam_v, (float)lr,
                   p->beta1, p->beta2, p->adam_eps, p->weight_decay, step);
    if (t->ema) {
        /* Warm-up of the average (as in common EMA implementations): early
         * on the weights move fast and a 0.999 average would still mostly
         * hold the random initialisation. */
        double warm = (1.0 + (double)step) / (10.0 + (double)step);
        double decay = warm < (double)p->ema_decay ? warm : (double)p->ema_decay;
        be->ops->ema_update(be, n, t->ema, t->model->weights, (float)decay);
    }
    t->state.optimizer_steps = step;
}

static nctmc_status check_batch_tokens(nctmc_trainer *t, const int32_t *tokens,
                                       const int32_t *labels)
{
    const nctmc_model *m = t->model;
    int32_t n_data = fp_n_data(&m->fp);
    size_t N = (size_t)t->rows * (size_t)t->seq_len;
    for (size_t r = 0; r < N; r++)
        if (tokens[r] < 0 || tokens[r] >= n_data)
            return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                             "token %zu is %d, outside the data tokens [0, %d)", r, tokens[r],
                             n_data);
    if (labels && m->config.n_classes == 0)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "labels were given but the model has no classes");
    for (int32_t b = 0; labels && b < t->rows; b++)
        if (labels[b] < 0 || labels[b] >= m->config.n_classes)
            return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                             "label %d of sequence %d is outside [0, %d)", labels[b], b,
                             m->config.n_classes);
    return NCTMC_OK;
}

static nctmc_status check_stats(nctmc_trainer *t, const nctmc_train_stats *stats)
{
    if (!stats)
        return NCTMC_OK;
    return abi_check_output(stats, &abi_train_stats, t->last_error, sizeof t->last_error);
}

/* A run stops at TRAINER_COUNTER_MAX (trainer.h) instead of overflowing:
 * a state past it could not be loaded again. `sequences`: how far the step
 * moves the data position. */
static nctmc_status check_room(nctmc_trainer *t, int64_t sequences)
{
    const nctmc_trainer_state *s = &t->state;
    if (s->step >= TRAINER_COUNTER_MAX || s->data_position > TRAINER_COUNTER_MAX - sequences)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "the run is at its limit (step %lld, data position %lld; at most "
                         "%lld each): no further step",
                         (long long)s->step, (long long)s->data_position,
                         (long long)TRAINER_COUNTER_MAX);
    return NCTMC_OK;
}

/* The sums a step's micro-batches add up, in micro-batch order. */
typedef struct step_sums {
    double loss;            /* of the micro-batches' mean losses */
    double log_rate;        /* of the finite log rates */
    double log_rate_count;  /* their number */
} step_sums;

/* Micro-batch k of the staged rows: its loss and gradient, the gradient
 * written into t->grads (k = 0) or added to it (k > 0, computed apart in
 * grad_part and added with one rounding per element, so that the sum is
 * the same bits as any other sum of the same partials in the same order). */
static nctmc_status run_micro_batch(nctmc_trainer *t, int32_t k, step_sums *sums)
{
    nctmc_model *m = t->model;
    int32_t B = t->params.batch_size;
    size_t first = (size_t)k * (size_t)B;
    dit_batch batch = {
        .batch = B,
        .length = t->seq_len,
        .x_t = t->host_xt + first * (size_t)t->seq_len,
        .times = t->host_times + first,
        .labels = t->host_labels ? t->host_labels + first : NULL,
        .x_0 = t->host_x0 + first * (size_t)t->seq_len,
        /* NULL keeps the uniform mode's loss unweighted, bit for bit */
        .weights = t->params.time_sampling != NCTMC_TIME_SAMPLING_UNIFORM
                       ? t->host_weights + first
                       : NULL,
    };
    float *dst = k == 0 ? t->grads : t->grad_part;
    double loss = 0.0;
    nctmc_status st =
        dit_loss(m, t->ws, &batch, dst, false, &loss, t->last_error, sizeof t->last_error);
    if (st != NCTMC_OK)
        return st;
    if (t->reduce_status != NCTMC_OK)
        return FAIL_INTO(t, t->reduce_status,
                         "rank %d of %d, step %lld: summing the gradients: %s",
                         (int)comm_rank(t->params.comm), (int)comm_size(t->params.comm),
                         (long long)t->state.step, t->reduce_error);
    if (k > 0 && !t->add_part)
        t->be->ops->add(t->be, (int64_t)m->slab_floats, t->grads, t->grad_part);
    sums->loss += loss;
    add_log_rates(t, k, &sums->log_rate, &sums->log_rate_count);
    return NCTMC_OK;
}

/* Overlap: stage `stage` of the last micro-batch's backward pass is done.
 * When it completes a bucket, the bucket (with that micro-batch's part
 * added, under accumulation) goes to host_reduce and its sum starts; the
 * started sums move along either way. */
static nctmc_status start_bucket(nctmc_trainer *t, int32_t stage)
{
    nctmc_comm *comm = t->params.comm;
    int64_t lo = t->bucket_lo[stage];
    if (lo < 0)
        return comm_sum_progress(comm, t->reduce_error, sizeof t->reduce_error);
    nctmc_backend *be = t->be;
    size_t n = t->reduce_next - (size_t)lo;
    if (t->add_part)
        be->ops->add(be, (int64_t)n, t->grads + lo, t->grad_part + lo);
    be->ops->download(be, t->host_reduce + lo, t->grads + lo, n * sizeof(float));
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(t->reduce_error, sizeof t->reduce_error, st, "%s", be->error);
    t->reduce_next = (size_t)lo;
    return comm_sum_start(comm, t->host_reduce + lo, (int64_t)n, COMM_FLOAT, t->reduce_error,
                          sizeof t->reduce_error);
}

/* dit_grads_ready_fn for the overlapped sum. */
static void on_grads_ready(void *user, int32_t stage)
{
    nctmc_trainer *t = user;
    double t0 = plat_seconds();
    if (t->reduce_status == NCTMC_OK)
        t->reduce_status = start_bucket(t, stage);
    t->comm_seconds += plat_seconds() - t0;
}

/* Before micro-batch k: the last one's backward pass starts the sums when
 * the trainer overlaps them. */
static void prepare_overlap(nctmc_trainer *t, int32_t k)
{
    bool last = t->bucket_lo && k == t->params.accumulation - 1;
    t->reduce_next = t->model->slab_floats;
    t->reduce_status = NCTMC_OK;
    t->add_part = last && k > 0;
    dit_workspace_on_grads_ready(t->ws, last ? on_grads_ready : NULL, t);
}

/* The whole slab's sum after the backward pass (no overlap). */
static nctmc_status sum_slab(nctmc_trainer *t, char *why, size_t why_size)
{
    nctmc_backend *be = t->be;
    be->ops->download(be, t->host_reduce, t->grads, trainer_slab_bytes(t));
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(why, why_size, st, "%s", be->error);
    return comm_sum(t->params.comm, t->host_reduce, (int64_t)t->model->slab_floats,
                    COMM_FLOAT, why, why_size);
}

/* With several ranks: every rank's gradient (the sum of its micro-batches')
 * and sums := the sums over the ranks in rank order, the same bits on
 * every rank. One rank's gradient with one micro-batch is that
 * micro-batch's, so N ranks add the same partials in the same order as one
 * process accumulating N micro-batches. Overlapped, the buckets' sums are
 * under way already (elementwise, so the same bits as one sum of the slab):
 * this waits for them. */
static nctmc_status sum_over_ranks(nctmc_trainer *t, step_sums *sums)
{
    nctmc_comm *comm = t->params.comm;
    if (comm_size(comm) == 1)
        return NCTMC_OK;
    double t0 = plat_seconds();
    char why[NCTMC_ERROR_SIZE];
    double values[3] = {sums->loss, sums->log_rate, sums->log_rate_count};
    nctmc_status st = t->bucket_lo ? comm_sum_wait(comm, why, sizeof why)
                                   : sum_slab(t, why, sizeof why);
    if (st == NCTMC_OK)
        st = comm_sum(comm, values, 3, COMM_DOUBLE, why, sizeof why);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "rank %d of %d, step %lld: summing the gradients: %s",
                         (int)comm_rank(comm), (int)comm_size(comm),
                         (long long)t->state.step, why);
    t->be->ops->upload(t->be, t->grads, t->host_reduce, trainer_slab_bytes(t));
    sums->loss = values[0];
    sums->log_rate = values[1];
    sums->log_rate_count = values[2];
    t->comm_seconds += plat_seconds() - t0;
    return NCTMC_OK;
}

/* The step proper, on the rows already staged in host_x0 / host_labels. */
static nctmc_status run_step(nctmc_trainer *t, nctmc_train_stats *stats)
{
    nctmc_model *m = t->model;
    draw_times(t);
    draw_noise(t);
    if (t->host_labels)
        drop_labels(t);
    step_sums sums = {0.0, 0.0, 0.0};
    t->comm_seconds = 0.0;
    for (int32_t k = 0; k < t->params.accumulation; k++) {
        prepare_overlap(t, k);
        nctmc_status st = run_micro_batch(t, k, &sums);
        if (st != NCTMC_OK) {
            dit_workspace_on_grads_ready(t->ws, NULL, NULL);
            return st;
        }
    }
    dit_workspace_on_grads_ready(t->ws, NULL, NULL);
    nctmc_status st = sum_over_ranks(t, &sums);
    if (st != NCTMC_OK)
        return st;
    /* the gradient of the mean over the global batch: the micro-batches'
     * gradients are each of their own mean */
    if (t->micro_total > 1)
        t->be->ops->scale(t->be, (int64_t)m->slab_floats, t->grads,
                          (float)(1.0 / (double)t->micro_total));
    double loss = sums.loss / (double)t->micro_total;
    double log_rate = sums.log_rate_count > 0.0 ? sums.log_rate / sums.log_rate_count : NAN;
    double grad_norm = sqrt(t->be->ops->sum_squares(t->be, (int64_t)m->slab_floats, t->grads));
    double lr = learning_rate_at(&t->params, t->state.step);
    bool skip = !isfinite(loss) || !isfinite(grad_norm);
    if (!skip)
        apply_update(t, grad_norm, lr);
    t->state.step++;
    if (skip)
        t->state.n_skipped++;
    st = t->be->ops->synchronize(t->be);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "training step: %s", t->be->error);
    if (stats) {
        nctmc_train_stats full;
        nctmc_train_stats_init(&full);
        full.step = t->state.step;
        full.loss = loss;
        full.grad_norm = grad_norm;
        full.learning_rate = lr;
        full.mean_log_rate = log_rate;
        full.skipped = skip;
        full.n_skipped = t->state.n_skipped;
        full.comm_seconds = t->comm_seconds;
        abi_write(stats, &full, &abi_train_stats);
    }
    if (skip)
        return FAIL_INTO(t, NCTMC_ERR_NON_FINITE,
                         "step %lld: loss %g, gradient norm %g; step skipped, weights "
                         "unchanged",
                         (long long)t->state.step, loss, grad_norm);
    t->last_error[0] = '\0';
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_trainer_step(nctmc_trainer *t, const int32_t *tokens,
                                          const int32_t *labels, nctmc_train_stats *stats)
{
    if (!t)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!tokens)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT, "tokens is NULL");
    nctmc_status st = check_stats(t, stats);
    if (st == NCTMC_OK)
        st = check_room(t, 0);
    if (st == NCTMC_OK)
        st = check_batch_tokens(t, tokens, labels);
    if (st == NCTMC_OK && (!t->agreed || t->agreed_ds))
        st = trainer_agree(t, NULL);
    if (st != NCTMC_OK)
        return st;
    size_t N = (size_t)t->rows * (size_t)t->seq_len;
    memcpy(t->host_x0, tokens, N * sizeof(int32_t));
    for (int32_t b = 0; t->host_labels && b < t->rows; b++)
        t->host_labels[b] = labels ? labels[b] : t->model->config.n_classes;
    return run_step(t, stats);
}

/* ---- batches from a dataset ------------------------------------------ */

static nctmc_status check_dataset(nctmc_trainer *t, const nctmc_dataset_info *info)
{
    const nctmc_model *m = t->model;
    int32_t n_data = fp_n_data(&m->fp);
    if (info->vocab_size != n_data)
        return FAIL_INTO(t, NCTMC_ERR_FORMAT,
                         "the dataset's vocabulary is %d tokens, the model's data tokens "
                         "are %d",
                         info->vocab_size, n_data);
    if (info->seq_len > 0 && info->seq_len != t->seq_len)
        return FAIL_INTO(t, NCTMC_ERR_FORMAT,
                         "the dataset's sequences have %d tokens, the trainer's %d",
                         info->seq_len, t->seq_len);
    if (info->seq_len == 0 && info->n_tokens < t->seq_len)
        return FAIL_INTO(t, NCTMC_ERR_FORMAT,
                         "the dataset's stream has %lld tokens, fewer than one sequence "
                         "of %d",
                         (long long)info->n_tokens, t->seq_len);
    if (info->seq_len > 0 && info->n_sequences < 1)
        return FAIL_INTO(t, NCTMC_ERR_FORMAT, "the dataset holds no sequence");
    /* An unconditional model may train on labelled data (labels unused); a
     * conditional one needs the same classes. */
    if (m->config.n_classes > 0 && info->n_classes != m->config.n_classes)
        return FAIL_INTO(t, NCTMC_ERR_FORMAT, "the dataset has %d classes, the model %d",
                         info->n_classes, m->config.n_classes);
    return NCTMC_OK;
}

/* A 64-bit draw for data position `pos`: which window or sequence. */
static uint64_t draw_data_index(const nctmc_trainer *t, int64_t pos, uint64_t n_choices)
{
    philox4x32 r = draw(t, NCTMC_RNG_TRAIN_DATA, (uint32_t)pos, (uint32_t)((uint64_t)pos >> 32),
                        0);
    uint64_t bits = ((uint64_t)r.v[0] << 32) | r.v[1];
    /* modulo bias is below n_choices / 2^64: negligible for any dataset */
    return bits % n_choices;
}

static nctmc_status stage_dataset_batch(nctmc_trainer *t, nctmc_dataset *ds,
                                        const nctmc_dataset_info *info)
{
    int32_t L = t->seq_len;
    for (int32_t b = 0; b < t->rows; b++) {
        int64_t pos = t->state.data_position + t->row0 + b;
        bool stream = info->seq_len == 0;
        uint64_t n_choices = stream ? (uint64_t)(info->n_tokens - L + 1)
                                    : (uint64_t)info->n_sequences;
        int64_t index = (int64_t)draw_data_index(t, pos, n_choices);
        int64_t first = stream ? index : index * L;
        nctmc_status st =
            nctmc_dataset_read_tokens(ds, first, L, t->host_x0 + (size_t)b * (size_t)L);
        if (st == NCTMC_OK && t->host_labels)
            st = nctmc_dataset_read_label(ds, index, &t->host_labels[b]);
        if (st != NCTMC_OK)
            return FAIL_INTO(t, st, "reading the dataset: %s", nctmc_dataset_last_error(ds));
    }
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_trainer_step_dataset(nctmc_trainer *t, nctmc_dataset *ds,
                                                  nctmc_train_stats *stats)
{
    if (!t)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!ds)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT, "dataset is NULL");
    nctmc_status st = check_stats(t, stats);
    if (st == NCTMC_OK)
        st = check_room(t, t->global_rows);
    if (st != NCTMC_OK)
        return st;
    nctmc_dataset_info info;
    nctmc_dataset_info_init(&info);
    st = nctmc_dataset_get_info(ds, &info);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "dataset: %s", nctmc_dataset_last_error(ds));
    st = check_dataset(t, &info);
    if (st == NCTMC_OK && (!t->agreed || t->agreed_ds != ds))
        st = trainer_agree(t, ds);
    if (st == NCTMC_OK)
        st = stage_dataset_batch(t, ds, &info);
    if (st != NCTMC_OK)
        return st;
    t->state.data_position += t->global_rows;
    return run_step(t, stats);
}

/* ---- accessors -------------------------------------------------------- */

NCTMC_API nctmc_status nctmc_trainer_get_state(const nctmc_trainer *t,
                                               nctmc_trainer_state *state)
{
    if (!t)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_trainer *w = (nctmc_trainer *)t;
    if (!state)
        return FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_trainer_get_state: state is NULL");
    nctmc_status st = abi_check_output(state, &abi_trainer_state, w->last_error,
                                       sizeof w->last_error);
    if (st == NCTMC_OK)
        abi_write(state, &t->state, &abi_trainer_state);
    return st;
}

NCTMC_API nctmc_status nctmc_trainer_get_params(const nctmc_trainer *t,
                                                nctmc_trainer_params *params)
{
    if (!t)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_trainer *w = (nctmc_trainer *)t;
    if (!params)
        return FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_trainer_get_params: params is NULL");
    nctmc_status st = abi_check_output(params, &abi_trainer_params, w->last_error,
                                       sizeof w->last_error);
    if (st == NCTMC_OK)
        abi_write(params, &t->params, &abi_trainer_params);
    return st;
}

NCTMC_API const char *nctmc_trainer_last_error(const nctmc_trainer *t)
{
    return t ? t->last_error : "";
}

/* Two configurations describe the same parameter layout and process (the
 * dimensions fix the standard layout; a mapped model has the file's until
 * model_make_writable()). */
static bool same_architecture(const nctmc_model *a, const nctmc_model *b)
{
    return memcmp(&a->dims, &b->dims, sizeof a->dims) == 0 &&
           a->fp.process == b->fp.process && a->fp.schedule == b->fp.schedule;
}

NCTMC_API nctmc_status nctmc_trainer_copy_weights(nctmc_trainer *t, nctmc_model *dst,
                                                  int32_t ema)
{
    if (!t)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!dst)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT, "destination model is NULL");
    if (dst->weight_type != NCTMC_WEIGHT_F32)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "the destination model holds reduced-precision weights; copy "
                         "into a float model and convert it (nctmc_model_convert)");
    if (!same_architecture(t->model, dst))
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "the destination model's configuration differs from the "
                         "trainer's");
    if (ema && !t->ema)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT,
                         "this trainer keeps no EMA (ema_decay is 0)");
    char why[NCTMC_ERROR_SIZE];
    nctmc_status made = model_make_writable(dst, why, sizeof why);
    if (made != NCTMC_OK)
        return FAIL_INTO(t, made, "the destination model: %s", why);
    size_t bytes = trainer_slab_bytes(t);
    float *host = mem_alloc(t->be->alloc, bytes);
    if (!host)
        return FAIL_INTO(t, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    t->be->ops->download(t->be, host, ema ? t->ema : t->model->weights, bytes);
    nctmc_status st = t->be->ops->synchronize(t->be);
    nctmc_backend *dst_be = dst->ctx->backend;
    if (st == NCTMC_OK) {
        dst_be->ops->upload(dst_be, dst->weights, host, bytes);
        st = dst_be->ops->synchronize(dst_be);
    }
    mem_free(t->be->alloc, host);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "copying weights: %s / %s", t->be->error, dst_be->error);
    t->last_error[0] = '\0';
    return NCTMC_OK;
}
