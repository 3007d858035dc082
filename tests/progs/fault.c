/* fault [--restart | --device1 | --bystander SECONDS | --stuck SECONDS | --waiter SECONDS |
 *        --other SECONDS | --steady SECONDS]: a sticky error in a context.
 *
 *   (no flag)    launches vec_add writing through a wild pointer: the synchronisation fails
 *                with a sticky error (an illegal address on a GPU), and so does every later
 *                call in the context. With --restart it then resets its primary context
 *                and retains it again, which must return the fault: the device is lost
 *                to the process (as with driver 580 on an H100). With --keep SECONDS it
 *                says "faulted", keeps its connection that long without a call, and then
 *                its calls must fail (with the fault natively; through the shim, once its
 *                faulted server has ended it, CUDA_ERROR_MPS_CLIENT_TERMINATED), not hang.
 *                With --device1 (two devices, else it skips) the process also has device 1's
 *                primary context, with memory, code and a round of vec_add done there before
 *                the fault; after it, it prints what device 1 answers: a round of vec_add
 *                in that context, and a context made there anew. Natively that says whether
 *                the driver keeps a fault to its device within a process (the server holds
 *                every device's shared context in one process); through the shim it must
 *                print the same.
 *                With --peer (through the shim only: two devices) device 1's context has
 *                peer access to device 0's before the fault; after it, enabling or disabling
 *                that access again answers the fault, never the pair's stale state
 *                (ALREADY_ENABLED, a success): server/memory/peer.c.
 *   --bystander  runs vec_add in a loop, checking every element, until a call fails (the
 *                fault of another client sharing its context, through the shim), for at
 *                most SECONDS; the error must be sticky; then it leaves cleanly. Prints
 *                "ready" once its first round passed.
 *   --stuck      one delay_set of SECONDS on its stream, then a synchronisation that the
 *                fault of another client must end with an error (or, on the CPU test
 *                driver, the context's reset); then it leaves cleanly. Prints "ready" once
 *                the kernel is queued.
 *   --waiter     the same as --stuck from a process that has called from two threads (the
 *                server then polls its wait instead of blocking in the driver: the fault
 *                must end that wait).
 *   --other      runs vec_add in a loop on the last device for SECONDS: every round must
 *                pass, as under MPS (a fault on device 0 is none of its business), or fail
 *                with a sticky error, said on a line "other device: ...", status 3: the
 *                server's devices share its process, and a fault is the process's (see
 *                --device1). Skips with one device.
 *   --steady     runs vec_add in a loop on device 0 for SECONDS: every round must pass (a
 *                client of another server, while this one's server sees no fault).
 * Through the shim the bystanders' failures are the point; natively only the first form
 * makes sense (and prints the same as through the shim). */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define N 4096

static const char *sticky_name(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
        return t_errname(r);
    default:
        return NULL;
    }
}

/* One round of vec_add over N elements: CUDA_SUCCESS with every element checked, or the
 * first error. */
static CUresult vecadd_round(CUfunction f, CUdeviceptr da, CUdeviceptr db, CUdeviceptr dc, float *a,
                             float *b, float *c)
{
    CUresult r;
    int n = N;
    if ((r = cuMemcpyHtoD(da, a, N * sizeof(float))) ||
        (r = cuMemcpyHtoD(db, b, N * sizeof(float))))
        return r;
    void *params[] = {&da, &db, &dc, &n};
    if ((r = cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL)) ||
        (r = cuCtxSynchronize()) || (r = cuMemcpyDtoH(c, dc, N * sizeof(float))))
        return r;
    for (int i = 0; i < N; i++)
        REQUIRE(c[i] == a[i] + b[i], "c[%d] = %g, expected %g", i, (double)c[i],
                (double)(a[i] + b[i]));
    return CUDA_SUCCESS;
}

static void fill(float *a, float *b)
{
    for (int i = 0; i < N; i++) {
        a[i] = (float)(i % 1000);
        b[i] = (float)(i % 7) * 0.25f;
    }
}

/* The context is dead: a call that needs it fails with the fault's error too. */
static void check_sticky(CUresult first)
{
    CUdeviceptr p = 0;
    CUresult again = cuMemAlloc(&p, 256);
    REQUIRE(again == first, "after %s, cuMemAlloc returned %s", t_errname(first), t_errname(again));
    t_ok("the error is sticky");
}

