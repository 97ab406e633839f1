/*
 * dit_workspace.c — the activation arena: one backend allocation, carved into
 * every buffer the forward and backward passes need, sized once from
 * (batch, length) so the step loop never allocates.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "core/context.h"
#include "dit_internal.h"

/* Buffers start on 64-byte boundaries. */
#define ARENA_ALIGN 64

/* The arena is laid out twice by the same code: once with base == NULL to
 * add up its size, once with the real base to hand out the pointers. */
typedef struct arena_plan {
    char *base;
    size_t bytes;
    bool overflow;
} arena_plan;

/* Reserves n1 * n2 elements of elem_size bytes; returns the buffer's place
 * (NULL while sizing or after an overflow). */
static void *plan_bytes(arena_plan *p, size_t n1, size_t n2, size_t elem_size)
{
    size_t bytes, end;
    if (p->overflow || !checked_mul3(n1, n2, elem_size, &bytes) ||
        !checked_add(bytes, ARENA_ALIGN - 1, &bytes) ||
        !checked_add(p->bytes, bytes / ARENA_ALIGN * ARENA_ALIGN, &end)) {
        p->overflow = true;
        return NULL;
    }
    char *at = p->base ? p->base + p->bytes : NULL;
    p->bytes = end;
    return at;
}

static void plan_f(arena_plan *p, float **slot, size_t n1, size_t n2)
{
    *slot = plan_bytes(p, n1, n2, sizeof(float));
}

static void plan_i(arena_plan *p, int32_t **slot, size_t n1, size_t n2)
{
    *slot = plan_bytes(p, n1, n2, sizeof(int32_t));
}

typedef struct ws_sizes {
    size_t B, N, d, F, c, V, att_saved, att_work;
    size_t packed_scratch;   /* bytes; 0 for a float model */
} ws_sizes;

static void plan_layer(arena_plan *p, dit_layer_acts *a, const ws_sizes *z, bool training)
{
    plan_f(p, &a->mod, z->B, 6 * z->d);
    plan_f(p, &a->ln1_mean, z->N, 1);
    plan_f(p, &a->ln1_rstd, z->N, 1);
    plan_f(p, &a->u1, z->N, z->d);
    plan_f(p, &a->qkv, z->N, 3 * z->d);
    plan_f(p, &a->att_out, z->N, z->d);
    plan_f(p, &a->y_attn, z->N, z->d);
    plan_f(p, &a->ln2_mean, z->N, 1);
    plan_f(p, &a->ln2_rstd, z->N, 1);
    plan_f(p, &a->u2, z->N, z->d);
    plan_f(p, &a->m1, z->N, z->F);
    plan_f(p, &a->m2, z->N, z->d);
    if (training) {
        plan_f(p, &a->att_saved, z->att_saved, 1);
        plan_f(p, &a->g, z->N, z->F);
        plan_f(p, &a->x_mid, z->N, z->d);
        plan_f(p, &a->x_out, z->N, z->d);
    }
}

/* A block of a recomputing workspace past the first: its own modulation and
 * output (the residual stream the backward pass restarts it from), every
 * other activation shared with block 0's. */
static void plan_stream_layer(arena_plan *p, dit_layer_acts *a, const dit_layer_acts *first,
                              const ws_sizes *z)
{
    *a = *first;
    plan_f(p, &a->mod, z->B, 6 * z->d);
    plan_f(p, &a->x_out, z->N, z->d);
}

static void plan_grads(arena_plan *p, dit_grad_scratch *g, const ws_sizes *z)
{
    plan_f(p, &g->d_x, z->N, z->d);
    plan_f(p, &g->d_u, z->N, z->d);
    plan_f(p, &g->d_att, z->N, z->d);
    plan_f(p, &g->d_f, z->N, z->F);
    plan_f(p, &g->d_qkv, z->N, 3 * z->d);
    plan_f(p, &g->d_mod, z->B, 6 * z->d);
    plan_f(p, &g->d_modf, z->B, 2 * z->d);
    plan_f(p, &g->d_cond, z->B, z->c);
    plan_f(p, &g->d_tmp, z->B, z->c);
    plan_f(p, &g->d_rate_h, z->N, 1);
}

