/*
 * test_file_io.c — the library's file writer and readers under hostile
 * paths (issue 10): what a write does to a symbolic link, a FIFO, a
 * directory; that opening a FIFO never blocks; that a killed writer's
 * temporary files are cleaned, and only those; that concurrent writers of
 * one file never mix their data; that messages quoting file text carry no
 * control characters.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/file_io.h"
#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "base/text_escape.h"

static char dir[256];
static nctmc_context *ctx;

/* Paths in the scratch directory (under 256 bytes) and in its
 * subdirectories (under 300) fit these buffers. */
#define in_dir(buf, name) test_path((buf), sizeof(buf), dir, (name))

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool file_holds(const char *path, const char *text)
{
    size_t n = 0;
    uint8_t *data = test_read_bytes(path, &n);
    bool same = data && n == strlen(text) && memcmp(data, text, n) == 0;
    free(data);
    return same;
}

static bool is_kind(const char *path, mode_t kind)
{
    struct stat st;
    return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

static nctmc_status write_text(const char *path, const char *text)
{
    return nctmc_write_file(ctx, path, text, strlen(text));
}

/* ---- item 1: what a write replaces ---------------------------------------- */

static void test_regular_and_absent(void)
{
    char p[512];
    in_dir(p, "plain.txt");
    CHECK(write_text(p, "one") == NCTMC_OK && file_holds(p, "one"), "a new file is written");
    chmod(p, 0600);
    CHECK(write_text(p, "two") == NCTMC_OK && file_holds(p, "two"), "a file is replaced");
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0600, "the file keeps its mode");
    CHECK(write_text("", "x") == NCTMC_ERR_IO, "an empty path is refused");
    CHECK(nctmc_write_file(ctx, NULL, "x", 1) == NCTMC_ERR_INVALID_ARGUMENT, "a NULL path");
    CHECK(nctmc_write_file(NULL, p, "x", 1) == NCTMC_ERR_INVALID_ARGUMENT, "a NULL context");
}

static void test_refuses_special_files(void)
{
    char fifo[512], sub[512];
    in_dir(fifo, "fifo");
    in_dir(sub, "subdir");
    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0, "set up a FIFO and a directory");
    CHECK(write_text(fifo, "data") == NCTMC_ERR_IO, "a FIFO is refused");
    CHECK(strstr(nctmc_context_last_error(ctx), "not a regular file") != NULL,
          "the message says why: %s", nctmc_context_last_error(ctx));
    CHECK(is_kind(fifo, S_IFIFO), "the FIFO is still a FIFO");
    CHECK(write_text(sub, "data") == NCTMC_ERR_IO && is_kind(sub, S_IFDIR),
          "a directory is refused and left alone");
    /* the formats' own writers go through the same code */
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_create_bytes(&tok) == NCTMC_OK, "a tokenizer");
    CHECK(nctmc_tokenizer_save(tok, fifo) == NCTMC_ERR_IO && is_kind(fifo, S_IFIFO),
          "nctmc_tokenizer_save refuses a FIFO");
    int32_t tokens[4] = {1, 2, 3, 4};
    CHECK(nctmc_dataset_write(ctx, fifo, tokens, 4, 8, 0, NULL, 0) == NCTMC_ERR_IO &&
              is_kind(fifo, S_IFIFO),
          "nctmc_dataset_write refuses a FIFO");
    nctmc_tokenizer_free(tok);
    CHECK(test_count_entries(dir) == 3, "no temporary file is left (%d entries)",
          test_count_entries(dir));
}

