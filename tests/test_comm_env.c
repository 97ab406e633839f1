/*
 * test_comm_env.c — nctmc_comm_from_env() chooses the engine from the
 * launcher's variables (lib/comm/comm.c): no variable or a job of one is
 * the world of one with no engine; a torchrun-style job of several
 * processes (WORLD_SIZE > 1, no MPI launcher's variables) asks for the NCCL
 * engine, so where that module is missing the error names it; variables
 * that are not a rank of a job are refused. Runs without MPI or a GPU: no
 * case here starts an engine.
 */
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"

static void clear_launchers(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE",
                          "PMI_RANK", "SLURM_NTASKS", "SLURM_PROCID", "WORLD_SIZE", "RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void world_of_one(void)
{
    clear_launchers();
    nctmc_comm *c = NULL;
    char err[512] = "";
    CHECK(nctmc_comm_from_env(&c, err, sizeof err) == NCTMC_OK && c != NULL, "%s", err);
    CHECK(nctmc_comm_size(c) == 1 && nctmc_comm_rank(c) == 0, "size %d", nctmc_comm_size(c));
    CHECK(strcmp(nctmc_comm_engine(c), "none") == 0, "engine %s", nctmc_comm_engine(c));
    nctmc_comm_free(c);
    setenv("WORLD_SIZE", "1", 1);
    setenv("RANK", "0", 1);
    c = NULL;
    CHECK(nctmc_comm_from_env(&c, err, sizeof err) == NCTMC_OK && c != NULL, "%s", err);
    CHECK(strcmp(nctmc_comm_engine(c), "none") == 0, "WORLD_SIZE=1 loads no engine");
    nctmc_comm_free(c);
}

static void torchrun_asks_for_nccl(void)
{
    clear_launchers();
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "1", 1);
    setenv("NCTMC_NCCL_MODULE", "/nonexistent/libnctmc-nccl.so", 1);
    nctmc_comm *c = (nctmc_comm *)&c;
    char err[512] = "";
    nctmc_status st = nctmc_comm_from_env(&c, err, sizeof err);
    CHECK(st == NCTMC_ERR_UNSUPPORTED && c == NULL, "status %d: %s", (int)st, err);
    CHECK(strstr(err, "NCCL") != NULL && strstr(err, "/nonexistent/libnctmc-nccl.so") != NULL,
          "the error names the NCCL module it looked for: %s", err);
    unsetenv("NCTMC_NCCL_MODULE");
}

static void not_a_rank(void)
{
    clear_launchers();
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "2", 1);
    nctmc_comm *c = NULL;
    char err[512] = "";
    CHECK(nctmc_comm_from_env(&c, err, sizeof err) == NCTMC_ERR_INVALID_ARGUMENT && c == NULL,
          "RANK=2 of WORLD_SIZE=2: %s", err);
    CHECK(strstr(err, "WORLD_SIZE") != NULL, "the error names the variables: %s", err);
}

int main(void)
{
    world_of_one();
    torchrun_asks_for_nccl();
    not_a_rank();
    return test_finish("comm_env");
}
