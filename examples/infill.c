/*
 * infill.c — infilling for editor tooling, in the shape a plug-in can copy,
 * using nothing but the installed header <nctmc.h>:
 *
 *   infill CHECKPOINT FILE RANGE... [--seed S] [--steps N]
 *
 * RANGE is START:END or START:END:TOKENS — a byte range [START, END) of
 * FILE to regenerate (START == END inserts), optionally with the number of
 * tokens to generate there (default: as many as the original text takes).
 * Ranges must be sorted and must not overlap. The whole new text goes to
 * stdout, byte for byte (no newline added), and one line per range to
 * stderr, "range K: START END", saying where its new text lies in the
 * output — what an editor needs to replace or highlight the regions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nctmc.h>

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "infill: %s: %s\n", what, why);
    return 1;
}

/* The whole file, or NULL. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got = 1; buf != NULL && got > 0;) {
        if (n == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    }
    if (ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* "START:END" or "START:END:TOKENS". */
static int parse_range(const char *s, nctmc_text_range *r, int32_t *tokens)
{
    char *end = NULL;
    errno = 0;
    unsigned long long a = strtoull(s, &end, 10);
    if (end == s || *end != ':')
        return 0;
    const char *p = end + 1;
    unsigned long long b = strtoull(p, &end, 10);
    if (end == p || (*end != ':' && *end != '\0') || errno != 0)
        return 0;
    *tokens = NCTMC_INFILL_AUTO_TOKENS;
    if (*end == ':') {
        p = end + 1;
        long t = strtol(p, &end, 10);
        if (end == p || *end != '\0' || t < 0 || t > 1 << 24)
            return 0;
        *tokens = (int32_t)t;
    }
    r->start = (size_t)a;
    r->end = (size_t)b;
    return 1;
}

/* Samples once into a generous buffer; if the text is longer, asks again
 * with the size the library reported (the result is deterministic). */
static int run(nctmc_sampler *sampler, const char *text, size_t len,
               const nctmc_text_range *ranges, int32_t n, nctmc_infill_params *ip)
{
    nctmc_text_range *where = calloc((size_t)n, sizeof *where);
    size_t cap = 2 * len + 256 * (size_t)n + 1, out_len = 0;
    char *out = malloc(cap);
    if (where == NULL || out == NULL) {
        free(where);
        free(out);
        return fail("memory", "out of memory");
    }
    ip->ranges_out = where;
    nctmc_status st = nctmc_infill(sampler, NULL, text, len, ranges, n, ip, out, cap, &out_len);
    if (st == NCTMC_ERR_INVALID_ARGUMENT && out_len >= cap) {
        char *bigger = realloc(out, out_len + 1);
        if (bigger != NULL) {
            out = bigger;
            st = nctmc_infill(sampler, NULL, text, len, ranges, n, ip, out, out_len + 1,
                              &out_len);
        }
    }
    int rc = 0;
    if (st == NCTMC_OK) {
        fwrite(out, 1, out_len, stdout);
        for (int32_t k = 0; k < n; k++)
            fprintf(stderr, "range %d: %zu %zu\n", (int)k, where[k].start, where[k].end);
    } else {
        rc = fail("cannot infill", nctmc_sampler_last_error(sampler));
    }
    free(where);
    free(out);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return fail("usage", "infill CHECKPOINT FILE START:END[:TOKENS]... [--seed S] "
                             "[--steps N]");
    nctmc_sample_params sp;
    nctmc_sample_params_init(&sp);
    nctmc_text_range *ranges = calloc((size_t)argc, sizeof *ranges);
    int32_t *tokens = calloc((size_t)argc, sizeof *tokens);
    int32_t n = 0;
    for (int i = 3; ranges != NULL && tokens != NULL && i < argc; i++) {
        if ((strcmp(argv[i], "--seed") == 0 || strcmp(argv[i], "--steps") == 0) &&
            i + 1 < argc) {
            unsigned long long v = strtoull(argv[i + 1], NULL, 10);
            if (strcmp(argv[i], "--seed") == 0)
                sp.seed = v;
            else /* 0 (out of range) makes the library name the field */
                sp.n_steps = v > 0 && v < 1000000 ? (int32_t)v : 0;
            i++;
        } else if (!parse_range(argv[i], &ranges[n], &tokens[n])) {
            free(ranges);
            free(tokens);
            return fail(argv[i], "not a range START:END[:TOKENS]");
        } else {
            n++;
        }
    }
    size_t len = 0;
    char *text = ranges && tokens ? read_file(argv[2], &len) : NULL;
    nctmc_context *ctx = NULL;
    nctmc_model *model = NULL;
    nctmc_sampler *sampler = NULL;
    int rc = 1;
    if (text == NULL)
        rc = fail(argv[2], "cannot read the file");
    else if (nctmc_context_create(NULL, &ctx) != NCTMC_OK)
        rc = fail("context", "cannot create a context");
    else if (nctmc_model_load(ctx, argv[1], &model) != NCTMC_OK)
        rc = fail(argv[1], nctmc_context_last_error(ctx));
    else if (nctmc_sampler_create(model, NULL, &sampler) != NCTMC_OK)
        rc = fail("sampler", nctmc_model_last_error(model));
    else {
        nctmc_infill_params ip;
        nctmc_infill_params_init(&ip);
        ip.sample = &sp;
        ip.range_tokens = tokens;
        rc = run(sampler, text, len, ranges, n, &ip);
    }
    nctmc_sampler_free(sampler);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    free(text);
    free(ranges);
    free(tokens);
    return rc;
}
