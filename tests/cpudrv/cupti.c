// A stand-in for CUPTI's activity API: enough for mpsshim-server's GPU timelines
// (server/control/trace.c) to run whole in the CI tier. The stream workers time each kernel, copy
// and set they run (cpudrv_op_run) and the records go to the buffers the tracer registered, as
// CUPTI hands them over: a full buffer at once from the worker's thread, the rest at a flush.
// Records have CUPTI's layout (server/control/trace_cupti.h); stream and context ids are this
// driver's own, as cuptiGetStreamIdEx / cuptiGetContextId give them.
//
// The functions live in the driver library itself, which exports every cu* name;
// $(B)/cpudrv/libcupti.so is a link to it (cpudrv.mk), so a server given that path
// (MPSSHIM_CUPTI) gets the driver it already loaded: one copy of the streams and records.
// Synchronisation records are not made (the kind is accepted, nothing comes of it).
//
// MPSSHIM_CPUDRV_CUPTI_IDS=1: cuptiGetStreamIdEx fails and cuptiGetContextId answers ids
// that are not the records' ones, as a CUPTI might for streams it did not see made or for a
// green context's streams: the tracer must fall back on the driver's stream ids alone.
#include "cpudrv.h"

#include "server/control/trace_cupti.h"

#include <stdlib.h>
#include <string.h>

// The kinds being recorded, bit k for kind k (0 when none: one relaxed load per operation).
static unsigned long long kinds;
// The rest under mu, which no caller holds across anything but the tracer's callbacks.
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static srv_cupti_buffer_request want_buffer;
static srv_cupti_buffer_complete give_buffer;
static uint8_t *buf;
static size_t size, used;
static uint32_t correlation;
static size_t dropped;

static int on(uint32_t kind)
{
    return kind < 64 && (__atomic_load_n(&kinds, __ATOMIC_RELAXED) >> kind & 1);
}

// Hands the filled buffer over (mu held: the tracer's callback takes no lock of ours).
static void hand_over(void)
{
    if (buf && used && give_buffer) give_buffer(NULL, 0, buf, size, used);
    buf = NULL;
    size = used = 0;
}

// Room for a record of n bytes (mu held), a new buffer asked for when full; NULL: dropped.
static void *room(size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (buf && used + n > size) hand_over();
    if (!buf && want_buffer) {
        size_t max = 0;
        want_buffer(&buf, &size, &max);
        used = 0;
        if (buf && size < n) {
            if (give_buffer) give_buffer(NULL, 0, buf, size, 0); // too small: back unused
            buf = NULL;
        }
    }
    if (!buf) {
        dropped++;
        return NULL;
    }
    void *r = buf + used;
    memset(r, 0, n);
    used += n;
    return r;
}

// A kernel's name kept for good (mu held): a record may reach the tracer after its module
// went. NULL without memory.
static const char *keep_name(const char *name)
{
    static struct kept {
        struct kept *next;
        char s[];
    } *names;
    if (!name) return NULL;
    for (struct kept *k = names; k; k = k->next)
        if (strcmp(k->s, name) == 0) return k->s;
    size_t n = strlen(name) + 1;
    struct kept *k = malloc(sizeof(*k) + n);
    if (!k) return NULL;
    memcpy(k->s, name, n);
    k->next = names;
    names = k;
    return k->s;
}

