/*
 * dit_backward.c — the DiT backward pass, the forward pass in reverse.
 *
 * Scratch use: d_x carries the residual stream's gradient from the output
 * layer down to the embedding; d_u holds the gradient of whatever a branch
 * produced last; d_cond collects the conditioning gradient from every
 * adaLN modulation before it flows into the time MLP.
 *
 * A recomputing workspace (DIT_WS_TRAINING_RECOMPUTE) holds one block's
 * activations at a time: each block's forward runs again, from the block
 * input the residual stream kept, right before its backward. The backends'
 * operations are deterministic, so the recomputed activations are the
 * first pass's bit for bit, and so are the gradients.
 *
 * The pass tells the workspace's grads_ready callback (dit.h) when each
 * stage's gradients are final; dit_grad_stage_tail says where they lie.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dit_internal.h"

static void output_layer_backward(const nctmc_model *m, dit_workspace *ws, int64_t N,
                                  int32_t B, int32_t L, const model_view *g, bool acc)
{
    nctmc_backend *be = ws->be;
    const model_view *w = &m->view;
    const model_dims *z = &m->dims;
    dit_grad_scratch *s = &ws->grad;
    const float *x = dit_layer(ws, z->n_layers - 1)->x_out;
    if (ws->denoiser && !ws->link_fused) {
        /* the loss's gradients of the link's outputs become those of the
         * head's logits, in place in ws->logits (lcond_denoiser, when it
         * ran, left them there already) */
        nctmc_denoiser_args a = dit_denoiser_args(m, ws, B, L);
        a.rate_h = s->d_rate_h;
        be->ops->denoiser_backward(be, &a);
    }
    if (ws->logits_bf16) /* lcond left bfloat16 gradients (dit_internal.h) */
        be->ops->linear_backward_bf16(be, N, z->d, z->V, ws->uf, w->out_w, ws->logits, s->d_u,
                                      false, g->out_w, g->out_b, acc);
    else
        be->ops->linear_backward(be, N, z->d, z->V, ws->uf, w->out_w, ws->logits, s->d_u,
                                 false, g->out_w, g->out_b, acc);
    if (m->fp.process == NCTMC_FP_MASKED || ws->denoiser) {
        /* the masked process's exit rate is exact, the denoiser link's comes
         * from the logits: the exit-rate head gets no signal */
        if (!acc) {
            be->ops->fill_zero(be, g->rate_w, (size_t)z->d * sizeof(float));
            be->ops->fill_zero(be, g->rate_b, sizeof(float));
        }
    } else {
        be->ops->linear_backward(be, N, z->d, 1, ws->uf, w->rate_w, s->d_rate_h, s->d_u, true,
                                 g->rate_w, g->rate_b, acc);
    }
    be->ops->adaln_backward(be, N, L, z->d, x, w->final_norm_w, ws->modf + z->d, 2 * z->d,
                            ws->lnf_mean, ws->lnf_rstd, s->d_u, s->d_x, false, g->final_norm_w,
                            acc, s->d_modf, s->d_modf + z->d);
    be->ops->linear_backward(be, B, z->c, 2 * z->d, ws->cond, w->final_ada_w, s->d_modf,
                             s->d_cond, false, g->final_ada_w, g->final_ada_b, acc);
}

static void mlp_branch_backward(const nctmc_model *m, dit_workspace *ws, dit_layer_acts *a,
                                const model_block_view *w, model_block_view *gw, int64_t N,
                                int32_t L, bool acc)
{
    nctmc_backend *be = ws->be;
    const model_dims *z = &m->dims;
    dit_grad_scratch *s = &ws->grad;
    int32_t ms = 6 * z->d;
    be->ops->gated_residual_backward(be, N, L, z->d, a->m2, a->mod + MOD_GATE_MLP * z->d, ms,
                                     s->d_x, s->d_u, s->d_mod + MOD_GATE_MLP * z->d);
    be->ops->linear_backward_gelu(be, N, z->F, z->d, a->g, w->mlp2_w, s->d_u, a->m1, s->d_f,
                                  gw->mlp2_w, gw->mlp2_b, acc);
    be->ops->linear_backward(be, N, z->d, z->F, a->u2, w->mlp0_w, s->d_f, s->d_u, false,
                             gw->mlp0_w, gw->mlp0_b, acc);
    /* norm2, then the attention branch's gated residual: d_u becomes the
     * gradient of the attention branch's output */
    be->ops->adaln_residual_backward(be, N, L, z->d, a->x_mid, w->norm2_w,
                                     a->mod + MOD_SCALE_MLP * z->d, ms, a->ln2_mean, a->ln2_rstd,
                                     s->d_u, s->d_x, gw->norm2_w, acc,
                                     s->d_mod + MOD_SHIFT_MLP * z->d,
                                     s->d_mod + MOD_SCALE_MLP * z->d, a->y_attn,
                                     a->mod + MOD_GATE_MSA * z->d, s->d_u,
                                     s->d_mod + MOD_GATE_MSA * z->d);
}

