/*
 * test_file_replace.c — the atomic writer's promises (lib/io/file_io.h,
 * lib/platform/platform.h) with nothing but the file API, so that the same
 * checks run natively and in the Windows build under Wine (where
 * tests/test_file_io.c, which forks, makes FIFOs and symbolic links, cannot
 * run): a replaced file holds exactly the new bytes and nothing else is
 * left; a positioned write does not move where the next plain write goes;
 * an aborted write leaves the old file; a directory is refused; a dead
 * writer's temporary file is removed and a live writer's is not; UTF-8
 * names that are not ASCII reach the file system as the same characters.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <utime.h>
#include <wchar.h>

#include "io/file_io.h"
#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"

static char dir[512];

static bool file_is(const char *path, const char *want)
{
    size_t n = 0;
    uint8_t *got = test_read_bytes(path, &n);
    bool same = got && n == strlen(want) && memcmp(got, want, n) == 0;
    free(got);
    return same;
}

static nctmc_status write_text(const char *path, const char *text)
{
    char err[512];
    file_atomic af;
    nctmc_status st = file_atomic_begin(&af, NULL, path, err, sizeof err);
    if (st != NCTMC_OK)
        return st;
    st = file_atomic_write(&af, text, strlen(text), err, sizeof err);
    if (st != NCTMC_OK) {
        file_atomic_abort(&af);
        return st;
    }
    return file_atomic_commit(&af, err, sizeof err);
}

/* A file made an hour ago, as a writer that died long before would leave it. */
static bool make_old_file(const char *path)
{
    if (!test_write_bytes(path, "stale", 5))
        return false;
    struct utimbuf t = {.actime = time(NULL) - 3600, .modtime = time(NULL) - 3600};
    return utime(path, &t) == 0;
}

static void test_replace(void)
{
    char p[1024];
    test_path(p, sizeof p, dir, "a.bin");
    CHECK(write_text(p, "old contents") == NCTMC_OK && file_is(p, "old contents"), "first write");
    CHECK(write_text(p, "new") == NCTMC_OK && file_is(p, "new"),
          "the replacement holds exactly the new bytes");
    CHECK(test_count_entries(dir) == 1, "nothing but the file is left (%d entries)",
          test_count_entries(dir));
}

static void test_write_at_keeps_position(void)
{
    char p[1024], err[512];
    test_path(p, sizeof p, dir, "b.bin");
    file_atomic af;
    bool ok = file_atomic_begin(&af, NULL, p, err, sizeof err) == NCTMC_OK;
    CHECK(ok, "begin: %s", err);
    if (!ok)
        return;
    ok = file_atomic_write(&af, "AAAA", 4, err, sizeof err) == NCTMC_OK &&
         file_atomic_write_at(&af, 0, "BB", 2, err, sizeof err) == NCTMC_OK &&
         file_atomic_write(&af, "CC", 2, err, sizeof err) == NCTMC_OK;
    CHECK(ok, "writes: %s", err);
    if (!ok) {
        file_atomic_abort(&af);
        return;
    }
    CHECK(file_atomic_commit(&af, err, sizeof err) == NCTMC_OK, "commit: %s", err);
    CHECK(file_is(p, "BBAACC"), "a header written at 0 after the data; the next write appends");
}

static void test_abort(void)
{
    char p[1024], err[512];
    test_path(p, sizeof p, dir, "a.bin");
    file_atomic af;
    bool ok = file_atomic_begin(&af, NULL, p, err, sizeof err) == NCTMC_OK;
    CHECK(ok, "begin: %s", err);
    if (!ok)
        return;
    CHECK(file_atomic_write(&af, "half", 4, err, sizeof err) == NCTMC_OK, "write: %s", err);
    file_atomic_abort(&af);
    CHECK(file_is(p, "new"), "an aborted write leaves the old file");
    CHECK(test_count_entries(dir) == 2, "and no temporary file (%d entries)",
          test_count_entries(dir));
}

static void test_directory_refused(void)
{
    char err[512];
    file_atomic af;
    nctmc_status st = file_atomic_begin(&af, NULL, dir, err, sizeof err);
    CHECK(st == NCTMC_ERR_IO, "a directory is not replaced (status %d)", (int)st);
    if (st == NCTMC_OK)
        file_atomic_abort(&af);
}

static void test_stale_and_live_temporaries(void)
{
    char p[1024], stale[1024], err[512];
    test_path(p, sizeof p, dir, "c.bin");
    test_path(stale, sizeof stale, dir, "c.bin.tmp-Dead01");
    CHECK(make_old_file(stale), "a dead writer's leftover");
    /* a live writer: its temporary file is made old too, so only its lock
     * (flock on POSIX, the share mode on Windows) keeps it */
    file_atomic live;
    bool ok = file_atomic_begin(&live, NULL, p, err, sizeof err) == NCTMC_OK;
    CHECK(ok, "the live writer begins: %s", err);
    if (!ok)
        return;
    CHECK(test_count_entries(dir) == 3, "its own cleanup removed the leftover (%d entries)",
          test_count_entries(dir));
    CHECK(file_atomic_write(&live, "live", 4, err, sizeof err) == NCTMC_OK, "write: %s", err);
    struct utimbuf t = {.actime = time(NULL) - 1800, .modtime = time(NULL) - 1800};
    bool aged = utime(live.tmp_path, &t) == 0;
    CHECK(write_text(p, "second") == NCTMC_OK && file_is(p, "second"), "a second writer");
    struct stat st;
    CHECK(stat(live.tmp_path, &st) == 0,
          "the live writer's temporary file survives the second writer's cleanup%s",
          aged ? "" : " (its time could not be set back)");
    CHECK(file_atomic_commit(&live, err, sizeof err) == NCTMC_OK && file_is(p, "live"),
          "and the live writer commits: %s", err);
    CHECK(test_count_entries(dir) == 3, "nothing left over (%d entries)",
          test_count_entries(dir));
}

static void test_utf8_name(void)
{
    /* "Grüße-数据.bin" */
    char p[1024];
    test_path(p, sizeof p, dir, "Gr\xc3\xbc\xc3\x9f" "e-\xe6\x95\xb0\xe6\x8d\xae.bin");
    CHECK(write_text(p, "utf8") == NCTMC_OK, "write under a UTF-8 name");
    uint8_t *data = NULL;
    size_t n = 0;
    char err[512];
    CHECK(file_read_all(NULL, p, 64, &data, &n, err, sizeof err) == NCTMC_OK && n == 4 &&
              memcmp(data, "utf8", 4) == 0,
          "read back by the same name: %s", err);
    free(data);
#ifdef _WIN32
    /* the file system holds the characters themselves, not a code-page
     * approximation: the wide name opens it (the scratch folder is ASCII) */
    wchar_t w[1024];
    size_t k = 0;
    for (; dir[k] && k < 900; k++)
        w[k] = (wchar_t)(unsigned char)dir[k];
    wcscpy(w + k, L"/Gr\u00fc\u00dfe-\u6570\u636e.bin");
    FILE *f = _wfopen(w, L"rb");
    CHECK(f != NULL, "the wide name opens the file");
    if (f)
        fclose(f);
#endif
}

int main(void)
{
    if (!test_make_temp_dir(dir, sizeof dir)) {
        perror("scratch directory");
        return 1;
    }
    test_replace();
    test_write_at_keeps_position();
    test_abort();
    test_directory_refused();
    test_stale_and_live_temporaries();
    test_utf8_name();
    test_remove_dir(dir);
    return test_finish("file_replace");
}
