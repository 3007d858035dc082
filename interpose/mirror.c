/* Memory between the GPUs' servers of one process (issue 30): a process moved to its GPUs'
 * servers (conn.c, route.c) holds device memory of each, but each server's context maps only
 * its own. Natively a context reaches another's memory once peer access is enabled
 * (cuCtxEnablePeerAccess), and copies between two devices' memory need nothing. Here the
 * memory of one server is mirrored in another: mapped there at its own address
 * (server/memory/mirror.c), asked with a legacy IPC handle of the allocation made by its
 * server and given to the other (CHAN_IPC_OPEN_MIRROR), which fetches the mapping's
 * descriptor from the first itself.
 *
 * When:
 *  - cuCtxEnablePeerAccess(peer) with the thread's context on another server than peer's:
 *    the pair is kept here (the servers know none of it), and every device allocation the
 *    process has on peer's server is mirrored in the current context's at once; every one
 *    made there later, as it is made (shim_mirror_made), while the pair lasts. Disabling
 *    forgets the pair; what is mirrored stays mapped until freed (more than natively, where
 *    the peer's memory becomes unreachable).
 *  - A copy whose device side lies on another server than the copy's (memcpy.c): that side
 *    is mirrored in the copy's server first, peer access or not, as natively a copy between
 *    devices needs none.
 *  - Before the memory is freed on its server, each mirror of it is closed (which waits for
 *    the process's work in that server, as a free waits for the work that may use it).
 *  - The process's own physical memory (cuMemCreate, mapped with cuMemMap) granted to a
 *    device of another server (cuMemSetAccess, as NCCL's ranks in one process grant each
 *    other's GPU): the whole physical allocation mirrored there at the mapping's address
 *    (shim_mirror_vmm, from moved.c), when it was made exportable as a POSIX descriptor.
 * Memory of a GPU's server's arena (cuMemAlloc's, the default) and exportable physical memory
 * mirror: other memory (stream-ordered pools) answers the server's refusal, said once here.
 *
 * Mirrors are made one at a time (mirror_lock, held over their round trips) so that a
 * mirror is made once however many threads ask. */
#include "interpose/shim.h"

#include <stdlib.h>

#define MAX_PAIRS 64 /* the server's own limit of a client's pairs (server/memory/peer.c) */

static pthread_mutex_t mirror_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint32_t ctx, peer;
} pairs[MAX_PAIRS]; /* under mirror_lock */
static _Atomic int npairs;

/* An allocation mirrored in another server: where it must be closed before it is freed. */
struct mirrored {
    uint64_t base;
    struct shim_conn *in; /* the server it is mirrored in */
    int dev;              /* through that device's context */
    uint32_t ctx;
    uint32_t yctx; /* the context it was allocated in, on its own server */
    struct mirrored *next;
};
static struct mirrored *mirrored; /* under mirror_lock */
static _Atomic int nmirrored;

static struct shim_conn *conn_of_ctx(uint32_t ctx)
{
    int dev = shim_ctx_id_device(ctx);
    return dev >= 0 ? shim_conn_of_device(dev) : NULL;
}

/* mirror_lock held: m (allocated) records the mirror of memory at base, made in context
 * yctx, through context xctx of device xdev's server. */
static void remember(struct mirrored *m, uint64_t base, int xdev, uint32_t xctx, uint32_t yctx)
{
    *m = (struct mirrored){.base = base,
                           .in = shim_conn_of_device(xdev),
                           .dev = xdev,
                           .ctx = xctx,
                           .yctx = yctx,
                           .next = mirrored};
    mirrored = m;
    atomic_fetch_add(&nmirrored, 1);
}

/* mirror_lock held: rg (a device allocation of another server's) mirrored through context xctx
 * of its server, or already. */