static void plan_workspace(arena_plan *p, dit_workspace *ws, const ws_sizes *z)
{
    plan_i(p, &ws->x_t, z->N, 1);
    plan_i(p, &ws->x_0, z->N, 1);
    plan_i(p, &ws->labels, z->B, 1);
    plan_f(p, &ws->times, z->B, 1);
    if (ws->time_input_kind != NCTMC_TIME_INPUT_T)
        plan_f(p, &ws->time_input, z->B, 1);
    plan_f(p, &ws->tfreq, z->B, NCTMC_TIME_FEATURES);
    plan_f(p, &ws->t_a1, z->B, z->c);
    plan_f(p, &ws->t_a2, z->B, z->c);
    plan_f(p, &ws->t_a3, z->B, z->c);
    plan_f(p, &ws->cond, z->B, z->c);
    plan_f(p, &ws->x_embed, z->N, z->d);
    /* while sizing without a layer table (dit_workspace_need), the
     * pointers go to scratch: only p->bytes matters */
    dit_layer_acts scratch[2];
    for (int32_t k = 0; k < ws->n_layer_acts; k++) {
        dit_layer_acts *a = ws->layers ? &ws->layers[k] : &scratch[k > 0];
        const dit_layer_acts *first = ws->layers ? &ws->layers[0] : &scratch[0];
        if (ws->recompute && k > 0)
            plan_stream_layer(p, a, first, z);
        else
            plan_layer(p, a, z, ws->training);
    }
    plan_f(p, &ws->modf, z->B, 2 * z->d);
    plan_f(p, &ws->lnf_mean, z->N, 1);
    plan_f(p, &ws->lnf_rstd, z->N, 1);
    plan_f(p, &ws->uf, z->N, z->d);
    plan_f(p, &ws->logits, z->N, z->V);
    plan_f(p, &ws->rate_h, z->N, 1);
    if (ws->denoiser)
        plan_f(p, &ws->x0_logits, z->N, z->V);
    plan_f(p, &ws->loss, z->N, 1);
    plan_f(p, &ws->seq_weight, z->B, 1);
    plan_f(p, &ws->att_workspace, z->att_work, 1);
    if (z->packed_scratch)
        ws->packed_scratch = plan_bytes(p, z->packed_scratch, 1, 1);
    if (ws->training)
        plan_grads(p, &ws->grad, z);
}

/* Points the residual-stream buffers at each other: block k reads what block
 * k - 1 wrote; an inference workspace updates one stream in place. */
static void link_residual_stream(dit_workspace *ws)
{
    if (!ws->training) {
        dit_layer_acts *a = &ws->layers[0];
        a->x_in = a->x_mid = a->x_out = ws->x_embed;
        a->g = a->m1;
        a->att_saved = NULL;
        return;
    }
    for (int32_t k = 0; k < ws->n_layer_acts; k++)
        ws->layers[k].x_in = k == 0 ? ws->x_embed : ws->layers[k - 1].x_out;
}

static nctmc_status size_workspace(const nctmc_model *m, nctmc_backend *be, int32_t B,
                                   int32_t L, ws_sizes *z, char *err, size_t err_size)
{
    const model_dims *dm = &m->dims;
    z->B = (size_t)B;
    z->N = (size_t)B * (size_t)L;
    z->d = (size_t)dm->d;
    z->F = (size_t)dm->F;
    z->c = (size_t)dm->c;
    z->V = (size_t)dm->V;
    /* the backend's attention sizes are products of B, L, H, D: check them
     * in size_t before asking */
    size_t probe;
    if (!checked_mul3(z->B, (size_t)L * (size_t)L, (size_t)dm->H, &probe) ||
        !checked_mul(probe, (size_t)dm->D, &probe))
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "attention for batch %d x length %d overflows", B, L);
    z->att_saved = be->ops->attention_saved_floats(be, B, L, dm->H, dm->D);
    z->att_work = be->ops->attention_workspace_floats(be, B, L, dm->H, dm->D);
    /* the widest inner dimension of a reduced linear layer is mlp.2's, F */
    z->packed_scratch = m->weight_type != NCTMC_WEIGHT_F32
                            ? be->ops->linear_packed_scratch_bytes(be, dm->F)
                            : 0;
    return NCTMC_OK;
}

static nctmc_status check_shape(const nctmc_model *m, int32_t B, int32_t L, char *err,
                                size_t err_size)
{
    if (B < 1)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "batch must be >= 1, got %d", B);
    if (L < 1 || L > m->dims.L)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "length must be in [1, %d] (the model's seq_len), got %d",
                           m->dims.L, L);
    return NCTMC_OK;
}

/* The host blocks of a workspace, in bytes: its struct, the layer table,
 * the gradient views (training) and the staging buffers. */
typedef struct ws_host_sizes {
    size_t self, layers, grad_blocks, labels, loss, time_input;
} ws_host_sizes;

