/*
 * trainer_checkpoint.c — resumable training checkpoints. The standard tensor
 * names hold the EMA weights (what sampling loads); "trainer.params.*",
 * "trainer.adam_m.*" and "trainer.adam_v.*" hold the raw weights and both
 * AdamW moments; "nctmc.trainer.*" metadata holds the parameters and the
 * state. Everything a step depends on is saved, so a resumed run continues
 * bit for bit.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "checkpoint/model_io.h"
#include "io/numtext.h"
#include "trainer.h"

#define META_VALUE_MAX NUMTEXT_MAX
/* The model's sequence length, as model_io.c stores the configuration. */
#define KEY_MODEL_SEQ_LEN "nctmc.config.seq_len"
#define KEY_CHECKSUM "nctmc.checksum"
/* Any trainer checkpoint has this key; a model-only one has none. */
#define KEY_STEP "nctmc.trainer.state.step"
#define TENSOR_NAME_MAX (NCTMC_TENSOR_NAME_MAX + 32)

enum { SLAB_PARAMS, SLAB_ADAM_M, SLAB_ADAM_V, N_SAVED_SLABS };
static const char *const slab_prefix[N_SAVED_SLABS] = {
    "trainer.params.", "trainer.adam_m.", "trainer.adam_v."};

/* One metadata field of the trainer: its key and where its value lives. */
typedef enum { FIELD_I32, FIELD_I64, FIELD_U64, FIELD_F32 } field_kind;
typedef struct trainer_field {
    const char *key;
    field_kind kind;
    size_t params_offset;   /* offset in nctmc_trainer_params, or SIZE_MAX */
    size_t state_offset;    /* offset in nctmc_trainer_state, or SIZE_MAX */
    /* added after the first format: a checkpoint without the key was
     * written before the field existed and means its default, 0 */
    bool optional;
} trainer_field;

#define PARAM(key, kind, member) \
    {key, kind, offsetof(nctmc_trainer_params, member), SIZE_MAX, false}
#define PARAM_ADDED(key, kind, member) \
    {key, kind, offsetof(nctmc_trainer_params, member), SIZE_MAX, true}
#define STATE(key, kind, member) \
    {key, kind, SIZE_MAX, offsetof(nctmc_trainer_state, member), false}

static const trainer_field trainer_fields[] = {
    PARAM("nctmc.trainer.batch_size", FIELD_I32, batch_size),
    PARAM("nctmc.trainer.seq_len", FIELD_I32, seq_len),
    PARAM("nctmc.trainer.learning_rate", FIELD_F32, learning_rate),
    PARAM("nctmc.trainer.min_lr_ratio", FIELD_F32, min_lr_ratio),
    PARAM("nctmc.trainer.warmup_steps", FIELD_I64, warmup_steps),
    PARAM("nctmc.trainer.total_steps", FIELD_I64, total_steps),
    PARAM("nctmc.trainer.beta1", FIELD_F32, beta1),
    PARAM("nctmc.trainer.beta2", FIELD_F32, beta2),
    PARAM("nctmc.trainer.adam_eps", FIELD_F32, adam_eps),
    PARAM("nctmc.trainer.weight_decay", FIELD_F32, weight_decay),
    PARAM("nctmc.trainer.grad_clip", FIELD_F32, grad_clip),
    PARAM("nctmc.trainer.ema_decay", FIELD_F32, ema_decay),
    PARAM("nctmc.trainer.time_eps", FIELD_F32, time_eps),
    PARAM("nctmc.trainer.label_dropout", FIELD_F32, label_dropout),
    PARAM("nctmc.trainer.seed", FIELD_U64, seed),
    PARAM_ADDED("nctmc.trainer.time_sampling", FIELD_I32, time_sampling),
    PARAM_ADDED("nctmc.trainer.accumulation", FIELD_I32, accumulation),
    STATE("nctmc.trainer.state.step", FIELD_I64, step),
    STATE("nctmc.trainer.state.optimizer_steps", FIELD_I64, optimizer_steps),
    STATE("nctmc.trainer.state.data_position", FIELD_I64, data_position),
    STATE("nctmc.trainer.state.n_skipped", FIELD_I64, n_skipped),
};
#define N_TRAINER_FIELDS ((int32_t)(sizeof trainer_fields / sizeof trainer_fields[0]))

