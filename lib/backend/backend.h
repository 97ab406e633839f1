/*
 * backend.h — the internal compute-backend interface (not installed).
 *
 * A backend is a struct of function pointers plus its own state. The model
 * graph, the loss, the trainer and the samplers call only these
 * operations, so the math above this line is written once for every backend.
 *
 * Memory. `alloc` returns backend memory ("device pointers"): host memory for
 * the CPU backend, GPU memory for a GPU backend. Every float / int32 pointer
 * an operation takes is backend memory unless its comment says "host".
 * Data moves in and out only through upload / download.
 *
 * Layout. Everything is float32, row-major, densely packed unless a stride
 * argument says otherwise. Token rows are ordered sequence by sequence:
 * row r belongs to sequence b = r / L at position p = r % L.
 * `mod` pointers point at one chunk (width d) of a per-sequence modulation
 * matrix whose rows are `mod_stride` floats apart: chunk values for row r are
 * mod[(r / L) * mod_stride + k], k < d.
 *
 * Determinism. For a given backend, every operation gives bitwise-identical
 * results run after run and for every thread count: work is split into pieces
 * whose boundaries do not depend on the number of threads, and every sum runs
 * in a fixed order.
 *
 * Errors. Operations are void: a backend records an asynchronous failure and
 * reports it from `synchronize`, which the core calls at the end of each
 * public call. `alloc` returns NULL on failure.
 *
 * Accumulation. Gradient outputs take a flag: false overwrites, true adds to
 * what is there.
 */
#ifndef NCTMC_BACKEND_H
#define NCTMC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "math/forward_process.h"
#include "nctmc.h"

typedef struct nctmc_backend nctmc_backend;
struct nctmc_allocator; /* alloc.h */

/* The inputs of the fused L_cond loss operation, one row per position. */
typedef struct nctmc_lcond_args {
    int64_t n_rows;        /* N = B * L positions */
    int32_t seq_len;       /* L: rows per sequence (indexes `times`) */
    int32_t row_stride;    /* V >= S = fp.vocab: floats between rows of logits */
    const float *logits;   /* [N, V] jump logits z (padding ignored) */
    const float *rate_h;   /* [N] exit-rate head output h; NULL for masked */
    const int32_t *x_t;    /* [N] current state i */
    const int32_t *x_0;    /* [N] clean state */
    const float *times;    /* [B] t of each sequence */
    nctmc_fp fp;           /* the forward process (host value) */
    float grad_scale;      /* gradients are multiplied by this (e.g. 1/N) */
    float *loss;           /* out [N] per-position loss (unscaled) */
    /* out [N, V] d loss / d z times grad_scale, 0 at the current token and
     * in the padding; may equal `logits` (computed in place); NULL: skip. */
    float *d_logits;
    float *d_rate_h;       /* out [N] d loss / d h times grad_scale; NULL: skip */
    /* [B] per-sequence weights: the gradients of row r are multiplied by
     * grad_scale * seq_weight[r / seq_len] (that product rounded to float
     * first), the loss is not; NULL: grad_scale alone, bit for bit. */
    const float *seq_weight;
    /* true: `logits` and `d_logits` hold bfloat16 bit patterns (uint16_t),
     * row_stride of them between rows, as linear_forward_bf16 writes them
     * and linear_backward_bf16 reads them; the statistics stay float32.
     * Only for a backend whose linear_forward_bf16 accepts (false: float). */
    bool logits_bf16;
} nctmc_lcond_args;

/*
 * The denoiser exit-rate link (lib/math/denoiser_math.h), one row per position.
 * forward:  from the head's logits z (x0_logits) writes the sigma link's
 *           outputs: logits[r, j] = log(R_j / sigma) for j != i, j < S,
 *           0 at the current token and in the padding; rate_h[r] =
 *           log(lambda / sigma).
 * backward: given dL/dl in `logits` and dL/dh in `rate_h`, overwrites
 *           `logits` with dL/dz (0 outside the data tokens); rate_h is
 *           only read.
 */
