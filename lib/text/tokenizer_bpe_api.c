/*
 * tokenizer_bpe_api.c — the BPE kind of nctmc_tokenizer: its constructors
 * from Hugging Face and GPT-2 files, vocabulary padding, and the codec the
 * encode / decode buffer protocol calls.
 */
#include <string.h>

#include "base/checked.h"
#include "core/ctx_report.h"
#include "tokenizer.h"
#include "tokenizer_bpe_io.h"

/* Wraps a built model in a handle (taking it over). */
static nctmc_status wrap(nctmc_context *ctx, bpe_model *m, nctmc_tokenizer **out)
{
    nctmc_tokenizer *tok =
        tokenizer_new(ctx ? &ctx->alloc : NULL, NCTMC_TOKENIZER_BPE, m->n_tokens);
    if (!tok) {
        bpe_model_free(m);
        return ctx_report_fail(ctx, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    tok->bpe = m;
    *out = tok;
    ctx_report_ok(ctx);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_tokenizer_load_hf_json(nctmc_context *ctx, const char *path,
                                                    nctmc_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_tokenizer_load_hf_json: path and out must not be NULL");
    char err[NCTMC_ERROR_SIZE];
    bpe_model *m = NULL;
    nctmc_status st = bpe_load_hf_json(ctx ? &ctx->alloc : NULL, path, &m, err, sizeof err);
    if (st != NCTMC_OK)
        return ctx_report_fail(ctx, st, "tokenizer.json \"%.300s\": %s", path, err);
    return wrap(ctx, m, out);
}

NCTMC_API nctmc_status nctmc_tokenizer_load_gpt2(nctmc_context *ctx, const char *vocab_json_path,
                                                 const char *merges_txt_path,
                                                 nctmc_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!vocab_json_path || !merges_txt_path || !out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_tokenizer_load_gpt2: the paths and out must not be "
                               "NULL");
    char err[NCTMC_ERROR_SIZE];
    bpe_model *m = NULL;
    nctmc_status st = bpe_load_gpt2(ctx ? &ctx->alloc : NULL, vocab_json_path,
                                    merges_txt_path, &m, err, sizeof err);
    if (st != NCTMC_OK)
        return ctx_report_fail(ctx, st, "GPT-2 BPE files: %s", err);
    return wrap(ctx, m, out);
}

NCTMC_API nctmc_status nctmc_tokenizer_pad_vocab(nctmc_tokenizer *tok, int32_t vocab_size)
{
    if (!tok)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (tok->kind != NCTMC_TOKENIZER_BPE)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_pad_vocab: only a BPE tokenizer is padded");
    if (vocab_size < tok->bpe->n_tokens || vocab_size > BPE_MAX_TOKENS)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_tokenizer_pad_vocab: %d is not in [%d, %d] (the tokenizer "
                         "has %d tokens)",
                         vocab_size, tok->bpe->n_tokens, BPE_MAX_TOKENS, tok->bpe->n_tokens);
    tok->vocab = vocab_size;
    tok->last_error[0] = '\0';
    return NCTMC_OK;
}

nctmc_status tokenizer_encode_bpe(nctmc_tokenizer *tok, const uint8_t *text, size_t n,
                                  int32_t *tokens, size_t *n_tokens)
{
    return bpe_encode(tok->bpe, text, n, tokens, NULL, n_tokens, tok->last_error,
                      sizeof tok->last_error);
}

nctmc_status tokenizer_decode_bpe(nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                                  char *text, size_t *n_bytes)
{
    const bpe_model *m = tok->bpe;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tokens[i];
        if (tokenizer_renders_mask(tok, id)) {
            nctmc_status st = tokenizer_put_mask(tok, text, &len);
            if (st != NCTMC_OK)
                return st;
            continue;
        }
        if (id < 0 || id >= tok->vocab)
            return tokenizer_bad_token(tok, i, id);
        if (id >= m->n_tokens)
            continue; /* padding: no text */
        size_t piece;
        const uint8_t *bytes = bpe_token_bytes(m, id, &piece);
        if (!checked_add(len, piece, &len))
            return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "decoded text is too long");
        if (text)
            memcpy(text + len - piece, bytes, piece);
    }
    *n_bytes = len;
    return NCTMC_OK;
}