static CUresult mirror_into(uint32_t xctx, const struct shim_range *rg)
{
    int xdev = shim_ctx_id_device(xctx), ydev = shim_ctx_id_device(rg->ctx);
    struct shim_conn *x = xdev >= 0 ? shim_conn_of_device(xdev) : NULL;
    if (!x || ydev < 0 || shim_conn_of_device(ydev) == x) return CUDA_ERROR_INVALID_CONTEXT;
    for (struct mirrored *m = mirrored; m; m = m->next)
        if (m->base == rg->base && m->in == x) return CUDA_SUCCESS;
    if (rg->kind != SHIM_HT_MEM_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
    struct mirrored *m = calloc(1, sizeof(*m));
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    struct shim_route saved;
    CUipcMemHandle h;
    uint64_t value = 0;
    shim_route_begin(&saved, ydev, rg->ctx);
    CUresult r = cuIpcGetMemHandle(&h, rg->base);
    shim_route_end(&saved);
    if (r == CUDA_SUCCESS) {
        shim_route_begin(&saved, xdev, xctx);
        r = shim_ipc_mirror_open((const uint8_t *)h.reserved, 0, &value);
        shim_route_end(&saved);
    }
    if (r != CUDA_SUCCESS || value != rg->base) {
        static _Atomic int said;
        const char *name = NULL;
        if (r == CUDA_SUCCESS) r = CUDA_ERROR_INVALID_VALUE; /* cannot be: the server's word */
        cuGetErrorName(r, &name);
        if (!atomic_exchange(&said, 1))
            shim_log("device memory at %#llx of one GPU's server could not be mapped in another's "
                     "(%s; only cuMemAlloc's memory is): its peer access and copies between them "
                     "fail (said once)",
                     (unsigned long long)rg->base, name ? name : "?");
        free(m);
        return r;
    }
    remember(m, rg->base, xdev, xctx, rg->ctx);
    return CUDA_SUCCESS;
}

CUresult shim_mirror_here(const struct shim_range *rg)
{
    uint32_t ctx = shim_route_ctx();
    pthread_mutex_lock(&mirror_lock);
    CUresult r = mirror_into(ctx, rg);
    pthread_mutex_unlock(&mirror_lock);
    return r;
}

void shim_mirror_made(const struct shim_range *rg)
{
    if (!atomic_load(&npairs) || rg->kind != SHIM_HT_MEM_DEVICE) return;
    struct shim_conn *y = conn_of_ctx(rg->ctx);
    pthread_mutex_lock(&mirror_lock);
    for (int i = 0; i < atomic_load(&npairs); i++)
        if (conn_of_ctx(pairs[i].peer) == y) (void)mirror_into(pairs[i].ctx, rg);
    pthread_mutex_unlock(&mirror_lock);
}

/* mirror_lock held: the mirrors of memory at [base, base + len) (len 0: none) or made in
 * context yctx (0: none), closed; those made through context xctx (its records went with it
 * there), forgotten. */
static void forget(uint64_t base, uint64_t len, uint32_t yctx, uint32_t xctx)
{
    for (struct mirrored **q = &mirrored; *q;) {
        struct mirrored *m = *q;
        int close = (len && m->base >= base && m->base - base < len) || (yctx && m->yctx == yctx);
        if (!close && !(xctx && m->ctx == xctx)) {
            q = &m->next;
            continue;
        }
        if (close && m->ctx != xctx) {
            struct shim_route saved;
            shim_route_begin(&saved, m->dev, m->ctx);
            (void)shim_ipc_mirror_close(m->base); /* else held there until the process leaves */
            shim_route_end(&saved);
        }
        *q = m->next;
        free(m);
        atomic_fetch_sub(&nmirrored, 1);
    }
}

void shim_mirror_freeing(uint64_t base)
{
    if (!atomic_load(&nmirrored)) return;
    pthread_mutex_lock(&mirror_lock);
    forget(base, 1, 0, 0);
    pthread_mutex_unlock(&mirror_lock);
}

void shim_mirror_unmapped(uint64_t base, uint64_t len)
{
    if (!atomic_load(&nmirrored)) return;
    pthread_mutex_lock(&mirror_lock);
    forget(base, len, 0, 0);
    pthread_mutex_unlock(&mirror_lock);
}

/* A context goes (before its server hears): its pairs end with it, as the driver's do; the
 * mirrors of memory made in it are closed, and those made through it forgotten. */
static void ctx_gone(CUcontext c)
{
    uint32_t id = 0;
    int dev;
    if (!atomic_load(&npairs) && !atomic_load(&nmirrored)) return;
    if (shim_ctx_lookup(c, &id, &dev) != CUDA_SUCCESS || !id) return;
    pthread_mutex_lock(&mirror_lock);
    for (int i = 0; i < atomic_load(&npairs);) {
        int n = atomic_load(&npairs);
        if (pairs[i].ctx == id || pairs[i].peer == id) {
            pairs[i] = pairs[n - 1];
            atomic_store(&npairs, n - 1);
        } else {
            i++;
        }
    }
    forget(0, 0, id, id);
    pthread_mutex_unlock(&mirror_lock);
}

__attribute__((constructor)) static void on_ctx_gone(void)
{
    shim_ctx_on_destroy(ctx_gone);
}

CUresult shim_mirror_vmm(uint64_t ptr, int xdev)
{
    struct shim_range rg;
    int slot = shim_range_slot(ptr, &rg);
    if (slot < 0 || rg.base != ptr || rg.kind != SHIM_HT_MEM_MAPPED)
        return CUDA_ERROR_INVALID_VALUE; /* the start of a mapping of the process's, only */
    /* Mappings are no context's (context-free ranges): their server is the table's, and the
     * calls go through the primary contexts of the two devices (ids 1.. are theirs): what a
     * runtime program, NCCL's in-process ranks, has current there. */
    int ydev = shim_slot_device(slot);
    uint32_t xctx = (uint32_t)xdev + 1;
    struct shim_conn *x = shim_conn_of_device(xdev);
    if (ydev < 0 || shim_conn_of_device(ydev) == x) return CUDA_ERROR_INVALID_VALUE;
    rg.ctx = (uint32_t)ydev + 1;
    pthread_mutex_lock(&mirror_lock);
    CUresult r = CUDA_SUCCESS;
    for (struct mirrored *m = mirrored; m; m = m->next)
        if (m->base == ptr && m->in == x) goto out;
    struct mirrored *m = calloc(1, sizeof(*m));
    if (!m) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* On its server: the physical memory mapped there, as a handle another server can ask
     * for (its creator must have asked for POSIX descriptors, as NCCL does). */
    struct shim_route saved;
    CUmemGenericAllocationHandle h = 0;
    uint8_t bytes[CU_IPC_HANDLE_SIZE];
    uint64_t value = 0;
    shim_route_begin(&saved, ydev, rg.ctx);
    r = cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)ptr);
    if (r == CUDA_SUCCESS) {
        r = shim_phys_handle_bytes(h, bytes);
        cuMemRelease(h);
    }
    shim_route_end(&saved);
    if (r == CUDA_SUCCESS) {
        shim_route_begin(&saved, xdev, xctx);
        r = shim_ipc_mirror_open(bytes, ptr, &value);
        shim_route_end(&saved);
    }
    if (r != CUDA_SUCCESS) {
        free(m);
        goto out;
    }
    remember(m, ptr, xdev, xctx, rg.ctx);
