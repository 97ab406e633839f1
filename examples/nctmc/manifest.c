/*
 * manifest.c — write and check manifest.txt (manifest.h). A line-oriented
 * text file, like tokenizer.txt: readers need no JSON parser and skip the
 * lines they do not know.
 */
#include "manifest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_platform.h"

#define MANIFEST_MAGIC "nctmc-manifest 1"

/* FNV-1a, 64 bits: a content hash of the tokenizer file. */
static uint64_t fnv1a64(const char *data, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)data[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool hash_file(const char *cmd, const char *path, uint64_t *h)
{
    char *data = NULL;
    size_t n = 0;
    if (!cli_read_file(cmd, path, &data, &n))
        return false;
    *h = fnv1a64(data, n);
    free(data);
    return true;
}

/* Paths and lines as one token: bytes below 0x21, 0x7f and '\' as \xNN. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == 0x7f || c == '\\')
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
}

static void put_shard(FILE *f, const manifest_shard *s)
{
    fprintf(f, "shard %s tokens=%" PRId64 " seq_len=%d sequences=%" PRId64 " vocab=%d "
            "crc32=%08" PRIx32 " documents=%" PRId64 "\n",
            s->name, s->info.n_tokens, (int)s->info.seq_len, s->info.n_sequences,
            (int)s->info.vocab_size, s->info.checksum, s->documents);
}

static void put_body(FILE *f, const manifest_info *m, uint64_t tok_hash)
{
    fprintf(f, "%s\n", MANIFEST_MAGIC);
    fprintf(f, "tokenizer %s fnv1a64=%016" PRIx64 "\n", CLI_TOKENIZER_FILE, tok_hash);
    for (int i = 0; i < m->n_shards; i++)
        put_shard(f, &m->shards[i]);
    fprintf(f, "input %s", m->input);
    if (m->input_arg) {
        fputc(' ', f);
        put_escaped(f, m->input_arg);
    }
    fprintf(f, "\nsplit val_fraction=%g seq_len=%d dropped_tokens=%" PRId64 "\n",
            m->val_fraction, (int)m->seq_len, m->dropped_tokens);
    fprintf(f, "separator %zu", m->n_separator);
    for (size_t i = 0; i < m->n_separator; i++)
        fprintf(f, " %d", (int)m->separator[i]);
    fputc('\n', f);
    if (m->stats)
        fprintf(f, "counts input_bytes=%" PRId64 " documents=%" PRId64 " segments=%" PRId64
                " bad_lines=%" PRId64 "\n",
                m->stats->bytes_read, m->stats->documents, m->stats->segments,
                m->stats->bad_lines);
    for (int i = 0; i < m->n_files; i++) {
        fprintf(f, "source %" PRId64 " ", m->files[i].size);
        put_escaped(f, m->files[i].path);
        fputc('\n', f);
    }
}

bool manifest_write(const char *cmd, nctmc_context *ctx, const char *dir, const char *shown,
                    const manifest_info *m)
{
    char *tok_path = cli_path_join(dir, CLI_TOKENIZER_FILE);
    char *path = cli_path_join(dir, CLI_MANIFEST_FILE);
    char *final = cli_path_join(shown, CLI_MANIFEST_FILE);
    uint64_t h = 0;
    char *text = NULL;
    size_t len = 0;
    bool ok = tok_path && path && final && hash_file(cmd, tok_path, &h);
    cli_mem mem;
    FILE *f = ok ? cli_mem_open(&mem) : NULL;
    if (f != NULL) {
        put_body(f, m, h);
        ok = cli_mem_close(&mem, &text, &len);
    } else {
        ok = false;
    }
    nctmc_status st = ok ? nctmc_write_file(ctx, path, text, len) : NCTMC_ERR_OUT_OF_MEMORY;
    if (st != NCTMC_OK)
        cli_fail(cmd, final ? final : CLI_MANIFEST_FILE, st, nctmc_context_last_error(ctx));
    else
        cli_printf(stdout, "  %-12s %d shard%s, %d source%s  %s\n", CLI_MANIFEST_FILE,
                   m->n_shards, m->n_shards == 1 ? "" : "s", m->n_files,
                   m->n_files == 1 ? "" : "s", final);
    free(text);
    free(tok_path);
    free(path);
    free(final);
    return st == NCTMC_OK;
}

/* ---- checking ---------------------------------------------------------------- */

typedef struct listed_shard {
    char name[32];
    int64_t tokens;
    uint32_t crc;
} listed_shard;

static bool check_tokenizer_line(const char *cmd, const char *dir, const char *line)
{
    char name[64];
    uint64_t want = 0, have = 0;
    if (sscanf(line, "tokenizer %63s fnv1a64=%" SCNx64, name, &want) != 2 ||
        strcmp(name, CLI_TOKENIZER_FILE) != 0) {
        cli_error(cmd, "%s/%s: a bad tokenizer line", dir, CLI_MANIFEST_FILE);
        return false;
    }
    char *path = cli_path_join(dir, CLI_TOKENIZER_FILE);
    bool ok = path && hash_file(cmd, path, &have);
    if (ok && have != want) {
        cli_error(cmd, "%s does not match %s/%s (its hash differs): the directory mixes "
                  "files of two runs, or the tokenizer was changed",
                  path, dir, CLI_MANIFEST_FILE);
        ok = false;
    }
    free(path);
    return ok;
}

static bool check_shard(const char *cmd, nctmc_context *ctx, const char *dir,
                        const listed_shard *s)
{
    char *path = cli_path_join(dir, s->name);
    nctmc_dataset *ds = NULL;
    bool ok = path != NULL;
    nctmc_status st = ok ? nctmc_dataset_open(ctx, path, &ds) : NCTMC_ERR_OUT_OF_MEMORY;
    if (ok && st != NCTMC_OK) {
        cli_fail(cmd, path, st, nctmc_context_last_error(ctx));
        ok = false;
    }
    nctmc_dataset_info info;
    nctmc_dataset_info_init(&info);
    if (ok && nctmc_dataset_get_info(ds, &info) == NCTMC_OK &&
        (info.n_tokens != s->tokens || info.checksum != s->crc)) {
        cli_error(cmd, "%s does not match %s/%s (%lld tokens, checksum %08x; the manifest "
                  "says %lld, %08x): the directory mixes files of two runs",
                  path, dir, CLI_MANIFEST_FILE, (long long)info.n_tokens,
                  (unsigned)info.checksum, (long long)s->tokens, (unsigned)s->crc);
        ok = false;
    }
    nctmc_dataset_free(ds);
    free(path);
    return ok;
}

/* A shard file in dir that the manifest does not list. */
static bool unlisted(const char *cmd, const char *dir, const listed_shard *l, int n)
{
    static const char *const names[] = {CLI_TRAIN_SHARD, CLI_VAL_SHARD};
    for (int k = 0; k < 2; k++) {
        bool listed = false;
        for (int i = 0; i < n; i++)
            listed |= strcmp(l[i].name, names[k]) == 0;
        char *path = cli_path_join(dir, names[k]);
        bool there = path && cli_file_exists(path);
        free(path);
        if (there && !listed) {
            cli_error(cmd, "%s/%s is not in %s/%s: the directory mixes files of two runs",
                      dir, names[k], dir, CLI_MANIFEST_FILE);
            return true;
        }
    }
    return false;
}

static bool parse_lines(const char *cmd, const char *dir, char *text, listed_shard *l,
                        int *n_listed, bool *tok_ok)
{
    *n_listed = 0;
    bool ok = true, first = true;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); ok && line;
         line = strtok_r(NULL, "\n", &save), first = false) {
        if (first) {
            ok = strcmp(line, MANIFEST_MAGIC) == 0;
            if (!ok)
                cli_error(cmd, "%s/%s is not a manifest this version reads", dir,
                          CLI_MANIFEST_FILE);
        } else if (strncmp(line, "tokenizer ", 10) == 0) {
            ok = *tok_ok = check_tokenizer_line(cmd, dir, line);
        } else if (strncmp(line, "shard ", 6) == 0) {
            listed_shard *s = &l[*n_listed];
            unsigned crc = 0;
            long long tokens = 0;
            ok = *n_listed < 2 && sscanf(line, "shard %31s tokens=%lld", s->name, &tokens) == 2;
            const char *c = strstr(line, " crc32=");
            ok = ok && c && sscanf(c, " crc32=%x", &crc) == 1 &&
                 (strcmp(s->name, CLI_TRAIN_SHARD) == 0 || strcmp(s->name, CLI_VAL_SHARD) == 0);
            if (!ok)
                cli_error(cmd, "%s/%s: a bad shard line", dir, CLI_MANIFEST_FILE);
            s->tokens = tokens;
            s->crc = crc;
            (*n_listed)++;
        }
    }
    return ok;
}

bool manifest_check(const char *cmd, nctmc_context *ctx, const char *dir)
{
    char *path = cli_path_join(dir, CLI_MANIFEST_FILE);
    if (!path)
        return false;
    struct stat st;
    if (stat(path, &st) != 0) {
        free(path);
        return true; /* an older prepare: nothing to check against */
    }
    char *text = NULL;
    size_t n = 0;
    bool ok = cli_read_file(cmd, path, &text, &n);
    free(path);
    if (!ok)
        return false;
    listed_shard listed[2];
    int n_listed = 0;
    bool tok_ok = false;
    ok = parse_lines(cmd, dir, text, listed, &n_listed, &tok_ok);
    free(text);
    if (ok && !tok_ok) {
        cli_error(cmd, "%s/%s names no tokenizer", dir, CLI_MANIFEST_FILE);
        ok = false;
    }
    for (int i = 0; ok && i < n_listed; i++)
        ok = check_shard(cmd, ctx, dir, &listed[i]);
    return ok && !unlisted(cmd, dir, listed, n_listed);
}