typedef struct nctmc_denoiser_args {
    int64_t n_rows;
    int32_t seq_len;       /* L: rows per sequence (indexes `times`) */
    int32_t row_stride;    /* V >= S */
    const float *x0_logits;  /* [N, V] z */
    const int32_t *x_t;    /* [N] */
    const float *times;    /* [B] */
    nctmc_fp fp;
    float *logits;         /* [N, V], see above */
    float *rate_h;         /* [N], see above */
} nctmc_denoiser_args;

/*
 * The denoiser link, the L_cond loss on its outputs and the link's backward
 * in one pass over the head's logits z: per row what denoiser_forward, then
 * lcond (on its logits and rate_h, grad_scale and seq_weight as given,
 * d_logits in place, d_rate_h kept) and then denoiser_backward (on those
 * gradients) compute in a chain, storing of the link's outputs only h.
 * So a training step need not run denoiser_forward at all.
 */
typedef struct nctmc_lcond_denoiser_args {
    int64_t n_rows;
    int32_t seq_len;         /* L: rows per sequence (indexes `times`) */
    int32_t row_stride;      /* V >= S */
    const float *x0_logits;  /* [N, V] z */
    const int32_t *x_t;      /* [N] */
    const int32_t *x_0;      /* [N] */
    const float *times;      /* [B] */
    nctmc_fp fp;             /* never the masked process */
    float grad_scale;        /* as in nctmc_lcond_args */
    float *loss;             /* out [N] per-position loss (unscaled) */
    /* out [N, V] d loss / d z times grad_scale (0 outside the data tokens);
     * may equal x0_logits; NULL: the loss alone. */
    float *d_x0_logits;
    const float *seq_weight; /* [B] as in nctmc_lcond_args; NULL: none */
    /* out [N] the link's h = log(lambda / sigma), as denoiser_forward
     * writes it; NULL: skip */
    float *rate_h;
} nctmc_lcond_denoiser_args;

/* A linear layer's weight [out, in] in a reduced precision (a model made by
 * nctmc_model_convert()). Both buffers are backend memory. */
typedef struct nctmc_packed_weight {
    int32_t type;          /* NCTMC_WEIGHT_BF16 or NCTMC_WEIGHT_INT8 */
    /* [out, in] row-major: bf16 bit patterns (uint16_t), or int8 in
     * [-127, 127] */
    const void *data;
    /* int8: [out], W[o, i] = scales[o] * data[o, i]; NULL for bf16 */
    const float *scales;
} nctmc_packed_weight;

/* The model's per-position outputs for nctmc_model_forward(). */
typedef struct nctmc_jump_output_args {
    int64_t n_rows;
    int32_t seq_len;
    int32_t row_stride;    /* V >= S = fp.vocab */
    const float *logits;   /* [N, V] */
    const float *rate_h;   /* [N]; NULL for masked */
    const int32_t *x_t;    /* [N] */
    const float *times;    /* [B] */
    nctmc_fp fp;
    float *log_rate;       /* out [N] log lambda_theta, -inf for rate 0; NULL: skip */
    float *jump_logprobs;  /* out [N, S] log r(j | x_t), -inf at x_t; NULL: skip */
} nctmc_jump_output_args;

