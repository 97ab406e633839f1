/*
 * sample_math.h — the per-position sampling math, written once for every
 * backend (static inline, host+device, nothing beyond math.h): the model's
 * rates with temperature and classifier-free guidance, the tau-leaping and
 * Euler decisions, the clean-token recovery of paper App. E generalised to
 * the three forward processes, the posterior sampler, the final denoising
 * argmax, the self-correction proposal, the prior draw, and how every random
 * number is keyed. Guidance has two rules (SM_CFG_*): the logits and log
 * rates mixed separately, or the rates themselves (one extra factor in the
 * exit rate). docs/math.md ("Sampling") derives each formula.
 *
 * Conventions. A row is one position: current state i, the model's jump
 * logits z (>= S floats; the padding is never read) and, for the learned
 * link, the exit-rate head's h. Per-row scalars are double (rates span many
 * orders of magnitude near t = 0 and t = 1); every sum over the vocabulary
 * runs j = 0, 1, ..., S-1 in that order, and a categorical draw is the
 * inverse CDF of one uniform walked in the same order, recomputing the very
 * weights whose total it compares against — so a draw is a pure function of
 * (inputs, uniform), whatever thread or kernel evaluates it.
 *
 * Every loop over the vocabulary goes through four primitives ("Vocabulary
 * loops" below: max, sum, sum-then-draw, argmax) over a term chosen by
 * sm_terms. On the host they are the sequential loops just described. A
 * CUDA translation unit that defines SM_BLOCK_LOOPS runs each row with a
 * whole thread block and supplies block-cooperative versions
 * (backends/cuda/cuda_sample.cu): the same terms and the same j-order draw,
 * with the sums taken in a fixed blocked order — so the totals a draw
 * compares against differ from the host's in the last bits, and a draw can
 * differ only where the uniform falls within that rounding of a boundary.
 *
 * The fast jump draw (sm_step.fast, from nctmc_sample_step_args.exp_mode;
 * "The float exp and the fast jump draw" below) is the exception: float
 * logits, a float exp written as explicit IEEE operations (sm_expf), one
 * read of the row, and an order of operations that is part of its
 * definition, so the host and a device give the same bits and the same
 * draws. It covers the tau-leaping and Euler jumps; the default is off.
 */
#ifndef NCTMC_SAMPLE_MATH_H
#define NCTMC_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>

#include "forward_process.h"
#include "philox.h"

/* What the fused sampling operation does to a row (nctmc_sample_step_args).
 * The first three equal nctmc_sample_method's values. */
enum {
    SM_METHOD_TAU_LEAPING = 0, /* jump w.p. 1 - exp(-lambda tau), to j ~ r */
    SM_METHOD_EULER = 1,       /* jump w.p. min(lambda tau, 1), to j ~ r */
    SM_METHOD_POSTERIOR = 2,   /* x_s ~ sum_x0 p0(x0) q(x_t | x_s) q(x_s | x0) */
    SM_METHOD_DENOISE = 3,     /* argmax_x0 p0(x0) q_{t|0}(x_t | x0) */
    SM_METHOD_CORRECT = 4      /* propose x0 ~ Temp(p0; tau_sc), report p0(x0) */
};

/* How guidance combines the two passes (nctmc_cfg_rule's values). */
enum {
    SM_CFG_SEPARATE = 0, /* log lambda and logits each (1 - w) uncond + w cond */
    SM_CFG_RATES = 1     /* R_w(j) = R_c(j)^w R_u(j)^(1 - w) for every j != i */
};

/* ------------------------------------------------------------------------ */
/* Random numbers                                                           */
/* ------------------------------------------------------------------------ */

/* Sequences are keyed by a 56-bit index: its low 32 bits fill one counter
 * word, the high 24 bits share the first word with the 8-bit purpose. */
#define SM_MAX_SEQUENCE ((int64_t)1 << 56)

/* Two independent uniforms of one Philox block: `decide` for a yes/no
 * decision, `pick` for a categorical draw. */
typedef struct sm_uniforms {
    double decide;
    double pick;
} sm_uniforms;

/* A double uniform on (0, 1) from 53 random bits (+ half an ulp, so never 0
 * or 1): jump probabilities of clean tokens late in sampling are far below
 * the 2^-24 resolution of a float uniform. */
static inline NCTMC_HD double sm_uniform53(uint32_t hi, uint32_t lo)
{
    uint64_t k = ((uint64_t)(hi >> 5) << 26) | (uint64_t)(lo >> 6);
    return ((double)k + 0.5) * (1.0 / 9007199254740992.0);
}

/* The counter's position word for draws that belong to a whole sequence
 * (the Gibbs corrector's choice of position): 2^32 - 1, which no row has. */
#define SM_SEQUENCE_POSITION ((int32_t)-1)

/* The uniforms for (purpose, step, sequence, position) under key = seed. */
static inline NCTMC_HD sm_uniforms sm_draw(uint64_t seed, uint32_t purpose, uint32_t step,
                                           int64_t sequence, int32_t position)
{
    uint64_t seq = (uint64_t)sequence;
    philox4x32 c = {{(purpose & 0xFFu) | ((uint32_t)(seq >> 32) << 8), step, (uint32_t)seq,
                     (uint32_t)position}};
    philox4x32 b = philox4x32_10(c, seed);
    sm_uniforms u = {sm_uniform53(b.v[0], b.v[1]), sm_uniform53(b.v[2], b.v[3])};
    return u;
}

/* ------------------------------------------------------------------------ */
/* The model's rates: temperature and classifier-free guidance              */
/* ------------------------------------------------------------------------ */

/* log lambda_theta under guidance w by SM_CFG_SEPARATE: (1 - w) *
 * unconditional + w * conditional (has_uncond false: the conditional
 * alone). This is also the lambda_c^w lambda_u^(1 - w) part of SM_CFG_RATES
 * (sm_guided_log_rate adds the rest). The masked process's rate is
 * exact and the same in both passes, so it is returned as is (also keeping
 * -inf out of the combination, where (1 - w) * -inf would be NaN). */
static inline NCTMC_HD double sm_log_rate(const nctmc_fp *fp, double t, int32_t i, float h,
                                          int has_uncond, float h_uncond, double w)
{
    double lc = fp_model_log_rate(fp, t, i, h);
    if (!has_uncond || fp->process == NCTMC_FP_MASKED)
        return lc;
    double lu = fp_model_log_rate(fp, t, i, h_uncond);
    return (1.0 - w) * lu + w * lc;
}

