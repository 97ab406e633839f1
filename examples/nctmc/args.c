/*
 * args.c — parsing and help text for the table-driven flags of args.h.
 */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static cli_option *find_option(const cli_command *cmd, const char *name, size_t name_len)
{
    for (size_t i = 0; i < cmd->n_options; i++) {
        cli_option *opt = &cmd->options[i];
        if (opt->kind != CLI_SECTION && strlen(opt->name) == name_len &&
            strncmp(opt->name, name, name_len) == 0)
            return opt;
    }
    return NULL;
}

static bool in_range(const cli_option *opt, double v)
{
    return opt->min > opt->max || (v >= opt->min && v <= opt->max);
}

/* Strict number syntax, checked before strtoll/strtod see the text: they
 * would skip leading white space and take a '+', hexadecimal, "inf" or
 * "nan" — none of which a flag's value may be. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Digits only, after an optional '-' when allow_minus. */
static bool is_integer_text(const char *text, bool allow_minus)
{
    const char *p = text;
    if (allow_minus && *p == '-')
        p++;
    if (!is_digit(*p))
        return false;
    while (is_digit(*p))
        p++;
    return *p == '\0';
}

/* [-]digits[.digits] or [-].digits, then an optional e[+-]digits. */
static bool is_decimal_text(const char *text)
{
    const char *p = text;
    if (*p == '-')
        p++;
    int digits = 0;
    while (is_digit(*p))
        p++, digits++;
    if (*p == '.')
        for (p++; is_digit(*p); p++)
            digits++;
    if (digits == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return false;
        while (is_digit(*p))
            p++;
    }
    return *p == '\0';
}

