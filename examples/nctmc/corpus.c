/*
 * corpus.c — inputs walked in a fixed order, read in blocks, cut into
 * documents and segments (corpus.h). The reader holds one block, one
 * segment being built and, for JSON Lines, one line: its memory does not
 * grow with the corpus. For a tokenizer that needs UTF-8, plain text is
 * held a line at a time (at most a block) and checked before it goes on.
 */
#include "corpus.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_platform.h"
#include "jsonl.h"

#define BLOCK ((size_t)64 << 10)
/* The longest split line (--split-at), so that a line being matched fits
 * in a fixed buffer. */
#define SPLIT_LINE_MAX 256
/* Chunk room kept beyond the input bytes taken: the segment being built
 * and a held-back line are emitted on top of them. */
#define MARGIN (CORPUS_SEGMENT + 1024)

struct corpus_reader {
    corpus_options o;
    const corpus_file *files;
    int n_files, cur;
    int fd;                /* the open input, or -1 */
    bool file_done;        /* cur's bytes are all consumed */
    int64_t line_no;       /* in the current file, for messages */
    char *block;
    size_t block_len, block_pos;
    char *seg;             /* the segment being built, at most seg_max bytes */
    size_t seg_len;
    size_t seg_max;        /* the segment size: o.segment_bytes, or CORPUS_SEGMENT */
    bool doc_started;      /* the document has text (in seg or emitted) */
    int64_t next_index;
    /* --split-at: the current line while it still equals a prefix of the
     * split line is held back, so that a split line never reaches a
     * segment */
    char hold[SPLIT_LINE_MAX + 2];
    size_t hold_len;
    bool line_matching;
    /* --jsonl-field */
    char *line, *decoded;
    size_t line_len, line_cap;
    bool line_complete, line_overflow;
    /* require_utf8, plain text: the current line's bytes not yet passed
     * on, checked at the line's end or when the hold is full */
    char *held;
    size_t held_len, held_cap;
    bool held_flushed;     /* part of the line has gone on already */
    bool skip_line;        /* invalid UTF-8 seen: dropping to the line's end */
    corpus_stats stats;
};

/* ---- the walk ---------------------------------------------------------------- */

/* Links skipped while walking, for the note corpus_list_files() prints. */
typedef struct skipped_links {
    int64_t dangling, to_dirs;
    char first_dangling[512], first_to_dir[512];
} skipped_links;

static void note_link(int64_t *count, char *first, size_t size, const char *path)
{
    if ((*count)++ == 0)
        snprintf(first, size, "%s", path);
}

static bool add_file(corpus_file **files, int *n, int *cap, const char *path, int64_t size,
                     const struct stat *st)
{
    if (*n == *cap) {
        int bigger = *cap ? 2 * *cap : 64;
        corpus_file *f = realloc(*files, (size_t)bigger * sizeof *f);
        if (!f)
            return false;
        *files = f;
        *cap = bigger;
    }
    char *copy = strdup(path);
    if (!copy)
        return false;
    (*files)[*n].path = copy;
    (*files)[*n].dev = (uint64_t)st->st_dev;
    (*files)[*n].ino = (uint64_t)st->st_ino;
    (*files)[(*n)++].size = size;
    return true;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The visible names of dir, sorted bytewise. */
static bool sorted_names(const char *cmd, const char *dir, char ***names, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d) {
        cli_error(cmd, "cannot read the directory %s: %s", dir, strerror(errno));
        return false;
    }
    size_t cap = 0;
    *names = NULL;
    *n = 0;
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **bigger = realloc(*names, cap * sizeof **names);
            ok = bigger != NULL;
            if (ok)
                *names = bigger;
        }
        if (ok && !((*names)[*n] = strdup(e->d_name)))
            ok = false;
        if (ok)
            (*n)++;
    }
    closedir(d);
    if (!ok)
        cli_error(cmd, "out of memory listing %s", dir);
    else
        qsort(*names, *n, sizeof **names, compare_names);
    return ok;
}