/* The jump distribution r(j | i) = softmax_{j != i}(g_j), with
 *   g_j = ((1 - w) zu_j + w z_j) / T   (zu NULL: g_j = z_j / T).
 * Combining the logits is the same as combining the two passes' log r and
 * renormalising over j != i: each log r is its logits minus a constant per
 * row, and a constant drops out of the softmax. */
typedef struct sm_jump {
    const float *z;
    const float *zu;     /* unconditional logits, or NULL */
    double w;            /* guidance scale */
    double inv_temp;     /* 1 / T */
    int32_t S;
    int32_t i;           /* excluded state */
    double max;          /* max_{j != i} g_j */
    double sum;          /* sum_{j != i} exp(g_j - max), in order */
    double log_sum;
} sm_jump;

static inline NCTMC_HD double sm_jump_logit(const sm_jump *J, int32_t j)
{
    double g = (double)J->z[j];
    if (J->zu)
        g = (1.0 - J->w) * (double)J->zu[j] + J->w * g;
    return g * J->inv_temp;
}

/* exp(g_j - max): the unnormalised weight every pass recomputes alike. */
static inline NCTMC_HD double sm_jump_weight(const sm_jump *J, int32_t j)
{
    return exp(sm_jump_logit(J, j) - J->max);
}

/* log r(j | i) for j != i (-inf at j = i). */
static inline NCTMC_HD double sm_jump_logprob(const sm_jump *J, int32_t j)
{
    if (j == J->i)
        return -INFINITY;
    return sm_jump_logit(J, j) - J->max - J->log_sum;
}

/* ------------------------------------------------------------------------ */
/* Clean-token recovery (paper App. E, for every process): p0's weights     */
/* ------------------------------------------------------------------------ */

/*
 * The true reverse rate out of i given the other positions is
 *   lambda(i) r(j | i) = sigma_t pi_i q(j) / q(i),  q = alpha p0 + (1 - alpha) pi,
 * q the marginal of this position's x_t given the rest (the rate
 * factorisation R_t(i, j) = R_fwd(j, i) q(j) / q(i), with R_fwd(j, i) =
 * sigma pi_i). Summing over j != i and inverting:
 *   q(i) = sigma pi_i / (sigma pi_i + lambda) = 1 / (1 + e^rho),
 *   rho  = log lambda - log(sigma pi_i),
 *   q(j) = (1 - q(i)) r(j | i)                                  (j != i),
 *   p0   = Normalize over data tokens of [(q - (1 - alpha) pi) / alpha]_+.
 * Uniform: pi = 1/S, the paper's formula. Masked, at the mask: lambda is the
 * exact sigma alpha / (1 - alpha), so q(m) = 1 - alpha and p0 = r exactly.
 * A state the forward process never enters (pi_i = 0: a data token under the
 * masked process) has rate 0 and says nothing; there x0 = i for certain, so
 * p0 = e_i. p0 is p(x0 | the other positions): the current token's own
 * evidence is not in it (docs/dev/design.md, "The clean-token distribution").
 *
 * Fallbacks (documented in docs/math.md): if clipping leaves no mass on any
 * data token (the mixture's mask entry took it all), p0 is q restricted to
 * the data tokens; if that is empty too, uniform over them.
 */
enum { SM_P0_CLIPPED = 0, SM_P0_NOISED = 1, SM_P0_POINT = 2, SM_P0_UNIFORM = 3 };

typedef struct sm_p0 {
    sm_jump J;
    int32_t mode;
    int32_t n_data;      /* data tokens are 0 .. n_data - 1 */
    double q_i;          /* recovered q(i) */
    double q_rest;       /* 1 - q(i), computed on its own for precision */
    double beta_i;       /* (1 - alpha) pi_i */
    double beta_data;    /* (1 - alpha) pi of a data token */
    double total;        /* sum of sm_p0_weight over the data tokens, in order */
} sm_p0;

/* The unnormalised p0(j) of a data token j (the 1/alpha drops out). */
static inline NCTMC_HD double sm_p0_weight(const sm_p0 *P, int32_t j)
{
    int32_t i = P->J.i;
    switch (P->mode) {
    case SM_P0_POINT: return j == i ? 1.0 : 0.0;
    case SM_P0_UNIFORM: return 1.0;
    case SM_P0_NOISED:
        return j == i ? P->q_i : P->q_rest * exp(sm_jump_logprob(&P->J, j));
    default: {
        double d = j == i ? P->q_i - P->beta_i
                          : P->q_rest * exp(sm_jump_logprob(&P->J, j)) - P->beta_data;
        return d > 0.0 ? d : 0.0;
    }
    }
}

/* p0 at a data token j. */
static inline NCTMC_HD double sm_p0_prob(const sm_p0 *P, int32_t j)
{
    return sm_p0_weight(P, j) / P->total;
}

/* m(x): the forward marginal at s of the recovered p0. */
static inline NCTMC_HD double sm_posterior_m(const nctmc_fp *fp, const sm_p0 *P,
                                             double alpha_s, int32_t x)
{
    double p0 = x < P->n_data ? sm_p0_prob(P, x) : 0.0;
    return alpha_s * p0 + (1.0 - alpha_s) * fp_prior(fp, x);
}

/* ------------------------------------------------------------------------ */
/* Vocabulary loops                                                         */
/* ------------------------------------------------------------------------ */

/* The terms a loop walks: one value per j = 0 .. n-1, `skip` left out. */
enum {
    SM_TERM_JUMP_LOGIT = 0,  /* g_j of J (for its max) */
    SM_TERM_JUMP_WEIGHT = 1, /* exp(g_j - max) of J */
    SM_TERM_P0_WEIGHT = 2,   /* sm_p0_weight of P */
    SM_TERM_POSTERIOR_M = 3, /* m(j) of P at alpha_s = a */
    SM_TERM_TEMPERED_P0 = 4, /* (p0 weight / wmax)^(1/tau): a = log wmax, b = 1/tau */
    SM_TERM_DENOISE = 5      /* p0 weight times q(i | j): a at j = i, b elsewhere; or
                                the weight alone when flag is 0 (i is not data) */
};

typedef struct sm_terms {
    int32_t kind;
    int32_t n;
    int32_t skip;        /* a j to leave out, or -1 */
    int32_t flag;
    const sm_jump *J;
    const sm_p0 *P;
    const nctmc_fp *fp;
    double a, b;
} sm_terms;

