/* Batched copies: cuMemcpyBatchAsync (the first version, with failIdx), _v2 and their _ptsz
 * twins. A batch is planned here as the copy engine plans one copy (memcpy.c): each member's
 * sides are classified by this process's ranges (device or pinned memory the server uses in
 * place, pageable memory staged) and a device side that is not the caller's refuses the
 * batch at that member, failIdx naming it, the members before it copied (the driver's
 * way). Then the batch travels as ONE COPY_BATCH record (server/memory/copybatch.c),
 * executed in stream order on the caller's stream, with:
 *  - the bytes of small pageable sources in the record and those of small pageable
 *    destinations in the reply (the call then returns once they landed, as a pageable
 *    destination does in the copy engine);
 *  - a batch whose members or staged bytes do not fit one record split into several, sent
 *    in order on the same stream (a batch's copies are unordered among themselves);
 *  - pageable members over CHAN_INLINE_MAX sent after, each through the staging slots as
 *    one async copy of the engine, on the same stream;
 *  - host-to-host members copied here, after the stream's earlier work, as the engine does.
 * Zero-byte members move nothing and are left out. */
#define _GNU_SOURCE
#include "interpose/memcpy.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "channel/copybatch.h"

/* One member as planned: its wire form, and where it goes. */
enum route { R_SKIP, R_RECORD, R_ENGINE, R_LOCAL };

struct member {
    struct chan_batch_copy w; /* attr: the caller's attribute index */
    enum route route;
};

/* A side's kind: DEVICE or PINNED when it lies in this process's ranges, STAGED when it is
 * unknown (pageable host memory under unified addressing). */
static uint32_t side_kind(uint64_t p, uint64_t n)
{
    struct shim_range rg;
    if (shim_range_find(p, n, &rg) != 0) return CHAN_MEM_STAGED;
    return shim_range_is_host(rg.kind) ? CHAN_MEM_PINNED : CHAN_MEM_DEVICE;
}

/* Plans member i; INVALID_VALUE when an address is NULL or a side starts in the caller's
 * device memory but does not lie wholly in it (a device address must be its own). */
static CUresult plan(uint64_t dst, uint64_t src, uint64_t n, size_t attr, struct member *m)
{
    memset(m, 0, sizeof(*m));
    m->w = (struct chan_batch_copy){.src = src, .dst = dst, .bytes = n, .attr = (uint32_t)attr};
    if (n == 0) return CUDA_SUCCESS; /* R_SKIP */
    if (!src || !dst) return CUDA_ERROR_INVALID_VALUE;
    m->w.src_kind = side_kind(src, n);
    m->w.dst_kind = side_kind(dst, n);
    struct shim_range rg;
    if ((m->w.src_kind == CHAN_MEM_STAGED && shim_range_find(src, 1, &rg) == 0) ||
        (m->w.dst_kind == CHAN_MEM_STAGED && shim_range_find(dst, 1, &rg) == 0))
        return CUDA_ERROR_INVALID_VALUE; /* begins in a range, runs past its end */
    int ss = m->w.src_kind == CHAN_MEM_STAGED, ds = m->w.dst_kind == CHAN_MEM_STAGED;
    if (ss && ds)
        m->route = R_LOCAL;
    else if ((ss || ds) && n > CHAN_INLINE_MAX)
        m->route = R_ENGINE;
    else
        m->route = R_RECORD;
    return CUDA_SUCCESS;
}

/* Host to host, after the stream's earlier work: process_vm_readv refuses an address that
 * is not mapped here instead of faulting (memcpy.c's host_to_host says why). */
