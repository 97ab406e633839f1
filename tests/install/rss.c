/*
 * rss.c — the resident memory of a program that links libnctmc and calls
 * nctmc_version() (built with -DWITH_NCTMC), or of the same program without
 * libnctmc; scripts/check_install.py compares the two (the target:
 * within 10 MB, that is, no CUDA library mapped by the core).
 * Prints "rss_kb N".
 */
#include <stdio.h>
#include <string.h>

#ifdef WITH_NCTMC
#include <nctmc.h>
#endif

int main(void)
{
#ifdef WITH_NCTMC
    if (!nctmc_version()[0])
        return 1;
#endif
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            sscanf(line + 6, "%ld", &kb);
    if (f)
        fclose(f);
    printf("rss_kb %ld\n", kb);
    return kb > 0 ? 0 : 1;
}
