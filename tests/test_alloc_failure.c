/*
 * test_alloc_failure.c — allocation failure at every allocation site, the
 * way SQLite tests it: an allocator hook (nctmc_context_params.alloc_fn)
 * counts allocations and fails the N-th; for N = 1, 2, ... until the
 * operation no longer reaches an N-th allocation, each run must fail with
 * NCTMC_ERR_OUT_OF_MEMORY, leave its outputs NULL, and hand back every byte
 * it took (the hook counts live bytes and blocks). Walked: context
 * creation, model creation, loading from memory, a path and a reader,
 * forward, sampler creation + nctmc_sample(), trainer creation + one step,
 * saving a model and a trainer, resuming, evaluation, tokenizers (a BPE
 * from tokenizer.json and from vocab.json + merges.txt, encoded, saved and
 * loaded again included) and datasets opened with the context. The hook also checks what it promises:
 * never called from a worker thread, never with size 0, alignments powers
 * of two up to 64, and the sampling and training steps allocate nothing.
 *
 * What this cannot reach: memory OpenBLAS maps for itself (its buffers are
 * not the library's to route; under an address-space limit its
 * blas_memory_alloc may even retry forever, which no hook here can change),
 * pthread stacks, and the C library's internal buffers.
 *
 * Run it under ASan with detect_leaks=1: the walk frees as it goes, so a
 * leak on any failure path shows up as a leak report too.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

/* Room in front of each block for its size; also the largest alignment
 * the library may ask for. */
#define HOOK_HEADER 64

typedef struct alloc_hook {
    pthread_t thread;           /* the only thread that may call the hook */
    int64_t n_allocs;           /* calls of alloc_fn so far */
    int64_t fail_at;            /* this call returns NULL (0 = none) */
    int64_t n_failed;           /* failures handed out */
    int64_t live_bytes;
    int64_t live_blocks;
    int64_t foreign_thread_calls;
    int64_t zero_sizes;
    int64_t bad_alignments;
} alloc_hook;

static void *hook_alloc(size_t size, size_t alignment, void *user_data)
{
    alloc_hook *h = user_data;
    if (!pthread_equal(pthread_self(), h->thread))
        h->foreign_thread_calls++;
    if (size == 0)
        h->zero_sizes++;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > HOOK_HEADER)
        h->bad_alignments++;
    if (++h->n_allocs == h->fail_at) {
        h->n_failed++;
        return NULL;
    }
    void *raw = NULL;
    if (size > SIZE_MAX - HOOK_HEADER || posix_memalign(&raw, HOOK_HEADER, HOOK_HEADER + size))
        return NULL;
    memcpy(raw, &size, sizeof size);
    h->live_bytes += (int64_t)size;
    h->live_blocks++;
    return (uint8_t *)raw + HOOK_HEADER;
}

static void hook_free(void *ptr, void *user_data)
{
    alloc_hook *h = user_data;
    if (!pthread_equal(pthread_self(), h->thread))
        h->foreign_thread_calls++;
    uint8_t *raw = (uint8_t *)ptr - HOOK_HEADER;
    size_t size;
    memcpy(&size, raw, sizeof size);
    h->live_bytes -= (int64_t)size;
    h->live_blocks--;
    free(raw);
}

/* ---- the fixture ---------------------------------------------------------- */

enum { L = 8, B = 2, S = 9 };

typedef struct fixture {
    alloc_hook hook;
    char dir[256];
    char model_path[512];
    char trainer_path[512];
    char save_path[512];
    char tokenizer_path[512];
    char dataset_path[512];
    char bpe_json_path[512], bpe_vocab_path[512], bpe_merges_path[512], bpe_saved_path[512];
    uint8_t *model_bytes;       /* the checkpoint at model_path */
    size_t model_size;
    nctmc_context *ctx;         /* made with the hook */
    nctmc_model *model;         /* loaded on ctx */
    float file_bias[64];        /* output_layer.linear.bias as the file has it */
    nctmc_model *model_int8;    /* model converted to int8 weights */
    nctmc_model_config cfg;
    int32_t tokens[B * L];
} fixture;

static void hooked_params(fixture *fx, nctmc_context_params *p)
{
    nctmc_context_params_init(p);
    p->backend = "cpu";
    p->n_threads = 3;
    p->alloc_fn = hook_alloc;
    p->free_fn = hook_free;
    p->alloc_user_data = &fx->hook;
}

/* An operation under test: returns its status; sets *clean to false when a
 * failed run left an output non-NULL. On success it checks its results and
 * releases what it made. */
