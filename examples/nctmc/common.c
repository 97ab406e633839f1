/*
 * common.c — helpers every subcommand uses: contexts with a log that
 * respects the progress bar, error messages, files, encode/decode.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "cli_platform.h"
#include "progress.h"

const char *const cli_process_names[] = {"uniform", "masked", "mixture", NULL};
const char *const cli_schedule_names[] = {"linear", "cosine", "loglinear", NULL};
const char *const cli_time_input_names[] = {"t", "log_snr", NULL};
const char *const cli_exit_link_names[] = {"sigma", "noise_posterior", "denoiser", NULL};
const char *const cli_time_sampling_names[] = {"uniform", "logit", "sqrt", NULL};
const char *const cli_tokenizer_names[] = {"bytes", "chars", "image", "bpe", NULL};

void cli_error(const char *cmd, const char *fmt, ...)
{
    /* a message is one line: newlines in what it quotes are escaped too */
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    progress_clear_line();
    fprintf(stderr, "nctmc %s: ", cmd);
    cli_write_escaped(stderr, text, false);
    fputc('\n', stderr);
}

int cli_fail(const char *cmd, const char *what, nctmc_status status, const char *detail)
{
    if (detail != NULL && detail[0] != '\0')
        cli_error(cmd, "%s: %s (%s)", what, detail, nctmc_status_string(status));
    else
        cli_error(cmd, "%s: %s", what, nctmc_status_string(status));
    return 1;
}

static void log_to_stderr(nctmc_log_level level, const char *message, void *user_data)
{
    static const char *const level_names[] = {"debug", "info", "warning", "error"};
    const char *cmd = user_data;
    const char *name = (unsigned)level < 4 ? level_names[level] : "log";
    progress_clear_line();
    fprintf(stderr, "nctmc %s: [%s] ", cmd, name);
    cli_write_escaped(stderr, message, false);
    fputc('\n', stderr);
}

nctmc_status cli_context_create(const char *cmd, const char *backend, int threads, bool verbose,
                                nctmc_context **out)
{
    nctmc_context_params params;
    nctmc_context_params_init(&params);
    params.backend = backend;
    params.n_threads = threads;
    params.log_fn = log_to_stderr;
    params.log_user_data = (void *)cmd;
    params.log_level = verbose ? NCTMC_LOG_INFO : NCTMC_LOG_WARN;
    nctmc_status st = nctmc_context_create(&params, out);
    /* the reason, if any, has gone through the log callback */
    if (st != NCTMC_OK)
        cli_fail(cmd, "cannot create the compute context", st, backend);
    return st;
}

bool cli_read_file(const char *cmd, const char *path, char **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        cli_error(cmd, "cannot open %s: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1)
            break;
        char *bigger = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (bigger == NULL)
            free(buf);
        buf = bigger;
        cap *= 2;
    }
    bool failed = buf == NULL || ferror(f);
    int saved_errno = errno;
    fclose(f);
    if (failed) {
        cli_error(cmd, "cannot read %s: %s", path,
                  buf == NULL ? "out of memory" : strerror(saved_errno));
        free(buf);
        return false;
    }
    buf[len] = '\0';
    *data = buf;
    *size = len;
    return true;
}

static bool is_directory(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* mkdir -p: each missing parent first, so `--out build/demo/digits` works
 * in a fresh build directory. */
bool cli_make_dir(const char *cmd, const char *path)
{
    if (path[0] == '\0') {
        cli_error(cmd, "cannot create a directory with an empty name");
        return false;
    }
    char *copy = strdup(path);
    if (copy == NULL)
        return false;
    bool ok = true;
    for (char *p = copy + 1; ok; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (cli_plat_mkdir(copy) != 0 && errno != EEXIST) {
            cli_error(cmd, "cannot create directory %s: %s", copy, strerror(errno));
            ok = false;
        } else if (saved == '\0' && !is_directory(copy)) {
            cli_error(cmd, "%s exists and is not a directory", copy);
            ok = false;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    free(copy);
    return ok;
}

char *cli_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *path = malloc(a + b + 2);
    if (path == NULL)
        return NULL;
    memcpy(path, dir, a);
    size_t at = a;
    if (a > 0 && dir[a - 1] != '/')
        path[at++] = '/';
    memcpy(path + at, name, b + 1);
    return path;
}

bool cli_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

bool cli_encode(const char *cmd, nctmc_tokenizer *tok, const char *text, size_t n_bytes,
                int32_t **tokens, size_t *n_tokens)
{
    size_t need = 0;
    nctmc_status st = nctmc_tokenizer_encode(tok, text, n_bytes, NULL, 0, &need);
    if (st != NCTMC_OK && st != NCTMC_ERR_INVALID_ARGUMENT) {
        cli_fail(cmd, "cannot encode text", st, nctmc_tokenizer_last_error(tok));
        return false;
    }
    int32_t *buf = malloc((need > 0 ? need : 1) * sizeof *buf);
    if (buf == NULL) {
        cli_error(cmd, "out of memory encoding %zu bytes", n_bytes);
        return false;
    }
    st = nctmc_tokenizer_encode(tok, text, n_bytes, buf, need, &need);
    if (st != NCTMC_OK) {
        free(buf);
        cli_fail(cmd, "cannot encode text", st, nctmc_tokenizer_last_error(tok));
        return false;
    }
    *tokens = buf;
    *n_tokens = need;
    return true;
}

/* A growing string for cli_decode(). */
typedef struct text_buffer {
    char *data;
    size_t len, cap;
} text_buffer;

static bool text_reserve(text_buffer *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL)
        return false;
    b->data = data;
    b->cap = cap;
    return true;
}

static nctmc_status decode_append(text_buffer *b, nctmc_tokenizer *tok, const int32_t *tokens,
                                  size_t n)
{
    size_t need = 0;
    nctmc_status st = nctmc_tokenizer_decode(tok, tokens, n, NULL, 0, &need);
    if (st != NCTMC_OK && st != NCTMC_ERR_INVALID_ARGUMENT)
        return st;
    if (!text_reserve(b, need))
        return NCTMC_ERR_OUT_OF_MEMORY;
    st = nctmc_tokenizer_decode(tok, tokens, n, b->data + b->len, b->cap - b->len, &need);
    if (st == NCTMC_OK)
        b->len += need;
    return st;
}

/* Text: valid runs decoded as they are, each foreign token shown as '_'. */
static nctmc_status decode_text_runs(text_buffer *b, nctmc_tokenizer *tok,
                                     const int32_t *tokens, size_t n)
{
    int32_t vocab = nctmc_tokenizer_vocab_size(tok);
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        bool foreign = i < n && (tokens[i] < 0 || tokens[i] >= vocab);
        if (i < n && !foreign)
            continue;
        if (i > start) {
            nctmc_status st = decode_append(b, tok, tokens + start, i - start);
            if (st != NCTMC_OK)
                return st;
        }
        if (foreign) {
            if (!text_reserve(b, 1))
                return NCTMC_ERR_OUT_OF_MEMORY;
            b->data[b->len++] = '_';
        }
        start = i + 1;
    }
    return NCTMC_OK;
}

