/* launch: kernel parameters of every size and alignment (kernelParams, the `extra` buffer,
 * a struct by value), cuLaunchKernelEx, cooperative launch, dynamic shared memory and its
 * opt-in above 48 KiB, launch-configuration errors returned at once, function attributes,
 * parameter layout, occupancy, and many launches in a row. */
#include "tests/progs/common.h"

#include <stdalign.h>
#include <stdio.h>
#include <string.h>

static CUmodule g_mod;
static CUdeviceptr g_out; /* 8 doubles */

/* The arguments of param_mix, and what it must write. */
struct mix_args {
    char c;
    double d;
    short s;
    int i;
    unsigned long long u;
    float f;
};

/* Distinct byte patterns in every argument, so that a shifted or truncated one shows;
 * u has 53 significant bits, exact as a double. */
static const struct mix_args mix_sets[] = {
    {90, 3.141592653589793, -12345, 305419896, 0x001F2E3D4C5B6A79ull, 1.5f},
    {17, -2.0e-3, 32767, -2023406815, 0x0010000000000001ull, -0.1f},
    {123, 65504.25, -2, 7, 3ull, 1e30f},
};

/* Fills the output with NaNs and waits: a memset may return before it is done, and a
 * non-blocking stream would not wait for it. */
static void clear_out(void)
{
    CHECK(cuMemsetD32(g_out, 0xffffffffu, 16));
    CHECK(cuCtxSynchronize());
}

/* Reads param_mix's output and compares every field with the arguments. */
static void need_mix(const struct mix_args *a, const char *what)
{
    double o[6];
    CHECK(cuMemcpyDtoH(o, g_out, sizeof o));
    double want[6] = {a->c, a->d, a->s, a->i, (double)a->u, a->f};
    for (int k = 0; k < 6; k++)
        REQUIRE(o[k] == want[k], "%s: out[%d] = %.17g, want %.17g", what, k, o[k], want[k]);
}

static void launch_mix(CUfunction f, const struct mix_args *a)
{
    struct mix_args v = *a;
    void *args[] = {&v.c, &v.d, &v.s, &v.i, &v.u, &v.f, &g_out};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
}

static void param_layout(CUfunction mix, CUfunction sp)
{
    static const size_t offs[] = {0, 8, 16, 20, 24, 32, 40}, sizes[] = {1, 8, 2, 4, 8, 4, 8};
    for (size_t i = 0; i < 7; i++) {
        size_t off = 99, size = 99;
        CHECK(cuFuncGetParamInfo(mix, i, &off, &size));
        printf("param_mix param %zu: offset %zu size %zu\n", i, off, size);
        REQUIRE(off == offs[i] && size == sizes[i], "param_mix param %zu: offset %zu size %zu", i,
                off, size);
    }
    size_t off, size;
    EXPECT(cuFuncGetParamInfo(mix, 7, &off, &size), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuFuncGetParamInfo(sp, 0, &off, &size));
    REQUIRE(off == 0 && size == 32, "struct_param param 0: offset %zu size %zu", off, size);
    CHECK(cuFuncGetParamInfo(sp, 1, &off, &size));
    REQUIRE(off == 32 && size == 8, "struct_param param 1: offset %zu size %zu", off, size);
    printf("struct_param params: offsets 0 32 sizes 32 8\n");
    t_ok("cuFuncGetParamInfo layouts");
}

