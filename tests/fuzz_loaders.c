/*
 * fuzz_loaders.c — drives every file loader with damaged files:
 * st_read_file() (and every query on what it accepts), nctmc_model_load(),
 * nctmc_dataset_open() (and reads) and nctmc_tokenizer_load() (and a round
 * trip). Whatever the bytes, a loader must return a status — with a message
 * when it fails, and no half-made object — and never crash, leak or read
 * out of bounds (the sanitizer builds run this).
 *
 * An input is [target][mode][rest]. Mode bit 0 clear: `rest` is the whole
 * file. Set: `rest` is a script of mutations (flip, set, insert, delete,
 * truncate, overwrite with an interesting 32-bit value) applied to a valid
 * seed file of the target, so inputs reach past the first checks. Mode bit 1
 * then recomputes the file's checksum (the checkpoint's "nctmc.checksum",
 * the shard's body CRC), so mutations reach the checks behind it.
 *
 * Built two ways (tests/meson.build), as tests/fuzz_api.c is: a libFuzzer
 * target with clang -fsanitize=fuzzer (FUZZ_LIBFUZZER), and an ordinary test
 * whose main() feeds it seeded random inputs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32.h"
#include "nctmc.h"
#include "safetensors.h"
#include "test_files.h"

enum { T_SAFETENSORS, T_MODEL, T_DATASET, T_TOKENIZER, N_TARGETS };

/* The harness's own state: a scratch directory with one valid seed file per
 * target, made on the first input. */
static struct {
    int ready;
    char dir[256];
    char input_path[512];
    nctmc_context *ctx;
    uint8_t *seed[N_TARGETS];
    size_t seed_size[N_TARGETS];
    long accepted[N_TARGETS], rejected[N_TARGETS];
} h;

static void cleanup(void)
{
    for (int t = 0; t < N_TARGETS; t++)
        free(h.seed[t]);
    nctmc_context_free(h.ctx);
    test_remove_dir(h.dir);
}

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_loaders: %s\n", what);
    abort();
}

static uint8_t *seed_checkpoint(size_t *n)
{
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 5;
    cfg.seq_len = 3;
    cfg.n_layers = 1;
    cfg.d_model = 4;
    cfg.n_heads = 1;
    cfg.cond_dim = 2;
    cfg.n_classes = 1;
    cfg.process = NCTMC_PROCESS_MASKED;
    nctmc_model *m = NULL;
    nctmc_tokenizer *tok = NULL;
    char path[512];
    test_path(path, sizeof path, h.dir, "seed.safetensors");
    if (nctmc_model_create(h.ctx, &cfg, &m) != NCTMC_OK ||
        nctmc_tokenizer_create_chars(h.ctx, "ab\xc3\xa9\xf0\x9f\x98\x80", 8, &tok) != NCTMC_OK ||
        nctmc_model_set_tokenizer(m, tok) != NCTMC_OK || nctmc_model_save(m, path) != NCTMC_OK)
        fail("cannot make the seed checkpoint");
    nctmc_tokenizer_free(tok);
    nctmc_model_free(m);
    uint8_t *bytes = test_read_bytes(path, n);
    unlink(path);
    return bytes;
}

static uint8_t *seed_dataset(size_t *n)
{
    int32_t tokens[40], labels[5] = {0, 2, 1, 2, 0};
    for (int i = 0; i < 40; i++)
        tokens[i] = (i * 37) % 300;
    char path[512];
    test_path(path, sizeof path, h.dir, "seed.tok");
    if (nctmc_dataset_write(h.ctx, path, tokens, 40, 300, 8, labels, 3) != NCTMC_OK)
        fail("cannot make the seed shard");
    uint8_t *bytes = test_read_bytes(path, n);
    unlink(path);
    return bytes;
}