static bool parse_signed(const char *text, long long *out)
{
    char *end;
    if (!is_integer_text(text, true))
        return false;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_unsigned(const char *text, uint64_t *out)
{
    char *end;
    if (!is_integer_text(text, false))
        return false;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = (uint64_t)v;
    return true;
}

static bool parse_real(const char *text, double *out)
{
    char *end;
    if (!is_decimal_text(text))
        return false;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool set_choice(cli_option *opt, const char *text)
{
    for (int i = 0; opt->choices[i] != NULL; i++) {
        if (strcmp(opt->choices[i], text) == 0) {
            *(int *)opt->value = i;
            return true;
        }
    }
    return false;
}

/* Stores `text` into the option's variable; false if it is not a valid
 * value of the option's kind and range. */
static bool set_value(cli_option *opt, const char *text)
{
    long long i;
    uint64_t u;
    double d;
    switch (opt->kind) {
    case CLI_INT:
        if (!parse_signed(text, &i) || i < INT32_MIN || i > INT32_MAX || !in_range(opt, (double)i))
            return false;
        *(int32_t *)opt->value = (int32_t)i;
        return true;
    case CLI_INT64:
        if (!parse_signed(text, &i) || !in_range(opt, (double)i))
            return false;
        *(int64_t *)opt->value = (int64_t)i;
        return true;
    case CLI_UINT64:
        if (!parse_unsigned(text, &u))
            return false;
        *(uint64_t *)opt->value = u;
        return true;
    case CLI_FLOAT: {
        /* the range holds for the float stored, not the decimal typed:
         * 0.999999999 rounds to 1.0f, past a bound of 0.999999999 */
        if (!parse_real(text, &d))
            return false;
        float f = (float)d;
        if (!isfinite(f) || !in_range(opt, (double)f))
            return false;
        *(float *)opt->value = f;
        return true;
    }
    case CLI_STRING:
        *(const char **)opt->value = text;
        return true;
    case CLI_CHOICE:
        return set_choice(opt, text);
    case CLI_FLAG:
    case CLI_SECTION:
        break;
    }
    return false;
}

static void describe_expected(FILE *out, const cli_option *opt)
{
    switch (opt->kind) {
    case CLI_INT:
    case CLI_INT64:
        fprintf(out, "an integer");
        break;
    case CLI_UINT64:
        fprintf(out, "an integer in [0, %llu]", (unsigned long long)UINT64_MAX);
        return;
    case CLI_FLOAT:
        fprintf(out, "a number");
        break;
    case CLI_CHOICE:
        fprintf(out, "one of");
        for (int i = 0; opt->choices[i] != NULL; i++)
            fprintf(out, "%s%s", i ? ", " : " ", opt->choices[i]);
        return;
    default:
        fprintf(out, "a value");
        return;
    }
    if (opt->min > opt->max)
        return;
    if (opt->kind == CLI_FLOAT) {
        /* the bounds a float can take: 0.999999999 is stored as 1.0f, so the
         * largest accepted value is 0.99999994; printing the decimal bound
         * would name the very value refused */
        float lo = (float)opt->min, hi = (float)opt->max;
        if ((double)lo < opt->min)
            lo = nextafterf(lo, INFINITY);
        if ((double)hi > opt->max)
            hi = nextafterf(hi, -INFINITY);
        bool exact = (double)lo == opt->min && (double)hi == opt->max;
        fprintf(out, " in [%.9g, %.9g]%s", (double)lo, (double)hi,
                exact ? "" : " (the range of a 32-bit float)");
    } else
        fprintf(out, " in [%.0f, %.0f]", opt->min, opt->max);
}

static int bad_value(const cli_command *cmd, const cli_option *opt, const char *text)
{
    fprintf(stderr, "nctmc %s: bad value '%s' for %s: expected ", cmd->name, text, opt->name);
    describe_expected(stderr, opt);
    fprintf(stderr, "\n\n");
    cli_print_help(stderr, cmd);
    return CLI_EXIT_USAGE;
}

static bool is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* Handles one "--name[=value]" at argv[*i], advancing *i past a separate
 * value. Returns 0, or the usage exit status after reporting. */
static int parse_flag(const cli_command *cmd, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    cli_option *opt = find_option(cmd, arg, name_len);
    if (opt == NULL)
        return cli_usage_error(cmd, "unknown flag '%.*s'", (int)name_len, arg);
    opt->given = true;
    if (opt->kind == CLI_FLAG) {
        if (eq != NULL)
            return cli_usage_error(cmd, "%s takes no value", opt->name);
        *(bool *)opt->value = true;
        return 0;
    }
    const char *text = eq ? eq + 1 : NULL;
    if (text == NULL) {
        if (*i + 1 >= argc)
            return cli_usage_error(cmd, "%s needs a value", opt->name);
        text = argv[++*i];
    }
    return set_value(opt, text) ? 0 : bad_value(cmd, opt, text);
}

cli_parse_result cli_parse(const cli_command *cmd, int argc, char **argv,
                           const char **positional, int *n_positional)
{
    int n_pos = 0;
    bool flags_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!flags_done && is_help(arg)) {
            cli_print_help(stdout, cmd);
            return CLI_PARSE_HELP;
        }
        if (!flags_done && strcmp(arg, "--") == 0) {
            flags_done = true;
        } else if (!flags_done && arg[0] == '-' && arg[1] != '\0') {
            if (parse_flag(cmd, argc, argv, &i) != 0)
                return CLI_PARSE_ERROR;
        } else if (n_pos < cmd->max_positional) {
            positional[n_pos++] = arg;
        } else {
            cli_usage_error(cmd, "unexpected argument '%s'", arg);
            return CLI_PARSE_ERROR;
        }
    }
    if (n_pos < cmd->min_positional) {
        cli_usage_error(cmd, "missing argument");
        return CLI_PARSE_ERROR;
    }
    *n_positional = n_pos;
    return CLI_PARSE_OK;
}

/* The "(default X)" part of a flag's help into buf; nothing for flags and
 * unset strings, whose default is "off". */
static void format_default(char *buf, size_t size, const cli_option *opt)
{
    buf[0] = '\0';
    /* a starting value outside the accepted range means "not given" (as
     * --label's -1): there is no default to show */
    if ((opt->kind == CLI_INT && !in_range(opt, *(const int32_t *)opt->value)) ||
        (opt->kind == CLI_INT64 && !in_range(opt, (double)*(const int64_t *)opt->value)) ||
        (opt->kind == CLI_FLOAT && !in_range(opt, *(const float *)opt->value)))
        return;
    /* a choice starting at -1 is required (convert's --to) */
    if (opt->kind == CLI_CHOICE && *(const int *)opt->value < 0)
        return;
    switch (opt->kind) {
    case CLI_INT:
        snprintf(buf, size, " (default %d)", (int)*(const int32_t *)opt->value);
        break;
    case CLI_INT64:
        snprintf(buf, size, " (default %lld)", (long long)*(const int64_t *)opt->value);
        break;
    case CLI_UINT64:
        snprintf(buf, size, " (default %llu)", (unsigned long long)*(const uint64_t *)opt->value);
        break;
    case CLI_FLOAT:
        snprintf(buf, size, " (default %g)", (double)*(const float *)opt->value);
        break;
    case CLI_STRING:
        if (*(const char *const *)opt->value != NULL)
            snprintf(buf, size, " (default %s)", *(const char *const *)opt->value);
        break;
    case CLI_CHOICE:
        snprintf(buf, size, " (default %s)", opt->choices[*(const int *)opt->value]);
        break;
    case CLI_FLAG:
    case CLI_SECTION:
        break;
    }
}

