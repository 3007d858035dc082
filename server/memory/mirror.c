/* Mirrors: memory that another GPU's server of the pipe directory gave a client process,
 * mapped in this server at the address that server gave it, so that the process's work here
 * reaches it as natively a context with peer access reaches its peer's memory (issue 30).
 *
 * A process that uses two GPUs through their own servers (MPSSHIM_SERVER_PER_GPU_MOVE:
 * interpose/route.c) holds addresses of both. Natively one context reaches the other's
 * memory once peer access is enabled, and a copy between them needs nothing; here each
 * server's context knows only what was mapped in its own process. So the client asks the
 * memory's server for a legacy IPC handle of the allocation, and gives it to this one
 * (CHAN_IPC_OPEN_MIRROR), which asks that server for the descriptor of the whole mapping the
 * allocation lies in (`ipc_peer_mirror`, ipcpeer.c), imports it and maps it at the mapping's
 * own address, readable and writable from the client's device (interpose/mirror.c says when).
 *
 * Decisions, and why:
 *  - The same address: the process's pointers (in kernel parameters, in memory its kernels
 *    read) are the other server's. The address lies in that server's address zone, where
 *    this server places nothing of its own (server/core/zone.c reserves the region here).
 *  - The whole mapping: an arena's slab of 2 MiB holds other clients' blocks too, which this
 *    server's context can then reach; kernels of a shared context reach any address of it
 *    anyway (DESIGN.md, as on pre-Volta MPS). The descriptor itself never leaves the servers:
 *    the memory's server gives it to a sibling server alone (a peer running its own program:
 *    controlsock.c), for its client's process alone (the pid both servers see:
 *    srv_ipc_peer_mirror), so no client gets at a slab's other blocks any other way (a client
 *    asking with its own handle's secret and pid is refused: tests/server_per_gpu.sh).
 *  - One mapping for every client and allocation in it, counted (struct map), under
 *    map_lock: two allocations of one slab, or two processes' blocks of it, share it. A
 *    mapping found at the address is the same memory only when the other server names it by
 *    the same serial (its mappings' numbers); else the mirror is refused (that server reused
 *    the address after this one mapped the old memory: not while a record of it lives).
 *  - The client's record is an `opened` range of the allocation alone (not of the whole
 *    mapping): what the server's checks let the client copy to or from. Closing it
 *    (CHAN_IPC_CLOSE_MEM, which waits for the client's work here first) or the client leaving
 *    counts the mapping once less; the last one unmaps it.
 *  - The process's own physical memory (cuMemCreate's, granted to this server's device:
 *    srv_mirror_open_vmm) comes by a handle of the other server's, whose secret is the proof,
 *    as for any import (ipcpeer.c): mapped whole at the address the client names, which must
 *    lie in another server's zone (zone.c refuses any other, this server's own included); its
 *    identity is the handle's (nonce, id).
 *  - Not counted against the client's memory limit: the memory lies on the other GPU, where
 *    the other server charges its owner. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/registry.h"
#include "server/core/zone.h"
#include "server/memory/ipc.h"
#include "server/memory/ipcpeer.h"
#include "server/memory/mirror.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct map {
    uint64_t base, bytes, serial;
    CUmemGenericAllocationHandle h; /* the import's reference, held while mapped */
    int dev;
    unsigned refs;
    struct map *next;
};

/* A client's record of a mirrored allocation holds one count of its mapping. */
struct ref {
    struct srv_held held; /* first: the record's `held` */
    struct map *m;
};

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct map *maps;

/* map_lock held: the mapping's last count went. `leak`: its context died in a fault, and
 * the mapping with it; the address region is given back all the same. */
static void unmap(struct map *m, int leak)
{
    for (struct map **q = &maps; *q; q = &(*q)->next)
        if (*q == m) {
            *q = m->next;
            break;
        }
    if (!leak && srv_push_device(m->dev) == CUDA_SUCCESS) {
        CUresult r = DRV(cuMemUnmap)(m->base, m->bytes);
        if (r != CUDA_SUCCESS)
            srv_log("Unmapping another GPU's server's memory at %#llx failed with %s",
                    (unsigned long long)m->base, srv_errname(r));
        DRV(cuMemRelease)(m->h);
        srv_pop_device();
    }
    srv_zone_release_foreign(m->base, m->bytes);
    free(m);
}

static void ref_let_go(struct srv_client *c, struct srv_obj *o, int leaving, int leak)
{
    struct ref *x = (struct ref *)o->held;
    (void)c;
    (void)leaving;
    o->held = NULL;
    pthread_mutex_lock(&map_lock);
    if (!--x->m->refs) unmap(x->m, leak);
    pthread_mutex_unlock(&map_lock);
    free(x);
}