typedef nctmc_status (*op_fn)(fixture *fx, bool *clean);

/* Runs op once with the N-th allocation from now failing, for N = 1, 2,
 * ...; returns the number of allocation sites the op passed through. */
static int64_t walk(fixture *fx, const char *name, op_fn op)
{
    alloc_hook *h = &fx->hook;
    int64_t sites = -1;
    int wrong_status = 0, dirty = 0, leaks = 0;
    for (int64_t n = 1; n < 100000; n++) {
        int64_t bytes0 = h->live_bytes, blocks0 = h->live_blocks, failed0 = h->n_failed;
        h->fail_at = h->n_allocs + n;
        bool clean = true;
        nctmc_status st = op(fx, &clean);
        h->fail_at = 0;
        bool injected = h->n_failed > failed0;
        if (h->live_bytes != bytes0 || h->live_blocks != blocks0) {
            if (leaks++ < 3)
                fprintf(stderr, "%s, failing allocation %lld: %lld bytes in %lld blocks not "
                                "returned\n",
                        name, (long long)n, (long long)(h->live_bytes - bytes0),
                        (long long)(h->live_blocks - blocks0));
        }
        if (!injected) {
            CHECK(st == NCTMC_OK, "%s: runs to the end without a failure: %s", name,
                  nctmc_status_string(st));
            sites = n - 1;
            break;
        }
        if (st != NCTMC_ERR_OUT_OF_MEMORY && wrong_status++ < 3)
            fprintf(stderr, "%s, failing allocation %lld: status %s (%s)\n", name,
                    (long long)n, nctmc_status_string(st), nctmc_context_last_error(fx->ctx));
        if (!clean && dirty++ < 3)
            fprintf(stderr, "%s, failing allocation %lld: an output is not NULL\n", name,
                    (long long)n);
    }
    CHECK(sites > 0, "%s: the walk ended (%lld allocation sites)", name, (long long)sites);
    CHECK(wrong_status == 0, "%s: %d failures gave another status than out of memory", name,
          wrong_status);
    CHECK(dirty == 0, "%s: %d failures left an output set", name, dirty);
    CHECK(leaks == 0, "%s: %d runs did not return every byte", name, leaks);
    printf("%-28s %5lld allocation sites, every failure clean\n", name, (long long)sites);
    return sites;
}

/* ---- the operations ----------------------------------------------------- */

static nctmc_status op_context_create(fixture *fx, bool *clean)
{
    nctmc_context_params p;
    hooked_params(fx, &p);
    nctmc_context *ctx = (nctmc_context *)(uintptr_t)1;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    if (st != NCTMC_OK) {
        *clean = ctx == NULL;
        return st;
    }
    CHECK(nctmc_context_n_threads(ctx) == 3, "the context has its threads");
    nctmc_context_free(ctx);
    return st;
}

static nctmc_status op_model_create(fixture *fx, bool *clean)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_create(fx->ctx, &fx->cfg, &m);
    if (st != NCTMC_OK) {
        *clean = m == NULL;
        return st;
    }
    nctmc_model_free(m);
    return st;
}

/* A loaded model must equal the fixture's: one tensor compared suffices
 * here (test_load_sources compares everything). */
static bool same_as_fixture(fixture *fx, nctmc_model *m)
{
    float a[S * 16], b[S * 16];
    return nctmc_model_read_tensor(m, "output_layer.linear.bias", a, S) == NCTMC_OK &&
           nctmc_model_read_tensor(fx->model, "output_layer.linear.bias", b, S) == NCTMC_OK &&
           memcmp(a, b, sizeof(float) * S) == 0 && nctmc_model_get_tokenizer(m) != NULL;
}

static nctmc_status finish_load(fixture *fx, nctmc_status st, nctmc_model *m, bool *clean)
{
    if (st != NCTMC_OK) {
        *clean = m == NULL;
        return st;
    }
    CHECK(same_as_fixture(fx, m), "the loaded model is the saved one");
    nctmc_model_free(m);
    return st;
}

static nctmc_status op_load_memory(fixture *fx, bool *clean)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_load_memory(fx->ctx, fx->model_bytes, fx->model_size, &m);
    return finish_load(fx, st, m, clean);
}

static nctmc_status op_load_path(fixture *fx, bool *clean)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_load(fx->ctx, fx->model_path, &m);
    return finish_load(fx, st, m, clean);
}

