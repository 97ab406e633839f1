/*
 * staged_dir.c — `nctmc prepare`'s output directory, replaced as a whole
 * (staged_dir.h): the files are written into a fresh sibling directory,
 * which then takes the place of the old one (cli_platform.h: in one
 * rename on Linux, in two on Windows).
 */
#include "staged_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_platform.h"
#include "manifest.h"

#define STAGING_TAG ".tmp-"
#define RANDOM_CHARS 6

static const char *const own_files[] = {CLI_TRAIN_SHARD, CLI_VAL_SHARD, CLI_TOKENIZER_FILE,
                                        CLI_MANIFEST_FILE};
enum { N_OWN_FILES = sizeof own_files / sizeof own_files[0] };

static bool is_random_suffix(const char *s)
{
    for (int i = 0; i < RANDOM_CHARS; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            return false;
    }
    return s[RANDOM_CHARS] == '\0';
}

/* `name` is prefix + STAGING_TAG + six random characters. */
static bool is_temp_name(const char *name, const char *prefix)
{
    size_t n = strlen(prefix), t = strlen(STAGING_TAG);
    return strncmp(name, prefix, n) == 0 && strncmp(name + n, STAGING_TAG, t) == 0 &&
           is_random_suffix(name + n + t);
}

/* One of the files prepare writes, or a temporary file the library's
 * writer left of one of them. */
static bool is_own_entry(const char *name)
{
    for (int i = 0; i < N_OWN_FILES; i++)
        if (strcmp(name, own_files[i]) == 0 || is_temp_name(name, own_files[i]))
            return true;
    return false;
}

/* The first entry of dir that prepare did not write, copied into `foreign`
 * (empty when there is none); false when dir cannot be read. */
static bool find_foreign_entry(const char *dir, char *foreign, size_t size)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return false;
    foreign[0] = '\0';
    for (struct dirent *e; foreign[0] == '\0' && (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            !is_own_entry(e->d_name))
            snprintf(foreign, size, "%s", e->d_name);
    closedir(d);
    return true;
}

/* Removes prepare's files from dir (others stay); then dir itself, if
 * remove_dir and it is empty. */
static void remove_own_files(const char *dir, bool remove_dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *path = is_own_entry(e->d_name) ? cli_path_join(dir, e->d_name) : NULL;
        if (path != NULL)
            unlink(path);
        free(path);
    }
    closedir(d);
    if (remove_dir)
        rmdir(dir);
}

/* dir/name as a new string. */
static char *join(const char *dir, const char *name)
{
    return cli_path_join(dir, name);
}

/* The path without trailing slashes (but "/" stays), malloc'd. */
static char *trim_slashes(const char *path)
{
    char *p = strdup(path);
    size_t n = p ? strlen(p) : 0;
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    return p;
}

/* Splits a trimmed path into its parent ("." for a bare name) and base. */
static char *parent_dir(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (slash == NULL)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    char *parent = malloc((size_t)(slash - path) + 1);
    if (parent != NULL) {
        memcpy(parent, path, (size_t)(slash - path));
        parent[slash - path] = '\0';
    }
    return parent;
}

/* ---- checks before the work ---------------------------------------------- */

/* The nearest existing ancestor of path must be a directory we can write
 * (the missing ones are created in it). */
static bool check_creatable(const char *cmd, const char *path)
{
    char *p = trim_slashes(path);
    bool ok = false;
    while (p != NULL) {
        const char *base;
        char *parent = parent_dir(p, &base);
        free(p);
        p = parent;
        if (p == NULL)
            break;
        struct stat st;
        if (stat(p, &st) == 0) {
            ok = S_ISDIR(st.st_mode) && cli_plat_can_write_dir(p);
            if (!ok)
                cli_error(cmd, "--out %s: cannot create it in %s (%s)", path, p,
                          S_ISDIR(st.st_mode) ? strerror(errno) : "not a directory");
            break;
        }
        if (errno != ENOENT || strcmp(p, ".") == 0 || strcmp(p, "/") == 0) {
            cli_error(cmd, "--out %s: %s: %s", path, p, strerror(errno));
            break;
        }
    }
    free(p);
    return ok;
}

