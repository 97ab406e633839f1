/*
 * corpus.h — the input of `nctmc prepare`, read as a stream of documents cut
 * into segments and grouped into chunks, in fixed memory (docs/cli.md,
 * "Corpora larger than memory").
 *
 * Inputs are files, pipes, or directories walked recursively in byte order
 * of their names (hidden names skipped, links to directories not followed),
 * so the order — and with it every output byte — depends only on the
 * inputs. A document is a whole file; or, with a split line, the text
 * between lines equal to it; or, with a JSON field, one JSON Lines record.
 * Empty documents are dropped. A document longer than CORPUS_SEGMENT bytes
 * is cut into segments of at most that size, each cut where an ASCII
 * non-space character is followed by an ASCII space, tab or line break —
 * a place where byte, character and GPT-2 BPE tokenization all cut anyway,
 * so cutting changes no token (only text without any such place is cut at
 * a character boundary instead). A reader may be given a smaller segment
 * size (`nctmc prepare` does for a small corpus, so that a validation
 * share finds segments to take). Segments are the unit of the validation
 * split and of the work of one thread; a chunk is whole segments.
 *
 * For a tokenizer that needs UTF-8, plain text is checked line by line as
 * it is read (a character cut by the end of a read block is joined with
 * its rest first): a line with invalid UTF-8 is left out of its document
 * with its line break, and counted and located like a bad JSON Lines
 * record. Both passes of `prepare` read the same lines.
 */
#ifndef NCTMC_CLI_CORPUS_H
#define NCTMC_CLI_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CORPUS_SEGMENT ((size_t)64 << 10)

typedef struct corpus_segment {
    size_t offset, len;  /* in the chunk's text */
    int64_t index;       /* 0, 1, 2, ... over the whole corpus */
    bool doc_end;        /* the last segment of its document */
} corpus_segment;

typedef struct corpus_chunk {
    char *text;
    size_t len, cap;
    corpus_segment *segs;
    size_t n_segs, max_segs;
} corpus_chunk;

/* One input file, as found by the walk. */
typedef struct corpus_file {
    char *path;
    int64_t size;  /* -1: not a regular file (a pipe), size unknown */
    uint64_t dev, ino; /* the file itself (links seen through): listed once */
} corpus_file;

typedef struct corpus_options {
    const char *jsonl_field;  /* NULL: plain text */
    const char *split_line;   /* NULL: a file is a document */
    size_t chunk_bytes;       /* capacity of a chunk's text, >= 4 * CORPUS_SEGMENT */
    size_t segment_bytes;     /* CORPUS_MIN_SEGMENT .. CORPUS_SEGMENT; 0: CORPUS_SEGMENT */
    /* plain text for a tokenizer that needs UTF-8 (chars): a line with
     * invalid UTF-8 is skipped and counted, as a bad JSON Lines record is
     * (a line longer than the reader's hold keeps its valid bytes before
     * the first invalid one, and loses the rest of the line) */
    bool require_utf8;
} corpus_options;

/* The smallest segment size a reader takes. */
#define CORPUS_MIN_SEGMENT ((size_t)256)

typedef struct corpus_stats {
    int64_t bytes_read;     /* input bytes consumed */
    int64_t documents;      /* non-empty documents */
    int64_t segments;
    int64_t bad_lines;      /* JSON Lines records, or plain-text lines with invalid
                             * UTF-8 (require_utf8), skipped */
    char first_bad[512];    /* "FILE:LINE: why" of the first */
} corpus_stats;

typedef struct corpus_reader corpus_reader;

/** Expands the arguments into the sorted list of files (reports failures).
 *  A file reached twice (a link to a file already listed, or named twice)
 *  is listed once, at its first place; links that lead nowhere (dangling)
 *  or to a directory (which may loop) are skipped. Each kind skipped is
 *  counted and reported on stderr with its first path. */
bool corpus_list_files(const char *cmd, char *const *args, int n_args, corpus_file **files,
                       int *n_files);
void corpus_free_files(corpus_file *files, int n_files);

/** A reader over files[0 .. n) (borrowed). NULL when out of memory. */
corpus_reader *corpus_reader_create(const corpus_options *o, const corpus_file *files,
                                    int n_files);
void corpus_reader_free(corpus_reader *r);

/** Allocates a chunk of the reader's capacity. */
bool corpus_chunk_alloc(corpus_chunk *c, size_t chunk_bytes);
void corpus_chunk_free(corpus_chunk *c);

/**
 * Fills c (emptied first) with the next whole segments. Returns 1 when it
 * holds any, 0 at the end of the corpus, -1 on a read error (reported).
 */
int corpus_reader_fill(corpus_reader *r, corpus_chunk *c);

/** Counts so far. */
const corpus_stats *corpus_reader_stats(const corpus_reader *r);

#endif /* NCTMC_CLI_CORPUS_H */
