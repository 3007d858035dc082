/* A client moved to its GPU's server (MPSSHIM_SERVER_PER_GPU_MOVE, conn.c): what it says
 * about its other devices. (A peer query before the first context is also noted for conn.c:
 * by default such a process stays with the pipe directory's server.) It still sees every device
 * (the first server's description), but its server holds one of them, its own, and could only
 * refuse the others as devices it was not given. So:
 *
 * - Peer queries (cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute) get the answers the
 *   pipe directory's server, which holds every device, published with its devices at the
 *   handshake (chan_devinfo.peer, kept with its description of them): the truth about the
 *   links. NCCL decides its transport from them: told "no access", two
 *   ranks on NVLinked GPUs took the shared-memory transport (11x slower than P2P for a
 *   256 MiB all_reduce on two H200s); told the truth, it shares memory by POSIX descriptors,
 *   which cross servers (server/memory/ipcpeer.c), at P2P's speed.
 * - cuMemSetAccess descriptors naming a device the memory's server does not hold are taken
 *   out, and the call succeeds when none is left. Access is a process's own: natively, this
 *   process granting device 1 access to memory of device 0 changes only what its own
 *   contexts on device 1 may touch. Where it has one, through device 1's own server (route.c),
 *   the memory is mapped there (mirror.c); where it has none, nothing of its is there to
 *   touch it (another process that uses device 1 maps the memory from a descriptor in its
 *   own server and grants its own access there, as NCCL's ranks do).
 *
 * A pair the first server's driver did not answer is forwarded, and the new server refuses
 * it as a device it does not have. */
#include "interpose/shim.h"

#include <pthread.h>
#include <string.h>

/* Two different devices of a moved process's (so one at least is another than its
 * server's). */
static int pair(CUdevice a, CUdevice b)
{
    int of;
    return shim_moved_ordinal(&of) >= 0 && a != b && a >= 0 && b >= 0 && a < of && b < of &&
           a < CHAN_MAX_DEVICES && b < CHAN_MAX_DEVICES;
}

static int peer_known(const void *const *argv)
{
    int *can = *(int *const *)argv[0];
    CUdevice a = *(const CUdevice *)argv[1], b = *(const CUdevice *)argv[2];
    if (a != b) shim_conn_peer_asked(); /* before its first context: it stays (conn.c) */
    if (!can || !pair(a, b) || !shim_conn.dev.peer[a][b].can_ok) return 0;
    *can = shim_conn.dev.peer[a][b].can;
    return 1;
}

const struct shim_hook shim_hook_moved_peer = {.known = peer_known};

static int p2p_known(const void *const *argv)
{
    int *value = *(int *const *)argv[0];
    CUdevice_P2PAttribute at = *(const CUdevice_P2PAttribute *)argv[1];
    CUdevice a = *(const CUdevice *)argv[2], b = *(const CUdevice *)argv[3];
    if (a != b) shim_conn_peer_asked();
    if (!value || at < 1 || at > CHAN_P2P_ATTRS || !pair(a, b) ||
        !shim_conn.dev.peer[a][b].p2p_ok[at - 1])
        return 0;
    *value = shim_conn.dev.peer[a][b].p2p[at - 1];
    return 1;
}

const struct shim_hook shim_hook_moved_p2p = {.known = p2p_known};

/* The connection whose server holds device d: a second GPU's server's own (route.c), the
 * moved one's for its device, else NULL. */
static struct shim_conn *serving(int d)
{
    int of, own = shim_moved_ordinal(&of);
    struct shim_conn *c = d >= 0 && d < CHAN_MAX_DEVICES
                              ? atomic_load_explicit(&shim_dev_conns[d], memory_order_acquire)
                              : NULL;
    return c ? c : d == own ? &shim_conn : NULL;
}

/* cuMemSetAccess(ptr, size, desc, count) without the descriptors naming a device that the
 * memory's server does not hold: in a process using two GPUs' servers, a grant of device 1 on
 * memory of device 1's server is kept (it goes there); one on device 0's memory is carried by
 * mapping that memory in device 1's server (mirror.c), said once where it cannot be (no
 * context on device 1 yet, or memory that cannot be exported).
 * The kept ones live here until the call returns on this thread. More descriptors than a
 * process has devices (repeats) are sent as they are, and refused there. */
