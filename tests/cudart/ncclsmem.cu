// ncclsmem: NCCL's kernel preparation and launch through the CUDA runtime, on every device
// (each rank of a job does it on its own): cudaFuncGetAttributes, then
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) beyond the default
// (enqueue.cc: ncclInitKernelsForDevice), the function by cudaGetFuncBySymbol and
// cuLaunchKernelEx from cudaGetDriverEntryPointByVersion with NCCL's attributes, that much
// dynamic shared memory and the parameters in an `extra` buffer (ncclLaunchKernel). Through
// the shim this launch was refused with CUDA_ERROR_INVALID_VALUE, NCCL's "Cuda failure 1
// 'invalid argument'" (issue 30).
#include "common.h"
#include "../kernels/kernels.cu"
#include "../progs/nccl_attrs.h"

#include <cuda.h>
#include <stddef.h>

#define SMEM (64u << 10) // beyond the 48 KiB a kernel gets without asking
#define CLUSTER 2u       // the grid of 4 blocks a multiple of it, as NCCL makes its grid
#define N (1u << 16)

typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);

static void on_device(int d, launch_ex_t launch_ex)
{
    CHECK(cudaSetDevice(d));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, (const void *)write_pattern));
    CHECK(cudaFuncSetAttribute((const void *)write_pattern,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    cudaFunction_t fn;
    CHECK(cudaGetFuncBySymbol(&fn, (const void *)write_pattern));
    unsigned *p;
    cudaStream_t st;
    CHECK(cudaMalloc(&p, N * sizeof(unsigned)));
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    struct args {
        unsigned *p;
        unsigned long long n;
        unsigned seed;
    } args = {p, N, 0x5eed0u + (unsigned)d};
    size_t size = offsetof(struct args, seed) + sizeof(args.seed); // the kernel's 20 bytes
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUlaunchAttribute a[3];
    unsigned nattrs = nccl_launch_attrs(a, CLUSTER);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = 4;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = SMEM;
    cfg.hStream = (CUstream)st;
    cfg.attrs = a;
    cfg.numAttrs = nattrs;
    CUresult r = launch_ex(&cfg, (CUfunction)fn, NULL, extra);
    REQUIRE(r == CUDA_SUCCESS, "device %d: cuLaunchKernelEx returned %d", d, (int)r);
    CHECK(cudaStreamSynchronize(st));
    static unsigned h[N];
    CHECK(cudaMemcpy(h, p, sizeof(h), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < N; i++)
        REQUIRE(h[i] == t_pattern_at(args.seed, i), "device %d: word %u is %#x", d, i, h[i]);
    CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(p));
    t_ok("device %d: the kernel launched as NCCL launches it, with its shared memory raised", d);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    t_init("ncclsmem", 120);
    launch_ex_t launch_ex = NULL;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", (void **)&launch_ex, 12000,
                                           cudaEnableDefault, &q));
    REQUIRE(q == cudaDriverEntryPointSuccess && launch_ex, "no cuLaunchKernelEx (%d)", (int)q);
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    for (int d = 0; d < n; d++)
        on_device(d, launch_ex);
    t_pass();
}
