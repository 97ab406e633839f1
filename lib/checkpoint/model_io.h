/*
 * model_io.h — model checkpoints on top of safetensors.h: the metadata that
 * describes a model (configuration, tokenizer) and the tensors under their
 * standard names. The trainer adds its own metadata and tensors through the
 * `extra` arguments.
 */
#ifndef NCTMC_MODEL_IO_H
#define NCTMC_MODEL_IO_H

#include "base/progress.h"
#include "model/model.h"
#include "io/safetensors.h"

/*
 * Writes `model`'s checkpoint to path atomically. host_weights: a host slab
 * with the model's layout to write under the standard names instead of the
 * model's own weights (the trainer passes its EMA), or NULL. extra_meta /
 * extra_tensors are appended (the trainer's state, raw weights, moments).
 * Extra metadata keys must lie outside "nctmc." or under "nctmc.trainer.",
 * extra tensor names under "trainer." (model_io_create() rejects others).
 * The file carries "nctmc.checksum", a CRC-32 of every byte of it.
 */
nctmc_status model_io_save(const nctmc_model *model, const char *path,
                           const float *host_weights, const st_meta *extra_meta,
                           int32_t n_extra_meta, const st_tensor_ref *extra_tensors,
                           int32_t n_extra_tensors, char *err, size_t err_size);

/*
 * Creates a model on ctx from an open checkpoint: configuration and tokenizer
 * from the metadata (validated), weights from the tensors named
 * weight_prefix + standard name ("" for the standard names), each checked
 * for shape and finiteness. Also checked first: the format version, the
 * checksum, no unknown "nctmc." keys (except "nctmc.trainer.*"), and that
 * every tensor is either this configuration's (under a standard name or
 * weight_prefix) or a "trainer." one. err may be ctx->last_error.
 */
nctmc_status model_io_create(nctmc_context *ctx, const st_file *file,
                             const char *weight_prefix, nctmc_model **out, char *err,
                             size_t err_size);

/* model_io_create() for the standard names, holding the weights as
 * `mapping` says (nctmc_load_mapping; model_map.h): mapped when the file
 * allows it, copied otherwise. A lazy mapping skips the checksum and the
 * finiteness of the values, unless it falls back to copying. progress
 * (may be NULL; nctmc_load_params.progress says what it counts) gets its
 * total set here and a stop request becomes NCTMC_ERR_CANCELLED, no model. */
nctmc_status model_io_create_ex(nctmc_context *ctx, const st_file *file,
                                const char *weight_prefix, nctmc_load_mapping mapping,
                                work_progress *progress, nctmc_model **out, char *err,
                                size_t err_size);

#endif /* NCTMC_MODEL_IO_H */
