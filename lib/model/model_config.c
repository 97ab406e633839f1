/*
 * model_config.c — configuration defaults and validation.
 */
#include <math.h>
#include <string.h>

#include "base/abi.h"
#include "core/context.h"
#include "model.h"

/* Limits that keep every derived size far from overflow while allowing
 * anything a real model uses. */
#define MAX_VOCAB (1 << 24)
#define MAX_PAD_MULTIPLE 65536
#define MAX_SEQ_LEN (1 << 20)
#define MAX_LAYERS 1024
#define MAX_WIDTH 65536
#define MAX_CLASSES (1 << 20)

NCTMC_API nctmc_status nctmc_model_config_init_sized(nctmc_model_config *config, size_t size)
{
    nctmc_model_config d;
    memset(&d, 0, sizeof d);
    d.vocab_size = 256;
    d.vocab_pad_multiple = 0;
    d.seq_len = 256;
    d.n_layers = 6;
    d.d_model = 384;
    d.n_heads = 6;
    d.cond_dim = 128;
    d.n_classes = 0;
    d.process = NCTMC_PROCESS_UNIFORM;
    d.schedule = NCTMC_SCHEDULE_LINEAR;
    d.mixture_uniform = 0.1f;
    d.schedule_eps = 1e-3f;
    d.seed = 0;
    d.time_input = NCTMC_TIME_INPUT_LOG_SNR;
    d.exit_link = NCTMC_EXIT_LINK_AUTO;
    return abi_init(config, size, &d, &abi_model_config);
}

/* NCTMC_EXIT_LINK_AUTO becomes the best measured link of the process
 * (docs/training.md, "Defaults"): the denoiser link for the uniform and
 * mixture processes (research/2026-11-27-denoiser-link-with-sqrt-t.md,
 * research/2026-11-27-mixture-under-both-levers.md); for the masked
 * process, which ignores the link, the noise-posterior link that 0.3.0–0.7.0
 * gave it, so its checkpoints stay what they were. */
void model_config_resolve(nctmc_model_config *cfg)
{
    if (cfg->exit_link == NCTMC_EXIT_LINK_AUTO)
        cfg->exit_link = cfg->process == NCTMC_PROCESS_MASKED ? NCTMC_EXIT_LINK_NOISE_POSTERIOR
                                                              : NCTMC_EXIT_LINK_DENOISER;
}

/* Measured per process (docs/api.md, "Sampling settings, measured"):
 * uniform, the posterior sampler on the even grid at 64 steps
 * (research/2026-11-27-few-step-sampling-grid.md; the digits check in
 * research/2026-11-28-defaults-and-demo.md); masked, tau-leaping on the
 * even grid (the same study: the geometric grid hurts every masked cell) at
 * the 128 steps it always had; mixture, the posterior sampler on the even
 * grid (it has mask tokens, like masked) at 128 steps
 * (research/2026-11-26-digits-demo-mixture.md). */
model_sampling model_sampling_default(nctmc_process process)
{
    model_sampling s = {false, NCTMC_SAMPLE_POSTERIOR, NCTMC_GRID_UNIFORM, 128};
    if (process == NCTMC_PROCESS_UNIFORM)
        s.n_steps = 64;
    else if (process == NCTMC_PROCESS_MASKED)
        s.method = NCTMC_SAMPLE_TAU_LEAPING;
    return s;
}

model_sampling model_sampling_of(const nctmc_model *model)
{
    return model->sampling.stored ? model->sampling
                                  : model_sampling_default(model->config.process);
}

bool model_sampling_valid(const model_sampling *s)
{
    return (s->method == NCTMC_SAMPLE_TAU_LEAPING || s->method == NCTMC_SAMPLE_EULER ||
            s->method == NCTMC_SAMPLE_POSTERIOR) &&
           (s->grid == NCTMC_GRID_UNIFORM || s->grid == NCTMC_GRID_GEOMETRIC) &&
           s->n_steps >= 1 && s->n_steps <= MODEL_SAMPLING_MAX_STEPS;
}

static nctmc_status out_of_range(char *err, size_t n, const char *field, long long value,
                                 long long lo, long long hi)
{
    return fail_format(err, n, NCTMC_ERR_INVALID_ARGUMENT,
                       "config.%s = %lld is out of range [%lld, %lld]", field, value, lo, hi);
}

