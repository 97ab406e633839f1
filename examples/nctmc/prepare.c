/*
 * prepare.c — `nctmc prepare`: its options, and the digits data into the
 * token shards and tokenizer file that `nctmc train` reads. Text, of any
 * size, goes through prepare_stream.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "digits.h"
#include "manifest.h"
#include "prepare_stream.h"
#include "staged_dir.h"

static const char *const text_tokenizer_names[] = {"bytes", "chars", NULL};

typedef struct prepare_options {
    stream_options text;
    const char *digits;
} prepare_options;

/* Tokens (and labels) of one split. */
typedef struct token_split {
    int32_t *tokens;
    int64_t n_tokens;
    int32_t *labels;   /* NULL without labels */
    int64_t n_sequences;
} token_split;

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
        token_split *to = prepare_goes_to_validation(i, fraction) ? val : train;
        split_push(to, tokens + i * seq_len, seq_len, labels ? labels + i : NULL);
    }
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

/* The manifest of the digits directory: its shards as written. */
static bool write_digits_manifest(nctmc_context *ctx, const prepare_options *o,
                                  const char *staging, bool with_val)
{
    static const char *const names[2] = {CLI_TRAIN_SHARD, CLI_VAL_SHARD};
    manifest_shard shards[2];
    int n = with_val ? 2 : 1;
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        char *path = cli_path_join(staging, names[i]);
        nctmc_dataset *ds = NULL;
        shards[i].name = names[i];
        nctmc_dataset_info_init(&shards[i].info);
        ok = path && nctmc_dataset_open(ctx, path, &ds) == NCTMC_OK &&
             nctmc_dataset_get_info(ds, &shards[i].info) == NCTMC_OK;
        shards[i].documents = shards[i].info.n_sequences;
        nctmc_dataset_free(ds);
        free(path);
    }
    if (!ok) {
        cli_error("prepare", "cannot read back the shards for the manifest: %s",
                  nctmc_context_last_error(ctx));
        return false;
    }
    corpus_file source = {(char *)o->digits, -1, 0, 0};
    manifest_info m = {"digits", NULL, o->text.val_fraction, DIGITS_PIXELS, NULL, 0, NULL, 0,
                       shards, n, &source, 1};
    return manifest_write("prepare", ctx, staging, o->text.out_dir, &m);
}

/* Writes the tokenizer, both shards and the manifest into a staging
 * directory that then replaces the output directory whole (staged_dir.h):
 * whatever was there before — a val.bin of an earlier run included — is
 * gone, and a run that fails half-way leaves the old directory as it was.
 * An empty validation split is left out (with a note), since a shard needs
 * tokens. */
static bool write_outputs(nctmc_context *ctx, const prepare_options *o, nctmc_tokenizer *tok,
                          const token_split *train, const token_split *val, int32_t seq_len,
                          int32_t n_classes)
{
    int32_t vocab = nctmc_tokenizer_vocab_size(tok);
    const char *out = o->text.out_dir;
    if (train->n_tokens == 0) {
        cli_error("prepare", "nothing left to train on (%lld tokens in all)",
                  (long long)(train->n_tokens + val->n_tokens));
        return false;
    }
    staged_dir sd;
    if (!staged_dir_begin("prepare", out, &sd))
        return false;
    bool ok = prepare_write_tokenizer(tok, sd.staging, out) &&
              write_shard(ctx, sd.staging, out, CLI_TRAIN_SHARD, train, vocab, seq_len,
                          n_classes) &&
              (val->n_tokens == 0 ||
               write_shard(ctx, sd.staging, out, CLI_VAL_SHARD, val, vocab, seq_len,
                           n_classes)) &&
              write_digits_manifest(ctx, o, sd.staging, val->n_tokens > 0);
    if (!ok) {
        staged_dir_abort(&sd);
        return false;
    }
    if (val->n_tokens == 0 && o->text.val_fraction > 0.0f)
        printf("  (too little data for a validation split of %g)\n",
               (double)o->text.val_fraction);
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
    ok = ok && split_sequences(set.pixels, set.labels, set.n, DIGITS_PIXELS,
                               o->text.val_fraction,
                               &train, &val);
    if (ok && val.n_tokens == 0 && o->text.val_fraction > 0.0f && o->text.val_fraction_given) {
        cli_error("prepare", "--val-fraction %g of %lld images holds none; give at least "
                  "%g, or --val-fraction 0",
                  (double)o->text.val_fraction, (long long)set.n, 1.0 / (double)set.n);
        ok = false;
    }
    ok = ok && write_outputs(ctx, o, tok, &train, &val, DIGITS_PIXELS, DIGITS_CLASSES);
    split_free(&train);
    split_free(&val);
    nctmc_tokenizer_free(tok);
    digits_free(&set);
    return ok ? 0 : 1;
}

