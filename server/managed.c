/* Managed memory (cuMemAllocManaged) shared with clients.
 *
 * The driver's managed memory belongs to the process that allocated it and migrates on
 * page faults there; this server's could not be mapped by a client. So a client's managed
 * allocation is made exactly as pinned memory is (memory.c, srv_op_host_alloc): a sealed
 * memfd mapped at one address here and in the client and registered with
 * cuMemHostRegister(PORTABLE|DEVICEMAP), so that the device pointer is the host pointer and
 * the CPU and the GPU see one coherent buffer (the GPU over the bus; migration to device
 * memory would be a later performance step). It is its own kind of range
 * (%range managed), so that pointer queries say IS_MANAGED and cuMemFree, not
 * cuMemFreeHost, frees it.
 *
 * Memory limits: it counts against the client's device memory limit on the device it was
 * allocated for (the pinned device memory limit), although it holds no device memory here:
 * a limit set to contain a client must contain a program that allocates everything managed
 * (OpenACC, unified-memory codes), and the memory is on the device's books the day it
 * migrates. It also counts against the server's pinned host memory cap
 * (MPSSHIM_MAX_PINNED_MB), as pinned memory does, since its pages are pinned. Advice and
 * prefetches never reach the server (interpose/managed.c says why); __managed__ variables
 * of modules are refused (below). */
#include "server/server.h"

#include <stdatomic.h>

int srv_managed_flags_ok(unsigned flags)
{
    return flags == CU_MEM_ATTACH_GLOBAL || flags == CU_MEM_ATTACH_HOST;
}

/* The end of a managed allocation, however it goes (cuMemFree, its context, its client):
 * the same as a pinned one's; its device bytes are uncounted with its record. */
void srv_release_managed(struct srv_client *c, struct srv_obj *o)
{
    srv_release_pinned(c, o);
}

/* cuMemFree of managed memory: the caller's kernels and copies may still use it, so its
 * work ends first (its own streams only: other clients' work is not waited for); then it
 * is released. The generic path forgets the record after this. */
CUresult srv_managed_free(struct srv_client *c, struct srv_obj *o)
{
    srv_streams_drain(c, 0);
    srv_release_managed(c, o);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- __managed__ variables */

/* A module's __managed__ variable is the driver's managed memory in this process: the
 * client could hand its address to kernels but never dereference it on its CPU. So looking
 * one up is refused (said once), rather than returning an address that faults in the
 * client. Moving such variables into shared memory is not done yet (README). */
static CUresult refuse_managed_global(struct srv_client *c, CUresult r, const CUdeviceptr *dp,
                                      const char *call, const char *name)
{
    unsigned managed = 0;
    if (r != CUDA_SUCCESS || !dp ||
        DRV(cuPointerGetAttribute)(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, *dp) !=
            CUDA_SUCCESS ||
        !managed)
        return r;
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        srv_log("Client process %d: %s of __managed__ variable %s refused (not supported: "
                "module managed variables are not shared with clients); said once",
                (int)c->pid, call, name ? name : "?");
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult module_global_call(struct srv_client *c, struct srv_call *k)
{
    CUdeviceptr *dp = (CUdeviceptr *)(uintptr_t)k->vals[0];
    const char *name = (const char *)(uintptr_t)k->vals[3];
    CUresult r = DRV(cuModuleGetGlobal_v2)(dp, (size_t *)(uintptr_t)k->vals[1],
                                           (CUmodule)(uintptr_t)k->vals[2], name);
    return refuse_managed_global(c, r, dp, "cuModuleGetGlobal", name);
}

const struct srv_hook srv_hook_module_global = {.call = module_global_call};

static CUresult library_global_call(struct srv_client *c, struct srv_call *k)
{
    CUdeviceptr *dp = (CUdeviceptr *)(uintptr_t)k->vals[0];
    const char *name = (const char *)(uintptr_t)k->vals[3];
    CUresult r = DRV(cuLibraryGetGlobal)(dp, (size_t *)(uintptr_t)k->vals[1],
                                         (CUlibrary)(uintptr_t)k->vals[2], name);
    return refuse_managed_global(c, r, dp, "cuLibraryGetGlobal", name);
}

const struct srv_hook srv_hook_library_global = {.call = library_global_call};
