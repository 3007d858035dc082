/* thread_peer [sync|copy|event|free|devices ...]: two threads of one process, as a framework
 * runs one per GPU around a collective (XLA's pmap, NCCL in one process): thread A queues a
 * kernel that waits for a flag (a collective's half waiting for its peer), then waits for it:
 * a stream synchronisation (sync), a copy into pageable memory behind it (copy), an event
 * recorded behind it (event), or a cuMemFree, which natively waits for the context's work
 * (free). Thread B, 200 ms after A began to wait, launches on another stream the kernel that
 * stores the flag. Natively B's launch goes on while A waits, and A's wait ends at once
 * after; the kernel gives up after 5 s otherwise, and A's work then says so. Not so natively
 * for free on a GPU: the driver holds B's launch behind the free (H200, driver 580.159.04),
 * so that form is compared with native on the CPU test driver only (programs.txt). Through the shim
 * both threads' calls go to the one server thread of the process: A's wait there must not
 * keep B's launch from the GPU.
 *
 * devices: A's kernel is on GPU 0 with a host function queued behind it (XLA queues one to
 * learn its work is done); B is the thread of GPU 1 and loads its code there before its
 * launch (a module load, as XLA's first run of a computation does), its kernel storing into
 * GPU 0's memory through peer access. Natively a load on GPU 1 waits for no stream of GPU 0.
 * Skipped without two GPUs that reach each other.
 *
 * Each form takes a fresh flag; all five by default. THREAD_PEER_DELAY_MS: B's delay instead of
 * 200 ms, and A says "waiting: FORM" on stdout as it begins to wait (tests/leave_beside.sh
 * has another client leave meanwhile). */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BIG (8u << 20) /* the copy's bytes: staged, not inline, through the shim */

static CUcontext ctx, ctx1;
static CUfunction fill;
static CUdeviceptr flag;
static CUstream s2;
static atomic_int waiting; /* A is about to wait: B's 200 ms start */
static unsigned delay_ms = 200;

static void *peer(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    while (!atomic_load(&waiting))
        usleep(1000);
    usleep(delay_ms * 1000);
    unsigned one = 1;
    unsigned long long n = 1;
    void *params[] = {&flag, &one, &n};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s2, params, NULL));
    CHECK(cuStreamSynchronize(s2));
    return NULL;
}

/* The devices form's thread B: GPU 1's thread, loading its code before its launch. */
static void *peer_device(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx1));
    CUstream s3;
    CHECK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    while (!atomic_load(&waiting))
        usleep(1000);
    usleep(delay_ms * 1000);
    CUmodule mod1 = t_load_module("kernels.ptx");
    CUfunction fill1 = t_get_function(mod1, "fill_u32");
    unsigned one = 1;
    unsigned long long n = 1;
    void *params[] = {&flag, &one, &n};
    CHECK(cuLaunchKernel(fill1, 1, 1, 1, 1, 1, 1, 0, s3, params, NULL));
    CHECK(cuStreamSynchronize(s3));
    CHECK(cuModuleUnload(mod1));
    CHECK(cuStreamDestroy(s3));
    return NULL;
}

static void noop(void *arg)
{
    (void)arg;
}

/* Whether the devices form can run: a second GPU that reaches the first's memory. */
static int two_devices(void)
{
    int n = 0, can = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) return 0;
    CHECK(cuDeviceCanAccessPeer(&can, 1, 0));
    if (!can) return 0;
    if (!ctx1) {
        CUdevice d1;
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDevicePrimaryCtxRetain(&ctx1, d1));
        CHECK(cuCtxSetCurrent(ctx1));
        CHECK(cuCtxEnablePeerAccess(ctx, 0));
        CHECK(cuCtxSetCurrent(ctx));
    }
    return 1;
}

int main(int argc, char **argv)
{
    t_init("thread_peer", 120);
    const char *d = getenv("THREAD_PEER_DELAY_MS");
    if (d && atoi(d) > 0 && atoi(d) < 4000) delay_ms = (unsigned)atoi(d);
    CUdevice dev;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction await = t_get_function(mod, "await_u32");
    fill = t_get_function(mod, "fill_u32");
    CUdeviceptr out, big;
    CHECK(cuMemAlloc(&flag, 4));
    CHECK(cuMemAlloc(&out, 4));
    CHECK(cuMemAlloc(&big, BIG));
    CHECK(cuMemsetD8(big, 7, BIG));
    CUstream s1;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    unsigned char *host = malloc(BIG);
    REQUIRE(host, "no memory");
    const char *all[] = {"sync", "copy", "event", "free", "devices"};
    int nforms = argc > 1 ? argc - 1 : 5;
    for (int i = 0; i < nforms; i++) {
        const char *form = argc > 1 ? argv[i + 1] : all[i];
        REQUIRE(!strcmp(form, "sync") || !strcmp(form, "copy") || !strcmp(form, "event") ||
                    !strcmp(form, "free") || !strcmp(form, "devices"),
                "usage: thread_peer [sync|copy|event|free|devices ...]");
        int devices = !strcmp(form, "devices");
        if (devices && !two_devices()) {
            t_ok("devices: skipped (no second GPU that reaches the first)");
            continue;
        }
        CUdeviceptr spare = 0;
        if (!strcmp(form, "free")) CHECK(cuMemAlloc(&spare, 1 << 20));
        CHECK(cuMemsetD32(flag, 0, 1));
        CHECK(cuMemsetD32(out, 0, 1));
        CHECK(cuCtxSynchronize());
        atomic_store(&waiting, 0);
        pthread_t b;
        REQUIRE(pthread_create(&b, NULL, devices ? peer_device : peer, NULL) == 0, "no thread");
        unsigned one = 1;
        unsigned long long ns = 5000000000ull;
        void *params[] = {&flag, &one, &ns, &out};
        CHECK(cuLaunchKernel(await, 1, 1, 1, 1, 1, 1, 0, s1, params, NULL));
        if (devices) CHECK(cuLaunchHostFunc(s1, noop, NULL));
        double t0 = t_now_s();
        if (getenv("THREAD_PEER_DELAY_MS")) {
            printf("waiting: %s\n", form);
            fflush(stdout);
        }
        atomic_store(&waiting, 1);
        if (!strcmp(form, "sync") || devices) {
            CHECK(cuStreamSynchronize(s1));
        } else if (!strcmp(form, "copy")) {
            memset(host, 0, BIG);
            CHECK(cuMemcpyDtoHAsync(host, big, BIG, s1)); /* pageable: returns once done */
            CHECK(cuStreamSynchronize(s1));
            REQUIRE(host[0] == 7 && host[BIG - 1] == 7, "%s: the copy's bytes are wrong", form);
        } else if (!strcmp(form, "free")) {
            CHECK(cuMemFree(spare)); /* waits for the kernel natively (the CPU test driver: not) */
            CHECK(cuStreamSynchronize(s1));
        } else {
            CUevent e;
            CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
            CHECK(cuEventRecord(e, s1));
            CHECK(cuEventSynchronize(e));
            CHECK(cuEventDestroy(e));
        }
        double waited = t_now_s() - t0;
        REQUIRE(pthread_join(b, NULL) == 0, "join");
        unsigned got = 0;
        CHECK(cuMemcpyDtoH(&got, out, 4));
        REQUIRE(got == 1,
                "%s: the waiting kernel gave up after %.1f s: the other thread's launch was "
                "held up behind this thread's wait",
                form, waited);
        t_ok("%s: the other thread's launch ended this thread's wait", form);
    }
    free(host);
    t_pass();
}