static _Thread_local CUmemAccessDesc kept[CHAN_MAX_DEVICES];
static _Thread_local const CUmemAccessDesc *kept_at;
static _Thread_local size_t kept_n;

/* The call's descriptors (arguments desc_arg and desc_arg + 1: the array and its count) made
 * the n of `kept`, of count: a rewrite hook's answer. */
static int send_kept(const void **args, int desc_arg, size_t n, size_t count)
{
    if (n == count) return 0;
    if (n == 0) return 1; /* nothing left for the server */
    kept_at = kept;
    kept_n = n;
    args[desc_arg] = &kept_at;
    args[desc_arg + 1] = &kept_n;
    return 0;
}

static int access_rewrite(const void **args)
{
    const CUmemAccessDesc *desc = *(const CUmemAccessDesc *const *)args[2];
    size_t count = *(const size_t *)args[3], n = 0;
    int of;
    if (shim_moved_ordinal(&of) < 0 || !desc || count == 0 || count > CHAN_MAX_DEVICES) return 0;
    /* The memory's server: where the call goes (route.c routes it by the address). */
    struct shim_range rg;
    int dev = shim_range_find(*(const CUdeviceptr *)args[0], 1, &rg) == 0 && rg.ctx
                  ? shim_ctx_id_device(rg.ctx)
                  : shim_route_device();
    struct shim_conn *to = shim_conn_of_device(dev);
    for (size_t i = 0; i < count; i++) {
        int d = desc[i].location.id;
        /* Not a device of the process's (the server refuses it as the driver would), or
         * one the memory's server holds: the grant goes there. The first server's device is
         * not always that one: a process whose first context was device 1's grants device 1
         * access to device 0's memory (XLA grants every peer). */
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || d < 0 || d >= of ||
            d >= CHAN_MAX_DEVICES || serving(d) == to) {
            kept[n++] = desc[i];
        } else if (!serving(d) ||
                   shim_mirror_vmm(*(const CUdeviceptr *)args[0], d) != CUDA_SUCCESS) {
            /* No server of d's yet (no context there) holds anything to map it into; or it
             * could not be mapped there. */
            static _Atomic int said;
            if (!atomic_exchange(&said, 1))
                shim_log("cuMemSetAccess: device %d's access to memory of another GPU's server "
                         "of this process could not be granted: %s (said once)",
                         d,
                         !serving(d) ? "the process has no context on that device yet"
                                     : "that memory could not be mapped there (not made "
                                       "exportable as a POSIX descriptor, or not a mapping's "
                                       "start)");
        }
    }
    return send_kept(args, 2, n, count);
}

const struct shim_hook shim_hook_moved_access = {.rewrite = access_rewrite};

/* A memory pool's access for a device whose server is not the pool's (cuMemPoolGetAccess,
 * cuMemPoolSetAccess). Pool memory does not mirror between servers. So:
 * - where the process has no context on that device yet (no server of that GPU of its),
 *   nothing of it could touch the pool from there: the access it gives is kept here, read
 *   back by cuMemPoolGetAccess (PROT_NONE until given), and the call succeeds, as natively;
 *   a context on that device is then refused (conn.c asks, pool_split_refusal: the memory
 *   it was given access to would not be there), until the pool is destroyed;
 * - where it has one, a grant is sent to the pool's server, which refuses it
 *   (CUDA_ERROR_INVALID_DEVICE, said once in that server's log); taking access away there
 *   succeeds (none was given).
 * A process that uses one GPU and gives another access to its pools (mempool) runs as
 * natively; one that then uses the other GPU is told why it cannot. */

/* The access kept for pools, by pool and device: few pools give other GPUs access. */
#define POOL_GRANTS 64
static struct {
    uint64_t pool;
    CUmemAccess_flags flags[CHAN_MAX_DEVICES];
} grants[POOL_GRANTS];
static pthread_mutex_t grants_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool's row, made if `make`; -1 when it has none (or the table is full: the call is then
 * sent, and refused). */
static int grant_row(uint64_t pool, int make)
{
    int free_row = -1;
    for (int i = 0; i < POOL_GRANTS; i++) {
        if (grants[i].pool == pool) return i;
        if (!grants[i].pool && free_row < 0) free_row = i;
    }
    if (!make || free_row < 0) return -1;
    grants[free_row].pool = pool;
    memset(grants[free_row].flags, 0, sizeof(grants[free_row].flags));
    return free_row;
}

