/*
 * fuzz_loaders.c — drives every file loader with damaged files:
 * st_read_file() (and every query on what it accepts), nctmc_model_load(),
 * nctmc_dataset_open() (and reads), nctmc_tokenizer_load() (and a round
 * trip; a bytes-chars-image file and a BPE file) and
 * nctmc_tokenizer_load_hf_json() (a Hugging Face tokenizer.json). Whatever the bytes, a loader must return a status — with a message
 * when it fails, and no half-made object — and never crash, leak or read
 * out of bounds (the sanitizer builds run this).
 *
 * It also covers every file argument of the `nctmc` tool: a trainer
 * checkpoint (`info` reads it with nctmc_trainer_inspect(), `train
 * --resume` with nctmc_trainer_resume(): the two must agree, and a resumed
 * run that takes a step must save a file that resumes again — the loader
 * never rejects what the trainer wrote), the digits file (`prepare
 * --digits`, the tool's own parser examples/nctmc/digits.c), and one JSON
 * Lines record (`prepare --jsonl-field`, examples/nctmc/jsonl.c). Shards,
 * tokenizers and model checkpoints are the targets above.
 *
 * FUZZ_LOADERS_TARGET=<name> (safetensors, model, dataset, tokenizer,
 * trainer, digits, jsonl, hf_json, bpe) sends every input to one target, for long runs of one
 * loader (scripts/fuzz_long.sh).
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

#include "base/crc32.h"
#include "digits.h"
#include "jsonl.h"
#include "nctmc.h"
#include "io/safetensors.h"
#include "test_files.h"

enum {
    T_SAFETENSORS,
    T_MODEL,
    T_DATASET,
    T_TOKENIZER,
    T_TRAINER,
    T_DIGITS,
    T_JSONL,
    T_HF_JSON,
    T_BPE,
    N_TARGETS
};
static const char *const target_names[N_TARGETS] = {
    "safetensors", "model", "dataset", "tokenizer", "trainer", "digits", "jsonl", "hf_json", "bpe"};

/* The harness's own state: a scratch directory with one valid seed file per
 * target, made on the first input. */
