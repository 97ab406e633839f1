/*
 * sampler_params.c — the defaults of nctmc_sample_params, the check of every
 * field of a call (each failure names the field and the value), and the
 * time grid.
 */
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "base/abi.h"
#include "model/model.h"
#include "math/sample_math.h"
#include "sampler.h"

#define SAMPLE_MAX_STEPS 1000000
#define SAMPLE_MAX_CORRECTIONS 1000000

/* A refused parameter: the message, prefixed with the call it refuses. */
static nctmc_status param_fail(char *err, size_t err_size, const char *fmt, ...)
    NCTMC_PRINTF(3, 4);
static nctmc_status param_fail(char *err, size_t err_size, const char *fmt, ...)
{
    char what[NCTMC_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fail_format(err, err_size, NCTMC_ERR_INVALID_ARGUMENT, "nctmc_sample: %s", what);
}

NCTMC_API nctmc_status nctmc_sample_params_init_sized(nctmc_sample_params *params,
                                                     size_t size)
{
    nctmc_sample_params d;
    memset(&d, 0, sizeof d);
    d.batch = 1;
    d.length = 0;
    d.method = NCTMC_SAMPLE_TAU_LEAPING;
    d.n_steps = 128;
    d.grid = NCTMC_GRID_UNIFORM;
    d.t_max = 1.0f - 1e-3f;
    d.t_min = 1e-3f;
    d.temperature = 1.0f;
    d.final_denoise = 1;
    d.cfg_scale = 1.0f;
    d.correction_steps = 0;
    d.correction_temperature = 0.1f;
    d.correction_time = 0.05f;
    d.correction_mode = NCTMC_CORRECT_GREEDY;
    d.cfg_rule = NCTMC_CFG_SEPARATE;
    d.seed = 0;
    d.first_sequence = 0;
    return abi_init(params, size, &d, &abi_sample_params);
}

NCTMC_API nctmc_status nctmc_sample_params_from_model(const nctmc_model *model,
                                                      nctmc_sample_params *params)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    char err[NCTMC_ERROR_SIZE];
    if (!params)
        return model_fail(model, NCTMC_ERR_INVALID_ARGUMENT,
                          "nctmc_sample_params_from_model: params is NULL");
    nctmc_status st = abi_check_output(params, &abi_sample_params, err, sizeof err);
    if (st != NCTMC_OK)
        return model_fail(model, st, "nctmc_sample_params_from_model: %s", err);
    /* method, n_steps and grid are inside every published size */
    model_sampling s = model_sampling_of(model);
    params->method = s.method;
    params->grid = s.grid;
    params->n_steps = s.n_steps;
    return NCTMC_OK;
}

static nctmc_status check_shape(const nctmc_sampler *s, const nctmc_sample_params *p,
                                sample_run *run, char *err, size_t err_size)
{
    if (p->batch < 1 || p->batch > s->max_batch)
        return param_fail(err, err_size, "batch = %d is out of range [1, %d] (the sampler's max_batch)", p->batch,
                    s->max_batch);
    int32_t length = p->length == 0 ? s->max_length : p->length;
    if (length < 1 || length > s->max_length)
        return param_fail(err, err_size, "length = %d is out of range [1, %d] (the sampler's max_length; 0 = "
                    "max_length)",
                    p->length, s->max_length);
    if (p->first_sequence < 0 || p->first_sequence > SM_MAX_SEQUENCE - p->batch)
        return param_fail(err, err_size, "first_sequence = %lld is out of range [0, 2^56 - batch]",
                    (long long)p->first_sequence);
    if (!p->tokens_out)
        return param_fail(err, err_size, "tokens_out is NULL");
    run->batch = p->batch;
    run->length = length;
    run->n_rows = (int64_t)p->batch * length;
    return NCTMC_OK;
}

static nctmc_status check_schedule(const nctmc_sample_params *p, char *err, size_t err_size)
{
    if ((int)p->method < NCTMC_SAMPLE_TAU_LEAPING || (int)p->method > NCTMC_SAMPLE_POSTERIOR)
        return param_fail(err, err_size, "method = %d is not a nctmc_sample_method", (int)p->method);
    if ((int)p->grid < NCTMC_GRID_UNIFORM || (int)p->grid > NCTMC_GRID_GEOMETRIC)
        return param_fail(err, err_size, "grid = %d is not a nctmc_time_grid", (int)p->grid);
    if (p->n_steps < 1 || p->n_steps > SAMPLE_MAX_STEPS)
        return param_fail(err, err_size, "n_steps = %d is out of range [1, %d]", p->n_steps, SAMPLE_MAX_STEPS);
    if (!(p->t_min > 0.0f && p->t_min < p->t_max && p->t_max < 1.0f))
        return param_fail(err, err_size, "times must satisfy 0 < t_min < t_max < 1, got t_min = %g, t_max = %g",
                    (double)p->t_min, (double)p->t_max);
    if (!(p->temperature > 0.0f && isfinite(p->temperature)))
        return param_fail(err, err_size, "temperature = %g must be finite and > 0", (double)p->temperature);
    return NCTMC_OK;
}

