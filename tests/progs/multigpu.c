/* multigpu: every visible device through one process: a context and memory on each, a
 * kernel on each, peer copies between them, and contexts that stay apart (an allocation
 * of one device refused by the other's context). Skips (77) with fewer than two devices.
 * Prints the device count and, per device, its PCI bus id on stderr (for the tier script
 * to compare with nvidia-smi; stdout stays machine-independent). */
#include "tests/progs/common.h"

#include <stdio.h>

#define MAXD 8
#define ELEMS (1u << 20)

int main(void)
{
    t_init("multigpu", 120);
    CHECK(cuInit(0));
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    for (int d = 0; d < n && d < MAXD; d++) {
        CUdevice dev;
        char bus[64];
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDeviceGetPCIBusId(bus, sizeof(bus), dev));
        fprintf(stderr, "device %d %s\n", d, bus);
    }
    if (n < 2) t_skip("needs two devices, found %d", n);
    if (n > MAXD) n = MAXD;
    CUcontext ctx[MAXD];
    CUdeviceptr buf[MAXD], dst[MAXD];
    CUmodule mod[MAXD];
    for (int d = 0; d < n; d++) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev));
        CHECK(cuCtxSetCurrent(ctx[d]));
        mod[d] = t_load_module("kernels.ptx");
        CUfunction wp = t_get_function(mod[d], "write_pattern");
        CHECK(cuMemAlloc(&buf[d], ELEMS * 4));
        CHECK(cuMemAlloc(&dst[d], ELEMS * 4));
        unsigned long long cnt = ELEMS;
        unsigned seed = 1000u + (unsigned)d;
        void *args[] = {&buf[d], &cnt, &seed};
        CHECK(cuLaunchKernel(wp, 64, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
        CUdevice got;
        CHECK(cuCtxGetDevice(&got));
        REQUIRE(got == d, "context of device %d says device %d", d, got);
    }
    t_ok("a context, memory and a kernel on each of the devices");
    for (int d = 0; d < n; d++) {
        int s = (d + 1) % n; /* copy device s's pattern onto device d */
        CHECK(cuMemcpyPeer(dst[d], ctx[d], buf[s], ctx[s], ELEMS * 4));
        uint32_t *host = malloc(ELEMS * 4);
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuMemcpyDtoH(host, dst[d], ELEMS * 4));
        size_t bad = t_pattern_mismatch(host, ELEMS * 4, 1000u + (unsigned)s);
        REQUIRE(bad == SIZE_MAX, "device %d: peer copy from %d wrong at byte %zu", d, s, bad);
        free(host);
    }
    t_ok("peer copies between every pair of neighbouring devices");
    for (int d = 0; d < n; d++) {
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuMemFree(buf[d]));
        CHECK(cuMemFree(dst[d]));
        CHECK(cuModuleUnload(mod[d]));
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDevicePrimaryCtxRelease(dev));
    }
    printf("devices %d\n", n);
    t_pass();
}
