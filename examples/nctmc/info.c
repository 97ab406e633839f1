/*
 * info.c — `nctmc info`: what a checkpoint holds.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "cli.h"

static void print_model(const nctmc_model *model, const char *path)
{
    struct stat st;
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(model, &c);
    cli_printf(stdout, "checkpoint   %s", path);
    if (stat(path, &st) == 0)
        printf(" (%.2f MiB)", (double)st.st_size / (1024.0 * 1024.0));
    printf("\nlibrary      libnctmc %s\n", nctmc_version());
    printf("model        %d layers, d %d, %d heads (head dim %d), cond %d\n", (int)c.n_layers,
           (int)c.d_model, (int)c.n_heads, c.n_heads ? (int)(c.d_model / c.n_heads) : 0,
           (int)c.cond_dim);
    printf("             S %d states%s, L %d", (int)c.vocab_size,
           c.process == NCTMC_PROCESS_UNIFORM ? "" : " (the last is the mask)", (int)c.seq_len);
    if (c.vocab_pad_multiple > 1)
        printf(", rows padded to a multiple of %d", (int)c.vocab_pad_multiple);
    if (c.n_classes > 0)
        printf(", %d classes (+ a null label for guidance)", (int)c.n_classes);
    else
        printf(", unconditional");
    printf("\n             %s process", cli_process_names[c.process]);
    if (c.process == NCTMC_PROCESS_MIXTURE)
        printf(" (p_u %g)", (double)c.mixture_uniform);
    printf(", %s schedule", cli_schedule_names[c.schedule]);
    if (c.schedule == NCTMC_SCHEDULE_LOGLINEAR)
        printf(" (eps %g)", (double)c.schedule_eps);
    printf(", init seed %llu\n", (unsigned long long)c.seed);
    printf("             time input %s, exit link %s\n", cli_time_input_names[c.time_input],
           cli_exit_link_names[c.exit_link]);
    printf("             %lld parameters in %d tensors\n", (long long)nctmc_model_n_params(model),
           (int)nctmc_model_n_tensors(model));
    static const char *const weights[] = {
        "f32", "bf16 linear layers (sampling only), the rest f32",
        "int8 linear layers with per-row scales (sampling only), the rest f32"};
    nctmc_weight_type wt = nctmc_model_weight_type(model);
    printf("weights      %s\n", wt >= 0 && wt <= NCTMC_WEIGHT_INT8 ? weights[wt] : "?");
    char tok[128];
    cli_describe_tokenizer(nctmc_model_get_tokenizer(model), tok, sizeof tok);
    printf("tokenizer    %s\n", tok);
    /* the checkpoint's recommendation, or its process's */
    static const char *const methods[] = {"tau-leaping", "Euler", "posterior"};
    nctmc_sample_params sp;
    nctmc_sample_params_init(&sp);
    if (nctmc_sample_params_from_model(model, &sp) == NCTMC_OK && sp.method >= 0 &&
        sp.method <= NCTMC_SAMPLE_POSTERIOR)
        printf("sampling     %s, %s grid, %d steps (nctmc sample's default for this model)\n",
               methods[sp.method], sp.grid == NCTMC_GRID_GEOMETRIC ? "geometric" : "even",
               (int)sp.n_steps);
}

static void print_tensors(const nctmc_model *model)
{
    printf("tensors:\n");
    for (int32_t i = 0; i < nctmc_model_n_tensors(model); i++) {
        nctmc_tensor_info t;
        nctmc_tensor_info_init(&t);
        if (nctmc_model_tensor_info(model, i, &t) != NCTMC_OK)
            continue;
        printf("  %-44s [", t.name);
        for (int32_t d = 0; d < t.n_dims; d++)
            printf("%s%lld", d ? ", " : "", (long long)t.shape[d]);
        printf("]  %lld\n", (long long)t.n_elements);
    }
}

/* The training state is read from the metadata alone: no trainer is made,
 * so inspecting a checkpoint costs no memory for the batch it names. */
static void print_training(nctmc_context *ctx, const char *path)
{
    nctmc_trainer_state s;
    nctmc_trainer_params p;
    nctmc_trainer_state_init(&s);
    nctmc_trainer_params_init(&p);
    nctmc_status st = nctmc_trainer_inspect(ctx, path, &p, &s);
    if (st == NCTMC_ERR_NOT_FOUND) {
        printf("training     none saved (a model-only checkpoint)\n");
    } else if (st != NCTMC_OK) {
        cli_printf(stdout, "training     unreadable: %s\n", nctmc_context_last_error(ctx));
    } else {
        printf("training     step %lld of %lld (%lld updates, %lld skipped), %lld sequences "
               "drawn, seed %llu\n",
               (long long)s.step, (long long)p.total_steps, (long long)s.optimizer_steps,
               (long long)s.n_skipped, (long long)s.data_position, (unsigned long long)s.seed);
        char schedule[64];
        cli_describe_lr_schedule(&p, schedule, sizeof schedule);
        printf("             batch %d, lr %g (%s), AdamW (%g, %g, eps %g, decay %g), clip %g, "
               "EMA %g, label dropout %g, t ~ %s (eps %g)\n",
               (int)p.batch_size, (double)p.learning_rate, schedule, (double)p.beta1,
               (double)p.beta2, (double)p.adam_eps, (double)p.weight_decay,
               (double)p.grad_clip, (double)p.ema_decay, (double)p.label_dropout,
               cli_time_sampling_name(p.time_sampling), (double)p.time_eps);
    }
}

int cmd_info(int argc, char **argv)
{
    bool tensors = false, no_mmap = false;
    const char *backend = "cpu";
    cli_option options[] = {
        CLI_OPT_FLAG("--tensors", tensors, "also list every tensor with its shape"),
        CLI_OPT_STRING("--backend", backend, "NAME", "compute backend to load onto"),
        CLI_OPT_FLAG("--no-mmap", no_mmap, CLI_NO_MMAP_HELP),
    };
    cli_command cmd = {
        "info", "CHECKPOINT [options]",
        "Prints a checkpoint's model configuration, parameter count, tokenizer and,\n"
        "for a checkpoint written during training, the training state.",
        "  nctmc info digits.safetensors\n"
        "  nctmc info digits.safetensors --tensors\n",
        1, 1, options, sizeof options / sizeof options[0]};
    const char *path = NULL;
    int n_pos = 0;
    cli_parse_result parsed = cli_parse(&cmd, argc, argv, &path, &n_pos);
    if (parsed != CLI_PARSE_OK)
        return parsed == CLI_PARSE_HELP ? 0 : CLI_EXIT_USAGE;
    nctmc_context *ctx = NULL;
    if (cli_context_create("info", backend, 1, false, &ctx) != NCTMC_OK)
        return 1;
    nctmc_model *model = NULL;
    nctmc_status st = cli_load_model(ctx, path, no_mmap, &model);
    int rc = 0;
    if (st != NCTMC_OK) {
        rc = cli_fail("info", path, st, nctmc_context_last_error(ctx));
    } else {
        print_model(model, path);
        print_training(ctx, path);
        if (tensors)
            print_tensors(model);
    }
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    return rc;
}
