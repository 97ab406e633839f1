/*
 * progress.h — the progress and cancel callback of a long call that has no
 * handle of its own to cancel (model loading: nctmc_load_params.progress).
 * A counter of work units done out of a total fixed at the start; each step
 * adds units and calls the callback with (done, total), whose 0 return asks
 * the call to stop. Header only, no state beyond the struct.
 */
#ifndef NCTMC_BASE_PROGRESS_H
#define NCTMC_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct work_progress {
    int32_t (*fn)(int64_t done, int64_t total, void *user_data); /* NULL: none */
    void *user_data;
    int64_t done;
    int64_t total;
} work_progress;

/* Adds n units (never past the total) and calls the callback; false when
 * it returned 0 (stop). true for a NULL progress or callback. */
static inline bool progress_step(work_progress *p, int64_t n)
{
    if (!p || !p->fn)
        return true;
    p->done = p->total - p->done < n ? p->total : p->done + n;
    return p->fn(p->done, p->total, p->user_data) != 0;
}

#endif /* NCTMC_BASE_PROGRESS_H */
