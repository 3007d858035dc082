/* streams_events: ordering and stream/event semantics.
 *
 * delay_set keeps a stream busy for a while before it stores a value, so that work which
 * is wrongly not ordered after it would run first and leave a different result; mul_add_i32
 * chains are not commutative, so their result tells the order they ran in. Nothing here
 * depends on timing for correctness: only NOT_READY right after a 200 ms kernel was queued
 * assumes the queueing takes less than that. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull /* nanoseconds */

static CUcontext g_ctx;
static CUfunction f_delay, f_muladd;
static uint32_t *g_pin; /* pinned scratch for async readbacks, 64 words */

static void delay_set(CUstream st, CUdeviceptr flag, unsigned value, unsigned long long ns)
{
    void *args[] = {&flag, &value, &ns};
    CHECK(cuLaunchKernel(f_delay, 1, 1, 1, 32, 1, 1, 0, st, args, NULL));
}

/* p[i] = p[i] * mul + add over n ints. */
static void mul_add(CUstream st, CUdeviceptr p, int mul, int add, unsigned long long n)
{
    void *args[] = {&p, &mul, &add, &n};
    CHECK(cuLaunchKernel(f_muladd, t_blocks_for(n, 128), 1, 1, 128, 1, 1, 0, st, args, NULL));
}

/* Stores v at p and waits: a copy from pageable memory may return before it lands, and
 * non-blocking streams would not wait for it. */
static void set_u32(CUdeviceptr p, uint32_t v)
{
    CHECK(cuMemcpyHtoD(p, &v, 4));
    CHECK(cuCtxSynchronize());
}

