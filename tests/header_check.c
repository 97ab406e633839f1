/*
 * header_check.c — uses every type, constant and init macro of nctmc.h in a
 * way that must compile as C89, C99, C11, C17 and C2x and as C++11 .. C++20
 * (tests/check_header.py compiles it with -pedantic -Werror; it is never
 * linked). Bindings and host programs of any of these standards include the
 * header as it is.
 */
#include "nctmc.h"

static int32_t on_step(int32_t step, int32_t n_steps, const int32_t *tokens, int32_t batch,
                       int32_t length, void *user_data)
{
    (void)tokens;
    (void)batch;
    (void)length;
    (void)user_data;
    return step < n_steps;
}

static int32_t on_progress(int64_t done, int64_t total, void *user_data)
{
    (void)user_data;
    return done < total;
}

static void on_log(nctmc_log_level level, const char *message, void *user_data)
{
    (void)level;
    (void)message;
    (void)user_data;
}

int main(void)
{
    nctmc_context_params cp;
    nctmc_model_config mc;
    nctmc_tensor_info ti;
    nctmc_forward_params fp;
    nctmc_dataset_info di;
    nctmc_trainer_params tp;
    nctmc_train_stats ts;
    nctmc_trainer_state st;
    nctmc_eval_params ep;
    nctmc_eval_result er;
    nctmc_sampler_params spp;
    nctmc_sample_params sp;
    nctmc_infill_params ip;
    nctmc_text_range range;
    nctmc_tokenizer_kind kind = NCTMC_TOKENIZER_IMAGE;
    nctmc_status status = NCTMC_OK;
    status |= nctmc_context_params_init(&cp);
    status |= nctmc_model_config_init(&mc);
    status |= nctmc_tensor_info_init(&ti);
    status |= nctmc_forward_params_init(&fp);
    status |= nctmc_dataset_info_init(&di);
    status |= nctmc_trainer_params_init(&tp);
    status |= nctmc_train_stats_init(&ts);
    status |= nctmc_trainer_state_init(&st);
    status |= nctmc_eval_params_init(&ep);
    status |= nctmc_eval_result_init(&er);
    status |= nctmc_sampler_params_init(&spp);
    status |= nctmc_sample_params_init(&sp);
    status |= nctmc_infill_params_init(&ip);
    range.start = 0;
    range.end = 0;
    ip.sample = &sp;
    ip.ranges_out = &range;
    cp.log_fn = on_log;
    cp.log_level = NCTMC_LOG_ERROR;
    mc.process = NCTMC_PROCESS_MIXTURE;
    mc.schedule = NCTMC_SCHEDULE_COSINE;
    ep.progress = on_progress;
    sp.method = NCTMC_SAMPLE_POSTERIOR;
    sp.grid = NCTMC_GRID_GEOMETRIC;
    sp.final_denoise = 0;
    sp.callback = on_step;
    ts.skipped = 1;
    return status == NCTMC_OK && kind == NCTMC_TOKENIZER_IMAGE ? 0 : 1;
}
