/*
 * prepare_stream.c — `nctmc prepare` on text (prepare_stream.h): list the
 * inputs, build or load the tokenizer (the chars tokenizer's alphabet in a
 * first streamed pass), then stream the corpus through the chunk pool into
 * the training and validation shards, and record it all in the manifest.
 *
 * Memory: n_threads + 2 chunks of chunk_bytes each with their tokens, the
 * reader's buffers and a fixed reserve — chosen from --memory-mb, whatever
 * the corpus size (docs/cli.md says how).
 */
#include "prepare_stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk_pool.h"
#include "cli.h"
#include "cli_platform.h"
#include "corpus.h"
#include "manifest.h"
#include "progress.h"
#include "staged_dir.h"

#define MIB ((int64_t)1 << 20)
/* Memory kept out of the chunk budget: the program, the C library's heap,
 * tokenizer clones, the reader's block and segment, the writers. */
#define RESERVE_MIB 32
/* A slot costs this many times its text: the text, its segment records
 * (1/2), its tokens (4 + separators) and their counts (1/8), rounded up. */
#define SLOT_FACTOR 7
#define MAX_SEPARATOR 16
#define MAX_THREADS 256

/* ---- the split ------------------------------------------------------------- */

bool prepare_goes_to_validation(int64_t i, double fraction)
{
    return floor((double)(i + 1) * fraction + 1e-9) > floor((double)i * fraction + 1e-9);
}

/* A separator follows a document's end, and also a segment whose
 * continuation went to the other split: a stream never runs from one
 * document's text into another's without one. */
static bool needs_separator(const corpus_segment *s, double fraction)
{
    return s->doc_end || prepare_goes_to_validation(s->index, fraction) !=
                             prepare_goes_to_validation(s->index + 1, fraction);
}

typedef struct job_data {
    int32_t separator[MAX_SEPARATOR];
    size_t n_separator;
    double val_fraction;
} job_data;

/* ---- the jobs ----------------------------------------------------------------- */

static bool grow_tokens(chunk_slot *s, size_t need)
{
    if (need <= s->tokens_cap)
        return true;
    size_t cap = need + need / 4;
    int32_t *t = realloc(s->tokens, cap * sizeof *t);
    if (!t)
        return false;
    s->tokens = t;
    s->tokens_cap = cap;
    return true;
}

static nctmc_status encode_segment(chunk_slot *s, nctmc_tokenizer *tok, const char *text,
                                   size_t len, size_t *n)
{
    /* byte, character and BPE tokenizers give at most one token per byte */
    if (!grow_tokens(s, s->n_tokens + len + MAX_SEPARATOR))
        return NCTMC_ERR_OUT_OF_MEMORY;
    nctmc_status st = nctmc_tokenizer_encode(tok, text, len, s->tokens + s->n_tokens,
                                             s->tokens_cap - s->n_tokens, n);
    if (st == NCTMC_ERR_INVALID_ARGUMENT && *n > s->tokens_cap - s->n_tokens) {
        if (!grow_tokens(s, s->n_tokens + *n + MAX_SEPARATOR))
            return NCTMC_ERR_OUT_OF_MEMORY;
        st = nctmc_tokenizer_encode(tok, text, len, s->tokens + s->n_tokens,
                                    s->tokens_cap - s->n_tokens, n);
    }
    return st;
}

static void encode_job(const chunk_pool *p, chunk_slot *s, nctmc_tokenizer *tok)
{
    const job_data *jd = p->job_data;
    s->n_tokens = 0;
    s->status = NCTMC_OK;
    for (size_t i = 0; i < s->chunk.n_segs; i++) {
        const corpus_segment *seg = &s->chunk.segs[i];
        size_t n = 0;
        nctmc_status st = encode_segment(s, tok, s->chunk.text + seg->offset, seg->len, &n);
        if (st != NCTMC_OK) {
            s->status = st;
            snprintf(s->error, sizeof s->error, "%s",
                     st == NCTMC_ERR_OUT_OF_MEMORY ? "out of memory"
                                                   : nctmc_tokenizer_last_error(tok));
            return;
        }
        s->n_tokens += n;
        if (needs_separator(seg, jd->val_fraction)) {
            memcpy(s->tokens + s->n_tokens, jd->separator, jd->n_separator * sizeof(int32_t));
            s->n_tokens += jd->n_separator;
            n += jd->n_separator;
        }
        s->seg_tokens[i] = n;
    }
}