static bool walk(const char *cmd, const char *dir, int depth, corpus_file **files, int *n,
                 int *cap, skipped_links *skipped)
{
    if (depth > 64) {
        cli_error(cmd, "%s: directories nested deeper than 64", dir);
        return false;
    }
    char **names = NULL;
    size_t n_names = 0;
    bool ok = sorted_names(cmd, dir, &names, &n_names);
    for (size_t i = 0; ok && i < n_names; i++) {
        char *path = cli_path_join(dir, names[i]);
        struct stat st, target;
        ok = path != NULL;
        if (ok && cli_plat_lstat(path, &st) == 0) {
            bool link = S_ISLNK(st.st_mode);
            bool resolved = link && stat(path, &target) == 0;
            if (S_ISDIR(st.st_mode))
                ok = walk(cmd, path, depth + 1, files, n, cap, skipped);
            else if (S_ISREG(st.st_mode))
                ok = add_file(files, n, cap, path, (int64_t)st.st_size, &st);
            else if (resolved && S_ISREG(target.st_mode))
                ok = add_file(files, n, cap, path, (int64_t)target.st_size, &target);
            else if (link && !resolved)
                note_link(&skipped->dangling, skipped->first_dangling,
                          sizeof skipped->first_dangling, path);
            else if (resolved && S_ISDIR(target.st_mode))
                note_link(&skipped->to_dirs, skipped->first_to_dir,
                          sizeof skipped->first_to_dir, path);
            /* sockets, devices, FIFOs in a directory: not corpus */
            if (!ok)
                cli_error(cmd, "out of memory");
        }
        free(path);
    }
    for (size_t i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    return ok;
}

static int compare_identity(const void *a, const void *b)
{
    const corpus_file *x = *(const corpus_file *const *)a, *y = *(const corpus_file *const *)b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return x < y ? -1 : x > y; /* the earlier entry first */
}

/* Drops every file listed before (the same device and inode: a link to it,
 * or the same path twice), keeping the order; returns how many went, the
 * first dropped path in first. */
static int drop_duplicates(corpus_file *files, int *n_files, char *first, size_t size)
{
    int n = *n_files, dropped = 0;
    corpus_file **order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order)
        return -1;
    for (int i = 0; i < n; i++)
        order[i] = &files[i];
    qsort(order, (size_t)n, sizeof *order, compare_identity);
    for (int i = 1; i < n; i++)
        if (order[i]->size >= 0 && order[i]->dev == order[i - 1]->dev &&
            order[i]->ino == order[i - 1]->ino)
            order[i]->size = -2; /* marked */
    free(order);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (files[i].size == -2) {
            if (dropped++ == 0)
                snprintf(first, size, "%s", files[i].path);
            free(files[i].path);
            continue;
        }
        files[k++] = files[i];
    }
    *n_files = k;
    return dropped;
}

static void report_skipped(const char *cmd, int duplicates, const char *first_duplicate,
                           const skipped_links *s)
{
    if (duplicates > 0)
        cli_error(cmd, "note: %d input%s skipped as the same file as an earlier one (a link "
                  "to it, or named twice; first: %s)",
                  duplicates, duplicates == 1 ? "" : "s", first_duplicate);
    if (s->dangling > 0)
        cli_error(cmd, "note: %lld dangling link%s skipped (first: %s)", (long long)s->dangling,
                  s->dangling == 1 ? "" : "s", s->first_dangling);
    if (s->to_dirs > 0)
        cli_error(cmd, "note: %lld link%s to directories skipped, not followed (they may "
                  "loop; first: %s)",
                  (long long)s->to_dirs, s->to_dirs == 1 ? "" : "s", s->first_to_dir);
}

bool corpus_list_files(const char *cmd, char *const *args, int n_args, corpus_file **files,
                       int *n_files)
{
    int cap = 0;
    *files = NULL;
    *n_files = 0;
    skipped_links skipped = {0, 0, "", ""};
    bool ok = true;
    for (int i = 0; ok && i < n_args; i++) {
        struct stat st;
        if (stat(args[i], &st) != 0) {
            cli_error(cmd, "cannot open %s: %s", args[i], strerror(errno));
            ok = false;
        } else if (S_ISDIR(st.st_mode)) {
            ok = walk(cmd, args[i], 0, files, n_files, &cap, &skipped);
        } else {
            ok = add_file(files, n_files, &cap, args[i],
                          S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1, &st);
            if (!ok)
                cli_error(cmd, "out of memory");
        }
    }
    char first_duplicate[512] = "";
    int duplicates = ok ? drop_duplicates(*files, n_files, first_duplicate,
                                          sizeof first_duplicate)
                        : 0;
    if (duplicates < 0) {
        cli_error(cmd, "out of memory");
        ok = false;
    }
    if (ok)
        report_skipped(cmd, duplicates, first_duplicate, &skipped);
    if (ok && *n_files == 0) {
        cli_error(cmd, "no input files (the directories hold none)");
        ok = false;
    }
    if (!ok) {
        corpus_free_files(*files, *n_files);
        *files = NULL;
        *n_files = 0;
    }
    return ok;
}