static inline NCTMC_HD sm_terms sm_terms_of(int32_t kind, int32_t n, int32_t skip,
                                            const sm_jump *J, const sm_p0 *P)
{
    sm_terms T;
    T.kind = kind;
    T.n = n;
    T.skip = skip;
    T.flag = 0;
    T.J = J;
    T.P = P;
    T.fp = 0;
    T.a = 0.0;
    T.b = 0.0;
    return T;
}

static inline NCTMC_HD double sm_term(const sm_terms *T, int32_t j)
{
    switch (T->kind) {
    case SM_TERM_JUMP_LOGIT: return sm_jump_logit(T->J, j);
    case SM_TERM_JUMP_WEIGHT: return sm_jump_weight(T->J, j);
    case SM_TERM_P0_WEIGHT: return sm_p0_weight(T->P, j);
    case SM_TERM_POSTERIOR_M: return sm_posterior_m(T->fp, T->P, T->a, j);
    case SM_TERM_TEMPERED_P0: {
        double w = sm_p0_weight(T->P, j);
        return w > 0.0 ? exp((log(w) - T->a) * T->b) : 0.0;
    }
    default: {
        double s = sm_p0_weight(T->P, j);
        if (T->flag)
            s *= j == T->P->J.i ? T->a : T->b;
        return s;
    }
    }
}

/* The sequential loops: j = 0 .. n-1 in order. */

/* max(init, every term), NaN terms ignored. */
static inline NCTMC_HD double sm_seq_vmax(sm_terms T, double init)
{
    double m = init;
    for (int32_t j = 0; j < T.n; j++)
        if (j != T.skip) {
            double v = sm_term(&T, j);
            m = v > m ? v : m;
        }
    return m;
}

static inline NCTMC_HD double sm_seq_vsum(sm_terms T)
{
    double s = 0.0;
    for (int32_t j = 0; j < T.n; j++)
        if (j != T.skip)
            s += sm_term(&T, j);
    return s;
}

/* The first j whose running sum exceeds target; if none does (rounding),
 * the last j with a positive term; if none has one, `last`. */
static inline NCTMC_HD int32_t sm_seq_vpick(sm_terms T, double target, int32_t last)
{
    double cum = 0.0;
    for (int32_t j = 0; j < T.n; j++) {
        if (j == T.skip)
            continue;
        double w = sm_term(&T, j);
        if (w > 0.0)
            last = j;
        cum += w;
        if (cum > target)
            return j;
    }
    return last;
}

/* The categorical draw with uniform u: sm_seq_vpick at u times the total. */
static inline NCTMC_HD int32_t sm_seq_vdraw(sm_terms T, double u, int32_t last)
{
    return sm_seq_vpick(T, u * sm_seq_vsum(T), last);
}

/* The smallest j holding the largest term (terms are >= 0; 0 if every term
 * is NaN). */
static inline NCTMC_HD int32_t sm_seq_vargmax(sm_terms T)
{
    int32_t best = 0;
    double best_score = -1.0;
    for (int32_t j = 0; j < T.n; j++) {
        if (j == T.skip)
            continue;
        double s = sm_term(&T, j);
        if (s > best_score) {
            best_score = s;
            best = j;
        }
    }
    return best;
}

/* The block-cooperative loops of a CUDA translation unit that asks for them
 * (every thread of the block calls with the same terms and gets the same
 * result; see backends/cuda/cuda_sample.cu), else the sequential ones. */
#if defined(SM_BLOCK_LOOPS) && defined(__CUDA_ARCH__)
static __device__ double sm_block_vmax(sm_terms T, double init);
static __device__ double sm_block_vsum(sm_terms T);
static __device__ int32_t sm_block_vpick(sm_terms T, double u, int scale_by_total,
                                         int32_t last);
static __device__ int32_t sm_block_vargmax(sm_terms T);
#define SM_LOOP(block, sequential) block
#else
#define SM_LOOP(block, sequential) sequential
#endif

static inline NCTMC_HD double sm_vmax(sm_terms T, double init)
{
    return SM_LOOP(sm_block_vmax(T, init), sm_seq_vmax(T, init));
}

static inline NCTMC_HD double sm_vsum(sm_terms T)
{
    return SM_LOOP(sm_block_vsum(T), sm_seq_vsum(T));
}

static inline NCTMC_HD int32_t sm_vpick(sm_terms T, double target, int32_t last)
{
    return SM_LOOP(sm_block_vpick(T, target, 0, last), sm_seq_vpick(T, target, last));
}

static inline NCTMC_HD int32_t sm_vdraw(sm_terms T, double u, int32_t last)
{
    return SM_LOOP(sm_block_vpick(T, u, 1, last), sm_seq_vdraw(T, u, last));
}

static inline NCTMC_HD int32_t sm_vargmax(sm_terms T)
{
    return SM_LOOP(sm_block_vargmax(T), sm_seq_vargmax(T));
}

/* The jump distribution's inputs and its max (one pass over the row); the
 * sum is left to the caller. */
static inline NCTMC_HD sm_jump sm_jump_max(const float *z, const float *zu, double w,
                                           double temperature, int32_t S, int32_t i)
{
    sm_jump J;
    J.z = z;
    J.zu = zu;
    J.w = w;
    J.inv_temp = 1.0 / temperature;
    J.S = S;
    J.i = i;
    J.max = sm_vmax(sm_terms_of(SM_TERM_JUMP_LOGIT, S, i, &J, 0), -INFINITY);
    J.sum = 0.0;
    J.log_sum = 0.0;
    return J;
}

/* Two passes over the row: the max, then the sum of exponentials. */
static inline NCTMC_HD sm_jump sm_jump_init(const float *z, const float *zu, double w,
                                            double temperature, int32_t S, int32_t i)
{
    sm_jump J = sm_jump_max(z, zu, w, temperature, S, i);
    J.sum = sm_vsum(sm_terms_of(SM_TERM_JUMP_WEIGHT, S, i, &J, 0));
    J.log_sum = log(J.sum);
    return J;
}

/* j ~ r by the inverse CDF of u over j = 0 .. S-1 (j != i). The walk adds
 * the same terms in the same order as sm_jump_init's total; should rounding
 * still leave u * total unreached, the last state with weight is taken. */
