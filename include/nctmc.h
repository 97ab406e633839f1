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
 *    made on (nctmc_context_last_error(), nctmc_model_last_error(),
 *    nctmc_sampler_last_error(), ...; each function says which), and
 *    nctmc_status_string() names the code. A call that succeeds clears that
 *    message to "" — except the calls that take a const nctmc_model *, which
 *    several threads may make at once: they write the model's message only
 *    when they fail (see nctmc_model_last_error()). nctmc_context_create()
 *    has no handle yet: it writes its reason to the caller's
 *    nctmc_context_params.error_buffer. Output arguments are left
 *    untouched on failure, with one exception: a function that creates a
 *    handle into `*out` (or `*model_out`, `*trainer_out`) sets it to NULL
 *    first whenever that pointer is not NULL, so after any failure it is
 *    NULL.
 *  - Versioned structs begin with `size_t struct_size`. Fill them with the
 *    matching nctmc_X_init(&s) macro (which passes sizeof s to
 *    nctmc_X_init_sized()), change the fields you need, and pass them by
 *    pointer. The library accepts a struct from an older header (missing
 *    trailing fields take their defaults) and from a newer one (as long as
 *    the fields it does not know are 0); see docs/api.md, "Compatibility".
 *    A struct_size below the struct's first published size is rejected with
 *    NCTMC_ERR_INVALID_ARGUMENT; non-zero fields the library does not know
 *    with NCTMC_ERR_UNSUPPORTED.
 *  - No bool and no enum types cross the ABI: enumerations are int32_t
 *    typedefs with named constants, flags are int32_t (0 = false, non-zero =
 *    true), and callbacks return int32_t (non-zero = continue, 0 = stop).
 *  - Release functions accept NULL and do nothing then.
 *  - Lifetimes: handles may be freed in any order. Contexts and models are
 *    reference counted: a model holds its context, a sampler holds its model
 *    (and nctmc_sampler_params.ctx when given), a trainer holds its model.
 *    nctmc_context_free() and nctmc_model_free() give up the caller's
 *    handle only; the object itself is destroyed when the last holder
 *    goes. So a sampler or trainer keeps working after its model and
 *    context were freed, and a model after its context was. A handle the
 *    caller has freed must not be passed to the library again.
 *  - Nothing in the library calls exit(), abort() or assert() on user input.
 *
 * Threads. A handle is used by one thread at a time: two threads may call
 * into two different handles concurrently, never into the same one. The
 * exception is a model: the calls that take a const nctmc_model * (the
 * getters and introspection, nctmc_model_read_tensor(), nctmc_model_save(),
 * nctmc_model_convert(), nctmc_model_get_tokenizer(), nctmc_model_forward_ex(),
 * nctmc_sampler_create()), and nctmc_sample() on samplers of the model, may
 * run on several threads at once, each thread computing on its own context
 * (nctmc_model_forward_ex()'s ctx, nctmc_sampler_params.ctx). A call that
 * takes a non-const model (nctmc_model_write_tensor(),
 * nctmc_model_forward(), nctmc_model_set_tokenizer(), nctmc_eval(),
 * nctmc_trainer_create() and its trainer's steps) must not overlap any other
 * use of that model. Reference counts are atomic: nctmc_model_free(),
 * nctmc_context_free(), nctmc_sampler_free() and nctmc_trainer_free() may
 * run while other handles that hold the same model or context are in use
 * on other threads. nctmc_sampler_cancel() may be called from any thread.
 * The CPU backend's thread pool serialises concurrent callers that share one
 * context.
 *
 * OpenBLAS keeps one process-wide thread setting; every CPU context sets it
 * to 1 and runs its own pool of threads around the matrix products instead,
 * so contexts with different thread counts can live in one process. A host
 * application that raises OpenBLAS's setting again still gets correct results,
 * computed more slowly (OpenBLAS's threads then compete with the pool's).
 *
 * Memory limits. OpenBLAS (0.3.21) maps a 128 MiB work buffer for each
 * product running at one moment and, when that mapping fails, retries
 * forever instead of failing. So creating a CPU context checks that one
 * such buffer per pool thread (plus a malloc arena each: 192 MiB a thread)
 * can be mapped, failing with NCTMC_ERR_OUT_OF_MEMORY and a message about
 * the address space if not, and then runs one product on every pool thread
 * at once so the buffers exist before any work. Not covered: several
 * contexts computing at the same moment can need more buffers than each
 * reserved. On Linux libnctmc is not linked to OpenBLAS: it loads it
 * (libopenblas.so.0) when the first CPU context is created, with the
 * loading thread on one CPU, so OpenBLAS's own thread server (which libnctmc
 * never uses, and whose threads would each map a buffer and, under a tight
 * limit, kill the host with SIGINT or hang it at exit) starts no thread.
 * When OpenBLAS cannot be loaded, creating a CPU context fails with
 * NCTMC_ERR_OUT_OF_MEMORY and the loader's reason. (A host that links
 * OpenBLAS itself still starts that server; it should then set
 * OPENBLAS_NUM_THREADS=1 under an address-space limit.)
 */
#ifndef NCTMC_H
#define NCTMC_H

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
#define NCTMC_VERSION_MINOR 7
#define NCTMC_VERSION_PATCH 0
/** The version as one number, MAJOR*10000 + MINOR*100 + PATCH. */
#define NCTMC_VERSION_NUMBER \
    (NCTMC_VERSION_MAJOR * 10000 + NCTMC_VERSION_MINOR * 100 + NCTMC_VERSION_PATCH)

/** The library's version string, "MAJOR.MINOR.PATCH", of the library that is
 *  actually linked (compare with the macros to detect a header mismatch). */
NCTMC_API const char *nctmc_version(void);