static uint8_t *seed_tokenizer(size_t *n)
{
    nctmc_tokenizer *tok = NULL;
    char path[512];
    test_path(path, sizeof path, h.dir, "seed.txt");
    if (nctmc_tokenizer_create_chars(h.ctx, "hello w\xc3\xb6rld \xe4\xb8\xad", 16, &tok) !=
            NCTMC_OK ||
        nctmc_tokenizer_save(tok, path) != NCTMC_OK)
        fail("cannot make the seed tokenizer");
    nctmc_tokenizer_free(tok);
    uint8_t *bytes = test_read_bytes(path, n);
    unlink(path);
    return bytes;
}

static void setup(void)
{
    if (h.ready)
        return;
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    if (!test_make_temp_dir(h.dir, sizeof h.dir) || nctmc_context_create(&cp, &h.ctx) != NCTMC_OK)
        fail("no scratch directory or context");
    test_path(h.input_path, sizeof h.input_path, h.dir, "input");
    h.seed[T_MODEL] = seed_checkpoint(&h.seed_size[T_MODEL]);
    h.seed[T_SAFETENSORS] = malloc(h.seed_size[T_MODEL]);
    memcpy(h.seed[T_SAFETENSORS], h.seed[T_MODEL], h.seed_size[T_MODEL]);
    h.seed_size[T_SAFETENSORS] = h.seed_size[T_MODEL];
    h.seed[T_DATASET] = seed_dataset(&h.seed_size[T_DATASET]);
    h.seed[T_TOKENIZER] = seed_tokenizer(&h.seed_size[T_TOKENIZER]);
    atexit(cleanup);
    h.ready = 1;
}

/* ---- mutations ---------------------------------------------------------------- */

typedef struct buffer {
    uint8_t *data;
    size_t size, cap;
} buffer;

static uint32_t interesting(uint8_t pick, size_t size)
{
    static const uint32_t values[] = {0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
                                      0x7FFFFFFF, 0x80000000u, 0xFFFFFFFFu};
    return pick < 14 ? values[pick] : (uint32_t)size + (uint32_t)(pick % 5) - 2u;
}

/* Applies one 4-byte mutation op. */
static void mutate(buffer *b, const uint8_t *op)
{
    size_t at = b->size ? ((size_t)op[1] << 8 | op[2]) % (b->size + 1) : 0;
    switch (op[0] % 6) {
    case 0:
        if (at < b->size)
            b->data[at] ^= op[3] ? op[3] : 1;
        break;
    case 1:
        if (at < b->size)
            b->data[at] = (uint8_t)interesting(op[3] % 16, b->size);
        break;
    case 2:
        b->size = at;
        break;
    case 3:
        if (b->size < b->cap) {
            memmove(b->data + at + 1, b->data + at, b->size - at);
            b->data[at] = op[3];
            b->size++;
        }
        break;
    case 4:
        if (at < b->size) {
            memmove(b->data + at, b->data + at + 1, b->size - at - 1);
            b->size--;
        }
        break;
    default: {
        uint32_t v = interesting(op[3] % 20, b->size);
        for (int i = 0; i < 4 && at + (size_t)i < b->size; i++)
            b->data[at + (size_t)i] = (uint8_t)(v >> (8 * i));
    }
    }
}

/* Rewrites a checkpoint's "nctmc.checksum" digits, if the key is there. */
static void fix_checkpoint_checksum(buffer *b)
{
    static const char key[] = "\"nctmc.checksum\":\"";
    size_t k = sizeof key - 1;
    for (size_t i = 0; i + k + 8 <= b->size; i++) {
        if (memcmp(b->data + i, key, k) != 0)
            continue;
        memset(b->data + i + k, '0', 8);
        char digits[9];
        snprintf(digits, sizeof digits, "%08x", (unsigned)crc32_update(0, b->data, b->size));
        memcpy(b->data + i + k, digits, 8);
        return;
    }
}

static void fix_dataset_checksum(buffer *b)
{
    if (b->size < 48)
        return;
    uint32_t c = crc32_update(0, b->data + 48, b->size - 48);
    for (int i = 0; i < 4; i++)
        b->data[28 + i] = (uint8_t)(c >> (8 * i));
}

