/*
 * nctmc.h — the public C API of libnctmc.
 *
 * libnctmc trains and samples Neural CTMC discrete diffusion models: a learned
 * reverse continuous-time Markov chain whose rates are split into an exit rate
 * (when a position jumps) and a jump distribution (where it jumps), each from
 * its own head on a DiT transformer.
 *
 * Conventions that hold for every function in this header:
 *
 *  - Every call that can fail returns an nctmc_status. NCTMC_OK is 0. On
 *    failure a human-readable message is stored in the handle the call was
 *    made on (nctmc_context_last_error(), nctmc_model_last_error()), and
 *    nctmc_status_string() names the code. Output arguments are left
 *    untouched on failure unless stated otherwise.
 *  - Parameter structs begin with `size_t struct_size`. Fill them with the
 *    matching *_params_init() / *_config_init() function, change the fields you
 *    need, and pass them by pointer. A struct_size the library does not know
 *    is rejected with NCTMC_ERR_INVALID_ARGUMENT.
 *  - Release functions accept NULL and do nothing then.
 *  - Nothing in the library calls exit(), abort() or assert() on user input.
 *
 * Threads. A handle is used by one thread at a time: two threads may call
 * into two different handles concurrently, never into the same one. The
 * exception is a model after it has been created and its weights set: calls
 * that only read it (nctmc_model_forward(), the introspection and
 * read functions) may be made from several threads at once provided each
 * thread passes its own nctmc_context to nctmc_model_forward_ex() — see
 * there. nctmc_model_write_tensor() must not overlap any other use of the
 * same model. The CPU backend's thread pool serialises concurrent callers
 * that share one context.
 *
 * OpenBLAS keeps one process-wide thread setting; every CPU context sets it
 * to 1 and runs its own pool of threads around the matrix products instead,
 * so contexts with different thread counts can live in one process. A host
 * application that raises OpenBLAS's setting again still gets correct results,
 * computed more slowly (OpenBLAS's threads then compete with the pool's).
 */
#ifndef NCTMC_H
#define NCTMC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NCTMC_BUILDING_LIBRARY) && defined(__GNUC__)
#define NCTMC_API __attribute__((visibility("default")))
#else
#define NCTMC_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define NCTMC_VERSION_MAJOR 0
#define NCTMC_VERSION_MINOR 1
#define NCTMC_VERSION_PATCH 0
/** The version as one number, MAJOR*10000 + MINOR*100 + PATCH. */
#define NCTMC_VERSION_NUMBER \
    (NCTMC_VERSION_MAJOR * 10000 + NCTMC_VERSION_MINOR * 100 + NCTMC_VERSION_PATCH)

/** The library's version string, "MAJOR.MINOR.PATCH", of the library that is
 *  actually linked (compare with the macros to detect a header mismatch). */
NCTMC_API const char *nctmc_version(void);

