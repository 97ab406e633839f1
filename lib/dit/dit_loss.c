/*
 * dit_loss.c — the L_cond training objective over a batch: forward, the
 * fused loss operation, and (optionally) the backward pass: the inputs
 * uploaded, then forward, loss and backward as one sequence of device
 * operations through backend_graph_run (backend.h), then the mean loss
 * read back.
 */
#include "core/context.h"
#include "dit_internal.h"

/* Whether the backend takes lcond_denoiser (asked with no rows). */
static bool backend_fuses_link(dit_workspace *ws)
{
    if (!ws->denoiser || !ws->be->ops->lcond_denoiser)
        return false;
    nctmc_lcond_denoiser_args probe = {.n_rows = 0};
    return ws->be->ops->lcond_denoiser(ws->be, &probe);
}

/* Whether the loss's logits may be bfloat16 (ws->logits_bf16, with
 * gradients only: a loss alone, as the evaluation's NELBO, stays float32):
 * the backend takes linear_forward_bf16 (asked with no rows), the link is
 * not the denoiser's and the output projection's weights are float32. */
static bool backend_bf16_logits(const nctmc_model *m, dit_workspace *ws)
{
    nctmc_backend *be = ws->be;
    if (ws->denoiser || m->view.out_q || !be->ops->linear_forward_bf16 ||
        !be->ops->linear_backward_bf16)
        return false;
    return be->ops->linear_forward_bf16(be, 0, m->dims.d, m->dims.V, NULL, NULL, NULL, NULL);
}

/* The denoiser link, the loss and the link's backward in one operation
 * (ws->link_fused): h into ws->rate_h, the gradient of the head's logits
 * where the chain leaves it, in ws->logits. */
static void run_fused_link(const nctmc_model *m, dit_workspace *ws, const dit_batch *b,
                           bool with_grads)
{
    int64_t N = (int64_t)b->batch * b->length;
    nctmc_lcond_denoiser_args a = {
        .n_rows = N,
        .seq_len = b->length,
        .row_stride = m->dims.V,
        .x0_logits = ws->x0_logits,
        .x_t = ws->x_t,
        .x_0 = ws->x_0,
        .times = ws->times,
        .fp = m->fp,
        .grad_scale = (float)(1.0 / (double)N),
        .loss = ws->loss,
        .d_x0_logits = with_grads ? ws->logits : NULL,
        .seq_weight = b->weights ? ws->seq_weight : NULL,
        .rate_h = ws->rate_h,
    };
    ws->be->ops->lcond_denoiser(ws->be, &a);
}

static void run_loss_op(const nctmc_model *m, dit_workspace *ws, const dit_batch *b,
                        bool with_grads)
{
    if (ws->link_fused) {
        run_fused_link(m, ws, b, with_grads);
        return;
    }
    int64_t N = (int64_t)b->batch * b->length;
    nctmc_lcond_args a = {
        .n_rows = N,
        .seq_len = b->length,
        .row_stride = m->dims.V,
        .logits = ws->logits,
        .rate_h = m->fp.process == NCTMC_FP_MASKED ? NULL : ws->rate_h,
        .x_t = ws->x_t,
        .x_0 = ws->x_0,
        .times = ws->times,
        .fp = m->fp,
        .grad_scale = (float)(1.0 / (double)N),
        .loss = ws->loss,
        .d_logits = with_grads ? ws->logits : NULL,
        .d_rate_h = with_grads ? ws->grad.d_rate_h : NULL,
        .seq_weight = b->weights ? ws->seq_weight : NULL,
        .logits_bf16 = ws->logits_bf16,
    };
    ws->be->ops->lcond(ws->be, &a);
}

/* Mean of the per-position losses (each times its sequence's weight, when
 * the batch has weights), summed in a fixed order on the host. */
static double mean_loss(dit_workspace *ws, const dit_batch *b)
{
    int64_t N = (int64_t)b->batch * b->length;
    ws->be->ops->download(ws->be, ws->host_loss, ws->loss, (size_t)N * sizeof(float));
    double sum = 0.0;
    if (b->weights)
        for (int64_t r = 0; r < N; r++)
            sum += (double)b->weights[r / b->length] * (double)ws->host_loss[r];
    else
        for (int64_t r = 0; r < N; r++)
            sum += (double)ws->host_loss[r];
    return sum / (double)N;
}

typedef struct loss_call {
    const nctmc_model *m;
    dit_workspace *ws;
    const dit_batch *b;
    float *grads;
    bool accumulate;
} loss_call;

/* The forward pass, the loss operation and the backward pass: device
 * operations only (dit_graph_key names them). */
static void loss_segment(void *arg)
{
    loss_call *c = arg;
    dit_forward_ops(c->m, c->ws, c->b->batch, c->b->length);
    run_loss_op(c->m, c->ws, c->b, c->grads != NULL);
    if (c->grads) {
        model_view g;
        model_view_bind(c->m, c->grads, c->ws->grad_blocks, &g);
        dit_backward(c->m, c->ws, c->b, &g, c->accumulate);
    }
}

nctmc_status dit_loss(const nctmc_model *m, dit_workspace *ws, const dit_batch *b,
                      float *grads, bool accumulate, double *out_mean, char *err,
                      size_t err_size)
{
    if (grads && !ws->training)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "gradients need a training workspace");
    if (!b->x_0)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "the loss needs x_0");
    nctmc_backend *be = ws->be;
    int64_t N = (int64_t)b->batch * b->length;
    ws->link_fused = backend_fuses_link(ws);
    ws->link_fused_last = ws->link_fused;
    ws->logits_bf16 = grads && backend_bf16_logits(m, ws);
    ws->logits_bf16_last = ws->logits_bf16;
    dit_upload_inputs(m, ws, b);
    be->ops->upload(be, ws->x_0, b->x_0, (size_t)N * sizeof(int32_t));
    if (b->weights)
        be->ops->upload(be, ws->seq_weight, b->weights, (size_t)b->batch * sizeof(float));
    loss_call c = {m, ws, b, grads, accumulate};
    if (grads && ws->grads_ready) {
        /* a data-parallel trainer's stage callback starts host-side sums
         * inside the backward: not a sequence of device operations, so it
         * runs eagerly */
        loss_segment(&c);
    } else {
        uint64_t flags = (uint64_t)accumulate | (uint64_t)(b->weights != NULL) << 1 |
                         (uint64_t)(grads != NULL) << 2 | (uint64_t)ws->link_fused << 3 |
                         (uint64_t)ws->logits_bf16 << 4;
        nctmc_graph_key key =
            dit_graph_key(DIT_GRAPH_LOSS, m, ws, b->batch, b->length, grads, flags);
        backend_graph_run(be, &key, loss_segment, &c);
    }
    /* what the forward (and a recomputing backward, which ends at block
     * 0) leaves, also when a graph ran them */
    ws->acts_layer = grads && ws->recompute ? 0 : m->dims.n_layers - 1;
    ws->link_fused = false;
    ws->logits_bf16 = false;
    double mean = mean_loss(ws, b);
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "loss: %s", be->error);
    *out_mean = mean;
    return NCTMC_OK;
}
