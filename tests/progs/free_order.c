/* free_order: memory a process frees must not reach another process while the first one's
 * work queued before the free may still touch it (issue 34, S11).
 *
 * The process forks before any CUDA call. A (the parent) fills 1 MiB of device memory with
 * its own pattern, queues on stream T a kernel that sleeps 1.5 s and then a copy of the
 * memory into its pinned buffer, frees the memory with cuMemFreeAsync on another stream S
 * (idle: the free itself has nothing to wait for on S), synchronises S, and tells B. B (the
 * child) then allocates 1 MiB, fills it with its secret and says where it got it. A's copy,
 * queued before its free, must read A's pattern, never B's secret. Natively the two have
 * contexts of their own and this holds trivially; in a server that replays both on one
 * context a block freed on S once S was idle went back at once, B got it, and A's copy read
 * B's secret.
 *   free_order [--sync] [--capture]: --sync frees with cuMemFree instead (it waits for A's
 *   work); --capture begins a capture on T (relaxed) before the free, ended after B's word:
 *   T's work from before the capture must still be waited for; --pool allocates A's memory
 *   stream-ordered (cuMemAllocAsync, the device's default pool) and B's too, and A's free
 *   is stream-ordered; --pooldestroy allocates both from pools of their own made for it,
 *   and A destroys its pool right after its free. Natively a pool's memory freed and
 *   synchronised is unmapped at once: A's copy faults (H200, 580.159.04), so these two are
 *   not run by the tiers (through the shim the fault is the shared context's); --vmm maps
 *   both with the virtual memory calls, A unmapping,
 *   releasing and freeing its range right after the copy is queued: natively the copy
 *   faults (the driver unmaps at once); through the shim the unmap waits for A's work, and
 *   A must read its own data, never B's (it read B's secret before: server/memory/vmm.c). */
#include "tests/progs/common.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (1u << 20)
#define OURS 0xa1a1a1a1u
#define SECRET 0x5ec2e75eu

static int to_a[2], to_b[2]; /* pipes: B -> A, A -> B */
static int pooled;           /* --pool */
static int own_pool;         /* --pooldestroy */
static int vmm;              /* --vmm */

/* A range of `*size` bytes (rounded up to the granularity) mapped with the virtual memory
 * calls on device 0; its handle in *h. */
static CUdeviceptr vmm_map(size_t *size, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    *size = (*size + g - 1) / g * g;
    CUdeviceptr p;
    CHECK(cuMemAddressReserve(&p, *size, 0, 0, 0));
    CHECK(cuMemCreate(h, *size, &prop, 0));
    CHECK(cuMemMap(p, *size, 0, *h, 0));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(p, *size, &acc, 1));
    return p;
}

static void vmm_unmap(CUdeviceptr p, size_t size, CUmemGenericAllocationHandle h)
{
    CHECK(cuMemUnmap(p, size));
    CHECK(cuMemRelease(h));
    CHECK(cuMemAddressFree(p, size));
}

/* A pool of its own on device 0, as a program makes one. */
static CUmemoryPool make_pool(void)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    return pool;
}

static void b_role(void)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    char c = 0;
    REQUIRE(t_read_all(to_b[0], &c, 1) && c == 'f', "B: A did not say it freed");
    CUdeviceptr q;
    CUmemoryPool bpool = NULL;
    size_t qsize = BYTES;
    CUmemGenericAllocationHandle qh = 0;
    if (vmm) {
        q = vmm_map(&qsize, &qh);
    } else if (own_pool) {
        bpool = make_pool();
        CHECK(cuMemAllocFromPoolAsync(&q, BYTES, bpool, NULL));
    } else if (pooled)
        CHECK(cuMemAllocAsync(&q, BYTES, NULL));
    else
        CHECK(cuMemAlloc(&q, BYTES));
    CHECK(cuMemsetD32(q, SECRET, BYTES / 4));
    CHECK(cuCtxSynchronize());
    t_write_all(to_a[1], &q, sizeof(q));
    /* Held until A has read its copy, so that the block stays B's meanwhile. */
    REQUIRE(t_read_all(to_b[0], &c, 1) && c == 'd', "B: A did not finish");
    if (vmm) {
        vmm_unmap(q, qsize, qh);
    } else if (bpool) {
        CHECK(cuMemFreeAsync(q, NULL));
        CHECK(cuCtxSynchronize());
        CHECK(cuMemPoolDestroy(bpool));
    } else {
        CHECK(cuMemFree(q));
    }
    CHECK(cuDevicePrimaryCtxRelease(dev));
    exit(0);
}