static int64_t memory_read_at(void *user_data, void *dst, size_t n, int64_t offset)
{
    const fixture *fx = user_data;
    size_t left = fx->model_size - (size_t)offset;
    size_t k = n < left ? n : left;
    memcpy(dst, fx->model_bytes + offset, k);
    return (int64_t)k;
}

static nctmc_status op_load_reader(fixture *fx, bool *clean)
{
    nctmc_reader r;
    nctmc_reader_init(&r);
    r.size = (int64_t)fx->model_size;
    r.read_at = memory_read_at;
    r.user_data = fx;
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_load_reader(fx->ctx, &r, &m);
    return finish_load(fx, st, m, clean);
}

static nctmc_status op_forward(fixture *fx, bool *clean)
{
    (void)clean;
    float times[B] = {0.3f, 0.7f};
    float log_rate[B * L], jump[B * L * S];
    nctmc_forward_params p;
    nctmc_forward_params_init(&p);
    p.batch = B;
    p.length = L;
    p.tokens = fx->tokens;
    p.times = times;
    p.log_rate = log_rate;
    p.jump_logprobs = jump;
    return nctmc_model_forward(fx->model, &p);
}

static nctmc_status sample_model(fixture *fx, const nctmc_model *model, bool *clean)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = B;
    nctmc_sampler *s = (nctmc_sampler *)(uintptr_t)1;
    nctmc_status st = nctmc_sampler_create(model, &sp, &s);
    if (st != NCTMC_OK) {
        *clean = s == NULL;
        return st;
    }
    int32_t out[B * L];
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = B;
    p.n_steps = 4;
    p.correction_steps = 1;
    p.tokens_out = out;
    int64_t allocs = fx->hook.n_allocs;
    st = nctmc_sample(s, &p);
    CHECK(fx->hook.n_allocs == allocs, "nctmc_sample() allocates nothing (%lld)",
          (long long)(fx->hook.n_allocs - allocs));
    nctmc_sampler_free(s);
    return st;
}

static nctmc_status op_sample(fixture *fx, bool *clean)
{
    return sample_model(fx, fx->model, clean);
}

/* the reduced model's linear layers keep their scratch in the workspace */
static nctmc_status op_sample_int8(fixture *fx, bool *clean)
{
    return sample_model(fx, fx->model_int8, clean);
}

static nctmc_status op_convert(fixture *fx, bool *clean)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_convert(fx->model, NCTMC_WEIGHT_BF16, &m);
    if (st != NCTMC_OK) {
        *clean = m == NULL;
        return st;
    }
    CHECK(nctmc_model_weight_type(m) == NCTMC_WEIGHT_BF16 && nctmc_model_get_tokenizer(m),
          "the converted model is bf16 and has the tokenizer");
    nctmc_model_free(m);
    return st;
}

/* A reduced model's save adds its packed weights and scales. */
static nctmc_status op_save_int8(fixture *fx, bool *clean)
{
    int before = test_count_entries(fx->dir);
    nctmc_status st = nctmc_model_save(fx->model_int8, fx->save_path);
    if (st != NCTMC_OK)
        *clean = test_count_entries(fx->dir) == before;
    unlink(fx->save_path);
    return st;
}

static nctmc_status op_train_step(fixture *fx, bool *clean)
{
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = B;
    nctmc_trainer *t = (nctmc_trainer *)(uintptr_t)1;
    nctmc_status st = nctmc_trainer_create(fx->model, &tp, &t);
    if (st != NCTMC_OK) {
        *clean = t == NULL;
        return st;
    }
    int64_t allocs = fx->hook.n_allocs;
    st = nctmc_trainer_step(t, fx->tokens, NULL, NULL);
    CHECK(fx->hook.n_allocs == allocs, "a training step allocates nothing (%lld)",
          (long long)(fx->hook.n_allocs - allocs));
    nctmc_trainer_free(t);
    return st;
}

/* Training a mapped model copies its weights out of the map first; a
 * failure anywhere leaves the model mapped or copied, never half of each. */
static nctmc_status op_train_mapped(fixture *fx, bool *clean)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_status st = nctmc_model_load(fx->ctx, fx->model_path, &m);
    if (st != NCTMC_OK) {
        *clean = m == NULL;
        return st;
    }
    CHECK(nctmc_model_is_mapped(m) == 1, "nctmc_model_load() mapped the file");
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = B;
    nctmc_trainer *t = (nctmc_trainer *)(uintptr_t)1;
    st = nctmc_trainer_create(m, &tp, &t);
    if (st != NCTMC_OK)
        *clean = t == NULL;
    /* (fx->model has been trained by now: compare with the file) */
    float bias[64];
    CHECK(nctmc_model_read_tensor(m, "output_layer.linear.bias", bias, S) == NCTMC_OK &&
              memcmp(bias, fx->file_bias, sizeof(float) * S) == 0,
          "the weights are the file's, mapped (%d) or copied", (int)nctmc_model_is_mapped(m));
    nctmc_trainer_free(st == NCTMC_OK ? t : NULL);
    nctmc_model_free(m);
    return st;
}

