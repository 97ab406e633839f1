/*
 * sample.c — `nctmc sample`: draws sequences from a checkpoint, with
 * prefix/suffix/infilling constraints for text models and labels (and
 * classifier-free guidance) for conditional ones; writes text, or for image
 * models a PNG grid and an ASCII preview.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "cli_platform.h"
#include "image_grid.h"
#include "progress.h"

/* "auto" (the last choice) is the checkpoint's recommendation
 * (nctmc_sample_params_from_model()), resolved once the model is loaded */
static const char *const method_names[] = {"tau", "euler", "posterior", "auto", NULL};
static const char *const method_titles[] = {"tau-leaping", "Euler", "posterior"};
static const char *const grid_names[] = {"uniform", "geometric", "auto", NULL};
#define METHOD_AUTO 3
#define GRID_AUTO 2
static const char *const grid_titles[] = {"even grid", "geometric grid"};
/* in the order of nctmc_cfg_rule and nctmc_correction_mode */
static const char *const cfg_rule_names[] = {"separate", "rates", NULL};
static const char *const correct_mode_names[] = {"greedy", "gibbs", NULL};

typedef struct sample_options {
    nctmc_sample_params params;  /* the numeric settings, from the flags */
    int method;
    int grid;
    int cfg_rule;
    int correct_mode;
    bool no_denoise;
    int64_t n;
    int32_t batch;
    int32_t length;
    int32_t label;               /* -1: none given */
    int32_t per_class;
    const char *prefix;
    const char *suffix;
    const char *infill;
    const char *blank;
    const char *out;
    bool tokens;                 /* --tokens: write token ids, not text */
    const char *png;
    int32_t scale;
    bool no_preview;
    int32_t threads;
    const char *backend;
    bool verbose;
    bool no_mmap;
} sample_options;

/* A text constraint as nctmc_infill() takes it: the fixed text, the byte
 * ranges to generate and how many tokens each gets. */
typedef struct infill_request {
    char *text;
    size_t len;
    nctmc_text_range *ranges;
    int32_t *slots;
    int32_t n_ranges;
} infill_request;

/* What to draw: how many sequences, how long, with which labels, and the
 * text constraint (then each sample is drawn by nctmc_infill() and kept as
 * text). */
typedef struct sample_job {
    int64_t n;
    int32_t length;
    int32_t *labels;        /* [n] or NULL */
    infill_request infill;  /* n_ranges 0: none */
    int32_t per_row;        /* images per grid row */
    int64_t n_done;         /* samples drawn (fewer after Ctrl-C) */
    int32_t *tokens;        /* [n * length], without a constraint */
    char **texts;           /* [n], with one */
    size_t *text_lens;      /* [n] */
} sample_job;

static void job_free(sample_job *job)
{
    free(job->labels);
    free(job->infill.text);
    free(job->infill.ranges);
    free(job->infill.slots);
    free(job->tokens);
    for (int64_t i = 0; job->texts != NULL && i < job->n; i++)
        free(job->texts[i]);
    free(job->texts);
    free(job->text_lens);
}

/* ---- constraints --------------------------------------------------------- */

/* The tokens text[0..len) takes, encoded alone, into *n. */
static bool count_tokens(nctmc_tokenizer *tok, const char *text, size_t len, size_t *n)
{
    *n = 0;
    if (len == 0)
        return true;
    nctmc_status st = nctmc_tokenizer_encode(tok, text, len, NULL, 0, n);
    if (st != NCTMC_OK)
        cli_fail("sample", "cannot encode the constraint", st, nctmc_tokenizer_last_error(tok));
    return st == NCTMC_OK;
}