static inline NCTMC_HD int32_t sm_jump_pick(const sm_jump *J, double u)
{
    return sm_vpick(sm_terms_of(SM_TERM_JUMP_WEIGHT, J->S, J->i, J, 0), u * J->sum, J->i);
}

/* sm_jump_init then sm_jump_pick in one go: on a device the pick reuses the
 * blocked partial sums of the total instead of passing over the row again. */
static inline NCTMC_HD int32_t sm_jump_draw(const float *z, const float *zu, double w,
                                            double temperature, int32_t S, int32_t i, double u)
{
    sm_jump J = sm_jump_max(z, zu, w, temperature, S, i);
    return sm_vdraw(sm_terms_of(SM_TERM_JUMP_WEIGHT, S, i, &J, 0), u, i);
}

/* ------------------------------------------------------------------------ */
/* The float exp and the fast jump draw (sm_step.fast)                      */
/* ------------------------------------------------------------------------ */

/*
 * sm_expf: exp in float, the same bits on every host and device. It is a
 * fixed sequence of IEEE single operations, each correctly rounded: every
 * multiply-add is an explicit fused one (fmaf on the host, __fmaf_rn on a
 * device), and no other product is followed by a sum a compiler could
 * contract (the only other products are by powers of two, which are exact,
 * and on a device __fmul_rn, which ptxas never fuses). So neither
 * -ffp-contract, -march=native nor nvcc's -fmad changes a bit;
 * x87 arithmetic (FLT_EVAL_METHOD 2) is not supported.
 *
 *   x = j ln2 + f, j = rint(x / ln2) (the 1.5 * 2^23 rounding trick),
 *   f by two fused steps with ln2 split in hi + lo (|f| <= ~0.347),
 *   e^f by its Taylor polynomial to degree 7 (Horner, fused),
 *   e^x = e^f 2^(j/2) 2^(j - j/2) (two exact scalings, each power normal).
 * Range: NaN in, NaN out; x >= 89 gives +inf (and so does any x above
 * ln(FLT_MAX) ~ 88.72, by the scaling's overflow); x < -87.5, and any
 * result below FLT_MIN = 2^-126, give +0 — no subnormal is ever returned
 * or formed, so flush-to-zero modes on either side change nothing. Error
 * against exp in double, measured over every float in [-87.5, 89) by
 * tests/test_sampler_fast.c (--stride 1): at most 0.9386 ulp — faithfully
 * rounded, so not monotone at every step. -ffast-math / -ffinite-math-only
 * are not supported (they drop the NaN and infinity handling).
 */
#if defined(__CUDA_ARCH__)
#define SM_FMAF(a, b, c) __fmaf_rn((a), (b), (c))
#define SM_FMA(a, b, c) __fma_rn((a), (b), (c))
#define SM_FMULF(a, b) __fmul_rn((a), (b)) /* never contracted by ptxas */
#else
#define SM_FMAF(a, b, c) fmaf((a), (b), (c))
#define SM_FMA(a, b, c) fma((a), (b), (c))
#define SM_FMULF(a, b) ((a) * (b))
#endif

/* 2^e as a float, for -126 <= e <= 127. */
static inline NCTMC_HD float sm_pow2f(int32_t e)
{
#if defined(__CUDA_ARCH__)
    return __int_as_float((e + 127) << 23);
#else
    union {
        uint32_t u;
        float f;
    } b;
    b.u = (uint32_t)(e + 127) << 23;
    return b.f;
#endif
}

static inline NCTMC_HD float sm_expf(float x)
{
    if (x != x)
        return x + x;
    if (!(x < 89.0f))
        return INFINITY;
    if (x < -87.5f)
        return 0.0f;
    float j = SM_FMAF(x, 1.44269502f, 12582912.0f) - 12582912.0f;
    float f = SM_FMAF(j, -0.693145752f, x);
    f = SM_FMAF(j, -1.42860677e-6f, f);
    float p = 1.98412701e-4f;
    p = SM_FMAF(p, f, 1.38888892e-3f);
    p = SM_FMAF(p, f, 8.33333377e-3f);
    p = SM_FMAF(p, f, 4.16666679e-2f);
    p = SM_FMAF(p, f, 1.66666672e-1f);
    p = SM_FMAF(p, f, 0.5f);
    p = SM_FMAF(p, f, 1.0f);
    p = SM_FMAF(p, f, 1.0f);
    int32_t e = (int32_t)j;
    int32_t e1 = e / 2;
    float y = SM_FMULF(p, sm_pow2f(e1));
    y = SM_FMULF(y, sm_pow2f(e - e1));
    return y < 1.17549435e-38f ? 0.0f : y;
}

/*
 * The fast jump draw: j ~ r(. | i) as sm_jump_draw, with float logits and
 * sm_expf, in ONE read of the row, and in an order of operations that is
 * part of the definition — so the host (sm_seq_fast_draw) and a CUDA block
 * (sm_block_fast_draw in backends/cuda/cuda_sample.cu) give the same bits:
 *
 * 1. Lanes. Entry j (j != i, j < S) belongs to lane (j / 4) mod 256
 *    (SM_FAST_LANES; four consecutive entries per lane, so a device thread
 *    reads them as one float4). Each lane keeps a running max m (float) and
 *    s = sum exp(g - m) (double), updated in increasing j (sm_lane_add: a
 *    new max rescales s by one fused s * exp(m_old - m_new) + 1). Logits
 *    g_j = (zu + w (z - zu)) / T in float; -inf and NaN logits weigh 0.
 * 2. M = the largest lane max; lane masses c_p = s_p exp(m_p - M).
 * 3. The total: the 256 masses in 8 groups of 32, each group scanned by the
 *    Hillis-Steele inclusive scan (sm_scan32: for o = 1, 2, .., 16, x_l +=
 *    x_{l-o} for l >= o, all at once), the groups' totals added in order.
 * 4. The lane: target = u * total; the same scans again, the first lane
 *    whose running sum exceeds the target (none: rounding; the target
 *    becomes +inf and the last lane with mass is walked).
 * 5. The entry: that lane's entries in j order, 32 at a time, weights
 *    exp(g_j - M) in double, the same scan, running on from the lanes
 *    before it; the first entry whose running sum exceeds the target, else
 *    the lane's last entry with weight, else `last` (the current state).
 * The draw is exact in distribution up to float rounding of the logits and
 * of g - m (a relative error of order 1e-6 in each weight for logits of
 * magnitude ~10) and the 1-ulp exp.
 */