bool staged_dir_check(const char *cmd, const char *out, const char *const *inputs, int n_inputs)
{
    if (out == NULL || out[0] == '\0') {
        cli_error(cmd, "--out: the directory name is empty");
        return false;
    }
    struct stat st;
    if (stat(out, &st) != 0)
        return errno == ENOENT ? check_creatable(cmd, out)
                               : (cli_error(cmd, "--out %s: %s", out, strerror(errno)), false);
    if (!S_ISDIR(st.st_mode)) {
        cli_error(cmd, "--out %s exists and is not a directory", out);
        return false;
    }
    /* the whole directory is replaced: it may hold only what prepare
     * writes, and none of that may be an input */
    char foreign[256];
    if (!find_foreign_entry(out, foreign, sizeof foreign)) {
        cli_error(cmd, "--out %s: cannot read it: %s", out, strerror(errno));
        return false;
    }
    if (foreign[0] != '\0') {
        cli_error(cmd, "--out %s holds %s, which prepare did not write; prepare replaces the "
                  "whole directory, so give it a new or empty one", out, foreign);
        return false;
    }
    bool ok = true;
    for (int k = 0; ok && k < N_OWN_FILES; k++) {
        char *own = join(out, own_files[k]);
        for (int i = 0; ok && own != NULL && i < n_inputs; i++) {
            if (cli_same_file(inputs[i], own)) {
                cli_error(cmd, "the input %s is %s in --out %s, which prepare replaces",
                          inputs[i], own_files[k], out);
                ok = false;
            }
        }
        free(own);
    }
    char *parent = NULL;
    char *real = ok ? cli_plat_realpath(out) : NULL;
    if (ok && real != NULL) {
        const char *base;
        parent = parent_dir(real, &base);
        if (parent == NULL || strcmp(real, "/") == 0 || !cli_plat_can_write_dir(parent)) {
            cli_error(cmd, "--out %s: cannot replace it in %s", out, parent ? parent : "/");
            ok = false;
        }
    }
    free(parent);
    free(real);
    return ok;
}

/* ---- stale staging directories --------------------------------------------- */

/* A prepare killed before its rename leaves "<dir>.tmp-XXXXXX" behind. The
 * next prepare into the same directory removes such a directory only when
 * nobody can still be writing it — the rule of the library's writer
 * (lib/io/file_io.c): our exact name pattern, a real directory (not a link)
 * owned by us, older than our own, holding only prepare's files, and not
 * held (each prepare holds its staging directory, cli_platform.h,
 * until the rename; the kernel drops it when the process dies). */
static void remove_if_stale(const char *parent, const char *name, const cli_dir_lock *own)
{
    char *path = join(parent, name);
    char foreign[256];
    cli_dir_lock lock;
    if (path != NULL && cli_dir_lock_if_stale(path, own, &lock)) {
        if (find_foreign_entry(path, foreign, sizeof foreign) && foreign[0] == '\0') {
            cli_dir_unlock(&lock); /* Windows removes no held directory */
            remove_own_files(path, true);
        }
        cli_dir_unlock(&lock);
    }
    free(path);
}

/* Windows only (cli_dir_aside_tag): "<dir>.old-XXXXXX" is an old directory
 * that a prepare killed inside its commit left aside. If <dir> is missing,
 * the prepare died between its two renames: the old directory goes back.
 * Otherwise the new one is in place and the old one is removed (if it
 * holds only prepare's files). */
static void recover_aside(const char *parent, const char *name, const char *final)
{
    char *path = join(parent, name);
    struct stat st;
    char foreign[256];
    cli_dir_lock none = {-1};
    if (path != NULL && cli_plat_lstat(final, &st) != 0 && errno == ENOENT)
        cli_dir_rename(path, final, &none);
    else if (path != NULL && find_foreign_entry(path, foreign, sizeof foreign) &&
             foreign[0] == '\0')
        remove_own_files(path, true);
    free(path);
}

/* `name` is prefix + tag + six random characters. */
static bool is_tagged_name(const char *name, const char *prefix, const char *tag)
{
    size_t n = strlen(prefix), t = strlen(tag);
    return strncmp(name, prefix, n) == 0 && strncmp(name + n, tag, t) == 0 &&
           is_random_suffix(name + n + t);
}

static void clean_stale(const staged_dir *sd)
{
    const char *base;
    char *parent = parent_dir(sd->final, &base);
    DIR *d = parent ? opendir(parent) : NULL;
    const char *own_name = strrchr(sd->staging, '/') + 1;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (is_temp_name(e->d_name, base) && strcmp(e->d_name, own_name) != 0)
            remove_if_stale(parent, e->d_name, &sd->lock);
        else if (cli_dir_aside_tag != NULL && is_tagged_name(e->d_name, base, cli_dir_aside_tag))
            recover_aside(parent, e->d_name, sd->final);
    }
    if (d != NULL)
        closedir(d);
    free(parent);
}

