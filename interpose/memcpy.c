/* The copy engine. Every copy row of cuda_symbols.txt (class copy) is one call of it, which
 * the generator writes from the row (build/gen/shim_stubs.c, SHIM_COPY_ENTRY; memcpy.h).
 * Every variant becomes one chan_copy (a 3D extent between two sides) and one of three
 * paths:
 *  - no pageable host side: the server copies between device, array and pinned memory
 *    directly (pinned memory is shared, so even host pages need no extra copy);
 *  - a pageable side of at most CHAN_INLINE_MAX bytes: the data rides in the request
 *    (HtoD) or in the reply (DtoH);
 *  - larger: pipelined through the staging slots (see channel/copyplan.h), the client
 *    packing or unpacking rows while the GPU moves the previous chunk.
 * Host-to-host copies never leave the process. */
#define _GNU_SOURCE
#include "interpose/memcpy.h"

#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "channel/copyplan.h"

/* Byte address of element (x, y, z) of a linear side. */
static uint64_t origin(const struct shim_copy_side *s, uint64_t base)
{
    return base + s->z * s->pitch * s->height + s->y * s->pitch + s->x;
}

/* Bytes spanned from the origin by a width x height x depth extent. */
static uint64_t span(const struct shim_copy_side *s, uint64_t w, uint64_t h, uint64_t d)
{
    return (d - 1) * s->pitch * s->height + (h - 1) * s->pitch + w;
}

/* Decides how a side travels and fills its wire description; *mvar is set when it lies in
 * a __managed__ variable. */
static CUresult classify(const struct shim_copy_side *s, uint64_t w, uint64_t h, uint64_t d,
                         struct chan_copy_side *out, int *mvar)
{
    memset(out, 0, sizeof(*out));
    out->device = s->device;
    out->x = s->x;
    out->y = s->y;
    out->z = s->z;
    out->pitch = s->pitch;
    out->height = s->height;
    if (s->memtype == CU_MEMORYTYPE_ARRAY) {
        if (!s->array) return CUDA_ERROR_INVALID_VALUE;
        out->kind = CHAN_MEM_ARRAY;
        out->addr = (uint64_t)(uintptr_t)s->array;
        return CUDA_SUCCESS;
    }
    if ((h > 1 || d > 1) && s->pitch < w) return CUDA_ERROR_INVALID_VALUE;
    if (d > 1 && s->height < h) return CUDA_ERROR_INVALID_VALUE;
    uint64_t base = s->memtype == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)s->host : s->dev;
    if (!base) return CUDA_ERROR_INVALID_VALUE;
    struct shim_range rg;
    int known = shim_range_find(origin(s, base), span(s, w, h, d), &rg) == 0;
    /* Device addresses must be the caller's own (pinned host memory counts: under unified
     * addressing it is device memory too); unknown host memory is pageable. */
    if (s->memtype == CU_MEMORYTYPE_DEVICE && !known) return CUDA_ERROR_INVALID_VALUE;
    /* Memory made through another GPU's server of this process (route.c) is none of this
     * copy's server's: its host memory travels as pageable memory does, and its device
     * memory is mirrored in this copy's server first (mirror.c), then taken in place there,
     * through the copy's context (not as its own device's). */
    int apart = known && shim_route_apart(rg.ctx);
    if (apart && !shim_range_is_host(rg.kind)) {
        CUresult r = shim_mirror_here(&rg);
        if (r != CUDA_SUCCESS) return r;
        apart = 0;
        out->device = -1;
    }
    if (!known || apart)
        out->kind = CHAN_MEM_STAGED;
    else
        /* Managed memory is host memory the server maps too: taken in place, like pinned. */
        out->kind = shim_range_is_host(rg.kind) ? CHAN_MEM_PINNED : CHAN_MEM_DEVICE;
    /* A __managed__ variable is device memory (the driver's, in the server): its host copy
     * is brought to it before (mvars.c), and back after a synchronous copy. */
    if (known && rg.kind == SHIM_HT_MEM_GLOBAL && (rg.flags & SHIM_RANGE_MVAR)) *mvar = 1;
    out->addr = base;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- staged data */