/*
 * The inputs of the fused sampling operation, one row per position (the
 * per-row math is lib/math/sample_math.h; docs/math.md "Sampling" derives it).
 * Pointers are backend memory; the rest are host values. Rows are ordered
 * sequence by sequence (row r: sequence r / seq_len, position r % seq_len).
 *
 * method (SM_METHOD_* of sample_math.h):
 *   TAU_LEAPING, EULER, POSTERIOR  x_out[r] = the state at time s, drawn
 *                                   from the model's rates at (x_t, t);
 *   DENOISE                         x_out[r] = argmax_x0 p0(x0) q_{t|0}(x_t | x0)
 *                                   (s unused, no random numbers);
 *   CORRECT                         proposal[r] ~ Temp(p0; correction_temperature),
 *                                   proposal_prob[r] = p0(proposal[r]);
 *                                   x_out unused (may be NULL).
 * Fixed rows (fixed_mask[r] != 0) are never sampled: x_out[r] =
 * fixed_tokens[r], proposal[r] = x_t[r] and proposal_prob[r] = -1, so no
 * pass can move them.
 *
 * Random numbers: row r of sequence b = first_sequence + r / seq_len at
 * position p = r % seq_len uses sm_draw(seed, purpose, step, b, p), purpose
 * NCTMC_RNG_SAMPLE_STEP (CORRECT: NCTMC_RNG_SAMPLE_CORRECT). A row's result
 * is a function of its own inputs and that counter only: independent of
 * threads, of the order rows are processed, and of the other rows.
 * x_out may equal x_t (each row reads its x_t before writing).
 */
typedef struct nctmc_sample_step_args {
    int64_t n_rows;            /* N = B * L positions */
    int32_t seq_len;           /* L: rows per sequence */
    int32_t row_stride;        /* V >= S = fp.vocab: floats between logit rows */
    int32_t method;            /* SM_METHOD_* */
    const float *logits;       /* [N, V] jump logits (conditional pass) */
    const float *rate_h;       /* [N] exit-rate head h; NULL for masked */
    /* classifier-free guidance: the unconditional pass's outputs, combined
     * with the conditional ones at scale cfg_scale by cfg_rule (SM_CFG_*,
     * = nctmc_cfg_rule); NULL = none */
    const float *logits_uncond;    /* [N, V] or NULL */
    const float *rate_h_uncond;    /* [N] or NULL (NULL also for masked) */
    float cfg_scale;
    int32_t cfg_rule;
    const int32_t *x_t;        /* [N] current states, in [0, S) */
    const uint8_t *fixed_mask; /* [N] non-zero = clamped; NULL = none */
    const int32_t *fixed_tokens;   /* [N] read where fixed_mask is set */
    double t;                  /* current time, in (0, 1) */
    double s;                  /* next time, 0 < s <= t (step methods) */
    float temperature;         /* jump logits are divided by this, > 0 */
    float correction_temperature;  /* CORRECT: tau_sc > 0 */
    uint64_t seed;             /* Philox key */
    uint32_t step;             /* counter word: grid step / correction update */
    int64_t first_sequence;    /* stream of row 0's sequence, >= 0 */
    nctmc_fp fp;               /* the forward process */
    int32_t *x_out;            /* out [N] */
    int32_t *proposal;         /* out [N] (CORRECT only) */
    float *proposal_prob;      /* out [N] (CORRECT only) */
    /* SM_EXP_DOUBLE (0, the default): the passes above in double, exp in
     * double. SM_EXP_FLOAT: tau-leaping and Euler draw their jumps by
     * sm_fast_jump_draw (float logits, sm_expf, one read of the row, an
     * order of operations every backend shares: the CPU's and the GPU's
     * draws are the same bits). The other methods ignore it. */
    int32_t exp_mode;
} nctmc_sample_step_args;

/*
 * Graph capture (optional). A backend that launches work from the host (a
 * GPU) may record a fixed sequence of its operations once and replay it
 * as one launch. The caller names the sequence with a key that determines
 * everything the operations are: their kinds and order, every pointer, every
 * size and every host scalar (the backend adds its own settings, e.g. bf16).
 * Between graph_begin and the end of the sequence the caller may call only
 * operations that enqueue device work (fill_zero is one): no alloc, free,
 * upload, download, synchronize or sum_squares (which all touch the host). backend_graph_run()
 * below is the one way the core uses these entries.
 */
typedef struct nctmc_graph_key {
    uint64_t w[8];         /* compared exactly; unused words zero */
} nctmc_graph_key;