/* Adds a range at the end of the request's text, of `slots` tokens. */
static bool request_range(infill_request *r, int32_t slots)
{
    nctmc_text_range *ranges = realloc(r->ranges, (size_t)(r->n_ranges + 1) * sizeof *ranges);
    if (ranges != NULL)
        r->ranges = ranges;
    int32_t *counts = ranges ? realloc(r->slots, (size_t)(r->n_ranges + 1) * sizeof *counts)
                             : NULL;
    if (counts != NULL)
        r->slots = counts;
    if (ranges == NULL || counts == NULL) {
        cli_error("sample", "out of memory");
        return false;
    }
    r->ranges[r->n_ranges] = (nctmc_text_range){r->len, r->len};
    r->slots[r->n_ranges++] = slots;
    return true;
}

/* Appends text[0..len) to the request's text; fixed text (tok not NULL)
 * adds its tokens to the job's length. */
static bool request_text(infill_request *r, sample_job *job, nctmc_tokenizer *tok,
                         const char *text, size_t len)
{
    size_t n = 0;
    char *grown = realloc(r->text, r->len + len + 1);
    if (grown == NULL) {
        cli_error("sample", "out of memory");
        return false;
    }
    r->text = grown;
    memcpy(r->text + r->len, text, len);
    r->len += len;
    if (tok == NULL)
        return true;
    if (!count_tokens(tok, text, len, &n))
        return false;
    job->length += (int32_t)(n < (size_t)INT32_MAX / 2 ? n : (size_t)INT32_MAX / 2);
    return true;
}

/* An infilling pattern: each run of the blank character is a range of the
 * text, one token per blank; the rest is fixed text. The blanks stay in
 * the request's text, inside the ranges, where they are replaced. */
static bool layout_infill(sample_job *job, nctmc_tokenizer *tok, const char *pattern, char blank)
{
    job->length = 0;
    for (const char *p = pattern; *p != '\0';) {
        bool free_run = *p == blank;
        size_t len = 0;
        while (p[len] != '\0' && (p[len] == blank) == free_run)
            len++;
        if (free_run && len > (size_t)INT32_MAX / 4) {
            cli_error("sample", "the blank run is too long");
            return false;
        }
        bool ok = free_run ? request_range(&job->infill, (int32_t)len) : true;
        ok = ok && request_text(&job->infill, job, free_run ? NULL : tok, p, len);
        if (ok && free_run) {
            job->infill.ranges[job->infill.n_ranges - 1].end = job->infill.len;
            job->length += (int32_t)len;
        }
        if (!ok)
            return false;
        p += len;
    }
    return true;
}

/* A prefix and/or suffix at the ends of a sequence of `length`: one range
 * between them (an insertion point) of what the length leaves. */
static bool layout_ends(sample_job *job, nctmc_tokenizer *tok, const char *prefix,
                        const char *suffix, int32_t length)
{
    job->length = 0;
    size_t n_suffix = 0;
    if (suffix && !count_tokens(tok, suffix, strlen(suffix), &n_suffix))
        return false;
    bool ok = !prefix || request_text(&job->infill, job, tok, prefix, strlen(prefix));
    int64_t free_len = (int64_t)length - job->length - (int64_t)n_suffix;
    if (ok && free_len < 0) {
        cli_error("sample", "the prefix and suffix take %lld tokens, more than the length %d",
                  (long long)(job->length + (int64_t)n_suffix), (int)length);
        ok = false;
    }
    ok = ok && request_range(&job->infill, (int32_t)free_len);
    job->length += (int32_t)free_len;
    ok = ok && (!suffix || request_text(&job->infill, job, tok, suffix, strlen(suffix)));
    return ok;
}

/* ---- the job ------------------------------------------------------------- */

static bool set_labels(sample_job *job, const sample_options *o, const nctmc_model_config *cfg)
{
    if (o->per_class > 0) {
        job->n = (int64_t)cfg->n_classes * o->per_class;
        job->per_row = o->per_class;
    }
    if (o->per_class == 0 && o->label < 0)
        return true;  /* NULL labels: the null label, or no labels at all */
    job->labels = malloc((size_t)job->n * sizeof *job->labels);
    if (job->labels == NULL)
        return false;
    for (int64_t i = 0; i < job->n; i++)
        job->labels[i] = o->per_class > 0 ? (int32_t)(i / o->per_class) : o->label;
    return true;
}