/** The linked library's version as NCTMC_VERSION_NUMBER computes it. */
NCTMC_API int32_t nctmc_version_number(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef int32_t nctmc_status;
enum {
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
    NCTMC_ERR_BACKEND = 5,
    /** Reading or writing a file failed (the system's reason is in the
     *  message). No file is left half-written. */
    NCTMC_ERR_IO = 6,
    /** A file is truncated, corrupt, not of the expected kind, or does not
     *  match what it is used with (model, vocabulary, sequence length). */
    NCTMC_ERR_FORMAT = 7,
    /** A callback asked to stop; outputs hold the state reached so far. */
    NCTMC_ERR_CANCELLED = 8,
    /** A training step produced a non-finite loss or gradient; the step was
     *  skipped and the weights are untouched. */
    NCTMC_ERR_NON_FINITE = 9
};

/** A short constant description of a status code ("invalid argument", ...).
 *  Never NULL; unknown codes give "unknown status". */
NCTMC_API const char *nctmc_status_string(nctmc_status status);

/* ------------------------------------------------------------------------ */
/* Versioned structs                                                         */
/* ------------------------------------------------------------------------ */

/*
 * Every struct in this header that begins with `size_t struct_size` is
 * versioned: a later release may append fields to it, never reorder, retype
 * or remove one, and a field it appends means "the default" when it is 0.
 * Each such nctmc_X has
 *
 *     nctmc_status nctmc_X_init_sized(nctmc_X *p, size_t size);
 *     #define nctmc_X_init(p) nctmc_X_init_sized((p), sizeof *(p))
 *
 * nctmc_X_init_sized() writes exactly `size` bytes at p and never more: the
 * defaults of the fields the linked library knows, 0 in any byte past them,
 * and struct_size = size. It returns NCTMC_OK, or NCTMC_ERR_INVALID_ARGUMENT
 * without writing anything when p is NULL or size is below the struct's
 * first published size (the end of its last field in the release that
 * published it: 0.4.0 for nctmc_load_params and nctmc_infill_params, 0.8.0
 * for nctmc_features, 0.2.0 for every other struct here).
 *
 * A call that takes a versioned struct reads and writes only struct_size
 * bytes of it:
 *  - struct_size below the first published size: NCTMC_ERR_INVALID_ARGUMENT;
 *  - a struct from an older header (smaller than the library's): the fields
 *    it lacks take their defaults;
 *  - a struct from a newer header (larger): accepted when every byte past
 *    the fields this library knows is 0, else NCTMC_ERR_UNSUPPORTED with a
 *    message naming the struct and the library's version;
 *  - no versioned struct has trailing padding on a 64-bit target (where
 *    one would have, a field `reserved0` fills it, which the library never
 *    reads): `nctmc_X s = { sizeof s, ... }` zeroes every byte after the
 *    fields it names, so such a struct is accepted by this library and by
 *    later ones, whatever the compiler and the optimisation level;
 *  - a struct the library fills (nctmc_tensor_info, nctmc_dataset_info,
 *    nctmc_train_stats, nctmc_trainer_state, nctmc_eval_result, and the
 *    nctmc_model_get_config() / nctmc_trainer_get_params() outputs) is
 *    written up to min(struct_size, the library's size); struct_size and the
 *    fields the library does not know keep the values they had.
 * docs/api.md, "Compatibility", has the whole policy.
 */

/* ------------------------------------------------------------------------ */
/* What this build can do (no context needed)                               */
/* ------------------------------------------------------------------------ */

/** What the linked library offers on this machine, found without creating
 *  a context (0.8.0). Fill struct_size with nctmc_features_init(). */
typedef struct nctmc_features {
    size_t struct_size;
    /** nctmc_version_number() of the linked library. */
    int32_t version_number;
    /** The n_threads a context created with n_threads = 0 gets: the cores
     *  online now. */
    int32_t default_threads;
    /** 1 when the CPU backend computes with bf16 and int8 weights
     *  (nctmc_model_convert()) on the AVX512-BF16 kernel, 0 on the portable
     *  one (the same results up to rounding;
     *  research/2026-11-26-cpu-speed.md). */
    int32_t cpu_bf16_kernel;
    /** 1 when the CUDA backend module (libnctmc-cuda.so) was found and
     *  loads with this core's backend interface, 0 when not (cuda_detail
     *  says why). Looking loads the module and the CUDA runtime it links
     *  (once per process; they stay loaded), but starts no device. */
    int32_t cuda_module;
    /** 1 when the NVIDIA driver's library (libcuda.so.1) loads. A "cuda"
     *  context needs both this and cuda_module, and a device. */
    int32_t cuda_driver;
    /** 1 when the build has the CPU kernels' per-ISA clones (meson option
     *  vector_clones), 0 when it is portable code only. */
    int32_t vector_clones;
    /** "MAJOR.MINOR.PATCH", as nctmc_version(). Static storage. */
    const char *version;
    /** "avx512-bf16" or "portable": the kernel cpu_bf16_kernel names.
     *  Static storage. */
    const char *cpu_kernel;
    /** The BLAS library's own description of its build (OpenBLAS's
     *  openblas_get_config(): version, target, threading). Static storage
     *  owned by the BLAS library. */
    const char *blas;
    /** Where the CUDA module was found, or why it is not usable (one
     *  line, "" never). */
    char cuda_detail[256];
} nctmc_features;

/** Fills *features with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_features_init_sized(nctmc_features *features, size_t size);
#define nctmc_features_init(p) nctmc_features_init_sized((p), sizeof *(p))

/**
 * Fills *features (struct_size set by nctmc_features_init()) with what this
 * library and machine offer, without a context: NCTMC_OK, or
 * NCTMC_ERR_INVALID_ARGUMENT for NULL or a struct_size below the first
 * published size. Safe to call from any thread at any time.
 */
NCTMC_API nctmc_status nctmc_get_features(nctmc_features *features);

/* ------------------------------------------------------------------------ */
/* Context: backend, threads and logging                                    */
/* ------------------------------------------------------------------------ */

typedef struct nctmc_context nctmc_context;

typedef int32_t nctmc_log_level;
enum {
    NCTMC_LOG_DEBUG = 0,
    NCTMC_LOG_INFO = 1,
    NCTMC_LOG_WARN = 2,
    NCTMC_LOG_ERROR = 3
};

/** Receives the library's log messages. The message is valid only during the
 *  call and has no trailing newline. Called on the thread that made the
 *  library call. */
typedef void (*nctmc_log_fn)(nctmc_log_level level, const char *message, void *user_data);

/**
 * The process-wide log callback (since 0.8.0, NCTMC_1.3): receives the
 * messages of calls made without a context, which have no other channel —
 * the errors of tokenizer and dataset calls given a NULL ctx
 * (nctmc_tokenizer_load(), nctmc_dataset_open(), nctmc_dataset_write(),
 * nctmc_dataset_writer_create(), ...) and of nctmc_context_create() when its
 * params set no log_fn — at or above `level`. Calls with a context log to
 * that context's callback only. fn NULL removes the callback (user_data and
 * level are then ignored). NCTMC_OK; NCTMC_ERR_INVALID_ARGUMENT for a level
 * outside NCTMC_LOG_DEBUG .. NCTMC_LOG_ERROR; NCTMC_ERR_OUT_OF_MEMORY when
 * the system cannot make the mutex that guards it.
 *
 * This is the library's one piece of process-wide mutable state, and the
 * reason for it: a call made without a context has no handle whose callback
 * could receive its message, and an application (or a binding) wants those
 * messages in its own log without passing a context everywhere.
 *
 * Thread-safe: callable from any thread at any time, also from inside the
 * callback. Messages are delivered one at a time (a mutex is held while the
 * callback runs), on the thread that made the library call; the callback
 * may call into the library, but must not wait for another thread that
 * does. When this returns, no other thread is inside the callback it
 * replaced, so that callback's user data may be released (a callback that
 * replaces itself finishes its own call). The callback stays set until
 * replaced (it is never reset at exit).
 */
NCTMC_API nctmc_status nctmc_set_log_callback(nctmc_log_fn fn, void *user_data,
                                              nctmc_log_level level);

typedef struct nctmc_context_params {
    size_t struct_size;
    /** "cpu"; "cuda" (NVIDIA GPU 0: TF32 matrix products, float16
     *  attention, float32 elsewhere); "cuda-bf16" (the same with bfloat16
     *  products and attention, float32 master weights); or "auto": "cuda"
     *  when the NVIDIA driver, the CUDA backend module and a device are
     *  there, otherwise "cpu" (the choice and its reason are logged at
     *  NCTMC_LOG_INFO). The CUDA backend is a separate module,
     *  libnctmc-cuda.so, that the library loads at run time from the path
     *  in $NCTMC_CUDA_MODULE when set, else from its own folder or the
     *  loader's search path (docs/backends.md); libnctmc itself links no
     *  CUDA library.
     *  "cuda" without the module (or in a fully static program) gives
     *  NCTMC_ERR_UNSUPPORTED ("the CUDA backend module ... is not
     *  installed: ..."); with it but without a driver or usable device,
     *  NCTMC_ERR_BACKEND ("no CUDA device: ..."). Default "auto". */
    const char *backend;
    /** Worker threads for the CPU backend; 0 means all the cores this process
     *  may run on (its CPU affinity where the system reports one). */
    int32_t n_threads;
    /** Log callback, or NULL for silence. */
    nctmc_log_fn log_fn;
    void *log_user_data;
    /** Messages below this level are not delivered. Default NCTMC_LOG_WARN. */
    nctmc_log_level log_level;
    /** Where nctmc_context_create() writes why it failed (there is no
     *  context yet to hold the message): error_buffer_size bytes owned by
     *  the caller, which receive the message NUL-terminated and truncated to
     *  fit; "" when the call succeeds. NULL / 0 (default): no buffer. */
    char *error_buffer;
    size_t error_buffer_size;
    /**
     * Allocator hook: both set, or both NULL (default) for the C library's
     * malloc / aligned_alloc / free. alloc_fn returns `size` bytes (never 0)
     * aligned to `alignment` (a power of two: alignof(max_align_t) for host
     * structs and buffers, 64 for the CPU backend's weights, slabs and
     * activation arenas), or NULL, which the library turns into
     * NCTMC_ERR_OUT_OF_MEMORY with nothing leaked; a pointer not aligned
     * as asked counts as NULL (it is handed back to free_fn). free_fn is
     * never given NULL. Nothing is ever reallocated in place.
     *
     * Through it goes the host memory of everything made on behalf of the
     * context: the context itself and its CPU backend (thread-pool
     * bookkeeping, weights, workspaces, activation arenas), models,
     * samplers, trainers, evaluation, the temporary buffers of loading and
     * saving, and tokenizers and datasets created or opened with this
     * context (they keep a copy of the hook; a clone keeps its source's).
     * Not through it: OpenBLAS's own buffers, a mapped model's weights
     * (the file's pages: nctmc_model_load_ex()), the stacks of the worker
     * threads, the CUDA backend and the CUDA runtime and driver, the C
     * library's internal buffers, and tokenizers made without a context
     * (nctmc_tokenizer_create_bytes(), or a NULL ctx).
     *
     * Calls come from the threads that call into the library (never from
     * the CPU backend's worker threads); a hook shared by handles used on
     * several threads must be thread-safe. The hook and alloc_user_data
     * must stay valid until the last handle made with this context (and
     * every tokenizer and dataset holding a copy) is released.
     */
    void *(*alloc_fn)(size_t size, size_t alignment, void *user_data);
    void (*free_fn)(void *ptr, void *user_data);
    void *alloc_user_data;
} nctmc_context_params;

/** Fills *params with the defaults (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_context_params_init_sized(nctmc_context_params *params, size_t size);
#define nctmc_context_params_init(p) nctmc_context_params_init_sized((p), sizeof *(p))

/**
 * Creates a context: the compute backend plus its threads.
 * params may be NULL for all defaults. On failure *out is set to NULL and the
 * reason (there is no handle yet to hold it) is written to
 * params->error_buffer when one is given, and logged at NCTMC_LOG_ERROR to
 * params->log_fn when one is set.
 */
NCTMC_API nctmc_status nctmc_context_create(const nctmc_context_params *params,
                                            nctmc_context **out);

/**
 * Gives up the caller's handle on a context. Models and samplers created on
 * it keep it alive (its backend and threads) until the last of them is freed,
 * in any order; the context is destroyed then. From the moment this returns
 * the log callback is never called again, so its user data may be released
 * (messages of the models and samplers still computing on the context are
 * then only stored in their handles).
 */
NCTMC_API void nctmc_context_free(nctmc_context *ctx);

/** The name of the backend in use ("cpu"). NULL-safe: returns "" for NULL. */
NCTMC_API const char *nctmc_context_backend(const nctmc_context *ctx);

/** The number of threads the context computes with; 0 for NULL. */
NCTMC_API int32_t nctmc_context_n_threads(const nctmc_context *ctx);

/** The message of the last failed call whose errors are stored in this
 *  context ("" if none, or if a later such call succeeded). Valid until the
 *  next call on the context. */
NCTMC_API const char *nctmc_context_last_error(const nctmc_context *ctx);

/* ------------------------------------------------------------------------ */
/* Model configuration                                                       */
/* ------------------------------------------------------------------------ */

/** The forward (noising) process q_{t|0}(.|x0) = a_t e_{x0} + (1 - a_t) pi. */
typedef int32_t nctmc_process;
enum {
    /** pi uniform over all S states (the paper's main setting). */
    NCTMC_PROCESS_UNIFORM = 0,
    /** pi = e_m with m = S - 1 the mask token (MDLM). Data tokens are
     *  0 .. S-2. The exit rate is exact from the schedule; the rate head is
     *  not used. */
    NCTMC_PROCESS_MASKED = 1,
    /** pi = p_u * Uniform(data tokens) + (1 - p_u) e_m, m = S - 1. */
    NCTMC_PROCESS_MIXTURE = 2
};

/** The noise schedule a_t, t in [0, 1]. */
typedef int32_t nctmc_schedule;
enum {
    /** a_t = 1 - t (the paper's). */
    NCTMC_SCHEDULE_LINEAR = 0,
    /** a_t = cos(pi t / 2). */
    NCTMC_SCHEDULE_COSINE = 1,
    /** a_t = 1 - (1 - eps) t. */
    NCTMC_SCHEDULE_LOGLINEAR = 2
};

/** What the time embedding of the network is computed from (the sinusoid
 *  of docs/dev/design.md, "The model", is applied to this value). */
typedef int32_t nctmc_time_input;
enum {
    /** t itself (the only choice of 0.2.0; checkpoints that do not record a
     *  time input use it). Frequencies <= 1 barely separate t = 1e-3 from
     *  t = 1e-2, where the exit rate of a noisy token changes tenfold. */
    NCTMC_TIME_INPUT_T = 0,
    /** The log signal-to-noise ratio log(a_t / (1 - a_t)), clamped to
     *  [-30, 30]: it resolves small t (it moves by 2.3 between t = 1e-3 and
     *  1e-2 under the linear schedule) as finely as the middle of (0, 1). */
    NCTMC_TIME_INPUT_LOG_SNR = 1
};

/** How the exit-rate head's output h becomes the exit rate lambda_theta of
 *  a position (docs/math.md, "Exit-rate links"). The masked process ignores
 *  it: its exit rate is exact from the schedule. */
typedef int32_t nctmc_exit_link;
enum {
    /** log lambda_theta = h + log sigma_t (the only link of 0.2.0;
     *  checkpoints that do not record a link use it). The target of h is
     *  about -log t for a noisy token at small t. */
    NCTMC_EXIT_LINK_SIGMA = 0,
    /** lambda_theta = (1 - nu) lam_c + nu lam_n with nu = sigmoid(h +
     *  logit pi_n): lam_c and lam_n are the exact conditional exit rates of
     *  a clean and of a noisy token, pi_n the context-free probability that
     *  the token is noise. h is the log-likelihood ratio the context adds,
     *  an O(1) target at every t; h = 0 is the best context-free rate. For
     *  the mixture process the rate out of the mask token does not depend
     *  on x0 and is used exactly. */
    NCTMC_EXIT_LINK_NOISE_POSTERIOR = 1,
    /** Since 0.7.0. The exit rate and the jump distribution both come from
     *  one estimate p of the clean token: the output head's logits, a
     *  softmax over the data tokens, and R(i -> j) = sum_k p_k R(i -> j |
     *  x0 = k), the exact conditional rates averaged over p (so lambda is
     *  lam_c at p = e_i and lam_n at p_i = 0). The exit-rate head is unused
     *  (its weights stay in the checkpoint). nctmc_model_forward() reports
     *  the resulting log lambda_theta and jump log-probabilities as for the
     *  other links. */
    NCTMC_EXIT_LINK_DENOISER = 2,
    /** Since 0.8.0, the default of nctmc_model_config_init(): the measured
     *  best link for the configuration's process, chosen when the model is
     *  created — NCTMC_EXIT_LINK_DENOISER for the uniform and mixture
     *  processes, NCTMC_EXIT_LINK_NOISE_POSTERIOR for the masked process
     *  (which ignores the link). A model never holds it:
     *  nctmc_model_get_config() and the checkpoint report the link chosen
     *  (docs/training.md, "Defaults"). */
    NCTMC_EXIT_LINK_AUTO = -1
};

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
    /* ---- appended in 0.3.0 (0 = the 0.2.0 behaviour) ---- */
    /** What the time embedding sees (default NCTMC_TIME_INPUT_LOG_SNR). */
    nctmc_time_input time_input;
    /** The exit-rate link (default NCTMC_EXIT_LINK_AUTO since 0.8.0: the
     *  denoiser link for the uniform and mixture processes; 0.3.0–0.7.0
     *  defaulted to NCTMC_EXIT_LINK_NOISE_POSTERIOR). */
    nctmc_exit_link exit_link;
} nctmc_model_config;

/** Fills *config with a small uniform-process model: S = 256, L = 256,
 *  6 layers, d = 384, 6 heads, c = 128, no classes, linear schedule,
 *  p_u = 0.1, eps = 1e-3, seed 0, log-SNR time input, and the exit link
 *  NCTMC_EXIT_LINK_AUTO (the best measured link for the process chosen at
 *  creation; see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_model_config_init_sized(nctmc_model_config *config, size_t size);
#define nctmc_model_config_init(p) nctmc_model_config_init_sized((p), sizeof *(p))

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
 * The model holds a reference to ctx: the caller may free ctx at any time
 * after this call, before or after the model. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_model_create(nctmc_context *ctx, const nctmc_model_config *config,
                                          nctmc_model **out);

/** Gives up the caller's handle on a model. Samplers and trainers of the
 *  model keep it alive until the last of them is freed, in any order; the
 *  model is destroyed then, releasing its context. */
NCTMC_API void nctmc_model_free(nctmc_model *model);

/** Copies the model's configuration into *config (whose struct_size must be
 *  set by nctmc_model_config_init()). */
NCTMC_API nctmc_status nctmc_model_get_config(const nctmc_model *model,
                                              nctmc_model_config *config);

/**
 * The message of the last failed call whose errors are stored in this model
 * ("" if none). A successful call on the non-const model (write_tensor,
 * forward, set_tokenizer, nctmc_eval(), nctmc_trainer_create()) clears it;
 * a successful const call (tensor_info, find_tensor, read_tensor, save,
 * nctmc_sampler_create() without its own context) leaves it as it was, and a
 * failing one writes it under a lock, so concurrent readers of the model
 * never race on it. Read it after a failed call while no other thread is
 * calling into the model (with several threads, the message may be that of
 * another thread's failure, and a failure on another thread may overwrite
 * it while it is read). Valid until the next failing call on the model.
 */
NCTMC_API const char *nctmc_model_last_error(const nctmc_model *model);

/** L, the longest sequence the model takes (config.seq_len); 0 for NULL. */
NCTMC_API int32_t nctmc_model_seq_len(const nctmc_model *model);

