/*
 * train.c — `nctmc train`: a prepared data directory into a checkpoint,
 * with a time budget, periodic checkpoints and validation, resuming, and
 * Ctrl-C that saves before it exits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "manifest.h"
#include "progress.h"

/* The window length of a stream shard when --seq-len is not given. */
enum { DEFAULT_STREAM_WINDOW = 256 };
/* Skipped (non-finite) steps reported one by one before only counting. */
enum { SKIPS_REPORTED = 10 };

typedef struct train_options {
    const char *data_dir;
    const char *out;
    const char *resume;
    const char *backend;
    int32_t threads;
    float minutes;
    int64_t save_every;
    int64_t eval_every;
    int64_t eval_sequences;
    int32_t eval_time_samples;
    int64_t log_every;
    bool verbose;
    bool no_mmap;
    nctmc_model_config model;
    int process;
    int schedule;
    int time_input;
    int exit_link;
    nctmc_trainer_params trainer;
    int preset;               /* index into the --preset choices; 0 = none */
    const char *preset_name;  /* NULL without a preset */
    /* --seq-len was given: it must match a shard of fixed-length sequences
     * (a preset's length only sets a stream's window) */
    bool seq_len_given;
} train_options;

/* What the data directory holds. */
typedef struct train_data {
    nctmc_dataset *shard;
    nctmc_dataset_info info;
    nctmc_tokenizer *tok;
    char *val_path;        /* NULL when there is no validation shard */
    cli_eval_set val;
} train_data;

typedef struct train_run {
    const train_options *o;
    nctmc_context *ctx;
    train_data data;
    nctmc_model *model;
    nctmc_trainer *trainer;
    nctmc_model *eval_model;  /* receives the EMA weights for validation */
    nctmc_trainer_params params;
    int64_t tokens_per_step;
    progress bar;
    double deadline;          /* 0 = no time budget */
    double loss_sum;          /* over the steps since the last log line */
    int64_t loss_count;
    double step_seconds;      /* time inside training steps only */
    int64_t steps_timed;
    double comm_seconds;      /* of which the gradient sum over the ranks
                                 left exposed (nctmc_train_stats) */
    int64_t skipped_reported;
    nctmc_comm *comm;         /* the job's ranks (mpirun, srun); one without */
    int32_t rank, ranks;
} train_run;

typedef enum stop_reason { STOP_FINISHED, STOP_BUDGET, STOP_INTERRUPTED, STOP_FAILED } stop_reason;

/* ---- data ---------------------------------------------------------------- */

static bool open_shard(train_run *run, const char *path)
{
    if (!cli_open_dataset("train", run->ctx, path, run->o->no_mmap, &run->data.shard))
        return false;
    nctmc_dataset_info_init(&run->data.info);
    nctmc_status st = nctmc_dataset_get_info(run->data.shard, &run->data.info);
    if (st != NCTMC_OK) {
        cli_fail("train", path, st, nctmc_dataset_last_error(run->data.shard));
        return false;
    }
    return true;
}

static bool open_tokenizer(train_run *run, const char *path)
{
    nctmc_status st = nctmc_tokenizer_load(run->ctx, path, &run->data.tok);
    if (st != NCTMC_OK) {
        cli_fail("train", path, st, nctmc_context_last_error(run->ctx));
        return false;
    }
    int32_t vocab = nctmc_tokenizer_vocab_size(run->data.tok);
    if (vocab != run->data.info.vocab_size) {
        cli_error("train", "the tokenizer has %d tokens but the training shard %d: was %s "
                  "written by another `prepare`?",
                  (int)vocab, (int)run->data.info.vocab_size, path);
        return false;
    }
    return true;
}

static bool open_data(train_run *run)
{
    const char *dir = run->o->data_dir;
    char *shard = cli_path_join(dir, CLI_TRAIN_SHARD);
    char *tok = cli_path_join(dir, CLI_TOKENIZER_FILE);
    run->data.val_path = cli_path_join(dir, CLI_VAL_SHARD);
    /* the directory as the manifest describes it, before any file of it is used */
    bool ok = shard && tok && run->data.val_path && manifest_check("train", run->ctx, dir) &&
              open_shard(run, shard) &&
              open_tokenizer(run, tok);
    if (ok && !cli_file_exists(run->data.val_path)) {
        free(run->data.val_path);
        run->data.val_path = NULL;
    }
    free(shard);
    free(tok);
    return ok;
}

static void close_data(train_data *data)
{
    nctmc_dataset_free(data->shard);
    nctmc_tokenizer_free(data->tok);
    free(data->val_path);
    cli_eval_set_free(&data->val);
}

/* ---- model and trainer --------------------------------------------------- */

/* The model configuration: the flags, with the vocabulary, length and
 * classes the data dictate. */