void corpus_free_files(corpus_file *files, int n_files)
{
    for (int i = 0; i < n_files; i++)
        free(files[i].path);
    free(files);
}

/* ---- chunks and the reader --------------------------------------------------- */

bool corpus_chunk_alloc(corpus_chunk *c, size_t chunk_bytes)
{
    memset(c, 0, sizeof *c);
    c->cap = chunk_bytes;
    c->max_segs = chunk_bytes / 64;
    c->text = malloc(chunk_bytes);
    c->segs = malloc(c->max_segs * sizeof *c->segs);
    return c->text && c->segs;
}

void corpus_chunk_free(corpus_chunk *c)
{
    free(c->text);
    free(c->segs);
    memset(c, 0, sizeof *c);
}

/* Room for input bytes in a chunk with bytes and segs free. */
static size_t room_in(size_t bytes, size_t segs)
{
    if (bytes <= MARGIN || segs <= 8)
        return 0;
    size_t n = bytes - MARGIN;
    /* a document takes at least two input bytes (text and a split line),
     * and a cut at least CORPUS_SEGMENT / 2: n bytes make under n segments */
    size_t by_segs = segs - 8;
    return n < by_segs ? n : by_segs;
}

corpus_reader *corpus_reader_create(const corpus_options *o, const corpus_file *files,
                                    int n_files)
{
    corpus_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->o = *o;
    r->files = files;
    r->n_files = n_files;
    r->fd = -1;
    r->line_matching = true;
    r->seg_max = o->segment_bytes >= CORPUS_MIN_SEGMENT && o->segment_bytes < CORPUS_SEGMENT
                     ? o->segment_bytes
                     : CORPUS_SEGMENT;
    r->block = malloc(BLOCK);
    r->seg = malloc(CORPUS_SEGMENT);
    if (o->jsonl_field) {
        /* a line, with the segment being built, must fit an empty chunk */
        r->line_cap = o->chunk_bytes - 2 * CORPUS_SEGMENT;
        r->line = malloc(r->line_cap);
        r->decoded = malloc(r->line_cap);
    } else if (o->require_utf8) {
        /* a held line must fit an empty chunk (corpus_chunk_alloc's) */
        size_t empty = room_in(o->chunk_bytes, o->chunk_bytes / 64);
        r->held_cap = empty < BLOCK ? empty : BLOCK;
        r->held = malloc(r->held_cap);
    }
    if (!r->block || !r->seg || (o->jsonl_field && (!r->line || !r->decoded)) ||
        (r->held_cap > 0 && !r->held)) {
        corpus_reader_free(r);
        return NULL;
    }
    return r;
}

void corpus_reader_free(corpus_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->block);
    free(r->seg);
    free(r->line);
    free(r->decoded);
    free(r->held);
    free(r);
}

const corpus_stats *corpus_reader_stats(const corpus_reader *r)
{
    return &r->stats;
}