struct pack {
    struct shim_conn *conn;            /* whose staging slots (staged) */
    const struct shim_copy_side *host; /* the pageable side */
    const struct chan_copy *c;
    uint8_t *buf;   /* where packed chunks go / come from */
    int to_wire;    /* 1: host -> buf (HtoD), 0: buf -> host (DtoH) */
    uint64_t first; /* slot chunk number of chunk 0 (staged), or ~0 (inline) */
    CUresult status;
};

static uint8_t *host_at(const struct shim_copy_side *s, uint64_t x, uint64_t y, uint64_t z)
{
    const struct shim_copy_side t = {
        .x = s->x + x, .y = s->y + y, .z = s->z + z, .pitch = s->pitch, .height = s->height};
    return (uint8_t *)(uintptr_t)origin(&t, (uint64_t)(uintptr_t)s->host);
}

static void move_rows(struct pack *p, const struct chan_chunk *ch, uint8_t *buf)
{
    for (uint64_t r = 0; r < ch->nrows; r++) {
        uint8_t *h = host_at(p->host, ch->x, ch->y + r, ch->z);
        uint8_t *b = buf + r * ch->nbytes;
        if (p->to_wire)
            shim_pcopy(b, h, ch->nbytes);
        else
            shim_pcopy(h, b, ch->nbytes);
    }
}

/* Inline: every chunk lands at its offset in one buffer (cap = whole extent). */
static int inline_chunk(const struct chan_chunk *ch, void *arg)
{
    struct pack *p = arg;
    move_rows(p, ch, p->buf);
    p->buf += ch->nrows * ch->nbytes;
    return 0;
}

/* Staged: chunk n of the client's sequence goes through slot n % CHAN_NSLOTS. */
static int staged_chunk(const struct chan_chunk *ch, void *arg)
{
    struct pack *p = arg;
    struct chan *c = &p->conn->ch;
    uint32_t n = (uint32_t)(p->first + ch->index);
    struct chan_slot *s = &c->shm->slots[n % CHAN_NSLOTS];
    uint8_t *data = chan_slot_data(c, n % CHAN_NSLOTS);
    if (p->to_wire) {
        /* Wait until the server is done with the slot's previous chunk. */
        if (n >= CHAN_NSLOTS &&
            chan_wait_for(&s->freed, n - CHAN_NSLOTS + 1, &s->waiters, &shim_waiter) != 0)
            return -1;
        move_rows(p, ch, data);
        atomic_store_explicit(&s->filled, n + 1, memory_order_release);
        chan_wake(&s->filled, &s->waiters);
    } else {
        if (chan_wait_for(&s->filled, n + 1, &s->waiters, &shim_waiter) != 0) return -1;
        int32_t st = atomic_load(&s->status);
        if (st != CUDA_SUCCESS && p->status == CUDA_SUCCESS) p->status = (CUresult)st;
        if (st == CUDA_SUCCESS) move_rows(p, ch, data); /* a failed chunk's slot holds nothing */
        atomic_store_explicit(&s->freed, n + 1, memory_order_release);
        chan_wake(&s->freed, &s->waiters);
    }
    return 0;
}

/* One staged copy at a time per connection: its slots are one pipeline. Guarded by it too:
 * the chunk sequence number. By the connection's slot (rpc.c). */
static struct staging {
    pthread_mutex_t lock;
    uint32_t seq;
} staging[SHIM_CONNS] = {[0 ... SHIM_CONNS - 1] = {PTHREAD_MUTEX_INITIALIZER, 0}};

/* ---------------------------------------------------------------- the three paths */