static bool check_request(const sample_options *o, const nctmc_model_config *cfg,
                          const nctmc_tokenizer *tok, const char *ckpt)
{
    bool image = tok && nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_IMAGE;
    bool constrained = o->prefix || o->suffix || o->infill;
    int32_t w = 0, h = 0;
    if (image)
        nctmc_tokenizer_image_shape(tok, &w, &h, NULL);
    const char *problem =
        (o->label >= 0 || o->per_class > 0) && cfg->n_classes == 0
            ? "--label and --per-class need a class-conditional model"
        : o->label > cfg->n_classes ? "--label is past the model's classes"
        : constrained && tok == NULL ? "--prefix, --suffix and --infill need a tokenizer"
        : constrained && image       ? "--prefix, --suffix and --infill are for text models"
        : o->png && !image           ? "--png needs an image model"
        : image && o->length > 0 && o->length != w * h
            ? "--length of an image model must be its width x height"
            : NULL;
    if (problem != NULL) {
        cli_error("sample", "%s: %s (%d classes, tokenizer %s)", ckpt, problem,
                  (int)cfg->n_classes, tok ? cli_tokenizer_names[nctmc_tokenizer_get_kind(tok)]
                                           : "none");
        return false;
    }
    return true;
}

static bool plan_job(sample_job *job, const sample_options *o, const nctmc_model_config *cfg,
                     nctmc_tokenizer *tok)
{
    job->n = o->n;
    job->per_row = o->n < 10 ? (int32_t)o->n : 10;
    int32_t length = o->length > 0 ? o->length : cfg->seq_len;
    bool ok = set_labels(job, o, cfg);
    if (ok && o->infill)
        ok = layout_infill(job, tok, o->infill, o->blank[0]);
    else if (ok && (o->prefix || o->suffix))
        ok = layout_ends(job, tok, o->prefix, o->suffix, length);
    else
        job->length = length;
    if (!ok)
        return false;
    if (job->length < 1 || job->length > cfg->seq_len) {
        cli_error("sample", "the sequences would have %d tokens; the model allows 1 .. %d",
                  (int)job->length, (int)cfg->seq_len);
        return false;
    }
    if (job->infill.n_ranges > 0) {
        job->texts = calloc((size_t)job->n, sizeof *job->texts);
        job->text_lens = calloc((size_t)job->n, sizeof *job->text_lens);
        ok = job->texts != NULL && job->text_lens != NULL;
    } else {
        job->tokens = malloc((size_t)(job->n * job->length) * sizeof(int32_t));
        ok = job->tokens != NULL;
    }
    if (!ok)
        cli_error("sample", "out of memory for %lld samples", (long long)job->n);
    return ok;
}

/* ---- drawing ------------------------------------------------------------- */

typedef struct sample_progress {
    progress bar;
    int64_t done_before;  /* sequence-steps of the finished batches */
} sample_progress;

static int32_t on_step(int32_t step, int32_t n_steps, const int32_t *tokens, int32_t batch,
                       int32_t length, void *user_data)
{
    (void)tokens;
    (void)length;
    sample_progress *sp = user_data;
    int32_t counted = step < n_steps ? step : n_steps;
    progress_update(&sp->bar, sp->done_before + (int64_t)counted * batch, "");
    return !cli_interrupt_requested();
}

/* One constrained sample, drawn and decoded by nctmc_infill(): the fixed
 * text is kept byte for byte, for every tokenizer kind that encodes text. */
