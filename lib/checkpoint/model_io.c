/*
 * model_io.c — model checkpoints (see model_io.h and docs/formats.md): the
 * configuration and tokenizer as flat "nctmc.*" metadata strings, the
 * weights under their standard names. The loader trusts nothing: it checks
 * the format version, every configuration field, that the tensors are
 * exactly the ones the configuration implies (names, F32, shapes) before it
 * allocates a model, and that every value is finite.
 */
#include "model_io.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/abi.h"
#include "core/ctx_report.h"
#include "model/model_map.h"
#include "model/model_quant.h"
#include "io/numtext.h"
#include "text/tokenizer.h"

#define KEY_FORMAT "nctmc.format"
#define KEY_LIBRARY "nctmc.library_version"
#define KEY_CHECKSUM "nctmc.checksum"
#define NCTMC_PREFIX "nctmc."
/* The trainer's metadata namespace, which it checks itself. */
#define TRAINER_META_PREFIX "nctmc.trainer."
/* Format 1: the 0.2.0 layout. Format 2 adds the configuration fields
 * time_input and exit_link; a model whose fields all have their 0.2.0
 * values is still written as format 1, byte for byte what 0.2.0 wrote, so
 * that older readers keep reading it. */
#define FORMAT_LEGACY 1
#define FORMAT_LATEST 2
/* Format 3: a sampling-only model with reduced-precision linear weights
 * (model_quant.h), named by "nctmc.weights"; float models never use it. */
#define FORMAT_REDUCED 3
#define CONFIG_PREFIX "nctmc.config."
/* The recommended sampling settings (any format; all three or none). */
#define KEY_SAMPLE_METHOD "nctmc.sample.method"
#define KEY_SAMPLE_GRID "nctmc.sample.grid"
#define KEY_SAMPLE_STEPS "nctmc.sample.steps"
#define N_SAMPLE_KEYS 3
#define TOKENIZER_PREFIX "nctmc.tokenizer."
/* Tensors a trainer checkpoint adds (raw weights, optimizer moments). */
#define TRAINER_TENSOR_PREFIX "trainer."
#define META_KEY_MAX 64

/* ---- the configuration as metadata --------------------------------------- */

typedef enum { CF_I32, CF_U64, CF_F32, CF_ENUM } config_field_kind;

/* Enumerations are stored by name, in enum order. */
static const char *const process_names[] = {"uniform", "masked", "mixture", NULL};
static const char *const schedule_names[] = {"linear", "cosine", "loglinear", NULL};
static const char *const time_input_names[] = {"t", "log_snr", NULL};
static const char *const exit_link_names[] = {"sigma", "noise_posterior", "denoiser", NULL};
static const char *const sample_method_names[] = {"tau", "euler", "posterior", NULL};
static const char *const sample_grid_names[] = {"uniform", "geometric", NULL};

typedef struct config_field {
    const char *key;
    config_field_kind kind;
    size_t offset;
    const char *const *names;  /* CF_ENUM: the values' names, NULL-terminated */
    int since;                 /* the first format that has the field */
} config_field;

#define FIELD(name, kind, names, since) \
    {CONFIG_PREFIX #name, kind, offsetof(nctmc_model_config, name), names, since}
static const config_field config_fields[] = {
    FIELD(vocab_size, CF_I32, NULL, 1),
    FIELD(vocab_pad_multiple, CF_I32, NULL, 1),
    FIELD(seq_len, CF_I32, NULL, 1),
    FIELD(n_layers, CF_I32, NULL, 1),
    FIELD(d_model, CF_I32, NULL, 1),
    FIELD(n_heads, CF_I32, NULL, 1),
    FIELD(cond_dim, CF_I32, NULL, 1),
    FIELD(n_classes, CF_I32, NULL, 1),
    FIELD(process, CF_ENUM, process_names, 1),
    FIELD(schedule, CF_ENUM, schedule_names, 1),
    FIELD(mixture_uniform, CF_F32, NULL, 1),
    FIELD(schedule_eps, CF_F32, NULL, 1),
    FIELD(seed, CF_U64, NULL, 1),
    FIELD(time_input, CF_ENUM, time_input_names, 2),
    FIELD(exit_link, CF_ENUM, exit_link_names, 2),
};
#undef FIELD
#define N_CONFIG_FIELDS ((int32_t)(sizeof config_fields / sizeof config_fields[0]))

/* The format a model's configuration needs: fields added by a later
 * format are 0 in every model an older library could have written. */
static int format_needed(const nctmc_model_config *cfg)
{
    return cfg->time_input != NCTMC_TIME_INPUT_T || cfg->exit_link != NCTMC_EXIT_LINK_SIGMA
               ? FORMAT_LATEST
               : FORMAT_LEGACY;
}

static int n_names(const char *const *names)
{
    int n = 0;
    while (names[n])
        n++;
    return n;
}

static bool format_config_field(const config_field *f, const nctmc_model_config *cfg,
                                char out[NUMTEXT_MAX])
{
    const char *p = (const char *)cfg + f->offset;
    switch (f->kind) {
    case CF_I32: snprintf(out, NUMTEXT_MAX, "%d", (int)*(const int32_t *)p); return true;
    case CF_U64:
        snprintf(out, NUMTEXT_MAX, "%llu", (unsigned long long)*(const uint64_t *)p);
        return true;
    case CF_F32: return numtext_format_f32(*(const float *)p, out);
    case CF_ENUM: {
        int32_t v = *(const int32_t *)p;
        return v >= 0 && v < n_names(f->names) &&
               snprintf(out, NUMTEXT_MAX, "%s", f->names[v]) > 0;
    }
    }
    return false;
}

static int name_index(const char *const *names, int n, const char *text)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], text) == 0)
            return i;
    return -1;
}

