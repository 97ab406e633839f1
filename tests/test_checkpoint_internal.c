/*
 * test_checkpoint_internal.c — checkpoints against the library's internals
 * (the public half is test_checkpoint.c): trainer-style files written by
 * model_io_save() (extra metadata and "trainer." tensors ignored by
 * nctmc_model_load(), readable under a prefix by model_io_create()); crafted
 * files (missing, extra, misshapen tensors, non-finite values, bad
 * metadata), rewritten with the safetensors writer, rejected; the
 * safetensors container's reader and writer on hand-written headers.
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "model/model.h"
#include "checkpoint/model_io.h"
#include "nctmc.h"
#include "io/safetensors.h"
#include "test_files.h"
#include "test_util.h"

static char scratch[256];

static nctmc_model_config tiny_config(nctmc_process process, nctmc_schedule schedule)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 7;
    cfg.vocab_pad_multiple = 4;
    cfg.seq_len = 4;
    cfg.n_layers = 2;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.cond_dim = 4;
    cfg.n_classes = 2;
    cfg.process = process;
    cfg.schedule = schedule;
    cfg.mixture_uniform = 0.3f;
    cfg.schedule_eps = 0.0123456789f;
    cfg.seed = 0xFEDCBA9876543210ull;
    return cfg;
}

/* Every weight random (a fresh model has zero blocks that would hide a
 * mix-up between tensors). */
static void randomise(nctmc_model *m, test_rng *rng)
{
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc(sizeof(float) * (size_t)info.n_elements);
        test_fill_uniform(rng, v, (size_t)info.n_elements, -0.5f, 0.5f);
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

/* A model of cfg with random weights and, if the vocabulary allows, a
 * character tokenizer of its data tokens. */
static nctmc_model *make_model(nctmc_context *ctx, const nctmc_model_config *cfg,
                               test_rng *rng)
{
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, cfg, &m) != NCTMC_OK)
        return NULL;
    randomise(m, rng);
    int32_t data = cfg->process == NCTMC_PROCESS_UNIFORM ? cfg->vocab_size : cfg->vocab_size - 1;
    static const char letters[] = "ab\xc3\xa9" "cdefgh";
    char corpus[32];
    size_t n = 0;
    for (int32_t i = 0, taken = 0; taken < data; taken++) { /* é counts as one */
        size_t len = letters[i] & 0x80 ? 2 : 1;
        memcpy(corpus + n, letters + i, len);
        n += len;
        i += (int32_t)len;
    }
    nctmc_tokenizer *tok = NULL;
    nctmc_tokenizer_create_chars(ctx, corpus, n, &tok);
    nctmc_model_set_tokenizer(m, tok);
    nctmc_tokenizer_free(tok);
    return m;
}

static bool same_weights(const nctmc_model *a, const nctmc_model *b)
{
    if (nctmc_model_n_tensors(a) != nctmc_model_n_tensors(b))
        return false;
    bool same = true;
    for (int32_t k = 0; k < nctmc_model_n_tensors(a) && same; k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(a, k, &info);
        size_t n = (size_t)info.n_elements;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        same = nctmc_model_read_tensor(a, info.name, x, info.n_elements) == NCTMC_OK &&
               nctmc_model_read_tensor(b, info.name, y, info.n_elements) == NCTMC_OK &&
               memcmp(x, y, sizeof(float) * n) == 0;
        free(x);
        free(y);
    }
    return same;
}

static bool same_tokenizer(const nctmc_model *a, const nctmc_model *b)
{
    const nctmc_tokenizer *ta = nctmc_model_get_tokenizer(a);
    const nctmc_tokenizer *tb = nctmc_model_get_tokenizer(b);
    if (!ta || !tb)
        return ta == tb;
    int32_t n = nctmc_tokenizer_vocab_size(ta);
    if (n != nctmc_tokenizer_vocab_size(tb) ||
        nctmc_tokenizer_get_kind(ta) != nctmc_tokenizer_get_kind(tb))
        return false;
    int32_t ids[16];
    char x[64], y[64];
    size_t nx = 0, ny = 0;
    for (int32_t i = 0; i < n; i++)
        ids[i] = i;
    nctmc_tokenizer_decode((nctmc_tokenizer *)ta, ids, (size_t)n, x, sizeof x, &nx);
    nctmc_tokenizer_decode((nctmc_tokenizer *)tb, ids, (size_t)n, y, sizeof y, &ny);
    return nx == ny && memcmp(x, y, nx) == 0;
}

/* A trainer-style file: extra metadata and "trainer." tensors are ignored by
 * nctmc_model_load() and readable under a prefix by model_io_create(). */