/* A copy queued after delay_set on the same stream sees the value it stored. */
static void same_stream_chain(CUstream s, CUdeviceptr flag, CUdeviceptr flag2)
{
    set_u32(flag, 0);
    set_u32(flag2, 0);
    g_pin[0] = g_pin[1] = 0;
    delay_set(s, flag, 42, 200 * MS);
    CHECK(cuMemcpyDtoHAsync(&g_pin[0], flag, 4, s));
    CHECK(cuMemcpyDtoDAsync(flag2, flag, 4, s));
    CHECK(cuMemcpyDtoHAsync(&g_pin[1], flag2, 4, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(g_pin[0] == 42 && g_pin[1] == 42, "copies after delay_set saw %u and %u, not 42",
            g_pin[0], g_pin[1]);
    t_ok("same stream: copies after delay_set see its value");
}

/* cuStreamQuery/cuEventQuery: NOT_READY while a 200 ms kernel runs, SUCCESS after sync. */
static void queries(CUstream s, CUdeviceptr flag)
{
    CUevent ev, start;
    CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));

    delay_set(s, flag, 1, 200 * MS);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamQuery(s));
    t_ok("cuStreamQuery NOT_READY while busy, SUCCESS after cuStreamSynchronize");

    CHECK(cuEventRecord(start, s));
    delay_set(s, flag, 2, 200 * MS);
    CHECK(cuEventRecord(ev, s));
    EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
    float ms = -1;
    EXPECT(cuEventElapsedTime(&ms, start, ev), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(ev));
    CHECK(cuEventQuery(ev));
    t_ok("cuEventQuery NOT_READY while busy, SUCCESS after cuEventSynchronize");
    CHECK(cuEventElapsedTime(&ms, start, ev));
    REQUIRE(ms >= 0, "elapsed time %f < 0", (double)ms);
    t_ok("cuEventElapsedTime NOT_READY before completion, non-negative after");

    CUevent never;
    CHECK(cuEventCreate(&never, CU_EVENT_DEFAULT));
    EXPECT(cuEventElapsedTime(&ms, start, never), CUDA_ERROR_INVALID_HANDLE);
    t_ok("cuEventElapsedTime with an unrecorded event: CUDA_ERROR_INVALID_HANDLE");

    CUevent nt1, nt2;
    CHECK(cuEventCreate(&nt1, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&nt2, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(nt1, s));
    delay_set(s, flag, 3, 1 * MS);
    CHECK(cuEventRecord(nt2, s));
    CHECK(cuEventSynchronize(nt2));
    CHECK(cuEventQuery(nt1));
    EXPECT(cuEventElapsedTime(&ms, nt1, nt2), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuEventElapsedTime(&ms, start, nt2), CUDA_ERROR_INVALID_HANDLE);
    t_ok("CU_EVENT_DISABLE_TIMING events: elapsed time CUDA_ERROR_INVALID_HANDLE");

    CUevent all[] = {ev, start, never, nt1, nt2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CHECK(cuEventDestroy(all[i]));
}

/* s2 waits for an event recorded on s1 after a delayed mul_add: the chain runs in order. */
static void cross_stream(CUstream s1, CUstream s2, CUdeviceptr flag, CUdeviceptr x)
{
    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    set_u32(flag, 0);
    CHECK(cuMemsetD32(x, 1, 1));
    CHECK(cuCtxSynchronize());
    g_pin[0] = g_pin[1] = 0;

    delay_set(s1, flag, 5, 200 * MS);
    mul_add(s1, x, 3, 0, 1); /* 3 */
    CHECK(cuEventRecord(ev, s1));
    CHECK(cuStreamWaitEvent(s2, ev, 0));
    mul_add(s2, x, 1, 4, 1); /* 7; unordered it would be (1 + 4) * 3 = 15 */
    CHECK(cuMemcpyDtoHAsync(&g_pin[0], x, 4, s2));
    CHECK(cuMemcpyDtoHAsync(&g_pin[1], flag, 4, s2));
    CHECK(cuStreamSynchronize(s2));
    REQUIRE((int)g_pin[0] == 7 && g_pin[1] == 5, "after cuStreamWaitEvent: x %d (want 7), flag %u",
            (int)g_pin[0], g_pin[1]);
    CHECK(cuEventDestroy(ev));
    t_ok("cuEventRecord + cuStreamWaitEvent orders work across streams");
}

/* Legacy NULL stream: ordered with blocking streams both ways. */
static void legacy_default(CUstream sb, CUdeviceptr flag, CUdeviceptr x)
{
    CHECK(cuMemsetD32(x, 2, 1));
    CHECK(cuCtxSynchronize());
    g_pin[0] = 0;
    delay_set(sb, flag, 1, 200 * MS);
    mul_add(sb, x, 5, 0, 1);    /* 10 */
    mul_add(NULL, x, 1, -3, 1); /* 7; unordered (2 - 3) * 5 = -5 */
    CHECK(cuMemcpyDtoHAsync(&g_pin[0], x, 4, NULL));
    CHECK(cuStreamSynchronize(NULL));
    REQUIRE((int)g_pin[0] == 7, "blocking stream then NULL stream: x %d, want 7", (int)g_pin[0]);
    t_ok("NULL stream work waits for earlier work on a blocking stream");

    CHECK(cuMemsetD32(x, 2, 1));
    CHECK(cuCtxSynchronize());
    g_pin[0] = 0;
    delay_set(NULL, flag, 2, 200 * MS);
    mul_add(NULL, x, 5, 0, 1); /* 10 */
    mul_add(sb, x, 1, -3, 1);  /* 7 */
    CHECK(cuMemcpyDtoHAsync(&g_pin[0], x, 4, sb));
    CHECK(cuStreamSynchronize(sb));
    REQUIRE((int)g_pin[0] == 7, "NULL stream then blocking stream: x %d, want 7", (int)g_pin[0]);
    t_ok("blocking stream work waits for earlier work on the NULL stream");
}

/* A non-blocking stream keeps its own order while the NULL stream is busy; whether it runs
 * concurrently is not guaranteed, so only its results are checked. */
static void non_blocking(CUstream snb, CUdeviceptr flag, CUdeviceptr y)
{
    CHECK(cuMemsetD32(y, 3, 64));
    CHECK(cuCtxSynchronize());
    memset(g_pin, 0, 64 * 4);
    delay_set(NULL, flag, 9, 200 * MS);
    mul_add(snb, y, 4, 1, 64); /* 13 */
    mul_add(snb, y, 2, 0, 64); /* 26 */
    CHECK(cuMemcpyDtoHAsync(g_pin, y, 64 * 4, snb));
    CHECK(cuStreamSynchronize(snb));
    for (int i = 0; i < 64; i++)
        REQUIRE((int)g_pin[i] == 26, "non-blocking stream: y[%d] = %d, want 26", i, (int)g_pin[i]);
    CHECK(cuCtxSynchronize());
    t_ok("non-blocking stream: its own work in order");
}

static void flags_and_priorities(CUstream s_blocking, CUstream s_nb)
{
    unsigned flags = 99;
    CHECK(cuStreamGetFlags(s_blocking, &flags));
    REQUIRE(flags == CU_STREAM_DEFAULT, "cuStreamGetFlags of a flags-0 stream: %u", flags);
    CHECK(cuStreamGetFlags(s_nb, &flags));
    REQUIRE(flags == CU_STREAM_NON_BLOCKING, "cuStreamGetFlags of a non-blocking stream: %u",
            flags);
    t_ok("cuStreamGetFlags returns the creation flags");

    int least = 0, greatest = 0, prio = 0;
    CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
    REQUIRE(greatest <= least, "priority range: greatest %d > least %d", greatest, least);
    t_ok("cuCtxGetStreamPriorityRange: greatest <= least");

    struct {
        int asked, want;
        unsigned flags;
    } cases[] = {{greatest, greatest, CU_STREAM_NON_BLOCKING},
                 {least, least, CU_STREAM_DEFAULT},
                 {greatest - 1, greatest, CU_STREAM_DEFAULT}, /* clamped */
                 {least + 1, least, CU_STREAM_NON_BLOCKING}}; /* clamped */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CUstream sp;
        CHECK(cuStreamCreateWithPriority(&sp, cases[i].flags, cases[i].asked));
        CHECK(cuStreamGetPriority(sp, &prio));
        REQUIRE(prio == cases[i].want, "stream created with priority %d has %d, want %d",
                cases[i].asked, prio, cases[i].want);
        CHECK(cuStreamGetFlags(sp, &flags));
        REQUIRE(flags == cases[i].flags, "priority stream flags %u, want %u", flags,
                cases[i].flags);
        CHECK(cuStreamSynchronize(sp));
        CHECK(cuStreamDestroy(sp));
    }
    t_ok("cuStreamCreateWithPriority/cuStreamGetPriority, out-of-range priorities clamped");
}

