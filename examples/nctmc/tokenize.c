/*
 * tokenize.c — `nctmc tokenize`: text to token ids and back with any
 * tokenizer — a Hugging Face tokenizer.json, GPT-2's vocab.json +
 * merges.txt, a tokenizer file of `nctmc prepare`, or a checkpoint's — for
 * scripts and for checking ids against other tools.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

#define CMD "tokenize"

/* What a file is, from its first bytes. */
typedef enum source_kind { SOURCE_JSON, SOURCE_NCTMC, SOURCE_CHECKPOINT } source_kind;

static bool sniff(const char *path, source_kind *kind)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error(CMD, "cannot open %s: %s", path, strerror(errno));
        return false;
    }
    char head[16] = {0};
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (cli_looks_like_json(head, n))
        *kind = SOURCE_JSON;
    else if (n >= 15 && memcmp(head, "nctmc-tokenizer", 15) == 0)
        *kind = SOURCE_NCTMC;
    else
        *kind = SOURCE_CHECKPOINT; /* safetensors: a length, then the header */
    return true;
}

static nctmc_tokenizer *checkpoint_tokenizer(const char *path, bool no_mmap)
{
    nctmc_context *ctx = NULL;
    if (cli_context_create(CMD, "cpu", 1, false, &ctx) != NCTMC_OK)
        return NULL;
    nctmc_model *model = NULL;
    nctmc_tokenizer *tok = NULL;
    nctmc_status st = cli_load_model(ctx, path, no_mmap, &model);
    if (st != NCTMC_OK)
        cli_fail(CMD, path, st, nctmc_context_last_error(ctx));
    else if (!nctmc_model_get_tokenizer(model))
        cli_error(CMD, "%s: the checkpoint has no tokenizer", path);
    else if (!(tok = cli_model_tokenizer(model)))
        cli_error(CMD, "out of memory copying the tokenizer");
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    return tok;
}

static nctmc_tokenizer *open_tokenizer(const char *path, const char *merges, bool no_mmap)
{
    nctmc_tokenizer *tok = NULL;
    source_kind kind = SOURCE_JSON;
    if (!merges && !sniff(path, &kind))
        return NULL;
    if (kind == SOURCE_CHECKPOINT)
        return checkpoint_tokenizer(path, no_mmap);
    nctmc_context *ctx = NULL;
    if (cli_context_create(CMD, "cpu", 1, false, &ctx) != NCTMC_OK)
        return NULL;
    nctmc_status st = merges ? nctmc_tokenizer_load_gpt2(ctx, path, merges, &tok)
                      : kind == SOURCE_JSON ? nctmc_tokenizer_load_hf_json(ctx, path, &tok)
                                            : nctmc_tokenizer_load(ctx, path, &tok);
    if (st != NCTMC_OK)
        cli_fail(CMD, merges ? "cannot load the GPT-2 files" : path, st,
                 nctmc_context_last_error(ctx));
    nctmc_context_free(ctx);
    return tok;
}

/* Writes ids separated by spaces, a newline at the end. */
static bool print_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    return fflush(stdout) == 0 && !ferror(stdout);
}

static int encode(nctmc_tokenizer *tok, const char *text, size_t len)
{
    size_t cap = len + 1, need = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    nctmc_status st = ids ? nctmc_tokenizer_encode(tok, text, len, ids, cap, &need)
                          : NCTMC_ERR_OUT_OF_MEMORY;
    if (st == NCTMC_ERR_INVALID_ARGUMENT && need > cap) { /* more tokens than bytes */
        int32_t *bigger = realloc(ids, need * sizeof *ids);
        st = bigger ? nctmc_tokenizer_encode(tok, text, len, bigger, need, &need)
                    : NCTMC_ERR_OUT_OF_MEMORY;
        ids = bigger ? bigger : ids;
    }
    int rc = 0;
    if (st != NCTMC_OK)
        rc = cli_fail(CMD, "cannot encode the text", st, nctmc_tokenizer_last_error(tok));
    else if (!print_ids(ids, need))
        rc = cli_fail(CMD, "cannot write the ids", NCTMC_ERR_IO, strerror(errno));
    free(ids);
    return rc;
}

