/* devices: what CUDA_VISIBLE_DEVICES leaves this process. Prints cuInit's result, the
 * device count and, per device, its UUID (as nvidia-smi prints it), PCI bus id and name;
 * that a device past the count is refused (cuDeviceGet, cuDevicePrimaryCtxRetain with a
 * forged CUdevice); then, with `hold MB`, allocates MB MiB on its device 0, writes them,
 * prints "ready" and waits for its stdin to close (a test reads the server's accounting
 * meanwhile). Exit 0 whatever the count, 1 when a call fails that must not. */
#include <cuda.h>
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
