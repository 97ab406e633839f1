/*
 * test_load_progress.c — nctmc_load_params.progress through the public
 * library: for a mapped (AUTO), a lazily mapped, a copied and a bf16
 * checkpoint load, the calls start at 0, never go back, end at done ==
 * total, and the model equals one loaded without a callback; stopping at
 * the first, a middle and the last call returns NCTMC_ERR_CANCELLED with no
 * model, the reason in the context, and every allocation made through the
 * context's allocator hook given back (run it under ASan too, for the
 * allocations the hook does not see and for the maps).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_files.h"
#include "test_util.h"
#include "tiny_model.h"

#define MAX_CALLS 4096

typedef struct calls {
    int64_t done[MAX_CALLS];
    int64_t total[MAX_CALLS];
    int n;
    int stop_at; /* the call that returns 0; -1: none */
} calls;

static int32_t on_progress(int64_t done, int64_t total, void *user_data)
{
    calls *c = user_data;
    if (c->n < MAX_CALLS) {
        c->done[c->n] = done;
        c->total[c->n] = total;
    }
    return c->n++ == c->stop_at ? 0 : 1;
}

/* Live allocations through the context's hook. */
static long live_allocs;

static void *count_alloc(size_t size, size_t alignment, void *user_data)
{
    (void)user_data;
    size_t rounded = (size + alignment - 1) / alignment * alignment;
    void *p = aligned_alloc(alignment, rounded);
    if (p)
        live_allocs++;
    return p;
}

static void count_free(void *p, void *user_data)
{
    (void)user_data;
    live_allocs--;
    free(p);
}

static nctmc_context *counting_context(void)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 1;
    p.alloc_fn = count_alloc;
    p.free_fn = count_free;
    nctmc_context *ctx = NULL;
    CHECK(nctmc_context_create(&p, &ctx) == NCTMC_OK, "context");
    return ctx;
}

static nctmc_status load(nctmc_context *ctx, const char *path, nctmc_load_mapping mapping,
                         calls *c, nctmc_model **out)
{
    nctmc_load_params lp;
    nctmc_load_params_init(&lp);
    lp.mapping = mapping;
    if (c) {
        lp.progress = on_progress;
        lp.user_data = c;
    }
    return nctmc_model_load_ex(ctx, path, &lp, out);
}

/* The same weights, tensor by tensor. */
static int same_weights(const nctmc_model *a, const nctmc_model *b)
{
    for (int32_t k = 0; k < nctmc_model_n_tensors(a); k++) {
        nctmc_tensor_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (nctmc_model_tensor_info(a, k, &info) != NCTMC_OK)
            return 0;
        size_t n = (size_t)info.n_elements;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        int same = x && y && nctmc_model_read_tensor(a, info.name, x, info.n_elements) == NCTMC_OK &&
                   nctmc_model_read_tensor(b, info.name, y, info.n_elements) == NCTMC_OK &&
                   memcmp(x, y, n * sizeof *x) == 0;
        free(x);
        free(y);
        if (!same)
            return 0;
    }
    return 1;
}

