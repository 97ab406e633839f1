/*
 * platform_win32.c — platform.h for Windows (built with MinGW-w64): UTF-8
 * paths are converted to UTF-16 for the wide ("W") calls; files are Win32
 * handles wrapped in C runtime descriptors (_open_osfhandle); maps are
 * file-mapping views; atomic replacement renames the open temporary file
 * over its target by handle (SetFileInformationByHandle, FileRenameInfo,
 * ReplaceIfExists), so the temporary file stays locked until it has its
 * final name; modules are LoadLibraryExW'd.
 *
 * Where Windows differs from the POSIX implementation:
 *  - the "lock" on a temporary file is its share mode: it is open without
 *    FILE_SHARE_DELETE, so no other process can remove it while the writer
 *    lives, and the system closes the handle when the writer dies. Creating
 *    and locking are one call (CreateFileW), so there is no window between
 *    them to guard against;
 *  - a directory cannot be flushed on Windows; NTFS journals the rename
 *    itself. The data are flushed (FlushFileBuffers) before the rename;
 *  - a new file gets the folder's inherited permissions (there is no mode);
 *  - a file that another process has mapped cannot be replaced (Windows
 *    refuses with "access denied"); the writer reports that as an I/O error
 *    and leaves the old file in place.
 */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <fcntl.h>
#include <io.h>
#include <malloc.h>
#include <limits.h>
#include <locale.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "platform.h"

#include "base/alloc.h"
#include "base/fail.h"

/* One system call moves at most this much (a DWORD count). */
#define IO_CHUNK ((DWORD)1 << 30)
/* A temporary file is named "<target>" TMP_TAG + TMP_RANDOM_CHARS random
 * characters, as on POSIX. */
#define TMP_TAG ".tmp-"
#define TMP_RANDOM_CHARS 6
/* Attempts at a temporary file name nobody else has. */
#define TMP_ATTEMPTS 64

/* ---- errors and names ----------------------------------------------------------- */

void plat_error_text(int error, char *text, size_t size)
{
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL,
                             (DWORD)error, 0, text, (DWORD)size, NULL);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                     text[n - 1] == '.'))
        text[--n] = '\0';
    if (n == 0)
        snprintf(text, size, "error %d", error);
}

/* Fails with status and "<formatted>: <the system's words for code>". */
static nctmc_status win_fail(char *err, size_t err_size, nctmc_status status, DWORD code,
                             const char *fmt, ...) NCTMC_PRINTF(5, 6);
static nctmc_status win_fail(char *err, size_t err_size, nctmc_status status, DWORD code,
                             const char *fmt, ...)
{
    char what[NCTMC_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char reason[256];
    plat_error_text((int)code, reason, sizeof reason);
    return fail_format(err, err_size, status, "%s: %s", what, reason);
}

/* UTF-8 to UTF-16 in memory from malloc; NULL for text that is not UTF-8
 * (ERROR_NO_UNICODE_TRANSLATION) or out of memory. */
static wchar_t *widen(const char *utf8)
{
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, utf8, -1, NULL, 0);
    if (n <= 0)
        return NULL;
    wchar_t *w = mem_alloc(NULL, (size_t)n * sizeof *w);
    if (w && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, utf8, -1, w, n) != n) {
        mem_free(NULL, w);
        return NULL;
    }
    if (!w)
        SetLastError(ERROR_NOT_ENOUGH_MEMORY);
    return w;
}

/* UTF-16 to UTF-8 into buf; false when it does not fit. */
static bool narrow(const wchar_t *w, char *buf, size_t size)
{
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, buf, (int)(size < INT_MAX ? size : INT_MAX),
                                NULL, NULL);
    return n > 0;
}

static HANDLE handle_of(int fd)
{
    return (HANDLE)_get_osfhandle(fd);
}

/* A handle of a plain file on a disk (not a directory, console, pipe or
 * device). */
static bool is_disk_file(HANDLE h)
{
    BY_HANDLE_FILE_INFORMATION info;
    return GetFileType(h) == FILE_TYPE_DISK && GetFileInformationByHandle(h, &info) &&
           !(info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY);
}

/* ---- cores and memory ------------------------------------------------------ */

double plat_seconds(void)
{
    LARGE_INTEGER t, f;
    QueryPerformanceCounter(&t);
    QueryPerformanceFrequency(&f);
    return (double)t.QuadPart / (double)f.QuadPart;
}

