/*
 * progress.h — progress of a long loop: on a terminal one progress bar line
 * redrawn in place (at most ten times a second); otherwise plain log lines
 * every `log_every` units, so logs of batch jobs stay readable.
 */
#ifndef NCTMC_CLI_PROGRESS_H
#define NCTMC_CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct progress {
    const char *label;     /* "train", "sample", ... */
    bool tty;              /* draw a bar on stderr instead of log lines */
    int64_t first, total;  /* units done at the start (resume) and the goal */
    int64_t log_every;     /* log line interval when not a tty; 0 = none */
    double start_time;
    double last_draw;
    double deadline;       /* seconds on cli_now()'s clock; 0 = none */
    int bar_cells;         /* the bar's width, fixed while the terminal's is */
    int drawn_width;       /* the terminal width bar_cells was chosen for */
} progress;

/** Starts tracking `total` units of which `first` are already done. */
void progress_begin(progress *p, const char *label, int64_t first, int64_t total,
                    int64_t log_every);

/** Limits the ETA to a wall-clock deadline (a time budget). */
void progress_set_deadline(progress *p, double deadline);

/**
 * Reports `done` units; `fields` is extra text ("loss 1.23  4.5k tok/s").
 * Draws the bar (throttled) on a terminal, or logs a line every log_every
 * units (and at the end) otherwise.
 */
void progress_update(progress *p, int64_t done, const char *fields);

/** Leaves the bar line finished, so later output starts on a new line. */
void progress_end(progress *p);

/** Erases a bar that is on screen (call before printing anything else);
 *  the next update redraws it. Safe to call when there is none. */
void progress_clear_line(void);

/** Seconds since the start, and the estimated seconds to the goal (or the
 *  deadline, whichever comes first); -1 while unknown. */
double progress_elapsed(const progress *p);
double progress_eta(const progress *p, int64_t done);

/** "1:02:03" or "2:03" into buf. */
void progress_format_duration(char *buf, size_t size, double seconds);

/** "12.3k" style into buf: value with a k/M/G suffix. */
void progress_format_count(char *buf, size_t size, double value);

/** Width of the terminal on stderr, or `fallback` when it is not one. */
int progress_terminal_width(int fd, int fallback);

#endif /* NCTMC_CLI_PROGRESS_H */
