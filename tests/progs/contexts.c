/* contexts: initialisation, devices, primary and created contexts, context stacks, what
 * destroying and resetting a context does to its memory, flags, limits, cache and
 * shared-memory preferences (per context, seen alike from every thread) and error names.
 * Values that differ between machines (names, sizes, versions) are checked, not printed. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static CUdevice g_dev;

/* Calls that need the driver initialised fail before cuInit; the version and error names
 * do not need it. Must run first. */
static void before_init(void)
{
    int n = -1, version = 0;
    CUdevice d;
    EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    t_ok("before cuInit: CUDA_ERROR_NOT_INITIALIZED");
    CHECK(cuDriverGetVersion(&version));
    REQUIRE(version >= 12000, "cuDriverGetVersion %d before cuInit", version);
    t_ok("cuDriverGetVersion works before cuInit");
}

static void devices(void)
{
    int n = 0, version = 0;
    CHECK(cuDriverGetVersion(&version));
    REQUIRE(version >= 12000, "cuDriverGetVersion %d < 12000", version);
    t_ok("cuDriverGetVersion >= 12000");
    CHECK(cuDeviceGetCount(&n));
    REQUIRE(n >= 1, "cuDeviceGetCount %d", n);
    t_ok("cuDeviceGetCount >= 1");
    CHECK(cuDeviceGet(&g_dev, 0));
    CUdevice bad;
    EXPECT(cuDeviceGet(&bad, n), CUDA_ERROR_INVALID_DEVICE);
    t_ok("cuDeviceGet: ordinal 0 works, ordinal count is CUDA_ERROR_INVALID_DEVICE");

    char name[256];
    memset(name, 0, sizeof name);
    CHECK(cuDeviceGetName(name, sizeof name, g_dev));
    REQUIRE(name[0] && memchr(name, 0, sizeof name), "device name empty or unterminated");
    t_ok("cuDeviceGetName non-empty");

    int major = 0, minor = 0, cmaj = -1, cmin = -1, v = 0;
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g_dev));
    CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g_dev));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(cuDeviceComputeCapability(&cmaj, &cmin, g_dev));
#pragma GCC diagnostic pop
    REQUIRE(major == cmaj && minor == cmin, "compute capability %d.%d vs attributes %d.%d", cmaj,
            cmin, major, minor);
    REQUIRE(major >= 5, "compute capability major %d", major);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, g_dev));
    REQUIRE(v == 32, "warp size %d", v);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, g_dev));
    REQUIRE(v >= 64 && v <= 1024, "max threads per block %d", v);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g_dev));
    REQUIRE(v >= 1, "multiprocessor count %d", v);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, g_dev));
    REQUIRE(v == 1, "unified addressing %d", v);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, g_dev));
    REQUIRE(v >= 65535, "max grid dim x %d", v);
    EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, g_dev), CUDA_ERROR_INVALID_VALUE);
    t_ok("cuDeviceGetAttribute consistent with cuDeviceComputeCapability; unknown attribute "
         "refused");

    size_t total = 0;
    CHECK(cuDeviceTotalMem(&total, g_dev));
    REQUIRE(total > 0, "cuDeviceTotalMem 0");
    t_ok("cuDeviceTotalMem > 0");

    CUuuid u1, u2;
    memset(&u1, 0, sizeof u1);
    memset(&u2, 0xff, sizeof u2);
    CHECK(cuDeviceGetUuid(&u1, g_dev));
    CHECK(cuDeviceGetUuid(&u2, g_dev));
    REQUIRE(memcmp(&u1, &u2, sizeof u1) == 0, "cuDeviceGetUuid differs between calls");
    t_ok("cuDeviceGetUuid stable");

    char bus[64];
    memset(bus, 0, sizeof bus);
    CHECK(cuDeviceGetPCIBusId(bus, sizeof bus, g_dev));
    REQUIRE(strlen(bus) >= 7 && strchr(bus, ':'), "PCI bus id '%s'", bus);
    CUdevice again = -1;
    CHECK(cuDeviceGetByPCIBusId(&again, bus));
    REQUIRE(again == g_dev, "cuDeviceGetByPCIBusId gave device %d, want %d", again, g_dev);
    t_ok("cuDeviceGetPCIBusId and back with cuDeviceGetByPCIBusId");
}

/* Writes 256 words of a pattern to p, or checks them. */
static void put_words(CUdeviceptr p, uint32_t seed)
{
    uint32_t w[256];
    t_fill_pattern(w, sizeof w, seed);
    CHECK(cuMemcpyHtoD(p, w, sizeof w));
}

static void need_words(CUdeviceptr p, uint32_t seed, const char *what)
{
    uint32_t w[256];
    CHECK(cuMemcpyDtoH(w, p, sizeof w));
    REQUIRE(t_pattern_mismatch(w, sizeof w, seed) == SIZE_MAX, "%s: data changed", what);
}