static nctmc_status draw_text(nctmc_sampler *sampler, nctmc_tokenizer *tok, sample_job *job,
                              const nctmc_sample_params *p, int64_t i)
{
    const infill_request *r = &job->infill;
    nctmc_infill_params ip;
    nctmc_infill_params_init(&ip);
    ip.sample = p;
    ip.range_tokens = r->slots;
    /* a first guess of the size, then the exact one (the result is the same) */
    size_t cap = r->len + 16 * (size_t)job->length + 1, len = 0;
    char *text = malloc(cap);
    if (text == NULL)
        return NCTMC_ERR_OUT_OF_MEMORY;
    nctmc_status st =
        nctmc_infill(sampler, tok, r->text, r->len, r->ranges, r->n_ranges, &ip, text, cap, &len);
    if (st == NCTMC_ERR_INVALID_ARGUMENT && len >= cap) {
        char *bigger = realloc(text, len + 1);
        st = bigger == NULL ? NCTMC_ERR_OUT_OF_MEMORY
                            : nctmc_infill(sampler, tok, r->text, r->len, r->ranges,
                                           r->n_ranges, &ip, bigger, len + 1, &len);
        text = bigger != NULL ? bigger : text;
    }
    if (st != NCTMC_OK) {
        free(text);
        return st;
    }
    job->texts[i] = text;
    job->text_lens[i] = len;
    return NCTMC_OK;
}

/* Draws job->n sequences batch by batch (one at a time under a text
 * constraint). Row k's random stream is first_sequence + k, so the samples
 * do not depend on --batch. */
static nctmc_status draw(nctmc_sampler *sampler, nctmc_tokenizer *tok, const sample_options *o,
                         sample_job *job, int32_t batch)
{
    nctmc_sample_params p = o->params;
    p.method = (nctmc_sample_method)o->method;
    p.grid = (nctmc_time_grid)o->grid;
    p.final_denoise = !o->no_denoise;
    p.cfg_rule = (nctmc_cfg_rule)o->cfg_rule;
    p.correction_mode = (nctmc_correction_mode)o->correct_mode;
    p.callback = on_step;
    bool constrained = job->infill.n_ranges > 0;
    /* a mask token left by --no-denoise shows as '_', as in unconstrained
     * samples (cli_decode()) */
    if (constrained && nctmc_tokenizer_set_mask_placeholder(tok, "_") != NCTMC_OK)
        return NCTMC_ERR_OUT_OF_MEMORY;
    if (constrained)
        batch = 1;
    else
        p.length = job->length;
    sample_progress sp;
    progress_begin(&sp.bar, "sample", 0, job->n * p.n_steps, 0);
    p.user_data = &sp;
    nctmc_status st = NCTMC_OK;
    for (job->n_done = 0; job->n_done < job->n && st == NCTMC_OK;) {
        p.batch = job->n - job->n_done < batch ? (int32_t)(job->n - job->n_done) : batch;
        p.first_sequence = job->n_done;
        p.labels = job->labels ? job->labels + job->n_done : NULL;
        sp.done_before = job->n_done * p.n_steps;
        if (constrained) {
            st = draw_text(sampler, tok, job, &p, job->n_done);
        } else {
            p.tokens_out = job->tokens + job->n_done * job->length;
            st = nctmc_sample(sampler, &p);
        }
        if (st == NCTMC_OK)
            job->n_done += p.batch;
    }
    progress_end(&sp.bar);
    return st;
}

/* ---- output -------------------------------------------------------------- */

static void write_sample_header(FILE *out, const sample_job *job, int64_t i)
{
    if (job->labels)
        fprintf(out, "--- sample %lld (label %d) ---\n", (long long)i, (int)job->labels[i]);
    else
        fprintf(out, "--- sample %lld ---\n", (long long)i);
}

/* Decoded samples, each after a header line when there are several (or
 * space-separated token ids when the model has no tokenizer). On a
 * terminal the text is escaped: the tokenizer's values come from the
 * checkpoint, and a control sequence among them must not act on the
 * terminal; files and pipes get the text as it is. */
