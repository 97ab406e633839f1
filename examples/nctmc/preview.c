/*
 * preview.c — lays out decoded image pictures side by side (preview.h).
 */
#include "preview.h"

#include <stdlib.h>
#include <string.h>

enum { PICTURE_GAP = 2 };

/* One picture cut into lines, pointing into the caller's string. */
typedef struct picture {
    const char *text;
    int n_lines;
    int columns;  /* of its widest line */
} picture;

int preview_text_columns(const char *text, size_t len)
{
    int columns = 0;
    for (size_t i = 0; i < len; i++)
        columns += ((unsigned char)text[i] & 0xC0) != 0x80; /* not a UTF-8 continuation */
    return columns;
}

static size_t line_length(const char *line)
{
    const char *end = strchr(line, '\n');
    return end ? (size_t)(end - line) : strlen(line);
}

static picture measure(const char *text)
{
    picture p = {text, 0, 0};
    const char *line = text;
    while (*line != '\0') {
        size_t len = line_length(line);
        int cols = preview_text_columns(line, len);
        p.columns = cols > p.columns ? cols : p.columns;
        p.n_lines++;
        line += len;
        if (*line == '\n')
            line++;
    }
    return p;
}

/* The start of line `k` of a picture, or NULL past its end. */
static const char *nth_line(const picture *p, int k)
{
    if (k >= p->n_lines)
        return NULL;
    const char *line = p->text;
    for (int i = 0; i < k; i++)
        line += line_length(line) + 1;
    return line;
}

static void print_row(FILE *out, const picture *pics, int n, const char *title, int title_cols)
{
    int height = 0;
    for (int i = 0; i < n; i++)
        height = pics[i].n_lines > height ? pics[i].n_lines : height;
    for (int k = 0; k < height; k++) {
        if (title_cols > 0)
            fprintf(out, "%-*s", title_cols, k == 0 && title ? title : "");
        for (int i = 0; i < n; i++) {
            const char *line = nth_line(&pics[i], k);
            size_t len = line ? line_length(line) : 0;
            int pad = pics[i].columns - (line ? preview_text_columns(line, len) : 0);
            fprintf(out, "%.*s", (int)len, line ? line : "");
            if (i + 1 < n)
                fprintf(out, "%*s", pad + PICTURE_GAP, "");
        }
        fputc('\n', out);
    }
}

/* How many of pics[0..n) fit in `room` columns side by side (at least 1). */
static int fitting(const picture *pics, int n, int room)
{
    int used = 0, count = 0;
    while (count < n) {
        int need = pics[count].columns + (count > 0 ? PICTURE_GAP : 0);
        if (count > 0 && used + need > room)
            break;
        used += need;
        count++;
    }
    return count;
}

void preview_print(FILE *out, const char *const *pictures, int n, int per_row,
                   const char *const *row_titles, int width)
{
    picture *pics = malloc((size_t)(n > 0 ? n : 1) * sizeof *pics);
    if (pics == NULL)
        return;
    for (int i = 0; i < n; i++)
        pics[i] = measure(pictures[i]);
    int title_cols = 0;
    for (int r = 0; row_titles != NULL && r * per_row < n; r++) {
        int cols = (int)strlen(row_titles[r]) + 1;
        title_cols = cols > title_cols ? cols : title_cols;
    }
    for (int first = 0; first < n; first += per_row) {
        int in_row = n - first < per_row ? n - first : per_row;
        const char *title = row_titles ? row_titles[first / per_row] : NULL;
        for (int done = 0; done < in_row;) {
            int k = fitting(pics + first + done, in_row - done, width - title_cols);
            print_row(out, pics + first + done, k, done == 0 ? title : NULL, title_cols);
            done += k;
        }
        fputc('\n', out);
    }
    free(pics);
}