/* ---- the loaders --------------------------------------------------------------- */

static int has_message(const char *msg)
{
    return msg && msg[0] != '\0';
}

static int run_safetensors(void)
{
    char err[512] = "";
    st_file *f = NULL;
    nctmc_status st = st_read_file(h.input_path, &f, err, sizeof err);
    if (st != NCTMC_OK) {
        if (f || !has_message(err))
            fail("st_read_file failed without a message or left a file");
        return 0;
    }
    for (int32_t i = 0; i < st_file_n_meta(f); i++)
        if (!st_file_meta(f, st_file_meta_key(f, i)))
            fail("a listed metadata key cannot be found");
    for (int32_t i = 0; i < st_file_n_tensors(f); i++) {
        st_tensor_desc d;
        if (!st_file_tensor_desc(f, i, &d) || st_file_find_tensor(f, d.name) != i)
            fail("a listed tensor cannot be found");
        if (strcmp(d.dtype, "F32") == 0 && d.n_bytes <= (1u << 20)) {
            float *v = malloc(d.n_bytes + 4);
            if (st_file_read_f32(f, d.name, d.n_dims, d.shape, v, err, sizeof err) != NCTMC_OK)
                fail("an accepted F32 tensor cannot be read");
            free(v);
        }
    }
    st_file_verify_checksum(f, "nctmc.checksum", err, sizeof err);
    st_file_free(f);
    return 1;
}

static int run_model(void)
{
    nctmc_model *m = (nctmc_model *)&m;
    nctmc_status st = nctmc_model_load(h.ctx, h.input_path, &m);
    if (st != NCTMC_OK) {
        if (m || !has_message(nctmc_context_last_error(h.ctx)))
            fail("nctmc_model_load failed without a message or left a model");
        return 0;
    }
    const nctmc_tokenizer *tok = nctmc_model_get_tokenizer(m);
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(m, &cfg);
    int32_t data = cfg.process == NCTMC_PROCESS_UNIFORM ? cfg.vocab_size : cfg.vocab_size - 1;
    if (tok && nctmc_tokenizer_vocab_size(tok) != data)
        fail("a loaded model's tokenizer does not fit it");
    nctmc_model_free(m);
    return 1;
}

static int run_dataset(void)
{
    nctmc_dataset *ds = (nctmc_dataset *)&ds;
    nctmc_status st = nctmc_dataset_open(h.ctx, h.input_path, &ds);
    if (st != NCTMC_OK) {
        if (ds || !has_message(nctmc_context_last_error(h.ctx)))
            fail("nctmc_dataset_open failed without a message or left a dataset");
        return 0;
    }
    nctmc_dataset_info info;
    nctmc_dataset_info_init(&info);
    nctmc_dataset_get_info(ds, &info);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(info.n_tokens > 0 ? info.n_tokens : 1));
    if (nctmc_dataset_read_tokens(ds, 0, info.n_tokens, tokens) != NCTMC_OK)
        fail("an opened shard's tokens cannot be read");
    for (int64_t i = 0; i < info.n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= info.vocab_size)
            fail("an opened shard holds a token out of range");
    for (int64_t i = 0; i < info.n_sequences && info.n_classes > 0; i++) {
        int32_t label = -1;
        if (nctmc_dataset_read_label(ds, i, &label) != NCTMC_OK || label < 0 ||
            label >= info.n_classes)
            fail("an opened shard's label is unreadable or out of range");
    }
    free(tokens);
    nctmc_dataset_free(ds);
    return 1;
}

