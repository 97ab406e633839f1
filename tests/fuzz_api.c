/*
 * fuzz_api.c — drives the public API with arbitrary bytes: a model
 * configuration, forward parameters (sizes, tokens, times, labels, NULLs,
 * wrong struct sizes) and tensor reads/writes, all decoded from the input.
 * Whatever the bytes, every call must return a status (with a message when it
 * is an error) and never crash, leak or touch memory it does not own; a
 * successful forward must produce normalised jump distributions.
 *
 * Built two ways (tests/meson.build):
 *  - as a libFuzzer target with clang -fsanitize=fuzzer (FUZZ_LIBFUZZER),
 *  - as an ordinary test whose main() feeds it a fixed number of inputs from
 *    a seeded generator, so CI exercises it under the sanitizers.
 * Sizes decode to small values except for deliberate bad ones (0, negative,
 * past a limit), so one input never asks for gigabytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"

typedef struct byte_reader {
    const uint8_t *data;
    size_t size;
    size_t at;
} byte_reader;

static uint32_t next_u32(byte_reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = (v << 8) | (r->at < r->size ? r->data[r->at++] : 0u);
    return v;
}

static uint8_t next_u8(byte_reader *r)
{
    return r->at < r->size ? r->data[r->at++] : 0u;
}

/* Mostly a value in [lo, hi]; sometimes a value that must be rejected. */
static int32_t next_size(byte_reader *r, int32_t lo, int32_t hi)
{
    static const int32_t bad[] = {0, -1, -7, INT32_MIN, INT32_MAX, 1 << 30};
    uint8_t pick = next_u8(r);
    if (pick < 16)
        return bad[pick % (sizeof bad / sizeof bad[0])];
    return lo + (int32_t)(next_u32(r) % (uint32_t)(hi - lo + 1));
}

static float next_time(byte_reader *r)
{
    static const float odd[] = {0.0f, 1.0f, -0.5f, 2.0f, NAN, INFINITY, 1e-30f, 0.9999999f};
    uint8_t pick = next_u8(r);
    if (pick < 8)
        return odd[pick];
    return ((float)(next_u32(r) % 1000000u) + 0.5f) / 1000001.0f;
}

static void decode_config(byte_reader *r, nctmc_model_config *c)
{
    nctmc_model_config_init(c);
    c->vocab_size = next_size(r, 2, 40);
    c->vocab_pad_multiple = next_size(r, 0, 9);
    c->seq_len = next_size(r, 1, 12);
    c->n_layers = next_size(r, 1, 2);
    c->n_heads = next_size(r, 1, 3);
    c->d_model = c->n_heads > 0 && c->n_heads < 8 ? c->n_heads * 2 * (1 + next_u8(r) % 4)
                                                 : next_size(r, 2, 16);
    c->cond_dim = next_size(r, 1, 8);
    c->n_classes = next_size(r, 0, 3);
    c->process = (nctmc_process)(next_u8(r) % 4);
    c->schedule = (nctmc_schedule)(next_u8(r) % 4);
    c->mixture_uniform = (float)(next_u8(r) % 12) / 10.0f;
    c->schedule_eps = (float)(next_u8(r) % 12) / 10.0f;
    c->seed = next_u32(r);
    /* any struct_size the caller's struct really has room for (a size
     * larger than the struct is a lie the library cannot detect) */
    if (next_u8(r) == 0)
        c->struct_size = next_u8(r) % (sizeof *c + 1);
}

static int check_message(const char *msg)
{
    return msg && msg[0] != '\0';
}

typedef struct forward_buffers {
    int32_t *tokens;
    float *times;
    int32_t *labels;
    float *log_rate;
    float *logp;
} forward_buffers;

static void free_buffers(forward_buffers *b)
{
    free(b->tokens);
    free(b->times);
    free(b->labels);
    free(b->log_rate);
    free(b->logp);
}

/* Buffers sized for what the parameters claim when that is small, so a
 * forward that passes validation never reads or writes past them. */