/* The distinct characters of text, in code-point order, as UTF-8: the
 * character tokenizer of the text, decoded token by token. */
static nctmc_status alphabet_of(nctmc_context *ctx, const char *text, size_t len, char **out,
                                size_t *out_len)
{
    nctmc_tokenizer *t = NULL;
    nctmc_status st = nctmc_tokenizer_create_chars(ctx, text, len, &t);
    if (st != NCTMC_OK)
        return st;
    int32_t v = nctmc_tokenizer_vocab_size(t);
    int32_t *ids = malloc((size_t)v * sizeof *ids);
    size_t n = 0;
    char *buf = NULL;
    st = ids ? NCTMC_OK : NCTMC_ERR_OUT_OF_MEMORY;
    for (int32_t k = 0; ids && k < v; k++)
        ids[k] = k;
    if (st == NCTMC_OK)
        st = nctmc_tokenizer_decode(t, ids, (size_t)v, NULL, 0, &n);
    if (st == NCTMC_OK && !(buf = malloc(n + 1)))
        st = NCTMC_ERR_OUT_OF_MEMORY;
    if (st == NCTMC_OK)
        st = nctmc_tokenizer_decode(t, ids, (size_t)v, buf, n + 1, &n);
    if (st == NCTMC_OK) {
        *out = buf;
        *out_len = n;
        buf = NULL;
    }
    free(buf);
    free(ids);
    nctmc_tokenizer_free(t);
    return st;
}

static void alphabet_job(const chunk_pool *p, chunk_slot *s, nctmc_tokenizer *tok)
{
    (void)p;
    (void)tok;
    s->text = NULL;
    s->text_len = 0;
    s->status = alphabet_of(NULL, s->chunk.text, s->chunk.len, &s->text, &s->text_len);
}

/* ---- progress ----------------------------------------------------------------- */

typedef struct pass_progress {
    progress bar;
    bool on, use_bar;
    int64_t total_bytes;   /* -1: unknown (a pipe among the inputs) */
    int64_t next_log;      /* bytes */
    double start;
} pass_progress;

static void progress_start(pass_progress *pp, const char *label, bool wanted,
                           int64_t total_bytes)
{
    memset(pp, 0, sizeof *pp);
    pp->on = wanted || isatty(STDERR_FILENO);
    pp->total_bytes = total_bytes;
    pp->start = cli_now();
    pp->next_log = 64 * MIB;
    pp->use_bar = pp->on && isatty(STDERR_FILENO) && total_bytes > 0;
    if (pp->use_bar)
        progress_begin(&pp->bar, label, 0, (total_bytes + MIB - 1) / MIB, 0);
    pp->bar.label = label;
}

/* tokens: NULL in the alphabet pass, which makes none */
static void progress_show(pass_progress *pp, int64_t bytes, const int64_t *tokens, bool last)
{
    if (!pp->on)
        return;
    double secs = cli_now() - pp->start;
    char tok[48] = "", rate[32], fields[128];
    if (tokens) {
        progress_format_count(tok, sizeof tok - 8, (double)*tokens);
        strcat(tok, " tokens ");
    }
    progress_format_count(rate, sizeof rate, secs > 0 ? (double)bytes / secs : 0.0);
    snprintf(fields, sizeof fields, "MiB  %s %sB/s", tok, rate);
    if (pp->use_bar) {
        /* the total is rounded up to whole MiB: the last update fills the bar */
        progress_update(&pp->bar, last ? pp->bar.total : bytes / MIB, fields);
        if (last)
            progress_end(&pp->bar);
        return;
    }
    if (!last && bytes < pp->next_log)
        return;
    while (pp->next_log <= bytes)
        pp->next_log += 64 * MIB;
    char eta[32] = "?";
    if (pp->total_bytes > 0 && bytes > 0)
        progress_format_duration(eta, sizeof eta,
                                 secs / (double)bytes * (double)(pp->total_bytes - bytes));
    fprintf(stderr, "%s %lld %s  eta %s\n", pp->bar.label, (long long)(bytes / MIB), fields,
            eta);
    fflush(stderr);
}