static bool model_config_for_data(const train_run *run, nctmc_model_config *cfg)
{
    const train_options *o = run->o;
    const nctmc_dataset_info *info = &run->data.info;
    *cfg = o->model;
    cfg->process = (nctmc_process)o->process;
    cfg->schedule = (nctmc_schedule)o->schedule;
    cfg->time_input = (nctmc_time_input)o->time_input;
    /* train_exit_link_names puts "auto" (NCTMC_EXIT_LINK_AUTO, -1) first */
    cfg->exit_link = (nctmc_exit_link)(o->exit_link - 1);
    cfg->seed = o->trainer.seed;
    /* the masked and mixture processes add the mask token after the data */
    cfg->vocab_size = info->vocab_size + (cfg->process == NCTMC_PROCESS_UNIFORM ? 0 : 1);
    cfg->n_classes = info->n_classes;
    if (info->seq_len > 0 && o->seq_len_given && o->model.seq_len > 0 &&
        o->model.seq_len != info->seq_len) {
        cli_error("train", "--seq-len %d differs from the shard's sequences of %d tokens",
                  (int)o->model.seq_len, (int)info->seq_len);
        return false;
    }
    cfg->seq_len = info->seq_len > 0       ? info->seq_len
                   : o->model.seq_len > 0 ? o->model.seq_len
                                          : DEFAULT_STREAM_WINDOW;
    return true;
}

static bool create_fresh(train_run *run)
{
    nctmc_model_config cfg;
    if (!model_config_for_data(run, &cfg))
        return false;
    nctmc_status st = nctmc_model_create(run->ctx, &cfg, &run->model);
    if (st != NCTMC_OK) {
        cli_fail("train", "cannot create the model", st, nctmc_context_last_error(run->ctx));
        return false;
    }
    /* the tokenizer travels inside every checkpoint, so samples decode */
    st = nctmc_model_set_tokenizer(run->model, run->data.tok);
    if (st != NCTMC_OK) {
        cli_fail("train", "cannot attach the tokenizer", st, nctmc_model_last_error(run->model));
        return false;
    }
    run->params = run->o->trainer;
    run->params.comm = run->comm;
    st = nctmc_trainer_create(run->model, &run->params, &run->trainer);
    if (st != NCTMC_OK) {
        cli_fail("train", "cannot create the trainer", st, nctmc_model_last_error(run->model));
        return false;
    }
    return true;
}

static const char *const model_flags[] = {"--layers",  "--d-model",        "--heads",
                                          "--cond-dim", "--process",       "--schedule",
                                          "--seq-len", "--mixture-uniform", "--schedule-eps",
                                          "--vocab-pad", "--time-input",   "--exit-link",
                                          NULL};

static void warn_ignored_model_flags(const cli_command *cmd)
{
    for (int i = 0; model_flags[i] != NULL; i++)
        if (cli_option_given(cmd, model_flags[i]))
            cli_error("train", "note: %s is ignored with --resume (the checkpoint fixes the "
                      "model)", model_flags[i]);
}

static void free_model_and_trainer(train_run *run)
{
    nctmc_trainer_free(run->trainer);
    nctmc_model_free(run->model);
    run->trainer = NULL;
    run->model = NULL;
}

static bool resume_from(train_run *run, const nctmc_trainer_params *params)
{
    nctmc_status st = nctmc_trainer_resume(run->ctx, run->o->resume, params, &run->model,
                                           &run->trainer);
    if (st != NCTMC_OK) {
        cli_fail("train", run->o->resume, st, nctmc_context_last_error(run->ctx));
        return false;
    }
    return true;
}

/* Whether the data can train the checkpoint's model, checked the way the
 * trainer checks it at its first step, but before nctmc_trainer_resume()
 * allocates the model and its training workspace (batch x L tokens of
 * activations: an L = 4096 checkpoint took 1.2 GB only to fail at step 1 on
 * a 64-token stream). Reads only the checkpoint's header: a lazily mapped
 * load on a one-thread CPU context, and its saved trainer parameters. */
