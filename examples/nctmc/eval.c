/*
 * eval.c — `nctmc eval`: the NELBO of held-out data and the exit-rate
 * reliability table; also the evaluation helpers `train` validates with.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "manifest.h"
#include "progress.h"

/* The model's data tokens: the masked and mixture processes add the mask
 * token on top of the tokenizer's vocabulary. */
static int32_t data_vocab(const nctmc_model_config *config)
{
    return config->process == NCTMC_PROCESS_UNIFORM ? config->vocab_size
                                                    : config->vocab_size - 1;
}

static bool check_shard_fits(const char *cmd, const char *path, const nctmc_dataset_info *info,
                             const nctmc_model_config *config)
{
    if (info->vocab_size != data_vocab(config)) {
        cli_error(cmd, "%s has %d token values but the model's data tokens are %d", path,
                  (int)info->vocab_size, (int)data_vocab(config));
        return false;
    }
    if (info->seq_len != 0 && info->seq_len > config->seq_len) {
        cli_error(cmd, "%s has sequences of %d tokens, longer than the model's %d", path,
                  (int)info->seq_len, (int)config->seq_len);
        return false;
    }
    int32_t length = info->seq_len ? info->seq_len : config->seq_len;
    if (info->n_tokens < length) {
        cli_error(cmd, "%s holds %lld tokens, fewer than one sequence of %d", path,
                  (long long)info->n_tokens, (int)length);
        return false;
    }
    return true;
}

/* Copies `n` sequences, spread evenly over all `available`, into set. */
static nctmc_status read_spread(nctmc_dataset *ds, int64_t available, bool labels,
                                cli_eval_set *set)
{
    for (int64_t i = 0; i < set->n_sequences; i++) {
        int64_t index = i * available / set->n_sequences;
        nctmc_status st = nctmc_dataset_read_tokens(ds, index * set->length, set->length,
                                                    set->tokens + i * set->length);
        if (st == NCTMC_OK && labels)
            st = nctmc_dataset_read_label(ds, index, &set->labels[i]);
        if (st != NCTMC_OK)
            return st;
    }
    return NCTMC_OK;
}

bool cli_eval_set_load(const char *cmd, nctmc_context *ctx, const char *path,
                       const nctmc_model_config *config, int64_t max_sequences, bool no_mmap,
                       cli_eval_set *out)
{
    nctmc_dataset *ds = NULL;
    if (!cli_open_dataset(cmd, ctx, path, no_mmap, &ds))
        return false;
    nctmc_dataset_info info;
    nctmc_status st;
    nctmc_dataset_info_init(&info);
    st = nctmc_dataset_get_info(ds, &info);
    bool ok = st == NCTMC_OK && check_shard_fits(cmd, path, &info, config);
    if (st != NCTMC_OK)
        cli_fail(cmd, path, st, nctmc_dataset_last_error(ds));
    cli_eval_set set = {NULL, NULL, 0, info.seq_len ? info.seq_len : config->seq_len};
    int64_t available = ok ? info.n_tokens / set.length : 0;
    bool labels = info.n_classes > 0 && config->n_classes > 0;
    set.n_sequences = max_sequences > 0 && max_sequences < available ? max_sequences : available;
    if (ok) {
        set.tokens = malloc((size_t)(set.n_sequences * set.length) * sizeof(int32_t));
        set.labels = labels ? malloc((size_t)set.n_sequences * sizeof(int32_t)) : NULL;
        ok = set.tokens != NULL && (!labels || set.labels != NULL);
        if (!ok)
            cli_error(cmd, "out of memory reading %s", path);
    }
    if (ok && (st = read_spread(ds, available, labels, &set)) != NCTMC_OK) {
        cli_fail(cmd, path, st, nctmc_dataset_last_error(ds));
        ok = false;
    }
    nctmc_dataset_free(ds);
    if (!ok) {
        cli_eval_set_free(&set);
        return false;
    }
    *out = set;
    return true;
}

void cli_eval_set_free(cli_eval_set *set)
{
    free(set->tokens);
    free(set->labels);
    set->tokens = NULL;
    set->labels = NULL;
}