/* "--name VALUE" as the help's left column writes it, into buf. */
static void format_flag(char *buf, size_t size, const cli_option *opt)
{
    if (opt->kind == CLI_FLAG) {
        snprintf(buf, size, "%s", opt->name);
    } else if (opt->kind == CLI_CHOICE) {
        int len = snprintf(buf, size, "%s ", opt->name);
        for (int i = 0; opt->choices[i] != NULL && len > 0 && (size_t)len < size; i++)
            len += snprintf(buf + len, size - (size_t)len, "%s%s", i ? "|" : "",
                            opt->choices[i]);
    } else {
        snprintf(buf, size, "%s %s", opt->name, opt->metavar ? opt->metavar : "VALUE");
    }
}

enum { HELP_FLAG_COLUMN = 26, HELP_WIDTH = 79 };

/* Prints text word-wrapped into the help's right column, which starts at
 * column `at` of the current line. */
static void print_wrapped(FILE *out, const char *text, int at)
{
    int col = at;
    const int start = HELP_FLAG_COLUMN + 2;
    while (*text != '\0') {
        while (*text == ' ')
            text++;
        int word = (int)strcspn(text, " ");
        if (word == 0)
            break;
        if (col > start && col + 1 + word > HELP_WIDTH) {
            fprintf(out, "\n%*s", start, "");
            col = start;
        } else if (col > start) {
            fputc(' ', out);
            col++;
        }
        fprintf(out, "%.*s", word, text);
        col += word;
        text += word;
    }
    fputc('\n', out);
}

static void print_option(FILE *out, const cli_option *opt)
{
    if (opt->kind == CLI_SECTION) {
        fprintf(out, "\n%s:\n", opt->name);
        return;
    }
    char left[160], help[512], dflt[128];
    format_flag(left, sizeof left, opt);
    format_default(dflt, sizeof dflt, opt);
    snprintf(help, sizeof help, "%s%s", opt->help, dflt);
    if (strlen(left) + 2 >= HELP_FLAG_COLUMN)
        fprintf(out, "  %s\n  %*s", left, HELP_FLAG_COLUMN, "");
    else
        fprintf(out, "  %-*s", HELP_FLAG_COLUMN, left);
    print_wrapped(out, help, HELP_FLAG_COLUMN + 2);
}

void cli_print_help(FILE *out, const cli_command *cmd)
{
    fprintf(out, "usage: nctmc %s %s\n\n%s\n", cmd->name, cmd->synopsis, cmd->summary);
    bool sectioned = cmd->n_options > 0 && cmd->options[0].kind == CLI_SECTION;
    if (!sectioned)
        fprintf(out, "\noptions:\n");
    for (size_t i = 0; i < cmd->n_options; i++)
        print_option(out, &cmd->options[i]);
    fprintf(out, "  %-*s%s\n", HELP_FLAG_COLUMN, "-h, --help", "print this help and exit");
    if (cmd->examples != NULL)
        fprintf(out, "\nexamples:\n%s", cmd->examples);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nctmc %s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n\n");
    va_end(ap);
    cli_print_help(stderr, cmd);
    return CLI_EXIT_USAGE;
}

bool cli_option_given(const cli_command *cmd, const char *name)
{
    cli_option *opt = find_option(cmd, name, strlen(name));
    return opt != NULL && opt->given;
}

static size_t value_size(cli_option_kind kind)
{
    switch (kind) {
    case CLI_FLAG:
        return sizeof(bool);
    case CLI_INT:
        return sizeof(int32_t);
    case CLI_INT64:
        return sizeof(int64_t);
    case CLI_UINT64:
        return sizeof(uint64_t);
    case CLI_FLOAT:
        return sizeof(float);
    case CLI_STRING:
        return sizeof(const char *);
    case CLI_CHOICE:
        return sizeof(int);
    case CLI_SECTION:
        break;
    }
    return 0;
}

int cli_copy_given_fields(const cli_command *cmd, const void *from, void *to, size_t size)
{
    int copied = 0;
    uintptr_t lo = (uintptr_t)from;
    for (size_t i = 0; i < cmd->n_options; i++) {
        const cli_option *opt = &cmd->options[i];
        size_t n = value_size(opt->kind);
        uintptr_t at = (uintptr_t)opt->value;
        if (!opt->given || n == 0 || at < lo || at - lo + n > size)
            continue;
        memcpy((char *)to + (at - lo), opt->value, n);
        copied++;
    }
    return copied;
}