static bool write_samples(FILE *out, const sample_job *job, nctmc_tokenizer *tok)
{
    bool terminal = isatty(fileno(out)) != 0;
    for (int64_t i = 0; i < job->n_done; i++) {
        if (job->n > 1)
            write_sample_header(out, job, i);
        if (job->texts != NULL) {
            /* written as it is (or escaped), like a decoded sample */
            const char *text = job->texts[i];
            size_t len = job->text_lens[i];
            if (terminal)
                cli_write_escaped(out, text, true);
            else
                fwrite(text, 1, len, out);
            if (len == 0 || text[len - 1] != '\n')
                fputc('\n', out);
            continue;
        }
        /* infilled samples have only texts: the tokens exist from here on */
        const int32_t *seq = job->tokens + i * job->length;
        if (tok == NULL) {
            for (int32_t k = 0; k < job->length; k++)
                fprintf(out, "%s%d", k ? " " : "", (int)seq[k]);
            fputc('\n', out);
            continue;
        }
        size_t len = 0;
        char *text = cli_decode("sample", tok, seq, (size_t)job->length, &len);
        if (text == NULL)
            return false;
        if (terminal)
            cli_write_escaped(out, text, true);
        else
            fwrite(text, 1, len, out); /* every byte, NUL included */
        if (len == 0 || text[len - 1] != '\n')
            fputc('\n', out);
        free(text);
    }
    return true;
}

/* The samples into a file, with the library's atomic writer (the text is
 * assembled in memory first), so the file is never half-written and a
 * FIFO, device or directory at the path is refused. */
static bool write_samples_to(nctmc_context *ctx, const char *path, const sample_job *job,
                             nctmc_tokenizer *tok)
{
    char *text = NULL;
    size_t len = 0;
    cli_mem m;
    FILE *mem = cli_mem_open(&m);
    bool ok = mem != NULL && write_samples(mem, job, tok);
    if (mem != NULL && !cli_mem_close(&m, &text, &len))
        ok = false;
    if (!ok) {
        cli_error("sample", "out of memory assembling the samples");
        free(text);
        return false;
    }
    nctmc_status st = nctmc_write_file(ctx, path, text, len);
    free(text);
    if (st != NCTMC_OK) {
        cli_fail("sample", "cannot write the samples", st, nctmc_context_last_error(ctx));
        return false;
    }
    cli_printf(stderr, "wrote %lld samples to %s\n", (long long)job->n_done, path);
    return true;
}

static char **class_titles(const sample_job *job)
{
    int64_t rows = (job->n_done + job->per_row - 1) / job->per_row;
    char **titles = calloc((size_t)(rows > 0 ? rows : 1), sizeof *titles);
    for (int64_t r = 0; titles != NULL && r < rows; r++) {
        titles[r] = malloc(16);
        if (titles[r] != NULL)
            snprintf(titles[r], 16, "%d:", (int)job->labels[r * job->per_row]);
    }
    return titles;
}

static bool output_images(nctmc_context *ctx, const sample_options *o, const sample_job *job,
                          nctmc_tokenizer *tok)
{
    image_grid grid = {job->tokens, job->n_done, job->per_row, 0, 0, 0};
    image_grid_shape(&grid, tok);
    if (o->png != NULL) {
        nctmc_status st = image_grid_write_png(ctx, &grid, o->scale, o->png);
        if (st != NCTMC_OK) {
            cli_fail("sample", o->png, st,
                     st == NCTMC_ERR_INVALID_ARGUMENT ? "the grid is too large for a PNG"
                     : st == NCTMC_ERR_OUT_OF_MEMORY  ? "out of memory"
                                                      : nctmc_context_last_error(ctx));
            return false;
        }
        cli_printf(stderr, "wrote a %lld-image grid to %s\n", (long long)grid.n, o->png);
    }
    if (o->no_preview)
        return true;
    char **titles = o->per_class > 0 ? class_titles(job) : NULL;
    bool ok = image_grid_print_preview(stdout, &grid, tok, (const char *const *)titles,
                                       progress_terminal_width(STDOUT_FILENO, 120));
    for (int64_t r = 0; titles != NULL && r * job->per_row < job->n_done; r++)
        free(titles[r]);
    free(titles);
    return ok;
}

