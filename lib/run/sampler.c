/*
 * sampler.c — the sampler handle and the sampling loop: prior draw, the time
 * grid of model evaluations each followed by the fused sampling operation,
 * the final denoising step and the self-correction pass (paper App. E,
 * Alg. 3, or its Gibbs-like variant). All memory comes from
 * nctmc_sampler_create(); per step the loop uploads the current tokens, runs
 * the model, runs the op and downloads the new tokens (which the callback
 * sees).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/checked.h"
#include "model/model.h"
#include "math/sample_math.h"
#include "sampler.h"

#define SAMPLER_MAX_BATCH (1 << 20)

/* ------------------------------------------------------------------------ */
/* Creation                                                                 */
/* ------------------------------------------------------------------------ */

NCTMC_API nctmc_status nctmc_sampler_params_init_sized(nctmc_sampler_params *params,
                                                      size_t size)
{
    nctmc_sampler_params d;
    memset(&d, 0, sizeof d);
    d.max_batch = 8;
    d.max_length = 0;
    d.ctx = NULL;
    return abi_init(params, size, &d, &abi_sampler_params);
}

static nctmc_status check_sampler_params(const nctmc_model *m, const nctmc_sampler_params *p,
                                         nctmc_context *ctx, char *err, size_t err_size)
{
    if (strcmp(ctx->backend->name, m->ctx->backend->name) != 0)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "the model lives on the %s backend, the sampler's context is %s",
                           m->ctx->backend->name, ctx->backend->name);
    if (!ctx->backend->ops->sample_step)
        return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                           "the %s backend has no sampling operation", ctx->backend->name);
    if (p->max_batch < 1 || p->max_batch > SAMPLER_MAX_BATCH)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "max_batch = %d is out of range [1, %d]", p->max_batch,
                           SAMPLER_MAX_BATCH);
    if (p->max_length < 0 || p->max_length > m->dims.L)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "max_length = %d is out of range [0, %d] (the model's seq_len; 0 = "
                           "seq_len)",
                           p->max_length, m->dims.L);
    return NCTMC_OK;
}

/* The buffers are listed once, in sampler_buffers: with `need` set it only
 * adds up their sizes (nctmc_sampler_memory()), without it allocates them. */
static void *backend_alloc(nctmc_sampler *s, mem_need *need, size_t n, size_t elem, bool *ok)
{
    if (need) {
        mem_need_backend(need, n, elem);
        return NULL;
    }
    size_t bytes;
    void *p = checked_mul(n, elem, &bytes) ? s->be->ops->alloc(s->be, bytes) : NULL;
    if (!p)
        *ok = false;
    return p;
}

static void *host_alloc(nctmc_sampler *s, mem_need *need, size_t n, size_t elem, bool *ok)
{
    if (need) {
        mem_need_host(need, n, elem);
        return NULL;
    }
    size_t bytes;
    void *p = checked_mul(n, elem, &bytes) ? mem_alloc(s->be->alloc, bytes) : NULL;
    if (!p)
        *ok = false;
    return p;
}

static bool sampler_buffers(nctmc_sampler *s, mem_need *need)
{
    size_t n = (size_t)s->max_batch * (size_t)s->max_length;
    size_t n_model = (size_t)s->ws_batch * (size_t)s->max_length;
    bool ok = true;
    s->d_tokens = backend_alloc(s, need, n, sizeof(int32_t), &ok);
    s->d_fixed_mask = backend_alloc(s, need, n, sizeof(uint8_t), &ok);
    s->d_fixed_tokens = backend_alloc(s, need, n, sizeof(int32_t), &ok);
    s->d_proposal = backend_alloc(s, need, n, sizeof(int32_t), &ok);
    s->d_prob = backend_alloc(s, need, n, sizeof(float), &ok);
    s->h_tokens = host_alloc(s, need, n_model, sizeof(int32_t), &ok);
    s->h_times = host_alloc(s, need, (size_t)s->ws_batch, sizeof(float), &ok);
    s->h_labels = host_alloc(s, need, (size_t)s->ws_batch, sizeof(int32_t), &ok);
    s->h_proposal = host_alloc(s, need, n, sizeof(int32_t), &ok);
    s->h_prob = host_alloc(s, need, n, sizeof(float), &ok);
    s->h_done = host_alloc(s, need, (size_t)s->max_batch, sizeof(bool), &ok);
    return ok;
}

