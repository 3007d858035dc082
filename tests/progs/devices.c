/* devices: what CUDA_VISIBLE_DEVICES leaves this process. Prints cuInit's result, the
 * device count and, per device, its UUID (as nvidia-smi prints it), PCI bus id and name;
 * that a device past the count is refused (cuDeviceGet, cuDevicePrimaryCtxRetain with a
 * forged CUdevice); then, with `hold MB`, allocates MB MiB on its device 0, writes them,
 * prints "ready" and waits for its stdin to close (a test reads the server's accounting
 * meanwhile); with `peers`, prints the module loading mode (asked before any context, as
 * PyTorch asks it), makes its context on device 0 and prints, for every pair of
 * devices, cuDeviceCanAccessPeer's answer and the P2P attributes (a client moved to its GPU's
 * server at that context answers them itself: interpose/moved.c); with `addrs`, makes its
 * context on device 0 and prints the addresses it is given: device memory of 256 MiB and of
 * 1 MiB, pinned host memory, and a reservation of 1 GiB that names no address (the servers of
 * a pipe directory's GPUs give different ones: server/core/zone.c). Exit 0 whatever the
 * count, 1 when a call fails that must not. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *name_of(CUresult r)
{
    const char *s = NULL;
    return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "?";
}

int main(int argc, char **argv)
{
    CUresult r = cuInit(0);
    printf("init %s\n", name_of(r));
    if (r != CUDA_SUCCESS) return 0;
    int n = 0;
    if ((r = cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
        printf("cuDeviceGetCount: %s\n", name_of(r));
        return 1;
    }
    printf("count %d\n", n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        CUuuid u;
        char bus[64], name[256];
        if (cuDeviceGet(&d, i) != CUDA_SUCCESS || cuDeviceGetUuid(&u, d) != CUDA_SUCCESS ||
            cuDeviceGetPCIBusId(bus, sizeof(bus), d) != CUDA_SUCCESS ||
            cuDeviceGetName(name, sizeof(name), d) != CUDA_SUCCESS) {
            printf("device %d: query failed\n", i);
            return 1;
        }
        const unsigned char *b = (const unsigned char *)u.bytes;
        printf("device %d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x "
               "%s %s\n",
               i, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
               b[13], b[14], b[15], bus, name);
    }
    CUdevice forged = n;
    CUcontext c = NULL;
    printf("cuDeviceGet(%d) %s\n", n, name_of(cuDeviceGet(&forged, n)));
    printf("cuDevicePrimaryCtxRetain(%d) %s\n", n, name_of(cuDevicePrimaryCtxRetain(&c, n)));
    if (argc == 2 && strcmp(argv[1], "peers") == 0 && n > 0) {
        /* Asked before any context, as PyTorch asks it (it needs none). */
        CUmoduleLoadingMode mode = 0;
        r = cuModuleGetLoadingMode(&mode);
        printf("loading mode %s %d\n", name_of(r), r == CUDA_SUCCESS ? (int)mode : -1);
        if ((r = cuDevicePrimaryCtxRetain(&c, 0)) != CUDA_SUCCESS) {
            printf("peers: %s\n", name_of(r));
            return 1;
        }
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                int can = -1, v[5];
                if (a == b) continue;
                r = cuDeviceCanAccessPeer(&can, a, b);
                printf("peer %d %d: %s %d", a, b, name_of(r), can);
                for (int k = 0; k < 5; k++) {
                    v[k] = -1;
                    r = cuDeviceGetP2PAttribute(&v[k], (CUdevice_P2PAttribute)(k + 1), a, b);
                    printf(" %s %d", name_of(r), v[k]);
                }
                printf("\n");
            }
        cuDevicePrimaryCtxRelease(0);
    }
    if (argc == 2 && strcmp(argv[1], "addrs") == 0 && n > 0) {
        CUdeviceptr big = 0, small = 0, va = 0;
        void *host = NULL;
        if ((r = cuDevicePrimaryCtxRetain(&c, 0)) != CUDA_SUCCESS ||
            (r = cuCtxSetCurrent(c)) != CUDA_SUCCESS ||
            (r = cuMemAlloc(&big, (size_t)256 << 20)) != CUDA_SUCCESS ||
            (r = cuMemAlloc(&small, (size_t)1 << 20)) != CUDA_SUCCESS ||
            (r = cuMemHostAlloc(&host, (size_t)1 << 20, 0)) != CUDA_SUCCESS ||
            (r = cuMemAddressReserve(&va, (size_t)1 << 30, 0, 0, 0)) != CUDA_SUCCESS) {
            printf("addrs: %s\n", name_of(r));
            return 1;
        }
        printf("addrs big %#llx small %#llx host %#llx reserved %#llx\n", (unsigned long long)big,
               (unsigned long long)small, (unsigned long long)(uintptr_t)host,
               (unsigned long long)va);
        cuMemAddressFree(va, (size_t)1 << 30);
        cuMemFreeHost(host);
        cuMemFree(small);
        cuMemFree(big);
        cuDevicePrimaryCtxRelease(0);
    }
    if (argc == 3 && strcmp(argv[1], "hold") == 0 && n > 0) {
        size_t bytes = (size_t)atoi(argv[2]) << 20;
        CUdeviceptr p;
        if ((r = cuDevicePrimaryCtxRetain(&c, 0)) != CUDA_SUCCESS ||
            (r = cuCtxSetCurrent(c)) != CUDA_SUCCESS ||
            (r = cuMemAlloc(&p, bytes)) != CUDA_SUCCESS ||
            (r = cuMemsetD8(p, 0x5a, bytes)) != CUDA_SUCCESS ||
            (r = cuCtxSynchronize()) != CUDA_SUCCESS) {
            printf("hold: %s\n", name_of(r));
            return 1;
        }
        CUdevice on = -1;
        cuCtxGetDevice(&on);
        printf("ready, %zu MiB on device %d\n", bytes >> 20, (int)on);
        fflush(stdout);
        while (getchar() != EOF)
            ;
        cuMemFree(p);
        cuDevicePrimaryCtxRelease(0);
    }
    return 0;
}
