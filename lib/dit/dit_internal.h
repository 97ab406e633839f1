/*
 * dit_internal.h — the activation workspace's layout, shared by the files
 * that run the DiT graph (not by anything else).
 */
#ifndef NCTMC_DIT_INTERNAL_H
#define NCTMC_DIT_INTERNAL_H

#include "dit.h"

/* The six per-sequence modulation chunks of a block, in the order the
 * adaLN_modulation output is split (DiT / SEDD / MDLM). */
enum { MOD_SHIFT_MSA, MOD_SCALE_MSA, MOD_GATE_MSA, MOD_SHIFT_MLP, MOD_SCALE_MLP, MOD_GATE_MLP };

/* One block's activations. In a training workspace every block has its own;
 * in an inference workspace all blocks share one set and the residual
 * stream is updated in place (x_in == x_mid == x_out). */
typedef struct dit_layer_acts {
    float *x_in;       /* [N, d] block input (the previous block's x_out) */
    float *mod;        /* [B, 6d] shift/scale/gate for attention, then MLP */
    float *ln1_mean;   /* [N] */
    float *ln1_rstd;   /* [N] */
    float *u1;         /* [N, d] modulated norm1(x_in) */
    float *qkv;        /* [N, 3d] after rotary */
    float *att_saved;  /* backend-defined, NULL in inference */
    float *att_out;    /* [N, d] attention output before attn_out */
    float *y_attn;     /* [N, d] attn_out(att_out) */
    float *x_mid;      /* [N, d] x_in + gate_msa * y_attn */
    float *ln2_mean;   /* [N] */
    float *ln2_rstd;   /* [N] */
    float *u2;         /* [N, d] modulated norm2(x_mid) */
    float *m1;         /* [N, F] mlp.0 output (pre-GELU) */
    float *g;          /* [N, F] GELU(m1) (== m1 in inference) */
    float *m2;         /* [N, d] mlp.2 output */
    float *x_out;      /* [N, d] x_mid + gate_mlp * m2 */
} dit_layer_acts;

/* Gradient scratch of a training workspace. */
typedef struct dit_grad_scratch {
    float *d_x;        /* [N, d] gradient of the residual stream */
    float *d_u;        /* [N, d] gradient of a modulated norm / branch output */
    float *d_att;      /* [N, d] gradient of the attention output */
    float *d_f;        /* [N, F] gradient inside the MLP */
    float *d_qkv;      /* [N, 3d] */
    float *d_mod;      /* [B, 6d] */
    float *d_modf;     /* [B, 2d] */
    float *d_cond;     /* [B, c] */
    float *d_tmp;      /* [B, c] */
    float *d_rate_h;   /* [N] */
} dit_grad_scratch;

struct dit_workspace {
    nctmc_backend *be;
    bool training;
    /* DIT_WS_TRAINING_RECOMPUTE: the blocks share one set of activations
     * (each block keeps its own mod and x_out); acts_layer is the block
     * whose activations that set holds now (-1: none) */
    bool recompute;
    int32_t acts_layer;
    int32_t max_batch;
    int32_t max_length;
    void *arena;
    size_t arena_bytes;

    /* uploaded inputs */
    int32_t *x_t;      /* [N] */
    int32_t *x_0;      /* [N] */
    int32_t *labels;   /* [B] */
    float *times;      /* [B] */
    int32_t time_input_kind;  /* the model's nctmc_time_input */
    float *time_input; /* [B] what the embedding sees (log-SNR); NULL for
                          NCTMC_TIME_INPUT_T, which embeds `times` itself */

    /* time conditioning */
    float *tfreq;      /* [B, 256] */
    float *t_a1;       /* [B, c] mlp.0 output */
    float *t_a2;       /* [B, c] SiLU(t_a1) */
    float *t_a3;       /* [B, c] mlp.2 output */
    float *cond;       /* [B, c] SiLU(t_a3) (+ label embedding) */

    float *x_embed;    /* [N, d] */
    int32_t n_layer_acts;
    dit_layer_acts *layers;

