/*
 * text_escape.c — see text_escape.h.
 */
#include "text_escape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "utf8.h"

size_t text_escape(char *out, size_t out_size, const char *in)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = (const uint8_t *)in;
    size_t n = strlen(in), at = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t len = utf8_decode(s + i, n - i, &cp);
        bool plain = len > 0 && cp >= 0x20u && cp != 0x7Fu && !(cp >= 0x80u && cp <= 0x9Fu);
        /* an invalid byte is escaped alone; what follows gets its own look */
        size_t take = len > 0 ? len : 1;
        size_t need = plain ? take : 4 * take;
        if (at + need >= out_size)
            break;
        if (plain) {
            memcpy(out + at, s + i, take);
        } else {
            for (size_t k = 0; k < take; k++) {
                char *e = out + at + 4 * k;
                e[0] = '\\';
                e[1] = 'x';
                e[2] = hex[s[i + k] >> 4];
                e[3] = hex[s[i + k] & 15];
            }
        }
        at += need;
        i += take;
    }
    if (out_size > 0)
        out[at] = '\0';
    return at;
}