/* map_lock held: the mapping of the descriptor at of->base on dev, made or counted once more. */
static CUresult map_at(int fd, const struct srv_mirror_of *of, int dev, struct map **out)
{
    for (struct map *m = maps; m; m = m->next)
        if (m->base == of->base) {
            if (m->serial != of->serial || m->bytes != of->bytes || m->dev != dev)
                return CUDA_ERROR_ALREADY_MAPPED;
            m->refs++;
            *out = m;
            return CUDA_SUCCESS;
        }
    CUmemGenericAllocationHandle h = 0;
    CUresult r = DRV(cuMemImportFromShareableHandle)(&h, (void *)(intptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return r;
    struct map *m = calloc(1, sizeof(*m));
    if (!m) {
        DRV(cuMemRelease)(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((r = srv_zone_reserve_foreign(of->base, of->bytes)) != CUDA_SUCCESS) goto fail;
    if ((r = srv_push_device(dev)) == CUDA_SUCCESS) {
        if ((r = DRV(cuMemMap)(of->base, of->bytes, 0, h, 0)) == CUDA_SUCCESS &&
            (r = DRV(cuMemSetAccess)(of->base, of->bytes, &rw, 1)) != CUDA_SUCCESS)
            DRV(cuMemUnmap)(of->base, of->bytes);
        srv_pop_device();
    }
    if (r != CUDA_SUCCESS) {
        srv_zone_release_foreign(of->base, of->bytes);
        goto fail;
    }
    *m = (struct map){.base = of->base,
                      .bytes = of->bytes,
                      .serial = of->serial,
                      .h = h,
                      .dev = dev,
                      .refs = 1,
                      .next = maps};
    maps = m;
    *out = m;
    return CUDA_SUCCESS;
fail:
    DRV(cuMemRelease)(h);
    free(m);
    return r;
}

/* The client's record of the mirror of `of` (fd, closed here, its descriptor), made or
 * counted once more. */
static CUresult record(struct srv_client *c, int fd, const struct srv_mirror_of *of, int dev,
                       uint64_t *size, uint64_t *opens)
{
    struct srv_obj *o = srv_obj_lookup(c, SHIM_HT_MEM_OPENED, of->value);
    if (o && o->held && o->held->let_go == ref_let_go) {
        close(fd); /* mirrored for it already: one open more, closed once more */
        o->aux++;
        *size = o->size;
        *opens = o->aux;
        return CUDA_SUCCESS;
    }
    if (o) {
        close(fd);
        return CUDA_ERROR_ALREADY_MAPPED; /* an opened range of another kind there */
    }
    struct ref *x = calloc(1, sizeof(*x));
    struct map *m = NULL;
    pthread_mutex_lock(&map_lock);
    CUresult r = x ? map_at(fd, of, dev, &m) : CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&map_lock);
    close(fd);
    if (r != CUDA_SUCCESS) {
        SRV_LOG_ONCE("Client process %d: mapping another GPU's server's memory at its address "
                     "%#llx failed with %s (said once)",
                     (int)c->pid, (unsigned long long)of->base, srv_errname(r));
        free(x);
        return r;
    }
    *x = (struct ref){.held = {.let_go = ref_let_go}, .m = m};
    if (!(o = srv_range_add_held(c, SHIM_HT_MEM_OPENED, of->value, of->size, dev, &x->held)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *size = of->size;
    *opens = 1;
    return CUDA_SUCCESS;
}

CUresult srv_mirror_open(struct srv_client *c, uint64_t nonce, uint64_t id,
                         const uint8_t secret[16], uint64_t *value, uint64_t *size, uint64_t *opens)
{
    struct srv_mirror_of of;
    int fd = -1, dev = c->cur ? c->cur->device : 0;
    if (srv_ipc_peer_fetch_mirror(nonce, id, secret, c->pid, &fd, &of) != 0) {
        SRV_LOG_ONCE("Client process %d: memory no GPU's server of this pipe directory mirrors "
                     "here (not of this process, not of a server's arena, freed, or of a "
                     "server that is no GPU's): CUDA_ERROR_INVALID_VALUE (said once)",
                     (int)c->pid);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The sibling's word, checked all the same: the allocation inside the mapping. */
    if (!of.size || !of.bytes || of.value < of.base || of.value - of.base > of.bytes ||
        of.size > of.bytes - (of.value - of.base)) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *value = of.value;
    return record(c, fd, &of, dev, size, opens);
}

CUresult srv_mirror_open_vmm(struct srv_client *c, uint64_t nonce, uint64_t id,
                             const uint8_t secret[16], uint64_t at, uint64_t *size, uint64_t *opens)
{
    int fd = -1, dev = c->cur ? c->cur->device : 0;
    uint64_t bytes = 0;
    if (srv_ipc_peer_fetch(nonce, id, secret, &fd, &bytes) != 0 || !bytes) {
        if (fd >= 0) close(fd);
        SRV_LOG_ONCE("Client process %d: physical memory no GPU's server of this pipe directory "
                     "exported (freed, or forged): CUDA_ERROR_INVALID_VALUE (said once)",
                     (int)c->pid);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The whole of it, at the client's address (in the other server's zone: zone.c checks);
     * its identity the handle's (nonce, id), which its server never gives another. */
    struct srv_mirror_of of = {.base = at,
                               .bytes = bytes,
                               .value = at,
                               .size = bytes,
                               .serial = nonce ^ (id * 0x9e3779b97f4a7c15ull)};
    return record(c, fd, &of, dev, size, opens);
}
