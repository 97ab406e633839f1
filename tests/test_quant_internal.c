/*
 * test_quant_internal.c — converted models against the library's internals
 * (the public half is test_quant.c): what a converted model holds (bf16
 * weights against the library's own rounding), the format-3 checkpoint's
 * layout read back with the safetensors reader, and every damaged variant
 * (rewritten with the safetensors writer) refused.
 */
#include <string.h>
#include <unistd.h>

#include "model/model_quant.h"
#include "io/safetensors.h"
#include "tiny_model.h"


#define WIDE_D 64

static char tmp_dir[] = "/tmp/nctmc_quant_internal_XXXXXX";

static void tmp_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_dir, name);
}

/* A model wide enough that the linear layers dominate, with random weights
 * (tiny_randomize's +-0.3). */
static nctmc_model *float_model(nctmc_context *ctx)
{
    nctmc_model_config c = tiny_model_config(NCTMC_PROCESS_MIXTURE, 3);
    c.d_model = WIDE_D;
    c.n_heads = 4;
    c.n_layers = 2;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx, &c, &m) == NCTMC_OK, "create: %s",
          nctmc_context_last_error(ctx));
    if (m)
        tiny_randomize(m, 5);
    return m;
}

static float *read_all(const nctmc_model *m, const char *name, int64_t *n)
{
    int32_t k = -1;
    nctmc_tensor_info info;
    nctmc_tensor_info_init(&info);
    if (nctmc_model_find_tensor(m, name, &k) != NCTMC_OK ||
        nctmc_model_tensor_info(m, k, &info) != NCTMC_OK)
        return NULL;
    float *v = malloc(sizeof(float) * (size_t)info.n_elements);
    if (v && nctmc_model_read_tensor(m, name, v, info.n_elements) != NCTMC_OK) {
        free(v);
        return NULL;
    }
    *n = info.n_elements;
    return v;
}

static void test_contents(const nctmc_model *f, const nctmc_model *b, const nctmc_model *q)
{
    CHECK(nctmc_model_weight_type(f) == NCTMC_WEIGHT_F32, "float model's type");
    CHECK(nctmc_model_weight_type(b) == NCTMC_WEIGHT_BF16, "bf16 model's type");
    CHECK(nctmc_model_weight_type(q) == NCTMC_WEIGHT_INT8, "int8 model's type");
    CHECK(nctmc_model_weight_type(NULL) == -1, "NULL's type");
    CHECK(nctmc_model_n_params(b) == nctmc_model_n_params(f) &&
              nctmc_model_n_tensors(q) == nctmc_model_n_tensors(f),
          "same parameters and tensors");
    CHECK(nctmc_model_get_tokenizer(b) == NULL, "no tokenizer to carry");
    int64_t n = 0;
    const char *linear = "blocks.1.mlp.0.weight";
    float *w = read_all(f, linear, &n), *wb = read_all(b, linear, &n), *wq = read_all(q, linear, &n);
    CHECK(w && wb && wq, "read the linear weight");
    int bad_b = 0, bad_q = 0, changed = 0;
    int64_t cols = WIDE_D;
    for (int64_t e = 0; w && wb && wq && e < n; e++) {
        bad_b += wb[e] == quant_bf16_to_f32(quant_bf16_round(w[e])) ? 0 : 1;
        changed += wb[e] != w[e];
        float amax = 0;
        for (int64_t i = e / cols * cols; i < (e / cols + 1) * cols; i++)
            amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
        bad_q += fabsf(wq[e] - w[e]) <= amax / 127.0f * 0.5f * 1.0001f ? 0 : 1;
    }
    CHECK(bad_b == 0, "bf16 weights read back as the rounded floats (%d differ)", bad_b);
    CHECK(changed > 0, "bf16 rounding changed some weights");
    CHECK(bad_q == 0, "int8 weights within half a step of the floats (%d beyond)", bad_q);
    free(w);
    free(wb);
    free(wq);
    /* float tensors are copied exactly */
    const char *kept[] = {"vocab_embed.embedding", "blocks.0.adaLN_modulation.weight",
                          "blocks.1.mlp.0.bias", "output_layer.rate_head.weight"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        int64_t n1 = 0, n2 = 0;
        float *a = read_all(f, kept[i], &n1), *c = read_all(q, kept[i], &n2);
        CHECK(a && c && n1 == n2 && memcmp(a, c, sizeof(float) * (size_t)n1) == 0,
              "%s is kept as float", kept[i]);
        free(a);
        free(c);
    }
}

