/*
 * cpu_blas_linked.c — OpenBLAS's functions taken from a link, for the
 * installed static library only (meson.build adds this object to libnctmc.a
 * and nowhere else). A program that links libnctmc.a links OpenBLAS too
 * (nctmc.pc's Requires.private), and a fully static one has no dynamic
 * loader to load it with; cpu_blas.c uses this table when it is present
 * (a weak reference) and loads OpenBLAS at run time when it is not.
 */
#include "cpu_blas.h"

const cpu_blas cpu_blas_linked = {cblas_sgemm, openblas_set_num_threads, openblas_get_config};
