/* The quiet context: a context of the server's own, with nothing ever run in it, in which all
 * host memory the server pins is registered and unregistered: every client's segment, its
 * pinned allocations and registrations, its staging blocks and its managed memory's host
 * views. So a client's unregistration, its leaving's above all, neither waits for the other
 * clients' work nor holds their launches.
 *
 * Why: cuMemHostUnregister waits for the work of the context that registered the range, and
 * while it waits the driver holds launches into that context on any other stream (an H200,
 * driver 580.159.04, `tools/heldwait unregister --spin --launch`: a launch of a function
 * loaded before waited for as long as another stream's kernel ran; cuMemFreeHost alike). In
 * the one shared context that was every client's work: a client that left while another's
 * kernel waited for that other's next launch (a collective's half waiting for its peer;
 * tests/progs/thread_peer) held that launch until the kernel gave up (tests/leave_beside.sh),
 * and any client that left held every other's launches until the work queued before its
 * unregistration had run. Where the range was registered matters, not where it is
 * unregistered (same H200, 2026-11-30): registered in the primary context and unregistered
 * with a second one current, the call still waited and held the launch (`--cross`);
 * registered (PORTABLE, DEVICEMAP) in the second context, used by the primary context's
 * copies at the same speed (42 GB/s both ways, 1 MiB copies), and unregistered there, it
 * waited for nothing and held nothing (`unregister --owned`; `freehost --owned` of
 * cuMemHostAlloc's memory too). A portable registration is every context's, those made later
 * too, and its device pointer is the host pointer in each: the shared contexts use these
 * ranges as their own.
 *
 * What the driver then no longer checks, the server must: that no work still touches the
 * range when it is unregistered. Natively cuMemHostUnregister waits for its own context's
 * work, a process's under MPS; here every caller drains the client's own work first: a
 * release its streams and its families' (registry.c), cuMemFreeHost and cuMemHostUnregister
 * its streams (memory.c), a staging block is unregistered only when its copies are done
 * (hostblocks.c). Another client's kernel that reads a client's device-mapped memory through
 * a pointer it was never given is not waited for, as no client's kernel is kept from any
 * address of the shared context (docs/differences.md).
 *
 * One rule keeps the two places apart: while a quiet context exists every registration is in
 * it, but for the staging blocks registered while it was being made (below). It is made when a
 * client first needs it, not at the server's start: at a client's first copy between host and
 * device, wait that the GPU would answer, host function, pinned allocation or registration,
 * managed allocation, or load of code (ahead of its work: srv_quiet_start's callers), in a thread
 * of its own. So a server whose clients only hold a context and device memory, and an idle
 * server, hold one context per device (the 8-idle-clients figure of issue 29: bench/run.sh's
 * idle family), and an image that serves only such clients never pays for it. Until it is
 * made:
 *   - a client's segment is not registered; it is, before the client's first record after the
 *     context is made (segment.c, srv_host_register_soon);
 *   - a staging block (hostblocks.c) is registered in the shared context and, rather than ever
 *     being unregistered there, kept for other clients until the image ends
 *     (srv_host_register_block);
 *   - a pinned allocation or registration, and a host function (which needs the segment),
 *     wait for it (srv_host_register): 0.6-0.7 s on an H200 from the making's start, once per
 *     image, and less where the client loaded code or copied first, as nearly all do.
 * The context is kept until the server's image ends (its exit, or its fresh start when idle:
 * server/handover/recycle.c, which is what gives back a device's memory after its clients left).
 * Where it cannot be made, or MPSSHIM_QUIET_CONTEXT=0, none ever is in this image: every
 * registration is made in the caller's context and unregistered there, gated (codegate.c), as
 * before. A shared context's fault is the process's, and kills this context too (its
 * unregistrations then answer the fault at once: bench/NOTES.md, "The quiet context"), which
 * changes nothing: the faulted server answers its clients with the fault and serves no new one
 * (handover.c), so nothing registered here is used again.
 *
 * Cost: a context's device memory, about 270 MiB on an H200 (bench/NOTES.md, "The quiet
 * context": the server's memory in use 842924032 bytes with it, 559480832 without; a probe of
 * its own, 264 MiB with its limits at their least), and its making once per image that needs it,
 * logged with how long it took (0.6-0.7 s alone, up to 7.8 s beside other servers' makings).
 * Making a context beside another client's running kernel holds nothing up (`heldwait
 * ctxcreate --spin --launch`). A fault's recovery is about 0.2 s slower: the successor's
 * retain, after a fault of a process that had two contexts (tests/fault.sh). Neither cost
 * could be lowered (`tools/ctxcost`, two H200s, 2026-11-30): CUDA_DEVICE_MAX_CONNECTIONS at
 * 1, 8 or 32 when it is made changes neither its memory nor its 0.62-0.68 s; a green context
 * costs 4-6 MiB, but what is registered in one is the primary context's, and its
 * unregistration waited and held the launch (`heldwait unregister --green`). */
#include "server/memory/quietctx.h"
#include "server/code/codegate.h"
#include "server/core/devctx.h"
#include "server/core/log.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(CUcontext) quiet; /* once made, the same until the image ends */
static _Atomic int failed;       /* its making failed: none in this image (set under lock) */
static _Atomic int started;      /* srv_quiet_start's thread was started */

/* The context made on the first device whose shared context is (the one the server uses
 * anyway), device 0 where none is, its limits at their least (nothing ever runs in it). */
