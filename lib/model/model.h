/*
 * model.h — the model handle's internals: configuration, derived sizes, the
 * parameter table (names, shapes, offsets into one slab) and the typed view
 * of a slab that the DiT code uses (the same view serves weights and
 * gradients, which share one layout).
 */
#ifndef NCTMC_MODEL_H
#define NCTMC_MODEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/context.h"
#include "io/file_map.h"
#include "math/forward_process.h"
#include "nctmc.h"

#define NCTMC_TIME_FEATURES 256   /* sinusoidal features of t */
#define NCTMC_ROPE_BASE 10000.0f
#define NCTMC_TENSOR_NAME_MAX 64

/* Sizes derived from a validated configuration. */
typedef struct model_dims {
    int32_t S;          /* states */
    int32_t V;          /* padded vocabulary rows (>= S) */
    int32_t L;          /* longest sequence */
    int32_t n_layers;
    int32_t d;          /* hidden width */
    int32_t H;          /* heads */
    int32_t D;          /* head width d / H */
    int32_t F;          /* MLP width 4d */
    int32_t c;          /* conditioning width */
    int32_t n_labels;   /* n_classes + 1 rows of label_embed, or 0 */
} model_dims;

/* How a tensor starts (docs/dev/design.md, "The model": adaLN modulations
 * and the output projections start at zero so a fresh model is the identity
 * per block). */
typedef enum model_init_kind {
    MODEL_INIT_ZERO,
    MODEL_INIT_ONE,
    MODEL_INIT_UNIFORM   /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = shape[1] */
} model_init_kind;

typedef struct model_tensor {
    char name[NCTMC_TENSOR_NAME_MAX];
    model_init_kind init;
    int32_t n_dims;
    int64_t shape[NCTMC_MAX_DIMS];
    int64_t n_elements;
    size_t offset;      /* in floats, from the start of the slab */
} model_tensor;

/* One block's tensors inside a slab (weights or gradients). */
typedef struct model_block_view {
    float *norm1_w;     /* [d] */
    float *qkv_w;       /* [3d, d] */
    float *out_w;       /* [d, d] */
    float *norm2_w;     /* [d] */
    float *mlp0_w;      /* [F, d] */
    float *mlp0_b;      /* [F] */
    float *mlp2_w;      /* [d, F] */
    float *mlp2_b;      /* [d] */
    float *ada_w;       /* [6d, c] */
    float *ada_b;       /* [6d] */
    /* A reduced-precision model's linear weights (then qkv_w, out_w,
     * mlp0_w and mlp2_w are NULL); NULL in a float model and in gradient
     * views. */
    const nctmc_packed_weight *qkv_q, *out_q, *mlp0_q, *mlp2_q;
} model_block_view;

/* The whole model's tensors inside a slab. `blocks` has n_layers entries. */
typedef struct model_view {
    float *vocab_embed;     /* [V, d] */
    float *time_w1;         /* [c, 256] */
    float *time_b1;         /* [c] */
    float *time_w2;         /* [c, c] */
    float *time_b2;         /* [c] */
    float *label_embed;     /* [n_labels, c] or NULL */
    model_block_view *blocks;
    float *final_norm_w;    /* [d] */
    float *final_ada_w;     /* [2d, c] */
    float *final_ada_b;     /* [2d] */
    float *out_w;           /* [V, d] */
    float *out_b;           /* [V] */
    float *rate_w;          /* [1, d] */
    float *rate_b;          /* [1] */
    const nctmc_packed_weight *out_q;   /* as in model_block_view, for out_w */
} model_view;

/* The sampling settings recommended for a model (method, grid, steps;
 * nctmc_sample_params_from_model()). A trainer writes them into its
 * checkpoints and a load reads them back; stored is false for a model
 * without them (made in memory, or loaded from a file that has none), which
 * then gets its process's (model_sampling_of()). */
typedef struct model_sampling {
    bool stored;
    nctmc_sample_method method;
    nctmc_time_grid grid;
    int32_t n_steps;
} model_sampling;

/* The most steps a recommendation may name (nctmc_sample()'s own limit). */
#define MODEL_SAMPLING_MAX_STEPS 1000000

/* A model is reference counted like its context: the caller's handle is one
 * reference, every sampler and trainer of the model holds another. It holds
 * one reference to its context. */
