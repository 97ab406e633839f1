/*
 * embed.c — the smallest program that samples from a trained model, using
 * nothing but the installed header <nctmc.h>:
 *
 *   embed CHECKPOINT
 *
 * draws one sequence (or, for a class-conditional model, one per class) by
 * tau-leaping and prints it as the model's own tokenizer decodes it.
 */
#include <stdio.h>
#include <stdlib.h>

#include <nctmc.h>

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "embed: %s: %s\n", what, why);
    return 1;
}

/* Prints one sample as text, or as token ids when the model has no
 * tokenizer. */
static void print_sample(const nctmc_model *model, const int32_t *tokens, int32_t length)
{
    /* decode records its errors in the tokenizer: work on a copy */
    nctmc_tokenizer *tok = NULL;
    if (nctmc_model_get_tokenizer(model) != NULL)
        nctmc_tokenizer_clone(nctmc_model_get_tokenizer(model), &tok);
    size_t n_bytes = 0;
    char *text = NULL;
    if (tok != NULL) {
        nctmc_tokenizer_decode(tok, tokens, (size_t)length, NULL, 0, &n_bytes);
        text = malloc(n_bytes + 1);
    }
    if (text != NULL &&
        nctmc_tokenizer_decode(tok, tokens, (size_t)length, text, n_bytes + 1, &n_bytes) ==
            NCTMC_OK) {
        printf("%s\n", text);
    } else {
        for (int32_t i = 0; i < length; i++)
            printf("%d ", (int)tokens[i]);
        printf("\n");
    }
    free(text);
    nctmc_tokenizer_free(tok);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: embed CHECKPOINT\n");
        return 2;
    }
    nctmc_context *ctx = NULL;
    if (nctmc_context_create(NULL, &ctx) != NCTMC_OK)
        return fail("context", "cannot create");
    nctmc_model *model = NULL;
    if (nctmc_model_load(ctx, argv[1], &model) != NCTMC_OK)
        return fail(argv[1], nctmc_context_last_error(ctx));

    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(model, &cfg);
    int32_t batch = cfg.n_classes > 0 ? cfg.n_classes : 1;

    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = batch;
    nctmc_sampler *sampler = NULL;
    if (nctmc_sampler_create(model, &sp, &sampler) != NCTMC_OK)
        return fail("sampler", nctmc_context_last_error(ctx));

    int32_t *labels = malloc((size_t)batch * sizeof *labels);
    int32_t *tokens = malloc((size_t)batch * (size_t)cfg.seq_len * sizeof *tokens);
    if (labels == NULL || tokens == NULL)
        return fail("memory", "out of memory");
    for (int32_t c = 0; c < batch; c++)
        labels[c] = c;

    nctmc_sample_params p;
    nctmc_sample_params_init(&p);  /* tau-leaping, 128 steps, whole length */
    p.batch = batch;
    p.labels = cfg.n_classes > 0 ? labels : NULL;
    p.tokens_out = tokens;
    if (nctmc_sample(sampler, &p) != NCTMC_OK)
        return fail("sample", nctmc_sampler_last_error(sampler));

    for (int32_t b = 0; b < batch; b++) {
        if (cfg.n_classes > 0)
            printf("class %d:\n", (int)b);
        print_sample(model, tokens + (size_t)b * cfg.seq_len, cfg.seq_len);
    }
    free(tokens);
    free(labels);
    nctmc_sampler_free(sampler);
    nctmc_model_free(model);
    nctmc_context_free(ctx);
    return 0;
}
