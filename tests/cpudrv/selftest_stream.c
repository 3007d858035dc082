// Self-test: stream ordering, legacy/per-thread/non-blocking semantics, pageable versus
// pinned async copies, events, stream memory operations and host functions.
#include "selftest.h"

#include <stdlib.h>
#include <string.h>

#define MS 1000000ull // nanoseconds

// Queues delay_set: after ns, *flag = v (on the stream's worker).
static void delay(CUstream s, CUdeviceptr flag, unsigned v, unsigned long long ns)
{
    void *args[] = {&flag, &v, &ns};
    CK(cuLaunchKernel(st_fn("delay_set"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static unsigned rd(CUdeviceptr d)
{
    unsigned v = 0xffffffffu;
    CK(cuMemcpyDtoH(&v, d, 4));
    return v;
}

void st_streams(void)
{
    if (!st_mod) st_load();
    CUdeviceptr f; // 16 flags
    CK(cuMemAlloc(&f, 64));
    CK(cuMemsetD32(f, 0, 16));
    CUstream a, b, c;
    CK(cuStreamCreate(&a, 0));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreateWithPriority(&c, CU_STREAM_NON_BLOCKING, -10));
    EXPECT(cuStreamCreate(&c, 4), CUDA_ERROR_INVALID_VALUE);
    int prio = 1;
    unsigned flags = 9;
    unsigned long long ida = 0, idb = 0;
    CK(cuStreamGetPriority(c, &prio));
    CHECK(prio == -5);
    CK(cuStreamGetFlags(b, &flags));
    CHECK(flags == CU_STREAM_NON_BLOCKING);
    CK(cuStreamGetId(a, &ida));
    CK(cuStreamGetId(b, &idb));
    CHECK(ida && idb && ida != idb);
    CUcontext cx, cur;
    CUdevice dv = -1;
    CK(cuCtxGetCurrent(&cur));
    CK(cuStreamGetCtx(a, &cx));
    CHECK(cx == cur);
    CK(cuStreamGetCtx(NULL, &cx));
    CHECK(cx == cur);
    CK(cuStreamGetDevice(b, &dv));
    CHECK(dv == 0);

    // One stream: work runs in order, asynchronously; query sees it pending.
    double t = st_ms();
    delay(b, f, 1, 150 * MS);
    CHECK(st_ms() - t < 75);
    EXPECT(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
    CK(cuMemcpyDtoDAsync(f + 4, f, 4, b));
    CK(cuStreamSynchronize(b));
    CHECK(st_ms() - t >= 140);
    CK(cuStreamQuery(b));
    CHECK(rd(f) == 1 && rd(f + 4) == 1);

    // Legacy NULL stream waits for a blocking stream...
    delay(a, f + 8, 2, 150 * MS);
    CK(cuMemcpyDtoDAsync(f + 12, f + 8, 4, NULL));
    CK(cuStreamSynchronize(NULL));
    CHECK(rd(f + 12) == 2);
    // ... but not for a non-blocking one (and cuStreamSynchronize(0) does not wait for it).
    t = st_ms();
    delay(b, f + 16, 3, 200 * MS);
    CK(cuMemcpyDtoDAsync(f + 20, f + 16, 4, NULL));
    CK(cuStreamSynchronize(NULL));
    CHECK(st_ms() - t < 150);
    unsigned early = rd(f + 20);
    CHECK(early == 0);
    CK(cuStreamSynchronize(b));
    CHECK(rd(f + 16) == 3);
    // A blocking stream waits for the legacy stream.
    delay(NULL, f + 24, 4, 150 * MS);
    CK(cuMemcpyDtoDAsync(f + 28, f + 24, 4, a));
    CK(cuStreamSynchronize(a));
    CHECK(rd(f + 28) == 4);
    // A synchronous copy waits for prior work of blocking streams (legacy semantics).
    delay(a, f + 32, 5, 150 * MS);
    CHECK(rd(f + 32) == 5);
    // The per-thread stream syncs with the legacy stream only, not with other streams.
    delay(a, f + 36, 6, 200 * MS);
    CK(cuMemcpyDtoDAsync(f + 40, f + 36, 4, CU_STREAM_PER_THREAD));
    t = st_ms();
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(st_ms() - t < 150);
    CHECK(rd(f + 40) == 0);
    CK(cuStreamSynchronize(a));
    delay(CU_STREAM_PER_THREAD, f + 44, 7, 150 * MS);
    CK(cuMemcpyDtoDAsync(f + 48, f + 44, 4, CU_STREAM_LEGACY));
    CK(cuStreamSynchronize(CU_STREAM_LEGACY));
    CHECK(rd(f + 48) == 7);
    unsigned long long idp = 0, idp2 = 0;
    CK(cuStreamGetId(CU_STREAM_PER_THREAD, &idp));
    CK(cuStreamGetId(CU_STREAM_PER_THREAD, &idp2));
    CHECK(idp && idp == idp2);

    // Two non-blocking streams run concurrently.
    t = st_ms();
    delay(b, f + 52, 8, 200 * MS);
    delay(c, f + 56, 9, 200 * MS);
    CK(cuStreamSynchronize(b));
    CK(cuStreamSynchronize(c));
    CHECK(st_ms() - t < 350);
    CHECK(rd(f + 52) == 8 && rd(f + 56) == 9);

    // Pageable versus pinned host memory in async copies (stream busy for 150 ms).
    unsigned *pin;
    CK(cuMemAllocHost((void **)&pin, 64));
    unsigned *page = malloc(64);
    CK(cuMemsetD32(f, 0x77, 1));
    pin[0] = 0;
    t = st_ms();
    delay(b, f + 4, 1, 150 * MS);
    CK(cuMemcpyDtoHAsync(pin, f, 4, b)); // pinned destination: returns at once
    CHECK(st_ms() - t < 75 && pin[0] == 0);
    CK(cuStreamSynchronize(b));
    CHECK(pin[0] == 0x77);
    page[0] = 0;
    t = st_ms();
    delay(b, f + 4, 1, 150 * MS);
    CK(cuMemcpyDtoHAsync(page, f, 4, b)); // pageable destination: returns when landed
    CHECK(st_ms() - t >= 140 && page[0] == 0x77);
    t = st_ms();
    delay(b, f + 4, 1, 150 * MS);
    page[0] = 0x100;
    CK(cuMemcpyHtoDAsync(f, page, 4, b)); // pageable source: snapshotted, returns at once
    page[0] = 0x200;
    CHECK(st_ms() - t < 75);
    CK(cuStreamSynchronize(b));
    CHECK(rd(f) == 0x100);
    delay(b, f + 4, 1, 150 * MS);
    pin[0] = 0x300;
    CK(cuMemcpyHtoDAsync(f, pin, 4, b)); // pinned source: read when the copy runs
    pin[0] = 0x400;
    CK(cuStreamSynchronize(b));
    CHECK(rd(f) == 0x400);
    // Registered memory counts as pinned.
    CK(cuMemHostRegister(page, 64, 0));
    page[0] = 0;
    t = st_ms();
    delay(b, f + 4, 1, 150 * MS);
    CK(cuMemcpyDtoHAsync(page, f, 4, b));
    CHECK(st_ms() - t < 75 && page[0] == 0);
    CK(cuStreamSynchronize(b));
    CHECK(page[0] == 0x400);
    CK(cuMemHostUnregister(page));
    free(page);
    CK(cuMemFreeHost(pin));

    // Destroying a stream lets its queued work finish.
    CUstream d;
    CK(cuStreamCreate(&d, 0));
    delay(d, f + 60, 11, 100 * MS);
    CK(cuStreamDestroy(d));
    EXPECT(cuStreamQuery(d), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamDestroy(d), CUDA_ERROR_INVALID_HANDLE);
    CK(cuCtxSynchronize());
    CHECK(rd(f + 60) == 11);
    // Handles that were never streams.
    int junk;
    EXPECT(cuStreamSynchronize((CUstream)&junk), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamGetPriority((CUstream)&junk, &prio), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuMemcpyHtoDAsync(f, &junk, 4, (CUstream)&junk), CUDA_ERROR_INVALID_HANDLE);
    CK(cuStreamDestroy(a));
    CK(cuStreamDestroy(b));
    CK(cuStreamDestroy_v2(c));
    CK(cuMemFree(f));
}

void st_events(void)
{
    CUdeviceptr f;
    CK(cuMemAlloc(&f, 64));
    CK(cuMemsetD32(f, 0, 16));
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent e0, e1, nt, never;
    CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&e1, CU_EVENT_BLOCKING_SYNC));
    CK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&never, 0));
    EXPECT(cuEventCreate(&never, 0x40), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuEventCreate(&never, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    float ms = -1;
    CK(cuEventQuery(never));
    EXPECT(cuEventElapsedTime(&ms, never, e0), CUDA_ERROR_INVALID_HANDLE);
    // Timing between two records around a 120 ms kernel.
    CK(cuEventRecord(e0, s1));
    delay(s1, f, 1, 120 * MS);
    CK(cuEventRecord(e1, s1));
    CK(cuEventRecordWithFlags(nt, s1, 0));
    EXPECT(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
    EXPECT(cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
    CK(cuEventSynchronize(e1));
    CK(cuEventQuery(e1));
    CK(cuEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 115 && ms < 1000);
    CK(cuEventElapsedTime_v2(&ms, e1, e0));
    CHECK(ms < 0);
    CK(cuEventSynchronize(nt));
    EXPECT(cuEventElapsedTime(&ms, e0, nt), CUDA_ERROR_INVALID_HANDLE);
    // A stream waits for another stream's event (and not for later work there).
    delay(s1, f + 4, 2, 150 * MS);
    CK(cuEventRecord(e0, s1));
    delay(s1, f + 8, 3, 300 * MS);
    CK(cuStreamWaitEvent(s2, e0, 0));
    CK(cuMemcpyDtoDAsync(f + 12, f + 4, 4, s2));
    CK(cuMemcpyDtoDAsync(f + 16, f + 8, 4, s2));
    CK(cuStreamSynchronize(s2));
    CHECK(rd(f + 12) == 2 && rd(f + 16) == 0);
    CK(cuStreamSynchronize(s1));
    // Waiting for a never-recorded event is a no-op; bad handles and flags fail.
    CK(cuStreamWaitEvent(s2, never, 0));
    CK(cuStreamSynchronize(s2));
    int junk;
    EXPECT(cuStreamWaitEvent(s2, (CUevent)&junk, 0), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamWaitEvent(s2, e0, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuEventRecord((CUevent)&junk, s1), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuEventRecord(e0, (CUstream)&junk), CUDA_ERROR_INVALID_HANDLE);
    // Destroying an event with a pending record is fine; the handle dies at once.
    delay(s1, f + 20, 4, 50 * MS);
    CK(cuEventRecord(e1, s1));
    CK(cuEventDestroy(e1));
    EXPECT(cuEventQuery(e1), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuEventSynchronize(e1), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuEventDestroy(e1), CUDA_ERROR_INVALID_HANDLE);
    // Events on the legacy stream capture prior work of blocking streams.
    CUstream bl;
    CK(cuStreamCreate(&bl, 0));
    delay(bl, f + 24, 5, 100 * MS);
    CK(cuEventRecord(e0, NULL));
    CK(cuEventSynchronize(e0));
    CHECK(rd(f + 24) == 5);
    CK(cuStreamDestroy(bl));
    CK(cuStreamSynchronize(s1));
    CK(cuEventDestroy(e0));
    CK(cuEventDestroy_v2(nt));
    CK(cuEventDestroy(never));
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
    CK(cuMemFree(f));
}

struct order {
    int n;
    int seen[4];
    volatile unsigned *flag;
};

static void CUDA_CB host_fn(void *p)
{
    struct order *o = p;
    o->seen[o->n++] = (int)*o->flag;
}

static void CUDA_CB callback(CUstream s, CUresult status, void *p)
{
    (void)s;
    struct order *o = p;
    o->seen[o->n++] = status == CUDA_SUCCESS ? 100 : -1;
}

void st_memops(void)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    volatile unsigned *hv;
    CK(cuMemAllocHost((void **)&hv, 64));
    memset((void *)hv, 0, 64);
    CUdeviceptr hd = (CUdeviceptr)hv, d;
    CK(cuMemAlloc(&d, 64));
    CK(cuMemsetD32(d, 0, 16));
    // GEQ wait on host-written memory holds the stream back until the host writes.
    CK(cuStreamWaitValue32(s, hd, 5, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuStreamWriteValue32(s, d, 42, 0));
    CK(cuStreamWriteValue64(s, d + 8, 0x123456789abcull, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    double t = st_ms();
    while (st_ms() - t < 60)
        ;
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    __atomic_store_n(&hv[0], 4, __ATOMIC_RELEASE);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    __atomic_store_n(&hv[0], 5, __ATOMIC_RELEASE);
    CK(cuStreamSynchronize(s));
    unsigned long long v64 = 0;
    CK(cuMemcpyDtoH(&v64, d + 8, 8));
    CHECK(rd(d) == 42 && v64 == 0x123456789abcull);
    // EQ, AND, NOR and a 64-bit wait, each released by a write from another stream.
    CUstream w;
    CK(cuStreamCreate(&w, CU_STREAM_NON_BLOCKING));
    hv[3] = 0xf; // NOR waits while ~(*addr | value) == 0
    CK(cuStreamWaitValue32(s, hd + 4, 7, CU_STREAM_WAIT_VALUE_EQ));
    CK(cuStreamWaitValue32(s, hd + 8, 0x10, CU_STREAM_WAIT_VALUE_AND));
    CK(cuStreamWaitValue32(s, hd + 12, 0xfffffff0u, CU_STREAM_WAIT_VALUE_NOR));
    CK(cuStreamWaitValue64(s, hd + 16, 1ull << 40, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuStreamWriteValue32(s, d + 16, 1, 0));
    CK(cuStreamWriteValue32(w, hd + 4, 7, 0));
    CK(cuStreamWriteValue32(w, hd + 8, 0x30, 0));
    CK(cuStreamWriteValue32(w, hd + 12, 0, 0));
    CK(cuStreamWriteValue64(w, hd + 16, 1ull << 41, 0));
    CK(cuStreamSynchronize(s));
    CHECK(rd(d + 16) == 1);
    EXPECT(cuStreamWaitValue32(s, hd + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamWaitValue64(s, hd + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamWriteValue32(s, (CUdeviceptr)&t, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamWaitValue32(s, hd, 1, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamWriteValue32(s, hd, 1, 4), CUDA_ERROR_INVALID_VALUE);
    // A batch: a wait released by another stream, then a 64-bit write, a barrier and a
    // flush, in order; a batch with a bad operation or address is refused whole.
    CUstreamBatchMemOpParams ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].waitValue = (struct CUstreamMemOpWaitValueParams_st){
        .operation = CU_STREAM_MEM_OP_WAIT_VALUE_32, .address = hd + 24, .value = 3};
    ops[1].writeValue = (struct CUstreamMemOpWriteValueParams_st){
        .operation = CU_STREAM_MEM_OP_WRITE_VALUE_64, .address = d + 24, .value64 = 1ull << 33};
    ops[2].operation = CU_STREAM_MEM_OP_BARRIER;
    ops[3].operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    CK(cuStreamBatchMemOp(s, 4, ops, 0));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CK(cuStreamWriteValue32(w, hd + 24, 3, 0));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(&v64, d + 24, 8));
    CHECK(v64 == 1ull << 33);
    EXPECT(cuStreamBatchMemOp(s, 4, ops, 1), CUDA_ERROR_INVALID_VALUE);
    ops[3].operation = (CUstreamBatchMemOpType)99;
    EXPECT(cuStreamBatchMemOp(s, 4, ops, 0), CUDA_ERROR_INVALID_VALUE);
    ops[3].operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    ops[1].writeValue.address = d + 4;
    EXPECT(cuStreamBatchMemOp(s, 4, ops, 0), CUDA_ERROR_INVALID_VALUE);
    // Host functions and callbacks run on the stream, in order, after prior work.
    struct order o = {0, {0}, hv + 8};
    delay(s, hd + 32, 9, 80 * MS);
    CK(cuLaunchHostFunc(s, host_fn, &o));
    CK(cuStreamAddCallback(s, callback, &o, 0));
    CK(cuStreamWriteValue32(s, hd + 32, 10, 0));
    CK(cuLaunchHostFunc(s, host_fn, &o));
    CK(cuStreamSynchronize(s));
    CHECK(o.n == 3 && o.seen[0] == 9 && o.seen[1] == 100 && o.seen[2] == 10);
    EXPECT(cuStreamAddCallback(s, callback, &o, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLaunchHostFunc(s, NULL, &o), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(w));
    CK(cuStreamDestroy(s));
    CK(cuMemFree(d));
    CK(cuMemFreeHost((void *)hv));
}