/* A failed save leaves nothing behind: no file, no temporary. */
static nctmc_status op_save(fixture *fx, bool *clean)
{
    int before = test_count_entries(fx->dir);
    nctmc_status st = nctmc_model_save(fx->model, fx->save_path);
    if (st != NCTMC_OK)
        *clean = test_count_entries(fx->dir) == before;
    unlink(fx->save_path);
    return st;
}

static nctmc_status op_trainer_save(fixture *fx, bool *clean)
{
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = B;
    nctmc_trainer *t = NULL;
    nctmc_status st = nctmc_trainer_create(fx->model, &tp, &t);
    if (st != NCTMC_OK) {
        *clean = t == NULL;
        return st;
    }
    int before = test_count_entries(fx->dir);
    st = nctmc_trainer_save(t, fx->save_path);
    if (st != NCTMC_OK)
        *clean = test_count_entries(fx->dir) == before;
    unlink(fx->save_path);
    nctmc_trainer_free(t);
    return st;
}

static nctmc_status op_resume(fixture *fx, bool *clean)
{
    nctmc_model *m = (nctmc_model *)(uintptr_t)1;
    nctmc_trainer *t = (nctmc_trainer *)(uintptr_t)1;
    nctmc_status st = nctmc_trainer_resume(fx->ctx, fx->trainer_path, NULL, &m, &t);
    if (st != NCTMC_OK) {
        *clean = m == NULL && t == NULL;
        return st;
    }
    nctmc_trainer_free(t);
    nctmc_model_free(m);
    return st;
}

static nctmc_status op_eval(fixture *fx, bool *clean)
{
    (void)clean;
    nctmc_eval_params p;
    nctmc_eval_params_init(&p);
    p.n_sequences = B;
    p.length = L;
    p.tokens = fx->tokens;
    p.n_time_samples = 2;
    nctmc_eval_result r;
    nctmc_eval_result_init(&r);
    return nctmc_eval(fx->model, &p, &r);
}

static nctmc_status op_tokenizers(fixture *fx, bool *clean)
{
    nctmc_tokenizer *a = (nctmc_tokenizer *)(uintptr_t)1;
    nctmc_tokenizer *b = (nctmc_tokenizer *)(uintptr_t)1;
    nctmc_tokenizer *c = (nctmc_tokenizer *)(uintptr_t)1;
    nctmc_status st = nctmc_tokenizer_create_chars(fx->ctx, "hello world", 11, &a);
    if (st != NCTMC_OK) {
        *clean = a == NULL;
        return st;
    }
    st = nctmc_tokenizer_load(fx->ctx, fx->tokenizer_path, &b);
    if (st != NCTMC_OK) {
        *clean = b == NULL;
        nctmc_tokenizer_free(a);
        return st;
    }
    st = nctmc_tokenizer_clone(b, &c);
    *clean = st == NCTMC_OK || c == NULL;
    nctmc_tokenizer_free(c);
    nctmc_tokenizer_free(b);
    nctmc_tokenizer_free(a);
    return st;
}

/* A BPE tokenizer from both kinds of file, encoding (its word cache and
 * merge scratch are allocated on first use), saving and loading again. */