static void test_extras(nctmc_context *ctx, test_rng *rng)
{
    char path[512];
    test_path(path, sizeof path, scratch, "trainer.safetensors");
    nctmc_model_config cfg = tiny_config(NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_COSINE);
    nctmc_model *a = make_model(ctx, &cfg, rng);
    nctmc_model *b = make_model(ctx, &cfg, rng); /* other weights: the "raw" ones */
    if (!a || !b)
        return;
    int32_t n = nctmc_model_n_tensors(b);
    st_tensor_ref *extra = calloc((size_t)n, sizeof *extra);
    char (*names)[96] = calloc((size_t)n, sizeof *names);
    float *slab = malloc(sizeof(float) * b->slab_floats);
    b->ctx->backend->ops->download(b->ctx->backend, slab, b->weights,
                                   sizeof(float) * b->slab_floats);
    for (int32_t k = 0; k < n; k++) {
        snprintf(names[k], sizeof names[k], "trainer.params.%s", b->tensors[k].name);
        extra[k].name = names[k];
        extra[k].data = slab + b->tensors[k].offset;
        extra[k].n_dims = b->tensors[k].n_dims;
        memcpy(extra[k].shape, b->tensors[k].shape, sizeof extra[k].shape);
    }
    st_meta meta[2] = {{"nctmc.trainer.step", "12"}, {"user.note", "hello \"world\"\n"}};
    char err[512] = "";
    CHECK(model_io_save(a, path, NULL, meta, 2, extra, n, err, sizeof err) == NCTMC_OK,
          "save with extras: %s", err);
    nctmc_model *back = NULL;
    CHECK(nctmc_model_load(ctx, path, &back) == NCTMC_OK && same_weights(a, back),
          "standard weights from a trainer file: %s", nctmc_context_last_error(ctx));
    nctmc_model_free(back);
    back = NULL;
    st_file *f = NULL;
    CHECK(st_read_file(path, &f, err, sizeof err) == NCTMC_OK, "read: %s", err);
    CHECK(f && st_file_meta(f, "user.note") && strcmp(st_file_meta(f, "user.note"),
                                                      "hello \"world\"\n") == 0,
          "escaped metadata comes back");
    CHECK(f && model_io_create(ctx, f, "trainer.params.", &back, ctx->last_error,
                               sizeof ctx->last_error) == NCTMC_OK &&
              same_weights(b, back) && same_tokenizer(a, back),
          "prefixed weights (err aliasing ctx->last_error): %s", nctmc_context_last_error(ctx));
    nctmc_model_free(back);
    back = NULL;
    CHECK(f && model_io_create(ctx, f, "trainer.adam_m.", &back, err, sizeof err) ==
                   NCTMC_ERR_FORMAT && !back,
          "a prefix with no tensors: %s", err);
    st_file_free(f);
    /* extras that would clash are refused before anything is written */
    st_meta clash[1] = {{"nctmc.format", "1"}};
    unlink(path);
    CHECK(model_io_save(a, path, NULL, clash, 1, NULL, 0, err, sizeof err) ==
                  NCTMC_ERR_INVALID_ARGUMENT &&
              test_count_entries(scratch) == 0,
          "duplicate metadata key refused: %s", err);
    extra[0].name = "vocab_embed.embedding";
    CHECK(model_io_save(a, path, NULL, NULL, 0, extra, 1, err, sizeof err) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "duplicate tensor refused: %s", err);
    free(slab);
    free(names);
    free(extra);
    nctmc_model_free(a);
    nctmc_model_free(b);
}

/* ---- damaged files --------------------------------------------------------------- */

static nctmc_status load_status(nctmc_context *ctx, const char *path)
{
    nctmc_model *m = (nctmc_model *)&m; /* must come back NULL */
    nctmc_status st = nctmc_model_load(ctx, path, &m);
    if (st != NCTMC_OK && (m != NULL || !nctmc_context_last_error(ctx)[0]))
        return (nctmc_status)-1;
    nctmc_model_free(m);
    return st;
}

/* ---- crafted files ---------------------------------------------------------------- */

/* The pieces of a saved checkpoint, to be edited and written again. */
typedef struct pieces {
    int32_t n_meta;
    st_meta meta[64];
    char *meta_store[64][2];
    int32_t n_tensors;
    st_tensor_ref tensors[64];
    float *data[64];        /* owned, as read (edits may reorder tensors) */
    char *names[64];
    int32_t n_owned;
} pieces;

static bool take_apart(const char *path, pieces *p)
{
    char err[512];
    st_file *f = NULL;
    memset(p, 0, sizeof *p);
    if (st_read_file(path, &f, err, sizeof err) != NCTMC_OK)
        return false;
    for (int32_t i = 0; i < st_file_n_meta(f) && p->n_meta < 64; i++) {
        const char *key = st_file_meta_key(f, i);
        if (strcmp(key, "nctmc.checksum") == 0)
            continue; /* written afresh */
        p->meta_store[p->n_meta][0] = strdup(key);
        p->meta_store[p->n_meta][1] = strdup(st_file_meta(f, key));
        p->meta[p->n_meta].key = p->meta_store[p->n_meta][0];
        p->meta[p->n_meta].value = p->meta_store[p->n_meta][1];
        p->n_meta++;
    }
    for (int32_t i = 0; i < st_file_n_tensors(f) && p->n_tensors < 64; i++) {
        st_tensor_desc d;
        st_file_tensor_desc(f, i, &d);
        st_tensor_ref *t = &p->tensors[p->n_tensors];
        t->name = d.name;
        t->n_dims = d.n_dims;
        memcpy(t->shape, d.shape, sizeof t->shape);
        p->data[p->n_tensors] = malloc(d.n_bytes + 4);
        st_file_read_f32(f, d.name, d.n_dims, d.shape, p->data[p->n_tensors], err, sizeof err);
        t->data = p->data[p->n_tensors];
        t->name = p->names[p->n_tensors] = strdup(d.name);
        p->n_tensors++;
        p->n_owned++;
    }
    st_file_free(f);
    return true;
}