enum {
    NCTMC_GRAPH_EAGER = 0,     /* run the operations; nothing is recorded */
    NCTMC_GRAPH_CAPTURING = 1, /* run them; they are recorded, then graph_end */
    NCTMC_GRAPH_REPLAYED = 2   /* already done: the recorded graph was launched */
};

typedef struct nctmc_backend_ops {
    /* ---- lifetime and memory -------------------------------------------- */
    void (*destroy)(nctmc_backend *be);
    /* Zero-filled backend memory of `bytes` bytes, 64-byte aligned; NULL on
     * failure (bytes == 0 also gives a valid distinct pointer). */
    void *(*alloc)(nctmc_backend *be, size_t bytes);
    void (*free)(nctmc_backend *be, void *ptr);
    void (*upload)(nctmc_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(nctmc_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*fill_zero)(nctmc_backend *be, void *dst, size_t bytes);
    /* Waits for queued work; returns NCTMC_OK or the first recorded error
     * (with its message in the backend's error buffer), clearing it. */
    nctmc_status (*synchronize)(nctmc_backend *be);

    /* ---- dense layers --------------------------------------------------- */
    /* y[rows, out] = x[rows, in] * w[out, in]^T (+ bias[out] if not NULL). */
    void (*linear_forward)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                           const float *x, const float *w, const float *bias, float *y);
    /* Given dy[rows, out]:
     *   dx[rows, in] (+)= dy * w          (skipped when dx is NULL)
     *   dw[out, in]  (+)= dy^T * x        (skipped when dw is NULL)
     *   dbias[out]   (+)= sum_rows dy     (skipped when dbias is NULL)
     * accumulate_dx governs dx, accumulate_params governs dw and dbias. */
    void (*linear_backward)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                            const float *x, const float *w, const float *dy, float *dx,
                            bool accumulate_dx, float *dw, float *dbias,
                            bool accumulate_params);

    /* ---- embeddings ----------------------------------------------------- */
    /* out[r, :] (+)= table[ids[r], :], dim columns. ids are trusted (the core
     * validates them on the host before upload). */
    void (*embedding_forward)(nctmc_backend *be, int64_t rows, int32_t dim,
                              const int32_t *ids, const float *table, float *out,
                              bool accumulate);
    /* dtable[v, :] (+)= sum over r with ids[r] == v of dout[r, :], summed in
     * increasing r for every v (no order-dependent atomics). Rows of dtable
     * that no id names are zeroed when accumulate is false. */
    void (*embedding_backward)(nctmc_backend *be, int64_t rows, int32_t dim,
                               int32_t n_entries, const int32_t *ids, const float *dout,
                               float *dtable, bool accumulate);

    /* ---- time conditioning ---------------------------------------------- */
    /* out[b, k] = cos(t_b * f_k), out[b, half + k] = sin(t_b * f_k),
     * f_k = exp(-ln(10000) * k / half), half = dim / 2 (dim even). */
    void (*timestep_embedding)(nctmc_backend *be, int32_t batch, int32_t dim,
                               const float *times, float *out);

    /* ---- elementwise ---------------------------------------------------- */
    /* y = x * sigmoid(x); y may equal x. */
    void (*silu_forward)(nctmc_backend *be, int64_t n, const float *x, float *y);
    /* dx (+)= dy * silu'(x); dx may equal dy when not accumulating. */
    void (*silu_backward)(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                          float *dx, bool accumulate);
    /* y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); y may equal x. */
    void (*gelu_forward)(nctmc_backend *be, int64_t n, const float *x, float *y);
    /* dx = dy * gelu'(x); dx may equal dy. */
    void (*gelu_backward)(nctmc_backend *be, int64_t n, const float *x, const float *dy,
                          float *dx);

    /* ---- adaLN layer norm ----------------------------------------------- */
    /* y[r] = LN(x[r]) * w * (1 + scale[b]) + shift[b], LN without bias,
     * eps 1e-5, biased variance; saves mean[r] and rstd[r] = 1/sqrt(var+eps). */
    void (*adaln_forward)(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                          const float *x, const float *w, const float *shift,
                          const float *scale, int32_t mod_stride, float *y, float *mean,
                          float *rstd);
    /* Given dy: dx (+)= d/dx (accumulate_dx); dw (+)= (accumulate_dw);
     * dshift[b] = sum over the sequence's rows of dy, dscale[b] likewise of
     * dy * LN(x) * w — both overwritten, at mod_stride like shift/scale. */
    void (*adaln_backward)(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t dim,
                           const float *x, const float *w, const float *scale,
                           int32_t mod_stride, const float *mean, const float *rstd,
                           const float *dy, float *dx, bool accumulate_dx, float *dw,
                           bool accumulate_dw, float *dshift, float *dscale);

    /* ---- gated residual ------------------------------------------------- */
    /* out[r] = x[r] + gate[b] * y[r]; out may equal x (in place). */
    void (*gated_residual_forward)(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                   int32_t dim, const float *x, const float *y,
                                   const float *gate, int32_t mod_stride, float *out);
    /* dy[r] = gate[b] * dx[r] (overwritten); dgate[b] = sum over the
     * sequence's rows of dx * y (overwritten, at mod_stride). The residual's
     * own gradient passes through dx unchanged. */
    void (*gated_residual_backward)(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                    int32_t dim, const float *y, const float *gate,
                                    int32_t mod_stride, const float *dx, float *dy,
                                    float *dgate);

    /* ---- rotary position embedding -------------------------------------- */
    /* In place on the q and k parts of qkv[rows, 3 * heads * head_dim]
     * (columns [0, d) are q, [d, 2d) are k, d = heads * head_dim), NeoX
     * half-split: for pair (a, a + head_dim/2) at position p = r % seq_len,
     * angle p * base^(-2a / head_dim), (x1, x2) -> (x1 c - x2 s, x2 c + x1 s). */
    void (*rotary_forward)(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                           int32_t head_dim, float base, float *qkv);
    /* The transpose (inverse rotation) on the q and k parts of dqkv, in place. */
    void (*rotary_backward)(nctmc_backend *be, int64_t rows, int32_t seq_len,
                            int32_t heads, int32_t head_dim, float base, float *dqkv);

    /* ---- attention ------------------------------------------------------ */
    /* Floats of `saved` that attention_forward keeps for the backward pass,
     * and of `workspace` both directions need, for this shape. */
    size_t (*attention_saved_floats)(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                     int32_t heads, int32_t head_dim);
    size_t (*attention_workspace_floats)(nctmc_backend *be, int32_t batch, int32_t seq_len,
                                         int32_t heads, int32_t head_dim);
    /* Full bidirectional softmax attention per (sequence, head), scale
     * 1/sqrt(head_dim), reading q, k, v from qkv[B*L, 3d] (layout as for
     * rotary; head h uses columns h*head_dim .. of each part) and writing
     * out[B*L, d] with head h in columns h*head_dim ... `saved` may be NULL
     * when no backward pass follows. */
    void (*attention_forward)(nctmc_backend *be, int32_t batch, int32_t seq_len,
                              int32_t heads, int32_t head_dim, const float *qkv, float *out,
                              float *saved, float *workspace);
    /* Given dout[B*L, d], writes dqkv[B*L, 3d] (all three parts overwritten).
     * May overwrite `saved`. */
    void (*attention_backward)(nctmc_backend *be, int32_t batch, int32_t seq_len,
                               int32_t heads, int32_t head_dim, const float *qkv,
                               const float *out, float *saved, const float *dout,
                               float *dqkv, float *workspace);

    /* ---- loss and model outputs ----------------------------------------- */
    /* The fused L_cond loss: per row, one pass over the vocabulary row gives
     * the loss and its gradients (see lcond_math.h for the math). */
    void (*lcond)(nctmc_backend *be, const nctmc_lcond_args *args);
    /* Per row log lambda_theta and the jump log-probabilities (see
     * lcond_math.h). */
    void (*jump_output)(nctmc_backend *be, const nctmc_jump_output_args *args);
    /* The denoiser link's forward and backward (nctmc_denoiser_args). */
    void (*denoiser_forward)(nctmc_backend *be, const nctmc_denoiser_args *args);
    void (*denoiser_backward)(nctmc_backend *be, const nctmc_denoiser_args *args);
    /* The three above in one pass (nctmc_lcond_denoiser_args), where the
     * backend offers it: NULL, or false with nothing done, when it does not
     * (the caller then runs the chain). A call with n_rows = 0 does nothing
     * and tells whether the backend takes the operation; one that does
     * takes every call. */
    bool (*lcond_denoiser)(nctmc_backend *be, const nctmc_lcond_denoiser_args *args);

    /* ---- optimiser ------------------------------------------------------ */
    /* Sum of x[i]^2 over n floats, accumulated in double in a fixed order;
     * returns the result to the host. */
    double (*sum_squares)(nctmc_backend *be, int64_t n, const float *x);
    /* x *= s. */
    void (*scale)(nctmc_backend *be, int64_t n, float *x, float s);
    /* y += x, one float addition per element (y[i] = y[i] + x[i], rounded
     * once): the trainer's gradient accumulation, whose bits must equal a
     * sum of the same partials done anywhere else in the same order. */
    void (*add)(nctmc_backend *be, int64_t n, float *y, const float *x);
    /* One AdamW step with decoupled weight decay and bias correction:
     *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
     *   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
     *   p -= lr * wd * p_old
     * step counts from 1 (the caller guarantees step >= 1). */
    void (*adamw)(nctmc_backend *be, int64_t n, float *param, const float *grad, float *m,
                  float *v, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step);
    /* ema = decay * ema + (1 - decay) * param. */
    void (*ema_update)(nctmc_backend *be, int64_t n, float *ema, const float *param,
                       float decay);

    /* ---- sampling ------------------------------------------------------- */
    /* One fused per-row sampling pass (see nctmc_sample_step_args). */
    void (*sample_step)(nctmc_backend *be, const nctmc_sample_step_args *args);

    /* ---- reduced-precision weights (sampling only) ----------------------- */
    /* Both NULL in a backend that cannot hold reduced weights: models
     * converted to them are refused on it. */
    /* Bytes of the scratch linear_forward_packed needs for an inner
     * dimension of at most `in`, whatever rows and out. */
    size_t (*linear_packed_scratch_bytes)(nctmc_backend *be, int32_t in);
    /* y[rows, out] = x[rows, in] * W^T (+ bias[out] if not NULL), W the
     * dequantised packed weight (nctmc_packed_weight), accumulated in float;
     * scratch: backend memory of linear_packed_scratch_bytes(in) bytes, 64-byte
     * aligned, that the call may overwrite (so sampling allocates nothing). */
    void (*linear_forward_packed)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                                  const float *x, const struct nctmc_packed_weight *w,
                                  const float *bias, float *y, void *scratch);

    /* ---- fused block operations ------------------------------------------ */
    /* Each computes what the named sequence of the operations above computes
     * (a backend may run that sequence; a fused kernel must agree with it
     * within its precision). */
    /* linear_forward into pre[rows, out], then gelu_forward(pre) into y;
     * y may equal pre. */
    void (*linear_gelu_forward)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                                const float *x, const float *w, const float *bias, float *pre,
                                float *y);
    /* linear_backward with accumulate_dx false, then gelu_backward(pre, dx)
     * in place: dx[rows, in] = (dy w) * gelu'(pre[rows, in]) (dx required);
     * dw and dbias as linear_backward. */
    void (*linear_backward_gelu)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                                 const float *x, const float *w, const float *dy,
                                 const float *pre, float *dx, float *dw, float *dbias,
                                 bool accumulate_params);
    /* gated_residual_forward(x, y, gate) into out (out may equal x), then
     * adaln_forward(out, w, shift, scale) into u, mean, rstd. gate, shift
     * and scale share mod_stride. */
    void (*residual_adaln_forward)(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                   int32_t dim, const float *x, const float *y,
                                   const float *gate, const float *w, const float *shift,
                                   const float *scale, int32_t mod_stride, float *out, float *u,
                                   float *mean, float *rstd);
    /* adaln_backward(x, w, scale, mean, rstd, dy) with accumulate_dx true
     * (dx += ...), then gated_residual_backward(y_res, gate, dx) into
     * dy_res and dgate. dy_res may equal dy. */
    void (*adaln_residual_backward)(nctmc_backend *be, int64_t rows, int32_t seq_len,
                                    int32_t dim, const float *x, const float *w,
                                    const float *scale, int32_t mod_stride, const float *mean,
                                    const float *rstd, const float *dy, float *dx, float *dw,
                                    bool accumulate_dw, float *dshift, float *dscale,
                                    const float *y_res, const float *gate, float *dy_res,
                                    float *dgate);

    /* ---- bf16 logits (the training loss's output projection) ------------- */
    /* Both NULL in a backend without them. linear_forward with y[rows, out]
     * written as bfloat16 bit patterns (uint16_t; products of bfloat16
     * operands accumulated in float32): true; false with nothing done when
     * the backend declines (its switch is off; a call with rows = 0 asks,
     * and a backend that accepts one call accepts all). The training loss
     * then runs lcond with logits_bf16 and the output projection's backward
     * through linear_backward_bf16. */
    bool (*linear_forward_bf16)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                                const float *x, const float *w, const float *bias, void *y);
    /* linear_backward with dy[rows, out] in bfloat16 bit patterns. */
    void (*linear_backward_bf16)(nctmc_backend *be, int64_t rows, int32_t in, int32_t out,
                                 const float *x, const float *w, const void *dy, float *dx,
                                 bool accumulate_dx, float *dw, float *dbias,
                                 bool accumulate_params);

    /* ---- graph capture (all three NULL: always eager) -------------------- */
    /* Starts the sequence named by key: NCTMC_GRAPH_REPLAYED when a graph
     * recorded for it has been launched (the caller skips the operations),
     * NCTMC_GRAPH_CAPTURING when the caller's operations are now recorded
     * (the caller runs them, then calls graph_end), NCTMC_GRAPH_EAGER
     * otherwise (capture switched off, the key's first use, which runs
     * eagerly so that every lazily made plan and buffer exists before a
     * capture, or a key whose capture failed before). */
    int (*graph_begin)(nctmc_backend *be, const nctmc_graph_key *key);
    /* Ends a capture, keeps the graph for the key and launches it: true.
     * False when the capture failed (the operations did NOT run: the caller
     * runs them again, eagerly; the key stays eager from then on). */
    bool (*graph_end)(nctmc_backend *be);
    /* Forgets every recorded graph (the pointers they hold may be freed
     * next: dit_workspace_free calls it). */
    void (*graph_reset)(nctmc_backend *be);
} nctmc_backend_ops;