static nctmc_status op_bpe(fixture *fx, bool *clean)
{
    nctmc_tokenizer *a = (nctmc_tokenizer *)(uintptr_t)1;
    nctmc_tokenizer *b = (nctmc_tokenizer *)(uintptr_t)1;
    nctmc_tokenizer *c = (nctmc_tokenizer *)(uintptr_t)1;
    nctmc_status st = nctmc_tokenizer_load_hf_json(fx->ctx, fx->bpe_json_path, &a);
    if (st != NCTMC_OK) {
        *clean = a == NULL;
        return st;
    }
    int32_t ids[16];
    size_t n = 0;
    st = nctmc_tokenizer_encode(a, "ab ab<|x|>ab", 12, ids, 16, &n);
    if (st == NCTMC_OK)
        st = nctmc_tokenizer_save(a, fx->bpe_saved_path);
    if (st == NCTMC_OK) {
        st = nctmc_tokenizer_load(fx->ctx, fx->bpe_saved_path, &b);
        *clean = st == NCTMC_OK || b == NULL;
    }
    if (st == NCTMC_OK) {
        st = nctmc_tokenizer_load_gpt2(fx->ctx, fx->bpe_vocab_path, fx->bpe_merges_path, &c);
        *clean = st == NCTMC_OK || c == NULL;
    }
    if (st == NCTMC_OK)
        CHECK(n == 4 && ids[0] == 2 && ids[1] == 4 && ids[2] == 5 && ids[3] == 2,
              "the BPE encodes \"ab ab<|x|>ab\" as ab, \" ab\", <|x|>, ab");
    if (st == NCTMC_OK)
        nctmc_tokenizer_free(c);
    if (b != (nctmc_tokenizer *)(uintptr_t)1)
        nctmc_tokenizer_free(b);
    nctmc_tokenizer_free(a);
    return st;
}

static nctmc_status op_dataset(fixture *fx, bool *clean)
{
    nctmc_dataset *ds = (nctmc_dataset *)(uintptr_t)1;
    nctmc_status st = nctmc_dataset_open(fx->ctx, fx->dataset_path, &ds);
    if (st != NCTMC_OK) {
        *clean = ds == NULL;
        return st;
    }
    int32_t first = -1;
    CHECK(nctmc_dataset_read_tokens(ds, 0, 1, &first) == NCTMC_OK && first == fx->tokens[0],
          "the dataset reads back");
    nctmc_dataset_free(ds);
    return st;
}

/* ---- setup ---------------------------------------------------------------- */

static bool setup(fixture *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->hook.thread = pthread_self();
    if (!test_make_temp_dir(fx->dir, sizeof fx->dir))
        return false;
    test_path(fx->model_path, sizeof fx->model_path, fx->dir, "model.safetensors");
    test_path(fx->trainer_path, sizeof fx->trainer_path, fx->dir, "trainer.safetensors");
    test_path(fx->save_path, sizeof fx->save_path, fx->dir, "saved.safetensors");
    test_path(fx->tokenizer_path, sizeof fx->tokenizer_path, fx->dir, "tokenizer.txt");
    test_path(fx->dataset_path, sizeof fx->dataset_path, fx->dir, "data.bin");
    test_path(fx->bpe_json_path, sizeof fx->bpe_json_path, fx->dir, "tokenizer.json");
    test_path(fx->bpe_vocab_path, sizeof fx->bpe_vocab_path, fx->dir, "vocab.json");
    test_path(fx->bpe_merges_path, sizeof fx->bpe_merges_path, fx->dir, "merges.txt");
    test_path(fx->bpe_saved_path, sizeof fx->bpe_saved_path, fx->dir, "bpe.txt");
    static const char vocab[] = "{\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3, "
                                "\"\\u0120ab\": 4, \"<|x|>\": 5}";
    static const char merges[] = "#version: 0.2\na b\n\xc4\xa0 ab\n";
    char json[512];
    int len = snprintf(json, sizeof json,
                       "{\"added_tokens\": [{\"id\": 5, \"content\": \"<|x|>\"}], "
                       "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": "
                       "{\"type\": \"BPE\", \"vocab\": %s, \"merges\": [\"a b\", "
                       "\"\\u0120 ab\"]}}",
                       vocab);
    if (!test_write_bytes(fx->bpe_json_path, json, (size_t)len) ||
        !test_write_bytes(fx->bpe_vocab_path, vocab, sizeof vocab - 1) ||
        !test_write_bytes(fx->bpe_merges_path, merges, sizeof merges - 1))
        return false;
    nctmc_context_params p;
    hooked_params(fx, &p);
    if (nctmc_context_create(&p, &fx->ctx) != NCTMC_OK)
        return false;
    nctmc_model_config_init(&fx->cfg);
    fx->cfg.vocab_size = S;
    fx->cfg.seq_len = L;
    fx->cfg.n_layers = 2;
    fx->cfg.d_model = 16;
    fx->cfg.n_heads = 2;
    fx->cfg.cond_dim = 8;
    fx->cfg.process = NCTMC_PROCESS_MASKED;
    fx->cfg.schedule = NCTMC_SCHEDULE_COSINE;
    for (int i = 0; i < B * L; i++)
        fx->tokens[i] = (i * 3) % (S - 1);
    nctmc_model *m = NULL;
    nctmc_tokenizer *tok = NULL;
    nctmc_trainer *t = NULL;
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = B;
    bool ok = nctmc_model_create(fx->ctx, &fx->cfg, &m) == NCTMC_OK &&
              nctmc_tokenizer_create_chars(fx->ctx, "abcdefgh", 8, &tok) == NCTMC_OK &&
              nctmc_model_set_tokenizer(m, tok) == NCTMC_OK &&
              nctmc_trainer_create(m, &tp, &t) == NCTMC_OK &&
              nctmc_trainer_step(t, fx->tokens, NULL, NULL) == NCTMC_OK &&
              nctmc_trainer_save(t, fx->trainer_path) == NCTMC_OK &&
              nctmc_model_save(m, fx->model_path) == NCTMC_OK &&
              nctmc_tokenizer_save(tok, fx->tokenizer_path) == NCTMC_OK &&
              nctmc_dataset_write(fx->ctx, fx->dataset_path, fx->tokens, B * L, S - 1, L, NULL,
                                  0) == NCTMC_OK;
    nctmc_trainer_free(t);
    nctmc_tokenizer_free(tok);
    nctmc_model_free(m);
    fx->model_bytes = ok ? test_read_bytes(fx->model_path, &fx->model_size) : NULL;
    /* copied: the operations below train and write it, which would turn a
     * mapped model into a copied one in the middle of a walk (the first
     * such copy would count as a leak); op_train_mapped walks that copy */
    nctmc_load_params lp;
    nctmc_load_params_init(&lp);
    lp.mapping = NCTMC_LOAD_COPY;
    return fx->model_bytes &&
           nctmc_model_load_ex(fx->ctx, fx->model_path, &lp, &fx->model) == NCTMC_OK &&
           nctmc_model_read_tensor(fx->model, "output_layer.linear.bias", fx->file_bias, S) ==
               NCTMC_OK &&
           nctmc_model_convert(fx->model, NCTMC_WEIGHT_INT8, &fx->model_int8) == NCTMC_OK;
}

