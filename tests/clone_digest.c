/*
 * clone_digest.c — prints a digest of everything a model pass computes
 * (outputs, loss, every gradient) on fixed random inputs. tests/meson.build
 * builds it twice: once as the library ships (hot loops also compiled for
 * AVX2 and picked at load time) and once with -DNCTMC_NO_VECTOR_CLONES
 * (baseline x86-64 only); the test 'vector_clones_agree' requires the two
 * digests to be equal, i.e. the variants compute the same bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "test_util.h"

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

int main(void)
{
    nctmc_context *ctx = NULL;
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 2;
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    cfg.vocab_size = 67;
    cfg.seq_len = 33;
    cfg.n_layers = 2;
    cfg.d_model = 48;
    cfg.n_heads = 3;
    cfg.cond_dim = 16;
    cfg.n_classes = 2;
    cfg.process = NCTMC_PROCESS_MIXTURE;
    nctmc_model *m = NULL;
    if (nctmc_context_create(&cp, &ctx) != NCTMC_OK || nctmc_model_create(ctx, &cfg, &m) != NCTMC_OK) {
        fprintf(stderr, "clone_digest: %s\n", nctmc_context_last_error(ctx));
        return 1;
    }
    nctmc_backend *be = ctx->backend;
    size_t bytes = m->slab_floats * sizeof(float);
    float *host = calloc(m->slab_floats, sizeof(float));
    test_rng rng = test_rng_seed(17);
    for (int32_t k = 0; k < m->n_tensors; k++)
        test_fill_uniform(&rng, host + m->tensors[k].offset, (size_t)m->tensors[k].n_elements,
                          -0.5f, 0.5f);
    be->ops->upload(be, m->weights, host, bytes);

    enum { B = 4, L = 33 };
    int32_t x_t[B * L], x_0[B * L], labels[B] = {0, 1, 2, 1};
    float times[B] = {0.05f, 0.3f, 0.7f, 0.97f};
    for (int i = 0; i < B * L; i++) {
        x_0[i] = test_randint(&rng, 66);
        x_t[i] = i % 3 ? x_0[i] : test_randint(&rng, 67);
    }
    dit_workspace *ws = NULL;
    char err[256];
    float *grads = be->ops->alloc(be, bytes);
    double loss = 0.0;
    dit_batch batch = {B, L, x_t, times, labels, x_0, NULL};
    if (dit_workspace_create(m, be, B, L, DIT_WS_TRAINING, &ws, err, sizeof err) != NCTMC_OK ||
        dit_loss(m, ws, &batch, grads, false, &loss, err, sizeof err) != NCTMC_OK) {
        fprintf(stderr, "clone_digest: %s\n", err);
        return 1;
    }
    be->ops->download(be, host, grads, bytes);
    uint64_t h = fnv1a(0xCBF29CE484222325ull, &loss, sizeof loss);
    h = fnv1a(h, host, bytes);

    float log_rate[B * L], *logp = malloc(sizeof(float) * B * L * 67);
    nctmc_forward_params fp;
    nctmc_forward_params_init(&fp);
    fp.batch = B;
    fp.length = L;
    fp.tokens = x_t;
    fp.times = times;
    fp.labels = labels;
    fp.log_rate = log_rate;
    fp.jump_logprobs = logp;
    if (nctmc_model_forward(m, &fp) != NCTMC_OK) {
        fprintf(stderr, "clone_digest: %s\n", nctmc_model_last_error(m));
        return 1;
    }
    h = fnv1a(h, log_rate, sizeof log_rate);
    h = fnv1a(h, logp, sizeof(float) * B * L * 67);
    printf("%016llx\n", (unsigned long long)h);

    free(logp);
    free(host);
    be->ops->free(be, grads);
    dit_workspace_free(ws);
    nctmc_model_free(m);
    nctmc_context_free(ctx);
    return 0;
}