/* ---- one pass over the corpus --------------------------------------------------- */

typedef bool (*consume_fn)(void *arg, chunk_slot *s);

/* Fills free slots from the reader, takes results back in order. */
static bool run_pass(chunk_pool *pool, corpus_reader *r, consume_fn consume, void *arg,
                     pass_progress *pp, const int64_t *tokens)
{
    bool eof = false, ok = true;
    while (ok) {
        chunk_slot *s;
        while (!eof && (s = chunk_pool_free_slot(pool))) {
            int got = corpus_reader_fill(r, &s->chunk);
            if (got < 0)
                ok = false;
            if (got <= 0) {
                eof = true;
                break;
            }
            chunk_pool_submit(pool);
        }
        if (!ok || !chunk_pool_pending(pool))
            break;
        s = chunk_pool_take(pool);
        ok = consume(arg, s);
        chunk_pool_release(pool);
        progress_show(pp, corpus_reader_stats(r)->bytes_read, tokens, false);
    }
    progress_show(pp, corpus_reader_stats(r)->bytes_read, tokens, true);
    return ok;
}

/* ---- the plan: threads, chunk size ------------------------------------------------ */

typedef struct plan {
    int threads, slots;
    size_t chunk_bytes;
    int64_t total_bytes;  /* -1 when a pipe is among the inputs */
} plan;

static int default_threads(void)
{
    int n = cli_plat_cpu_count();
    return n > 64 ? 64 : n;
}

int32_t prepare_stream_min_memory_mb(int32_t threads)
{
    int64_t slots = threads + 2;
    int64_t bytes = (SLOT_FACTOR * slots + 2) * 4 * (int64_t)CORPUS_SEGMENT;
    return (int32_t)(RESERVE_MIB + (bytes + MIB - 1) / MIB);
}

static bool make_plan(const stream_options *o, const corpus_file *files, int n_files,
                      plan *p)
{
    p->threads = o->threads > 0 ? o->threads : default_threads();
    p->slots = p->threads + 2;
    /* the sequence carry of both splits comes out of the budget too */
    int64_t budget = (int64_t)o->memory_mb * MIB - RESERVE_MIB * MIB - 8 * (int64_t)o->seq_len;
    int64_t per = (int64_t)SLOT_FACTOR * p->slots + 2; /* +2: a JSON line and its text */
    int64_t chunk = budget > 0 ? budget / per : 0;
    if (chunk < 4 * (int64_t)CORPUS_SEGMENT) {
        cli_error("prepare", "--memory-mb %d is too little for %d threads (at least %d)",
                  (int)o->memory_mb, p->threads,
                  (int)prepare_stream_min_memory_mb(p->threads) + (int)(8 * o->seq_len / MIB) + 1);
        return false;
    }
    p->chunk_bytes = (size_t)chunk;
    p->total_bytes = 0;
    for (int i = 0; i < n_files && p->total_bytes >= 0; i++)
        p->total_bytes = files[i].size < 0 ? -1 : p->total_bytes + files[i].size;
    return true;
}

/* The segment size for a corpus of total_bytes (-1: unknown): CORPUS_SEGMENT,
 * unless segments that large would give the validation share none at all;
 * then about a quarter of the share's bytes, so that validation takes
 * about four segments. Depends only on the inputs, as every output byte. */
