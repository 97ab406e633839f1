/*
 * test_parity.c — the C model against the PyTorch reference (llm.c's method).
 *
 *   test_parity FIXTURE
 *
 * The fixture (written by tests/reference/gen_parity_fixture.py, whose
 * docstring defines the format) holds a configuration, every weight, a batch,
 * and the float64 reference's outputs, losses and gradients. This program
 * builds the model through the public API, sets every tensor, and compares:
 *   - log_rate and jump_logprobs from nctmc_model_forward();
 *   - the jump logits and the exit-rate head h from dit_forward();
 *   - per-position and mean loss and every gradient from dit_loss() — and
 *     once more with accumulate = true, which must double the gradients.
 *
 * Metric, per quantity: max over elements of |got - want| / max(|want|, floor)
 * with floor = max(REL_FLOOR * max|want|, ABS_FLOOR); fail above TOLERANCE.
 * Why a floor relative to the quantity's scale: a float32 result carries an
 * absolute error of some ulps of the largest terms it was computed from, and
 * those are of the size of the quantity's largest elements, not of the
 * element itself; an element 1000x below its tensor's scale has no float32
 * relative accuracy to test. Elements above 5% of the scale must agree to
 * 1e-4 relative; below it, to 5e-6 times the scale (~40 float32 ulps of it).
 * The same metric applied to the float32 PyTorch evaluation of these
 * fixtures gives at most ~1e-5 (gen_parity_fixture.py --check-float32), so
 * the limit leaves a 10x margin for a correct float32 implementation, while
 * a wrong operation, index or tensor shows up as errors of 1e-2 or more.
 * ABS_FLOOR only matters for quantities that are all zero (the rate head's
 * gradient under the masked process): those must come out zero to 1e-10.
 * -inf (an exact zero rate or probability) must be -inf in both.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "dit/dit.h"
#include "model/model.h"
#include "nctmc.h"
#include "test_util.h"

#ifndef TOLERANCE
#define TOLERANCE 1e-4
#endif
#ifndef REL_FLOOR /* -D overrides, to study the metric */
#define REL_FLOOR 5e-2
#endif
#define ABS_FLOOR 1e-6

/* ------------------------------------------------------------------------ */
/* Fixture reader                                                            */
/* ------------------------------------------------------------------------ */

#define FX_VERSION 1
#define FX_MAX_BYTES ((size_t)1 << 30)
#define FX_MAX_ARRAYS 4096
#define FX_MAX_DIMS 4
#define FX_NAME_MAX 255
#define FX_N_FLOATS 2
/* Config ints are bounded so that every product of three of them fits an
 * int64 without overflow checks downstream (the model validates the rest). */
#define FX_INT_MAX (1 << 20)

enum { FX_F32 = 1, FX_I32 = 2 };

enum {
    FI_S, FI_PAD, FI_SEQ_LEN, FI_LAYERS, FI_D, FI_H, FI_C, FI_CLASSES, FI_PROCESS,
    FI_SCHEDULE, FI_BATCH, FI_LENGTH, FI_HAS_LABELS, FI_V, FI_TIME_INPUT, FI_EXIT_LINK,
    FI_COUNT
};

static const char *const fx_int_names[FI_COUNT] = {
    "vocab_size", "vocab_pad_multiple", "seq_len", "n_layers", "d_model", "n_heads",
    "cond_dim", "n_classes", "process", "schedule", "batch", "length", "has_labels", "V",
    "time_input", "exit_link"};

typedef struct fx_array {
    char name[FX_NAME_MAX + 1];
    uint32_t dtype;
    uint32_t n_dims;
    int64_t dims[FX_MAX_DIMS];
    int64_t n;
    void *data;     /* decoded host values: float or int32_t */
} fx_array;

typedef struct fixture {
    int32_t ints[FI_COUNT];
    float floats[FX_N_FLOATS];
    uint32_t n_arrays;
    fx_array *arrays;
} fixture;

typedef struct fx_reader {
    const uint8_t *p;
    size_t size;
    size_t pos;
    char err[512];
} fx_reader;

