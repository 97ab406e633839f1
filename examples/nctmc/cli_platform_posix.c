/*
 * cli_platform_posix.c — cli_platform.h on Linux and other POSIX systems:
 * the calls the tool made directly before it was built for Windows.
 */
/* renameat2() and RENAME_EXCHANGE (Linux, glibc >= 2.28); realpath(),
 * open_memstream(), flock(). */
#define _GNU_SOURCE

#include "cli_platform.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <unistd.h>

const char *const cli_dir_aside_tag = NULL;

int cli_plat_mkdir(const char *path)
{
    return mkdir(path, 0777);
}

int cli_plat_terminal_width(int fd)
{
    struct winsize ws;
    if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 0;
}

/* the handler cli_plat_catch_interrupt() was given: set once, before any
 * signal can arrive, and only read afterwards */
static void (*interrupt_callback)(void);

static void on_signal(int signo)
{
    interrupt_callback();
    /* a second signal gets the default action: the user insists */
    signal(signo, SIG_DFL);
}

static void catch_once(int signo)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(signo, &sa, NULL);
}

void cli_plat_catch_interrupt(void (*on_interrupt)(void))
{
    interrupt_callback = on_interrupt;
    catch_once(SIGINT);
    catch_once(SIGTERM);
}

bool cli_plat_can_write_dir(const char *dir)
{
    return access(dir, W_OK | X_OK) == 0;
}

int cli_plat_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1 << 20 ? 1 << 20 : (int)n;
}

char *cli_plat_realpath(const char *path)
{
    return realpath(path, NULL);
}

int cli_plat_lstat(const char *path, struct stat *st)
{
    return lstat(path, st);
}

bool cli_plat_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

FILE *cli_mem_open(cli_mem *m)
{
    m->text = NULL;
    m->len = 0;
    m->f = open_memstream(&m->text, &m->len);
    return m->f;
}

bool cli_mem_close(cli_mem *m, char **text, size_t *len)
{
    bool ok = m->f != NULL && fclose(m->f) == 0;
    m->f = NULL;
    *text = m->text;
    *len = m->len;
    return ok;
}

/* ---- directories ------------------------------------------------------------ */

int cli_dir_make_locked(char *path, cli_dir_lock *lock)
{
    lock->handle = -1;
    if (mkdtemp(path) == NULL)
        return -1;
    /* locked, and still ours: another prepare's cleanup could have taken
     * it in the instant before the lock (see cli_dir_lock_if_stale) */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat mine, named;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &mine) == 0 &&
        lstat(path, &named) == 0 && mine.st_ino == named.st_ino && mine.st_dev == named.st_dev) {
        lock->handle = fd;
        return 0;
    }
    if (fd >= 0)
        close(fd);
    return 1;
}

bool cli_dir_lock_if_stale(const char *path, const cli_dir_lock *own, cli_dir_lock *lock)
{
    struct stat st, mine;
    lock->handle = -1;
    if (fstat((int)own->handle, &mine) != 0 || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
        return false;
    if (!(st.st_mtim.tv_sec < mine.st_mtim.tv_sec ||
          (st.st_mtim.tv_sec == mine.st_mtim.tv_sec && st.st_mtim.tv_nsec < mine.st_mtim.tv_nsec)))
        return false;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
        lock->handle = fd;
        return true;
    }
    if (fd >= 0)
        close(fd);
    return false;
}

void cli_dir_copy_mode(const cli_dir_lock *lock, const char *like)
{
    /* mkdtemp makes it private (0700); the directory it replaces keeps its
     * mode, a new one gets mkdir's */
    struct stat old;
    mode_t mask = umask(0);
    umask(mask);
    fchmod((int)lock->handle,
           stat(like, &old) == 0 && S_ISDIR(old.st_mode) ? old.st_mode & 07777 : 0777 & ~mask);
}

void cli_dir_sync(const cli_dir_lock *lock)
{
    if (lock->handle >= 0)
        fsync((int)lock->handle);
}

void cli_dir_sync_path(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

void cli_dir_unlock(cli_dir_lock *lock)
{
    if (lock->handle >= 0)
        close((int)lock->handle);
    lock->handle = -1;
}

int cli_dir_exchange(const char *staging, const char *final, cli_dir_lock *lock, char **old)
{
    (void)lock;
    *old = NULL;
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, staging, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        *old = strdup(staging);
        if (*old == NULL)
            errno = ENOMEM; /* the swap is done: the caller reports the old one kept */
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
#endif
    return 1;
}

int cli_dir_rename(const char *staging, const char *final, cli_dir_lock *lock)
{
    (void)lock;
    return rename(staging, final);
}