static void free_pieces(pieces *p)
{
    for (int32_t i = 0; i < p->n_meta; i++) {
        free(p->meta_store[i][0]);
        free(p->meta_store[i][1]);
    }
    for (int32_t i = 0; i < p->n_owned; i++) {
        free(p->data[i]);
        free(p->names[i]);
    }
}

static st_meta *find_meta(pieces *p, const char *key)
{
    for (int32_t i = 0; i < p->n_meta; i++)
        if (strcmp(p->meta[i].key, key) == 0)
            return &p->meta[i];
    return NULL;
}

static int32_t find_tensor(pieces *p, const char *name)
{
    for (int32_t i = 0; i < p->n_tensors; i++)
        if (strcmp(p->tensors[i].name, name) == 0)
            return i;
    return -1;
}

typedef void (*edit_fn)(pieces *p);

static void edit_nothing(pieces *p) { (void)p; }
static void edit_drop_tensor(pieces *p)
{
    int32_t k = find_tensor(p, "blocks.0.mlp.0.bias");
    p->tensors[k] = p->tensors[--p->n_tensors];
}
static void edit_swap_shape(pieces *p)
{
    st_tensor_ref *t = &p->tensors[find_tensor(p, "blocks.0.attn_qkv.weight")];
    int64_t d = t->shape[0];
    t->shape[0] = t->shape[1];
    t->shape[1] = d;
}
static void edit_flatten(pieces *p)
{
    st_tensor_ref *t = &p->tensors[find_tensor(p, "vocab_embed.embedding")];
    t->shape[0] *= t->shape[1];
    t->n_dims = 1;
}
static void edit_extra_tensor(pieces *p)
{
    p->tensors[p->n_tensors] = p->tensors[0];
    p->tensors[p->n_tensors].name = "blocks.7.norm1.weight";
    p->n_tensors++;
}
static void edit_trainer_tensor(pieces *p)
{
    p->tensors[p->n_tensors] = p->tensors[0];
    p->tensors[p->n_tensors].name = "trainer.something";
    p->n_tensors++;
}
static void edit_nan(pieces *p)
{
    ((float *)p->tensors[find_tensor(p, "blocks.0.norm2.weight")].data)[1] = NAN;
}
static void edit_inf(pieces *p)
{
    ((float *)p->tensors[find_tensor(p, "output_layer.rate_head.bias")].data)[0] = -INFINITY;
}
static void edit_version(pieces *p) { find_meta(p, "nctmc.format")->value = "3"; }
/* format 1 predates the time input and exit link: their keys are unknown */
static void edit_format1_new_keys(pieces *p) { find_meta(p, "nctmc.format")->value = "1"; }
static void edit_no_time_input(pieces *p)
{
    find_meta(p, "nctmc.config.time_input")->key = "other.time_input";
}
static void edit_bad_exit_link(pieces *p)
{
    find_meta(p, "nctmc.config.exit_link")->value = "Sigma";
}
static void edit_legacy_values(pieces *p)
{
    find_meta(p, "nctmc.config.time_input")->value = "t";
    find_meta(p, "nctmc.config.exit_link")->value = "sigma";
}
static void edit_no_version(pieces *p) { find_meta(p, "nctmc.format")->key = "other.format"; }
static void edit_heads(pieces *p) { find_meta(p, "nctmc.config.n_heads")->value = "3"; }
static void edit_junk_int(pieces *p) { find_meta(p, "nctmc.config.seq_len")->value = "4x"; }
static void edit_space_int(pieces *p) { find_meta(p, "nctmc.config.seq_len")->value = " 4"; }
static void edit_huge_int(pieces *p)
{
    find_meta(p, "nctmc.config.seq_len")->value = "99999999999999999999";
}
static void edit_nan_float(pieces *p)
{
    find_meta(p, "nctmc.config.mixture_uniform")->value = "nan";
}
static void edit_hex_float(pieces *p)
{
    find_meta(p, "nctmc.config.mixture_uniform")->value = "0x1p-2";
}
static void edit_range_float(pieces *p)
{
    find_meta(p, "nctmc.config.mixture_uniform")->value = "1.5";
}
static void edit_big_float(pieces *p)
{
    find_meta(p, "nctmc.config.schedule_eps")->value = "1e39";
}
static void edit_process(pieces *p) { find_meta(p, "nctmc.config.process")->value = "Uniform"; }
static void edit_seed(pieces *p) { find_meta(p, "nctmc.config.seed")->value = "-1"; }
static void edit_unknown_key(pieces *p) { find_meta(p, "nctmc.library_version")->key = "nctmc.colour"; }
static void edit_missing_key(pieces *p) { find_meta(p, "nctmc.config.cond_dim")->key = "x.cond_dim"; }
static void edit_tok_vocab(pieces *p)
{
    find_meta(p, "nctmc.tokenizer.vocab_size")->value = "3";
    find_meta(p, "nctmc.tokenizer.alphabet")->value = "61 62 63";
}
static void edit_tok_kind(pieces *p) { find_meta(p, "nctmc.tokenizer.kind")->value = "bytes"; }
static void edit_tok_alphabet(pieces *p)
{
    st_meta *m = find_meta(p, "nctmc.tokenizer.alphabet");
    m->value = "61 62 63 64 66 65"; /* not increasing */
}
/* The model has 4 positions and 6 data tokens: an image tokenizer of 6
 * levels fits it as 2 x 2 pixels, and contradicts it as 4 x 2. */