/* The next n bytes, or NULL (and an error) if the file is shorter. */
static const uint8_t *fx_take(fx_reader *r, size_t n, const char *what)
{
    if (n > r->size - r->pos) {
        snprintf(r->err, sizeof r->err, "truncated at byte %zu reading %s", r->pos, what);
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static bool fx_u32(fx_reader *r, uint32_t *out, const char *what)
{
    const uint8_t *b = fx_take(r, 4, what);
    if (!b)
        return false;
    *out = le32(b);
    return true;
}

static bool fx_i64(fx_reader *r, int64_t *out, const char *what)
{
    const uint8_t *b = fx_take(r, 8, what);
    if (!b)
        return false;
    uint64_t u = (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
    memcpy(out, &u, sizeof u);
    return true;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static bool fx_array_read(fx_reader *r, fx_array *a)
{
    uint32_t len;
    if (!fx_u32(r, &len, "name length"))
        return false;
    if (len == 0 || len > FX_NAME_MAX) {
        snprintf(r->err, sizeof r->err, "bad name length %" PRIu32, len);
        return false;
    }
    const uint8_t *name = fx_take(r, len, "name");
    if (!name)
        return false;
    for (uint32_t i = 0; i < len; i++) {
        if (name[i] < 0x21 || name[i] > 0x7e) {
            snprintf(r->err, sizeof r->err, "non-printable byte in an array name");
            return false;
        }
    }
    memcpy(a->name, name, len);
    a->name[len] = '\0';
    if (!fx_u32(r, &a->dtype, "dtype") || !fx_u32(r, &a->n_dims, "n_dims"))
        return false;
    if (a->dtype != FX_F32 && a->dtype != FX_I32) {
        snprintf(r->err, sizeof r->err, "%.255s: unknown dtype %" PRIu32, a->name, a->dtype);
        return false;
    }
    if (a->n_dims > FX_MAX_DIMS) {
        snprintf(r->err, sizeof r->err, "%.255s: %" PRIu32 " dims", a->name, a->n_dims);
        return false;
    }
    /* The element count is bounded by the bytes left, so check as we go. */
    int64_t limit = (int64_t)((r->size - r->pos) / 4);
    a->n = 1;
    for (uint32_t k = 0; k < a->n_dims; k++) {
        if (!fx_i64(r, &a->dims[k], "dims"))
            return false;
        if (a->dims[k] < 0 || (a->dims[k] > 0 && a->n > limit / a->dims[k])) {
            snprintf(r->err, sizeof r->err, "%.255s: bad or too large dimension", a->name);
            return false;
        }
        a->n *= a->dims[k];
    }
    const uint8_t *data = fx_take(r, (size_t)a->n * 4, a->name);
    if (!data)
        return false;
    a->data = malloc((size_t)a->n * 4 + 4);   /* + 4: never malloc(0) */
    if (!a->data) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return false;
    }
    for (int64_t i = 0; i < a->n; i++) {
        uint32_t u = le32(data + 4 * i);
        if (a->dtype == FX_F32)
            ((float *)a->data)[i] = f32_from_bits(u);
        else
            memcpy((int32_t *)a->data + i, &u, 4);
    }
    return true;
}

static void fixture_free(fixture *fx)
{
    for (uint32_t i = 0; fx->arrays && i < fx->n_arrays; i++)
        free(fx->arrays[i].data);
    free(fx->arrays);
    fx->arrays = NULL;
}

static bool fixture_parse(fx_reader *r, fixture *fx)
{
    const uint8_t *magic = fx_take(r, 8, "magic");
    if (!magic || memcmp(magic, "NCTMCPAR", 8) != 0) {
        snprintf(r->err, sizeof r->err, "not a parity fixture (bad magic)");
        return false;
    }
    uint32_t version, n_ints, n_floats, n_arrays;
    if (!fx_u32(r, &version, "version"))
        return false;
    if (version != FX_VERSION) {
        snprintf(r->err, sizeof r->err, "version %" PRIu32 ", expected %d", version,
                 FX_VERSION);
        return false;
    }
    if (!fx_u32(r, &n_ints, "n_ints"))
        return false;
    if (n_ints != FI_COUNT) {
        snprintf(r->err, sizeof r->err, "%" PRIu32 " config ints, expected %d", n_ints,
                 FI_COUNT);
        return false;
    }
    for (int k = 0; k < FI_COUNT; k++) {
        uint32_t u;
        if (!fx_u32(r, &u, "config ints"))
            return false;
        memcpy(&fx->ints[k], &u, 4);
        if (fx->ints[k] < 0 || fx->ints[k] > FX_INT_MAX) {
            snprintf(r->err, sizeof r->err, "config %s = %" PRId32 " out of range",
                     fx_int_names[k], fx->ints[k]);
            return false;
        }
    }
    if (!fx_u32(r, &n_floats, "n_floats"))
        return false;
    if (n_floats != FX_N_FLOATS) {
        snprintf(r->err, sizeof r->err, "%" PRIu32 " config floats", n_floats);
        return false;
    }
    for (int k = 0; k < FX_N_FLOATS; k++) {
        uint32_t u;
        if (!fx_u32(r, &u, "config floats"))
            return false;
        fx->floats[k] = f32_from_bits(u);
        if (!isfinite(fx->floats[k])) {
            snprintf(r->err, sizeof r->err, "non-finite config float");
            return false;
        }
    }
    if (!fx_u32(r, &n_arrays, "n_arrays"))
        return false;
    if (n_arrays > FX_MAX_ARRAYS) {
        snprintf(r->err, sizeof r->err, "%" PRIu32 " arrays", n_arrays);
        return false;
    }
    fx->arrays = calloc(n_arrays + 1, sizeof *fx->arrays);
    if (!fx->arrays) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return false;
    }
    for (uint32_t i = 0; i < n_arrays; i++) {
        fx->n_arrays = i + 1;   /* so fixture_free releases what was read */
        if (!fx_array_read(r, &fx->arrays[i]))
            return false;
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(fx->arrays[j].name, fx->arrays[i].name) == 0) {
                snprintf(r->err, sizeof r->err, "duplicate array %.255s", fx->arrays[i].name);
                return false;
            }
        }
    }
    fx->n_arrays = n_arrays;
    if (r->pos != r->size) {
        snprintf(r->err, sizeof r->err, "%zu trailing bytes", r->size - r->pos);
        return false;
    }
    return true;
}