/* ---- checkpoints ---------------------------------------------------------- */

typedef struct file_parts {
    int32_t n_meta, n_tensors;
    st_meta meta[64];
    char *strings[128];
    int32_t n_strings;
    st_tensor_ref t[128];
    void *data[128];
} file_parts;

static char *keep(file_parts *p, const char *s)
{
    return p->strings[p->n_strings++] = strdup(s);
}

static bool take_apart(const char *path, file_parts *p)
{
    char err[256];
    st_file *f = NULL;
    memset(p, 0, sizeof *p);
    if (st_read_file(path, &f, err, sizeof err) != NCTMC_OK)
        return false;
    for (int32_t i = 0; i < st_file_n_meta(f); i++) {
        const char *key = st_file_meta_key(f, i);
        if (strcmp(key, "nctmc.checksum") != 0)
            p->meta[p->n_meta++] = (st_meta){keep(p, key), keep(p, st_file_meta(f, key))};
    }
    for (int32_t i = 0; i < st_file_n_tensors(f); i++) {
        st_tensor_desc d;
        st_file_tensor_desc(f, i, &d);
        st_tensor_ref *t = &p->t[p->n_tensors];
        t->name = keep(p, d.name);
        t->n_dims = d.n_dims;
        memcpy(t->shape, d.shape, sizeof t->shape);
        void *data = p->data[p->n_tensors] = malloc(d.n_bytes + 4);
        if (strcmp(d.dtype, "F32") == 0) {
            st_file_read_f32(f, d.name, d.n_dims, d.shape, data, err, sizeof err);
            t->data = data;
        } else {
            st_file_read_raw(f, d.name, d.dtype, d.n_dims, d.shape, data, err, sizeof err);
            t->raw = data;
            t->dtype = strcmp(d.dtype, "BF16") == 0 ? ST_WRITE_BF16 : ST_WRITE_I8;
        }
        p->n_tensors++;
    }
    st_file_free(f);
    return true;
}

static void put_together(const file_parts *p, const char *path)
{
    char err[256];
    CHECK(st_write_file_checksummed(path, p->meta, p->n_meta, "nctmc.checksum", p->t,
                                    p->n_tensors, err, sizeof err) == NCTMC_OK,
          "rewrite: %s", err);
}

static void free_parts(file_parts *p)
{
    for (int32_t i = 0; i < p->n_strings; i++)
        free(p->strings[i]);
    for (int32_t i = 0; i < p->n_tensors; i++)
        free(p->data[i]);
}

static int32_t part(const file_parts *p, const char *name)
{
    for (int32_t i = 0; i < p->n_tensors; i++)
        if (strcmp(p->t[i].name, name) == 0)
            return i;
    return -1;
}

static const char *meta_of(const file_parts *p, const char *key)
{
    for (int32_t i = 0; i < p->n_meta; i++)
        if (strcmp(p->meta[i].key, key) == 0)
            return p->meta[i].value;
    return NULL;
}

/* The saved file as the round trip of test_quant.c writes it: its format,
 * weight type and tensor types (the files test_damaged() starts from). */
