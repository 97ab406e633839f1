/*
 * train_mpi.c — data-parallel training from a program of your own, without
 * mpi.h: every rank runs this, started by `mpirun -n 4 ./train_mpi DATA.bin
 * OUT.safetensors` (or srun). The communicator comes from the launcher's
 * environment; with no launcher the program trains on its own, unchanged.
 * DATA.bin is a token shard of 64-token sequences over 17 tokens with
 * labels, as `nctmc prepare --digits` writes (docs/distributed.md).
 */
#include <stdio.h>

#include "nctmc.h"

/* Ends every rank when this one fails: the others may be waiting for it. */
static int fail(nctmc_comm *comm, const char *what, const char *why)
{
    fprintf(stderr, "rank %d: %s: %s\n", (int)nctmc_comm_rank(comm), what, why);
    nctmc_comm_abort(comm, 1);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s DATA.bin OUT.safetensors\n", argv[0]);
        return 2;
    }
    char why[512];
    nctmc_comm *comm = NULL;
    if (nctmc_comm_from_env(&comm, why, sizeof why) != NCTMC_OK) {
        fprintf(stderr, "cannot join the job: %s\n", why);
        return 1;
    }
    int rank = nctmc_comm_rank(comm), ranks = nctmc_comm_size(comm);
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 1; /* one core per rank */
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK)
        return fail(comm, "context", "cannot create");
    nctmc_dataset *ds = NULL;
    if (nctmc_dataset_open(ctx, argv[1], &ds) != NCTMC_OK)
        return fail(comm, argv[1], nctmc_context_last_error(ctx));
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 17;
    cfg.seq_len = 64;
    cfg.n_classes = 10;
    cfg.n_layers = 1;
    cfg.d_model = 32;
    cfg.n_heads = 2;
    cfg.cond_dim = 16;
    cfg.seed = 1; /* the same initial weights on every rank */
    nctmc_model *model = NULL;
    if (nctmc_model_create(ctx, &cfg, &model) != NCTMC_OK)
        return fail(comm, "model", nctmc_context_last_error(ctx));
    nctmc_trainer_params tp;
    nctmc_trainer_params_init(&tp);
    tp.batch_size = 4; /* per rank: the global batch is ranks x 4 */
    tp.total_steps = 20;
    tp.warmup_steps = 5;
    tp.learning_rate = 1e-3f;
    tp.comm = comm;
    nctmc_trainer *trainer = NULL;
    if (nctmc_trainer_create(model, &tp, &trainer) != NCTMC_OK)
        return fail(comm, "trainer", nctmc_model_last_error(model));
    for (int step = 0; step < 20; step++) {
        nctmc_train_stats stats;
        nctmc_train_stats_init(&stats);
        /* collective: every rank takes every step */
        nctmc_status st = nctmc_trainer_step_dataset(trainer, ds, &stats);
        if (st != NCTMC_OK && st != NCTMC_ERR_NON_FINITE)
            return fail(comm, "step", nctmc_trainer_last_error(trainer));
        if (rank == 0 && (step + 1) % 5 == 0)
            printf("step %lld of %d ranks: loss %.4f\n", (long long)stats.step, ranks,
                   stats.loss);
    }
    /* collective: rank 0 writes, every rank learns how it went */
    if (nctmc_trainer_save(trainer, argv[2]) != NCTMC_OK)
        return fail(comm, argv[2], nctmc_trainer_last_error(trainer));
    nctmc_trainer_free(trainer);
    nctmc_model_free(model);
    nctmc_dataset_free(ds);
    nctmc_context_free(ctx);
    nctmc_comm_free(comm); /* finalises MPI */
    return 0;
}