static void test_symlinks(void)
{
    char target[512], link[512], to_fifo[512], dangling[512], fifo[512];
    in_dir(target, "target.txt");
    in_dir(link, "link.txt");
    in_dir(to_fifo, "link-to-fifo");
    in_dir(dangling, "dangling");
    in_dir(fifo, "fifo");
    CHECK(write_text(target, "old") == NCTMC_OK, "the link's target");
    CHECK(symlink("target.txt", link) == 0 && symlink("fifo", to_fifo) == 0 &&
              symlink("nowhere/missing", dangling) == 0,
          "set up links");
    CHECK(write_text(link, "new") == NCTMC_OK, "writing through a link succeeds: %s",
          nctmc_context_last_error(ctx));
    CHECK(is_kind(link, S_IFLNK), "the link is still a link");
    CHECK(file_holds(target, "new"), "its target holds the new data");
    CHECK(write_text(to_fifo, "x") == NCTMC_ERR_IO && is_kind(to_fifo, S_IFLNK) &&
              is_kind(fifo, S_IFIFO),
          "a link to a FIFO is refused, link and FIFO untouched");
    CHECK(write_text(dangling, "x") == NCTMC_ERR_IO && is_kind(dangling, S_IFLNK),
          "a dangling link is refused");
    /* a model checkpoint through a link, loaded back through it */
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 4, cfg.seq_len = 4, cfg.n_layers = 1, cfg.d_model = 4, cfg.n_heads = 1;
    cfg.cond_dim = 2;
    nctmc_model *m = NULL, *back = NULL;
    CHECK(nctmc_model_create(ctx, &cfg, &m) == NCTMC_OK, "a model");
    CHECK(nctmc_model_save(m, link) == NCTMC_OK && is_kind(link, S_IFLNK) &&
              is_kind(target, S_IFREG),
          "a checkpoint is written through the link");
    CHECK(nctmc_model_load(ctx, target, &back) == NCTMC_OK, "and its target loads");
    nctmc_model_free(back);
    nctmc_model_free(m);
}

/* ---- item 14: opening a FIFO never blocks ----------------------------------- */

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: opening a FIFO blocked\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(1);
}

static void test_fifo_readers(void)
{
    char fifo[512];
    in_dir(fifo, "fifo");
    signal(SIGALRM, on_alarm);
    alarm(20);
    nctmc_model *m = NULL;
    nctmc_dataset *ds = NULL;
    nctmc_tokenizer *tok = NULL;
    nctmc_trainer *t = NULL;
    nctmc_trainer_params params;
    nctmc_trainer_params_init(&params);
    CHECK(nctmc_model_load(ctx, fifo, &m) == NCTMC_ERR_IO && !m, "model load refuses a FIFO");
    CHECK(strstr(nctmc_context_last_error(ctx), "not a regular file") != NULL, "says why: %s",
          nctmc_context_last_error(ctx));
    CHECK(nctmc_dataset_open(ctx, fifo, &ds) == NCTMC_ERR_IO && !ds, "shard open");
    CHECK(nctmc_tokenizer_load(ctx, fifo, &tok) == NCTMC_ERR_IO && !tok, "tokenizer load");
    CHECK(nctmc_trainer_resume(ctx, fifo, NULL, &m, &t) == NCTMC_ERR_IO && !m && !t,
          "trainer resume");
    CHECK(nctmc_trainer_inspect(ctx, fifo, &params, NULL) == NCTMC_ERR_IO, "trainer inspect");
    char sub[512];
    CHECK(nctmc_model_load(ctx, in_dir(sub, "subdir"), &m) == NCTMC_ERR_IO,
          "a directory is refused too");
    alarm(0);
}

/* ---- item 10: stale temporary files ------------------------------------------ */

/* A file whose modification time is `age` seconds in the past (negative:
 * in the future). */
static void make_aged(const char *path, int age)
{
    test_write_bytes(path, "stale", 5);
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= age;
    times[1] = times[0];
    utimensat(AT_FDCWD, path, times, 0);
}