/** S, the states per position (config.vocab_size), the mask token
 *  included; 0 for NULL. */
NCTMC_API int32_t nctmc_model_vocab_size(const nctmc_model *model);

/** The mask token, S - 1, of the masked and mixture processes; -1 for the
 *  uniform process (it has none) and for NULL. The data tokens are then
 *  0 .. S - 2, and the model's tokenizer's vocabulary size equals the mask
 *  token (see nctmc_tokenizer_set_mask_placeholder()). */
NCTMC_API int32_t nctmc_model_mask_token(const nctmc_model *model);

/** The number of class labels (config.n_classes; 0 = unconditional, and for
 *  NULL). Labels are 0 .. n_classes - 1, n_classes being the null label. */
NCTMC_API int32_t nctmc_model_n_classes(const nctmc_model *model);

/** The forward process as its nctmc_process value (NCTMC_PROCESS_UNIFORM,
 *  _MASKED, _MIXTURE); -1 for NULL. */
NCTMC_API int32_t nctmc_model_process(const nctmc_model *model);

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

/** Fills *info with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_tensor_info_init_sized(nctmc_tensor_info *info, size_t size);
#define nctmc_tensor_info_init(p) nctmc_tensor_info_init_sized((p), sizeof *(p))

/** Describes tensor number index (0 .. n_tensors - 1), in the model's fixed
 *  order. Fill *info with nctmc_tensor_info_init() first. */
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
 *  is left unchanged. A mapped model (nctmc_model_load_ex()) first gets its
 *  weights copied out of the map: NCTMC_ERR_OUT_OF_MEMORY, or
 *  NCTMC_ERR_FORMAT for a non-finite value a lazy load did not check, leave
 *  it mapped and unchanged. */
NCTMC_API nctmc_status nctmc_model_write_tensor(nctmc_model *model, const char *name,
                                                const float *src, int64_t n_elements);

/** How a model holds the weights of its linear layers (docs/model.md
 *  "Reduced-precision weights"). */
typedef int32_t nctmc_weight_type;
enum {
    /** float32: every model that can be trained. */
    NCTMC_WEIGHT_F32 = 0,
    /** bfloat16 weights, float32 activations and accumulation. */
    NCTMC_WEIGHT_BF16 = 1,
    /** int8 weights with one float32 scale per output channel (symmetric,
     *  -127 .. 127), float32 activations and accumulation. */
    NCTMC_WEIGHT_INT8 = 2
};

/** The model's weight type (NCTMC_WEIGHT_*); -1 for NULL. */
NCTMC_API nctmc_weight_type nctmc_model_weight_type(const nctmc_model *model);

/**
 * Makes *out, a sampling-only copy of an NCTMC_WEIGHT_F32 model whose
 * linear layers (attention qkv and output, both MLP layers, the output
 * projection) hold `to` (NCTMC_WEIGHT_BF16 or NCTMC_WEIGHT_INT8) weights;
 * embeddings, norms, adaLN, the time MLP, the exit-rate head and every
 * bias stay float32. bf16 rounds each weight to nearest even; int8 stores
 * round(w / s) with s = max|w| / 127 per output row (s = 1 for a zero row).
 * The copy lives on the model's context (whose backend must support
 * reduced weights: the CPU backend does, NCTMC_ERR_UNSUPPORTED otherwise)
 * and carries the tokenizer. It samples, evaluates, runs forward and saves
 * (nctmc_model_save() writes checkpoint format 3, which nctmc_model_load()
 * reads back bit for bit); nctmc_trainer_create() and
 * nctmc_model_write_tensor() of a converted linear weight refuse it with
 * NCTMC_ERR_INVALID_ARGUMENT, and nctmc_model_read_tensor() gives the
 * dequantised values. A const call on `model`: errors go to the model.
 */
NCTMC_API nctmc_status nctmc_model_convert(const nctmc_model *model, nctmc_weight_type to,
                                           nctmc_model **out);

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

/** Fills *params with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_forward_params_init_sized(nctmc_forward_params *params, size_t size);
#define nctmc_forward_params_init(p) nctmc_forward_params_init_sized((p), sizeof *(p))

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

/* ------------------------------------------------------------------------ */
/* Tokenizers                                                                */
/* ------------------------------------------------------------------------ */

/* A tokenizer maps between text (or images) and the model's data tokens.
 * It is stored inside every checkpoint, so a loaded model decodes its own
 * samples without further files. For the masked and mixture processes the
 * model's vocabulary is the tokenizer's plus one (the mask token, S - 1). */
typedef struct nctmc_tokenizer nctmc_tokenizer;

typedef int32_t nctmc_tokenizer_kind;
enum {
    /** One token per byte: vocabulary 256. Encodes any input. */
    NCTMC_TOKENIZER_BYTES = 0,
    /** One token per Unicode character of a fixed alphabet (built from a
     *  corpus, in code-point order). Text must be valid UTF-8. */
    NCTMC_TOKENIZER_CHARS = 1,
    /** Grey-level images: width * height tokens in row-major order, each a
     *  level 0 .. levels - 1 (0 is white, levels - 1 black). Decoding gives
     *  an ASCII picture, one text line per image row. */
    NCTMC_TOKENIZER_IMAGE = 2,
    /** GPT-2 style byte-level BPE (nctmc_tokenizer_load_hf_json(),
     *  nctmc_tokenizer_load_gpt2()): ids equal those of Hugging Face
     *  `tokenizers` for the same files. Encodes any bytes (invalid UTF-8
     *  included) when the vocabulary has a token for each of the 256 bytes,
     *  and decoding gives the bytes back exactly. */
    NCTMC_TOKENIZER_BPE = 3
};

/** Creates the byte tokenizer. Fails only for a NULL out. */
NCTMC_API nctmc_status nctmc_tokenizer_create_bytes(nctmc_tokenizer **out);

/** Creates a character tokenizer whose alphabet is every distinct character
 *  of `corpus` (n_bytes of UTF-8), at most 65536 of them. Invalid UTF-8 is
 *  rejected with NCTMC_ERR_INVALID_ARGUMENT; the reason (with the byte
 *  offset) is logged to ctx, which may be NULL. */
NCTMC_API nctmc_status nctmc_tokenizer_create_chars(nctmc_context *ctx, const char *corpus,
                                                    size_t n_bytes, nctmc_tokenizer **out);

/** Creates an image tokenizer: width * height in 1 .. 65536, levels in
 *  2 .. 65536. Errors are logged to ctx, which may be NULL. */
NCTMC_API nctmc_status nctmc_tokenizer_create_image(nctmc_context *ctx, int32_t width,
                                                    int32_t height, int32_t levels,
                                                    nctmc_tokenizer **out);

/** Makes an independent copy of tok — for example of a model's tokenizer
 *  (nctmc_model_get_tokenizer() gives a const one, while encode and decode
 *  record errors in the handle they are called on). */
NCTMC_API nctmc_status nctmc_tokenizer_clone(const nctmc_tokenizer *tok, nctmc_tokenizer **out);

/** Releases a tokenizer. */
NCTMC_API void nctmc_tokenizer_free(nctmc_tokenizer *tok);

/** The tokenizer's kind; NCTMC_TOKENIZER_BYTES for NULL. */
NCTMC_API nctmc_tokenizer_kind nctmc_tokenizer_get_kind(const nctmc_tokenizer *tok);

/** The number of tokens the tokenizer produces (data tokens), padding of a
 *  BPE tokenizer included (nctmc_tokenizer_pad_vocab()); 0 for NULL. */
NCTMC_API int32_t nctmc_tokenizer_vocab_size(const nctmc_tokenizer *tok);

/** An image tokenizer's shape. NCTMC_ERR_INVALID_ARGUMENT for other kinds.
 *  Any output pointer may be NULL. */
NCTMC_API nctmc_status nctmc_tokenizer_image_shape(const nctmc_tokenizer *tok, int32_t *width,
                                                   int32_t *height, int32_t *levels);

/**
 * Encodes n_bytes of text into tokens. *n_tokens receives the number of
 * tokens the whole text needs, always (also on NCTMC_ERR_INVALID_ARGUMENT
 * for a too small buffer). Pass tokens = NULL, capacity = 0 to only count.
 * A character the alphabet lacks, or invalid UTF-8, is an error naming the
 * byte offset. An image tokenizer encodes text of the form decode() writes.
 * A BPE tokenizer encodes any bytes (an error only for a byte its
 * vocabulary has no token for) into at most n_bytes tokens; with capacity
 * >= n_bytes it makes one pass instead of counting first.
 */
NCTMC_API nctmc_status nctmc_tokenizer_encode(nctmc_tokenizer *tok, const char *text,
                                              size_t n_bytes, int32_t *tokens,
                                              size_t capacity, size_t *n_tokens);

/**
 * Decodes tokens into text, NUL-terminated. *n_bytes receives the length the
 * whole text needs, without the NUL, always. Pass text = NULL, capacity = 0
 * to only measure; capacity must be at least *n_bytes + 1. A token outside
 * the vocabulary is an error naming its index — except the token equal to
 * the vocabulary's size (a masked or mixture model's mask token) while a
 * placeholder is set (nctmc_tokenizer_set_mask_placeholder()).
 */
NCTMC_API nctmc_status nctmc_tokenizer_decode(nctmc_tokenizer *tok, const int32_t *tokens,
                                              size_t n_tokens, char *text, size_t capacity,
                                              size_t *n_bytes);

/**
 * Makes nctmc_tokenizer_decode() render the token equal to the tokenizer's
 * vocabulary size — the mask token of a masked or mixture model, whose data
 * tokens are the tokenizer's — as `text`, so that partial results (the
 * sampling callback's tokens, a cancelled run) decode. text is UTF-8 of at
 * most 256 bytes, copied; "" renders masked positions as nothing. An image
 * tokenizer needs exactly one character (not a newline): a masked pixel is
 * drawn as that character, once per character of a pixel (one for up to 70
 * levels), so rows keep their width. NULL restores the default: that token
 * is an error. The placeholder is for display: encoding it does not give
 * the mask token back, and it is not saved with the tokenizer. Clones (and
 * the copy nctmc_model_set_tokenizer() attaches) carry it.
 */
NCTMC_API nctmc_status nctmc_tokenizer_set_mask_placeholder(nctmc_tokenizer *tok,
                                                            const char *text);

/** The message of the last failed call on this tokenizer ("" if none, or if
 *  a later encode, decode, save or set_mask_placeholder on it succeeded). */
NCTMC_API const char *nctmc_tokenizer_last_error(const nctmc_tokenizer *tok);

/** Writes the tokenizer to a small text file (docs/formats.md), atomically,
 *  so that `nctmc prepare` can hand it to `nctmc train`. */
NCTMC_API nctmc_status nctmc_tokenizer_save(nctmc_tokenizer *tok, const char *path);

/** Reads a tokenizer written by nctmc_tokenizer_save(), checking it fully.
 *  Errors are logged to ctx, which may be NULL. */
NCTMC_API nctmc_status nctmc_tokenizer_load(nctmc_context *ctx, const char *path,
                                            nctmc_tokenizer **out);

/**
 * Loads a byte-level BPE tokenizer from a Hugging Face `tokenizer.json`:
 * model.type "BPE" (vocab, merges as "a b" strings or ["a", "b"] pairs; no
 * dropout, continuing_subword_prefix, end_of_word_suffix, byte_fallback or
 * ignore_merges), a ByteLevel pre_tokenizer (add_prefix_space false, regex
 * on), no normalizer, a ByteLevel or no decoder and post_processor. Every
 * entry of added_tokens (special or not; no lstrip, rstrip or single_word)
 * is matched literally in the text before pre-tokenization, as
 * `tokenizers` does. Ids must be 0 .. n - 1, each once. Anything else is
 * NCTMC_ERR_FORMAT with the reason, logged to ctx (which may be NULL).
 */
NCTMC_API nctmc_status nctmc_tokenizer_load_hf_json(nctmc_context *ctx, const char *path,
                                                    nctmc_tokenizer **out);

/**
 * Loads a byte-level BPE tokenizer from GPT-2's pair of files: vocab.json
 * (token -> id) and merges.txt (one "a b" merge per line by rank, a first
 * line "#version..." skipped). A vocabulary entry that is neither one of
 * the 256 byte symbols nor the result of a merge (GPT-2's <|endoftext|>)
 * is an added token: its text is taken literally and matched before
 * pre-tokenization, as GPT2TokenizerFast does. Errors as
 * nctmc_tokenizer_load_hf_json().
 */
NCTMC_API nctmc_status nctmc_tokenizer_load_gpt2(nctmc_context *ctx, const char *vocab_json_path,
                                                 const char *merges_txt_path,
                                                 nctmc_tokenizer **out);