/* Moves the first n bytes of the segment being built into the chunk. */
static void emit(corpus_reader *r, corpus_chunk *c, size_t n, bool doc_end)
{
    corpus_segment *s = &c->segs[c->n_segs++];
    s->offset = c->len;
    s->len = n;
    s->index = r->next_index++;
    s->doc_end = doc_end;
    memcpy(c->text + c->len, r->seg, n);
    c->len += n;
    memmove(r->seg, r->seg + n, r->seg_len - n);
    r->seg_len -= n;
    r->stats.segments++;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* Where to cut a full segment (corpus.h): the last ASCII non-space
 * followed by ASCII white space; else the last character boundary. Always
 * in (0, seg_len), so the document's end finds text left. */
static size_t cut_point(const corpus_reader *r)
{
    const char *s = r->seg;
    for (size_t p = r->seg_len - 1; p > 0; p--)
        if (is_space(s[p]) && s[p - 1] > ' ' && s[p - 1] < 0x7f)
            return p;
    size_t p = r->seg_len - 1;
    while (p > 1 && ((unsigned char)s[p] & 0xC0) == 0x80)
        p--;
    return p;
}

/* Appends document text, cutting segments off as they fill. */
static void put_text(corpus_reader *r, corpus_chunk *c, const char *data, size_t n)
{
    if (n > 0)
        r->doc_started = true;
    while (n > 0) {
        if (r->seg_len == r->seg_max)
            emit(r, c, cut_point(r), false);
        size_t k = r->seg_max - r->seg_len < n ? r->seg_max - r->seg_len : n;
        memcpy(r->seg + r->seg_len, data, k);
        r->seg_len += k;
        data += k;
        n -= k;
    }
}

static void end_document(corpus_reader *r, corpus_chunk *c)
{
    if (r->doc_started) {
        emit(r, c, r->seg_len, true);
        r->stats.documents++;
    }
    r->doc_started = false;
}

/* ---- reading ------------------------------------------------------------------- */

/* Opens the next file when none is open; false at the end of the list. */
static int open_next(corpus_reader *r)
{
    while (r->fd < 0) {
        if (r->cur >= r->n_files)
            return 0;
        const char *path = r->files[r->cur].path;
        r->fd = open(path, O_RDONLY);
        if (r->fd < 0) {
            cli_error("prepare", "cannot open %s: %s", path, strerror(errno));
            return -1;
        }
        r->file_done = false;
        r->line_no = 1;
        r->block_len = r->block_pos = 0;
    }
    return 1;
}

/* Refills the block; 0 at the end of the file. */
static int read_block(corpus_reader *r)
{
    for (;;) {
        ssize_t got = read(r->fd, r->block, BLOCK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            cli_error("prepare", "cannot read %s: %s", r->files[r->cur].path, strerror(errno));
            return -1;
        }
        r->block_len = (size_t)got;
        r->block_pos = 0;
        r->stats.bytes_read += got;
        return got > 0;
    }
}

/* --split-at: one byte of a line that so far equals a prefix of the split
 * line, held back; a byte that breaks the match releases the held ones. */
static void split_byte(corpus_reader *r, corpus_chunk *c, char ch)
{
    size_t want = strlen(r->o.split_line);
    if (ch == '\n') {
        bool cr = r->hold_len == want + 1 && r->hold[want] == '\r';
        if (r->line_matching && (r->hold_len == want || cr)) {
            end_document(r, c); /* the split line itself is dropped */
        } else {
            put_text(r, c, r->hold, r->hold_len);
            put_text(r, c, "\n", 1);
        }
        r->hold_len = 0;
        r->line_matching = true;
        return;
    }
    if (r->line_matching) {
        bool fits = r->hold_len < want ? ch == r->o.split_line[r->hold_len]
                                       : r->hold_len == want && ch == '\r';
        if (fits) {
            r->hold[r->hold_len++] = ch;
            return;
        }
        put_text(r, c, r->hold, r->hold_len);
        r->hold_len = 0;
        r->line_matching = false;
    }
    put_text(r, c, &ch, 1);
}

/* Plain text (checked, where it must be UTF-8) into the document(s). */
static void pass_text(corpus_reader *r, corpus_chunk *c, const char *p, size_t n)
{
    if (!r->o.split_line) {
        put_text(r, c, p, n);
        return;
    }
    for (size_t i = 0; i < n;) {
        /* runs of a non-matching line go in whole, up to the newline */
        if (!r->line_matching && p[i] != '\n') {
            const char *nl = memchr(p + i, '\n', n - i);
            size_t k = nl ? (size_t)(nl - (p + i)) : n - i;
            put_text(r, c, p + i, k);
            i += k;
            continue;
        }
        split_byte(r, c, p[i++]);
    }
}

/* ---- the UTF-8 check of plain text ---------------------------------------------- */

static void note_bad_line(corpus_reader *r, const char *why)
{
    if (r->stats.bad_lines++ == 0)
        snprintf(r->stats.first_bad, sizeof r->stats.first_bad, "%s:%lld: %s",
                 r->files[r->cur].path, (long long)r->line_no, why);
}

/* How many bytes at the start of p[0 .. n) are whole valid characters. */
static size_t utf8_valid_prefix(const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        uint64_t w; /* eight ASCII bytes at a time */
        if (n - i >= 8 && (memcpy(&w, u + i, 8), (w & 0x8080808080808080ull) == 0)) {
            i += 8;
            continue;
        }
        size_t len = u[i] < 0x80 ? 1 : jsonl_utf8_length(u + i, n - i);
        if (len == 0)
            break;
        i += len;
    }
    return i;
}