static bool output(nctmc_context *ctx, const sample_options *o, const sample_job *job,
                   nctmc_tokenizer *tok)
{
    bool image = tok && nctmc_tokenizer_get_kind(tok) == NCTMC_TOKENIZER_IMAGE;
    /* --tokens: the ids as numbers, as for a model without a tokenizer */
    if (o->out != NULL && !write_samples_to(ctx, o->out, job, o->tokens ? NULL : tok))
        return false;
    if (image)
        return output_images(ctx, o, job, tok);
    return o->out != NULL || write_samples(stdout, job, o->tokens ? NULL : tok);
}

/* ---- the subcommand ------------------------------------------------------ */

/* Creates the sampler, draws the job, reports the time taken; returns
 * the exit status. After Ctrl-C the samples finished so far are kept. */
static int draw_job(nctmc_context *ctx, const nctmc_model *model, nctmc_tokenizer *tok,
                    const sample_options *o, sample_job *job)
{
    int32_t batch = job->n < o->batch ? (int32_t)job->n : o->batch;
    if (job->infill.n_ranges > 0)
        batch = 1;
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = batch;
    sp.max_length = job->length;
    nctmc_sampler *sampler = NULL;
    nctmc_status st = nctmc_sampler_create(model, &sp, &sampler);
    if (st != NCTMC_OK)
        return cli_fail("sample", "cannot create the sampler", st, nctmc_context_last_error(ctx));
    double t0 = cli_now();
    st = draw(sampler, tok, o, job, batch);
    if (st != NCTMC_OK && st != NCTMC_ERR_CANCELLED) {
        cli_fail("sample", "sampling failed", st, nctmc_sampler_last_error(sampler));
        job->n_done = 0;
    }
    nctmc_sampler_free(sampler);
    fprintf(stderr, "%s %lld sequences of %d tokens in %.1f s (%s, %d steps)\n",
            st == NCTMC_OK ? "sampled" : "stopped after", (long long)job->n_done,
            (int)job->length, cli_now() - t0, method_titles[o->method], (int)o->params.n_steps);
    return st == NCTMC_OK ? 0 : st == NCTMC_ERR_CANCELLED ? CLI_EXIT_INTERRUPTED : 1;
}

/* --method, --grid and --steps not given: the checkpoint's recommended
 * settings (its process's for a file without them). */
static void resolve_sampler(const nctmc_model *model, sample_options *o)
{
    nctmc_sample_params rec;
    nctmc_sample_params_init(&rec);
    nctmc_sample_params_from_model(model, &rec);
    bool any = o->method == METHOD_AUTO || o->grid == GRID_AUTO || o->params.n_steps == 0;
    if (o->method == METHOD_AUTO)
        o->method = (int)rec.method;
    if (o->grid == GRID_AUTO)
        o->grid = (int)rec.grid;
    if (o->params.n_steps == 0)
        o->params.n_steps = rec.n_steps;
    if (any)
        fprintf(stderr, "sampler: %s, %s, %d steps (the checkpoint's recommendation where "
                "--method, --grid or --steps is not given)\n",
                method_titles[o->method], grid_titles[o->grid], (int)o->params.n_steps);
}

static int sample(nctmc_context *ctx, const char *ckpt, const sample_options *given)
{
    nctmc_model *model = NULL;
    nctmc_status st = cli_load_model(ctx, ckpt, given->no_mmap, &model);
    if (st != NCTMC_OK)
        return cli_fail("sample", ckpt, st, nctmc_context_last_error(ctx));
    sample_options resolved = *given;
    sample_options *o = &resolved;
    resolve_sampler(model, o);
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(model, &cfg);
    nctmc_tokenizer *tok = cli_model_tokenizer(model);
    sample_job job;
    memset(&job, 0, sizeof job);
    int rc = 1;
    if (check_request(o, &cfg, tok, ckpt) && plan_job(&job, o, &cfg, tok)) {
        rc = draw_job(ctx, model, tok, o, &job);
        if (job.n_done > 0 && !output(ctx, o, &job, tok))
            rc = 1;
    }
    job_free(&job);
    nctmc_tokenizer_free(tok);
    nctmc_model_free(model);
    return rc;
}

