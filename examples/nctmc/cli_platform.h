/*
 * cli_platform.h — what differs between systems for the `nctmc` tool. The
 * tool links only the public library, so it cannot use lib/platform; meson
 * builds cli_platform_posix.c or cli_platform_win32.c. Functions return
 * 0 / a value on success and -1 (or NULL) with errno set on failure.
 */
#ifndef NCTMC_CLI_PLATFORM_H
#define NCTMC_CLI_PLATFORM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#ifndef S_ISLNK /* Windows: stat never reports a link */
#define S_ISLNK(m) 0
#endif

/** Creates one directory (default permissions); EEXIST when it exists.
 *  Windows: the UTF-8 path is converted to UTF-16 (_wmkdir). */
int cli_plat_mkdir(const char *path);

/** The width in columns of the terminal that fd is, or 0 when fd is not
 *  a terminal (or its width is unknown). */
int cli_plat_terminal_width(int fd);

/** Calls on_interrupt (which must only set a flag) on the first Ctrl-C or
 *  termination request; a second one gets the system's default action.
 *  POSIX: SIGINT, SIGTERM; Windows: SetConsoleCtrlHandler. */
void cli_plat_catch_interrupt(void (*on_interrupt)(void));

/** Whether the directory dir exists and files can be created in it. */
bool cli_plat_can_write_dir(const char *dir);

/** The number of processors online (at least 1). */
int cli_plat_cpu_count(void);

/** The absolute path of an existing file with links resolved, malloc'd. */
char *cli_plat_realpath(const char *path);

/** stat() of the path itself, not of a link's target (Windows: stat). */
int cli_plat_lstat(const char *path, struct stat *st);

/** Whether a and b exist and are the same file (device and inode; Windows:
 *  volume serial number and file index). */
bool cli_plat_same_file(const char *a, const char *b);

/** A stream that collects what is written into memory: cli_mem_close()
 *  closes it and hands over the bytes (malloc'd, NUL-terminated). */
typedef struct cli_mem {
    FILE *f;
    char *text;
    size_t len;
} cli_mem;
FILE *cli_mem_open(cli_mem *m);
bool cli_mem_close(cli_mem *m, char **text, size_t *len);

/* ---- directories replaced whole (staged_dir.c) ---------------------------- */

/** A held directory: an exclusive flock() (POSIX) or an open handle that
 *  shares nothing with an exclusive opener (Windows). */
typedef struct cli_dir_lock {
    intptr_t handle; /* -1: none */
} cli_dir_lock;

/** Turns path's trailing "XXXXXX" into random characters, creates that
 *  directory (private), and holds it: 0. -1 when no directory could be
 *  made; 1 when it was made but another prepare's cleanup took it before
 *  it was held (the caller tries again with a new name). */
int cli_dir_make_locked(char *path, cli_dir_lock *lock);

/** Holds the directory at path if it is a real directory (not a link) of
 *  ours, older than own's, and nobody holds it: then it is stale. */
bool cli_dir_lock_if_stale(const char *path, const cli_dir_lock *own, cli_dir_lock *lock);

/** Gives a new held directory the mode of the directory `like` (POSIX;
 *  nothing on Windows, where folders inherit their permissions). */
void cli_dir_copy_mode(const cli_dir_lock *lock, const char *like);

/** Flushes the directory's entries to disk (POSIX fsync; nothing on
 *  Windows, where NTFS journals them). */
void cli_dir_sync(const cli_dir_lock *lock);
void cli_dir_sync_path(const char *dir);

void cli_dir_unlock(cli_dir_lock *lock);

/** Puts the held directory `staging` in the place of the existing
 *  directory `final`. Returns 0 with *old set to the path (malloc'd) where
 *  the old directory now is, for the caller to empty; 1 when this system
 *  cannot (the caller then empties final and renames); -1 on failure,
 *  with final untouched. POSIX: renameat2(RENAME_EXCHANGE), *old is
 *  staging. Windows: final is renamed to final + CLI_DIR_ASIDE_TAG +
 *  six random characters, then staging to final (MoveFileExW; the lock is
 *  released first); if the second rename fails the first is undone. */
int cli_dir_exchange(const char *staging, const char *final, cli_dir_lock *lock, char **old);

/** Renames the directory staging (held, or lock->handle -1) to the
 *  missing final. Windows releases the lock first (a held directory
 *  cannot be renamed there); POSIX keeps it. */
int cli_dir_rename(const char *staging, const char *final, cli_dir_lock *lock);

/** The tag of the names cli_dir_exchange() puts an old directory aside
 *  under, or NULL where it never does (POSIX). */
extern const char *const cli_dir_aside_tag;

#endif /* NCTMC_CLI_PLATFORM_H */
