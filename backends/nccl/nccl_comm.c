/*
 * nccl_comm.c — the NCCL communication engine, built as the module
 * libnctmc-nccl.so that the core loads at run time (lib/comm/comm.c) for a
 * job started by a torchrun-style launcher (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT), so that libnctmc itself never links NCCL or
 * CUDA. It implements comm_module.h on host or device buffers (the kind is
 * asked of CUDA for every call): host buffers go through the engine's own
 * device buffer.
 *
 * Start: rank 0 makes the ncclUniqueId and hands it to the other ranks over
 * a TCP rendezvous at MASTER_ADDR:MASTER_PORT (only the 128-byte id and a
 * check of the world size travel there; everything else is NCCL's). Each
 * rank uses GPU LOCAL_RANK (0 when unset), or GPU 0 when it sees only one
 * (a launcher that sets CUDA_VISIBLE_DEVICES per rank).
 *
 * The sum is in a fixed order, not ncclAllReduce's (whose order depends on
 * the algorithm NCCL picks for the topology and size): the buffer is cut
 * into one slice per rank (padded to equal slices); grouped ncclSend /
 * ncclRecv bring every rank's copy of slice j to rank j, which adds them in
 * rank order with cuBLAS axpy of 1 (x_0 + x_1 + ... with one rounding per
 * addition); ncclAllGather hands the summed slices to everyone. These are
 * the bits of the MPI engine and of one process accumulating in rank order.
 *
 * Started sums (sum_start) run at once, as allreduce_sum: the NCCL engine
 * does not overlap the sum with the caller's computation yet.
 *
 * Failures never hang: the communicator is non-blocking, and every wait
 * polls ncclCommGetAsyncError and a deadline (NCTMC_COMM_TIMEOUT seconds,
 * default 300); a failed or late operation aborts the communicator
 * (ncclCommAbort) and returns the error, after which the engine refuses
 * further work.
 */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <limits.h>
#include <nccl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_module.h"

struct comm_engine {
    ncclComm_t comm;
    cudaStream_t stream;
    cublasHandle_t blas;
    int rank, size, device;
    bool broken;            /* aborted: every later call fails */
    double timeout_s;
    char *work, *recv;      /* device: the padded buffer, everyone's slices */
    size_t work_bytes;      /* of each of the two */
};

/* ---- time and errors ----------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 200000}; /* 0.2 ms */
    nanosleep(&ts, NULL);
}

static double timeout_from_env(void)
{
    const char *s = getenv("NCTMC_COMM_TIMEOUT");
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0.0;
    return s && end != s && *end == '\0' && v > 0.0 ? v : 300.0;
}

static nctmc_status cuda_fail(cudaError_t rc, const char *what, char *err, size_t err_size)
{
    snprintf(err, err_size, "NCCL engine: %s failed: %s", what, cudaGetErrorString(rc));
    return NCTMC_ERR_BACKEND;
}

/* Aborts the communicator (the other ranks' waits then fail too) and says
 * why. */
static nctmc_status engine_break(comm_engine *e, const char *what, const char *why, char *err,
                                 size_t err_size)
{
    snprintf(err, err_size, "NCCL: %s failed on rank %d of %d: %s (another rank may have "
                            "failed or died); the communicator is aborted",
             what, e->rank, e->size, why);
    if (!e->broken && e->comm)
        ncclCommAbort(e->comm);
    e->comm = NULL;
    e->broken = true;
    return NCTMC_ERR_BACKEND;
}

/* Waits until the communicator has no call in progress. */
static nctmc_status wait_comm(comm_engine *e, ncclResult_t rc, const char *what, char *err,
                              size_t err_size)
{
    double deadline = now_s() + e->timeout_s;
    while (rc == ncclInProgress) {
        if (now_s() > deadline)
            return engine_break(e, what, "timed out (NCTMC_COMM_TIMEOUT)", err, err_size);
        nap();
        if (ncclCommGetAsyncError(e->comm, &rc) != ncclSuccess)
            rc = ncclInternalError;
    }
    if (rc != ncclSuccess)
        return engine_break(e, what, ncclGetErrorString(rc), err, err_size);
    return NCTMC_OK;
}