static void *field_ptr(const trainer_field *f, nctmc_trainer_params *p, nctmc_trainer_state *s)
{
    return f->params_offset != SIZE_MAX ? (char *)p + f->params_offset
                                        : (char *)s + f->state_offset;
}

/* Writes a field's value as text that parses back to the same bits, in
 * every locale (numtext.h). */
static void format_field(const trainer_field *f, const void *value, char *out)
{
    switch (f->kind) {
    case FIELD_I32: snprintf(out, META_VALUE_MAX, "%" PRId32, *(const int32_t *)value); break;
    case FIELD_I64: snprintf(out, META_VALUE_MAX, "%" PRId64, *(const int64_t *)value); break;
    case FIELD_U64: snprintf(out, META_VALUE_MAX, "%" PRIu64, *(const uint64_t *)value); break;
    case FIELD_F32:
        /* parameters were validated finite, so this cannot fail */
        if (!numtext_format_f32(*(const float *)value, out))
            snprintf(out, META_VALUE_MAX, "nan");
        break;
    }
}

/* Strict parse: the whole string, no spaces or '+', in range, finite. */
static bool parse_field(const trainer_field *f, const char *text, void *value)
{
    if (!text)
        return false;
    int64_t i;
    switch (f->kind) {
    case FIELD_I32:
        if (!numtext_parse_i64(text, INT32_MIN, INT32_MAX, &i))
            return false;
        *(int32_t *)value = (int32_t)i;
        return true;
    case FIELD_I64: return numtext_parse_i64(text, INT64_MIN, INT64_MAX, (int64_t *)value);
    case FIELD_U64: return numtext_parse_u64(text, (uint64_t *)value);
    case FIELD_F32: return numtext_parse_f32(text, (float *)value);
    }
    return false;
}

/* ---- save ------------------------------------------------------------- */

/* Host copies of the slabs a checkpoint holds, and the tensor list over
 * them. */
typedef struct save_buffers {
    float *slab[N_SAVED_SLABS];
    float *ema;                 /* NULL without an EMA */
    st_tensor_ref *refs;
    char (*names)[TENSOR_NAME_MAX];
    st_meta meta[N_TRAINER_FIELDS];
    char values[N_TRAINER_FIELDS][META_VALUE_MAX];
} save_buffers;

static void save_buffers_free(const nctmc_trainer *t, save_buffers *b)
{
    for (int k = 0; k < N_SAVED_SLABS; k++)
        mem_free(t->be->alloc, b->slab[k]);
    mem_free(t->be->alloc, b->ema);
    mem_free(t->be->alloc, b->refs);
    mem_free(t->be->alloc, b->names);
}

static nctmc_status download_slabs(nctmc_trainer *t, save_buffers *b)
{
    size_t bytes = trainer_slab_bytes(t);
    const float *src[N_SAVED_SLABS] = {t->model->weights, t->adam_m, t->adam_v};
    for (int k = 0; k < N_SAVED_SLABS; k++) {
        b->slab[k] = mem_alloc(t->be->alloc, bytes);
        if (!b->slab[k])
            return NCTMC_ERR_OUT_OF_MEMORY;
        t->be->ops->download(t->be, b->slab[k], src[k], bytes);
    }
    if (t->ema) {
        b->ema = mem_alloc(t->be->alloc, bytes);
        if (!b->ema)
            return NCTMC_ERR_OUT_OF_MEMORY;
        t->be->ops->download(t->be, b->ema, t->ema, bytes);
    }
    return t->be->ops->synchronize(t->be);
}

/* The loader refuses non-finite weights and moments and a negative second
 * moment, so a run that diverged (finite gradients can still push a weight
 * past the float range) is not saved: writing a file the loader rejects
 * would replace the last good checkpoint with a useless one. */