struct nctmc_model {
    atomic_int refs;
    nctmc_context *ctx;
    nctmc_model_config config;
    model_dims dims;
    nctmc_fp fp;
    int32_t n_tensors;
    model_tensor *tensors;
    size_t slab_floats;     /* total floats of a parameter slab (with padding) */
    int64_t n_params;       /* scalar parameters (without padding) */
    float *weights;         /* backend memory, slab_floats; or inside weights_map */
    /* A model loaded by mapping its checkpoint (model_map.c) reads its
     * weights from the file's pages: `weights` points into this read-only
     * map, the tensors' offsets are the file's, and model_make_writable()
     * copies them into backend memory before anything writes them. All
     * zero otherwise. */
    file_map weights_map;
    model_view view;          /* typed pointers into `weights` */
    struct nctmc_tokenizer *tokenizer;  /* owned copy, or NULL */
    model_sampling sampling;  /* from the checkpoint; stored false if none */
    /* NCTMC_WEIGHT_F32, or a sampling-only model whose linear weights are
     * reduced (model_quant.h): then packed[k] describes tensor k when its
     * type is not 0, such a tensor takes no room in `weights`, and its
     * data lives in packed_data (backend memory, packed_bytes). */
    nctmc_weight_type weight_type;
    nctmc_packed_weight *packed;
    void *packed_data;
    size_t packed_bytes;
    /* Calls on a const model may run on several threads at once; when one
     * fails it writes last_error under this lock (and a success leaves the
     * message alone), so two failures never write the buffer together. */
    pthread_mutex_t error_mutex;
    char last_error[NCTMC_ERROR_SIZE];
};

/* Takes one more reference to the model (a sampler or trainer of it). */
void model_retain(const nctmc_model *model);

/* Drops one reference; the last one frees the model and releases its
 * context. NULL does nothing. */
void model_release(const nctmc_model *model);

/* Records the failure of a call that may run concurrently with other calls
 * on the same model (a const-model call): formats under error_mutex. */
nctmc_status model_fail(const nctmc_model *model, nctmc_status status, const char *fmt,
                        ...) NCTMC_PRINTF(3, 4);

/* A successful call that has the model to itself (a non-const-model call)
 * clears its last error. */
void model_clear_error(nctmc_model *model);

/* What model_create_ex() puts in the weight slab. */
typedef enum model_weights_kind {
    MODEL_WEIGHTS_INIT,   /* allocated, the seeded initial weights */
    MODEL_WEIGHTS_ZERO,   /* allocated, zero (the caller uploads every weight) */
    MODEL_WEIGHTS_NONE    /* not allocated: weights NULL, the view unbound
                           (model_map.c points them at a map) */
} model_weights_kind;

nctmc_status model_create_ex(nctmc_context *ctx, const nctmc_model_config *config,
                             model_weights_kind weights, nctmc_model **out);

/* nctmc_model_create(), with the seeded initialisation only when
 * `initialise` (otherwise the weights are zero until the caller uploads
 * them). Errors go to ctx. */
nctmc_status model_create(nctmc_context *ctx, const nctmc_model_config *config,
                          bool initialise, nctmc_model **out);

/* The same for a model of the given weight type, never initialised (the
 * caller fills every weight); errors go to err (which may be
 * ctx->last_error), and ctx->last_error is left alone otherwise. */
nctmc_status model_create_as(nctmc_context *ctx, const nctmc_model_config *config,
                             nctmc_weight_type weight_type, nctmc_model **out, char *err,
                             size_t err_size);

/* Checks a configuration (a library-side struct, read with abi_read()) and
 * derives its sizes; on failure writes why. */
nctmc_status model_config_validate(const nctmc_model_config *config, model_dims *dims,
                                   char *err, size_t err_size);

/* The forward process of a configuration. */
nctmc_fp model_config_fp(const nctmc_model_config *config);
/* Replaces NCTMC_EXIT_LINK_AUTO by the link it stands for (the process's);
 * any other value is left as it is. */
void model_config_resolve(nctmc_model_config *config);
/* The best measured sampling settings of a process (docs/api.md, "Sampling
 * settings, measured"); stored is false. */
model_sampling model_sampling_default(nctmc_process process);
/* The model's stored recommendation, or its process's default. */
model_sampling model_sampling_of(const nctmc_model *model);
/* Whether method, grid and n_steps are values nctmc_sample() takes. */
bool model_sampling_valid(const model_sampling *sampling);

/* Whether the model's outputs pass through the denoiser link
 * (denoiser_math.h): its exit link, on a process whose exit rate is learned. */
static inline bool model_config_denoiser(const nctmc_model_config *config)
{
    return config->exit_link == NCTMC_EXIT_LINK_DENOISER &&
           config->process != NCTMC_PROCESS_MASKED;
}

/* Builds the tensor table of a configuration (names, shapes, offsets).
 * *tensors comes from alloc (alloc.h; NULL = the C library); frees nothing
 * on failure. */
nctmc_status model_tensor_table(const nctmc_allocator *alloc, const model_dims *dims,
                                model_tensor **tensors, int32_t *n_tensors, size_t *slab_floats,
                                int64_t *n_params);

/* Points a view at a slab with the model's layout; blocks must have
 * n_layers entries (the view keeps the pointer). */
void model_view_bind(const nctmc_model *model, float *slab, model_block_view *blocks,
                     model_view *view);

/* Index of the named tensor, or -1. */
int32_t model_find_tensor(const nctmc_model *model, const char *name);

/* Fills a host slab with the seeded initial weights. */
void model_init_weights(const nctmc_model *model, float *host_slab);

#endif /* NCTMC_MODEL_H */
