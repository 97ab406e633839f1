/*
 * test_quant_kernels.c — the CPU backend's reduced-precision linear layer
 * (cpu_linear_packed.c) and the rounding of model_quant.c.
 *
 * Each kernel (the portable one, and the bf16 dot-product one where the CPU
 * has it: AVX512-BF16 on x86-64, BFDOT on AArch64) runs on random odd shapes and is compared with a double-precision
 * product over the same dequantised weights, within the bound its
 * arithmetic implies (u = 2^-24 for float, 2^-8 for bf16, n = in):
 *   portable:    |y - ref| <= (n + 3) u_f32 (sum |x||w| + |b|)
 *   bf16 kernel: x is rounded to bf16 too, which adds u_bf16 sum |x||w|
 * and with the original float weights, within the format's own rounding:
 *   bf16: |w - deq(w)| <= u_bf16 |w|;  int8: <= scale / 2 per weight.
 * The output is also the same bit for bit with 1 and 3 threads.
 */
#include "cpu/cpu_backend.h"
#include "model/model_quant.h"
#include "test_util.h"

#include <string.h>

#define U_F32 (1.0 / 16777216.0)
#define U_BF16 (1.0 / 256.0)

typedef struct layer {
    int64_t rows;
    int32_t in, out;
    float *x, *w, *bias;       /* float originals */
    void *q;                   /* packed data */
    float *scales;             /* int8 */
    float *deq;                /* dequantised weights */
    nctmc_packed_weight pw;
} layer;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_quant_kernels: out of memory\n");
        exit(2);
    }
    return p;
}

static layer make_layer(test_rng *rng, int64_t rows, int32_t in, int32_t out, int32_t type,
                        bool bias)
{
    layer l = {rows, in, out, NULL, NULL, NULL, NULL, NULL, NULL, {0, NULL, NULL}};
    size_t nw = (size_t)in * (size_t)out;
    l.x = xmalloc(sizeof(float) * (size_t)rows * (size_t)in);
    l.w = xmalloc(sizeof(float) * nw);
    l.deq = xmalloc(sizeof(float) * nw);
    test_fill_uniform(rng, l.x, (size_t)rows * (size_t)in, -2.0f, 2.0f);
    /* rows of different magnitudes, so per-row scales matter */
    for (int32_t o = 0; o < out; o++) {
        float mag = 0.01f + (float)(o % 7) * 0.3f;
        test_fill_uniform(rng, l.w + (size_t)o * (size_t)in, (size_t)in, -mag, mag);
    }
    if (bias) {
        l.bias = xmalloc(sizeof(float) * (size_t)out);
        test_fill_uniform(rng, l.bias, (size_t)out, -1.0f, 1.0f);
    }
    l.pw.type = type;
    if (type == NCTMC_WEIGHT_BF16) {
        uint16_t *h = xmalloc(2 * nw);
        for (size_t e = 0; e < nw; e++) {
            h[e] = quant_bf16_round(l.w[e]);
            l.deq[e] = quant_bf16_to_f32(h[e]);
        }
        l.q = h;
    } else {
        int8_t *q = xmalloc(nw);
        l.scales = xmalloc(sizeof(float) * (size_t)out);
        for (int32_t o = 0; o < out; o++) {
            size_t at = (size_t)o * (size_t)in;
            l.scales[o] = quant_int8_row(l.w + at, in, q + at);
            for (int32_t i = 0; i < in; i++)
                l.deq[at + (size_t)i] = l.scales[o] * (float)q[at + (size_t)i];
        }
        l.q = q;
    }
    l.pw.data = l.q;
    l.pw.scales = l.scales;
    return l;
}

static void free_layer(layer *l)
{
    free(l->x);
    free(l->w);
    free(l->bias);
    free(l->q);
    free(l->scales);
    free(l->deq);
}

/* Checks y against the double product with weights w, within
 * rel * sum |x||w| + abs_rel * |b| per element. Returns the worst ratio of
 * error to bound seen. */
