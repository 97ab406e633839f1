/*
 * cpu_gemm.h — single-precision matrix products on the CPU backend's pool,
 * for the linear layers (cpu_linear.c, cpu_linear_packed.c) and the tests.
 *
 * Promise: every product is cut into a grid of tiles of C that depends on
 * m, n and k alone (cpu_gemm_tiles), one single-threaded OpenBLAS call per
 * tile, so C has the same bits for every thread count. Matrices are
 * row-major; ld* are row strides.
 */
#ifndef NCTMC_CPU_GEMM_H
#define NCTMC_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "thread_pool.h"

/* C[M, N] = alpha op(A) op(B) + beta C. */
void cpu_gemm(cpu_pool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *c, int64_t ldc);

/* C[M, N] = A[M, K] B[N, K]^T + bias, the row vector bias[N] broadcast over
 * the rows (NULL: none), each tile's bias written just before its product:
 * the linear layer's forward pass. */
void cpu_gemm_bias(cpu_pool *pool, int64_t m, int64_t n, int64_t k, const float *a,
                   const float *b, const float *bias, float *c);

/* The fixed tile grid cpu_gemm uses for an [m, n] product over k. */
void cpu_gemm_tiles(int64_t m, int64_t n, int64_t k, int64_t *tile_m, int64_t *tile_n);

#endif /* NCTMC_CPU_GEMM_H */