static bool resume_fits_data(train_run *run, const cli_command *cmd)
{
    const char *path = run->o->resume;
    nctmc_context *cpu = NULL;
    if (cli_context_create("train", "cpu", 1, false, &cpu) != NCTMC_OK)
        return false;
    nctmc_load_params lp;
    nctmc_load_params_init(&lp);
    lp.mapping = NCTMC_LOAD_MAP_LAZY;
    nctmc_model *m = NULL;
    nctmc_trainer_params p;
    nctmc_trainer_params_init(&p);
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_status st = nctmc_model_load_ex(cpu, path, &lp, &m);
    if (st == NCTMC_OK)
        st = nctmc_model_get_config(m, &c);
    if (st == NCTMC_OK)
        st = nctmc_trainer_inspect(cpu, path, &p, NULL);
    if (st != NCTMC_OK) {
        cli_fail("train", path, st, nctmc_context_last_error(cpu));
        nctmc_model_free(m);
        nctmc_context_free(cpu);
        return false;
    }
    const nctmc_dataset_info *d = &run->data.info;
    int32_t L = p.seq_len > 0 ? p.seq_len : c.seq_len;
    int32_t batch = cli_option_given(cmd, "--batch") ? run->o->trainer.batch_size : p.batch_size;
    int32_t n_data = c.process == NCTMC_PROCESS_UNIFORM ? c.vocab_size : c.vocab_size - 1;
    char why[256] = "";
    if (d->vocab_size != n_data)
        snprintf(why, sizeof why, "its shard has %d token values, the model's data tokens are %d",
                 (int)d->vocab_size, (int)n_data);
    else if (d->seq_len > 0 && d->seq_len != L)
        snprintf(why, sizeof why, "its shard's sequences have %d tokens, the checkpoint trains "
                 "on %d", (int)d->seq_len, (int)L);
    else if (d->seq_len == 0 && d->n_tokens < L)
        snprintf(why, sizeof why, "its stream holds %lld tokens, fewer than one sequence of %d",
                 (long long)d->n_tokens, (int)L);
    else if (c.n_classes > 0 && d->n_classes != c.n_classes)
        snprintf(why, sizeof why, "its shard has %d classes, the model %d", (int)d->n_classes,
                 (int)c.n_classes);
    /* what the trainer would have allocated, from the header-only model:
     * the library's own count (nctmc_trainer_memory) */
    size_t backend_bytes = 0, host_bytes = 0;
    nctmc_trainer_params asked = p;
    asked.batch_size = batch;
    bool counted = why[0] != '\0' &&
                   nctmc_trainer_memory(m, &asked, &backend_bytes, &host_bytes) == NCTMC_OK;
    nctmc_model_free(m);
    nctmc_context_free(cpu);
    if (why[0] == '\0')
        return true;
    if (counted)
        cli_error("train", "%s cannot resume %s: %s (refused before allocating the trainer's "
                  "%.1f MB: %zu bytes of gradients, optimizer state and workspace for %d "
                  "sequences x %d tokens a step, and %zu bytes of host memory)",
                  run->o->data_dir, path, why, (double)(backend_bytes + host_bytes) / 1e6,
                  backend_bytes, (int)batch, (int)L, host_bytes);
    else
        cli_error("train", "%s cannot resume %s: %s (refused before allocating the training "
                  "workspace for %d sequences x %d tokens a step)",
                  run->o->data_dir, path, why, (int)batch, (int)L);
    return false;
}

/* Resumes with the saved trainer parameters, except those given on this
 * command line (a longer --steps, a new --lr, ...), which win. With N ranks
 * the saved global batch (batch x accumulation, as one process takes it)
 * is split over them: the saved batch, and accumulation / N, unless
 * --batch or --accumulation say otherwise. */
static bool resume_run(train_run *run, const cli_command *cmd)
{
    warn_ignored_model_flags(cmd);
    if (!resume_fits_data(run, cmd))
        return false;
    nctmc_trainer_params merged;
    nctmc_trainer_params_init(&merged);
    nctmc_status st = nctmc_trainer_inspect(run->ctx, run->o->resume, &merged, NULL);
    if (st != NCTMC_OK) {
        cli_fail("train", run->o->resume, st, nctmc_context_last_error(run->ctx));
        return false;
    }
    int32_t saved_accumulation = merged.accumulation;
    cli_copy_given_fields(cmd, &run->o->trainer, &merged, sizeof merged);
    if (run->ranks > 1 && !cli_option_given(cmd, "--batch") &&
        !cli_option_given(cmd, "--accumulation")) {
        if (saved_accumulation % run->ranks != 0) {
            cli_error("train",
                      "%s's global batch is %d micro-batches of %d: %d ranks cannot share "
                      "it evenly; give --batch and --accumulation with ranks x batch x "
                      "accumulation = %lld",
                      run->o->resume, (int)saved_accumulation, (int)merged.batch_size,
                      (int)run->ranks, (long long)saved_accumulation * merged.batch_size);
            return false;
        }
        merged.accumulation = saved_accumulation / run->ranks;
    }
    merged.comm = run->comm;
    if (!resume_from(run, &merged))
        return false;
    run->params = merged;
    if (nctmc_model_get_tokenizer(run->model) == NULL)
        nctmc_model_set_tokenizer(run->model, run->data.tok);
    return true;
}

static int64_t current_step(const train_run *run)
{
    nctmc_trainer_state state;
    nctmc_trainer_state_init(&state);
    nctmc_trainer_get_state(run->trainer, &state);
    return state.step;
}

/* ---- validation ---------------------------------------------------------- */

static bool prepare_validation(train_run *run)
{
    if (run->data.val_path == NULL)
        return true;
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(run->model, &cfg);
    if (!cli_eval_set_load("train", run->ctx, run->data.val_path, &cfg,
                           run->o->eval_sequences, run->o->no_mmap, &run->data.val))
        return false;
    nctmc_status st = nctmc_model_create(run->ctx, &cfg, &run->eval_model);
    if (st != NCTMC_OK) {
        cli_fail("train", "cannot create the validation model", st,
                 nctmc_context_last_error(run->ctx));
        return false;
    }
    return true;
}

