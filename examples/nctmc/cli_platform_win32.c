/*
 * cli_platform_win32.c — cli_platform.h on Windows (MinGW-w64). Paths are
 * UTF-8 and converted to UTF-16 for the wide Win32 calls. A directory is
 * held by an open handle that shares reading and writing but not deletion,
 * so an exclusive opener (cli_dir_lock_if_stale) fails while it is held.
 * Windows cannot swap two directories in one step: cli_dir_exchange()
 * renames the old one aside and the new one into place (docs/install.md,
 * "Where Windows differs", says what a crash between the two leaves).
 */
#define _CRT_RAND_S /* rand_s() */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include "cli_platform.h"

#include <direct.h>
#include <errno.h>
#include <io.h>
#include <stdlib.h>
#include <string.h>

const char *const cli_dir_aside_tag = ".old-";

/* UTF-8 to a malloc'd UTF-16 string, or NULL (errno set). */
static wchar_t *widen(const char *s)
{
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    wchar_t *w = n > 0 ? malloc((size_t)n * sizeof *w) : NULL;
    if (w == NULL || MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n) != n) {
        free(w);
        errno = n > 0 ? ENOMEM : EINVAL;
        return NULL;
    }
    return w;
}

static char *narrow(const wchar_t *w)
{
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, NULL, 0, NULL, NULL);
    char *s = n > 0 ? malloc((size_t)n) : NULL;
    if (s == NULL || WideCharToMultiByte(CP_UTF8, 0, w, -1, s, n, NULL, NULL) != n) {
        free(s);
        errno = ENOMEM;
        return NULL;
    }
    for (char *p = s; *p; p++) /* the tool joins and splits paths at '/' */
        if (*p == '\\')
            *p = '/';
    return s;
}

static void set_errno_from_win32(void)
{
    DWORD e = GetLastError();
    errno = e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? ENOENT
          : e == ERROR_ALREADY_EXISTS || e == ERROR_FILE_EXISTS     ? EEXIST
          : e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION ? EACCES
          : e == ERROR_NOT_ENOUGH_MEMORY                              ? ENOMEM
                                                                      : EIO;
}

int cli_plat_mkdir(const char *path)
{
    wchar_t *w = widen(path);
    int rc = w ? _wmkdir(w) : -1;
    free(w);
    return rc;
}

int cli_plat_terminal_width(int fd)
{
    CONSOLE_SCREEN_BUFFER_INFO info;
    HANDLE h = (HANDLE)_get_osfhandle(fd);
    if (h == INVALID_HANDLE_VALUE || !GetConsoleScreenBufferInfo(h, &info))
        return 0;
    int w = info.srWindow.Right - info.srWindow.Left + 1;
    return w > 0 ? w : 0;
}

/* the handler cli_plat_catch_interrupt() was given: set once, before any
 * event can arrive, and only read afterwards; Windows calls on_ctrl on a
 * thread of its own, and on_interrupt only sets a flag */
static void (*interrupt_callback)(void);
static volatile LONG interrupt_count;

static BOOL WINAPI on_ctrl(DWORD type)
{
    /* closing the console is not a request: Windows ends the program
     * when the handler returns, whatever it says */
    if (type != CTRL_C_EVENT && type != CTRL_BREAK_EVENT)
        return FALSE;
    /* a second Ctrl-C gets the default action: the user insists */
    if (InterlockedIncrement(&interrupt_count) > 1)
        return FALSE;
    interrupt_callback();
    return TRUE;
}

void cli_plat_catch_interrupt(void (*on_interrupt)(void))
{
    interrupt_callback = on_interrupt;
    interrupt_count = 0;
    SetConsoleCtrlHandler(on_ctrl, TRUE);
}

bool cli_plat_can_write_dir(const char *dir)
{
    wchar_t *w = widen(dir);
    bool ok = w != NULL && _waccess(w, 2 /* write */) == 0;
    free(w);
    return ok;
}

int cli_plat_cpu_count(void)
{
    DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n < 1 ? 1 : n > 1u << 20 ? 1 << 20 : (int)n;
}