static bool fixture_load(const char *path, fixture *fx, char *err, size_t err_size)
{
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "cannot open %s", path);
        return false;
    }
    uint8_t *buf = NULL;
    size_t size = 0;
    bool ok = fseek(f, 0, SEEK_END) == 0;
    long end = ok ? ftell(f) : -1;
    ok = ok && end >= 0 && (size_t)end <= FX_MAX_BYTES && fseek(f, 0, SEEK_SET) == 0;
    if (ok) {
        size = (size_t)end;
        buf = malloc(size + 1);
        ok = buf && fread(buf, 1, size, f) == size;
    }
    fclose(f);
    if (!ok) {
        free(buf);
        snprintf(err, err_size, "cannot read %s (or larger than %zu bytes)", path,
                 FX_MAX_BYTES);
        return false;
    }
    fx_reader r = {.p = buf, .size = size, .pos = 0, .err = ""};
    ok = fixture_parse(&r, fx);
    free(buf);
    if (!ok) {
        snprintf(err, err_size, "%s: %s", path, r.err);
        fixture_free(fx);
    }
    return ok;
}

/* The named array with exactly this dtype and shape, or NULL (a failed check). */
static const fx_array *fx_get(const fixture *fx, const char *name, uint32_t dtype,
                              uint32_t n_dims, const int64_t *dims)
{
    for (uint32_t i = 0; i < fx->n_arrays; i++) {
        const fx_array *a = &fx->arrays[i];
        if (strcmp(a->name, name) != 0)
            continue;
        bool same = a->dtype == dtype && a->n_dims == n_dims;
        for (uint32_t k = 0; same && k < n_dims; k++)
            same = a->dims[k] == dims[k];
        CHECK(same, "fixture array %s has the wrong dtype or shape", name);
        return same ? a : NULL;
    }
    CHECK(false, "fixture has no array %s", name);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Comparison                                                                */
/* ------------------------------------------------------------------------ */

static double worst_overall = 0.0;

/* Prints and checks the metric described at the top. want_scale multiplies
 * the reference (2 for accumulated gradients). */
static void compare(const char *what, const float *got, const float *want, double want_scale,
                    int64_t n)
{
    double maxabs = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want_scale * want[i]) > maxabs)
            maxabs = fabs(want_scale * want[i]);
    double floor_ = fmax(REL_FLOOR * maxabs, ABS_FLOOR);
    double worst = 0.0;
    int64_t worst_i = -1;
    int64_t inf_mismatch = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = want_scale * (double)want[i];
        double g = (double)got[i];
        if (isinf(w) && w < 0) {
            if (!(isinf(g) && g < 0))
                inf_mismatch++;
            continue;
        }
        double e = isfinite(g) ? fabs(g - w) / fmax(fabs(w), floor_) : INFINITY;
        if (e > worst || worst_i < 0) {
            worst = e;
            worst_i = i;
        }
    }
    if (inf_mismatch > 0)
        worst = INFINITY;
    if (worst > worst_overall)
        worst_overall = worst;
    printf("  %-48s max rel err %.3e", what, worst);
    if (worst > TOLERANCE && worst_i >= 0)
        printf("   <-- at [%" PRId64 "]: got %.9g want %.9g (scale %.3g)", worst_i,
               (double)got[worst_i], want_scale * (double)want[worst_i], maxabs);
    if (inf_mismatch > 0)
        printf("   <-- %" PRId64 " places where want is -inf and got is not", inf_mismatch);
    printf("\n");
    CHECK(worst <= TOLERANCE, "%s: max rel err %.3e > %.0e", what, worst, TOLERANCE);
}