static nctmc_status check_correction(const nctmc_sample_params *p, char *err, size_t err_size)
{
    if (p->correction_steps < 0 || p->correction_steps > SAMPLE_MAX_CORRECTIONS)
        return param_fail(err, err_size, "correction_steps = %d is out of range [0, %d]", p->correction_steps,
                    SAMPLE_MAX_CORRECTIONS);
    if ((int)p->correction_mode < NCTMC_CORRECT_GREEDY ||
        (int)p->correction_mode > NCTMC_CORRECT_GIBBS)
        return param_fail(err, err_size, "correction_mode = %d is not a nctmc_correction_mode",
                    (int)p->correction_mode);
    if (p->correction_steps == 0)
        return NCTMC_OK;
    if (!(p->correction_temperature > 0.0f && isfinite(p->correction_temperature)))
        return param_fail(err, err_size, "correction_temperature = %g must be finite and > 0",
                    (double)p->correction_temperature);
    if (!(p->correction_time > 0.0f && p->correction_time < 1.0f))
        return param_fail(err, err_size, "correction_time = %g must be in (0, 1)", (double)p->correction_time);
    return NCTMC_OK;
}

static nctmc_status check_fixed(const nctmc_model *m, const nctmc_sample_params *p,
                                sample_run *run, char *err, size_t err_size)
{
    run->has_fixed = p->fixed_mask != NULL;
    if (!p->fixed_mask)
        return NCTMC_OK;
    if (!p->fixed_tokens)
        return param_fail(err, err_size, "fixed_mask is set but fixed_tokens is NULL");
    int32_t n_data = fp_n_data(&m->fp);
    for (int64_t r = 0; r < run->n_rows; r++) {
        if (!p->fixed_mask[r])
            continue;
        int32_t x = p->fixed_tokens[r];
        if (fp_mask(&m->fp) >= 0 && x == fp_mask(&m->fp))
            return param_fail(err, err_size, "fixed_tokens[%lld] = %d is the mask token; only data tokens "
                        "[0, %d) can be fixed",
                        (long long)r, x, n_data);
        if (x < 0 || x >= n_data)
            return param_fail(err, err_size, "fixed_tokens[%lld] = %d is out of range of the data tokens [0, %d)",
                        (long long)r, x, n_data);
    }
    return NCTMC_OK;
}

static nctmc_status check_conditioning(const nctmc_model *m, const nctmc_sample_params *p,
                                       sample_run *run, char *err, size_t err_size)
{
    int32_t n_classes = m->config.n_classes;
    if (p->labels && n_classes == 0)
        return param_fail(err, err_size, "labels were given but the model has no classes");
    if (p->labels)
        for (int32_t b = 0; b < p->batch; b++)
            if (p->labels[b] < 0 || p->labels[b] > n_classes)
                return param_fail(err, err_size, "labels[%d] = %d is out of range [0, %d] (%d = null label)", b,
                            p->labels[b], n_classes, n_classes);
    if ((int)p->cfg_rule < NCTMC_CFG_SEPARATE || (int)p->cfg_rule > NCTMC_CFG_RATES)
        return param_fail(err, err_size, "cfg_rule = %d is not a nctmc_cfg_rule", (int)p->cfg_rule);
    if (!(isfinite(p->cfg_scale) && p->cfg_scale >= 0.0f))
        return param_fail(err, err_size, "cfg_scale = %g must be finite and >= 0", (double)p->cfg_scale);
    if (p->cfg_scale != 1.0f && n_classes == 0)
        return param_fail(err, err_size, "cfg_scale = %g needs a class-conditional model (this one has no "
                    "classes); use 1",
                    (double)p->cfg_scale);
    run->cfg = p->cfg_scale != 1.0f;
    return NCTMC_OK;
}

nctmc_status sampler_check_params(const nctmc_sampler *s, const nctmc_sample_params *p,
                                  sample_run *run, char *err, size_t err_size)
{
    if (!p)
        return param_fail(err, err_size, "params is NULL");
    nctmc_sample_params_init(&run->params);
    nctmc_status st =
        abi_read(p, &run->params, sizeof run->params, &abi_sample_params, err, err_size);
    if (st != NCTMC_OK)
        return st;
    p = run->p = &run->params;
    st = check_shape(s, p, run, err, err_size);
    if (st == NCTMC_OK)
        st = check_schedule(p, err, err_size);
    if (st == NCTMC_OK)
        st = check_correction(p, err, err_size);
    if (st == NCTMC_OK)
        st = check_conditioning(s->model, p, run, err, err_size);
    if (st == NCTMC_OK)
        st = check_fixed(s->model, p, run, err, err_size);
    return st;
}

float sampler_grid_time(nctmc_time_grid grid, float t_max, float t_min, int32_t n_steps,
                        int32_t k)
{
    if (k <= 0)
        return t_max;
    if (k >= n_steps)
        return t_min;
    double f = (double)k / (double)n_steps, hi = (double)t_max, lo = (double)t_min;
    double t = grid == NCTMC_GRID_GEOMETRIC ? hi * exp(f * log(lo / hi)) : hi + (lo - hi) * f;
    return (float)t;
}