int plat_cpu_count(void)
{
    DWORD_PTR process = 0, system = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &process, &system) && process) {
        int n = 0;
        for (; process; process &= process - 1)
            n++;
        return n;
    }
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors >= 1 ? (int)si.dwNumberOfProcessors : 1;
}

bool plat_address_space_available(size_t bytes)
{
    void *p = VirtualAlloc(NULL, bytes, MEM_RESERVE, PAGE_READWRITE);
    if (!p)
        return false;
    VirtualFree(p, 0, MEM_RELEASE);
    return true;
}

void *plat_sys_alloc(size_t size, size_t alignment)
{
    return _aligned_malloc(size, alignment);
}

void *plat_sys_realloc(void *p, size_t size)
{
    return _aligned_realloc(p, size, NCTMC_MEM_ALIGN);
}

void plat_sys_free(void *p)
{
    _aligned_free(p);
}

/* ---- the "C" numeric locale ------------------------------------------------ */

/* A thread's own locale needs _configthreadlocale(), which some C runtimes
 * lack (Wine's msvcrt.dll answers -1): there the scope is entered only when
 * the numeric locale already is "C" (nothing to change), and refused
 * otherwise rather than changing the locale of every thread. */
bool plat_c_numeric_enter(plat_c_numeric *scope)
{
    scope->mode = _configthreadlocale(_ENABLE_PER_THREAD_LOCALE);
    const char *now = setlocale(LC_NUMERIC, NULL);
    if (scope->mode == -1) {
        scope->name[0] = '\0'; /* nothing to restore */
        return now && strcmp(now, "C") == 0;
    }
    if (!now || strlen(now) >= sizeof scope->name) {
        _configthreadlocale(scope->mode);
        return false;
    }
    strcpy(scope->name, now);
    if (!setlocale(LC_NUMERIC, "C")) {
        _configthreadlocale(scope->mode);
        return false;
    }
    return true;
}

void plat_c_numeric_leave(plat_c_numeric *scope)
{
    if (scope->mode == -1)
        return;
    setlocale(LC_NUMERIC, scope->name);
    _configthreadlocale(scope->mode);
}

/* ---- reading files ------------------------------------------------------------ */

nctmc_status plat_open_read(const char *path, int *fd, uint64_t *size, char *err,
                            size_t err_size)
{
    wchar_t *w = widen(path);
    if (!w)
        return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "cannot open \"%.300s\"",
                        path);
    /* FILE_SHARE_DELETE: a writer may rename a new file over this one
     * while it is read, as on POSIX */
    HANDLE h = CreateFileW(w, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    DWORD code = GetLastError();
    mem_free(NULL, w);
    if (h == INVALID_HANDLE_VALUE)
        return win_fail(err, err_size, NCTMC_ERR_IO, code, "cannot open \"%.300s\"", path);
    LARGE_INTEGER n;
    if (!is_disk_file(h)) {
        CloseHandle(h);
        return fail_format(err, err_size, NCTMC_ERR_IO,
                           "\"%.300s\" is not a regular file (a directory, pipe or device)",
                           path);
    }
    if (!GetFileSizeEx(h, &n)) {
        code = GetLastError();
        CloseHandle(h);
        return win_fail(err, err_size, NCTMC_ERR_IO, code, "cannot stat \"%.300s\"", path);
    }
    int f = _open_osfhandle((intptr_t)h, _O_RDONLY | _O_BINARY);
    if (f < 0) {
        CloseHandle(h);
        return fail_format(err, err_size, NCTMC_ERR_IO,
                           "cannot open \"%.300s\": no C runtime descriptor left", path);
    }
    *fd = f;
    *size = (uint64_t)n.QuadPart;
    return NCTMC_OK;
}

int64_t plat_read_at(int fd, void *dst, size_t n, uint64_t offset, int *error)
{
    OVERLAPPED at;
    memset(&at, 0, sizeof at);
    at.Offset = (DWORD)offset;
    at.OffsetHigh = (DWORD)(offset >> 32);
    DWORD got = 0;
    if (!ReadFile(handle_of(fd), dst, n < IO_CHUNK ? (DWORD)n : IO_CHUNK, &got, &at)) {
        DWORD code = GetLastError();
        if (code == ERROR_HANDLE_EOF)
            return 0;
        *error = (int)code;
        return -1;
    }
    return (int64_t)got;
}