static bool slabs_loadable(const nctmc_trainer *t, const save_buffers *b)
{
    size_t n = t->model->slab_floats;
    const float *slabs[] = {b->slab[SLAB_PARAMS], b->slab[SLAB_ADAM_M], b->slab[SLAB_ADAM_V],
                            b->ema};
    for (size_t k = 0; k < sizeof slabs / sizeof slabs[0]; k++)
        for (size_t e = 0; slabs[k] && e < n; e++)
            if (!isfinite(slabs[k][e]))
                return false;
    for (size_t e = 0; e < n; e++)
        if (b->slab[SLAB_ADAM_V][e] < 0.0f)
            return false;
    return true;
}

static nctmc_status build_tensor_refs(nctmc_trainer *t, save_buffers *b)
{
    const nctmc_model *m = t->model;
    size_t n = (size_t)m->n_tensors * N_SAVED_SLABS;
    b->refs = mem_calloc(t->be->alloc, n, sizeof *b->refs);
    b->names = mem_calloc(t->be->alloc, n, sizeof *b->names);
    if (!b->refs || !b->names)
        return NCTMC_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < N_SAVED_SLABS; k++) {
        for (int32_t i = 0; i < m->n_tensors; i++) {
            size_t r = (size_t)k * (size_t)m->n_tensors + (size_t)i;
            const model_tensor *tensor = &m->tensors[i];
            snprintf(b->names[r], TENSOR_NAME_MAX, "%s%s", slab_prefix[k], tensor->name);
            b->refs[r].name = b->names[r];
            b->refs[r].data = b->slab[k] + tensor->offset;
            b->refs[r].n_dims = tensor->n_dims;
            memcpy(b->refs[r].shape, tensor->shape, sizeof b->refs[r].shape);
        }
    }
    return NCTMC_OK;
}

/* The metadata names the run as one process would take it: the global
 * batch as micro_total micro-batches of batch_size (N ranks x
 * accumulation), so that any number of ranks can resume it. */
static void build_meta(nctmc_trainer *t, save_buffers *b)
{
    nctmc_trainer_params saved = t->params;
    saved.accumulation = t->micro_total;
    saved.comm = NULL;
    for (int32_t k = 0; k < N_TRAINER_FIELDS; k++) {
        const trainer_field *f = &trainer_fields[k];
        format_field(f, field_ptr(f, &saved, &t->state), b->values[k]);
        b->meta[k].key = f->key;
        b->meta[k].value = b->values[k];
    }
}

static nctmc_status save_local(nctmc_trainer *t, const char *path)
{
    save_buffers b;
    memset(&b, 0, sizeof b);
    nctmc_status st = download_slabs(t, &b);
    if (st == NCTMC_OK)
        st = build_tensor_refs(t, &b);
    if (st != NCTMC_OK) {
        save_buffers_free(t, &b);
        return FAIL_INTO(t, st, "preparing the checkpoint: %s",
                         st == NCTMC_ERR_OUT_OF_MEMORY ? "out of memory" : t->be->error);
    }
    if (!slabs_loadable(t, &b)) {
        save_buffers_free(t, &b);
        return FAIL_INTO(t, NCTMC_ERR_NON_FINITE,
                         "not saved: the weights or optimizer state hold non-finite values "
                         "(the run diverged); \"%.300s\" is untouched",
                         path);
    }
    build_meta(t, &b);
    /* Without an EMA the raw weights are what sampling uses. */
    st = model_io_save(t->model, path, b.ema ? b.ema : b.slab[SLAB_PARAMS], b.meta,
                       N_TRAINER_FIELDS, b.refs, t->model->n_tensors * N_SAVED_SLABS,
                       t->last_error, sizeof t->last_error);
    save_buffers_free(t, &b);
    if (st == NCTMC_OK)
        t->last_error[0] = '\0';
    return st;
}

/* With several ranks rank 0 writes the file and tells the others how it
 * went: every rank returns the same status, after the file is complete. */
