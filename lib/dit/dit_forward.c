/*
 * dit_forward.c — the DiT forward pass (docs/dev/design.md, "The model") as
 * a sequence of backend operations: time conditioning, blocks, output layer
 * with the jump logits and the exit-rate head. The inputs are uploaded first;
 * the operations after that run through backend_graph_run (backend.h), so a
 * backend with graph capture replays them as one graph per shape.
 */
#include "dit_internal.h"

/* A linear layer with the float weight w or, in a reduced-precision model,
 * the packed one q (model_quant.h). */
static void linear(dit_workspace *ws, int64_t rows, int32_t in, int32_t out, const float *x,
                   const float *w, const nctmc_packed_weight *q, const float *bias, float *y)
{
    nctmc_backend *be = ws->be;
    if (q)
        be->ops->linear_forward_packed(be, rows, in, out, x, q, bias, y, ws->packed_scratch);
    else
        be->ops->linear_forward(be, rows, in, out, x, w, bias, y);
}

void dit_upload_inputs(const nctmc_model *m, dit_workspace *ws, const dit_batch *b)
{
    nctmc_backend *be = ws->be;
    size_t n = (size_t)b->batch * (size_t)b->length;
    be->ops->upload(be, ws->x_t, b->x_t, n * sizeof(int32_t));
    be->ops->upload(be, ws->times, b->times, (size_t)b->batch * sizeof(float));
    if (ws->time_input) {
        for (int32_t i = 0; i < b->batch; i++)
            ws->host_time_input[i] = (float)fp_log_snr(&m->fp, (double)b->times[i]);
        be->ops->upload(be, ws->time_input, ws->host_time_input,
                        (size_t)b->batch * sizeof(float));
    }
    if (m->dims.n_labels > 0) {
        const int32_t *labels = b->labels ? b->labels : ws->host_labels;
        be->ops->upload(be, ws->labels, labels, (size_t)b->batch * sizeof(int32_t));
    }
}

/* cond = SiLU(mlp.2(SiLU(mlp.0(sinusoid(t or log-SNR))))) (+ label embedding) */
static void time_conditioning(const nctmc_model *m, dit_workspace *ws, int32_t B)
{
    nctmc_backend *be = ws->be;
    const model_view *w = &m->view;
    int32_t c = m->dims.c;
    const float *input = ws->time_input ? ws->time_input : ws->times;
    be->ops->timestep_embedding(be, B, NCTMC_TIME_FEATURES, input, ws->tfreq);
    be->ops->linear_forward(be, B, NCTMC_TIME_FEATURES, c, ws->tfreq, w->time_w1, w->time_b1,
                            ws->t_a1);
    be->ops->silu_forward(be, (int64_t)B * c, ws->t_a1, ws->t_a2);
    be->ops->linear_forward(be, B, c, c, ws->t_a2, w->time_w2, w->time_b2, ws->t_a3);
    be->ops->silu_forward(be, (int64_t)B * c, ws->t_a3, ws->cond);
    if (m->dims.n_labels > 0)
        be->ops->embedding_forward(be, B, c, ws->labels, w->label_embed, ws->cond, true);
}

static void attention_branch(const nctmc_model *m, dit_workspace *ws, dit_layer_acts *a,
                             const model_block_view *w, int32_t B, int32_t L)
{
    nctmc_backend *be = ws->be;
    const model_dims *z = &m->dims;
    int64_t N = (int64_t)B * L;
    int32_t ms = 6 * z->d;
    be->ops->adaln_forward(be, N, L, z->d, a->x_in, w->norm1_w, a->mod + MOD_SHIFT_MSA * z->d,
                           a->mod + MOD_SCALE_MSA * z->d, ms, a->u1, a->ln1_mean, a->ln1_rstd);
    linear(ws, N, z->d, 3 * z->d, a->u1, w->qkv_w, w->qkv_q, NULL, a->qkv);
    be->ops->rotary_forward(be, N, L, z->H, z->D, NCTMC_ROPE_BASE, a->qkv);
    be->ops->attention_forward(be, B, L, z->H, z->D, a->qkv, a->att_out, a->att_saved,
                               ws->att_workspace);
    linear(ws, N, z->d, z->d, a->att_out, w->out_w, w->out_q, NULL, a->y_attn);
}