/* other: 1 on the last device, where no fault happens; 2 (--steady) on device 0 of a server
 * where no fault happens (another server's fault is none of its business): every round
 * must pass. */
static int bystander(int seconds, int other)
{
    CUdevice dev;
    CUcontext ctx;
    if (other == 1) {
        int n = 0;
        CHECK(cuInit(0));
        CHECK(cuDeviceGetCount(&n));
        if (n < 2) t_skip("one device");
        CHECK(cuDeviceGet(&dev, n - 1));
        CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
        CHECK(cuCtxSetCurrent(ctx));
    } else {
        t_setup(&dev, &ctx);
    }
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction f = t_get_function(mod, "vec_add");
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)),
          *c = malloc(N * sizeof(float));
    REQUIRE(a && b && c, "out of host memory");
    fill(a, b);
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, N * sizeof(float)));
    CHECK(cuMemAlloc(&db, N * sizeof(float)));
    CHECK(cuMemAlloc(&dc, N * sizeof(float)));
    CHECK(vecadd_round(f, da, db, dc, a, b, c));
    printf("ready\n");
    fflush(stdout);
    CUresult r = CUDA_SUCCESS;
    for (double end = t_now_s() + seconds; r == CUDA_SUCCESS && t_now_s() < end;)
        r = vecadd_round(f, da, db, dc, a, b, c);
    if (other == 2) CHECK(r);
    if (other && r != CUDA_SUCCESS) {
        /* The server holds every device's shared context in one process, and the driver's
         * fault is the process's (--device1): device 0's fault reaches this one too. Said
         * with its own status, for fault.sh to tell from a failure of this program. */
        REQUIRE(sticky_name(r), "the other device's loop failed with %s, not a sticky error",
                t_errname(r));
        printf("other device: a round failed with %s\n", t_errname(r));
        CHECK(cuDevicePrimaryCtxReset(dev));
        return 3;
    }
    if (other) {
        t_ok(other == 1 ? "every round on the other device passed" : "every round passed");
        CHECK(cuMemFree(da));
        CHECK(cuMemFree(db));
        CHECK(cuMemFree(dc));
        CHECK(cuModuleUnload(mod));
        CHECK(cuDevicePrimaryCtxRelease(dev));
        t_pass();
    }
    REQUIRE(r != CUDA_SUCCESS, "no error within %d s", seconds);
    REQUIRE(sticky_name(r), "the loop failed with %s, not a sticky error", t_errname(r));
    t_ok("a round failed with %s", t_errname(r));
    check_sticky(r);
    /* Leaving cleanly: the dead context goes (its objects died with it). */
    CHECK(cuDevicePrimaryCtxReset(dev));
    free(a);
    free(b);
    free(c);
    t_pass();
}

/* A call from a second thread. */
static void *touch(void *arg)
{
    CHECK(cuCtxSetCurrent((CUcontext)arg));
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 256));
    CHECK(cuMemFree(p));
    return NULL;
}

/* With FAULT_GO=PATH in the environment: says "prepared" and waits for PATH to exist
 * before its launch. On an H100 (driver 580) loading new code into a context waits for
 * every kernel running in it, natively too (a second thread's cuModuleLoadData waited 2 s
 * for a 2 s kernel of the first): in the shared context, for every client's. The code is
 * loaded lazily, at a function's first launch, so tests/fault.sh has every client load,
 * allocate and launch its kernels once before any long kernel starts. */
static void wait_go(void)
{
    const char *go = getenv("FAULT_GO");
    if (!go) return;
    printf("prepared\n");
    fflush(stdout);
    while (access(go, F_OK) != 0)
        usleep(10000);
}

/* Where a client preparing its long kernel is, on stderr (the GPU tier showed one that
 * never got ready while another client's long kernel ran). */
static void step(const char *what, double t0)
{
    fprintf(stderr, "step: %s at %.3f s\n", what, t_now_s() - t0);
}

static int late_ok; /* --late-ok: see stuck() */