static void make_image_tokenizer(pieces *p, const char *width, const char *height)
{
    find_meta(p, "nctmc.tokenizer.kind")->value = "image";
    find_meta(p, "nctmc.tokenizer.alphabet")->key = "someone.alphabet";
    p->meta[p->n_meta++] = (st_meta){"nctmc.tokenizer.width", width};
    p->meta[p->n_meta++] = (st_meta){"nctmc.tokenizer.height", height};
    p->meta[p->n_meta++] = (st_meta){"nctmc.tokenizer.levels", "6"};
}
static void edit_tok_image_fits(pieces *p) { make_image_tokenizer(p, "2", "2"); }
static void edit_tok_image_too_big(pieces *p) { make_image_tokenizer(p, "4", "2"); }
static void edit_tok_image_too_small(pieces *p) { make_image_tokenizer(p, "1", "2"); }
static void edit_user_key(pieces *p)
{
    p->meta[p->n_meta++] = (st_meta){"someone.else", "is fine"};
}

/* The recommended sampling settings (issue 34): all three keys, valid
 * names and a step count in 1 .. 1000000, in any format. */
static void add_sampling(pieces *p, const char *method, const char *grid, const char *steps)
{
    if (method)
        p->meta[p->n_meta++] = (st_meta){"nctmc.sample.method", method};
    if (grid)
        p->meta[p->n_meta++] = (st_meta){"nctmc.sample.grid", grid};
    if (steps)
        p->meta[p->n_meta++] = (st_meta){"nctmc.sample.steps", steps};
}
static void edit_sampling(pieces *p) { add_sampling(p, "euler", "geometric", "7"); }
static void edit_sampling_no_grid(pieces *p) { add_sampling(p, "euler", NULL, "7"); }
static void edit_sampling_only_steps(pieces *p) { add_sampling(p, NULL, NULL, "7"); }
static void edit_sampling_method(pieces *p) { add_sampling(p, "Euler", "uniform", "7"); }
static void edit_sampling_grid(pieces *p) { add_sampling(p, "tau", "even", "7"); }
static void edit_sampling_zero(pieces *p) { add_sampling(p, "tau", "uniform", "0"); }
static void edit_sampling_many(pieces *p) { add_sampling(p, "tau", "uniform", "1000001"); }
static void edit_sampling_junk(pieces *p) { add_sampling(p, "tau", "uniform", "64 "); }
static void edit_sampling_format1(pieces *p)
{
    edit_legacy_values(p);
    find_meta(p, "nctmc.format")->value = "1";
    find_meta(p, "nctmc.config.time_input")->key = "other.time_input";
    find_meta(p, "nctmc.config.exit_link")->key = "other.exit_link";
    add_sampling(p, "posterior", "uniform", "1000000");
}

typedef struct crafted {
    const char *what;
    edit_fn edit;
    bool checksum;
    nctmc_status expect;
} crafted;