#define SM_FAST_LANES 256
#define SM_FAST_GROUP 32
#define SM_FAST_LANE_OF(j) (((j) >> 2) & (SM_FAST_LANES - 1))

/* Values of 0 / 1 for nctmc_sample_step_args.exp_mode. */
enum { SM_EXP_DOUBLE = 0, SM_EXP_FLOAT = 1 };

typedef struct sm_fjump {
    const float *z;
    const float *zu;   /* or NULL */
    float w;           /* guidance scale */
    float inv_temp;    /* 1 / T */
    int32_t S;
    int32_t i;         /* excluded state */
} sm_fjump;

static inline NCTMC_HD sm_fjump sm_fjump_of(const float *z, const float *zu, double w,
                                            double temperature, int32_t S, int32_t i)
{
    sm_fjump F;
    F.z = z;
    F.zu = zu;
    F.w = (float)w;
    F.inv_temp = (float)(1.0 / temperature);
    F.S = S;
    F.i = i;
    return F;
}

/* The guided logit before the temperature, a_j = zu + w (z - zu) (z alone
 * without guidance); g_j = a_j / T is the rounded product a_j * (1 / T),
 * and every difference g_j - m is taken as one fused fmaf(a_j, 1 / T, -m):
 * no product is left for a compiler to contract. */
static inline NCTMC_HD float sm_fjump_raw(const sm_fjump *F, int32_t j)
{
    float a = F->z[j];
    if (F->zu) {
        float u = F->zu[j];
        a = SM_FMAF(F->w, a - u, u);
    }
    return a;
}

/* exp(g_j - M) in double, from a = sm_fjump_raw; 0 for -inf and NaN logits. */
static inline NCTMC_HD double sm_fjump_weight(float a, float inv_temp, float M)
{
    return SM_FMULF(a, inv_temp) > -INFINITY ? (double)sm_expf(SM_FMAF(a, inv_temp, -M)) : 0.0;
}

typedef struct sm_lane {
    float max;
    double sum;
} sm_lane;

static inline NCTMC_HD sm_lane sm_lane_empty(void)
{
    sm_lane L;
    L.max = -INFINITY;
    L.sum = 0.0;
    return L;
}

/* One entry, a = sm_fjump_raw: g = a / T joins the lane. */
static inline NCTMC_HD void sm_lane_add(sm_lane *L, float a, float inv_temp)
{
    float g = SM_FMULF(a, inv_temp);
    if (g > L->max) {
        L->sum = SM_FMA(L->sum, (double)sm_expf(SM_FMAF(-a, inv_temp, L->max)), 1.0);
        L->max = g;
    } else if (g > -INFINITY) {
        L->sum += (double)sm_expf(SM_FMAF(a, inv_temp, -L->max));
    }
}

/* c_p = s_p exp(m_p - M), the product rounded on its own (a fused multiply
 * with a zero addend, so that no compiler fuses it into the sums after). */
static inline NCTMC_HD double sm_lane_mass(const sm_lane *L, float M)
{
    return L->max > -INFINITY ? SM_FMA(L->sum, (double)sm_expf(L->max - M), 0.0) : 0.0;
}

/* The host's sequential rendering of steps 3-5 (a device runs them as warp
 * shuffles with the same operations). */
static inline NCTMC_HD void sm_scan32(double *x)
{
    for (int o = 1; o < SM_FAST_GROUP; o <<= 1)
        for (int l = SM_FAST_GROUP - 1; l >= o; l--)
            x[l] = x[l] + x[l - o];
}

static inline NCTMC_HD double sm_fast_total(const double *mass)
{
    double run = 0.0, x[SM_FAST_GROUP];
    for (int g = 0; g < SM_FAST_LANES; g += SM_FAST_GROUP) {
        for (int l = 0; l < SM_FAST_GROUP; l++)
            x[l] = mass[g + l];
        sm_scan32(x);
        run += x[SM_FAST_GROUP - 1];
    }
    return run;
}

/* Step 4: the lane whose running sum first exceeds *target and the running
 * sum before it; none: the last lane with mass, *target = +inf; no lane
 * with mass: -1. */
static inline NCTMC_HD int32_t sm_fast_pick_lane(const double *mass, double *target, double *before)
{
    double run = 0.0, x[SM_FAST_GROUP];
    int32_t last = -1;
    for (int g = 0; g < SM_FAST_LANES; g += SM_FAST_GROUP) {
        for (int l = 0; l < SM_FAST_GROUP; l++) {
            x[l] = mass[g + l];
            if (x[l] > 0.0)
                last = g + l;
        }
        sm_scan32(x);
        for (int l = 0; l < SM_FAST_GROUP; l++)
            if (run + x[l] > *target) {
                *before = l > 0 ? run + x[l - 1] : run;
                return g + l;
            }
        run += x[SM_FAST_GROUP - 1];
    }
    *target = INFINITY;
    *before = run;
    return last;
}

/* Entry e (0, 1, ...) of lane p in j order. */
static inline NCTMC_HD int32_t sm_fast_entry(int32_t p, int32_t e)
{
    return 4 * SM_FAST_LANES * (e >> 2) + 4 * p + (e & 3);
}

/* Step 5 on the host. */
static inline NCTMC_HD int32_t sm_seq_fast_walk(const sm_fjump *F, float M, int32_t p,
                                                double before, double target, int32_t last)
{
    double run = before, x[SM_FAST_GROUP];
    int32_t lastpos = -1;
    for (int32_t e0 = 0; sm_fast_entry(p, e0) < F->S; e0 += SM_FAST_GROUP) {
        for (int l = 0; l < SM_FAST_GROUP; l++) {
            int32_t j = sm_fast_entry(p, e0 + l);
            x[l] = j < F->S && j != F->i ? sm_fjump_weight(sm_fjump_raw(F, j), F->inv_temp, M)
                                         : 0.0;
            if (x[l] > 0.0)
                lastpos = j;
        }
        sm_scan32(x);
        for (int l = 0; l < SM_FAST_GROUP; l++)
            if (run + x[l] > target)
                return sm_fast_entry(p, e0 + l);
        run += x[SM_FAST_GROUP - 1];
    }
    return lastpos >= 0 ? lastpos : last;
}

