/*
 * collide.c — a host program that defines functions with the names of
 * libnctmc's internal ones (file_read_all, json_parse, cpu_gemm), with other
 * signatures, and links the installed static libnctmc.a
 * (scripts/check_install.py). It links only if the archive defines nothing
 * but nctmc_* globally, and it checks that both sides still use their own
 * functions: the program's return its values, and the library saves and
 * loads a checkpoint (its file reading and JSON parsing) intact.
 *
 *   collide SCRATCH_DIR [--fully-static]
 * --fully-static: the program was linked with -static, so asking for the
 * CUDA backend must fail cleanly, saying there is no dynamic loader.
 */
#include <stdio.h>
#include <string.h>

#include <nctmc.h>

int file_read_all(const char *path);
double json_parse(double x);
int cpu_gemm(void);

int file_read_all(const char *path)
{
    return (int)strlen(path) + 1000;
}

double json_parse(double x)
{
    return 2.0 * x;
}

int cpu_gemm(void)
{
    return 42;
}

static char logged[1024];

static void keep_log(nctmc_log_level level, const char *message, void *user_data)
{
    (void)level;
    (void)user_data;
    snprintf(logged, sizeof logged, "%s", message);
}

static int check_cuda_refused(void)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cuda";
    p.log_fn = keep_log;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    if (st != NCTMC_ERR_UNSUPPORTED || !strstr(logged, "statically linked")) {
        fprintf(stderr, "collide: \"cuda\" in a static program: status %d, logged: %s\n",
                (int)st, logged);
        nctmc_context_free(ctx);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (file_read_all("abc") != 1003 || json_parse(1.5) != 3.0 || cpu_gemm() != 42) {
        fprintf(stderr, "collide: the program's own functions were replaced\n");
        return 1;
    }
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 1;
    nctmc_context *ctx = NULL;
    nctmc_model *model = NULL, *loaded = NULL;
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 5;
    cfg.seq_len = 4;
    cfg.n_layers = 1;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.cond_dim = 4;
    char path[4096];
    snprintf(path, sizeof path, "%s/collide.safetensors", argv[1]);
    int rc = 1;
    if (nctmc_context_create(&p, &ctx) != NCTMC_OK ||
        nctmc_model_create(ctx, &cfg, &model) != NCTMC_OK ||
        nctmc_model_save(model, path) != NCTMC_OK ||
        nctmc_model_load(ctx, path, &loaded) != NCTMC_OK)
        fprintf(stderr, "collide: %s\n", nctmc_context_last_error(ctx));
    else if (nctmc_model_n_params(loaded) != nctmc_model_n_params(model))
        fprintf(stderr, "collide: the loaded checkpoint differs\n");
    else
        rc = 0;
    nctmc_model_free(loaded);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    remove(path);
    if (rc == 0 && argc > 2 && strcmp(argv[2], "--fully-static") == 0)
        rc = check_cuda_refused();
    if (rc == 0)
        printf("collide: libnctmc %s and the program each use their own functions\n",
               nctmc_version());
    return rc;
}