static double check_against(const layer *l, const float *y, const float *w, double rel,
                            double bias_rel, const char *what)
{
    double worst = 0.0;
    int reported = 0;
    for (int64_t r = 0; r < l->rows; r++) {
        for (int32_t o = 0; o < l->out; o++) {
            double ref = l->bias ? l->bias[o] : 0.0, mag = 0.0;
            for (int32_t i = 0; i < l->in; i++) {
                double xv = l->x[r * l->in + i], wv = w[(size_t)o * (size_t)l->in + (size_t)i];
                ref += xv * wv;
                mag += fabs(xv * wv);
            }
            double bound = rel * mag + bias_rel * (l->bias ? fabs(l->bias[o]) : 0.0) + 1e-30;
            double err = fabs((double)y[r * l->out + o] - ref);
            worst = err / bound > worst ? err / bound : worst;
            if (!(err <= bound) && reported++ < 3)
                CHECK(err <= bound, "%s: [%lld, %d] = %.9g, want %.9g (err %.3g > %.3g)", what,
                      (long long)r, (int)o, (double)y[r * l->out + o], ref, err, bound);
        }
    }
    CHECK(reported == 0, "%s: %d elements out of bounds", what, reported);
    return worst;
}

static float *run(nctmc_backend *be, const layer *l)
{
    float *y = xmalloc(sizeof(float) * (size_t)l->rows * (size_t)l->out);
    for (size_t e = 0; e < (size_t)l->rows * (size_t)l->out; e++)
        y[e] = NAN; /* every element must be written */
    size_t bytes = cpu_linear_packed_scratch_bytes(be, l->in);
    void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!scratch) {
        fprintf(stderr, "test_quant_kernels: out of memory\n");
        exit(2);
    }
    cpu_linear_forward_packed(be, l->rows, l->in, l->out, l->x, &l->pw, l->bias, y, scratch);
    CHECK(be->ops->synchronize(be) == NCTMC_OK, "synchronize: %s", be->error);
    free(scratch);
    return y;
}

static void test_shapes(nctmc_backend *one, nctmc_backend *three, bool bf16_dot)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1},    {3, 5, 7},     {7, 33, 65},   {17, 64, 96},   {31, 129, 47},
        {130, 96, 200}, {257, 385, 33}, {300, 200, 257}, {6, 2, 130}, {13, 31, 3},
    };
    test_rng rng = test_rng_seed(bf16_dot ? 21 : 20);
    double worst_kernel = 0.0, worst_format[3] = {0, 0, 0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int32_t type = NCTMC_WEIGHT_BF16; type <= NCTMC_WEIGHT_INT8; type++) {
            layer l = make_layer(&rng, shapes[s][0], (int32_t)shapes[s][1],
                                 (int32_t)shapes[s][2], type, s % 2 == 0);
            char what[128];
            snprintf(what, sizeof what, "%s %s %lldx%dx%d", bf16_dot ? "bf16-dot" : "portable",
                     type == NCTMC_WEIGHT_BF16 ? "bf16" : "int8", (long long)l.rows, l.in,
                     l.out);
            float *y1 = run(one, &l), *y3 = run(three, &l);
            CHECK(memcmp(y1, y3, sizeof(float) * (size_t)l.rows * (size_t)l.out) == 0,
                  "%s: 1 and 3 threads differ", what);
            double acc = (l.in + 3) * U_F32;
            /* int8: the scale multiplies the float sum once more */
            double kernel_rel = acc + (bf16_dot ? U_BF16 * (1.0 + acc) : 0.0) + U_F32;
            double r = check_against(&l, y1, l.deq, kernel_rel, 2 * U_F32, what);
            worst_kernel = r > worst_kernel ? r : worst_kernel;
            /* against the float weights: the format's rounding on top */
            double format_rel;
            if (type == NCTMC_WEIGHT_BF16) {
                format_rel = kernel_rel + U_BF16 * (1.0 + kernel_rel);
            } else {
                /* |w - deq| <= scale / 2 = max|w_row| / 254 <= ... bounded per
                 * row below by replacing w with its row maximum */
                format_rel = kernel_rel;
            }
            if (type == NCTMC_WEIGHT_BF16) {
                double f = check_against(&l, y1, l.w, format_rel, 2 * U_F32, what);
                worst_format[type] = f > worst_format[type] ? f : worst_format[type];
            } else {
                /* sum |x| scale / 2 added per element */
                int bad = 0;
                for (int64_t rr = 0; rr < l.rows; rr++) {
                    for (int32_t o = 0; o < l.out; o++) {
                        double ref = l.bias ? l.bias[o] : 0.0, mag = 0.0, xs = 0.0;
                        for (int32_t i = 0; i < l.in; i++) {
                            double xv = l.x[rr * l.in + i];
                            ref += xv * l.w[(size_t)o * (size_t)l.in + (size_t)i];
                            mag += fabs(xv * l.deq[(size_t)o * (size_t)l.in + (size_t)i]);
                            xs += fabs(xv);
                        }
                        double bound = kernel_rel * mag + xs * l.scales[o] * 0.5 * (1 + 1e-6) +
                                       2 * U_F32 * (l.bias ? fabs(l.bias[o]) : 0.0) + 1e-30;
                        double err = fabs((double)y1[rr * l.out + o] - ref);
                        bad += err <= bound ? 0 : 1;
                        worst_format[type] =
                            err / bound > worst_format[type] ? err / bound : worst_format[type];
                    }
                }
                CHECK(bad == 0, "%s: %d elements beyond the int8 rounding bound", what, bad);
            }
            free(y1);
            free(y3);
            free_layer(&l);
        }
    }
    printf("%s kernel: worst error / bound %.3f (vs dequantised), bf16 %.3f, int8 %.3f "
           "(vs float weights)\n",
           bf16_dot ? "bf16-dot" : "portable", worst_kernel, worst_format[1],
           worst_format[2]);
}