/**
 * Pads a BPE tokenizer's vocabulary to vocab_size tokens — as the paper
 * pads GPT-2's 50257 to 50304 — so that it equals a model's data tokens
 * (nctmc_model_set_tokenizer()). The ids added have no text: encoding never
 * gives them, decoding renders them as nothing. vocab_size must be at
 * least the token count of the files (a smaller value than the current
 * padding removes padding). NCTMC_ERR_INVALID_ARGUMENT for other kinds.
 * Saved with the tokenizer.
 */
NCTMC_API nctmc_status nctmc_tokenizer_pad_vocab(nctmc_tokenizer *tok, int32_t vocab_size);

/** Attaches a copy of tok to the model (replacing any other). Its vocabulary
 *  must equal the model's data tokens: S for the uniform process, S - 1
 *  otherwise; an image tokenizer's width * height must equal the model's
 *  seq_len (an image is one sequence). tok NULL detaches. */
NCTMC_API nctmc_status nctmc_model_set_tokenizer(nctmc_model *model, const nctmc_tokenizer *tok);

/** The model's tokenizer, or NULL when it has none. Owned by the model;
 *  read-only: to encode or decode, work on a nctmc_tokenizer_clone(), so
 *  that threads sharing the model never share a tokenizer's error buffer. */
NCTMC_API const nctmc_tokenizer *nctmc_model_get_tokenizer(const nctmc_model *model);

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

/* Checkpoints are safetensors files (docs/formats.md): float32 tensors
 * under the names nctmc_model_tensor_info() gives, and in `__metadata__`
 * the model configuration and tokenizer (and, for a trainer checkpoint, the
 * training state, optimizer moments and raw weights). Files are written
 * atomically: a temporary file in the same directory, fsync, rename — an
 * existing file at `path` is replaced only by a complete new one. */

/** Writes the model's weights, configuration and tokenizer to path.
 *  Errors (NCTMC_ERR_IO; NCTMC_ERR_NON_FINITE, with nothing written, when a
 *  weight is NaN or infinite — a diverged run trained in place — since
 *  nctmc_model_load() refuses such a file) are stored in the model. */
NCTMC_API nctmc_status nctmc_model_save(const nctmc_model *model, const char *path);

/**
 * Loads a model from a checkpoint (written by nctmc_model_save() or
 * nctmc_trainer_save(); for the latter the EMA weights, which sampling uses).
 * Everything is checked before use: the header, every tensor's name, dtype,
 * shape and byte range, the configuration, the checksum, and that every
 * value is finite. On the CPU backend the weights are then mapped from the
 * file rather than copied when its layout allows (NCTMC_LOAD_MAP_AUTO of
 * nctmc_model_load_ex(), which says what that means for the file). A
 * checkpoint of bf16 or int8 weights (nctmc_model_convert()) is always
 * copied: the reduced-precision kernels read one packed block with every
 * tensor and scale on a 64-byte boundary, which a file's back-to-back
 * tensors cannot provide (docs/formats.md, "Memory-mapped loading"); a
 * mapped load says so at NCTMC_LOG_INFO.
 * NCTMC_ERR_IO when the file cannot be read, NCTMC_ERR_FORMAT when it cannot
 * be trusted. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_model_load(nctmc_context *ctx, const char *path,
                                        nctmc_model **out);

/** How nctmc_model_load_ex() holds a checkpoint's weights
 *  (docs/formats.md, "Memory-mapped loading"). */
typedef int32_t nctmc_load_mapping;
enum {
    /** Map the file read-only when the context's backend is the CPU and
     *  the file's tensors lie where a model can read them in place (every
     *  file this library writes), after the checks a copying load makes —
     *  the checksum and that every value is finite, read through the page
     *  cache in small pieces, so the process's resident memory does not
     *  grow with the file; otherwise copy. nctmc_model_load()'s way. */
    NCTMC_LOAD_MAP_AUTO = 0,
    /** Map as AUTO does, without the two checks that read every byte:
     *  start-up reads only the header, and pages are read when a forward
     *  pass first needs them. The header, names, shapes, byte ranges and
     *  configuration are still checked; a damaged value shows up as wrong
     *  or non-finite outputs (never as an out-of-range token), and is
     *  refused when the weights are copied for writing. Falls back to a
     *  fully checked copy where AUTO would copy. */
    NCTMC_LOAD_MAP_LAZY = 1,
    /** Always copy the weights into the backend's memory (0.3.0's way). */
    NCTMC_LOAD_COPY = 2
};

typedef struct nctmc_load_params {
    size_t struct_size;
    /** NCTMC_LOAD_MAP_AUTO (default), _MAP_LAZY or NCTMC_LOAD_COPY. */
    nctmc_load_mapping mapping;
    /** Reserved (0.8.0): always 0, as a brace initialiser or
     *  nctmc_load_params_init() leaves it. It names what was the struct's trailing
     *  padding, so that `{ sizeof s, ... }` zeroes it; the library never
     *  reads it (in a program built against an older header these bytes
     *  were padding and may hold anything), and no later release gives it
     *  a meaning. */
    int32_t reserved0;
    /* ---- appended in 0.8.0 (a library before it leaves them 0) ---- */
    /** Called on the loading thread while the checkpoint is read and
     *  checked, with (units done, units in all): the first call has done 0
     *  (before the checksum pass), done never decreases, and the last call
     *  of a load that succeeds has done == total. A unit is one tensor of
     *  the file read through for the checksum, or one tensor of the model
     *  read and checked (a lazily mapped load, which reads neither, counts
     *  them in one call). Return 0 to stop (non-zero to go on), as for
     *  nctmc_eval_params.progress: the call then returns NCTMC_ERR_CANCELLED
     *  with *out NULL and nothing of the load kept. May be NULL (default). */
    int32_t (*progress)(int64_t done, int64_t total, void *user_data);
    void *user_data;
} nctmc_load_params;

/** Fills *params with the defaults (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_load_params_init_sized(nctmc_load_params *params, size_t size);
#define nctmc_load_params_init(p) nctmc_load_params_init_sized((p), sizeof *(p))

/**
 * As nctmc_model_load(), choosing how the weights are held (params NULL:
 * the defaults, which is nctmc_model_load()). A mapped model's weights are
 * the file's pages, shared with every other process that maps or reads the
 * file, read from disk when first used and not allocated through the
 * context's allocator. The model keeps the map until it is destroyed; the
 * file may be renamed over (as every writer of this library does) or
 * unlinked meanwhile, but must not be truncated or rewritten in place: a
 * truncated file makes the next read of a lost page kill the process
 * (SIGBUS), a rewritten one changes the weights. Whatever writes a mapped
 * model's weights (nctmc_model_write_tensor(), nctmc_trainer_create(),
 * nctmc_trainer_copy_weights() into it) first copies them into the
 * backend's memory, checking every value, and the map is released. An
 * unknown mapping is NCTMC_ERR_INVALID_ARGUMENT. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_model_load_ex(nctmc_context *ctx, const char *path,
                                           const nctmc_load_params *params,
                                           nctmc_model **out);

/** 1 when the model's weights are a map of its checkpoint (see
 *  nctmc_model_load_ex()), 0 otherwise and for NULL. */
NCTMC_API int32_t nctmc_model_is_mapped(const nctmc_model *model);

/**
 * As nctmc_model_load(), from a checkpoint's `size` bytes at `data` (for
 * example a file embedded in the program). The buffer is only read, and
 * only during the call: the model keeps no pointer into it. The same checks
 * as for a file; a truncated buffer is NCTMC_ERR_FORMAT.
 */
NCTMC_API nctmc_status nctmc_model_load_memory(nctmc_context *ctx, const void *data,
                                               size_t size, nctmc_model **out);

/**
 * The caller's I/O for a checkpoint: a byte range of `size` bytes read by
 * position (pread-style), so that a checkpoint can be an entry of an archive
 * or a pack file, compressed or not. Fill with nctmc_reader_init().
 */
typedef struct nctmc_reader {
    size_t struct_size;
    /** The checkpoint's total size in bytes, >= 0. */
    int64_t size;
    /** Copies up to n bytes starting at `offset` (0 <= offset < size) into
     *  dst and returns how many it copied (0 .. n; fewer than n is fine,
     *  the library asks again for the rest; 0 means the data ends there),
     *  or a negative number for an I/O error. Called only during the
     *  loading call, on its thread, with n <= 1 GiB. */
    int64_t (*read_at)(void *user_data, void *dst, size_t n, int64_t offset);
    void *user_data;
} nctmc_reader;

/** Fills the first `size` bytes of *reader with zeros and sets struct_size
 *  to `size`; use the macro nctmc_reader_init(). NCTMC_ERR_INVALID_ARGUMENT
 *  for NULL or a size too small to hold struct_size. */
NCTMC_API nctmc_status nctmc_reader_init_sized(nctmc_reader *reader, size_t size);
#define nctmc_reader_init(reader) nctmc_reader_init_sized((reader), sizeof *(reader))

/**
 * As nctmc_model_load(), reading through `reader` (its struct is copied;
 * read_at is called only during this call). A read_at that fails (returns
 * < 0) gives NCTMC_ERR_IO; one that returns more than asked NCTMC_ERR_IO;
 * data that ends before `size` (a size that lies) or that does not hold a
 * valid checkpoint NCTMC_ERR_FORMAT. A struct_size smaller than this
 * release's nctmc_reader is NCTMC_ERR_INVALID_ARGUMENT; a larger one is
 * accepted when its unknown trailing bytes are zero, else
 * NCTMC_ERR_UNSUPPORTED.
 */
NCTMC_API nctmc_status nctmc_model_load_reader(nctmc_context *ctx, const nctmc_reader *reader,
                                               nctmc_model **out);

/**
 * Writes size bytes to path the way the library writes its own files:
 * atomically (a temporary file "<path>.tmp-XXXXXX" beside the target, fsync,
 * rename, fsync of the directory), so `path` holds the old file or the
 * complete new one. The rules every writer of the library follows:
 *  - a symbolic link is written through: its target (which must be an
 *    existing regular file) is replaced, the link stays;
 *  - anything else that is not a regular file — a directory, FIFO, device,
 *    socket, or a link to one or to nothing — is refused (NCTMC_ERR_IO);
 *  - temporary files of the same target left by a writer that died are
 *    removed (only unlocked regular files of ours, older than the new one).
 * For embedders who write their own outputs (the nctmc tool's PNG files).
 * Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_write_file(nctmc_context *ctx, const char *path, const void *data,
                                        size_t size);

/* ------------------------------------------------------------------------ */
/* Token datasets                                                            */
/* ------------------------------------------------------------------------ */

/* A token shard (docs/formats.md) holds either one token stream (training
 * reads windows of the model's length from it) or fixed-length sequences,
 * optionally with one class label per sequence. */
typedef struct nctmc_dataset nctmc_dataset;

typedef struct nctmc_dataset_info {
    size_t struct_size;
    int32_t vocab_size;     /**< tokens are in [0, vocab_size) */
    int32_t seq_len;        /**< fixed sequence length, or 0 for a stream */
    int32_t n_classes;      /**< labels are in [0, n_classes); 0: no labels */
    int64_t n_tokens;
    int64_t n_sequences;    /**< n_tokens / seq_len, or 0 for a stream */
    /** CRC-32 (zlib polynomial) of the shard's body, as in its header
     *  (docs/formats.md): what a manifest of the shard records. Appended
     *  in 0.4.0. */
    uint32_t checksum;
    /** Reserved (0.8.0): always 0, as a brace initialiser or
     *  nctmc_dataset_info_init() leaves it. It names what was the struct's trailing
     *  padding, so that `{ sizeof s, ... }` zeroes it; the library never
     *  reads it (in a program built against an older header these bytes
     *  were padding and may hold anything), and no later release gives it
     *  a meaning. */
    int32_t reserved0;
} nctmc_dataset_info;

/** Fills *info with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_dataset_info_init_sized(nctmc_dataset_info *info, size_t size);
#define nctmc_dataset_info_init(p) nctmc_dataset_info_init_sized((p), sizeof *(p))

/**
 * Writes a shard atomically. tokens: n_tokens values in [0, vocab_size).
 * seq_len 0 makes a stream; otherwise n_tokens must be a multiple of it.
 * labels: one per sequence in [0, n_classes), or NULL with n_classes 0.
 * Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_dataset_write(nctmc_context *ctx, const char *path,
                                           const int32_t *tokens, int64_t n_tokens,
                                           int32_t vocab_size, int32_t seq_len,
                                           const int32_t *labels, int32_t n_classes);

/** Opens a shard, checking its header, size and checksum, and that every
 *  token and label is in range. Errors are stored in ctx. The file is
 *  mapped read-only (read into memory only where mapping fails), so a shard
 *  larger than memory can be opened; the checks read it once and hand the
 *  pages back. The file must not be changed in place while open (the
 *  library's writers replace files by renaming, which is safe). */
NCTMC_API nctmc_status nctmc_dataset_open(nctmc_context *ctx, const char *path,
                                          nctmc_dataset **out);