static void params(CUfunction mix)
{
    for (size_t k = 0; k < sizeof mix_sets / sizeof mix_sets[0]; k++) {
        clear_out();
        launch_mix(mix, &mix_sets[k]);
        need_mix(&mix_sets[k], "param_mix kernelParams");
    }
    t_ok("param_mix through kernelParams");

    /* The same through one buffer laid out with the offsets cuFuncGetParamInfo gives. */
    for (size_t k = 0; k < sizeof mix_sets / sizeof mix_sets[0]; k++) {
        const struct mix_args *a = &mix_sets[k];
        const void *src[] = {&a->c, &a->d, &a->s, &a->i, &a->u, &a->f, &g_out};
        alignas(16) unsigned char buf[64];
        size_t bufsize = 0;
        memset(buf, 0xee, sizeof buf);
        for (size_t i = 0; i < 7; i++) {
            size_t off, size;
            CHECK(cuFuncGetParamInfo(mix, i, &off, &size));
            REQUIRE(off + size <= sizeof buf, "param_mix layout larger than expected");
            memcpy(buf + off, src[i], size);
            bufsize = off + size;
        }
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bufsize,
                         CU_LAUNCH_PARAM_END};
        clear_out();
        CHECK(cuLaunchKernel(mix, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
        need_mix(a, "param_mix extra buffer");
    }
    t_ok("param_mix through CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE");
}

static void struct_by_value(CUfunction sp)
{
    struct mix {
        char tag;
        double val;
        int arr[3];
    } m = {7, -2.75, {11, -22, 33}};
    _Static_assert(sizeof(struct mix) == 32, "struct mix must match the kernel's layout");
    double o[5];
    clear_out();
    void *args[] = {&m, &g_out};
    CHECK(cuLaunchKernel(sp, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(o, g_out, sizeof o));
    double want[5] = {7, -2.75, 11, -22, 33};
    for (int k = 0; k < 5; k++)
        REQUIRE(o[k] == want[k], "struct_param: out[%d] = %g, want %g", k, o[k], want[k]);
    t_ok("struct_param: a struct passed by value");
}

static void launch_ex(CUfunction mix, CUfunction inc)
{
    int least, greatest;
    CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attr.value.priority = greatest;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    struct mix_args v = mix_sets[1];
    void *args[] = {&v.c, &v.d, &v.s, &v.i, &v.u, &v.f, &g_out};
    clear_out();
    CHECK(cuLaunchKernelEx(&cfg, mix, args, NULL));
    CHECK(cuStreamSynchronize(s));
    need_mix(&v, "cuLaunchKernelEx with a priority attribute");
    t_ok("cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PRIORITY");

    CUdeviceptr p;
    unsigned long long n = 5000;
    unsigned host[5000];
    CHECK(cuMemAlloc(&p, n * 4));
    CHECK(cuMemsetD32(p, 41, n));
    CHECK(cuCtxSynchronize());
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = 3, cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 64, cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s;
    void *iargs[] = {&p, &n};
    CHECK(cuLaunchKernelEx(&cfg, inc, iargs, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, p, sizeof host));
    for (unsigned long long i = 0; i < n; i++)
        REQUIRE(host[i] == 42, "cuLaunchKernelEx inc_u32: p[%llu] = %u, want 42", i, host[i]);
    t_ok("cuLaunchKernelEx with no attributes");
    CHECK(cuMemFree(p));
    CHECK(cuStreamDestroy(s));
}

static void cooperative(CUdevice dev, CUfunction inc)
{
    int coop = 0;
    CHECK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev));
    if (!coop) return; /* both runs being compared see the same device */
    CUdeviceptr p;
    unsigned long long n = 1024;
    unsigned host[1024];
    CHECK(cuMemAlloc(&p, n * 4));
    CHECK(cuMemsetD32(p, 9, n));
    void *args[] = {&p, &n};
    CHECK(cuLaunchCooperativeKernel(inc, 2, 1, 1, 128, 1, 1, 0, NULL, args));
    CHECK(cuMemcpyDtoH(host, p, sizeof host));
    for (unsigned i = 0; i < n; i++)
        REQUIRE(host[i] == 10, "cooperative inc_u32: p[%u] = %u", i, host[i]);
    CHECK(cuMemFree(p));
    t_ok("cuLaunchCooperativeKernel");
}

/* Runs block_sum over n ints with `block` threads and `shmem` bytes of dynamic shared
 * memory and checks every block's sum. */
