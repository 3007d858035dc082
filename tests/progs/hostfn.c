/* hostfn: host functions and stream callbacks run in stream order: after the work before
 * them (they see a kernel's writes to mapped pinned memory), before the work after them
 * (a kernel after them sees what they wrote), on several streams at once, and a thread
 * blocked in cuStreamSynchronize waits for them without running them itself. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define N 64
#define STREAMS 4

struct probe {
    volatile uint32_t *pinned; /* mapped pinned memory the kernels write */
    uint32_t seen;             /* what the function saw there */
    int ran;
    pthread_t thread; /* the thread it ran on */
};

static void CUDA_CB look(void *arg)
{
    struct probe *p = arg;
    p->seen = p->pinned[0];
    p->thread = pthread_self();
    /* Slow on purpose: the stream must wait for it. */
    struct timespec ts = {.tv_nsec = 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    p->pinned[1] = p->seen + 1000; /* read by the next kernel's copy */
    __atomic_store_n(&p->ran, 1, __ATOMIC_RELEASE);
}

static void CUDA_CB counted(CUstream s, CUresult status, void *arg)
{
    (void)s;
    REQUIRE(status == CUDA_SUCCESS, "stream callback got status %d", (int)status);
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
}

int main(void)
{
    t_init("hostfn", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction fill = t_get_function(mod, "fill_u32");
    CUfunction delay = t_get_function(mod, "delay_set");

    /* 1. After the work before it, before the work after it. */
    volatile uint32_t *pin;
    CHECK(cuMemHostAlloc((void **)&pin, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr dpin;
    CHECK(cuMemHostGetDevicePointer(&dpin, (void *)pin, 0));
    pin[0] = pin[1] = 0;
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned value = 77;
    unsigned long long ns = 100 * 1000 * 1000ull;
    void *dargs[] = {&dpin, &value, &ns};
    CHECK(cuLaunchKernel(delay, 1, 1, 1, 32, 1, 1, 0, s, dargs, NULL));
    struct probe p = {.pinned = pin};
    CHECK(cuLaunchHostFunc(s, look, &p));
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, 4));
    CHECK(cuMemcpyAsync(out, dpin + 4, 4, s)); /* pin[1], written by the function */
    CHECK(cuStreamSynchronize(s));
    REQUIRE(__atomic_load_n(&p.ran, __ATOMIC_ACQUIRE), "host function had not run after sync");
    REQUIRE(p.seen == 77, "host function saw %u, want the kernel's 77", p.seen);
    REQUIRE(!pthread_equal(p.thread, pthread_self()), "host function ran on the app thread");
    uint32_t got = 0;
    CHECK(cuMemcpyDtoH(&got, out, 4));
    REQUIRE(got == 1077, "the copy after the host function read %u, want 1077", got);
    t_ok("cuLaunchHostFunc runs after earlier work and before later work");

    /* 2. Callbacks on several streams at once, each in order with its stream's work. */
    CUstream ss[STREAMS];
    int count[STREAMS] = {0};
    CUdeviceptr buf;
    CHECK(cuMemAlloc(&buf, STREAMS * 1024 * 4));
    for (int k = 0; k < STREAMS; k++)
        CHECK(cuStreamCreate(&ss[k], CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < N; i++)
        for (int k = 0; k < STREAMS; k++) {
            CUdeviceptr b = buf + (CUdeviceptr)k * 4096;
            unsigned v = (unsigned)i;
            unsigned long long n = 1024;
            void *fargs[] = {&b, &v, &n};
            CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, ss[k], fargs, NULL));
            CHECK(cuStreamAddCallback(ss[k], counted, &count[k], 0));
        }
    CHECK(cuCtxSynchronize());
    for (int k = 0; k < STREAMS; k++)
        REQUIRE(count[k] == N, "stream %d: %d callbacks ran, want %d", k, count[k], N);
    t_ok("%d stream callbacks on each of %d streams, all run by cuCtxSynchronize", N, STREAMS);

    /* 3. On the NULL stream, with a synchronous copy after it. */
    struct probe q = {.pinned = pin};
    pin[0] = 5;
    CHECK(cuLaunchHostFunc(NULL, look, &q));
    CHECK(cuMemcpyDtoH(&got, dpin + 4, 4));
    REQUIRE(q.ran && got == 1005, "NULL stream: ran %d, copy read %u, want 1005", q.ran, got);
    t_ok("cuLaunchHostFunc on the NULL stream orders a later synchronous copy");

    EXPECT_ERR(cuLaunchHostFunc(s, NULL, NULL));
    t_ok("a NULL host function is refused");

    for (int k = 0; k < STREAMS; k++)
        CHECK(cuStreamDestroy(ss[k]));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(buf));
    CHECK(cuMemFree(out));
    CHECK(cuMemFreeHost((void *)pin));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
