// mallocasync: the runtime's stream-ordered allocator. cudaMallocAsync / cudaFreeAsync on a
// created stream and on the default stream, a kernel writing the memory and cudaMemcpyAsync
// copying it back, all queued before one synchronize; the device's default and current
// pools; a created pool (cudaMemPoolCreate, cudaMallocFromPoolAsync) with its release
// threshold, its used and reserved memory, trimming, as the current pool, destroyed.
// Only the created pool is measured (through the shim the default pool may be shared), and
// only as booleans: byte counts differ from one driver to another.
#include "common.h"
#include "../kernels/kernels.cu"

#define N 4096 // words per allocation

static unsigned *g_pin; // pinned, N words: async copies back land here

static void check_words(unsigned v, const char *what)
{
    for (int i = 0; i < N; i++)
        REQUIRE(g_pin[i] == v, "%s: word %d is 0x%x, want 0x%x", what, i, g_pin[i], v);
}

static uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a)
{
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, a, &v));
    return v;
}

// Allocation, kernel, copy back and free queued on s, then one synchronize. pool: take the
// memory from it with cudaMallocFromPoolAsync (NULL: cudaMallocAsync).
static void round_trip(cudaStream_t s, cudaMemPool_t pool, const char *name, unsigned v)
{
    unsigned *p = NULL;
    memset(g_pin, 0, N * sizeof(unsigned));
    if (pool)
        CHECK(cudaMallocFromPoolAsync((void **)&p, N * sizeof(unsigned), pool, s));
    else
        CHECK(cudaMallocAsync((void **)&p, N * sizeof(unsigned), s));
    REQUIRE(p != NULL, "%s: the allocation is a NULL pointer", name);
    fill_u32<<<t_blocks_for(N, 256), 256, 0, s>>>(p, v, (unsigned long long)N);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(g_pin, p, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    check_words(v, name);
    t_ok("%s, kernel, cudaMemcpyAsync back, cudaFreeAsync on %s",
         pool ? "cudaMallocFromPoolAsync" : "cudaMallocAsync", name);
}

int main()
{
    t_init("mallocasync", 120);
    CHECK(cudaSetDevice(0));
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    if (!supported) t_skip("device 0 has no memory pools");
    CHECK(cudaMallocHost((void **)&g_pin, N * sizeof(unsigned)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    round_trip(s, NULL, "a created stream", 0xa1);
    round_trip(0, NULL, "the default stream", 0xb1);

    cudaMemPool_t def = NULL, cur = NULL;
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    REQUIRE(def != NULL && cur == def, "the current pool is not the default pool");
    t_ok("cudaDeviceGetDefaultMemPool and cudaDeviceGetMemPool agree");

    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = NULL;
    CHECK(cudaMemPoolCreate(&pool, &props));
    REQUIRE(pool != NULL && pool != def, "cudaMemPoolCreate gave the default pool or NULL");
    t_ok("cudaMemPoolCreate: pinned memory of device 0");

    uint64_t keep = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    REQUIRE(pool_attr(pool, cudaMemPoolAttrReleaseThreshold) == keep,
            "release threshold not read back");
    t_ok("cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold) read back");

    unsigned *p = NULL;
    CHECK(cudaMallocFromPoolAsync((void **)&p, N * sizeof(unsigned), pool, s));
    int used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) > 0;
    t_ok("cudaMemPoolAttrUsedMemCurrent > 0 while allocated: %d", used);
    REQUIRE(used, "the pool has no used memory while an allocation lives");
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) > 0;
    t_ok("cudaMemPoolAttrUsedMemCurrent > 0 after free and synchronize: %d", used);
    REQUIRE(!used, "the pool still has used memory after the free and a synchronize");
    round_trip(s, pool, "a created stream", 0xc1);

    int reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) > 0;
    t_ok("cudaMemPoolAttrReservedMemCurrent > 0 under the threshold: %d", reserved);
    CHECK(cudaMemPoolTrimTo(pool, 0));
    reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) > 0;
    t_ok("cudaMemPoolAttrReservedMemCurrent > 0 after cudaMemPoolTrimTo(0): %d", reserved);
    REQUIRE(!reserved, "the pool still holds memory after cudaMemPoolTrimTo(0)");

    CHECK(cudaDeviceSetMemPool(0, pool));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    REQUIRE(cur == pool, "cudaDeviceGetMemPool is not the pool just set");
    CHECK(cudaMallocAsync((void **)&p, N * sizeof(unsigned), s));
    used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) > 0;
    REQUIRE(used, "cudaMallocAsync did not allocate from the current pool");
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaDeviceSetMemPool(0, def));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    REQUIRE(cur == def, "cudaDeviceGetMemPool is not the default pool after setting it back");
    t_ok("cudaDeviceSetMemPool: cudaMallocAsync takes from the current pool; set back");

    CHECK(cudaMemPoolDestroy(pool));
    t_ok("cudaMemPoolDestroy");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(g_pin));
    t_pass();
}