/* ------------------------------------------------------------ per-thread default stream */

struct pt_arg {
    int index;
    CUdeviceptr x, flag;
    uint32_t *out; /* pinned, 2 words */
    char err[200];
};

/* Each thread uses CU_STREAM_PER_THREAD: a delayed store then a mul_add, read back in order. */
static void *per_thread_body(void *p)
{
    struct pt_arg *a = p;
    CUstream pts = CU_STREAM_PER_THREAD;
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r != CUDA_SUCCESS) {
        snprintf(a->err, sizeof a->err, "cuCtxSetCurrent returned %s", t_errname(r));
        return NULL;
    }
    unsigned value = 100 + a->index;
    unsigned long long ns = 150 * MS, n = 1;
    int mul = 3, add = a->index;
    void *dargs[] = {&a->flag, &value, &ns};
    void *margs[] = {&a->x, &mul, &add, &n};
    if ((r = cuLaunchKernel(f_delay, 1, 1, 1, 32, 1, 1, 0, pts, dargs, NULL)) ||
        (r = cuLaunchKernel(f_muladd, 1, 1, 1, 32, 1, 1, 0, pts, margs, NULL)) ||
        (r = cuMemcpyDtoHAsync(&a->out[0], a->flag, 4, pts)) ||
        (r = cuMemcpyDtoHAsync(&a->out[1], a->x, 4, pts)) || (r = cuStreamSynchronize(pts)) ||
        (r = cuStreamQuery(pts))) {
        snprintf(a->err, sizeof a->err, "per-thread stream call returned %s", t_errname(r));
        return NULL;
    }
    if (a->out[0] != value || (int)a->out[1] != (a->index + 1) * 3 + a->index)
        snprintf(a->err, sizeof a->err, "thread %d read flag %u x %d", a->index, a->out[0],
                 (int)a->out[1]);
    return NULL;
}

