/*
 * abi.c — the versioned public structs: their sizes, and the one place that
 * implements the rules of nctmc.h's "Versioned structs" (docs/api.md,
 * "Compatibility").
 */
#include "abi.h"

#include <stdint.h>
#include <string.h>

#include "fail.h"

/* The end of `field`: a struct's size without the trailing padding, which
 * does not depend on what the compiler pads to. */
#define ABI_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define ABI_ROUND_UP(n, a) (((n) + (a) - 1) / (a) * (a))

/*
 * One line per versioned struct: `first` is the last field of the layout the
 * struct was first published with (0.2.0 for all but the ones marked
 * later: never change it after a release), `last` the last field it has now. A release that appends
 * a field names it as `last`; the assertion stops a build that appended one
 * past the padding and forgot to.
 */
#define ABI_STRUCT(var, type, first, last)                                                  \
    _Static_assert(ABI_ROUND_UP(ABI_END(type, last), _Alignof(type)) == sizeof(type),      \
                   #type " has a field after `" #last "`: name it in lib/base/abi.c");            \
    ABI_NO_TAIL_PADDING(type, last);                                                        \
    const abi_struct var = {#type, ABI_END(type, first), ABI_END(type, last)}

/*
 * No trailing padding on a 64-bit target (x86-64, AArch64, 64-bit Windows:
 * the supported ones). A caller's `nctmc_X s = { sizeof s, ... }` leaves
 * padding bytes unspecified (garbage at -O0 with some compilers), and the
 * bytes past `last` up to struct_size are read as fields of a newer header
 * that must be 0 — so padding there would refuse a correct program. A struct
 * whose last field leaves a gap ends with an `int32_t reserved0` that fills
 * it (zeroed by brace initialisers, never read by the library, never given
 * a meaning later: in programs built before 0.8.0 it was padding), and a
 * field appended later must again leave no gap (docs/dev/releasing.md).
 * 32-bit targets lay some structs out with a gap the 64-bit ones lack; they
 * are not checked.
 */
#if SIZE_MAX > 0xFFFFFFFFu
#define ABI_NO_TAIL_PADDING(type, last)                                                     \
    _Static_assert(ABI_END(type, last) == sizeof(type),                                     \
                   #type " has trailing padding after `" #last "`: fill it with a reserved field")
#else
#define ABI_NO_TAIL_PADDING(type, last) _Static_assert(1, "32-bit: not checked")
#endif

ABI_STRUCT(abi_context_params, nctmc_context_params, alloc_user_data, alloc_user_data);
ABI_STRUCT(abi_reader, nctmc_reader, user_data, user_data);
ABI_STRUCT(abi_model_config, nctmc_model_config, seed, exit_link);
ABI_STRUCT(abi_tensor_info, nctmc_tensor_info, n_elements, n_elements);
ABI_STRUCT(abi_forward_params, nctmc_forward_params, jump_logprobs, jump_logprobs);
ABI_STRUCT(abi_dataset_info, nctmc_dataset_info, n_sequences, reserved0);
ABI_STRUCT(abi_trainer_params, nctmc_trainer_params, seed, comm);
ABI_STRUCT(abi_train_stats, nctmc_train_stats, n_skipped, comm_seconds);
ABI_STRUCT(abi_trainer_state, nctmc_trainer_state, seed, seed);
ABI_STRUCT(abi_eval_params, nctmc_eval_params, user_data, comm);
ABI_STRUCT(abi_eval_result, nctmc_eval_result, buckets, n_reliability);
ABI_STRUCT(abi_sampler_params, nctmc_sampler_params, ctx, ctx);
ABI_STRUCT(abi_sample_params, nctmc_sample_params, tokens_out, correction_mode);
/* 0.4.0 */
ABI_STRUCT(abi_load_params, nctmc_load_params, mapping, user_data);
ABI_STRUCT(abi_infill_params, nctmc_infill_params, ranges_out, ranges_out);
/* 0.8.0 */
ABI_STRUCT(abi_features, nctmc_features, cuda_detail, cuda_detail);

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

size_t abi_size(const void *caller)
{
    size_t size;
    memcpy(&size, caller, sizeof size);
    return size;
}

nctmc_status abi_init(void *p, size_t size, const void *defaults, const abi_struct *d)
{
    if (!p || size < d->first_size)
        return NCTMC_ERR_INVALID_ARGUMENT;
    memset(p, 0, size);
    if (defaults)
        memcpy(p, defaults, min_size(size, d->known_size));
    memcpy(p, &size, sizeof size);
    return NCTMC_OK;
}

static nctmc_status too_small(size_t size, const abi_struct *d, char *err, size_t err_size)
{
    return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                       "%s.struct_size is %zu, below the %zu bytes of its first published "
                       "layout (fill the struct with %s_init())",
                       d->name, size, d->first_size, d->name);
}

/* A caller newer than the library may pass fields it does not know only as
 * 0, which every field added later means "the default". */
static nctmc_status check_unknown_tail(const unsigned char *caller, size_t size,
                                       const abi_struct *d, char *err, size_t err_size)
{
    for (size_t k = d->known_size; k < size; k++)
        if (caller[k] != 0)
            return fail_format(err, err_size, NCTMC_ERR_UNSUPPORTED,
                               "%s is %zu bytes with a non-zero byte at offset %zu, but "
                               "libnctmc %s knows only its first %zu bytes: the program was "
                               "built with a newer nctmc.h and uses a field this library "
                               "lacks (link a newer libnctmc, or leave the new fields 0)",
                               d->name, size, k, nctmc_version(), d->known_size);
    return NCTMC_OK;
}

nctmc_status abi_read(const void *caller, void *full, size_t full_size, const abi_struct *d,
                      char *err, size_t err_size)
{
    size_t size = abi_size(caller);
    if (size < d->first_size)
        return too_small(size, d, err, err_size);
    nctmc_status st = check_unknown_tail(caller, size, d, err, err_size);
    if (st != NCTMC_OK)
        return st;
    memcpy(full, caller, min_size(size, d->known_size));
    memcpy(full, &full_size, sizeof full_size);
    return NCTMC_OK;
}

nctmc_status abi_check_output(const void *caller, const abi_struct *d, char *err,
                              size_t err_size)
{
    size_t size = abi_size(caller);
    return size < d->first_size ? too_small(size, d, err, err_size) : NCTMC_OK;
}

void abi_write(void *caller, const void *full, const abi_struct *d)
{
    size_t end = min_size(abi_size(caller), d->known_size);
    memcpy((unsigned char *)caller + sizeof(size_t), (const unsigned char *)full + sizeof(size_t),
           end - sizeof(size_t));
}
