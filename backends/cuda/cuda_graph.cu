/*
 * cuda_graph.cu — graph capture of fixed sequences of operations
 * (backend.h, nctmc_graph_key): the first use of a key runs eagerly (so
 * that every cuBLASLt and cuDNN plan, the scratch buffer and the kernels'
 * shared-memory settings exist), the second is captured from the backend's
 * stream, instantiated and launched, and every later one launches that
 * graph: one launch instead of one per operation. A graph holds the
 * pointers, sizes and scalars of its capture, so it gives the same bits as
 * the eager operations it recorded.
 *
 * Off unless NCTMC_CUDA_GRAPHS=1 was in the environment when the backend
 * was created (cuda_backend.cu reads it once). A graph is dropped when the
 * scratch buffer it captured has been reallocated since (scratch_epoch),
 * when the backend's settings change (bf16, attention) and on graph_reset.
 * A capture that fails (an operation the driver cannot record) marks its
 * key eager for good and keeps the reason for cuda_graph_describe().
 */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"

static cuda_graph_entry *find_entry(cuda_backend *cb, const nctmc_graph_key *key)
{
    for (int i = 0; i < CUDA_GRAPH_CACHE; i++) {
        cuda_graph_entry *e = &cb->graphs[i];
        if (e->state != CUDA_GRAPH_FREE && memcmp(&e->key, key, sizeof *key) == 0)
            return e;
    }
    return NULL;
}

/* Frees an entry; a graph may still be running on the stream, so the
 * stream is drained before its executable is destroyed. */
static void drop_entry(cuda_backend *cb, cuda_graph_entry *e)
{
    if (e->exec) {
        cudaStreamSynchronize(cb->stream);
        cudaGraphExecDestroy(e->exec);
    }
    memset(e, 0, sizeof *e);
}

/* A free entry, else the next one in turn (its graph dropped). */
static cuda_graph_entry *new_entry(cuda_backend *cb, const nctmc_graph_key *key)
{
    cuda_graph_entry *e = NULL;
    for (int i = 0; i < CUDA_GRAPH_CACHE && !e; i++)
        if (cb->graphs[i].state == CUDA_GRAPH_FREE)
            e = &cb->graphs[i];
    if (!e) {
        e = &cb->graphs[cb->graph_next];
        cb->graph_next = (cb->graph_next + 1) % CUDA_GRAPH_CACHE;
        drop_entry(cb, e);
    }
    e->key = *key;
    e->state = CUDA_GRAPH_SEEN;
    e->scratch_epoch = cb->scratch_epoch;
    return e;
}

static int launch(cuda_backend *cb, cuda_graph_entry *e)
{
    if (!cuda_check(cb, cudaGraphLaunch(e->exec, cb->stream), "graph launch"))
        return NCTMC_GRAPH_REPLAYED; /* recorded; reported at synchronize */
    cb->graph_replays++;
    return NCTMC_GRAPH_REPLAYED;
}

int cuda_graph_begin(nctmc_backend *be, const nctmc_graph_key *key)
{
    cuda_backend *cb = cuda_of(be);
    if (!cb->graphs_on || cb->pending != NCTMC_OK)
        return NCTMC_GRAPH_EAGER;
    cuda_graph_entry *e = find_entry(cb, key);
    if (e && e->state != CUDA_GRAPH_FAILED && e->scratch_epoch != cb->scratch_epoch) {
        /* the scratch it captured was reallocated: start over */
        drop_entry(cb, e);
        e = NULL;
    }
    if (!e) {
        new_entry(cb, key);
        return NCTMC_GRAPH_EAGER;
    }
    if (e->state == CUDA_GRAPH_FAILED)
        return NCTMC_GRAPH_EAGER;
    if (e->state == CUDA_GRAPH_READY)
        return launch(cb, e);
    /* seen once: record this run */
    if (!cuda_check(cb, cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal),
                    "graph capture")) {
        cb->pending = NCTMC_OK; /* not an error of the operations: run them eagerly */
        cb->pending_msg[0] = '\0';
        e->state = CUDA_GRAPH_FAILED;
        snprintf(cb->graph_reason, sizeof cb->graph_reason, "cudaStreamBeginCapture failed");
        return NCTMC_GRAPH_EAGER;
    }
    cb->capturing = e;
    return NCTMC_GRAPH_CAPTURING;
}

/* Marks the capturing entry failed with a reason; the pending error, if the
 * failed capture recorded one, is the capture's and is cleared (the caller
 * runs the operations again eagerly, which report their own). */
static bool capture_failed(cuda_backend *cb, cuda_graph_entry *e, const char *what,
                           cudaError_t err)
{
    cudaGetLastError();
    snprintf(cb->graph_reason, sizeof cb->graph_reason, "%s: %s%s%.120s", what,
             cudaGetErrorString(err), cb->pending != NCTMC_OK ? "; during capture: " : "",
             cb->pending != NCTMC_OK ? cb->pending_msg : "");
    cb->pending = NCTMC_OK;
    cb->pending_msg[0] = '\0';
    e->state = CUDA_GRAPH_FAILED;
    cb->graph_failures++;
    return false;
}

bool cuda_graph_end(nctmc_backend *be)
{
    cuda_backend *cb = cuda_of(be);
    cuda_graph_entry *e = cb->capturing;
    cb->capturing = NULL;
    if (!e)
        return true; /* not capturing: nothing to end */
    cudaGraph_t graph = NULL;
    cudaError_t err = cudaStreamEndCapture(cb->stream, &graph);
    if (err != cudaSuccess || !graph)
        return capture_failed(cb, e, "cudaStreamEndCapture", err);
    if (cb->pending != NCTMC_OK) {
        cudaGraphDestroy(graph);
        return capture_failed(cb, e, "an operation failed while captured", cudaSuccess);
    }
    err = cudaGraphInstantiate(&e->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
        e->exec = NULL;
        return capture_failed(cb, e, "cudaGraphInstantiate", err);
    }
    e->state = CUDA_GRAPH_READY;
    cb->graph_captures++;
    launch(cb, e);
    return true;
}

void cuda_graph_reset(nctmc_backend *be)
{
    cuda_backend *cb = cuda_of(be);
    for (int i = 0; i < CUDA_GRAPH_CACHE; i++)
        drop_entry(cb, &cb->graphs[i]);
    cb->graph_next = 0;
}

void cuda_graph_describe(cuda_backend *cb, char *buf, size_t size)
{
    if (!cb->graphs_on) {
        snprintf(buf, size, "graphs off");
        return;
    }
    snprintf(buf, size, "graphs on: %lld captured, %lld replays, %lld failed%s%.160s",
             (long long)cb->graph_captures, (long long)cb->graph_replays,
             (long long)cb->graph_failures, cb->graph_reason[0] ? " (" : "", cb->graph_reason);
    if (cb->graph_reason[0] && strlen(buf) + 2 < size)
        strcat(buf, ")");
}
