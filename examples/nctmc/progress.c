/*
 * progress.c — the progress bar and the log lines that replace it off a
 * terminal.
 */
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_platform.h"

/* Whether a bar is drawn on the current stderr line: anything printed must
 * erase it first, or the text would be glued to the bar. */
static bool bar_on_screen = false;

void progress_begin(progress *p, const char *label, int64_t first, int64_t total,
                    int64_t log_every)
{
    memset(p, 0, sizeof *p);
    p->label = label;
    p->tty = isatty(STDERR_FILENO) != 0;
    p->first = first;
    p->total = total;
    p->log_every = log_every;
    p->start_time = cli_now();
    p->last_draw = -1.0;
}

void progress_set_deadline(progress *p, double deadline)
{
    p->deadline = deadline;
}

double progress_elapsed(const progress *p)
{
    return cli_now() - p->start_time;
}

double progress_eta(const progress *p, int64_t done)
{
    int64_t finished = done - p->first;
    if (finished <= 0)
        return -1.0;
    double elapsed = progress_elapsed(p);
    double eta = elapsed / (double)finished * (double)(p->total - done);
    if (p->deadline > 0.0)
        eta = fmin(eta, fmax(0.0, p->deadline - cli_now()));
    return eta;
}

void progress_format_duration(char *buf, size_t size, double seconds)
{
    if (!(seconds >= 0.0)) {
        snprintf(buf, size, "?");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%ld:%02ld", s / 60, s % 60);
}

void progress_format_count(char *buf, size_t size, double value)
{
    static const char suffix[] = {' ', 'k', 'M', 'G'};
    int i = 0;
    while (fabs(value) >= 1000.0 && i < 3) {
        value /= 1000.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, size, "%.0f", value);
    else
        snprintf(buf, size, "%.1f%c", value, suffix[i]);
}

int progress_terminal_width(int fd, int fallback)
{
    int width = cli_plat_terminal_width(fd);
    return width > 0 ? width : fallback;
}

void progress_clear_line(void)
{
    if (bar_on_screen) {
        fputs("\r\033[K", stderr);
        bar_on_screen = false;
    }
}

/* "[#####.....]" of `width` cells into buf. */
static void format_bar(char *buf, int width, double fraction)
{
    int filled = (int)(fraction * width + 0.5);
    filled = filled < 0 ? 0 : filled > width ? width : filled;
    buf[0] = '[';
    for (int i = 0; i < width; i++)
        buf[1 + i] = i < filled ? '#' : '.';
    buf[width + 1] = ']';
    buf[width + 2] = '\0';
}

/* The bar's width for a terminal `width` columns wide: what the line
 * leaves, chosen once (with room for the fields to grow a little) so the
 * bar does not jitter as numbers change length. */
/* The bar's width for a terminal `width` columns wide: what the line
 * leaves, chosen once (with room for the numbers to grow a little) so the
 * bar does not jitter as they change length. */
static int bar_cells_for(progress *p, int width, size_t head_len, size_t fields_len)
{
    if (width != p->drawn_width) {
        int room = width - 1 - (int)(strlen(p->label) + head_len + fields_len) - 6 - 2;
        p->bar_cells = room > 40 ? 40 : room < 6 ? 0 : room;
        p->drawn_width = width;
    }
    return p->bar_cells;
}

static void draw_bar(progress *p, int64_t done, const char *fields)
{
    char eta[32], head[128], bar[128] = "";
    progress_format_duration(eta, sizeof eta, progress_eta(p, done));
    double fraction = p->total > 0 ? (double)done / (double)p->total : 0.0;
    /* a time budget that ends the run first fills the bar by time */
    if (p->deadline > p->start_time)
        fraction = fmax(fraction, progress_elapsed(p) / (p->deadline - p->start_time));
    fraction = fmin(fraction, 1.0);
    snprintf(head, sizeof head, "%lld/%lld ETA %s", (long long)done, (long long)p->total, eta);
    int width = progress_terminal_width(STDERR_FILENO, 80);
    int cells = bar_cells_for(p, width, strlen(head), strlen(fields));
    if (cells > 0)
        format_bar(bar, cells, fraction);
    else /* no room for a bar: the percentage says it in four columns */
        snprintf(head, sizeof head, "%lld/%lld %3d%% ETA %s", (long long)done,
                 (long long)p->total, (int)(100.0 * fraction), eta);
    /* the whole line is cut to the terminal's width: a wrapped line could
     * not be redrawn in place */
    char line[512];
    snprintf(line, sizeof line, "%s %s%s%s  %s", p->label, bar, bar[0] ? " " : "", head,
             fields);
    if ((int)strlen(line) >= width && width > 1 && width < (int)sizeof line)
        line[width - 1] = '\0';
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    bar_on_screen = true;
}

static void log_line(progress *p, int64_t done, const char *fields)
{
    char elapsed[32], eta[32];
    progress_format_duration(elapsed, sizeof elapsed, progress_elapsed(p));
    progress_format_duration(eta, sizeof eta, progress_eta(p, done));
    fprintf(stderr, "%s %lld/%lld  %s  elapsed %s  eta %s\n", p->label, (long long)done,
            (long long)p->total, fields, elapsed, eta);
    fflush(stderr);
}

void progress_update(progress *p, int64_t done, const char *fields)
{
    if (fields == NULL)
        fields = "";
    if (p->tty) {
        double now = cli_now();
        if (done < p->total && p->last_draw >= 0.0 && now - p->last_draw < 0.1)
            return;
        p->last_draw = now;
        draw_bar(p, done, fields);
    } else if (p->log_every > 0 && (done % p->log_every == 0 || done == p->total)) {
        log_line(p, done, fields);
    }
}

void progress_end(progress *p)
{
    if (p->tty && bar_on_screen) {
        fputc('\n', stderr);
        bar_on_screen = false;
    }
}