static size_t segment_bytes_for(double fraction, int64_t total_bytes)
{
    if (fraction <= 0.0 || total_bytes <= 0)
        return CORPUS_SEGMENT;
    int64_t full = (total_bytes + (int64_t)CORPUS_SEGMENT - 1) / (int64_t)CORPUS_SEGMENT;
    if ((double)full * fraction >= 1.0)
        return CORPUS_SEGMENT;
    double want = (double)total_bytes * fraction / 4.0;
    return want < (double)CORPUS_MIN_SEGMENT ? CORPUS_MIN_SEGMENT
           : want > (double)CORPUS_SEGMENT   ? CORPUS_SEGMENT
                                             : (size_t)want;
}

/* ---- the tokenizer ----------------------------------------------------------------- */

typedef struct alphabet_state {
    nctmc_context *ctx;
    char *chars;   /* the union so far */
    size_t len;
} alphabet_state;

static bool merge_alphabet(void *arg, chunk_slot *s)
{
    alphabet_state *a = arg;
    if (s->status != NCTMC_OK) {
        /* again on this thread, so that the reason reaches the log */
        char *unused = NULL;
        size_t n = 0;
        if (alphabet_of(a->ctx, s->chunk.text, s->chunk.len, &unused, &n) == NCTMC_OK)
            cli_error("prepare", "cannot gather the alphabet: out of memory");
        free(unused);
        cli_error("prepare", "the chars tokenizer needs UTF-8 text (--tokenizer bytes takes "
                  "anything)");
        return false;
    }
    char *both = malloc(a->len + s->text_len);
    if (!both)
        return false;
    memcpy(both, a->chars, a->len);
    memcpy(both + a->len, s->text, s->text_len);
    char *merged = NULL;
    size_t n = 0;
    nctmc_status st = alphabet_of(a->ctx, both, a->len + s->text_len, &merged, &n);
    free(both);
    if (st != NCTMC_OK)
        return false;
    free(a->chars);
    a->chars = merged;
    a->len = n;
    return true;
}

/* The first pass of the chars tokenizer: every character of the corpus,
 * gathered chunk by chunk, plus the line break the separator needs. */
static nctmc_tokenizer *gather_chars(nctmc_context *ctx, const stream_options *o,
                                     const corpus_options *co, const plan *p,
                                     const corpus_file *files, int n_files)
{
    alphabet_state a = {ctx, malloc(1), 1};
    corpus_reader *r = corpus_reader_create(co, files, n_files);
    chunk_pool pool;
    bool ok = a.chars && r &&
              chunk_pool_start(&pool, p->threads, p->slots, p->chunk_bytes, NULL, alphabet_job,
                               NULL);
    if (!ok) {
        cli_error("prepare", "out of memory");
        corpus_reader_free(r);
        free(a.chars);
        return NULL;
    }
    a.chars[0] = '\n';
    pass_progress pp;
    progress_start(&pp, "alphabet", o->progress, p->total_bytes);
    ok = run_pass(&pool, r, merge_alphabet, &a, &pp, NULL);
    chunk_pool_stop(&pool);
    corpus_reader_free(r);
    nctmc_tokenizer *tok = NULL;
    if (ok && nctmc_tokenizer_create_chars(ctx, a.chars, a.len, &tok) != NCTMC_OK)
        cli_error("prepare", "cannot build the chars tokenizer");
    free(a.chars);
    return tok;
}

static nctmc_tokenizer *make_tokenizer(nctmc_context *ctx, const stream_options *o,
                                       const corpus_options *co, const plan *p,
                                       const corpus_file *files, int n_files)
{
    nctmc_tokenizer *tok = NULL;
    nctmc_status st = NCTMC_OK;
    if (o->tokenizer_file) {
        /* a tokenizer file of prepare, or a Hugging Face tokenizer.json */
        st = cli_load_tokenizer_file("prepare", ctx, o->tokenizer_file, &tok);
    } else if (o->tokenizer == NCTMC_TOKENIZER_CHARS) {
        tok = gather_chars(ctx, o, co, p, files, n_files);
    } else {
        st = nctmc_tokenizer_create_bytes(&tok);
        if (st != NCTMC_OK)
            cli_fail("prepare", "cannot create the byte tokenizer", st, "");
    }
    return tok;
}