static void host_sizes(const nctmc_model *m, const dit_workspace *ws, size_t N,
                       ws_host_sizes *h)
{
    h->self = sizeof(dit_workspace);
    h->layers = (size_t)ws->n_layer_acts * sizeof(dit_layer_acts);
    h->grad_blocks = ws->training ? (size_t)m->dims.n_layers * sizeof *ws->grad_blocks : 0;
    h->labels = (size_t)ws->max_batch * sizeof(int32_t);
    h->loss = N * sizeof(float);
    h->time_input =
        m->config.time_input != NCTMC_TIME_INPUT_T ? (size_t)ws->max_batch * sizeof(float) : 0;
}

/* Sets what the workspace's layout depends on (before any planning). */
static void describe(dit_workspace *ws, const nctmc_model *m, nctmc_backend *be, int32_t B,
                     int32_t L, int32_t mode)
{
    ws->be = be;
    ws->training = mode != DIT_WS_INFERENCE;
    ws->recompute = mode == DIT_WS_TRAINING_RECOMPUTE;
    ws->acts_layer = -1;
    ws->max_batch = B;
    ws->max_length = L;
    ws->time_input_kind = m->config.time_input;
    ws->denoiser = model_config_denoiser(&m->config);
    ws->n_layer_acts = ws->training ? m->dims.n_layers : 1;
}

static nctmc_status alloc_host_staging(dit_workspace *ws, const nctmc_model *m,
                                       const ws_host_sizes *h, char *err, size_t err_size)
{
    ws->host_labels = mem_alloc(ws->be->alloc, h->labels);
    ws->host_loss = mem_alloc(ws->be->alloc, h->loss);
    if (h->time_input) {
        ws->host_time_input = mem_alloc(ws->be->alloc, h->time_input);
        if (!ws->host_time_input)
            return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                               "out of host memory for the workspace");
    }
    if (!ws->host_labels || !ws->host_loss)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of host memory for the workspace");
    for (int32_t b = 0; b < ws->max_batch; b++)
        ws->host_labels[b] = m->config.n_classes;
    return NCTMC_OK;
}

/* The checks and sizes both creation and dit_workspace_need start with. */
static nctmc_status prepare(const nctmc_model *m, nctmc_backend *be, int32_t B, int32_t L,
                            int32_t mode, ws_sizes *z, char *err, size_t err_size)
{
    if (mode != DIT_WS_INFERENCE && mode != DIT_WS_TRAINING && mode != DIT_WS_TRAINING_RECOMPUTE)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "workspace mode %d",
                           (int)mode);
    nctmc_status st = check_shape(m, B, L, err, err_size);
    if (st != NCTMC_OK)
        return st;
    return size_workspace(m, be, B, L, z, err, err_size);
}

static nctmc_status arena_overflow(int32_t B, int32_t L, char *err, size_t err_size)
{
    return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                       "workspace for batch %d x length %d overflows", B, L);
}

nctmc_status dit_workspace_need(const nctmc_model *m, nctmc_backend *be, int32_t B, int32_t L,
                                int32_t mode, mem_need *need, char *err, size_t err_size)
{
    ws_sizes z;
    nctmc_status st = prepare(m, be, B, L, mode, &z, err, err_size);
    if (st != NCTMC_OK)
        return st;
    dit_workspace ws;
    memset(&ws, 0, sizeof ws);
    describe(&ws, m, be, B, L, mode);
    arena_plan sizing = {NULL, 0, false};
    plan_workspace(&sizing, &ws, &z);
    if (sizing.overflow)
        return arena_overflow(B, L, err, err_size);
    ws_host_sizes h;
    host_sizes(m, &ws, z.N, &h);
    mem_need_backend(need, sizing.bytes, 1);
    size_t host[] = {h.self, h.layers, h.grad_blocks, h.labels, h.loss, h.time_input};
    for (size_t k = 0; k < sizeof host / sizeof host[0]; k++)
        if (host[k])
            mem_need_host(need, host[k], 1);
    return NCTMC_OK;
}

