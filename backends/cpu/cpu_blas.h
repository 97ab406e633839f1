/*
 * cpu_blas.h — OpenBLAS as the CPU backend calls it: three functions,
 * loaded once per process at run time (cpu_blas.c says why).
 *
 * cpu_blas_load() loads OpenBLAS if it is not yet loaded and says whether it
 * is usable; cpu_sgemm() and the others may be called only after it returned
 * true (a CPU backend exists only then). Thread-safe.
 */
#ifndef NCTMC_CPU_BLAS_H
#define NCTMC_CPU_BLAS_H

#include <cblas.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct cpu_blas {
    __typeof__(cblas_sgemm) *sgemm;
    __typeof__(openblas_set_num_threads) *set_num_threads;
    __typeof__(openblas_get_config) *get_config;
} cpu_blas;

/* Loads OpenBLAS unless it is loaded; false with the reason in err when it
 * cannot be (a later call tries again). */
bool cpu_blas_load(char *err, size_t err_size);

/* The loaded functions; only after cpu_blas_load() returned true. */
const cpu_blas *cpu_blas_functions(void);

#define cpu_sgemm (cpu_blas_functions()->sgemm)

#endif /* NCTMC_CPU_BLAS_H */
