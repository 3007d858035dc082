/* Kernel launches, replayed from the packed parameters the client sent (the buffer form of
 * cuLaunchKernel, so the server needs no layout of its own), on the client's stream. The
 * buffer form costs the driver no more than kernelParams (bench/NOTES.md, "Launch forms"). */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/code/codegate.h"
#include "server/code/launch.h"
#include "server/code/unloads.h"
#include "server/code/seqgraph.h"
#include "server/core/queue.h"
#include "server/core/clients.h"
#include "channel/prof.h"

#include <string.h>

/* CUDA_ERROR_NOT_SUPPORTED if an attribute carries a handle (see proto.h). */
static CUresult plain_attrs(const CUlaunchAttribute *a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (chan_launch_attr_unmapped(a[i].id)) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

/* The driver's launch configuration of a launch record's grid, block and shared memory, on
 * stream st with n attributes. */
static CUlaunchConfig config_of(const uint32_t grid[3], const uint32_t block[3], uint32_t smem,
                                CUstream st, CUlaunchAttribute *attrs, uint32_t n)
{
    return (CUlaunchConfig){.gridDimX = grid[0],
                            .gridDimY = grid[1],
                            .gridDimZ = grid[2],
                            .blockDimX = block[0],
                            .blockDimY = block[1],
                            .blockDimZ = block[2],
                            .sharedMemBytes = smem,
                            .hStream = st,
                            .attrs = attrs,
                            .numAttrs = n};
}

/* In a CUkernel's record (aux): bit d, its code was loaded in device d's context through
 * the code gate (codegate.c). A CUkernel launched as a function loads its code in the
 * launch, and that load waits in the driver for every stream of the context (a first launch
 * waited so while a stream was held on a value in device memory, and so did every other client;
 * so did adding a graph's kernel node of it: bench/NOTES.md, "Driver calls held by a waiting
 * stream"): its first launch, node or lookup on a device loads it in the gate first. */
CUresult srv_kernel_loaded(struct srv_client *c, struct srv_obj *k, int dev)
{
    uint64_t bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (!bit || (k->aux & bit)) return CUDA_SUCCESS;
    CUresult res = srv_codegate_enter(c, dev, "loading code");
    if (res != CUDA_SUCCESS) return res;
    CUfunction f;
    res = DRV(cuKernelGetFunction)(&f, (CUkernel)(uintptr_t)k->key.value);
    srv_codegate_leave(dev);
    if (res == CUDA_SUCCESS) k->aux |= bit;
    srv_library_hot(k);  /* its library's unload may wait now (unloads.c) */
    return CUDA_SUCCESS; /* a failure is the launch's to report */
}

/* The driver keeps a launch's parameters until the kernel runs: counted as queued (queue.c).
 * The kernel is the stream's last (streamrec.h). */
static void launched(struct srv_client *c, struct srv_stream *s, size_t psize, uint64_t func,
                     int is_kernel)
{
    atomic_fetch_add_explicit(&c->stats.launches, 1, memory_order_relaxed);
    srv_queue_charge(c, s, psize);
    s->last_func = func;
    s->last_is_kernel = is_kernel;
}

CUresult srv_launch_plain(struct srv_client *c, struct srv_stream *s, uint64_t func, int is_kernel,
                          const uint32_t grid[3], const uint32_t block[3], uint32_t smem,
                          const uint8_t *p, size_t psize)
{
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)p, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                     CU_LAUNCH_PARAM_END};
    CUstream st = srv_stream_prepare(c, s);
    uint64_t t0 = 0, c0 = 0;
    if (CHAN_PROFILING && c->prof) {
        t0 = chan_now_ns();
        c0 = chan_thread_cpu_ns();
    }
    CUresult res =
        DRV(cuLaunchKernel)((CUfunction)(uintptr_t)func, grid[0], grid[1], grid[2], block[0],
                            block[1], block[2], smem, st, NULL, psize ? extra : NULL);
    if (CHAN_PROFILING && c->prof) {
        c->prof->launch_cpu_ns += chan_thread_cpu_ns() - c0;
        c->prof->launch_ns += chan_now_ns() - t0;
        c->prof->launches++;
    }
    if (res == CUDA_SUCCESS) launched(c, s, psize, func, is_kernel);
    return res;
}

