/*
 * infill.c — nctmc_infill(): regenerates byte ranges of a text and keeps
 * every other byte. The text outside the ranges is cut into fixed segments,
 * each encoded alone (so a range boundary may fall anywhere a tokenizer can
 * decode back exactly: mid-word, and mid-character for bytes and BPE), the
 * segments' tokens are clamped, the ranges' slots sampled, and the pieces
 * decoded one after another so that each range's place in the output is
 * known.
 */
#include <string.h>

#include "base/abi.h"
#include "base/alloc.h"
#include "core/context.h"
#include "sampler.h"
#include "text/tokenizer.h"
#include "base/utf8.h"

NCTMC_API nctmc_status nctmc_infill_params_init_sized(nctmc_infill_params *params, size_t size)
{
    return abi_init(params, size, NULL, &abi_infill_params);
}

/* One call's state. Pieces alternate: piece 2k is fixed segment k, piece
 * 2k + 1 the slots of range k; piece_end[i] is where piece i ends in the
 * token sequence. */
typedef struct infill_job {
    nctmc_sampler *s;
    nctmc_tokenizer *tok;        /* the call's own copy */
    const uint8_t *text;
    size_t text_len;
    const nctmc_text_range *ranges;
    int32_t n_ranges;
    nctmc_infill_params params;  /* the caller's, read into this build's struct */
    nctmc_sample_params sample;
    int32_t *slots;              /* [n_ranges] */
    size_t *piece_end;           /* [2 n_ranges + 1] */
    int32_t *fixed;              /* [length] the clamped tokens (0 under slots) */
    uint8_t *mask;               /* [length] */
    int32_t *tokens;             /* [length] the sample */
    size_t length;
    char *err;
    size_t err_size;
    bool sampler_failed;         /* nctmc_sample() failed and logged it */
} infill_job;

static const char *const FN = "nctmc_infill";

/* The bytes of fixed segment k: from the end of range k - 1 (or 0) to the
 * start of range k (or the end of the text). */
static void segment_bounds(const infill_job *job, int32_t k, size_t *start, size_t *end)
{
    *start = k == 0 ? 0 : job->ranges[k - 1].end;
    *end = k == job->n_ranges ? job->text_len : job->ranges[k].start;
}

static nctmc_status check_ranges(const infill_job *job)
{
    for (int32_t k = 0; k < job->n_ranges; k++) {
        const nctmc_text_range *r = &job->ranges[k];
        if (r->start > r->end || r->end > job->text_len)
            return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s: range %d [%zu, %zu) is not within the text of %zu bytes",
                               FN, (int)k, r->start, r->end, job->text_len);
        if (k > 0 && r->start < job->ranges[k - 1].end)
            return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s: range %d [%zu, %zu) %s range %d [%zu, %zu); ranges must be "
                               "sorted and must not overlap",
                               FN, (int)k, r->start, r->end,
                               r->start < job->ranges[k - 1].start ? "starts before" : "overlaps",
                               (int)(k - 1), job->ranges[k - 1].start, job->ranges[k - 1].end);
    }
    return NCTMC_OK;
}

/* The sampling settings: the caller's, with the fields this call owns left
 * at their defaults. */
static nctmc_status read_sample_params(infill_job *job)
{
    nctmc_sample_params_init(&job->sample);
    if (job->params.sample == NULL)
        return NCTMC_OK;
    nctmc_status st = abi_read(job->params.sample, &job->sample, sizeof job->sample,
                               &abi_sample_params, job->err, job->err_size);
    if (st != NCTMC_OK)
        return st;
    const nctmc_sample_params *p = &job->sample;
    if ((p->batch != 0 && p->batch != 1) || p->length != 0 || p->fixed_tokens != NULL ||
        p->fixed_mask != NULL || p->tokens_out != NULL)
        return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "%s: params->sample's batch, length, fixed_tokens, fixed_mask and "
                           "tokens_out are set by the call: leave them at their defaults",
                           FN);
    return NCTMC_OK;
}

/* A character tokenizer's fixed segment: valid UTF-8 of its alphabet,
 * checked here so that the message names the offset in the whole text. */