#define LONG_LINE_BAD "invalid UTF-8 (in a line too long to hold: its bytes before it were kept)"

/* The hold is full in the middle of a line: its whole characters go on,
 * a character cut by the hold's end waits for its rest; invalid UTF-8
 * drops the rest of the line. */
static void flush_held(corpus_reader *r, corpus_chunk *c)
{
    size_t ok = utf8_valid_prefix(r->held, r->held_len);
    pass_text(r, c, r->held, ok);
    r->held_flushed = true;
    if (r->held_len - ok < 4) { /* perhaps a character cut off: checked again with its rest */
        memmove(r->held, r->held + ok, r->held_len - ok);
        r->held_len -= ok;
        return;
    }
    note_bad_line(r, LONG_LINE_BAD);
    r->held_len = 0;
    r->skip_line = true;
}

/* The held line has ended (newline: with a line break): it goes on when
 * it is valid UTF-8, else it is skipped and counted (a long line keeps
 * the part that has gone on, with its line break). */
static void end_held_line(corpus_reader *r, corpus_chunk *c, bool newline)
{
    size_t ok = utf8_valid_prefix(r->held, r->held_len);
    bool valid = ok == r->held_len;
    if (valid || r->held_flushed) {
        pass_text(r, c, r->held, ok);
        if (newline)
            pass_text(r, c, "\n", 1);
    }
    if (!valid)
        note_bad_line(r, r->held_flushed ? LONG_LINE_BAD : "invalid UTF-8");
    r->held_len = 0;
    r->held_flushed = false;
    r->skip_line = false;
}

/* The whole lines at the start of p[0 .. n) that are valid UTF-8, when no
 * line is held: their length (0 if none), counted in line_no. */
static size_t valid_whole_lines(corpus_reader *r, const char *p, size_t n)
{
    if (r->held_len > 0 || r->skip_line)
        return 0;
    size_t ok = utf8_valid_prefix(p, n), k = ok;
    while (k > 0 && p[k - 1] != '\n')
        k--;
    for (const char *q = p, *end = p + k; (q = memchr(q, '\n', (size_t)(end - q))); q++)
        r->line_no++;
    return k;
}

/* n bytes at p through the hold, line by line; valid whole lines in the
 * block go on without the hold. */
static void take_utf8_lines(corpus_reader *r, corpus_chunk *c, const char *p, size_t n)
{
    while (n > 0) {
        size_t whole = valid_whole_lines(r, p, n);
        if (whole > 0) {
            pass_text(r, c, p, whole);
            p += whole;
            n -= whole;
            continue;
        }
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        for (size_t i = 0; i < k && !r->skip_line;) {
            size_t room = r->held_cap - r->held_len;
            size_t put = k - i < room ? k - i : room;
            memcpy(r->held + r->held_len, p + i, put);
            r->held_len += put;
            i += put;
            if (r->held_len == r->held_cap)
                flush_held(r, c);
        }
        if (nl) {
            if (r->skip_line) {
                pass_text(r, c, "\n", 1); /* the kept start of a long line ends */
                r->skip_line = false;
                r->held_flushed = false;
            } else {
                end_held_line(r, c, true);
            }
            r->line_no++;
            k++;
        }
        p += k;
        n -= k;
    }
}

/* Plain text: up to n bytes of the block into the document(s). */
static void take_text(corpus_reader *r, corpus_chunk *c, size_t n)
{
    const char *p = r->block + r->block_pos;
    r->block_pos += n;
    if (r->held)
        take_utf8_lines(r, c, p, n);
    else
        pass_text(r, c, p, n);
}

