/*
 * model_map.h — models whose weights are a read-only map of their
 * checkpoint (nctmc_model_load_ex(), docs/formats.md "Memory-mapped
 * loading"), and the copy that makes them writable.
 */
#ifndef NCTMC_MODEL_MAP_H
#define NCTMC_MODEL_MAP_H

#include <stdbool.h>

#include "model.h"
#include "base/progress.h"
#include "io/safetensors.h"

/*
 * Creates a model of configuration cfg (already validated, with the file's
 * tensor set checked against it) whose weights are a map of `file`.
 * check_values: first read every value through the file (not the map) and
 * refuse a non-finite one, NCTMC_ERR_FORMAT. NCTMC_ERR_UNSUPPORTED when this
 * file cannot be mapped on this context (not a file, a backend with its own
 * memory, a big-endian host, a tensor at an offset that is not a multiple
 * of 4, no file maps on this platform) and NCTMC_ERR_IO when the system
 * refuses the map: the caller copies instead, and err says why. err may
 * be ctx->last_error. progress (may be NULL) gets one unit per tensor whose
 * values were checked; its stop request is NCTMC_ERR_CANCELLED, no model.
 */
nctmc_status model_map_create(nctmc_context *ctx, const st_file *file,
                              const nctmc_model_config *cfg, bool check_values,
                              work_progress *progress, nctmc_model **out, char *err,
                              size_t err_size);

/*
 * Before anything writes a model's weights: a mapped model gets its
 * weights copied into backend memory in the standard layout (every value
 * checked for finiteness on the way: a map may hold what a lazy load never
 * checked) and its map released. Nothing for a model that is not mapped.
 * On failure the model is unchanged (still mapped).
 */
nctmc_status model_make_writable(nctmc_model *model, char *err, size_t err_size);

#endif /* NCTMC_MODEL_MAP_H */