struct nctmc_backend {
    const nctmc_backend_ops *ops;
    const char *name;      /* "cpu", ... */
    int n_threads;
    char error[256];       /* message of the last failure reported */
    /* The context's allocator (alloc.h), for host memory allocated on the
     * backend's behalf (workspace staging, samplers, trainers); NULL = the
     * C library's. Set by the context that owns the backend. */
    const struct nctmc_allocator *alloc;
};

/* Runs fn(arg), a sequence of device operations determined by *key (see
 * nctmc_graph_key), through the backend's graph capture when it has one.
 * The results are the same bits either way; fn's host side effects happen
 * only when it runs, so the caller must not depend on them. */
static inline void backend_graph_run(nctmc_backend *be, const nctmc_graph_key *key,
                                     void (*fn)(void *arg), void *arg)
{
    int mode = be->ops->graph_begin ? be->ops->graph_begin(be, key) : NCTMC_GRAPH_EAGER;
    if (mode == NCTMC_GRAPH_REPLAYED)
        return;
    fn(arg);
    if (mode == NCTMC_GRAPH_CAPTURING && !be->ops->graph_end(be))
        fn(arg);
}

/* The CPU backend (OpenBLAS + the backend's own thread pool). n_threads 0
 * means all online cores. Returns NULL and fills err on failure. */