static bool parse_config_field(const config_field *f, const char *text, nctmc_model_config *cfg)
{
    char *p = (char *)cfg + f->offset;
    int64_t i;
    switch (f->kind) {
    case CF_I32:
        if (!numtext_parse_i64(text, INT32_MIN, INT32_MAX, &i))
            return false;
        *(int32_t *)p = (int32_t)i;
        return true;
    case CF_U64: return numtext_parse_u64(text, (uint64_t *)p);
    case CF_F32: return numtext_parse_f32(text, (float *)p);
    case CF_ENUM:
        i = name_index(f->names, n_names(f->names), text);
        *(int32_t *)p = (int32_t)i;
        return i >= 0;
    }
    return false;
}

/* ---- save ------------------------------------------------------------------ */

/* Everything the metadata list points into. */
typedef struct save_meta {
    st_meta *items;
    int32_t n;
    char values[N_CONFIG_FIELDS][NUMTEXT_MAX];
    char sample_steps[NUMTEXT_MAX];
    char tokenizer_keys[TOKENIZER_MAX_FIELDS][META_KEY_MAX];
    tokenizer_fields tokenizer;
    const nctmc_allocator *alloc;   /* of items */
} save_meta;

/* The recommendation's three keys (validated when it was stored). */
static void add_sampling_meta(const model_sampling *smp, save_meta *sm)
{
    snprintf(sm->sample_steps, sizeof sm->sample_steps, "%d", (int)smp->n_steps);
    sm->items[sm->n++] = (st_meta){KEY_SAMPLE_METHOD, sample_method_names[smp->method]};
    sm->items[sm->n++] = (st_meta){KEY_SAMPLE_GRID, sample_grid_names[smp->grid]};
    sm->items[sm->n++] = (st_meta){KEY_SAMPLE_STEPS, sm->sample_steps};
}

static nctmc_status build_meta(const nctmc_model *m, const st_meta *extra, int32_t n_extra,
                               save_meta *sm, char *err, size_t err_size)
{
    memset(sm, 0, sizeof *sm);
    sm->alloc = &m->ctx->alloc;
    if (m->tokenizer) {
        nctmc_status st = tokenizer_to_fields(m->tokenizer, &sm->tokenizer, err, err_size);
        if (st != NCTMC_OK)
            return st;
    }
    size_t cap = 3 + (size_t)N_CONFIG_FIELDS + N_SAMPLE_KEYS + (size_t)sm->tokenizer.n +
                 (size_t)n_extra;
    sm->items = mem_alloc(sm->alloc, sizeof *sm->items * cap);
    if (!sm->items)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    int format = m->weight_type != NCTMC_WEIGHT_F32 ? FORMAT_REDUCED : format_needed(&m->config);
    static const char *const format_names[] = {"", "1", "2", "3"};
    sm->items[sm->n++] = (st_meta){KEY_FORMAT, format_names[format]};
    sm->items[sm->n++] = (st_meta){KEY_LIBRARY, nctmc_version()};
    if (format == FORMAT_REDUCED)
        sm->items[sm->n++] = (st_meta){QUANT_META_KEY, quant_type_name(m->weight_type)};
    for (int32_t k = 0; k < N_CONFIG_FIELDS; k++) {
        if (config_fields[k].since > format)
            continue;
        if (!format_config_field(&config_fields[k], &m->config, sm->values[k]))
            return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "cannot save: %s is not finite", config_fields[k].key);
        sm->items[sm->n++] = (st_meta){config_fields[k].key, sm->values[k]};
    }
    if (m->sampling.stored)
        add_sampling_meta(&m->sampling, sm);
    for (int32_t k = 0; k < sm->tokenizer.n; k++) {
        snprintf(sm->tokenizer_keys[k], META_KEY_MAX, TOKENIZER_PREFIX "%s",
                 sm->tokenizer.keys[k]);
        sm->items[sm->n++] = (st_meta){sm->tokenizer_keys[k], sm->tokenizer.values[k]};
    }
    for (int32_t k = 0; k < n_extra; k++)
        sm->items[sm->n++] = extra[k];
    return NCTMC_OK;
}

