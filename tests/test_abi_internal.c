/*
 * test_abi_internal.c — the versioned-struct helpers of lib/base/abi.c (the
 * contract itself, through every call of libnctmc.so, is test_abi.c):
 *   - the library's table of every struct (name, first published size, the
 *     end of the fields it knows) is the one abi_layouts.h derives from
 *     nctmc.h and the release history;
 *   - the first published size lies where the layouts say (below it the pre
 *     layout, at most the old one), no known field past the current layout;
 *   - with a history in which the last field was appended after the first
 *     release (the library's own helper with that first size), an old
 *     caller's missing fields take their defaults and its output is
 *     truncated to its size.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_layouts.h"
#include "base/abi.h"
#include "nctmc.h"
#include "test_util.h"

typedef struct abi_case {
    const abi_struct *d;      /* the library's */
    const abi_sizes *mine;    /* abi_layouts.h's */
    size_t pre_size, old_size, now_size, new_size;
    size_t last_offset;
    init_fn init;
} abi_case;

#define CASE(name)                                                                     \
    {&abi_##name, &sizes_##name, sizeof(name##_pre), sizeof(name##_old),                 \
     sizeof(name##_now), sizeof(name##_new), name##_last_offset, init_##name}

/* test_abi.c's cases, one per call that takes a struct (a struct taken by
 * several calls is checked as often as before the split) */
static const abi_case cases[] = {
    CASE(context_params), /* nctmc_context_create */
    CASE(model_config),   /* nctmc_model_create */
    CASE(model_config),   /* nctmc_model_get_config */
    CASE(tensor_info),    /* nctmc_model_tensor_info */
    CASE(forward_params), /* nctmc_model_forward */
    CASE(forward_params), /* nctmc_model_forward_ex */
    CASE(dataset_info),   /* nctmc_dataset_get_info */
    CASE(trainer_params), /* nctmc_trainer_create */
    CASE(trainer_params), /* nctmc_trainer_resume */
    CASE(trainer_params), /* nctmc_trainer_get_params */
    CASE(train_stats),    /* nctmc_trainer_step */
    CASE(trainer_state),  /* nctmc_trainer_get_state */
    CASE(eval_params),    /* nctmc_eval (params) */
    CASE(eval_result),    /* nctmc_eval (result) */
    CASE(sampler_params), /* nctmc_sampler_create */
    CASE(sample_params),  /* nctmc_sample */
    CASE(reader),         /* nctmc_model_load_reader */
    CASE(load_params),    /* nctmc_model_load_ex */
    CASE(infill_params),  /* nctmc_infill */
};

/* ---- byte helpers ----------------------------------------------------------- */

#define GUARD 64
#define PATTERN 0xAB

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t k = 0; k < n; k++)
        if (p[k] != v)
            return false;
    return true;
}

static size_t size_of(const void *p)
{
    size_t size;
    memcpy(&size, p, sizeof size);
    return size;
}

static void set_size(void *p, size_t size)
{
    memcpy(p, &size, sizeof size);
}

/* `size` bytes at the very end of a heap block of exactly that size. */
static unsigned char *exact_block(size_t size)
{
    unsigned char *p = malloc(size);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, PATTERN, size);
    return p;
}

/* ---- the checks ------------------------------------------------------------- */

/* The library's table says what abi_layouts.h says (test_abi.c checks every
 * call against abi_layouts.h's sizes). */
static void check_table(const abi_case *c)
{
    CHECK(strcmp(c->d->name, c->mine->name) == 0 && c->d->first_size == c->mine->first_size &&
              c->d->known_size == c->mine->known_size,
          "%s: the library's sizes (first %zu, known %zu) are abi_layouts.h's %s (first %zu, "
          "known %zu)",
          c->d->name, c->d->first_size, c->d->known_size, c->mine->name, c->mine->first_size,
          c->mine->known_size);
}

/* The library's helper, run with a history in which the fields after the
 * older layout (abi_layouts.h) were appended after the first release: old
 * callers get their defaults, and an output is cut at their size. */
static void check_history(const abi_case *c)
{
    const char *name = c->d->name;
    abi_struct older = *c->d;
    size_t old = c->old_size, now = c->now_size;
    older.first_size = old;
    unsigned char *defaults = exact_block(now);
    c->init(defaults, now);

    unsigned char *buf = exact_block(old + GUARD);
    CHECK(abi_init(buf, old, defaults, &older) == NCTMC_OK && size_of(buf) == old &&
              memcmp(buf + sizeof(size_t), defaults + sizeof(size_t), old - sizeof(size_t)) ==
                  0 &&
              all_bytes(buf + old, GUARD, PATTERN),
          "%s: init of the old layout fills its %zu bytes with the defaults", name, old);
    CHECK(abi_init(buf, older.first_size - 1, defaults, &older) == NCTMC_ERR_INVALID_ARGUMENT,
          "%s: below the older first size", name);

    /* an old caller's struct, every byte of it distinct from the defaults */
    unsigned char *caller = exact_block(old);
    for (size_t k = 0; k < old; k++)
        caller[k] = (unsigned char)(defaults[k] ^ 0x3C);
    set_size(caller, old);
    unsigned char *full = exact_block(now);
    memcpy(full, defaults, now);
    char err[512];
    CHECK(abi_read(caller, full, now, &older, err, sizeof err) == NCTMC_OK, "%s: read: %s",
          name, err);
    CHECK(size_of(full) == now &&
              memcmp(full + sizeof(size_t), caller + sizeof(size_t), old - sizeof(size_t)) == 0 &&
              memcmp(full + old, defaults + old, now - old) == 0,
          "%s: an old caller's fields are read, the missing ones are the defaults", name);

    memset(buf, PATTERN, old + GUARD);
    set_size(buf, old);
    abi_write(buf, full, &older);
    CHECK(size_of(buf) == old &&
              memcmp(buf + sizeof(size_t), full + sizeof(size_t), old - sizeof(size_t)) == 0 &&
              all_bytes(buf + old, GUARD, PATTERN),
          "%s: an output is cut at the old caller's %zu bytes", name, old);
    CHECK(abi_check_output(buf, &older, err, sizeof err) == NCTMC_OK, "%s: old output ok", name);
    free(defaults);
    free(buf);
    free(caller);
    free(full);
}

/* The first published size of a struct is its whole current layout until a
 * release appends a field, and then what LAYOUTS_APPENDED says it was (the
 * pre layout plus one field: at most the old layout); no field lies past
 * what the library knows. */
static void check_sizes(const abi_case *c)
{
    bool appended = c->d->first_size < c->d->known_size;
    bool pre_ok = appended ? c->pre_size < c->d->first_size && c->d->first_size <= c->old_size
                           : c->pre_size == c->old_size && c->old_size < c->d->first_size &&
                                 c->d->first_size == c->d->known_size;
    CHECK(pre_ok && c->d->known_size <= c->now_size && c->d->known_size > c->last_offset &&
              c->new_size > c->now_size,
          "%s: sizes pre %zu, first %zu, known %zu, old %zu, now %zu, new %zu (declared with "
          "%s)",
          c->d->name, c->pre_size, c->d->first_size, c->d->known_size, c->old_size,
          c->now_size, c->new_size, appended ? "appended fields" : "its first layout");
}

int main(void)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const abi_case *c = &cases[k];
        check_table(c);
        check_sizes(c);
        check_history(c);
    }
    return test_finish("abi_internal");
}