/* ------------------------------------------------------------------------ */
/* The test                                                                  */
/* ------------------------------------------------------------------------ */

/* Before anything is allocated from the config: has_labels is 0 or 1;
 * the fixture's param.*
 * arrays must hold exactly as many floats as the config's model has, so a
 * corrupt config cannot make the model larger than the file (whose arrays
 * were bounds-checked against its size); the padded vocabulary must follow
 * from S. Names and shapes are checked tensor by tensor later. */
static bool fixture_sizes_consistent(const fixture *fx)
{
    const int32_t *v = fx->ints;
    double S = v[FI_S], pad = v[FI_PAD], V = v[FI_V], d = v[FI_D], c = v[FI_C];
    double Fw = 4.0 * d, labels = v[FI_CLASSES] > 0 ? v[FI_CLASSES] + 1.0 : 0.0;
    double want_V = pad > 1 ? ceil(S / pad) * pad : S;
    double block = d + 3 * d * d + d * d + d + Fw * d + Fw + d * Fw + d + 6 * d * c + 6 * d;
    double n = V * d + c * 256 + c + c * c + c + labels * c + v[FI_LAYERS] * block + d +
               2 * d * c + 2 * d + V * d + V + d + 1;
    double have = 0.0;
    for (uint32_t i = 0; i < fx->n_arrays; i++)
        if (strncmp(fx->arrays[i].name, "param.", 6) == 0)
            have += (double)fx->arrays[i].n;
    CHECK(V == want_V, "fixture V = %g, but S = %g padded to %g is %g", V, S, pad, want_V);
    CHECK(n == have, "fixture config implies %.0f parameters, its param arrays hold %.0f",
          n, have);
    CHECK(v[FI_SEQ_LEN] <= 65536 && v[FI_LENGTH] <= v[FI_SEQ_LEN],
          "fixture seq_len %d / length %d", v[FI_SEQ_LEN], v[FI_LENGTH]);
    CHECK(v[FI_HAS_LABELS] == 0 || v[FI_HAS_LABELS] == 1, "fixture has_labels = %d",
          v[FI_HAS_LABELS]);
    return V == want_V && n == have && v[FI_SEQ_LEN] <= 65536 &&
           v[FI_LENGTH] <= v[FI_SEQ_LEN] && (v[FI_HAS_LABELS] == 0 || v[FI_HAS_LABELS] == 1);
}