static void save_meta_free(save_meta *sm)
{
    mem_free(sm->alloc, sm->items);
    tokenizer_fields_free(&sm->tokenizer);
}

/* The model's weights in host memory (the caller frees *owned). */
static nctmc_status host_weights_of(const nctmc_model *m, float **owned, char *err,
                                  size_t err_size)
{
    float *host = mem_alloc(&m->ctx->alloc, sizeof(float) * m->slab_floats);
    if (!host)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory copying the weights");
    nctmc_backend *be = m->ctx->backend;
    be->ops->download(be, host, m->weights, sizeof(float) * m->slab_floats);
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK) {
        mem_free(&m->ctx->alloc, host);
        return fail_format(err, err_size, st, "reading the weights: %s", be->error);
    }
    *owned = host;
    return NCTMC_OK;
}

/* The loader refuses a non-finite weight, so a file holding one would be
 * lost work that looks saved: a model trained in place can get there (a
 * diverged run; finite gradients can still overflow a weight). Packed
 * weights are the conversion's, from weights that were checked. */
static nctmc_status check_finite_weights(const nctmc_model *m, const float *host, char *err,
                                         size_t err_size)
{
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        if (quant_is_packed(m, k))
            continue;
        for (int64_t e = 0; e < t->n_elements; e++)
            if (!isfinite(host[t->offset + (size_t)e]))
                return fail_format(err, err_size, NCTMC_ERR_NON_FINITE,
                                   "not saved: tensor \"%s\" element %lld is not finite (the "
                                   "loader would refuse the file)",
                                   t->name, (long long)e);
    }
    return NCTMC_OK;
}

/* The model's tensors (with a reduced model's scales after them, from qs),
 * then the extra ones; *n_out counts them all. */
static nctmc_status build_tensor_refs(const nctmc_model *m, const float *host,
                                      const st_tensor_ref *extra, int32_t n_extra,
                                      quant_save *qs, st_tensor_ref **out, int32_t *n_out,
                                      char *err, size_t err_size)
{
    int32_t n_model = m->n_tensors + quant_n_scale_tensors(m);
    if (n_extra < 0 || (n_extra > 0 && !extra) || n_extra > INT32_MAX - n_model)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "bad extra tensors");
    st_tensor_ref *refs =
        mem_calloc(&m->ctx->alloc, (size_t)(n_model + n_extra), sizeof *refs);
    if (!refs)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    *out = refs;
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        refs[k].name = t->name;
        refs[k].data = host + t->offset;
        refs[k].n_dims = t->n_dims;
        memcpy(refs[k].shape, t->shape, sizeof refs[k].shape);
    }
    nctmc_status st = quant_save_refs(m, refs, refs + m->n_tensors, qs, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (n_extra > 0)
        memcpy(refs + n_model, extra, sizeof *refs * (size_t)n_extra);
    *n_out = n_model + n_extra;
    return NCTMC_OK;
}

nctmc_status model_io_save(const nctmc_model *model, const char *path,
                           const float *host_weights, const st_meta *extra_meta,
                           int32_t n_extra_meta, const st_tensor_ref *extra_tensors,
                           int32_t n_extra_tensors, char *err, size_t err_size)
{
    if (!model || !path || !path[0] || n_extra_meta < 0 || (n_extra_meta > 0 && !extra_meta))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "model_io_save: bad arguments");
    save_meta sm;
    nctmc_status st = build_meta(model, extra_meta, n_extra_meta, &sm, err, err_size);
    float *owned = NULL;
    if (st == NCTMC_OK && !host_weights) {
        st = host_weights_of(model, &owned, err, err_size);
        host_weights = owned;
    }
    /* weights a caller passes in are its own to check (the trainer checks
     * every slab it saves); the model's own are checked here */
    if (st == NCTMC_OK && owned)
        st = check_finite_weights(model, host_weights, err, err_size);
    st_tensor_ref *refs = NULL;
    int32_t n_refs = 0;
    quant_save qs = {&model->ctx->alloc, NULL, NULL};
    if (st == NCTMC_OK)
        st = build_tensor_refs(model, host_weights, extra_tensors, n_extra_tensors, &qs, &refs,
                               &n_refs, err, err_size);
    if (st == NCTMC_OK)
        st = st_write_file_checksummed_with(&model->ctx->alloc, path, sm.items, sm.n,
                                            KEY_CHECKSUM, refs, n_refs, err, err_size);
    quant_save_free(&qs);
    mem_free(&model->ctx->alloc, refs);
    mem_free(&model->ctx->alloc, owned);
    save_meta_free(&sm);
    return st;
}