static nctmc_status alloc_buffers(nctmc_sampler *s, char *err, size_t err_size)
{
    if (!sampler_buffers(s, NULL))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "cannot allocate the sampler's buffers for %d x %d tokens",
                           s->max_batch, s->max_length);
    return NCTMC_OK;
}

/* The shape a sampler for these (checked) parameters has. */
static void sampler_shape(nctmc_sampler *s, const nctmc_model *model,
                          const nctmc_sampler_params *params, nctmc_context *ctx)
{
    s->be = ctx->backend;
    s->max_batch = params->max_batch;
    s->max_length = params->max_length ? params->max_length : model->dims.L;
    s->ws_batch = model->config.n_classes > 0 ? 2 * s->max_batch : s->max_batch;
}

/* Where a failed nctmc_sampler_create() leaves its message: the context the
 * caller passed, else the model — which the caller surely still holds, while
 * it may have released the model's context already. */
static nctmc_status create_fail(const nctmc_model *model, nctmc_context *given,
                                nctmc_status st, const char *msg)
{
    if (given) {
        snprintf(given->last_error, sizeof given->last_error, "%s", msg);
        ctx_log(given, NCTMC_LOG_ERROR, "%s", msg);
    } else if (model) {
        model_fail(model, st, "%s", msg);
        ctx_log(model->ctx, NCTMC_LOG_ERROR, "%s", msg);
    }
    return st;
}

/* Makes the sampler and everything it owns; the message of a failure goes
 * to err. */
static nctmc_status sampler_build(const nctmc_model *model, const nctmc_sampler_params *params,
                                  nctmc_context *ctx, nctmc_sampler **out, char *err,
                                  size_t err_size)
{
    nctmc_status st = check_sampler_params(model, params, ctx, err, err_size);
    if (st != NCTMC_OK)
        return st;
    nctmc_sampler *s = mem_calloc(&ctx->alloc, 1, sizeof *s);
    if (!s)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    /* the sampler keeps its model and its context alive (in any order of
     * *_free) */
    model_retain(model);
    ctx_retain(ctx);
    s->model = model;
    s->ctx = ctx;
    atomic_init(&s->cancel, 0);
    sampler_shape(s, model, params, ctx);
    st = dit_workspace_create(model, s->be, s->ws_batch, s->max_length, DIT_WS_INFERENCE, &s->ws, err,
                              err_size);
    if (st == NCTMC_OK)
        st = alloc_buffers(s, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_sampler_free(s);
        return st;
    }
    *out = s;
    return NCTMC_OK;
}

/* Reads the caller's parameters into *p (defaults for NULL); a struct that
 * cannot be read still names the context for the error when it is big
 * enough to hold the field. */
static nctmc_status read_sampler_params(const nctmc_sampler_params *params,
                                        nctmc_sampler_params *p, char *err, size_t err_size)
{
    nctmc_sampler_params_init(p);
    if (!params)
        return NCTMC_OK;
    nctmc_status st = abi_read(params, p, sizeof *p, &abi_sampler_params, err, err_size);
    if (st != NCTMC_OK && abi_size(params) >= abi_sampler_params.first_size)
        p->ctx = params->ctx;
    return st;
}