/** Releases a dataset. */
NCTMC_API void nctmc_dataset_free(nctmc_dataset *ds);

/* A streaming writer makes a shard of any length in fixed memory: tokens
 * are appended in pieces and the file appears (atomically, like
 * nctmc_dataset_write()) only at the commit. Shards without labels. */
typedef struct nctmc_dataset_writer nctmc_dataset_writer;

/**
 * Starts writing the shard `path` (vocabulary vocab_size >= 1; seq_len 0
 * for a stream, else the total must be a multiple of it at the commit).
 * Nothing appears at path until the commit. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_dataset_writer_create(nctmc_context *ctx, const char *path,
                                                   int32_t vocab_size, int32_t seq_len,
                                                   nctmc_dataset_writer **out);

/** Appends n tokens in [0, vocab_size); a token out of range appends
 *  nothing of this call and is NCTMC_ERR_INVALID_ARGUMENT. */
NCTMC_API nctmc_status nctmc_dataset_writer_append(nctmc_dataset_writer *w,
                                                   const int32_t *tokens, int64_t n);

/**
 * Completes the shard and renames it into place. Refused (nothing written)
 * when no token was appended or the count is not whole sequences. info,
 * when not NULL (struct_size set), receives what was written, the checksum
 * included. After a commit, successful or not, only free is allowed.
 */
NCTMC_API nctmc_status nctmc_dataset_writer_commit(nctmc_dataset_writer *w,
                                                   nctmc_dataset_info *info);

/** Releases the writer; a shard not committed is removed (never appears). */
NCTMC_API void nctmc_dataset_writer_free(nctmc_dataset_writer *w);

/** The message of the writer's last failed call ("" if none). */
NCTMC_API const char *nctmc_dataset_writer_last_error(const nctmc_dataset_writer *w);

/** Describes the dataset (info->struct_size must be set). */
NCTMC_API nctmc_status nctmc_dataset_get_info(const nctmc_dataset *ds, nctmc_dataset_info *info);

/** Copies tokens [first, first + count) into dst. */
NCTMC_API nctmc_status nctmc_dataset_read_tokens(nctmc_dataset *ds, int64_t first, int64_t count,
                                                 int32_t *dst);

/** The label of sequence `index`; NCTMC_ERR_INVALID_ARGUMENT when the
 *  dataset has no labels or the index is out of range. */
NCTMC_API nctmc_status nctmc_dataset_read_label(nctmc_dataset *ds, int64_t index,
                                                int32_t *label);

/** The message of the last failed call on this dataset ("" if none). */
NCTMC_API const char *nctmc_dataset_last_error(const nctmc_dataset *ds);

/* ------------------------------------------------------------------------ */
/* Data-parallel training: the communicator                                  */
/* ------------------------------------------------------------------------ */

/* The processes (ranks) of a data-parallel training job and the engine
 * they talk through (docs/distributed.md). A job of one process is the
 * world of one: no engine, nothing to load. A larger one uses MPI through
 * the module libnctmc-mpi.so, which libnctmc loads at run time from its own
 * folder (or from the path in $NCTMC_MPI_MODULE), so that libnctmc itself
 * links no MPI library and this header needs no mpi.h. Attach a
 * communicator to a trainer with nctmc_trainer_params.comm. The
 * communicator must outlive every trainer that uses it. */
typedef struct nctmc_comm nctmc_comm;

/**
 * Makes the communicator of the job the launcher started, from its
 * environment: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE / _RANK), PMI
 * (PMI_SIZE / PMI_RANK), Slurm's srun (SLURM_NTASKS / SLURM_PROCID), or a
 * torchrun-style launcher (WORLD_SIZE / RANK), checked in that order. No
 * such variable, or a job of one, gives the world of one. A larger job
 * initialises MPI (MPI_Init_thread, which nctmc_comm_free() finalises) and
 * checks that MPI sees the rank and size the launcher set. A torchrun-style
 * job of several processes loads the NCCL engine (libnctmc-nccl.so, GPU
 * LOCAL_RANK, a rendezvous at MASTER_ADDR / MASTER_PORT; docs/distributed.md);
 * a build without it gives NCTMC_ERR_UNSUPPORTED. Collective: every rank
 * calls it. It also reads how trainers sum their gradients:
 * NCTMC_COMM_OVERLAP unset or 0 (the default) sums them after the backward
 * pass, 1 overlaps the sum with it bucket by bucket (the same bits either
 * way; docs/distributed.md), and NCTMC_COMM_BUCKET_BYTES (1 .. 2^30) sets
 * the smallest such bucket; any other value of either gives
 * NCTMC_ERR_INVALID_ARGUMENT (nctmc_comm_from_mpi() likewise). On failure
 * *out is NULL and the reason is written to error_buffer (error_size
 * bytes; may be NULL).
 */
NCTMC_API nctmc_status nctmc_comm_from_env(nctmc_comm **out, char *error_buffer,
                                           size_t error_size);

/**
 * Makes a communicator over an existing MPI communicator, passed by
 * pointer (`MPI_Comm c; nctmc_comm_from_mpi(&c, ...)`), which is
 * duplicated (the library's messages never meet the caller's). MPI must be
 * initialised by the caller, and stays so after nctmc_comm_free(); the
 * program's MPI must be the one libnctmc-mpi.so was built with. Collective
 * over that communicator. Errors as nctmc_comm_from_env().
 */
NCTMC_API nctmc_status nctmc_comm_from_mpi(const void *mpi_comm, nctmc_comm **out,
                                           char *error_buffer, size_t error_size);

/** This process's rank, 0 .. size - 1 (0 for NULL). */
NCTMC_API int32_t nctmc_comm_rank(const nctmc_comm *comm);

/** The number of ranks (1 for NULL). */
NCTMC_API int32_t nctmc_comm_size(const nctmc_comm *comm);

/** The engine's name: "mpi", or "none" for the world of one (and NULL). A
 *  constant string. */
NCTMC_API const char *nctmc_comm_engine(const nctmc_comm *comm);

/** Copies `bytes` bytes at buf on rank `root` into buf on every rank (for
 *  decisions the ranks must take alike: when to stop, what to load).
 *  Collective. Errors are stored in comm. */
NCTMC_API nctmc_status nctmc_comm_broadcast(nctmc_comm *comm, void *buf, int64_t bytes,
                                            int32_t root);

/** Waits until every rank has called it. Errors are stored in comm. */
NCTMC_API nctmc_status nctmc_comm_barrier(nctmc_comm *comm);

/** Ends the processes of every rank with exit status `code` (MPI_Abort):
 *  what a rank calls after a failure the others cannot see, so that none
 *  of them waits for it for ever. Does nothing for the world of one and
 *  NULL (the caller exits on its own). */
NCTMC_API void nctmc_comm_abort(nctmc_comm *comm, int32_t code);

/** The message of the last failed call on comm ("" if none). */
NCTMC_API const char *nctmc_comm_last_error(const nctmc_comm *comm);

/** Releases comm (NULL is allowed); finalises MPI if nctmc_comm_from_env()
 *  initialised it. Collective for a job of several ranks. */
NCTMC_API void nctmc_comm_free(nctmc_comm *comm);

/* ------------------------------------------------------------------------ */
/* Training                                                                  */
/* ------------------------------------------------------------------------ */

/* A trainer updates a model's weights in place with the L_cond loss and
 * AdamW. It owns the gradients, the optimizer moments, the EMA of the
 * weights and an activation arena sized for (batch_size, seq_len): no
 * allocation happens per step. Every random choice (times, noise, label
 * dropout, data order) is a Philox stream keyed by the seed and the step,
 * so a run is reproducible bit for bit, also across save and resume. */
typedef struct nctmc_trainer nctmc_trainer;

/** How the trainer draws the time t of each sequence. Every mode covers
 *  (eps, 1 - eps) with one stratum per sequence of the batch (a shared
 *  random offset, so the batch is a low-discrepancy cover) and estimates
 *  the same objective, the mean of L_cond over t ~ U(eps, 1 - eps): a mode
 *  other than UNIFORM draws t from a density p(t) through its inverse CDF
 *  and weights sequence b's loss and gradients by
 *  w(t_b) = 1 / ((1 - 2 eps) p(t_b)), whose mean under p is 1
 *  (importance sampling; docs/training.md). */
typedef int32_t nctmc_time_sampling;
enum {
    /** t uniform over (eps, 1 - eps), weight 1 (the paper's). */
    NCTMC_TIME_SAMPLING_UNIFORM = 0,
    /** logit t uniform over (logit eps, logit(1 - eps)): p(t) is
     *  proportional to 1 / (t (1 - t)), which puts 17% of the batch below
     *  t = 0.01 (uniform: 0.9%) and as much above 0.99. Under the linear
     *  schedule this is uniform in log-SNR log(a_t / (1 - a_t)). Weights
     *  from 0.014 at t = eps to 3.46 at t = 1/2 (eps = 1e-3). */
    NCTMC_TIME_SAMPLING_LOGIT = 1,
    /** p(t) proportional to 1 / sqrt(t): the density that minimises the
     *  estimator's variance when the loss's second moment grows like 1 / t
     *  at small t. 7% of the batch below t = 0.01. Weights from 0.061 at
     *  t = eps to 1.94 near t = 1 (eps = 1e-3). */
    NCTMC_TIME_SAMPLING_SQRT = 2
};

typedef struct nctmc_trainer_params {
    size_t struct_size;
    int32_t batch_size;       /**< sequences per step (default 8) */
    int32_t seq_len;          /**< tokens per sequence; 0 = the model's */
    float learning_rate;      /**< peak rate (default 3e-4) */
    /** The cosine decays to this fraction of the peak (default 0.1); 1
     *  keeps the rate constant after the warm-up. */
    float min_lr_ratio;
    int64_t warmup_steps;     /**< linear warm-up from 0 (default 100) */
    int64_t total_steps;      /**< end of the cosine decay (default 10000) */
    float beta1;              /**< AdamW (default 0.9) */
    float beta2;              /**< AdamW (default 0.999) */
    float adam_eps;           /**< AdamW (default 1e-8) */
    float weight_decay;       /**< decoupled (default 0.0) */
    float grad_clip;          /**< global gradient-norm limit; 0 = off (default 1) */
    float ema_decay;          /**< EMA of the weights; 0 = none (default 0.999) */
    float time_eps;           /**< t ~ U(eps, 1 - eps) (default 1e-3) */
    /** Probability of replacing a label by the null label, for
     *  classifier-free guidance (default 0.1; ignored without classes). */
    float label_dropout;
    uint64_t seed;            /**< default 0 */
    /** How t is drawn (default NCTMC_TIME_SAMPLING_SQRT since 0.8.0, the
     *  best measured density for every process; 0.2.0–0.7.0 defaulted to
     *  NCTMC_TIME_SAMPLING_UNIFORM, which still gives the same draws bit
     *  for bit as a library without this field when set explicitly). The
     *  loss that nctmc_train_stats reports is then the weighted mean, an
     *  estimate of the same objective. Saved in trainer checkpoints (one
     *  without it was trained with UNIFORM and resumes so). */
    nctmc_time_sampling time_sampling;
    /** Activation recomputation (flag; default 0, appended in 0.5.0): keep
     *  only each block's output between the forward and the backward pass,
     *  and run each block's forward again right before its backward. The
     *  same gradients and weights bit for bit (the backends are
     *  deterministic), about a third more computation per step, and a
     *  fraction of the activation memory (for paper-small, ~1/10 of the
     *  per-block activations; the logits [batch x length x vocab] remain),
     *  so a larger batch fits on a GPU or in RAM. Not saved in trainer
     *  checkpoints: it changes how a step runs, not what it computes. */
    int32_t activation_recompute;
    /** Gradient accumulation (default 1, appended after 0.7.0): micro-batches
     *  of batch_size sequences per optimizer step, in [1, 4096] (0 = 1). A step
     *  then takes batch_size x accumulation sequences (the global batch;
     *  nctmc_trainer_step() reads that many) but holds the activations of
     *  only batch_size at a time. It computes the step of the global batch:
     *  sequence r of the global batch gets the time, noise, label dropout
     *  and data position a trainer with batch_size x accumulation and
     *  accumulation 1 draws for r; the loss is the mean over the global
     *  batch; the gradient is the sum of the micro-batches' gradients, added
     *  in order, times 1/accumulation; clipping uses its norm. The result
     *  equals the one big batch up to float rounding, and is bit for bit
     *  the defined sum on every backend and thread count (docs/training.md).
     *  Saved in trainer checkpoints. */
    int32_t accumulation;
    /** Data-parallel training (default NULL, the world of one; appended
     *  after 0.7.0): the communicator of the job's ranks. Every rank creates
     *  (or resumes) its trainer with the same parameters and this field set
     *  (the creation is collective; ranks that disagree on the library
     *  version, the model's configuration or initial weights, the
     *  parameters or the seed refuse, naming the difference). With N ranks
     *  a step's global batch is N x batch_size x accumulation sequences:
     *  rank r takes sequences r x batch_size x accumulation onwards of it,
     *  with the draws one process would make for them, and the ranks' summed
     *  gradients are added in rank order. N ranks with accumulation 1 equal,
     *  bit for bit, one process with accumulation N and the same batch_size
     *  (docs/distributed.md). Every step is collective. Not saved in
     *  checkpoints: a checkpoint saved by N ranks resumes on any number. */
    nctmc_comm *comm;
} nctmc_trainer_params;

