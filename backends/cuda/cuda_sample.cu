/*
 * cuda_sample.cu — the fused sampling operation: one thread per row running
 * the shared per-row math of lib/sample_math.h (tau-leaping, Euler,
 * posterior, final denoising, self-correction proposals), the same code
 * the CPU backend runs, with the same Philox counters.
 *
 * sample_math.h defines every sum over the vocabulary as a walk j = 0 ..
 * S-1 in order and every draw as an inverse CDF over that same walk, so a
 * row's result is a function of its inputs and its uniforms alone. Keeping
 * one thread per row keeps that definition (a block-parallel sum would
 * change the rounding of the totals a draw compares against); rows are
 * independent, so they spread over the GPU. The per-call scalars
 * (sm_step_prepare: alpha, sigma, tau) are computed on the host, exactly
 * as on the CPU, and passed by value.
 */
#include "cuda_internal.cuh"
#include "sample_math.h"

/* Few threads per block, so that the rows spread over all SMs. */
#define SAMPLE_THREADS 64

__global__ void sample_step_kernel(nctmc_sample_step_args a, sm_step st)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= a.n_rows)
        return;
    if (a.fixed_mask && a.fixed_mask[r]) {
        if (a.method == SM_METHOD_CORRECT) {
            a.proposal[r] = a.x_t[r];
            a.proposal_prob[r] = -1.0f;
        } else {
            a.x_out[r] = a.fixed_tokens[r];
        }
        return;
    }
    sm_row_in in;
    in.z = a.logits + r * a.row_stride;
    in.zu = a.logits_uncond ? a.logits_uncond + r * a.row_stride : NULL;
    in.h = a.rate_h ? a.rate_h[r] : 0.0f;
    in.h_uncond = a.rate_h_uncond ? a.rate_h_uncond[r] : 0.0f;
    in.i = a.x_t[r];
    in.sequence = a.first_sequence + r / a.seq_len;
    in.position = (int32_t)(r % a.seq_len);
    int32_t *proposal = a.proposal ? a.proposal + r : NULL;
    float *prob = a.proposal_prob ? a.proposal_prob + r : NULL;
    int32_t x = in.i;
    sm_sample_row(&st, &in, &x, proposal, prob);
    if (a.method != SM_METHOD_CORRECT)
        a.x_out[r] = x;
}

void cuda_sample_step(nctmc_backend *be, const nctmc_sample_step_args *args)
{
    cuda_backend *cb = cuda_of(be);
    if (args->n_rows <= 0 || args->seq_len <= 0)
        return;
    int64_t blocks = (args->n_rows + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    if (blocks > 0x7fffffff) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "sample_step: %lld rows",
                  (long long)args->n_rows);
        return;
    }
    sm_step st = sm_step_prepare(args->fp, args->method, args->t, args->s, args->cfg_scale,
                                 args->cfg_rule, args->temperature, args->correction_temperature,
                                 args->seed, args->step);
    sample_step_kernel<<<(unsigned)blocks, SAMPLE_THREADS, 0, cb->stream>>>(*args, st);
    cuda_launched(cb, "sample_step");
}