/* Evaluates the weights sampling would use (the EMA, when kept) on the
 * validation set. A failure is reported but does not stop training;
 * Ctrl-C during it does (false). */
static bool validate(train_run *run, int64_t step)
{
    if (run->eval_model == NULL)
        return true;
    bool ema = run->params.ema_decay > 0.0f;
    /* the same seed every time, so successive validations differ only by
     * the weights */
    /* rank 0 validates alone (comm NULL) */
    cli_eval_settings settings = {EVAL_BATCH_ROWS, run->o->eval_time_samples, 0.0f, 0, true,
                                  NCTMC_TIME_SAMPLING_UNIFORM, NULL};
    nctmc_eval_result result;
    nctmc_status st = nctmc_trainer_copy_weights(run->trainer, run->eval_model, ema);
    if (st == NCTMC_OK)
        st = cli_eval_run(run->eval_model, &run->data.val, &settings, &result);
    if (st == NCTMC_ERR_CANCELLED)
        return false;
    if (st != NCTMC_OK) {
        cli_fail("train", "validation failed", st, nctmc_model_last_error(run->eval_model));
        return true;
    }
    progress_clear_line();
    fprintf(stderr, "step %lld: validation (%s weights) ", (long long)step, ema ? "EMA" : "raw");
    cli_eval_print_summary(stderr, &result);
    return true;
}

/* ---- the loop ------------------------------------------------------------ */

static bool save(train_run *run, int64_t step)
{
    nctmc_status st = nctmc_trainer_save(run->trainer, run->o->out);
    progress_clear_line();
    if (st != NCTMC_OK) {
        cli_fail("train", run->o->out, st, nctmc_trainer_last_error(run->trainer));
        return false;
    }
    if (run->rank == 0)
        cli_printf(stderr, "step %lld: saved %s\n", (long long)step, run->o->out);
    return true;
}

static void show_progress(train_run *run, const nctmc_train_stats *stats)
{
    if (run->rank != 0)
        return;
    char fields[160], rate[32];
    double tok_s = run->step_seconds > 0.0
                       ? (double)(run->steps_timed * run->tokens_per_step) / run->step_seconds
                       : 0.0;
    progress_format_count(rate, sizeof rate, tok_s);
    double loss = run->loss_count > 0 ? run->loss_sum / (double)run->loss_count : NAN;
    int n = snprintf(fields, sizeof fields, "loss %.4f lr %.1e |g| %.2g %s tok/s", loss,
                     stats->learning_rate, stats->grad_norm, rate);
    /* the share of step time spent on the sum that the backward pass did
     * not hide (bench/distributed.sh reads it) */
    if (run->ranks > 1 && run->step_seconds > 0.0 && n > 0 && (size_t)n < sizeof fields)
        snprintf(fields + n, sizeof fields - (size_t)n, " comm %.1f%%",
                 100.0 * run->comm_seconds / run->step_seconds);
    progress_update(&run->bar, stats->step, fields);
    /* the loss shown is the mean over the current window of log_every
     * steps, not one noisy batch */
    if (stats->step % run->o->log_every == 0) {
        run->loss_sum = 0.0;
        run->loss_count = 0;
    }
}

static void note_skipped(train_run *run, const nctmc_train_stats *stats)
{
    if (run->skipped_reported++ < SKIPS_REPORTED)
        cli_error("train", "step %lld skipped: non-finite loss or gradient (%lld so far)%s",
                  (long long)stats->step, (long long)stats->n_skipped,
                  run->skipped_reported == SKIPS_REPORTED ? "; no more such notes" : "");
}

/* One step; false on a failure other than a skipped step. */
static bool take_step(train_run *run, nctmc_train_stats *stats)
{
    double t0 = cli_now();
    nctmc_train_stats_init(stats);
    nctmc_status st = nctmc_trainer_step_dataset(run->trainer, run->data.shard, stats);
    run->step_seconds += cli_now() - t0;
    run->steps_timed++;
    run->comm_seconds += stats->comm_seconds;
    if (st == NCTMC_ERR_NON_FINITE) {
        note_skipped(run, stats);
        return true;
    }
    if (st != NCTMC_OK) {
        cli_fail("train", "training step failed", st, nctmc_trainer_last_error(run->trainer));
        return false;
    }
    run->loss_sum += stats->loss;
    run->loss_count++;
    return true;
}

/* Whether another step still fits in the time budget, judged by the mean
 * step time so far (the run ends before the budget, not after it). */
static bool budget_allows_step(const train_run *run)
{
    if (run->deadline <= 0.0)
        return true;
    double mean = run->steps_timed > 0 ? run->step_seconds / (double)run->steps_timed : 0.0;
    return cli_now() + mean < run->deadline;
}