/** Fills *params with the defaults listed above (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_trainer_params_init_sized(nctmc_trainer_params *params, size_t size);
#define nctmc_trainer_params_init(p) nctmc_trainer_params_init_sized((p), sizeof *(p))

/** What one step did. Fill struct_size (nctmc_train_stats_init()). */
typedef struct nctmc_train_stats {
    size_t struct_size;
    int64_t step;             /**< steps taken so far, this one included */
    double loss;              /**< mean L_cond per position */
    double grad_norm;         /**< global gradient norm before clipping */
    double learning_rate;     /**< the rate this step used */
    double mean_log_rate;     /**< mean log lambda_theta over the batch's
                                   positions with a non-zero rate */
    int32_t skipped;          /**< 1: non-finite loss or gradient, no update; else 0 */
    int64_t n_skipped;        /**< skipped steps so far */
    /** Data-parallel runs (appended after 0.7.0): the seconds this step
     *  spent on summing the gradients over the ranks that its backward pass
     *  did not hide (waiting, copying, moving the sums along); 0 for one
     *  process. By default the sum runs after the backward pass, and this
     *  is its whole time; with NCTMC_COMM_OVERLAP=1 in the environment it
     *  overlaps the backward pass, and this is the part left exposed
     *  (docs/distributed.md). */
    double comm_seconds;
} nctmc_train_stats;

/** Fills *stats with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_train_stats_init_sized(nctmc_train_stats *stats, size_t size);
#define nctmc_train_stats_init(p) nctmc_train_stats_init_sized((p), sizeof *(p))

/** The position of a run, as saved in trainer checkpoints. */
typedef struct nctmc_trainer_state {
    size_t struct_size;
    int64_t step;             /**< steps taken (skipped ones included) */
    int64_t optimizer_steps;  /**< updates applied (AdamW's bias correction) */
    int64_t data_position;    /**< sequences drawn by nctmc_trainer_step_dataset() */
    int64_t n_skipped;
    uint64_t seed;
} nctmc_trainer_state;

/** Fills *state with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_trainer_state_init_sized(nctmc_trainer_state *state, size_t size);
#define nctmc_trainer_state_init(p) nctmc_trainer_state_init_sized((p), sizeof *(p))

/**
 * Creates a trainer for `model`, which it updates in place (the model must
 * not be used by anything else during a step). A mapped model
 * (nctmc_model_load_ex()) first gets its weights copied out of the map, as
 * for nctmc_model_write_tensor(); the copy stays if a later step of the
 * creation fails. The trainer holds a reference to the model: the caller
 * may free the model before or after the trainer. Errors are stored in the
 * model; NCTMC_ERR_OUT_OF_MEMORY's message gives the bytes the trainer asked
 * for, as nctmc_trainer_memory() counts them.
 */
NCTMC_API nctmc_status nctmc_trainer_create(nctmc_model *model,
                                            const nctmc_trainer_params *params,
                                            nctmc_trainer **out);

/**
 * The memory nctmc_trainer_create() with the same model and params would
 * allocate and the trainer then holds until nctmc_trainer_free(), without
 * allocating anything (since 0.8.0, NCTMC_1.3); counted by the code that
 * allocates, as for nctmc_sampler_memory():
 *   *backend_bytes: the gradient and AdamW slabs (and the EMA slab when
 *     ema_decay > 0), each the size of the model's weights, and the
 *     training workspace (every block's activations, or with
 *     activation_recompute the residual stream and one block's), each
 *     request rounded up to 64 bytes;
 *   *host_bytes: the trainer's struct, the workspace's tables and the batch
 *     staging buffers, through the context's allocator hook.
 * Not counted: the model's own weights; for a mapped model
 * (nctmc_model_load_ex()) the copy of the weights that
 * nctmc_trainer_create() first makes (owned by the model, as large as its
 * weights); and a temporary host copy
 * of the weights that creation holds for a moment to start the EMA (when
 * ema_decay > 0). Either pointer may be NULL; both are set to 0 on failure.
 * The same checks and errors as nctmc_trainer_create(), stored in the
 * model (a const call: a success leaves the model's message alone).
 */
NCTMC_API nctmc_status nctmc_trainer_memory(const nctmc_model *model,
                                            const nctmc_trainer_params *params,
                                            size_t *backend_bytes, size_t *host_bytes);

/** Releases a trainer and its reference to the model (which is destroyed
 *  now if the caller has freed it and nothing else holds it). */
NCTMC_API void nctmc_trainer_free(nctmc_trainer *trainer);

/**
 * One training step on a batch given by the caller: tokens [batch_size *
 * seq_len] clean data tokens (for the masked and mixture processes the mask
 * token is not data), labels [batch_size] in [0, n_classes) or NULL
 * (unconditional model, or all null labels). stats may be NULL.
 * NCTMC_ERR_NON_FINITE: the step was skipped, weights untouched, the step
 * counter advanced (stats says so).
 */
NCTMC_API nctmc_status nctmc_trainer_step(nctmc_trainer *trainer, const int32_t *tokens,
                                          const int32_t *labels, nctmc_train_stats *stats);

/**
 * One training step on the next batch of `ds`, chosen by the seed and the
 * trainer's data position (random windows of a stream; random sequences,
 * with their labels, of a sequence dataset). The dataset's vocabulary must
 * be the model's data tokens and its sequences (if fixed) the trainer's
 * seq_len.
 */
NCTMC_API nctmc_status nctmc_trainer_step_dataset(nctmc_trainer *trainer, nctmc_dataset *ds,
                                                  nctmc_train_stats *stats);

/** The trainer's position (state->struct_size must be set). */
NCTMC_API nctmc_status nctmc_trainer_get_state(const nctmc_trainer *trainer,
                                               nctmc_trainer_state *state);

/** The trainer's parameters (params->struct_size must be set). */
NCTMC_API nctmc_status nctmc_trainer_get_params(const nctmc_trainer *trainer,
                                                nctmc_trainer_params *params);

/** Copies the trainer's weights into dst, a model of the same configuration:
 *  the EMA when ema is non-zero (an error if the trainer keeps none), else
 *  the raw weights. */
NCTMC_API nctmc_status nctmc_trainer_copy_weights(nctmc_trainer *trainer, nctmc_model *dst,
                                                  int32_t ema);

/**
 * Writes a resumable checkpoint atomically: the EMA weights under the
 * standard names (what nctmc_model_load() reads), the raw weights and both
 * AdamW moments under "trainer." names, and the configuration, tokenizer,
 * trainer parameters and state in the metadata. A run whose weights or
 * moments have become non-finite is not saved (NCTMC_ERR_NON_FINITE, the
 * file at path untouched): the loader would refuse such a file.
 */
NCTMC_API nctmc_status nctmc_trainer_save(nctmc_trainer *trainer, const char *path);

/**
 * Resumes from a nctmc_trainer_save() checkpoint: creates the model (raw
 * weights) on ctx and a trainer whose next step is exactly the step the
 * saved run would have taken next. params NULL keeps the saved parameters;
 * otherwise batch_size and seq_len must match them. The caller owns one
 * handle on the model (free it with nctmc_model_free()) and the trainer
 * holds another, like nctmc_trainer_create(): free the two, and ctx, in any
 * order. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_trainer_resume(nctmc_context *ctx, const char *path,
                                            const nctmc_trainer_params *params,
                                            nctmc_model **model_out,
                                            nctmc_trainer **trainer_out);

/**
 * Reads the trainer parameters and state saved in a nctmc_trainer_save()
 * checkpoint without creating a model or a trainer: only the file's header
 * is read, so inspecting a checkpoint costs no more memory than its
 * metadata, whatever batch size it names. Both outputs may be NULL (their
 * struct_size must be set otherwise). NCTMC_ERR_NOT_FOUND for a model-only
 * checkpoint, NCTMC_ERR_FORMAT when the saved values are not ones
 * nctmc_trainer_resume() would accept. Errors are stored in ctx.
 */
NCTMC_API nctmc_status nctmc_trainer_inspect(nctmc_context *ctx, const char *path,
                                             nctmc_trainer_params *params,
                                             nctmc_trainer_state *state);

/** The message of the last failed call on this trainer ("" if none, or if
 *  a later call on it succeeded). */
NCTMC_API const char *nctmc_trainer_last_error(const nctmc_trainer *trainer);

/* ------------------------------------------------------------------------ */
/* Presets                                                                   */
/* ------------------------------------------------------------------------ */

/* A preset is a named recipe: a model configuration, trainer parameters and
 * the backend to run them on. docs/training.md lists every preset and the
 * fields it sets:
 *   "paper"      the paper's small model and training recipe (a 12-layer,
 *                d 768 DiT over the GPT-2 vocabulary, 512 tokens, uniform
 *                process, linear schedule; AdamW 3e-4, 2500 warm-up steps
 *                then a constant rate, EMA 0.9999, batch 512), meant for
 *                "cuda-bf16";
 *   "cpu-small"  a model and recipe that learn something useful in minutes
 *                on two CPU cores (chosen by measurement on the digits
 *                data), meant for "cpu". */

/** The name of preset number index (0, 1, ...), or NULL past the last one
 *  (and for a negative index): `for (i = 0; nctmc_preset_name(i); i++)`
 *  lists them. The strings are constants. */
NCTMC_API const char *nctmc_preset_name(int32_t index);

/** A one-line description of the named preset, or NULL for a name that is
 *  not a preset (and for NULL). A constant string. */
NCTMC_API const char *nctmc_preset_description(const char *name);

/** The backend the named preset is meant for, a value for
 *  nctmc_context_params.backend ("cuda-bf16" for "paper", "cpu" for
 *  "cpu-small"), or NULL for a name that is not a preset. The backend is
 *  a context's choice, so nctmc_preset_apply() cannot set it: pass it to
 *  nctmc_context_create() (the recipe runs on any backend, only slower or
 *  at another precision). A constant string. */
NCTMC_API const char *nctmc_preset_backend(const char *name);

/**
 * Writes the named preset's values into *config and *params, either of
 * which may be NULL (nothing is written there). Each must have been filled
 * by its nctmc_X_init() (the versioned-struct rules apply: only struct_size
 * bytes are read and written). Only the fields the preset defines are
 * written (docs/training.md lists them); the rest — n_classes, the seed,
 * and vocab_size and seq_len for presets that leave them to the data —
 * keep the caller's values, so apply a preset to freshly initialised
 * structs, then change what you need. Errors: NCTMC_ERR_INVALID_ARGUMENT
 * for a NULL name or a struct below its first published size;
 * NCTMC_ERR_NOT_FOUND for a name that is not a preset, the message listing
 * the presets. The message goes to error_buffer (error_buffer_size bytes,
 * NUL-terminated and truncated to fit; "" on success) when it is not NULL:
 * there is no handle to hold it. Nothing is written on failure.
 */
NCTMC_API nctmc_status nctmc_preset_apply(const char *name, nctmc_model_config *config,
                                          nctmc_trainer_params *params, char *error_buffer,
                                          size_t error_buffer_size);

/* ------------------------------------------------------------------------ */
/* Evaluation                                                                */
/* ------------------------------------------------------------------------ */

/* nctmc_eval() estimates, for held-out sequences x0, the NELBO of the
 * model read as a generator: the learned reverse CTMC started from the prior
 * pi at time t_max and run down to t = 0. Per sequence (docs/math.md, NELBO)
 *
 *   -log p(x0) <= KL(q_{T|0}(.|x0) || pi) + int_0^T E_{x_t ~ q_{t|0}}[ sum_pos L_cond ] dt
 *
 * (paper Thm. 3.2 after the conditional swap, T = t_max), estimated by Monte
 * Carlo over stratified times and x_t; reported in bits per token. */

/** Exit-rate statistics of one time bucket (legacy: the calibration
 *  measure is nctmc_eval_result.reliability): the median learned rate at
 *  clean positions (x_t = x_0) and at noisy ones, next to the true
 *  conditional rates of a clean and of a noise token at the bucket's centre
 *  (see docs/math.md). The clean rate is only a floor for a good model (its
 *  target is a mix of the clean and the noise rate), so the two medians are
 *  not a calibration test. NaN where a bucket saw no such position. Medians
 *  are exact over at most 65536 positions per bucket and kind: all of them
 *  when there are fewer, else a reproducible uniform random subset. Not
 *  versioned: an element of an array, its layout never changes. */
