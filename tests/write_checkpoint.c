/*
 * write_checkpoint.c — the C half of tests/check_safetensors.py, which checks
 * that Python's `safetensors` package and libnctmc read each other's files.
 *
 *   write_checkpoint write <file> <dump>  a tiny model's checkpoint (with a
 *       tokenizer and metadata full of characters JSON must escape), and a
 *       text dump of what it should contain, from the model itself;
 *   write_checkpoint dump <file>          any safetensors file as our reader
 *       sees it, printed in the same dump format;
 *   write_checkpoint load <file>          nctmc_model_load(), then the loaded
 *       model's tensors in the dump format;
 *   write_checkpoint write-int8 <file> <dump>  the tiny model converted to
 *       int8 weights (checkpoint format 3), and the dump of its tensors as
 *       nctmc_model_read_tensor() gives them (dequantised).
 *
 * Dump lines ("hex" is the UTF-8 bytes in lowercase hexadecimal, so any
 * string survives the trip):
 *   meta <hex key> <hex value>
 *   tensor <name> <dtype> <dims, comma-separated or "-"> <F32 bits as
 *          comma-separated %08x, or "-">
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/model_io.h"
#include "nctmc.h"
#include "io/safetensors.h"

/* Metadata the checkpoint carries besides its own, for the escaping test. */
static const st_meta tricky_meta[] = {
    {"user.quote", "say \"hi\""},
    {"user.backslash", "C:\\path\\to\\file"},
    {"user.controls", "line1\nline2\ttab\r\x01\x1f end"},
    {"user.unicode", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad"},
    {"user.slash", "</script> / \\/"},
    {"user.empty", ""},
    {"user.k\xc3\xa9y \"quoted\"", "key with escapes"},
};
#define N_TRICKY ((int32_t)(sizeof tricky_meta / sizeof tricky_meta[0]))

static void print_hex(FILE *out, const char *s)
{
    if (!*s)
        fputc('-', out);
    for (; *s; s++)
        fprintf(out, "%02x", (unsigned char)*s);
}

static void print_dims(FILE *out, int32_t n_dims, const int64_t *shape)
{
    if (n_dims == 0)
        fputc('-', out);
    for (int32_t k = 0; k < n_dims; k++)
        fprintf(out, "%s%lld", k ? "," : "", (long long)shape[k]);
}

static void print_values(FILE *out, const float *v, size_t n)
{
    if (n == 0)
        fputc('-', out);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        fprintf(out, "%s%08x", i ? "," : "", bits);
    }
}

/* Every tensor of a model, read through the public API. */
static int dump_model_tensors(FILE *out, const nctmc_model *m)
{
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc(sizeof(float) * (size_t)info.n_elements);
        if (!v || nctmc_model_read_tensor(m, info.name, v, info.n_elements) != NCTMC_OK) {
            free(v);
            return 1;
        }
        fprintf(out, "tensor %s F32 ", info.name);
        print_dims(out, info.n_dims, info.shape);
        fputc(' ', out);
        print_values(out, v, (size_t)info.n_elements);
        fputc('\n', out);
        free(v);
    }
    return 0;
}

/* Metadata and tensors of any safetensors file, as st_read_file() sees it. */
static int dump_file(FILE *out, const char *path)
{
    char err[512];
    st_file *f = NULL;
    if (st_read_file(path, &f, err, sizeof err) != NCTMC_OK) {
        fprintf(stderr, "dump: %s\n", err);
        return 1;
    }
    for (int32_t i = 0; i < st_file_n_meta(f); i++) {
        const char *key = st_file_meta_key(f, i);
        fputs("meta ", out);
        print_hex(out, key);
        fputc(' ', out);
        print_hex(out, st_file_meta(f, key));
        fputc('\n', out);
    }
    int rc = 0;
    for (int32_t i = 0; i < st_file_n_tensors(f) && rc == 0; i++) {
        st_tensor_desc d;
        st_file_tensor_desc(f, i, &d);
        fprintf(out, "tensor %s %s ", d.name, d.dtype);
        print_dims(out, d.n_dims, d.shape);
        fputc(' ', out);
        if (strcmp(d.dtype, "F32") == 0) {
            float *v = malloc(d.n_bytes + 4);
            rc = !v || st_file_read_f32(f, d.name, d.n_dims, d.shape, v, err, sizeof err);
            if (rc == 0)
                print_values(out, v, d.n_bytes / 4);
            else
                fprintf(stderr, "dump: %s\n", err);
            free(v);
        } else {
            fputc('-', out);
        }
        fputc('\n', out);
    }
    st_file_free(f);
    return rc;
}