static int32_t eval_progress(int64_t done, int64_t total, void *user_data)
{
    progress *p = user_data;
    if (p != NULL) {
        p->total = total;
        progress_update(p, done, "");
    }
    return !cli_interrupt_requested();
}

nctmc_status cli_eval_run(nctmc_model *model, const cli_eval_set *set,
                          const cli_eval_settings *settings, nctmc_eval_result *result)
{
    nctmc_eval_params params;
    nctmc_eval_params_init(&params);
    params.n_sequences = set->n_sequences;
    params.length = set->length;
    params.tokens = set->tokens;
    params.labels = set->labels;
    if (settings->batch > 0)
        params.batch_size = settings->batch;
    if (settings->time_samples > 0)
        params.n_time_samples = settings->time_samples;
    params.t_max = settings->t_max;
    params.seed = settings->seed;
    params.time_sampling = settings->time_sampling;
    params.comm = settings->comm;
    progress bar;
    progress_begin(&bar, "eval", 0, set->n_sequences, 0);
    params.progress = eval_progress;
    params.user_data = settings->show_progress ? &bar : NULL;
    nctmc_eval_result_init(result);
    nctmc_status st = nctmc_eval(model, &params, result);
    progress_clear_line();
    return st;
}

void cli_eval_print_summary(FILE *out, const nctmc_eval_result *r)
{
    fprintf(out, "NELBO %.4f +- %.4f bits/token  (prior %.4f bits/token at T = %g, "
                 "mean L_cond %.4f, %lld tokens)\n",
            r->nelbo_bits_per_token, r->std_error_bits, r->prior_bits_per_token, r->t_max,
            r->mean_loss, (long long)r->n_tokens);
}

static void print_ece(FILE *out, double ece)
{
    if (isnan(ece))
        fprintf(out, " %8s", "-");
    else
        fprintf(out, " %8.4f", ece);
}

/* The bins of one time bucket that have positions, the first on the
 * bucket's line. */
static void print_reliability_bucket(FILE *out, const nctmc_eval_result *r, int b)
{
    const nctmc_rate_bucket *k = &r->buckets[b];
    fprintf(out, "  %.3f-%.3f", k->t_lo, k->t_hi);
    print_ece(out, r->ece_bucket[b]);
    bool first = true;
    for (int j = 0; j < NCTMC_EVAL_NU_BINS; j++) {
        const nctmc_reliability_cell *c = &r->reliability[b][j];
        if (c->count == 0)
            continue;
        if (!first)
            fprintf(out, "%22s", "");
        fprintf(out, "   %.1f-%.1f %11lld %9.3f %9.3f\n", (double)j / NCTMC_EVAL_NU_BINS,
                (double)(j + 1) / NCTMC_EVAL_NU_BINS, (long long)c->count, c->mean_nu,
                c->observed_noisy);
        first = false;
    }
    if (first)
        fprintf(out, "\n");
}

void cli_eval_print_reliability(FILE *out, const nctmc_eval_result *r)
{
    if (r->n_reliability == 0) {
        fprintf(out, "exit-rate reliability: no position has a learned exit rate "
                     "(the masked process's rate is exact)\n");
        return;
    }
    fprintf(out, "exit-rate reliability: nu = the model's implied probability that a token is "
                 "noise,\n(lambda - rate if clean) / (rate if noise - rate if clean); "
                 "observed = share with x_t != x_0\n"
                 "(a calibrated model has mean nu = observed in every row)\n");
    fprintf(out, "ECE %.4f over %lld positions (mean |mean nu - observed|, weighted by "
                 "positions)\n",
            r->ece, (long long)r->n_reliability);
    fprintf(out, "%13s %8s %9s %11s %9s %9s\n", "t", "ECE", "nu", "positions", "mean nu",
            "observed");
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++)
        print_reliability_bucket(out, r, b);
}

