/*
 * fake_backend_module.c — stand-ins for the CUDA backend module, to test how
 * the core loads modules on any machine (tests/test_backend_module.c).
 * Built three times (tests/meson.build):
 *   -DFAKE_NO_DEVICE   a well-formed module whose create() finds no device;
 *   -DFAKE_WRONG_ABI   a module built for another backend interface version;
 *   -DFAKE_NO_ENTRY    a shared object without the entry point.
 */
#include <stdio.h>

#include "backend/backend.h"

#ifndef FAKE_NO_ENTRY
static nctmc_backend *fake_create(int device, bool bf16, char *err, size_t err_size,
                                  bool *no_device)
{
    (void)device;
    (void)bf16;
    snprintf(err, err_size, "no CUDA device: the fake module has none");
    *no_device = true;
    return NULL;
}

static const nctmc_backend_module fake_module = {
#ifdef FAKE_WRONG_ABI
    .abi_version = NCTMC_BACKEND_ABI_VERSION + 1000u,
#else
    .abi_version = NCTMC_BACKEND_ABI_VERSION,
#endif
    .backend_size = sizeof(nctmc_backend),
    .ops_size = sizeof(nctmc_backend_ops),
    .sample_args_size = sizeof(nctmc_sample_step_args),
    .version_number = NCTMC_VERSION_NUMBER,
    .name = "fake",
    .create = fake_create,
};

__attribute__((visibility("default"))) const nctmc_backend_module *
nctmc_backend_module_entry(void);

const nctmc_backend_module *nctmc_backend_module_entry(void)
{
    return &fake_module;
}
#else
/* something to export, so that this is an ordinary shared object */
__attribute__((visibility("default"))) int fake_backend_module_no_entry(void);

int fake_backend_module_no_entry(void)
{
    return 0;
}
#endif