static CUresult run(struct chan_copy *c, const struct shim_copy_side *src,
                    const struct shim_copy_side *dst)
{
    uint64_t total;
    if (__builtin_mul_overflow(c->width, c->height, &total) ||
        __builtin_mul_overflow(total, c->depth, &total))
        return CUDA_ERROR_INVALID_VALUE; /* no memory is that large */
    int src_staged = c->src.kind == CHAN_MEM_STAGED, dst_staged = c->dst.kind == CHAN_MEM_STAGED;
    int async = (c->flags & CHAN_CF_ASYNC) != 0;
    /* This process keeps no table of arrays: only the server can refuse a foreign or
     * destroyed one, so a copy naming one waits for its verdict, as the driver answers
     * a bad array at once; without it the refusal would only show at the next sync. */
    int arrays = c->src.kind == CHAN_MEM_ARRAY || c->dst.kind == CHAN_MEM_ARRAY;
    struct shim_req q;
    CUresult r;
    if (async && (src_staged || dst_staged) &&
        (r = shim_capture_refuse((CUstream)(uintptr_t)c->stream)) != CUDA_SUCCESS)
        return r;

    if (!src_staged && !dst_staged) {
        /* Sync copies that touch pinned host memory return once complete; device-only
         * ones once queued (the driver does not wait for those either). */
        int host = c->src.kind == CHAN_MEM_PINNED || c->dst.kind == CHAN_MEM_PINNED;
        /* A sync peer copy runs on one context's stream; the other context's later work
         * knows nothing of it, so it too returns once complete. */
        if (!async && (host || (c->flags & CHAN_CF_PEER))) c->flags |= CHAN_CF_COMPLETE;
        int reply = !async || arrays;
        if ((r = shim_req_begin(&q, CHAN_OP_COPY, sizeof(*c), reply, 0)) != CUDA_SUCCESS) return r;
        memcpy(q.payload, c, sizeof(*c));
        if (!reply) q.rec->flags |= CHAN_RF_GPU_WORK; /* may wait for the next ring (chan.c) */
        shim_req_send(&q);
        return reply ? shim_req_wait(&q, NULL, NULL) : CUDA_SUCCESS;
    }

    if (total <= CHAN_INLINE_MAX) {
        c->flags |= CHAN_CF_INLINE;
        if (src_staged) {
            /* Pageable source: once the bytes are in the request, the caller's buffer is
             * free, which is all the driver promises for pageable HtoD, sync or not. */
            if ((r = shim_req_begin(&q, CHAN_OP_COPY, (uint32_t)(sizeof(*c) + total), arrays, 0)) !=
                CUDA_SUCCESS)
                return r;
            memcpy(q.payload, c, sizeof(*c));
            struct pack p = {.host = src, .c = c, .buf = q.payload + sizeof(*c), .to_wire = 1};
            chan_copy_plan(c->width, c->height, c->depth, total, inline_chunk, &p);
            if (!arrays) q.rec->flags |= CHAN_RF_GPU_WORK; /* its data is in the record */
            shim_req_send(&q);
            return arrays ? shim_req_wait(&q, NULL, NULL) : CUDA_SUCCESS;
        }
        /* Pageable destination: the data comes back in the reply, after completion. */
        c->flags |= CHAN_CF_COMPLETE;
        if ((r = shim_req_begin(&q, CHAN_OP_COPY, sizeof(*c), 1, 0)) != CUDA_SUCCESS) return r;
        memcpy(q.payload, c, sizeof(*c));
        shim_req_send(&q);
        const uint8_t *data;
        uint32_t len;
        r = shim_req_wait(&q, &data, &len);
        if (r == CUDA_SUCCESS && len >= total) {
            struct pack p = {.host = dst, .c = c, .buf = (uint8_t *)data, .to_wire = 0};
            chan_copy_plan(c->width, c->height, c->depth, total, inline_chunk, &p);
        } else if (r == CUDA_SUCCESS) {
            r = CUDA_ERROR_UNKNOWN;
        }
        return r;
    }

    /* Large pageable copies: the pipeline. The request goes first so that the server
     * starts on it while we fill (HtoD) or wait (DtoH). Into pageable memory the server may
     * answer CHAN_COPY_SETTLE first (proto.h): the copy then waits for its stream's work
     * and goes again, once. */
    if (dst_staged) c->flags |= CHAN_CF_MAY_SETTLE;
again:;
    struct shim_conn *cn = shim_route_conn(); /* where q goes */
    struct staging *sg = &staging[cn->slot];
    pthread_mutex_lock(&sg->lock);
    c->first_chunk = sg->seq;
    c->flags |= src_staged ? 0 : CHAN_CF_COMPLETE;
    int reply = dst_staged || arrays;
    r = shim_req_begin(&q, CHAN_OP_COPY, sizeof(*c), reply, 0);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&sg->lock);
        return r;
    }
    memcpy(q.payload, c, sizeof(*c));
    shim_req_send(&q);
    struct pack p = {.conn = q.conn,
                     .host = src_staged ? src : dst,
                     .c = c,
                     .to_wire = src_staged,
                     .first = sg->seq,
                     .status = CUDA_SUCCESS};
    int failed = chan_copy_plan(c->width, c->height, c->depth, CHAN_SLOT_SIZE, staged_chunk, &p);
    sg->seq += (uint32_t)chan_copy_nchunks(c->width, c->height, c->depth, CHAN_SLOT_SIZE);
    pthread_mutex_unlock(&sg->lock);
    if (failed) return shim_conn_dead_error(q.conn);
    if (reply) {
        r = shim_req_wait(&q, NULL, NULL);
        if (r == CHAN_COPY_SETTLE && (c->flags & CHAN_CF_MAY_SETTLE)) {
            c->flags &= ~CHAN_CF_MAY_SETTLE;
            /* The stream's own synchronisation, which the server polls, covers what the copy
             * would have waited for: taking the copy, before refusing it, the server ordered
             * the stream after the legacy stream's work (or the legacy one after the blocking
             * streams'). Not an event of this thread's: made in its current context, it could
             * not be recorded on another device's stream (twogpus --early-thread). Under a
             * _ptds entry point NULL is the thread's stream. */
            if ((r = cuStreamSynchronize((CUstream)(uintptr_t)c->stream)) != CUDA_SUCCESS) return r;
            goto again;
        }
        if (r == CHAN_COPY_SETTLE) r = CUDA_ERROR_UNKNOWN; /* refused again: a server's error */
        return r != CUDA_SUCCESS ? r : p.status;
    }
    return CUDA_SUCCESS;
}