nctmc_backend *cpu_backend_create(int n_threads, char *err, size_t err_size);

/* The same with the backend's memory, its own struct and its thread pool's
 * bookkeeping from `alloc` (alloc.h; NULL = the C library), which must
 * outlive the backend. */
nctmc_backend *cpu_backend_create_with(int n_threads, const struct nctmc_allocator *alloc,
                                       char *err, size_t err_size);

/*
 * Backend modules: a backend built as a separate shared object
 * (libnctmc-cuda.so) that the core loads with dlopen when a context asks for
 * it (lib/backend/backend_module.c finds and checks it; docs/backends.md).
 *
 * A module exports one function, named NCTMC_BACKEND_MODULE_ENTRY, that
 * returns its descriptor. The module and the core share everything in this
 * header (the operation table, the argument structs, struct nctmc_backend),
 * so a module works only with a core built from the same interface:
 * NCTMC_BACKEND_ABI_VERSION counts its versions and must be raised by every
 * change to this header that changes a layout or a meaning. The core refuses
 * a module whose abi_version, or whose sizes of the shared structs, differ
 * from its own. abi_version stays the descriptor's first field in every
 * version, so that the check itself can be read from any module.
 *
 * A module uses nothing of the core's code (it is linked with -z defs): the
 * per-row math it shares (lcond_math.h, sample_math.h, philox.h) is inline
 * in headers.
 */
