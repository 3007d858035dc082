/* The raw client's devices mode (tests/unit/rawclient.c, run by tests/devices.sh): a
 * client given the server's device 1 alone forges device 1 wherever a device travels. */
#include <stdio.h>
#include <string.h>

#include "tests/unit/rawclient.h"

/* Given only the server's device 1 (CUDA_VISIBLE_DEVICES=1), it forges device 1 (its own
 * ordinals have 0 alone) in every place a device travels; the server must refuse each,
 * and map its device 0 to the server's 1. */
int raw_devices(void)
{
    struct raw_session x;
    if (raw_session_open_visible(&x, "1") != 0) {
        fprintf(stderr, "no session\n");
        return 1;
    }
    const struct chan_devinfo *di = x.c.devinfo;
    printf("devinfo: %d device(s), device 0 uuid ends %02x\n", di->ndev,
           (unsigned char)di->dev[0].uuid.bytes[15]);
    raw_failures += di->ndev != 1 || di->dev[0].uuid.bytes[15] != 1;
    struct chan_ctx cx = {.id = 1, .device = 1, .primary = 1};
    raw_expect("context on device 1", raw_request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0),
               CUDA_ERROR_INVALID_DEVICE);
    cx.device = -1;
    raw_expect("context on device -1",
               raw_request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0),
               CUDA_ERROR_INVALID_DEVICE);
    cx.device = 0;
    raw_expect("context on device 0", raw_request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0),
               CUDA_SUCCESS);
    CUdevice d0 = 0, d1 = 1;
    int ok = 0, *pok = &ok;
    const void *peer[] = {&pok, &d0, &d1};
    raw_expect("cuDeviceCanAccessPeer(0, 1)",
               raw_call(&x, SHIM_ID_cuDeviceCanAccessPeer, peer, NULL, 0),
               CUDA_ERROR_INVALID_DEVICE);
    CUmemoryPool pool = 0, *pp = &pool;
    const void *dp1[] = {&pp, &d1};
    raw_expect("cuDeviceGetDefaultMemPool(1)",
               raw_call(&x, SHIM_ID_cuDeviceGetDefaultMemPool, dp1, NULL, 0),
               CUDA_ERROR_INVALID_DEVICE);
    size_t gran = 0, *pg = &gran;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1}};
    const CUmemAllocationProp *pprop = &prop;
    CUmemAllocationGranularity_flags gf = CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    const void *ga[] = {&pg, &pprop, &gf};
    raw_expect("cuMemGetAllocationGranularity, location device 1",
               raw_call(&x, SHIM_ID_cuMemGetAllocationGranularity, ga, NULL, 0),
               CUDA_ERROR_INVALID_DEVICE);
    prop.location.id = 0;
    raw_expect("cuMemGetAllocationGranularity, location device 0",
               raw_call(&x, SHIM_ID_cuMemGetAllocationGranularity, ga, NULL, 0), CUDA_SUCCESS);
    CUstream st = NULL;
    CUdevice got = -5, *pgot = &got;
    const void *sg[] = {&st, &pgot};
    raw_expect("cuStreamGetDevice(NULL)",
               raw_call(&x, SHIM_ID_cuStreamGetDevice, sg, &got, sizeof(got)), CUDA_SUCCESS);
    printf("cuStreamGetDevice says device %d (its own numbering)\n", (int)got);
    raw_failures += got != 0;
    CUdeviceptr dptr = 0, *pd = &dptr;
    size_t bytes = 4096;
    const void *aa[] = {&pd, &bytes};
    raw_expect("cuMemAlloc_v2 (lands on the server's device 1)",
               raw_call(&x, SHIM_ID_cuMemAlloc_v2, aa, &dptr, sizeof(dptr)), CUDA_SUCCESS);
    struct chan_copy m;
    memset(&m, 0, sizeof(m));
    m.src.kind = m.dst.kind = CHAN_MEM_DEVICE;
    m.src.device = 1;
    m.dst.device = 0;
    m.src.addr = m.dst.addr = dptr;
    m.width = 16;
    m.height = m.depth = 1;
    m.flags = CHAN_CF_PEER;
    raw_expect("peer copy from device 1", raw_request(&x, CHAN_OP_COPY, &m, sizeof(m), NULL, 0),
               CUDA_ERROR_INVALID_DEVICE);
    return raw_failures ? 1 : 0;
}