/* Host to host: both sides in this process, ordered after the stream's earlier work.
 * Unified addressing makes any unknown address "host": an address that is not mapped here
 * (another process's device pointer, say) must be refused, not dereferenced, so the bytes
 * move with process_vm_readv on ourselves, which reports EFAULT instead of faulting. */
static CUresult host_to_host(const struct chan_copy *c, const struct shim_copy_side *src,
                             const struct shim_copy_side *dst, CUstream stream)
{
    /* Under a _ptds entry point the NULL stream is the thread's (shim_ptds_begin). */
    CUresult r = cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS) return r;
    for (uint64_t z = 0; z < c->depth; z++)
        for (uint64_t y = 0; y < c->height; y++) {
            struct iovec to = {.iov_base = host_at(dst, 0, y, z), .iov_len = c->width};
            struct iovec from = {.iov_base = host_at(src, 0, y, z), .iov_len = c->width};
            if (process_vm_readv(getpid(), &to, 1, &from, 1, 0) != (ssize_t)c->width)
                return CUDA_ERROR_INVALID_VALUE;
        }
    return CUDA_SUCCESS;
}

/* A host side in managed memory: the server copies it (its bytes may be on the device, and
 * its pages protected here: migrate.c), never this process. */
static int managed_side(const struct shim_copy_side *s)
{
    struct shim_range rg;
    return shim_range_find((uint64_t)(uintptr_t)s->host, 1, &rg) == 0 &&
           rg.kind == SHIM_HT_MEM_MANAGED;
}

/* Resolves a unified side into HOST or DEVICE. */
static void unify(struct shim_copy_side *s)
{
    if (s->memtype != CU_MEMORYTYPE_UNIFIED) return;
    struct shim_range rg;
    if (shim_range_find(s->dev, 1, &rg) == 0 && !shim_range_is_host(rg.kind)) {
        s->memtype = CU_MEMORYTYPE_DEVICE;
    } else {
        s->memtype = CU_MEMORYTYPE_HOST;
        s->host = (const void *)(uintptr_t)s->dev;
    }
}

CUresult shim_copy_wire_side(struct shim_copy_side *s, uint64_t w, uint64_t h, uint64_t d,
                             struct chan_copy_side *out, int *mvar)
{
    unify(s);
    return classify(s, w, h, d, out, mvar);
}

static CUresult copy_routed(struct shim_copy_side src, struct shim_copy_side dst, uint64_t w,
                            uint64_t h, uint64_t d, CUstream stream, unsigned cflags);

/* Entry shared by every variant: to the server of its stream's context, where the process
 * holds one per device (route.c), else of its thread's. */
