/* pool_peer: stream-ordered memory of one device read by another's kernels, through pool
 * access (cuMemPoolSetAccess) rather than a context's peer access, as cudaMallocAsync programs
 * over several GPUs do. For device 0's default pool and for a pool made on device 0: device 1
 * starts with no access; granted read and write, it reads and writes an allocation made
 * stream-ordered on device 0, its stream waiting for device 0's event, and device 0 reads back
 * what it wrote; the allocation is freed stream-ordered after device 1's event. Meanwhile
 * another process (forked before any CUDA call) finds its own default pool of device 0 without
 * device 1's access: a process's pools are its own. Skips (77) with fewer than two devices or
 * where device 1 cannot reach device 0's memory. */
#include "tests/progs/common.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define ELEMS (1u << 16)

static CUmemAccess_flags access_of(CUmemoryPool pool, int dev)
{
    CUmemLocation at = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemAccess_flags f = (CUmemAccess_flags)-1;
    CHECK(cuMemPoolGetAccess(&f, pool, &at));
    return f;
}

static void set_access(CUmemoryPool pool, int dev, CUmemAccess_flags f)
{
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}, .flags = f};
    CHECK(cuMemPoolSetAccess(pool, &d, 1));
}

/* The other process: its default pool of device 0 gives device 1 no access, whatever this
 * one's does. Waits for the parent's word on fd in, answers on fd out. */
static void other_process(int in, int out)
{
    t_hear(in, 'g', "parent");
    CHECK(cuInit(0));
    CUdevice d0;
    CUcontext c0;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c0, d0));
    CHECK(cuCtxSetCurrent(c0));
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, d0));
    CUmemAccess_flags f = access_of(pool, 1);
    REQUIRE(f == CU_MEM_ACCESS_FLAGS_PROT_NONE,
            "another process's default pool of device 0 gives device 1 access %d", (int)f);
    CHECK(cuDevicePrimaryCtxRelease(d0));
    t_say(out, 'k');
    _exit(0);
}

/* One round on pool (of device 0): device 1 given access, writes through it, device 0 reads
 * back, the access taken away. */
static void round_on(const char *what, CUmemoryPool pool, CUcontext c0, CUcontext c1,
                     CUfunction fill1, CUfunction check0)
{
    CUstream s0, s1;
    CUevent made, written;
    REQUIRE(access_of(pool, 1) == CU_MEM_ACCESS_FLAGS_PROT_NONE,
            "%s: device 1 has access before it was given", what);
    set_access(pool, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    REQUIRE(access_of(pool, 1) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            "%s: device 1's access did not read back", what);
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&made, CU_EVENT_DISABLE_TIMING));
    CUdeviceptr p, errors;
    CHECK(cuMemAllocFromPoolAsync(&p, ELEMS * 4, pool, s0));
    CHECK(cuMemAlloc(&errors, 4));
    CHECK(cuMemsetD32Async(p, 0, ELEMS, s0));
    CHECK(cuMemsetD32Async(errors, 0, 1, s0));
    CHECK(cuEventRecord(made, s0));
    /* Device 1 writes the pattern into device 0's pool memory, after device 0's event. */
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&written, CU_EVENT_DISABLE_TIMING));
    CHECK(cuStreamWaitEvent(s1, made, 0));
    unsigned long long n = ELEMS;
    unsigned seed = 4242;
    void *fargs[] = {&p, &n, &seed};
    CHECK(cuLaunchKernel(fill1, 16, 1, 1, 256, 1, 1, 0, s1, fargs, NULL));
    CHECK(cuEventRecord(written, s1));
    /* Device 0 checks it, then frees it stream-ordered. */
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamWaitEvent(s0, written, 0));
    void *cargs[] = {&p, &n, &seed, &errors};
    CHECK(cuLaunchKernel(check0, 16, 1, 1, 256, 1, 1, 0, s0, cargs, NULL));
    CHECK(cuMemFreeAsync(p, s0));
    CHECK(cuStreamSynchronize(s0));
    unsigned bad = 1;
    CHECK(cuMemcpyDtoH(&bad, errors, 4));
    REQUIRE(bad == 0, "%s: %u words device 1 wrote read back wrong on device 0", what, bad);
    set_access(pool, 1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    REQUIRE(access_of(pool, 1) == CU_MEM_ACCESS_FLAGS_PROT_NONE,
            "%s: device 1 kept access after it was taken away", what);
    CHECK(cuMemFree(errors));
    CHECK(cuEventDestroy(made));
    CHECK(cuEventDestroy(written));
    CHECK(cuStreamDestroy(s0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamDestroy(s1));
    printf("%s: device 1 wrote %d words through pool access, device 0 read them back\n", what,
           ELEMS);
}

int main(void)
{
    t_init("pool_peer", 120);
    int to_child[2], to_parent[2];
    REQUIRE(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipe");
    pid_t child = fork();
    REQUIRE(child >= 0, "fork");
    if (child == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        other_process(to_child[0], to_parent[1]);
    }
    close(to_child[0]);
    close(to_parent[1]);
    CHECK(cuInit(0));
    int n = 0, can = 0;
    CHECK(cuDeviceGetCount(&n));
    CUdevice d0 = 0, d1 = 1;
    if (n >= 2) {
        CHECK(cuDeviceGet(&d0, 0));
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDeviceCanAccessPeer(&can, d1, d0));
    }
    if (n < 2 || !can) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        if (n < 2) t_skip("needs two devices, found %d", n);
        t_skip("device 1 cannot reach device 0's memory (of %d devices)", n);
    }
    CUcontext c0, c1;
    CHECK(cuDevicePrimaryCtxRetain(&c0, d0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, d1));
    CHECK(cuCtxSetCurrent(c1));
    CUmodule m1 = t_load_module("kernels.ptx");
    CUfunction fill1 = t_get_function(m1, "write_pattern");
    CHECK(cuCtxSetCurrent(c0));
    CUmodule m0 = t_load_module("kernels.ptx");
    CUfunction check0 = t_get_function(m0, "check_pattern");

    CUmemoryPool def;
    CHECK(cuDeviceGetDefaultMemPool(&def, d0));
    round_on("default pool", def, c0, c1, fill1, check0);
    /* The other process looks at its own default pool while this one's gives device 1
     * access again. */
    set_access(def, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    t_say(to_child[1], 'g');
    t_hear(to_parent[0], 'k', "the other process");
    int st = 0;
    REQUIRE(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the other process failed (status %d)", st);
    set_access(def, 1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    printf("another process's default pool gave device 1 no access\n");

    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool made;
    CHECK(cuMemPoolCreate(&made, &props));
    round_on("pool made on device 0", made, c0, c1, fill1, check0);
    CHECK(cuMemPoolDestroy(made));

    CHECK(cuModuleUnload(m0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuModuleUnload(m1));
    CHECK(cuDevicePrimaryCtxRelease(d0));
    CHECK(cuDevicePrimaryCtxRelease(d1));
    t_pass();
}