static const crafted crafted_cases[] = {
    {"unchanged", edit_nothing, true, NCTMC_OK},
    {"no checksum", edit_nothing, false, NCTMC_ERR_FORMAT},
    {"missing tensor", edit_drop_tensor, true, NCTMC_ERR_FORMAT},
    {"transposed shape", edit_swap_shape, true, NCTMC_ERR_FORMAT},
    {"flattened shape", edit_flatten, true, NCTMC_ERR_FORMAT},
    {"tensor of no layer", edit_extra_tensor, true, NCTMC_ERR_FORMAT},
    {"trainer tensor", edit_trainer_tensor, true, NCTMC_OK},
    {"NaN weight", edit_nan, true, NCTMC_ERR_FORMAT},
    {"infinite weight", edit_inf, true, NCTMC_ERR_FORMAT},
    {"format 3", edit_version, true, NCTMC_ERR_FORMAT},
    {"format 1 with the time input and exit link", edit_format1_new_keys, true,
     NCTMC_ERR_FORMAT},
    {"format 2 without the time input", edit_no_time_input, true, NCTMC_ERR_FORMAT},
    {"unknown exit link", edit_bad_exit_link, true, NCTMC_ERR_FORMAT},
    {"format 2 with the 0.2.0 time input and link", edit_legacy_values, true, NCTMC_OK},
    {"no format", edit_no_version, true, NCTMC_ERR_FORMAT},
    {"heads not dividing d", edit_heads, true, NCTMC_ERR_FORMAT},
    {"trailing junk", edit_junk_int, true, NCTMC_ERR_FORMAT},
    {"leading space", edit_space_int, true, NCTMC_ERR_FORMAT},
    {"integer overflow", edit_huge_int, true, NCTMC_ERR_FORMAT},
    {"NaN float", edit_nan_float, true, NCTMC_ERR_FORMAT},
    {"hex float", edit_hex_float, true, NCTMC_ERR_FORMAT},
    {"mixture_uniform 1.5", edit_range_float, true, NCTMC_ERR_FORMAT},
    {"float overflow", edit_big_float, true, NCTMC_ERR_FORMAT},
    {"process name case", edit_process, true, NCTMC_ERR_FORMAT},
    {"negative seed", edit_seed, true, NCTMC_ERR_FORMAT},
    {"unknown nctmc key", edit_unknown_key, true, NCTMC_ERR_FORMAT},
    {"missing config key", edit_missing_key, true, NCTMC_ERR_FORMAT},
    {"tokenizer vocabulary", edit_tok_vocab, true, NCTMC_ERR_FORMAT},
    {"tokenizer kind", edit_tok_kind, true, NCTMC_ERR_FORMAT},
    {"tokenizer alphabet order", edit_tok_alphabet, true, NCTMC_ERR_FORMAT},
    {"image tokenizer of the model's shape", edit_tok_image_fits, true, NCTMC_OK},
    {"image tokenizer larger than a sequence", edit_tok_image_too_big, true, NCTMC_ERR_FORMAT},
    {"image tokenizer smaller than a sequence", edit_tok_image_too_small, true,
     NCTMC_ERR_FORMAT},
    {"someone else's key", edit_user_key, true, NCTMC_OK},
    {"sampling settings", edit_sampling, true, NCTMC_OK},
    {"sampling settings in a format-1 file", edit_sampling_format1, true, NCTMC_OK},
    {"sampling settings without the grid", edit_sampling_no_grid, true, NCTMC_ERR_FORMAT},
    {"sampling settings: only the steps", edit_sampling_only_steps, true, NCTMC_ERR_FORMAT},
    {"sampling method name case", edit_sampling_method, true, NCTMC_ERR_FORMAT},
    {"unknown sampling grid", edit_sampling_grid, true, NCTMC_ERR_FORMAT},
    {"zero sampling steps", edit_sampling_zero, true, NCTMC_ERR_FORMAT},
    {"too many sampling steps", edit_sampling_many, true, NCTMC_ERR_FORMAT},
    {"sampling steps with a space", edit_sampling_junk, true, NCTMC_ERR_FORMAT},
};

/* The loaded model recommends what the file says, whatever its process's
 * defaults are (this base is a mixture model: posterior, even grid, 128). */
static void check_sampling_read(nctmc_context *ctx, const char *path, bool euler)
{
    nctmc_model *m = NULL;
    if (nctmc_model_load(ctx, path, &m) != NCTMC_OK)
        return;
    nctmc_sample_params sp;
    nctmc_sample_params_init(&sp);
    CHECK(nctmc_sample_params_from_model(m, &sp) == NCTMC_OK, "from_model");
    if (euler)
        CHECK(sp.method == NCTMC_SAMPLE_EULER && sp.grid == NCTMC_GRID_GEOMETRIC &&
                  sp.n_steps == 7,
              "the file's settings: %d %d %d", (int)sp.method, (int)sp.grid, (int)sp.n_steps);
    else
        CHECK(sp.method == NCTMC_SAMPLE_POSTERIOR && sp.grid == NCTMC_GRID_UNIFORM &&
                  sp.n_steps == 1000000,
              "the format-1 file's settings: %d %d %d", (int)sp.method, (int)sp.grid,
              (int)sp.n_steps);
    nctmc_model_free(m);
}