/* Checks of the options among themselves; an exit status, or -1 to run. */
static int check_options(const cli_command *cmd, const prepare_options *o, int n_files)
{
    const stream_options *t = &o->text;
    if (o->digits == NULL && n_files == 0)
        return cli_usage_error(cmd, "no input files (or --digits FILE)");
    if (o->digits != NULL && n_files > 0)
        return cli_usage_error(cmd, "--digits takes no other input files");
    if (o->digits != NULL &&
        (cli_option_given(cmd, "--tokenizer") || cli_option_given(cmd, "--seq-len") ||
         t->tokenizer_file || t->jsonl_field || t->split_line))
        return cli_usage_error(cmd, "--digits fixes the tokenizer, the sequence length and "
                               "the input format");
    if (t->tokenizer_file && cli_option_given(cmd, "--tokenizer"))
        return cli_usage_error(cmd, "give --tokenizer or --tokenizer-file, not both");
    if (t->jsonl_field && t->split_line)
        return cli_usage_error(cmd, "a JSON Lines record is a document: --split-at does not "
                               "apply to --jsonl-field");
    if (t->jsonl_field && (!t->jsonl_field[0] || strlen(t->jsonl_field) > 255))
        return cli_usage_error(cmd, "--jsonl-field needs a name of 1 to 255 bytes");
    if (t->split_line && (strlen(t->split_line) > 256 || strchr(t->split_line, '\n')))
        return cli_usage_error(cmd, "--split-at takes one line of at most 256 bytes");
    return -1;
}

int cmd_prepare(int argc, char **argv)
{
    prepare_options o = {{"data", NCTMC_TOKENIZER_BYTES, NULL, 0.1f, 0, NULL, NULL, 0, 512,
                          false, false},
                         NULL};
    stream_options *t = &o.text;
    cli_option options[] = {
        CLI_OPT_STRING("--out", t->out_dir, "DIR", "directory to write into (created if missing)"),
        CLI_OPT_CHOICE("--tokenizer", t->tokenizer, text_tokenizer_names,
                       "bytes: 256 tokens, any input; chars: the corpus's own characters"),
        CLI_OPT_STRING("--tokenizer-file", t->tokenizer_file, "FILE",
                       "use this tokenizer: a saved one of any kind (e.g. another "
                       "directory's tokenizer.txt) or a Hugging Face tokenizer.json"),
        CLI_OPT_FLOAT("--val-fraction", t->val_fraction, "F", 0.0, 0.9,
                      "share held out for validation (every k-th segment); one that "
                      "the input cannot give is refused"),
        CLI_OPT_INT("--seq-len", t->seq_len, "N", 0, 1 << 20,
                    "pack the text into sequences of N tokens; 0 = one stream (training "
                    "reads random windows)"),
        CLI_OPT_STRING("--jsonl-field", t->jsonl_field, "NAME",
                       "inputs are JSON Lines; each record's string field NAME is a document"),
        CLI_OPT_STRING("--split-at", t->split_line, "LINE",
                       "a line equal to LINE ends a document ('' = a blank line); default: "
                       "a file is a document"),
        CLI_OPT_INT("--threads", t->threads, "N", 0, 256,
                    "tokenizing threads; 0 = every CPU"),
        CLI_OPT_INT("--memory-mb", t->memory_mb, "MB", 1, 1 << 30,
                    "memory budget, whatever the corpus size"),
        CLI_OPT_FLAG("--progress", t->progress,
                     "log progress to stderr also when it is not a terminal"),
        CLI_OPT_STRING("--digits", o.digits, "FILE",
                       "convert digits.txt instead of text: 8x8 images, 17 grey levels, "
                       "10 labelled classes"),
    };
    cli_command cmd = {
        "prepare", "[options] FILE|DIR...  |  --digits FILE [options]",
        "Tokenizes text — files, pipes, directories (walked in name order), JSON\n"
        "Lines — into a training shard, a validation shard, a tokenizer file and a\n"
        "manifest in one directory, ready for `nctmc train --data DIR`. The input\n"
        "is streamed in a fixed memory budget with all cores; the output is the\n"
        "same for any thread count. Documents are separated by the tokenizer's\n"
        "end-of-text token, or a blank line; every k-th segment (a document, or\n"
        "64 KiB of one, less in a small corpus) goes to validation.",
        "  nctmc prepare --digits examples/data/digits.txt --out build/digits\n"
        "  nctmc prepare --tokenizer chars --seq-len 128 --out data/poems poems/\n"
        "  nctmc prepare --jsonl-field text --out data/owt owt/*.jsonl\n",
        0, 1 << 20, options, sizeof options / sizeof options[0]};
    char **files = malloc((size_t)(argc > 1 ? argc : 1) * sizeof *files);
    if (files == NULL)
        return 1;
    int n_files = 0, rc;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, (const char **)files, &n_files);
    if (parsed != CLI_PARSE_OK)
        rc = parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    else
        rc = check_options(&cmd, &o, n_files);
    t->val_fraction_given = cli_option_given(&cmd, "--val-fraction");
    if (rc < 0 && o.digits && !staged_dir_check("prepare", t->out_dir, &o.digits, 1))
        rc = 1;
    if (rc < 0) {
        nctmc_context *ctx = NULL;
        rc = 1;
        if (cli_context_create("prepare", "cpu", 1, false, &ctx) == NCTMC_OK)
            rc = o.digits ? prepare_digits(ctx, &o) : prepare_stream(ctx, t, files, n_files);
        nctmc_context_free(ctx);
    }
    free(files);
    return rc;
}
