/*
 * prepare.c — `nctmc prepare`: text files or the digits data into the
 * token shards and tokenizer file that `nctmc train` reads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "digits.h"
#include "staged_dir.h"

static const char *const text_tokenizer_names[] = {"bytes", "chars", NULL};

typedef struct prepare_options {
    const char *out_dir;
    int tokenizer;  /* NCTMC_TOKENIZER_BYTES or _CHARS */
    float val_fraction;
    int32_t seq_len;
    const char *digits;
} prepare_options;

/* Tokens (and labels) of one split. */
typedef struct token_split {
    int32_t *tokens;
    int64_t n_tokens;
    int32_t *labels;   /* NULL without labels */
    int64_t n_sequences;
} token_split;

/* Every item i with this true goes to validation: exactly floor(n * f) of
 * any n first items, spread evenly (every 10th for f = 0.1), so the split
 * is deterministic and the same for every file size. The small epsilon
 * keeps 10 * 0.1 at 1 despite binary rounding. */
static bool goes_to_validation(int64_t i, double fraction)
{
    return floor((double)(i + 1) * fraction + 1e-9) > floor((double)i * fraction + 1e-9);
}

static bool split_alloc(token_split *s, int64_t n_tokens, int64_t n_sequences, bool labels)
{
    s->tokens = malloc((size_t)(n_tokens > 0 ? n_tokens : 1) * sizeof(int32_t));
    s->labels = labels ? malloc((size_t)(n_sequences > 0 ? n_sequences : 1) * sizeof(int32_t))
                       : NULL;
    s->n_tokens = 0;
    s->n_sequences = 0;
    return s->tokens != NULL && (!labels || s->labels != NULL);
}

static void split_free(token_split *s)
{
    free(s->tokens);
    free(s->labels);
}

static void split_push(token_split *s, const int32_t *seq, int32_t len, const int32_t *label)
{
    memcpy(s->tokens + s->n_tokens, seq, (size_t)len * sizeof(int32_t));
    s->n_tokens += len;
    if (label != NULL)
        s->labels[s->n_sequences] = *label;
    s->n_sequences++;
}

/* Sequences [n, seq_len] with optional labels into train and validation. */
static bool split_sequences(const int32_t *tokens, const int32_t *labels, int64_t n,
                            int32_t seq_len, double fraction, token_split *train,
                            token_split *val)
{
    int64_t n_val = (int64_t)floor((double)n * fraction + 1e-9);
    if (!split_alloc(train, (n - n_val) * seq_len, n - n_val, labels != NULL) ||
        !split_alloc(val, n_val * seq_len, n_val, labels != NULL))
        return false;
    for (int64_t i = 0; i < n; i++) {
        token_split *to = goes_to_validation(i, fraction) ? val : train;
        split_push(to, tokens + i * seq_len, seq_len, labels ? labels + i : NULL);
    }
    return true;
}

/* A stream: the last fraction of the tokens is validation, so that it is
 * text the model never saw in any training window. */
static bool split_stream(const int32_t *tokens, int64_t n, double fraction, token_split *train,
                         token_split *val)
{
    int64_t n_val = (int64_t)floor((double)n * fraction + 1e-9);
    if (!split_alloc(train, n - n_val, 0, false) || !split_alloc(val, n_val, 0, false))
        return false;
    memcpy(train->tokens, tokens, (size_t)(n - n_val) * sizeof(int32_t));
    memcpy(val->tokens, tokens + (n - n_val), (size_t)n_val * sizeof(int32_t));
    train->n_tokens = n - n_val;
    val->n_tokens = n_val;
    return true;
}

/* Writes a file of the output into `dir` (the staging directory); `shown`
 * is the output directory as the user named it, for the listing. */
static bool write_shard(nctmc_context *ctx, const char *dir, const char *shown, const char *name,
                        const token_split *s, int32_t vocab, int32_t seq_len, int32_t n_classes)
{
    char *path = cli_path_join(dir, name);
    char *final = cli_path_join(shown, name);
    nctmc_status st = NCTMC_ERR_OUT_OF_MEMORY;
    if (path != NULL && final != NULL)
        st = nctmc_dataset_write(ctx, path, s->tokens, s->n_tokens, vocab, seq_len, s->labels,
                                 s->labels ? n_classes : 0);
    if (st != NCTMC_OK)
        cli_fail("prepare", final ? final : name, st, nctmc_context_last_error(ctx));
    else if (seq_len > 0)
        cli_printf(stdout, "  %-12s %lld sequences of %d tokens%s  %s\n", name,
                   (long long)s->n_sequences, (int)seq_len, s->labels ? ", labelled" : "", final);
    else
        cli_printf(stdout, "  %-12s %lld tokens (stream)  %s\n", name, (long long)s->n_tokens,
                   final);
    free(path);
    free(final);
    return st == NCTMC_OK;
}

