/*
 * cpu_rotary.c — NeoX half-split rotary position embedding on the q and k
 * parts of the packed qkv rows, in place.
 *
 * A task owns a few positions and rotates that position's row in every
 * sequence. Angles, cosines and sines are computed in double from the exact
 * formula and rounded once, which keeps them within an ulp of what
 * PyTorch's table holds. They depend on the shape only, yet computing them
 * took as long as the rotation itself, once per layer and model evaluation
 * (a sampler evaluates the model every step): this file keeps the table of
 * the first shape it sees in its cache (cpu_rotary.h), one per backend (a
 * backend serves one model length in practice), and computes any other
 * shape's values per call, the same bits either way.
 */
#include "cpu_backend.h"
#include "cpu_parallel.h"
#include "cpu_rotary.h"

#include <math.h>

#include "base/alloc.h"

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
    const cpu_rope_table *table; /* NULL: compute the angles */
} rotary_job;

struct cpu_rope_table {
    int32_t seq_len, head_dim;
    float base;
    float *cos, *sin; /* [seq_len][head_dim / 2], forward sines */
};

static double inv_frequency(double base, int32_t a, int32_t head_dim)
{
    return pow(base, -2.0 * (double)a / (double)head_dim);
}

static cpu_rope_table *rope_table_build(const nctmc_allocator *alloc, int32_t seq_len,
                                        int32_t head_dim, float base)
{
    int32_t half = head_dim / 2;
    size_t n = (size_t)seq_len * (size_t)half;
    cpu_rope_table *t = mem_calloc(alloc, 1, sizeof *t);
    if (!t)
        return NULL;
    t->cos = mem_calloc(alloc, n ? n : 1, sizeof(float));
    t->sin = mem_calloc(alloc, n ? n : 1, sizeof(float));
    if (!t->cos || !t->sin) {
        mem_free(alloc, t->cos);
        mem_free(alloc, t->sin);
        mem_free(alloc, t);
        return NULL;
    }
    t->seq_len = seq_len;
    t->head_dim = head_dim;
    t->base = base;
    for (int32_t a = 0; a < half; a++) {
        double inv_freq = inv_frequency((double)base, a, head_dim);
        for (int32_t p = 0; p < seq_len; p++) {
            double angle = (double)p * inv_freq;
            t->cos[(size_t)p * (size_t)half + (size_t)a] = (float)cos(angle);
            t->sin[(size_t)p * (size_t)half + (size_t)a] = (float)sin(angle);
        }
    }
    return t;
}

static void rope_table_release(const nctmc_allocator *alloc, cpu_rope_table *t)
{
    if (!t)
        return;
    mem_free(alloc, t->cos);
    mem_free(alloc, t->sin);
    mem_free(alloc, t);
}

void cpu_rope_cache_init(cpu_rope_cache *cache)
{
    atomic_init(&cache->table, NULL);
}

void cpu_rope_cache_free(cpu_rope_cache *cache, const nctmc_allocator *alloc)
{
    rope_table_release(alloc, atomic_load(&cache->table));
    atomic_store(&cache->table, NULL);
}

/* The backend's table if it is this shape's, building it on first use; NULL
 * (compute per call) for another shape or when memory is short. Two threads
 * may build at once: one table is kept, the other freed. */
static const cpu_rope_table *rope_table(nctmc_backend *be, int32_t seq_len, int32_t head_dim,
                                        float base)
{
    _Atomic(cpu_rope_table *) *cached = &cpu_of(be)->rope.table;
    cpu_rope_table *t = atomic_load_explicit(cached, memory_order_acquire);
    if (!t) {
        cpu_rope_table *fresh = rope_table_build(be->alloc, seq_len, head_dim, base);
        if (!fresh)
            return NULL;
        if (atomic_compare_exchange_strong_explicit(cached, &t, fresh, memory_order_acq_rel,
                                                    memory_order_acquire))
            t = fresh;
        else
            rope_table_release(be->alloc, fresh);
    }
    bool same = t->seq_len == seq_len && t->head_dim == head_dim && t->base == base;
    return same ? t : NULL;
}

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

/* The cosines and (signed) sines of pairs a0 .. a0 + n at position p. */
static void angles(const rotary_job *job, int64_t p, int32_t a0, int32_t n,
                   const double *inv_freq, float *c, float *s)
{
    if (job->table) {
        size_t at = (size_t)p * (size_t)(job->head_dim / 2) + (size_t)a0;
        const float *tc = job->table->cos + at, *ts = job->table->sin + at;
        /* the table holds (float)sin; negating it is exact, so this is
         * (float)(-sin) as computed below */
        for (int32_t a = 0; a < n; a++) {
            c[a] = tc[a];
            s[a] = job->direction < 0.0 ? -ts[a] : ts[a];
        }
        return;
    }
    for (int32_t a = 0; a < n; a++) {
        double angle = (double)p * inv_freq[a];
        c[a] = (float)cos(angle);
        s[a] = (float)(job->direction * sin(angle));
    }
}

/* Rotates pairs a0 .. a0 + n at position p in every sequence. */
static void rotate_position(const rotary_job *job, int64_t p, int32_t a0, int32_t n,
                            const double *inv_freq)
{
    float c[ROTARY_FREQ_BLOCK], s[ROTARY_FREQ_BLOCK];
    angles(job, p, a0, n, inv_freq, c, s);
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
        for (int32_t a = 0; a < n && !job->table; a++)
            inv_freq[a] = inv_frequency(job->base, a0 + a, job->head_dim);
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
        .table = rope_table(be, seq_len, head_dim, base),
    };
    int64_t positions = rows < seq_len ? rows : seq_len;
    cpu_parallel_chunks(cpu_of(be)->pool, positions, ROTARY_POSITIONS_PER_TASK, rotary_task, &job);
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
