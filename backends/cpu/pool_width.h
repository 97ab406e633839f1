/*
 * pool_width.h — how many of the pool's threads take part in its jobs.
 *
 * Inside a host application the pool's cores are not its own: a worker can
 * be descheduled in the middle of a task, and the caller then waits for it
 * at the end of the job, sometimes for a whole scheduler time slice. When
 * that happens often, fewer threads finish sooner — on two cores with one
 * of them busy, one thread can beat two. The controller keeps the width the
 * measurements favour: after every job the caller reports how many tasks it
 * ran, how long they took it and how long it then waited for the others;
 * the others' tasks would have cost it about as long as its own, so
 *   gain = (tasks run by others) x (the caller's time per task) - wait
 * is what the other threads saved. A window of jobs with a negative total
 * halves the width; after a hold of some jobs the controller tries twice the
 * width again, and each failed try doubles the next hold. The width never
 * changes which work a task does, so results stay the same bits.
 *
 * Pure bookkeeping, no clock and no threads: the caller measures, under the
 * pool's run lock.
 */
#ifndef NCTMC_POOL_WIDTH_H
#define NCTMC_POOL_WIDTH_H

#include <stdint.h>

/* Jobs per decision. */
#define POOL_WIDTH_WINDOW 16
/* Jobs at a reduced width before the first try at twice the width, and the
 * longest such hold (a forward pass of the small DiT is ~70 jobs). */
#define POOL_WIDTH_MIN_HOLD 64
#define POOL_WIDTH_MAX_HOLD 8192

typedef struct pool_width {
    int max;              /* the pool's thread count */
    int width;            /* threads taking part now, 1 .. max */
    int window_jobs;      /* jobs measured in the current window */
    int64_t window_gain;  /* their summed gain, ns */
    int64_t hold;         /* jobs left before trying a wider team */
    int64_t next_hold;    /* the hold after the next failed try */
} pool_width;

void pool_width_init(pool_width *w, int max);

/* Records one job run at the current width (width > 1): n_tasks in all, of
 * which the caller ran caller_tasks in caller_ns, then waited wait_ns for
 * the tasks other threads had started. */
void pool_width_record(pool_width *w, int64_t n_tasks, int64_t caller_tasks, int64_t caller_ns,
                       int64_t wait_ns);

/* Records one job the caller ran alone because the width is 1. */
void pool_width_record_solo(pool_width *w);

#endif /* NCTMC_POOL_WIDTH_H */
