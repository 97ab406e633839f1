/*
 * dataset_writer.c — a token shard written in pieces (nctmc_dataset_writer_*):
 * what `nctmc prepare` needs to turn a corpus larger than memory into one
 * shard. The body goes to the atomic writer's temporary file as it comes,
 * the checksum is updated on the way, and the header, known only at the
 * end, is written last (the same file as nctmc_dataset_write() makes).
 */
#include <stdbool.h>
#include <string.h>

#include "base/abi.h"
#include "base/alloc.h"
#include "core/context.h"
#include "core/ctx_report.h"
#include "dataset_internal.h"

struct nctmc_dataset_writer {
    file_atomic file;
    bool open;          /* the temporary file exists (not committed or aborted) */
    shard_header header;
    uint64_t n_tokens;
    char last_error[NCTMC_ERROR_SIZE];
    nctmc_allocator alloc;
};

NCTMC_API nctmc_status nctmc_dataset_writer_create(nctmc_context *ctx, const char *path,
                                                   int32_t vocab_size, int32_t seq_len,
                                                   nctmc_dataset_writer **out)
{
    if (out)
        *out = NULL;
    if (!path || !path[0] || !out)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_writer_create: path and out must not be NULL");
    if (vocab_size < 1 || seq_len < 0)
        return ctx_report_fail(ctx, NCTMC_ERR_INVALID_ARGUMENT,
                               "nctmc_dataset_writer_create: vocab_size = %d must be >= 1 "
                               "and seq_len = %d >= 0",
                               vocab_size, seq_len);
    const nctmc_allocator *alloc = ctx ? &ctx->alloc : NULL;
    nctmc_dataset_writer *w = mem_calloc(alloc, 1, sizeof *w);
    if (!w)
        return ctx_report_fail(ctx, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    if (alloc)
        w->alloc = *alloc;
    shard_header h = {SHARD_VERSION, shard_token_width((uint32_t)vocab_size),
                      (uint32_t)vocab_size, (uint32_t)seq_len, 0, 0, 0, 0};
    w->header = h;
    char err[NCTMC_ERROR_SIZE];
    uint8_t zeros[SHARD_HEADER_SIZE] = {0};
    /* the header's place, filled in at the commit */
    nctmc_status st = file_atomic_begin(&w->file, alloc, path, err, sizeof err);
    if (st == NCTMC_OK) {
        w->open = true;
        st = file_atomic_write(&w->file, zeros, sizeof zeros, err, sizeof err);
    }
    if (st != NCTMC_OK) {
        nctmc_dataset_writer_free(w);
        return ctx_report_fail(ctx, st, "nctmc_dataset_writer_create: %s", err);
    }
    *out = w;
    ctx_report_ok(ctx);
    return NCTMC_OK;
}

NCTMC_API nctmc_status nctmc_dataset_writer_append(nctmc_dataset_writer *w,
                                                   const int32_t *tokens, int64_t n)
{
    if (!w)
        return NCTMC_ERR_INVALID_ARGUMENT;
    if (!w->open)
        return FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_dataset_writer_append: the writer was committed or failed");
    if (n < 0 || (n > 0 && !tokens))
        return FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_dataset_writer_append: n = %lld must be >= 0, tokens not NULL",
                         (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= w->header.vocab_size)
            return FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                             "nctmc_dataset_writer_append: token %lld = %d is outside [0, %u)",
                             (long long)i, tokens[i], w->header.vocab_size);
    char err[NCTMC_ERROR_SIZE];
    nctmc_status st = shard_write_values(&w->file, tokens, n, w->header.token_bytes,
                                         &w->header.crc, err, sizeof err);
    if (st != NCTMC_OK) {
        /* the file may hold part of this call: only a fresh writer is safe */
        file_atomic_abort(&w->file);
        w->open = false;
        return FAIL_INTO(w, st, "nctmc_dataset_writer_append: %s", err);
    }
    w->n_tokens += (uint64_t)n;
    w->last_error[0] = '\0';
    return NCTMC_OK;
}

static void fill_info(const nctmc_dataset_writer *w, nctmc_dataset_info *info)
{
    nctmc_dataset_info full;
    nctmc_dataset_info_init(&full);
    full.vocab_size = (int32_t)w->header.vocab_size;
    full.seq_len = (int32_t)w->header.seq_len;
    full.n_tokens = (int64_t)w->n_tokens;
    full.n_sequences =
        w->header.seq_len > 0 ? (int64_t)(w->n_tokens / w->header.seq_len) : 0;
    full.checksum = w->header.crc;
    abi_write(info, &full, &abi_dataset_info);
}

NCTMC_API nctmc_status nctmc_dataset_writer_commit(nctmc_dataset_writer *w,
                                                   nctmc_dataset_info *info)
{
    if (!w)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_status st = NCTMC_OK;
    if (info)
        st = abi_check_output(info, &abi_dataset_info, w->last_error, sizeof w->last_error);
    if (st != NCTMC_OK)
        return st;
    if (!w->open)
        return FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                         "nctmc_dataset_writer_commit: the writer was committed or failed");
    if (w->n_tokens == 0 || (w->header.seq_len > 0 && w->n_tokens % w->header.seq_len != 0))
        st = FAIL_INTO(w, NCTMC_ERR_INVALID_ARGUMENT,
                       "nctmc_dataset_writer_commit: %llu tokens are not a shard (at least one "
                       "token, whole sequences of %u)",
                       (unsigned long long)w->n_tokens, w->header.seq_len);
    char err[NCTMC_ERROR_SIZE];
    uint8_t head[SHARD_HEADER_SIZE];
    w->header.n_tokens = w->n_tokens;
    shard_encode_header(&w->header, head);
    if (st == NCTMC_OK) {
        st = file_atomic_write_at(&w->file, 0, head, sizeof head, err, sizeof err);
        if (st == NCTMC_OK)
            st = file_atomic_commit(&w->file, err, sizeof err);
        if (st != NCTMC_OK)
            FAIL_INTO(w, st, "nctmc_dataset_writer_commit: %s", err);
    }
    if (st != NCTMC_OK)
        file_atomic_abort(&w->file);  /* nothing after a commit, which releases it */
    w->open = false;
    if (st == NCTMC_OK && info)
        fill_info(w, info);
    if (st == NCTMC_OK)
        w->last_error[0] = '\0';
    return st;
}

NCTMC_API void nctmc_dataset_writer_free(nctmc_dataset_writer *w)
{
    if (!w)
        return;
    if (w->open)
        file_atomic_abort(&w->file);
    nctmc_allocator alloc = w->alloc;
    mem_free(&alloc, w);
}

NCTMC_API const char *nctmc_dataset_writer_last_error(const nctmc_dataset_writer *w)
{
    return w ? w->last_error : "";
}