typedef struct parity_inputs {
    int32_t B, Lb, S, V;
    const int32_t *x_t, *x_0, *labels;
    const float *times;
} parity_inputs;

static bool model_from_fixture(const fixture *fx, nctmc_context **ctx_out,
                               nctmc_model **model_out)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 2;
    nctmc_status st = nctmc_context_create(&cp, ctx_out);
    CHECK(st == NCTMC_OK, "context: %s", nctmc_status_string(st));
    if (st != NCTMC_OK)
        return false;

    const int32_t *v = fx->ints;
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = v[FI_S];
    cfg.vocab_pad_multiple = v[FI_PAD];
    cfg.seq_len = v[FI_SEQ_LEN];
    cfg.n_layers = v[FI_LAYERS];
    cfg.d_model = v[FI_D];
    cfg.n_heads = v[FI_H];
    cfg.cond_dim = v[FI_C];
    cfg.n_classes = v[FI_CLASSES];
    cfg.process = (nctmc_process)v[FI_PROCESS];
    cfg.schedule = (nctmc_schedule)v[FI_SCHEDULE];
    cfg.mixture_uniform = fx->floats[0];
    cfg.schedule_eps = fx->floats[1];
    cfg.time_input = (nctmc_time_input)v[FI_TIME_INPUT];
    cfg.exit_link = (nctmc_exit_link)v[FI_EXIT_LINK];
    st = nctmc_model_create(*ctx_out, &cfg, model_out);
    CHECK(st == NCTMC_OK, "model: %s", nctmc_context_last_error(*ctx_out));
    if (st != NCTMC_OK)
        return false;
    CHECK((*model_out)->dims.V == v[FI_V], "padded vocabulary %d, fixture %d",
          (*model_out)->dims.V, v[FI_V]);
    return (*model_out)->dims.V == v[FI_V];
}

/* Writes every tensor; the fixture's param.* arrays must be the model's
 * tensors, same names, shapes and order. */
static bool write_weights(const fixture *fx, nctmc_model *model)
{
    int32_t n_tensors = nctmc_model_n_tensors(model);
    int32_t k = 0;
    bool ok = true;
    for (uint32_t i = 0; i < fx->n_arrays; i++) {
        const fx_array *a = &fx->arrays[i];
        if (strncmp(a->name, "param.", 6) != 0)
            continue;
        nctmc_tensor_info info = {.struct_size = sizeof info};
        if (k >= n_tensors || nctmc_model_tensor_info(model, k, &info) != NCTMC_OK) {
            CHECK(false, "fixture has more tensors than the model (%s)", a->name);
            return false;
        }
        bool same = strcmp(info.name, a->name + 6) == 0 &&
                    info.n_dims == (int32_t)a->n_dims && a->dtype == FX_F32;
        for (int32_t j = 0; same && j < info.n_dims; j++)
            same = info.shape[j] == a->dims[j];
        CHECK(same, "tensor %d: model has %s, fixture has %s (or the shapes differ)", k,
              info.name, a->name);
        if (!same)
            return false;
        nctmc_status st = nctmc_model_write_tensor(model, info.name, a->data, a->n);
        CHECK(st == NCTMC_OK, "write %s: %s", info.name, nctmc_model_last_error(model));
        ok = ok && st == NCTMC_OK;
        k++;
    }
    CHECK(k == n_tensors, "fixture has %d tensors, the model %d", k, n_tensors);
    return ok && k == n_tensors;
}

