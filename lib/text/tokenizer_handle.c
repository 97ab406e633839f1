/*
 * tokenizer_handle.c — the tokenizer handle's memory and the helpers every
 * codec shares: making, copying and freeing a handle, the error for a token
 * outside the vocabulary, and the rendering of the mask token. The codecs
 * (tokenizer.c, tokenizer_bpe_api.c, tokenizer_image.c) call these; these
 * call no codec.
 */
#include "tokenizer.h"

#include <string.h>

#include "base/checked.h"
#include "tokenizer_bpe.h"

nctmc_tokenizer *tokenizer_new(const nctmc_allocator *alloc, nctmc_tokenizer_kind kind,
                               int32_t vocab)
{
    nctmc_tokenizer *tok = mem_calloc(alloc, 1, sizeof *tok);
    if (tok) {
        tok->kind = kind;
        tok->vocab = vocab;
        if (alloc)
            tok->alloc = *alloc;
    }
    return tok;
}

NCTMC_API void nctmc_tokenizer_free(nctmc_tokenizer *tok)
{
    if (!tok)
        return;
    nctmc_allocator alloc = tok->alloc;
    mem_free(&alloc, tok->alphabet);
    mem_free(&alloc, tok->mask_text);
    bpe_model_free(tok->bpe);
    mem_free(&alloc, tok);
}

nctmc_status tokenizer_clone(const nctmc_allocator *alloc, const nctmc_tokenizer *src,
                             nctmc_tokenizer **out)
{
    nctmc_tokenizer *tok = mem_alloc(alloc, sizeof *tok);
    if (!tok)
        return NCTMC_ERR_OUT_OF_MEMORY;
    *tok = *src;
    tok->last_error[0] = '\0';
    tok->alphabet = NULL;
    tok->mask_text = NULL;
    tok->bpe = NULL;
    tok->alloc = alloc ? *alloc : (nctmc_allocator){NULL, NULL, NULL};
    if (src->bpe && !(tok->bpe = bpe_model_clone(alloc, src->bpe))) {
        nctmc_tokenizer_free(tok);
        return NCTMC_ERR_OUT_OF_MEMORY;
    }
    if (src->alphabet) {
        size_t bytes = sizeof *tok->alphabet * (size_t)src->vocab;
        tok->alphabet = mem_alloc(alloc, bytes);
        if (!tok->alphabet) {
            nctmc_tokenizer_free(tok);
            return NCTMC_ERR_OUT_OF_MEMORY;
        }
        memcpy(tok->alphabet, src->alphabet, bytes);
    }
    if (src->mask_text) {
        tok->mask_text = mem_alloc(alloc, src->mask_len + 1);
        if (!tok->mask_text) {
            nctmc_tokenizer_free(tok);
            return NCTMC_ERR_OUT_OF_MEMORY;
        }
        memcpy(tok->mask_text, src->mask_text, src->mask_len + 1);
    }
    *out = tok;
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_tokenizer_clone(const nctmc_tokenizer *tok, nctmc_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!tok || !out)
        return NCTMC_ERR_INVALID_ARGUMENT;
    return tokenizer_clone(&tok->alloc, tok, out);
}

nctmc_status tokenizer_bad_token(nctmc_tokenizer *tok, size_t i, int32_t token)
{
    if (token == tok->vocab)
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                         "token %zu = %d is outside the vocabulary [0, %d): it is the mask "
                         "token of a masked or mixture model "
                         "(nctmc_tokenizer_set_mask_placeholder() renders it)",
                         i, token, tok->vocab);
    return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT,
                     "token %zu = %d is outside the vocabulary [0, %d)", i, token, tok->vocab);
}

nctmc_status tokenizer_put_mask(nctmc_tokenizer *tok, char *text, size_t *len)
{
    size_t at = *len;
    if (!checked_add(at, tok->mask_len, len))
        return FAIL_INTO(tok, NCTMC_ERR_INVALID_ARGUMENT, "decoded text is too long");
    if (text)
        memcpy(text + at, tok->mask_text, tok->mask_len);
    return NCTMC_OK;
}