static void per_thread_streams(void)
{
    struct pt_arg args[2];
    pthread_t th[2];
    memset(args, 0, sizeof args);
    for (int i = 0; i < 2; i++) {
        args[i].index = i;
        args[i].out = &g_pin[8 + 2 * i];
        args[i].out[0] = args[i].out[1] = 0;
        CHECK(cuMemAlloc(&args[i].x, 4));
        CHECK(cuMemAlloc(&args[i].flag, 4));
        CHECK(cuMemsetD32(args[i].x, (unsigned)(i + 1), 1));
        CHECK(cuMemsetD32(args[i].flag, 0, 1));
    }
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&th[i], NULL, per_thread_body, &args[i]) == 0, "pthread_create");
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        REQUIRE(!args[i].err[0], "%s", args[i].err);
        CHECK(cuMemFree(args[i].x));
        CHECK(cuMemFree(args[i].flag));
    }
    t_ok("CU_STREAM_PER_THREAD used from two threads, each in order");
}

/* ------------------------------------------------------------ stream memory operations */

/* The writer's work is queued before the waiter's, so that even streams sharing one hardware
 * queue cannot deadlock; the waiter's mul_add must still come after the writer's. */
static void wait_write_value(CUstream writer, CUstream waiter, CUdeviceptr flag, CUdeviceptr sem,
                             CUdeviceptr x)
{
    static const struct {
        unsigned value, flags;
        const char *name;
    } modes[] = {{1, CU_STREAM_WAIT_VALUE_GEQ, "GEQ"}, {7, CU_STREAM_WAIT_VALUE_EQ, "EQ"}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        CHECK(cuMemsetD32(x, 1, 1));
        set_u32(sem, 0);
        CHECK(cuCtxSynchronize());
        g_pin[0] = 0;
        delay_set(writer, flag, 1, 200 * MS);
        mul_add(writer, x, 2, 0, 1); /* 2 */
        CHECK(cuStreamWriteValue32(writer, sem, modes[m].value, CU_STREAM_WRITE_VALUE_DEFAULT));
        CHECK(cuStreamWaitValue32(waiter, sem, modes[m].value, modes[m].flags));
        mul_add(waiter, x, 1, 3, 1); /* 5; unordered (1 + 3) * 2 = 8 */
        CHECK(cuMemcpyDtoHAsync(&g_pin[0], x, 4, waiter));
        CHECK(cuStreamSynchronize(waiter));
        REQUIRE((int)g_pin[0] == 5, "cuStreamWaitValue32 %s: x %d, want 5", modes[m].name,
                (int)g_pin[0]);
        CHECK(cuCtxSynchronize());
        t_ok("cuStreamWriteValue32 + cuStreamWaitValue32 (%s) order two streams", modes[m].name);
    }
}

/* cuCtxSynchronize returns only when every stream is done: the pinned results are in place
 * with no further call, and every stream and event then reports complete. */