/* Whether to stop before the next step: Ctrl-C or the time budget, as rank
 * 0 sees them, so that every rank stops at the same step. */
static int32_t stop_decision(train_run *run)
{
    int32_t why = -1;
    if (cli_interrupt_requested())
        why = STOP_INTERRUPTED;
    else if (!budget_allows_step(run))
        why = STOP_BUDGET;
    if (run->ranks > 1 && nctmc_comm_broadcast(run->comm, &why, sizeof why, 0) != NCTMC_OK) {
        cli_error("train", "rank %d: %s", (int)run->rank, nctmc_comm_last_error(run->comm));
        why = STOP_FAILED;
    }
    return why;
}

static stop_reason training_loop(train_run *run, int64_t *step)
{
    const train_options *o = run->o;
    nctmc_train_stats stats;
    while (*step < run->params.total_steps) {
        int32_t stop = stop_decision(run);
        if (stop >= 0)
            return (stop_reason)stop;
        if (!take_step(run, &stats))
            return STOP_FAILED;
        *step = stats.step;
        show_progress(run, &stats);
        if (o->save_every > 0 && *step % o->save_every == 0 && *step < run->params.total_steps &&
            !save(run, *step))
            return STOP_FAILED;
        if (o->eval_every > 0 && *step % o->eval_every == 0 && *step < run->params.total_steps &&
            run->rank == 0 && !validate(run, *step))
            return STOP_INTERRUPTED;
    }
    return STOP_FINISHED;
}

/* ---- reporting ----------------------------------------------------------- */

static void describe_setup(const train_run *run)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(run->model, &c);
    char tok[128];
    cli_describe_tokenizer(run->data.tok, tok, sizeof tok);
    const nctmc_trainer_params *p = &run->params;
    fprintf(stderr,
            "model: %d layers, d %d, %d heads, cond %d, S %d, L %d, %d classes, %s process, "
            "%s schedule, %s time input, %s exit link: %lld parameters\n",
            (int)c.n_layers, (int)c.d_model, (int)c.n_heads, (int)c.cond_dim, (int)c.vocab_size,
            (int)c.seq_len, (int)c.n_classes, cli_process_names[c.process],
            cli_schedule_names[c.schedule], cli_time_input_names[c.time_input],
            cli_exit_link_names[c.exit_link], (long long)nctmc_model_n_params(run->model));
    cli_printf(stderr, "data: %lld tokens in %s (%s); tokenizer %s; validation: %s\n",
            (long long)run->data.info.n_tokens, run->o->data_dir,
            run->data.info.seq_len ? "sequences" : "stream", tok,
            run->data.val_path ? run->data.val_path : "none");
    char schedule[96];
    cli_describe_lr_schedule(p, schedule, sizeof schedule);
    if (run->o->preset_name)
        fprintf(stderr, "preset: %s (the flags given override it)\n", run->o->preset_name);
    if (run->ranks > 1)
        fprintf(stderr, "world: %d ranks (%s engine); each takes %d x %d sequences of the "
                        "global batch\n",
                (int)run->ranks, nctmc_comm_engine(run->comm), (int)p->batch_size,
                (int)p->accumulation);
    char ranks[32] = "";
    if (run->ranks > 1)
        snprintf(ranks, sizeof ranks, "%d ranks x ", (int)run->ranks);
    fprintf(stderr,
            "trainer: %sbatch %d x %d micro-batches = global batch %lld, lr %g (%s), "
            "clip %g, EMA %g, label dropout %g, t ~ %s, seed %llu; %s backend, %d threads\n",
            ranks, (int)p->batch_size, (int)p->accumulation,
            (long long)run->ranks * p->batch_size * p->accumulation, (double)p->learning_rate,
            schedule, (double)p->grad_clip,
            (double)p->ema_decay, (double)p->label_dropout,
            cli_time_sampling_name(p->time_sampling), (unsigned long long)p->seed,
            nctmc_context_backend(run->ctx), nctmc_context_n_threads(run->ctx));
}

static void report_stop(train_run *run, stop_reason why, int64_t step, int64_t first)
{
    if (run->rank != 0 && why != STOP_FAILED)
        return;
    char took[32];
    progress_format_duration(took, sizeof took, progress_elapsed(&run->bar));
    progress_end(&run->bar);
    static const char *const reasons[] = {"finished", "time budget reached", "interrupted",
                                          "failed"};
    fprintf(stderr, "%s at step %lld of %lld: %lld steps in %s\n", reasons[why],
            (long long)step, (long long)run->params.total_steps, (long long)(step - first),
            took);
}

/* ---- the subcommand ------------------------------------------------------ */

