/*
 * model_tensors.c — the parameter table: every tensor's name (as the SEDD,
 * MDLM and GIDD codebases spell it, so checkpoints convert by renaming only),
 * shape and place in the one parameter slab.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

_Static_assert((int)NCTMC_PROCESS_UNIFORM == (int)NCTMC_FP_UNIFORM &&
                   (int)NCTMC_PROCESS_MASKED == (int)NCTMC_FP_MASKED &&
                   (int)NCTMC_PROCESS_MIXTURE == (int)NCTMC_FP_MIXTURE,
               "nctmc_process and nctmc_fp process codes must agree");
_Static_assert((int)NCTMC_SCHEDULE_LINEAR == (int)NCTMC_FP_LINEAR &&
                   (int)NCTMC_SCHEDULE_COSINE == (int)NCTMC_FP_COSINE &&
                   (int)NCTMC_SCHEDULE_LOGLINEAR == (int)NCTMC_FP_LOGLINEAR,
               "nctmc_schedule and nctmc_fp schedule codes must agree");

/* Each tensor starts on a 64-byte boundary so kernels see aligned rows. */
#define TENSOR_ALIGN_FLOATS 16

enum { TENSORS_FIXED = 14, TENSORS_PER_BLOCK = 10 };

typedef struct table_builder {
    model_tensor *tensors;
    int32_t count;
    size_t floats;
    int64_t params;
} table_builder;

