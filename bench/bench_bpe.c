/*
 * bench_bpe.c — encoding throughput of the BPE tokenizer, one thread:
 *
 *   bench_bpe TOKENIZER_JSON TEXT_FILE [REPS]
 *
 * Loads a Hugging Face tokenizer.json, encodes the whole file REPS times
 * (default 3; the first run warms the word cache like any long-lived
 * tokenizer) and prints the best run as "bytes N tokens M seconds S MB/s X".
 * bench/bench_bpe.py runs it beside Hugging Face `tokenizers`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nctmc.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)size;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_bpe TOKENIZER_JSON TEXT_FILE [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    nctmc_tokenizer *tok = NULL;
    if (nctmc_tokenizer_load_hf_json(NULL, argv[1], &tok) != NCTMC_OK) {
        fprintf(stderr, "bench_bpe: cannot load %s\n", argv[1]);
        return 1;
    }
    size_t len = 0;
    char *text = read_all(argv[2], &len);
    int32_t *ids = text ? malloc((len + 1) * sizeof *ids) : NULL;
    if (!ids) {
        fprintf(stderr, "bench_bpe: cannot read %s\n", argv[2]);
        return 1;
    }
    double best = 1e30;
    size_t n = 0;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t0 = now();
        if (nctmc_tokenizer_encode(tok, text, len, ids, len + 1, &n) != NCTMC_OK) {
            fprintf(stderr, "bench_bpe: %s\n", nctmc_tokenizer_last_error(tok));
            return 1;
        }
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    printf("bytes %zu tokens %zu seconds %.4f MB/s %.2f\n", len, n, best,
           (double)len / 1e6 / best);
    free(ids);
    free(text);
    nctmc_tokenizer_free(tok);
    return 0;
}