/* Steps 1-2 on the host: the lane masses and M (-inf: no entry weighs). */
static inline NCTMC_HD float sm_seq_fast_masses(const sm_fjump *F, double *mass)
{
    sm_lane lanes[SM_FAST_LANES];
    for (int p = 0; p < SM_FAST_LANES; p++)
        lanes[p] = sm_lane_empty();
    for (int32_t j = 0; j < F->S; j++)
        if (j != F->i)
            sm_lane_add(&lanes[SM_FAST_LANE_OF(j)], sm_fjump_raw(F, j), F->inv_temp);
    float M = -INFINITY;
    for (int p = 0; p < SM_FAST_LANES; p++)
        M = lanes[p].max > M ? lanes[p].max : M;
    for (int p = 0; p < SM_FAST_LANES; p++)
        mass[p] = sm_lane_mass(&lanes[p], M);
    return M;
}

/* Steps 1-5 on the host (6 KiB of stack, no allocation). */
static inline NCTMC_HD int32_t sm_seq_fast_draw(const sm_fjump *F, double u, int32_t last)
{
    double mass[SM_FAST_LANES];
    float M = sm_seq_fast_masses(F, mass);
    if (!(M > -INFINITY))
        return last;
    double target = u * sm_fast_total(mass), before = 0.0;
    int32_t p = sm_fast_pick_lane(mass, &target, &before);
    if (p < 0)
        return last;
    return sm_seq_fast_walk(F, M, p, before, target, last);
}

#if defined(SM_BLOCK_LOOPS) && defined(__CUDA_ARCH__)
static __device__ int32_t sm_block_fast_draw(const sm_fjump *F, double u, int32_t last);
#endif

/* A host translation unit may route the draw through its own copy of
 * sm_seq_fast_draw (the CPU backend: one compiled with FMA instructions). */
#ifndef SM_HOST_FAST_DRAW
#define SM_HOST_FAST_DRAW sm_seq_fast_draw
#endif

/* The fast counterpart of sm_jump_draw. */
static inline NCTMC_HD int32_t sm_fast_jump_draw(const float *z, const float *zu, double w,
                                                 double temperature, int32_t S, int32_t i,
                                                 double u)
{
    sm_fjump F = sm_fjump_of(z, zu, w, temperature, S, i);
    return SM_LOOP(sm_block_fast_draw(&F, u, i), SM_HOST_FAST_DRAW(&F, u, i));
}

/* ------------------------------------------------------------------------ */
/* Rate-level guidance                                                      */
/* ------------------------------------------------------------------------ */

/*
 * SM_CFG_RATES guides the rates, R_w(j) = R_c(j)^w R_u(j)^(1 - w) with
 * R(j) = lambda r(j) (j != i), so
 *   lambda_w = lambda_c^w lambda_u^(1 - w) F,  F = sum_{j != i} r_c(j)^w r_u(j)^(1 - w),
 *   r_w(j)  ∝ r_c(j)^w r_u(j)^(1 - w) = softmax_{j != i}(w z_j + (1 - w) zu_j):
 * the jump distribution of SM_CFG_SEPARATE, whose exit rate lacks F. Here
 *   log F = LSE(w z + (1 - w) zu) - w LSE(z) - (1 - w) LSE(zu),
 * each log-sum-exp over j < S, j != i (the current token and the padding
 * are never read), on the model's own rates (temperature 1: the temperature
 * reshapes where a guided jump goes, never how often one happens, as
 * without guidance). At w = 0 and w = 1 the combined row is one of the two
 * rows bit for bit, so log F is exactly 0. F <= 1 for 0 <= w <= 1 and
 * F >= 1 for w >= 1 (Hölder; Jensen).
 */
static inline NCTMC_HD double sm_cfg_log_factor(const float *z, const float *zu, double w,
                                                int32_t S, int32_t i)
{
    sm_jump Jw = sm_jump_init(z, zu, w, 1.0, S, i);
    sm_jump Jc = sm_jump_init(z, NULL, 1.0, 1.0, S, i);
    sm_jump Ju = sm_jump_init(zu, NULL, 1.0, 1.0, S, i);
    return (Jw.max + Jw.log_sum) - w * (Jc.max + Jc.log_sum) -
           (1.0 - w) * (Ju.max + Ju.log_sum);
}

/* The guided log exit rate by `rule` (zu NULL: no guidance, the conditional
 * rate). A zero rate (a masked data token) stays zero under either rule;
 * the masked process's exact rate becomes lambda_exact F under
 * SM_CFG_RATES. */
static inline NCTMC_HD double sm_guided_log_rate(const nctmc_fp *fp, double t, int32_t i,
                                                 float h, const float *z, const float *zu,
                                                 float h_uncond, double w, int32_t rule)
{
    double lr = sm_log_rate(fp, t, i, h, zu != 0, h_uncond, w);
    if (zu && rule == SM_CFG_RATES && lr != -INFINITY)
        lr += sm_cfg_log_factor(z, zu, w, fp->vocab, i);
    return lr;
}

/* ------------------------------------------------------------------------ */
/* Tau-leaping and Euler                                                    */
/* ------------------------------------------------------------------------ */

/* P(at least one jump in tau) = 1 - exp(-lambda tau). */
static inline NCTMC_HD double sm_tau_leap_prob(double log_rate, double tau)
{
    if (!(tau > 0.0) || log_rate == -INFINITY)
        return 0.0;
    return -expm1(-exp(log_rate) * tau);
}

/* Euler: p_j = lambda r_j tau for j != i, so P(move) = lambda tau, and the
 * stay probability 1 - lambda tau is clipped at 0 (then P(move) = 1 and the
 * p_j renormalise to r_j). */
static inline NCTMC_HD double sm_euler_prob(double log_rate, double tau)
{
    if (!(tau > 0.0) || log_rate == -INFINITY)
        return 0.0;
    double p = exp(log_rate) * tau;
    return p < 1.0 ? p : 1.0;
}

/* ------------------------------------------------------------------------ */
/* Clean-token recovery (paper App. E, for every process)                   */
/* ------------------------------------------------------------------------ */

static inline NCTMC_HD double sm_p0_sum(const sm_p0 *P)
{
    return sm_vsum(sm_terms_of(SM_TERM_P0_WEIGHT, P->n_data, -1, &P->J, P));
}

/* Recovers p0 at time t (alpha = alpha_t, log_sigma = log sigma_t) from the
 * row's log-rate and jump distribution J. */