/* The public forward: log_rate and jump_logprobs. */
static void check_public_forward(const fixture *fx, nctmc_model *model, const parity_inputs *in)
{
    int64_t N = (int64_t)in->B * in->Lb;
    int64_t shape2[2] = {in->B, in->Lb};
    int64_t shape3[3] = {in->B, in->Lb, in->S};
    const fx_array *want_rate = fx_get(fx, "output.log_rate", FX_F32, 2, shape2);
    const fx_array *want_jump = fx_get(fx, "output.jump_logprobs", FX_F32, 3, shape3);
    float *log_rate = malloc((size_t)N * sizeof(float));
    float *jump = malloc((size_t)(N * in->S) * sizeof(float));
    CHECK(log_rate && jump, "out of memory");
    if (want_rate && want_jump && log_rate && jump) {
        nctmc_forward_params fp;
        nctmc_forward_params_init(&fp);
        fp.batch = in->B;
        fp.length = in->Lb;
        fp.tokens = in->x_t;
        fp.times = in->times;
        fp.labels = in->labels;
        fp.log_rate = log_rate;
        fp.jump_logprobs = jump;
        nctmc_status st = nctmc_model_forward(model, &fp);
        CHECK(st == NCTMC_OK, "nctmc_model_forward: %s", nctmc_model_last_error(model));
        if (st == NCTMC_OK) {
            compare("forward log_rate", log_rate, want_rate->data, 1.0, N);
            compare("forward jump_logprobs", jump, want_jump->data, 1.0, N * in->S);
        }
    }
    free(log_rate);
    free(jump);
}

/* Downloads n floats of backend memory and compares them. */
static void compare_backend(nctmc_backend *be, const char *what, const float *dev,
                            const fx_array *want, double scale, int64_t n)
{
    float *host = malloc((size_t)n * sizeof(float) + 4);
    CHECK(host != NULL, "out of memory");
    if (!host || !want)
        goto done;
    be->ops->download(be, host, dev, (size_t)n * sizeof(float));
    compare(what, host, want->data, scale, n);
done:
    free(host);
}

/* Every tensor's gradient against grad.<name>. */
static void compare_grads(const fixture *fx, const nctmc_model *model, nctmc_backend *be,
                          const float *grads, double scale, const char *tag)
{
    float *host = malloc(model->slab_floats * sizeof(float) + 4);
    CHECK(host != NULL, "out of memory");
    if (!host)
        return;
    be->ops->download(be, host, grads, model->slab_floats * sizeof(float));
    for (int32_t k = 0; k < model->n_tensors; k++) {
        const model_tensor *t = &model->tensors[k];
        char name[NCTMC_TENSOR_NAME_MAX + 16], what[NCTMC_TENSOR_NAME_MAX + 64];
        snprintf(name, sizeof name, "grad.%s", t->name);
        snprintf(what, sizeof what, "%.20s%s", tag, name);
        const fx_array *want = fx_get(fx, name, FX_F32, (uint32_t)t->n_dims, t->shape);
        CHECK(t->offset + (size_t)t->n_elements <= model->slab_floats, "%s outside the slab",
              t->name);
        if (want && t->offset + (size_t)t->n_elements <= model->slab_floats)
            compare(what, host + t->offset, want->data, scale, t->n_elements);
    }
    free(host);
}

/* The internal graph: logits and h from dit_forward, loss and gradients
 * from dit_loss (twice: overwrite, then accumulate). */