/* An empty inner dimension gives the bias. */
static void test_empty_inner(nctmc_backend *be)
{
    float bias[3] = {1.5f, -2.0f, 0.25f}, y[6];
    uint16_t none[1] = {0};
    nctmc_packed_weight pw = {NCTMC_WEIGHT_BF16, none, NULL};
    cpu_linear_forward_packed(be, 2, 0, 3, NULL, &pw, bias, y, NULL);
    CHECK(y[0] == 1.5f && y[4] == -2.0f && y[5] == 0.25f, "in = 0 gives the bias");
}

static void test_rounding(void)
{
    CHECK(quant_bf16_round(1.0f) == 0x3f80, "1.0");
    CHECK(quant_bf16_round(-2.0f) == 0xc000, "-2.0");
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1) */
    CHECK(quant_bf16_round(1.0f + 1.0f / 256.0f) == 0x3f80, "tie to even, down");
    /* 1 + 3 * 2^-8 ties between 1 + 2^-7 (odd) and 1 + 2^-6: up */
    CHECK(quant_bf16_round(1.0f + 3.0f / 256.0f) == 0x3f82, "tie to even, up");
    CHECK(quant_bf16_round(1.0f + 1.5f / 256.0f) == 0x3f81, "above the tie");
    CHECK(quant_bf16_round(INFINITY) == 0x7f80, "inf");
    CHECK((quant_bf16_round(NAN) & 0x7f80) == 0x7f80 && (quant_bf16_round(NAN) & 0x7f) != 0,
          "NaN stays NaN");
    CHECK(quant_bf16_round(3.4e38f) == 0x7f80, "rounds past the largest bf16 to inf");
    CHECK(quant_bf16_to_f32(0x3f80) == 1.0f, "back to float");

    float w[5] = {0.5f, -1.27f, 0.01f, 0.0f, 1.0f};
    int8_t q[5];
    float s = quant_int8_row(w, 5, q);
    CHECK(fabsf(s - 1.27f / 127.0f) < 1e-9f, "scale = max|w| / 127: %g", (double)s);
    CHECK(q[1] == -127 && q[3] == 0 && q[4] == 100 && q[0] == 50 && q[2] == 1,
          "q = %d %d %d %d %d", q[0], q[1], q[2], q[3], q[4]);
    float z[3] = {0, 0, 0};
    CHECK(quant_int8_row(z, 3, q) == 1.0f && q[0] == 0, "a zero row has scale 1");
    float tiny[2] = {1e-45f, -1e-45f};
    s = quant_int8_row(tiny, 2, q);
    CHECK(s > 0.0f && q[0] >= -127 && q[0] <= 127, "a subnormal row keeps a positive scale");
}

int main(void)
{
    char err[256];
    nctmc_backend *one = cpu_backend_create(1, err, sizeof err);
    nctmc_backend *three = cpu_backend_create(3, err, sizeof err);
    if (!one || !three) {
        fprintf(stderr, "cannot create backends: %s\n", err);
        return 2;
    }
    test_rounding();
    test_empty_inner(one);
    cpu_backend_set_bf16_dot(one, false);
    cpu_backend_set_bf16_dot(three, false);
    test_shapes(one, three, false);
    bool fast = cpu_backend_set_bf16_dot(one, true);
    CHECK(cpu_backend_set_bf16_dot(three, true) == fast, "both backends agree on the CPU");
    if (fast)
        test_shapes(one, three, true);
    else
        printf("this CPU has no bf16 dot product (AVX512-BF16, BFDOT): only the portable "
               "kernel was tested\n");
    one->ops->destroy(one);
    three->ops->destroy(three);
    return test_finish("quant_kernels");
}