    /* output layer */
    float *modf;       /* [B, 2d] */
    float *lnf_mean;   /* [N] */
    float *lnf_rstd;   /* [N] */
    float *uf;         /* [N, d] */
    float *logits;     /* [N, V] (gradients overwrite them in place) */
    float *rate_h;     /* [N] */
    /* The denoiser link (model_config_denoiser): the head's own logits, which
     * the link turns into `logits` and `rate_h`; NULL otherwise. */
    bool denoiser;
    float *x0_logits;  /* [N, V] */
    /* Within dit_loss, the backend takes lcond_denoiser: the forward pass
     * leaves out the link (`logits` is not written; the operation writes
     * `rate_h`), and the loss writes the gradient of x0_logits into
     * `logits`, so the backward leaves out the link's backward too. False
     * outside dit_loss. */
    bool link_fused;
    bool link_fused_last;  /* the last dit_loss did so (tests) */
    /* Within a dit_loss with gradients (a training step), where the
     * backend takes linear_forward_bf16 (its bf16 logits switch), the link
     * is sigma or noise-posterior (not the denoiser's) and the weights are
     * float32: the output projection writes `logits` in bfloat16 (the float
     * buffer holds them), lcond reads them and writes their gradients there
     * in bfloat16, and the projection's backward reads those. False
     * elsewhere: a loss alone (the evaluation), the forward pass of
     * sampling and nctmc_model_forward() write float logits. */
    bool logits_bf16;
    bool logits_bf16_last;  /* the last dit_loss did so (tests) */
    float *loss;       /* [N] */
    float *seq_weight; /* [B] the loss weights of the last weighted dit_loss */

    float *att_workspace;
    /* a reduced-precision model's linear layers' scratch
     * (linear_packed_scratch_bytes); NULL for a float model */
    void *packed_scratch;
    dit_grad_scratch grad;
    model_block_view *grad_blocks;  /* host array: a gradient slab's block view */
    dit_grads_ready_fn grads_ready; /* told when a stage's gradients are final */
    void *grads_ready_user;

    /* host staging */
    int32_t *host_labels;  /* [B] null labels when the caller passes none */
    float *host_loss;      /* [N] */
    float *host_time_input;  /* [B] when time_input is not NULL */
};

/* The activations of block k. */
static inline dit_layer_acts *dit_layer(dit_workspace *ws, int32_t k)
{
    return &ws->layers[ws->n_layer_acts == 1 ? 0 : k];
}

/* Block k's forward pass (dit_forward.c): its modulation, attention and MLP
 * branches, from its input to its output in the residual stream. */
void dit_block_forward(const nctmc_model *m, dit_workspace *ws, int32_t k, int32_t B,
                       int32_t L);

/* Uploads a batch's inputs (x_t, times, the time input, labels) into the
 * workspace: the host half of dit_forward. */
void dit_upload_inputs(const nctmc_model *m, dit_workspace *ws, const dit_batch *b);

/* The device half of dit_forward on the uploaded inputs: operations only
 * (nothing touches the host), so that it can be recorded as a graph. */
void dit_forward_ops(const nctmc_model *m, dit_workspace *ws, int32_t B, int32_t L);

/* The graph key (backend.h) of a sequence of operations on workspace ws:
 * `kind` names the sequence (DIT_GRAPH_*), the rest is everything its
 * pointers and scalars depend on that the workspace does not fix. */
enum { DIT_GRAPH_FORWARD = 1, DIT_GRAPH_LOSS = 2 };
static inline nctmc_graph_key dit_graph_key(int kind, const nctmc_model *m,
                                            const dit_workspace *ws, int32_t B, int32_t L,
                                            const float *grads, uint64_t flags)
{
    nctmc_graph_key k = {{(uint64_t)kind, (uint64_t)(uintptr_t)ws, (uint64_t)(uintptr_t)m,
                          (uint64_t)(uintptr_t)m->weights, (uint64_t)(uint32_t)B,
                          (uint64_t)(uint32_t)L, (uint64_t)(uintptr_t)grads, flags}};
    return k;
}

/* The denoiser link's operation arguments over the workspace's B x L rows
 * (forward direction: logits and rate_h are its outputs). */
static inline nctmc_denoiser_args dit_denoiser_args(const nctmc_model *m, dit_workspace *ws,
                                                    int32_t B, int32_t L)
{
    nctmc_denoiser_args a = {
        .n_rows = (int64_t)B * L,
        .seq_len = L,
        .row_stride = m->dims.V,
        .x0_logits = ws->x0_logits,
        .x_t = ws->x_t,
        .times = ws->times,
        .fp = m->fp,
        .logits = ws->logits,
        .rate_h = ws->rate_h,
    };
    return a;
}

/* Backward pass: given d_logits (in place in ws->logits) and
 * ws->grad.d_rate_h from the loss op, writes (or adds) every parameter's
 * gradient into the slab viewed by g. */
void dit_backward(const nctmc_model *m, dit_workspace *ws, const dit_batch *b,
                  const model_view *g, bool accumulate);

#endif /* NCTMC_DIT_INTERNAL_H */
