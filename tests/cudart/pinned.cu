// pinned: page-locked host memory through the runtime. cudaMallocHost and cudaHostAlloc
// with each flag the shim serves (default, portable, mapped, write-combined); flags and
// pointer attributes read back; synchronous and asynchronous copies from and to pinned
// memory, large ones included; a kernel writing mapped host memory through its device
// pointer.
#include "common.h"
#include "../kernels/kernels.cu"

#define MiB (1u << 20)

// Fills p with the pattern of seed.
static void fill(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = t_pattern_at(seed, i);
}

// Index of the first word that is not the pattern of seed, or n.
static size_t mismatch(const uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != t_pattern_at(seed, i)) return i;
    return n;
}

int main(int argc, char **argv)
{
    t_init("pinned", 300);
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    REQUIRE(mib > 0, "bad size '%s'", argv[1]);
    CHECK(cudaSetDevice(0));

    // One buffer per allocation kind, each round-tripped through the device.
    struct {
        const char *what;
        unsigned flags; // cudaHostAlloc flags; ~0u: cudaMallocHost
    } kinds[] = {
        {"cudaMallocHost", ~0u},
        {"cudaHostAllocDefault", cudaHostAllocDefault},
        {"cudaHostAllocPortable", cudaHostAllocPortable},
        {"cudaHostAllocMapped", cudaHostAllocMapped},
        {"cudaHostAllocWriteCombined", cudaHostAllocWriteCombined},
    };
    size_t words = 1u << 16, bytes = words * sizeof(uint32_t);
    uint32_t *dev;
    CHECK(cudaMalloc(&dev, bytes));
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        uint32_t *h;
        if (kinds[k].flags == ~0u)
            CHECK(cudaMallocHost(&h, bytes));
        else
            CHECK(cudaHostAlloc(&h, bytes, kinds[k].flags));
        unsigned got = 0;
        CHECK(cudaHostGetFlags(&got, h));
        unsigned want = kinds[k].flags == ~0u ? 0u : kinds[k].flags;
        REQUIRE((got & want) == want, "%s: flags %#x, expected %#x among them", kinds[k].what, got,
                want);
        cudaPointerAttributes attr;
        CHECK(cudaPointerGetAttributes(&attr, h));
        REQUIRE(attr.type == cudaMemoryTypeHost, "%s: pointer type %d", kinds[k].what,
                (int)attr.type);
        uint32_t seed = 0x1000u + (uint32_t)k;
        fill(h, words, seed);
        CHECK(cudaMemcpy(dev, h, bytes, cudaMemcpyHostToDevice));
        memset(h, 0, bytes);
        CHECK(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost));
        size_t bad = mismatch(h, words, seed);
        REQUIRE(bad == words, "%s: word %zu differs after the round trip", kinds[k].what, bad);
        CHECK(cudaFreeHost(h));
        t_ok("%s: flags, attributes, round trip", kinds[k].what);
    }
    cudaPointerAttributes dattr;
    CHECK(cudaPointerGetAttributes(&dattr, dev));
    REQUIRE(dattr.type == cudaMemoryTypeDevice && dattr.device == 0, "device pointer: type %d",
            (int)dattr.type);
    t_ok("device pointer attributes");

    // A kernel writes mapped host memory through its device pointer; the host sees it.
    uint32_t *mapped, *mapped_dev = NULL;
    CHECK(cudaHostAlloc(&mapped, bytes, cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer((void **)&mapped_dev, mapped, 0));
    REQUIRE(mapped_dev != NULL, "no device pointer for mapped memory");
    memset(mapped, 0, bytes);
    write_pattern<<<t_blocks_for(words, 256), 256>>>(mapped_dev, words, 0xbeefu);
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    size_t bad = mismatch(mapped, words, 0xbeefu);
    REQUIRE(bad == words, "mapped word %zu not written by the kernel", bad);
    t_ok("kernel writes mapped pinned memory");
    CHECK(cudaFreeHost(mapped));

    // Large asynchronous copies from and to pinned memory, in a stream, with cudaMemcpyDefault
    // (unified addressing decides the direction).
    size_t big = mib * MiB, bigw = big / sizeof(uint32_t);
    uint32_t *src, *dst, *dbig;
    CHECK(cudaMallocHost(&src, big));
    CHECK(cudaHostAlloc(&dst, big, cudaHostAllocPortable));
    CHECK(cudaMalloc(&dbig, big));
    fill(src, bigw, 0x5eedu);
    memset(dst, 0, big);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMemcpyAsync(dbig, src, big, cudaMemcpyDefault, s));
    unsigned *errors;
    CHECK(cudaMalloc(&errors, sizeof(unsigned)));
    CHECK(cudaMemsetAsync(errors, 0, sizeof(unsigned), s));
    check_pattern<<<t_blocks_for(bigw, 256), 256, 0, s>>>(dbig, bigw, 0x5eedu, errors);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(dst, dbig, big, cudaMemcpyDefault, s));
    unsigned nerr = 1;
    CHECK(cudaMemcpyAsync(src, errors, sizeof(nerr), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    nerr = src[0];
    REQUIRE(nerr == 0, "check_pattern counted %u wrong words on the device", nerr);
    bad = mismatch(dst, bigw, 0x5eedu);
    REQUIRE(bad == bigw, "word %zu differs after the %zu MiB round trip", bad, mib);
    t_ok("%zu MiB async round trip through pinned memory", mib);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(errors));
    CHECK(cudaFree(dbig));
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(src));
    CHECK(cudaFreeHost(dst));
    t_ok("freed");
    t_pass();
}
