/*
 * cpu_sample.c — the fused sampling operation on the CPU: rows are split
 * into fixed blocks of CPU_ROWS_PER_TASK for the pool, and each row runs the
 * shared per-row math of lib/math/sample_math.h. A row's result depends only on
 * its own inputs and its Philox counter, so the split, the thread count and
 * the order of the blocks cannot change a bit of the output.
 * exp_mode = SM_EXP_FLOAT draws the tau-leaping / Euler jumps by the fast
 * path (sm_fast_jump_draw), whose bits the CUDA backend repeats.
 */
#include "cpu_backend.h"
#include "cpu_math.h"
#include "cpu_parallel.h"

/* The fast jump draw, compiled whole with and without FMA instructions:
 * its fmaf calls are single instructions in the first and glibc's (slow,
 * correctly rounded) emulation in the second; the same bits either way. */
struct sm_fjump;
static int32_t cpu_fast_draw(const struct sm_fjump *F, double u, int32_t last);
#define SM_HOST_FAST_DRAW cpu_fast_draw
#include "math/sample_math.h"

CPU_FLATTEN static int32_t fast_draw_base(const sm_fjump *F, double u, int32_t last)
{
    return sm_seq_fast_draw(F, u, last);
}

#if CPU_FMA_VARIANT
CPU_FMA_TARGET CPU_FLATTEN static int32_t fast_draw_fma(const sm_fjump *F, double u,
                                                        int32_t last)
{
    return sm_seq_fast_draw(F, u, last);
}
#endif

static int32_t cpu_fast_draw(const struct sm_fjump *F, double u, int32_t last)
{
#if CPU_FMA_VARIANT
    if (CPU_HAS_FMA())
        return fast_draw_fma(F, u, last);
#endif
    return fast_draw_base(F, u, last);
}

typedef struct sample_job {
    const nctmc_sample_step_args *a;
    sm_step st;
} sample_job;

static void fixed_row(const nctmc_sample_step_args *a, int64_t r)
{
    if (a->method == SM_METHOD_CORRECT) {
        a->proposal[r] = a->x_t[r];
        a->proposal_prob[r] = -1.0f;
    } else {
        a->x_out[r] = a->fixed_tokens[r];
    }
}

static void sample_row(const sample_job *job, int64_t r)
{
    const nctmc_sample_step_args *a = job->a;
    if (a->fixed_mask && a->fixed_mask[r]) {
        fixed_row(a, r);
        return;
    }
    sm_row_in in;
    in.z = a->logits + r * a->row_stride;
    in.zu = a->logits_uncond ? a->logits_uncond + r * a->row_stride : NULL;
    in.h = a->rate_h ? a->rate_h[r] : 0.0f;
    in.h_uncond = a->rate_h_uncond ? a->rate_h_uncond[r] : 0.0f;
    in.i = a->x_t[r];
    in.sequence = a->first_sequence + r / a->seq_len;
    in.position = (int32_t)(r % a->seq_len);
    int32_t *proposal = a->proposal ? a->proposal + r : NULL;
    float *prob = a->proposal_prob ? a->proposal_prob + r : NULL;
    int32_t x = in.i;
    sm_sample_row(&job->st, &in, &x, proposal, prob);
    if (a->method != SM_METHOD_CORRECT)
        a->x_out[r] = x;
}

static void sample_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const sample_job *job = arg;
    int64_t r0, r1;
    cpu_task_rows(task, job->a->n_rows, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        sample_row(job, r);
}

void cpu_sample_step(nctmc_backend *be, const nctmc_sample_step_args *args)
{
    sample_job job;
    job.a = args;
    job.st = sm_step_prepare(args->fp, args->method, args->t, args->s, args->cfg_scale,
                             args->cfg_rule, args->temperature, args->correction_temperature,
                             args->seed, args->step);
    job.st.fast = args->exp_mode == SM_EXP_FLOAT;
    cpu_parallel_chunks(cpu_of(be)->pool, args->n_rows, CPU_ROWS_PER_TASK, sample_task, &job);
}