static void ctx_sync_all(CUstream *streams, int n, CUdeviceptr flags)
{
    CUevent ev[8];
    for (int k = 0; k < n; k++) {
        g_pin[16 + k] = 0;
        CHECK(cuEventCreate(&ev[k], CU_EVENT_DISABLE_TIMING));
        delay_set(streams[k], flags + 4 * k, 10 + k, (100 + 40 * k) * MS);
        CHECK(cuMemcpyDtoHAsync(&g_pin[16 + k], flags + 4 * k, 4, streams[k]));
        CHECK(cuEventRecord(ev[k], streams[k]));
    }
    CHECK(cuCtxSynchronize());
    for (int k = 0; k < n; k++)
        REQUIRE(g_pin[16 + k] == (uint32_t)(10 + k),
                "stream %d result %u not in place after "
                "cuCtxSynchronize",
                k, g_pin[16 + k]);
    for (int k = 0; k < n; k++) {
        CHECK(cuStreamQuery(streams[k]));
        CHECK(cuEventQuery(ev[k]));
        CHECK(cuEventDestroy(ev[k]));
    }
    t_ok("cuCtxSynchronize waits for the work of every stream");
}

/* Work queued on a stream destroyed right away still runs; cuCtxSynchronize waits for it.
 * (Using the destroyed handles afterwards is undefined with the real driver, which may
 * crash; that the shim refuses them is checked by `isolation`, which runs only there.) */
static void destroyed(CUdeviceptr flag)
{
    CUstream sd;
    CUevent ed;
    CHECK(cuStreamCreate(&sd, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ed, CU_EVENT_DEFAULT));
    set_u32(flag, 0);
    g_pin[0] = 0;
    delay_set(sd, flag, 77, 200 * MS);
    CHECK(cuMemcpyDtoHAsync(&g_pin[0], flag, 4, sd));
    CHECK(cuEventRecord(ed, sd));
    CHECK(cuStreamDestroy(sd));
    CHECK(cuCtxSynchronize());
    REQUIRE(g_pin[0] == 77, "work of a destroyed stream: read %u, want 77", g_pin[0]);
    t_ok("work queued before cuStreamDestroy completes; cuCtxSynchronize waits for it");

    CHECK(cuEventDestroy(ed));
}

int main(void)
{
    t_init("streams_events", 300);
    CUdevice dev;
    t_setup(&dev, &g_ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_delay = t_get_function(mod, "delay_set");
    f_muladd = t_get_function(mod, "mul_add_i32");
    CHECK(cuMemAllocHost((void **)&g_pin, 64 * 4));

    CUstream s1, s2, snb;
    CHECK(cuStreamCreate(&s1, CU_STREAM_DEFAULT));
    CHECK(cuStreamCreate(&s2, CU_STREAM_DEFAULT));
    CHECK(cuStreamCreate(&snb, CU_STREAM_NON_BLOCKING));
    CUdeviceptr flag, flag2, x, y, sem, flags;
    CHECK(cuMemAlloc(&flag, 4));
    CHECK(cuMemAlloc(&flag2, 4));
    CHECK(cuMemAlloc(&x, 4));
    CHECK(cuMemAlloc(&y, 64 * 4));
    CHECK(cuMemAlloc(&sem, 4));
    CHECK(cuMemAlloc(&flags, 8 * 4));
    t_ok("setup");

    same_stream_chain(s1, flag, flag2);
    queries(s1, flag);
    cross_stream(s1, s2, flag, x);
    legacy_default(s1, flag, x);
    non_blocking(snb, flag, y);
    flags_and_priorities(s1, snb);
    per_thread_streams();
    wait_write_value(s2, s1, flag, sem, x);
    CUstream three[] = {s1, s2, snb};
    ctx_sync_all(three, 3, flags);

    CHECK(cuStreamDestroy(s1));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuStreamDestroy(snb));
    CUdeviceptr bufs[] = {flag2, x, y, sem, flags};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        CHECK(cuMemFree(bufs[i]));

    destroyed(flag);
    CHECK(cuMemFree(flag));
    CHECK(cuMemFreeHost(g_pin));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