static void run_block_sum(CUfunction bs, int n, unsigned block, unsigned shmem, const char *what)
{
    static int in[100000];
    static long long out[1000];
    unsigned grid = (unsigned)((n + (int)block - 1) / (int)block);
    REQUIRE(n <= 100000 && grid <= 1000, "block_sum case too large");
    for (int i = 0; i < n; i++)
        in[i] = (i * 37) % 201 - 100;
    CUdeviceptr din, dout;
    CHECK(cuMemAlloc(&din, n * sizeof(int)));
    CHECK(cuMemAlloc(&dout, grid * sizeof(long long)));
    CHECK(cuMemcpyHtoD(din, in, n * sizeof(int)));
    CHECK(cuMemsetD8(dout, 0xff, grid * sizeof(long long)));
    void *args[] = {&din, &dout, &n};
    CHECK(cuLaunchKernel(bs, grid, 1, 1, block, 1, 1, shmem, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(out, dout, grid * sizeof(long long)));
    for (unsigned b = 0; b < grid; b++) {
        long long want = 0;
        for (unsigned t = 0; t < block && b * block + t < (unsigned)n; t++)
            want += in[b * block + t];
        REQUIRE(out[b] == want, "%s: block %u sum %lld, want %lld", what, b, out[b], want);
    }
    CHECK(cuMemFree(din));
    CHECK(cuMemFree(dout));
}

static void shared_memory(CUdevice dev, CUfunction bs)
{
    run_block_sum(bs, 100000, 256, 256 * 8, "block_sum");
    run_block_sum(bs, 777, 64, 64 * 8, "block_sum small");
    t_ok("block_sum with dynamic shared memory");

    int optin = 0;
    CHECK(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    if (optin < 65536) return; /* both runs being compared see the same device */
    CUdeviceptr din, dout;
    int n = 256;
    CHECK(cuMemAlloc(&din, 256 * 4));
    CHECK(cuMemAlloc(&dout, 8));
    void *args[] = {&din, &dout, &n};
    EXPECT(cuLaunchKernel(bs, 1, 1, 1, 256, 1, 1, 65536, NULL, args, NULL),
           CUDA_ERROR_INVALID_VALUE);
    t_ok("64 KiB of dynamic shared memory without opt-in: CUDA_ERROR_INVALID_VALUE");
    CHECK(cuFuncSetAttribute(bs, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
    int v = 0;
    CHECK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bs));
    REQUIRE(v == 65536, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES reads %d", v);
    CHECK(cuMemFree(din));
    CHECK(cuMemFree(dout));
    run_block_sum(bs, 5000, 256, 65536, "block_sum with 64 KiB");
    t_ok("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) then 64 KiB launch");
}

static void config_errors(CUfunction empty, CUfunction inc)
{
    EXPECT(cuLaunchKernel(empty, 1, 1, 1, 2048, 1, 1, 0, NULL, NULL, NULL),
           CUDA_ERROR_INVALID_VALUE);
    t_ok("block of 2048 threads: CUDA_ERROR_INVALID_VALUE at once");
    EXPECT(cuLaunchKernel(empty, 0, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    t_ok("grid dimension 0: CUDA_ERROR_INVALID_VALUE at once");

    /* Neither error is sticky: the next launch works. */
    CUdeviceptr p;
    unsigned long long n = 100;
    unsigned host[100];
    CHECK(cuMemAlloc(&p, n * 4));
    CHECK(cuMemsetD32(p, 0, n));
    void *args[] = {&p, &n};
    CHECK(cuLaunchKernel(inc, 1, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(host, p, sizeof host));
    for (int i = 0; i < 100; i++)
        REQUIRE(host[i] == 1, "launch after config errors: p[%d] = %u", i, host[i]);
    CHECK(cuMemFree(p));
    t_ok("launches work after configuration errors");
}

static size_t smem_for(int block_size)
{
    return (size_t)block_size * 16; /* 16 bytes of dynamic shared memory per thread */
}

/* The occupancy calculator: the values depend on the GPU, so they are printed for the
 * tier to compare with the native run on the same machine. */
static void occupancy(CUfunction f)
{
    int grid = 0, block = 0;
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
    REQUIRE(block >= 32 && grid >= 1, "potential block size %d, grid %d", block, grid);
    printf("potential block size %d, min grid %d\n", block, grid);
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, smem_for, 0, 200));
    REQUIRE(block >= 1 && block <= 200, "potential block size %d with a limit of 200", block);
    printf("with 16 B/thread and a limit of 200: block size %d, min grid %d\n", block, grid);
    CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, NULL, 1024, 0,
                                                    CU_OCCUPANCY_DEFAULT));
    printf("with 1 KiB per block, flags: block size %d, min grid %d\n", block, grid);
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attr.value.clusterDim.x = 2;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUlaunchConfig cfg = {.gridDimX = 64,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 128,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = s,
                          .attrs = &attr,
                          .numAttrs = 1};
    int n = 0;
    CHECK(cuOccupancyMaxActiveClusters(&n, f, &cfg));
    REQUIRE(n >= 1, "cuOccupancyMaxActiveClusters %d", n);
    printf("active clusters of 2 x 128 threads: %d\n", n);
    cfg.hStream = NULL;
    CHECK(cuOccupancyMaxPotentialClusterSize(&n, f, &cfg));
    REQUIRE(n >= 2, "cuOccupancyMaxPotentialClusterSize %d", n);
    printf("potential cluster size: %d\n", n);
    CHECK(cuStreamDestroy(s));
    t_ok("occupancy calculator: block size, clusters");
}

static void attributes(CUfunction f)
{
    int v = 0;
    CHECK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    REQUIRE(v >= 1 && v <= 1024, "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK %d", v);
    t_ok("cuFuncGetAttribute(MAX_THREADS_PER_BLOCK) in 1..1024");
    int blocks = 0;
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 0));
    REQUIRE(blocks >= 1, "cuOccupancyMaxActiveBlocksPerMultiprocessor %d", blocks);
    t_ok("cuOccupancyMaxActiveBlocksPerMultiprocessor >= 1");
    occupancy(f);
}