static inline NCTMC_HD sm_p0 sm_p0_init(const nctmc_fp *fp, double alpha, double log_sigma,
                                        double log_rate, sm_jump J)
{
    sm_p0 P;
    int32_t i = J.i;
    P.J = J;
    P.n_data = fp_n_data(fp);
    double pi_i = fp_prior(fp, i);
    P.beta_i = (1.0 - alpha) * pi_i;
    P.beta_data = (1.0 - alpha) * fp_prior_data(fp);
    P.mode = SM_P0_CLIPPED;
    if (pi_i <= 0.0 && i < P.n_data) {
        P.mode = SM_P0_POINT;
        P.q_i = 1.0;
        P.q_rest = 0.0;
        P.total = 1.0;
        return P;
    }
    if (log_rate == -INFINITY) {
        P.q_i = 1.0;
        P.q_rest = 0.0;
    } else if (pi_i <= 0.0) {
        /* an unreachable mask (mixture with p_u = 1): q(i) = 0 */
        P.q_i = 0.0;
        P.q_rest = 1.0;
    } else {
        double rho = log_rate - (log_sigma + log(pi_i));
        P.q_i = 1.0 / (1.0 + exp(rho));
        P.q_rest = 1.0 / (1.0 + exp(-rho));
    }
    P.total = sm_p0_sum(&P);
    if (!(P.total > 0.0)) {
        P.mode = SM_P0_NOISED;
        P.total = sm_p0_sum(&P);
    }
    if (!(P.total > 0.0)) {
        P.mode = SM_P0_UNIFORM;
        P.total = (double)P.n_data;
    }
    return P;
}

/* ------------------------------------------------------------------------ */
/* Posterior sampler                                                        */
/* ------------------------------------------------------------------------ */

/*
 * x_s ~ w(x) = q_{t|s}(i | x) m(x),  m(x) = sum_x0 p0(x0) q_{s|0}(x | x0)
 *                                         = alpha_s p0(x) + (1 - alpha_s) pi_x,
 * q_{t|s}(i | x) = a [x = i] + (1 - a) pi_i,  a = alpha_{t|s} = alpha_t / alpha_s.
 * Since sum_x m(x) = 1, the mass of staying and of moving are closed forms:
 *   stay = (a + (1 - a) pi_i) m(i),   move = (1 - a) pi_i (1 - m(i)),
 * and a move goes to x != i with probability proportional to m(x): O(S).
 */
typedef struct sm_posterior {
    double alpha_s;
    double m_i;      /* m(i) */
    double stay;     /* unnormalised */
    double move;     /* unnormalised */
} sm_posterior;

static inline NCTMC_HD sm_posterior sm_posterior_init(const nctmc_fp *fp, const sm_p0 *P,
                                                      double alpha_t, double alpha_s)
{
    sm_posterior Q;
    int32_t i = P->J.i;
    double pi_i = fp_prior(fp, i);
    double a = alpha_t / alpha_s;
    Q.alpha_s = alpha_s;
    Q.m_i = sm_posterior_m(fp, P, alpha_s, i);
    Q.stay = (a + (1.0 - a) * pi_i) * Q.m_i;
    double rest = 1.0 - Q.m_i;
    Q.move = (1.0 - a) * pi_i * (rest > 0.0 ? rest : 0.0);
    return Q;
}

/* The posterior probability of x_s = x (for tests and documentation; the
 * sampler draws without normalising every entry). */
static inline NCTMC_HD double sm_posterior_prob(const nctmc_fp *fp, const sm_p0 *P,
                                                const sm_posterior *Q, int32_t x)
{
    double total = Q->stay + Q->move;
    if (x == P->J.i)
        return Q->stay / total;
    double rest = 1.0 - Q->m_i;
    if (!(rest > 0.0))
        return 0.0;
    return Q->move / total * sm_posterior_m(fp, P, Q->alpha_s, x) / rest;
}

static inline NCTMC_HD int32_t sm_posterior_draw(const nctmc_fp *fp, const sm_p0 *P,
                                                 const sm_posterior *Q, sm_uniforms u)
{
    int32_t i = P->J.i;
    if (!(Q->move > 0.0) || u.decide * (Q->stay + Q->move) < Q->stay)
        return i;
    sm_terms T = sm_terms_of(SM_TERM_POSTERIOR_M, fp->vocab, i, &P->J, P);
    T.fp = fp;
    T.a = Q->alpha_s;
    return sm_vdraw(T, u.pick, i);
}

/* ------------------------------------------------------------------------ */
/* Final denoising and self-correction                                      */
/* ------------------------------------------------------------------------ */

/* argmax over data tokens x0 of p0(x0) q_{t|0}(i | x0): p0 leaves out the
 * current token's evidence, the likelihood puts it back. At the mask the
 * likelihood (1 - alpha) pi_m is the same for every x0, so p0 alone decides.
 * Ties go to the smallest token. */
static inline NCTMC_HD int32_t sm_denoise(const nctmc_fp *fp, const sm_p0 *P, double alpha)
{
    int32_t i = P->J.i;
    double lik_other = (1.0 - alpha) * fp_prior(fp, i);
    sm_terms T = sm_terms_of(SM_TERM_DENOISE, P->n_data, -1, &P->J, P);
    T.flag = i < P->n_data;
    T.a = alpha + lik_other;
    T.b = lik_other;
    return sm_vargmax(T);
}

/* Self-correction proposal: x0 ~ Temp(p0; tau_sc) ∝ p0^(1/tau_sc), computed
 * as (p0 / max p0)^(1/tau_sc) so that small temperatures do not underflow;
 * *prob receives p0(x0) itself (what Alg. 3 ranks positions by). */
static inline NCTMC_HD int32_t sm_correct_propose(const sm_p0 *P, double tau_sc, double u,
                                                  float *prob)
{
    double wmax = sm_vmax(sm_terms_of(SM_TERM_P0_WEIGHT, P->n_data, -1, &P->J, P), 0.0);
    sm_terms T = sm_terms_of(SM_TERM_TEMPERED_P0, P->n_data, -1, &P->J, P);
    T.a = log(wmax);
    T.b = 1.0 / tau_sc;
    int32_t pick = sm_vdraw(T, u, 0);
    *prob = (float)sm_p0_prob(P, pick);
    return pick;
}

/* The Gibbs corrector's position for update k of a sequence: the index,
 * uniform in [0, n_free), of the non-fixed position it redraws (keyed
 * SAMPLE_CORRECT, k, sequence, SM_SEQUENCE_POSITION: independent of the
 * rows' proposals). */