static void add_tensor(table_builder *tb, const char *name, model_init_kind init, int32_t n_dims,
                       int64_t d0, int64_t d1)
{
    model_tensor *t = &tb->tensors[tb->count++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->init = init;
    t->n_dims = n_dims;
    memset(t->shape, 0, sizeof t->shape);
    t->shape[0] = d0;
    t->shape[1] = n_dims > 1 ? d1 : 0;
    t->n_elements = n_dims > 1 ? d0 * d1 : d0;
    t->offset = tb->floats;
    size_t padded = ((size_t)t->n_elements + TENSOR_ALIGN_FLOATS - 1) / TENSOR_ALIGN_FLOATS *
                    TENSOR_ALIGN_FLOATS;
    tb->floats += padded;
    tb->params += t->n_elements;
}

static void add_block(table_builder *tb, const model_dims *m, int32_t k)
{
    char name[NCTMC_TENSOR_NAME_MAX];
#define BLOCK_TENSOR(suffix, init, nd, a, b)                             \
    do {                                                                 \
        snprintf(name, sizeof name, "blocks.%d." suffix, (int)k);       \
        add_tensor(tb, name, init, nd, a, b);                            \
    } while (0)
    BLOCK_TENSOR("norm1.weight", MODEL_INIT_ONE, 1, m->d, 0);
    BLOCK_TENSOR("attn_qkv.weight", MODEL_INIT_UNIFORM, 2, 3 * (int64_t)m->d, m->d);
    BLOCK_TENSOR("attn_out.weight", MODEL_INIT_UNIFORM, 2, m->d, m->d);
    BLOCK_TENSOR("norm2.weight", MODEL_INIT_ONE, 1, m->d, 0);
    BLOCK_TENSOR("mlp.0.weight", MODEL_INIT_UNIFORM, 2, m->F, m->d);
    BLOCK_TENSOR("mlp.0.bias", MODEL_INIT_ZERO, 1, m->F, 0);
    BLOCK_TENSOR("mlp.2.weight", MODEL_INIT_UNIFORM, 2, m->d, m->F);
    BLOCK_TENSOR("mlp.2.bias", MODEL_INIT_ZERO, 1, m->d, 0);
    BLOCK_TENSOR("adaLN_modulation.weight", MODEL_INIT_ZERO, 2, 6 * (int64_t)m->d, m->c);
    BLOCK_TENSOR("adaLN_modulation.bias", MODEL_INIT_ZERO, 1, 6 * (int64_t)m->d, 0);
#undef BLOCK_TENSOR
}

nctmc_status model_tensor_table(const nctmc_allocator *alloc, const model_dims *m,
                                model_tensor **tensors, int32_t *n_tensors, size_t *slab_floats,
                                int64_t *n_params)
{
    size_t capacity = TENSORS_FIXED + (size_t)m->n_layers * TENSORS_PER_BLOCK;
    table_builder tb = {mem_calloc(alloc, capacity, sizeof(model_tensor)), 0, 0, 0};
    if (!tb.tensors)
        return NCTMC_ERR_OUT_OF_MEMORY;
    add_tensor(&tb, "vocab_embed.embedding", MODEL_INIT_UNIFORM, 2, m->V, m->d);
    add_tensor(&tb, "sigma_map.mlp.0.weight", MODEL_INIT_UNIFORM, 2, m->c, NCTMC_TIME_FEATURES);
    add_tensor(&tb, "sigma_map.mlp.0.bias", MODEL_INIT_ZERO, 1, m->c, 0);
    add_tensor(&tb, "sigma_map.mlp.2.weight", MODEL_INIT_UNIFORM, 2, m->c, m->c);
    add_tensor(&tb, "sigma_map.mlp.2.bias", MODEL_INIT_ZERO, 1, m->c, 0);
    if (m->n_labels > 0)
        add_tensor(&tb, "label_embed.embedding", MODEL_INIT_UNIFORM, 2, m->n_labels, m->c);
    for (int32_t k = 0; k < m->n_layers; k++)
        add_block(&tb, m, k);
    add_tensor(&tb, "output_layer.norm_final.weight", MODEL_INIT_ONE, 1, m->d, 0);
    add_tensor(&tb, "output_layer.adaLN_modulation.weight", MODEL_INIT_ZERO, 2, 2 * (int64_t)m->d, m->c);
    add_tensor(&tb, "output_layer.adaLN_modulation.bias", MODEL_INIT_ZERO, 1, 2 * (int64_t)m->d, 0);
    add_tensor(&tb, "output_layer.linear.weight", MODEL_INIT_ZERO, 2, m->V, m->d);
    add_tensor(&tb, "output_layer.linear.bias", MODEL_INIT_ZERO, 1, m->V, 0);
    add_tensor(&tb, "output_layer.rate_head.weight", MODEL_INIT_ZERO, 2, 1, m->d);
    add_tensor(&tb, "output_layer.rate_head.bias", MODEL_INIT_ZERO, 1, 1, 0);
    *tensors = tb.tensors;
    *n_tensors = tb.count;
    *slab_floats = tb.floats;
    *n_params = tb.params;
    return NCTMC_OK;
}

int32_t model_find_tensor(const nctmc_model *model, const char *name)
{
    for (int32_t k = 0; k < model->n_tensors; k++)
        if (strcmp(model->tensors[k].name, name) == 0)
            return k;
    return -1;
}

/* The table's order is fixed above, so a view is bound by walking it. */
void model_view_bind(const nctmc_model *model, float *slab, model_block_view *blocks,
                     model_view *view)
{
    const model_tensor *t = model->tensors;
    int32_t k = 0;
#define NEXT() (slab + t[k++].offset)
    view->vocab_embed = NEXT();
    view->time_w1 = NEXT();
    view->time_b1 = NEXT();
    view->time_w2 = NEXT();
    view->time_b2 = NEXT();
    view->label_embed = model->dims.n_labels > 0 ? NEXT() : NULL;
    for (int32_t b = 0; b < model->dims.n_layers; b++) {
        model_block_view *bv = &blocks[b];
        bv->norm1_w = NEXT();
        bv->qkv_w = NEXT();
        bv->out_w = NEXT();
        bv->norm2_w = NEXT();
        bv->mlp0_w = NEXT();
        bv->mlp0_b = NEXT();
        bv->mlp2_w = NEXT();
        bv->mlp2_b = NEXT();
        bv->ada_w = NEXT();
        bv->ada_b = NEXT();
    }
    view->blocks = blocks;
    view->final_norm_w = NEXT();
    view->final_ada_w = NEXT();
    view->final_ada_b = NEXT();
    view->out_w = NEXT();
    view->out_b = NEXT();
    view->rate_w = NEXT();
    view->rate_b = NEXT();
#undef NEXT
}