nctmc_status plat_pread(int fd, uint64_t offset, void *buf, size_t n, const char *path,
                        char *err, size_t err_size)
{
    uint8_t *p = buf;
    while (n > 0) {
        if (offset > (uint64_t)INT64_MAX)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "\"%.300s\": offset %llu is past any file", path,
                               (unsigned long long)offset);
        int error = 0;
        int64_t r = plat_read_at(fd, p, n, offset, &error);
        if (r < 0)
            return win_fail(err, err_size, NCTMC_ERR_IO, (DWORD)error, "reading \"%.300s\"",
                            path);
        if (r == 0)
            return fail_format(err, err_size, NCTMC_ERR_FORMAT,
                               "\"%.300s\" ends early (at byte %llu; was it truncated?)", path,
                               (unsigned long long)offset);
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return NCTMC_OK;
}

void plat_close(int fd)
{
    _close(fd);
}

/* ---- read-only file maps ------------------------------------------------------ */

size_t plat_map_alignment(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwAllocationGranularity > 0 ? (size_t)si.dwAllocationGranularity : 65536;
}

bool plat_file_size(int fd, uint64_t *size, bool *regular, char *err, size_t err_size)
{
    HANDLE h = handle_of(fd);
    LARGE_INTEGER n;
    if (h == INVALID_HANDLE_VALUE || !GetFileSizeEx(h, &n)) {
        win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "cannot map the file");
        return false;
    }
    *size = (uint64_t)n.QuadPart;
    *regular = is_disk_file(h);
    return true;
}

nctmc_status plat_map(int fd, uint64_t start, size_t length, bool private_map, void **base,
                      char *err, size_t err_size)
{
    (void)private_map; /* a read-only view is the same either way */
    *base = NULL;
    HANDLE mapping = CreateFileMappingW(handle_of(fd), NULL, PAGE_READONLY, 0, 0, NULL);
    if (!mapping)
        return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "cannot map the file");
    void *p = MapViewOfFile(mapping, FILE_MAP_READ, (DWORD)(start >> 32), (DWORD)start, length);
    DWORD code = GetLastError();
    CloseHandle(mapping); /* the view keeps the mapping alive */
    if (!p)
        return win_fail(err, err_size, NCTMC_ERR_IO, code, "cannot map the file");
    *base = p;
    return NCTMC_OK;
}

void plat_map_discard(void *p, size_t n)
{
    /* Windows has no advice for clean file-backed pages; its memory manager
     * trims them from the working set as it needs. */
    (void)p;
    (void)n;
}

void plat_unmap(void *base, size_t length)
{
    (void)length;
    if (base)
        UnmapViewOfFile(base);
}

/* ---- atomic replacement of a file ---------------------------------------------- */

static void release(plat_atomic *af)
{
    mem_free(af->alloc, af->tmp_path);
    mem_free(af->alloc, af->path);
    af->tmp_path = NULL;
    af->path = NULL;
    af->fd = -1;
}

static bool is_separator(char c)
{
    return c == '/' || c == '\\';
}

/* The last path component of path. */
static const char *base_name(const char *path)
{
    const char *b = path;
    for (const char *p = path; *p; p++)
        if (is_separator(*p) || *p == ':')
            b = p + 1;
    return b;
}

/* The target of a symbolic link (or other reparse point) to an existing
 * file, as a UTF-8 path without the "\\?\" prefix. */
