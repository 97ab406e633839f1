/*
 * cli.h — what the parts of the `nctmc` tool share: the subcommands'
 * entry points, file names in a prepared data directory, and small helpers
 * for contexts, errors, files and tokenizers.
 */
#ifndef NCTMC_CLI_H
#define NCTMC_CLI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nctmc.h"

/* Each takes argv[0] = the subcommand's name and returns the exit status. */
int cmd_prepare(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

/* Before anything else: makes sure OpenBLAS's own threads are off
 * (OPENBLAS_NUM_THREADS=1), executing the tool again if they were on
 * (blas_threads.c says why). Returns when they are off, or cannot be. */
void cli_single_threaded_blas(char **argv);
int cmd_convert(int argc, char **argv);

/* What `nctmc prepare` writes into its output directory and `train` and
 * `eval` read from it. */
#define CLI_TRAIN_SHARD "train.bin"
#define CLI_VAL_SHARD "val.bin"
#define CLI_TOKENIZER_FILE "tokenizer.txt"

/** Exit status after a run was stopped by Ctrl-C (128 + SIGINT, as shells
 *  report it) — the work done so far is saved first. */
#define CLI_EXIT_INTERRUPTED 130

/* Names of the library's enums, in enum order (NULL-terminated), for
 * flags and for printing. */
extern const char *const cli_process_names[];
extern const char *const cli_schedule_names[];
extern const char *const cli_time_input_names[];
extern const char *const cli_exit_link_names[];
extern const char *const cli_time_sampling_names[];
extern const char *const cli_tokenizer_names[];

/** Prints "nctmc CMD: message" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** Prints "nctmc CMD: WHAT: DETAIL (status string)" to stderr and returns 1,
 *  the exit status of a failure. */
int cli_fail(const char *cmd, const char *what, nctmc_status status, const char *detail);

/** Creates a context on `backend` with `threads` threads whose log messages
 *  (warnings and errors, or everything from INFO up when verbose) go to
 *  stderr without breaking a progress bar. Reports failures itself. */
nctmc_status cli_context_create(const char *cmd, const char *backend, int threads, bool verbose,
                                nctmc_context **out);

/** Reads a whole file into a malloc'd buffer (NUL-terminated, so text can
 *  be used as a string; *size excludes the NUL). Reports failures itself
 *  and returns false. */
bool cli_read_file(const char *cmd, const char *path, char **data, size_t *size);

/** Creates directory `path` and its missing parents. Reports failures
 *  itself. */
bool cli_make_dir(const char *cmd, const char *path);

/** dir + "/" + name, malloc'd; NULL when out of memory. */
char *cli_path_join(const char *dir, const char *name);

/** Whether a file exists at path. */
bool cli_file_exists(const char *path);

/* Text from files (tokenizer values, metadata, paths) reaches the terminal
 * only through these (paths.c): a control character in it — an escape
 * sequence above all — is shown as "\xNN" instead of acting on the
 * terminal. */

/**
 * The one escaping function: copies text into out (size > 0, always
 * terminated), writing "\xNN" for every C0 control (except newline and tab
 * when keep_newlines), DEL, C1 control (U+0080..U+009F) and byte that is
 * not valid UTF-8. An escape that does not fit is left out whole. Returns
 * the length written.
 */
size_t cli_escape(char *out, size_t size, const char *text, bool keep_newlines);

/** Writes text escaped (cli_escape) to out. */
void cli_write_escaped(FILE *out, const char *text, bool keep_newlines);

/** printf whose whole output is escaped, newlines and tabs kept. */
void cli_printf(FILE *out, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void cli_vprintf(FILE *out, const char *fmt, va_list ap);

/* File arguments, checked before any work starts (paths.c). */

/**
 * That `path`, given with `flag`, can be written as an output file: not
 * empty; absent, a regular file, or a symbolic link to one (the library
 * writes through it); in an existing directory we may write into; and not
 * the same file (device and inode) as any of inputs[0 .. n_inputs) (NULL
 * entries are skipped). Reports failures itself.
 */
bool cli_check_output_file(const char *cmd, const char *flag, const char *path,
                           const char *const *inputs, int n_inputs);

/** That an input file exists and is a regular file; reports failures. */
bool cli_check_input_file(const char *cmd, const char *what, const char *path);

/** Whether a and b both exist and are the same file (device and inode). */
bool cli_same_file(const char *a, const char *b);

/** Encodes text with tok into a malloc'd array; reports failures itself. */
bool cli_encode(const char *cmd, nctmc_tokenizer *tok, const char *text, size_t n_bytes,
                int32_t **tokens, size_t *n_tokens);

/**
 * Decodes tokens into a malloc'd string. Tokens outside the tokenizer's
 * vocabulary (a mask token left when final denoising is off) are shown as
 * '_' in text and as the background level in images, instead of failing.
 * The text's length goes to *len (unless NULL): a byte tokenizer's text
 * may hold NUL bytes, so strlen() does not give it. NULL on failure,
 * reported.
 */
char *cli_decode(const char *cmd, nctmc_tokenizer *tok, const int32_t *tokens, size_t n,
                 size_t *len);

/**
 * A copy of the model's tokenizer, for decoding (encode and decode record
 * errors in the handle, so the model's own is read-only); NULL when the
 * model has none or the copy fails. The caller frees it.
 */
nctmc_tokenizer *cli_model_tokenizer(const nctmc_model *model);

/** Whether the first bytes of a file (head, n of them) begin a JSON object
 *  once leading whitespace is skipped: how a Hugging Face tokenizer.json is
 *  told from a tokenizer file of `nctmc prepare` ("nctmc-tokenizer ..."). */
bool cli_looks_like_json(const char *head, size_t n);

/**
 * Loads a tokenizer file of either kind: a Hugging Face tokenizer.json
 * (nctmc_tokenizer_load_hf_json()) or a file nctmc_tokenizer_save() wrote
 * (nctmc_tokenizer_load()), told apart by the first bytes. On failure the
 * message names cmd and the file, and the status is returned.
 */
nctmc_status cli_load_tokenizer_file(const char *cmd, nctmc_context *ctx, const char *path,
                                     nctmc_tokenizer **out);

/** One line describing a tokenizer ("bytes, 256 tokens"), into buf. */
void cli_describe_tokenizer(const nctmc_tokenizer *tok, char *buf, size_t size);

/** The learning-rate schedule of trainer parameters in words ("warm-up 100,
 *  cosine to 0.1 x over 1000 steps", "warm-up 2500, then constant"). */
void cli_describe_lr_schedule(const nctmc_trainer_params *p, char *buf, size_t size);

/** The name of a time_sampling value ("uniform", ...; "unknown" otherwise). */
const char *cli_time_sampling_name(nctmc_time_sampling mode);

/** Seconds on a monotonic clock. */
double cli_now(void);

/* Evaluation on held-out data (eval.c), shared by `eval` and `train`. */

/** Held-out sequences in memory, in the shape nctmc_eval() takes. */
typedef struct cli_eval_set {
    int32_t *tokens;     /* [n_sequences * length] */
    int32_t *labels;     /* [n_sequences], or NULL */
    int64_t n_sequences;
    int32_t length;
} cli_eval_set;

/**
 * Reads up to max_sequences (0 = all) sequences of the model's length from
 * a shard, spread evenly over it: its own sequences, or consecutive windows
 * of a stream. Labels are kept when both the shard and the model have
 * classes. Checks that the shard's tokens are the model's data tokens.
 * Reports failures itself.
 */
bool cli_eval_set_load(const char *cmd, nctmc_context *ctx, const char *path,
                       const nctmc_model_config *config, int64_t max_sequences, bool no_mmap,
                       cli_eval_set *out);

void cli_eval_set_free(cli_eval_set *set);

/** nctmc_model_load(), or with no_mmap a copying nctmc_model_load_ex()
 *  (no_mmap.c). Errors are in ctx. */
nctmc_status cli_load_model(nctmc_context *ctx, const char *path, bool no_mmap,
                            nctmc_model **out);

/** nctmc_dataset_open(), or with no_mmap of a private in-memory copy of the
 *  file (no_mmap.c). Reports failures itself. */
bool cli_open_dataset(const char *cmd, nctmc_context *ctx, const char *path, bool no_mmap,
                      nctmc_dataset **out);

/** --no-mmap's help line. */
#define CLI_NO_MMAP_HELP \
    "read checkpoints and shards into memory instead of mapping them (a file " \
    "truncated meanwhile cannot stop the run with SIGBUS)"

/** Runs nctmc_eval() on the set; Ctrl-C cancels it (NCTMC_ERR_CANCELLED,
 *  with the result over the sequences finished). With show_progress, a bar
 *  tracks it on a terminal. */
/* Rows (sequence x time) per forward pass of an evaluation: the library's
 * default of 8 leaves the matrix products small and about 2.5x slower on
 * digits-sized models; the result does not depend on it. */
#define EVAL_BATCH_ROWS 64

typedef struct cli_eval_settings {
    int32_t batch;         /* rows per forward pass; 0 = the library's */
    int32_t time_samples;  /* 0 = the library's */
    float t_max;           /* 0 = automatic */
    uint64_t seed;
    bool show_progress;
    nctmc_time_sampling time_sampling;   /* 0 = uniform in t */
    nctmc_comm *comm;      /* the job's ranks (mpirun); NULL = this process */
} cli_eval_settings;

nctmc_status cli_eval_run(nctmc_model *model, const cli_eval_set *set,
                          const cli_eval_settings *settings, nctmc_eval_result *result);

/** "NELBO 1.234 ± 0.012 bits/token" and its parts, one line. */
void cli_eval_print_summary(FILE *out, const nctmc_eval_result *result);

/** The exit-rate reliability table: per time bucket its ECE, then one row
 *  per nu_hat bin that has positions; the overall ECE first. */
void cli_eval_print_reliability(FILE *out, const nctmc_eval_result *result);

/* Ctrl-C handling (interrupt.c). The first SIGINT or SIGTERM only sets a
 * flag that long loops check between steps, so they can save and exit
 * cleanly; the handler then restores the default action, so a second
 * Ctrl-C stops the program at once. */
void cli_interrupt_install(void);
bool cli_interrupt_requested(void);

#endif /* NCTMC_CLI_H */