static int train(train_run *run, const cli_command *cmd)
{
    const train_options *o = run->o;
    char why_comm[512];
    nctmc_status st = nctmc_comm_from_env(&run->comm, why_comm, sizeof why_comm);
    if (st != NCTMC_OK) {
        cli_fail("train", "cannot join the job's ranks", st, why_comm);
        return 1;
    }
    run->rank = nctmc_comm_rank(run->comm);
    run->ranks = nctmc_comm_size(run->comm);
    if (cli_context_create("train", o->backend, o->threads, o->verbose, &run->ctx) != NCTMC_OK ||
        !open_data(run))
        return 1;
    if (!(o->resume ? resume_run(run, cmd) : create_fresh(run)) || !prepare_validation(run))
        return 1;
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(run->model, &cfg);
    run->tokens_per_step =
        (int64_t)run->ranks * run->params.batch_size * run->params.accumulation *
        (run->params.seq_len ? run->params.seq_len : cfg.seq_len);
    if (run->rank == 0)
        describe_setup(run);

    int64_t first = current_step(run), step = first;
    progress_begin(&run->bar, "train", first, run->params.total_steps,
                   run->rank == 0 ? o->log_every : INT64_MAX);
    if (o->minutes > 0.0f) {
        run->deadline = run->bar.start_time + 60.0 * (double)o->minutes;
        progress_set_deadline(&run->bar, run->deadline);
    }
    stop_reason why = training_loop(run, &step);
    report_stop(run, why, step, first);
    if (why == STOP_FAILED)
        return 1;
    /* what was learned is kept whatever stopped the run */
    if (!save(run, step))
        return 1;
    if (why == STOP_INTERRUPTED && run->rank == 0) {
        cli_printf(stderr, "resume with: nctmc train --data %s --resume %s --out %s\n",
                o->data_dir, o->out, o->out);
        return CLI_EXIT_INTERRUPTED;
    }
    if (why == STOP_INTERRUPTED)
        return CLI_EXIT_INTERRUPTED;
    if (run->rank == 0 && !validate(run, step))
        return CLI_EXIT_INTERRUPTED;
    return 0;
}

/* Everything a run needs from the file system, before it starts: that the
 * checkpoint can be written (not after an hour of training) and is none of
 * the files of the data directory (shards, tokenizer, manifest; compared
 * by device and inode). --resume and --out may be the same file (docs/cli.md):
 * the checkpoint is read whole at the start and replaced, atomically, by
 * the new one. */
static bool check_paths(const train_options *o)
{
    static const char *const names[] = {CLI_TRAIN_SHARD, CLI_TOKENIZER_FILE, CLI_VAL_SHARD,
                                        CLI_MANIFEST_FILE};
    enum { N_INPUTS = sizeof names / sizeof names[0] };
    char *inputs[N_INPUTS];
    bool ok = true;
    for (int i = 0; i < N_INPUTS; i++)
        ok = (inputs[i] = cli_path_join(o->data_dir, names[i])) != NULL && ok;
    ok = ok && cli_check_input_file("train", "training shard", inputs[0]) &&
         cli_check_input_file("train", "tokenizer", inputs[1]) &&
         (!o->resume || cli_check_input_file("train", "--resume", o->resume)) &&
         cli_check_output_file("train", "--out", o->out, (const char *const *)inputs, N_INPUTS);
    for (int i = 0; i < N_INPUTS; i++)
        free(inputs[i]);
    return ok;
}

/* --exit-link's choices: "auto" (NCTMC_EXIT_LINK_AUTO = -1) then the links
 * in enum order, so a choice's index is the link + 1. */
static const char *const train_exit_link_names[] = {"auto", "sigma", "noise_posterior",
                                                    "denoiser", NULL};

static void train_defaults(train_options *o);

/* The --preset choices: "none", then the library's presets; and the
 * flag's help, which describes each. */
enum { MAX_PRESET_CHOICES = 16 };
typedef struct preset_menu {
    const char *names[MAX_PRESET_CHOICES + 2];
    char help[1024];
} preset_menu;

static void preset_menu_init(preset_menu *menu)
{
    int n = 0;
    menu->names[n++] = "none";
    int len = snprintf(menu->help, sizeof menu->help,
                       "a named recipe (model, trainer, backend) whose values the other flags "
                       "override:");
    for (int32_t i = 0; n < MAX_PRESET_CHOICES + 1 && nctmc_preset_name(i) != NULL; i++) {
        const char *name = nctmc_preset_name(i);
        menu->names[n++] = name;
        if (len > 0 && (size_t)len < sizeof menu->help)
            len += snprintf(menu->help + len, sizeof menu->help - (size_t)len,
                            "%s %s = %s, backend %s", i ? ";" : "", name,
                            nctmc_preset_description(name), nctmc_preset_backend(name));
    }
    menu->names[n] = NULL;
}

/* A preset's values under the flags given: the defaults, the preset over
 * them, then every flag the command line named (wherever it stands). */