/* The outputs can be written and are neither the checkpoint nor each
 * other — checked before the model is even loaded. */
static bool check_paths(const char *ckpt, const sample_options *o)
{
    const char *inputs[] = {ckpt};
    if (!cli_check_input_file("sample", "checkpoint", ckpt) ||
        (o->out && !cli_check_output_file("sample", "--out", o->out, inputs, 1)) ||
        (o->png && !cli_check_output_file("sample", "--png", o->png, inputs, 1)))
        return false;
    if (o->out && o->png && (strcmp(o->out, o->png) == 0 || cli_same_file(o->out, o->png))) {
        cli_error("sample", "--out and --png name the same file %s", o->out);
        return false;
    }
    return true;
}

int cmd_sample(int argc, char **argv)
{
    sample_options o;
    memset(&o, 0, sizeof o);
    nctmc_sample_params_init(&o.params);
    nctmc_sample_params *p = &o.params;
    o.method = METHOD_AUTO;
    o.grid = GRID_AUTO;
    p->n_steps = 0;  /* not given: the checkpoint's (below the flag's range) */
    o.cfg_rule = (int)p->cfg_rule;
    o.correct_mode = (int)p->correction_mode;
    o.n = 1;
    o.batch = 16;
    o.label = -1;
    o.blank = "_";
    o.scale = 8;
    o.backend = "auto";
    cli_option options[] = {
        CLI_OPT_SECTION("sampler"),
        CLI_OPT_CHOICE("--method", o.method, method_names,
                       "tau-leaping, Euler, the posterior sampler, or auto: the one the "
                       "checkpoint recommends"),
        CLI_OPT_INT("--steps", p->n_steps, "N", 1, 1000000,
                    "steps of the time grid (default: the checkpoint's)"),
        CLI_OPT_CHOICE("--grid", o.grid, grid_names,
                       "time grid: even in t, in log t (finer near t_min), or auto: the "
                       "checkpoint's"),
        CLI_OPT_FLOAT("--t-max", p->t_max, "T", 1e-9, 0.999999999, "first time"),
        CLI_OPT_FLOAT("--t-min", p->t_min, "T", 1e-9, 0.999999999, "last time"),
        CLI_OPT_FLOAT("--temperature", p->temperature, "T", 1e-6, 1e6,
                      "jump logits are divided by T"),
        CLI_OPT_FLAG("--no-denoise", o.no_denoise,
                     "skip the final step to the most probable clean tokens"),
        CLI_OPT_INT("--correct", p->correction_steps, "K", 0, 1000000,
                    "self-correction: at most K single-token updates per sample"),
        CLI_OPT_CHOICE("--correct-mode", o.correct_mode, correct_mode_names,
                       "greedy: the most confident change (paper Alg. 3); gibbs: a random "
                       "position redrawn each update (keeps diversity)"),
        CLI_OPT_FLOAT("--correct-temp", p->correction_temperature, "T", 1e-6, 1e6,
                      "temperature of the self-correction pass"),
        CLI_OPT_FLOAT("--correct-time", p->correction_time, "T", 1e-6, 0.999999,
                      "noise level the self-correction pass evaluates at"),
        CLI_OPT_UINT64("--seed", p->seed, "S", "random seed; same seed, same samples"),
        CLI_OPT_SECTION("what to draw"),
        CLI_OPT_INT64("--n", o.n, "N", 1, 1 << 24, "number of samples"),
        CLI_OPT_INT("--batch", o.batch, "B", 1, 1 << 20, "samples drawn at once"),
        CLI_OPT_INT("--length", o.length, "L", 0, 1 << 24, "tokens per sample; 0 = the model's"),
        CLI_OPT_INT("--label", o.label, "C", 0, 1 << 24,
                    "class label (class-conditional models; n_classes = the null label)"),
        CLI_OPT_INT("--per-class", o.per_class, "N", 1, 1 << 20,
                    "N samples of every class, one grid row per class"),
        CLI_OPT_FLOAT("--cfg", p->cfg_scale, "W", 0.0, 1e6,
                      "classifier-free guidance weight; 1 = conditional only"),
        CLI_OPT_CHOICE("--cfg-rule", o.cfg_rule, cfg_rule_names,
                       "separate: mix log rate and logits; rates: guide the rates "
                       "themselves (exact)"),
        CLI_OPT_STRING("--prefix", o.prefix, "TEXT", "text models: clamp the start to TEXT"),
        CLI_OPT_STRING("--suffix", o.suffix, "TEXT", "text models: clamp the end to TEXT"),
        CLI_OPT_STRING("--infill", o.infill, "PATTERN",
                       "text models: fill the blanks of PATTERN (\"The ____ sat.\")"),
        CLI_OPT_STRING("--blank", o.blank, "C", "the blank character of --infill"),
        CLI_OPT_SECTION("output"),
        CLI_OPT_STRING("--out", o.out, "FILE", "write the decoded samples to FILE (not stdout)"),
        CLI_OPT_FLAG("--tokens", o.tokens,
                     "write the token ids as numbers (one sample a line), not decoded text"),
        CLI_OPT_STRING("--png", o.png, "FILE", "image models: write a PNG grid of the samples"),
        CLI_OPT_INT("--scale", o.scale, "K", 1, 64, "PNG: K x K screen pixels per image pixel"),
        CLI_OPT_FLAG("--no-preview", o.no_preview, "image models: no ASCII preview on stdout"),
        CLI_OPT_INT("--threads", o.threads, "N", 0, 4096, "CPU threads; 0 = all cores"),
        CLI_OPT_STRING("--backend", o.backend, "NAME", "compute backend: auto or cpu"),
        CLI_OPT_FLAG("--verbose", o.verbose, "print the library's informational messages"),
        CLI_OPT_FLAG("--no-mmap", o.no_mmap, CLI_NO_MMAP_HELP),
    };
    cli_command cmd = {
        "sample", "CHECKPOINT [options]",
        "Draws samples from a trained model. Text models print the decoded text\n"
        "(or write it to --out); image models print an ASCII preview and can write a\n"
        "PNG grid (--png). The samples depend only on the checkpoint, the seed and\n"
        "the flags, not on --batch or the thread count.",
        "  nctmc sample digits.safetensors --per-class 10 --png digits.png\n"
        "  nctmc sample digits.safetensors --label 3 --n 8 --cfg 2 --method euler\n"
        "  nctmc sample text.safetensors --prefix \"Once upon\" --length 128 --n 4\n"
        "  nctmc sample text.safetensors --infill \"The ____ sat on the ___.\"\n",
        1, 1, options, sizeof options / sizeof options[0]};
    const char *ckpt = NULL;
    int n_pos = 0;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, &ckpt, &n_pos);
    if (parsed != CLI_PARSE_OK)
        return parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    if (o.infill && (o.prefix || o.suffix))
        return cli_usage_error(&cmd, "--infill cannot be combined with --prefix or --suffix");
    if (o.per_class > 0 && (o.label >= 0 || cli_option_given(&cmd, "--n")))
        return cli_usage_error(&cmd, "--per-class sets the labels and the count itself");
    if (strlen(o.blank) != 1)
        return cli_usage_error(&cmd, "--blank takes one ASCII character");
    if (p->t_min >= p->t_max)
        return cli_usage_error(&cmd, "--t-min must be below --t-max");
    if (!check_paths(ckpt, &o))
        return 1;
    cli_interrupt_install();
    nctmc_context *ctx = NULL;
    int rc = 1;
    if (cli_context_create("sample", o.backend, o.threads, o.verbose, &ctx) == NCTMC_OK)
        rc = sample(ctx, ckpt, &o);
    nctmc_context_free(ctx);
    return rc;
}