static nctmc_status check_chars(const infill_job *job, size_t start, size_t end)
{
    for (size_t i = start; i < end;) {
        uint32_t cp = 0;
        size_t len = utf8_decode(job->text + i, end - i, &cp);
        if (len == 0)
            return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s: the fixed text has invalid UTF-8 at byte %zu (a character "
                               "tokenizer cannot keep part of a character: does a range "
                               "start or end inside one?)",
                               FN, i);
        if (tokenizer_char_index(job->tok, cp) < 0)
            return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s: the fixed text's character U+%04X at byte %zu is not in the "
                               "tokenizer's alphabet",
                               FN, (unsigned)cp, i);
        i += len;
    }
    return NCTMC_OK;
}

/* Tokens of text[start .. end) encoded alone; tokens NULL only counts. */
static nctmc_status encode_piece(const infill_job *job, size_t start, size_t end,
                                 int32_t *tokens, size_t *n)
{
    if (start == end) {
        *n = 0;
        return NCTMC_OK;
    }
    /* every text kind gives at most one token per byte */
    nctmc_status st = nctmc_tokenizer_encode(job->tok, (const char *)job->text + start,
                                             end - start, tokens, tokens ? end - start : 0, n);
    if (st != NCTMC_OK)
        return fail_format(job->err, job->err_size, st,
                           "%s: cannot encode the text at bytes [%zu, %zu): %s", FN, start, end,
                           nctmc_tokenizer_last_error(job->tok));
    return NCTMC_OK;
}

/* The auto slot count of range k: its original text's tokens, at least 1. */
static nctmc_status auto_slots(const infill_job *job, int32_t k, size_t *n)
{
    const nctmc_text_range *r = &job->ranges[k];
    *n = 0;
    if (job->tok->kind == NCTMC_TOKENIZER_CHARS) {
        for (size_t i = r->start; i < r->end; i++)
            *n += !utf8_is_continuation(job->text[i]);
    } else {
        nctmc_status st = encode_piece(job, r->start, r->end, NULL, n);
        if (st != NCTMC_OK)
            return st;
    }
    if (*n == 0)
        *n = 1;
    return NCTMC_OK;
}

/* Counts every piece (checking the fixed segments), fills slots and
 * piece_end, and checks that the sequence fits the sampler. */
static nctmc_status plan(infill_job *job)
{
    size_t at = 0;
    bool clamped = false;
    for (int32_t k = 0; k <= job->n_ranges; k++) {
        size_t start, end, n = 0;
        segment_bounds(job, k, &start, &end);
        nctmc_status st = job->tok->kind == NCTMC_TOKENIZER_CHARS
                              ? check_chars(job, start, end)
                              : NCTMC_OK;
        if (st == NCTMC_OK)
            st = encode_piece(job, start, end, NULL, &n);
        if (st != NCTMC_OK)
            return st;
        at += n;
        job->piece_end[2 * k] = at;
        if (k == job->n_ranges)
            break;
        int32_t want = job->params.range_tokens ? job->params.range_tokens[k]
                                                : NCTMC_INFILL_AUTO_TOKENS;
        if (want < 0 && want != NCTMC_INFILL_AUTO_TOKENS)
            return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                               "%s: range_tokens[%d] = %d; give a count >= 0 or "
                               "NCTMC_INFILL_AUTO_TOKENS",
                               FN, (int)k, (int)want);
        n = (size_t)want;
        if (want == NCTMC_INFILL_AUTO_TOKENS && (st = auto_slots(job, k, &n)) != NCTMC_OK)
            return st;
        if (n > (size_t)job->s->max_length) {
            n = (size_t)job->s->max_length + 1; /* too many anyway; keeps the sum small */
            clamped = true;
        }
        job->slots[k] = (int32_t)n;
        at += n;
        job->piece_end[2 * k + 1] = at;
    }
    job->length = at;
    if (at < 1 || at > (size_t)job->s->max_length)
        return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "%s: the text and its ranges take %s%zu tokens; the sampler allows "
                           "1 .. %d (its max_length; the model's seq_len at most)",
                           FN, clamped ? "more than " : "", clamped ? at - 1 : at,
                           (int)job->s->max_length);
    return NCTMC_OK;
}

/* Writes the fixed tokens and the mask (calloc left the slots free, token 0). */
static nctmc_status lay_out(infill_job *job)
{
    for (int32_t k = 0; k <= job->n_ranges; k++) {
        size_t start, end, n = 0;
        segment_bounds(job, k, &start, &end);
        size_t first = k == 0 ? 0 : job->piece_end[2 * k - 1];
        nctmc_status st = encode_piece(job, start, end, job->fixed + first, &n);
        if (st != NCTMC_OK)
            return st;
        memset(job->mask + first, 1, n);
    }
    return NCTMC_OK;
}

