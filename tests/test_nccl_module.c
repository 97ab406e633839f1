/*
 * test_nccl_module.c — the NCCL engine (libnctmc-nccl.so, from
 * backends/nccl/nccl_comm.c) on one rank, through the module interface
 * (lib/comm/comm_module.h) as the core calls it: a world of one still goes
 * through NCCL (send/receive to itself, the rank-order sum, the
 * all-gather, the broadcast), so the sum of float and double host buffers
 * of awkward lengths must come back bit for bit, and the barrier and a
 * broadcast must succeed. Exits 77 (skipped, with the reason) without the
 * NVIDIA driver or a GPU; run on a GPU by backends/cuda/device_check.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_module.h"
#include "comm/comm_module.h"

static int failures;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                             \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

static const nctmc_comm_module *load(void)
{
    char where[4200], err[512];
    void *handle = NULL;
    if (module_open(NCTMC_NCCL_MODULE_STEM, NCTMC_NCCL_MODULE_ENV, "NCCL", &handle, where,
                    sizeof where, err, sizeof err) != NCTMC_OK) {
        fprintf(stderr, "FAIL: %s\n", err);
        return NULL;
    }
    union {
        void *object;
        nctmc_comm_module_entry_fn fn;
    } entry;
    char why[256];
    entry.object = module_symbol(handle, NCTMC_COMM_MODULE_ENTRY, why, sizeof why);
    const nctmc_comm_module *m = entry.object ? entry.fn() : NULL;
    if (!m)
        fprintf(stderr, "FAIL: %s: %s\n", where, why);
    return m;
}

static void check_sums(const nctmc_comm_module *m, comm_engine *e)
{
    char err[512] = "";
    enum { N = 1001 };
    static float f[N], f0[N];
    static double d[N], d0[N];
    for (int i = 0; i < N; i++) {
        f0[i] = f[i] = (float)(i * 0.37 - 100.0) / 7.0f;
        d0[i] = d[i] = (i * 0.37 - 100.0) / 3.0;
    }
    CHECK(m->allreduce_sum(e, f, N, COMM_FLOAT, err, sizeof err) == NCTMC_OK, "float: %s", err);
    CHECK(memcmp(f, f0, sizeof f) == 0, "one rank's float sum is not its own buffer");
    CHECK(m->allreduce_sum(e, d, 7, COMM_DOUBLE, err, sizeof err) == NCTMC_OK, "double: %s", err);
    CHECK(memcmp(d, d0, sizeof d) == 0, "one rank's double sum is not its own buffer");
    /* started sums (interface 2): two buckets of the float buffer */
    CHECK(m->sum_start(e, f + 500, N - 500, COMM_FLOAT, err, sizeof err) == NCTMC_OK &&
              m->sum_progress(e, err, sizeof err) == NCTMC_OK &&
              m->sum_start(e, f, 500, COMM_FLOAT, err, sizeof err) == NCTMC_OK &&
              m->sum_wait(e, err, sizeof err) == NCTMC_OK,
          "started sums: %s", err);
    CHECK(memcmp(f, f0, sizeof f) == 0, "one rank's started sums are not its own buffer");
    unsigned char bytes[37];
    for (int i = 0; i < 37; i++)
        bytes[i] = (unsigned char)(i * 11);
    CHECK(m->broadcast(e, bytes, 37, 0, err, sizeof err) == NCTMC_OK, "broadcast: %s", err);
    for (int i = 0; i < 37; i++)
        CHECK(bytes[i] == (unsigned char)(i * 11), "broadcast changed byte %d", i);
    CHECK(m->barrier(e, err, sizeof err) == NCTMC_OK, "barrier: %s", err);
}

int main(void)
{
    char err[512] = "";
    if (!cuda_driver_present(err, sizeof err)) {
        printf("skipped: %s\n", err);
        return 77;
    }
    const nctmc_comm_module *m = load();
    if (!m)
        return 1;
    CHECK(strcmp(m->name, "nccl") == 0 && m->abi_version == NCTMC_COMM_MODULE_ABI_VERSION &&
              m->library_version == NCTMC_VERSION_NUMBER,
          "the module is %s, interface %u, version %d", m->name, (unsigned)m->abi_version,
          (int)m->library_version);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    comm_engine *e = NULL;
    nctmc_status st = m->create_world(&e, err, sizeof err);
    if (st != NCTMC_OK && strstr(err, "cudaGetDeviceCount")) {
        printf("skipped: no usable GPU: %s\n", err);
        return 77;
    }
    CHECK(st == NCTMC_OK, "create_world: %s", err);
    if (st != NCTMC_OK)
        return 1;
    CHECK(m->rank(e) == 0 && m->size(e) == 1, "rank %d of %d", m->rank(e), m->size(e));
    check_sums(m, e);
    CHECK(m->create_from(e, NULL, err, sizeof err) == NCTMC_ERR_UNSUPPORTED,
          "create_from is refused");
    m->destroy(e);
    printf("%s\n", failures ? "FAILED" : "nccl module: one rank ok");
    return failures ? 1 : 0;
}