NCTMC_API nctmc_status nctmc_model_save(const nctmc_model *model, const char *path)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!path || !path[0])
        return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_model_save: no path");
    /* a const-model call: the message reaches the model only through the
     * lock, and a success leaves the model's last error alone */
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = model_io_save(model, path, NULL, NULL, 0, NULL, 0, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(model, st, "%s", err);
    return NCTMC_OK;
}

/* ---- load: metadata -------------------------------------------------------- */

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Keys in our own namespace that we do not know mean a file from a newer
 * writer or a damaged one; either way their meaning is not ours to guess.
 * Keys outside "nctmc." belong to whoever added them. */
static bool known_key(const char *key, int format)
{
    /* a reduced (format-3) file is for sampling only: no trainer state */
    if (has_prefix(key, TRAINER_META_PREFIX))
        return format < FORMAT_REDUCED;
    if (!has_prefix(key, NCTMC_PREFIX) ||
        strcmp(key, KEY_FORMAT) == 0 || strcmp(key, KEY_LIBRARY) == 0 ||
        strcmp(key, KEY_CHECKSUM) == 0)
        return true;
    if (strcmp(key, QUANT_META_KEY) == 0)
        return format >= FORMAT_REDUCED;
    if (has_prefix(key, TOKENIZER_PREFIX))
        return tokenizer_is_field(key + strlen(TOKENIZER_PREFIX));
    if (strcmp(key, KEY_SAMPLE_METHOD) == 0 || strcmp(key, KEY_SAMPLE_GRID) == 0 ||
        strcmp(key, KEY_SAMPLE_STEPS) == 0)
        return true;
    for (int32_t k = 0; k < N_CONFIG_FIELDS; k++)
        if (strcmp(key, config_fields[k].key) == 0)
            return config_fields[k].since <= format;
    return false;
}

static nctmc_status check_known_keys(const st_file *file, int format, char *err,
                                     size_t err_size)
{
    for (int32_t i = 0; i < st_file_n_meta(file); i++) {
        const char *key = st_file_meta_key(file, i);
        if (!known_key(key, format))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "unknown metadata key \"%.64s\" (checkpoint format %d)", key,
                               format);
    }
    return NCTMC_OK;
}

/* A format-3 checkpoint's weight type (F32 for the older formats). */
static nctmc_status read_weight_type(const st_file *file, int format,
                                     nctmc_weight_type *weight_type, char *err, size_t err_size)
{
    *weight_type = NCTMC_WEIGHT_F32;
    if (format < FORMAT_REDUCED)
        return NCTMC_OK;
    const char *text = st_file_meta(file, QUANT_META_KEY);
    nctmc_weight_type t = quant_type_from_name(text);
    if (t != NCTMC_WEIGHT_BF16 && t != NCTMC_WEIGHT_INT8)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "metadata " QUANT_META_KEY " = \"%.40s\" is not bf16 or int8",
                           text ? text : "(missing)");
    *weight_type = t;
    return NCTMC_OK;
}

#define CANCELLED(err, err_size) \
    fail_format((err), (err_size), NCTMC_ERR_CANCELLED, "stopped by the progress callback")

/* The checksum pass of a load, one progress unit per tensor of the file. */
static nctmc_status checksum_pass(const st_file *file, work_progress *progress, char *err,
                                  size_t err_size)
{
    nctmc_status st = st_file_verify_checksum(file, KEY_CHECKSUM, err, err_size);
    if (st == NCTMC_OK && !progress_step(progress, st_file_n_tensors(file)))
        st = CANCELLED(err, err_size);
    return st;
}