static void attention_branch_backward(const nctmc_model *m, dit_workspace *ws,
                                      dit_layer_acts *a, const model_block_view *w,
                                      model_block_view *gw, int32_t B, int32_t L, bool acc)
{
    nctmc_backend *be = ws->be;
    const model_dims *z = &m->dims;
    dit_grad_scratch *s = &ws->grad;
    int64_t N = (int64_t)B * L;
    int32_t ms = 6 * z->d;
    /* d_u holds the gradient of y_attn (mlp_branch_backward's last step) */
    be->ops->linear_backward(be, N, z->d, z->d, a->att_out, w->out_w, s->d_u, s->d_att, false,
                             gw->out_w, NULL, acc);
    be->ops->attention_backward(be, B, L, z->H, z->D, a->qkv, a->att_out, a->att_saved,
                                s->d_att, s->d_qkv, ws->att_workspace);
    be->ops->rotary_backward(be, N, L, z->H, z->D, NCTMC_ROPE_BASE, s->d_qkv);
    be->ops->linear_backward(be, N, z->d, 3 * z->d, a->u1, w->qkv_w, s->d_qkv, s->d_u, false,
                             gw->qkv_w, NULL, acc);
    be->ops->adaln_backward(be, N, L, z->d, a->x_in, w->norm1_w, a->mod + MOD_SCALE_MSA * z->d,
                            ms, a->ln1_mean, a->ln1_rstd, s->d_u, s->d_x, true, gw->norm1_w, acc,
                            s->d_mod + MOD_SHIFT_MSA * z->d, s->d_mod + MOD_SCALE_MSA * z->d);
}

static void block_backward(const nctmc_model *m, dit_workspace *ws, int32_t k, int32_t B,
                           int32_t L, const model_view *g, bool acc)
{
    nctmc_backend *be = ws->be;
    dit_layer_acts *a = dit_layer(ws, k);
    const model_block_view *w = &m->view.blocks[k];
    model_block_view *gw = &g->blocks[k];
    if (ws->recompute && ws->acts_layer != k)
        dit_block_forward(m, ws, k, B, L);
    mlp_branch_backward(m, ws, a, w, gw, (int64_t)B * L, L, acc);
    attention_branch_backward(m, ws, a, w, gw, B, L, acc);
    be->ops->linear_backward(be, B, m->dims.c, 6 * m->dims.d, ws->cond, w->ada_w,
                             ws->grad.d_mod, ws->grad.d_cond, true, gw->ada_w, gw->ada_b, acc);
}

/* From d cond back through the label embedding and the time MLP. */
static void time_conditioning_backward(const nctmc_model *m, dit_workspace *ws, int32_t B,
                                       const model_view *g, bool acc)
{
    nctmc_backend *be = ws->be;
    const model_view *w = &m->view;
    dit_grad_scratch *s = &ws->grad;
    int32_t c = m->dims.c;
    int64_t n = (int64_t)B * c;
    if (m->dims.n_labels > 0)
        be->ops->embedding_backward(be, B, c, m->dims.n_labels, ws->labels, s->d_cond,
                                    g->label_embed, acc);
    be->ops->silu_backward(be, n, ws->t_a3, s->d_cond, s->d_tmp, false);
    be->ops->linear_backward(be, B, c, c, ws->t_a2, w->time_w2, s->d_tmp, s->d_cond, false,
                             g->time_w2, g->time_b2, acc);
    be->ops->silu_backward(be, n, ws->t_a1, s->d_cond, s->d_tmp, false);
    be->ops->linear_backward(be, B, NCTMC_TIME_FEATURES, c, ws->tfreq, w->time_w1, s->d_tmp,
                             NULL, false, g->time_w1, g->time_b1, acc);
}

static void grads_ready(dit_workspace *ws, int32_t stage)
{
    if (ws->grads_ready)
        ws->grads_ready(ws->grads_ready_user, stage);
}

void dit_backward(const nctmc_model *m, dit_workspace *ws, const dit_batch *b,
                  const model_view *g, bool acc)
{
    int32_t B = b->batch, L = b->length, n = m->dims.n_layers;
    int64_t N = (int64_t)B * L;
    output_layer_backward(m, ws, N, B, L, g, acc);
    grads_ready(ws, 0);
    for (int32_t k = n - 1; k >= 0; k--) {
        block_backward(m, ws, k, B, L, g, acc);
        grads_ready(ws, n - k);
    }
    ws->be->ops->embedding_backward(ws->be, N, m->dims.d, m->dims.V, ws->x_t, ws->grad.d_x,
                                    g->vocab_embed, acc);
    time_conditioning_backward(m, ws, B, g, acc);
    grads_ready(ws, n + 1);
}

void dit_workspace_on_grads_ready(dit_workspace *ws, dit_grads_ready_fn fn, void *user)
{
    ws->grads_ready = fn;
    ws->grads_ready_user = user;
}

int32_t dit_grad_stages(const nctmc_model *m)
{
    return m->dims.n_layers + 2;
}

/* The stage whose backward finishes tensor t (by its name: "output_layer.",
 * "blocks.K.", or the embeddings and time conditioning). */
static int32_t tensor_stage(const nctmc_model *m, const model_tensor *t)
{
    int32_t n = m->dims.n_layers;
    if (strncmp(t->name, "output_layer.", 13) == 0)
        return 0;
    if (strncmp(t->name, "blocks.", 7) == 0)
        return n - (int32_t)strtol(t->name + 7, NULL, 10);
    return n + 1;
}

size_t dit_grad_stage_tail(const nctmc_model *m, int32_t s)
{
    size_t lo = SIZE_MAX, hi_others = 0;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        size_t end = t->offset + (size_t)t->n_elements;
        if (tensor_stage(m, t) <= s)
            lo = t->offset < lo ? t->offset : lo;
        else
            hi_others = end > hi_others ? end : hi_others;
    }
    if (s >= dit_grad_stages(m) - 1)
        return 0;
    return lo != SIZE_MAX && hi_others <= lo ? lo : SIZE_MAX;
}
