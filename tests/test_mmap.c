/*
 * test_mmap.c — memory-mapped models (nctmc_model_load_ex(), lib/model/model_map.c):
 * a mapped load, a copied one and the model that was saved give the same
 * bits in every output; a mapped model's weights really are the file's
 * pages (none resident in this process before the first forward pass, per
 * /proc/self/smaps); files whose tensors cannot be read in place still
 * load, by copying; the checks AUTO keeps and LAZY skips; and everything
 * that writes weights (write_tensor, training, copy_weights) copies first
 * and leaves the file alone.
 *
 * argv[1]: the folder of the 0.2.0 checkpoints (tests/legacy).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

static char dir[256];

/* Vocabulary, widths and labels chosen so that no tensor of the file's
 * layout is a multiple of 16 floats long: the mapped model's tensors then
 * sit at other alignments than the standard slab's, and the outputs must
 * not care. */
static nctmc_model_config test_config(nctmc_process process)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = 37;
    c.vocab_pad_multiple = 1;
    c.seq_len = 24;
    c.n_layers = 2;
    c.d_model = 48;
    c.n_heads = 2;
    c.cond_dim = 40;
    c.n_classes = 3;
    c.process = process;
    c.seed = 5;
    return c;
}

static nctmc_context *cpu_context(void)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 2;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    CHECK(st == NCTMC_OK, "context_create: %s", nctmc_status_string(st));
    return ctx;
}

/* Every tensor random in +-0.3 (a fresh model's zero-initialised heads
 * would hide a tensor read from the wrong place). */
static void randomise(nctmc_model *m, uint64_t seed)
{
    test_rng rng = test_rng_seed(seed);
    for (int32_t i = 0; i < nctmc_model_n_tensors(m); i++) {
        nctmc_tensor_info info;
        nctmc_tensor_info_init(&info);
        nctmc_model_tensor_info(m, i, &info);
        float *v = malloc((size_t)info.n_elements * sizeof(float));
        for (int64_t e = 0; e < info.n_elements; e++)
            v[e] = test_uniform(&rng, -0.3f, 0.3f);
        CHECK(nctmc_model_write_tensor(m, info.name, v, info.n_elements) == NCTMC_OK, "%s",
              nctmc_model_last_error(m));
        free(v);
    }
}

static nctmc_model *load(nctmc_context *ctx, const char *path, nctmc_load_mapping mapping,
                         nctmc_status want)
{
    nctmc_load_params lp;
    nctmc_load_params_init(&lp);
    lp.mapping = mapping;
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_load_ex(ctx, path, &lp, &m);
    CHECK(st == want, "load (mapping %d) of %s: %s, want %s: %s", (int)mapping, path,
          nctmc_status_string(st), nctmc_status_string(want), nctmc_context_last_error(ctx));
    return m;
}

/* The forward outputs at fixed inputs, into one buffer (malloc'ed). */
#define FWD_B 2
static float *forward_outputs(nctmc_model *m, size_t *n_out)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(m, &c);
    int32_t L = c.seq_len, S = c.vocab_size;
    int32_t tokens[FWD_B * 64];
    for (int32_t i = 0; i < FWD_B * L; i++)
        tokens[i] = (i * 7 + 3) % S;
    float times[FWD_B] = {0.3f, 0.8f};
    int32_t labels[FWD_B] = {1, 3};
    size_t n = (size_t)FWD_B * L + (size_t)FWD_B * L * S;
    float *out = calloc(n, sizeof(float));
    nctmc_forward_params fp;
    nctmc_forward_params_init(&fp);
    fp.batch = FWD_B;
    fp.length = L;
    fp.tokens = tokens;
    fp.times = times;
    fp.labels = c.n_classes > 0 ? labels : NULL;
    fp.log_rate = out;
    fp.jump_logprobs = out + FWD_B * L;
    nctmc_status st = nctmc_model_forward(m, &fp);
    CHECK(st == NCTMC_OK, "forward: %s", nctmc_model_last_error(m));
    *n_out = n;
    return out;
}