/* ---- the staged directory --------------------------------------------------- */

/* The canonical path of out (which may not exist yet; its parents are
 * created), so that a symbolic link to the directory stays a link. */
static char *canonical_out(const char *cmd, const char *out)
{
    char *trimmed = trim_slashes(out);
    if (trimmed == NULL)
        return NULL;
    char *real = cli_plat_realpath(trimmed);
    if (real != NULL) {
        free(trimmed);
        return real;
    }
    const char *base;
    char *parent = parent_dir(trimmed, &base);
    char *result = NULL;
    if (parent != NULL && cli_make_dir(cmd, parent)) {
        char *real_parent = cli_plat_realpath(parent);
        result = real_parent ? join(real_parent, base) : NULL;
        free(real_parent);
    }
    free(parent);
    free(trimmed);
    return result;
}

bool staged_dir_begin(const char *cmd, const char *out, staged_dir *sd)
{
    sd->staging = NULL;
    sd->lock.handle = -1;
    sd->final = canonical_out(cmd, out);
    if (sd->final == NULL) {
        cli_error(cmd, "--out %s: cannot find or create its parent directory", out);
        return false;
    }
    size_t n = strlen(sd->final);
    sd->staging = malloc(n + sizeof STAGING_TAG + RANDOM_CHARS);
    for (int attempt = 0; sd->staging != NULL && attempt < 8 && sd->lock.handle == -1;
         attempt++) {
        snprintf(sd->staging, n + sizeof STAGING_TAG + RANDOM_CHARS, "%s" STAGING_TAG "XXXXXX",
                 sd->final);
        if (cli_dir_make_locked(sd->staging, &sd->lock) < 0)
            break;
    }
    if (sd->lock.handle == -1) {
        cli_error(cmd, "cannot create a directory next to %s: %s", sd->final, strerror(errno));
        free(sd->staging);
        free(sd->final);
        sd->staging = sd->final = NULL;
        return false;
    }
    cli_dir_copy_mode(&sd->lock, sd->final);
    clean_stale(sd);
    return true;
}

/* Puts the staging directory in the place of an existing final one. Where
 * the system swaps both in one step (Linux) readers see the old directory
 * or the new one; on Windows the old one is renamed aside first and
 * readers may briefly find no directory; elsewhere the old files are
 * removed first and readers may briefly find it empty — never a mixture
 * of two runs. */
static int replace_existing(const char *cmd, staged_dir *sd)
{
    char *old = NULL;
    int rc = cli_dir_exchange(sd->staging, sd->final, &sd->lock, &old);
    if (rc == 0) {
        if (old != NULL)
            remove_own_files(old, true); /* the old directory */
        struct stat st;
        if (old == NULL || cli_plat_lstat(old, &st) == 0) /* someone put a file there meanwhile */
            cli_error(cmd, "note: the previous %s held files prepare did not write; it is "
                      "kept as %s", sd->final, old ? old : sd->staging);
        free(old);
        return 0;
    }
    if (rc < 0)
        return -1;
    remove_own_files(sd->final, false);
    return cli_dir_rename(sd->staging, sd->final, &sd->lock);
}

bool staged_dir_commit(const char *cmd, staged_dir *sd)
{
    /* the files are on disk (the library fsyncs each); so must be their
     * directory entries before the directory takes the final name */
    cli_dir_sync(&sd->lock);
    struct stat st;
    int rc = cli_plat_lstat(sd->final, &st) == 0
                 ? replace_existing(cmd, sd)
                 : cli_dir_rename(sd->staging, sd->final, &sd->lock);
    if (rc != 0) {
        cli_error(cmd, "cannot put %s in place of %s: %s", sd->staging, sd->final,
                  strerror(errno));
        staged_dir_abort(sd);
        return false;
    }
    const char *base;
    char *parent = parent_dir(sd->final, &base);
    if (parent != NULL)
        cli_dir_sync_path(parent);
    free(parent);
    cli_dir_unlock(&sd->lock);
    free(sd->staging);
    free(sd->final);
    sd->staging = sd->final = NULL;
    return true;
}

void staged_dir_abort(staged_dir *sd)
{
    cli_dir_unlock(&sd->lock); /* Windows removes no held directory */
    if (sd->staging != NULL)
        remove_own_files(sd->staging, true);
    free(sd->staging);
    free(sd->final);
    sd->staging = sd->final = NULL;
}