static nctmc_status resolve_link(const nctmc_allocator *alloc, const char *path, const wchar_t *w,
                                 char **target, char *err, size_t err_size)
{
    HANDLE h = CreateFileW(w, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(),
                        "\"%.300s\" is a symbolic link whose target cannot be resolved "
                        "(refusing to write through it)",
                        path);
    wchar_t final[MAX_PATH * 4];
    DWORD n = GetFinalPathNameByHandleW(h, final, MAX_PATH * 4,
                                        FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
    bool regular = is_disk_file(h);
    CloseHandle(h);
    char real[MAX_PATH * 12];
    const wchar_t *shown = final;
    if (n > 4 && wcsncmp(final, L"\\\\?\\", 4) == 0)
        shown = final + 4;
    if (n == 0 || n >= MAX_PATH * 4 || !narrow(shown, real, sizeof real))
        return fail_format(err, err_size, NCTMC_ERR_IO,
                           "\"%.300s\" is a symbolic link whose target cannot be resolved "
                           "(refusing to write through it)",
                           path);
    if (!regular)
        return fail_format(err, err_size, NCTMC_ERR_IO,
                           "\"%.300s\" is a symbolic link to something that is not a "
                           "regular file; refusing to replace it",
                           path);
    *target = mem_strdup(alloc, real);
    return *target ? NCTMC_OK
                   : fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
}

/* Whether an existing name is a plain disk file (not a device such as NUL). */
static bool names_disk_file(const wchar_t *w)
{
    HANDLE h = CreateFileW(w, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return false;
    bool disk = is_disk_file(h);
    CloseHandle(h);
    return disk;
}

/* The file a write to `path` replaces, as on POSIX (platform_posix.c):
 * path itself when absent or a plain file, the target of a link to a plain
 * file; anything else is refused. */
static nctmc_status resolve_target(const nctmc_allocator *alloc, const char *path,
                                   char **target, char *err, size_t err_size)
{
    *target = NULL;
    if (!path[0])
        return fail_format(err, err_size, NCTMC_ERR_IO, "cannot write a file with an empty name");
    wchar_t *w = widen(path);
    if (!w)
        return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "cannot examine \"%.300s\"",
                        path);
    nctmc_status st = NCTMC_OK;
    DWORD attributes = GetFileAttributesW(w);
    DWORD code = GetLastError();
    if (attributes == INVALID_FILE_ATTRIBUTES) {
        if (code != ERROR_FILE_NOT_FOUND && code != ERROR_PATH_NOT_FOUND)
            st = win_fail(err, err_size, NCTMC_ERR_IO, code, "cannot examine \"%.300s\"", path);
    } else if (attributes & FILE_ATTRIBUTE_REPARSE_POINT) {
        st = resolve_link(alloc, path, w, target, err, err_size);
    } else if ((attributes & FILE_ATTRIBUTE_DIRECTORY) || !names_disk_file(w)) {
        st = fail_format(err, err_size, NCTMC_ERR_IO,
                         "\"%.300s\" exists and is not a regular file (a directory or "
                         "device); refusing to replace it",
                         path);
    }
    mem_free(NULL, w);
    if (st != NCTMC_OK || *target)
        return st;
    *target = mem_strdup(alloc, path); /* absent (created) or a plain file */
    return *target ? NCTMC_OK
                   : fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
}

/* The six characters of a temporary name, as mkstemp() makes them. */
static bool is_random_suffix(const wchar_t *s)
{
    for (int i = 0; i < TMP_RANDOM_CHARS; i++) {
        wchar_t c = s[i];
        if (!((c >= L'A' && c <= L'Z') || (c >= L'a' && c <= L'z') || (c >= L'0' && c <= L'9')))
            return false;
    }
    return s[TMP_RANDOM_CHARS] == L'\0';
}

static bool older_than(const FILETIME *a, const FILETIME *b)
{
    return CompareFileTime(a, b) < 0;
}

/*
 * Removes stale "<target>.tmp-XXXXXX" files left by writers that died
 * before their rename, as the POSIX implementation does: the exact name
 * pattern, a plain file (no link, no directory), older than our own
 * temporary file, and not open by a live writer. The last is the share
 * mode: a live writer holds its file open without FILE_SHARE_DELETE, so
 * DeleteFileW fails for it (a sharing violation) and succeeds only once the
 * writer is gone. Failures are not errors of the write.
 */
static void clean_stale_temps(const plat_atomic *af)
{
    FILETIME own;
    if (!GetFileTime(handle_of(af->fd), NULL, NULL, &own))
        return;
    size_t dir_len = (size_t)(base_name(af->path) - af->path);
    char *pattern = mem_alloc(NULL, strlen(af->path) + sizeof TMP_TAG + 1);
    if (!pattern)
        return;
    sprintf(pattern, "%s%s*", af->path, TMP_TAG);
    wchar_t *wpattern = widen(pattern);
    wchar_t *wown = widen(base_name(af->tmp_path));
    wchar_t *wdir = NULL;
    if (wpattern) {
        pattern[dir_len] = '\0';
        wdir = widen(pattern);
    }
    const wchar_t *wbase = NULL;
    wchar_t *wtarget = widen(base_name(af->path));
    WIN32_FIND_DATAW found;
    HANDLE find = wpattern && wown && wdir && wtarget
                      ? FindFirstFileW(wpattern, &found)
                      : INVALID_HANDLE_VALUE;
    wbase = wtarget;
    size_t base_len = wbase ? wcslen(wbase) : 0, tag_len = strlen(TMP_TAG);
    if (find != INVALID_HANDLE_VALUE) {
        do {
            const wchar_t *n = found.cFileName;
            if (wcsncmp(n, wbase, base_len) != 0 || wcsncmp(n + base_len, L"" TMP_TAG, tag_len) ||
                !is_random_suffix(n + base_len + tag_len) || wcscmp(n, wown) == 0 ||
                (found.dwFileAttributes &
                 (FILE_ATTRIBUTE_DIRECTORY | FILE_ATTRIBUTE_REPARSE_POINT)) ||
                !older_than(&found.ftLastWriteTime, &own))
                continue;
            size_t dl = wcslen(wdir), nl = wcslen(n);
            wchar_t *full = mem_alloc(NULL, (dl + nl + 1) * sizeof *full);
            if (!full)
                break;
            memcpy(full, wdir, dl * sizeof *full);
            memcpy(full + dl, n, (nl + 1) * sizeof *full);
            DeleteFileW(full);
            mem_free(NULL, full);
        } while (FindNextFileW(find, &found));
        FindClose(find);
    }
    mem_free(NULL, wtarget);
    mem_free(NULL, wdir);
    mem_free(NULL, wown);
    mem_free(NULL, wpattern);
    mem_free(NULL, pattern);
}

/* Six characters of mkstemp's alphabet, different on each attempt (the
 * clock, the process, the thread and the attempt mixed by a 64-bit hash;
 * CREATE_NEW refuses a name that exists, and the next attempt differs). */
static void random_suffix(char *out, int attempt)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    uint64_t x = (uint64_t)t.QuadPart ^ ((uint64_t)GetCurrentProcessId() << 32) ^
                 ((uint64_t)GetCurrentThreadId() << 16) ^ (uint64_t)attempt * 0x9E3779B97F4A7C15u;
    for (int i = 0; i < TMP_RANDOM_CHARS; i++) {
        x ^= x >> 33;
        x *= 0xFF51AFD7ED558CCDu;
        x ^= x >> 29;
        out[i] = alphabet[x % (sizeof alphabet - 1)];
    }
    out[TMP_RANDOM_CHARS] = '\0';
}