static nctmc_status run_sample(infill_job *job)
{
    nctmc_sample_params p = job->sample;
    p.batch = 1;
    p.length = (int32_t)job->length;
    p.fixed_tokens = job->fixed;
    p.fixed_mask = job->mask;
    p.tokens_out = job->tokens;
    nctmc_status st = nctmc_sample(job->s, &p);
    /* the sampler stored (and logged) its own message in job->err */
    job->sampler_failed = st != NCTMC_OK;
    return st;
}

/* Decodes piece by piece into out (NULL: only measures; otherwise out has
 * room for the text and its NUL), recording where each range landed; *len
 * receives the total. */
static nctmc_status decode(infill_job *job, char *out, size_t out_cap, size_t *len,
                           nctmc_text_range *where)
{
    size_t at = 0, first = 0;
    for (int32_t i = 0; i <= 2 * job->n_ranges; i++) {
        size_t n_bytes = 0, end = job->piece_end[i];
        nctmc_status st =
            nctmc_tokenizer_decode(job->tok, job->tokens + first, end - first,
                                   out ? out + at : NULL, out ? out_cap - at : 0, &n_bytes);
        if (st != NCTMC_OK)
            return fail_format(job->err, job->err_size, st, "%s: cannot decode the result: %s",
                               FN, nctmc_tokenizer_last_error(job->tok));
        if (i % 2 == 1)
            where[i / 2] = (nctmc_text_range){at, at + n_bytes};
        at += n_bytes;
        first = end;
    }
    *len = at;
    return NCTMC_OK;
}

/* Measures the text, then writes it when out has room (a too small
 * buffer is left untouched). */
static nctmc_status finish(infill_job *job, char *out, size_t out_cap, size_t *out_len)
{
    nctmc_text_range *where =
        mem_calloc(&job->tok->alloc, (size_t)job->n_ranges, sizeof *where);
    if (where == NULL)
        return fail_format(job->err, job->err_size, NCTMC_ERR_OUT_OF_MEMORY,
                           "%s: out of memory", FN);
    size_t len = 0;
    nctmc_status st = decode(job, NULL, 0, &len, where);
    bool measured = st == NCTMC_OK;
    if (st == NCTMC_OK && out != NULL && len >= out_cap)
        st = fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                         "%s: out_cap %zu is too small for the %zu bytes of the new text and "
                         "its NUL",
                         FN, out_cap, len);
    else if (st == NCTMC_OK && out != NULL)
        st = decode(job, out, out_cap, &len, where);
    if (measured) {
        *out_len = len;
        if (job->params.ranges_out != NULL)
            memcpy(job->params.ranges_out, where, (size_t)job->n_ranges * sizeof *where);
    }
    mem_free(&job->tok->alloc, where);
    return st;
}

/* The call's copy of the tokenizer, checked against the model; masked
 * positions left at the end decode to nothing unless tok renders them. */
static nctmc_status take_tokenizer(infill_job *job, const nctmc_tokenizer *tok)
{
    const nctmc_model *m = job->s->model;
    if (tok == NULL)
        tok = nctmc_model_get_tokenizer(m);
    if (tok == NULL)
        return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "%s: the model has no tokenizer; pass one", FN);
    if (tok->kind == NCTMC_TOKENIZER_IMAGE)
        return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "%s: an image tokenizer does not encode text", FN);
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(m, &cfg);
    char why[NCTMC_ERROR_SIZE];
    nctmc_status st =
        tokenizer_check_model(tok, &cfg, NCTMC_ERR_INVALID_ARGUMENT, why, sizeof why);
    if (st != NCTMC_OK)
        return fail_format(job->err, job->err_size, st, "%s: the tokenizer does not fit the "
                           "model: %s", FN, why);
    st = tokenizer_clone(&job->s->ctx->alloc, tok, &job->tok);
    if (st == NCTMC_OK && job->tok->mask_text == NULL)
        st = nctmc_tokenizer_set_mask_placeholder(job->tok, "");
    if (st == NCTMC_ERR_OUT_OF_MEMORY)
        return fail_format(job->err, job->err_size, st, "%s: out of memory", FN);
    return st;
}

