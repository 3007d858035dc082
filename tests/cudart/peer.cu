// peer: peer access through the CUDA runtime, which enables it with cuCtxEnablePeerAccess on
// the current device's primary context: both directions between devices 0 and 1, the errors
// (twice, a disable of nothing, bad flags, a device with itself), a kernel on device 1 reading
// device 0's memory, and a device reset that ends its peer access. Skips (77) with fewer than
// two devices.
#include "common.h"
#include "../kernels/kernels.cu"

#define BYTES (1u << 20)

int main()
{
    t_init("peer", 120);
    int ndev = 0, can = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) t_skip("needs two devices, found %d", ndev);
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (!can) t_skip("device 0 cannot reach device 1");
    CHECK(cudaSetDevice(0));
    REQUIRE(cudaDeviceEnablePeerAccess(1, 1) == cudaErrorInvalidValue, "flags 1 accepted");
    REQUIRE(cudaDeviceDisablePeerAccess(1) == cudaErrorPeerAccessNotEnabled,
            "disabled what was not enabled");
    CHECK(cudaDeviceEnablePeerAccess(1, 0));
    REQUIRE(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorPeerAccessAlreadyEnabled, "enabled twice");
    cudaGetLastError(); // the runtime keeps the last error: it is this check's
    printf("device 0 with itself: %s\n", cudaGetErrorName(cudaDeviceEnablePeerAccess(0, 0)));
    cudaGetLastError();
    printf("device 0 disabled with itself: %s\n", cudaGetErrorName(cudaDeviceDisablePeerAccess(0)));
    cudaGetLastError();
    t_ok("0 -> 1 enabled, and the errors");

    unsigned char *src, *dst, *host = (unsigned char *)malloc(BYTES);
    CHECK(cudaMalloc(&src, BYTES));
    CHECK(cudaMemset(src, 0x5a, BYTES));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaMalloc(&dst, BYTES));
    copy_u8<<<64, 256>>>(src, dst, BYTES);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(host, dst, BYTES, cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < BYTES; i++)
        REQUIRE(host[i] == 0x5a, "byte %u: %#x", i, host[i]);
    t_ok("a kernel on device 1 reads device 0's memory");
    CHECK(cudaFree(dst));
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceDisablePeerAccess(1));
    CHECK(cudaFree(src));

    // A reset ends device 1's context, and its peer access with it (0 -> 1 went before it:
    // what a reset does to access towards the context it ends is left alone here).
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceReset());
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaDeviceDisablePeerAccess(0));
    t_ok("device 1 reset: peer access enabled anew");
    free(host);
    t_pass();
}