/* Creates the temporary file, open for writing and deleting by us only:
 * nobody else may delete, rename or write it while we hold it. */
static nctmc_status create_temp_file(plat_atomic *af, char *err, size_t err_size)
{
    size_t n = strlen(af->path);
    DWORD code = ERROR_FILE_EXISTS;
    for (int attempt = 0; attempt < TMP_ATTEMPTS && code == ERROR_FILE_EXISTS; attempt++) {
        memcpy(af->tmp_path, af->path, n);
        memcpy(af->tmp_path + n, TMP_TAG, sizeof TMP_TAG - 1);
        random_suffix(af->tmp_path + n + sizeof TMP_TAG - 1, attempt);
        wchar_t *w = widen(af->tmp_path);
        if (!w)
            return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(),
                            "cannot create a temporary file next to \"%.300s\"", af->path);
        HANDLE h = CreateFileW(w, GENERIC_READ | GENERIC_WRITE | DELETE, FILE_SHARE_READ, NULL,
                               CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
        code = GetLastError();
        mem_free(NULL, w);
        if (h == INVALID_HANDLE_VALUE)
            continue;
        int fd = _open_osfhandle((intptr_t)h, _O_RDWR | _O_BINARY);
        if (fd < 0) {
            CloseHandle(h);
            return fail_format(err, err_size, NCTMC_ERR_IO,
                               "cannot create a temporary file next to \"%.300s\": no C "
                               "runtime descriptor left",
                               af->path);
        }
        af->fd = fd;
        return NCTMC_OK;
    }
    return win_fail(err, err_size, NCTMC_ERR_IO, code,
                    "cannot create a temporary file next to \"%.300s\"", af->path);
}