static nctmc_model *tiny_model(nctmc_context *ctx)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 6;
    cfg.seq_len = 3;
    cfg.n_layers = 1;
    cfg.d_model = 4;
    cfg.n_heads = 1;
    cfg.cond_dim = 3;
    cfg.n_classes = 2;
    cfg.process = NCTMC_PROCESS_MASKED;
    cfg.schedule = NCTMC_SCHEDULE_COSINE;
    cfg.seed = 99;
    nctmc_model *m = NULL;
    if (nctmc_model_create(ctx, &cfg, &m) != NCTMC_OK)
        return NULL;
    uint64_t s = 0x243F6A8885A308D3ull;
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc(sizeof(float) * (size_t)info.n_elements);
        for (int64_t i = 0; i < info.n_elements; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            v[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 1e3f;
        }
        v[0] = -0.0f; /* the sign of zero must survive too */
        nctmc_model_write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
    nctmc_tokenizer *tok = NULL;
    static const char corpus[] = "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80!"; /* 5 characters */
    nctmc_tokenizer_create_chars(ctx, corpus, sizeof corpus - 1, &tok);
    nctmc_model_set_tokenizer(m, tok);
    nctmc_tokenizer_free(tok);
    return m;
}

static int write_mode(nctmc_context *ctx, const char *path, const char *dump_path)
{
    nctmc_model *m = tiny_model(ctx);
    if (!m || !nctmc_model_get_tokenizer(m)) {
        fprintf(stderr, "write: cannot build the model: %s\n", nctmc_context_last_error(ctx));
        nctmc_model_free(m);
        return 1;
    }
    char err[512];
    nctmc_status st = model_io_save(m, path, NULL, tricky_meta, N_TRICKY, NULL, 0, err,
                                    sizeof err);
    FILE *out = st == NCTMC_OK ? fopen(dump_path, "w") : NULL;
    int rc = 1;
    if (out) {
        /* metadata as our reader sees it (Python must see the same), then
         * the tensors from the model itself, not from the file */
        st_file *f = NULL;
        rc = st_read_file(path, &f, err, sizeof err) != NCTMC_OK;
        for (int32_t i = 0; !rc && i < st_file_n_meta(f); i++) {
            const char *key = st_file_meta_key(f, i);
            fputs("meta ", out);
            print_hex(out, key);
            fputc(' ', out);
            print_hex(out, st_file_meta(f, key));
            fputc('\n', out);
        }
        st_file_free(f);
        rc = rc || dump_model_tensors(out, m);
        rc = fclose(out) != 0 || rc;
    } else {
        fprintf(stderr, "write: %s\n", err);
    }
    nctmc_model_free(m);
    return rc;
}

static int write_int8_mode(nctmc_context *ctx, const char *path, const char *dump_path)
{
    nctmc_model *m = tiny_model(ctx), *q = NULL;
    if (!m || nctmc_model_convert(m, NCTMC_WEIGHT_INT8, &q) != NCTMC_OK ||
        nctmc_model_save(q, path) != NCTMC_OK) {
        fprintf(stderr, "write-int8: %s / %s\n", nctmc_context_last_error(ctx),
                m ? nctmc_model_last_error(m) : "");
        nctmc_model_free(q);
        nctmc_model_free(m);
        return 1;
    }
    FILE *out = fopen(dump_path, "w");
    int rc = !out || dump_model_tensors(out, q);
    rc = (out && fclose(out) != 0) || rc;
    nctmc_model_free(q);
    nctmc_model_free(m);
    return rc;
}

static int load_mode(nctmc_context *ctx, const char *path)
{
    nctmc_model *m = NULL;
    if (nctmc_model_load(ctx, path, &m) != NCTMC_OK) {
        fprintf(stderr, "load: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    int rc = dump_model_tensors(stdout, m);
    printf("tokenizer %d\n", (int)nctmc_tokenizer_vocab_size(nctmc_model_get_tokenizer(m)));
    nctmc_model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || ((strcmp(argv[1], "write") == 0 || strcmp(argv[1], "write-int8") == 0) &&
                     argc < 4)) {
        fprintf(stderr, "usage: write_checkpoint write FILE DUMP | write-int8 FILE DUMP | "
                        "dump FILE | load FILE\n");
        return 2;
    }
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return 1;
    int rc = 2;
    if (strcmp(argv[1], "write") == 0)
        rc = write_mode(ctx, argv[2], argv[3]);
    else if (strcmp(argv[1], "write-int8") == 0)
        rc = write_int8_mode(ctx, argv[2], argv[3]);
    else if (strcmp(argv[1], "dump") == 0)
        rc = dump_file(stdout, argv[2]);
    else if (strcmp(argv[1], "load") == 0)
        rc = load_mode(ctx, argv[2]);
    nctmc_context_free(ctx);
    return rc;
}
