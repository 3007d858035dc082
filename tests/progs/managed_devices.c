/* managed_devices: one managed allocation used by kernels of two devices in turn (issue 31:
 * pages that live on a device must follow the work from one device to the other): rounds of
 * host writes, a kernel on device 0, then one on device 1 that reads what the first wrote,
 * the host checking after each context's synchronisation; prefetches to either device; a
 * device-to-device copy in the other device's context. Skips (77) with fewer than two
 * devices. Same output natively and through the shim. */
#include "tests/progs/common.h"

#include <stdio.h>

#define N (1u << 18) /* 1 MiB of words */

static CUcontext ctx[2];
static CUfunction incf[2], wpatf[2];

/* On device d, in its context: p[i] += 1 for i < n (synchronised when sync). */
static void inc_on(int d, CUdeviceptr p, unsigned long long n, int sync)
{
    void *params[] = {&p, &n};
    CHECK(cuCtxSetCurrent(ctx[d]));
    CHECK(cuLaunchKernel(incf[d], t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    if (sync) CHECK(cuCtxSynchronize());
}

static void expect(const unsigned *h, unsigned seed, unsigned add, const char *when, unsigned r)
{
    for (unsigned i = 0; i < N; i++)
        REQUIRE(h[i] == t_pattern_at(seed, i) + add, "round %u, %s: [%u] = %u, want %u", r, when, i,
                h[i], t_pattern_at(seed, i) + add);
}

int main(void)
{
    t_init("managed_devices", 120);
    CHECK(cuInit(0));
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("needs two devices, found %d", n);
    CUdevice dev[2];
    for (int d = 0; d < 2; d++) {
        CHECK(cuDeviceGet(&dev[d], d));
        CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev[d]));
        CHECK(cuCtxSetCurrent(ctx[d]));
        CUmodule mod = t_load_module("kernels.ptx");
        incf[d] = t_get_function(mod, "inc_u32");
        wpatf[d] = t_get_function(mod, "write_pattern");
    }
    CHECK(cuCtxSetCurrent(ctx[0]));
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, N * 4, CU_MEM_ATTACH_GLOBAL));
    unsigned *h = (unsigned *)(uintptr_t)m;

    for (unsigned r = 0; r < 20; r++) {
        int first = r % 2, second = !first;
        t_fill_pattern(h, N * 4, r);
        inc_on(first, m, N, 1);
        expect(h, r, 1, "after the first device", r);
        h[r] += 100; /* the host's write between the devices */
        inc_on(second, m, N, 1);
        REQUIRE(h[r] == t_pattern_at(r, r) + 102, "round %u: the host's write lost", r);
        h[r] -= 100;
        expect(h, r, 2, "after the second device", r);
        inc_on(first, m, N, 1); /* one device, then the other, no host access between */
        inc_on(second, m, N, 1);
        expect(h, r, 4, "after both again", r);
    }
    t_ok("20 rounds of the host and kernels of two devices on one managed allocation");

    CUmemLocation on[2] = {{.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev[0]},
                           {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev[1]}};
    for (unsigned r = 0; r < 4; r++) { /* prefetched to one device, used by the other */
        int to = r % 2, user = !to;
        t_fill_pattern(h, N * 4, 50 + r);
        CHECK(cuCtxSetCurrent(ctx[to]));
        CHECK(cuMemPrefetchAsync_v2(m, N * 4, on[to], 0, NULL));
        inc_on(user, m, N, 0);
        CHECK(cuCtxSetCurrent(ctx[to]));
        CHECK(cuCtxSynchronize());
        CHECK(cuCtxSetCurrent(ctx[user]));
        CHECK(cuCtxSynchronize());
        expect(h, 50 + r, 1, "prefetched to the other device", r);
    }
    t_ok("prefetched to one device, used by a kernel of the other");

    /* Device 1's memory, written there, copied into the managed allocation in its context. */
    CUdeviceptr d1;
    CHECK(cuCtxSetCurrent(ctx[1]));
    CHECK(cuMemAlloc(&d1, N * 4));
    unsigned long long cnt = N;
    unsigned seed = 77;
    void *params[] = {&d1, &cnt, &seed};
    CHECK(cuLaunchKernel(wpatf[1], 64, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    h[5] = 5;
    CHECK(cuMemcpyDtoD(m, d1, N * 4 / 2));
    CHECK(cuCtxSynchronize());
    for (unsigned i = 0; i < N / 2; i++)
        REQUIRE(h[i] == t_pattern_at(77, i), "copied in device 1's context: [%u] = %u", i, h[i]);
    REQUIRE(h[N / 2] == t_pattern_at(53, N / 2) + 1, "past the copy: %u", h[N / 2]);
    inc_on(0, m, N / 2, 1);
    REQUIRE(h[0] == t_pattern_at(77, 0) + 1, "device 0 after the copy: %u", h[0]);
    t_ok("a copy in the other device's context, then a kernel of the first");

    CHECK(cuCtxSetCurrent(ctx[1]));
    CHECK(cuMemFree(d1));
    CHECK(cuCtxSetCurrent(ctx[0]));
    CHECK(cuMemFree(m));
    for (int d = 0; d < 2; d++)
        CHECK(cuDevicePrimaryCtxRelease(dev[d]));
    t_pass();
}
