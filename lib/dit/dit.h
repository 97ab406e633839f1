/*
 * dit.h — the DiT graph (forward, backward, L_cond loss) written only
 * against the backend interface, and its activation workspace.
 */
#ifndef NCTMC_DIT_H
#define NCTMC_DIT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/alloc.h"
#include "model/model.h"

/* One batch, host memory. x_0 is needed only by the loss. */
typedef struct dit_batch {
    int32_t batch;          /* B */
    int32_t length;         /* L (<= the workspace's) */
    const int32_t *x_t;     /* [B * L] */
    const float *times;     /* [B] */
    const int32_t *labels;  /* [B] in [0, n_classes] or NULL (null label) */
    const int32_t *x_0;     /* [B * L] clean tokens, or NULL */
    /* [B] weights of each sequence's loss and gradients (importance
     * sampling of t), or NULL for all 1 — the unweighted computation, bit
     * for bit. Used only by dit_loss. */
    const float *weights;
} dit_batch;

typedef struct dit_workspace dit_workspace;

/* What a workspace is for (dit_workspace_create's `mode`). */
enum {
    DIT_WS_INFERENCE = 0, /* forward only: one layer's activations, reused */
    DIT_WS_TRAINING = 1,  /* every layer's activations and the gradient scratch */
    /* training that keeps only each block's output (the residual stream) and
     * one block's activations; the backward pass runs each block's forward
     * again before its backward. The same gradients, bit for bit, for about
     * a third more computation and a fraction of the activation memory. */
    DIT_WS_TRAINING_RECOMPUTE = 2
};

/*
 * Allocates the activation arena for batches of up to max_batch sequences of
 * up to max_length tokens, on the backend `be` (which must be the model's
 * kind), for `mode` (DIT_WS_*): a training workspace also holds the
 * gradient scratch for dit_loss with gradients.
 */
nctmc_status dit_workspace_create(const nctmc_model *model, nctmc_backend *be,
                                  int32_t max_batch, int32_t max_length, int32_t mode,
                                  dit_workspace **out, char *err, size_t err_size);

/* Adds to *need what dit_workspace_create with the same arguments would
 * allocate (the arena as backend bytes; the struct, tables and staging as
 * host bytes), computed by the same planning code, without allocating;
 * the same checks and errors as creation. */
nctmc_status dit_workspace_need(const nctmc_model *model, nctmc_backend *be, int32_t max_batch,
                                int32_t max_length, int32_t mode, mem_need *need, char *err,
                                size_t err_size);

/* The bytes of the workspace's backend arena (activations and scratch). */
size_t dit_workspace_bytes(const dit_workspace *ws);
void dit_workspace_free(dit_workspace *ws);

/* Checks a batch against the model and workspace (sizes, token ranges,
 * times in (0, 1), labels; x_0 when need_x0). */
nctmc_status dit_batch_validate(const nctmc_model *model, const dit_workspace *ws,
                                const dit_batch *batch, bool need_x0, char *err,
                                size_t err_size);

/* Runs the model; the results stay in the workspace (dit_ws_logits and
 * dit_ws_rate_h). The batch must have been validated. */
void dit_forward(const nctmc_model *model, dit_workspace *ws, const dit_batch *batch);

/* Backend pointers to the last forward's outputs: jump logits [N, V] and the
 * exit-rate head's h [N]; and to its uploaded inputs x_t [N] and times [B]. */
float *dit_ws_logits(const dit_workspace *ws);
float *dit_ws_rate_h(const dit_workspace *ws);
int32_t *dit_ws_x_t(const dit_workspace *ws);
float *dit_ws_times(const dit_workspace *ws);

/*
 * The L_cond training loss of a validated batch (x_0 required): the mean over
 * its B * L positions, each position's loss multiplied by its sequence's
 * weight when batch->weights is given, returned in *mean_loss. When grads is not NULL (a
 * backend slab with the model's layout; the workspace must be a training
 * one) the gradient of that mean is written into it (added when
 * accumulate). Per-position losses remain in dit_ws_loss().
 */
nctmc_status dit_loss(const nctmc_model *model, dit_workspace *ws, const dit_batch *batch,
                      float *grads, bool accumulate, double *mean_loss, char *err,
                      size_t err_size);

/*
 * The backward pass (dit_loss with gradients) finishes the gradients in
 * stages, in this order: stage 0 the output layer, stages 1..n_layers the
 * blocks from the last to the first, stage n_layers + 1 the embeddings and
 * the time conditioning. With fn set, it calls fn(user, s) as soon as the
 * gradients of stage s are final (for a data-parallel trainer that sums
 * them while the pass goes on); fn NULL: none. fn must not touch the
 * workspace.
 */
typedef void (*dit_grads_ready_fn)(void *user, int32_t stage);
void dit_workspace_on_grads_ready(dit_workspace *ws, dit_grads_ready_fn fn, void *user);

/* The number of stages: n_layers + 2. */
int32_t dit_grad_stages(const nctmc_model *model);

/* Where, in floats of the model's slab, the part begins that holds exactly
 * the tensors of stages 0..s (the gradients final once stage s is), or
 * SIZE_MAX when those tensors are not the slab's tail. With the standard
 * layout (model_tensors.c: embeddings, blocks 0.., output layer) every
 * stage's part is a tail; the last stage's is the whole slab (0). */
size_t dit_grad_stage_tail(const nctmc_model *model, int32_t s);

/* Backend pointer to the last dit_loss's per-position losses [N]
 * (unweighted). */
float *dit_ws_loss(const dit_workspace *ws);

#endif /* NCTMC_DIT_H */
