/*
 * cpu_math.h — vectorisable float kernels for the CPU backend.
 *
 * glibc's expf/tanhf are exact to within an ulp but are opaque calls that stop
 * the compiler from vectorising a loop; these are plain arithmetic (no
 * branches, no library calls), so loops over them vectorise on any x86-64 or
 * AArch64 target, and they give the same bits for the same input everywhere.
 * Relative error of cpu_expf is below 2e-7 over its range.
 */
#ifndef NCTMC_CPU_MATH_H
#define NCTMC_CPU_MATH_H

#include <stdint.h>
#include <string.h>

/*
 * Loops that evaluate these functions are compute-bound, and the library is
 * built for baseline x86-64 (SSE2, 4 floats per instruction). Marked with
 * CPU_VECTOR_CLONES, a function is also compiled for AVX2 and the loader
 * picks the variant the CPU supports (GNU ifunc). Both variants perform the
 * same IEEE operations in the same order (no FMA contraction: the build uses
 * -ffp-contract=off, and no reduction is reassociated), so their results are
 * bitwise identical; only the vector width differs.
 */
#if defined(__x86_64__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(NCTMC_NO_VECTOR_CLONES)
#define CPU_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
/* For code whose fused multiply-adds are explicit fmaf() calls (the fast
 * jump draw of lib/math/sample_math.h): a variant compiled with FMA
 * instructions, where fmaf is one instruction instead of glibc's
 * emulation, called where CPU_HAS_FMA() (fmaf is correctly rounded either
 * way, so both variants give the same bits). Whole (CPU_FLATTEN: every
 * inline callee compiled into it), not target_clones, which clang does not
 * combine with flatten. */
#define CPU_FMA_VARIANT 1
#define CPU_FMA_TARGET __attribute__((target("fma")))
#define CPU_HAS_FMA() __builtin_cpu_supports("fma")
#else
#define CPU_VECTOR_CLONES
#define CPU_FMA_VARIANT 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define CPU_FLATTEN __attribute__((flatten))
#else
#define CPU_FLATTEN
#endif

/* e^x: exact to 2e-7 relative on [-87.3, 88.3]; 0 below (where the true
 * value is subnormal or smaller, -inf included), 1.7e38 above, NaN for NaN.
 * The comparisons are written so that a NaN never reaches the float-to-int
 * conversion. */
static inline float cpu_expf(float x_in)
{
    float x = x_in >= -87.3f ? x_in : -87.3f;
    x = x <= 88.3f ? x : 88.3f;
    /* n = round(x / ln 2) with the 1.5 * 2^23 trick (round to nearest even) */
    const float magic = 12582912.0f;
    float n = (x * 1.44269504088896341f + magic) - magic;
    /* r = x - n ln2 in two pieces so that r keeps full precision */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    /* e^r on |r| <= ln2 / 2: degree-6 minimax polynomial (Cephes expf) */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* times 2^n, built in the exponent field */
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    y = x_in < -87.3f ? 0.0f : y;
    return x_in == x_in ? y : x_in;
}

/* log(x) for x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), and
 * log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716, by its series
 * to s^9 (the next term is below 3e-9 relative); e ln 2 in two pieces as
 * in cpu_expf. Exact to a few roundings. Inputs below the smallest normal
 * float are taken as it (log = -87.34); callers pass only x > 0. Written
 * without branches so that loops over it vectorise. */
static inline float cpu_logf(float x_in)
{
    float x = x_in >= 1.17549435e-38f ? x_in : 1.17549435e-38f;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int32_t e = (int32_t)(bits >> 23) - 127;
    uint32_t mbits = (bits & 0x7fffffu) | 0x3f800000u;
    float m;
    memcpy(&m, &mbits, sizeof m);
    int32_t big = m > 1.41421356f;
    m = big ? 0.5f * m : m;
    e += big;
    /* f = m - 1 is exact; 2s = f - s f, so log m = f - s (f - 2 s^2 Q) with
     * Q = 1/3 + s^2/5 + ...: the rounded part is about f^2 / 2, not f */
    float f = m - 1.0f, s = f / (2.0f + f), s2 = s * s;
    float q = 1.0f / 3.0f + s2 * (0.2f + s2 * (1.0f / 7.0f + s2 * (1.0f / 9.0f)));
    float fe = (float)e;
    return fe * -2.12194440e-4f + (f - s * (f - 2.0f * s2 * q)) + fe * 0.693359375f;
}

/* tanh(x) = 1 - 2 / (1 + e^{2x}); exact to about 2e-7 absolute. */
static inline float cpu_tanhf(float x)
{
    return 1.0f - 2.0f / (1.0f + cpu_expf(2.0f * x));
}

/* 1 / (1 + e^{-x}) */
static inline float cpu_sigmoidf(float x)
{
    return 1.0f / (1.0f + cpu_expf(-x));
}

#endif /* NCTMC_CPU_MATH_H */