static bool apply_preset(const cli_command *cmd, const char *name, train_options *o)
{
    train_options p;
    train_defaults(&p);
    char err[512];
    if (nctmc_preset_apply(name, &p.model, &p.trainer, err, sizeof err) != NCTMC_OK) {
        cli_error("train", "--preset %s: %s", name, err);
        return false;
    }
    p.process = p.model.process;
    p.schedule = p.model.schedule;
    p.time_input = p.model.time_input;
    p.exit_link = p.model.exit_link + 1;
    p.backend = nctmc_preset_backend(name);
    cli_copy_given_fields(cmd, o, &p, sizeof p);
    p.preset_name = name;
    *o = p;
    return true;
}

static void train_defaults(train_options *o)
{
    memset(o, 0, sizeof *o);
    o->out = "model.safetensors";
    o->backend = "auto";
    o->eval_every = 1000;
    o->eval_sequences = 256;
    o->log_every = 100;
    nctmc_model_config_init(&o->model);
    o->model.seq_len = 0;  /* from the data unless given */
    o->process = o->model.process;
    o->schedule = o->model.schedule;
    o->time_input = o->model.time_input;
    o->exit_link = o->model.exit_link + 1;  /* index into train_exit_link_names */
    nctmc_trainer_params_init(&o->trainer);
    nctmc_eval_params eval;
    nctmc_eval_params_init(&eval);
    o->eval_time_samples = eval.n_time_samples;
}