static void many_launches(CUfunction empty, CUfunction inc)
{
    CUdeviceptr p;
    unsigned long long n = 4096;
    static unsigned host[4096];
    CHECK(cuMemAlloc(&p, n * 4));
    CHECK(cuMemsetD32(p, 0, n));
    for (int i = 0; i < 10000; i++)
        CHECK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    void *args[] = {&p, &n};
    for (int i = 0; i < 100; i++)
        CHECK(cuLaunchKernel(inc, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(host, p, sizeof host));
    for (unsigned i = 0; i < n; i++)
        REQUIRE(host[i] == 100, "after 100 inc_u32: p[%u] = %u", i, host[i]);
    CHECK(cuMemFree(p));
    t_ok("10000 empty launches then 100 inc_u32, all applied");
}

int main(void)
{
    t_init("launch", 300);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    g_mod = t_load_module("kernels.ptx");
    CUfunction mix = t_get_function(g_mod, "param_mix");
    CUfunction sp = t_get_function(g_mod, "struct_param");
    CUfunction inc = t_get_function(g_mod, "inc_u32");
    CUfunction empty = t_get_function(g_mod, "empty_kernel");
    CUfunction bs = t_get_function(g_mod, "block_sum");
    CHECK(cuMemAlloc(&g_out, 16 * sizeof(double)));
    t_ok("setup");

    param_layout(mix, sp);
    params(mix);
    struct_by_value(sp);
    launch_ex(mix, inc);
    cooperative(dev, inc);
    shared_memory(dev, bs);
    config_errors(empty, inc);
    attributes(t_get_function(g_mod, "vec_add"));
    many_launches(empty, inc);

    CHECK(cuMemFree(g_out));
    CHECK(cuModuleUnload(g_mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