nctmc_status plat_atomic_begin(plat_atomic *af, const nctmc_allocator *alloc,
                               const char *path, char *err, size_t err_size)
{
    af->fd = -1;
    af->tmp_path = NULL;
    af->alloc = alloc;
    nctmc_status st = resolve_target(alloc, path, &af->path, err, err_size);
    if (st != NCTMC_OK)
        return st;
    af->tmp_path = mem_alloc(alloc, strlen(af->path) + sizeof TMP_TAG + TMP_RANDOM_CHARS);
    if (!af->tmp_path) {
        release(af);
        return fail_format(err, err_size, NCTMC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    st = create_temp_file(af, err, err_size);
    if (st != NCTMC_OK) {
        release(af);
        return st;
    }
    clean_stale_temps(af);
    return NCTMC_OK;
}

static nctmc_status write_all(plat_atomic *af, const void *data, size_t n, OVERLAPPED *at,
                              char *err, size_t err_size)
{
    const uint8_t *p = data;
    HANDLE h = handle_of(af->fd);
    while (n > 0) {
        DWORD w = 0;
        if (!WriteFile(h, p, n < IO_CHUNK ? (DWORD)n : IO_CHUNK, &w, at) || w == 0)
            return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "writing \"%.300s\"",
                            af->path);
        p += w;
        n -= w;
        if (at) {
            uint64_t next = ((uint64_t)at->OffsetHigh << 32 | at->Offset) + w;
            at->Offset = (DWORD)next;
            at->OffsetHigh = (DWORD)(next >> 32);
        }
    }
    return NCTMC_OK;
}

nctmc_status plat_atomic_write(plat_atomic *af, const void *data, size_t n, char *err,
                               size_t err_size)
{
    return write_all(af, data, n, NULL, err, err_size);
}

/* A positioned write moves a synchronous handle's file pointer; it is put
 * back, so the next plain write appends as pwrite() leaves it on POSIX. */
nctmc_status plat_atomic_write_at(plat_atomic *af, uint64_t offset, const void *data,
                                  size_t n, char *err, size_t err_size)
{
    if (offset > (uint64_t)INT64_MAX)
        return fail_format(err, err_size, NCTMC_ERR_IO, "writing \"%.300s\": offset too large",
                           af->path);
    HANDLE h = handle_of(af->fd);
    LARGE_INTEGER zero = {.QuadPart = 0}, here;
    if (!SetFilePointerEx(h, zero, &here, FILE_CURRENT))
        return win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "writing \"%.300s\"",
                        af->path);
    OVERLAPPED at;
    memset(&at, 0, sizeof at);
    at.Offset = (DWORD)offset;
    at.OffsetHigh = (DWORD)(offset >> 32);
    nctmc_status st = write_all(af, data, n, &at, err, err_size);
    if (!SetFilePointerEx(h, here, NULL, FILE_BEGIN) && st == NCTMC_OK)
        st = win_fail(err, err_size, NCTMC_ERR_IO, GetLastError(), "writing \"%.300s\"",
                      af->path);
    return st;
}

/* Renames the open file over af->path in one step (ReplaceIfExists), by
 * handle: the file keeps its share mode, so it stays locked until it has
 * its final name. The name is given as an NT path ("\??\C:\dir\name"). */
static DWORD rename_over(plat_atomic *af)
{
    wchar_t *w = widen(af->path);
    if (!w)
        return GetLastError();
    DWORD full_len = GetFullPathNameW(w, 0, NULL, NULL);
    size_t bytes = sizeof(FILE_RENAME_INFO) + (full_len + 8) * sizeof(wchar_t);
    FILE_RENAME_INFO *info = full_len ? mem_calloc(NULL, 1, bytes) : NULL;
    DWORD code = full_len ? ERROR_NOT_ENOUGH_MEMORY : GetLastError();
    if (info) {
        wcscpy(info->FileName, L"\\??\\");
        DWORD got = GetFullPathNameW(w, full_len, info->FileName + 4, NULL);
        if (got == 0 || got >= full_len) {
            code = GetLastError();
        } else {
            info->ReplaceIfExists = TRUE;
            info->RootDirectory = NULL;
            info->FileNameLength = (DWORD)(wcslen(info->FileName) * sizeof(wchar_t));
            code = SetFileInformationByHandle(handle_of(af->fd), FileRenameInfo, info,
                                              (DWORD)bytes)
                       ? ERROR_SUCCESS
                       : GetLastError();
        }
        mem_free(NULL, info);
    }
    mem_free(NULL, w);
    return code;
}