static void test_crafted(nctmc_context *ctx, test_rng *rng)
{
    char path[512], out[512], err[512];
    test_path(path, sizeof path, scratch, "base.safetensors");
    test_path(out, sizeof out, scratch, "crafted.safetensors");
    nctmc_model_config cfg = tiny_config(NCTMC_PROCESS_MIXTURE, NCTMC_SCHEDULE_LOGLINEAR);
    cfg.n_layers = 1;
    nctmc_model *m = make_model(ctx, &cfg, rng);
    if (!m || nctmc_model_save(m, path) != NCTMC_OK) {
        CHECK(0, "base checkpoint");
        nctmc_model_free(m);
        return;
    }
    nctmc_model_free(m);
    for (size_t k = 0; k < sizeof crafted_cases / sizeof crafted_cases[0]; k++) {
        const crafted *c = &crafted_cases[k];
        pieces p;
        if (!take_apart(path, &p)) {
            CHECK(0, "take apart");
            return;
        }
        c->edit(&p);
        nctmc_status st = c->checksum ? st_write_file_checksummed(out, p.meta, p.n_meta,
                                                                  "nctmc.checksum", p.tensors,
                                                                  p.n_tensors, err, sizeof err)
                                      : st_write_file(out, p.meta, p.n_meta, p.tensors,
                                                      p.n_tensors, err, sizeof err);
        CHECK(st == NCTMC_OK, "%s: write: %s", c->what, err);
        st = load_status(ctx, out);
        CHECK(st == c->expect, "%s: load gives %d, expected %d (%s)", c->what, (int)st,
              (int)c->expect, nctmc_context_last_error(ctx));
        if (st == NCTMC_OK && (c->edit == edit_sampling || c->edit == edit_sampling_format1))
            check_sampling_read(ctx, out, c->edit == edit_sampling);
        free_pieces(&p);
    }
    unlink(out);
    unlink(path);
}

/* ---- the container: hand-written headers ------------------------------------- */