/* The document separator: the tokenizer's end-of-text token when it has
 * one (`<|endoftext|>` encodes to a single token, as in GPT-2 BPE), else
 * the tokens of a blank line, "\n\n" — what separates documents in plain
 * text anyway. */
static bool find_separator(nctmc_tokenizer *tok, job_data *jd)
{
    static const char eot[] = "<|endoftext|>";
    size_t n = 0;
    if (nctmc_tokenizer_encode(tok, eot, sizeof eot - 1, jd->separator, MAX_SEPARATOR, &n) ==
            NCTMC_OK &&
        n == 1) {
        jd->n_separator = 1;
        return true;
    }
    if (nctmc_tokenizer_encode(tok, "\n\n", 2, jd->separator, MAX_SEPARATOR, &n) == NCTMC_OK &&
        n > 0) {
        jd->n_separator = n;
        return true;
    }
    cli_error("prepare", "the tokenizer has no end-of-text token and cannot encode a blank "
              "line, the document separator: %s", nctmc_tokenizer_last_error(tok));
    return false;
}

/* ---- the shards ---------------------------------------------------------------- */

typedef struct split_out {
    const char *name;
    nctmc_dataset_writer *w;
    int32_t seq_len;
    int32_t *carry;        /* tokens of a sequence not yet full */
    int32_t carry_n;
    int64_t appended;      /* tokens handed to the writer */
    int64_t documents;     /* segments it holds that end a document */
    nctmc_dataset_info info;
} split_out;

typedef struct encode_state {
    split_out train, val;
    double val_fraction;
    int64_t tokens;
    const char *failed;    /* the writer's message on failure */
} encode_state;

static bool split_open(nctmc_context *ctx, split_out *s, const char *dir, const char *name,
                       int32_t vocab, int32_t seq_len)
{
    memset(s, 0, sizeof *s);
    s->name = name;
    s->seq_len = seq_len;
    nctmc_dataset_info_init(&s->info);
    char *path = cli_path_join(dir, name);
    nctmc_status st = path ? nctmc_dataset_writer_create(ctx, path, vocab, seq_len, &s->w)
                           : NCTMC_ERR_OUT_OF_MEMORY;
    free(path);
    if (st == NCTMC_OK && seq_len > 0 && !(s->carry = malloc((size_t)seq_len * sizeof(int32_t))))
        st = NCTMC_ERR_OUT_OF_MEMORY;
    if (st != NCTMC_OK)
        cli_fail("prepare", name, st, nctmc_context_last_error(ctx));
    return st == NCTMC_OK;
}

/* Appends tokens, whole sequences only when the shard has a length: the
 * rest waits in the carry for the next chunk. */
static nctmc_status split_append(split_out *s, const int32_t *t, size_t n)
{
    if (s->seq_len == 0) {
        s->appended += (int64_t)n;
        return nctmc_dataset_writer_append(s->w, t, (int64_t)n);
    }
    nctmc_status st = NCTMC_OK;
    while (n > 0 && st == NCTMC_OK) {
        if (s->carry_n == 0 && n >= (size_t)s->seq_len) {
            size_t whole = n - n % (size_t)s->seq_len;
            st = nctmc_dataset_writer_append(s->w, t, (int64_t)whole);
            s->appended += (int64_t)whole;
            t += whole;
            n -= whole;
            continue;
        }
        size_t k = (size_t)(s->seq_len - s->carry_n) < n ? (size_t)(s->seq_len - s->carry_n) : n;
        memcpy(s->carry + s->carry_n, t, k * sizeof *t);
        s->carry_n += (int32_t)k;
        t += k;
        n -= k;
        if (s->carry_n == s->seq_len) {
            st = nctmc_dataset_writer_append(s->w, s->carry, s->seq_len);
            s->appended += s->seq_len;
            s->carry_n = 0;
        }
    }
    return st;
}

