/*
 * staged_dir.c — `nctmc prepare`'s output directory, replaced as a whole
 * (staged_dir.h): the files are written into a fresh sibling directory,
 * which then takes the place of the old one in one rename.
 */
/* renameat2() and RENAME_EXCHANGE (Linux, glibc >= 2.28); realpath(). */
#define _GNU_SOURCE

#include "staged_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
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
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (is_own_entry(e->d_name))
            unlinkat(dirfd(d), e->d_name, 0);
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
    return slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
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
            ok = S_ISDIR(st.st_mode) && access(p, W_OK | X_OK) == 0;
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
    char *real = ok ? realpath(out, NULL) : NULL;
    if (ok && real != NULL) {
        const char *base;
        parent = parent_dir(real, &base);
        if (parent == NULL || strcmp(real, "/") == 0 || access(parent, W_OK | X_OK) != 0) {
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
 * locked (each prepare holds an exclusive flock() on its staging directory
 * until the rename; the kernel drops it when the process dies). */
static void remove_if_stale(const char *parent, const char *name, const struct stat *own)
{
    char *path = join(parent, name);
    struct stat st;
    char foreign[256];
    int fd = -1;
    if (path != NULL && lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == geteuid() &&
        (st.st_mtim.tv_sec < own->st_mtim.tv_sec ||
         (st.st_mtim.tv_sec == own->st_mtim.tv_sec && st.st_mtim.tv_nsec < own->st_mtim.tv_nsec)) &&
        find_foreign_entry(path, foreign, sizeof foreign) && foreign[0] == '\0' &&
        (fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
        flock(fd, LOCK_EX | LOCK_NB) == 0)
        remove_own_files(path, true);
    if (fd >= 0)
        close(fd);
    free(path);
}

static void clean_stale(const staged_dir *sd)
{
    struct stat own;
    const char *base;
    char *parent = parent_dir(sd->final, &base);
    DIR *d = parent && fstat(sd->lock_fd, &own) == 0 ? opendir(parent) : NULL;
    const char *own_name = strrchr(sd->staging, '/') + 1;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        if (is_temp_name(e->d_name, base) && strcmp(e->d_name, own_name) != 0)
            remove_if_stale(parent, e->d_name, &own);
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
    char *real = realpath(trimmed, NULL);
    if (real != NULL) {
        free(trimmed);
        return real;
    }
    const char *base;
    char *parent = parent_dir(trimmed, &base);
    char *result = NULL;
    if (parent != NULL && cli_make_dir(cmd, parent)) {
        char *real_parent = realpath(parent, NULL);
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
    sd->lock_fd = -1;
    sd->final = canonical_out(cmd, out);
    if (sd->final == NULL) {
        cli_error(cmd, "--out %s: cannot find or create its parent directory", out);
        return false;
    }
    size_t n = strlen(sd->final);
    sd->staging = malloc(n + sizeof STAGING_TAG + RANDOM_CHARS);
    for (int attempt = 0; sd->staging != NULL && attempt < 8 && sd->lock_fd < 0; attempt++) {
        snprintf(sd->staging, n + sizeof STAGING_TAG + RANDOM_CHARS, "%s" STAGING_TAG "XXXXXX",
                 sd->final);
        if (mkdtemp(sd->staging) == NULL)
            break;
        /* locked, and still ours: another prepare's cleanup could have
         * taken it in the instant before the lock (see remove_if_stale) */
        int fd = open(sd->staging, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat mine, named;
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &mine) == 0 &&
            lstat(sd->staging, &named) == 0 && mine.st_ino == named.st_ino &&
            mine.st_dev == named.st_dev)
            sd->lock_fd = fd;
        else if (fd >= 0)
            close(fd);
    }
    if (sd->lock_fd < 0) {
        cli_error(cmd, "cannot create a directory next to %s: %s", sd->final, strerror(errno));
        free(sd->staging);
        free(sd->final);
        sd->staging = sd->final = NULL;
        return false;
    }
    /* mkdtemp makes it private (0700); the directory it replaces keeps its
     * mode, a new one gets mkdir's */
    struct stat old;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(sd->lock_fd, stat(sd->final, &old) == 0 && S_ISDIR(old.st_mode)
                            ? old.st_mode & 07777
                            : 0777 & ~mask);
    clean_stale(sd);
    return true;
}

/* Puts the staging directory in the place of an existing final one. With
 * RENAME_EXCHANGE both swap in one step and readers see the old directory
 * or the new one; elsewhere the old files are removed first and readers
 * may briefly find the directory empty — never a mixture of two runs. */
static int replace_existing(const char *cmd, const staged_dir *sd)
{
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, sd->staging, AT_FDCWD, sd->final, RENAME_EXCHANGE) == 0) {
        remove_own_files(sd->staging, true); /* now the old directory */
        struct stat st;
        if (lstat(sd->staging, &st) == 0) /* someone put a file there meanwhile */
            cli_error(cmd, "note: the previous %s held files prepare did not write; it is "
                      "kept as %s", sd->final, sd->staging);
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
#endif
    remove_own_files(sd->final, false);
    return rename(sd->staging, sd->final);
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

bool staged_dir_commit(const char *cmd, staged_dir *sd)
{
    /* the files are on disk (the library fsyncs each); so must be their
     * directory entries before the directory takes the final name */
    fsync(sd->lock_fd);
    struct stat st;
    int rc = lstat(sd->final, &st) == 0 ? replace_existing(cmd, sd)
                                         : rename(sd->staging, sd->final);
    if (rc != 0) {
        cli_error(cmd, "cannot put %s in place of %s: %s", sd->staging, sd->final,
                  strerror(errno));
        staged_dir_abort(sd);
        return false;
    }
    const char *base;
    char *parent = parent_dir(sd->final, &base);
    if (parent != NULL)
        sync_dir(parent);
    free(parent);
    close(sd->lock_fd);
    free(sd->staging);
    free(sd->final);
    sd->lock_fd = -1;
    sd->staging = sd->final = NULL;
    return true;
}

void staged_dir_abort(staged_dir *sd)
{
    if (sd->staging != NULL)
        remove_own_files(sd->staging, true);
    if (sd->lock_fd >= 0)
        close(sd->lock_fd);
    free(sd->staging);
    free(sd->final);
    sd->lock_fd = -1;
    sd->staging = sd->final = NULL;
}