typedef struct eval_options {
    const char *data_dir;
    const char *shard;
    int64_t max_sequences;
    int32_t time_samples;
    int32_t batch;
    float t_max;
    uint64_t seed;
    int32_t threads;
    const char *backend;
    bool verbose;
    bool no_mmap;
    int time_sampling;     /* index into eval_time_sampling_names */
    nctmc_comm *comm;      /* the job's ranks (mpirun, srun); one without */
    int32_t rank, ranks;
} eval_options;

/* The densities nctmc_eval accepts (logit cannot be normalised on (0, T]),
 * in the order of eval_time_sampling_values. */
static const char *const eval_time_sampling_names[] = {"uniform", "sqrt", NULL};
static const nctmc_time_sampling eval_time_sampling_values[] = {NCTMC_TIME_SAMPLING_UNIFORM,
                                                                NCTMC_TIME_SAMPLING_SQRT};
static const char *const eval_time_sampling_notes[] = {"spread evenly in t",
                                                       "spread evenly in sqrt t, reweighted"};

static int evaluate(nctmc_context *ctx, const char *checkpoint, const char *shard,
                    const eval_options *o)
{
    nctmc_model *model = NULL;
    nctmc_status st = cli_load_model(ctx, checkpoint, o->no_mmap, &model);
    if (st != NCTMC_OK)
        return cli_fail("eval", checkpoint, st, nctmc_context_last_error(ctx));
    nctmc_model_config config;
    nctmc_model_config_init(&config);
    nctmc_model_get_config(model, &config);
    cli_eval_set set;
    int rc = 1;
    if (cli_eval_set_load("eval", ctx, shard, &config, o->max_sequences, o->no_mmap, &set)) {
        bool speak = o->rank == 0;  /* every rank has the same result */
        char ranks[48] = "";
        if (o->ranks > 1)
            snprintf(ranks, sizeof ranks, "; %d ranks (%s engine)", (int)o->ranks,
                     nctmc_comm_engine(o->comm));
        if (speak)
            cli_printf(stdout,
                       "%s on %s: %lld sequences of %d tokens%s, %d time samples each "
                       "(%s)%s\n",
                       checkpoint, shard, (long long)set.n_sequences, (int)set.length,
                       set.labels ? " with labels" : "", (int)o->time_samples,
                       eval_time_sampling_notes[o->time_sampling], ranks);
        nctmc_eval_result result;
        cli_eval_settings settings = {o->batch, o->time_samples, o->t_max, o->seed, speak,
                                      eval_time_sampling_values[o->time_sampling], o->comm};
        st = cli_eval_run(model, &set, &settings, &result);
        if (speak && st == NCTMC_ERR_CANCELLED && result.n_tokens > 0)
            printf("interrupted: the estimate covers the first %lld tokens only\n",
                   (long long)result.n_tokens);
        if (speak && (st == NCTMC_OK || (st == NCTMC_ERR_CANCELLED && result.n_tokens > 0))) {
            cli_eval_print_summary(stdout, &result);
            printf("\n");
            cli_eval_print_reliability(stdout, &result);
        }
        if (st == NCTMC_ERR_CANCELLED)
            rc = CLI_EXIT_INTERRUPTED;
        else if (st == NCTMC_OK)
            rc = 0;
        else
            cli_fail("eval", "evaluation failed", st, nctmc_model_last_error(model));
        cli_eval_set_free(&set);
    }
    nctmc_model_free(model);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    nctmc_eval_params defaults;
    nctmc_eval_params_init(&defaults);
    eval_options o = {NULL, NULL, 0, defaults.n_time_samples, EVAL_BATCH_ROWS,
                      defaults.t_max, 0, 0, "auto", false, false, 0, NULL, 0, 1};
    cli_option options[] = {
        CLI_OPT_STRING("--data", o.data_dir, "DIR",
                       "a `prepare` directory: evaluates its " CLI_VAL_SHARD),
        CLI_OPT_STRING("--shard", o.shard, "FILE", "evaluate this shard instead"),
        CLI_OPT_INT64("--sequences", o.max_sequences, "N", 0, 1e15,
                      "at most N sequences, spread over the shard; 0 = all"),
        CLI_OPT_INT("--time-samples", o.time_samples, "K", 1, 1 << 20,
                    "Monte Carlo times per sequence (stratified over (0, 1))"),
        CLI_OPT_INT("--batch", o.batch, "B", 1, 1 << 20,
                    "rows (sequence x time) per forward pass; no effect on the result"),
        CLI_OPT_FLOAT("--t-max", o.t_max, "T", 0.0, 1.0,
                      "time where the prior is put; 0 = automatic (1 for masked, else 1 - 1e-3)"),
        CLI_OPT_CHOICE("--time-sampling", o.time_sampling, eval_time_sampling_names,
                       "how the time samples spread: uniform (evenly in t), or sqrt (evenly "
                       "in sqrt t, reweighted: smaller error for trained uniform and "
                       "mixture models)"),
        CLI_OPT_UINT64("--seed", o.seed, "S", "seed of the times and noise"),
        CLI_OPT_INT("--threads", o.threads, "N", 0, 4096, "CPU threads; 0 = all cores"),
        CLI_OPT_STRING("--backend", o.backend, "NAME", "compute backend: auto or cpu"),
        CLI_OPT_FLAG("--verbose", o.verbose, "print the library's informational messages"),
        CLI_OPT_FLAG("--no-mmap", o.no_mmap, CLI_NO_MMAP_HELP),
    };
    cli_command cmd = {
        "eval", "CHECKPOINT (--data DIR | --shard FILE) [options]",
        "Estimates the NELBO of held-out data in bits per token (an upper bound on\n"
        "the model's negative log-likelihood, with its Monte Carlo standard error)\n"
        "and prints the exit-rate reliability table: per time bucket, positions\n"
        "binned by the noise probability their learned exit rate implies, next to\n"
        "the share of them that is noise, and the expected calibration error.\n"
        "Under mpirun (or srun) the ranks share the forward passes and every rank\n"
        "gets one process's result, bit for bit; rank 0 prints it.",
        "  nctmc eval build/digits.safetensors --data build/digits\n"
        "  nctmc eval model.safetensors --shard data/val.bin --sequences 200\n",
        1, 1, options, sizeof options / sizeof options[0]};
    const char *checkpoint = NULL;
    int n_pos = 0;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, &checkpoint, &n_pos);
    if (parsed != CLI_PARSE_OK)
        return parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    if ((o.data_dir == NULL) == (o.shard == NULL))
        return cli_usage_error(&cmd, "give either --data DIR or --shard FILE");
    char *shard = o.shard ? strdup(o.shard) : cli_path_join(o.data_dir, CLI_VAL_SHARD);
    nctmc_context *ctx = NULL;
    int rc = 1;
    cli_interrupt_install();
    char why_comm[512];
    nctmc_status st = nctmc_comm_from_env(&o.comm, why_comm, sizeof why_comm);
    if (st != NCTMC_OK) {
        free(shard);
        return cli_fail("eval", "cannot join the job's ranks", st, why_comm);
    }
    o.rank = nctmc_comm_rank(o.comm);
    o.ranks = nctmc_comm_size(o.comm);
    /* eval writes nothing; its inputs are checked before the model loads */
    if (shard != NULL && cli_check_input_file("eval", "checkpoint", checkpoint) &&
        cli_check_input_file("eval", "shard", shard) &&
        cli_context_create("eval", o.backend, o.threads, o.verbose, &ctx) == NCTMC_OK &&
        (o.data_dir == NULL || manifest_check("eval", ctx, o.data_dir)))
        rc = evaluate(ctx, checkpoint, shard, &o);
    /* nctmc_eval fails and stops on every rank alike; a rank that failed
     * before it (a file it cannot read) ends the job, so that the others do
     * not wait for it for ever */
    if (rc != 0 && rc != CLI_EXIT_INTERRUPTED && o.ranks > 1) {
        cli_error("eval", "rank %d of %d failed: ending the job", (int)o.rank, (int)o.ranks);
        nctmc_comm_abort(o.comm, rc);
    }
    nctmc_context_free(ctx);
    nctmc_comm_free(o.comm);
    free(shard);
    return rc;
}