void shim_moved_pool_gone(uint64_t pool)
{
    pthread_mutex_lock(&grants_lock);
    int i = grant_row(pool, 0);
    if (i >= 0) grants[i].pool = 0;
    pthread_mutex_unlock(&grants_lock);
}

static const char *pool_split_refusal(void)
{
    const char *why = NULL;
    pthread_mutex_lock(&grants_lock);
    for (int i = 0; i < POOL_GRANTS && !why; i++)
        for (int d = 0; grants[i].pool && d < CHAN_MAX_DEVICES && !why; d++)
            if (grants[i].flags[d] != CU_MEM_ACCESS_FLAGS_PROT_NONE)
                why = "it gave a memory pool's access to another GPU (pool memory is not "
                      "carried between GPUs' servers)";
    pthread_mutex_unlock(&grants_lock);
    return why;
}

__attribute__((constructor)) static void hear_pool_splits(void)
{
    shim_conn_on_split(pool_split_refusal);
}

/* The pool's server: where its calls go (owned.c keeps the pools a moved process made; else
 * the thread's). */
static struct shim_conn *pool_server(CUmemoryPool pool)
{
    int dev;
    if (!shim_owned_device(SHIM_HT_CUmemoryPool, (uint64_t)(uintptr_t)pool, &dev))
        dev = shim_route_device();
    return shim_conn_of_device(dev);
}

/* Whether the location is a device of the moved process's whose server is not the pool's:
 * 1 with no server of that device's in the process, 2 with one. */
static int elsewhere(const CUmemLocation *at, CUmemoryPool pool)
{
    int of;
    if (shim_moved_ordinal(&of) < 0 || !at || at->type != CU_MEM_LOCATION_TYPE_DEVICE ||
        at->id < 0 || at->id >= of || at->id >= CHAN_MAX_DEVICES)
        return 0;
    struct shim_conn *c = serving(at->id);
    return c == pool_server(pool) ? 0 : c ? 2 : 1;
}

static int pool_access_known(const void *const *argv)
{
    CUmemAccess_flags *flags = *(CUmemAccess_flags *const *)argv[0];
    CUmemoryPool pool = *(const CUmemoryPool *)argv[1];
    const CUmemLocation *at = *(const CUmemLocation *const *)argv[2];
    if (!flags || !elsewhere(at, pool)) return 0;
    pthread_mutex_lock(&grants_lock);
    int i = grant_row((uint64_t)(uintptr_t)pool, 0);
    *flags = i >= 0 ? grants[i].flags[at->id] : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    pthread_mutex_unlock(&grants_lock);
    return 1;
}

const struct shim_hook shim_hook_moved_pool_access = {.known = pool_access_known};

static int pool_set_rewrite(const void **args)
{
    CUmemoryPool pool = *(const CUmemoryPool *)args[0];
    const CUmemAccessDesc *desc = *(const CUmemAccessDesc *const *)args[1];
    size_t count = *(const size_t *)args[2], n = 0;
    int of;
    if (shim_moved_ordinal(&of) < 0 || !desc || count == 0 || count > CHAN_MAX_DEVICES) return 0;
    uint64_t key = (uint64_t)(uintptr_t)pool;
    pthread_mutex_lock(&grants_lock);
    for (size_t i = 0; i < count; i++) {
        int where = elsewhere(&desc[i].location, pool), row;
        CUmemAccess_flags f = desc[i].flags;
        /* Only what a pool takes (none, read and write) is kept: another value is sent, and
         * refused there. */
        int valid = f == CU_MEM_ACCESS_FLAGS_PROT_NONE || f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (where == 1 && valid && (row = grant_row(key, f != CU_MEM_ACCESS_FLAGS_PROT_NONE)) >= 0)
            grants[row].flags[desc[i].location.id] = f; /* kept here (above) */
        else if (where == 2 && f == CU_MEM_ACCESS_FLAGS_PROT_NONE)
            ; /* taken away where none was given */
        else if (where != 1 || !valid || f != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            kept[n++] = desc[i]; /* the pool's server's own, or a grant it refuses */
    }
    pthread_mutex_unlock(&grants_lock);
    return send_kept(args, 1, n, count);
}

const struct shim_hook shim_hook_moved_pool_set = {.rewrite = pool_set_rewrite};