/* verify_checksum false: a lazily mapped load, which reads no data. */
static nctmc_status read_config(const st_file *file, nctmc_model_config *cfg, model_dims *dims,
                                nctmc_weight_type *weight_type, bool verify_checksum,
                                work_progress *progress, char *err, size_t err_size)
{
    const char *version = st_file_meta(file, KEY_FORMAT);
    if (!version)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "not an nctmc checkpoint (no \"" KEY_FORMAT "\" metadata)");
    int format = strcmp(version, "1") == 0   ? 1
                 : strcmp(version, "2") == 0 ? 2
                 : strcmp(version, "3") == 0 ? FORMAT_REDUCED
                                             : 0;
    if (format == 0)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "checkpoint format \"%.32s\" is not one this library reads (1, 2, 3)",
                           version);
    nctmc_status st = check_known_keys(file, format, err, err_size);
    if (st == NCTMC_OK)
        st = read_weight_type(file, format, weight_type, err, err_size);
    if (st == NCTMC_OK && verify_checksum)
        st = checksum_pass(file, progress, err, err_size);
    if (st != NCTMC_OK)
        return st;
    nctmc_model_config_init(cfg);
    /* fields a format-1 file cannot hold have their 0.2.0 meaning */
    cfg->time_input = NCTMC_TIME_INPUT_T;
    cfg->exit_link = NCTMC_EXIT_LINK_SIGMA;
    for (int32_t k = 0; k < N_CONFIG_FIELDS; k++) {
        if (config_fields[k].since > format)
            continue;
        const char *text = st_file_meta(file, config_fields[k].key);
        if (!text)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT, "metadata \"%s\" is missing",
                               config_fields[k].key);
        if (!parse_config_field(&config_fields[k], text, cfg))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "metadata %s = \"%.40s\" is not a valid value",
                               config_fields[k].key, text);
    }
    char why[NCTMC_ERROR_SIZE];
    if (model_config_validate(cfg, dims, why, sizeof why) != NCTMC_OK)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "the stored configuration: %s", why);
    return NCTMC_OK;
}

/* The recommended sampling settings: all three keys or none (then
 * stored = false and the process's defaults apply). */
static nctmc_status read_sampling(const st_file *file, model_sampling *out, char *err,
                                  size_t err_size)
{
    memset(out, 0, sizeof *out);
    const char *method = st_file_meta(file, KEY_SAMPLE_METHOD);
    const char *grid = st_file_meta(file, KEY_SAMPLE_GRID);
    const char *steps = st_file_meta(file, KEY_SAMPLE_STEPS);
    if (!method && !grid && !steps)
        return NCTMC_OK;
    if (!method || !grid || !steps)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "metadata \"%s\" is missing (the nctmc.sample.* keys come together)",
                           !method ? KEY_SAMPLE_METHOD : !grid ? KEY_SAMPLE_GRID
                                                               : KEY_SAMPLE_STEPS);
    int64_t n = 0;
    model_sampling s = {true, name_index(sample_method_names, 3, method),
                        name_index(sample_grid_names, 2, grid), 0};
    if (numtext_parse_i64(steps, 1, MODEL_SAMPLING_MAX_STEPS, &n))
        s.n_steps = (int32_t)n;
    if (!model_sampling_valid(&s))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "metadata nctmc.sample.* = \"%.20s\", \"%.20s\", \"%.20s\" is not a "
                           "valid method (tau, euler, posterior), grid (uniform, geometric) "
                           "and step count (1 .. %d)",
                           method, grid, steps, MODEL_SAMPLING_MAX_STEPS);
    *out = s;
    return NCTMC_OK;
}

static const char *tokenizer_meta(const void *source, const char *key)
{
    char full[META_KEY_MAX];
    snprintf(full, sizeof full, TOKENIZER_PREFIX "%s", key);
    return st_file_meta(source, full);
}

/* The stored tokenizer, or NULL when the file has none. */
static nctmc_status read_tokenizer(const nctmc_allocator *alloc, const st_file *file,
                                   const nctmc_model_config *cfg, nctmc_tokenizer **out,
                                   char *err, size_t err_size)
{
    *out = NULL;
    bool any = false;
    for (int32_t i = 0; i < st_file_n_meta(file) && !any; i++)
        any = has_prefix(st_file_meta_key(file, i), TOKENIZER_PREFIX);
    if (!any)
        return NCTMC_OK;
    nctmc_status st = tokenizer_from_fields(alloc, tokenizer_meta, file, out, err, err_size);
    if (st == NCTMC_OK)
        st = tokenizer_check_model(*out, cfg, NCTMC_ERR_FORMAT, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_tokenizer_free(*out);
        *out = NULL;
    }
    return st;
}

/* ---- load: tensors ------------------------------------------------------ */

static bool same_shape(const st_tensor_desc *d, const model_tensor *t)
{
    if (d->n_dims != t->n_dims)
        return false;
    for (int32_t k = 0; k < t->n_dims; k++)
        if (d->shape[k] != t->shape[k])
            return false;
    return true;
}

/* Every tensor the configuration implies is present, F32, of its shape;
 * every other tensor belongs to a trainer (or the weight prefix). Checked
 * before anything is allocated, so a damaged configuration cannot ask for
 * more memory than the file itself holds. */