// What the record says of an operation (mu held).
static void record(const struct cpudrv_op *op, uint64_t start, uint64_t end)
{
    const struct cpudrv_stream *s = op->stream;
    uint32_t sid = (uint32_t)s->id, cid = (uint32_t)s->o.ctx->id, dev = (uint32_t)s->o.ctx->dev;
    switch (op->act.kind) {
    case CPUDRV_ACT_KERNEL: {
        struct srv_cupti_kernel *k = room(sizeof(*k));
        if (!k) return;
        *k = (struct srv_cupti_kernel){.kind = SRV_CUPTI_KIND_CONCURRENT_KERNEL,
                                       .start = start,
                                       .end = end,
                                       .completed = end,
                                       .device_id = dev,
                                       .context_id = cid,
                                       .stream_id = sid,
                                       .correlation_id = ++correlation,
                                       .name = keep_name(op->act.name)};
        break;
    }
    case CPUDRV_ACT_MEMCPY: {
        struct srv_cupti_memcpy *m = room(sizeof(*m));
        if (!m) return;
        *m = (struct srv_cupti_memcpy){.kind = SRV_CUPTI_KIND_MEMCPY,
                                       .copy_kind = op->act.copy_kind,
                                       .bytes = op->act.bytes,
                                       .start = start,
                                       .end = end,
                                       .device_id = dev,
                                       .context_id = cid,
                                       .stream_id = sid,
                                       .correlation_id = ++correlation};
        break;
    }
    case CPUDRV_ACT_MEMSET: {
        struct srv_cupti_memset *m = room(sizeof(*m));
        if (!m) return;
        *m = (struct srv_cupti_memset){.kind = SRV_CUPTI_KIND_MEMSET,
                                       .bytes = op->act.bytes,
                                       .start = start,
                                       .end = end,
                                       .device_id = dev,
                                       .context_id = cid,
                                       .stream_id = sid,
                                       .correlation_id = ++correlation};
        break;
    }
    }
}

int cpudrv_copy_kind(int src_side, int dst_side)
{
    int from_dev = src_side == CPUDRV_SIDE_DEVICE, to_dev = dst_side == CPUDRV_SIDE_DEVICE;
    return from_dev ? (to_dev ? SRV_CUPTI_MEMCPY_DTOD : SRV_CUPTI_MEMCPY_DTOH)
                    : (to_dev ? SRV_CUPTI_MEMCPY_HTOD : SRV_CUPTI_MEMCPY_HTOH);
}

CUresult cpudrv_op_run(struct cpudrv_op *op)
{
    uint32_t kind = op->act.kind == CPUDRV_ACT_KERNEL   ? SRV_CUPTI_KIND_CONCURRENT_KERNEL
                    : op->act.kind == CPUDRV_ACT_MEMCPY ? SRV_CUPTI_KIND_MEMCPY
                    : op->act.kind == CPUDRV_ACT_MEMSET ? SRV_CUPTI_KIND_MEMSET
                                                        : 0;
    if (!kind || !on(kind)) return op->run(op);
    uint64_t start = cpudrv_now_ns();
    CUresult rc = op->run(op);
    uint64_t end = cpudrv_now_ns();
    pthread_mutex_lock(&mu);
    if (on(kind)) record(op, start, end > start ? end : start + 1);
    pthread_mutex_unlock(&mu);
    return rc;
}

// The size of the record at r (one of the kinds above), 0 for anything else.
static size_t record_size(const struct srv_cupti_activity *r)
{
    size_t n = r->kind == SRV_CUPTI_KIND_CONCURRENT_KERNEL ? sizeof(struct srv_cupti_kernel)
               : r->kind == SRV_CUPTI_KIND_MEMCPY          ? sizeof(struct srv_cupti_memcpy)
               : r->kind == SRV_CUPTI_KIND_MEMSET          ? sizeof(struct srv_cupti_memset)
                                                           : 0;
    return (n + 7) & ~(size_t)7;
}

srv_cupti_result cuptiActivityRegisterCallbacks(srv_cupti_buffer_request request,
                                                srv_cupti_buffer_complete complete)
{
    if (!request || !complete) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    want_buffer = request;
    give_buffer = complete;
    pthread_mutex_unlock(&mu);
    return SRV_CUPTI_SUCCESS;
}

srv_cupti_result cuptiActivityEnable(uint32_t kind)
{
    if (kind >= 64) return SRV_CUPTI_ERROR_INVALID_KIND;
    __atomic_or_fetch(&kinds, 1ull << kind, __ATOMIC_RELAXED);
    return SRV_CUPTI_SUCCESS;
}

srv_cupti_result cuptiActivityDisable(uint32_t kind)
{
    if (kind >= 64) return SRV_CUPTI_ERROR_INVALID_KIND;
    __atomic_and_fetch(&kinds, ~(1ull << kind), __ATOMIC_RELAXED);
    return SRV_CUPTI_SUCCESS;
}

