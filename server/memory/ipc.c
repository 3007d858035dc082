/* IPC between clients of one server: cuIpcGetMemHandle / cuIpcOpenMemHandle /
 * cuIpcCloseMemHandle, cuIpcGetEventHandle / cuIpcOpenEventHandle, and physical memory
 * handles passed as POSIX file descriptors (cuMemExportToShareableHandle /
 * cuMemImportFromShareableHandle: the descriptor is a memfd holding our handle's bytes).
 *
 * All clients live in one real context, so an opened handle is the exporter's own address
 * or event: nothing is mapped and nothing is copied. What IPC adds is a grant: the opener
 * gets a registry record (a range of kind `opened`, a CUevent or a
 * CUmemGenericAllocationHandle record) that makes the
 * exporter's object one of its own for every check the server makes, and a share (struct
 * srv_share, below) that ties the records of both sides to the one real object.
 *
 * Decisions, and why:
 *  - A handle is the server's 64 bytes: a random per-server nonce, the share's id and a
 *    random 128-bit secret. A client can read any handle it is given, but cannot make one
 *    up: ids are guessable, secrets are not. A handle of a sibling server of this pipe
 *    directory (MPSSHIM_SERVER_PER_GPU) is asked of the siblings (ipcpeer.c): a physical
 *    handle, and memory with an arena mapping of its own, cross ("between servers", below).
 *    Any other handle of another server (or of a server that restarted), or of a process
 *    that is not a client at all, fails as a bad handle does natively:
 *    CUDA_ERROR_INVALID_VALUE.
 *  - The real object is freed only when nobody can reach it any more: when the exporter
 *    freed it (or left) AND every opener closed it (or left). Natively, freeing exported
 *    memory before the importers closed it is undefined; here it must not let the address
 *    go to another client while an opener can still name it (or run kernels on it).
 *  - Every opener of memory (or of a physical handle) is charged its bytes while it holds
 *    it, against its own limit, and an open that does not fit fails with
 *    CUDA_ERROR_OUT_OF_MEMORY: what a client can reach is what it may hold. (Charging only
 *    one opener once the exporter let go let a client keep 32 MiB of opened memory under a
 *    4 MiB limit: issue 34, S5.) The exporter is charged too while it holds its own.
 *  - The grant ends when either side leaves: an exporter that leaves revokes the openers'
 *    records (every call naming them fails from then on: srv_obj_find and srv_range_find
 *    skip revoked records), but the memory stays until the openers closed it or left, since
 *    their kernels may still touch it.
 *  - An explicit free or destroy by the exporter does not revoke (natively the openers
 *    keep a working mapping until they close it); new opens of the handle fail.
 *
 * Shares are the only server state that two clients' workers touch: everything in them is
 * guarded by ipc_lock, except `revoked`, which the openers' workers read without it. The
 * registry records themselves stay each worker's own. */
#include "server/core/server.h"
#include "server/code/codegate.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/memory/devmem.h"
#include "server/graphs/graph.h"
#include "server/memory/ipc.h"
#include "server/memory/ipcpeer.h"
#include "server/memory/mirror.h"
#include "server/memory/arena.h"
#include "server/core/zone.h"
#include "server/memory/managed.h"
#include "server/memory/memops.h"
#include "server/limits/account.h"
#include "server/memory/pools.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define IPC_MAGIC "mpsshIPC"

/* The handle's bytes (CU_IPC_HANDLE_SIZE at most). */
struct srv_ipc_handle {
    char magic[8];
    uint64_t nonce; /* this server's */
    uint64_t id;    /* the share's */
    uint32_t kind;  /* SHIM_HT_MEM_DEVICE, SHIM_HT_CUevent, SHIM_HT_CUmemGenericAllocationHandle */
    uint32_t pad;
    uint8_t secret[16];
    uint64_t size; /* memory: the allocation's bytes (informational) */
};
_Static_assert(sizeof(struct srv_ipc_handle) <= CU_IPC_HANDLE_SIZE, "IPC handle too large");