/* Waits for the stream, watching NCCL's errors and the deadline. */
static nctmc_status wait_stream(comm_engine *e, const char *what, char *err, size_t err_size)
{
    double deadline = now_s() + e->timeout_s;
    for (;;) {
        cudaError_t q = cudaStreamQuery(e->stream);
        if (q == cudaSuccess)
            return NCTMC_OK;
        if (q != cudaErrorNotReady)
            return engine_break(e, what, cudaGetErrorString(q), err, err_size);
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(e->comm, &async) != ncclSuccess ||
            (async != ncclSuccess && async != ncclInProgress))
            return engine_break(e, what, ncclGetErrorString(async), err, err_size);
        if (now_s() > deadline)
            return engine_break(e, what, "timed out (NCTMC_COMM_TIMEOUT)", err, err_size);
        nap();
    }
}

/* ---- the TCP rendezvous for the unique id --------------------------------- */

typedef struct hello {
    int32_t size, rank, library_version, pad;
} hello;

static bool io_all(int fd, void *buf, size_t n, bool out, double deadline)
{
    char *p = buf;
    while (n > 0) {
        struct pollfd pf = {fd, (short)(out ? POLLOUT : POLLIN), 0};
        int left_ms = (int)((deadline - now_s()) * 1000.0);
        if (left_ms <= 0 || poll(&pf, 1, left_ms) <= 0)
            return false;
        ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Rank 0: accepts size-1 ranks and sends each the id. */
static nctmc_status serve_id(const char *port, int size, const ncclUniqueId *id, double deadline,
                             char *err, size_t err_size)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(NULL, port, &hints, &ai) != 0) {
        snprintf(err, err_size, "NCCL rendezvous: MASTER_PORT=\"%.20s\" is not a port", port);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    bool ok = fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, size) == 0;
    freeaddrinfo(ai);
    if (!ok) {
        snprintf(err, err_size, "NCCL rendezvous: rank 0 cannot listen on port %s: %s", port,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return NCTMC_ERR_IO;
    }
    nctmc_status st = NCTMC_OK;
    for (int joined = 1; joined < size && st == NCTMC_OK; joined++) {
        struct pollfd pf = {fd, POLLIN, 0};
        int left_ms = (int)((deadline - now_s()) * 1000.0);
        int c = left_ms > 0 && poll(&pf, 1, left_ms) > 0 ? accept(fd, NULL, NULL) : -1;
        hello h;
        if (c < 0 || !io_all(c, &h, sizeof h, false, deadline)) {
            snprintf(err, err_size, "NCCL rendezvous: %d of %d ranks reached rank 0 (port %s) "
                                    "before the timeout (NCTMC_COMM_TIMEOUT)", joined, size, port);
            st = NCTMC_ERR_BACKEND;
        } else if (h.size != size || h.library_version != NCTMC_VERSION_NUMBER) {
            snprintf(err, err_size, "NCCL rendezvous: rank %d says WORLD_SIZE=%d and libnctmc "
                                    "%d; rank 0 has %d and %d", (int)h.rank, (int)h.size,
                     (int)h.library_version, size, NCTMC_VERSION_NUMBER);
            st = NCTMC_ERR_INVALID_ARGUMENT;
        } else if (!io_all(c, (void *)id, sizeof *id, true, deadline)) {
            snprintf(err, err_size, "NCCL rendezvous: sending the id to rank %d failed",
                     (int)h.rank);
            st = NCTMC_ERR_BACKEND;
        }
        if (c >= 0)
            close(c);
    }
    close(fd);
    return st;
}

/* Ranks > 0: connect to rank 0 (retrying until it listens), get the id. */
static nctmc_status fetch_id(const char *addr, const char *port, int size, int rank,
                             ncclUniqueId *id, double deadline, char *err, size_t err_size)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(addr, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err, err_size, "NCCL rendezvous: MASTER_ADDR=\"%.100s\" MASTER_PORT=\"%.20s\": "
                                "%s", addr, port, gai_strerror(gai));
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    int fd = -1;
    while (fd < 0 && now_s() < deadline) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
            struct timespec ts = {0, 100000000}; /* 0.1 s */
            nanosleep(&ts, NULL);
        }
    }
    freeaddrinfo(ai);
    hello h = {size, rank, NCTMC_VERSION_NUMBER, 0};
    bool ok = fd >= 0 && io_all(fd, &h, sizeof h, true, deadline) &&
              io_all(fd, id, sizeof *id, false, deadline);
    if (fd >= 0)
        close(fd);
    if (!ok) {
        snprintf(err, err_size, "NCCL rendezvous: rank %d got no id from rank 0 at %s:%s "
                                "before the timeout (NCTMC_COMM_TIMEOUT), or rank 0 refused it",
                 rank, addr, port);
        return NCTMC_ERR_BACKEND;
    }
    return NCTMC_OK;
}