// Every record made so far goes to the tracer (they are all complete: each is made when
// its operation ended).
srv_cupti_result cuptiActivityFlushAll(uint32_t flag)
{
    (void)flag;
    pthread_mutex_lock(&mu);
    hand_over();
    pthread_mutex_unlock(&mu);
    return SRV_CUPTI_SUCCESS;
}

srv_cupti_result cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid,
                                            struct srv_cupti_activity **record_)
{
    if (!buffer || !record_) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    size_t at = 0;
    if (*record_) {
        size_t n = record_size(*record_);
        if (!n) return SRV_CUPTI_ERROR_INVALID_KIND;
        at = (size_t)((uint8_t *)*record_ - buffer) + n;
    }
    if (at + sizeof(struct srv_cupti_activity) > valid) return SRV_CUPTI_ERROR_MAX_LIMIT_REACHED;
    struct srv_cupti_activity *r = (struct srv_cupti_activity *)(buffer + at);
    size_t n = record_size(r);
    if (!n || at + n > valid) return SRV_CUPTI_ERROR_INVALID_KIND;
    *record_ = r;
    return SRV_CUPTI_SUCCESS;
}

srv_cupti_result cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream_id, size_t *n)
{
    (void)ctx;
    (void)stream_id;
    if (!n) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    *n = dropped;
    dropped = 0;
    pthread_mutex_unlock(&mu);
    return SRV_CUPTI_SUCCESS;
}

// The clock of the records: this driver's monotonic nanoseconds.
srv_cupti_result cuptiGetTimestamp(uint64_t *t)
{
    if (!t) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    *t = cpudrv_now_ns();
    return SRV_CUPTI_SUCCESS;
}

// MPSSHIM_CPUDRV_CUPTI_IDS (see the top).
static int odd_ids(void)
{
    static int cache = -1;
    return cpudrv_env_level("MPSSHIM_CPUDRV_CUPTI_IDS", 1, &cache);
}

srv_cupti_result cuptiGetStreamIdEx(CUcontext ctx, CUstream stream, uint8_t per_thread,
                                    uint32_t *id)
{
    (void)ctx;
    (void)per_thread;
    if (!id) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    if (odd_ids()) return SRV_CUPTI_ERROR_INVALID_STREAM;
    struct cpudrv_stream *s = NULL;
    cpudrv_lock();
    CUresult rc =
        cpudrv_ready() ? cpudrv_ready() : cpudrv_stream_get(stream, cpudrv_ctx_current(), &s);
    if (!rc) *id = (uint32_t)s->id;
    cpudrv_unlock();
    return rc ? SRV_CUPTI_ERROR_INVALID_STREAM : SRV_CUPTI_SUCCESS;
}

srv_cupti_result cuptiGetContextId(CUcontext ctx, uint32_t *id)
{
    if (!id) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    struct cpudrv_ctx *c = NULL;
    cpudrv_lock();
    CUresult rc = cpudrv_ready() ? cpudrv_ready() : cpudrv_ctx_find(ctx, &c);
    if (!rc) *id = (uint32_t)c->id + (odd_ids() ? 1000 : 0);
    cpudrv_unlock();
    return rc ? SRV_CUPTI_ERROR_INVALID_CONTEXT : SRV_CUPTI_SUCCESS;
}

srv_cupti_result cuptiGetResultString(srv_cupti_result r, const char **s)
{
    if (!s) return SRV_CUPTI_ERROR_INVALID_PARAMETER;
    *s = r == SRV_CUPTI_SUCCESS ? "CUPTI_SUCCESS (CPU test driver)"
                                : "CUPTI error (CPU test driver)";
    return SRV_CUPTI_SUCCESS;
}

// Detaches: nothing is recorded and the callbacks are forgotten.
srv_cupti_result cuptiFinalize(void)
{
    __atomic_store_n(&kinds, 0, __ATOMIC_RELAXED);
    pthread_mutex_lock(&mu);
    hand_over();
    want_buffer = NULL;
    give_buffer = NULL;
    pthread_mutex_unlock(&mu);
    return SRV_CUPTI_SUCCESS;
}
