// Stream memory operations (wait on / write a 32 or 64-bit value) and host functions.
#include "cpudrv.h"

#include <string.h>
#include <time.h>

struct memop {
    uintptr_t addr;
    uint64_t value;
    unsigned flags;
    int is64;
};

struct hostfn {
    CUhostFn fn;
    CUstreamCallback cb;
    CUstream handle;
    void *data;
};

static int satisfied(const struct memop *m)
{
    uint64_t v = m->is64 ? __atomic_load_n((uint64_t *)m->addr, __ATOMIC_ACQUIRE)
                         : __atomic_load_n((uint32_t *)m->addr, __ATOMIC_ACQUIRE);
    switch (m->flags & 3) {
    case CU_STREAM_WAIT_VALUE_GEQ: // cyclic comparison, as documented
        return m->is64 ? (int64_t)(v - m->value) >= 0 : (int32_t)(uint32_t)(v - m->value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return v == m->value;
    case CU_STREAM_WAIT_VALUE_AND:
        return (v & m->value) != 0;
    default: // NOR
        return m->is64 ? ~(v | m->value) != 0 : (uint32_t)~(v | m->value) != 0;
    }
}

static CUresult wait_run(struct cpudrv_op *op)
{
    const struct memop *m = (const struct memop *)op->data;
    // The value is written by other threads or processes without any notification: poll,
    // backing off to 1 ms, and give up only when the context is being torn down.
    long ns = 0;
    while (!satisfied(m)) {
        if (__atomic_load_n(&op->stream->o.ctx->dying, __ATOMIC_ACQUIRE)) break;
        cpudrv_poll_pause(&ns);
    }
    return CUDA_SUCCESS;
}

// cpudrv_big held: SUCCESS if ops[0..n) are wait and write operations (32 or 64-bit, flags as
// the stream calls take them, aligned, on device-accessible memory), flushes or barriers.
CUresult cpudrv_memops_check(const CUstreamBatchMemOpParams *ops, unsigned n)
{
    if (!n || !ops) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        const CUstreamBatchMemOpParams *o = &ops[i];
        int wait = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
                   o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
        int write = o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
                    o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
        if (!wait && !write) {
            if (o->operation != CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES &&
                o->operation != CU_STREAM_MEM_OP_BARRIER)
                return CUDA_ERROR_INVALID_VALUE;
            continue;
        }
        size_t bytes = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
                               o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64
                           ? 8
                           : 4;
        unsigned allowed =
            write ? CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER : 3u | CU_STREAM_WAIT_VALUE_FLUSH;
        unsigned flags = wait ? o->waitValue.flags : o->writeValue.flags;
        CUdeviceptr a = wait ? o->waitValue.address : o->writeValue.address;
        if ((flags & ~allowed) || a % bytes || cpudrv_mem_check((uintptr_t)a, bytes))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// Worker side: performs one checked operation, a wait polling as cuStreamWaitValue* does
// (given up when *dying is set).
void cpudrv_memop_run(const CUstreamBatchMemOpParams *o, const int *dying)
{
    struct memop m = {0};
    switch (o->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
        m.addr = (uintptr_t)o->waitValue.address;
        m.is64 = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
        m.value = m.is64 ? o->waitValue.value64 : o->waitValue.value;
        m.flags = o->waitValue.flags;
        long ns = 0;
        while (!satisfied(&m)) {
            if (__atomic_load_n(dying, __ATOMIC_ACQUIRE)) break;
            cpudrv_poll_pause(&ns);
        }
        break;
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        __atomic_store_n((uint32_t *)(uintptr_t)o->writeValue.address, o->writeValue.value,
                         __ATOMIC_RELEASE);
        break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        __atomic_store_n((uint64_t *)(uintptr_t)o->writeValue.address, o->writeValue.value64,
                         __ATOMIC_RELEASE);
        break;
    default:
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
}

static CUresult write_run(struct cpudrv_op *op)
{
    const struct memop *m = (const struct memop *)op->data;
    if (m->is64)
        __atomic_store_n((uint64_t *)m->addr, m->value, __ATOMIC_RELEASE);
    else
        __atomic_store_n((uint32_t *)m->addr, (uint32_t)m->value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

static int memop_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct memop *m = (const struct memop *)op->data;
    return m->addr < hi && m->addr + (m->is64 ? 8 : 4) > lo;
}

static CUresult memop(CUstream hs, CUdeviceptr addr, uint64_t value, unsigned flags, int is64,
                      int write)
{
    unsigned allowed =
        write ? CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER : 3u | CU_STREAM_WAIT_VALUE_FLUSH;
    size_t n = is64 ? 8 : 4;
    if ((flags & ~allowed) || (addr % n)) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    cpudrv_submit_gate(0);
    struct cpudrv_stream *s;
    rc = cpudrv_stream_get(hs, cpudrv_ctx_current(), &s);
    // The driver captures these as batch mem-op nodes; this driver does not capture them.
    if (!rc) rc = cpudrv_capture_uncapturable(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (!rc) rc = cpudrv_mem_check((uintptr_t)addr, n);
    struct cpudrv_op *op = rc ? NULL : cpudrv_op_new(sizeof(struct memop));
    if (!rc && !op) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        struct memop *m = (struct memop *)op->data;
        m->addr = (uintptr_t)addr;
        m->value = value;
        m->flags = flags;
        m->is64 = is64;
        op->run = write ? write_run : wait_run;
        op->touches = memop_touches;
        rc = cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    cpudrv_stored_on = !rc && write ? s : NULL; /* MPSSHIM_CPUDRV_FAULT_AFTER_STORE: event.c */
    cpudrv_unlock();
    return rc;
}

// Sleeps before the next look of a poll: 20 us the first time (*ns 0), doubling up to 1 ms.
void cpudrv_poll_pause(long *ns)
{
    *ns = *ns ? (*ns < 1000000 ? *ns * 2 : *ns) : 20000;
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
}

// Makes the stream wait until a 32-bit value satisfies GEQ/EQ/AND/NOR.
CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                             unsigned int flags)
{
    return TR(memop(stream, addr, value, flags, 0, 0));
}

// Makes the stream wait until a 64-bit value satisfies GEQ/EQ/AND/NOR.
CUresult cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                             unsigned int flags)
{
    return TR(memop(stream, addr, value, flags, 1, 0));
}

// Writes a 32-bit value when the stream reaches this point.
CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                              unsigned int flags)
{
    return TR(memop(stream, addr, value, flags, 0, 1));
}

// Writes a 64-bit value when the stream reaches this point.
CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                              unsigned int flags)
{
    return TR(memop(stream, addr, value, flags, 1, 1));
}

struct batch {
    unsigned n;
    CUstreamBatchMemOpParams ops[];
};

static CUresult batch_run(struct cpudrv_op *op)
{
    const struct batch *b = (const struct batch *)op->data;
    for (unsigned i = 0; i < b->n; i++)
        cpudrv_memop_run(&b->ops[i], &op->stream->o.ctx->dying);
    return CUDA_SUCCESS;
}

static int batch_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct batch *b = (const struct batch *)op->data;
    for (unsigned i = 0; i < b->n; i++) {
        const CUstreamBatchMemOpParams *o = &b->ops[i];
        int wide = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
                   o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
        uintptr_t a = (uintptr_t)o->waitValue.address; // writeValue's is at the same place
        if (o->operation != CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES &&
            o->operation != CU_STREAM_MEM_OP_BARRIER && a < hi && a + (wide ? 8 : 4) > lo)
            return 1;
    }
    return 0;
}

