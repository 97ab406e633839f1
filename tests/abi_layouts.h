/*
 * abi_layouts.h — the layouts of every versioned struct as programs built
 * against older, current and newer headers would have them (test_abi.c,
 * test_abi_internal.c): X_pre, X_old, X_now (asserted equal to nctmc_X),
 * X_new; where the current layout's last field starts, where the fields
 * this header knows end (known_size) and where the first published layout
 * ended (first_size); nctmc_X_init_sized() as an init_fn. Public only:
 * nctmc.h and system headers.
 */
#ifndef NCTMC_TEST_ABI_LAYOUTS_H
#define NCTMC_TEST_ABI_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#include "nctmc.h"


/* No bool and no enum types in the ABI: every enumeration and flag is 4 bytes. */
_Static_assert(sizeof(nctmc_status) == 4 && sizeof(nctmc_log_level) == 4 &&
                   sizeof(nctmc_process) == 4 && sizeof(nctmc_schedule) == 4 &&
                   sizeof(nctmc_tokenizer_kind) == 4 && sizeof(nctmc_sample_method) == 4 &&
                   sizeof(nctmc_time_grid) == 4 && sizeof(nctmc_time_input) == 4 &&
                   sizeof(nctmc_exit_link) == 4 && sizeof(nctmc_time_sampling) == 4 &&
                   sizeof(nctmc_cfg_rule) == 4 && sizeof(nctmc_correction_mode) == 4,
               "enumerations are int32_t");
_Static_assert(sizeof(((nctmc_sample_params *)0)->final_denoise) == 4 &&
                   sizeof(((nctmc_train_stats *)0)->skipped) == 4,
               "flags are int32_t");

/* ---- the three layouts of every struct ----------------------------------- */

/* What a newer header appends: a 4-byte field first, which lands in the
 * current struct's trailing padding where it has some (nctmc_context_params). */
#define FUTURE_FIELDS       \
    int32_t future_flag;    \
    int32_t future_count;   \
    double future_value;    \
    void *future_pointer;