static int run_tokenizer(void)
{
    nctmc_tokenizer *tok = (nctmc_tokenizer *)&tok;
    nctmc_status st = nctmc_tokenizer_load(h.ctx, h.input_path, &tok);
    if (st != NCTMC_OK) {
        if (tok || !has_message(nctmc_context_last_error(h.ctx)))
            fail("nctmc_tokenizer_load failed without a message or left a tokenizer");
        return 0;
    }
    int32_t ids[16];
    int32_t n = nctmc_tokenizer_vocab_size(tok);
    for (int i = 0; i < 16; i++)
        ids[i] = (i * 7919) % n;
    int32_t w = 1;
    nctmc_tokenizer_image_shape(tok, &w, NULL, NULL);
    size_t count = (size_t)(16 / w * w), len = 0, back_n = 0;
    char text[256];
    int32_t back[16];
    if (w <= 16 &&
        (nctmc_tokenizer_decode(tok, ids, count, text, sizeof text, &len) != NCTMC_OK ||
         nctmc_tokenizer_encode(tok, text, len, back, 16, &back_n) != NCTMC_OK ||
         back_n != count || memcmp(back, ids, sizeof(int32_t) * count) != 0))
        fail("a loaded tokenizer does not round-trip its own tokens");
    nctmc_tokenizer_free(tok);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 2)
        return 0;
    int target = data[0] % N_TARGETS;
    uint8_t mode = data[1];
    buffer b;
    if (mode & 1) { /* mutate the seed */
        b.cap = h.seed_size[target] + 64;
        b.data = malloc(b.cap);
        b.size = h.seed_size[target];
        memcpy(b.data, h.seed[target], b.size);
        for (size_t i = 2; i + 4 <= size && i < 2 + 4 * 16; i += 4)
            mutate(&b, data + i);
        if (mode & 2 && (target == T_MODEL || target == T_SAFETENSORS))
            fix_checkpoint_checksum(&b);
        if (mode & 2 && target == T_DATASET)
            fix_dataset_checksum(&b);
    } else { /* the bytes are the file */
        b.size = b.cap = size - 2;
        b.data = malloc(b.size + 1);
        memcpy(b.data, data + 2, b.size);
    }
    if (!test_write_bytes(h.input_path, b.data, b.size))
        fail("cannot write the input file");
    free(b.data);
    int ok = 0;
    switch (target) {
    case T_SAFETENSORS: ok = run_safetensors(); break;
    case T_MODEL: ok = run_model(); break;
    case T_DATASET: ok = run_dataset(); break;
    default: ok = run_tokenizer(); break;
    }
    if (ok)
        h.accepted[target]++;
    else
        h.rejected[target]++;
    return 0;
}

#ifndef FUZZ_LIBFUZZER
/* Seeded random inputs: mostly mutation scripts (with and without fixed
 * checksums, few ops so many inputs stay close to valid), some raw bytes. */
int main(int argc, char **argv)
{
    static const char *const target_names[N_TARGETS] = {"safetensors", "model", "dataset",
                                                        "tokenizer"};
    int runs = argc > 1 ? atoi(argv[1]) : 4000;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    uint8_t buf[2 + 4 * 16];
    for (int run = 0; run < runs; run++) {
        for (size_t i = 0; i < sizeof buf; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[i] = (uint8_t)(s >> 24);
        }
        buf[0] = (uint8_t)(run % N_TARGETS);
        size_t n_ops = (size_t)(run / N_TARGETS) % 4; /* 0 .. 3: stay close to valid */
        if (run % 10 == 9) /* raw bytes */
            buf[1] &= 0xFE;
        else
            buf[1] |= 1;
        LLVMFuzzerTestOneInput(buf, buf[1] & 1 ? 2 + 4 * n_ops : sizeof buf);
    }
    int reach = 1;
    for (int t = 0; t < N_TARGETS; t++) {
        printf("%-12s %6ld accepted, %6ld rejected\n", target_names[t], h.accepted[t],
               h.rejected[t]);
        /* unmutated seeds are accepted, damaged files rejected: both must
         * happen, or the driver no longer reaches the loaders' checks */
        reach &= h.accepted[t] > runs / 40 && h.rejected[t] > runs / 40;
    }
    printf("fuzz_loaders: %d passed, %d failed\n", runs + reach, !reach);
    return reach ? 0 : 1;
}
#endif