/* Images: a foreign token becomes level 0 (the background), so the picture
 * keeps its shape. */
static nctmc_status decode_image(text_buffer *b, nctmc_tokenizer *tok, const int32_t *tokens,
                                 size_t n)
{
    int32_t vocab = nctmc_tokenizer_vocab_size(tok);
    int32_t *copy = malloc((n > 0 ? n : 1) * sizeof *copy);
    if (copy == NULL)
        return NCTMC_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++)
        copy[i] = tokens[i] >= 0 && tokens[i] < vocab ? tokens[i] : 0;
    nctmc_status st = decode_append(b, tok, copy, n);
    free(copy);
    return st;
}

char *cli_decode(const char *cmd, nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                 size_t *len)
{
    text_buffer b = {NULL, 0, 0};
    nctmc_status st = text_reserve(&b, 0) ? NCTMC_OK : NCTMC_ERR_OUT_OF_MEMORY;
    if (st == NCTMC_OK) {
        st = nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_IMAGE
                 ? decode_image(&b, tok, tokens, n)
                 : decode_text_runs(&b, tok, tokens, n);
    }
    if (st != NCTMC_OK) {
        cli_fail(cmd, "cannot decode tokens", st, nctmc_tokenizer_last_error(tok));
        free(b.data);
        return NULL;
    }
    b.data[b.len] = '\0';
    if (len)
        *len = b.len; /* a byte tokenizer's text may hold NUL bytes */
    return b.data;
}

nctmc_tokenizer *cli_model_tokenizer(const nctmc_model *model)
{
    const nctmc_tokenizer *own = nctmc_model_get_tokenizer(model);
    nctmc_tokenizer *copy = NULL;
    if (own != NULL && nctmc_tokenizer_clone(own, &copy) != NCTMC_OK)
        return NULL;
    return copy;
}

bool cli_looks_like_json(const char *head, size_t n)
{
    size_t i = 0;
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
        i++;
    return i < n && head[i] == '{';
}

nctmc_status cli_load_tokenizer_file(const char *cmd, nctmc_context *ctx, const char *path,
                                     nctmc_tokenizer **out)
{
    *out = NULL;
    /* 64 bytes: tokenizer.json may start with a little whitespace */
    char head[64] = {0};
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
        n = fread(head, 1, sizeof head, f);
        fclose(f);
    }
    /* an unreadable file goes to the loader, whose message says why */
    nctmc_status st = cli_looks_like_json(head, n) ? nctmc_tokenizer_load_hf_json(ctx, path, out)
                                                   : nctmc_tokenizer_load(ctx, path, out);
    if (st != NCTMC_OK)
        cli_fail(cmd, path, st, nctmc_context_last_error(ctx));
    return st;
}

void cli_describe_tokenizer(const nctmc_tokenizer *tok, char *buf, size_t size)
{
    if (tok == NULL) {
        snprintf(buf, size, "none");
        return;
    }
    nctmc_tokenizer_kind kind = nctmc_tokenizer_get_kind(tok);
    int32_t w = 0, h = 0, levels = 0;
    if (kind == NCTMC_TOKENIZER_IMAGE &&
        nctmc_tokenizer_image_shape(tok, &w, &h, &levels) == NCTMC_OK) {
        snprintf(buf, size, "image %dx%d, %d grey levels", (int)w, (int)h, (int)levels);
        return;
    }
    const char *name = (unsigned)kind < 4 ? cli_tokenizer_names[kind] : "unknown";
    snprintf(buf, size, "%s, %d tokens", name, (int)nctmc_tokenizer_vocab_size(tok));
}

void cli_describe_lr_schedule(const nctmc_trainer_params *p, char *buf, size_t size)
{
    if (p->min_lr_ratio == 1.0f)
        snprintf(buf, size, "warm-up %lld, then constant", (long long)p->warmup_steps);
    else
        snprintf(buf, size, "warm-up %lld, cosine to %g x over %lld steps",
                 (long long)p->warmup_steps, (double)p->min_lr_ratio,
                 (long long)p->total_steps);
}

const char *cli_time_sampling_name(nctmc_time_sampling mode)
{
    return mode >= 0 && mode < 3 ? cli_time_sampling_names[mode] : "unknown";
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