// Runs count waits, writes, flushes and barriers in order on the stream (flags must be 0;
// at most 256 operations, the driver's limit).
CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                               CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
    if (flags || count > 256) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    cpudrv_submit_gate(0);
    struct cpudrv_stream *s;
    rc = cpudrv_stream_get(stream, cpudrv_ctx_current(), &s);
    if (!rc) rc = cpudrv_capture_uncapturable(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (!rc) rc = cpudrv_memops_check(paramArray, count);
    size_t bytes = sizeof(struct batch) + (size_t)count * sizeof(*paramArray);
    struct cpudrv_op *op = rc ? NULL : cpudrv_op_new(bytes);
    if (!rc && !op) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        struct batch *b = (struct batch *)op->data;
        b->n = count;
        memcpy(b->ops, paramArray, (size_t)count * sizeof(*paramArray));
        op->run = batch_run;
        op->touches = batch_touches;
        rc = cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    cpudrv_unlock();
    return TR(rc);
}

static CUresult host_run(struct cpudrv_op *op)
{
    const struct hostfn *h = (const struct hostfn *)op->data;
    if (h->fn)
        h->fn(h->data);
    else
        h->cb(h->handle, CUDA_SUCCESS, h->data);
    return CUDA_SUCCESS;
}

static CUresult host(CUstream hs, CUhostFn fn, CUstreamCallback cb, void *data)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_stream *s;
    int capturing = 0;
    rc = cpudrv_stream_get(hs, cpudrv_ctx_current(), &s);
    // A host function becomes a host node; a stream callback (it is told a status) cannot.
    if (!rc && fn) rc = cpudrv_capture_check(s, &capturing);
    if (!rc && cb) rc = cpudrv_capture_uncapturable(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (!rc && capturing) {
        rc = cpudrv_capture_host(s, fn, data);
        cpudrv_unlock();
        return rc;
    }
    struct cpudrv_op *op = rc ? NULL : cpudrv_op_new(sizeof(struct hostfn));
    if (!rc && !op) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        struct hostfn *h = (struct hostfn *)op->data;
        h->fn = fn;
        h->cb = cb;
        h->handle = hs;
        h->data = data;
        op->run = host_run;
        rc = cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    cpudrv_unlock();
    return rc;
}

// Runs fn(userData) on the stream's worker, in stream order.
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    if (!fn) return TR(CUDA_ERROR_INVALID_VALUE);
    return TR(host(hStream, fn, NULL, userData));
}

// Runs callback(hStream, CUDA_SUCCESS, userData) in stream order (flags must be 0).
CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                             unsigned int flags)
{
    if (!callback || flags) return TR(CUDA_ERROR_INVALID_VALUE);
    return TR(host(hStream, NULL, callback, userData));
}
