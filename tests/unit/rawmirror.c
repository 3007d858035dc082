/* The raw client's mirror mode (tests/unit/rawclient.c): CHAN_IPC_OPEN_MIRROR, which only
 * the shim of a process using two GPUs' servers sends (interpose/mirror.c), sent to a GPU's
 * server by hand with a legacy IPC handle of another process's memory made through a
 * sibling GPU's server (tests/server_per_gpu.sh passes one): the sibling gives a mirror for
 * its exporter's own process alone, so it must be refused; so must the same handle with its
 * secret changed, and named as physical memory to be mapped at an address of the server's own
 * zone. The server must go on serving this client. */
#include <stdio.h>
#include <string.h>

#include "tests/unit/rawclient.h"

static int hex_bytes(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (uint8_t)v;
    }
    return hex[2 * n] == '\0' ? 0 : -1;
}

static CUresult open_mirror(struct raw_session *x, const uint8_t *handle, uint64_t at)
{
    struct chan_ipc m = {.what = CHAN_IPC_OPEN_MIRROR, .value = at};
    struct chan_ipc_reply out;
    memcpy(m.handle, handle, sizeof(m.handle));
    return raw_request(x, CHAN_OP_IPC, &m, sizeof(m), &out, sizeof(out));
}

int raw_mirror(const char *hex)
{
    uint8_t h[CU_IPC_HANDLE_SIZE];
    if (hex_bytes(hex, h, sizeof(h)) != 0) {
        fprintf(stderr, "not a handle of %zu bytes in hex\n", sizeof(h));
        return 1;
    }
    struct raw_session x;
    if (raw_session_with_ctx(&x) != 0) return 1;
    raw_expect("another process's memory, mirrored here", open_mirror(&x, h, 0),
               CUDA_ERROR_INVALID_VALUE);
    uint8_t forged[sizeof(h)];
    memcpy(forged, h, sizeof(h));
    forged[40] ^= 0x5a; /* in the secret (ipc.c's struct srv_ipc_handle) */
    raw_expect("the same with its secret changed", open_mirror(&x, forged, 0),
               CUDA_ERROR_INVALID_VALUE);
    /* Named physical memory (its kind, ipc.c's), at an address of this client's own. */
    CUdeviceptr d = 0, *pd = &d;
    size_t bytes = 4096;
    const void *aa[] = {&pd, &bytes};
    CUresult r = raw_call(&x, SHIM_ID_cuMemAlloc_v2, aa, &d, sizeof(d));
    raw_expect("cuMemAlloc_v2 (the server goes on)", r, CUDA_SUCCESS);
    memcpy(forged, h, sizeof(h));
    uint32_t kind = SHIM_HT_CUmemGenericAllocationHandle;
    memcpy(forged + 24, &kind, sizeof(kind));
    raw_expect_refused("as physical memory, mapped over its own", open_mirror(&x, forged, d));
    r = raw_call(&x, SHIM_ID_cuMemAlloc_v2, aa, &d, sizeof(d));
    raw_expect("cuMemAlloc_v2 after them", r, CUDA_SUCCESS);
    return raw_failures ? 1 : 0;
}
