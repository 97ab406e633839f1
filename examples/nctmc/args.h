/*
 * args.h — the tool's table-driven flag parser.
 *
 * Every subcommand describes its flags as an array of cli_option whose
 * `value` points straight at the variable (often a field of a library
 * parameter struct) the flag sets. The variable's value before parsing is
 * the default, which is also what --help prints, so help and behaviour
 * cannot drift apart.
 */
#ifndef NCTMC_CLI_ARGS_H
#define NCTMC_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_option_kind {
    CLI_SECTION, /* not a flag: a heading in --help */
    CLI_FLAG,    /* bool, takes no value */
    CLI_INT,     /* int32_t */
    CLI_INT64,   /* int64_t */
    CLI_UINT64,  /* uint64_t */
    CLI_FLOAT,   /* float */
    CLI_STRING,  /* const char * (points into argv) */
    CLI_CHOICE   /* int: index into `choices` */
} cli_option_kind;

typedef struct cli_option {
    const char *name;            /* "--steps", or the heading of a section */
    cli_option_kind kind;
    void *value;
    const char *metavar;         /* "N" in "--steps N" */
    const char *help;
    double min, max;             /* accepted range of a number (inclusive) */
    const char *const *choices;  /* CLI_CHOICE: NULL-terminated names */
    bool given;                  /* set when the command line names it */
} cli_option;

#define CLI_OPT_SECTION(title) {title, CLI_SECTION, NULL, NULL, NULL, 0, 0, NULL, false}
#define CLI_OPT_FLAG(name, var, help) {name, CLI_FLAG, &(var), NULL, help, 0, 0, NULL, false}
#define CLI_OPT_INT(name, var, meta, lo, hi, help) \
    {name, CLI_INT, &(var), meta, help, lo, hi, NULL, false}
#define CLI_OPT_INT64(name, var, meta, lo, hi, help) \
    {name, CLI_INT64, &(var), meta, help, lo, hi, NULL, false}
#define CLI_OPT_UINT64(name, var, meta, help) \
    {name, CLI_UINT64, &(var), meta, help, 0, 0, NULL, false}
#define CLI_OPT_FLOAT(name, var, meta, lo, hi, help) \
    {name, CLI_FLOAT, &(var), meta, help, lo, hi, NULL, false}
#define CLI_OPT_STRING(name, var, meta, help) \
    {name, CLI_STRING, &(var), meta, help, 0, 0, NULL, false}
#define CLI_OPT_CHOICE(name, var, choices, help) \
    {name, CLI_CHOICE, &(var), NULL, help, 0, 0, choices, false}

/** What a subcommand is, for parsing and for --help. */
typedef struct cli_command {
    const char *name;        /* "train" */
    const char *synopsis;    /* "--data DIR [options]" (after "nctmc train") */
    const char *summary;     /* what it does, a few lines */
    const char *examples;    /* example command lines, or NULL */
    int min_positional;
    int max_positional;
    cli_option *options;
    size_t n_options;
} cli_command;

typedef enum cli_parse_result {
    CLI_PARSE_OK = 0,
    CLI_PARSE_HELP,   /* --help was given and printed: exit 0 */
    CLI_PARSE_ERROR   /* a message and the usage went to stderr: exit 2 */
} cli_parse_result;

/** The exit status of a command-line mistake (bad flag, bad value). */
#define CLI_EXIT_USAGE 2

/**
 * Parses argv[1 .. argc-1] (argv[0] is the subcommand's name) against
 * cmd->options, "--name value" and "--name=value" alike; "--" ends the
 * flags. Positional arguments are stored in positional[], which must have
 * room for cmd->max_positional entries or argc - 1, whichever is fewer;
 * their count goes to *n_positional.
 */
cli_parse_result cli_parse(const cli_command *cmd, int argc, char **argv,
                           const char **positional, int *n_positional);

/** Prints the full help of a subcommand. */
void cli_print_help(FILE *out, const cli_command *cmd);

/** Prints "nctmc NAME: message" and the usage to stderr; returns
 *  CLI_EXIT_USAGE so callers can `return cli_usage_error(...)`. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** Whether the flag called `name` was given (false for unknown names). */
bool cli_option_given(const cli_command *cmd, const char *name);

/**
 * For every option given on the command line whose value points inside
 * the struct at `from` (size bytes), copies that field into the struct at
 * `to`, and returns how many it copied. Used to lay explicitly given flags
 * over saved parameters.
 */
int cli_copy_given_fields(const cli_command *cmd, const void *from, void *to, size_t size);

#endif /* NCTMC_CLI_ARGS_H */
