/* IPC handles between clients of one server (server/memory/ipc.c says what a handle is and how
 * long what it names lives). Here: one CHAN_OP_IPC round trip per call, and what the
 * client knows of what it opened: opened memory enters its ranges (so copies and pointer
 * queries see device memory), an opened event its known events. */
#define _GNU_SOURCE
#include "interpose/shim.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static CUresult ipc(uint32_t what, uint32_t flags, uint64_t value, const void *handle,
                    struct chan_ipc_reply *out)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct chan_ipc m = {.what = what, .flags = flags, .value = value};
    if (handle) memcpy(m.handle, handle, sizeof(m.handle));
    uint32_t got = 0;
    memset(out, 0, sizeof(*out));
    r = shim_rpc(CHAN_OP_IPC, &m, sizeof(m), out, sizeof(*out), &got);
    if (r == CUDA_SUCCESS && got != sizeof(*out)) r = CUDA_ERROR_UNKNOWN;
    return r;
}

CUresult SHIM_IMPL(cuIpcGetMemHandle)(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct chan_ipc_reply out;
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ipc(CHAN_IPC_GET_MEM, 0, dptr, NULL, &out);
    if (r == CUDA_SUCCESS) memcpy(pHandle->reserved, out.handle, sizeof(pHandle->reserved));
    return r;
}

CUresult SHIM_IMPL(cuIpcOpenMemHandle_v2)(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                          unsigned int Flags)
{
    struct chan_ipc_reply out;
    if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ipc(CHAN_IPC_OPEN_MEM, Flags, 0, handle.reserved, &out);
    if (r != CUDA_SUCCESS) return r;
    if (out.opens == 1) {
        struct shim_range rg = {.base = out.value,
                                .size = out.size,
                                .kind = SHIM_HT_MEM_OPENED,
                                .ctx = shim_route_ctx()};
        shim_range_add(&rg);
    }
    *pdptr = (CUdeviceptr)out.value;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuIpcCloseMemHandle)(CUdeviceptr dptr)
{
    struct chan_ipc_reply out;
    /* The last close waits for this process's streams in the server (hostfn.c). */
    shim_hostfn_settle();
    CUresult r = ipc(CHAN_IPC_CLOSE_MEM, 0, dptr, NULL, &out);
    if (r == CUDA_SUCCESS && out.opens == 0) shim_range_remove(dptr, NULL);
    return r;
}

CUresult SHIM_IMPL(cuIpcGetEventHandle)(CUipcEventHandle *pHandle, CUevent event)
{
    struct chan_ipc_reply out;
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    uint64_t h = (uint64_t)(uintptr_t)event;
    if (!event || shim_known_find(SHIM_HT_CUevent, h, NULL) != 0) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = ipc(CHAN_IPC_GET_EVENT, 0, h, NULL, &out);
    if (r == CUDA_SUCCESS) memcpy(pHandle->reserved, out.handle, sizeof(pHandle->reserved));
    return r;
}

CUresult SHIM_IMPL(cuIpcOpenEventHandle)(CUevent *phEvent, CUipcEventHandle handle)
{
    struct chan_ipc_reply out;
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ipc(CHAN_IPC_OPEN_EVENT, 0, 0, handle.reserved, &out);
    if (r != CUDA_SUCCESS) return r;
    struct shim_known k = {.ctx = shim_route_ctx(),
                           .flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS};
    shim_known_add(SHIM_HT_CUevent, out.value, &k);
    *phEvent = (CUevent)(uintptr_t)out.value;
    return CUDA_SUCCESS;
}

/* A record of an interprocess event is seen by other processes as soon as cuEventRecord
 * returns (they may wait on it at once, told through a pipe): the record must have reached
 * the driver by then, not only the client's ring. Other events keep the asynchronous path. */