static CUresult copy(struct shim_copy_side src, struct shim_copy_side dst, uint64_t w, uint64_t h,
                     uint64_t d, CUstream stream, unsigned cflags)
{
    struct shim_route saved;
    int routed = shim_route_stream(stream, &saved);
    CUresult r = copy_routed(src, dst, w, h, d, stream, cflags);
    if (routed) shim_route_end(&saved);
    return r;
}

static CUresult copy_routed(struct shim_copy_side src, struct shim_copy_side dst, uint64_t w,
                            uint64_t h, uint64_t d, CUstream stream, unsigned cflags)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_need_ctx()) != CUDA_SUCCESS) return r;
    if (w == 0 || h == 0 || d == 0) return CUDA_SUCCESS;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS) return r;
    unify(&src);
    unify(&dst);
    struct chan_copy c = {.width = w,
                          .height = h,
                          .depth = d,
                          .stream = (uint64_t)(uintptr_t)stream,
                          .flags = cflags};
    int mvar = 0;
    if ((r = classify(&src, w, h, d, &c.src, &mvar)) != CUDA_SUCCESS ||
        (r = classify(&dst, w, h, d, &c.dst, &mvar)) != CUDA_SUCCESS)
        return r;
    if (src.memtype == CU_MEMORYTYPE_HOST && dst.memtype == CU_MEMORYTYPE_HOST &&
        !managed_side(&src) && !managed_side(&dst))
        return host_to_host(&c, &src, &dst, stream);
    if ((r = shim_mvar_work(stream)) != CUDA_SUCCESS) return r;
    int sync = !(cflags & CHAN_CF_ASYNC);
    /* A copy that may return complete (a synchronous one, and an asynchronous one into
     * pageable memory) may be its stream's synchronisation: begun as one. */
    uint64_t gen = sync || c.dst.kind == CHAN_MEM_STAGED ? shim_mvar_sync_begin() : 0;
    struct shim_idle idle;
    shim_idle_stream_after(&idle, stream);
    r = run(&c, &src, &dst);
    shim_mvar_worked(stream);
    if (r != CUDA_SUCCESS) return r;
    /* A copy answered complete as a synchronisation is answered leaves its stream known
     * idle (idle.c): one inline or in place, not the pipeline's nor an unaligned one. */
    int staged = c.src.kind == CHAN_MEM_STAGED || c.dst.kind == CHAN_MEM_STAGED;
    int settles = (c.flags & CHAN_CF_COMPLETE) && !(c.flags & CHAN_CF_UNALIGNED) &&
                  (!staged || (c.flags & CHAN_CF_INLINE));
    if (!sync) {
        /* An asynchronous one only once its synchronisation's bookkeeping is done, as the
         * stream's own synchronisation would do it (answered idle, that does nothing). */
        CUresult q = CUDA_SUCCESS;
        if (settles) shim_mvar_synced(SHIM_MVAR_STREAM, stream, 0, gen, &q);
        if (settles && q == CUDA_SUCCESS) shim_idle_keep(&idle, 1);
        return r;
    }
    /* A synchronous copy that returned complete synchronised its stream: the device's
     * writes to __managed__ variables come into their host copies (mvars.c). One naming a
     * variable returns complete whatever its kind, as on managed memory natively (the
     * stream's synchronisation brings them then). Under a _ptds entry point NULL is the
     * thread's own stream. */
    if (c.flags & CHAN_CF_COMPLETE)
        shim_mvar_synced(SHIM_MVAR_STREAM, stream, 0, gen, &r);
    else if (mvar)
        r = SHIM_IMPL(cuStreamSynchronize)(stream);
    if (settles && r == CUDA_SUCCESS) shim_idle_keep(&idle, 1);
    return r;
}