static void end_of_file_text(corpus_reader *r, corpus_chunk *c)
{
    if (r->held && (r->held_len > 0 || r->skip_line)) /* a last line without its newline */
        end_held_line(r, c, false);
    if (r->o.split_line) {
        size_t want = strlen(r->o.split_line);
        if (!(r->line_matching && r->hold_len == want && want > 0))
            put_text(r, c, r->hold, r->hold_len);
        r->hold_len = 0;
        r->line_matching = true;
    }
    end_document(r, c); /* a document never spans two files */
}

/* Room in c for n more input bytes: the bytes, the segment being built,
 * and a segment record for every place the text could be cut. */
static size_t room_for_text(const corpus_chunk *c)
{
    return room_in(c->cap - c->len, c->max_segs - c->n_segs);
}

static int fill_text(corpus_reader *r, corpus_chunk *c)
{
    for (;;) {
        int st = open_next(r);
        if (st <= 0)
            return st;
        if (!r->file_done && r->block_pos == r->block_len) {
            st = read_block(r);
            if (st < 0)
                return -1;
            r->file_done = st == 0;
        }
        if (r->file_done) {
            if (room_for_text(c) == 0 || room_for_text(c) < r->held_len)
                return 1; /* the document's end goes into the next chunk */
            end_of_file_text(r, c);
            close(r->fd);
            r->fd = -1;
            r->cur++;
            continue;
        }
        /* a held line goes on with the bytes that end it */
        size_t room = room_for_text(c);
        if (room <= r->held_len)
            return 1;
        room -= r->held_len;
        size_t n = r->block_len - r->block_pos;
        take_text(r, c, n < room ? n : room);
    }
}

/* ---- JSON Lines ---------------------------------------------------------------- */

/* Collects bytes of the block up to the end of a line; true once the line
 * is complete (a line too long for the buffer is marked and skipped). */
static bool gather_line(corpus_reader *r)
{
    const char *p = r->block + r->block_pos;
    size_t n = r->block_len - r->block_pos;
    const char *nl = memchr(p, '\n', n);
    size_t k = nl ? (size_t)(nl - p) : n;
    if (!r->line_overflow && r->line_len + k <= r->line_cap) {
        memcpy(r->line + r->line_len, p, k);
        r->line_len += k;
    } else {
        r->line_overflow = true;
    }
    r->block_pos += nl ? k + 1 : k;
    return nl != NULL;
}

/* The record on the complete line into the chunk, if there is room; false
 * when the chunk must be handed on first. */
static bool take_record(corpus_reader *r, corpus_chunk *c)
{
    size_t segs_needed = 2 * (r->line_len / (r->seg_max / 2)) + 4;
    if (c->cap - c->len < r->line_len + CORPUS_SEGMENT || c->max_segs - c->n_segs < segs_needed)
        return false;
    if (r->line_overflow) {
        note_bad_line(r, "longer than the line limit of --memory-mb");
    } else {
        size_t n = 0;
        const char *why = NULL;
        jsonl_result res = jsonl_extract(r->line, r->line_len, r->o.jsonl_field, r->decoded,
                                         &n, &why);
        if (res == JSONL_BAD)
            note_bad_line(r, why);
        else if (res == JSONL_TEXT) {
            put_text(r, c, r->decoded, n);
            end_document(r, c);
        }
    }
    r->line_len = 0;
    r->line_overflow = false;
    r->line_complete = false;
    r->line_no++;
    return true;
}

static int fill_jsonl(corpus_reader *r, corpus_chunk *c)
{
    for (;;) {
        if (r->line_complete && !take_record(r, c))
            return 1;
        if (r->fd >= 0 && r->file_done) {
            close(r->fd);
            r->fd = -1;
            r->cur++;
        }
        int st = open_next(r);
        if (st <= 0)
            return st;
        if (r->block_pos == r->block_len) {
            st = read_block(r);
            if (st < 0)
                return -1;
            if (st == 0) {
                r->file_done = true;
                /* a last line without its newline is still a line */
                r->line_complete = r->line_len > 0 || r->line_overflow;
                continue;
            }
        }
        r->line_complete = gather_line(r);
    }
}

int corpus_reader_fill(corpus_reader *r, corpus_chunk *c)
{
    c->len = 0;
    c->n_segs = 0;
    int st = r->o.jsonl_field ? fill_jsonl(r, c) : fill_text(r, c);
    if (st < 0)
        return -1;
    return c->n_segs > 0 ? 1 : st;
}