void srv_op_launch(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_launch m;
    CUresult res;
    (void)len; /* its attributes and parameters end it (its %payload line) */
    memcpy(&m, p, sizeof(m));
    size_t attr_bytes = (size_t)m.nattrs * sizeof(CUlaunchAttribute);
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    struct srv_obj *kern = NULL;
    if (!srv_obj_find(c, SHIM_HT_CUfunction, m.func) &&
        !(kern = srv_obj_find(c, SHIM_HT_CUkernel, m.func))) {
        res = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    struct srv_stream *s = srv_stream_resolve(c, m.stream, r->flags & CHAN_RF_PTDS, r->thread);
    if (!s) {
        res = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (kern && (res = srv_kernel_loaded(c, kern, s->device)) != CUDA_SUCCESS) goto out;
    CUlaunchAttribute attrs[65];
    memcpy(attrs, p + sizeof(m), attr_bytes);
    if ((res = plain_attrs(attrs, m.nattrs)) != CUDA_SUCCESS) goto out;
    uint8_t *params = p + sizeof(m) + attr_bytes;
    size_t psize = m.param_bytes;
    /* A repeated sequence's launches may be held and go as one graph (seqgraph.c). */
    if (srv_seq_launch(c, s, &m, kern != NULL, attrs, params, m.param_bytes)) return;
    if (m.nattrs == 0 && !m.cooperative) {
        res = srv_launch_plain(c, s, m.func, kern != NULL, m.grid, m.block, m.smem, params, psize);
        if (res == CUDA_SUCCESS) srv_seq_issued(c, s, &m, kern != NULL, params, m.param_bytes);
        goto out;
    }
    if (m.cooperative) {
        attrs[m.nattrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        memset(&attrs[m.nattrs].value, 0, sizeof(attrs[m.nattrs].value));
        attrs[m.nattrs++].value.cooperative = 1;
    }
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                     CU_LAUNCH_PARAM_END};
    CUlaunchConfig cfg =
        config_of(m.grid, m.block, m.smem, srv_stream_prepare(c, s), attrs, m.nattrs);
    res = DRV(cuLaunchKernelEx)(&cfg, (CUfunction)(uintptr_t)m.func, NULL, psize ? extra : NULL);
    if (res == CUDA_SUCCESS) launched(c, s, psize, m.func, kern != NULL);
out:
    srv_defer(c, res, "kernel launch");
}

/* cuGraphKernelNodeSetAttribute, cuStreamSetAttribute: the value is a union whose event
 * members (a programmatic or launch completion event) are handles the generic path
 * cannot check; the one the attribute selects must be the caller's own event, or the
 * caller's work could record another client's. (The driver takes neither for streams or
 * nodes, launches alone; a foreign handle must never depend on that.) */
static CUresult launch_attr_before(struct srv_client *c, struct srv_call *k)
{
    const CUlaunchAttributeValue *v = k->a.ptr[2];
    CUevent ev;
    if (!v) return CUDA_SUCCESS; /* the driver's answer */
    switch ((CUlaunchAttributeID)k->a.val[1]) {
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        ev = v->programmaticEvent.event;
        break;
    case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        ev = v->launchCompletionEvent.event;
        break;
    default:
        return CUDA_SUCCESS;
    }
    return ev && !srv_obj_find(c, SHIM_HT_CUevent, (uint64_t)(uintptr_t)ev)
               ? CUDA_ERROR_INVALID_HANDLE
               : CUDA_SUCCESS;
}

const struct srv_hook srv_hook_launch_attr = {.before = launch_attr_before};