static CUresult local_copy(const struct member *m)
{
    struct iovec to = {.iov_base = (void *)(uintptr_t)m->w.dst, .iov_len = m->w.bytes};
    struct iovec from = {.iov_base = (void *)(uintptr_t)m->w.src, .iov_len = m->w.bytes};
    return process_vm_readv(getpid(), &to, 1, &from, 1, 0) == (ssize_t)m->w.bytes
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- records */

#define REC_ROOM (CHAN_REC_MAX - sizeof(struct chan_rec) - sizeof(struct chan_copy_batch))

/* The members [a, *b) of one record: as many R_RECORD members from a on as its room, and
 * the reply's for staged destinations, hold. *nattrs: the attribute runs among them. */
static void take(const struct member *m, size_t count, size_t a, size_t *b, uint32_t *nattrs,
                 uint64_t *in, uint64_t *out)
{
    uint64_t used = 0;
    int64_t last = -1;
    *nattrs = 0;
    *in = *out = 0;
    size_t i;
    for (i = a; i < count; i++) {
        if (m[i].route != R_RECORD) continue;
        uint64_t add = sizeof(struct chan_batch_copy) +
                       ((int64_t)m[i].w.attr != last ? sizeof(CUmemcpyAttributes) : 0);
        uint64_t data = m[i].w.src_kind == CHAN_MEM_STAGED ? m[i].w.bytes : 0;
        uint64_t back = m[i].w.dst_kind == CHAN_MEM_STAGED ? m[i].w.bytes : 0;
        if (used + add + data > REC_ROOM || *out + back > CHAN_LANE_DATA) break;
        used += add + data;
        *in += data;
        *out += back;
        if ((int64_t)m[i].w.attr != last) (*nattrs)++;
        last = m[i].w.attr;
    }
    *b = i;
}

/* Sends members [a, b) (their R_RECORD ones) as one record on stream; waits for its reply
 * where a destination is staged or an attribute asks its sources read before the call
 * returns (CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL). */
static CUresult send_record(const struct member *m, size_t a, size_t b, uint32_t nattrs,
                            uint64_t in, uint64_t out, const CUmemcpyAttributes *attrs,
                            CUstream stream)
{
    uint32_t n = 0;
    int reply = out > 0;
    for (size_t i = a; i < b; i++)
        if (m[i].route == R_RECORD) {
            n++;
            if (attrs[m[i].w.attr].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL)
                reply = 1;
        }
    if (n == 0) return CUDA_SUCCESS;
    uint64_t len = sizeof(struct chan_copy_batch) + nattrs * sizeof(CUmemcpyAttributes) +
                   n * sizeof(struct chan_batch_copy) + in;
    struct shim_req q;
    CUresult r = shim_req_begin(&q, CHAN_OP_COPY_BATCH, (uint32_t)len, reply, 0);
    if (r != CUDA_SUCCESS) return r;
    struct chan_copy_batch h = {
        .stream = (uint64_t)(uintptr_t)stream, .count = n, .nattrs = nattrs};
    memcpy(q.payload, &h, sizeof(h));
    uint8_t *at = q.payload + sizeof(h);
    uint8_t *cp = at + nattrs * sizeof(CUmemcpyAttributes);
    uint8_t *data = cp + n * sizeof(struct chan_batch_copy);
    int64_t last = -1;
    uint32_t k = 0;
    for (size_t i = a; i < b; i++) {
        if (m[i].route != R_RECORD) continue;
        struct chan_batch_copy w = m[i].w;
        if ((int64_t)w.attr != last) {
            memcpy(at + k++ * sizeof(CUmemcpyAttributes), &attrs[w.attr], sizeof(*attrs));
            last = w.attr;
        }
        w.attr = k - 1;
        memcpy(cp, &w, sizeof(w));
        cp += sizeof(w);
        if (w.src_kind == CHAN_MEM_STAGED) {
            memcpy(data, (const void *)(uintptr_t)w.src, w.bytes);
            data += w.bytes;
        }
    }
    shim_req_send(&q);
    if (!reply) return CUDA_SUCCESS;
    const uint8_t *back;
    uint32_t got;
    if ((r = shim_req_wait(&q, &back, &got)) != CUDA_SUCCESS) return r;
    if (got < out) return CUDA_ERROR_UNKNOWN;
    for (size_t i = a; i < b; i++)
        if (m[i].route == R_RECORD && m[i].w.dst_kind == CHAN_MEM_STAGED) {
            memcpy((void *)(uintptr_t)m[i].w.dst, back, m[i].w.bytes);
            back += m[i].w.bytes;
        }
    return CUDA_SUCCESS;
}

/* Carries the planned batch: local members, the records, the engine's members. */
static CUresult carry(const struct member *m, size_t count, const CUmemcpyAttributes *attrs,
                      CUstream stream)
{
    CUresult r = CUDA_SUCCESS;
    int synced = 0;
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        if (m[i].route == R_LOCAL) {
            /* After the stream's earlier work (never NULL here: batch() refused it). */
            if (!synced++ && (r = cuStreamSynchronize(stream)) != CUDA_SUCCESS) return r;
            r = local_copy(&m[i]);
        }
    for (size_t a = 0; a < count && r == CUDA_SUCCESS;) {
        size_t b;
        uint32_t nattrs;
        uint64_t in, out;
        take(m, count, a, &b, &nattrs, &in, &out);
        if (b == a) b = a + 1; /* no R_RECORD member at a */
        r = send_record(m, a, b, nattrs, in, out, attrs, stream);
        a = b;
    }
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        if (m[i].route == R_ENGINE)
            r = shim_copy(shim_copy_unified(m[i].w.src), shim_copy_unified(m[i].w.dst),
                          m[i].w.bytes, stream, CHAN_CF_ASYNC);
    return r;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail,
                      CUstream stream)
{
    if (fail) *fail = CHAN_COPY_BATCH_NOIDX;
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS) return r;
    /* Documented: never the legacy NULL stream; the driver refuses NULL under a _ptsz twin
     * as well (580.159.04). */
    if (stream == CU_STREAM_LEGACY || stream == NULL) return CUDA_ERROR_INVALID_VALUE;
    if ((r = chan_copy_batch_check(dsts, srcs, sizes, count, attrs, idxs, nattrs)) != CUDA_SUCCESS)
        return r;
    struct member *m = calloc(count, sizeof(*m));
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    int staged = 0;
    size_t k = 0;
    /* A member refused ends the batch there: the members before it are copied all the same
     * and failIdx names it, as the driver does (580.159.04 moved a refused batch's first
     * members; tests/progs/copybatch.c prints what moved). */
    CUresult refused = CUDA_SUCCESS;
    size_t ok = count;
    for (size_t i = 0; i < count; i++) {
        while (k + 1 < nattrs && idxs[k + 1] <= i)
            k++;
        if ((refused = plan(dsts[i], srcs[i], sizes[i], k, &m[i])) != CUDA_SUCCESS) {
            if (fail) *fail = i;
            ok = i;
            break;
        }
        staged |= m[i].route != R_SKIP &&
                  (m[i].w.src_kind == CHAN_MEM_STAGED || m[i].w.dst_kind == CHAN_MEM_STAGED);
    }
    /* Pageable memory cannot be captured (memcpy.c). */
    if (ok && staged) r = shim_capture_refuse(stream);
    if (ok && r == CUDA_SUCCESS && (r = shim_mvar_work(stream)) == CUDA_SUCCESS) {
        r = carry(m, ok, attrs, stream);
        shim_mvar_worked(stream);
    }
    free(m);
    return r != CUDA_SUCCESS ? r : refused;
}

CUresult SHIM_IMPL(cuMemcpyBatchAsync)(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                       size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                       size_t numAttrs, size_t *failIdx, CUstream hStream)
{
    return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream);
}

CUresult SHIM_IMPL(cuMemcpyBatchAsync_v2)(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                          size_t count, CUmemcpyAttributes *attrs,
                                          size_t *attrsIdxs, size_t numAttrs, CUstream hStream)
{
    return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream);
}