/* Whitespace-separated decimal ids (an optional '-': decoding names the
 * bad id); anything else is an error naming the byte offset. */
static bool parse_ids(const char *text, size_t len, int32_t **out, size_t *n)
{
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    size_t count = 0;
    if (!ids) {
        cli_error(CMD, "out of memory");
        return false;
    }
    for (size_t at = 0; at < len;) {
        if (strchr(" \t\r\n", text[at])) {
            at++;
            continue;
        }
        char *end = NULL;
        errno = 0;
        long v = strtol(text + at, &end, 10);
        if (end == text + at || errno != 0 || v < INT32_MIN || v > INT32_MAX ||
            (*end && !strchr(" \t\r\n", *end)) || !((text[at] >= '0' && text[at] <= '9') ||
                                                   text[at] == '-')) {
            cli_error(CMD, "byte offset %zu of the input is not a token id", at);
            free(ids);
            return false;
        }
        ids[count++] = (int32_t)v;
        at = (size_t)(end - text);
    }
    *out = ids;
    *n = count;
    return true;
}

static int decode(nctmc_tokenizer *tok, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0, need = 0;
    if (!parse_ids(text, len, &ids, &n))
        return 1;
    int rc = 0;
    nctmc_status st = nctmc_tokenizer_decode(tok, ids, n, NULL, 0, &need);
    char *out = st == NCTMC_OK ? malloc(need + 1) : NULL;
    if (st == NCTMC_OK && !out)
        st = NCTMC_ERR_OUT_OF_MEMORY;
    if (st == NCTMC_OK)
        st = nctmc_tokenizer_decode(tok, ids, n, out, need + 1, &need);
    if (st != NCTMC_OK)
        rc = cli_fail(CMD, "cannot decode the ids", st, nctmc_tokenizer_last_error(tok));
    /* the bytes as they are: a script compares them with the original */
    else if (fwrite(out, 1, need, stdout) != need || fflush(stdout) != 0)
        rc = cli_fail(CMD, "cannot write the text", NCTMC_ERR_IO, strerror(errno));
    free(out);
    free(ids);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *tokenizer = NULL, *merges = NULL;
    bool decode_ids = false, no_mmap = false;
    cli_option options[] = {
        CLI_OPT_STRING("--tokenizer", tokenizer, "FILE",
                       "tokenizer.json (Hugging Face), vocab.json (with --merges), a "
                       "tokenizer file of `nctmc prepare`, or a checkpoint"),
        CLI_OPT_STRING("--merges", merges, "FILE",
                       "GPT-2's merges.txt; --tokenizer is then its vocab.json"),
        CLI_OPT_FLAG("--decode", decode_ids,
                     "read whitespace-separated ids, write the text (its exact bytes)"),
        CLI_OPT_FLAG("--no-mmap", no_mmap, CLI_NO_MMAP_HELP),
    };
    cli_command cmd = {
        CMD, "--tokenizer FILE [options] [INPUT]",
        "Encodes INPUT (a file, or standard input when absent or \"-\") and prints\n"
        "the token ids separated by spaces; with --decode the reverse.",
        "  nctmc tokenize --tokenizer tokenizer.json notes.txt\n"
        "  nctmc tokenize --tokenizer vocab.json --merges merges.txt notes.txt\n"
        "  echo 15496 995 | nctmc tokenize --tokenizer tokenizer.json --decode\n"
        "  nctmc tokenize --tokenizer model.safetensors notes.txt\n",
        0, 1, options, sizeof options / sizeof options[0]};
    const char *input = NULL;
    int n_pos = 0;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, &input, &n_pos);
    if (parsed != CLI_PARSE_OK)
        return parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    if (!tokenizer)
        return cli_usage_error(&cmd, "--tokenizer FILE is required");
    if (n_pos == 0 || strcmp(input, "-") == 0)
        input = "/dev/stdin";
    nctmc_tokenizer *tok = open_tokenizer(tokenizer, merges, no_mmap);
    if (!tok)
        return 1;
    char *text = NULL;
    size_t len = 0;
    int rc = 1;
    if (cli_read_file(CMD, input, &text, &len))
        rc = decode_ids ? decode(tok, text, len) : encode(tok, text, len);
    free(text);
    nctmc_tokenizer_free(tok);
    return rc;
}