static int stuck(int seconds, int threads)
{
    CUdevice dev;
    CUcontext ctx;
    double t0 = t_now_s();
    t_setup(&dev, &ctx);
    step("context", t0);
    if (threads) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, touch, ctx) == 0, "pthread_create failed");
        pthread_join(t, NULL);
    }
    step("second thread", t0);
    CUmodule mod = t_load_module("kernels.ptx");
    step("module", t0);
    CUfunction f = t_get_function(mod, "delay_set");
    CUdeviceptr flag;
    CHECK(cuMemAlloc(&flag, 4));
    step("memory", t0);
    unsigned v = 1;
    unsigned long long ns = 0;
    void *params[] = {&flag, &v, &ns};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)); /* its code loaded */
    CHECK(cuCtxSynchronize());
    step("code", t0);
    wait_go();
    ns = (unsigned long long)seconds * 1000000000ull;
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    printf("ready\n");
    fflush(stdout);
    /* Ended by the fault (or the reset of the dead context). Whatever it returned, the
     * context is dead by the next call. With --late-ok (the GPU tier) the kernel may also
     * have finished first: on an H100 the faulting client's kernel ran only once the long
     * kernels had ended (in one shared context every client's streams share the hardware
     * queues; in a process of its own the same fault ended a running kernel in 0.14 s).
     * Then the fault must reach this client at a later call, within 30 s. */
    CUresult r = cuCtxSynchronize();
    if (r == CUDA_SUCCESS && late_ok) {
        t_ok("the wait ended before the fault: its kernel finished first");
        for (double end = t_now_s() + 30; r == CUDA_SUCCESS && t_now_s() < end; usleep(10000))
            r = cuCtxSynchronize();
    } else if (r == CUDA_SUCCESS) {
        r = cuCtxSynchronize();
    }
    REQUIRE(sticky_name(r), "the synchronisation returned %s, not a sticky error", t_errname(r));
    t_ok("the wait ended with %s", t_errname(r));
    CHECK(cuDevicePrimaryCtxReset(dev));
    t_pass();
}

/* --peer: device 1's primary context, with peer access to ctx (device 0's) enabled, or
 * after the fault (fault: its error) that access enabled or disabled again. */
static void peer_access(CUcontext ctx, CUresult fault)
{
    static CUcontext other;
    CUdevice d1;
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("--peer needs two devices, found %d", n);
    if (!fault) {
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDevicePrimaryCtxRetain(&other, d1));
        CHECK(cuCtxSetCurrent(other));
        CHECK(cuCtxEnablePeerAccess(ctx, 0));
        CHECK(cuCtxSetCurrent(ctx));
        return;
    }
    CHECK(cuCtxSetCurrent(other));
    CUresult e = cuCtxEnablePeerAccess(ctx, 0), d = cuCtxDisablePeerAccess(ctx);
    REQUIRE(e == fault && d == fault,
            "peer access to the dead context enabled again: %s, disabled: %s (not %s)",
            t_errname(e), t_errname(d), t_errname(fault));
    t_ok("peer access to the dead context, enabled or disabled again, answers %s",
         t_errname(fault));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuDeviceGet(&d1, 1));
    CHECK(cuDevicePrimaryCtxRelease(d1));
}

/* --device1: device 1's primary context, its memory and code, and a round of vec_add there
 * (before: all must pass); after the fault, what device 1 answers, printed. */
static void device1(CUcontext ctx0, int after)
{
    static CUdevice d1;
    static CUcontext c1;
    static CUfunction f1;
    static CUdeviceptr da, db, dc;
    static float a[N], b[N], c[N];
    if (!after) {
        int n = 0;
        CHECK(cuDeviceGetCount(&n));
        if (n < 2) t_skip("--device1 needs two devices, found %d", n);
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDevicePrimaryCtxRetain(&c1, d1));
        CHECK(cuCtxSetCurrent(c1));
        f1 = t_get_function(t_load_module("kernels.ptx"), "vec_add");
        CHECK(cuMemAlloc(&da, sizeof(a)));
        CHECK(cuMemAlloc(&db, sizeof(b)));
        CHECK(cuMemAlloc(&dc, sizeof(c)));
        fill(a, b);
        CHECK(vecadd_round(f1, da, db, dc, a, b, c));
        CHECK(cuCtxSetCurrent(ctx0));
        t_ok("device 1: a round of vec_add passed before the fault");
        return;
    }
    CUresult cur = cuCtxSetCurrent(c1);
    CUresult round = cur ? cur : vecadd_round(f1, da, db, dc, a, b, c);
    printf("device 1's context after device 0's fault: made current %s, a round of vec_add %s\n",
           t_errname(cur), t_errname(round));
    CUcontext fresh = NULL;
    CUdeviceptr p = 0;
    CUresult made = cuCtxCreate(&fresh, NULL, 0, d1);
    CUresult alloc = made ? made : cuMemAlloc(&p, 256);
    printf("a context made on device 1 after it: %s, cuMemAlloc there %s\n", t_errname(made),
           t_errname(alloc));
    if (!alloc) cuMemFree(p);
    if (!made) cuCtxDestroy(fresh);
    cuDevicePrimaryCtxRelease(d1);
    cuCtxSetCurrent(ctx0);
}