static bool consume_tokens(void *arg, chunk_slot *s)
{
    encode_state *e = arg;
    if (s->status != NCTMC_OK) {
        cli_error("prepare", "cannot tokenize the input: %s", s->error);
        return false;
    }
    size_t at = 0;
    for (size_t i = 0; i < s->chunk.n_segs; i++) {
        const corpus_segment *seg = &s->chunk.segs[i];
        split_out *to = prepare_goes_to_validation(seg->index, e->val_fraction) ? &e->val
                                                                                 : &e->train;
        if (split_append(to, s->tokens + at, s->seg_tokens[i]) != NCTMC_OK) {
            cli_error("prepare", "%s: %s", to->name, nctmc_dataset_writer_last_error(to->w));
            return false;
        }
        to->documents += seg->doc_end;
        at += s->seg_tokens[i];
    }
    e->tokens += (int64_t)s->n_tokens;
    return true;
}

/* Commits a split with tokens; one without is dropped (no file). */
static bool split_finish(split_out *s, const char *shown, bool *written)
{
    *written = false;
    if (s->seq_len > 0 && s->carry_n > 0)
        printf("  (the last %d tokens of %s do not fill a sequence of %d and are left out)\n",
               (int)s->carry_n, s->name, (int)s->seq_len);
    if (s->appended == 0)
        return true;
    nctmc_status st = nctmc_dataset_writer_commit(s->w, &s->info);
    char *final = cli_path_join(shown, s->name);
    if (st != NCTMC_OK)
        cli_fail("prepare", final ? final : s->name, st, nctmc_dataset_writer_last_error(s->w));
    else if (s->seq_len > 0)
        cli_printf(stdout, "  %-12s %lld sequences of %d tokens  %s\n", s->name,
                   (long long)s->info.n_sequences, (int)s->seq_len, final ? final : "");
    else
        cli_printf(stdout, "  %-12s %lld tokens (stream)  %s\n", s->name,
                   (long long)s->info.n_tokens, final ? final : "");
    free(final);
    *written = st == NCTMC_OK;
    return st == NCTMC_OK;
}

static void split_close(split_out *s)
{
    nctmc_dataset_writer_free(s->w);
    free(s->carry);
    s->w = NULL;
    s->carry = NULL;
}

/* ---- the run ------------------------------------------------------------------- */

typedef struct stream_run {
    nctmc_context *ctx;
    const stream_options *o;
    corpus_options co;
    plan p;
    corpus_file *files;
    int n_files;
    nctmc_tokenizer *tok;
    job_data jd;
    encode_state e;
    corpus_stats stats;
    double seconds;
} stream_run;

/* The second pass: every chunk tokenized into the two shards. */
static bool encode_corpus(stream_run *run, const char *staging)
{
    int32_t vocab = nctmc_tokenizer_vocab_size(run->tok);
    run->e.val_fraction = run->o->val_fraction;
    if (!split_open(run->ctx, &run->e.train, staging, CLI_TRAIN_SHARD, vocab, run->o->seq_len) ||
        !split_open(run->ctx, &run->e.val, staging, CLI_VAL_SHARD, vocab, run->o->seq_len))
        return false;
    corpus_reader *r = corpus_reader_create(&run->co, run->files, run->n_files);
    chunk_pool pool;
    if (!r || !chunk_pool_start(&pool, run->p.threads, run->p.slots, run->p.chunk_bytes,
                                run->tok, encode_job, &run->jd)) {
        cli_error("prepare", "out of memory (or no threads) for %d threads", run->p.threads);
        corpus_reader_free(r);
        return false;
    }
    pass_progress pp;
    progress_start(&pp, "prepare", run->o->progress, run->p.total_bytes);
    double start = cli_now();
    bool ok = run_pass(&pool, r, consume_tokens, &run->e, &pp, &run->e.tokens);
    run->seconds = cli_now() - start;
    run->stats = *corpus_reader_stats(r);
    chunk_pool_stop(&pool);
    corpus_reader_free(r);
    return ok;
}