static struct {
    int ready;
    char dir[256];
    char input_path[512];
    char resaved_path[512];
    int pinned; /* FUZZ_LOADERS_TARGET, or -1 */
    nctmc_context *ctx;
    size_t live_bytes;    /* held through the context's allocator hook */
    size_t live_baseline; /* ... by the context itself, after setup */
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

/* The context's allocator hook keeps what the loaders hold under a cap. A
 * 24 KB trainer checkpoint may name a model whose training workspace grows
 * with batch x seq_len^2 (the fuzzer found batch 7 and seq_len 3406: 785 MB
 * and 9 s an input under UBSan, and more is possible); the hook is how an
 * embedder refuses that, and the refusal must be clean
 * (NCTMC_ERR_OUT_OF_MEMORY with a message, nothing left behind). It also
 * counts the bytes held, so every input is checked to give back all it
 * took, with or without LeakSanitizer. */
#define HOOK_HEADER 64
#define LIVE_BYTES_CAP ((size_t)64 << 20)

static void *capped_alloc(size_t size, size_t alignment, void *user_data)
{
    size_t *live = user_data;
    void *raw = NULL;
    if (alignment > HOOK_HEADER || size > LIVE_BYTES_CAP - *live ||
        posix_memalign(&raw, HOOK_HEADER, HOOK_HEADER + size) != 0)
        return NULL;
    memcpy(raw, &size, sizeof size);
    *live += size;
    return (uint8_t *)raw + HOOK_HEADER;
}

static void capped_free(void *ptr, void *user_data)
{
    size_t *live = user_data, size;
    uint8_t *raw = (uint8_t *)ptr - HOOK_HEADER;
    memcpy(&size, raw, sizeof size);
    *live -= size;
    free(raw);
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

/* A small GPT-2 style tokenizer.json: a few byte symbols ("\u0120" is the
 * space), two merges, an added token. */
static const char hf_json_seed[] =
    "{\"added_tokens\": [{\"id\": 6, \"content\": \"<|x|>\", \"special\": true}],\n"
    " \"normalizer\": null,\n"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
    "\"use_regex\": true},\n"
    " \"decoder\": {\"type\": \"ByteLevel\"},\n"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"vocab\": {\"a\": 0, \"b\": 1, "
    "\"ab\": 2, \"\\u0120\": 3, \"\u0120ab\": 4, \"\u00e9\": 5, \"<|x|>\": 6},\n"
    " \"merges\": [\"a b\", [\"\u0120\", \"ab\"]]}}\n";

static uint8_t *seed_hf_json(size_t *n)
{
    *n = sizeof hf_json_seed - 1;
    uint8_t *bytes = malloc(*n);
    memcpy(bytes, hf_json_seed, *n);
    return bytes;
}

/* The same tokenizer as our own file (version 2, kind bpe). */
static uint8_t *seed_bpe(size_t *n)
{
    char path[512];
    test_path(path, sizeof path, h.dir, "seed.json");
    nctmc_tokenizer *tok = NULL;
    if (!test_write_bytes(path, hf_json_seed, sizeof hf_json_seed - 1) ||
        nctmc_tokenizer_load_hf_json(h.ctx, path, &tok) != NCTMC_OK ||
        nctmc_tokenizer_save(tok, path) != NCTMC_OK)
        fail("cannot make the seed BPE tokenizer");
    nctmc_tokenizer_free(tok);
    uint8_t *bytes = test_read_bytes(path, n);
    unlink(path);
    return bytes;
}

/* A resumable checkpoint one step into a run, of the model above. */
static uint8_t *seed_trainer(size_t *n)
{
    size_t model_size = 0;
    char path[512];
    test_path(path, sizeof path, h.dir, "seed-model.safetensors");
    uint8_t *model_bytes = seed_checkpoint(&model_size);
    nctmc_model *m = NULL;
    nctmc_trainer *t = NULL;
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    p.batch_size = 2;
    int32_t tokens[6] = {0, 1, 2, 3, 1, 0}, labels[2] = {0, 0};
    if (!model_bytes || !test_write_bytes(path, model_bytes, model_size) ||
        nctmc_model_load(h.ctx, path, &m) != NCTMC_OK ||
        nctmc_trainer_create(m, &p, &t) != NCTMC_OK ||
        nctmc_trainer_step(t, tokens, labels, NULL) != NCTMC_OK ||
        nctmc_trainer_save(t, path) != NCTMC_OK)
        fail("cannot make the seed trainer checkpoint");
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    free(model_bytes);
    uint8_t *bytes = test_read_bytes(path, n);
    unlink(path);
    return bytes;
}

/* Three images of the digits file's format (and a comment, a blank line,
 * a Windows line end). */
static uint8_t *seed_digits(size_t *n)
{
    static const char text[] =
        "# digits\n"
        "3:00000000000000000000000000000000000000000000000000000000000000g0\n"
        "\n"
        "7:0123456789abcdefg0123456789abcdefg0123456789abcdefg0123456789abc\r\n"
        "0:gggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggg\n";
    *n = sizeof text - 1;
    uint8_t *bytes = malloc(*n);
    memcpy(bytes, text, *n);
    return bytes;
}

/* A JSON Lines record with every kind of value and escape the extractor
 * decodes or skips (prepare --jsonl-field text). */
static uint8_t *seed_jsonl(size_t *n)
{
    static const char text[] =
        "{\"id\": -12.5e+3, \"meta\": {\"a\": [1, true, false, null, \"}\"], \"b\": {}},"
        " \"te\\u0078t\": \"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\\ud800x\", "
        "\"text\": \"ignored\"}";
    *n = sizeof text - 1;
    uint8_t *bytes = malloc(*n);
    memcpy(bytes, text, *n);
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
    cp.alloc_fn = capped_alloc;
    cp.free_fn = capped_free;
    cp.alloc_user_data = &h.live_bytes;
    if (!test_make_temp_dir(h.dir, sizeof h.dir) || nctmc_context_create(&cp, &h.ctx) != NCTMC_OK)
        fail("no scratch directory or context");
    test_path(h.input_path, sizeof h.input_path, h.dir, "input");
    h.seed[T_MODEL] = seed_checkpoint(&h.seed_size[T_MODEL]);
    h.seed[T_SAFETENSORS] = malloc(h.seed_size[T_MODEL]);
    memcpy(h.seed[T_SAFETENSORS], h.seed[T_MODEL], h.seed_size[T_MODEL]);
    h.seed_size[T_SAFETENSORS] = h.seed_size[T_MODEL];
    h.seed[T_DATASET] = seed_dataset(&h.seed_size[T_DATASET]);
    h.seed[T_TOKENIZER] = seed_tokenizer(&h.seed_size[T_TOKENIZER]);
    h.seed[T_TRAINER] = seed_trainer(&h.seed_size[T_TRAINER]);
    h.seed[T_DIGITS] = seed_digits(&h.seed_size[T_DIGITS]);
    h.seed[T_JSONL] = seed_jsonl(&h.seed_size[T_JSONL]);
    h.seed[T_HF_JSON] = seed_hf_json(&h.seed_size[T_HF_JSON]);
    h.seed[T_BPE] = seed_bpe(&h.seed_size[T_BPE]);
    test_path(h.resaved_path, sizeof h.resaved_path, h.dir, "resaved");
    h.pinned = -1;
    const char *pin = getenv("FUZZ_LOADERS_TARGET");
    for (int t = 0; pin && t < N_TARGETS; t++)
        if (strcmp(pin, target_names[t]) == 0)
            h.pinned = t;
    if (pin && h.pinned < 0)
        fail("FUZZ_LOADERS_TARGET names no target");
    atexit(cleanup);
    h.live_baseline = h.live_bytes;
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

/* A BPE tokenizer gives text back exactly: decode(encode(text)) == text
 * (ids need not survive decode then encode: BPE has one canonical
 * spelling). Encoding may fail only for a byte without a token. */
static void check_bpe_round_trip(nctmc_tokenizer *tok)
{
    /* only bytes the seed has tokens for: a, b, space, 0xE9 ("\u00e9") */
    static const char text[] = "ab ab<|x|>\xe9 aab \xe9" "ab";
    int32_t ids[sizeof text];
    size_t n = 0, len = 0;
    char back[sizeof text + 64];
    nctmc_status st = nctmc_tokenizer_encode(tok, text, sizeof text - 1, ids, sizeof text, &n);
    if (st != NCTMC_OK) {
        if (st != NCTMC_ERR_INVALID_ARGUMENT || !has_message(nctmc_tokenizer_last_error(tok)))
            fail("a BPE encode failed without a reason");
        return;
    }
    if (nctmc_tokenizer_decode(tok, ids, n, back, sizeof back, &len) != NCTMC_OK ||
        len != sizeof text - 1 || memcmp(back, text, len) != 0)
        fail("a loaded BPE tokenizer does not give its text back");
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
    if (nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_BPE) {
        check_bpe_round_trip(tok);
        nctmc_tokenizer_free(tok);
        return 1;
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

static int run_hf_json(void)
{
    nctmc_tokenizer *tok = (nctmc_tokenizer *)&tok;
    nctmc_status st = nctmc_tokenizer_load_hf_json(h.ctx, h.input_path, &tok);
    if (st != NCTMC_OK) {
        if (tok || !has_message(nctmc_context_last_error(h.ctx)))
            fail("nctmc_tokenizer_load_hf_json failed without a message or left a tokenizer");
        return 0;
    }
    if (nctmc_tokenizer_get_kind(tok) != NCTMC_TOKENIZER_BPE)
        fail("tokenizer.json gave a tokenizer that is not BPE");
    check_bpe_round_trip(tok);
    nctmc_tokenizer_free(tok);
    return 1;
}

static int same_params(const nctmc_trainer_params *a, const nctmc_trainer_params *b)
{
    return a->batch_size == b->batch_size && a->seq_len == b->seq_len &&
           a->total_steps == b->total_steps && a->warmup_steps == b->warmup_steps &&
           a->learning_rate == b->learning_rate && a->seed == b->seed;
}

static int same_state(const nctmc_trainer_state *a, const nctmc_trainer_state *b)
{
    return a->step == b->step && a->optimizer_steps == b->optimizer_steps &&
           a->data_position == b->data_position && a->n_skipped == b->n_skipped &&
           a->seed == b->seed;
}

/* The trainer saves its state; that file must resume, to the same state. */
static void resave(nctmc_trainer *t)
{
    nctmc_trainer_state s;
    nctmc_trainer_state_init(&s);
    nctmc_trainer_get_state(t, &s);
    if (nctmc_trainer_save(t, h.resaved_path) != NCTMC_OK)
        return; /* a full disk is no finding */
    nctmc_model *m = NULL;
    nctmc_trainer *again = NULL;
    if (nctmc_trainer_resume(h.ctx, h.resaved_path, NULL, &m, &again) != NCTMC_OK) {
        fprintf(stderr, "%s\n", nctmc_context_last_error(h.ctx));
        fail("a checkpoint the trainer saved does not resume");
    }
    nctmc_trainer_state back;
    nctmc_trainer_state_init(&back);
    nctmc_trainer_get_state(again, &back);
    if (!same_state(&s, &back))
        fail("a saved state does not come back");
    nctmc_trainer_free(again);
    nctmc_model_free(m);
}

static int run_trainer(void)
{
    nctmc_trainer_params ip, rp;
    nctmc_trainer_state is, rs;
    nctmc_trainer_params_init(&ip);
    nctmc_trainer_params_init(&rp);
    nctmc_trainer_state_init(&is);
    nctmc_trainer_state_init(&rs);
    nctmc_status inspected = nctmc_trainer_inspect(h.ctx, h.input_path, &ip, &is);
    if (inspected != NCTMC_OK && !has_message(nctmc_context_last_error(h.ctx)))
        fail("nctmc_trainer_inspect failed without a message");
    nctmc_model *m = (nctmc_model *)&m;
    nctmc_trainer *t = (nctmc_trainer *)&t;
    nctmc_status st = nctmc_trainer_resume(h.ctx, h.input_path, NULL, &m, &t);
    if (st != NCTMC_OK) {
        if (m || t || !has_message(nctmc_context_last_error(h.ctx)))
            fail("nctmc_trainer_resume failed without a message or left an object");
        return 0;
    }
    /* what resumes, `nctmc info` must be able to show, and the same */
    nctmc_trainer_get_params(t, &rp);
    nctmc_trainer_get_state(t, &rs);
    if (inspected != NCTMC_OK || !same_params(&ip, &rp) || !same_state(&is, &rs))
        fail("nctmc_trainer_inspect disagrees with nctmc_trainer_resume");
    /* one step on a batch of token 0 (a data token of every process), then
     * the file it saves must resume */
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(m, &cfg);
    size_t n = (size_t)rp.batch_size * (size_t)(rp.seq_len > 0 ? rp.seq_len : cfg.seq_len);
    int32_t *tokens = n <= ((size_t)1 << 22) ? calloc(n, sizeof *tokens) : NULL;
    if (tokens) {
        nctmc_status stepped = nctmc_trainer_step(t, tokens, NULL, NULL);
        if (stepped != NCTMC_OK && stepped != NCTMC_ERR_NON_FINITE &&
            stepped != NCTMC_ERR_INVALID_ARGUMENT)
            fail("a resumed trainer's step failed unexpectedly");
        free(tokens);
    }
    resave(t);
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    return 1;
}

/* The tool's parser of the digits file (prepare --digits). */
static int run_digits(const uint8_t *text, size_t len)
{
    digits_set set = {NULL, NULL, 0};
    char err[256] = "";
    if (digits_parse((const char *)text, len, &set, err, sizeof err) != 0) {
        if (!has_message(err) || set.pixels)
            fail("digits_parse failed without a message or left data");
        return 0;
    }
    if (set.n < 1)
        fail("digits_parse accepted a file without images");
    for (int64_t i = 0; i < set.n; i++) {
        if (set.labels[i] < 0 || set.labels[i] > 9)
            fail("a digit label out of range");
        for (int k = 0; k < DIGITS_PIXELS; k++)
            if (set.pixels[i * DIGITS_PIXELS + k] < 0 ||
                set.pixels[i * DIGITS_PIXELS + k] >= DIGITS_LEVELS)
                fail("a digit pixel out of range");
    }
    digits_free(&set);
    return 1;
}

/* The tool's JSON Lines extractor on one line, in and out buffers of the
 * exact size (so a sanitizer build sees any overrun). */
static int run_jsonl(const uint8_t *line, size_t len)
{
    char *in = malloc(len ? len : 1), *out = malloc(len ? len : 1);
    memcpy(in, line, len);
    size_t n = (size_t)-1;
    const char *why = NULL;
    jsonl_result r = jsonl_extract(in, len, "text", out, &n, &why);
    if (r == JSONL_TEXT && n > len)
        fail("jsonl_extract decoded more bytes than the line has");
    if (r == JSONL_BAD && !has_message(why))
        fail("jsonl_extract rejected a line without a reason");
    free(in);
    free(out);
    return r == JSONL_TEXT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 2)
        return 0;
    int target = h.pinned >= 0 ? h.pinned : data[0] % N_TARGETS;
    uint8_t mode = data[1];
    buffer b;
    if (mode & 1) { /* mutate the seed */
        b.cap = h.seed_size[target] + 64;
        b.data = malloc(b.cap);
        b.size = h.seed_size[target];
        memcpy(b.data, h.seed[target], b.size);
        for (size_t i = 2; i + 4 <= size && i < 2 + 4 * 16; i += 4)
            mutate(&b, data + i);
        if (mode & 2 && (target == T_MODEL || target == T_SAFETENSORS || target == T_TRAINER))
            fix_checkpoint_checksum(&b);
        if (mode & 2 && target == T_DATASET)
            fix_dataset_checksum(&b);
    } else { /* the bytes are the file */
        b.size = b.cap = size - 2;
        b.data = malloc(b.size + 1);
        memcpy(b.data, data + 2, b.size);
    }
    int ok = 0;
    if (target == T_DIGITS) { /* parsed from memory, as the tool reads it */
        ok = run_digits(b.data, b.size);
        free(b.data);
    } else if (target == T_JSONL) {
        ok = run_jsonl(b.data, b.size);
        free(b.data);
    } else {
        if (!test_write_bytes(h.input_path, b.data, b.size))
            fail("cannot write the input file");
        free(b.data);
        switch (target) {
        case T_SAFETENSORS: ok = run_safetensors(); break;
        case T_MODEL: ok = run_model(); break;
        case T_DATASET: ok = run_dataset(); break;
        case T_TRAINER: ok = run_trainer(); break;
        case T_HF_JSON: ok = run_hf_json(); break;
        default: ok = run_tokenizer(); break; /* T_TOKENIZER, T_BPE */
        }
    }
    if (h.live_bytes != h.live_baseline)
        fail("a loader kept memory it took through the allocator hook");
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
        reach &= h.accepted[t] > runs / (8 * N_TARGETS) &&
                 h.rejected[t] > runs / (8 * N_TARGETS);
    }
    printf("fuzz_loaders: %d passed, %d failed\n", runs + reach, !reach);
    return reach ? 0 : 1;
}
#endif