struct srv_share {
    /* First: the records' `held` points here. held.revoked: the exporter left, and the
     * openers' records no longer resolve. */
    struct srv_held held;
    uint64_t id;
    uint8_t secret[16];
    uint32_t kind;        /* the type of the exporter's record (see the handle) */
    uint64_t value, size; /* the real address (and its bytes) or event */
    uint64_t bytes;       /* memory counted for it against limits */
    int dev;
    struct srv_client *owner;    /* the exporter, while its record lives */
    int dead;                    /* its device's context died in a fault: nothing to destroy */
    int pooled;                  /* memory from the server's device pool (devmem.c) */
    struct srv_client **openers; /* clients holding an opened record, one entry each */
    int nopeners, capopeners;
    UT_hash_handle hh;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;

static struct srv_share *shares; /* by id */

uint64_t srv_shares_live(void)
{
    pthread_mutex_lock(&ipc_lock);
    uint64_t n = HASH_COUNT(shares);
    pthread_mutex_unlock(&ipc_lock);
    return n;
}

static uint64_t next_id;
static uint64_t nonce; /* 0 until the first handle is made */

static int random_bytes(void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = getrandom(b, n, 0);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Constant-time comparison: how many leading bytes of a forged secret are right must not
 * show in how long the refusal takes. */
static int secret_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;
    for (int i = 0; i < 16; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

static const char *what(const struct srv_share *s)
{
    return s->kind == SHIM_HT_CUevent                        ? "IPC event"
           : s->kind == SHIM_HT_CUmemGenericAllocationHandle ? "physical memory handle"
                                                             : "IPC memory";
}

/* The share a record holds, or NULL. */
static struct srv_share *share_of(const struct srv_obj *o)
{
    return (struct srv_share *)o->held;
}

/* ipc_lock held: the real object goes. Called on whichever worker let go last, so the
 * device's context is pushed for memory (the thread's current one may be another's). */
static void destroy_real(struct srv_share *s)
{
    CUresult r = CUDA_SUCCESS;
    if (s->dead) {
        /* It died with its context (fault.c): its address or handle may be another's now. */
    } else if (s->kind == SHIM_HT_CUevent) {
        r = DRV(cuEventDestroy_v2)((CUevent)(uintptr_t)s->value);
    } else if (s->kind == SHIM_HT_CUmemGenericAllocationHandle) {
        r = DRV(cuMemRelease)((CUmemGenericAllocationHandle)s->value);
    } else {
        r = srv_push_device(s->dev);
        if (r == CUDA_SUCCESS) {
            r = s->pooled ? srv_devmem_free_orphan(s->dev, s->value)
                          : DRV(cuMemFree_v2)((CUdeviceptr)s->value);
            srv_pop_device();
        }
    }
    if (r != CUDA_SUCCESS) srv_log("Freeing a shared %s failed with %s", what(s), srv_errname(r));
    HASH_DEL(shares, s);
    free(s->openers);
    free(s);
}

void srv_share_drop(struct srv_client *c, struct srv_obj *o, int leaving)
{
    srv_share_let_go(c, o, leaving, 0);
}

void srv_share_let_go(struct srv_client *c, struct srv_obj *o, int leaving, int leak)
{
    struct srv_share *s = share_of(o);
    if (!s) return;
    o->held = NULL;
    pthread_mutex_lock(&ipc_lock);
    if (s->owner == c) {
        /* The exporter's own record (an exporter never opens its own handle). */
        s->owner = NULL;
        if (leaving && s->nopeners) {
            atomic_store_explicit(&s->held.revoked, 1, memory_order_release);
            srv_log("Client process %d let go of the %s that %d other client(s) opened: "
                    "their grant ends%s",
                    (int)c->pid, what(s), s->nopeners,
                    s->kind == SHIM_HT_CUevent ? "" : "; the memory goes when they let go too");
        }
    } else {
        for (int i = 0; i < s->nopeners; i++)
            if (s->openers[i] == c) {
                memmove(&s->openers[i], &s->openers[i + 1],
                        (size_t)(s->nopeners - i - 1) * sizeof(*s->openers));
                s->nopeners--;
                break;
            }
    }
    if (!s->owner && !s->nopeners) {
        if (leak) { /* work may still touch it: the share goes, the object stays */
            HASH_DEL(shares, s);
            free(s->openers);
            free(s);
        } else {
            destroy_real(s);
        }
    }
    pthread_mutex_unlock(&ipc_lock);
}

/* A fault killed dev's context: every share there is dead (destroying it later would free
 * what the new context may have handed to someone else) and revoked, so that no opener
 * names it any more. Called before any worker lets go of its records. */
void srv_ipc_fault(int dev)
{
    pthread_mutex_lock(&ipc_lock);
    struct srv_share *s, *t;
    HASH_ITER(hh, shares, s, t)
        if (s->dev == dev) {
            s->dead = 1;
            atomic_store_explicit(&s->held.revoked, 1, memory_order_release);
        }
    pthread_mutex_unlock(&ipc_lock);
}

/* ---------------------------------------------------------------- export */

/* The share of the client's object o (made on first export), and its handle. */
static CUresult export(struct srv_client *c, struct srv_obj *o, uint32_t kind,
                       struct chan_ipc_reply *out)
{
    pthread_mutex_lock(&ipc_lock);
    if (!nonce && random_bytes(&nonce, sizeof(nonce)) != 0) {
        pthread_mutex_unlock(&ipc_lock);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    struct srv_share *s = share_of(o);
    if (!s) {
        if (!(s = calloc(1, sizeof(*s)))) {
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (random_bytes(s->secret, sizeof(s->secret)) != 0) {
            free(s);
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        s->held.let_go = srv_share_let_go;
        s->id = ++next_id;
        s->kind = kind;
        s->value = o->key.value;
        s->size = o->size;
        s->bytes = o->bytes;
        s->dev = o->dev >= 0 && o->dev < srv.ndev ? o->dev : 0;
        s->pooled = srv_devmem_pooled(o);
        s->owner = c;
        HASH_ADD(hh, shares, id, sizeof(s->id), s);
        o->held = &s->held;
    }
    struct srv_ipc_handle h = {.nonce = nonce, .id = s->id, .kind = kind, .size = s->size};
    memcpy(h.magic, IPC_MAGIC, sizeof(h.magic));
    memcpy(h.secret, s->secret, sizeof(h.secret));
    pthread_mutex_unlock(&ipc_lock);
    memset(out->handle, 0, sizeof(out->handle));
    memcpy(out->handle, &h, sizeof(h));
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- open */

/* ipc_lock held: shaped as ours, not made here. Most likely another server's (another pipe
 * directory's, or another GPU's under MPSSHIM_SERVER_PER_GPU: ipcpeer.c); else forged, which
 * looks the same. */
static int not_ours(const struct srv_ipc_handle *h)
{
    return memcmp(h->magic, IPC_MAGIC, sizeof(h->magic)) == 0 && (!nonce || h->nonce != nonce);
}

/* ipc_lock held: the live share a handle names, or NULL (with the driver's error). */
static struct srv_share *named(struct srv_client *c, const uint8_t *bytes, uint32_t kind,
                               CUresult *err)
{
    struct srv_ipc_handle h;
    memcpy(&h, bytes, sizeof(h));
    struct srv_share *s = NULL;
    *err = CUDA_ERROR_INVALID_VALUE;
    if (not_ours(&h)) return NULL; /* another server's: open_peer* came first (said there) */
    if (memcmp(h.magic, IPC_MAGIC, sizeof(h.magic)) != 0 || h.kind != kind) return NULL;
    HASH_FIND(hh, shares, &h.id, sizeof(h.id), s);
    if (!s || s->kind != kind || !secret_equal(s->secret, h.secret) || !s->owner)
        return NULL; /* never made, forged, or let go by its exporter */
    if (s->owner == c) {
        *err = CUDA_ERROR_INVALID_CONTEXT; /* the driver's answer in the exporting process */
        return NULL;
    }
    return s;
}

/* ipc_lock held: c holds an opened record of s from now on. */
static int add_opener(struct srv_share *s, struct srv_client *c)
{
    if (s->nopeners == s->capopeners) {
        int ncap = s->capopeners ? s->capopeners * 2 : 4;
        struct srv_client **n = realloc(s->openers, (size_t)ncap * sizeof(*n));
        if (!n) return -1;
        s->openers = n;
        s->capopeners = ncap;
    }
    s->openers[s->nopeners++] = c;
    return 0;
}

/* Opens the share a handle of `kind` names: the opener's record of it, made on the first
 * open (a range of kind `opened` for memory, else a record of the exporter's type), or
 * counted once more. Memory and physical handles count their opens in aux, each closed or
 * released once, as the driver counts them (vmm.c); an event is one record however often
 * it is opened (aux: its flags), which one destroy ends. */
static CUresult open_share(struct srv_client *c, const struct chan_ipc *m, uint32_t kind,
                           struct chan_ipc_reply *out)
{
    CUresult err;
    pthread_mutex_lock(&ipc_lock);
    struct srv_share *s = named(c, m->handle, kind, &err);
    if (!s) {
        pthread_mutex_unlock(&ipc_lock);
        return err;
    }
    int mem = kind == SHIM_HT_MEM_DEVICE;
    uint32_t type = mem ? SHIM_HT_MEM_OPENED : kind;
    struct srv_obj *o = srv_obj_lookup(c, type, s->value);
    err = CUDA_SUCCESS;
    if (o && share_of(o) == s) {
        if (kind != SHIM_HT_CUevent) o->aux++;
    } else if (o) {
        err = CUDA_ERROR_INVALID_VALUE; /* a revoked grant of an older share: cannot be */
    } else if (kind != SHIM_HT_CUevent && s->bytes && !srv_mem_fits(c, s->dev, s->bytes)) {
        err = CUDA_ERROR_OUT_OF_MEMORY; /* the opener pays for what it can reach */
    } else if (!(o = mem ? srv_range_add(c, type, s->value, s->size, 1, NULL)
                         : srv_obj_add(c, type, s->value, 1, NULL))) {
        err = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (add_opener(s, c) != 0) {
        srv_obj_destroyed(c, o);
        err = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        o->held = &s->held;
        o->dev = s->dev;
        if (kind != SHIM_HT_CUevent && s->bytes)
            srv_obj_count(c, o, s->dev, s->bytes); /* uncounted when the record goes */
        o->aux = mem                       ? 1
                 : kind == SHIM_HT_CUevent ? CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS
                                           : 0;
    }
    if (err == CUDA_SUCCESS) {
        out->value = s->value;
        out->size = s->size;
        out->opens = mem ? o->aux : 1;
    }
    pthread_mutex_unlock(&ipc_lock);
    return err;
}

/* ---------------------------------------------------------------- between servers */

/* not_ours, taking ipc_lock; *h gets the handle's bytes (copied before they are looked at). */
static int foreign(const uint8_t *bytes, struct srv_ipc_handle *h)
{
    memcpy(h, bytes, sizeof(*h));
    pthread_mutex_lock(&ipc_lock);
    int yes = not_ours(h);
    pthread_mutex_unlock(&ipc_lock);
    return yes;
}

CUresult srv_ipc_peer_export(uint64_t their_nonce, uint64_t id, const uint8_t secret[16], int *fd,
                             uint64_t *size)
{
    struct srv_share *s = NULL;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    if (nonce && their_nonce == nonce) HASH_FIND(hh, shares, &id, sizeof(id), s);
    /* What its exporter still holds: what it let go, no new open may take. */
    int live = s && secret_equal(s->secret, secret) && s->owner && !s->dead;
    if (live && s->kind == SHIM_HT_CUmemGenericAllocationHandle) {
        r = DRV(cuMemExportToShareableHandle)(fd, (CUmemGenericAllocationHandle)s->value,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        *size = s->size ? s->size : s->bytes; /* a physical handle's: its counted bytes */
    } else if (live && s->kind == SHIM_HT_MEM_DEVICE && s->pooled) {
        /* cuMemAlloc memory the server served, with an arena mapping of its own: that
         * mapping's bytes, so the descriptor gives the opener nothing of another client's
         * (arena.c; memory of the device pool, MPSSHIM_DEVICE_VMM=0, has none). */
        r = srv_arena_export(s->dev, s->value, size, fd);
    }
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

CUresult srv_ipc_peer_mirror(uint64_t their_nonce, uint64_t id, const uint8_t secret[16], pid_t pid,
                             int *fd, struct srv_mirror_of *out)
{
    struct srv_share *s = NULL;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    if (nonce && their_nonce == nonce) HASH_FIND(hh, shares, &id, sizeof(id), s);
    /* Memory its exporter still holds, of the arena, for the exporter's own process alone:
     * the mapping that goes may hold other clients' blocks (arena.c's slabs). */
    if (s && secret_equal(s->secret, secret) && s->owner && !s->dead &&
        s->kind == SHIM_HT_MEM_DEVICE && s->pooled && s->owner->pid == pid) {
        r = srv_arena_mirror_export(s->dev, s->value, s->size, &out->base, &out->bytes,
                                    &out->serial, fd);
        out->value = s->value;
        out->size = s->size;
    }
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

CUresult srv_ipc_peer_export_event(uint64_t their_nonce, uint64_t id, const uint8_t secret[16],
                                   uint8_t event[CU_IPC_HANDLE_SIZE])
{
    struct srv_share *s = NULL;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    if (nonce && their_nonce == nonce) HASH_FIND(hh, shares, &id, sizeof(id), s);
    if (s && secret_equal(s->secret, secret) && s->owner && !s->dead &&
        s->kind == SHIM_HT_CUevent && srv_push_device(s->dev) == CUDA_SUCCESS) {
        /* The real event is interprocess in a GPU's server (events.c); elsewhere the driver
         * refuses, and so does this. */
        CUipcEventHandle h;
        r = DRV(cuIpcGetEventHandle)(&h, (CUevent)(uintptr_t)s->value);
        if (r == CUDA_SUCCESS) memcpy(event, h.reserved, CU_IPC_HANDLE_SIZE);
        srv_pop_device();
    }
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

/* cuIpcOpenEventHandle of a sibling server's handle (a GPU's server under
 * MPSSHIM_SERVER_PER_GPU): the driver's own handle of that server's event, fetched as
 * open_peer's descriptor is (ipcpeer.c) and opened here in the client's context. The
 * client's record is then an event of its own, destroyed (cuEventDestroy) as one it made, as
 * natively the opener destroys what it opened; it cannot be exported again. */
static CUresult open_peer_event(struct srv_client *c, const struct srv_ipc_handle *h,
                                struct chan_ipc_reply *out)
{
    uint8_t bytes[CU_IPC_HANDLE_SIZE];
    if (!c->cur) return CUDA_ERROR_INVALID_CONTEXT;
    if (h->kind != SHIM_HT_CUevent ||
        srv_ipc_peer_fetch_event(h->nonce, h->id, h->secret, bytes) != 0) {
        SRV_LOG_ONCE("Client process %d: an IPC event handle no server of this pipe directory "
                     "can pass (another pipe directory's server's, one its exporter let go, one "
                     "of a server that is no GPU's, or forged): CUDA_ERROR_INVALID_VALUE (said "
                     "once)",
                     (int)c->pid);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUipcEventHandle ih;
    memcpy(ih.reserved, bytes, sizeof(ih.reserved));
    CUevent ev = NULL;
    CUresult r = DRV(cuIpcOpenEventHandle)(&ev, ih);
    if (r != CUDA_SUCCESS) return r;
    struct srv_obj *o = srv_obj_add(c, SHIM_HT_CUevent, (uint64_t)(uintptr_t)ev, 1, NULL);
    if (!o) {
        DRV(cuEventDestroy_v2)(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    o->dev = c->cur->device;
    o->aux = CU_EVENT_DISABLE_TIMING; /* not CU_EVENT_INTERPROCESS: not exported again */
    out->value = (uint64_t)(uintptr_t)ev;
    out->size = 0;
    out->opens = 1;
    return CUDA_SUCCESS;
}

/* cuMemImportFromShareableHandle of a sibling server's handle: the driver's descriptor of
 * the memory, fetched from that server (ipcpeer.c) and imported here; the client's record
 * is then a physical handle of its own, released (cuMemRelease) as one it made. */
static CUresult open_peer(struct srv_client *c, const struct srv_ipc_handle *h,
                          struct chan_ipc_reply *out)
{
    int fd = -1;
    uint64_t size = 0;
    if (h->kind != SHIM_HT_CUmemGenericAllocationHandle ||
        srv_ipc_peer_fetch(h->nonce, h->id, h->secret, &fd, &size) != 0) {
        SRV_LOG_ONCE("Client process %d: a physical memory handle no server of this pipe "
                     "directory knows (another pipe directory's server's, one its exporter let "
                     "go, or forged): CUDA_ERROR_INVALID_VALUE (said once)",
                     (int)c->pid);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUmemGenericAllocationHandle real = 0;
    CUresult r = DRV(cuMemImportFromShareableHandle)(&real, (void *)(intptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS) return r;
    struct srv_obj *o = srv_obj_lookup(c, SHIM_HT_CUmemGenericAllocationHandle, real);
    if (o && !o->held) {
        /* Imported before: the driver gave the same handle, one more reference of it. */
        o->aux++;
    } else if (o || !(o = srv_obj_add(c, SHIM_HT_CUmemGenericAllocationHandle, real, 1, NULL))) {
        DRV(cuMemRelease)(real);
        return o ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    out->value = real;
    out->size = size;
    out->opens = 1;
    return CUDA_SUCCESS;
}

/* A legacy IPC handle of a sibling server's memory, opened here: this server maps the
 * driver's descriptor of it (fetched as open_peer's) at an address of its own, readable and
 * writable from the opener's device. The opener's record (an `opened` range) holds the
 * mapping: closing it, or the opener leaving, unmaps it (the memory itself stays while the
 * exporter, or another opener, maps it: the driver counts the mappings). Each open maps
 * anew, at an address of its own; natively a second open of one handle in one context gives
 * the first address back. Not counted against the opener's limit: the memory lies on the
 * exporter's GPU, where the exporter is charged for it (as for open_peer). */
struct peer_map {
    struct srv_held held; /* first: the record's `held` */
    uint64_t va, bytes;
    int dev;
};

static void peer_map_let_go(struct srv_client *c, struct srv_obj *o, int leaving, int leak)
{
    struct peer_map *m = (struct peer_map *)o->held;
    (void)c;
    (void)leaving;
    o->held = NULL;
    /* leak: its context died in a fault, and the mapping with it. */
    if (!leak && srv_push_device(m->dev) == CUDA_SUCCESS) {
        if (DRV(cuMemUnmap)(m->va, m->bytes) == CUDA_SUCCESS) srv_zone_free(m->va, m->bytes);
        srv_pop_device();
    }
    free(m);
}

/* Maps the descriptor fd (bytes long) on dev: 0 with *va, else the driver's error. */
static CUresult map_peer(int fd, uint64_t bytes, int dev, uint64_t *va)
{
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr at = 0;
    CUresult r = DRV(cuMemImportFromShareableHandle)(&h, (void *)(intptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return r;
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((r = srv_push_device(dev)) == CUDA_SUCCESS) {
        if ((r = srv_zone_reserve(&at, bytes, 0)) == CUDA_SUCCESS) {
            if ((r = DRV(cuMemMap)(at, bytes, 0, h, 0)) == CUDA_SUCCESS &&
                (r = DRV(cuMemSetAccess)(at, bytes, &rw, 1)) != CUDA_SUCCESS)
                DRV(cuMemUnmap)(at, bytes);
            if (r != CUDA_SUCCESS) srv_zone_free(at, bytes);
        }
        srv_pop_device();
    }
    DRV(cuMemRelease)(h); /* the mapping holds the memory from here on */
    *va = at;
    return r;
}

static CUresult open_peer_mem(struct srv_client *c, const struct srv_ipc_handle *h,
                              struct chan_ipc_reply *out)
{
    int fd = -1, dev = c->cur ? c->cur->device : 0;
    uint64_t bytes = 0, va = 0;
    if (h->kind != SHIM_HT_MEM_DEVICE ||
        srv_ipc_peer_fetch(h->nonce, h->id, h->secret, &fd, &bytes) != 0 || !bytes) {
        if (fd >= 0) close(fd);
        SRV_LOG_ONCE("Client process %d: an IPC handle of memory no server of this pipe "
                     "directory can pass (another pipe directory's server's, one of 1 MiB or "
                     "less, which shares its mapping with other clients' memory, one its "
                     "exporter freed, or forged): CUDA_ERROR_INVALID_VALUE (said once)",
                     (int)c->pid);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct peer_map *m = calloc(1, sizeof(*m));
    CUresult r = m ? map_peer(fd, bytes, dev, &va) : CUDA_ERROR_OUT_OF_MEMORY;
    close(fd);
    if (r != CUDA_SUCCESS) {
        free(m);
        return r;
    }
    *m = (struct peer_map){
        .held = {.let_go = peer_map_let_go}, .va = va, .bytes = bytes, .dev = dev};
    /* The handle's size is the client's word: no more than what was mapped. */
    uint64_t size = h->size && h->size <= bytes ? h->size : bytes;
    if (!srv_range_add_held(c, SHIM_HT_MEM_OPENED, va, size, dev, &m->held))
        return CUDA_ERROR_OUT_OF_MEMORY;
    out->value = va;
    out->size = size;
    out->opens = 1;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- the operation */

void srv_op_ipc(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_ipc m;
    struct chan_ipc_reply out;
    memset(&out, 0, sizeof(out));
    CUresult res = CUDA_ERROR_INVALID_CONTEXT;
    (void)len;
    memcpy(&m, p, sizeof(m)); /* the payload is one (its %op row) */
    if (!c->cur) goto reply;
    res = CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *o;
    switch (m.what) {
    case CHAN_IPC_GET_MEM:
        /* Memory of cuMemAlloc / cuMemAllocPitch only, as natively (pool, virtual and
         * opened memory are refused); the handle names the whole allocation. */
        o = srv_range_find(c, m.value, 1);
        if (o && o->key.type == SHIM_HT_MEM_DEVICE) res = export(c, o, SHIM_HT_MEM_DEVICE, &out);
        break;
    case CHAN_IPC_OPEN_MEM: {
        /* The only flag there is asks for peer access, which one context has already. */
        struct srv_ipc_handle h;
        res = m.flags & ~(uint32_t)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS ? CUDA_ERROR_INVALID_VALUE
              : foreign(m.handle, &h)                                 ? open_peer_mem(c, &h, &out)
                                      : open_share(c, &m, SHIM_HT_MEM_DEVICE, &out);
        break;
    }
    case CHAN_IPC_CLOSE_MEM:
        /* Found by its base even when revoked: closing is how the opener lets go. */
        o = srv_obj_lookup(c, SHIM_HT_MEM_OPENED, m.value);
        if (!o) break;
        out.opens = --o->aux;
        if (!o->aux) {
            /* Its waits there end first (memops.c); work next, as cuMemFree waits for it:
             * the memory may go with this close. */
            srv_memops_end_range(c, o->key.value, o->size);
            if (srv_streams_drain(c, 0) != 0) {
                res = CUDA_ERROR_NOT_READY; /* it left meanwhile: its release sees to it */
                break;
            }
            srv_obj_release(c, o);
        }
        res = CUDA_SUCCESS;
        break;
    case CHAN_IPC_GET_EVENT:
        /* The client's own event made with CU_EVENT_INTERPROCESS (which implies
         * CU_EVENT_DISABLE_TIMING); an opened one is not its own to export. */
        o = srv_obj_find(c, SHIM_HT_CUevent, m.value);
        if (!o) {
            res = CUDA_ERROR_INVALID_HANDLE;
        } else if (o->owned && (o->aux & CU_EVENT_INTERPROCESS) &&
                   (!o->held || share_of(o)->owner == c)) {
            res = export(c, o, SHIM_HT_CUevent, &out);
        }
        break;
    case CHAN_IPC_OPEN_EVENT: {
        struct srv_ipc_handle h;
        res = foreign(m.handle, &h) ? open_peer_event(c, &h, &out)
                                    : open_share(c, &m, SHIM_HT_CUevent, &out);
        break;
    }
    case CHAN_IPC_GET_VMM: {
        /* The client's own handle (not one it imported), of memory made exportable as a
         * POSIX file descriptor, as the driver requires. */
        CUmemAllocationProp prop;
        o = srv_obj_find(c, SHIM_HT_CUmemGenericAllocationHandle, m.value);
        if (!o || (o->held && share_of(o)->owner != c) ||
            m.flags != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
            break;
        memset(&prop, 0, sizeof(prop));
        if (DRV(cuMemGetAllocationPropertiesFromHandle)(&prop, m.value) != CUDA_SUCCESS ||
            !(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
            break;
        res = export(c, o, SHIM_HT_CUmemGenericAllocationHandle, &out);
        break;
    }
    case CHAN_IPC_OPEN_MIRROR: {
        /* Only another GPU's server's handle: this server's memory is at its address here. */
        struct srv_ipc_handle h;
        if (!foreign(m.handle, &h))
            res = CUDA_ERROR_INVALID_VALUE;
        else if (h.kind == SHIM_HT_MEM_DEVICE)
            res = srv_mirror_open(c, h.nonce, h.id, h.secret, &out.value, &out.size, &out.opens);
        else if (h.kind == SHIM_HT_CUmemGenericAllocationHandle)
            res = srv_mirror_open_vmm(c, h.nonce, h.id, h.secret, m.value, &out.size, &out.opens);
        if (res == CUDA_SUCCESS && h.kind == SHIM_HT_CUmemGenericAllocationHandle)
            out.value = m.value;
        break;
    }
    case CHAN_IPC_OPEN_VMM: {
        struct srv_ipc_handle h;
        res = foreign(m.handle, &h) ? open_peer(c, &h, &out)
                                    : open_share(c, &m, SHIM_HT_CUmemGenericAllocationHandle, &out);
        break;
    }
    default:
        break;
    }
reply:
    if (res == CUDA_SUCCESS) memcpy(srv_lane_data(c, r->lane), &out, sizeof(out));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? (uint32_t)sizeof(out) : 0);
}

/* ---------------------------------------------------------------- hooks */

/* cuMemFree of managed memory is managed.c's (host memory, not the driver's to free); of
 * memory from the client's pools, pools.c's (srv_pool_mem_free: the pool is no spare then).
 * cuMemFree / cuMemFreeAsync of exported memory: the exporter's record goes, the memory
 * stays while openers hold it (srv_share_drop). */
static struct srv_obj *exported(struct srv_client *c, uint64_t base)
{
    struct srv_obj *o = base ? srv_range_find(c, base, 0) : NULL;
    return o && o->key.value == base && o->held ? o : NULL;
}

/* The client's free of exported memory: its own queued work first, as any cuMemFree of its
 * waits for it (devmem.c), since with no opener left the memory goes back to the arena at
 * once, for any client to be given (every allocation a process of two GPUs' servers
 * mirrored is exported: mirror.c); then its record lets go of the share. */
static CUresult exported_free(struct srv_client *c, struct srv_obj *o)
{
    if (srv_streams_drain(c, 0) != 0) return CUDA_ERROR_NOT_READY;
    srv_share_drop(c, o, 0);
    return CUDA_SUCCESS;
}

static CUresult mem_free_call(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_MEM_MANAGED, k->vals[0]);
    if (o) return srv_managed_free(c, o);
    o = exported(c, k->vals[0]);
    if (o) return exported_free(c, o);
    o = srv_obj_find(c, SHIM_HT_MEM_POOLED, k->vals[0]);
    if (o) return srv_pool_mem_free(c, o);
    k->keep = srv_graphmem_keep(c, k->vals[0]);
    o = srv_obj_find(c, SHIM_HT_MEM_DEVICE, k->vals[0]);
    if (srv_devmem_pooled(o))
        return srv_devmem_free(c, o);                  /* never waits for the context (devmem.c) */
    return srv_gated_free(c, (CUdeviceptr)k->vals[0]); /* waits for it: codegate.c */
}

const struct srv_hook srv_hook_mem_free = {.call = mem_free_call};

static CUresult mem_free_async_call(struct srv_client *c, struct srv_call *k)
{
    /* Captured: a free node when the graph runs, not a free now (graphmem.c). */
    if (k->stream && srv_stream_capturing(c, k->stream)) return srv_graphmem_capture_free(c, k);
    struct srv_obj *o = exported(c, k->vals[0]);
    if (o) return exported_free(c, o); /* no stream-ordered free: after all of its work */
    k->keep = srv_graphmem_keep(c, k->vals[0]);
    o = srv.device_vmm ? srv_obj_find(c, SHIM_HT_MEM_DEVICE, k->vals[0]) : NULL;
    if (srv_devmem_pooled(o)) /* the arena's: no stream-ordered free (devmem.c) */
        return srv_devmem_free_after(c, o);
    return DRV(cuMemFreeAsync)((CUdeviceptr)k->vals[0], (CUstream)(uintptr_t)k->vals[1]);
}

const struct srv_hook srv_hook_mem_free_async = {.call = mem_free_async_call};

const struct srv_family srv_family_ipc = {.name = "ipc", .dev_fault = srv_ipc_fault};