static void primary(CUcontext *out)
{
    CUcontext cur = (CUcontext)1, p1, p2;
    CUdeviceptr p;
    CHECK(cuCtxGetCurrent(&cur));
    REQUIRE(cur == NULL, "a context is current before any was made current");
    EXPECT(cuMemAlloc(&p, 256), CUDA_ERROR_INVALID_CONTEXT);
    t_ok("no current context: cuCtxGetCurrent gives NULL, cuMemAlloc CUDA_ERROR_INVALID_CONTEXT");

    CHECK(cuDevicePrimaryCtxRetain(&p1, g_dev));
    CHECK(cuDevicePrimaryCtxRetain(&p2, g_dev));
    REQUIRE(p1 == p2 && p1 != NULL, "two retains of the primary context gave different handles");
    t_ok("cuDevicePrimaryCtxRetain twice gives the same handle");

    unsigned flags = 0;
    int active = 0;
    CHECK(cuDevicePrimaryCtxGetState(g_dev, &flags, &active));
    REQUIRE(active == 1, "primary context not active after retain");
    t_ok("cuDevicePrimaryCtxGetState: active");

    CHECK(cuCtxSetCurrent(p1));
    CHECK(cuCtxGetCurrent(&cur));
    REQUIRE(cur == p1, "cuCtxGetCurrent is not the context just set");
    CUdevice d = -1;
    CHECK(cuCtxGetDevice(&d));
    REQUIRE(d == g_dev, "cuCtxGetDevice %d", d);
    t_ok("cuCtxSetCurrent/cuCtxGetCurrent/cuCtxGetDevice with the primary context");
    *out = p1;
}

static void created(CUcontext prim)
{
    CUdeviceptr p0, pc;
    CHECK(cuMemAlloc(&p0, 1024));
    put_words(p0, 77);

    CUcontext c, cur, popped;
    CHECK(cuCtxCreate(&c, NULL, 0, g_dev));
    REQUIRE(c != NULL && c != prim, "cuCtxCreate gave the primary context");
    CHECK(cuCtxGetCurrent(&cur));
    REQUIRE(cur == c, "a created context is not current after cuCtxCreate");
    CUdevice d = -1;
    CHECK(cuCtxGetDevice(&d));
    REQUIRE(d == g_dev, "cuCtxGetDevice in a created context: %d", d);
    t_ok("cuCtxCreate makes a new context current");

    CHECK(cuMemAlloc(&pc, 1024));
    put_words(pc, 78);
    need_words(pc, 78, "memory of a created context");
    CHECK(cuCtxSynchronize());
    t_ok("memory allocated and used in a created context");

    CHECK(cuCtxPopCurrent(&popped));
    REQUIRE(popped == c, "cuCtxPopCurrent returned another context");
    CHECK(cuCtxGetCurrent(&cur));
    REQUIRE(cur == prim, "after popping the created context the primary is not current");
    CHECK(cuCtxPushCurrent(c));
    CHECK(cuCtxGetCurrent(&cur));
    REQUIRE(cur == c, "cuCtxPushCurrent did not make the context current");
    CHECK(cuCtxGetDevice(&d));
    REQUIRE(d == g_dev, "cuCtxGetDevice after push: %d", d);
    CHECK(cuCtxPopCurrent(&popped));
    REQUIRE(popped == c, "second cuCtxPopCurrent returned another context");
    t_ok("cuCtxPushCurrent/cuCtxPopCurrent");

    CHECK(cuCtxDestroy(c));
    CHECK(cuCtxSetCurrent(prim));
    EXPECT_ERR(cuMemFree(pc));
    t_ok("cuCtxDestroy frees the context's memory: cuMemFree afterwards fails");
    need_words(p0, 77, "primary context memory after destroying another context");
    CHECK(cuMemFree(p0));
    t_ok("primary context memory untouched by cuCtxDestroy of another context");
}