static int event_record_wait(const void *const *argv)
{
    struct shim_known k;
    if (!atomic_load_explicit(&shim_interprocess_events, memory_order_relaxed))
        return 0; /* the common case: one load, no lookup */
    uint64_t h = (uint64_t)(uintptr_t)*(const CUevent *)argv[0];
    return shim_known_find(SHIM_HT_CUevent, h, &k) == 0 && (k.flags & CU_EVENT_INTERPROCESS);
}

const struct shim_hook shim_hook_event_record = {.wait = event_record_wait};

/* ---------------------------------------------------------------- physical memory handles */

/* The descriptor of an exported physical allocation is a sealed memfd holding the server's
 * handle bytes: any process may receive it (SCM_RIGHTS, pidfd_getfd) and import it, and
 * what it names is decided by the server from those bytes alone. */
#define VMM_FD_NAME "mpsshim-vmm-handle"

CUresult SHIM_IMPL(cuMemExportToShareableHandle)(void *shareableHandle,
                                                 CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType,
                                                 unsigned long long flags)
{
    struct chan_ipc_reply out;
    if (!shareableHandle || flags) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return shim_refuse_as("cuMemExportToShareableHandle of a handle type other than "
                              "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                              CUDA_ERROR_NOT_SUPPORTED);
    /* At the server that holds it, as it names it (physical.c). */
    struct shim_route saved;
    int routed = shim_phys_route(handle, &saved);
    uint64_t there;
    CUresult r = shim_phys_server(handle, &there);
    if (r == CUDA_SUCCESS) r = ipc(CHAN_IPC_GET_VMM, (uint32_t)handleType, there, NULL, &out);
    if (routed) shim_route_end(&saved);
    if (r != CUDA_SUCCESS) return r;
    int fd = memfd_create(VMM_FD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, out.handle, sizeof(out.handle), 0) != (ssize_t)sizeof(out.handle) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *handle,
                                                   void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    uint8_t bytes[CU_IPC_HANDLE_SIZE];
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return shim_refuse_as("cuMemImportFromShareableHandle of a handle type other than "
                              "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                              CUDA_ERROR_NOT_SUPPORTED);
    /* A descriptor that is not one of ours (another server's clients export the same way;
     * a process running on the driver itself exports its own kind) reads as a bad one. */
    int fd = (int)(intptr_t)osHandle;
    if (pread(fd, bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t value = 0;
    CUresult r = shim_ipc_vmm_import(bytes, &value);
    if (r == CUDA_SUCCESS) *handle = (CUmemGenericAllocationHandle)value;
    return r;
}

CUresult shim_ipc_vmm_import(const uint8_t bytes[CU_IPC_HANDLE_SIZE], uint64_t *handle)
{
    struct chan_ipc_reply out;
    CUresult r = ipc(CHAN_IPC_OPEN_VMM, 0, 0, bytes, &out);
    if (r != CUDA_SUCCESS) return r;
    *handle = out.value;
    shim_phys_made(handle); /* the process's value of it (physical.c) */
    return CUDA_SUCCESS;
}

CUresult shim_ipc_mirror_open(const uint8_t handle[CU_IPC_HANDLE_SIZE], uint64_t at,
                              uint64_t *value)
{
    struct chan_ipc_reply out;
    CUresult r = ipc(CHAN_IPC_OPEN_MIRROR, 0, at, handle, &out);
    if (r == CUDA_SUCCESS) *value = out.value;
    return r;
}

CUresult shim_ipc_vmm_handle(CUmemGenericAllocationHandle h, uint8_t out[CU_IPC_HANDLE_SIZE])
{
    struct chan_ipc_reply rep;
    uint64_t there;
    CUresult r = shim_phys_server(h, &there);
    if (r != CUDA_SUCCESS) return r;
    r = ipc(CHAN_IPC_GET_VMM, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, there, NULL, &rep);
    if (r == CUDA_SUCCESS) memcpy(out, rep.handle, CU_IPC_HANDLE_SIZE);
    return r;
}

CUresult shim_ipc_mirror_close(uint64_t base)
{
    struct chan_ipc_reply out;
    return ipc(CHAN_IPC_CLOSE_MEM, 0, base, NULL, &out);
}