NCTMC_API nctmc_status nctmc_trainer_save(nctmc_trainer *t, const char *path)
{
    if (!t)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!path || !*path)
        return FAIL_INTO(t, NCTMC_ERR_INVALID_ARGUMENT, "checkpoint path is empty");
    nctmc_comm *comm = t->params.comm;
    if (comm_size(comm) == 1)
        return save_local(t, path);
    struct {
        int32_t status;
        char message[NCTMC_ERROR_SIZE];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    if (comm_rank(comm) == 0) {
        outcome.status = save_local(t, path);
        memcpy(outcome.message, t->last_error, sizeof outcome.message);
    }
    char why[NCTMC_ERROR_SIZE];
    nctmc_status st = comm_broadcast(comm, &outcome, (int64_t)sizeof outcome, 0, why,
                                     sizeof why);
    if (st != NCTMC_OK)
        return FAIL_INTO(t, st, "saving the checkpoint: %s", why);
    if (outcome.status != NCTMC_OK && comm_rank(comm) != 0)
        return FAIL_INTO(t, outcome.status, "rank 0 did not write the checkpoint: %s",
                         outcome.message);
    if (outcome.status == NCTMC_OK)
        t->last_error[0] = '\0';
    return outcome.status;
}

/* ---- resume ----------------------------------------------------------- */

static nctmc_status read_trainer_meta(const st_file *file, nctmc_trainer_params *p,
                                      nctmc_trainer_state *s, char *err, size_t err_size)
{
    nctmc_trainer_params_init(p);
    nctmc_trainer_state_init(s);
    for (int32_t k = 0; k < N_TRAINER_FIELDS; k++) {
        const trainer_field *f = &trainer_fields[k];
        const char *text = st_file_meta(file, f->key);
        if (!text && f->optional) {
            /* written before the field existed: the run used its 0 value
             * (NCTMC_TIME_SAMPLING_UNIFORM), whatever today's default is */
            memset(field_ptr(f, p, s), 0, f->kind == FIELD_I32 || f->kind == FIELD_F32 ? 4 : 8);
            continue;
        }
        if (!text)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "not a trainer checkpoint: metadata \"%s\" is missing", f->key);
        if (!parse_field(f, text, field_ptr(f, p, s)))
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "metadata \"%s\" = \"%.40s\" is not a valid value", f->key, text);
    }
    s->seed = p->seed;
    if (s->step < 0 || s->optimizer_steps < 0 || s->optimizer_steps > s->step ||
        s->data_position < 0 || s->n_skipped < 0 || s->n_skipped > s->step)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "the checkpoint's training state is inconsistent");
    /* a trainer never goes past the limit, so a larger value is no state a
     * run reached, and resuming from it would overflow */
    if (s->step > TRAINER_COUNTER_MAX || s->data_position > TRAINER_COUNTER_MAX)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "the checkpoint's step %lld or data position %lld is past the "
                           "limit %lld",
                           (long long)s->step, (long long)s->data_position,
                           (long long)TRAINER_COUNTER_MAX);
    return NCTMC_OK;
}

/* The saved parameters must be ones nctmc_trainer_create() accepts for the
 * saved model, checked before anything is allocated for them: the batch
 * size and sequence length size the training workspace, so they are bounded
 * like every size a file can ask for. */
static nctmc_status check_saved_params(const st_file *file, const nctmc_trainer_params *p,
                                       char *err, size_t err_size)
{
    int64_t model_seq_len = 0;
    const char *text = st_file_meta(file, KEY_MODEL_SEQ_LEN);
    if (!text || !numtext_parse_i64(text, 1, INT32_MAX, &model_seq_len))
        return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                           "metadata \"" KEY_MODEL_SEQ_LEN "\" is missing or invalid");
    char why[NCTMC_ERROR_SIZE];
    if (trainer_params_validate(p, (int32_t)model_seq_len, why, sizeof why) != NCTMC_OK)
        return fail_format(err, err_size, NCTMC_ERR_FORMAT, "the saved trainer parameters: %s",
                           why);
    return NCTMC_OK;
}