/* A handle for reading the attributes of path (a file or a directory). */
static HANDLE open_for_info(const char *path, DWORD share, DWORD flags)
{
    wchar_t *w = widen(path);
    HANDLE h = w ? CreateFileW(w, FILE_READ_ATTRIBUTES, share, NULL, OPEN_EXISTING,
                               FILE_FLAG_BACKUP_SEMANTICS | flags, NULL)
                 : INVALID_HANDLE_VALUE;
    if (h == INVALID_HANDLE_VALUE && w != NULL)
        set_errno_from_win32();
    free(w);
    return h;
}

char *cli_plat_realpath(const char *path)
{
    HANDLE h = open_for_info(path, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, 0);
    if (h == INVALID_HANDLE_VALUE)
        return NULL;
    wchar_t buf[32768];
    DWORD n = GetFinalPathNameByHandleW(h, buf, 32768, FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
    CloseHandle(h);
    if (n == 0 || n >= 32768) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    /* "\\?\C:\dir" → "C:\dir"; "\\?\UNC\server\share" → "\\server\share" */
    wchar_t *p = buf;
    if (wcsncmp(p, L"\\\\?\\UNC\\", 8) == 0) {
        p += 6;
        p[0] = L'\\';
    } else if (wcsncmp(p, L"\\\\?\\", 4) == 0) {
        p += 4;
    }
    return narrow(p);
}

int cli_plat_lstat(const char *path, struct stat *st)
{
    return stat(path, st);
}

static bool file_id(const char *path, BY_HANDLE_FILE_INFORMATION *info)
{
    HANDLE h = open_for_info(path, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, 0);
    if (h == INVALID_HANDLE_VALUE)
        return false;
    bool ok = GetFileInformationByHandle(h, info) != 0;
    CloseHandle(h);
    return ok;
}

bool cli_plat_same_file(const char *a, const char *b)
{
    BY_HANDLE_FILE_INFORMATION ia, ib;
    return file_id(a, &ia) && file_id(b, &ib) &&
           ia.dwVolumeSerialNumber == ib.dwVolumeSerialNumber &&
           ia.nFileIndexHigh == ib.nFileIndexHigh && ia.nFileIndexLow == ib.nFileIndexLow;
}

/* No open_memstream: a temporary file that Windows deletes when it is
 * closed, read back whole by cli_mem_close(). */
FILE *cli_mem_open(cli_mem *m)
{
    m->text = NULL;
    m->len = 0;
    m->f = NULL;
    wchar_t dir[MAX_PATH + 1], name[MAX_PATH + 1];
    DWORD n = GetTempPathW(MAX_PATH + 1, dir);
    if (n == 0 || n > MAX_PATH || GetTempFileNameW(dir, L"nct", 0, name) == 0) {
        errno = EIO;
        return NULL;
    }
    m->f = _wfopen(name, L"w+bD"); /* D: deleted when closed */
    if (m->f == NULL)
        DeleteFileW(name);
    return m->f;
}

bool cli_mem_close(cli_mem *m, char **text, size_t *len)
{
    bool ok = m->f != NULL && fflush(m->f) == 0 && fseek(m->f, 0, SEEK_END) == 0;
    long size = ok ? ftell(m->f) : -1;
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    ok = buf != NULL && fseek(m->f, 0, SEEK_SET) == 0 &&
         fread(buf, 1, (size_t)size, m->f) == (size_t)size;
    if (m->f != NULL && fclose(m->f) != 0)
        ok = false;
    m->f = NULL;
    if (buf != NULL)
        buf[ok ? size : 0] = '\0';
    *text = buf;
    *len = ok ? (size_t)size : 0;
    return ok;
}

/* ---- directories ------------------------------------------------------------ */

/* The handle that holds a directory: others may read and write in it but
 * not open it exclusively, and not delete or rename it. */
static HANDLE hold(const wchar_t *w, DWORD share)
{
    return CreateFileW(w, FILE_LIST_DIRECTORY, share, NULL, OPEN_EXISTING,
                       FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
}

/* Six random letters and digits over the X's at the end of path. */
static bool randomize(char *path)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = strlen(path);
    if (n < 6 || strcmp(path + n - 6, "XXXXXX") != 0) {
        errno = EINVAL;
        return false;
    }
    for (size_t i = n - 6; i < n; i++) {
        unsigned int r;
        if (rand_s(&r) != 0) {
            errno = EIO;
            return false;
        }
        path[i] = chars[r % (sizeof chars - 1)];
    }
    return true;
}

int cli_dir_make_locked(char *path, cli_dir_lock *lock)
{
    lock->handle = -1;
    size_t n = strlen(path);
    char *template = strdup(path);
    for (int attempt = 0; template != NULL && attempt < 16; attempt++) {
        memcpy(path, template, n + 1);
        wchar_t *w = randomize(path) ? widen(path) : NULL;
        if (w == NULL)
            break;
        if (_wmkdir(w) == 0) {
            HANDLE h = hold(w, FILE_SHARE_READ | FILE_SHARE_WRITE);
            if (h != INVALID_HANDLE_VALUE)
                lock->handle = (intptr_t)h;
            else
                set_errno_from_win32();
            free(w);
            free(template);
            return lock->handle == -1 ? 1 : 0;
        }
        free(w);
        if (errno != EEXIST)
            break;
    }
    free(template);
    return -1;
}

bool cli_dir_lock_if_stale(const char *path, const cli_dir_lock *own, cli_dir_lock *lock)
{
    lock->handle = -1;
    FILETIME mine;
    if (own->handle == -1 || !GetFileTime((HANDLE)own->handle, &mine, NULL, NULL))
        return false;
    wchar_t *w = widen(path);
    WIN32_FILE_ATTRIBUTE_DATA a;
    bool ok = w != NULL && GetFileAttributesExW(w, GetFileExInfoStandard, &a) &&
              (a.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) &&
              !(a.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) &&
              CompareFileTime(&a.ftCreationTime, &mine) < 0;
    /* no sharing at all: fails while its prepare still holds it */
    HANDLE h = ok ? hold(w, 0) : INVALID_HANDLE_VALUE;
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return false;
    lock->handle = (intptr_t)h;
    return true;
}

void cli_dir_copy_mode(const cli_dir_lock *lock, const char *like)
{
    (void)lock;
    (void)like;
}

void cli_dir_sync(const cli_dir_lock *lock)
{
    (void)lock;
}

void cli_dir_sync_path(const char *dir)
{
    (void)dir;
}

void cli_dir_unlock(cli_dir_lock *lock)
{
    if (lock->handle != -1)
        CloseHandle((HANDLE)lock->handle);
    lock->handle = -1;
}

static bool move(const char *from, const char *to)
{
    wchar_t *wf = widen(from), *wt = widen(to);
    bool ok = wf && wt && MoveFileExW(wf, wt, MOVEFILE_WRITE_THROUGH);
    if (!ok && wf && wt)
        set_errno_from_win32();
    free(wf);
    free(wt);
    return ok;
}

int cli_dir_exchange(const char *staging, const char *final, cli_dir_lock *lock, char **old)
{
    size_t n = strlen(final) + strlen(cli_dir_aside_tag) + 7;
    char *aside = malloc(n);
    *old = NULL;
    if (aside == NULL) {
        errno = ENOMEM;
        return -1;
    }
    /* a held directory cannot be renamed; the window this opens is the
     * caller's own staging directory, which only a prepare started later
     * than this one would consider (and only if older than its own) */
    cli_dir_unlock(lock);
    bool moved = false;
    for (int attempt = 0; !moved && attempt < 16; attempt++) {
        snprintf(aside, n, "%s%sXXXXXX", final, cli_dir_aside_tag);
        if (!randomize(aside))
            break;
        moved = move(final, aside);
        if (!moved && errno != EEXIST)
            break;
    }
    if (!moved) {
        free(aside);
        return -1;
    }
    if (!move(staging, final)) {
        int e = errno;
        move(aside, final); /* undo: the old directory back in place */
        free(aside);
        errno = e;
        return -1;
    }
    *old = aside;
    return 0;
}

int cli_dir_rename(const char *staging, const char *final, cli_dir_lock *lock)
{
    cli_dir_unlock(lock);
    return move(staging, final) ? 0 : -1;
}
