/*
 * model_tokenizer.c — the tokenizer a model carries (nctmc_model_set_tokenizer,
 * nctmc_model_get_tokenizer): the model keeps its own copy, checked against
 * its configuration by the text layer's tokenizer_check_model().
 */
#include "model.h"
#include "text/tokenizer.h"

NCTMC_API nctmc_status nctmc_model_set_tokenizer(nctmc_model *model, const nctmc_tokenizer *tok)
{
    if (!model)
        return NCTMC_ERR_INVALID_ARGUMENT;
    nctmc_tokenizer *copy = NULL;
    if (tok) {
        nctmc_status st = tokenizer_check_model(tok, &model->config, NCTMC_ERR_INVALID_ARGUMENT,
                                                model->last_error, sizeof model->last_error);
        if (st != NCTMC_OK)
            return st;
        if (tokenizer_clone(&model->ctx->alloc, tok, &copy) != NCTMC_OK)
            return fail_format(model->last_error, sizeof model->last_error,
                               NCTMC_ERR_OUT_OF_MEMORY, "out of memory copying the tokenizer");
    }
    nctmc_tokenizer_free(model->tokenizer);
    model->tokenizer = copy;
    model_clear_error(model);
    return NCTMC_OK;
}

NCTMC_API const nctmc_tokenizer *nctmc_model_get_tokenizer(const nctmc_model *model)
{
    return model ? model->tokenizer : NULL;
}