static void report_counts(const stream_run *run)
{
    const corpus_stats *st = &run->stats;
    if (st->bad_lines > 0 && run->o->jsonl_field)
        cli_error("prepare", "warning: skipped %lld JSON Lines record%s that were not an "
                  "object with a string \"%s\" (the first: %s)",
                  (long long)st->bad_lines, st->bad_lines == 1 ? "" : "s",
                  run->o->jsonl_field, st->first_bad);
    else if (st->bad_lines > 0)
        cli_error("prepare", "warning: skipped %lld line%s with invalid UTF-8, which the chars "
                  "tokenizer cannot take (the first: %s)",
                  (long long)st->bad_lines, st->bad_lines == 1 ? "" : "s", st->first_bad);
    double rate = run->seconds > 0 ? (double)run->e.tokens / run->seconds : 0.0;
    printf("prepared %lld bytes from %d file%s (%lld documents, %lld segments) into %lld "
           "tokens in %.1f s (%.3g tokens/s, %d thread%s):\n",
           (long long)st->bytes_read, run->n_files, run->n_files == 1 ? "" : "s",
           (long long)st->documents, (long long)st->segments, (long long)run->e.tokens,
           run->seconds, rate, run->p.threads, run->p.threads == 1 ? "" : "s");
}

bool prepare_write_tokenizer(nctmc_tokenizer *tok, const char *dir, const char *shown)
{
    char *path = cli_path_join(dir, CLI_TOKENIZER_FILE);
    char *final = cli_path_join(shown, CLI_TOKENIZER_FILE);
    nctmc_status st = path && final ? nctmc_tokenizer_save(tok, path) : NCTMC_ERR_OUT_OF_MEMORY;
    char what[128];
    cli_describe_tokenizer(tok, what, sizeof what);
    if (st != NCTMC_OK)
        cli_fail("prepare", final ? final : CLI_TOKENIZER_FILE, st,
                 nctmc_tokenizer_last_error(tok));
    else
        cli_printf(stdout, "  %-12s %s  %s\n", CLI_TOKENIZER_FILE, what, final);
    free(path);
    free(final);
    return st == NCTMC_OK;
}

static bool write_manifest(stream_run *run, const char *staging, bool val_written)
{
    const char *input = run->o->jsonl_field ? "jsonl" : run->o->split_line ? "split-at" : "text";
    const char *arg = run->o->jsonl_field ? run->o->jsonl_field : run->o->split_line;
    manifest_shard shards[2] = {{CLI_TRAIN_SHARD, run->e.train.info, run->e.train.documents},
                                {CLI_VAL_SHARD, run->e.val.info, run->e.val.documents}};
    manifest_info m = {input, arg, run->o->val_fraction, run->o->seq_len, run->jd.separator,
                       run->jd.n_separator, &run->stats,
                       run->e.train.carry_n + run->e.val.carry_n, shards, val_written ? 2 : 1,
                       run->files, run->n_files};
    return manifest_write("prepare", run->ctx, staging, run->o->out_dir, &m);
}

