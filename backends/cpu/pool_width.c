/*
 * pool_width.c — the thread pool's width controller (see pool_width.h).
 */
#include "pool_width.h"

void pool_width_init(pool_width *w, int max)
{
    w->max = max < 1 ? 1 : max;
    w->width = w->max;
    w->window_jobs = 0;
    w->window_gain = 0;
    w->hold = 0;
    w->next_hold = POOL_WIDTH_MIN_HOLD;
}

/* Counts a job against the hold of a reduced width; at its end, tries
 * twice the width with a fresh window, which (below the full width) holds
 * for the shortest hold before the next step up. */
static void count_hold(pool_width *w)
{
    if (w->width == w->max || --w->hold > 0)
        return;
    w->width = 2 * w->width < w->max ? 2 * w->width : w->max;
    w->hold = POOL_WIDTH_MIN_HOLD;
    w->window_jobs = 0;
    w->window_gain = 0;
}

static void decide(pool_width *w)
{
    if (w->window_gain < 0) {
        w->width = w->width / 2 > 1 ? w->width / 2 : 1;
        w->hold = w->next_hold;
        w->next_hold = 2 * w->next_hold < POOL_WIDTH_MAX_HOLD ? 2 * w->next_hold
                                                               : POOL_WIDTH_MAX_HOLD;
    } else if (w->width == w->max) {
        /* the full team pays: the next trouble starts with a short hold */
        w->next_hold = POOL_WIDTH_MIN_HOLD;
    }
    w->window_jobs = 0;
    w->window_gain = 0;
}

void pool_width_record(pool_width *w, int64_t n_tasks, int64_t caller_tasks, int64_t caller_ns,
                       int64_t wait_ns)
{
    /* a caller that ran nothing cannot price a task; the job counts as even */
    int64_t gain = 0;
    if (caller_tasks > 0)
        gain = (int64_t)((double)(n_tasks - caller_tasks) * (double)caller_ns /
                         (double)caller_tasks) - wait_ns;
    w->window_gain += gain;
    int width = w->width;
    if (++w->window_jobs >= POOL_WIDTH_WINDOW)
        decide(w);
    if (w->width == width)
        count_hold(w);
}

void pool_width_record_solo(pool_width *w)
{
    count_hold(w);
}
