/*
 * abi.h — the rules of the versioned public structs (nctmc.h, "Versioned
 * structs"), written once: how nctmc_X_init_sized() fills a caller's struct,
 * how a call reads an input struct of any size, and how it writes an output
 * struct. Every entry point that takes a versioned struct goes through
 * these functions and never looks at a caller's struct directly, so the
 * library reads and writes exactly struct_size bytes of it.
 */
#ifndef NCTMC_ABI_H
#define NCTMC_ABI_H

#include <stddef.h>

#include "nctmc.h"

/* A versioned struct as this build knows it. */
typedef struct abi_struct {
    const char *name;       /* "nctmc_sample_params" */
    /* The first published size: the end of the last field of the layout the
     * struct had when it was published. Never changes once released. */
    size_t first_size;
    /* The end of the last field this build knows; grows when a release
     * appends a field (lib/base/abi.c checks at compile time that it is kept up
     * to date with the struct). */
    size_t known_size;
} abi_struct;

extern const abi_struct abi_context_params;
extern const abi_struct abi_model_config;
extern const abi_struct abi_tensor_info;
extern const abi_struct abi_forward_params;
extern const abi_struct abi_dataset_info;
extern const abi_struct abi_trainer_params;
extern const abi_struct abi_train_stats;
extern const abi_struct abi_trainer_state;
extern const abi_struct abi_eval_params;
extern const abi_struct abi_eval_result;
extern const abi_struct abi_sampler_params;
extern const abi_struct abi_sample_params;
extern const abi_struct abi_reader;
extern const abi_struct abi_load_params;
extern const abi_struct abi_infill_params;
extern const abi_struct abi_features;

/* The struct_size a caller's struct declares. */
size_t abi_size(const void *caller);

/* nctmc_X_init_sized(): writes exactly `size` bytes at p — the first
 * min(size, known_size) bytes of *defaults (all zero when defaults is NULL),
 * zeros after them — and struct_size = size. NCTMC_ERR_INVALID_ARGUMENT,
 * writing nothing, for a NULL p or a size below first_size. */
nctmc_status abi_init(void *p, size_t size, const void *defaults, const abi_struct *d);

/* An input struct: *full is the library's own struct (full_size bytes),
 * already holding the defaults; the caller's first min(struct_size,
 * known_size) bytes are copied over it, and full's struct_size becomes
 * full_size. Fails, leaving *full alone and a message in err, when the
 * caller's struct is below first_size (NCTMC_ERR_INVALID_ARGUMENT) or has a
 * non-zero byte past known_size (NCTMC_ERR_UNSUPPORTED). */
nctmc_status abi_read(const void *caller, void *full, size_t full_size, const abi_struct *d,
                      char *err, size_t err_size);

/* An output struct, before anything is computed: NCTMC_ERR_INVALID_ARGUMENT
 * with a message when the caller's struct_size is below first_size. */
nctmc_status abi_check_output(const void *caller, const abi_struct *d, char *err,
                              size_t err_size);

/* Writes the library's filled struct *full into the caller's struct (checked
 * with abi_check_output()): the bytes after struct_size up to
 * min(struct_size, known_size). struct_size and any byte past the fields
 * this build knows keep the caller's values. */
void abi_write(void *caller, const void *full, const abi_struct *d);

#endif /* NCTMC_ABI_H */
