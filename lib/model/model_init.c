/*
 * model_init.c — deterministic weight initialisation.
 *
 * Element e of tensor k draws from Philox keyed by the seed at counter
 * (NCTMC_RNG_INIT, k, e / 4, 0), word e % 4: the weights are a pure function
 * of (config, seed), identical on every backend and thread count.
 */
#include <math.h>
#include <string.h>

#include "model.h"
#include "math/philox.h"

static void init_uniform(float *dst, int64_t n, int32_t tensor_index, double bound,
                         uint64_t seed)
{
    for (int64_t e = 0; e < n; e += 4) {
        philox4x32 counter = {{NCTMC_RNG_INIT, (uint32_t)tensor_index, (uint32_t)(e / 4),
                               (uint32_t)((uint64_t)(e / 4) >> 32)}};
        philox4x32 r = philox4x32_10(counter, seed);
        for (int w = 0; w < 4 && e + w < n; w++) {
            double u = (double)philox_uniform(r.v[w]);
            dst[e + w] = (float)((2.0 * u - 1.0) * bound);
        }
    }
}

void model_init_weights(const nctmc_model *model, float *host_slab)
{
    memset(host_slab, 0, model->slab_floats * sizeof(float));
    for (int32_t k = 0; k < model->n_tensors; k++) {
        const model_tensor *t = &model->tensors[k];
        float *dst = host_slab + t->offset;
        switch (t->init) {
        case MODEL_INIT_ZERO:
            break;
        case MODEL_INIT_ONE:
            for (int64_t e = 0; e < t->n_elements; e++)
                dst[e] = 1.0f;
            break;
        case MODEL_INIT_UNIFORM:
            init_uniform(dst, t->n_elements, k, 1.0 / sqrt((double)t->shape[1]),
                         model->config.seed);
            break;
        }
    }
}
