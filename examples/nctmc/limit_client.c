/*
 * limit_client.c — the smallest C program using libnctmc's CPU backend, for
 * test_limit_client.sh: creates a CPU context on every core (OpenBLAS is
 * loaded then) and frees it. Exit 0 when that worked, 1 with the library's
 * message when it did not; under an address-space limit it must never be
 * killed or hang (issue 37 item 3).
 */
#include <stdio.h>

#include "nctmc.h"

int main(void)
{
    char err[512] = "";
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = 0;
    p.error_buffer = err;
    p.error_buffer_size = sizeof err;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    if (st != NCTMC_OK) {
        fprintf(stderr, "limit_client: %s: %s\n", nctmc_status_string(st), err);
        return 1;
    }
    nctmc_context_free(ctx);
    printf("limit_client: ok\n");
    return 0;
}