int cmd_train(int argc, char **argv)
{
    train_options o;
    train_defaults(&o);
    nctmc_model_config *m = &o.model;
    nctmc_trainer_params *t = &o.trainer;
    preset_menu presets;
    preset_menu_init(&presets);
    /* the choice writes an int into the trainer's int32_t field */
    _Static_assert(sizeof(int) == sizeof(nctmc_time_sampling), "int is int32_t");
    cli_option options[] = {
        CLI_OPT_SECTION("recipe"),
        CLI_OPT_CHOICE("--preset", o.preset, presets.names, presets.help),
        CLI_OPT_SECTION("data and output"),
        CLI_OPT_STRING("--data", o.data_dir, "DIR", "a directory written by `nctmc prepare`"),
        CLI_OPT_STRING("--out", o.out, "FILE", "checkpoint to write (resumable)"),
        CLI_OPT_STRING("--resume", o.resume, "CKPT", "continue the run saved in CKPT"),
        CLI_OPT_SECTION("model (ignored with --resume)"),
        CLI_OPT_INT("--layers", m->n_layers, "N", 1, 1024, "DiT blocks"),
        CLI_OPT_INT("--d-model", m->d_model, "D", 2, 65536, "hidden width"),
        CLI_OPT_INT("--heads", m->n_heads, "H", 1, 1024, "attention heads (D/H even)"),
        CLI_OPT_INT("--cond-dim", m->cond_dim, "C", 1, 65536, "time/label conditioning width"),
        CLI_OPT_CHOICE("--process", o.process, cli_process_names, "forward noising process"),
        CLI_OPT_CHOICE("--schedule", o.schedule, cli_schedule_names, "noise schedule alpha_t"),
        CLI_OPT_CHOICE("--time-input", o.time_input, cli_time_input_names,
                       "what the time embedding sees: t or log(a_t / (1 - a_t))"),
        CLI_OPT_CHOICE("--exit-link", o.exit_link, train_exit_link_names,
                       "exit rate: auto (denoiser for uniform and mixture, noise_posterior "
                       "for masked), h + log sigma_t, the noise posterior, or from the "
                       "denoiser's clean-token estimate"),
        CLI_OPT_FLOAT("--mixture-uniform", m->mixture_uniform, "P", 1e-6, 1.0,
                      "uniform share p_u of the mixture process"),
        CLI_OPT_FLOAT("--schedule-eps", m->schedule_eps, "E", 1e-9, 0.999999,
                      "eps of the log-linear schedule"),
        CLI_OPT_INT("--seq-len", m->seq_len, "L", 0, 1 << 20,
                    "sequence length; 0 = the shard's, or 256 for a stream"),
        CLI_OPT_INT("--vocab-pad", m->vocab_pad_multiple, "M", 0, 65536,
                    "pad the embedding/output rows to a multiple of M"),
        CLI_OPT_SECTION("trainer"),
        CLI_OPT_INT("--batch", t->batch_size, "B", 1, 65536,
                    "sequences per micro-batch (per step without --accumulation)"),
        CLI_OPT_INT("--accumulation", t->accumulation, "M", 1, 4096,
                    "micro-batches per optimizer step (gradient accumulation)"),
        CLI_OPT_FLOAT("--lr", t->learning_rate, "LR", 0.0, 10.0, "peak learning rate"),
        CLI_OPT_FLOAT("--min-lr-ratio", t->min_lr_ratio, "R", 0.0, 1.0,
                      "the cosine decay ends at R x the peak"),
        CLI_OPT_INT64("--warmup", t->warmup_steps, "N", 0, 1e15, "linear warm-up steps"),
        CLI_OPT_INT64("--steps", t->total_steps, "N", 1, 1e15, "total steps (end of the decay)"),
        CLI_OPT_FLOAT("--clip", t->grad_clip, "G", 0.0, 1e30, "gradient-norm limit; 0 = off"),
        CLI_OPT_FLOAT("--weight-decay", t->weight_decay, "W", 0.0, 1.0, "AdamW decoupled decay"),
        CLI_OPT_FLOAT("--ema", t->ema_decay, "D", 0.0, 0.999999,
                      "EMA decay of the weights (saved for sampling); 0 = none"),
        CLI_OPT_FLOAT("--label-dropout", t->label_dropout, "P", 0.0, 1.0,
                      "share of null labels, for classifier-free guidance"),
        CLI_OPT_CHOICE("--time-sampling", t->time_sampling, cli_time_sampling_names,
                       "how t is drawn: uniform (the paper's), or importance-sampled and "
                       "reweighted (logit: uniform in logit t; sqrt: density ~ 1/sqrt t, the "
                       "best measured)"),
        CLI_OPT_UINT64("--seed", t->seed, "S", "seed of the initial weights and every draw"),
        CLI_OPT_INT("--recompute", t->activation_recompute, "0|1", 0, 1,
                    "1: keep only each block's output and run its forward again in the "
                    "backward pass (same results, ~1/3 more compute, far less memory)"),
        CLI_OPT_SECTION("run"),
        CLI_OPT_FLOAT("--minutes", o.minutes, "M", 0.0, 1e9,
                      "time budget: stop and save before M minutes; 0 = none"),
        CLI_OPT_INT64("--save-every", o.save_every, "N", 0, 1e15,
                      "also save every N steps; 0 = only at the end"),
        CLI_OPT_INT64("--eval-every", o.eval_every, "N", 0, 1e15,
                      "validate every N steps (and at the end); 0 = only at the end"),
        CLI_OPT_INT64("--eval-sequences", o.eval_sequences, "N", 0, 1e15,
                      "validation sequences used; 0 = all"),
        CLI_OPT_INT("--eval-time-samples", o.eval_time_samples, "K", 1, 1 << 20,
                    "Monte Carlo times per validation sequence"),
        CLI_OPT_INT64("--log-every", o.log_every, "N", 1, 1e15,
                      "log line interval when stderr is not a terminal"),
        CLI_OPT_INT("--threads", o.threads, "N", 0, 4096, "CPU threads; 0 = all cores"),
        CLI_OPT_STRING("--backend", o.backend, "NAME",
                       "compute backend: auto, cpu, cuda or cuda-bf16 (a preset's by default)"),
        CLI_OPT_FLAG("--verbose", o.verbose, "print the library's informational messages"),
        CLI_OPT_FLAG("--no-mmap", o.no_mmap, CLI_NO_MMAP_HELP),
    };
    cli_command cmd = {
        "train", "--data DIR [--out FILE] [options]",
        "Trains a Neural CTMC model on the shards of DIR. The model is\n"
        "class-conditional when the shard has labels, and carries the tokenizer, so\n"
        "its checkpoint is all `nctmc sample` needs. On a terminal a progress bar\n"
        "shows step, ETA, loss and speed; otherwise a log line every --log-every\n"
        "steps. Ctrl-C (or the --minutes budget) saves a resumable checkpoint and\n"
        "stops; Ctrl-C exits with status 130.",
        "  nctmc train --data build/digits --out digits.safetensors --layers 4 \\\n"
        "      --d-model 128 --heads 4 --batch 64 --lr 1e-3 --warmup 200 --minutes 3\n"
        "  nctmc train --data build/digits --resume digits.safetensors \\\n"
        "      --out digits.safetensors --steps 20000\n",
        0, 0, options, sizeof options / sizeof options[0]};
    int n_pos = 0;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, NULL, &n_pos);
    if (parsed != CLI_PARSE_OK)
        return parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    if (o.data_dir == NULL)
        return cli_usage_error(&cmd, "--data DIR is required");
    if (o.preset > 0 && o.resume)
        return cli_usage_error(&cmd, "--preset starts a new run; with --resume the checkpoint's "
                                     "recipe goes on (the flags given change it)");
    if (o.preset > 0 && !apply_preset(&cmd, presets.names[o.preset], &o))
        return 1;
    o.seq_len_given = cli_option_given(&cmd, "--seq-len");
    if (!check_paths(&o))
        return 1;
    cli_interrupt_install();
    train_run run;
    memset(&run, 0, sizeof run);
    run.o = &o;
    int rc = train(&run, &cmd);
    /* a rank that fails ends the job: the others may be waiting for it in
     * a collective operation, and must not wait for ever */
    if (rc != 0 && run.ranks > 1) {
        cli_error("train", "rank %d of %d failed: ending the job", (int)run.rank,
                  (int)run.ranks);
        nctmc_comm_abort(run.comm, rc);
    }
    nctmc_model_free(run.eval_model);
    free_model_and_trainer(&run);
    close_data(&run.data);
    nctmc_context_free(run.ctx);
    nctmc_comm_free(run.comm);
    return rc;
}