static void decode_forward(byte_reader *r, const nctmc_model_config *c,
                           nctmc_forward_params *p, forward_buffers *b)
{
    nctmc_forward_params_init(p);
    memset(b, 0, sizeof *b);
    p->batch = next_size(r, 1, 3);
    p->length = next_size(r, 1, c->seq_len + 1);
    int32_t B = p->batch > 0 && p->batch <= 3 ? p->batch : 1;
    int32_t L = p->length > 0 && p->length <= 13 ? p->length : 1;
    int32_t S = c->vocab_size;
    b->tokens = malloc(sizeof(int32_t) * (size_t)(B * L));
    b->times = malloc(sizeof(float) * (size_t)B);
    b->labels = malloc(sizeof(int32_t) * (size_t)B);
    b->log_rate = malloc(sizeof(float) * (size_t)(B * L));
    b->logp = malloc(sizeof(float) * (size_t)(B * L * S));
    for (int32_t i = 0; i < B * L; i++)
        b->tokens[i] = (int32_t)(next_u32(r) % (uint32_t)S);
    if (next_u8(r) < 24) /* one token out of range */
        b->tokens[next_u8(r) % (B * L)] = (int32_t)next_u32(r) | (next_u8(r) & 1 ? INT32_MIN : S);
    int32_t n_labels = c->n_classes > 0 ? c->n_classes + 1 : 1;
    for (int32_t i = 0; i < B; i++) {
        b->times[i] = next_time(r);
        b->labels[i] = (int32_t)(next_u8(r) % (uint32_t)n_labels);
    }
    if (next_u8(r) < 24)
        b->labels[next_u8(r) % B] = (int32_t)(next_u8(r) % 8) - 3;
    /* usually a well-formed call; sometimes NULLs and wrong choices */
    uint8_t present = next_u8(r) < 64 ? next_u8(r) : (c->n_classes > 0 ? 4 : 0);
    p->tokens = present & 1 ? NULL : b->tokens;
    p->times = present & 2 ? NULL : b->times;
    p->labels = present & 4 ? b->labels : NULL;
    p->log_rate = present & 8 ? NULL : b->log_rate;
    p->jump_logprobs = present & 16 ? NULL : b->logp;
    if (present == 255)
        p->struct_size = 0;
    if (p->batch > 3 || p->batch < 0 || p->length > 13)
        p->batch = p->batch > 0 ? 0 : p->batch; /* never trust huge sizes with small buffers */
}

static int rows_normalised(const nctmc_forward_params *p, int32_t S)
{
    if (!p->jump_logprobs)
        return 1;
    for (int32_t r = 0; r < p->batch * p->length; r++) {
        double sum = 0.0;
        for (int32_t j = 0; j < S; j++)
            sum += exp((double)p->jump_logprobs[r * S + j]);
        if (!(fabs(sum - 1.0) < 1e-4))
            return 0;
    }
    return 1;
}

static void fuzz_tensors(byte_reader *r, nctmc_model *m)
{
    int32_t n = nctmc_model_n_tensors(m);
    int32_t k = (int32_t)(next_u32(r) % (uint32_t)(n + 2)) - 1;
    nctmc_tensor_info info = {.struct_size = sizeof info};
    if (nctmc_model_tensor_info(m, k, &info) != NCTMC_OK) {
        if (!check_message(nctmc_model_last_error(m)))
            abort();
        return;
    }
    int64_t claimed = info.n_elements + (int64_t)(next_u8(r) % 3) - 1;
    float *buf = calloc((size_t)info.n_elements + 1, sizeof(float));
    if (next_u8(r) < 32)
        buf[0] = NAN;
    nctmc_status st = nctmc_model_write_tensor(m, info.name, buf, claimed);
    if ((st == NCTMC_OK) != (claimed == info.n_elements && !isnan(buf[0])))
        abort();
    st = nctmc_model_read_tensor(m, info.name, buf, claimed);
    if ((st == NCTMC_OK) != (claimed == info.n_elements))
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* How far inputs got, reported by the seeded driver (so a change that makes
 * every input fail early shows). */
static struct {
    long models, forwards_ok, forwards_rejected;
} reached;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    byte_reader r = {data, size, 0};
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1 + next_u8(&r) % 2;
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        abort();
    nctmc_model_config cfg;
    decode_config(&r, &cfg);
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_create(ctx, &cfg, &m);
    if (st != NCTMC_OK) {
        if (m || !check_message(nctmc_context_last_error(ctx)))
            abort();
        nctmc_context_free(ctx);
        return 0;
    }
    reached.models++;
    fuzz_tensors(&r, m);
    nctmc_forward_params p;
    forward_buffers b;
    decode_forward(&r, &cfg, &p, &b);
    st = nctmc_model_forward(m, &p);
    if (st != NCTMC_OK && !check_message(nctmc_model_last_error(m)))
        abort();
    if (st == NCTMC_OK && !rows_normalised(&p, cfg.vocab_size))
        abort();
    if (st == NCTMC_OK)
        reached.forwards_ok++;
    else
        reached.forwards_rejected++;
    free_buffers(&b);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return 0;
}

#ifndef FUZZ_LIBFUZZER
/* Seeded random inputs: a fixed corpus of 3000 byte strings. */
int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 3000;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    uint8_t buf[512];
    for (int run = 0; run < runs; run++) {
        size_t n = (size_t)(run % 512);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[i] = (uint8_t)(s >> 24);
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("%d inputs: %ld models created, %ld forwards ran, %ld rejected\n", runs,
           reached.models, reached.forwards_ok, reached.forwards_rejected);
    /* the decoder must reach the forward call often in both outcomes */
    int ok = reached.forwards_ok > runs / 20 && reached.forwards_rejected > runs / 20;
    /* every input that returned is a pass; the reach requirement is one more */
    printf("fuzz_api: %d passed, %d failed\n", runs + ok, !ok);
    return ok ? 0 : 1;
}
#endif