static void test_file_layout(const nctmc_model *m, const char *name)
{
    char path[256];
    tmp_path(path, sizeof path, name);
    CHECK(nctmc_model_save(m, path) == NCTMC_OK, "save %s: %s", name, nctmc_model_last_error(m));
    file_parts p;
    CHECK(take_apart(path, &p), "read back %s", name);
    const char *want = nctmc_model_weight_type(m) == NCTMC_WEIGHT_BF16 ? "bf16" : "int8";
    CHECK(meta_of(&p, "nctmc.format") && strcmp(meta_of(&p, "nctmc.format"), "3") == 0,
          "%s is format 3", name);
    CHECK(meta_of(&p, "nctmc.weights") && strcmp(meta_of(&p, "nctmc.weights"), want) == 0,
          "%s records its weights", name);
    int32_t lin = part(&p, "blocks.0.attn_qkv.weight");
    int32_t emb = part(&p, "vocab_embed.embedding");
    CHECK(lin >= 0 && p.t[lin].dtype == (want[0] == 'b' ? ST_WRITE_BF16 : ST_WRITE_I8),
          "%s stores the linear weights reduced", name);
    CHECK(emb >= 0 && p.t[emb].dtype == ST_WRITE_F32, "%s keeps the embedding F32", name);
    CHECK((part(&p, "blocks.0.attn_qkv.weight.scale") >= 0) == (want[0] == 'i'),
          "%s has scales exactly when int8", name);
    free_parts(&p);
}


/* Loads a damaged copy and expects NCTMC_ERR_FORMAT mentioning `why`. */
static void expect_refused(nctmc_context *ctx, const file_parts *p, const char *what,
                           const char *why)
{
    char path[256];
    tmp_path(path, sizeof path, "damaged.safetensors");
    put_together(p, path);
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_load(ctx, path, &m);
    CHECK(st == NCTMC_ERR_FORMAT && m == NULL, "%s: status %d", what, (int)st);
    CHECK(strstr(nctmc_context_last_error(ctx), why) != NULL, "%s: message \"%s\"", what,
          nctmc_context_last_error(ctx));
    nctmc_model_free(m);
}