/* Reads the tensors prefix + name of every parameter into a host slab. */
static nctmc_status read_slab(const nctmc_model *m, const st_file *file, const char *prefix,
                              float *host, char *err, size_t err_size)
{
    char name[TENSOR_NAME_MAX];
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const model_tensor *tensor = &m->tensors[i];
        snprintf(name, sizeof name, "%s%s", prefix, tensor->name);
        nctmc_status st = st_file_read_f32(file, name, tensor->n_dims, tensor->shape,
                                           host + tensor->offset, err, err_size);
        if (st == NCTMC_ERR_NOT_FOUND)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "not a trainer checkpoint: tensor \"%s\" is missing", name);
        if (st != NCTMC_OK)
            return st;
        for (int64_t e = 0; e < tensor->n_elements; e++)
            if (!isfinite(host[tensor->offset + (size_t)e]))
                return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                                   "tensor \"%s\" holds a non-finite value", name);
    }
    return NCTMC_OK;
}

/* The second AdamW moment is a mean of squares: negative values mean the
 * file is corrupt. */
static nctmc_status check_second_moment(const nctmc_model *m, const float *v, char *err,
                                        size_t err_size)
{
    for (size_t e = 0; e < m->slab_floats; e++)
        if (v[e] < 0.0f)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "the second AdamW moment holds a negative value");
    return NCTMC_OK;
}

/* Fills the trainer's moments and EMA from the file. */
static nctmc_status restore_slabs(nctmc_trainer *t, const st_file *file, char *err,
                                  size_t err_size)
{
    const nctmc_model *m = t->model;
    size_t bytes = trainer_slab_bytes(t);
    float *host = mem_calloc(t->be->alloc, m->slab_floats, sizeof(float));
    if (!host)
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    struct {
        const char *prefix;
        float *dst;
    } parts[] = {{"trainer.adam_m.", t->adam_m}, {"trainer.adam_v.", t->adam_v},
                 {"", t->ema}};
    nctmc_status st = NCTMC_OK;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0] && st == NCTMC_OK; k++) {
        if (!parts[k].dst)
            continue;
        st = read_slab(m, file, parts[k].prefix, host, err, err_size);
        if (st == NCTMC_OK && parts[k].dst == t->adam_v)
            st = check_second_moment(m, host, err, err_size);
        if (st == NCTMC_OK)
            t->be->ops->upload(t->be, parts[k].dst, host, bytes);
    }
    mem_free(t->be->alloc, host);
    if (st == NCTMC_OK && t->be->ops->synchronize(t->be) != NCTMC_OK)
        st = fail_format(err, err_size, NCTMC_ERR_BACKEND, "restoring the trainer: %s",
                         t->be->error);
    return st;
}

/* The caller's parameters replace the saved ones; *given is already read
 * into this build's struct (trainer_params_read()). The global batch
 * (batch_size x accumulation) and seq_len must stay: the draws of a step
 * depend on them. How the global batch splits into micro-batches may
 * change. */
static nctmc_status check_override(const nctmc_trainer_params *given,
                                   const nctmc_trainer_params *saved, char *err,
                                   size_t err_size)
{
    int32_t ranks = comm_size(given->comm);
    int64_t g = (int64_t)ranks * given->batch_size * given->accumulation;
    int64_t s = (int64_t)saved->batch_size * saved->accumulation;
    if (g != s || given->seq_len != saved->seq_len)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "resuming needs the saved global batch %lld (batch_size %d x "
                           "accumulation %d) and seq_len %d (given %lld = %d ranks x %d x %d, "
                           "%d)",
                           (long long)s, saved->batch_size, saved->accumulation,
                           saved->seq_len, (long long)g, ranks, given->batch_size,
                           given->accumulation, given->seq_len);
    return NCTMC_OK;
}