static nctmc_status check_tensor_set(const st_file *file, const model_tensor *table, int32_t n,
                                     const char *prefix, nctmc_weight_type weight_type,
                                     char *err, size_t err_size)
{
    char name[NCTMC_TENSOR_NAME_MAX + META_KEY_MAX];
    int32_t standard_present = 0;
    if (weight_type != NCTMC_WEIGHT_F32 && prefix[0])
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "a checkpoint of %s weights is for sampling only, not a trainer's",
                           quant_type_name(weight_type));
    for (int32_t k = 0; k < n; k++) {
        snprintf(name, sizeof name, "%s%s", prefix, table[k].name);
        int32_t idx = st_file_find_tensor(file, name);
        st_tensor_desc d;
        if (idx < 0 || !st_file_tensor_desc(file, idx, &d))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT, "tensor \"%s\" is missing",
                               name);
        const char *dtype = quant_stored_dtype(&table[k], weight_type);
        if (strcmp(d.dtype, dtype) != 0 || !same_shape(&d, &table[k]))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "tensor \"%s\" is not %s of the shape the configuration implies",
                               name, dtype);
        if (prefix[0] == '\0' || st_file_find_tensor(file, table[k].name) >= 0)
            standard_present++;
    }
    int32_t n_scales = 0;
    nctmc_status st = quant_check_scales(file, table, n, weight_type, &n_scales, err, err_size);
    if (st != NCTMC_OK)
        return st;
    standard_present += n_scales;
    /* names outside the known prefixes must all be standard names; standard
     * names never start with a prefix, so counting them is enough */
    int32_t others = 0;
    for (int32_t i = 0; i < st_file_n_tensors(file); i++) {
        const char *t = st_file_tensor_name(file, i);
        /* a reduced file is for sampling only: a trainer's tensors in it
         * mean a damaged or forged file, not one to resume */
        if (weight_type != NCTMC_WEIGHT_F32 && has_prefix(t, TRAINER_TENSOR_PREFIX))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "a checkpoint of %s weights is for sampling only, but it holds "
                               "the trainer tensor \"%.64s\"",
                               quant_type_name(weight_type), t);
        if (!has_prefix(t, TRAINER_TENSOR_PREFIX) && !(prefix[0] && has_prefix(t, prefix)))
            others++;
    }
    if (others != standard_present)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "the file holds %d tensors that are not this model's", others -
                           standard_present);
    return NCTMC_OK;
}

/* Reads the weights into a host slab (padding left zero) and checks them. */
static nctmc_status read_weights(const st_file *file, const nctmc_model *m, const char *prefix,
                                 float *host, work_progress *progress, char *err,
                                 size_t err_size)
{
    char name[NCTMC_TENSOR_NAME_MAX + META_KEY_MAX];
    for (int32_t k = 0; k < m->n_tensors; k++) {
        const model_tensor *t = &m->tensors[k];
        if (quant_is_packed(m, k))
            continue; /* quant_fill_model() reads it */
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        nctmc_status st = st_file_read_f32(file, name, t->n_dims, t->shape, host + t->offset,
                                           err, err_size);
        if (st != NCTMC_OK)
            return st == NCTMC_ERR_NOT_FOUND ? NCTMC_ERR_FORMAT : st;
        for (int64_t e = 0; e < t->n_elements; e++)
            if (!isfinite(host[t->offset + (size_t)e]))
                return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                                   "tensor \"%s\": element %lld is not finite", name,
                                   (long long)e);
        if (!progress_step(progress, 1))
            return CANCELLED(err, err_size);
    }
    return NCTMC_OK;
}

static nctmc_status upload_weights(nctmc_model *m, const float *host, char *err,
                                   size_t err_size)
{
    nctmc_backend *be = m->ctx->backend;
    be->ops->upload(be, m->weights, host, sizeof(float) * m->slab_floats);
    nctmc_status st = be->ops->synchronize(be);
    if (st != NCTMC_OK)
        return fail_format(err, err_size, st, "uploading the weights: %s", be->error);
    return NCTMC_OK;
}

static nctmc_status check_tensors(const nctmc_allocator *alloc, const st_file *file,
                                  const model_dims *dims, const char *prefix,
                                  nctmc_weight_type weight_type, char *err, size_t err_size)
{
    model_tensor *table = NULL;
    int32_t n = 0;
    size_t slab_floats;
    int64_t n_params;
    if (model_tensor_table(alloc, dims, &table, &n, &slab_floats, &n_params) != NCTMC_OK)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    nctmc_status st = check_tensor_set(file, table, n, prefix, weight_type, err, err_size);
    mem_free(alloc, table);
    return st;
}

/* Creates the model without the seeded initialisation (every weight is read
 * from the file next); it reports into ctx->last_error, and err may be that
 * very buffer. */
static nctmc_status create_model(nctmc_context *ctx, const nctmc_model_config *cfg,
                                 nctmc_weight_type weight_type, nctmc_model **out, char *err,
                                 size_t err_size)
{
    nctmc_status st = weight_type == NCTMC_WEIGHT_F32
                          ? model_create(ctx, cfg, false, out)
                          : model_create_as(ctx, cfg, weight_type, out, ctx->last_error,
                                            sizeof ctx->last_error);
    if (st != NCTMC_OK && err != ctx->last_error)
        fail_format(err, err_size, st, "%s", ctx->last_error);
    return st;
}