out:
    pthread_mutex_unlock(&mirror_lock);
    return r;
}

/* mirror_lock held: the index of pair (ctx, peer), or -1. */
static int pair_at(uint32_t ctx, uint32_t peer)
{
    for (int i = 0; i < atomic_load(&npairs); i++)
        if (pairs[i].ctx == ctx && pairs[i].peer == peer) return i;
    return -1;
}

/* Every device allocation of peer's server, mirrored through ctx's (mirror_lock held). */
static void mirror_all(uint32_t ctx, uint32_t peer)
{
    struct shim_conn *y = conn_of_ctx(peer);
    struct shim_range *list = NULL;
    int n = y ? shim_range_list(y->slot, SHIM_HT_MEM_DEVICE, &list) : 0;
    for (int i = 0; i < n; i++)
        if (conn_of_ctx(list[i].ctx) == y) (void)mirror_into(ctx, &list[i]);
    free(list);
}

static CUresult enable(uint32_t ctx, uint32_t peer, unsigned flags)
{
    int a = shim_ctx_id_device(ctx), b = shim_ctx_id_device(peer), can = 0;
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    if (a < 0 || b < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (a == b) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    CUresult r = cuDeviceCanAccessPeer(&can, a, b); /* as the first server said (moved.c) */
    if (r != CUDA_SUCCESS) return r;
    if (!can) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    pthread_mutex_lock(&mirror_lock);
    int n = atomic_load(&npairs);
    if (pair_at(ctx, peer) >= 0) {
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    } else if (n == MAX_PAIRS) {
        r = CUDA_ERROR_TOO_MANY_PEERS;
    } else {
        pairs[n].ctx = ctx;
        pairs[n].peer = peer;
        atomic_store(&npairs, n + 1);
        mirror_all(ctx, peer);
    }
    pthread_mutex_unlock(&mirror_lock);
    return r;
}

static CUresult disable(uint32_t ctx, uint32_t peer)
{
    pthread_mutex_lock(&mirror_lock);
    int i = pair_at(ctx, peer), n = atomic_load(&npairs);
    if (i >= 0) {
        pairs[i] = pairs[n - 1];
        atomic_store(&npairs, n - 1);
    }
    pthread_mutex_unlock(&mirror_lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

static int peer_call(const struct shim_call *d, const uint64_t *val, CUresult *err)
{
    int en = d == &shim_calls[SHIM_ID_cuCtxEnablePeerAccess];
    if (!en && d != &shim_calls[SHIM_ID_cuCtxDisablePeerAccess]) return 0;
    uint32_t ctx = shim_current_ctx_id(), peer = (uint32_t)val[0];
    struct shim_conn *a = conn_of_ctx(ctx), *b = conn_of_ctx(peer);
    if (!ctx || !peer || !a || !b || a == b) return 0; /* one server's: it answers */
    *err = en ? enable(ctx, peer, (unsigned)val[1]) : disable(ctx, peer);
    return 1;
}

__attribute__((constructor)) static void tell_route(void)
{
    shim_route_on_peer_call(peer_call);
}
