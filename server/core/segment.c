/* The client's segment registered with the driver once, so that copies through staging
 * slots and into reply lanes are direct DMA, and device-mapped: streams wait on the
 * host-function "done" words in it and store replies from the GPU into its lanes (waits.c).
 * Failure is not fatal: the driver then stages those copies itself, and no reply comes
 * from the GPU. Not where device dev faulted (fault.c): its context there is dead.
 * Registered in the quiet context (server/memory/quietctx.c), portable: every context's. At the
 * handshake with device 0's context (client.c); where contexts are made at first use (devctx.c), at
 * the client's first context instead (context.c), never before: no context is made for it, and a
 * client that moves to its GPU's server before its first context (the pipe directory's server's
 * clients there) leaves none to unregister, which waits for the work of every client of that
 * context. Unregistered when the client goes (client.c).
 *
 * Not waited for. Until the quiet context is made (it is made when a client first needs it:
 * quietctx.c; its making takes 0.6-0.7 s on an H200, up to 7.8 s beside other servers'
 * makings, 1.4 s in a fault's successor: bench/NOTES.md, "The quiet context"), a client is
 * served without it, as where its registration failed, and it is registered before the first
 * record after the quiet context is made (worker.c, srv_segment_retry). The segment does not
 * start that making: a client that only holds a context and device memory leaves the server
 * with one context. A client's first copy through the staging slots (copy.c) or wait that the
 * GPU would answer (waits.c) does, at its next record (c->quiet_why); a call that cannot go without
 * it (a host function, a host node) waits for it (srv_segment_need). Registering it in the shared
 * context meanwhile would make its unregistration wait for every client's work, and hold their
 * launches, when the client leaves (leave_beside.sh); waiting made the first client of a fresh
 * server, and every new client of a fault's successor, wait for the quiet context before their
 * first call. */
#include "server/core/segment.h"
#include "server/core/devctx.h"
#include "server/core/fault.h"
#include "server/core/streamrec.h" /* struct srv_ctx */
#include "server/memory/quietctx.h"

/* wait: srv_host_register (waits for the quiet context), else srv_host_register_soon. */
static void segment_register(struct srv_client *c, int dev, int wait)
{
    if (c->shm_registered || !srv_device_made(dev) || srv_fault_gate(c, dev) != CUDA_SUCCESS ||
        srv_use_device(dev) != CUDA_SUCCESS)
        return;
    unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
    uint64_t t0 = chan_now_ns();
    CUresult r = wait ? srv_host_register(c->shm, c->shm_size, flags)
                      : srv_host_register_soon(c->shm, c->shm_size, flags);
    if (r == CUDA_ERROR_NOT_READY) {
        c->shm_want = 1;
        return;
    }
    /* A late one is said with its time: it is taken in the client's worker, between its
     * records (the one registration a client's work meets). */
    if (c->shm_want)
        srv_log("Client process %d's segment registered late (%s), in %.1f ms", (int)c->pid,
                r == CUDA_SUCCESS ? "ok" : srv_errname(r), (double)(chan_now_ns() - t0) / 1e6);
    c->shm_want = 0;
    if (r != CUDA_SUCCESS) return;
    c->shm_registered = 1;
    if (DRV(cuMemHostGetDevicePointer_v2)(&c->shm_dptr, c->shm, 0) != CUDA_SUCCESS) c->shm_dptr = 0;
}

void srv_segment_register(struct srv_client *c, int dev)
{
    segment_register(c, dev, 0);
}

void srv_segment_later(struct srv_client *c)
{
    if (!srv_quiet_settled()) {
        if (c->quiet_why) srv_quiet_start(c, c->quiet_why);
        return;
    }
    if (c->cur) segment_register(c, c->cur->device, 0);
}

void srv_segment_need(struct srv_client *c)
{
    if (!c->shm_want || c->shm_registered) return;
    srv_quiet_start(c, "a host function");
    segment_register(c, c->cur ? c->cur->device : 0, 1);
}