static nctmc_status fill_model(nctmc_model *m, const st_file *file, const char *prefix,
                               work_progress *progress, char *err, size_t err_size)
{
    float *host = mem_calloc(&m->ctx->alloc, m->slab_floats, sizeof(float));
    if (!host)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "out of memory reading the weights");
    nctmc_status st = read_weights(file, m, prefix, host, progress, err, err_size);
    if (st == NCTMC_OK)
        st = upload_weights(m, host, err, err_size);
    mem_free(&m->ctx->alloc, host);
    if (st == NCTMC_OK)
        st = quant_fill_model(m, file, progress, err, err_size);
    return st;
}

/* Maps the weights (model_map.c), or leaves *m NULL for the caller to copy
 * them when this file cannot be mapped — after the checksum that a lazy
 * load skipped, since copying reads every byte anyway. */
static nctmc_status map_or_copy(nctmc_context *ctx, const st_file *file,
                                const nctmc_model_config *cfg, bool lazy,
                                work_progress *progress, nctmc_model **m, char *err,
                                size_t err_size)
{
    char why[NCTMC_ERROR_SIZE];
    nctmc_status st = model_map_create(ctx, file, cfg, !lazy, progress, m, why, sizeof why);
    if (st != NCTMC_ERR_UNSUPPORTED && st != NCTMC_ERR_IO) {
        if (st != NCTMC_OK)
            fail_format(err, err_size, st, "%s", why);
        /* a lazy map reads nothing: the checksum's units at once */
        else if (lazy && !progress_step(progress, st_file_n_tensors(file)))
            st = CANCELLED(err, err_size);
        return st;
    }
    ctx_log(ctx, NCTMC_LOG_INFO, "model: copying the weights (not mapped: %s)", why);
    return lazy ? checksum_pass(file, progress, err, err_size) : NCTMC_OK;
}

nctmc_status model_io_create(nctmc_context *ctx, const st_file *file, const char *weight_prefix,
                             nctmc_model **out, char *err, size_t err_size)
{
    return model_io_create_ex(ctx, file, weight_prefix, NCTMC_LOAD_COPY, NULL, out, err,
                              err_size);
}

nctmc_status model_io_create_ex(nctmc_context *ctx, const st_file *file,
                                const char *weight_prefix, nctmc_load_mapping mapping,
                                work_progress *progress, nctmc_model **out, char *err,
                                size_t err_size)
{
    if (!ctx || !file || !out)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "model_io_create: bad arguments");
    *out = NULL;
    const char *prefix = weight_prefix ? weight_prefix : "";
    /* only the standard names are mapped (a trainer's raw weights are
     * about to be trained) */
    bool map = mapping != NCTMC_LOAD_COPY && prefix[0] == '\0';
    bool lazy = map && mapping == NCTMC_LOAD_MAP_LAZY;
    nctmc_model_config cfg;
    model_dims dims;
    nctmc_weight_type weight_type = NCTMC_WEIGHT_F32;
    nctmc_tokenizer *tok = NULL;
    /* units: the file's tensors once for the checksum, then (at most as
     * many) the model's tensors read and checked */
    if (progress) {
        progress->done = 0;
        progress->total = 2 * (int64_t)st_file_n_tensors(file);
    }
    nctmc_status st = progress_step(progress, 0) ? NCTMC_OK : CANCELLED(err, err_size);
    if (st == NCTMC_OK)
        st = read_config(file, &cfg, &dims, &weight_type, !lazy, progress, err, err_size);
    /* reduced weights are copied into the packed storage (model_quant.h:
     * each tensor's data and int8 scales on a QUANT_PACK_ALIGN boundary,
     * addressed from the shapes), which a safetensors file's back-to-back
     * tensors cannot provide (docs/formats.md, "Memory-mapped loading");
     * a lazy load of them checks the checksum after all */
    if (st == NCTMC_OK && weight_type != NCTMC_WEIGHT_F32) {
        if (lazy)
            st = checksum_pass(file, progress, err, err_size);
        if (map)
            ctx_log(ctx, NCTMC_LOG_INFO,
                    "model: copying the weights (not mapped: %s weights are read into the "
                    "packed storage of the reduced-precision kernels, whose 64-byte-aligned "
                    "layout a checkpoint file cannot have)",
                    quant_type_name(weight_type));
        map = lazy = false;
    }
    model_sampling sampling;
    if (st == NCTMC_OK)
        st = read_sampling(file, &sampling, err, err_size);
    if (st == NCTMC_OK)
        st = read_tokenizer(&ctx->alloc, file, &cfg, &tok, err, err_size);
    if (st == NCTMC_OK)
        st = check_tensors(&ctx->alloc, file, &dims, prefix, weight_type, err, err_size);
    nctmc_model *m = NULL;
    if (st == NCTMC_OK && map)
        st = map_or_copy(ctx, file, &cfg, lazy, progress, &m, err, err_size);
    if (st == NCTMC_OK && !m) {
        st = create_model(ctx, &cfg, weight_type, &m, err, err_size);
        if (st == NCTMC_OK)
            st = fill_model(m, file, prefix, progress, err, err_size);
    }
    if (st == NCTMC_OK && progress && !progress_step(progress, progress->total))
        st = CANCELLED(err, err_size);
    if (st != NCTMC_OK) {
        nctmc_tokenizer_free(tok);
        nctmc_model_free(m);
        return st;
    }
    m->tokenizer = tok;
    m->sampling = sampling;
    *out = m;
    return NCTMC_OK;
}