static void check_same_outputs(nctmc_model *a, nctmc_model *b, const char *what)
{
    size_t na = 0, nb = 0;
    float *x = forward_outputs(a, &na), *y = forward_outputs(b, &nb);
    CHECK(na == nb && memcmp(x, y, na * sizeof(float)) == 0,
          "%s: forward outputs differ in their bits", what);
    free(x);
    free(y);
}

static void sample_tokens(const nctmc_model *m, int32_t *out)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = 2;
    nctmc_sampler *s = NULL;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK, "sampler: %s",
          nctmc_model_last_error(m));
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = 2;
    p.n_steps = 6;
    p.seed = 9;
    p.tokens_out = out;
    CHECK(nctmc_sample(s, &p) == NCTMC_OK, "sample: %s", nctmc_sampler_last_error(s));
    nctmc_sampler_free(s);
}

/* Resident kilobytes of this process's maps of `path` (smaps), or -1 when
 * there are none or no /proc. */
static long resident_kb_of(const char *path)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[1024];
    long kb = -1;
    int in_file = 0;
    size_t plen = strlen(path);
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            /* a map line: the path is its last field (" (deleted)" may
             * follow once the file is unlinked) */
            char *at = strstr(line, path);
            in_file = at && (at[plen] == '\n' || at[plen] == ' ');
            if (in_file && kb < 0)
                kb = 0;
            continue;
        }
        long v;
        if (in_file && sscanf(line, "Rss: %ld kB", &v) == 1)
            kb += v;
    }
    fclose(f);
    return kb;
}

/* ---- rewriting a saved file ---------------------------------------------- */

static uint64_t le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Stores the file's CRC-32 in its "nctmc.checksum" digits (docs/formats.md). */
static void fix_checksum(uint8_t *buf, size_t n)
{
    const char key[] = "\"nctmc.checksum\":\"";
    uint8_t *at = NULL;
    for (size_t i = 0; i + sizeof key < n && !at; i++)
        if (memcmp(buf + i, key, sizeof key - 1) == 0)
            at = buf + i + sizeof key - 1;
    CHECK(at != NULL, "no checksum in the file");
    if (!at)
        return;
    memset(at, '0', 8);
    char digits[9];
    snprintf(digits, sizeof digits, "%08x", (unsigned)test_crc32_of(buf, n));
    memcpy(at, digits, 8);
}

/* Copies `src` to `dst` with the header's padding changed so that the data
 * starts at 8 + header length = `rem` modulo 64 (the JSON is untouched). */
static void write_with_data_at(const char *src, const char *dst, int rem)
{
    size_t n = 0;
    uint8_t *in = test_read_bytes(src, &n);
    uint64_t hlen = le64(in);
    uint64_t json = hlen;
    while (json > 0 && in[8 + json - 1] == ' ')
        json--;
    uint64_t new_hlen = json;
    while ((8 + new_hlen) % 64 != (uint64_t)rem)
        new_hlen++;
    size_t data = n - 8 - (size_t)hlen;
    size_t m = 8 + (size_t)new_hlen + data;
    uint8_t *out = malloc(m);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(new_hlen >> (8 * i));
    memcpy(out + 8, in + 8, (size_t)json);
    memset(out + 8 + json, ' ', (size_t)(new_hlen - json));
    memcpy(out + 8 + new_hlen, in + 8 + hlen, data);
    fix_checksum(out, m);
    CHECK(test_write_bytes(dst, out, m), "writing %s", dst);
    free(in);
    free(out);
}

/* Copies src to dst with the 4 bytes at data byte `at` replaced, and the
 * checksum recomputed when `fix` (so that only the values are wrong). */
static void write_with_value(const char *src, const char *dst, size_t at, uint32_t bits,
                             int fix)
{
    size_t n = 0;
    uint8_t *buf = test_read_bytes(src, &n);
    size_t data = 8 + (size_t)le64(buf);
    for (int i = 0; i < 4; i++)
        buf[data + at + (size_t)i] = (uint8_t)(bits >> (8 * i));
    if (fix)
        fix_checksum(buf, n);
    CHECK(test_write_bytes(dst, buf, n), "writing %s", dst);
    free(buf);
}