struct shim_copy_side shim_copy_host(const void *p)
{
    return (struct shim_copy_side){.memtype = CU_MEMORYTYPE_HOST, .host = p, .device = -1};
}
struct shim_copy_side shim_copy_device(CUdeviceptr p)
{
    return (struct shim_copy_side){.memtype = CU_MEMORYTYPE_DEVICE, .dev = p, .device = -1};
}
struct shim_copy_side shim_copy_unified(CUdeviceptr p)
{
    return (struct shim_copy_side){.memtype = CU_MEMORYTYPE_UNIFIED, .dev = p, .device = -1};
}
struct shim_copy_side shim_copy_array(CUarray a, size_t offset)
{
    return (struct shim_copy_side){
        .memtype = CU_MEMORYTYPE_ARRAY, .array = a, .x = offset, .device = -1};
}
struct shim_copy_side shim_copy_peer(CUdeviceptr p, CUcontext ctx)
{
    return (struct shim_copy_side){
        .memtype = CU_MEMORYTYPE_DEVICE, .dev = p, .device = -1, .ctx = ctx, .peer = 1};
}

/* A peer side: its context names its device. */
static CUresult peer_side(struct shim_copy_side *s, CUcontext ctx)
{
    int dev;
    CUresult r = shim_ctx_lookup(ctx, NULL, &dev);
    if (r == CUDA_SUCCESS) s->device = dev;
    return r;
}

/* ---------------------------------------------------------------- 1D */

CUresult shim_copy(struct shim_copy_side src, struct shim_copy_side dst, uint64_t bytes,
                   CUstream stream, unsigned cflags)
{
    if (src.peer || dst.peer) {
        /* A peer copy names both contexts, each its side's device: none may be NULL. */
        CUresult r = shim_ready();
        if (r != CUDA_SUCCESS) return r;
        if ((src.peer && !src.ctx) || (dst.peer && !dst.ctx)) return CUDA_ERROR_INVALID_CONTEXT;
        if ((src.peer && (r = peer_side(&src, src.ctx)) != CUDA_SUCCESS) ||
            (dst.peer && (r = peer_side(&dst, dst.ctx)) != CUDA_SUCCESS))
            return r;
        cflags |= CHAN_CF_PEER;
    }
    return copy(src, dst, bytes, 1, 1, stream, cflags);
}

/* ---------------------------------------------------------------- 2D and 3D */

static struct shim_copy_side side3(int mt, const void *host, CUdeviceptr dev, CUarray arr, size_t x,
                                   size_t y, size_t z, size_t pitch, size_t height)
{
    return (struct shim_copy_side){.memtype = mt,
                                   .host = host,
                                   .dev = dev,
                                   .array = arr,
                                   .device = -1,
                                   .x = x,
                                   .y = y,
                                   .z = z,
                                   .pitch = pitch,
                                   .height = height};
}

struct shim_copy_side shim_copy_side3(int mt, const void *host, CUdeviceptr dev, CUarray arr,
                                      size_t x, size_t y, size_t z, size_t pitch, size_t height)
{
    return side3(mt, host, dev, arr, x, y, z, pitch, height);
}

CUresult shim_copy_2d(const CUDA_MEMCPY2D *p, CUstream s, unsigned cflags)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct shim_copy_side src = side3(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                                      p->srcXInBytes, p->srcY, 0, p->srcPitch, p->Height);
    struct shim_copy_side dst = side3(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                                      p->dstXInBytes, p->dstY, 0, p->dstPitch, p->Height);
    return copy(src, dst, p->WidthInBytes, p->Height, 1, s, cflags);
}

CUresult shim_copy_3d(const CUDA_MEMCPY3D *p, CUstream s, unsigned cflags)
{
    if (!p || p->srcLOD || p->dstLOD) return CUDA_ERROR_INVALID_VALUE;
    struct shim_copy_side src = side3(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                                      p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight);
    struct shim_copy_side dst = side3(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                                      p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight);
    return copy(src, dst, p->WidthInBytes, p->Height, p->Depth, s, cflags);
}

/* A 3D peer copy: a side's context, where it names one, says its device. */
CUresult shim_copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, unsigned cflags)
{
    if (!p || p->srcLOD || p->dstLOD) return CUDA_ERROR_INVALID_VALUE;
    struct shim_copy_side src = side3(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                                      p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight);
    struct shim_copy_side dst = side3(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                                      p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight);
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if ((p->srcContext && (r = peer_side(&src, p->srcContext)) != CUDA_SUCCESS) ||
        (p->dstContext && (r = peer_side(&dst, p->dstContext)) != CUDA_SUCCESS))
        return r;
    return copy(src, dst, p->WidthInBytes, p->Height, p->Depth, s, cflags | CHAN_CF_PEER);
}
