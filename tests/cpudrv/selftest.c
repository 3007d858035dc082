// Self-test of the CPU test driver: every family of entry points with real checks.
// Usage: selftest KERNEL_DIR (the build's tests/ folder with the compiled test kernels).
// The driver is configured with 2 devices and 1 GiB each before cuInit.
#include "selftest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int st_failures;
const char *st_kdir;
CUmodule st_mod, st_mod2;

void st_fail(const char *file, int line, const char *what)
{
    __atomic_add_fetch(&st_failures, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
}

void st_failrc(const char *file, int line, const char *what, CUresult got, CUresult want)
{
    const char *g = NULL, *w = NULL;
    cuGetErrorName(got, &g);
    cuGetErrorName(want, &w);
    __atomic_add_fetch(&st_failures, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "FAIL %s:%d: %s -> %s (%d), want %s\n", file, line, what, g ? g : "?", (int)got,
            w ? w : "?");
}

double st_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

unsigned char *st_read(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", st_kdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "selftest: cannot open %s (build the kernels first)\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "selftest: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

void st_load(void)
{
    unsigned char *ptx = st_read("kernels.ptx", NULL);
    unsigned char *ptx2 = st_read("kernels2.ptx", NULL);
    CK(cuModuleLoadData(&st_mod, ptx));
    CK(cuModuleLoadData(&st_mod2, ptx2));
    free(ptx);
    free(ptx2);
}

CUfunction st_fn(const char *name)
{
    CUfunction f = NULL;
    CUresult rc = cuModuleGetFunction(&f, st_mod, name);
    if (rc == CUDA_ERROR_NOT_FOUND) rc = cuModuleGetFunction(&f, st_mod2, name);
    if (rc) st_failrc(__FILE__, __LINE__, name, rc, CUDA_SUCCESS);
    return f;
}

void st_errors_and_init(void)
{
    int v = 0, n = 0;
    const char *s = NULL;
    // Versions and error strings work before cuInit; everything else does not.
    CK(cuDriverGetVersion(&v));
    CHECK(v == 13000);
    EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuMemAlloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuCtxSetCurrent(NULL), CUDA_ERROR_NOT_INITIALIZED);
    static const CUresult codes[] = {CUDA_SUCCESS,
                                     CUDA_ERROR_INVALID_VALUE,
                                     CUDA_ERROR_OUT_OF_MEMORY,
                                     CUDA_ERROR_NOT_INITIALIZED,
                                     CUDA_ERROR_STUB_LIBRARY,
                                     CUDA_ERROR_INVALID_PTX,
                                     CUDA_ERROR_INVALID_HANDLE,
                                     CUDA_ERROR_NOT_READY,
                                     CUDA_ERROR_ILLEGAL_ADDRESS,
                                     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                                     CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                                     CUDA_ERROR_TENSOR_MEMORY_LEAK,
                                     CUDA_ERROR_KEY_ROTATION,
                                     CUDA_ERROR_UNKNOWN};
    static const char *names[] = {"CUDA_SUCCESS",
                                  "CUDA_ERROR_INVALID_VALUE",
                                  "CUDA_ERROR_OUT_OF_MEMORY",
                                  "CUDA_ERROR_NOT_INITIALIZED",
                                  "CUDA_ERROR_STUB_LIBRARY",
                                  "CUDA_ERROR_INVALID_PTX",
                                  "CUDA_ERROR_INVALID_HANDLE",
                                  "CUDA_ERROR_NOT_READY",
                                  "CUDA_ERROR_ILLEGAL_ADDRESS",
                                  "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
                                  "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
                                  "CUDA_ERROR_TENSOR_MEMORY_LEAK",
                                  "CUDA_ERROR_KEY_ROTATION",
                                  "CUDA_ERROR_UNKNOWN"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CK(cuGetErrorName(codes[i], &s));
        CHECK(s && strcmp(s, names[i]) == 0);
        s = NULL;
        CK(cuGetErrorString(codes[i], &s));
        CHECK(s && *s);
    }
    // Every code from 0 to 1000 either has a name and a string or neither.
    int named = 0;
    for (int c = 0; c <= 1000; c++) {
        const char *a = NULL, *b = NULL;
        CUresult r1 = cuGetErrorName((CUresult)c, &a), r2 = cuGetErrorString((CUresult)c, &b);
        CHECK(r1 == r2 && (r1 == CUDA_SUCCESS) == (a != NULL) &&
              (r2 == CUDA_SUCCESS) == (b != NULL));
        CHECK(!a || strncmp(a, "CUDA_", 5) == 0);
        named += r1 == CUDA_SUCCESS;
    }
    CHECK(named == 101);
    s = "x";
    EXPECT(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
    s = "x";
    EXPECT(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
    EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CK(cuInit(0));
    CK(cuInit(0));
}

void st_devices(void)
{
    int n = 0, v = 0;
    CUdevice d0, d1;
    CK(cuDeviceGetCount(&n));
    CHECK(n == 2);
    CK(cuDeviceGet(&d0, 0));
    CK(cuDeviceGet(&d1, 1));
    EXPECT(cuDeviceGet(&d0, 2), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuDeviceGet(&d0, -1), CUDA_ERROR_INVALID_DEVICE);
    char name[64];
    CK(cuDeviceGetName(name, sizeof name, 0));
    CHECK(strcmp(name, "mpsshim CPU test device") == 0);
    CK(cuDeviceGetName(name, 8, 0));
    CHECK(strcmp(name, "mpsshim") == 0);
    EXPECT(cuDeviceGetName(name, sizeof name, 5), CUDA_ERROR_INVALID_DEVICE);
    CUuuid u0, u1, u0b;
    CK(cuDeviceGetUuid(&u0, 0));
    CK(cuDeviceGetUuid_v2(&u1, 1));
    CK(cuDeviceGetUuid(&u0b, 0));
    CHECK(memcmp(&u0, &u1, sizeof u0) != 0 && memcmp(&u0, &u0b, sizeof u0) == 0);
    EXPECT(cuDeviceGetLuid(name, &(unsigned){0}, 0), CUDA_ERROR_NOT_SUPPORTED);
    size_t total = 0;
    CK(cuDeviceTotalMem(&total, 1));
    CHECK(total == (size_t)1024 << 20);
    // Every attribute answers; MAX and 0 do not.
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
        CK(cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0));
    EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 9), CUDA_ERROR_INVALID_DEVICE);
    static const struct {
        CUdevice_attribute a;
        int v;
    } want[] = {
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
        {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
        {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
        {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0},
        {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
        {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CK(cuDeviceGetAttribute(&v, want[i].a, 1));
        CHECK(v == want[i].v);
    }
    int bus0, bus1;
    CK(cuDeviceGetAttribute(&bus0, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
    CK(cuDeviceGetAttribute(&bus1, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
    CHECK(bus0 != bus1);
    int major = 0, minor = 1;
    CK(cuDeviceComputeCapability(&major, &minor, 0));
    CHECK(major == 9 && minor == 0);
    CUdevprop prop;
    CK(cuDeviceGetProperties(&prop, 0));
    CHECK(prop.maxThreadsPerBlock == 1024 && prop.SIMDWidth == 32 && prop.maxGridSize[1] == 65535);
    char bus[32];
    CK(cuDeviceGetPCIBusId(bus, sizeof bus, 1));
    CHECK(strlen(bus) == 12);
    CUdevice back = -1;
    CK(cuDeviceGetByPCIBusId(&back, bus));
    CHECK(back == 1);
    snprintf(bus, sizeof bus, "00000000:%02x:00.0", bus0);
    CK(cuDeviceGetByPCIBusId(&back, bus));
    CHECK(back == 0);
    EXPECT(cuDeviceGetByPCIBusId(&back, "0000:01:00.0"), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuDeviceGetByPCIBusId(&back, "junk"), CUDA_ERROR_INVALID_VALUE);
    CK(cuDeviceCanAccessPeer(&v, 0, 1));
    CHECK(v == 1);
    CK(cuDeviceCanAccessPeer(&v, 0, 0));
    CHECK(v == 0);
    CK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
    CHECK(v == 1);
    EXPECT(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1),
           CUDA_ERROR_INVALID_DEVICE);
}

void st_contexts(void)
{
    CUcontext cur = (CUcontext)1, p0, p0b, c1, c2, popped;
    unsigned flags;
    int active;
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    // Calls that need a context say so without one.
    EXPECT(cuMemAlloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0);
    EXPECT(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuDevicePrimaryCtxRetain(&p0, 0));
    CK(cuDevicePrimaryCtxRetain(&p0b, 0));
    CHECK(p0 == p0b);
    CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);
    CK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
    EXPECT(cuDevicePrimaryCtxSetFlags(0, 0x3), CUDA_ERROR_INVALID_VALUE);
    CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(flags == CU_CTX_SCHED_BLOCKING_SYNC);
    CK(cuDevicePrimaryCtxRelease(0));
    CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);
    CK(cuCtxSetCurrent(p0));
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == p0);
    CUdevice dev = -1;
    CK(cuCtxGetDevice(&dev));
    CHECK(dev == 0);
    // A created context is pushed; pop returns it; destroy invalidates it.
    CK(cuCtxCreate(&c1, NULL, 0, 1));
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == c1);
    CK(cuCtxGetDevice(&dev));
    CHECK(dev == 1);
    CK(cuCtxGetDevice_v2(&dev, p0));
    CHECK(dev == 0);
    unsigned long long id1 = 0, id0 = 0;
    CK(cuCtxGetId(c1, &id1));
    CK(cuCtxGetId(p0, &id0));
    CHECK(id1 && id0 && id1 != id0);
    unsigned api = 0;
    CK(cuCtxGetApiVersion(c1, &api));
    CHECK(api == 3020);
    size_t lim = 0;
    CK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1 << 20));
    CK(cuCtxGetLimit(&lim, CU_LIMIT_MALLOC_HEAP_SIZE));
    CHECK(lim == 1 << 20);
    CK(cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
    CHECK(lim == 1024);
    EXPECT(cuCtxGetLimit(&lim, CU_LIMIT_MAX), CUDA_ERROR_INVALID_VALUE);
    int lo = 1, hi = 1;
    CK(cuCtxGetStreamPriorityRange(&lo, &hi));
    CHECK(lo == 0 && hi == -5);
    CUfunc_cache cc;
    CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
    CK(cuCtxGetCacheConfig(&cc));
    CHECK(cc == CU_FUNC_CACHE_PREFER_SHARED);
    CK(cuCtxSetFlags(CU_CTX_SCHED_YIELD));
    CK(cuCtxGetFlags(&flags));
    CHECK(flags == CU_CTX_SCHED_YIELD);
    CK(cuCtxSynchronize());
    CK(cuCtxCreate(&c2, NULL, CU_CTX_SCHED_SPIN, 0));
    CK(cuCtxPopCurrent(&popped));
    CHECK(popped == c2);
    CK(cuCtxPopCurrent(&popped));
    CHECK(popped == c1);
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == p0);
    CK(cuCtxPushCurrent(c2));
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == c2);
    CK(cuCtxDestroy(c2));
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == p0);
    EXPECT(cuCtxDestroy(c2), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxPushCurrent(c2), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxDestroy(p0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxDestroy((CUcontext)&lo), CUDA_ERROR_INVALID_CONTEXT);
    // Memory of a destroyed context is gone with it.
    CK(cuCtxPushCurrent(c1));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 4096));
    CK(cuCtxPopCurrent(NULL));
    CK(cuCtxDestroy(c1));
    EXPECT(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCtxCreate(&c1, NULL, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
    // A released-to-zero primary context loses its resources; retaining again revives it.
    CUcontext p1;
    CK(cuDevicePrimaryCtxRetain(&p1, 1));
    CK(cuCtxPushCurrent(p1));
    CK(cuMemAlloc(&d, 4096));
    CK(cuDevicePrimaryCtxRelease(1));
    EXPECT(cuMemAlloc(&d, 4096), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuDevicePrimaryCtxRetain(&p1, 1));
    EXPECT(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAlloc(&d, 4096));
    CK(cuDevicePrimaryCtxReset(1));
    CK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    CHECK(active == 0);
    EXPECT(cuMemFree(d), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuCtxPopCurrent(NULL));
    CK(cuCtxGetCurrent(&cur));
    CHECK(cur == p0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--env-child") == 0) return st_env_child();
    if (argc != 2) {
        fprintf(stderr, "usage: %s KERNEL_DIR\n", argv[0]);
        return 2;
    }
    st_kdir = argv[1];
    setenv("MPSSHIM_CPUDRV_DEVICES", "2", 1);
    setenv("MPSSHIM_CPUDRV_MEM_MB", "1024", 1);
    // st_faults goes on after a fault in the same process (the default model loses the
    // device to the process, as driver 580 does; tests/fault.sh and `fault --restart`
    // check that one).
    setenv("MPSSHIM_CPUDRV_FAULTS_PER_CONTEXT", "1", 1);
    double t0 = st_ms();
    static const struct {
        const char *name;
        void (*fn)(void);
    } groups[] = {
        {"errors and init", st_errors_and_init},
        {"devices", st_devices},
        {"contexts", st_contexts},
        {"memory", st_memory},
        {"copies", st_copies},
        {"2D/3D and array copies", st_copies_3d},
        {"streams", st_streams},
        {"events", st_events},
        {"stream memory operations and host functions", st_memops},
        {"stream-ordered allocator and memory pools", st_mempool},
        {"virtual memory management", st_vmm},
        {"stream capture and graphs", st_graph},
        {"stream-ordered allocation in a capture", st_capture_alloc},
        {"conditional graph nodes", st_graph_cond},
        {"modules and libraries", st_modules},
        {"cubin and fatbin images", st_images},
        {"__managed__ variables, batched prefetches", st_managed_vars},
        {"kernel twins", st_twins},
        {"launch validation", st_launch_errors},
        {"entry-point variants, stream attributes", st_variants},
        {"threads", st_threads},
        {"green contexts", st_green},
        {"faults", st_faults},
        {"damaged images, wild kernel arguments", st_fuzz},
        {"tracing and counters (child process)", st_env},
    };
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        int before = st_failures;
        double t = st_ms();
        groups[i].fn();
        printf("%-48s %s (%.0f ms)\n", groups[i].name, st_failures == before ? "ok" : "FAILED",
               st_ms() - t);
        fflush(stdout);
    }
    printf("cpudrv selftest: %s, %d failure(s), %.1f s\n", st_failures ? "FAILED" : "passed",
           st_failures, (st_ms() - t0) / 1e3);
    return st_failures ? 1 : 0;
}
