// Self-test: damaged images and wild kernel arguments give errors, never a crash.
#include "selftest.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// A copy of n bytes at the very end of its mapping, so reading past it would fault.
static unsigned char *at_edge(const unsigned char *src, size_t n, void **map, size_t *maplen)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (n + page - 1) / page * page + page;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    munmap(m + len - page, page); // the page after the data is not mapped
    *map = m;
    *maplen = len - page;
    unsigned char *p = m + (len - page) - n;
    memcpy(p, src, n);
    return p;
}

static void try_load(const unsigned char *img, size_t n)
{
    void *map;
    size_t maplen;
    unsigned char *p = at_edge(img, n, &map, &maplen);
    if (!p) return;
    CUmodule m;
    CUresult rc = cuModuleLoadData(&m, p);
    if (rc == CUDA_SUCCESS)
        CK(cuModuleUnload(m));
    else if (rc != CUDA_ERROR_INVALID_IMAGE && rc != CUDA_ERROR_INVALID_PTX &&
             rc != CUDA_ERROR_OUT_OF_MEMORY) // a damaged global size
        st_failrc(__FILE__, __LINE__, "cuModuleLoadData(damaged)", rc, CUDA_ERROR_INVALID_IMAGE);
    munmap(map, maplen);
}

void st_fuzz(void)
{
    const char *seed = getenv("CPUDRV_FUZZ_SEED"); // to explore more damage by hand
    if (seed && strtoull(seed, NULL, 0)) rng = strtoull(seed, NULL, 0);
    CUcontext prim;
    CK(cuDevicePrimaryCtxRetain(&prim, 0));
    CK(cuCtxSetCurrent(prim));
    size_t plen, clen, flen;
    unsigned char *ptx = st_read("kernels.ptx", &plen);
    unsigned char *cubin = st_read("kernels.sm_90.cubin", &clen);
    unsigned char *fat = st_read("kernels.fatbin", &flen);
    unsigned char *buf = malloc(flen + clen + plen + 1);
    // Damaged kernel names make the driver name them on stderr: keep that out of the log.
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    // Truncated PTX, and PTX without its terminating NUL right before an unmapped page.
    for (int i = 0; i < 150; i++) {
        size_t cut = (size_t)(next() % plen);
        memcpy(buf, ptx, cut);
        buf[cut] = 0;
        try_load(buf, cut + 1);
    }
    try_load(ptx, plen); // no NUL inside the mapping
    // Random byte damage to PTX, cubin and fatbin.
    for (int i = 0; i < 300; i++) {
        memcpy(buf, ptx, plen + 1);
        for (int k = 0; k < 4; k++)
            buf[next() % plen] = (unsigned char)next();
        try_load(buf, plen + 1);
    }
    for (int i = 0; i < 400; i++) {
        memcpy(buf, cubin, clen);
        for (int k = 0; k < 3; k++) {
            // Mostly the headers and tables, where the offsets are.
            size_t at = i % 2 ? next() % 64 : next() % clen;
            buf[at] = (unsigned char)next();
        }
        try_load(buf, clen);
    }
    for (int i = 0; i < 300; i++) {
        memcpy(buf, fat, flen);
        for (int k = 0; k < 3; k++) {
            size_t at = i % 2 ? next() % 160 : next() % flen;
            buf[at] = (unsigned char)next();
        }
        try_load(buf, flen);
    }
    CUmodule m;
    struct {
        int magic, version;
        const void *data;
        void *unused;
    } wrap = {0x466243b1, 1, (const void *)(uintptr_t)0x1000, NULL};
    EXPECT(cuModuleLoadFatBinary(&m, &wrap), CUDA_ERROR_INVALID_IMAGE);
    EXPECT(cuModuleLoadData(&m, (const void *)(uintptr_t)0x10), CUDA_ERROR_INVALID_IMAGE);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(null);
    free(buf);
    free(ptx);
    free(cubin);
    free(fat);

    // Wild kernel arguments fault the context (sticky), never the process.
    static const uint64_t wild[] = {0, 2, 0xdeadbeef000ull, 1ull << 62, ~0ull - 7};
    for (size_t i = 0; i < sizeof wild / sizeof wild[0]; i++) {
        CUcontext c;
        CK(cuCtxCreate(&c, NULL, 0, 0));
        st_load();
        CUdeviceptr ok, bad = wild[i];
        CK(cuMemAlloc(&ok, 64));
        int n = 16;
        void *va[] = {&ok, &bad, &ok, &n};
        CK(cuLaunchKernel(st_fn("vec_add"), 1, 1, 1, 16, 1, 1, 0, NULL, va, NULL));
        EXPECT(cuCtxSynchronize(),
               i == 1 ? CUDA_ERROR_MISALIGNED_ADDRESS : CUDA_ERROR_ILLEGAL_ADDRESS);
        CK(cuCtxDestroy(c));
    }
    // An element count whose byte size overflows is caught too.
    CUcontext c;
    CK(cuCtxCreate(&c, NULL, 0, 0));
    st_load();
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 64));
    unsigned v = 1;
    unsigned long long huge = (1ull << 62) + 1;
    void *fa[] = {&d, &v, &huge};
    CK(cuLaunchKernel(st_fn("fill_u32"), 1, 1, 1, 32, 1, 1, 0, NULL, fa, NULL));
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CK(cuCtxDestroy(c));
    // Destroying a context does not wait out a kernel's long delay.
    CK(cuCtxCreate(&c, NULL, 0, 0));
    st_load();
    CK(cuMemAlloc(&d, 64));
    unsigned long long ns = 100ull * 1000000000ull;
    void *da[] = {&d, &v, &ns};
    CK(cuLaunchKernel(st_fn("delay_set"), 1, 1, 1, 1, 1, 1, 0, NULL, da, NULL));
    double t = st_ms();
    CK(cuCtxDestroy(c));
    CHECK(st_ms() - t < 1000);
    CK(cuDevicePrimaryCtxRelease(0));
}
