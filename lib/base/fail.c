/*
 * fail.c — see fail.h.
 */
#include "fail.h"

#include <stdio.h>

#include "text_escape.h"

nctmc_status fail_vformat(char *buf, size_t size, nctmc_status status, const char *fmt,
                          va_list ap)
{
    if (buf && size) {
        /* messages quote file contents: escaped here, once for every
         * message, so none can carry a terminal control sequence */
        char raw[NCTMC_ERROR_SIZE];
        vsnprintf(raw, sizeof raw, fmt, ap);
        text_escape(buf, size, raw);
    }
    return status;
}

nctmc_status fail_format(char *buf, size_t size, nctmc_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    status = fail_vformat(buf, size, status, fmt, ap);
    va_end(ap);
    return status;
}