typedef struct nctmc_rate_bucket {
    double t_lo, t_hi;
    double median_rate_clean, median_rate_noisy;
    double true_rate_clean, true_rate_noisy;
    int64_t n_clean, n_noisy;   /**< positions seen (all of them) */
} nctmc_rate_bucket;

#define NCTMC_EVAL_BUCKETS 8

/** One cell of the exit-rate reliability table (nctmc_eval_result): the
 *  positions of one time bucket whose implied noise probability nu_hat fell
 *  in one bin. For a data token i at time t with learned rate lambda_theta,
 *  nu_hat = (lambda_theta - lam_c) / (lam_n - lam_c) clipped to [0, 1],
 *  lam_c and lam_n being the true conditional exit rates of i if it is
 *  clean (x_0 = i) and if it is noise (x_0 != i): the model's rate read as
 *  its probability that the token is noise (docs/math.md, "Reliability
 *  table"). A calibrated model's mean_nu equals observed_noisy in every
 *  cell. Not versioned: an element of an array, its layout never
 *  changes. */
typedef struct nctmc_reliability_cell {
    int64_t count;           /**< positions in the cell */
    int64_t n_noisy;         /**< of them with x_t != x_0 */
    double mean_nu;          /**< mean nu_hat (NaN when count is 0) */
    double observed_noisy;   /**< n_noisy / count (NaN when count is 0) */
} nctmc_reliability_cell;

/** Equal-width bins of nu_hat over [0, 1]: bin k holds [k/10, (k+1)/10),
 *  the last one also 1. */
#define NCTMC_EVAL_NU_BINS 10

typedef struct nctmc_eval_params {
    size_t struct_size;
    int64_t n_sequences;      /**< sequences in tokens, 1 .. 2^48 */
    int32_t length;           /**< tokens per sequence, 1 .. model's seq_len */
    /** [n_sequences * length] clean data tokens (for the masked and mixture
     *  processes the mask token is not data). */
    const int32_t *tokens;
    /** [n_sequences] labels in [0, n_classes] (n_classes = the null label),
     *  or NULL for the null label. Must be NULL for an unconditional model. */
    const int32_t *labels;
    /** Rows per forward pass, a row being one sequence at one time
     *  (default 8). The random draws do not depend on it; the result only
     *  through the backend's rounding of differently shaped products. */
    int32_t batch_size;
    /** Time samples per sequence, stratified over (0, t_max): sample k is
     *  at t = t_max (k + u) / n_time_samples, u uniform (default 16); with
     *  time_sampling = NCTMC_TIME_SAMPLING_SQRT at t_max v^2 for that v. */
    int32_t n_time_samples;
    /** T, where the prior is put: 0 (default) = automatic, which is 1 for
     *  the masked process and 1 - 1e-3 (the sampler's default start)
     *  otherwise. Else in (0, 1]. Refused with the reason where the bound
     *  is infinite: the masked process needs T = 1 and a schedule with
     *  a_1 = 0 (not loglinear); uniform and mixture noise under the linear
     *  or cosine schedule need T < 1 (sigma_t diverges at 1). */
    float t_max;
    uint64_t seed;            /**< default 0 */
    /** Called after each forward pass (over ranks: after each round, see
     *  comm) with (rows done, rows in all), rows
     *  being n_sequences * n_time_samples; return 0 to stop (non-zero to
     *  go on): the call
     *  then returns NCTMC_ERR_CANCELLED with the result over the sequences
     *  finished so far. May be NULL. */
    int32_t (*progress)(int64_t done, int64_t total, void *user_data);
    void *user_data;
    /* ---- appended in 0.6.0 (a library before it leaves it 0) ---- */
    /** How the time samples are spread over (0, t_max); the NELBO
     *  estimated is the same, only its variance differs.
     *  NCTMC_TIME_SAMPLING_UNIFORM (0, default) spaces them evenly in t.
     *  NCTMC_TIME_SAMPLING_SQRT spaces them evenly in sqrt(t / t_max) and
     *  weights each by 2 sqrt(t / t_max), the inverse of its density: for
     *  the uniform and mixture processes, whose integrand's second moment
     *  grows like 1 / t at small t (a noise token is rare there, and its
     *  loss is large), this removes the estimate's heavy tail and shrinks
     *  std_error_bits for the same work (docs/math.md, "Time sampling in
     *  the evaluation"). NCTMC_TIME_SAMPLING_LOGIT is refused with
     *  NCTMC_ERR_INVALID_ARGUMENT: its density cannot be normalised on
     *  (0, t_max]. The reliability table, the median rates and mean_loss
     *  are over the rows drawn, so with SQRT they count more small-t
     *  rows; each bucket's figures keep their meaning. */
    nctmc_time_sampling time_sampling;
    /** Reserved (0.8.0): always 0, as a brace initialiser or
     *  nctmc_eval_params_init() leaves it. It names what was the struct's trailing
     *  padding, so that `{ sizeof s, ... }` zeroes it; the library never
     *  reads it (in a program built against an older header these bytes
     *  were padding and may hold anything), and no later release gives it
     *  a meaning. */
    int32_t reserved0;
    /* ---- appended after 0.7.0 (a library before it leaves it NULL) ---- */
    /** Evaluation over the ranks of a data-parallel job (default NULL, the
     *  world of one; the communicator of nctmc_trainer_params.comm). Every
     *  rank calls nctmc_eval() with the same model, the whole held-out set
     *  and the same parameters (checked: ranks that disagree on the library
     *  version, the model's configuration, the parameters or the data
     *  refuse, naming the difference; the weights are not compared). The
     *  call is collective. The forward passes of batch_size rows are dealt
     *  out round-robin (pass j to rank j mod N); each rank sends the
     *  per-position outputs of its passes to every other, and every rank
     *  then adds up all rows in the single process's order, so each returns
     *  the result, bit for bit, that one process returns with the same
     *  parameters and backend (docs/distributed.md). progress is called on
     *  every rank after each round of N passes with the rows done by all
     *  ranks; a rank whose callback returns 0 stops every rank after that
     *  round (each returns NCTMC_ERR_CANCELLED with the same partial
     *  result). A rank whose forward pass fails makes every rank fail after
     *  that round. A call refused before this field can be read (params
     *  NULL, a struct_size below the first layout, non-zero fields this
     *  library does not know) is not collective and leaves the other ranks
     *  waiting. */
    nctmc_comm *comm;
} nctmc_eval_params;

/** Fills *params with the defaults (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_eval_params_init_sized(nctmc_eval_params *params, size_t size);
#define nctmc_eval_params_init(p) nctmc_eval_params_init_sized((p), sizeof *(p))

typedef struct nctmc_eval_result {
    size_t struct_size;
    /** The NELBO, an upper bound on -log2 p(x0) per token, estimated by
     *  Monte Carlo over t and x_t: the mean over sequences of each
     *  sequence's estimate, divided by length. +inf if the model's rates
     *  overflow. */
    double nelbo_bits_per_token;
    /** Standard error of that mean, from the spread of the per-sequence
     *  estimates (NaN with a single sequence). */
    double std_error_bits;
    /** The prior term inside it, KL(q_{T|0} || pi) per token (exact). */
    double prior_bits_per_token;
    double mean_loss;             /**< mean L_cond per position */
    int64_t n_tokens;             /**< tokens of the sequences finished */
    double t_max;                 /**< the T used */
    /** Equal-width over [0, T]: the time bands of the reliability table,
     *  with the true rates and legacy median rates (nctmc_rate_bucket). */
    nctmc_rate_bucket buckets[NCTMC_EVAL_BUCKETS];
    /* ---- appended after 0.2.0 (a library before it leaves them 0) ---- */
    /** The reliability table: [time bucket][nu_hat bin]. It covers every
     *  evaluated position with a learned exit rate: all positions of the
     *  uniform process, the data-token positions of the mixture process
     *  (its mask token is noise whatever x_0 is, so nu_hat means nothing
     *  there), none of the masked process (its exit rate is exact, not
     *  learned: every count is 0). */
    nctmc_reliability_cell reliability[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
    /** Expected calibration error of each time bucket: the count-weighted
     *  mean over its cells of |mean_nu - observed_noisy| (NaN when the
     *  bucket has no position in the table). */
    double ece_bucket[NCTMC_EVAL_BUCKETS];
    /** The same over every cell of the table (NaN when it is empty). */
    double ece;
    /** Positions in the table: the sum of the cells' counts (0 for the
     *  masked process, and from a library that predates the table). */
    int64_t n_reliability;
} nctmc_eval_result;

/** Fills *result with zeros and struct_size (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_eval_result_init_sized(nctmc_eval_result *result, size_t size);
#define nctmc_eval_result_init(p) nctmc_eval_result_init_sized((p), sizeof *(p))

/** Estimates the NELBO of held-out data and the exit-rate reliability
 *  table. Deterministic: the same model, backend, data and parameters give
 *  the same bits. Errors are stored in the model. */
NCTMC_API nctmc_status nctmc_eval(nctmc_model *model, const nctmc_eval_params *params,
                                  nctmc_eval_result *result);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */

/* A sampler owns the working memory to draw batches of up to max_batch
 * sequences of up to max_length tokens from a model (twice the batch when
 * classifier-free guidance needs an unconditional pass). The model is only
 * read: several samplers, each with its own context, may share one model
 * across threads. */
typedef struct nctmc_sampler nctmc_sampler;

typedef struct nctmc_sampler_params {
    size_t struct_size;
    int32_t max_batch;        /**< default 8 */
    int32_t max_length;       /**< 0 = the model's seq_len (default) */
    /** Compute on this context instead of the model's (same backend kind);
     *  NULL = the model's. Errors are then stored here. */
    nctmc_context *ctx;
} nctmc_sampler_params;

/** Fills *params with the defaults (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_sampler_params_init_sized(nctmc_sampler_params *params, size_t size);
#define nctmc_sampler_params_init(p) nctmc_sampler_params_init_sized((p), sizeof *(p))

/**
 * Creates a sampler; params may be NULL for the defaults. The sampler holds
 * a reference to the model and to params->ctx (when given): the caller may
 * free them before or after the sampler. Errors are stored in params->ctx
 * when given, else in the model (nctmc_model_last_error(); this is a const
 * call: a success leaves the model's message alone); they are also logged
 * to that context or the model's.
 */
NCTMC_API nctmc_status nctmc_sampler_create(const nctmc_model *model,
                                            const nctmc_sampler_params *params,
                                            nctmc_sampler **out);

/**
 * The memory nctmc_sampler_create() with the same model and params would
 * allocate and the sampler then holds until nctmc_sampler_free(), without
 * allocating anything (since 0.8.0, NCTMC_1.3). Added up by the code that
 * allocates, so the figures are exact for this build:
 *   *backend_bytes: backend memory (the activation workspace and the
 *     sampler's token buffers), each request rounded up to 64 bytes as the
 *     CPU backend allocates it; on the CPU backend this is host memory that
 *     goes through the context's allocator hook, on a GPU backend device
 *     memory (whose allocator may round each request further).
 *   *host_bytes: the host memory the sampler allocates through the
 *     context's allocator (its struct, the workspace's tables and staging,
 *     the sampler's host buffers), as the sizes the hook is asked for.
 * Not counted: the model's weights (already allocated, or mapped), the
 * context and its thread pool, OpenBLAS's own buffers, the CUDA runtime's.
 * nctmc_sample() allocates nothing; nctmc_infill() allocates its
 * tokenizer work (see there). Either pointer may be NULL; both are set to
 * 0 on failure. The same checks and errors as nctmc_sampler_create(),
 * stored in the same place (params->ctx when given, else the model).
 */
NCTMC_API nctmc_status nctmc_sampler_memory(const nctmc_model *model,
                                            const nctmc_sampler_params *params,
                                            size_t *backend_bytes, size_t *host_bytes);

/** Releases a sampler and its references to the model and context (which are
 *  destroyed now if the caller has freed them and nothing else holds
 *  them). Must not overlap a call on the sampler. */
NCTMC_API void nctmc_sampler_free(nctmc_sampler *sampler);

/**
 * Asks the nctmc_sample() call running on this sampler, on another thread,
 * to stop. Callable from any thread (and from the sample callback) while the
 * sampler is not being freed; NULL does nothing. The running call checks
 * the request after drawing the prior, after every step (after the callback)
 * and after the final denoise; at the first check that sees it, it returns
 * NCTMC_ERR_CANCELLED with the current tokens in tokens_out, and the request
 * is used up. The rule, free of races: nctmc_sample() clears the request
 * first thing when it begins. A cancel made after that point stops that
 * call (or, arriving after its last check, leaves its result complete and
 * NCTMC_OK); a cancel made before it — while no call runs — is dropped, so
 * it never stops a later call. To stop a call you are about to start, make
 * its callback return false instead (or cancel once the callback has run).
 */
