/*
 * cuda_embedding.cu — embedding lookup and its deterministic gradient.
 *
 * The gradient is segmented, not atomic: the row numbers are sorted by id
 * with CUB's radix sort (stable, so the rows of one id stay in increasing
 * order, and deterministic), and the first position of each id's segment
 * starts a block that owns that table row and adds the segment's dout rows
 * into it in increasing row order. Each table row has one owner, every sum
 * runs in the order the CPU backend uses (so the two give the same bits),
 * and nothing depends on scheduling.
 */
#include <cub/device/device_radix_sort.cuh>

#include "cuda_internal.cuh"

#define EMBED_GRAD_THREADS 128

__global__ void embedding_forward_kernel(int64_t rows, int32_t dim,
                                         const int32_t *__restrict__ ids,
                                         const float *__restrict__ table, float *out,
                                         bool accumulate)
{
    int64_t n = rows * dim, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t r = i / dim;
        float v = table[(int64_t)ids[r] * dim + i % dim];
        out[i] = accumulate ? out[i] + v : v;
    }
}

void cuda_embedding_forward(nctmc_backend *be, int64_t rows, int32_t dim, const int32_t *ids,
                            const float *table, float *out, bool accumulate)
{
    cuda_backend *cb = cuda_of(be);
    if (rows <= 0 || dim <= 0)
        return;
    embedding_forward_kernel<<<cuda_blocks(rows * dim, CUDA_THREADS), CUDA_THREADS, 0,
                               cb->stream>>>(rows, dim, ids, table, out, accumulate);
    cuda_launched(cb, "embedding_forward");
}

__global__ void iota_kernel(int32_t n, int32_t *__restrict__ out)
{
    for (int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); i < n;
         i += (int32_t)(gridDim.x * blockDim.x))
        out[i] = i;
}

/* One block per sorted position; only the first position of a segment
 * works. Four rows are loaded ahead of each group of additions, which are
 * still made one at a time in row order. */
__global__ void embedding_grad_kernel(int32_t rows, int32_t dim,
                                      const uint32_t *__restrict__ sorted_ids,
                                      const int32_t *__restrict__ sorted_rows,
                                      const float *__restrict__ dout, float *__restrict__ dtable,
                                      bool accumulate)
{
    int32_t first = (int32_t)blockIdx.x;
    uint32_t v = sorted_ids[first];
    if (first > 0 && sorted_ids[first - 1] == v)
        return;
    int32_t end = first + 1;
    while (end < rows && sorted_ids[end] == v)
        end++;
    float *dst = dtable + (int64_t)v * dim;
    for (int32_t col = (int32_t)threadIdx.x; col < dim; col += (int32_t)blockDim.x) {
        float acc = accumulate ? dst[col] : 0.0f;
        int32_t j = first;
        for (; j + 4 <= end; j += 4) {
            float a0 = dout[(int64_t)sorted_rows[j] * dim + col];
            float a1 = dout[(int64_t)sorted_rows[j + 1] * dim + col];
            float a2 = dout[(int64_t)sorted_rows[j + 2] * dim + col];
            float a3 = dout[(int64_t)sorted_rows[j + 3] * dim + col];
            acc += a0;
            acc += a1;
            acc += a2;
            acc += a3;
        }
        for (; j < end; j++)
            acc += dout[(int64_t)sorted_rows[j] * dim + col];
        dst[col] = acc;
    }
}

/* Bits that cover ids 0 .. n_entries - 1. */
static int id_bits(int32_t n_entries)
{
    int bits = 1;
    while (bits < 31 && ((int64_t)1 << bits) < (int64_t)n_entries)
        bits++;
    return bits;
}

void cuda_embedding_backward(nctmc_backend *be, int64_t rows, int32_t dim, int32_t n_entries,
                             const int32_t *ids, const float *dout, float *dtable,
                             bool accumulate)
{
    cuda_backend *cb = cuda_of(be);
    if (dim <= 0 || n_entries <= 0)
        return;
    if (!accumulate &&
        !cuda_check(cb,
                    cudaMemsetAsync(dtable, 0, (size_t)n_entries * (size_t)dim * sizeof(float),
                                    cb->stream),
                    "embedding_backward: zero"))
        return;
    if (rows <= 0)
        return;
    if (rows > 0x7fffffff) {
        cuda_fail(cb, NCTMC_ERR_INVALID_ARGUMENT, "embedding_backward: %lld rows",
                  (long long)rows);
        return;
    }
    int32_t n = (int32_t)rows;
    int bits = id_bits(n_entries);
    size_t temp_bytes = 0;
    if (!cuda_check(cb,
                    cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const uint32_t *)ids,
                                                    (uint32_t *)NULL, (const int32_t *)NULL,
                                                    (int32_t *)NULL, n, 0, bits, cb->stream),
                    "embedding_backward: sort size"))
        return;
    size_t arr = cuda_round64((size_t)n * 4);
    char *s = (char *)cuda_scratch(cb, 3 * arr + cuda_round64(temp_bytes));
    if (!s)
        return;
    uint32_t *sorted_ids = (uint32_t *)s;
    int32_t *rows_in = (int32_t *)(s + arr);
    int32_t *sorted_rows = (int32_t *)(s + 2 * arr);
    void *temp = s + 3 * arr;
    iota_kernel<<<cuda_blocks(n, CUDA_THREADS), CUDA_THREADS, 0, cb->stream>>>(n, rows_in);
    if (!cuda_launched(cb, "embedding_backward: iota"))
        return;
    if (!cuda_check(cb,
                    cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const uint32_t *)ids,
                                                    sorted_ids, rows_in, sorted_rows, n, 0, bits,
                                                    cb->stream),
                    "embedding_backward: sort"))
        return;
    embedding_grad_kernel<<<(unsigned)n, EMBED_GRAD_THREADS, 0, cb->stream>>>(
        n, dim, sorted_ids, sorted_rows, dout, dtable, accumulate);
    cuda_launched(cb, "embedding_backward");
}
