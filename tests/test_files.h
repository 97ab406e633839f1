/*
 * test_files.h — scratch files for the file-format tests: a private
 * temporary directory (under $TMPDIR or /tmp, never the source tree), whole
 * file reads and writes, and cleanup.
 */
#ifndef NCTMC_TEST_FILES_H
#define NCTMC_TEST_FILES_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _WIN32
/* The Windows test build (scripts/windows.sh): MinGW's C library has no
 * mkdtemp; _mktemp_s names the folder and _mkdir makes it (and fails
 * should the name have been taken meanwhile). */
#include <direct.h>
static inline char *mkdtemp(char *dir)
{
    return _mktemp_s(dir, strlen(dir) + 1) == 0 && _mkdir(dir) == 0 ? dir : NULL;
}
#define TEST_TMP_ENV "TEMP"
#define TEST_TMP_DEFAULT "."
#else
#define TEST_TMP_ENV "TMPDIR"
#define TEST_TMP_DEFAULT "/tmp"
#endif

/* Creates a fresh directory; its path is written to dir (>= 256 bytes). */
static inline int test_make_temp_dir(char *dir, size_t size)
{
    const char *base = getenv(TEST_TMP_ENV);
    snprintf(dir, size, "%s/nctmc-test-XXXXXX", base && base[0] ? base : TEST_TMP_DEFAULT);
    return mkdtemp(dir) != NULL;
}

/* dir + "/" + name into a static-free caller buffer. */
static inline const char *test_path(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
    return out;
}

/* Writes a new file (removing any old one first: truncating a file with
 * data makes ext4 flush it to disk on close, which takes milliseconds, and
 * the corruption tests write thousands). */
static inline int test_write_bytes(const char *path, const void *data, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return fclose(f) == 0 && w == n;
}

/* The CRC-32 of zlib, PNG and the file formats (reflected polynomial
 * 0xEDB88320), a bit at a time: independent of the library's table, for
 * tests that craft files through the public API only. */
static inline uint32_t test_crc32_of(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

/* Reads a whole file into a malloc'ed buffer; NULL on failure. */
static inline uint8_t *test_read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    fclose(f);
    *n = len;
    return buf;
}

/* Number of entries in dir other than . and .. (stray temporary files show
 * up here). */
static inline int test_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* Removes the files of a (flat) scratch directory and the directory. */
static inline void test_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[1024];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

#endif /* NCTMC_TEST_FILES_H */
