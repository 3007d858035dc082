/* hostreg: the program's own pages registered with cuMemHostRegister (as MPI libraries pin
 * their buffers): contents kept, the device pointer is the host pointer, a kernel writes
 * them in place (mapped memory), async copies to and from them, pointer attributes,
 * registering twice and unregistering twice refused as natively, contents kept after
 * unregistering. Same output natively and through the shim. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES (3u << 20)

int main(void)
{
    t_init("hostreg", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction fill = t_get_function(mod, "fill_u32");
    unsigned char *buf = malloc(BYTES + 4096 + 128);
    REQUIRE(buf, "out of host memory");
    unsigned char *p = buf + 128; /* not page aligned, as programs' buffers are */
    t_fill_pattern(p, BYTES, 0x4e6);
    CHECK(cuMemHostRegister(p, BYTES, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    size_t bad = t_pattern_mismatch(p, BYTES, 0x4e6);
    REQUIRE(bad == SIZE_MAX, "byte %zu changed by registering", bad);
    t_ok("registered 3 MiB at an unaligned address, contents kept");

    CUdeviceptr dp;
    CHECK(cuMemHostGetDevicePointer(&dp, p, 0));
    REQUIRE(dp == (CUdeviceptr)(uintptr_t)p, "the device pointer is not the host pointer");
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp));
    REQUIRE(type == CU_MEMORYTYPE_HOST, "memory type %u", type);
    t_ok("device pointer = host pointer, memory type host");

    unsigned value = 0x5a5a5a5au;
    unsigned long long n = BYTES / 4;
    void *params[] = {&dp, &value, &n};
    CHECK(cuLaunchKernel(fill, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    bad = t_bytes_mismatch(p, BYTES, 0x5a);
    REQUIRE(bad == SIZE_MAX, "byte %zu not written by the kernel", bad);
    t_ok("a kernel wrote the registered pages in place");

    CUstream s;
    CUdeviceptr d;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&d, BYTES));
    t_fill_pattern(p, BYTES, 0x77);
    CHECK(cuMemcpyHtoDAsync(d, p, BYTES, s));
    CHECK(cuStreamSynchronize(s));
    memset(p, 0, BYTES);
    CHECK(cuMemcpyDtoHAsync(p, d, BYTES, s));
    CHECK(cuStreamSynchronize(s));
    bad = t_pattern_mismatch(p, BYTES, 0x77);
    REQUIRE(bad == SIZE_MAX, "byte %zu differs after the round trip", bad);
    t_ok("async copies to and from the registered pages");

    EXPECT(cuMemHostRegister(p + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK(cuMemHostUnregister(p));
    EXPECT(cuMemHostUnregister(p), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    bad = t_pattern_mismatch(p, BYTES, 0x77);
    REQUIRE(bad == SIZE_MAX, "byte %zu changed by unregistering", bad);
    t_ok("registering twice and unregistering twice refused; contents kept");

    CHECK(cuMemHostRegister(p, BYTES, 0));
    CHECK(cuMemHostUnregister(p));
    t_ok("registered and unregistered again");
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
    free(buf);
    t_pass();
}