/* HEAD: every field but the last; LAST: the last field, named `last`. */
#define LAYOUTS(name, head, last_decl, last)                                          \
    typedef struct { head } name##_old;                                                \
    typedef name##_old name##_pre;                                                     \
    typedef struct { head last_decl } name##_now;                                      \
    typedef struct { head last_decl FUTURE_FIELDS } name##_new;                        \
    _Static_assert(sizeof(name##_now) == sizeof(nctmc_##name) &&                        \
                       offsetof(name##_now, last) == offsetof(nctmc_##name, last),      \
                   "the mirror of nctmc_" #name " matches nctmc.h");                     \
    enum {                                                                             \
        name##_last_offset = offsetof(nctmc_##name, last),                             \
        name##_known_size = offsetof(nctmc_##name, last) + sizeof(((name##_now *)0)->last), \
        name##_first_size = name##_known_size                                          \
    }

/* A struct a release appended fields to: PRE_HEAD is its first published
 * layout without the last field of that layout, FIRST_LAST that field. (Written out again rather
 * than calling LAYOUTS: a HEAD's commas would split the inner call.) */
#define LAYOUTS_APPENDED(name, pre_head, head, last_decl, last, first_last)           \
    typedef struct { pre_head } name##_pre;                                            \
    typedef struct { head } name##_old;                                                \
    typedef struct { head last_decl } name##_now;                                      \
    typedef struct { head last_decl FUTURE_FIELDS } name##_new;                        \
    _Static_assert(sizeof(name##_now) == sizeof(nctmc_##name) &&                        \
                       offsetof(name##_now, last) == offsetof(nctmc_##name, last),      \
                   "the mirror of nctmc_" #name " matches nctmc.h");                     \
    enum {                                                                             \
        name##_last_offset = offsetof(nctmc_##name, last),                             \
        name##_known_size = offsetof(nctmc_##name, last) + sizeof(((name##_now *)0)->last), \
        name##_first_size = offsetof(nctmc_##name, first_last) +                       \
                            sizeof(((name##_now *)0)->first_last)                      \
    }

#define CONTEXT_PARAMS_HEAD                                                       \
    size_t struct_size;                                                           \
    const char *backend;                                                          \
    int32_t n_threads;                                                            \
    nctmc_log_fn log_fn;                                                          \
    void *log_user_data;                                                          \
    nctmc_log_level log_level;                                                    \
    char *error_buffer;                                                           \
    size_t error_buffer_size;                                                     \
    void *(*alloc_fn)(size_t, size_t, void *);                                    \
    void (*free_fn)(void *, void *);
LAYOUTS(context_params, CONTEXT_PARAMS_HEAD, void *alloc_user_data;, alloc_user_data);

#define MODEL_CONFIG_PRE_HEAD                                                     \
    size_t struct_size;                                                           \
    int32_t vocab_size, vocab_pad_multiple, seq_len, n_layers, d_model, n_heads;  \
    int32_t cond_dim, n_classes;                                                  \
    nctmc_process process;                                                        \
    nctmc_schedule schedule;                                                      \
    float mixture_uniform;                                                        \
    float schedule_eps;
/* 0.3.0 appended time_input and exit_link to 0.2.0's layout (which ended
 * at seed) */
#define MODEL_CONFIG_HEAD                                                         \
    MODEL_CONFIG_PRE_HEAD                                                         \
    uint64_t seed;                                                                \
    nctmc_time_input time_input;
LAYOUTS_APPENDED(model_config, MODEL_CONFIG_PRE_HEAD, MODEL_CONFIG_HEAD,
                 nctmc_exit_link exit_link;, exit_link, seed);

#define TENSOR_INFO_HEAD                                                          \
    size_t struct_size;                                                           \
    const char *name;                                                             \
    int32_t n_dims;                                                               \
    int64_t shape[NCTMC_MAX_DIMS];
LAYOUTS(tensor_info, TENSOR_INFO_HEAD, int64_t n_elements;, n_elements);

#define FORWARD_PARAMS_HEAD                                                       \
    size_t struct_size;                                                           \
    int32_t batch, length;                                                        \
    const int32_t *tokens;                                                        \
    const float *times;                                                           \
    const int32_t *labels;                                                        \
    float *log_rate;
LAYOUTS(forward_params, FORWARD_PARAMS_HEAD, float *jump_logprobs;, jump_logprobs);

#define DATASET_INFO_HEAD                                                         \
    size_t struct_size;                                                           \
    int32_t vocab_size, seq_len, n_classes;                                       \
    int64_t n_tokens;
/* 0.4.0 appended checksum to 0.3.0's layout (which ended at n_sequences) */
#define DATASET_INFO_HEAD_030 DATASET_INFO_HEAD int64_t n_sequences;
/* 0.8.0 named its trailing padding reserved0 */
#define DATASET_INFO_HEAD_040 DATASET_INFO_HEAD_030 uint32_t checksum;
LAYOUTS_APPENDED(dataset_info, DATASET_INFO_HEAD, DATASET_INFO_HEAD_040, int32_t reserved0;,
                 reserved0, n_sequences);

#define TRAINER_PARAMS_HEAD                                                       \
    size_t struct_size;                                                           \
    int32_t batch_size, seq_len;                                                  \
    float learning_rate, min_lr_ratio;                                            \
    int64_t warmup_steps, total_steps;                                            \
    float beta1, beta2, adam_eps, weight_decay, grad_clip, ema_decay, time_eps;   \
    float label_dropout;
/* 0.2.0 ended at seed; 0.3.0 appended time_sampling, 0.5.0
 * activation_recompute, after 0.7.0 accumulation and comm */
#define TRAINER_PARAMS_HEAD_030 TRAINER_PARAMS_HEAD uint64_t seed;
#define TRAINER_PARAMS_HEAD_040 TRAINER_PARAMS_HEAD_030 nctmc_time_sampling time_sampling;
#define TRAINER_PARAMS_HEAD_050 TRAINER_PARAMS_HEAD_040 int32_t activation_recompute;
#define TRAINER_PARAMS_HEAD_070 TRAINER_PARAMS_HEAD_050 int32_t accumulation;
LAYOUTS_APPENDED(trainer_params, TRAINER_PARAMS_HEAD, TRAINER_PARAMS_HEAD_070,
                 nctmc_comm *comm;, comm, seed);

#define TRAIN_STATS_HEAD                                                          \
    size_t struct_size;                                                           \
    int64_t step;                                                                 \
    double loss, grad_norm, learning_rate, mean_log_rate;                         \
    int32_t skipped;
/* 0.2.0 ended at n_skipped; after 0.7.0 comm_seconds */
#define TRAIN_STATS_HEAD_070 TRAIN_STATS_HEAD int64_t n_skipped;
LAYOUTS_APPENDED(train_stats, TRAIN_STATS_HEAD, TRAIN_STATS_HEAD_070, double comm_seconds;,
                 comm_seconds, n_skipped);

#define TRAINER_STATE_HEAD                                                        \
    size_t struct_size;                                                           \
    int64_t step, optimizer_steps, data_position, n_skipped;
LAYOUTS(trainer_state, TRAINER_STATE_HEAD, uint64_t seed;, seed);

#define EVAL_PARAMS_HEAD                                                          \
    size_t struct_size;                                                           \
    int64_t n_sequences;                                                          \
    int32_t length;                                                               \
    const int32_t *tokens;                                                        \
    const int32_t *labels;                                                        \
    int32_t batch_size, n_time_samples;                                           \
    float t_max;                                                                  \
    uint64_t seed;                                                                \
    int32_t (*progress)(int64_t done, int64_t total, void *user_data);
/* 0.2.0 ended at user_data; 0.6.0 appended time_sampling; 0.8.0 named the
 * trailing padding reserved0; after 0.7.0 comm */
#define EVAL_PARAMS_HEAD_050 EVAL_PARAMS_HEAD void *user_data;
#define EVAL_PARAMS_HEAD_060 EVAL_PARAMS_HEAD_050 nctmc_time_sampling time_sampling;
#define EVAL_PARAMS_HEAD_080 EVAL_PARAMS_HEAD_060 int32_t reserved0;
LAYOUTS_APPENDED(eval_params, EVAL_PARAMS_HEAD, EVAL_PARAMS_HEAD_080,
                 nctmc_comm *comm;, comm, user_data);

#define EVAL_RESULT_HEAD                                                          \
    size_t struct_size;                                                           \
    double nelbo_bits_per_token, std_error_bits, prior_bits_per_token, mean_loss; \
    int64_t n_tokens;                                                             \
    double t_max;
/* first published (0.2.0) up to `buckets`; the reliability table appended */
#define EVAL_RESULT_APPENDED_HEAD                                                 \
    EVAL_RESULT_HEAD                                                              \
    nctmc_rate_bucket buckets[NCTMC_EVAL_BUCKETS];                                \
    nctmc_reliability_cell reliability[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];   \
    double ece_bucket[NCTMC_EVAL_BUCKETS];                                        \
    double ece;
LAYOUTS_APPENDED(eval_result, EVAL_RESULT_HEAD, EVAL_RESULT_APPENDED_HEAD,
                 int64_t n_reliability;, n_reliability, buckets);

#define SAMPLER_PARAMS_HEAD                                                       \
    size_t struct_size;                                                           \
    int32_t max_batch, max_length;
LAYOUTS(sampler_params, SAMPLER_PARAMS_HEAD, nctmc_context *ctx;, ctx);

#define SAMPLE_PARAMS_HEAD                                                        \
    size_t struct_size;                                                           \
    int32_t batch, length;                                                        \
    nctmc_sample_method method;                                                   \
    int32_t n_steps;                                                              \
    nctmc_time_grid grid;                                                         \
    float t_max, t_min, temperature;                                              \
    int32_t final_denoise;                                                        \
    const int32_t *fixed_tokens;                                                  \
    const uint8_t *fixed_mask;                                                    \
    const int32_t *labels;                                                        \
    float cfg_scale;                                                              \
    int32_t correction_steps;                                                     \
    float correction_temperature, correction_time;                                \
    uint64_t seed;                                                                \
    int64_t first_sequence;                                                       \
    nctmc_sample_callback callback;                                               \
    void *user_data;
/* 0.2.0 ended at tokens_out; 0.3.0 appended cfg_rule and correction_mode */
#define SAMPLE_PARAMS_HEAD_030 SAMPLE_PARAMS_HEAD int32_t *tokens_out; nctmc_cfg_rule cfg_rule;
LAYOUTS_APPENDED(sample_params, SAMPLE_PARAMS_HEAD, SAMPLE_PARAMS_HEAD_030,
                 nctmc_correction_mode correction_mode;, correction_mode, tokens_out);

#define READER_HEAD                                                               \
    size_t struct_size;                                                           \
    int64_t size;                                                                 \
    int64_t (*read_at)(void *, void *, size_t, int64_t);
LAYOUTS(reader, READER_HEAD, void *user_data;, user_data);

/* first published in 0.4.0 (ending at mapping); 0.8.0 named the trailing
 * padding reserved0 and appended progress and user_data */
#define LOAD_PARAMS_HEAD size_t struct_size;
#define LOAD_PARAMS_HEAD_040 LOAD_PARAMS_HEAD nctmc_load_mapping mapping;
#define LOAD_PARAMS_HEAD_080 LOAD_PARAMS_HEAD_040 int32_t reserved0;
LAYOUTS_APPENDED(load_params, LOAD_PARAMS_HEAD, LOAD_PARAMS_HEAD_080,
                 int32_t (*progress)(int64_t, int64_t, void *); void *user_data;, user_data,
                 mapping);

/* first published in 0.4.0 */
#define INFILL_PARAMS_HEAD                                                        \
    size_t struct_size;                                                           \
    const nctmc_sample_params *sample;                                            \
    const int32_t *range_tokens;
LAYOUTS(infill_params, INFILL_PARAMS_HEAD, nctmc_text_range *ranges_out;, ranges_out);

typedef nctmc_status (*init_fn)(void *p, size_t size);

#define INIT_WRAPPER(name)                                                   \
    static nctmc_status init_##name(void *p, size_t size)                    \
    {                                                                        \
        return nctmc_##name##_init_sized(p, size);                           \
    }
INIT_WRAPPER(context_params)
INIT_WRAPPER(model_config)
INIT_WRAPPER(tensor_info)
INIT_WRAPPER(forward_params)
INIT_WRAPPER(dataset_info)
INIT_WRAPPER(trainer_params)
INIT_WRAPPER(train_stats)
INIT_WRAPPER(trainer_state)
INIT_WRAPPER(eval_params)
INIT_WRAPPER(eval_result)
INIT_WRAPPER(sampler_params)
INIT_WRAPPER(sample_params)
INIT_WRAPPER(reader)
INIT_WRAPPER(load_params)
INIT_WRAPPER(infill_params)

/* The sizes the library must use for each struct: its name, where the first
 * published layout ended, where the fields of this header end. */
typedef struct abi_sizes {
    const char *name;
    size_t first_size;
    size_t known_size;
} abi_sizes;

#define ABI_SIZES(name) \
    static const abi_sizes sizes_##name = {"nctmc_" #name, name##_first_size, name##_known_size};
ABI_SIZES(context_params);
ABI_SIZES(model_config);
ABI_SIZES(tensor_info);
ABI_SIZES(forward_params);
ABI_SIZES(dataset_info);
ABI_SIZES(trainer_params);
ABI_SIZES(train_stats);
ABI_SIZES(trainer_state);
ABI_SIZES(eval_params);
ABI_SIZES(eval_result);
ABI_SIZES(sampler_params);
ABI_SIZES(sample_params);
ABI_SIZES(reader);
ABI_SIZES(load_params);
ABI_SIZES(infill_params);

#endif /* NCTMC_TEST_ABI_LAYOUTS_H */