int main(int argc, char **argv)
{
    t_init("fault", 120);
    late_ok = t_has_flag(argc, argv, "--late-ok");
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--bystander") == 0 || strcmp(argv[i], "--other") == 0 ||
            strcmp(argv[i], "--steady") == 0)
            return bystander(atoi(argv[i + 1]), strcmp(argv[i], "--other") == 0    ? 1
                                                : strcmp(argv[i], "--steady") == 0 ? 2
                                                                                   : 0);
        if (strcmp(argv[i], "--stuck") == 0 || strcmp(argv[i], "--waiter") == 0)
            return stuck(atoi(argv[i + 1]), strcmp(argv[i], "--waiter") == 0);
    }
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction f = t_get_function(mod, "vec_add");
    CUdeviceptr da, db;
    CHECK(cuMemAlloc(&da, N * sizeof(float)));
    CHECK(cuMemAlloc(&db, N * sizeof(float)));
    CHECK(cuMemsetD32(da, 0, N));
    CHECK(cuMemsetD32(db, 0, N));
    /* A wild pointer: no allocation there (the bottom of the address space). */
    CUdeviceptr wild = 0x1000;
    int n = N;
    void *warm[] = {&da, &db, &db, &n};
    CHECK(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, warm, NULL)); /* code loaded */
    CHECK(cuCtxSynchronize());
    void *params[] = {&da, &db, &wild, &n};
    int peer = t_has_flag(argc, argv, "--peer"), dev1 = t_has_flag(argc, argv, "--device1");
    if (peer) peer_access(ctx, CUDA_SUCCESS);
    if (dev1) device1(ctx, 0);
    wait_go();
    CHECK(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CUresult r = cuCtxSynchronize();
    REQUIRE(sticky_name(r), "the synchronisation returned %s, not a sticky error", t_errname(r));
    t_ok("vec_add through a wild pointer failed with %s", t_errname(r));
    check_sticky(r);
    if (peer) peer_access(ctx, r);
    if (dev1) device1(ctx, 1);
    for (int i = 1; i + 1 < argc; i++) {
        int keep = strcmp(argv[i], "--keep") == 0 ? atoi(argv[i + 1]) : 0;
        if (keep <= 0) continue;
        printf("faulted\n");
        fflush(stdout);
        sleep((unsigned)keep);
        CUdeviceptr p = 0;
        CUresult later = cuMemAlloc(&p, 256);
        REQUIRE(later != CUDA_SUCCESS, "cuMemAlloc %d s after the fault succeeded", keep);
        t_ok("cuMemAlloc %d s after the fault returned %s", keep, t_errname(later));
        later = cuCtxSynchronize();
        REQUIRE(later != CUDA_SUCCESS, "cuCtxSynchronize %d s after the fault succeeded", keep);
        t_ok("cuCtxSynchronize then returned %s", t_errname(later));
        t_pass();
    }
    if (t_has_flag(argc, argv, "--restart")) {
        /* The process cannot start over on the device: on an H100 (driver 580) the reset
         * succeeds but the retain after it returns the fault, and so must it through the
         * shim (the faulted server keeps the device lost; a new process is served). */
        CHECK(cuDevicePrimaryCtxReset(dev));
        CUresult again = cuDevicePrimaryCtxRetain(&ctx, dev);
        REQUIRE(again == r, "the retain after the reset returned %s, not %s", t_errname(again),
                t_errname(r));
        t_ok("the device is lost to the process: the retain after the reset returns the fault");
        t_pass();
    }
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