#define CHECK_RANGE(field, lo, hi)                                                      \
    do {                                                                                \
        if (cfg->field < (lo) || cfg->field > (hi))                                     \
            return out_of_range(err, err_size, #field, (long long)cfg->field, (lo), (hi)); \
    } while (0)

static nctmc_status validate_process(const nctmc_model_config *cfg, char *err,
                                     size_t err_size)
{
    if (cfg->process != NCTMC_PROCESS_UNIFORM && cfg->process != NCTMC_PROCESS_MASKED &&
        cfg->process != NCTMC_PROCESS_MIXTURE)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.process = %d is not an nctmc_process", (int)cfg->process);
    if (cfg->schedule != NCTMC_SCHEDULE_LINEAR && cfg->schedule != NCTMC_SCHEDULE_COSINE &&
        cfg->schedule != NCTMC_SCHEDULE_LOGLINEAR)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.schedule = %d is not an nctmc_schedule", (int)cfg->schedule);
    if (cfg->time_input != NCTMC_TIME_INPUT_T && cfg->time_input != NCTMC_TIME_INPUT_LOG_SNR)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.time_input = %d is not an nctmc_time_input",
                           (int)cfg->time_input);
    if (cfg->exit_link != NCTMC_EXIT_LINK_SIGMA &&
        cfg->exit_link != NCTMC_EXIT_LINK_NOISE_POSTERIOR &&
        cfg->exit_link != NCTMC_EXIT_LINK_DENOISER)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.exit_link = %d is not an nctmc_exit_link", (int)cfg->exit_link);
    if (cfg->process == NCTMC_PROCESS_MIXTURE &&
        !(cfg->mixture_uniform > 0.0f && cfg->mixture_uniform <= 1.0f))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.mixture_uniform = %g must be in (0, 1]",
                           (double)cfg->mixture_uniform);
    if (cfg->schedule == NCTMC_SCHEDULE_LOGLINEAR &&
        !(cfg->schedule_eps > 0.0f && cfg->schedule_eps < 1.0f))
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.schedule_eps = %g must be in (0, 1)",
                           (double)cfg->schedule_eps);
    return NCTMC_OK;
}

nctmc_status model_config_validate(const nctmc_model_config *cfg, model_dims *dims, char *err,
                                   size_t err_size)
{
    if (!cfg)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "config is NULL");
    CHECK_RANGE(vocab_size, 2, MAX_VOCAB);
    CHECK_RANGE(vocab_pad_multiple, 0, MAX_PAD_MULTIPLE);
    CHECK_RANGE(seq_len, 1, MAX_SEQ_LEN);
    CHECK_RANGE(n_layers, 1, MAX_LAYERS);
    CHECK_RANGE(d_model, 2, MAX_WIDTH);
    CHECK_RANGE(n_heads, 1, MAX_WIDTH);
    CHECK_RANGE(cond_dim, 1, MAX_WIDTH);
    CHECK_RANGE(n_classes, 0, MAX_CLASSES);
    if (cfg->d_model % cfg->n_heads != 0)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "config.d_model = %d is not divisible by n_heads = %d",
                           cfg->d_model, cfg->n_heads);
    if ((cfg->d_model / cfg->n_heads) % 2 != 0)
        return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT,
                           "head width d_model / n_heads = %d must be even (rotary pairs)",
                           cfg->d_model / cfg->n_heads);
    nctmc_status st = validate_process(cfg, err, err_size);
    if (st != NCTMC_OK)
        return st;

    int32_t pad = cfg->vocab_pad_multiple > 1 ? cfg->vocab_pad_multiple : 1;
    dims->S = cfg->vocab_size;
    dims->V = (int32_t)(((int64_t)cfg->vocab_size + pad - 1) / pad * pad);
    dims->L = cfg->seq_len;
    dims->n_layers = cfg->n_layers;
    dims->d = cfg->d_model;
    dims->H = cfg->n_heads;
    dims->D = cfg->d_model / cfg->n_heads;
    dims->F = 4 * cfg->d_model;
    dims->c = cfg->cond_dim;
    dims->n_labels = cfg->n_classes > 0 ? cfg->n_classes + 1 : 0;
    return NCTMC_OK;
}

nctmc_fp model_config_fp(const nctmc_model_config *cfg)
{
    nctmc_fp fp;
    fp.process = (int32_t)cfg->process;
    fp.schedule = (int32_t)cfg->schedule;
    fp.vocab = cfg->vocab_size;
    fp.mixture_uniform = cfg->mixture_uniform;
    fp.schedule_eps = cfg->schedule_eps;
    /* the denoiser link's forward operation writes the sigma link's
     * outputs (denoiser_math.h): everything after it reads them so */
    fp.exit_link = cfg->exit_link == NCTMC_EXIT_LINK_DENOISER ? NCTMC_FP_LINK_SIGMA
                                                              : (int32_t)cfg->exit_link;
    return fp;
}
