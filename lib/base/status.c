/*
 * status.c — version and status strings.
 */
#include "nctmc.h"

#define NCTMC_STR_(x) #x
#define NCTMC_STR(x) NCTMC_STR_(x)

NCTMC_API const char *nctmc_version(void)
{
    return NCTMC_STR(NCTMC_VERSION_MAJOR) "." NCTMC_STR(NCTMC_VERSION_MINOR) "." NCTMC_STR(
        NCTMC_VERSION_PATCH);
}

NCTMC_API int32_t nctmc_version_number(void)
{
    return NCTMC_VERSION_NUMBER;
}

NCTMC_API const char *nctmc_status_string(nctmc_status status)
{
    switch (status) {
    case NCTMC_OK: return "ok";
    case NCTMC_ERR_INVALID_ARGUMENT: return "invalid argument";
    case NCTMC_ERR_OUT_OF_MEMORY: return "out of memory";
    case NCTMC_ERR_UNSUPPORTED: return "unsupported";
    case NCTMC_ERR_NOT_FOUND: return "not found";
    case NCTMC_ERR_BACKEND: return "backend failure";
    case NCTMC_ERR_IO: return "input/output error";
    case NCTMC_ERR_FORMAT: return "bad file format";
    case NCTMC_ERR_CANCELLED: return "cancelled";
    case NCTMC_ERR_NON_FINITE: return "non-finite value";
    }
    return "unknown status";
}