/* ---- the engine ---------------------------------------------------------- */

static long env_long(const char *name, long fallback)
{
    const char *s = getenv(name);
    char *end = NULL;
    long v = s && s[0] ? strtol(s, &end, 10) : fallback;
    return s && s[0] && *end != '\0' ? -1 : v;
}

static void engine_free(comm_engine *e)
{
    if (e->comm)
        ncclCommDestroy(e->comm);
    if (e->blas)
        cublasDestroy(e->blas);
    cudaFree(e->work);
    cudaFree(e->recv);
    if (e->stream)
        cudaStreamDestroy(e->stream);
    free(e);
}

static nctmc_status engine_device(comm_engine *e, long local, char *err, size_t err_size)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaGetDeviceCount", err, err_size);
    if (count == 1)
        local = 0; /* CUDA_VISIBLE_DEVICES leaves this rank one GPU */
    if (local < 0 || local >= count) {
        snprintf(err, err_size, "NCCL engine: LOCAL_RANK=%ld but this machine has %d GPUs (one "
                                "GPU per local rank)", local, count);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    e->device = (int)local;
    rc = cudaSetDevice(e->device);
    if (rc == cudaSuccess)
        rc = cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaSetDevice / cudaStreamCreate", err, err_size);
    if (cublasCreate(&e->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(e->blas, e->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_size, "NCCL engine: cuBLAS did not start on GPU %d", e->device);
        return NCTMC_ERR_BACKEND;
    }
    return NCTMC_OK;
}

static nctmc_status engine_join(comm_engine *e, char *err, size_t err_size)
{
    double deadline = now_s() + e->timeout_s;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (e->size > 1) {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!addr || !addr[0] || !port || !port[0]) {
            snprintf(err, err_size, "NCCL engine: WORLD_SIZE=%d needs MASTER_ADDR and "
                                    "MASTER_PORT (rank 0's address and a free port)", e->size);
            return NCTMC_ERR_INVALID_ARGUMENT;
        }
        if (e->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
            snprintf(err, err_size, "NCCL engine: ncclGetUniqueId failed");
            return NCTMC_ERR_BACKEND;
        }
        nctmc_status st = e->rank == 0 ? serve_id(port, e->size, &id, deadline, err, err_size)
                                       : fetch_id(addr, port, e->size, e->rank, &id, deadline,
                                                  err, err_size);
        if (st != NCTMC_OK)
            return st;
    } else if (ncclGetUniqueId(&id) != ncclSuccess) {
        snprintf(err, err_size, "NCCL engine: ncclGetUniqueId failed");
        return NCTMC_ERR_BACKEND;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&e->comm, e->size, id, e->rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        snprintf(err, err_size, "NCCL engine: ncclCommInitRankConfig failed on rank %d of %d: "
                                "%s", e->rank, e->size, ncclGetErrorString(rc));
        e->comm = NULL;
        return NCTMC_ERR_BACKEND;
    }
    return wait_comm(e, rc, "ncclCommInitRankConfig", err, err_size);
}