static inline NCTMC_HD int32_t sm_gibbs_pick(uint64_t seed, uint32_t update, int64_t sequence,
                                             int32_t n_free)
{
    sm_uniforms u = sm_draw(seed, NCTMC_RNG_SAMPLE_CORRECT, update, sequence,
                            SM_SEQUENCE_POSITION);
    int32_t k = (int32_t)(u.pick * (double)n_free);
    return k < n_free ? k : n_free - 1;
}

/* ------------------------------------------------------------------------ */
/* Prior                                                                    */
/* ------------------------------------------------------------------------ */

/* x at t_max ~ pi: uniform over S; the mask; or the mask with probability
 * 1 - p_u, else a uniform data token. */
static inline NCTMC_HD int32_t sm_prior_token(const nctmc_fp *fp, sm_uniforms u)
{
    int32_t n_data = fp_n_data(fp);
    if (fp->process == NCTMC_FP_MASKED)
        return fp->vocab - 1;
    if (fp->process == NCTMC_FP_MIXTURE && u.decide < fp_prior_mask(fp))
        return fp->vocab - 1;
    int32_t x = (int32_t)(u.pick * (double)n_data);
    return x < n_data ? x : n_data - 1;
}

/* ------------------------------------------------------------------------ */
/* One row of the fused operation                                           */
/* ------------------------------------------------------------------------ */

/* Everything about a call that is the same for every row. */
typedef struct sm_step {
    nctmc_fp fp;
    int32_t method;
    double t;            /* current time */
    double alpha_t;
    double log_sigma_t;
    double alpha_s;      /* posterior: alpha at the next time s */
    double tau;          /* t - s */
    double cfg_scale;
    int32_t cfg_rule;    /* SM_CFG_* */
    double temperature;
    double correction_temperature;
    uint64_t seed;
    uint32_t purpose;    /* NCTMC_RNG_SAMPLE_STEP or _CORRECT */
    uint32_t step;
    int32_t fast;        /* tau-leaping / Euler jumps by sm_fast_jump_draw */
} sm_step;

static inline NCTMC_HD sm_step sm_step_prepare(nctmc_fp fp, int32_t method, double t, double s,
                                               double cfg_scale, int32_t cfg_rule,
                                               double temperature,
                                               double correction_temperature, uint64_t seed,
                                               uint32_t step)
{
    sm_step st;
    st.fp = fp;
    st.method = method;
    st.t = t;
    st.alpha_t = fp_alpha(&fp, t);
    st.log_sigma_t = log(fp_sigma(&fp, t));
    st.alpha_s = fp_alpha(&fp, s);
    st.tau = t - s;
    st.cfg_scale = cfg_scale;
    st.cfg_rule = cfg_rule;
    st.temperature = temperature;
    st.correction_temperature = correction_temperature;
    st.seed = seed;
    st.purpose = method == SM_METHOD_CORRECT ? NCTMC_RNG_SAMPLE_CORRECT : NCTMC_RNG_SAMPLE_STEP;
    st.step = step;
    st.fast = 0;
    return st;
}

/* The row's inputs: logits z (and zu for the unconditional pass, or NULL),
 * head outputs h / h_uncond, current state i, its stream (sequence,
 * position). Writes the new state (every method but CORRECT) or the
 * proposal and its p0 (CORRECT). */
typedef struct sm_row_in {
    const float *z;
    const float *zu;
    float h;
    float h_uncond;
    int32_t i;
    int64_t sequence;
    int32_t position;
} sm_row_in;

/* The row's guided log exit rate. */
static inline NCTMC_HD double sm_row_log_rate(const sm_step *st, const sm_row_in *in)
{
    return sm_guided_log_rate(&st->fp, st->t, in->i, in->h, in->z, in->zu, in->h_uncond,
                              st->cfg_scale, st->cfg_rule);
}

/* p0 recovered from the guided rates: guidance acts on the rates, and the
 * recovery reads whatever rates it is given (docs/math.md). */
static inline NCTMC_HD sm_p0 sm_row_p0(const sm_step *st, const sm_row_in *in)
{
    double log_rate = sm_row_log_rate(st, in);
    sm_jump J = sm_jump_init(in->z, in->zu, st->cfg_scale, st->temperature, st->fp.vocab, in->i);
    return sm_p0_init(&st->fp, st->alpha_t, st->log_sigma_t, log_rate, J);
}

static inline NCTMC_HD int32_t sm_row_jump(const sm_step *st, const sm_row_in *in,
                                           sm_uniforms u)
{
    /* SM_CFG_SEPARATE decides before touching the logits (most rows
     * stay); SM_CFG_RATES needs them for the exit rate itself */
    double log_rate = sm_row_log_rate(st, in);
    double p = st->method == SM_METHOD_EULER ? sm_euler_prob(log_rate, st->tau)
                                             : sm_tau_leap_prob(log_rate, st->tau);
    if (!(u.decide < p))
        return in->i;
    if (st->fast)
        return sm_fast_jump_draw(in->z, in->zu, st->cfg_scale, st->temperature, st->fp.vocab,
                                 in->i, u.pick);
    return sm_jump_draw(in->z, in->zu, st->cfg_scale, st->temperature, st->fp.vocab, in->i,
                        u.pick);
}

/* One row. `proposal` and `prob` are written only by CORRECT, `*x_out` by
 * the others. */
static inline NCTMC_HD void sm_sample_row(const sm_step *st, const sm_row_in *in,
                                          int32_t *x_out, int32_t *proposal, float *prob)
{
    sm_uniforms u = {0.5, 0.5};
    if (st->method != SM_METHOD_DENOISE)
        u = sm_draw(st->seed, st->purpose, st->step, in->sequence, in->position);
    if (st->method == SM_METHOD_TAU_LEAPING || st->method == SM_METHOD_EULER) {
        *x_out = sm_row_jump(st, in, u);
        return;
    }
    sm_p0 P = sm_row_p0(st, in);
    if (st->method == SM_METHOD_POSTERIOR) {
        sm_posterior Q = sm_posterior_init(&st->fp, &P, st->alpha_t, st->alpha_s);
        *x_out = sm_posterior_draw(&st->fp, &P, &Q, u);
    } else if (st->method == SM_METHOD_DENOISE) {
        *x_out = sm_denoise(&st->fp, &P, st->alpha_t);
    } else {
        *proposal = sm_correct_propose(&P, st->correction_temperature, u.pick, prob);
    }
}

#endif /* NCTMC_SAMPLE_MATH_H */