nctmc_status dit_workspace_create(const nctmc_model *m, nctmc_backend *be, int32_t B,
                                  int32_t L, int32_t mode, dit_workspace **out, char *err,
                                  size_t err_size)
{
    *out = NULL;
    ws_sizes z;
    nctmc_status st = prepare(m, be, B, L, mode, &z, err, err_size);
    if (st != NCTMC_OK)
        return st;
    dit_workspace *ws = mem_calloc(be->alloc, 1, sizeof *ws);
    if (!ws)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    describe(ws, m, be, B, L, mode);
    ws_host_sizes h;
    host_sizes(m, ws, z.N, &h);
    ws->layers = mem_calloc(be->alloc, 1, h.layers);
    if (h.grad_blocks)
        ws->grad_blocks = mem_calloc(be->alloc, 1, h.grad_blocks);
    if (!ws->layers || (h.grad_blocks && !ws->grad_blocks))
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    arena_plan sizing = {NULL, 0, false};
    if (st == NCTMC_OK) {
        plan_workspace(&sizing, ws, &z);
        if (sizing.overflow)
            st = arena_overflow(B, L, err, err_size);
    }
    if (st == NCTMC_OK && !(ws->arena = be->ops->alloc(be, sizing.bytes)))
        st = fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                         "cannot allocate a %zu-byte workspace on the %s backend",
                         sizing.bytes, be->name);
    if (st == NCTMC_OK) {
        arena_plan placing = {ws->arena, 0, false};
        plan_workspace(&placing, ws, &z);
        ws->arena_bytes = placing.bytes;
        link_residual_stream(ws);
        st = alloc_host_staging(ws, m, &h, err, err_size);
    }
    if (st != NCTMC_OK) {
        dit_workspace_free(ws);
        return st;
    }
    *out = ws;
    return NCTMC_OK;
}

void dit_workspace_free(dit_workspace *ws)
{
    if (!ws)
        return;
    /* graphs recorded on this workspace hold its pointers */
    if (ws->be->ops->graph_reset)
        ws->be->ops->graph_reset(ws->be);
    if (ws->arena)
        ws->be->ops->free(ws->be, ws->arena);
    mem_free(ws->be->alloc, ws->layers);
    mem_free(ws->be->alloc, ws->grad_blocks);
    mem_free(ws->be->alloc, ws->host_labels);
    mem_free(ws->be->alloc, ws->host_loss);
    mem_free(ws->be->alloc, ws->host_time_input);
    mem_free(ws->be->alloc, ws);
}

static nctmc_status check_tokens(const int32_t *tokens, size_t n, int32_t limit,
                                 const char *what, const char *range, char *err,
                                 size_t err_size)
{
    for (size_t r = 0; r < n; r++)
        if (tokens[r] < 0 || tokens[r] >= limit)
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s[%zu] = %d is out of range %s [0, %d)", what, r, tokens[r],
                               range, limit);
    return NCTMC_OK;
}

static nctmc_status check_times_labels(const nctmc_model *m, const dit_batch *b, char *err,
                                       size_t err_size)
{
    for (int32_t i = 0; i < b->batch; i++)
        if (!(b->times[i] > 0.0f && b->times[i] < 1.0f))
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "times[%d] = %g must be in (0, 1)", i, (double)b->times[i]);
    if (b->labels && m->config.n_classes == 0)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "labels were given but the model has no classes");
    if (b->labels)
        for (int32_t i = 0; i < b->batch; i++)
            if (b->labels[i] < 0 || b->labels[i] > m->config.n_classes)
                return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                                   "labels[%d] = %d is out of range [0, %d] (%d = null label)",
                                   i, b->labels[i], m->config.n_classes, m->config.n_classes);
    return NCTMC_OK;
}

nctmc_status dit_batch_validate(const nctmc_model *m, const dit_workspace *ws,
                                const dit_batch *b, bool need_x0, char *err, size_t err_size)
{
    if (b->batch < 1 || b->batch > ws->max_batch || b->length < 1 ||
        b->length > ws->max_length)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "batch %d x length %d does not fit [1, %d] x [1, %d]", b->batch,
                           b->length, ws->max_batch, ws->max_length);
    if (!b->x_t || !b->times)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "tokens and times must not be NULL");
    size_t n = (size_t)b->batch * (size_t)b->length;
    nctmc_status st = check_tokens(b->x_t, n, m->dims.S, "tokens", "of states", err, err_size);
    if (st == NCTMC_OK)
        st = check_times_labels(m, b, err, err_size);
    if (st != NCTMC_OK || !need_x0)
        return st;
    if (!b->x_0)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "x_0 must not be NULL");
    return check_tokens(b->x_0, n, fp_n_data(&m->fp), "x_0", "of data tokens", err, err_size);
}

size_t dit_workspace_bytes(const dit_workspace *ws)
{
    return ws->arena_bytes;
}

float *dit_ws_logits(const dit_workspace *ws)
{
    return ws->logits;
}

float *dit_ws_rate_h(const dit_workspace *ws)
{
    return ws->rate_h;
}

int32_t *dit_ws_x_t(const dit_workspace *ws)
{
    return ws->x_t;
}

float *dit_ws_times(const dit_workspace *ws)
{
    return ws->times;
}

float *dit_ws_loss(const dit_workspace *ws)
{
    return ws->loss;
}