static void check_one(nctmc_context *ctx, const char *path, nctmc_load_mapping mapping,
                      int want_mapped, const char *what)
{
    nctmc_model *plain = NULL;
    CHECK(load(ctx, path, mapping, NULL, &plain) == NCTMC_OK, "%s: plain load: %s", what,
          nctmc_context_last_error(ctx));

    calls *c = calloc(1, sizeof *c);
    c->stop_at = -1;
    nctmc_model *m = NULL;
    CHECK(load(ctx, path, mapping, c, &m) == NCTMC_OK && m, "%s: load: %s", what,
          nctmc_context_last_error(ctx));
    CHECK(nctmc_model_is_mapped(m) == want_mapped, "%s: mapped %d", what,
          nctmc_model_is_mapped(m));
    CHECK(m && plain && same_weights(m, plain), "%s: weights differ", what);
    int n = c->n;
    CHECK(n >= 3 && n <= MAX_CALLS, "%s: %d calls", what, n);
    CHECK(c->done[0] == 0, "%s: first call at %lld", what, (long long)c->done[0]);
    for (int i = 0; i < n && i < MAX_CALLS; i++) {
        CHECK(c->total[i] == c->total[0] && c->total[i] > 0, "%s: total changed", what);
        CHECK(i == 0 || c->done[i] >= c->done[i - 1], "%s: call %d went back (%lld < %lld)",
              what, i, (long long)c->done[i], (long long)c->done[i - 1]);
        CHECK(c->done[i] <= c->total[i], "%s: past the total", what);
    }
    CHECK(n > 0 && c->done[n - 1] == c->total[n - 1], "%s: ended at %lld of %lld", what,
          (long long)c->done[n - 1], (long long)c->total[n - 1]);
    /* a middle call strictly inside: the load reports its work as it goes */
    int inside = 0;
    for (int i = 1; i + 1 < n; i++)
        inside |= c->done[i] > 0 && c->done[i] < c->total[i];
    CHECK(inside, "%s: no call between the start and the end", what);
    nctmc_model_free(m);
    nctmc_model_free(plain);

    int stops[3] = {0, n / 2, n - 1};
    for (int s = 0; s < 3; s++) {
        long before = live_allocs;
        memset(c, 0, sizeof *c);
        c->stop_at = stops[s];
        nctmc_model *out = (nctmc_model *)(uintptr_t)1;
        nctmc_status st = load(ctx, path, mapping, c, &out);
        CHECK(st == NCTMC_ERR_CANCELLED, "%s: stop at call %d: %s", what, stops[s],
              nctmc_status_string(st));
        CHECK(out == NULL, "%s: stop at call %d left a model", what, stops[s]);
        CHECK(c->n == stops[s] + 1, "%s: %d calls after stopping at %d", what, c->n, stops[s]);
        CHECK(strstr(nctmc_context_last_error(ctx), "progress callback") != NULL,
              "%s: message: %s", what, nctmc_context_last_error(ctx));
        CHECK(live_allocs == before, "%s: stop at call %d: %ld allocations not given back",
              what, stops[s], live_allocs - before);
        nctmc_model_free(out);
    }
    free(c);
}

int main(void)
{
    char dir[512], f32[600], bf16[600];
    CHECK(test_make_temp_dir(dir, sizeof dir), "temp dir");
    test_path(f32, sizeof f32, dir, "f32.safetensors");
    test_path(bf16, sizeof bf16, dir, "bf16.safetensors");

    nctmc_context *ctx = counting_context();
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    CHECK(nctmc_model_save(m, f32) == NCTMC_OK, "save: %s", nctmc_model_last_error(m));
    nctmc_model *reduced = NULL;
    CHECK(nctmc_model_convert(m, NCTMC_WEIGHT_BF16, &reduced) == NCTMC_OK, "convert: %s",
          nctmc_model_last_error(m));
    CHECK(nctmc_model_save(reduced, bf16) == NCTMC_OK, "save bf16");
    nctmc_model_free(reduced);
    nctmc_model_free(m);

    check_one(ctx, f32, NCTMC_LOAD_MAP_AUTO, 1, "mapped");
    check_one(ctx, f32, NCTMC_LOAD_MAP_LAZY, 1, "lazy");
    check_one(ctx, f32, NCTMC_LOAD_COPY, 0, "copied");
    check_one(ctx, bf16, NCTMC_LOAD_MAP_AUTO, 0, "bf16");
    check_one(ctx, bf16, NCTMC_LOAD_MAP_LAZY, 0, "bf16 lazy");

    /* no callback: nctmc_model_load() as before */
    nctmc_model *again = NULL;
    CHECK(nctmc_model_load(ctx, f32, &again) == NCTMC_OK, "load without params");
    nctmc_model_free(again);
    nctmc_context_free(ctx);
    CHECK(live_allocs == 0, "%ld allocations not given back", live_allocs);
    test_remove_dir(dir);
    return test_finish("test_load_progress");
}