/* Creates the model from a checkpoint opened by the caller, whatever its
 * source (a file, memory, a reader): the one loading path. Frees file. */
static nctmc_status load_from(nctmc_context *ctx, st_file *file, const char *name,
                              nctmc_load_mapping mapping, work_progress *progress,
                              nctmc_model **out)
{
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = model_io_create_ex(ctx, file, "", mapping, progress, out, err, sizeof err);
    st_file_free(file);
    if (st != NCTMC_OK)
        return ctx_report_fail(ctx, st, "\"%.300s\": %s", name, err);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_load_params_init_sized(nctmc_load_params *params, size_t size)
{
    return abi_init(params, size, NULL, &abi_load_params);
}

NCTMC_API nctmc_status nctmc_model_load_ex(nctmc_context *ctx, const char *path,
                                           const nctmc_load_params *params, nctmc_model **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!path || !out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_model_load: path and out must not be NULL");
    nctmc_load_params p;
    nctmc_load_params_init(&p);
    if (params) {
        nctmc_status st = abi_read(params, &p, sizeof p, &abi_load_params, ctx->last_error,
                                   sizeof ctx->last_error);
        if (st != NCTMC_OK)
            return ctx_report_logged(ctx, st);
    }
    if (p.mapping != NCTMC_LOAD_MAP_AUTO && p.mapping != NCTMC_LOAD_MAP_LAZY &&
        p.mapping != NCTMC_LOAD_COPY)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_load_params.mapping %d is not a nctmc_load_mapping",
                               (int)p.mapping);
    st_file *file = NULL;
    nctmc_status st =
        st_open_file(&ctx->alloc, path, &file, ctx->last_error, sizeof ctx->last_error);
    if (st != NCTMC_OK)
        return ctx_report_logged(ctx, st);
    work_progress progress = {p.progress, p.user_data, 0, 0};
    return load_from(ctx, file, path, p.mapping, &progress, out);
}

NCTMC_API nctmc_status nctmc_model_load(nctmc_context *ctx, const char *path,
                                        nctmc_model **out)
{
    return nctmc_model_load_ex(ctx, path, NULL, out);
}

#define MEMORY_NAME "<memory>"
#define READER_NAME "<reader>"

NCTMC_API nctmc_status nctmc_model_load_memory(nctmc_context *ctx, const void *data,
                                               size_t size, nctmc_model **out)
{
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (out)
        *out = NULL;
    if (!out || (!data && size > 0))
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_model_load_memory: out and data must not be NULL");
    if ((uint64_t)size > (uint64_t)INT64_MAX)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_model_load_memory: %zu bytes is more than a checkpoint "
                               "may have",
                               size);
    st_file *file = NULL;
    nctmc_status st = st_open_memory(&ctx->alloc, data, size, MEMORY_NAME, &file,
                                     ctx->last_error, sizeof ctx->last_error);
    if (st != NCTMC_OK)
        return ctx_report_logged(ctx, st);
    return load_from(ctx, file, MEMORY_NAME, NCTMC_LOAD_COPY, NULL, out);
}

NCTMC_API nctmc_status nctmc_model_load_reader(nctmc_context *ctx, const nctmc_reader *reader,
                                               nctmc_model **out)
{
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (out)
        *out = NULL;
    if (!out || !reader)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_model_load_reader: reader and out must not be NULL");
    st_file *file = NULL;
    nctmc_status st = st_open_reader(&ctx->alloc, reader, READER_NAME, &file, ctx->last_error,
                                     sizeof ctx->last_error);
    if (st != NCTMC_OK)
        return ctx_report_logged(ctx, st);
    return load_from(ctx, file, READER_NAME, NCTMC_LOAD_COPY, NULL, out);
}