static nctmc_status check_args(const infill_job *job, const char *out, size_t out_cap,
                               const size_t *out_len)
{
    const char *bad = job->text == NULL && job->text_len > 0 ? "text is NULL"
                      : job->ranges == NULL                  ? "ranges is NULL"
                      : job->n_ranges < 1                    ? "n_ranges is below 1"
                      : out_len == NULL                      ? "out_len is NULL"
                      : out == NULL && out_cap > 0           ? "out is NULL but out_cap is not 0"
                                                             : NULL;
    if (bad != NULL)
        return fail_format(job->err, job->err_size, NCTMC_ERR_INVALID_ARGUMENT, "%s: %s", FN,
                           bad);
    return NCTMC_OK;
}

static nctmc_status alloc_job(infill_job *job)
{
    const nctmc_allocator *a = &job->tok->alloc;
    size_t n = (size_t)job->n_ranges;
    job->slots = mem_calloc(a, n, sizeof *job->slots);
    job->piece_end = mem_calloc(a, 2 * n + 1, sizeof *job->piece_end);
    if (job->slots == NULL || job->piece_end == NULL)
        return fail_format(job->err, job->err_size, NCTMC_ERR_OUT_OF_MEMORY, "%s: out of memory",
                           FN);
    return NCTMC_OK;
}

static nctmc_status alloc_sequence(infill_job *job)
{
    const nctmc_allocator *a = &job->tok->alloc;
    job->fixed = mem_calloc(a, job->length, sizeof *job->fixed);
    job->tokens = mem_calloc(a, job->length, sizeof *job->tokens);
    job->mask = mem_calloc(a, job->length, 1);
    if (job->fixed == NULL || job->tokens == NULL || job->mask == NULL)
        return fail_format(job->err, job->err_size, NCTMC_ERR_OUT_OF_MEMORY, "%s: out of memory",
                           FN);
    return NCTMC_OK;
}

static void free_job(infill_job *job)
{
    if (job->tok == NULL)
        return;
    const nctmc_allocator *a = &job->tok->alloc;
    mem_free(a, job->slots);
    mem_free(a, job->piece_end);
    mem_free(a, job->fixed);
    mem_free(a, job->tokens);
    mem_free(a, job->mask);
    nctmc_tokenizer_free(job->tok);
}

static nctmc_status infill(infill_job *job, const nctmc_tokenizer *tok,
                           const nctmc_infill_params *params, char *out, size_t out_cap,
                           size_t *out_len)
{
    nctmc_status st = check_args(job, out, out_cap, out_len);
    nctmc_infill_params_init(&job->params);
    if (st == NCTMC_OK && params != NULL)
        st = abi_read(params, &job->params, sizeof job->params, &abi_infill_params, job->err,
                      job->err_size);
    if (st == NCTMC_OK)
        st = read_sample_params(job);
    if (st == NCTMC_OK)
        st = check_ranges(job);
    if (st == NCTMC_OK)
        st = take_tokenizer(job, tok);
    if (st == NCTMC_OK)
        st = alloc_job(job);
    if (st == NCTMC_OK)
        st = plan(job);
    if (st == NCTMC_OK)
        st = alloc_sequence(job);
    if (st == NCTMC_OK)
        st = lay_out(job);
    if (st == NCTMC_OK)
        st = run_sample(job);
    if (st == NCTMC_OK)
        st = finish(job, out, out_cap, out_len);
    return st;
}

NCTMC_API nctmc_status nctmc_infill(nctmc_sampler *sampler, const nctmc_tokenizer *tok,
                                    const char *text, size_t text_len,
                                    const nctmc_text_range *ranges, int32_t n_ranges,
                                    const nctmc_infill_params *params, char *out,
                                    size_t out_cap, size_t *out_len)
{
    if (sampler == NULL)
        return NCTMC_ERR_INVALID_ARGUMENT;
    infill_job job;
    memset(&job, 0, sizeof job);
    job.s = sampler;
    job.text = (const uint8_t *)text;
    job.text_len = text_len;
    job.ranges = ranges;
    job.n_ranges = n_ranges;
    job.err = sampler->last_error;
    job.err_size = sizeof sampler->last_error;
    nctmc_status st = infill(&job, tok, params, out, out_cap, out_len);
    free_job(&job);
    if (st == NCTMC_OK)
        sampler->last_error[0] = '\0';
    else if (!job.sampler_failed)
        ctx_log(sampler->ctx, NCTMC_LOG_ERROR, "%s", sampler->last_error);
    return st;
}