nctmc_status plat_atomic_commit(plat_atomic *af, char *err, size_t err_size)
{
    if (!FlushFileBuffers(handle_of(af->fd))) {
        DWORD code = GetLastError();
        plat_atomic_abort(af);
        return win_fail(err, err_size, NCTMC_ERR_IO, code, "flushing a new file to disk");
    }
    DWORD code = rename_over(af);
    if (code != ERROR_SUCCESS) {
        nctmc_status st =
            win_fail(err, err_size, NCTMC_ERR_IO, code, "cannot replace \"%.300s\"", af->path);
        plat_atomic_abort(af);
        return st;
    }
    mem_free(af->alloc, af->tmp_path);
    af->tmp_path = NULL;
    int fd = af->fd;
    af->fd = -1;
    nctmc_status st = NCTMC_OK;
    if (_close(fd) != 0)
        st = fail_format(err, err_size, NCTMC_ERR_IO,
                         "\"%.300s\" was written, but closing it failed", af->path);
    release(af);
    return st;
}

void plat_atomic_abort(plat_atomic *af)
{
    if (af->fd >= 0)
        _close(af->fd);
    if (af->tmp_path) {
        wchar_t *w = widen(af->tmp_path);
        if (w)
            DeleteFileW(w);
        mem_free(NULL, w);
    }
    release(af);
}

/* ---- modules -------------------------------------------------------------------- */

void plat_module_file_name(const char *stem, char *name, size_t size)
{
    snprintf(name, size, "lib%s.dll", stem);
}

const char *plat_cuda_driver_file(void)
{
    return "nvcuda.dll";
}

bool plat_module_loader_available(void)
{
    return true; /* every Windows program has the loader */
}

void plat_module_folder(const void *code, char *dir, size_t size)
{
    dir[0] = '\0';
    HMODULE module = NULL;
    if (!GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                                GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                            (LPCWSTR)code, &module))
        return;
    wchar_t w[MAX_PATH * 4];
    DWORD n = GetModuleFileNameW(module, w, MAX_PATH * 4);
    char path[MAX_PATH * 12];
    if (n == 0 || n >= MAX_PATH * 4 || !narrow(w, path, sizeof path))
        return;
    const char *base = base_name(path);
    if (base == path)
        return;
    path[base - path - 1] = '\0';
    snprintf(dir, size, "%s", path);
}

bool plat_path_exists(const char *path)
{
    wchar_t *w = widen(path);
    bool found = w && GetFileAttributesW(w) != INVALID_FILE_ATTRIBUTES;
    mem_free(NULL, w);
    return found;
}

void *plat_module_open(const char *path, bool lazy, char *why, size_t why_size)
{
    (void)lazy; /* Windows resolves a module's imports when it loads */
    wchar_t *w = widen(path);
    if (!w) {
        plat_error_text((int)GetLastError(), why, why_size);
        return NULL;
    }
    /* a path: its own folder first for the DLLs it needs (as the loader does
     * for a program); a bare name: the system's search order */
    bool has_folder = base_name(path) != path;
    HMODULE m = LoadLibraryExW(w, NULL, has_folder ? LOAD_WITH_ALTERED_SEARCH_PATH : 0);
    DWORD code = GetLastError();
    mem_free(NULL, w);
    if (!m) {
        plat_error_text((int)code, why, why_size);
        return NULL;
    }
    /* never unloaded, as with RTLD_NODELETE */
    HMODULE pinned = NULL;
    GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                       (LPCWSTR)m, &pinned);
    return (void *)m;
}

void *plat_module_symbol(void *module, const char *name, char *why, size_t why_size)
{
    FARPROC f = GetProcAddress((HMODULE)module, name);
    if (!f) {
        plat_error_text((int)GetLastError(), why, why_size);
        return NULL;
    }
    void *p;
    memcpy(&p, &f, sizeof p); /* a code address as the object pointer the caller casts back */
    return p;
}

void plat_module_close(void *module)
{
    FreeLibrary((HMODULE)module);
}

void *plat_module_open_one_cpu(const char *path, char *why, size_t why_size)
{
    /* the Windows build links OpenBLAS, the one module this is for */
    return plat_module_open(path, false, why, why_size);
}
