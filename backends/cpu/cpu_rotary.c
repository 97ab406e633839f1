/*
 * cpu_rotary.c — NeoX half-split rotary position embedding on the q and k
 * parts of the packed qkv rows, in place.
 *
 * A task owns a few positions and rotates that position's row in every
 * sequence, so each cos/sin pair is computed once per call and position
 * rather than once per row. Angles, cosines and sines are computed in double
 * from the exact formula and rounded once, which keeps them within an ulp of
 * what PyTorch's table holds.
 */
#include "cpu_backend.h"

#include <math.h>

/* Positions per task. */
#define ROTARY_POSITIONS_PER_TASK 4
/* Frequencies handled per pass: bounds the stack tables without bounding
 * head_dim. */
#define ROTARY_FREQ_BLOCK 512

typedef struct rotary_job {
    int64_t rows;
    int32_t seq_len, heads, head_dim;
    double base;
    /* +1 rotates forward; -1 rotates back (the transpose flips the sines). */
    double direction;
    float *qkv;
} rotary_job;

/* (x1, x2) -> (x1 c - x2 s, x2 c + x1 s) over one block of pairs. */
static void rotate_pairs(float *restrict x1, float *restrict x2, const float *restrict c,
                         const float *restrict s, int32_t n)
{
    for (int32_t a = 0; a < n; a++) {
        float u = x1[a], v = x2[a];
        x1[a] = u * c[a] - v * s[a];
        x2[a] = v * c[a] + u * s[a];
    }
}

/* Rotates pairs a0 .. a0 + n of every q and k head of one row. */
static void rotate_row(const rotary_job *job, float *row, int32_t a0, int32_t n,
                       const float *c, const float *s)
{
    int32_t half = job->head_dim / 2;
    for (int32_t h = 0; h < 2 * job->heads; h++) {
        float *x = row + (int64_t)h * job->head_dim + a0;
        rotate_pairs(x, x + half, c, s, n);
    }
}

/* Rotates pairs a0 .. a0 + n at position p in every sequence. */
static void rotate_position(const rotary_job *job, int64_t p, int32_t a0, int32_t n,
                            const double *inv_freq)
{
    float c[ROTARY_FREQ_BLOCK], s[ROTARY_FREQ_BLOCK];
    for (int32_t a = 0; a < n; a++) {
        double angle = (double)p * inv_freq[a];
        c[a] = (float)cos(angle);
        s[a] = (float)(job->direction * sin(angle));
    }
    int64_t stride = 3 * (int64_t)job->heads * job->head_dim;
    for (int64_t r = p; r < job->rows; r += job->seq_len)
        rotate_row(job, job->qkv + r * stride, a0, n, c, s);
}

static void rotary_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const rotary_job *job = arg;
    int32_t half = job->head_dim / 2;
    int64_t p0 = task * ROTARY_POSITIONS_PER_TASK;
    int64_t p1 = p0 + ROTARY_POSITIONS_PER_TASK;
    if (p1 > job->seq_len)
        p1 = job->seq_len;
    double inv_freq[ROTARY_FREQ_BLOCK];
    for (int32_t a0 = 0; a0 < half; a0 += ROTARY_FREQ_BLOCK) {
        int32_t n = half - a0 < ROTARY_FREQ_BLOCK ? half - a0 : ROTARY_FREQ_BLOCK;
        for (int32_t a = 0; a < n; a++)
            inv_freq[a] = pow(job->base, -2.0 * (double)(a0 + a) / (double)job->head_dim);
        for (int64_t p = p0; p < p1; p++)
            rotate_position(job, p, a0, n, inv_freq);
    }
}

static void rotary_run(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                       int32_t head_dim, float base, double direction, float *qkv)
{
    if (rows <= 0 || seq_len <= 0)
        return;
    rotary_job job = {
        .rows = rows, .seq_len = seq_len, .heads = heads, .head_dim = head_dim,
        .base = (double)base, .direction = direction, .qkv = qkv,
    };
    int64_t positions = rows < seq_len ? rows : seq_len;
    cpu_parallel_chunks(cpu_of(be), positions, ROTARY_POSITIONS_PER_TASK, rotary_task, &job);
}

void cpu_rotary_forward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                        int32_t head_dim, float base, float *qkv)
{
    rotary_run(be, rows, seq_len, heads, head_dim, base, 1.0, qkv);
}

void cpu_rotary_backward(nctmc_backend *be, int64_t rows, int32_t seq_len, int32_t heads,
                         int32_t head_dim, float base, float *dqkv)
{
    rotary_run(be, rows, seq_len, heads, head_dim, base, -1.0, dqkv);
}