/* Everything after the inputs are known, inside the staging directory. */
static bool produce(stream_run *run, staged_dir *sd)
{
    bool val_written = false, train_written = false;
    bool ok = encode_corpus(run, sd->staging);
    if (ok) {
        report_counts(run);
        if (run->stats.documents == 0) {
            cli_error("prepare", "the input holds no documents");
            ok = false;
        }
    }
    ok = ok && split_finish(&run->e.train, run->o->out_dir, &train_written);
    if (ok && !train_written) {
        cli_error("prepare", "nothing left to train on (%lld tokens in all)",
                  (long long)run->e.tokens);
        ok = false;
    }
    ok = ok && split_finish(&run->e.val, run->o->out_dir, &val_written);
    if (ok && !val_written && run->o->val_fraction > 0.0f && run->o->val_fraction_given) {
        cli_error("prepare", "--val-fraction %g: the input gives no validation split (it "
                  "takes every k-th of the %lld segments, a document or at most %d bytes of "
                  "one, and whole sequences only); give more text, the input as a file (not a pipe), or --val-fraction 0",
                  (double)run->o->val_fraction, (long long)run->stats.segments,
                  (int)run->co.segment_bytes);
        ok = false;
    } else if (ok && !val_written && run->o->val_fraction > 0.0f) {
        printf("  (too little data for a validation split of %g: it takes every k-th "
               "segment of at most %d bytes)\n",
               (double)run->o->val_fraction, (int)run->co.segment_bytes);
    }
    ok = ok && prepare_write_tokenizer(run->tok, sd->staging, run->o->out_dir) &&
         write_manifest(run, sd->staging, val_written);
    split_close(&run->e.train);
    split_close(&run->e.val);
    return ok;
}

/* The inputs, and what the chosen tokenizer needs of them. */
static bool gather_inputs(stream_run *run, char *const *args, int n_args)
{
    if (!corpus_list_files("prepare", args, n_args, &run->files, &run->n_files))
        return false;
    bool two_passes = !run->o->tokenizer_file && run->o->tokenizer == NCTMC_TOKENIZER_CHARS;
    for (int i = 0; two_passes && i < run->n_files; i++)
        if (run->files[i].size < 0) {
            cli_error("prepare", "%s is not a regular file, but the chars tokenizer reads "
                      "the corpus twice (its alphabet first): use --tokenizer bytes or "
                      "--tokenizer-file",
                      run->files[i].path);
            return false;
        }
    const char **paths = malloc((size_t)run->n_files * sizeof *paths);
    if (!paths)
        return false;
    for (int i = 0; i < run->n_files; i++)
        paths[i] = run->files[i].path;
    bool ok = staged_dir_check("prepare", run->o->out_dir, paths, run->n_files);
    free(paths);
    return ok;
}

int prepare_stream(nctmc_context *ctx, const stream_options *o, char *const *args, int n_args)
{
    stream_run run;
    memset(&run, 0, sizeof run);
    run.ctx = ctx;
    run.o = o;
    run.jd.val_fraction = o->val_fraction;
    bool ok = gather_inputs(&run, args, n_args) && make_plan(o, run.files, run.n_files, &run.p);
    if (ok) {
        run.co.jsonl_field = o->jsonl_field;
        run.co.split_line = o->split_line;
        run.co.chunk_bytes = run.p.chunk_bytes;
        run.co.segment_bytes = segment_bytes_for(o->val_fraction, run.p.total_bytes);
        /* plain text for the chars tokenizer: lines with invalid UTF-8 are
         * skipped in both passes (corpus.h) */
        run.co.require_utf8 = !o->jsonl_field && !o->tokenizer_file &&
                              o->tokenizer == NCTMC_TOKENIZER_CHARS;
        run.tok = make_tokenizer(ctx, o, &run.co, &run.p, run.files, run.n_files);
        if (run.tok && !o->jsonl_field &&
            nctmc_tokenizer_get_kind(run.tok) == NCTMC_TOKENIZER_CHARS)
            run.co.require_utf8 = true; /* a chars tokenizer file */
        ok = run.tok && find_separator(run.tok, &run.jd);
    }
    staged_dir sd;
    if (ok && (ok = staged_dir_begin("prepare", o->out_dir, &sd))) {
        if (produce(&run, &sd))
            ok = staged_dir_commit("prepare", &sd);
        else {
            staged_dir_abort(&sd);
            ok = false;
        }
    }
    nctmc_tokenizer_free(run.tok);
    corpus_free_files(run.files, run.n_files);
    return ok ? 0 : 1;
}
