/*
 * paths.c — what the tool checks about its file arguments before any work
 * starts (an output that cannot be written is found before a training run,
 * not after it; an output never replaces one of the command's inputs), and
 * the escaping of text from files before it reaches the terminal.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_platform.h"

/* ---- escaping ------------------------------------------------------------- */

/* The length of the valid UTF-8 character at s (n bytes left), or 0. */
static size_t utf8_char(const unsigned char *s, size_t n, unsigned long *cp)
{
    unsigned char b = s[0];
    size_t len = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                          : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    unsigned long v = len == 1 ? b : b & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    static const unsigned long min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

size_t cli_escape(char *out, size_t size, const char *text, bool keep_newlines)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), at = 0;
    for (size_t i = 0; i < n;) {
        unsigned long cp = 0;
        size_t len = utf8_char(s + i, n - i, &cp);
        bool layout = keep_newlines && (cp == '\n' || cp == '\t');
        bool plain = len > 0 && (layout || (cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp <= 0x9F)));
        size_t take = len > 0 ? len : 1;
        size_t need = plain ? take : 4 * take;
        if (at + need >= size)
            break;
        for (size_t k = 0; k < take; k++) {
            if (plain) {
                out[at++] = (char)s[i + k];
            } else {
                out[at++] = '\\';
                out[at++] = 'x';
                out[at++] = hex[s[i + k] >> 4];
                out[at++] = hex[s[i + k] & 15];
            }
        }
        i += take;
    }
    if (size > 0)
        out[at] = '\0';
    return at;
}

void cli_write_escaped(FILE *out, const char *text, bool keep_newlines)
{
    /* worst case: every byte becomes four */
    size_t size = 4 * strlen(text) + 1;
    char *buf = malloc(size);
    if (buf == NULL)
        return;
    cli_escape(buf, size, text, keep_newlines);
    fputs(buf, out);
    free(buf);
}

void cli_vprintf(FILE *out, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char small[1024];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    char *text = small;
    if (n >= (int)sizeof small) {
        text = malloc((size_t)n + 1);
        if (text != NULL)
            vsnprintf(text, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    if (n >= 0 && text != NULL)
        cli_write_escaped(out, text, true);
    if (text != small)
        free(text);
}

void cli_printf(FILE *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vprintf(out, fmt, ap);
    va_end(ap);
}

/* ---- output paths ---------------------------------------------------------- */

/* The directory part of path ("." for a bare name), malloc'd. */
static char *parent_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir != NULL) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

/* That a new entry can be made in dir: it exists, is a directory, and we
 * may write and search it. */
static bool check_writable_dir(const char *cmd, const char *flag, const char *path,
                               const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        cli_error(cmd, "%s %s: directory %s: %s", flag, path, dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        cli_error(cmd, "%s %s: %s is not a directory", flag, path, dir);
        return false;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        cli_error(cmd, "%s %s: cannot write into directory %s: %s", flag, path, dir,
                  strerror(errno));
        return false;
    }
    return true;
}

bool cli_same_file(const char *a, const char *b)
{
    return cli_plat_same_file(a, b);
}

bool cli_check_output_file(const char *cmd, const char *flag, const char *path,
                           const char *const *inputs, int n_inputs)
{
    if (path == NULL || path[0] == '\0') {
        cli_error(cmd, "%s: the path is empty", flag);
        return false;
    }
    struct stat st;
    char *target = NULL;
    if (cli_plat_lstat(path, &st) == 0) {
        /* the library writes through a symbolic link to its target */
        target = cli_plat_realpath(path);
        if (target == NULL || stat(target, &st) != 0) {
            cli_error(cmd, "%s %s: a symbolic link to nothing", flag, path);
            free(target);
            return false;
        }
        if (!S_ISREG(st.st_mode)) {
            cli_error(cmd, "%s %s: %s, not a regular file; refusing to replace it", flag, path,
                      S_ISDIR(st.st_mode) ? "a directory" : "a FIFO, device or socket");
            free(target);
            return false;
        }
    } else if (errno != ENOENT) {
        cli_error(cmd, "%s %s: %s", flag, path, strerror(errno));
        return false;
    }
    char *dir = parent_of(target != NULL ? target : path);
    bool ok = dir != NULL && check_writable_dir(cmd, flag, path, dir);
    for (int i = 0; ok && i < n_inputs; i++) {
        if (inputs[i] != NULL && cli_same_file(path, inputs[i])) {
            cli_error(cmd, "%s %s is the input %s; refusing to overwrite it", flag, path,
                      inputs[i]);
            ok = false;
        }
    }
    free(dir);
    free(target);
    return ok;
}

bool cli_check_input_file(const char *cmd, const char *what, const char *path)
{
    struct stat st;
    if (path == NULL || path[0] == '\0') {
        cli_error(cmd, "%s: the path is empty", what);
        return false;
    }
    if (stat(path, &st) != 0) {
        cli_error(cmd, "%s %s: %s", what, path, strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        cli_error(cmd, "%s %s: not a regular file", what, path);
        return false;
    }
    return true;
}