NCTMC_API void nctmc_sampler_cancel(nctmc_sampler *sampler);

typedef int32_t nctmc_sample_method;
enum {
    /** Each position jumps with probability 1 - exp(-lambda tau), to j ~ r. */
    NCTMC_SAMPLE_TAU_LEAPING = 0,
    /** p_j = lambda r_j tau for j != x, stay with the rest (clipped). */
    NCTMC_SAMPLE_EULER = 1,
    /** Draws x_s from the recovered clean-token distribution and the forward
     *  process's posterior (docs/math.md). */
    NCTMC_SAMPLE_POSTERIOR = 2
};

/** How classifier-free guidance combines the conditional pass's rates
 *  R_c(i -> j) = lambda_c r_c(j) with the unconditional pass's R_u
 *  (docs/math.md, "The model's rates while sampling"). */
typedef int32_t nctmc_cfg_rule;
enum {
    /** log lambda and the jump logits are each mixed as (1 - w) * uncond +
     *  w * cond: the jump distribution of the rate-level rule, but an exit
     *  rate without its factor sum_j r_c(j)^w r_u(j)^(1 - w). What libraries
     *  before the field did. */
    NCTMC_CFG_SEPARATE = 0,
    /** The rates themselves: R_w(j) = R_c(j)^w R_u(j)^(1 - w) for every
     *  j != i (Nisonoff et al., "Unlocking guidance for discrete
     *  state-space diffusion and flow models"). */
    NCTMC_CFG_RATES = 1
};

/** What each self-correction update does (docs/math.md, "Self-correction"). */
typedef int32_t nctmc_correction_mode;
enum {
    /** Paper App. E, Alg. 3: per sequence, the position whose proposal is
     *  most probable among those that differ takes it; a sequence with none
     *  is finished. Mode-seeking. */
    NCTMC_CORRECT_GREEDY = 0,
    /** Gibbs-like: per sequence, one position drawn uniformly among the
     *  non-fixed ones is redrawn from p0^(1/correction_temperature)
     *  (normalised); every update runs. Keeps diversity at temperature 1. */
    NCTMC_CORRECT_GIBBS = 1
};

typedef int32_t nctmc_time_grid;
enum {
    /** t evenly spaced from t_max to t_min. */
    NCTMC_GRID_UNIFORM = 0,
    /** log t evenly spaced: finer steps near t_min, where clean tokens
     *  settle. */
    NCTMC_GRID_GEOMETRIC = 1
};

/** Called after every step (step = 1 .. n_steps, then once per correction
 *  update with step = n_steps + k; the final denoise has no call of its
 *  own) with the current tokens [batch * length]. Return non-zero to go
 *  on, 0 to stop: nctmc_sample() then returns NCTMC_ERR_CANCELLED with the
 *  current tokens in tokens_out. (Another thread stops the call with
 *  nctmc_sampler_cancel().) */
typedef int32_t (*nctmc_sample_callback)(int32_t step, int32_t n_steps,
                                         const int32_t *tokens, int32_t batch,
                                         int32_t length, void *user_data);

typedef struct nctmc_sample_params {
    size_t struct_size;
    int32_t batch;            /**< sequences, 1 .. max_batch (default 1) */
    int32_t length;           /**< tokens each, 1 .. max_length; 0 = max_length */
    nctmc_sample_method method;   /**< default NCTMC_SAMPLE_TAU_LEAPING */
    int32_t n_steps;          /**< steps of the time grid (default 128) */
    /** Default NCTMC_GRID_UNIFORM. At few steps the geometric grid can
     *  help a uniform-process model and hurts a masked one (docs/api.md,
     *  "Sampling settings, measured"). */
    nctmc_time_grid grid;
    float t_max;              /**< first time (default 1 - 1e-3) */
    float t_min;              /**< last time (default 1e-3), 0 < t_min < t_max < 1 */
    /** Jump logits are divided by this (default 1); > 0. Applies to the
     *  grid steps and the final denoise; the correction pass re-predicts
     *  from the model's own distribution (temperature 1). */
    float temperature;
    /** Non-zero: map the state at t_min to the most probable clean tokens
     *  (default 1): it replaces the mask tokens the grid leaves (masked and
     *  mixture processes) and, for the uniform process, almost never changes
     *  a token (docs/api.md, "Sampling settings, measured"). */
    int32_t final_denoise;
    /** [batch * length] values for clamped positions, read where fixed_mask
     *  is non-zero; NULL when nothing is fixed. */
    const int32_t *fixed_tokens;
    /** [batch * length] non-zero = clamp this position to fixed_tokens
     *  (prefix, suffix, any infilling pattern); NULL = none. */
    const uint8_t *fixed_mask;
    /** [batch] class labels in [0, n_classes], n_classes being the null
     *  label; NULL = null label. Must be NULL for an unconditional model. */
    const int32_t *labels;
    /** Classifier-free guidance scale w >= 0: each evaluation also runs
     *  the model under the null label and combines the two passes' rates
     *  by cfg_rule. 1 (default) = conditional only, no second pass. */
    float cfg_scale;
    /** Self-correction post-pass, after the final denoise: at most this
     *  many single-token updates per sequence (correction_mode says which
     *  token), one model evaluation each (default 0 = off). */
    int32_t correction_steps;
    float correction_temperature; /**< > 0 (default 0.1) */
    /** The noise level the correction pass evaluates at (default 0.05). */
    float correction_time;
    uint64_t seed;
    /** Random stream of row b is first_sequence + b: sequence k draws the
     *  same numbers alone or inside any batch (default 0); in
     *  [0, 2^56 - batch]. */
    int64_t first_sequence;
    nctmc_sample_callback callback;   /**< may be NULL */
    void *user_data;
    /** Out: [batch * length] the samples. */
    int32_t *tokens_out;
    /** How cfg_scale guides (default and 0 = NCTMC_CFG_SEPARATE, the rule
     *  of libraries before this field; docs/api.md has the measurements
     *  behind the default). Without guidance (cfg_scale 1) it changes
     *  nothing. */
    nctmc_cfg_rule cfg_rule;
    /** What each self-correction update does (default and 0 =
     *  NCTMC_CORRECT_GREEDY). */
    nctmc_correction_mode correction_mode;
} nctmc_sample_params;

/** Fills *params with the defaults listed above (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_sample_params_init_sized(nctmc_sample_params *params, size_t size);
#define nctmc_sample_params_init(p) nctmc_sample_params_init_sized((p), sizeof *(p))

/**
 * Since 0.8.0. Sets params->method, grid and n_steps to the sampling
 * settings recommended for the model and leaves every other field as it
 * is: call it after nctmc_sample_params_init() and before your own
 * overrides. The settings are those its checkpoint carries (the trainer
 * writes its process's best measured settings into every checkpoint it
 * saves; docs/formats.md, "nctmc.sample.*"), or, for a model without them
 * (an older file, or one made with nctmc_model_create() and never
 * trained), its process's: the posterior sampler on the even grid with 64
 * steps for the uniform process, tau-leaping on the even grid with 128
 * steps for the masked one, the posterior sampler on the even grid with 128
 * steps for the mixture (docs/api.md, "Sampling settings, measured").
 * NCTMC_ERR_INVALID_ARGUMENT for NULL, or a struct_size below the first
 * published one (the message goes to the model's last error).
 */
NCTMC_API nctmc_status nctmc_sample_params_from_model(const nctmc_model *model,
                                                      nctmc_sample_params *params);

/**
 * Draws samples: starts from the prior at t_max (fixed positions clamped),
 * runs the chosen sampler down the time grid, clamping fixed positions
 * every step, optionally denoises and self-corrects, and writes tokens_out.
 * Deterministic: the same model, backend, seed and parameters give the same
 * bits. Errors are stored in the sampler (nctmc_sampler_last_error()).
 */
NCTMC_API nctmc_status nctmc_sample(nctmc_sampler *sampler, const nctmc_sample_params *params);

/** The message of the last failed nctmc_sample() on this sampler ("" if
 *  none, or if a later call succeeded). A cancelled call's message says
 *  whether the callback or nctmc_sampler_cancel() stopped it. */
NCTMC_API const char *nctmc_sampler_last_error(const nctmc_sampler *sampler);

/* ------------------------------------------------------------------------ */
/* Infilling                                                                 */
/* ------------------------------------------------------------------------ */

/* Regenerates parts of a text and keeps the rest byte for byte — what an
 * editor asks for ("rewrite this selection", "fill in here"). The text
 * outside the ranges is cut into fixed segments (before the first range,
 * between ranges, after the last) and each segment is encoded ALONE, so a
 * range may start or end anywhere: mid-word, or (for the byte and BPE
 * tokenizers) mid-character. Byte-level BPE decoding is concatenative —
 * decode(a ++ b) = decode(a) ++ decode(b) — so the decoded fixed tokens
 * give back exactly the fixed bytes, whatever the neighbouring tokens are.
 * The sequence is [segment 0][range 0's slots][segment 1]...[segment n];
 * the fixed segments' tokens are clamped (nctmc_sample_params.fixed_mask)
 * and the slots are sampled. */

/** A half-open byte range [start, end) of a text; start == end is an
 *  insertion point. Not versioned: this layout never changes. */
typedef struct nctmc_text_range {
    size_t start;
    size_t end;
} nctmc_text_range;

/** range_tokens entry: the default number of slots for that range. */
#define NCTMC_INFILL_AUTO_TOKENS (-1)

typedef struct nctmc_infill_params {
    size_t struct_size;
    /** The sampling settings (method, n_steps, grid, t_max, t_min,
     *  temperature, final_denoise, labels (one entry), cfg_scale, cfg_rule,
     *  correction, seed, first_sequence, callback); NULL = the defaults of
     *  nctmc_sample_params_init(). The call sets batch (1), length,
     *  fixed_tokens, fixed_mask and tokens_out itself: they must be left at
     *  their defaults (batch 1 or 0, the others 0 / NULL). */
    const nctmc_sample_params *sample;
    /** [n_ranges] the number of tokens to generate for each range (>= 0;
     *  0 deletes the range), or NCTMC_INFILL_AUTO_TOKENS; NULL = auto for
     *  every range. Auto: as many tokens as the range's original text
     *  takes when encoded alone (for a character tokenizer, its number of
     *  UTF-8 lead bytes, so that text outside the alphabet may be
     *  replaced), and at least 1. */
    const int32_t *range_tokens;
    /** Out, optional: [n_ranges] where each range's new text lies in the
     *  output, written whenever *out_len is. */
    nctmc_text_range *ranges_out;
} nctmc_infill_params;

/** Fills *params with the defaults (see "Versioned structs"). */
NCTMC_API nctmc_status nctmc_infill_params_init_sized(nctmc_infill_params *params, size_t size);
#define nctmc_infill_params_init(p) nctmc_infill_params_init_sized((p), sizeof *(p))

/**
 * Regenerates the n_ranges (>= 1) byte ranges of text[0 .. text_len) with
 * the sampler's model and returns the whole new text in out, NUL-terminated:
 * every byte outside the ranges is unchanged. tok encodes and decodes
 * (NULL = the model's tokenizer); it must be a byte, character or BPE
 * tokenizer whose vocabulary is the model's data tokens, and is only read
 * (the call works on its own copy). Ranges must be sorted, non-overlapping
 * (touching is fine) and within the text; the fixed tokens plus the slots
 * must fit the sampler's max_length (at most the model's seq_len). For a
 * character tokenizer every fixed segment must be valid UTF-8 of its
 * alphabet: a range boundary inside a character, or a character the
 * alphabet lacks, is an error naming the byte offset in text. Positions
 * still masked at the end (only with final_denoise 0) decode as tok's mask
 * placeholder (nctmc_tokenizer_set_mask_placeholder()), or to nothing.
 *
 * Output: *out_len receives the length of the new text, without the NUL,
 * whenever sampling finished (also on NCTMC_ERR_INVALID_ARGUMENT for a too
 * small buffer, which is left untouched). out = NULL, out_cap = 0 only
 * measures. The result is
 * deterministic (nctmc_sample()), so a second call with a large enough
 * buffer gives the same text; pass a generous buffer (for example
 * 2 * text_len + 64 * slots) to sample once. NCTMC_ERR_INVALID_ARGUMENT
 * with a message for a bad argument or range, too many tokens, or a
 * segment the tokenizer cannot encode; the sampler's errors
 * (NCTMC_ERR_CANCELLED from the callback or nctmc_sampler_cancel(), ...)
 * as nctmc_sample(). Errors are stored in the sampler
 * (nctmc_sampler_last_error()).
 */
NCTMC_API nctmc_status nctmc_infill(nctmc_sampler *sampler, const nctmc_tokenizer *tok,
                                    const char *text, size_t text_len,
                                    const nctmc_text_range *ranges, int32_t n_ranges,
                                    const nctmc_infill_params *params, char *out,
                                    size_t out_cap, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* NCTMC_H */