static void test_stale_cleanup(void)
{
    char sub[300], p[512], target[512];
    in_dir(sub, "stale");
    mkdir(sub, 0700);
    test_path(target, sizeof target, sub, "out.bin");
    const char *removed[] = {"out.bin.tmp-AbC123", "out.bin.tmp-zzzzzz"};
    /* each of these differs from a dead writer's file in one way */
    const char *kept_names[] = {
        "out.bin.tmp-AbC12",   /* 5 random characters */
        "out.bin.tmp-AbC1234", /* 7 */
        "out.bin.tmp-AbC1_3",  /* not mkstemp's alphabet */
        "other.bin.tmp-AbC123", /* another target */
        "out.bin.tmp-Future",  /* newer than the writer's own */
        "out.bin.tmp-Locked",  /* a live writer holds its lock */
        "out.bin.tmp-Linked",  /* a symbolic link */
        "out.bin.tmp-DirDir",  /* a directory */
        "out.bin.tmp-HardLn",  /* has a second link */
    };
    for (size_t i = 0; i < 2; i++)
        make_aged(test_path(p, sizeof p, sub, removed[i]), 3600);
    for (size_t i = 0; i < 6; i++)
        make_aged(test_path(p, sizeof p, sub, kept_names[i]), i == 4 ? -3600 : 3600);
    int locked = open(test_path(p, sizeof p, sub, "out.bin.tmp-Locked"), O_RDONLY);
    CHECK(locked >= 0 && flock(locked, LOCK_EX | LOCK_NB) == 0, "hold a lock like a writer");
    make_aged(test_path(p, sizeof p, sub, "victim"), 3600);
    char hard[512];
    CHECK(symlink("victim", test_path(p, sizeof p, sub, "out.bin.tmp-Linked")) == 0 &&
              mkdir(test_path(p, sizeof p, sub, "out.bin.tmp-DirDir"), 0700) == 0 &&
              link(test_path(hard, sizeof hard, sub, "victim"),
                   test_path(p, sizeof p, sub, "out.bin.tmp-HardLn")) == 0,
          "set up the link, the directory and the hard link");
    CHECK(write_text(target, "fresh") == NCTMC_OK && file_holds(target, "fresh"),
          "the write succeeds");
    for (size_t i = 0; i < 2; i++)
        CHECK(access(test_path(p, sizeof p, sub, removed[i]), F_OK) != 0,
              "a dead writer's %s is removed", removed[i]);
    for (size_t i = 0; i < sizeof kept_names / sizeof kept_names[0]; i++)
        CHECK(lstat(test_path(p, sizeof p, sub, kept_names[i]), &(struct stat){0}) == 0,
              "%s is kept", kept_names[i]);
    CHECK(file_holds(test_path(p, sizeof p, sub, "victim"), "stale"),
          "the link's target is untouched");
    close(locked);
    /* the lock released, the next write removes that one too */
    CHECK(write_text(target, "again") == NCTMC_OK &&
              access(test_path(p, sizeof p, sub, "out.bin.tmp-Locked"), F_OK) != 0,
          "an unlocked leftover goes on the next write");
}

/* A writer killed between creating and renaming its file. */
static void test_killed_writer(void)
{
    char sub[300], target[512];
    in_dir(sub, "killed");
    mkdir(sub, 0700);
    test_path(target, sizeof target, sub, "ckpt");
    pid_t pid = fork();
    if (pid == 0) {
        file_atomic af;
        char err[256];
        if (file_atomic_begin(&af, NULL, target, err, sizeof err) == NCTMC_OK)
            file_atomic_write(&af, "partial", 7, err, sizeof err);
        pause(); /* holds the file (and its lock) until killed */
        _exit(0);
    }
    int n = 0;
    for (int i = 0; i < 2000 && (n = test_count_entries(sub)) < 1; i++)
        sleep_ms(1);
    CHECK(n == 1, "the writer made its temporary file");
    CHECK(write_text(target, "alive") == NCTMC_OK && test_count_entries(sub) == 2,
          "a live writer's file is not touched");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    sleep_ms(20); /* a later modification time than the dead file's */
    CHECK(write_text(target, "after") == NCTMC_OK && test_count_entries(sub) == 1 &&
              file_holds(target, "after"),
          "after kill -9 the next write removes the leftover (%d entries)",
          test_count_entries(sub));
}