int main(int argc, char **argv)
{
    t_init("free_order", 120);
    int sync_free = t_has_flag(argc, argv, "--sync");
    int capture = t_has_flag(argc, argv, "--capture");
    pooled = t_has_flag(argc, argv, "--pool");
    own_pool = t_has_flag(argc, argv, "--pooldestroy");
    vmm = t_has_flag(argc, argv, "--vmm");
    REQUIRE(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) b_role();
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction delay = t_get_function(mod, "delay_set");
    CUdeviceptr p, flag;
    CHECK(cuMemAlloc(&flag, 4096));
    CUmemoryPool apool = NULL;
    size_t psize = BYTES;
    CUmemGenericAllocationHandle ph = 0;
    if (vmm) {
        p = vmm_map(&psize, &ph);
    } else if (own_pool) {
        apool = make_pool();
        CHECK(cuMemAllocFromPoolAsync(&p, BYTES, apool, NULL));
    } else if (pooled)
        CHECK(cuMemAllocAsync(&p, BYTES, NULL));
    else
        CHECK(cuMemAlloc(&p, BYTES));
    CHECK(cuMemsetD32(p, OURS, BYTES / 4));
    unsigned *h;
    CHECK(cuMemAllocHost((void **)&h, BYTES));
    memset(h, 0, BYTES);
    CHECK(cuCtxSynchronize());
    CUstream t, s;
    CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned one = 1;
    unsigned long long ns = 1500ull * 1000 * 1000;
    void *params[] = {&flag, &one, &ns};
    CHECK(cuLaunchKernel(delay, 1, 1, 1, 1, 1, 1, 0, t, params, NULL));
    CHECK(cuMemcpyDtoHAsync(h, p, BYTES, t));
    if (capture) CHECK(cuStreamBeginCapture(t, CU_STREAM_CAPTURE_MODE_RELAXED));
    if (vmm) {
        vmm_unmap(p, psize, ph);
    } else if (sync_free) {
        CHECK(cuMemFree(p));
    } else {
        CHECK(cuMemFreeAsync(p, s));
        CHECK(cuStreamSynchronize(s));
    }
    if (apool) CHECK(cuMemPoolDestroy(apool));
    char c = 'f';
    t_write_all(to_b[1], &c, 1);
    CUdeviceptr q = 0;
    struct pollfd pf = {.fd = to_a[0], .events = POLLIN};
    REQUIRE(poll(&pf, 1, 20000) == 1 && t_read_all(to_a[0], &q, sizeof(q)),
            "A: B did not allocate");
    if (capture) {
        CUgraph g;
        CHECK(cuStreamEndCapture(t, &g));
        CHECK(cuGraphDestroy(g));
    }
    CHECK(cuStreamSynchronize(t));
    size_t bad = 0;
    for (size_t i = 0; i < BYTES / 4; i++)
        bad += h[i] != OURS;
    c = 'd';
    t_write_all(to_b[1], &c, 1);
    REQUIRE(bad == 0, "A: the copy queued before the free read %zu words not its own (%#x: %s)",
            bad, h[0], h[0] == SECRET ? "another process's secret" : "something else");
    t_ok("A: its copy queued before its %s%s read its own data",
         sync_free ? "free" : "stream-ordered free",
         capture ? " (and a capture on its stream)" : "");
    int sb = 0;
    REQUIRE(waitpid(b, &sb, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "B failed (status %d)", sb);
    CHECK(cuMemFreeHost(h));
    CHECK(cuMemFree(flag));
    CHECK(cuStreamDestroy(t));
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