static nctmc_status resume_from_file(nctmc_context *ctx, const st_file *file,
                                     const nctmc_trainer_params *override,
                                     nctmc_model **model_out, nctmc_trainer **trainer_out)
{
    char *err = ctx->last_error;
    size_t err_size = sizeof ctx->last_error;
    nctmc_trainer_params params;
    nctmc_trainer_state state;
    nctmc_status st = read_trainer_meta(file, &params, &state, err, err_size);
    if (st == NCTMC_OK)
        st = check_saved_params(file, &params, err, err_size);
    if (st == NCTMC_OK && override) {
        nctmc_trainer_params given;
        st = trainer_params_read(override, &given, err, err_size);
        if (st == NCTMC_OK)
            st = check_override(&given, &params, err, err_size);
        if (st == NCTMC_OK)
            params = given;
    }
    if (st != NCTMC_OK)
        return st;
    nctmc_model *model = NULL;
    st = model_io_create(ctx, file, slab_prefix[SLAB_PARAMS], &model, err, err_size);
    if (st != NCTMC_OK)
        return st;
    nctmc_trainer *t = NULL;
    st = nctmc_trainer_create(model, &params, &t);
    if (st != NCTMC_OK) {
        fail_format(err, err_size, st, "%s", model->last_error);
        nctmc_model_free(model);
        return st;
    }
    st = restore_slabs(t, file, err, err_size);
    if (st != NCTMC_OK) {
        nctmc_trainer_free(t);
        nctmc_model_free(model);
        return st;
    }
    state.seed = params.seed;
    t->state = state;
    *model_out = model;
    *trainer_out = t;
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_trainer_resume(nctmc_context *ctx, const char *path,
                                            const nctmc_trainer_params *params,
                                            nctmc_model **model_out,
                                            nctmc_trainer **trainer_out)
{
    if (model_out)
        *model_out = NULL;
    if (trainer_out)
        *trainer_out = NULL;
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char *err = ctx->last_error;
    size_t err_size = sizeof ctx->last_error;
    if (!path || !model_out || !trainer_out)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_trainer_resume: path, model_out and trainer_out must not be "
                           "NULL");
    st_file *file = NULL;
    nctmc_status st = st_open_file(&ctx->alloc, path, &file, err, err_size);
    if (st != NCTMC_OK)
        return st;
    st = resume_from_file(ctx, file, params, model_out, trainer_out);
    st_file_free(file);
    return st;
}

NCTMC_API nctmc_status nctmc_trainer_inspect(nctmc_context *ctx, const char *path,
                                             nctmc_trainer_params *params,
                                             nctmc_trainer_state *state)
{
    if (!ctx)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char *err = ctx->last_error;
    size_t err_size = sizeof ctx->last_error;
    if (!path)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_trainer_inspect: path is NULL");
    nctmc_status st = NCTMC_OK;
    if (params)
        st = abi_check_output(params, &abi_trainer_params, err, err_size);
    if (st == NCTMC_OK && state)
        st = abi_check_output(state, &abi_trainer_state, err, err_size);
    if (st != NCTMC_OK)
        return st;
    st_file *file = NULL;
    st = st_open_file(&ctx->alloc, path, &file, err, err_size);
    if (st != NCTMC_OK)
        return st;
    nctmc_trainer_params p;
    nctmc_trainer_state s;
    if (!st_file_meta(file, KEY_STEP))
        st = fail_format(err, err_size, NCTMC_ERR_NOT_FOUND,
                         "\"%.300s\" holds no training state (a model-only checkpoint)", path);
    if (st == NCTMC_OK)
        st = st_file_verify_checksum(file, KEY_CHECKSUM, err, err_size);
    if (st == NCTMC_OK)
        st = read_trainer_meta(file, &p, &s, err, err_size);
    if (st == NCTMC_OK)
        st = check_saved_params(file, &p, err, err_size);
    st_file_free(file);
    if (st != NCTMC_OK)
        return st;
    if (params)
        abi_write(params, &p, &abi_trainer_params);
    if (state)
        abi_write(state, &s, &abi_trainer_state);
    ctx->last_error[0] = '\0';
    return NCTMC_OK;
}