#define NCTMC_BACKEND_ABI_VERSION 8u
#define NCTMC_BACKEND_MODULE_ENTRY "nctmc_backend_module_entry"

typedef struct nctmc_backend_module {
    uint32_t abi_version;      /* NCTMC_BACKEND_ABI_VERSION of the module's build */
    uint32_t backend_size;     /* sizeof(nctmc_backend) in the module's build */
    uint32_t ops_size;         /* sizeof(nctmc_backend_ops) */
    uint32_t sample_args_size; /* sizeof(nctmc_sample_step_args) */
    uint32_t version_number;   /* NCTMC_VERSION_NUMBER of the module's build */
    const char *name;          /* "cuda" */
    /* Creates the backend on device `device`; bf16 as for "cuda-bf16". On
     * failure returns NULL, writes the reason into err and sets *no_device
     * when the reason is that no usable device exists (no driver, no GPU, a
     * GPU too old for the compiled code). */
    nctmc_backend *(*create)(int device, bool bf16, char *err, size_t err_size,
                             bool *no_device);
    /* Switches for the tests and benchmarks (cuda_backend.h): the attention
     * implementation (nctmc_cuda_attention), bf16 products, and a line that
     * describes the device and the attention implementation last used. */
    void (*set_attention)(nctmc_backend *be, int mode);
    void (*set_bf16)(nctmc_backend *be, bool bf16);
    void (*describe)(nctmc_backend *be, char *buf, size_t size);
    /* The device's memory (benchmarks): the most in use, by every process
     * and the driver's own (the whole device, as nvidia-smi counts), seen
     * after any of this backend's allocations, and the device's total, in
     * bytes. */
    void (*memory)(nctmc_backend *be, size_t *peak_used, size_t *total);
} nctmc_backend_module;

typedef const nctmc_backend_module *(*nctmc_backend_module_entry_fn)(void);

#endif /* NCTMC_BACKEND_H */