/* Writes 8-byte length + header + data_bytes of data (bytes 0, 1, 2, ...). */
static void write_raw(const char *path, const char *header, size_t data_bytes)
{
    size_t n = strlen(header);
    uint8_t *file = malloc(8 + n + data_bytes + 1);
    for (int i = 0; i < 8; i++)
        file[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(file + 8, header, n);
    for (size_t i = 0; i < data_bytes; i++)
        file[8 + n + i] = (uint8_t)i;
    test_write_bytes(path, file, 8 + n + data_bytes);
    free(file);
}

#define T1 "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static const struct {
    const char *what;
    const char *header;
    size_t data;
    nctmc_status expect;
} headers[] = {
    {"minimal", "{" T1 "}", 4, NCTMC_OK},
    {"empty", "{}", 0, NCTMC_OK},
    {"null metadata", "{\"__metadata__\":null," T1 "}", 4, NCTMC_OK},
    {"whitespace", "{ \"t\" :\t{ \"dtype\" : \"F32\" ,\n\"shape\":[ 1 ],\"data_offsets\":[0 ,4]} }   ",
     4, NCTMC_OK},
    {"unknown tensor field skipped",
     "{\"t\":{\"dtype\":\"F32\",\"x\":{\"a\":[1,-2.5e3,{\"b\":null}],\"c\":true},"
     "\"shape\":[1],\"data_offsets\":[0,4]}}",
     4, NCTMC_OK},
    {"zero-sized tensors",
     "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]}," T1
     ",\"y\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
     4, NCTMC_OK},
    {"other dtypes", "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}," T1 "}", 8,
     NCTMC_OK},
    {"8 dimensions", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[0,2]}}",
     2, NCTMC_OK},
    {"9 dimensions",
     "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,2]}}", 2,
     NCTMC_ERR_FORMAT},
    {"leading space", " {" T1 "}", 4, NCTMC_ERR_FORMAT},
    {"trailing junk", "{" T1 "}x", 4, NCTMC_ERR_FORMAT},
    {"two objects", "{" T1 "}{}", 4, NCTMC_ERR_FORMAT},
    {"unterminated", "{" T1, 4, NCTMC_ERR_FORMAT},
    {"trailing comma", "{" T1 ",}", 4, NCTMC_ERR_FORMAT},
    {"not an object", "[1]", 0, NCTMC_ERR_FORMAT},
    {"duplicate tensor",
     "{" T1 ",\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     NCTMC_ERR_FORMAT},
    {"duplicate metadata key", "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0,
     NCTMC_ERR_FORMAT},
    {"two __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, NCTMC_ERR_FORMAT},
    {"metadata number", "{\"__metadata__\":{\"a\":1}}", 0, NCTMC_ERR_FORMAT},
    {"metadata object", "{\"__metadata__\":{\"a\":{}}}", 0, NCTMC_ERR_FORMAT},
    {"duplicate field", "{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}",
     4, NCTMC_ERR_FORMAT},
    {"missing dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NCTMC_ERR_FORMAT},
    {"unknown dtype", "{\"t\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"fraction in shape", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"leading zero", "{\"t\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"negative dimension", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"huge dimension",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"shape overflow",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"one offset", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
     NCTMC_ERR_FORMAT},
    {"reversed offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
     NCTMC_ERR_FORMAT},
    {"size mismatch", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"gap", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     NCTMC_ERR_FORMAT},
    {"overlap", "{" T1 ",\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 6,
     NCTMC_ERR_FORMAT},
    {"data not covered", "{" T1 "}", 8, NCTMC_ERR_FORMAT},
    {"data past the end", "{" T1 "}", 3, NCTMC_ERR_FORMAT},
    {"deep nesting",
     "{\"t\":{\"dtype\":\"F32\",\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]"
     "]]]]]]]]]]]]]]]]]]]],\"shape\":[1],\"data_offsets\":[0,4]}}",
     4, NCTMC_ERR_FORMAT},
    {"bad literal", "{\"t\":{\"dtype\":\"F32\",\"x\":nul,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"bad number", "{\"t\":{\"dtype\":\"F32\",\"x\":-,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     NCTMC_ERR_FORMAT},
    {"lone high surrogate", "{\"__metadata__\":{\"a\":\"\\ud83d\"}}", 0, NCTMC_ERR_FORMAT},
    {"lone low surrogate", "{\"__metadata__\":{\"a\":\"\\ude00x\"}}", 0, NCTMC_ERR_FORMAT},
    {"reversed surrogates", "{\"__metadata__\":{\"a\":\"\\ude00\\ud83d\"}}", 0, NCTMC_ERR_FORMAT},
    {"\\u0000", "{\"__metadata__\":{\"a\":\"x\\u0000\"}}", 0, NCTMC_ERR_FORMAT},
    {"short \\u", "{\"__metadata__\":{\"a\":\"\\u12\"}}", 0, NCTMC_ERR_FORMAT},
    {"unknown escape", "{\"__metadata__\":{\"a\":\"\\x41\"}}", 0, NCTMC_ERR_FORMAT},
    {"raw newline", "{\"__metadata__\":{\"a\":\"x\ny\"}}", 0, NCTMC_ERR_FORMAT},
    {"invalid UTF-8", "{\"__metadata__\":{\"a\":\"\xc3\x28\"}}", 0, NCTMC_ERR_FORMAT},
    {"overlong UTF-8", "{\"__metadata__\":{\"a\":\"\xc0\xaf\"}}", 0, NCTMC_ERR_FORMAT},
    {"unterminated string", "{\"__metadata__\":{\"a\":\"abc}}", 0, NCTMC_ERR_FORMAT},
};

/* Header strings are decoded 8 plain ASCII bytes at a time (json.c): a
 * control byte, a non-ASCII character or an escape at any position of a
 * word — first, last, in the tail — is still found and handled. */
static void test_string_runs(void)
{
    static const struct {
        const char *raw, *decoded; /* decoded NULL: the header is rejected */
    } specials[] = {
        {"\x01", NULL},       {"\x1f", NULL},         {"\x7f", "\x7f"},
        {"\xc3\xa9", "\xc3\xa9"}, {"\xc3", NULL}, {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
        {"\\n", "\n"},      {"\\\"", "\""},      {"\\u00e9", "\xc3\xa9"},
        {"\\q", NULL},
    };
    static const size_t lengths[] = {7, 8, 9, 16, 17, 33};
    char path[512], err[512], value[128], want[128], header[256];
    test_path(path, sizeof path, scratch, "strings.safetensors");
    int bad = 0;
    for (size_t s = 0; s < sizeof specials / sizeof specials[0]; s++)
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (size_t at = 0; at <= lengths[l]; at++) {
                size_t tail = lengths[l] - at;
                snprintf(value, sizeof value, "%.*s%s%.*s", (int)at,
                         "abcdefghijklmnopqrstuvwxyz0123456789", specials[s].raw, (int)tail,
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
                snprintf(want, sizeof want, "%.*s%s%.*s", (int)at,
                         "abcdefghijklmnopqrstuvwxyz0123456789",
                         specials[s].decoded ? specials[s].decoded : "", (int)tail,
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
                snprintf(header, sizeof header, "{\"__metadata__\":{\"k\":\"%s\"}}", value);
                write_raw(path, header, 0);
                st_file *f = NULL;
                nctmc_status st = st_read_file(path, &f, err, sizeof err);
                const char *got = f ? st_file_meta(f, "k") : NULL;
                if (specials[s].decoded ? !(st == NCTMC_OK && got && strcmp(got, want) == 0)
                                        : !(st == NCTMC_ERR_FORMAT && !f && err[0])) {
                    CHECK(0, "special %zu at %zu of %zu: status %d (%s)", s, at, lengths[l],
                          (int)st, err);
                    bad++;
                }
                st_file_free(f);
            }
    CHECK(bad == 0, "every string with a special byte anywhere decodes or fails as it must");
    unlink(path);
}

static void test_container(void)
{
    char path[512], err[512];
    test_path(path, sizeof path, scratch, "raw.safetensors");
    for (size_t k = 0; k < sizeof headers / sizeof headers[0]; k++) {
        write_raw(path, headers[k].header, headers[k].data);
        st_file *f = (st_file *)&f;
        err[0] = '\0';
        nctmc_status st = st_read_file(path, &f, err, sizeof err);
        CHECK(st == headers[k].expect && (st == NCTMC_OK) == (f != NULL) &&
                  (st == NCTMC_OK || err[0]),
              "%s: status %d, expected %d (%s)", headers[k].what, (int)st,
              (int)headers[k].expect, err);
        st_file_free(st == NCTMC_OK ? f : NULL);
    }

    /* escapes decode to the right UTF-8; tensors read by name and shape */
    write_raw(path,
              "{\"__metadata__\":{\"k\\u00e9y\":\"caf\\u00e9 \\ud83d\\ude00 \\n\\t\\\"\\\\\\/\\b\\f\\r"
              "\\u20AC\"}," T1 ",\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
              8);
    st_file *f = NULL;
    CHECK(st_read_file(path, &f, err, sizeof err) == NCTMC_OK, "escapes: %s", err);
    if (!f)
        return;
    const char *v = st_file_meta(f, "k\xc3\xa9y");
    CHECK(v && strcmp(v, "caf\xc3\xa9 \xf0\x9f\x98\x80 \n\t\"\\/\b\f\r\xe2\x82\xac") == 0,
          "escapes decoded");
    CHECK(st_file_n_meta(f) == 1 && st_file_meta(f, "other") == NULL, "one metadata entry");
    float x = 0;
    int64_t one = 1, two = 2;
    CHECK(st_file_read_f32(f, "t", 1, &one, &x, err, sizeof err) == NCTMC_OK, "read t");
    uint32_t bits;
    memcpy(&bits, &x, 4);
    CHECK(bits == 0x03020100u, "data bytes 00 01 02 03 read as little-endian (%08x)", bits);
    CHECK(st_file_read_f32(f, "t", 1, &two, &x, err, sizeof err) == NCTMC_ERR_FORMAT,
          "wrong shape");
    CHECK(st_file_read_f32(f, "h", 1, &two, &x, err, sizeof err) == NCTMC_ERR_FORMAT,
          "F16 is not F32");
    CHECK(st_file_read_f32(f, "nope", 1, &one, &x, err, sizeof err) == NCTMC_ERR_NOT_FOUND,
          "missing");
    CHECK(st_file_find_tensor(f, "h") == 1 && st_file_find_tensor(f, "t") == 0 &&
              strcmp(st_file_tensor_name(f, 1), "h") == 0 && !st_file_tensor_name(f, 2),
          "file order and lookup");
    CHECK(st_file_verify_checksum(f, "nctmc.checksum", err, sizeof err) == NCTMC_ERR_FORMAT,
          "no checksum to verify");
    st_file_free(f);
    unlink(path);

    /* the writer refuses what it cannot write faithfully */
    float data[2] = {1, 2};
    st_tensor_ref t[2] = {{"a", data, 1, {2}, 0, NULL}, {"a", data, 1, {2}, 0, NULL}};
    st_meta bad_utf8 = {"k", "\xff"};
    st_meta reserved = {"k", "v"};
    CHECK(st_write_file(path, NULL, 0, t, 2, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT,
          "duplicate names");
    CHECK(st_write_file(path, &bad_utf8, 1, t, 1, err, sizeof err) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "invalid UTF-8 value");
    t[1].name = "__metadata__";
    CHECK(st_write_file(path, &reserved, 1, t, 2, err, sizeof err) ==
              NCTMC_ERR_INVALID_ARGUMENT,
          "a tensor named __metadata__");
    t[1] = (st_tensor_ref){"b", NULL, 1, {2}, 0, NULL};
    CHECK(st_write_file(path, NULL, 0, t, 2, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT,
          "no data");
    t[1] = (st_tensor_ref){"b", data, 1, {-2}, 0, NULL};
    CHECK(st_write_file(path, NULL, 0, t, 2, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT,
          "negative dimension");
    t[1] = (st_tensor_ref){"b", data, 5, {2}, 0, NULL};
    CHECK(st_write_file(path, NULL, 0, t, 2, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT,
          "5 dimensions");
    CHECK(test_count_entries(scratch) == 0, "nothing written");
    /* a scalar and an empty tensor round-trip */
    t[0] = (st_tensor_ref){"scalar", data, 0, {0}, 0, NULL};
    t[1] = (st_tensor_ref){"empty", NULL, 2, {0, 3}, 0, NULL};
    CHECK(st_write_file(path, NULL, 0, t, 2, err, sizeof err) == NCTMC_OK &&
              st_read_file(path, &f, err, sizeof err) == NCTMC_OK,
          "scalar and empty: %s", err);
    x = 0;
    CHECK(f && st_file_read_f32(f, "scalar", 0, NULL, &x, err, sizeof err) == NCTMC_OK &&
              x == 1.0f,
          "scalar value");
    st_file_free(f);
    unlink(path);
}

int main(void)
{
    if (!test_make_temp_dir(scratch, sizeof scratch)) {
        fprintf(stderr, "cannot create a scratch directory\n");
        return 1;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 2;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    test_rng rng = test_rng_seed(2024);
    test_extras(ctx, &rng);
    test_crafted(ctx, &rng);
    test_container();
    test_string_runs();
    nctmc_context_free(ctx);
    test_remove_dir(scratch);
    return test_finish("checkpoint_internal");
}