/** The linked library's version as NCTMC_VERSION_NUMBER computes it. */
NCTMC_API int nctmc_version_number(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum nctmc_status {
    NCTMC_OK = 0,
    /** An argument is NULL, out of range, or inconsistent with another. */
    NCTMC_ERR_INVALID_ARGUMENT = 1,
    /** A memory allocation failed, or a requested size overflows. */
    NCTMC_ERR_OUT_OF_MEMORY = 2,
    /** The request names something this build does not provide (for
     *  example a backend that was not compiled in). */
    NCTMC_ERR_UNSUPPORTED = 3,
    /** No tensor, backend or item of that name exists. */
    NCTMC_ERR_NOT_FOUND = 4,
    /** The compute backend reported a failure. */
    NCTMC_ERR_BACKEND = 5
} nctmc_status;

/** A short constant description of a status code ("invalid argument", ...).
 *  Never NULL; unknown codes give "unknown status". */
NCTMC_API const char *nctmc_status_string(nctmc_status status);

/* ------------------------------------------------------------------------ */
/* Context: backend, threads and logging                                    */
/* ------------------------------------------------------------------------ */

typedef struct nctmc_context nctmc_context;

typedef enum nctmc_log_level {
    NCTMC_LOG_DEBUG = 0,
    NCTMC_LOG_INFO = 1,
    NCTMC_LOG_WARN = 2,
    NCTMC_LOG_ERROR = 3
} nctmc_log_level;

/** Receives the library's log messages. The message is valid only during the
 *  call and has no trailing newline. Called on the thread that made the
 *  library call. */
typedef void (*nctmc_log_fn)(nctmc_log_level level, const char *message, void *user_data);

typedef struct nctmc_context_params {
    size_t struct_size;
    /** "cpu", or "auto" (the best backend this build and machine offer).
     *  Default "auto". */
    const char *backend;
    /** Worker threads for the CPU backend; 0 means all online cores. */
    int n_threads;
    /** Log callback, or NULL for silence. */
    nctmc_log_fn log_fn;
    void *log_user_data;
    /** Messages below this level are not delivered. Default NCTMC_LOG_WARN. */
    nctmc_log_level log_level;
} nctmc_context_params;

/** Fills *params with the defaults. Does nothing when params is NULL. */
NCTMC_API void nctmc_context_params_init(nctmc_context_params *params);

/**
 * Creates a context: the compute backend plus its threads.
 * params may be NULL for all defaults. On failure *out is set to NULL and, if
 * params carries a log callback, the reason is logged at NCTMC_LOG_ERROR
 * (there is no handle yet to hold it).
 */
NCTMC_API nctmc_status nctmc_context_create(const nctmc_context_params *params,
                                            nctmc_context **out);

/** Releases a context. Every model created from it must be freed first. */
NCTMC_API void nctmc_context_free(nctmc_context *ctx);

/** The name of the backend in use ("cpu"). NULL-safe: returns "" for NULL. */
NCTMC_API const char *nctmc_context_backend(const nctmc_context *ctx);

/** The number of threads the context computes with; 0 for NULL. */
NCTMC_API int nctmc_context_n_threads(const nctmc_context *ctx);

/** The message of the last failed call on this context ("" if none).
 *  Valid until the next call on the context. */
NCTMC_API const char *nctmc_context_last_error(const nctmc_context *ctx);

/* ------------------------------------------------------------------------ */
/* Model configuration                                                       */
/* ------------------------------------------------------------------------ */

/** The forward (noising) process q_{t|0}(.|x0) = a_t e_{x0} + (1 - a_t) pi. */
typedef enum nctmc_process {
    /** pi uniform over all S states (the paper's main setting). */
    NCTMC_PROCESS_UNIFORM = 0,
    /** pi = e_m with m = S - 1 the mask token (MDLM). Data tokens are
     *  0 .. S-2. The exit rate is exact from the schedule; the rate head is
     *  not used. */
    NCTMC_PROCESS_MASKED = 1,
    /** pi = p_u * Uniform(data tokens) + (1 - p_u) e_m, m = S - 1. */
    NCTMC_PROCESS_MIXTURE = 2
} nctmc_process;

/** The noise schedule a_t, t in [0, 1]. */
typedef enum nctmc_schedule {
    /** a_t = 1 - t (the paper's). */
    NCTMC_SCHEDULE_LINEAR = 0,
    /** a_t = cos(pi t / 2). */
    NCTMC_SCHEDULE_COSINE = 1,
    /** a_t = 1 - (1 - eps) t. */
    NCTMC_SCHEDULE_LOGLINEAR = 2
} nctmc_schedule;

/** The model's hyper-parameters. Fill with nctmc_model_config_init(). */
typedef struct nctmc_model_config {
    size_t struct_size;
    /** S: states per position. For the masked and mixture processes the
     *  last state, S - 1, is the mask token. 2 .. 16777216. */
    int32_t vocab_size;
    /** The embedding and output rows are padded up to a multiple of this
     *  (0 or 1: no padding). Padded rows never receive probability. */
    int32_t vocab_pad_multiple;
    /** L: the longest sequence the model is built for (rotary positions).
     *  Forward calls may pass any length 1 .. seq_len. */
    int32_t seq_len;
    int32_t n_layers;     /**< DiT blocks, >= 1. */
    int32_t d_model;      /**< hidden width d, divisible by n_heads. */
    int32_t n_heads;      /**< attention heads H; d / H must be even. */
    int32_t cond_dim;     /**< conditioning width c (default 128). */
    /** Number of class labels; 0 for an unconditional model. A conditional
     *  model has n_classes + 1 label rows, the last being the null label
     *  used for classifier-free guidance. */
    int32_t n_classes;
    nctmc_process process;
    nctmc_schedule schedule;
    /** p_u of the mixture process, in (0, 1]. Ignored otherwise. */
    float mixture_uniform;
    /** eps of the log-linear schedule, in (0, 1). Ignored otherwise. */
    float schedule_eps;
    /** Seed of the deterministic weight initialisation. */
    uint64_t seed;
} nctmc_model_config;

/** Fills *config with a small uniform-process model: S = 256, L = 256,
 *  6 layers, d = 384, 6 heads, c = 128, no classes, linear schedule,
 *  p_u = 0.1, eps = 1e-3, seed 0. Does nothing when config is NULL. */
NCTMC_API void nctmc_model_config_init(nctmc_model_config *config);

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct nctmc_model nctmc_model;

/**
 * Creates a model on ctx's backend with freshly initialised weights:
 * deterministic for a given config (seed included) on every backend and
 * thread count. Linear weights and embeddings are uniform in
 * +-1/sqrt(fan_in), biases 0, layer-norm weights 1; adaLN modulations, the
 * output projection and the exit-rate head start at 0.
 * The context must outlive the model. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_model_create(nctmc_context *ctx, const nctmc_model_config *config,
                                          nctmc_model **out);

/** Releases a model. */
NCTMC_API void nctmc_model_free(nctmc_model *model);

/** Copies the model's configuration into *config (whose struct_size must be
 *  set, e.g. by nctmc_model_config_init()). */
NCTMC_API nctmc_status nctmc_model_get_config(const nctmc_model *model,
                                              nctmc_model_config *config);

/** The message of the last failed call on this model ("" if none). */
NCTMC_API const char *nctmc_model_last_error(const nctmc_model *model);

/** The total number of scalar parameters; 0 for NULL. */
NCTMC_API int64_t nctmc_model_n_params(const nctmc_model *model);

/** The number of named parameter tensors; 0 for NULL. */
NCTMC_API int32_t nctmc_model_n_tensors(const nctmc_model *model);

#define NCTMC_MAX_DIMS 4

/** Describes one parameter tensor (float32, row-major). */
typedef struct nctmc_tensor_info {
    size_t struct_size;
    /** The tensor's name, as SEDD / MDLM / GIDD checkpoints spell it
     *  ("blocks.0.attn_qkv.weight"). Owned by the model. */
    const char *name;
    int32_t n_dims;
    int64_t shape[NCTMC_MAX_DIMS];
    int64_t n_elements;
} nctmc_tensor_info;

/** Describes tensor number index (0 .. n_tensors - 1), in the model's fixed
 *  order. info->struct_size must be set to sizeof(nctmc_tensor_info). */
NCTMC_API nctmc_status nctmc_model_tensor_info(const nctmc_model *model, int32_t index,
                                               nctmc_tensor_info *info);

/** Finds a tensor by name; NCTMC_ERR_NOT_FOUND if there is none. */
NCTMC_API nctmc_status nctmc_model_find_tensor(const nctmc_model *model, const char *name,
                                               int32_t *index);

/** Copies the named tensor's values into dst, which holds n_elements floats;
 *  n_elements must equal the tensor's element count. */
NCTMC_API nctmc_status nctmc_model_read_tensor(const nctmc_model *model, const char *name,
                                               float *dst, int64_t n_elements);

/** Overwrites the named tensor with src (n_elements floats, which must equal
 *  the tensor's element count). Non-finite values are rejected and the tensor
 *  is left unchanged. */
NCTMC_API nctmc_status nctmc_model_write_tensor(nctmc_model *model, const char *name,
                                                const float *src, int64_t n_elements);

/** One forward evaluation's inputs and outputs. Fill with
 *  nctmc_forward_params_init(). Arrays are host memory, row-major. */
typedef struct nctmc_forward_params {
    size_t struct_size;
    int32_t batch;            /**< B >= 1 sequences. */
    int32_t length;           /**< L, 1 .. config.seq_len. */
    const int32_t *tokens;    /**< [B * L] current states x_t, each in [0, S). */
    const float *times;       /**< [B] times t, each in (0, 1). */
    /** [B] class labels in [0, n_classes], where n_classes is the null
     *  label; NULL means the null label for every sequence. Must be NULL for
     *  an unconditional model. */
    const int32_t *labels;
    /** Out: [B * L] log of the exit rate log(lambda_theta); -inf where the
     *  rate is exactly 0 (masked process, unmasked positions). May be NULL. */
    float *log_rate;
    /** Out: [B * L * S] the jump distribution's log-probabilities
     *  log r_theta(j | x_t) over j != x_t; -inf at j = x_t. May be NULL. */
    float *jump_logprobs;
} nctmc_forward_params;

/** Fills *params with zeros and struct_size. Does nothing for NULL. */
NCTMC_API void nctmc_forward_params_init(nctmc_forward_params *params);

/**
 * Evaluates the model at (x_t, t): per position the exit rate and the jump
 * distribution. Working memory is allocated for the call and released
 * before it returns. Errors are stored in the model.
 */
NCTMC_API nctmc_status nctmc_model_forward(nctmc_model *model, const nctmc_forward_params *params);

/**
 * As nctmc_model_forward(), but computing on `ctx`, which must have the same
 * backend as the model's own context, and storing errors in ctx. The model is
 * only read, so several threads may call this at once on one model, each
 * with its own context.
 */
NCTMC_API nctmc_status nctmc_model_forward_ex(const nctmc_model *model, nctmc_context *ctx,
                                              const nctmc_forward_params *params);

#ifdef __cplusplus
}
#endif

#endif /* NCTMC_H */