static void ctx_state(void)
{
    size_t free_b = 0, total_b = 0;
    CHECK(cuMemGetInfo(&free_b, &total_b));
    REQUIRE(total_b > 0 && free_b <= total_b, "cuMemGetInfo free %zu total %zu", free_b, total_b);
    t_ok("cuMemGetInfo free <= total");
    CHECK(cuCtxSynchronize());
    t_ok("cuCtxSynchronize");

    unsigned f0 = 0, f1 = 0;
    CHECK(cuCtxGetFlags(&f0));
    CHECK(cuCtxSetFlags((f0 & ~(unsigned)CU_CTX_SCHED_MASK) | CU_CTX_SCHED_BLOCKING_SYNC));
    CHECK(cuCtxGetFlags(&f1));
    REQUIRE((f1 & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC,
            "cuCtxGetFlags 0x%x after setting CU_CTX_SCHED_BLOCKING_SYNC", f1);
    CHECK(cuCtxSetFlags(f0));
    CHECK(cuCtxGetFlags(&f1));
    REQUIRE((f1 & CU_CTX_SCHED_MASK) == (f0 & CU_CTX_SCHED_MASK),
            "scheduling flags 0x%x not restored (0x%x)", f1, f0);
    t_ok("cuCtxSetFlags/cuCtxGetFlags scheduling flags");

    size_t s0 = 0, s1 = 0, v = 0;
    CHECK(cuCtxGetLimit(&s0, CU_LIMIT_STACK_SIZE));
    REQUIRE(s0 > 0, "stack size limit 0");
    CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
    CHECK(cuCtxGetLimit(&s1, CU_LIMIT_STACK_SIZE));
    REQUIRE(s1 >= 4096, "stack size %zu after setting 4096", s1);
    CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, s0));
    CHECK(cuCtxGetLimit(&s1, CU_LIMIT_STACK_SIZE));
    REQUIRE(s1 == s0, "stack size %zu after restoring %zu", s1, s0);
    CHECK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
    REQUIRE(v > 0, "printf FIFO size 0");
    CHECK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
    REQUIRE(v > 0, "malloc heap size 0");
    t_ok("cuCtxGetLimit/cuCtxSetLimit(CU_LIMIT_STACK_SIZE)");
}

/* The bank size is a deprecated hint: where the hardware fixes it, the driver answers that
 * whatever was set, so only what each thread sees of a context is compared, not values. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static CUresult get_smem(CUsharedconfig *v)
{
    return cuCtxGetSharedMemConfig(v);
}
static CUresult set_smem(CUsharedconfig v)
{
    return cuCtxSetSharedMemConfig(v);
}
#pragma GCC diagnostic pop

/* What another thread, with ctx current, reads of ctx's preferences and then sets. */
struct pref_peek {
    CUcontext ctx;
    CUfunc_cache set_cache; /* set after reading */
    CUfunc_cache cache;
    CUsharedconfig smem;
    CUresult r;
};

static void *peek_body(void *arg)
{
    struct pref_peek *pk = arg;
    pk->r = cuCtxSetCurrent(pk->ctx);
    if (pk->r == CUDA_SUCCESS) pk->r = cuCtxGetCacheConfig(&pk->cache);
    if (pk->r == CUDA_SUCCESS) pk->r = get_smem(&pk->smem);
    if (pk->r == CUDA_SUCCESS) pk->r = cuCtxSetCacheConfig(pk->set_cache);
    return NULL;
}

/* Runs peek_body in a thread of its own; fails the program if a call there failed. */
static void peek(struct pref_peek *pk)
{
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, peek_body, pk) == 0, "pthread_create");
    pthread_join(t, NULL);
    REQUIRE(pk->r == CUDA_SUCCESS, "a preference call in another thread returned %s",
            t_errname(pk->r));
}

/* Cache and shared-memory preferences belong to the context, as with the real driver: what
 * one thread sets, another thread using the context reads; another context has its own,
 * from the default; a destroyed context's go with it. Ends with the primary current and
 * its cache preference CU_FUNC_CACHE_PREFER_EQUAL (reset() checks that a reset drops it). */
