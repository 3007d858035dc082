// bigstack: a kernel with 8 KiB of local memory per thread. The driver grows its context's
// stack size limit for it (H200: 1024 -> 8192 bytes, 1.8 GiB of device memory) and never
// lowers it; the GPU tier's stack-back row runs this through the shim and checks that the
// server's device memory is back once it has left (server/core/context.c, srv_limits_idle).
// Not in programs.txt: the CPU test driver has no such kernel.
#include "common.h"

__global__ void big_stack(int *out, int n)
{
    volatile int buf[2048];
    for (int i = 0; i < 2048; i++)
        buf[i] = i * n;
    out[threadIdx.x + blockIdx.x * blockDim.x] = buf[(n * threadIdx.x) & 2047];
}

int main()
{
    t_init("bigstack", 120);
    CHECK(cudaSetDevice(0));
    const int blocks = 132, threads = 256;
    int *out;
    CHECK(cudaMalloc(&out, blocks * threads * sizeof(int)));
    big_stack<<<blocks, threads>>>(out, 3);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    int host[threads];
    CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
    for (int i = 0; i < threads; i++)
        REQUIRE(host[i] == ((3 * i) & 2047) * 3, "thread %d read %d", i, host[i]);
    size_t stack = 0;
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    REQUIRE(stack >= 8192, "stack size limit %zu after a kernel with 8 KiB of local memory", stack);
    t_ok("a kernel with 8 KiB of local memory per thread ran; the stack limit grew to it");
    CHECK(cudaFree(out));
    t_pass();
}