/* ---- item 6: concurrent writers ------------------------------------------- */

static void test_concurrent_writers(void)
{
    char sub[300], target[512];
    in_dir(sub, "race");
    mkdir(sub, 0700);
    test_path(target, sizeof target, sub, "grid.png");
    enum { WRITERS = 4, ROUNDS = 40, SIZE = 1 << 16 };
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            uint8_t *data = malloc(SIZE);
            memset(data, 'a' + w, SIZE);
            int bad = 0;
            for (int r = 0; r < ROUNDS; r++)
                bad |= nctmc_write_file(ctx, target, data, SIZE) != NCTMC_OK;
            free(data);
            _exit(bad);
        }
    }
    int failures = 0;
    for (int w = 0; w < WRITERS; w++) {
        int status = 0;
        waitpid(pids[w], &status, 0);
        failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(failures == 0, "every write of %d concurrent writers succeeded", WRITERS);
    size_t n = 0;
    uint8_t *data = test_read_bytes(target, &n);
    bool whole = data && n == SIZE;
    for (size_t i = 1; whole && i < n; i++)
        whole = data[i] == data[0];
    CHECK(whole, "the file is one writer's complete data, not a mixture");
    free(data);
    CHECK(test_count_entries(sub) == 1, "no temporary file is left (%d entries)",
          test_count_entries(sub));
}

/* ---- item 13: control characters in messages ----------------------------- */

static void test_escaping(void)
{
    char out[64];
    text_escape(out, sizeof out, "a\x1b[31mb\tc\n");
    CHECK(strcmp(out, "a\\x1b[31mb\\x09c\\x0a") == 0, "C0 controls: %s", out);
    text_escape(out, sizeof out, "\xc3\xa9 \xc2\x9b \x9b \x7f");
    CHECK(strcmp(out, "\xc3\xa9 \\xc2\\x9b \\x9b \\x7f") == 0, "UTF-8, C1, invalid, DEL: %s",
          out);
    char twice[64];
    text_escape(twice, sizeof twice, out);
    CHECK(strcmp(twice, out) == 0, "escaping twice changes nothing");
    char small[5];
    CHECK(text_escape(small, sizeof small, "ab\x1b" "cdef") == 2 && strcmp(small, "ab") == 0,
          "an escape that does not fit is left out whole: %s", small);

    char p[512];
    in_dir(p, "evil-tokenizer.txt");
    const char *evil = "nctmc-tokenizer 1\n\x1b]0;owned\x07kind bytes\n";
    test_write_bytes(p, evil, strlen(evil));
    nctmc_tokenizer *tok = NULL;
    CHECK(nctmc_tokenizer_load(ctx, p, &tok) == NCTMC_ERR_FORMAT, "a bad key is refused");
    const char *msg = nctmc_context_last_error(ctx);
    CHECK(strchr(msg, '\x1b') == NULL && strchr(msg, '\x07') == NULL &&
              strstr(msg, "\\x1b]0;owned\\x07") != NULL,
          "the key is quoted escaped: %s", msg);
    nctmc_model *m = NULL;
    CHECK(nctmc_model_load(ctx, in_dir(p, "no\x1b[2Jsuch"), &m) == NCTMC_ERR_IO &&
              strstr(nctmc_context_last_error(ctx), "no\\x1b[2Jsuch") != NULL,
          "a path is quoted escaped: %s", nctmc_context_last_error(ctx));
}

int main(void)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1;
    if (!test_make_temp_dir(dir, sizeof dir) || nctmc_context_create(&cp, &ctx) != NCTMC_OK) {
        fprintf(stderr, "test_file_io: no scratch directory or context\n");
        return 1;
    }
    test_regular_and_absent();
    test_refuses_special_files();
    test_symlinks();
    test_fifo_readers();
    test_stale_cleanup();
    test_killed_writer();
    test_concurrent_writers();
    test_escaping();
    nctmc_context_free(ctx);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_file_io: could not remove %s\n", dir);
    return test_finish("file_io");
}