static void preferences(CUcontext prim)
{
    CUfunc_cache cache;
    CUsharedconfig smem, smem_prim, smem_c;
    CHECK(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE, "primary context's cache preference %d", cache);
    t_ok("cuCtxGetCacheConfig: CU_FUNC_CACHE_PREFER_NONE at first");

    CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
    CHECK(set_smem(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
    CHECK(get_smem(&smem_prim));
    struct pref_peek pk = {.ctx = prim, .set_cache = CU_FUNC_CACHE_PREFER_EQUAL};
    peek(&pk);
    REQUIRE(pk.cache == CU_FUNC_CACHE_PREFER_L1,
            "another thread reads cache preference %d, this one set %d", pk.cache,
            CU_FUNC_CACHE_PREFER_L1);
    REQUIRE(pk.smem == smem_prim, "another thread reads bank size %d, this one %d", pk.smem,
            smem_prim);
    CHECK(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_EQUAL, "cache preference %d after another thread set %d",
            cache, CU_FUNC_CACHE_PREFER_EQUAL);
    t_ok("cache and shared-memory preferences set in one thread are read in another");

    CUcontext c, popped;
    CHECK(cuCtxCreate(&c, NULL, 0, g_dev));
    CHECK(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE,
            "a created context's cache preference %d, not the default", cache);
    CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
    CHECK(set_smem(CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
    CHECK(get_smem(&smem_c));
    struct pref_peek pc = {.ctx = c, .set_cache = CU_FUNC_CACHE_PREFER_SHARED};
    peek(&pc);
    REQUIRE(pc.cache == CU_FUNC_CACHE_PREFER_SHARED && pc.smem == smem_c,
            "another thread reads the created context's preferences %d/%d, want %d/%d", pc.cache,
            pc.smem, CU_FUNC_CACHE_PREFER_SHARED, smem_c);
    CHECK(cuCtxPopCurrent(&popped));
    REQUIRE(popped == c, "cuCtxPopCurrent returned another context");
    CHECK(cuCtxGetCacheConfig(&cache));
    CHECK(get_smem(&smem));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_EQUAL && smem == smem_prim,
            "the primary context's preferences %d/%d after another context set its own, want "
            "%d/%d",
            cache, smem, CU_FUNC_CACHE_PREFER_EQUAL, smem_prim);
    t_ok("a created context has its own preferences, from the default; the primary keeps its");

    CHECK(cuCtxDestroy(c));
    CHECK(cuCtxCreate(&c, NULL, 0, g_dev));
    CHECK(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE,
            "a context made after one was destroyed has cache preference %d", cache);
    CHECK(cuCtxDestroy(c));
    CHECK(cuCtxSetCurrent(prim));
    t_ok("a destroyed context's preferences go with it");
}

static void error_names(void)
{
    static const CUresult codes[] = {CUDA_SUCCESS,
                                     CUDA_ERROR_INVALID_VALUE,
                                     CUDA_ERROR_OUT_OF_MEMORY,
                                     CUDA_ERROR_NOT_INITIALIZED,
                                     CUDA_ERROR_INVALID_CONTEXT,
                                     CUDA_ERROR_INVALID_HANDLE,
                                     CUDA_ERROR_NOT_FOUND,
                                     CUDA_ERROR_NOT_READY,
                                     CUDA_ERROR_ILLEGAL_ADDRESS,
                                     CUDA_ERROR_LAUNCH_FAILED,
                                     CUDA_ERROR_NOT_SUPPORTED,
                                     CUDA_ERROR_UNKNOWN};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *name = NULL, *str = NULL;
        CHECK(cuGetErrorName(codes[i], &name));
        CHECK(cuGetErrorString(codes[i], &str));
        REQUIRE(name && name[0] && str && str[0], "code %d has no name or string", codes[i]);
        printf("error %d %s\n", (int)codes[i], name);
    }
    const char *s = "x";
    EXPECT(cuGetErrorName((CUresult)9999, &s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(s == NULL, "cuGetErrorName of an unknown code did not set NULL");
    s = "x";
    EXPECT(cuGetErrorString((CUresult)9999, &s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(s == NULL, "cuGetErrorString of an unknown code did not set NULL");
    t_ok("cuGetErrorName/cuGetErrorString");
}

/* cuDevicePrimaryCtxReset frees what the primary context held; the context is usable again
 * after a retain. The old allocation is only read afterwards (never written), and it is big
 * so that nothing the driver maps on re-initialisation lands on it. */
static void reset(void)
{
    CUdeviceptr old;
    CHECK(cuMemAlloc(&old, 64 << 20));
    put_words(old, 99);
    CHECK(cuDevicePrimaryCtxReset(g_dev));
    CUcontext again;
    CHECK(cuDevicePrimaryCtxRetain(&again, g_dev));
    CHECK(cuCtxSetCurrent(again));
    CUfunc_cache cache;
    CHECK(cuCtxGetCacheConfig(&cache));
    REQUIRE(cache == CU_FUNC_CACHE_PREFER_NONE, "cache preference %d after a reset", cache);
    t_ok("cuDevicePrimaryCtxReset drops the primary context's cache preference");
    uint32_t w;
    EXPECT_ERR(cuMemcpyDtoH(&w, old + 64, 4));
    t_ok("cuDevicePrimaryCtxReset frees the primary context's memory");

    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 1024));
    put_words(p, 100);
    need_words(p, 100, "memory after reset");
    CHECK(cuMemFree(p));
    t_ok("primary context usable after reset and retain");
}

int main(void)
{
    t_init("contexts", 300);
    before_init();
    CHECK(cuInit(0));
    t_ok("cuInit");
    devices();
    CUcontext prim;
    primary(&prim);
    created(prim);
    ctx_state();
    preferences(prim);
    error_names();
    reset();
    /* The retain taken after the reset. Whether the reset dropped the two taken before it
     * is not relied on: the documentation says it does not, so they may still be held;
     * exiting releases them either way. */
    CHECK(cuDevicePrimaryCtxRelease(g_dev));
    t_pass();
}