static nctmc_status create_world(comm_engine **out, char *err, size_t err_size)
{
    long size = env_long("WORLD_SIZE", 1), rank = env_long("RANK", 0);
    long local = env_long("LOCAL_RANK", 0);
    if (size < 1 || size > INT_MAX || rank < 0 || rank >= size || local < 0) {
        snprintf(err, err_size, "NCCL engine: RANK, WORLD_SIZE and LOCAL_RANK are not a rank of "
                                "a job (RANK=%ld WORLD_SIZE=%ld LOCAL_RANK=%ld)", rank, size,
                 local);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    comm_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_size, "out of memory");
        return NCTMC_ERR_OUT_OF_MEMORY;
    }
    e->rank = (int)rank;
    e->size = (int)size;
    e->timeout_s = timeout_from_env();
    int prev = 0;
    bool known = cudaGetDevice(&prev) == cudaSuccess;
    nctmc_status st = engine_device(e, local, err, err_size);
    if (st == NCTMC_OK)
        st = engine_join(e, err, err_size);
    if (known)
        cudaSetDevice(prev);
    if (st != NCTMC_OK) {
        engine_free(e);
        return st;
    }
    *out = e;
    return NCTMC_OK;
}

static nctmc_status create_from(const void *native, comm_engine **out, char *err,
                                size_t err_size)
{
    (void)native;
    (void)out;
    snprintf(err, err_size, "the NCCL engine is started from the environment (RANK, "
                            "WORLD_SIZE, MASTER_ADDR, MASTER_PORT), not from a communicator");
    return NCTMC_ERR_UNSUPPORTED;
}

static int32_t engine_rank(const comm_engine *e)
{
    return e->rank;
}

static int32_t engine_size(const comm_engine *e)
{
    return e->size;
}

static nctmc_status usable(comm_engine *e, char *err, size_t err_size)
{
    if (e->broken) {
        snprintf(err, err_size, "NCCL engine: the communicator was aborted after an earlier "
                                "failure");
        return NCTMC_ERR_BACKEND;
    }
    cudaError_t rc = cudaSetDevice(e->device);
    return rc == cudaSuccess ? NCTMC_OK : cuda_fail(rc, "cudaSetDevice", err, err_size);
}

static nctmc_status reserve(comm_engine *e, size_t bytes, char *err, size_t err_size)
{
    if (bytes <= e->work_bytes)
        return NCTMC_OK;
    cudaFree(e->work);
    cudaFree(e->recv);
    e->work = e->recv = NULL;
    e->work_bytes = 0;
    cudaError_t rc = cudaMalloc((void **)&e->work, bytes);
    if (rc == cudaSuccess)
        rc = cudaMalloc((void **)&e->recv, bytes);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaMalloc of the communication buffers", err, err_size);
    e->work_bytes = bytes;
    return NCTMC_OK;
}

static bool on_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* recv holds every rank's slice `chunk` (rank order); work's own slice :=
 * their sum in rank order. */
static nctmc_status add_in_rank_order(comm_engine *e, size_t chunk, comm_type type, char *err,
                                      size_t err_size)
{
    size_t esz = type == COMM_FLOAT ? sizeof(float) : sizeof(double);
    char *mine = e->work + (size_t)e->rank * chunk * esz;
    cudaError_t rc = cudaMemcpyAsync(mine, e->recv, chunk * esz, cudaMemcpyDeviceToDevice,
                                     e->stream);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaMemcpyAsync", err, err_size);
    const float one_f = 1.0f;
    const double one_d = 1.0;
    for (int r = 1; r < e->size; r++) {
        const char *x = e->recv + (size_t)r * chunk * esz;
        cublasStatus_t s =
            type == COMM_FLOAT
                ? cublasSaxpy(e->blas, (int)chunk, &one_f, (const float *)(const void *)x, 1,
                              (float *)(void *)mine, 1)
                : cublasDaxpy(e->blas, (int)chunk, &one_d, (const double *)(const void *)x, 1,
                              (double *)(void *)mine, 1);
        if (s != CUBLAS_STATUS_SUCCESS) {
            snprintf(err, err_size, "NCCL engine: cuBLAS axpy failed (%d)", (int)s);
            return NCTMC_ERR_BACKEND;
        }
    }
    return NCTMC_OK;
}