static CUcontext make(void)
{
    int d = 0;
    while (d < srv.ndev && d < CHAN_MAX_DEVICES && !srv_device_made(d))
        d++;
    if (d >= srv.ndev || d >= CHAN_MAX_DEVICES) d = 0;
    uint64_t t0 = chan_now_ns();
    CUdevice dev;
    CUcontext q = NULL, popped;
    CUresult r = DRV(cuDeviceGet)(&dev, d);
    if (r == CUDA_SUCCESS) r = DRV(cuCtxCreate_v4)(&q, NULL, 0, dev);
    if (r != CUDA_SUCCESS) {
        srv_log("The quiet context for host memory could not be made (%s): host memory is "
                "registered in the shared contexts, where its unregistration waits for every "
                "client's work (server/memory/quietctx.c)",
                srv_errname(r));
        return NULL;
    }
    /* Made current by its making: the stack reservation is most of its memory. */
    (void)DRV(cuCtxSetLimit)(CU_LIMIT_STACK_SIZE, 16);
    (void)DRV(cuCtxSetLimit)(CU_LIMIT_PRINTF_FIFO_SIZE, 4096);
    (void)DRV(cuCtxSetLimit)(CU_LIMIT_MALLOC_HEAP_SIZE, 4096);
    (void)DRV(cuCtxPopCurrent_v2)(&popped);
    srv_log("Quiet context made for host memory on device %d in %.0f ms", d,
            (double)(chan_now_ns() - t0) / 1e6);
    return q;
}

/* The quiet context, made now if need be; NULL where there is none in this image. */
static CUcontext ensure(void)
{
    CUcontext q = atomic_load_explicit(&quiet, memory_order_acquire);
    if (q || !srv.quiet_context) return q;
    pthread_mutex_lock(&lock);
    if (!(q = atomic_load_explicit(&quiet, memory_order_relaxed)) && !atomic_load(&failed)) {
        if (!atomic_exchange(&started, 1)) /* no caller said why (srv_quiet_start) */
            srv_log("Making the quiet context for host memory, first needed by a registration");
        if ((q = make()))
            atomic_store_explicit(&quiet, q, memory_order_release);
        else
            atomic_store(&failed, 1);
    }
    pthread_mutex_unlock(&lock);
    return q;
}

static void *prepare(void *arg)
{
    (void)arg;
    (void)ensure();
    return NULL;
}

void srv_quiet_start(const struct srv_client *c, const char *why)
{
    pthread_t t;
    pthread_attr_t a;
    /* A load first: this is asked often (before every record of a client whose segment waits
     * and that asked for it: segment.c; every load of code) and the flag is set once per
     * image. */
    if (!srv.quiet_context || atomic_load_explicit(&started, memory_order_relaxed) ||
        atomic_exchange(&started, 1))
        return;
    if (atomic_load_explicit(&quiet, memory_order_acquire) || atomic_load(&failed)) return;
    srv_log("Making the quiet context for host memory, first needed by client process %d (%s)",
            (int)c->pid, why);
    int ok = pthread_attr_init(&a) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &a, prepare, NULL) == 0;
        pthread_attr_destroy(&a);
    }
    /* Else made by the first registration that waits for it, or started again by the next
     * caller (a staging block's registration, which would otherwise be early for good). */
    if (!ok) atomic_store(&started, 0);
}

int srv_quiet_settled(void)
{
    return !srv.quiet_context || atomic_load_explicit(&quiet, memory_order_acquire) ||
           atomic_load(&failed);
}

CUresult srv_host_register(void *p, size_t n, unsigned flags)
{
    CUcontext q = ensure(), popped;
    if (!q) return DRV(cuMemHostRegister_v2)(p, n, flags);
    /* Never in the caller's context instead: one registration there and the rule above is
     * broken. */
    CUresult r = DRV(cuCtxPushCurrent_v2)(q);
    if (r != CUDA_SUCCESS) return r;
    r = DRV(cuMemHostRegister_v2)(p, n, flags | CU_MEMHOSTREGISTER_PORTABLE);
    (void)DRV(cuCtxPopCurrent_v2)(&popped);
    return r;
}

CUresult srv_host_register_soon(void *p, size_t n, unsigned flags)
{
    /* Asked before every record of a client whose segment waits (worker.c): read only. */
    if (!srv_quiet_settled()) return CUDA_ERROR_NOT_READY;
    return srv_host_register(p, n, flags);
}

CUresult srv_host_register_block(const struct srv_client *c, void *p, size_t n, unsigned flags,
                                 int *where)
{
    if (srv_quiet_settled()) {
        *where = atomic_load_explicit(&quiet, memory_order_acquire) ? SRV_HOSTREG_QUIET
                                                                    : SRV_HOSTREG_HERE;
        return srv_host_register(p, n, flags);
    }
    srv_quiet_start(c, "small copies");
    *where = SRV_HOSTREG_EARLY;
    return DRV(cuMemHostRegister_v2)(p, n, flags | CU_MEMHOSTREGISTER_PORTABLE);
}

CUresult srv_host_unregister(struct srv_client *c, void *p)
{
    CUcontext q = atomic_load_explicit(&quiet, memory_order_acquire), popped;
    if (!q) return srv_gated_unregister(c, p);
    CUresult r = DRV(cuCtxPushCurrent_v2)(q);
    if (r != CUDA_SUCCESS) return r;
    r = DRV(cuMemHostUnregister)(p);
    (void)DRV(cuCtxPopCurrent_v2)(&popped);
    return r;
}

void srv_quiet_release(void)
{
    pthread_mutex_lock(&lock);
    CUcontext q = atomic_exchange(&quiet, NULL);
    if (q) (void)DRV(cuCtxDestroy_v2)(q);
    atomic_store(&failed, 1); /* none made again on the way out */
    pthread_mutex_unlock(&lock);
}