static void mlp_branch(const nctmc_model *m, dit_workspace *ws, dit_layer_acts *a,
                       const model_block_view *w, int32_t B, int32_t L)
{
    nctmc_backend *be = ws->be;
    const model_dims *z = &m->dims;
    int64_t N = (int64_t)B * L;
    int32_t ms = 6 * z->d;
    /* the attention branch's gated residual, then norm2 */
    be->ops->residual_adaln_forward(be, N, L, z->d, a->x_in, a->y_attn,
                                    a->mod + MOD_GATE_MSA * z->d, w->norm2_w,
                                    a->mod + MOD_SHIFT_MLP * z->d, a->mod + MOD_SCALE_MLP * z->d,
                                    ms, a->x_mid, a->u2, a->ln2_mean, a->ln2_rstd);
    if (w->mlp0_q) {
        linear(ws, N, z->d, z->F, a->u2, w->mlp0_w, w->mlp0_q, w->mlp0_b, a->m1);
        be->ops->gelu_forward(be, N * z->F, a->m1, a->g);
    } else {
        be->ops->linear_gelu_forward(be, N, z->d, z->F, a->u2, w->mlp0_w, w->mlp0_b, a->m1,
                                     a->g);
    }
    linear(ws, N, z->F, z->d, a->g, w->mlp2_w, w->mlp2_q, w->mlp2_b, a->m2);
    be->ops->gated_residual_forward(be, N, L, z->d, a->x_mid, a->m2,
                                    a->mod + MOD_GATE_MLP * z->d, ms, a->x_out);
}

void dit_block_forward(const nctmc_model *m, dit_workspace *ws, int32_t k, int32_t B,
                       int32_t L)
{
    dit_layer_acts *a = dit_layer(ws, k);
    ws->acts_layer = k;
    const model_block_view *w = &m->view.blocks[k];
    ws->be->ops->linear_forward(ws->be, B, m->dims.c, 6 * m->dims.d, ws->cond, w->ada_w,
                                w->ada_b, a->mod);
    attention_branch(m, ws, a, w, B, L);
    mlp_branch(m, ws, a, w, B, L);
}

/* norm_final + adaLN, then the jump logits and the exit-rate head h. */
static void output_layer(const nctmc_model *m, dit_workspace *ws, int32_t B, int32_t L)
{
    nctmc_backend *be = ws->be;
    const model_view *w = &m->view;
    const model_dims *z = &m->dims;
    int64_t N = (int64_t)B * L;
    const float *x = dit_layer(ws, z->n_layers - 1)->x_out;
    be->ops->linear_forward(be, B, z->c, 2 * z->d, ws->cond, w->final_ada_w, w->final_ada_b,
                            ws->modf);
    be->ops->adaln_forward(be, N, L, z->d, x, w->final_norm_w, ws->modf, ws->modf + z->d,
                           2 * z->d, ws->uf, ws->lnf_mean, ws->lnf_rstd);
    if (ws->denoiser) {
        linear(ws, N, z->d, z->V, ws->uf, w->out_w, w->out_q, w->out_b, ws->x0_logits);
        if (ws->link_fused)
            return;   /* dit_loss's lcond_denoiser runs the link */
        nctmc_denoiser_args a = dit_denoiser_args(m, ws, B, L);
        be->ops->denoiser_forward(be, &a);
        return;
    }
    if (ws->logits_bf16)
        be->ops->linear_forward_bf16(be, N, z->d, z->V, ws->uf, w->out_w, w->out_b, ws->logits);
    else
        linear(ws, N, z->d, z->V, ws->uf, w->out_w, w->out_q, w->out_b, ws->logits);
    be->ops->linear_forward(be, N, z->d, 1, ws->uf, w->rate_w, w->rate_b, ws->rate_h);
}

void dit_forward_ops(const nctmc_model *m, dit_workspace *ws, int32_t B, int32_t L)
{
    nctmc_backend *be = ws->be;
    be->ops->embedding_forward(be, (int64_t)B * L, m->dims.d, ws->x_t, m->view.vocab_embed,
                               ws->x_embed, false);
    time_conditioning(m, ws, B);
    for (int32_t k = 0; k < m->dims.n_layers; k++)
        dit_block_forward(m, ws, k, B, L);
    output_layer(m, ws, B, L);
}

typedef struct forward_call {
    const nctmc_model *m;
    dit_workspace *ws;
    int32_t B, L;
} forward_call;

static void forward_segment(void *arg)
{
    forward_call *c = arg;
    dit_forward_ops(c->m, c->ws, c->B, c->L);
}

void dit_forward(const nctmc_model *m, dit_workspace *ws, const dit_batch *b)
{
    dit_upload_inputs(m, ws, b);
    forward_call c = {m, ws, b->batch, b->length};
    nctmc_graph_key key = dit_graph_key(DIT_GRAPH_FORWARD, m, ws, b->batch, b->length, NULL, 0);
    backend_graph_run(ws->be, &key, forward_segment, &c);
    /* what the blocks' forward leaves, also when a graph ran them */
    ws->acts_layer = m->dims.n_layers - 1;
}
