/* managed_churn: a client that keeps its managed memory moving, for tests that kill it at
 * random points (tests/managed_kill.sh): ARRAYS managed arrays of MIB MiB each, and rounds
 * of host writes (every page of one array, a few scattered pages of the others), launches
 * over every array, an asynchronous copy between two of them, prefetches both ways, a
 * synchronisation and host checks. Prints `ready` after its first round.
 *   managed_churn [ARRAYS [MIB [ROUNDS]]]   (defaults 4, 32, 0: until killed) */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    t_init("managed_churn", 0);
    unsigned arrays = argc > 1 ? (unsigned)atoi(argv[1]) : 4;
    size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 32;
    unsigned rounds = argc > 3 ? (unsigned)atoi(argv[3]) : 0;
    REQUIRE(arrays >= 2 && arrays <= 16 && mib >= 1 && mib <= 1024, "bad arguments");
    unsigned long long n = (mib << 20) / 4;
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUfunction inc = t_get_function(t_load_module("kernels.ptx"), "inc_u32");
    CUdeviceptr a[16];
    unsigned *want = calloc(arrays, sizeof(*want));
    REQUIRE(want, "calloc");
    for (unsigned i = 0; i < arrays; i++) {
        CHECK(cuMemAllocManaged(&a[i], n * 4, CU_MEM_ATTACH_GLOBAL));
        memset((void *)(uintptr_t)a[i], 0, n * 4);
    }
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemLocation cpu = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    for (unsigned r = 0; !rounds || r < rounds; r++) {
        unsigned full = r % arrays; /* this round's array the host writes whole */
        for (unsigned i = 0; i < arrays; i++) {
            unsigned *h = (unsigned *)(uintptr_t)a[i];
            if (i == full) {
                for (unsigned long long k = 0; k < n; k++)
                    h[k] = r;
                want[i] = r;
            } else {
                for (unsigned long long k = 17; k < n; k += n / 7)
                    h[k] = want[i];
            }
            void *params[] = {&a[i], &n};
            CHECK(cuLaunchKernel(inc, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, s, params, NULL));
            want[i]++;
        }
        unsigned src = (full + 1) % arrays, dst = (full + 2) % arrays;
        if (src != dst) { /* dst takes src's values */
            CHECK(cuMemcpyDtoDAsync(a[dst], a[src], n * 4, s));
            want[dst] = want[src];
        }
        CHECK(cuMemPrefetchAsync_v2(a[src], n * 4, r % 2 ? cpu : here, 0, s));
        CHECK(cuStreamSynchronize(s));
        for (unsigned i = 0; i < arrays; i++) {
            const unsigned *h = (const unsigned *)(uintptr_t)a[i];
            for (unsigned long long k = r % 5; k < n; k += 4099)
                REQUIRE(h[k] == want[i], "round %u array %u [%llu] = %u, want %u", r, i, k, h[k],
                        want[i]);
        }
        if (r == 0) {
            printf("ready\n");
            fflush(stdout);
        }
    }
    t_ok("%u rounds over %u managed arrays of %zu MiB", rounds, arrays, mib);
    for (unsigned i = 0; i < arrays; i++)
        CHECK(cuMemFree(a[i]));
    free(want);
    CHECK(cuStreamDestroy(s));
    t_pass();
}
