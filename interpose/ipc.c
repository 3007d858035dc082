/* IPC handles between clients of one server (server/memory/ipc.c says what a handle is and how
 * long what it names lives). Here: one CHAN_OP_IPC round trip per call, and what the
 * client knows of what it opened: opened memory enters its ranges (so copies and pointer
 * queries see device memory), an opened event its known events. Physical memory passed as
 * POSIX descriptors is physical.c's, through the same round trip (shim_ipc_op). */
#include "interpose/shim.h"

#include <string.h>

CUresult shim_ipc_op(uint32_t what, uint32_t flags, uint64_t value, const void *handle,
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
    CUresult r = shim_ipc_op(CHAN_IPC_GET_MEM, 0, dptr, NULL, &out);
    if (r == CUDA_SUCCESS) memcpy(pHandle->reserved, out.handle, sizeof(pHandle->reserved));
    return r;
}

CUresult SHIM_IMPL(cuIpcOpenMemHandle_v2)(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                          unsigned int Flags)
{
    struct chan_ipc_reply out;
    if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_ipc_op(CHAN_IPC_OPEN_MEM, Flags, 0, handle.reserved, &out);
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
    shim_hostfn_settle(SHIM_SETTLE_ALL);
    CUresult r = shim_ipc_op(CHAN_IPC_CLOSE_MEM, 0, dptr, NULL, &out);
    if (r == CUDA_SUCCESS && out.opens == 0) shim_range_remove(dptr, NULL);
    return r;
}

CUresult SHIM_IMPL(cuIpcGetEventHandle)(CUipcEventHandle *pHandle, CUevent event)
{
    struct chan_ipc_reply out;
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    uint64_t h = (uint64_t)(uintptr_t)event;
    if (!event || shim_known_find(SHIM_HT_CUevent, h, NULL) != 0) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = shim_ipc_op(CHAN_IPC_GET_EVENT, 0, h, NULL, &out);
    if (r == CUDA_SUCCESS) memcpy(pHandle->reserved, out.handle, sizeof(pHandle->reserved));
    return r;
}

CUresult SHIM_IMPL(cuIpcOpenEventHandle)(CUevent *phEvent, CUipcEventHandle handle)
{
    struct chan_ipc_reply out;
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_ipc_op(CHAN_IPC_OPEN_EVENT, 0, 0, handle.reserved, &out);
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

CUresult shim_ipc_mirror_open(const uint8_t handle[CU_IPC_HANDLE_SIZE], uint64_t at,
                              uint64_t *value)
{
    struct chan_ipc_reply out;
    CUresult r = shim_ipc_op(CHAN_IPC_OPEN_MIRROR, 0, at, handle, &out);
    if (r == CUDA_SUCCESS) *value = out.value;
    return r;
}

CUresult shim_ipc_mirror_close(uint64_t base)
{
    struct chan_ipc_reply out;
    return shim_ipc_op(CHAN_IPC_CLOSE_MEM, 0, base, NULL, &out);
}