int main(void)
{
    static fixture fx;
    if (!setup(&fx)) {
        fprintf(stderr, "setup failed: %s\n", fx.ctx ? nctmc_context_last_error(fx.ctx) : "");
        return 1;
    }
    struct {
        const char *name;
        op_fn op;
    } ops[] = {
        {"context create", op_context_create},
        {"model create", op_model_create},
        {"model load (memory)", op_load_memory},
        {"model load (path)", op_load_path},
        {"model load (reader)", op_load_reader},
        {"model forward", op_forward},
        {"sampler create + sample", op_sample},
        {"trainer create + step", op_train_step},
        {"mapped load + trainer create", op_train_mapped},
        {"model save", op_save},
        {"trainer create + save", op_trainer_save},
        {"trainer resume", op_resume},
        {"eval", op_eval},
        {"tokenizers", op_tokenizers},
        {"BPE load, encode, save, load", op_bpe},
        {"dataset open", op_dataset},
        {"model convert", op_convert},
        {"sampler create + sample int8", op_sample_int8},
        {"model save (int8)", op_save_int8},
    };
    int64_t sites = 0;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        sites += walk(&fx, ops[k].name, ops[k].op);
    printf("%lld allocation sites walked\n", (long long)sites);

    nctmc_model_free(fx.model_int8);
    nctmc_model_free(fx.model);
    nctmc_context_free(fx.ctx);
    CHECK(fx.hook.live_bytes == 0 && fx.hook.live_blocks == 0,
          "every byte is back at the end (%lld bytes, %lld blocks live)",
          (long long)fx.hook.live_bytes, (long long)fx.hook.live_blocks);
    CHECK(fx.hook.foreign_thread_calls == 0, "the hook is never called from a worker thread (%lld)",
          (long long)fx.hook.foreign_thread_calls);
    CHECK(fx.hook.zero_sizes == 0, "no allocation of size 0 (%lld)",
          (long long)fx.hook.zero_sizes);
    CHECK(fx.hook.bad_alignments == 0, "every alignment a power of two <= 64 (%lld)",
          (long long)fx.hook.bad_alignments);

    /* a hook set by halves is refused */
    nctmc_context_params p;
    hooked_params(&fx, &p);
    p.free_fn = NULL;
    nctmc_context *ctx = (nctmc_context *)(uintptr_t)1;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_ERR_INVALID_ARGUMENT && ctx == NULL,
          "alloc_fn without free_fn is refused");

    free(fx.model_bytes);
    test_remove_dir(fx.dir);
    return test_finish("alloc_failure");
}