NCTMC_API nctmc_status nctmc_sampler_create(const nctmc_model *model,
                                            const nctmc_sampler_params *params,
                                            nctmc_sampler **out)
{
    if (out)
        *out = NULL;
    nctmc_sampler_params p;
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = read_sampler_params(params, &p, err, sizeof err);
    nctmc_context *given = p.ctx;
    if (!given && !model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (st != NCTMC_OK)
        return create_fail(model, given, st, err);
    if (!out)
        return create_fail(model, given, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_sampler_create: out is NULL");
    if (!model)
        return create_fail(model, given, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_sampler_create: model is NULL");
    st = sampler_build(model, &p, given ? given : model->ctx, out, err, sizeof err);
    if (st != NCTMC_OK)
        return create_fail(model, given, st, err);
    /* a success clears the error of the context passed; the model's is left
     * alone (other threads may be reading it: a const-model call) */
    if (given)
        given->last_error[0] = '\0';
    return NCTMC_OK;
}

/* What sampler_build would allocate, added up by the same code. */
static nctmc_status sampler_need(const nctmc_model *model, const nctmc_sampler_params *params,
                                 nctmc_context *ctx, mem_need *need, char *err,
                                 size_t err_size)
{
    nctmc_status st = check_sampler_params(model, params, ctx, err, err_size);
    if (st != NCTMC_OK)
        return st;
    nctmc_sampler s;
    memset(&s, 0, sizeof s);
    sampler_shape(&s, model, params, ctx);
    mem_need_host(need, 1, sizeof s);
    st = dit_workspace_need(model, s.be, s.ws_batch, s.max_length, DIT_WS_INFERENCE, need, err,
                            err_size);
    if (st != NCTMC_OK)
        return st;
    sampler_buffers(&s, need);
    if (need->overflow)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "the sampler's memory for %d x %d tokens overflows", s.max_batch,
                           s.max_length);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_sampler_memory(const nctmc_model *model,
                                            const nctmc_sampler_params *params,
                                            size_t *backend_bytes, size_t *host_bytes)
{
    if (backend_bytes)
        *backend_bytes = 0;
    if (host_bytes)
        *host_bytes = 0;
    nctmc_sampler_params p;
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = read_sampler_params(params, &p, err, sizeof err);
    nctmc_context *given = p.ctx;
    if (!given && !model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (st != NCTMC_OK)
        return create_fail(model, given, st, err);
    if (!model)
        return create_fail(model, given, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_sampler_memory: model is NULL");
    mem_need need = {0, 0, 0};
    st = sampler_need(model, &p, given ? given : model->ctx, &need, err, sizeof err);
    if (st != NCTMC_OK)
        return create_fail(model, given, st, err);
    if (given)
        given->last_error[0] = '\0';
    if (backend_bytes)
        *backend_bytes = need.backend_bytes;
    if (host_bytes)
        *host_bytes = need.host_bytes;
    return NCTMC_OK;
}

NCTMC_API void nctmc_sampler_free(nctmc_sampler *s)
{
    if (!s)
        return;
    void *dev[] = {s->d_tokens, s->d_fixed_mask, s->d_fixed_tokens, s->d_proposal, s->d_prob};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        if (dev[k])
            s->be->ops->free(s->be, dev[k]);
    dit_workspace_free(s->ws);
    /* a copy: the context, and its allocator, may go with ctx_release */
    nctmc_allocator alloc = mem_copy(s->be->alloc);
    mem_free(&alloc, s->h_tokens);
    mem_free(&alloc, s->h_times);
    mem_free(&alloc, s->h_labels);
    mem_free(&alloc, s->h_proposal);
    mem_free(&alloc, s->h_prob);
    mem_free(&alloc, s->h_done);
    model_release(s->model);
    ctx_release(s->ctx);
    mem_free(&alloc, s);
}

NCTMC_API void nctmc_sampler_cancel(nctmc_sampler *sampler)
{
    if (sampler)
        atomic_store_explicit(&sampler->cancel, 1, memory_order_release);
}

NCTMC_API const char *nctmc_sampler_last_error(const nctmc_sampler *sampler)
{
    return sampler ? sampler->last_error : "";
}

/* ------------------------------------------------------------------------ */
/* One model evaluation and one pass of the op                              */
/* ------------------------------------------------------------------------ */

/* Runs the model on the current tokens at time t: the conditional rows,
 * then (CFG) the same tokens again under the null label. */
static nctmc_status evaluate(nctmc_sampler *s, const sample_run *run, float t)
{
    const nctmc_sample_params *p = run->p;
    int32_t B = run->batch, n_classes = s->model->config.n_classes;
    int32_t model_batch = run->cfg ? 2 * B : B;
    if (run->cfg)
        memcpy(s->h_tokens + run->n_rows, s->h_tokens, (size_t)run->n_rows * sizeof(int32_t));
    for (int32_t b = 0; b < model_batch; b++) {
        s->h_times[b] = t;
        s->h_labels[b] = b < B && p->labels ? p->labels[b] : n_classes;
    }
    dit_batch batch = {model_batch, run->length, s->h_tokens, s->h_times,
                       n_classes > 0 ? s->h_labels : NULL, NULL, NULL};
    nctmc_status st = dit_batch_validate(s->model, s->ws, &batch, false, s->last_error,
                                         sizeof s->last_error);
    if (st != NCTMC_OK)
        return st;
    dit_forward(s->model, s->ws, &batch);
    return NCTMC_OK;
}

/* The op's arguments for the last evaluation. */
static nctmc_sample_step_args step_args(const nctmc_sampler *s, const sample_run *run,
                                        int32_t method, float t, float t_next, uint32_t step)
{
    const nctmc_model *m = s->model;
    const nctmc_sample_params *p = run->p;
    bool masked = m->fp.process == NCTMC_FP_MASKED;
    int64_t N = run->n_rows;
    float *logits = dit_ws_logits(s->ws), *rate_h = dit_ws_rate_h(s->ws);
    nctmc_sample_step_args a;
    memset(&a, 0, sizeof a);
    a.n_rows = N;
    a.seq_len = run->length;
    a.row_stride = m->dims.V;
    a.method = method;
    a.logits = logits;
    a.rate_h = masked ? NULL : rate_h;
    a.logits_uncond = run->cfg ? logits + N * m->dims.V : NULL;
    a.rate_h_uncond = run->cfg && !masked ? rate_h + N : NULL;
    a.cfg_scale = p->cfg_scale;
    a.cfg_rule = p->cfg_rule;
    a.x_t = dit_ws_x_t(s->ws);
    a.fixed_mask = run->has_fixed ? s->d_fixed_mask : NULL;
    a.fixed_tokens = run->has_fixed ? s->d_fixed_tokens : NULL;
    a.t = (double)t;
    a.s = (double)t_next;
    /* the correction pass re-predicts from the model's own p0 (temperature
     * 1); correction_temperature is its sharpening */
    a.temperature = method == SM_METHOD_CORRECT ? 1.0f : p->temperature;
    a.correction_temperature = p->correction_temperature;
    a.seed = p->seed;
    a.step = step;
    a.first_sequence = p->first_sequence;
    a.fp = m->fp;
    a.x_out = s->d_tokens;
    a.proposal = s->d_proposal;
    a.proposal_prob = s->d_prob;
    return a;
}

static nctmc_status sync_backend(nctmc_sampler *s, const char *what)
{
    nctmc_status st = s->be->ops->synchronize(s->be);
    if (st != NCTMC_OK)
        return fail_format(s->last_error, sizeof s->last_error, st, "nctmc_sample: %s: %s",
                           what, s->be->error);
    return NCTMC_OK;
}

/* Evaluates the model at t and moves every row with `method`; the new
 * tokens land in h_tokens. */
static nctmc_status advance(nctmc_sampler *s, const sample_run *run, int32_t method, float t,
                            float t_next, uint32_t step)
{
    nctmc_status st = evaluate(s, run, t);
    if (st != NCTMC_OK)
        return st;
    nctmc_sample_step_args a = step_args(s, run, method, t, t_next, step);
    s->be->ops->sample_step(s->be, &a);
    s->be->ops->download(s->be, s->h_tokens, s->d_tokens,
                         (size_t)run->n_rows * sizeof(int32_t));
    return sync_backend(s, "sampling step");
}

/* ------------------------------------------------------------------------ */
/* The loop                                                                 */
/* ------------------------------------------------------------------------ */

static void upload_fixed(nctmc_sampler *s, const sample_run *run)
{
    if (!run->has_fixed)
        return;
    size_t n = (size_t)run->n_rows;
    s->be->ops->upload(s->be, s->d_fixed_mask, run->p->fixed_mask, n * sizeof(uint8_t));
    s->be->ops->upload(s->be, s->d_fixed_tokens, run->p->fixed_tokens, n * sizeof(int32_t));
}

/* x at t_max ~ pi, keyed by (sequence, position); fixed positions clamped. */
static void draw_prior(nctmc_sampler *s, const sample_run *run)
{
    const nctmc_sample_params *p = run->p;
    for (int64_t r = 0; r < run->n_rows; r++) {
        if (run->has_fixed && p->fixed_mask[r]) {
            s->h_tokens[r] = p->fixed_tokens[r];
            continue;
        }
        int64_t seq = p->first_sequence + r / run->length;
        int32_t pos = (int32_t)(r % run->length);
        sm_uniforms u = sm_draw(p->seed, NCTMC_RNG_SAMPLE_PRIOR, 0, seq, pos);
        s->h_tokens[r] = sm_prior_token(&s->model->fp, u);
    }
}

/* Stops the call when nctmc_sampler_cancel() has asked since the call
 * began (taking the request back): the current tokens go to tokens_out. */
static nctmc_status check_cancel(nctmc_sampler *s, const sample_run *run, const char *where)
{
    if (!atomic_exchange_explicit(&s->cancel, 0, memory_order_acquire))
        return NCTMC_OK;
    memcpy(run->p->tokens_out, s->h_tokens, (size_t)run->n_rows * sizeof(int32_t));
    return fail_format(s->last_error, sizeof s->last_error, NCTMC_ERR_CANCELLED,
                       "nctmc_sample: cancelled by nctmc_sampler_cancel() %s", where);
}

/* Calls the user's callback; false (stop) leaves the current tokens in
 * tokens_out and the reason in last_error. Then looks for a cancel request
 * from another thread. */
static nctmc_status notify(nctmc_sampler *s, const sample_run *run, int32_t step)
{
    const nctmc_sample_params *p = run->p;
    if (p->callback &&
        !p->callback(step, p->n_steps, s->h_tokens, run->batch, run->length, p->user_data)) {
        memcpy(p->tokens_out, s->h_tokens, (size_t)run->n_rows * sizeof(int32_t));
        return fail_format(s->last_error, sizeof s->last_error, NCTMC_ERR_CANCELLED,
                           "nctmc_sample: cancelled by the callback after step %d", step);
    }
    char where[32];
    snprintf(where, sizeof where, "after step %d", step);
    return check_cancel(s, run, where);
}

/* Model evaluations at t_0 .. t_{n-1}; step k moves from t_{k-1} to t_k,
 * so the state ends at t_n = t_min. */
static nctmc_status run_grid(nctmc_sampler *s, const sample_run *run)
{
    const nctmc_sample_params *p = run->p;
    for (int32_t k = 1; k <= p->n_steps; k++) {
        float t = sampler_grid_time(p->grid, p->t_max, p->t_min, p->n_steps, k - 1);
        float t_next = sampler_grid_time(p->grid, p->t_max, p->t_min, p->n_steps, k);
        nctmc_status st = advance(s, run, (int32_t)p->method, t, t_next, (uint32_t)k);
        if (st == NCTMC_OK)
            st = notify(s, run, k);
        if (st != NCTMC_OK)
            return st;
    }
    return NCTMC_OK;
}

/* Alg. 3's choice for sequence b: among its non-fixed positions whose
 * proposal differs from the current token, the one whose proposal p0 is
 * largest (the first on ties) takes its proposal; none: b is finished. */
static void correct_sequence(nctmc_sampler *s, const sample_run *run, int32_t b)
{
    const nctmc_sample_params *p = run->p;
    int64_t best = -1;
    float best_prob = -1.0f;
    for (int32_t l = 0; l < run->length; l++) {
        int64_t r = (int64_t)b * run->length + l;
        if (run->has_fixed && p->fixed_mask[r])
            continue;
        if (s->h_proposal[r] != s->h_tokens[r] && s->h_prob[r] > best_prob) {
            best = r;
            best_prob = s->h_prob[r];
        }
    }
    if (best < 0)
        s->h_done[b] = true;
    else
        s->h_tokens[best] = s->h_proposal[best];
}

/* The Gibbs-like update k of sequence b: one of its non-fixed positions,
 * drawn uniformly, takes its proposal — a draw from Temp(p0; tau_sc), equal
 * to the current token or not. A sequence with every position fixed is
 * finished. */
static void gibbs_sequence(nctmc_sampler *s, const sample_run *run, int32_t b, int32_t k)
{
    const nctmc_sample_params *p = run->p;
    int64_t row0 = (int64_t)b * run->length;
    const uint8_t *fixed = run->has_fixed ? p->fixed_mask + row0 : NULL;
    int32_t n_free = 0;
    for (int32_t l = 0; l < run->length; l++)
        n_free += !(fixed && fixed[l]);
    if (n_free == 0) {
        s->h_done[b] = true;
        return;
    }
    int32_t pick = sm_gibbs_pick(p->seed, (uint32_t)k, p->first_sequence + b, n_free);
    for (int32_t l = 0; l < run->length; l++) {
        if (fixed && fixed[l])
            continue;
        if (pick-- == 0) {
            s->h_tokens[row0 + l] = s->h_proposal[row0 + l];
            return;
        }
    }
}

/* One correction update: one model evaluation at correction_time for the
 * whole batch, at most one changed token per unfinished sequence. */
static nctmc_status correction_update(nctmc_sampler *s, const sample_run *run, int32_t k)
{
    float t = run->p->correction_time;
    nctmc_status st = evaluate(s, run, t);
    if (st != NCTMC_OK)
        return st;
    nctmc_sample_step_args a = step_args(s, run, SM_METHOD_CORRECT, t, t, (uint32_t)k);
    s->be->ops->sample_step(s->be, &a);
    size_t n = (size_t)run->n_rows;
    s->be->ops->download(s->be, s->h_proposal, s->d_proposal, n * sizeof(int32_t));
    s->be->ops->download(s->be, s->h_prob, s->d_prob, n * sizeof(float));
    if ((st = sync_backend(s, "correction proposal")) != NCTMC_OK)
        return st;
    for (int32_t b = 0; b < run->batch; b++) {
        if (s->h_done[b])
            continue;
        if (run->p->correction_mode == NCTMC_CORRECT_GIBBS)
            gibbs_sequence(s, run, b, k);
        else
            correct_sequence(s, run, b);
    }
    return NCTMC_OK;
}

static bool all_done(const nctmc_sampler *s, const sample_run *run)
{
    for (int32_t b = 0; b < run->batch; b++)
        if (!s->h_done[b])
            return false;
    return true;
}

static nctmc_status run_correction(nctmc_sampler *s, const sample_run *run)
{
    const nctmc_sample_params *p = run->p;
    memset(s->h_done, 0, (size_t)run->batch * sizeof(bool));
    for (int32_t k = 1; k <= p->correction_steps && !all_done(s, run); k++) {
        nctmc_status st = correction_update(s, run, k);
        if (st == NCTMC_OK)
            st = notify(s, run, p->n_steps + k);
        if (st != NCTMC_OK)
            return st;
    }
    return NCTMC_OK;
}

static nctmc_status run_sampler(nctmc_sampler *s, const sample_run *run)
{
    const nctmc_sample_params *p = run->p;
    upload_fixed(s, run);
    draw_prior(s, run);
    nctmc_status st = check_cancel(s, run, "before the first step");
    if (st == NCTMC_OK)
        st = run_grid(s, run);
    if (st == NCTMC_OK && p->final_denoise) {
        st = advance(s, run, SM_METHOD_DENOISE, p->t_min, p->t_min, 0);
        if (st == NCTMC_OK)
            st = check_cancel(s, run, "after the final denoising step");
    }
    if (st == NCTMC_OK && p->correction_steps > 0)
        st = run_correction(s, run);
    if (st == NCTMC_OK)
        memcpy(p->tokens_out, s->h_tokens, (size_t)run->n_rows * sizeof(int32_t));
    return st;
}

NCTMC_API nctmc_status nctmc_sample(nctmc_sampler *sampler, const nctmc_sample_params *params)
{
    if (!sampler)
        return NCTMC_ERR_INVALID_ARGUMENT;
    /* A call starts with no cancel request: one made before this point
     * (while no call ran) is dropped, one made after it stops this call. */
    atomic_store_explicit(&sampler->cancel, 0, memory_order_relaxed);
    sample_run run;
    nctmc_status st = sampler_check_params(sampler, params, &run, sampler->last_error,
                                           sizeof sampler->last_error);
    if (st == NCTMC_OK)
        st = run_sampler(sampler, &run);
    if (st == NCTMC_OK)
        sampler->last_error[0] = '\0';
    else if (st == NCTMC_ERR_CANCELLED)
        ctx_log(sampler->ctx, NCTMC_LOG_INFO, "%s", sampler->last_error);
    else
        ctx_log(sampler->ctx, NCTMC_LOG_ERROR, "%s", sampler->last_error);
    return st;
}
