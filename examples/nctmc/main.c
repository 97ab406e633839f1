/*
 * main.c — `nctmc`, the command-line tool of libnctmc: dispatches to the
 * subcommands (prepare, train, sample, eval, info,
 * tokenize), one file each.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"prepare", cmd_prepare, "text files or the digits data -> token shards + tokenizer"},
    {"train", cmd_train, "train a model on prepared data -> checkpoint"},
    {"sample", cmd_sample, "draw samples (text, or images as PNG + ASCII) from a checkpoint"},
    {"eval", cmd_eval, "NELBO in bits/token and exit-rate reliability on held-out data"},
    {"info", cmd_info, "what a checkpoint holds"},
    {"tokenize", cmd_tokenize, "text -> token ids (or back) with a tokenizer or checkpoint"},
    {"convert", cmd_convert, "a checkpoint with bf16 or int8 linear weights, for sampling"},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: nctmc COMMAND [options]\n\n"
                 "Trains and samples Neural CTMC discrete diffusion models (libnctmc %s).\n\n"
                 "commands:\n",
            nctmc_version());
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(out, "  %-9s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(out, "\n`nctmc COMMAND --help` lists a command's options; docs/cli.md has examples.\n"
                 "  -h, --help     print this help\n"
                 "  --version      print the library's version\n");
}

int main(int argc, char **argv)
{
    cli_single_threaded_blas(argv);
    if (argc < 2) {
        print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0) {
        printf("nctmc %s\n", nctmc_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (strcmp(name, subcommands[i].name) == 0)
            return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "nctmc: unknown command '%s'\n\n", name);
    print_usage(stderr);
    return CLI_EXIT_USAGE;
}