static bool write_tokenizer(const char *dir, const char *shown, nctmc_tokenizer *tok)
{
    char *path = cli_path_join(dir, CLI_TOKENIZER_FILE);
    char *final = cli_path_join(shown, CLI_TOKENIZER_FILE);
    nctmc_status st = NCTMC_ERR_OUT_OF_MEMORY;
    if (path != NULL && final != NULL)
        st = nctmc_tokenizer_save(tok, path);
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

/* Writes the tokenizer and both shards into a staging directory that then
 * replaces the output directory whole (staged_dir.h): whatever was there
 * before — a val.bin of an earlier run included — is gone, and a run that
 * fails half-way leaves the old directory as it was. An empty validation
 * split is left out (with a note), since a shard needs tokens. */
static bool write_outputs(nctmc_context *ctx, const prepare_options *o, nctmc_tokenizer *tok,
                          const token_split *train, const token_split *val, int32_t seq_len,
                          int32_t n_classes)
{
    int32_t vocab = nctmc_tokenizer_vocab_size(tok);
    if (train->n_tokens == 0) {
        cli_error("prepare", "nothing left to train on (%lld tokens in all)",
                  (long long)(train->n_tokens + val->n_tokens));
        return false;
    }
    staged_dir sd;
    if (!staged_dir_begin("prepare", o->out_dir, &sd))
        return false;
    bool ok = write_tokenizer(sd.staging, o->out_dir, tok) &&
              write_shard(ctx, sd.staging, o->out_dir, CLI_TRAIN_SHARD, train, vocab, seq_len,
                          n_classes) &&
              (val->n_tokens == 0 || write_shard(ctx, sd.staging, o->out_dir, CLI_VAL_SHARD, val,
                                                 vocab, seq_len, n_classes));
    if (!ok) {
        staged_dir_abort(&sd);
        return false;
    }
    if (val->n_tokens == 0 && o->val_fraction > 0.0f)
        printf("  (too little data for a validation split of %g)\n", (double)o->val_fraction);
    return staged_dir_commit("prepare", &sd);
}

static int prepare_digits(nctmc_context *ctx, const prepare_options *o)
{
    char *text = NULL, err[256];
    size_t len = 0;
    digits_set set = {NULL, NULL, 0};
    if (!cli_read_file("prepare", o->digits, &text, &len))
        return 1;
    int parsed = digits_parse(text, len, &set, err, sizeof err);
    free(text);
    if (parsed != 0) {
        cli_error("prepare", "%s: %s", o->digits, err);
        return 1;
    }
    nctmc_tokenizer *tok = NULL;
    token_split train = {0}, val = {0};
    nctmc_status st = nctmc_tokenizer_create_image(ctx, DIGITS_WIDTH, DIGITS_HEIGHT,
                                                   DIGITS_LEVELS, &tok);
    bool ok = st == NCTMC_OK;
    if (!ok)
        cli_fail("prepare", "cannot create the image tokenizer", st, "");
    cli_printf(stdout, "prepared %lld digit images from %s:\n", (long long)set.n, o->digits);
    ok = ok && split_sequences(set.pixels, set.labels, set.n, DIGITS_PIXELS, o->val_fraction,
                               &train, &val);
    ok = ok && write_outputs(ctx, o, tok, &train, &val, DIGITS_PIXELS, DIGITS_CLASSES);
    split_free(&train);
    split_free(&val);
    nctmc_tokenizer_free(tok);
    digits_free(&set);
    return ok ? 0 : 1;
}

/* Every input file, concatenated byte for byte. */
static bool read_corpus(const char *const *files, int n_files, char **corpus, size_t *len)
{
    char *all = NULL;
    size_t total = 0;
    for (int i = 0; i < n_files; i++) {
        char *data;
        size_t size;
        if (!cli_read_file("prepare", files[i], &data, &size)) {
            free(all);
            return false;
        }
        char *bigger = realloc(all, total + size + 1);
        if (bigger == NULL) {
            free(data);
            free(all);
            cli_error("prepare", "out of memory reading %s", files[i]);
            return false;
        }
        all = bigger;
        memcpy(all + total, data, size);
        total += size;
        all[total] = '\0';
        free(data);
    }
    *corpus = all;
    *len = total;
    return true;
}

static nctmc_status create_text_tokenizer(nctmc_context *ctx, int kind, const char *corpus,
                                          size_t len, nctmc_tokenizer **tok)
{
    if (kind == NCTMC_TOKENIZER_CHARS)
        return nctmc_tokenizer_create_chars(ctx, corpus, len, tok);
    return nctmc_tokenizer_create_bytes(tok);
}

static bool split_text(const prepare_options *o, const int32_t *tokens, size_t n,
                       token_split *train, token_split *val)
{
    if (o->seq_len == 0)
        return split_stream(tokens, (int64_t)n, o->val_fraction, train, val);
    int64_t n_seq = (int64_t)n / o->seq_len;
    if ((int64_t)n % o->seq_len != 0)
        printf("  (the last %lld tokens do not fill a sequence of %d and are left out)\n",
               (long long)((int64_t)n % o->seq_len), (int)o->seq_len);
    return split_sequences(tokens, NULL, n_seq, o->seq_len, o->val_fraction, train, val);
}

static int prepare_text(nctmc_context *ctx, const prepare_options *o, const char *const *files,
                        int n_files)
{
    char *corpus = NULL;
    size_t len = 0;
    if (!read_corpus(files, n_files, &corpus, &len))
        return 1;
    nctmc_tokenizer *tok = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    token_split train = {0}, val = {0};
    nctmc_status st = create_text_tokenizer(ctx, o->tokenizer, corpus, len, &tok);
    bool ok = st == NCTMC_OK;
    if (!ok)
        cli_fail("prepare", "cannot build the tokenizer", st, nctmc_context_last_error(ctx));
    ok = ok && cli_encode("prepare", tok, corpus, len, &tokens, &n_tokens);
    if (ok)
        printf("prepared %zu bytes from %d file%s into %zu tokens:\n", len, n_files,
               n_files == 1 ? "" : "s", n_tokens);
    ok = ok && split_text(o, tokens, n_tokens, &train, &val);
    ok = ok && write_outputs(ctx, o, tok, &train, &val, o->seq_len, 0);
    split_free(&train);
    split_free(&val);
    free(tokens);
    nctmc_tokenizer_free(tok);
    free(corpus);
    return ok ? 0 : 1;
}

int cmd_prepare(int argc, char **argv)
{
    prepare_options o = {"data", NCTMC_TOKENIZER_BYTES, 0.1f, 0, NULL};
    cli_option options[] = {
        CLI_OPT_STRING("--out", o.out_dir, "DIR", "directory to write into (created if missing)"),
        CLI_OPT_CHOICE("--tokenizer", o.tokenizer, text_tokenizer_names,
                       "bytes: 256 tokens, any input; chars: the corpus's own characters"),
        CLI_OPT_FLOAT("--val-fraction", o.val_fraction, "F", 0.0, 0.9,
                      "share held out for validation"),
        CLI_OPT_INT("--seq-len", o.seq_len, "N", 0, 1 << 20,
                    "cut text into sequences of N tokens; 0 = one stream (training reads "
                    "random windows)"),
        CLI_OPT_STRING("--digits", o.digits, "FILE",
                       "convert digits.txt instead of text: 8x8 images, 17 grey levels, "
                       "10 labelled classes"),
    };
    cli_command cmd = {
        "prepare", "[options] FILE...  |  --digits FILE [options]",
        "Tokenizes text files (or the digits images) into a training shard, a\n"
        "validation shard and a tokenizer file in one directory, ready for\n"
        "`nctmc train --data DIR`. The split is deterministic: every k-th sequence\n"
        "(or, for a stream, the end of the text) goes to validation.",
        "  nctmc prepare --digits examples/data/digits.txt --out build/digits\n"
        "  nctmc prepare --tokenizer chars --seq-len 128 --out data/poems poems/*.txt\n",
        0, 1 << 20, options, sizeof options / sizeof options[0]};
    const char **files = malloc((size_t)(argc > 1 ? argc : 1) * sizeof *files);
    if (files == NULL)
        return 1;
    int n_files = 0, rc;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, files, &n_files);
    if (parsed != CLI_PARSE_OK)
        rc = parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    else if (o.digits == NULL && n_files == 0)
        rc = cli_usage_error(&cmd, "no input files (or --digits FILE)");
    else if (o.digits != NULL && n_files > 0)
        rc = cli_usage_error(&cmd, "--digits takes no other input files");
    else if (o.digits != NULL && (cli_option_given(&cmd, "--tokenizer") ||
                                  cli_option_given(&cmd, "--seq-len")))
        rc = cli_usage_error(&cmd, "--digits fixes the tokenizer and the sequence length");
    else
        rc = staged_dir_check("prepare", o.out_dir, o.digits ? &o.digits : files,
                              o.digits ? 1 : n_files)
                 ? -1
                 : 1;
    if (rc < 0) {
        nctmc_context *ctx = NULL;
        rc = 1;
        if (cli_context_create("prepare", "cpu", 1, false, &ctx) == NCTMC_OK)
            rc = o.digits ? prepare_digits(ctx, &o) : prepare_text(ctx, &o, files, n_files);
        nctmc_context_free(ctx);
    }
    free(files);
    return rc;
}