/* work[0 .. size*chunk) := the fixed-order sum of everyone's work. */
static nctmc_status sum_work(comm_engine *e, size_t chunk, comm_type type, char *err,
                             size_t err_size)
{
    size_t esz = type == COMM_FLOAT ? sizeof(float) : sizeof(double);
    ncclDataType_t dt = type == COMM_FLOAT ? ncclFloat32 : ncclFloat64;
    ncclResult_t rc = ncclGroupStart();
    for (int j = 0; j < e->size && rc == ncclSuccess; j++) {
        rc = ncclSend(e->work + (size_t)j * chunk * esz, chunk, dt, j, e->comm, e->stream);
        if (rc == ncclSuccess || rc == ncclInProgress)
            rc = ncclRecv(e->recv + (size_t)j * chunk * esz, chunk, dt, j, e->comm, e->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    if (rc == ncclSuccess || rc == ncclInProgress)
        rc = end;
    nctmc_status st = wait_comm(e, rc, "ncclSend/ncclRecv (reduce-scatter)", err, err_size);
    if (st == NCTMC_OK)
        st = add_in_rank_order(e, chunk, type, err, err_size);
    if (st != NCTMC_OK)
        return st;
    rc = ncclAllGather(e->work + (size_t)e->rank * chunk * esz, e->work, chunk, dt, e->comm,
                       e->stream);
    st = wait_comm(e, rc, "ncclAllGather", err, err_size);
    return st == NCTMC_OK ? wait_stream(e, "the all-reduce", err, err_size) : st;
}

static nctmc_status sum_on_device(comm_engine *e, void *buf, int64_t n, comm_type type,
                                  char *err, size_t err_size)
{
    if (n == 0)
        return NCTMC_OK; /* a world of one still goes through NCCL: the device check */
    size_t esz = type == COMM_FLOAT ? sizeof(float) : sizeof(double);
    size_t chunk = ((size_t)n + (size_t)e->size - 1) / (size_t)e->size;
    if (n < 0 || chunk > INT_MAX) {
        snprintf(err, err_size, "NCCL engine: a sum of %lld elements is more than cuBLAS's int "
                                "counts", (long long)n);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    nctmc_status st = usable(e, err, err_size);
    if (st == NCTMC_OK)
        st = reserve(e, chunk * (size_t)e->size * esz, err, err_size);
    if (st != NCTMC_OK)
        return st;
    size_t bytes = (size_t)n * esz;
    cudaError_t rc = cudaMemsetAsync(e->work + bytes, 0, chunk * (size_t)e->size * esz - bytes,
                                     e->stream);
    if (rc == cudaSuccess)
        rc = cudaMemcpyAsync(e->work, buf, bytes, cudaMemcpyDefault, e->stream);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaMemcpyAsync", err, err_size);
    st = sum_work(e, chunk, type, err, err_size);
    if (st != NCTMC_OK)
        return st;
    rc = cudaMemcpyAsync(buf, e->work, bytes, cudaMemcpyDefault, e->stream);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaMemcpyAsync", err, err_size);
    return wait_stream(e, "copying the sum back", err, err_size);
}

static nctmc_status broadcast_on_device(comm_engine *e, void *buf, int64_t bytes, int32_t root,
                                        char *err, size_t err_size)
{
    if (bytes == 0)
        return NCTMC_OK;
    if (bytes < 0) {
        snprintf(err, err_size, "NCCL engine: a broadcast of %lld bytes", (long long)bytes);
        return NCTMC_ERR_INVALID_ARGUMENT;
    }
    nctmc_status st = usable(e, err, err_size);
    if (st != NCTMC_OK)
        return st;
    bool device = on_device(buf);
    if (!device) {
        st = reserve(e, (size_t)bytes, err, err_size);
        cudaError_t rc = st == NCTMC_OK ? cudaMemcpyAsync(e->work, buf, (size_t)bytes,
                                                          cudaMemcpyHostToDevice, e->stream)
                                        : cudaSuccess;
        if (rc != cudaSuccess)
            return cuda_fail(rc, "cudaMemcpyAsync", err, err_size);
        if (st != NCTMC_OK)
            return st;
    }
    void *dev = device ? buf : (void *)e->work;
    ncclResult_t rc = ncclBroadcast(dev, dev, (size_t)bytes, ncclUint8, root, e->comm,
                                    e->stream);
    st = wait_comm(e, rc, "ncclBroadcast", err, err_size);
    if (st == NCTMC_OK && !device) {
        cudaError_t c = cudaMemcpyAsync(buf, e->work, (size_t)bytes, cudaMemcpyDeviceToHost,
                                        e->stream);
        if (c != cudaSuccess)
            return cuda_fail(c, "cudaMemcpyAsync", err, err_size);
    }
    return st == NCTMC_OK ? wait_stream(e, "the broadcast", err, err_size) : st;
}

/* The operations proper run on the engine's GPU; the caller's current
 * device (the CUDA backend's) is restored after each. */
static nctmc_status allreduce_sum(comm_engine *e, void *buf, int64_t n, comm_type type,
                                  char *err, size_t err_size)
{
    int prev = 0;
    bool known = cudaGetDevice(&prev) == cudaSuccess;
    nctmc_status st = sum_on_device(e, buf, n, type, err, err_size);
    if (known)
        cudaSetDevice(prev);
    return st;
}

/* A started sum runs to its end here (no overlap on this engine yet). */
static nctmc_status sum_start(comm_engine *e, void *buf, int64_t n, comm_type type, char *err,
                              size_t err_size)
{
    return allreduce_sum(e, buf, n, type, err, err_size);
}

static nctmc_status sum_done(comm_engine *e, char *err, size_t err_size)
{
    (void)e;
    (void)err;
    (void)err_size;
    return NCTMC_OK;
}

static nctmc_status broadcast(comm_engine *e, void *buf, int64_t bytes, int32_t root,
                              char *err, size_t err_size)
{
    int prev = 0;
    bool known = cudaGetDevice(&prev) == cudaSuccess;
    nctmc_status st = broadcast_on_device(e, buf, bytes, root, err, err_size);
    if (known)
        cudaSetDevice(prev);
    return st;
}

static nctmc_status barrier(comm_engine *e, char *err, size_t err_size)
{
    float token = 0.0f;
    return allreduce_sum(e, &token, 1, COMM_FLOAT, err, err_size);
}

/* The contract of abort_job (comm_module.h) is MPI_Abort's: this process
 * ends. ncclCommAbort first, so that the other ranks' waits fail at once
 * (their own abort_job then ends them) instead of at their timeout. */
static void abort_job(comm_engine *e, int32_t code)
{
    if (e->comm && !e->broken)
        ncclCommAbort(e->comm);
    e->comm = NULL;
    e->broken = true;
    _exit(code ? code : 1);
}

static void destroy(comm_engine *e)
{
    if (!e)
        return;
    if (e->broken)
        e->comm = NULL;
    engine_free(e);
}

static const nctmc_comm_module nccl_module = {
    .abi_version = NCTMC_COMM_MODULE_ABI_VERSION,
    .module_size = sizeof(nctmc_comm_module),
    .library_version = NCTMC_VERSION_NUMBER,
    .name = "nccl",
    .create_world = create_world,
    .create_from = create_from,
    .rank = engine_rank,
    .size = engine_size,
    .allreduce_sum = allreduce_sum,
    .sum_start = sum_start,
    .sum_progress = sum_done,
    .sum_wait = sum_done,
    .broadcast = broadcast,
    .barrier = barrier,
    .abort_job = abort_job,
    .destroy = destroy,
};

__attribute__((visibility("default"))) const nctmc_comm_module *nctmc_comm_module_entry(void);

const nctmc_comm_module *nctmc_comm_module_entry(void)
{
    return &nccl_module;
}