static void check_internal(const fixture *fx, nctmc_model *model, const parity_inputs *in)
{
    nctmc_backend *be = model->ctx->backend;
    int64_t N = (int64_t)in->B * in->Lb;
    int64_t shape2[2] = {in->B, in->Lb};
    int64_t shape3[3] = {in->B, in->Lb, in->V};
    int64_t shape1[1] = {1};
    char err[512] = "";
    dit_workspace *ws = NULL;
    nctmc_status st = dit_workspace_create(model, be, in->B, in->Lb, DIT_WS_TRAINING, &ws, err,
                                           sizeof err);
    CHECK(st == NCTMC_OK, "dit_workspace_create: %s", err);
    if (st != NCTMC_OK)
        return;
    dit_batch batch = {.batch = in->B, .length = in->Lb, .x_t = in->x_t, .times = in->times,
                       .labels = in->labels, .x_0 = in->x_0};
    st = dit_batch_validate(model, ws, &batch, true, err, sizeof err);
    CHECK(st == NCTMC_OK, "dit_batch_validate: %s", err);
    float *grads = NULL;
    if (st != NCTMC_OK)
        goto done;

    dit_forward(model, ws, &batch);
    st = be->ops->synchronize(be);
    CHECK(st == NCTMC_OK, "forward: %s", be->error);
    compare_backend(be, "dit_forward logits", dit_ws_logits(ws),
                    fx_get(fx, "output.logits", FX_F32, 3, shape3), 1.0, N * in->V);
    compare_backend(be, "dit_forward rate_h", dit_ws_rate_h(ws),
                    fx_get(fx, "output.rate_h", FX_F32, 2, shape2), 1.0, N);

    grads = be->ops->alloc(be, model->slab_floats * sizeof(float));
    CHECK(grads != NULL, "gradient slab");
    if (!grads)
        goto done;
    const fx_array *want_mean = fx_get(fx, "output.mean_loss", FX_F32, 1, shape1);
    const fx_array *want_loss = fx_get(fx, "output.loss", FX_F32, 2, shape2);
    for (int pass = 0; pass < 2; pass++) {
        bool accumulate = pass == 1;
        double mean = NAN;
        st = dit_loss(model, ws, &batch, grads, accumulate, &mean, err, sizeof err);
        CHECK(st == NCTMC_OK, "dit_loss: %s", err);
        if (st != NCTMC_OK)
            break;
        const char *tag = accumulate ? "accumulated " : "";
        char what[96];
        if (want_mean) {
            float got = (float)mean;
            snprintf(what, sizeof what, "%smean loss", tag);
            compare(what, &got, want_mean->data, 1.0, 1);
        }
        snprintf(what, sizeof what, "%sper-position loss", tag);
        compare_backend(be, what, dit_ws_loss(ws), want_loss, 1.0, N);
        compare_grads(fx, model, be, grads, accumulate ? 2.0 : 1.0, tag);
    }
done:
    if (grads)
        be->ops->free(be, grads);
    dit_workspace_free(ws);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE\n", argv[0]);
        return 2;
    }
    fixture fx;
    char err[1024];
    if (!fixture_load(argv[1], &fx, err, sizeof err)) {
        CHECK(false, "%s", err);
        return test_finish("parity");
    }
    const int32_t *v = fx.ints;
    printf("parity fixture %s: S=%d V=%d seq_len=%d layers=%d d=%d H=%d c=%d classes=%d "
           "process=%d schedule=%d p_u=%g eps=%g batch=%dx%d labels=%d time_input=%d "
           "exit_link=%d\n",
           argv[1], v[FI_S], v[FI_V], v[FI_SEQ_LEN], v[FI_LAYERS], v[FI_D], v[FI_H], v[FI_C],
           v[FI_CLASSES], v[FI_PROCESS], v[FI_SCHEDULE], (double)fx.floats[0],
           (double)fx.floats[1], v[FI_BATCH], v[FI_LENGTH], v[FI_HAS_LABELS],
           v[FI_TIME_INPUT], v[FI_EXIT_LINK]);

    parity_inputs in = {.B = v[FI_BATCH], .Lb = v[FI_LENGTH], .S = v[FI_S], .V = v[FI_V]};
    int64_t shape2[2] = {in.B, in.Lb};
    int64_t shape1[1] = {in.B};
    const fx_array *x_t = fx_get(&fx, "input.x_t", FX_I32, 2, shape2);
    const fx_array *x_0 = fx_get(&fx, "input.x_0", FX_I32, 2, shape2);
    const fx_array *times = fx_get(&fx, "input.times", FX_F32, 1, shape1);
    const fx_array *labels = v[FI_HAS_LABELS]
                                 ? fx_get(&fx, "input.labels", FX_I32, 1, shape1)
                                 : NULL;
    nctmc_context *ctx = NULL;
    nctmc_model *model = NULL;
    if (x_t && x_0 && times && (labels || !v[FI_HAS_LABELS]) &&
        fixture_sizes_consistent(&fx) && model_from_fixture(&fx, &ctx, &model) &&
        write_weights(&fx, model)) {
        in.x_t = x_t->data;
        in.x_0 = x_0->data;
        in.times = times->data;
        in.labels = labels ? labels->data : NULL;
        check_public_forward(&fx, model, &in);
        check_internal(&fx, model, &in);
        printf("worst relative error %.3e (tolerance %.0e, floor %.0e x scale)\n",
               worst_overall, TOLERANCE, REL_FLOOR);
    }
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    fixture_free(&fx);
    return test_finish("parity");
}