static void test_damaged(nctmc_context *ctx)
{
    char bpath[256], qpath[256];
    tmp_path(bpath, sizeof bpath, "bf16.safetensors");
    tmp_path(qpath, sizeof qpath, "int8.safetensors");
    file_parts p;
    const char *lin = "blocks.1.attn_out.weight", *scale = "blocks.1.attn_out.weight.scale";

    /* scales: zero, negative, NaN, infinite */
    const float bad_scales[] = {0.0f, -0.5f, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) {
        take_apart(qpath, &p);
        ((float *)p.data[part(&p, scale)])[3] = bad_scales[i];
        expect_refused(ctx, &p, "bad scale", "not finite and > 0");
        free_parts(&p);
    }
    take_apart(qpath, &p);
    ((int8_t *)p.data[part(&p, lin)])[5] = -128;
    expect_refused(ctx, &p, "int8 -128", "-128");
    free_parts(&p);

    take_apart(qpath, &p);
    p.t[part(&p, scale)].name = "something.else";
    expect_refused(ctx, &p, "missing scale", "is missing");
    free_parts(&p);

    take_apart(qpath, &p);
    p.t[part(&p, scale)].shape[0] = 3;
    p.t[part(&p, scale)].n_dims = 1;
    expect_refused(ctx, &p, "scale of the wrong shape", "not F32 of shape");
    free_parts(&p);

    /* an int8 weight stored as BF16 in an int8 file (same bytes, new dtype) */
    take_apart(qpath, &p);
    {
        int32_t k = part(&p, lin);
        p.t[k].shape[1] /= 2;
        p.t[k].dtype = ST_WRITE_BF16;
        expect_refused(ctx, &p, "BF16 in an int8 file", "is not I8");
    }
    free_parts(&p);

    take_apart(bpath, &p);
    ((uint16_t *)p.data[part(&p, lin)])[7] = 0x7fc0; /* NaN */
    expect_refused(ctx, &p, "bf16 NaN", "not finite");
    free_parts(&p);

    take_apart(bpath, &p);
    ((uint16_t *)p.data[part(&p, lin)])[7] = 0xff80; /* -inf */
    expect_refused(ctx, &p, "bf16 -inf", "not finite");
    free_parts(&p);

    /* a float weight where BF16 is expected */
    take_apart(bpath, &p);
    {
        int32_t k = part(&p, lin);
        float *f = calloc((size_t)(p.t[k].shape[0] * p.t[k].shape[1]), sizeof(float));
        p.t[k].dtype = ST_WRITE_F32;
        p.t[k].data = f;
        expect_refused(ctx, &p, "F32 in a bf16 file", "is not BF16");
        free(f);
    }
    free_parts(&p);

    /* a BF16 embedding */
    take_apart(bpath, &p);
    {
        int32_t k = part(&p, "vocab_embed.embedding");
        p.t[k].shape[1] /= 2;
        p.t[k].dtype = ST_WRITE_BF16;
        p.t[k].raw = p.data[k];
        expect_refused(ctx, &p, "BF16 embedding", "is not F32");
    }
    free_parts(&p);

    /* metadata: missing or unknown weights, or weights in format 2 */
    take_apart(bpath, &p);
    for (int32_t i = 0; i < p.n_meta; i++)
        if (strcmp(p.meta[i].key, "nctmc.weights") == 0)
            p.meta[i].key = "x.weights";
    expect_refused(ctx, &p, "no nctmc.weights", "nctmc.weights");
    free_parts(&p);

    take_apart(bpath, &p);
    for (int32_t i = 0; i < p.n_meta; i++)
        if (strcmp(p.meta[i].key, "nctmc.weights") == 0)
            p.meta[i].value = "f32";
    expect_refused(ctx, &p, "nctmc.weights f32", "not bf16 or int8");
    free_parts(&p);

    take_apart(bpath, &p);
    for (int32_t i = 0; i < p.n_meta; i++)
        if (strcmp(p.meta[i].key, "nctmc.format") == 0)
            p.meta[i].value = "2";
    expect_refused(ctx, &p, "nctmc.weights in format 2", "unknown metadata key");
    free_parts(&p);

    /* a trainer's tensors or metadata in a reduced file (issue 37, item 5):
     * a sampling-only format holds neither */
    take_apart(bpath, &p);
    p.t[p.n_tensors] = p.t[part(&p, "vocab_embed.embedding")];
    p.t[p.n_tensors].name = keep(&p, "trainer.adam_m.vocab_embed.embedding");
    p.data[p.n_tensors] = NULL;
    p.n_tensors++;
    expect_refused(ctx, &p, "trainer tensor in a bf16 file", "the trainer tensor");
    free_parts(&p);

    take_apart(qpath, &p);
    p.meta[p.n_meta++] = (st_meta){keep(&p, "nctmc.trainer.step"), keep(&p, "12")};
    expect_refused(ctx, &p, "trainer metadata in an int8 file", "nctmc.trainer.step");
    free_parts(&p);

    /* an int8 file relabelled bf16 */
    take_apart(qpath, &p);
    for (int32_t i = 0; i < p.n_meta; i++)
        if (strcmp(p.meta[i].key, "nctmc.weights") == 0)
            p.meta[i].value = "bf16";
    expect_refused(ctx, &p, "int8 data named bf16", "is not BF16");
    free_parts(&p);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    nctmc_context *ctx = tiny_context();
    nctmc_model *f = float_model(ctx), *b = NULL, *q = NULL;
    CHECK(nctmc_model_convert(f, NCTMC_WEIGHT_BF16, &b) == NCTMC_OK, "to bf16: %s",
          nctmc_model_last_error(f));
    CHECK(nctmc_model_convert(f, NCTMC_WEIGHT_INT8, &q) == NCTMC_OK, "to int8: %s",
          nctmc_model_last_error(f));
    if (f && b && q) {
        test_contents(f, b, q);
        test_file_layout(b, "bf16.safetensors");
        test_file_layout(q, "int8.safetensors");
        test_damaged(ctx);
    }
    nctmc_model_free(q);
    nctmc_model_free(b);
    nctmc_model_free(f);
    nctmc_context_free(ctx);
    const char *names[] = {"bf16.safetensors", "int8.safetensors", "damaged.safetensors"};
    for (size_t i = 0; i < 3; i++) {
        char path[256];
        tmp_path(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(tmp_dir);
    return test_finish("quant_internal");
}
