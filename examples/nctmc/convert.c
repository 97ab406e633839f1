/*
 * convert.c — `nctmc convert`: a float checkpoint into a sampling-only one
 * with bf16 or int8 linear weights (nctmc_model_convert()).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "cli.h"

static const char *const weight_names[] = {"bf16", "int8", NULL};

static double file_mib(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1024.0 * 1024.0) : 0.0;
}

int cmd_convert(int argc, char **argv)
{
    int to = -1; /* required: no default in the help */
    const char *out_path = NULL;
    const char *backend = "cpu";
    bool no_mmap = false;
    cli_option options[] = {
        CLI_OPT_CHOICE("--to", to, weight_names,
                       "weight type of the linear layers: bf16, or int8 with a scale per "
                       "output row (required)"),
        CLI_OPT_STRING("--out", out_path, "PATH", "the converted checkpoint (required)"),
        CLI_OPT_STRING("--backend", backend, "NAME", "compute backend to convert on"),
        CLI_OPT_FLAG("--no-mmap", no_mmap, CLI_NO_MMAP_HELP),
    };
    cli_command cmd = {
        "convert", "CHECKPOINT --to bf16|int8 --out PATH [options]",
        "Writes a sampling-only copy of a float checkpoint whose linear layers (attention\n"
        "qkv and output, MLP, output projection) hold bf16 or int8 weights; the rest\n"
        "stays float. `nctmc sample`, `eval` and `info` read it like any checkpoint;\n"
        "it cannot be trained.",
        "  nctmc convert digits.safetensors --to bf16 --out digits-bf16.safetensors\n"
        "  nctmc convert digits.safetensors --to int8 --out digits-int8.safetensors\n",
        1, 1, options, sizeof options / sizeof options[0]};
    const char *path = NULL;
    int n_pos = 0;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, &path, &n_pos);
    if (parsed != CLI_PARSE_OK)
        return parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    if (!options[0].given || !out_path || !out_path[0]) {
        cli_error("convert", "--to and --out are required");
        return CLI_EXIT_USAGE;
    }
    /* the checkpoint is loaded whole before the output is written, but a
     * float original replaced by its sampling-only copy is lost: an --out
     * that is the input (through a symbolic or hard link too) is refused */
    const char *const inputs[] = {path};
    if (!cli_check_input_file("convert", "checkpoint", path) ||
        !cli_check_output_file("convert", "--out", out_path, inputs, 1))
        return 1;
    nctmc_context *ctx = NULL;
    if (cli_context_create("convert", backend, 1, false, &ctx) != NCTMC_OK)
        return 1;
    nctmc_model *model = NULL, *reduced = NULL;
    int rc = 0;
    nctmc_status st = cli_load_model(ctx, path, no_mmap, &model);
    if (st != NCTMC_OK) {
        rc = cli_fail("convert", path, st, nctmc_context_last_error(ctx));
    } else {
        nctmc_weight_type type = to == 0 ? NCTMC_WEIGHT_BF16 : NCTMC_WEIGHT_INT8;
        st = nctmc_model_convert(model, type, &reduced);
        if (st != NCTMC_OK)
            rc = cli_fail("convert", path, st, nctmc_model_last_error(model));
    }
    if (rc == 0) {
        st = nctmc_model_save(reduced, out_path);
        if (st != NCTMC_OK)
            rc = cli_fail("convert", out_path, st, nctmc_model_last_error(reduced));
    }
    if (rc == 0)
        cli_printf(stdout, "%s (%.2f MiB) -> %s (%.2f MiB, %s linear weights)\n", path,
                   file_mib(path), out_path, file_mib(out_path), weight_names[to]);
    nctmc_model_free(reduced);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    return rc;
}
