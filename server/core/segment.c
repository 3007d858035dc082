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
 * context. Unregistered when the client goes (client.c). */
#include "server/core/segment.h"
#include "server/core/devctx.h"
#include "server/core/fault.h"
#include "server/memory/quietctx.h"

void srv_segment_register(struct srv_client *c, int dev)
{
    if (!c->shm_registered && srv_device_made(dev) && srv_fault_gate(c, dev) == CUDA_SUCCESS &&
        srv_use_device(dev) == CUDA_SUCCESS &&
        srv_host_register(c->shm, c->shm_size,
                          CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
            CUDA_SUCCESS) {
        c->shm_registered = 1;
        if (DRV(cuMemHostGetDevicePointer_v2)(&c->shm_dptr, c->shm, 0) != CUDA_SUCCESS)
            c->shm_dptr = 0;
    }
}
