/*
 * model_quant.h — sampling-only models whose linear layers hold bf16 or
 * int8 weights (nctmc_model_convert(), docs/model.md "Reduced-precision
 * weights"): which tensors are reduced, how values are rounded, and the
 * model's packed storage. Checkpoint I/O of such models is model_quant_io.c.
 */
#ifndef NCTMC_MODEL_QUANT_H
#define NCTMC_MODEL_QUANT_H

#include "model.h"
#include "base/progress.h"
#include "io/safetensors.h"

/* The largest int8 magnitude stored (symmetric: -128 is never used). */
#define QUANT_INT8_MAX 127

/* Each tensor's data and scales start on a 64-byte boundary of the packed
 * storage. */
#define QUANT_PACK_ALIGN 64

/* Whether a tensor of the table is a linear weight that a reduced model
 * holds in its reduced type: the blocks' attention qkv and output and MLP
 * weights, and the output projection. */
bool quant_is_linear(const char *name);

/* Whether tensor k of the model lives in its packed storage. */
bool quant_is_packed(const nctmc_model *m, int32_t k);

/* "f32", "bf16", "int8" (the checkpoint's and the tool's spelling), or
 * NULL for an unknown type. */
const char *quant_type_name(nctmc_weight_type type);

/* The type named by quant_type_name(), or -1. */
nctmc_weight_type quant_type_from_name(const char *name);

/* bf16 bits of f, rounded to nearest even. */
uint16_t quant_bf16_round(float f);
float quant_bf16_to_f32(uint16_t h);

/* One row of n weights as int8 with its scale (max|w| / 127, 1 for a zero
 * row): q[e] = round(w[e] / scale), in [-127, 127]. */
float quant_int8_row(const float *w, int64_t n, int8_t *q);

/* Bytes of tensor k's data and of its scales (0 for bf16) in the packed
 * storage, and their offsets from its start. */
typedef struct quant_place {
    size_t data_offset, data_bytes;
    size_t scale_offset, scale_bytes;
} quant_place;
quant_place quant_place_of(const nctmc_model *m, int32_t k);

/* Output rows of a linear weight's [out, in] tensor (one int8 scale each). */
static inline int64_t quant_rows_of(const model_tensor *t)
{
    return t->shape[0];
}

/* Called by model creation for a reduced type, after the tensor table is
 * built and before the slab is allocated: takes the reduced tensors out of
 * the slab, allocates the packed storage (zeros) and the packed array. */
nctmc_status quant_model_setup(nctmc_model *m, nctmc_weight_type type, char *err,
                               size_t err_size);

/* Points the view's reduced weights at the packed array (after
 * model_view_bind(); nothing for a float model). */
void quant_model_bind(nctmc_model *m);

/* Frees the packed storage (model destruction). */
void quant_model_free(nctmc_model *m);

/* The dequantised values of packed tensor k into host dst. */
nctmc_status quant_read_tensor(const nctmc_model *m, int32_t k, float *dst, char *err,
                               size_t err_size);

/* ---- checkpoints (model_quant_io.c) ------------------------------------- */

/* The "nctmc.weights" metadata value of a reduced checkpoint. */
#define QUANT_META_KEY "nctmc.weights"
/* The scale tensor of an int8 weight is its name plus this. */
#define QUANT_SCALE_SUFFIX ".scale"

/* What a save needs beyond the float slab: the packed storage on the host
 * and the scale tensors' names. */
typedef struct quant_save {
    const nctmc_allocator *alloc;
    unsigned char *host;
    char (*names)[NCTMC_TENSOR_NAME_MAX + 8];
} quant_save;

/* Scale tensors an int8 model's checkpoint adds (0 otherwise). */
int32_t quant_n_scale_tensors(const nctmc_model *m);

/* Rewrites refs[k] of every packed tensor to its stored dtype and data and
 * writes the scale tensors' refs at scale_refs (quant_n_scale_tensors()).
 * qs holds what they point into until quant_save_free(). */
nctmc_status quant_save_refs(const nctmc_model *m, st_tensor_ref *refs,
                             st_tensor_ref *scale_refs, quant_save *qs, char *err,
                             size_t err_size);
void quant_save_free(quant_save *qs);

/* The dtype a checkpoint of the given type stores table tensor t in. */
const char *quant_stored_dtype(const model_tensor *t, nctmc_weight_type type);

/* Checks that an int8 checkpoint has every scale tensor, F32 of shape
 * [out]; *n_found counts them (0 for other types). */
nctmc_status quant_check_scales(const st_file *file, const model_tensor *table, int32_t n,
                                nctmc_weight_type type, int32_t *n_found, char *err,
                                size_t err_size);

/* Reads every packed tensor (and scale) of a reduced checkpoint, checks
 * them (bf16 finite, int8 in [-127, 127], scales finite and > 0) and
 * uploads them into the model's packed storage. progress (may be NULL)
 * gets one unit per packed tensor; its stop request is
 * NCTMC_ERR_CANCELLED. */
nctmc_status quant_fill_model(nctmc_model *m, const st_file *file, work_progress *progress,
                              char *err, size_t err_size);

#endif /* NCTMC_MODEL_QUANT_H */
