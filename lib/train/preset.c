/*
 * preset.c — named training recipes (nctmc.h, "Presets"): a model
 * configuration, trainer parameters and the backend they are meant for.
 * docs/training.md lists what each sets and where its numbers come from.
 */
#include <stdio.h>
#include <string.h>

#include "base/abi.h"
#include "core/context.h"

typedef struct preset {
    const char *name;
    const char *description;
    const char *backend;
    /* write the fields the preset defines, nothing else */
    void (*set_config)(nctmc_model_config *c);
    void (*set_params)(nctmc_trainer_params *p);
} preset;

/* The paper's small model (App. "Additional Experimental Details"): a
 * 12-layer DiT, hidden 768, 12 heads, time conditioning 128, GPT-2's
 * 50257 tokens (rows padded to 50304 for the matrix units), 512 tokens,
 * the uniform process with a_t = 1 - t. */
static void paper_config(nctmc_model_config *c)
{
    c->vocab_size = 50257;
    c->vocab_pad_multiple = 128;
    c->seq_len = 512;
    c->n_layers = 12;
    c->d_model = 768;
    c->n_heads = 12;
    c->cond_dim = 128;
    c->process = NCTMC_PROCESS_UNIFORM;
    c->schedule = NCTMC_SCHEDULE_LINEAR;
    /* the recipe is the paper's; how the network sees t and how its head
     * becomes a rate are this library's measured choices (docs/math.md,
     * docs/training.md "Defaults"): both stay inside the paper's model
     * class */
    c->time_input = NCTMC_TIME_INPUT_LOG_SNR;
    c->exit_link = NCTMC_EXIT_LINK_DENOISER;
}

/* The recipe the paper shares with MDLM: AdamW 3e-4 (0.9, 0.999, 1e-8, no
 * weight decay), 2500 warm-up steps then a constant rate, clipping at 1,
 * EMA 0.9999, batch 512, t over (1e-3, 1 - 1e-3); 10^6 steps of 512 x 512
 * tokens are the paper's 262B training tokens. t is drawn from the sqrt
 * density and reweighted (the same objective as the paper's even draws,
 * with less variance: docs/training.md, "Defaults"). */
static void paper_params(nctmc_trainer_params *p)
{
    p->batch_size = 512;
    p->seq_len = 0;
    p->learning_rate = 3e-4f;
    p->min_lr_ratio = 1.0f;
    p->warmup_steps = 2500;
    p->total_steps = 1000000;
    p->beta1 = 0.9f;
    p->beta2 = 0.999f;
    p->adam_eps = 1e-8f;
    p->weight_decay = 0.0f;
    p->grad_clip = 1.0f;
    p->ema_decay = 0.9999f;
    p->time_eps = 1e-3f;
    p->time_sampling = NCTMC_TIME_SAMPLING_SQRT;
}

/* Chosen by measurement on the digits data with two cores
 * (docs/training.md, "Presets"). The vocabulary and length stay the
 * data's. */
static void cpu_small_config(nctmc_model_config *c)
{
    c->vocab_pad_multiple = 0;
    c->n_layers = 4;
    c->d_model = 128;
    c->n_heads = 4;
    c->cond_dim = 64;
    c->process = NCTMC_PROCESS_UNIFORM;
    c->schedule = NCTMC_SCHEDULE_LINEAR;
    c->time_input = NCTMC_TIME_INPUT_LOG_SNR;
    c->exit_link = NCTMC_EXIT_LINK_DENOISER;
}

static void cpu_small_params(nctmc_trainer_params *p)
{
    p->batch_size = 64;
    p->seq_len = 0;
    p->learning_rate = 2e-3f;
    p->min_lr_ratio = 0.1f;
    p->warmup_steps = 100;
    p->total_steps = 1000;
    p->beta1 = 0.9f;
    p->beta2 = 0.999f;
    p->adam_eps = 1e-8f;
    p->weight_decay = 0.0f;
    p->grad_clip = 1.0f;
    p->ema_decay = 0.99f;
    p->time_eps = 1e-3f;
    p->time_sampling = NCTMC_TIME_SAMPLING_SQRT;
}

static const preset presets[] = {
    {"paper",
     "the paper's small model and recipe: 12 layers, d 768, GPT-2 vocabulary, 512 tokens, "
     "uniform process; AdamW 3e-4, 2500 warm-up steps, constant rate, EMA 0.9999, batch 512",
     "cuda-bf16", paper_config, paper_params},
    {"cpu-small",
     "a 4-layer, d 128 model and a 1000-step recipe that learns the digits data in minutes on "
     "two CPU cores",
     "cpu", cpu_small_config, cpu_small_params},
};
#define N_PRESETS ((int32_t)(sizeof presets / sizeof presets[0]))

static const preset *find_preset(const char *name)
{
    for (int32_t i = 0; name && i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

NCTMC_API const char *nctmc_preset_name(int32_t index)
{
    return index >= 0 && index < N_PRESETS ? presets[index].name : NULL;
}

NCTMC_API const char *nctmc_preset_description(const char *name)
{
    const preset *p = find_preset(name);
    return p ? p->description : NULL;
}

NCTMC_API const char *nctmc_preset_backend(const char *name)
{
    const preset *p = find_preset(name);
    return p ? p->backend : NULL;
}

/* "paper", "cpu-small" — for the message of an unknown name. */
static void list_names(char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int32_t i = 0; i < N_PRESETS && used < size; i++) {
        int n = snprintf(out + used, size - used, "%s\"%s\"", i ? ", " : "", presets[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

NCTMC_API nctmc_status nctmc_preset_apply(const char *name, nctmc_model_config *config,
                                          nctmc_trainer_params *params, char *error_buffer,
                                          size_t error_buffer_size)
{
    char *err = error_buffer;
    size_t err_size = error_buffer ? error_buffer_size : 0;
    if (!name)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "nctmc_preset_apply: name is NULL");
    const preset *p = find_preset(name);
    if (!p) {
        char names[256];
        list_names(names, sizeof names);
        return fail_format(err, err_size, NCTMC_ERR_NOT_FOUND,
                           "unknown preset \"%.64s\" (known: %s)", name, names);
    }
    /* both structs are read before either is written: a failure changes
     * nothing */
    nctmc_model_config c;
    nctmc_trainer_params t;
    nctmc_model_config_init(&c);
    nctmc_trainer_params_init(&t);
    nctmc_status st = NCTMC_OK;
    if (config)
        st = abi_read(config, &c, sizeof c, &abi_model_config, err, err_size);
    if (st == NCTMC_OK && params)
        st = abi_read(params, &t, sizeof t, &abi_trainer_params, err, err_size);
    if (st != NCTMC_OK)
        return st;
    if (config) {
        p->set_config(&c);
        abi_write(config, &c, &abi_model_config);
    }
    if (params) {
        p->set_params(&t);
        abi_write(params, &t, &abi_trainer_params);
    }
    if (err_size)
        err[0] = '\0';
    return NCTMC_OK;
}