/* ---- the tests ------------------------------------------------------------- */

static void test_same_bits(nctmc_context *ctx, nctmc_model *saved, const char *path)
{
    nctmc_model *mapped = load(ctx, path, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    nctmc_model *plain = NULL;
    CHECK(nctmc_model_load(ctx, path, &plain) == NCTMC_OK, "%s", nctmc_context_last_error(ctx));
    nctmc_model *lazy = load(ctx, path, NCTMC_LOAD_MAP_LAZY, NCTMC_OK);
    nctmc_model *copied = load(ctx, path, NCTMC_LOAD_COPY, NCTMC_OK);
    if (!mapped || !plain || !lazy || !copied)
        goto done;
    CHECK(nctmc_model_is_mapped(mapped) == 1, "AUTO did not map");
    CHECK(nctmc_model_is_mapped(plain) == 1, "nctmc_model_load() did not map");
    CHECK(nctmc_model_is_mapped(lazy) == 1, "LAZY did not map");
    CHECK(nctmc_model_is_mapped(copied) == 0, "COPY mapped");
    CHECK(nctmc_model_is_mapped(saved) == 0 && nctmc_model_is_mapped(NULL) == 0,
          "a created model / NULL counts as mapped");

    /* nothing of the file is resident here before the first forward pass
     * (the checks read through the file, not the map); after it, the
     * weights it read are */
#ifdef _WIN32
    bool have_smaps = false; /* Wine's /proc is the Unix process's, with Unix paths */
#else
    bool have_smaps = access("/proc/self/smaps", R_OK) == 0;
#endif
    long before = have_smaps ? resident_kb_of(path) : 0;
    CHECK(before == 0, "%ld kB of the mapped file resident before any forward pass (-1: "
          "no map of it)", before);
    check_same_outputs(mapped, saved, "mapped vs the saved model");
    size_t file_size = 0;
    free(test_read_bytes(path, &file_size));
    long after = have_smaps ? resident_kb_of(path) : (long)file_size;
    CHECK(after * 1024 >= (long)file_size / 2, "only %ld kB resident after a forward pass",
          after);
    if (!have_smaps)
        printf("no /proc/self/smaps: residency not checked\n");

    check_same_outputs(copied, saved, "copied vs the saved model");
    check_same_outputs(lazy, copied, "lazy vs copied");
    int32_t a[2 * 24], b[2 * 24];
    sample_tokens(mapped, a);
    sample_tokens(copied, b);
    CHECK(memcmp(a, b, sizeof a) == 0, "samples of the mapped and the copied model differ");

    /* every tensor reads back the same */
    for (int32_t i = 0; i < nctmc_model_n_tensors(saved); i++) {
        nctmc_tensor_info info;
        nctmc_tensor_info_init(&info);
        nctmc_model_tensor_info(saved, i, &info);
        float *x = malloc((size_t)info.n_elements * sizeof(float));
        float *y = malloc((size_t)info.n_elements * sizeof(float));
        nctmc_model_read_tensor(saved, info.name, x, info.n_elements);
        CHECK(nctmc_model_read_tensor(mapped, info.name, y, info.n_elements) == NCTMC_OK, "%s",
              nctmc_model_last_error(mapped));
        CHECK(memcmp(x, y, (size_t)info.n_elements * sizeof(float)) == 0,
              "tensor %s reads back differently from the map", info.name);
        free(x);
        free(y);
    }

    /* saving a mapped model writes the very file it came from */
    char again[512];
    test_path(again, sizeof again, dir, "again.safetensors");
    CHECK(nctmc_model_save(mapped, again) == NCTMC_OK, "%s", nctmc_model_last_error(mapped));
    size_t n1 = 0, n2 = 0;
    uint8_t *f1 = test_read_bytes(path, &n1), *f2 = test_read_bytes(again, &n2);
    CHECK(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0,
          "the mapped model saves to other bytes than its file");
    free(f1);
    free(f2);
    unlink(again);
done:
    nctmc_model_free(mapped);
    nctmc_model_free(plain);
    nctmc_model_free(lazy);
    nctmc_model_free(copied);
}

/* The map holds the file, not its name: unlinked or renamed over, the
 * model still reads what it loaded. */
static void test_file_goes_away(nctmc_context *ctx, nctmc_model *saved, nctmc_model *other,
                                const char *path)
{
    char copy[512];
#ifdef _WIN32
    /* Windows neither deletes nor replaces a file that is mapped (docs/install.md) */
    printf("Windows: a mapped checkpoint is neither unlinked nor saved over; not checked\n");
    (void)ctx;
    (void)saved;
    (void)other;
    (void)path;
    (void)copy;
    return;
#endif
    test_path(copy, sizeof copy, dir, "gone.safetensors");
    CHECK(nctmc_model_save(saved, copy) == NCTMC_OK, "save");
    nctmc_model *unlinked = load(ctx, copy, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    unlink(copy);
    CHECK(nctmc_model_save(saved, copy) == NCTMC_OK, "save");
    nctmc_model *replaced = load(ctx, copy, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    /* the library's writers rename a new file over the old one */
    CHECK(nctmc_model_save(other, copy) == NCTMC_OK, "save over");
    if (unlinked && replaced) {
        check_same_outputs(unlinked, saved, "mapped, then unlinked");
        check_same_outputs(replaced, saved, "mapped, then saved over");
    }
    nctmc_model_free(unlinked);
    nctmc_model_free(replaced);
    unlink(copy);
    (void)path;
}

/* write_tensor copies the map first: the model changes, the file does not. */
static void test_write_copies(nctmc_context *ctx, nctmc_model *saved, const char *path)
{
    nctmc_model *m = load(ctx, path, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    if (!m)
        return;
    float bias[37];
    for (int i = 0; i < 37; i++)
        bias[i] = 0.01f * (float)i;
    nctmc_status st = nctmc_model_write_tensor(m, "output_layer.linear.bias", bias, 37);
    CHECK(st == NCTMC_OK, "write_tensor on a mapped model: %s", nctmc_model_last_error(m));
    CHECK(nctmc_model_is_mapped(m) == 0, "still mapped after a write");
    float back[37];
    nctmc_model_read_tensor(m, "output_layer.linear.bias", back, 37);
    CHECK(memcmp(back, bias, sizeof bias) == 0, "the write did not land");
    /* the other tensors came along unchanged: restore the bias, compare */
    nctmc_model_read_tensor(saved, "output_layer.linear.bias", bias, 37);
    nctmc_model_write_tensor(m, "output_layer.linear.bias", bias, 37);
    check_same_outputs(m, saved, "copied out of the map by a write");
    nctmc_model *fresh = load(ctx, path, NCTMC_LOAD_COPY, NCTMC_OK);
    if (fresh)
        check_same_outputs(fresh, saved, "the file after writing its mapped model");
    nctmc_model_free(fresh);
    nctmc_model_free(m);
}

/* Training a mapped model trains a copy, step for step as training the
 * copied load does. */
static void test_training(nctmc_context *ctx, const char *path)
{
    nctmc_model *mapped = load(ctx, path, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    nctmc_model *copied = load(ctx, path, NCTMC_LOAD_COPY, NCTMC_OK);
    if (!mapped || !copied)
        goto done;
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 2;
    tp.learning_rate = 1e-2f;
    tp.warmup_steps = 0;
    tp.seed = 4;
    nctmc_trainer *ta = NULL, *tb = NULL;
    CHECK(nctmc_trainer_create(mapped, &tp, &ta) == NCTMC_OK, "trainer on a mapped model: %s",
          nctmc_model_last_error(mapped));
    CHECK(nctmc_trainer_create(copied, &tp, &tb) == NCTMC_OK, "trainer: %s",
          nctmc_model_last_error(copied));
    CHECK(nctmc_model_is_mapped(mapped) == 0, "a trained model is still mapped");
    int32_t tokens[2 * 24];
    int32_t labels[2] = {0, 2};
    for (int32_t i = 0; i < 2 * 24; i++)
        tokens[i] = (i * 5 + 2) % 36;
    for (int step = 0; ta && tb && step < 3; step++) {
        nctmc_train_stats sa, sb;
        nctmc_train_stats_init(&sa);
        nctmc_train_stats_init(&sb);
        CHECK(nctmc_trainer_step(ta, tokens, labels, &sa) == NCTMC_OK, "step: %s",
              nctmc_trainer_last_error(ta));
        CHECK(nctmc_trainer_step(tb, tokens, labels, &sb) == NCTMC_OK, "step: %s",
              nctmc_trainer_last_error(tb));
        CHECK(memcmp(&sa.loss, &sb.loss, sizeof sa.loss) == 0, "step %d: loss %.9g vs %.9g",
              step, sa.loss, sb.loss);
    }
    check_same_outputs(mapped, copied, "trained from the map vs from the copy");
    /* copying a trainer's weights into a mapped model copies it first */
    nctmc_model *dst = load(ctx, path, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    if (dst && ta) {
        CHECK(nctmc_trainer_copy_weights(ta, dst, 0) == NCTMC_OK, "copy_weights: %s",
              nctmc_trainer_last_error(ta));
        CHECK(nctmc_model_is_mapped(dst) == 0, "copy_weights left the model mapped");
        check_same_outputs(dst, mapped, "copy_weights into a mapped model");
    }
    nctmc_model_free(dst);
    nctmc_trainer_free(ta);
    nctmc_trainer_free(tb);
done:
    nctmc_model_free(mapped);
    nctmc_model_free(copied);
}

/* Where tensors cannot be read in place, loading copies; files of the old
 * 8-byte alignment still map. */
static void test_layouts(nctmc_context *ctx, nctmc_model *saved, const char *path)
{
    char odd[512], old[512];
    test_path(odd, sizeof odd, dir, "odd.safetensors");
    test_path(old, sizeof old, dir, "old.safetensors");
    write_with_data_at(path, odd, 2);  /* floats at offsets 2 mod 4 */
    write_with_data_at(path, old, 8);  /* 8-byte aligned, as 0.3.0 wrote */
    nctmc_model *a = load(ctx, odd, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    nctmc_model *b = load(ctx, old, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    nctmc_model *c = load(ctx, odd, NCTMC_LOAD_MAP_LAZY, NCTMC_OK);
    if (a) {
        CHECK(nctmc_model_is_mapped(a) == 0, "a file with misaligned floats was mapped");
        check_same_outputs(a, saved, "misaligned file, copied");
    }
    if (b) {
        CHECK(nctmc_model_is_mapped(b) == 1, "an 8-byte-aligned file was not mapped");
        check_same_outputs(b, saved, "8-byte-aligned file, mapped");
    }
    if (c)
        CHECK(nctmc_model_is_mapped(c) == 0, "LAZY mapped misaligned floats");
    nctmc_model_free(a);
    nctmc_model_free(b);
    nctmc_model_free(c);
    /* a lazy load that falls back to copying still checks the checksum */
    write_with_value(odd, odd, 4, 0x3f800000u, 0);
    load(ctx, odd, NCTMC_LOAD_MAP_LAZY, NCTMC_ERR_FORMAT);
    unlink(odd);
    unlink(old);
}

/* AUTO and COPY check the checksum and every value; LAZY checks neither,
 * and the copy for writing refuses what it finds. */
static void test_checks(nctmc_context *ctx, const char *path)
{
    char bad[512];
    test_path(bad, sizeof bad, dir, "bad.safetensors");
    /* a changed value with a stale checksum */
    write_with_value(path, bad, 40, 0x3f800000u, 0);
    load(ctx, bad, NCTMC_LOAD_MAP_AUTO, NCTMC_ERR_FORMAT);
    CHECK(strstr(nctmc_context_last_error(ctx), "checksum") != NULL, "message: %s",
          nctmc_context_last_error(ctx));
    load(ctx, bad, NCTMC_LOAD_COPY, NCTMC_ERR_FORMAT);
    nctmc_model *m = load(ctx, bad, NCTMC_LOAD_MAP_LAZY, NCTMC_OK);
    CHECK(m && nctmc_model_is_mapped(m), "LAZY did not map a file with a stale checksum");
    nctmc_model_free(m);
    /* a NaN with a correct checksum */
    write_with_value(path, bad, 40, 0x7fc00000u, 1);
    load(ctx, bad, NCTMC_LOAD_MAP_AUTO, NCTMC_ERR_FORMAT);
    CHECK(strstr(nctmc_context_last_error(ctx), "not finite") != NULL, "message: %s",
          nctmc_context_last_error(ctx));
    load(ctx, bad, NCTMC_LOAD_COPY, NCTMC_ERR_FORMAT);
    m = load(ctx, bad, NCTMC_LOAD_MAP_LAZY, NCTMC_OK);
    if (m) {
        float one = 1.0f;
        nctmc_status st = nctmc_model_write_tensor(m, "output_layer.rate_head.bias", &one, 1);
        CHECK(st == NCTMC_ERR_FORMAT && strstr(nctmc_model_last_error(m), "not finite"),
              "writing a lazily mapped model holding a NaN: %s (%s)", nctmc_status_string(st),
              nctmc_model_last_error(m));
        CHECK(nctmc_model_is_mapped(m) == 1, "a failed copy left the model unmapped");
        nctmc_trainer_params tp;
        nctmc_trainer_params_init(&tp);
        tp.batch_size = 2;
        nctmc_trainer *t = NULL;
        CHECK(nctmc_trainer_create(m, &tp, &t) == NCTMC_ERR_FORMAT && !t,
              "a trainer on a NaN map: %s", nctmc_model_last_error(m));
    }
    nctmc_model_free(m);
    unlink(bad);
}

static void test_arguments(nctmc_context *ctx, const char *path)
{
    load(ctx, path, 3, NCTMC_ERR_INVALID_ARGUMENT);
    load(ctx, path, -1, NCTMC_ERR_INVALID_ARGUMENT);
    nctmc_load_params lp;
    CHECK(nctmc_load_params_init_sized(&lp, 4) == NCTMC_ERR_INVALID_ARGUMENT, "tiny struct");
    CHECK(nctmc_load_params_init_sized(NULL, sizeof lp) == NCTMC_ERR_INVALID_ARGUMENT, "NULL");
    nctmc_load_params_init(&lp);
    CHECK(lp.mapping == NCTMC_LOAD_MAP_AUTO && lp.struct_size == sizeof lp, "defaults");
    nctmc_model *m = NULL;
    CHECK(nctmc_model_load_ex(ctx, path, NULL, &m) == NCTMC_OK && nctmc_model_is_mapped(m),
          "NULL params: %s", nctmc_context_last_error(ctx));
    nctmc_model_free(m);
    m = NULL;
    CHECK(nctmc_model_load_ex(ctx, NULL, NULL, &m) == NCTMC_ERR_INVALID_ARGUMENT && !m,
          "NULL path");
    CHECK(nctmc_model_load_ex(NULL, path, NULL, &m) == NCTMC_ERR_INVALID_ARGUMENT, "NULL ctx");
    /* memory loads copy (the model keeps no pointer into the caller's buffer) */
    size_t n = 0;
    uint8_t *buf = test_read_bytes(path, &n);
    CHECK(nctmc_model_load_memory(ctx, buf, n, &m) == NCTMC_OK && !nctmc_model_is_mapped(m),
          "load_memory");
    nctmc_model_free(m);
    free(buf);
}

/* A trainer checkpoint maps its EMA weights; resuming copies. */
static void test_trainer_checkpoint(nctmc_context *ctx, nctmc_model *saved)
{
    char ck[512];
    test_path(ck, sizeof ck, dir, "trainer.safetensors");
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 2;
    nctmc_trainer *t = NULL;
    CHECK(nctmc_trainer_create(saved, &tp, &t) == NCTMC_OK, "%s", nctmc_model_last_error(saved));
    if (!t)
        return;
    CHECK(nctmc_trainer_save(t, ck) == NCTMC_OK, "%s", nctmc_trainer_last_error(t));
    nctmc_model *mapped = load(ctx, ck, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    nctmc_model *copied = load(ctx, ck, NCTMC_LOAD_COPY, NCTMC_OK);
    if (mapped && copied) {
        CHECK(nctmc_model_is_mapped(mapped), "a trainer checkpoint was not mapped");
        check_same_outputs(mapped, copied, "trainer checkpoint, mapped vs copied");
    }
    nctmc_model *rm = NULL;
    nctmc_trainer *rt = NULL;
    CHECK(nctmc_trainer_resume(ctx, ck, NULL, &rm, &rt) == NCTMC_OK, "resume: %s",
          nctmc_context_last_error(ctx));
    CHECK(rm && !nctmc_model_is_mapped(rm), "a resumed model is mapped");
    nctmc_trainer_free(rt);
    nctmc_model_free(rm);
    nctmc_model_free(mapped);
    nctmc_model_free(copied);
    nctmc_trainer_free(t);
    unlink(ck);
}

static void test_legacy_files(nctmc_context *ctx, const char *legacy_dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/v0.2.0-uniform.safetensors", legacy_dir);
    nctmc_model *mapped = load(ctx, path, NCTMC_LOAD_MAP_AUTO, NCTMC_OK);
    nctmc_model *copied = load(ctx, path, NCTMC_LOAD_COPY, NCTMC_OK);
    if (mapped && copied) {
        CHECK(nctmc_model_is_mapped(mapped), "a 0.2.0 checkpoint was not mapped");
        size_t na = 0, nb = 0;
        float *x = forward_outputs(mapped, &na), *y = forward_outputs(copied, &nb);
        CHECK(na == nb && memcmp(x, y, na * sizeof(float)) == 0,
              "0.2.0 checkpoint: mapped and copied outputs differ");
        free(x);
        free(y);
    }
    nctmc_model_free(mapped);
    nctmc_model_free(copied);
}

int main(int argc, char **argv)
{
    if (!test_make_temp_dir(dir, sizeof dir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    nctmc_context *ctx = cpu_context();
    const nctmc_process processes[] = {NCTMC_PROCESS_UNIFORM, NCTMC_PROCESS_MASKED};
    for (int k = 0; ctx && k < 2; k++) {
        nctmc_model_config c = test_config(processes[k]);
        nctmc_model *saved = NULL, *other = NULL;
        CHECK(nctmc_model_create(ctx, &c, &saved) == NCTMC_OK, "%s",
              nctmc_context_last_error(ctx));
        CHECK(nctmc_model_create(ctx, &c, &other) == NCTMC_OK, "create");
        if (!saved || !other)
            break;
        randomise(saved, 21 + (uint64_t)k);
        randomise(other, 99);
        char path[512];
        test_path(path, sizeof path, dir, "model.safetensors");
        CHECK(nctmc_model_save(saved, path) == NCTMC_OK, "%s", nctmc_model_last_error(saved));
        test_same_bits(ctx, saved, path);
        test_file_goes_away(ctx, saved, other, path);
        test_write_copies(ctx, saved, path);
        test_training(ctx, path);
        test_layouts(ctx, saved, path);
        test_checks(ctx, path);
        if (k == 0) {
            test_arguments(ctx, path);
            test_trainer_checkpoint(ctx, saved);
        }
        unlink(path);
        nctmc_model_free(saved);
        nctmc_model_free(other);
    }
    if (ctx && argc > 1)
        test_legacy_files(ctx, argv[1]);
    nctmc_context_free(ctx);
    test_remove_dir(dir);
    return test_finish("mmap");
}
