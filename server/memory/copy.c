/* The copy engine: every client copy arrives as one chan_copy (see interpose/memcpy.c)
 * and is checked against the client's allocations and arrays before anything moves.
 * Pageable client memory arrives inline or through the staging slots; pinned memory is
 * copied in place. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/clients.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/memory/copy.h"
#include "server/core/devices.h"
#include "server/core/events.h"
#include "server/memory/hostblocks.h"
#include "server/core/queue.h"

#include <string.h>

#include "channel/copyplan.h"

/* A client's staging slots (its copy), the worker's own. */
struct srv_copy {
    uint32_t chunk_seq; /* staging chunk number (channel/copyplan.h) */
    /* DMA of the chunk last issued from/into each slot, per device (see the events' pool). */
    CUevent slot_ev[CHAN_MAX_DEVICES][CHAN_NSLOTS];
    int slot_dev[CHAN_NSLOTS];      /* device whose event marks the slot's last DMA */
    int64_t slot_busy[CHAN_NSLOTS]; /* HtoD chunk whose DMA may still read the slot, or -1 */
};

/* Checks one side against the client's tables (copy.h). */
CUresult srv_copy_check_side(struct srv_client *c, const struct chan_copy_side *s, uint64_t w,
                             uint64_t h, uint64_t d, struct srv_copy_side *out)
{
    memset(out, 0, sizeof(*out));
    out->pitch = s->pitch;
    out->height = s->height;
    out->x = s->x;
    out->y = s->y;
    out->z = s->z;
    out->addr = s->addr;
    /* A side's device is the client's ordinal (peer copies); -1: the context's. */
    int dev = s->device >= 0 ? srv_dev_in(c, s->device) : -1;
    out->device = dev >= 0 ? dev : (c->cur ? c->cur->device : srv_dev_any(c));
    if (s->device >= 0 && dev < 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (s->kind) {
    case CHAN_MEM_ARRAY:
        out->type = CU_MEMORYTYPE_ARRAY;
        return srv_obj_find(c, SHIM_HT_CUarray, s->addr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case CHAN_MEM_DEVICE:
    case CHAN_MEM_PINNED: {
        if ((h > 1 || d > 1) && s->pitch < w) return CUDA_ERROR_INVALID_VALUE;
        struct srv_obj *a =
            srv_range_extent(c, s->addr, s->x, s->y, s->z, s->pitch, s->height, w, h, d);
        if (!a) return CUDA_ERROR_INVALID_VALUE;
        /* Migrating managed memory is device memory here (migrate.c). */
        out->type = srv_host_type(a->key.type) && !srv_migrating(a) ? CU_MEMORYTYPE_HOST
                                                                    : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    }
    case CHAN_MEM_STAGED:
        out->type = CU_MEMORYTYPE_HOST; /* the address is filled in per chunk */
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* Fills one side of a 3D copy description. */
static void fill3(const struct srv_copy_side *s, CUmemorytype *type, const void **host,
                  CUdeviceptr *dev, CUarray *arr, size_t *x, size_t *y, size_t *z, size_t *pitch,
                  size_t *height)
{
    *type = s->type;
    if (s->type == CU_MEMORYTYPE_ARRAY)
        *arr = (CUarray)(uintptr_t)s->addr;
    else if (s->type == CU_MEMORYTYPE_HOST)
        *host = (const void *)(uintptr_t)s->addr;
    else
        *dev = s->addr;
    *x = s->x;
    *y = s->y;
    *z = s->z;
    *pitch = s->pitch;
    *height = s->height;
}

/* One driver copy of a w x h x d extent between two checked sides, on stream `st`. */
CUresult srv_copy_issue(const struct srv_copy_side *src, const struct srv_copy_side *dst,
                        uint64_t w, uint64_t h, uint64_t d, CUstream st)
{
    int arrays = src->type == CU_MEMORYTYPE_ARRAY || dst->type == CU_MEMORYTYPE_ARRAY;
    int cross = src->device != dst->device && src->type == CU_MEMORYTYPE_DEVICE &&
                dst->type == CU_MEMORYTYPE_DEVICE;
    if (h == 1 && d == 1 && !arrays) {
        uint64_t s = src->addr + src->x + src->y * src->pitch + src->z * src->pitch * src->height;
        uint64_t t = dst->addr + dst->x + dst->y * dst->pitch + dst->z * dst->pitch * dst->height;
        if (cross)
            return DRV(cuMemcpyPeerAsync)(t, srv.ctx[dst->device], s, srv.ctx[src->device], w, st);
        /* Unified addressing: host and device addresses alike. */
        return DRV(cuMemcpyAsync)(t, s, w, st);
    }
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof(p));
    fill3(src, &p.srcMemoryType, &p.srcHost, &p.srcDevice, &p.srcArray, &p.srcXInBytes, &p.srcY,
          &p.srcZ, &p.srcPitch, &p.srcHeight);
    fill3(dst, &p.dstMemoryType, (const void **)&p.dstHost, &p.dstDevice, &p.dstArray,
          &p.dstXInBytes, &p.dstY, &p.dstZ, &p.dstPitch, &p.dstHeight);
    p.WidthInBytes = w;
    p.Height = h;
    p.Depth = d;
    if (cross) {
        p.srcContext = srv.ctx[src->device];
        p.dstContext = srv.ctx[dst->device];
        return DRV(cuMemcpy3DPeerAsync)(&p, st);
    }
    /* One slice of linear memory (a z offset is rows further on) or of a 2D array: the 2D
     * entry point, whose pitch rules are the ones 2D callers were checked against. */
    if (d == 1 && !(src->type == CU_MEMORYTYPE_ARRAY && src->z) &&
        !(dst->type == CU_MEMORYTYPE_ARRAY && dst->z)) {
        CUDA_MEMCPY2D q = {
            .srcXInBytes = p.srcXInBytes,
            .srcY = p.srcY + (src->type == CU_MEMORYTYPE_ARRAY ? 0 : p.srcZ * p.srcHeight),
            .srcMemoryType = p.srcMemoryType,
            .srcHost = p.srcHost,
            .srcDevice = p.srcDevice,
            .srcArray = p.srcArray,
            .srcPitch = p.srcPitch,
            .dstXInBytes = p.dstXInBytes,
            .dstY = p.dstY + (dst->type == CU_MEMORYTYPE_ARRAY ? 0 : p.dstZ * p.dstHeight),
            .dstMemoryType = p.dstMemoryType,
            .dstHost = p.dstHost,
            .dstDevice = p.dstDevice,
            .dstArray = p.dstArray,
            .dstPitch = p.dstPitch,
            .WidthInBytes = w,
            .Height = h,
        };
        return DRV(cuMemcpy2DAsync_v2)(&q, st);
    }
    CUDA_MEMCPY3D t = {
        .srcXInBytes = p.srcXInBytes,
        .srcY = p.srcY,
        .srcZ = p.srcZ,
        .srcMemoryType = p.srcMemoryType,
        .srcHost = p.srcHost,
        .srcDevice = p.srcDevice,
        .srcArray = p.srcArray,
        .srcPitch = p.srcPitch,
        .srcHeight = p.srcHeight,
        .dstXInBytes = p.dstXInBytes,
        .dstY = p.dstY,
        .dstZ = p.dstZ,
        .dstMemoryType = p.dstMemoryType,
        .dstHost = p.dstHost,
        .dstDevice = p.dstDevice,
        .dstArray = p.dstArray,
        .dstPitch = p.dstPitch,
        .dstHeight = p.dstHeight,
        .WidthInBytes = w,
        .Height = h,
        .Depth = d,
    };
    return DRV(cuMemcpy3DAsync_v2)(&t, st);
}

/* A side moved by a chunk's offsets; staged sides point at `host` packed by rows. */
static struct srv_copy_side at_chunk(const struct srv_copy_side *s, int staged, void *host,
                                     const struct chan_chunk *ch)
{
    struct srv_copy_side t = *s;
    if (staged) {
        t.type = CU_MEMORYTYPE_HOST;
        t.addr = (uint64_t)(uintptr_t)host;
        t.pitch = ch->nbytes;
        t.height = ch->nrows;
        t.x = t.y = t.z = 0;
    } else {
        t.x += ch->x;
        t.y += ch->y;
        t.z += ch->z;
    }
    return t;
}

/* ---------------------------------------------------------------- staging pipeline */

struct pipe {
    struct srv_client *c;
    const struct chan_copy *m;
    struct srv_copy_side src, dst;
    CUstream st;
    int dev;      /* device of st: the slot events recorded on it are made in its context */
    int htod;     /* pageable source (client fills slots) */
    CUresult bad; /* set before or during the copy: chunks still flow, nothing moves */
    uint64_t first;
    int64_t pending; /* DtoH: oldest chunk issued and not yet published, or -1 */
    int64_t issued;  /* DtoH: last chunk issued */
};

static struct chan_wait waiter(struct srv_client *c)
{
    return (struct chan_wait){.spin_ns = 100 * 1000, .alive = srv_client_alive, .arg = c};
}

/* Makes slot n % NSLOTS reusable for chunk n: an HtoD DMA still reading it completes and
 * the slot is handed back to the client. */
static void settle_slot(struct srv_client *c, uint32_t s)
{
    if (c->copy->slot_busy[s] < 0) return;
    struct chan_slot *sl = &c->ch.shm->slots[s];
    DRV(cuEventSynchronize)(c->copy->slot_ev[c->copy->slot_dev[s]][s]);
    atomic_store_explicit(&sl->freed, (uint32_t)c->copy->slot_busy[s] + 1, memory_order_release);
    chan_wake(&sl->freed, &sl->waiters);
    c->copy->slot_busy[s] = -1;
}

void srv_copy_forget_device(struct srv_client *c, int dev)
{
    /* dev's context died in a fault (fault.c): no DMA of it runs any more, so a slot whose
     * last DMA was there is the client's again at once, and its events (dead) are only
     * forgotten. */
    for (int s = 0; s < CHAN_NSLOTS; s++) {
        if (c->copy->slot_busy[s] >= 0 && c->copy->slot_dev[s] == dev) {
            struct chan_slot *sl = &c->ch.shm->slots[s];
            atomic_store_explicit(&sl->freed, (uint32_t)c->copy->slot_busy[s] + 1,
                                  memory_order_release);
            chan_wake(&sl->freed, &sl->waiters);
            c->copy->slot_busy[s] = -1;
        }
        c->copy->slot_ev[dev][s] = NULL;
    }
}

/* DtoH: waits for the DMA of chunk n and hands its slot to the client. */
static void publish(struct pipe *p, uint32_t n)
{
    struct srv_client *c = p->c;
    uint32_t s = n % CHAN_NSLOTS;
    struct chan_slot *sl = &c->ch.shm->slots[s];
    CUresult r =
        p->bad ? p->bad : DRV(cuEventSynchronize)(c->copy->slot_ev[c->copy->slot_dev[s]][s]);
    if (r != CUDA_SUCCESS && !p->bad) p->bad = r;
    atomic_store(&sl->status, (int32_t)r);
    atomic_store_explicit(&sl->filled, n + 1, memory_order_release);
    chan_wake(&sl->filled, &sl->waiters);
}

/* Marks slot s as read or written by the DMA just issued on the pipe's stream. */
static CUresult record_slot(struct pipe *p, uint32_t s)
{
    struct srv_client *c = p->c;
    CUresult r = DRV(cuEventRecord)(c->copy->slot_ev[p->dev][s], p->st);
    if (r == CUDA_SUCCESS) c->copy->slot_dev[s] = p->dev;
    return r;
}

static int chunk(const struct chan_chunk *ch, void *arg)
{
    struct pipe *p = arg;
    struct srv_client *c = p->c;
    uint32_t n = (uint32_t)(p->first + ch->index);
    uint32_t s = n % CHAN_NSLOTS;
    struct chan_slot *sl = &c->ch.shm->slots[s];
    uint8_t *data = chan_slot_data(&c->ch, s);
    struct chan_wait w = waiter(c);
    settle_slot(c, s);
    if (p->htod) {
        if (chan_wait_for(&sl->filled, n + 1, &sl->waiters, &w) != 0) return -1;
        struct srv_copy_side src = at_chunk(&p->src, 1, data, ch),
                             dst = at_chunk(&p->dst, 0, NULL, ch);
        CUresult r = p->bad ? p->bad : srv_copy_issue(&src, &dst, ch->nbytes, ch->nrows, 1, p->st);
        if (r == CUDA_SUCCESS) r = record_slot(p, s);
        if (r == CUDA_SUCCESS) {
            c->copy->slot_busy[s] = n;
        } else {
            if (!p->bad) p->bad = r;
            atomic_store_explicit(&sl->freed, n + 1, memory_order_release);
            chan_wake(&sl->freed, &sl->waiters);
        }
        return 0;
    }
    /* DtoH: the slot's previous chunk must have been published and consumed. */
    if (p->pending >= 0 && (uint32_t)p->pending + CHAN_NSLOTS == n)
        publish(p, (uint32_t)p->pending++);
    if (n >= CHAN_NSLOTS && chan_wait_for(&sl->freed, n - CHAN_NSLOTS + 1, &sl->waiters, &w) != 0)
        return -1;
    struct srv_copy_side src = at_chunk(&p->src, 0, NULL, ch), dst = at_chunk(&p->dst, 1, data, ch);
    CUresult r = p->bad ? p->bad : srv_copy_issue(&src, &dst, ch->nbytes, ch->nrows, 1, p->st);
    if (r == CUDA_SUCCESS) r = record_slot(p, s);
    if (r != CUDA_SUCCESS && !p->bad) p->bad = r;
    if (p->pending < 0) p->pending = n;
    p->issued = n;
    return 0;
}

static void staged(struct srv_client *c, const struct chan_rec *r, const struct chan_copy *m,
                   const struct srv_copy_side *src, const struct srv_copy_side *dst,
                   struct srv_stream *s, CUresult bad)
{
    /* The slots are in the segment: the quiet context's making is started at its next record,
     * for the segment's registration (segment.c). */
    if (c->shm_want) c->quiet_why = "a copy through its staging slots";
    struct pipe p = {.c = c,
                     .m = m,
                     .src = *src,
                     .dst = *dst,
                     .st = s ? s->real : NULL,
                     .dev = s ? s->device : 0,
                     .htod = m->src.kind == CHAN_MEM_STAGED,
                     .bad = bad,
                     .first = m->first_chunk,
                     .pending = -1,
                     .issued = -1};
    /* The slot events of the stream's device, made on first use. Slots whose last DMA was
     * on another device keep that device's event in slot_dev until they are settled. */
    for (int i = 0; i < CHAN_NSLOTS && !p.bad; i++)
        if (!c->copy->slot_ev[p.dev][i] &&
            srv_event_take(c, p.dev, &c->copy->slot_ev[p.dev][i]) != CUDA_SUCCESS)
            p.bad = CUDA_ERROR_OUT_OF_MEMORY;
    /* Into pageable memory, this thread waits for each chunk's DMA (publish), and so for the
     * work queued on the stream before it, while the process's other threads' requests wait
     * unread: where that work waits for one of them (a collective's half on another GPU,
     * launched by another thread: tests/progs/thread_peer), both would wait for ever. So
     * with other threads there and that work not done, the copy is refused for the client to
     * wait for the work as a synchronisation does (polled: waits.c) and ask again. Every
     * chunk is then published with the refusal, as a failed copy's are. */
    int settle = !p.htod && !p.bad && p.st && (m->flags & CHAN_CF_MAY_SETTLE) &&
                 !srv_stream_capturing(c, s) && DRV(cuStreamQuery)(p.st) == CUDA_ERROR_NOT_READY &&
                 (c->many_threads || !srv_client_one_thread(c));
    if (settle) p.bad = CHAN_COPY_SETTLE;
    uint64_t n = chan_copy_nchunks(m->width, m->height, m->depth, CHAN_SLOT_SIZE);
    int aborted = chan_copy_plan(m->width, m->height, m->depth, CHAN_SLOT_SIZE, chunk, &p);
    c->copy->chunk_seq += (uint32_t)n;
    if (aborted) return; /* the client is gone */
    if (!p.htod) {
        while (p.pending >= 0 && p.pending <= p.issued)
            publish(&p, (uint32_t)p.pending++);
        srv_reply(c, r->lane, p.bad, 0);
    } else if (r->flags & CHAN_RF_REPLY) {
        srv_reply(c, r->lane, p.bad, 0); /* the client waits for a verdict (an array side) */
    } else if (p.bad) {
        srv_defer(c, p.bad, "copy from pageable memory");
    }
    if (!settle) atomic_fetch_add(&c->stats.bytes_copied, m->width * m->height * m->depth);
}

/* ---------------------------------------------------------------- the operation */

/* One copy record as the server decides it: the descriptor is its own copy, and nothing
 * here is read from the ring again (the client can still write there). */
struct op {
    struct chan_copy m;
    uint8_t *data;  /* what follows the descriptor in the record: an inline source's bytes */
    uint64_t total; /* width x height x depth, where that does not wrap */
    int wraps;      /* width x height x depth overflows */
    int lane;       /* the reply lane, or -1: the client waits for no reply */
    int src_staged, dst_staged, is_inline;
};

/* Answers, or disconnects, a record no copy can follow: 0 when the copy goes on. */
static int refuse(struct srv_client *c, const struct op *o, uint32_t len)
{
    const struct chan_copy *m = &o->m;
    int src_staged = o->src_staged, dst_staged = o->dst_staged, is_inline = o->is_inline;
    if (o->wraps && !src_staged && !dst_staged) {
        /* Sizes no memory could hold: the driver's answer; the client's protocol is fine. */
        if (o->lane >= 0)
            srv_reply(c, o->lane, CUDA_ERROR_INVALID_VALUE, 0);
        else
            srv_defer(c, CUDA_ERROR_INVALID_VALUE, "copy");
        return -1;
    }
    if (m->width == 0 || m->height == 0 || m->depth == 0 || (src_staged && dst_staged) ||
        o->wraps || (is_inline && (!(src_staged || dst_staged) || o->total > CHAN_INLINE_MAX)) ||
        (is_inline && src_staged && len != sizeof(*m) + o->total) ||
        (!is_inline && (src_staged || dst_staged) && m->first_chunk != c->copy->chunk_seq)) {
        /* The staging protocol is out of step: nothing sensible can follow. */
        atomic_store(&c->dead, 1);
        srv_log("Client process %d sent an inconsistent copy; disconnecting it", (int)c->pid);
        return -1;
    }
    return 0;
}

/* Resolves the copy's stream (*sp) and checks it and both sides (*src, *dst): the error the
 * copy answers with, or CUDA_SUCCESS. */
static CUresult check_copy(struct srv_client *c, const struct chan_rec *r, const struct op *o,
                           struct srv_stream **sp, struct srv_copy_side *src,
                           struct srv_copy_side *dst)
{
    const struct chan_copy *m = &o->m;
    CUresult res;
    struct srv_stream *s = srv_stream_resolve(c, m->stream, r->flags & CHAN_RF_PTDS, r->thread);
    *sp = s;
    if (!c->cur)
        res = CUDA_ERROR_INVALID_CONTEXT;
    else if (c->cur->fault)
        res = c->cur->fault; /* its context died (fault.c); staged chunks still flow */
    else if (!s)
        res = CUDA_ERROR_INVALID_HANDLE;
    else if ((res = srv_copy_check_side(c, &m->src, m->width, m->height, m->depth, src)) ==
             CUDA_SUCCESS)
        res = srv_copy_check_side(c, &m->dst, m->width, m->height, m->depth, dst);
    /* Pageable memory cannot be captured: the slots and lanes it travels through are
     * reused, and the driver would take them for pinned memory. */
    if (res == CUDA_SUCCESS && (o->src_staged || o->dst_staged) && srv_stream_capturing(c, s))
        res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return res;
}

/* The 2D description of an unaligned copy: a staged source is the record's inline bytes, a
 * staged destination the reply lane, both packed by rows. */
static CUDA_MEMCPY2D unaligned_desc(struct srv_client *c, const struct op *o,
                                    const struct srv_copy_side *src,
                                    const struct srv_copy_side *dst)
{
    CUDA_MEMCPY2D q;
    memset(&q, 0, sizeof(q));
    q.srcXInBytes = src->x;
    q.srcY = src->y;
    q.srcMemoryType = src->type;
    q.srcPitch = src->pitch;
    q.dstXInBytes = dst->x;
    q.dstY = dst->y;
    q.dstMemoryType = dst->type;
    q.dstPitch = dst->pitch;
    q.WidthInBytes = o->m.width;
    q.Height = o->m.height;
    if (o->src_staged) {
        q.srcHost = o->data;
        q.srcPitch = o->m.width;
        q.srcXInBytes = q.srcY = 0;
    } else if (src->type == CU_MEMORYTYPE_ARRAY) {
        q.srcArray = (CUarray)(uintptr_t)src->addr;
    } else if (src->type == CU_MEMORYTYPE_HOST) {
        q.srcHost = (const void *)(uintptr_t)src->addr;
    } else {
        q.srcDevice = src->addr;
    }
    if (o->dst_staged) {
        q.dstHost = srv_lane_data(c, o->lane);
        q.dstPitch = o->m.width;
        q.dstXInBytes = q.dstY = 0;
    } else if (dst->type == CU_MEMORYTYPE_ARRAY) {
        q.dstArray = (CUarray)(uintptr_t)dst->addr;
    } else if (dst->type == CU_MEMORYTYPE_HOST) {
        q.dstHost = (void *)(uintptr_t)dst->addr;
    } else {
        q.dstDevice = dst->addr;
    }
    return q;
}

/* A checked copy with no async form (CHAN_CF_UNALIGNED): run synchronously, and answered. */
static void copy_unaligned(struct srv_client *c, const struct op *o,
                           const struct srv_copy_side *src, const struct srv_copy_side *dst,
                           CUstream st)
{
    /* No async form exists: wait for the stream, then copy synchronously. */
    CUDA_MEMCPY2D q = unaligned_desc(c, o, src, dst);
    CUresult res = DRV(cuStreamSynchronize)(st);
    /* It runs on the real context's legacy stream, which no client stream waits for,
     * and from pageable memory it may return before the data lands: wait for it. */
    if (res == CUDA_SUCCESS) res = DRV(cuMemcpy2DUnaligned_v2)(&q);
    if (res == CUDA_SUCCESS) res = DRV(cuStreamSynchronize)(NULL);
    srv_reply(c, o->lane, res, res == CUDA_SUCCESS && o->dst_staged ? (uint32_t)o->total : 0);
}

/* Issues a checked copy whose data is in place or inline (in the record, or to the reply
 * lane) on st, as one piece. */
static CUresult issue_whole(struct srv_client *c, struct srv_stream *s, const struct op *o,
                            const struct srv_copy_side *src, const struct srv_copy_side *dst,
                            CUstream st)
{
    struct chan_chunk whole = {.nrows = o->m.height, .nbytes = o->m.width};
    struct srv_copy_side a = *src, b = *dst;
    CUresult res;
    if (o->src_staged) { /* inline: the data follows the descriptor, rows packed */
        /* Given to the driver from pinned memory of the server's, never from the
         * record: a pageable source would take the driver's staging, which is
         * shared by every client (hostblocks.c says why that matters). */
        uint8_t *data = o->data, *pin = srv_hblock_take(c, s, o->total);
        if (pin) {
            memcpy(pin, data, o->total);
            data = pin;
        }
        a = at_chunk(src, 1, data, &whole);
    }
    if (o->dst_staged) b = at_chunk(dst, 1, srv_lane_data(c, o->lane), &whole);
    if (o->dst_staged && o->lane < 0)
        res = CUDA_ERROR_INVALID_VALUE;
    else
        res = srv_copy_issue(&a, &b, o->m.width, o->m.height, o->m.depth, st);
    /* The data is in the record, which the next one overwrites: the driver keeps a
     * copy of it until the copy runs (queue.c). */
    if (res == CUDA_SUCCESS && o->src_staged) srv_queue_charge(c, s, o->total);
    return res;
}

/* Answers a copy issued as one piece (or refused): deferred where the client waits for no
 * reply, after its stream where it asked for the copy complete (CHAN_CF_COMPLETE). */
static void answer(struct srv_client *c, struct srv_stream *s, const struct op *o, CUresult res)
{
    if (res == CUDA_SUCCESS) atomic_fetch_add(&c->stats.bytes_copied, o->total);
    if (o->lane < 0) {
        srv_defer(c, res, "copy");
        return;
    }
    if (res == CUDA_SUCCESS && (o->m.flags & CHAN_CF_COMPLETE)) {
        res = srv_wait_stream(c, s, o->lane, o->dst_staged ? (uint32_t)o->total : 0);
        if (res == CUDA_SUCCESS) return;
    }
    srv_reply(c, o->lane, res, res == CUDA_SUCCESS && o->dst_staged ? (uint32_t)o->total : 0);
}

void srv_op_copy(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct op o;
    o.lane = (r->flags & CHAN_RF_REPLY) ? r->lane : -1;
    /* At least a chan_copy (its %op row: a shorter one is a protocol error, as nothing
     * says how to answer it). */
    memcpy(&o.m, p, sizeof(o.m));
    o.data = p + sizeof(o.m);
    o.wraps = __builtin_mul_overflow(o.m.width, o.m.height, &o.total) ||
              __builtin_mul_overflow(o.total, o.m.depth, &o.total);
    o.src_staged = o.m.src.kind == CHAN_MEM_STAGED;
    o.dst_staged = o.m.dst.kind == CHAN_MEM_STAGED;
    o.is_inline = (o.m.flags & CHAN_CF_INLINE) != 0;
    if (refuse(c, &o, len)) return;
    struct srv_copy_side src, dst;
    struct srv_stream *s;
    CUresult res = check_copy(c, r, &o, &s, &src, &dst);
    CUstream st = res == CUDA_SUCCESS ? srv_stream_prepare(c, s) : NULL;

    if ((o.src_staged || o.dst_staged) && !o.is_inline) {
        staged(c, r, &o.m, &src, &dst, res == CUDA_SUCCESS ? s : NULL, res);
        return;
    }
    if (res == CUDA_SUCCESS && (o.m.flags & CHAN_CF_UNALIGNED)) {
        copy_unaligned(c, &o, &src, &dst, st);
        return;
    }
    if (res == CUDA_SUCCESS) res = issue_whole(c, s, &o, &src, &dst, st);
    answer(c, s, &o, res);
}

uint32_t srv_copy_chunk_seq(const struct srv_client *c)
{
    return c->copy->chunk_seq;
}

/* Its staging slots: none holds a chunk yet. Left at 0, the first chunk through slot 0
 * would "settle" a chunk 0 that was never issued and hand the slot back early: the client
 * then fills chunk NSLOTS into it while the DMA of chunk 0 may still be reading it. */
static int copy_init(struct srv_client *c)
{
    if (!(c->copy = calloc(1, sizeof(*c->copy)))) return -1;
    for (int i = 0; i < CHAN_NSLOTS; i++)
        c->copy->slot_busy[i] = -1;
    return 0;
}

/* The client leaves: its slots' events are destroyed (their last DMA may still run: the
 * driver frees an event once its work is done). */
static void copy_fini(struct srv_client *c)
{
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        for (int i = 0; i < CHAN_NSLOTS; i++)
            if (c->copy->slot_ev[d][i]) DRV(cuEventDestroy_v2)(c->copy->slot_ev[d][i]);
}

static void copy_free(struct srv_client *c)
{
    free(c->copy);
}

/* The family table's entry (family.c). */
const struct srv_family srv_family_copy = {.name = "copy",
                                           .client_init = copy_init,
                                           .client_fini = copy_fini,
                                           .client_free = copy_free,
                                           .ctx_died = srv_copy_forget_device};
