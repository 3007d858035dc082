/* Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap and the rest),
 * described in cuda_symbols.txt; what no description can say is here.
 *
 * A client's physical allocations (handles), its reservations of address space and its
 * mappings are registry objects: a mapping belongs to the reservation it lies in and goes
 * before it when the client leaves (the driver frees no reservation that is still
 * mapped). A client maps only into its own reservations: in the one shared context another
 * client's reserved addresses would take its mapping, and its memory would appear inside
 * that client's address range. Physical memory counts against the client's limit from
 * cuMemCreate until it is released; released while still mapped, it lives on (the driver
 * frees it with its last mapping), and so does its count, carried by a mapping of it.
 *
 * Unmapping and freeing address space wait for the client's work queued before them, on the
 * GPU, not on the host (srv_later, devmem.c). Why: the driver unmaps at once, and in one shared
 * context the addresses freed go to the next reservation of any client. A client that unmapped,
 * released and freed a range while its copy of the range was still queued read another client's
 * secret once that client had mapped memory of its own there (tests/progs/free_order --vmm;
 * natively the copy faults, in the process's own context: issue 34, S11; bench/NOTES.md, "Unmap
 * under queued work"). So the driver's unmap and free are done once an event behind all the
 * client's earlier work has completed; the client's records go at once, as natively. A map into
 * the client's own reservation first carries out the unmaps still pending there (waiting for
 * their work, which natively would have had its mapping pulled from under it). */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/registry.h"
#include "server/core/devices.h"
#include "server/memory/devmem.h"
#include "server/memory/memops.h"
#include "server/limits/account.h"
#include "server/core/zone.h"

#include <string.h>

/* The device whose free stream orders the client's unmaps and address frees. */
static int later_dev(struct srv_client *c)
{
    int dev = c->cur ? c->cur->device : srv_dev_any(c);
    return dev >= 0 ? dev : 0;
}

/* A reservation that names no address is placed in this server's address zone (zone.c), so
 * that the servers of the GPUs a process uses never hand it one address twice; one that names
 * an address is the driver's to grant, as natively. */
static CUresult reserve_call(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    CUdeviceptr *out = (CUdeviceptr *)(uintptr_t)k->vals[0];
    if (k->vals[3] || k->vals[4] || !out || !srv_zone_no()) return k->drive(k);
    return srv_zone_reserve(out, k->vals[1], k->vals[2]);
}

const struct srv_hook srv_hook_vmm_reserve = {.call = reserve_call};

/* Physical memory lives on the device its properties name: pinned device memory only
 * (host and managed locations would be memory the client cannot see). */
static CUresult create_before(struct srv_client *c, struct srv_call *k)
{
    const CUmemAllocationProp *prop = k->a.ptr[2];
    if (!prop) return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->location.id < 0 || prop->location.id >= srv.ndev) return CUDA_ERROR_INVALID_DEVICE;
    k->dev = prop->location.id;
    return srv_mem_fits(c, k->dev, k->a.val[1]) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult create_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o =
        srv_obj_find(c, SHIM_HT_CUmemGenericAllocationHandle, *(uint64_t *)k->a.ptr[0]);
    if (o) {
        o->dev = k->dev;
        srv_obj_count(c, o, k->dev, k->a.val[1]);
    }
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_vmm_create = {.before = create_before, .after = create_after};

/* A mapping of the physical allocation `handle` other than `not`, or NULL. */
static struct srv_obj *mapping_of(struct srv_client *c, uint64_t handle, struct srv_obj * not)
{
    for (struct srv_obj *m = srv_objs_of(c, SHIM_HT_MEM_MAPPED); m; m = m->type_next)
        if (m->aux == handle && m != not) return m;
    return NULL;
}

/* Moves the memory count `from` carries to `to` (the counters do not change). */
static void carry_count(struct srv_obj *from, struct srv_obj *to)
{
    if (!to || !from->bytes || to->bytes) return;
    to->bytes = from->bytes;
    to->dev = from->dev;
    from->bytes = 0;
}

/* Released while mapped: the memory lives on until its last mapping goes, counted there. */
static CUresult release_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *h = srv_obj_find(c, SHIM_HT_CUmemGenericAllocationHandle, k->a.val[0]);
    if (h) carry_count(h, mapping_of(c, h->key.value, NULL));
    return CUDA_SUCCESS;
}

/* One cuMemRelease of the client's handle. A record holds one reference of the driver's
 * however often the client retained or imported it: aux counts the others, and releasing
 * one of those only counts down. The last one releases the driver's (an IPC-shared handle
 * goes when every side let go, ipc.c). */
static CUresult release_call(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *h = srv_obj_find(c, SHIM_HT_CUmemGenericAllocationHandle, k->a.val[0]);
    if (h && h->aux) {
        h->aux--;
        k->keep = 1;
        return CUDA_SUCCESS;
    }
    if (h && h->held) {
        h->held->let_go(c, h, 0, 0);
        return CUDA_SUCCESS;
    }
    return DRV(cuMemRelease)(k->vals[0]);
}

static CUresult release_after_call(struct srv_client *c, struct srv_call *k)
{
    return k->keep ? CUDA_SUCCESS : release_after(c, k);
}

const struct srv_hook srv_hook_vmm_release = {.call = release_call, .after = release_after_call};

/* cuMemRetainAllocationHandle: only of memory mapped in the client's own reservations.
 * A handle the client still holds is counted in its record (aux) and the driver's new
 * reference given back at once; else the driver's reference is the new record's. */
static CUresult retain_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *m = srv_range_find(c, k->a.val[1], 1);
    return m && m->key.type == SHIM_HT_MEM_MAPPED ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult retain_call(struct srv_client *c, struct srv_call *k)
{
    CUmemGenericAllocationHandle *out = (CUmemGenericAllocationHandle *)(uintptr_t)k->vals[0];
    CUresult r = DRV(cuMemRetainAllocationHandle)(out, (void *)(uintptr_t)k->vals[1]);
    if (r != CUDA_SUCCESS) return r;
    struct srv_obj *h = srv_obj_find(c, SHIM_HT_CUmemGenericAllocationHandle, *out);
    if (h) {
        h->aux++;
        DRV(cuMemRelease)(*out);
    }
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_vmm_retain = {.before = retain_before, .call = retain_call};

/* Only into a reservation of the client's own, which the mapping then belongs to (and
 * unmapping only there). */
static CUresult map_before(struct srv_client *c, struct srv_call *k)
{
    uint64_t base = k->a.val[0], size = k->a.val[1], end;
    if (__builtin_add_overflow(base, size, &end)) return CUDA_ERROR_INVALID_VALUE;
    /* Its unmaps still waiting for its work first, or the driver would find it mapped. */
    if (srv_later_pending(c) && k->id != SHIM_ID_cuMemUnmap) srv_later_reap(c, 1);
    for (struct srv_obj *r = srv_objs_of(c, SHIM_HT_MEM_RESERVED); r; r = r->type_next)
        if (base >= r->key.value && end <= r->key.value + r->size) {
            k->parent = r;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* The mapping remembers its physical allocation (to carry its count, see above). */
static CUresult map_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *m = srv_obj_find(c, SHIM_HT_MEM_MAPPED, k->a.val[0]);
    if (m) m->aux = k->a.val[3];
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_vmm_map = {.before = map_before, .after = map_after};

/* Forgets the mappings in [base, base + size) the driver just unmapped (or freed with their
 * reservation), handing a released allocation's count on to another of its mappings. */
static void forget_mappings(struct srv_client *c, uint64_t base, uint64_t size)
{
    for (struct srv_obj *m = srv_objs_of(c, SHIM_HT_MEM_MAPPED), *next; m; m = next) {
        next = m->type_next;
        if (m->key.value < base || m->key.value - base >= size) continue;
        /* Its allocation released already: the count goes on with another mapping. */
        if (!srv_obj_find(c, SHIM_HT_CUmemGenericAllocationHandle, m->aux))
            carry_count(m, mapping_of(c, m->aux, m));
        srv_obj_destroyed(c, m); /* frees m alone: `next` stays valid */
    }
}

static CUresult unmap_after(struct srv_client *c, struct srv_call *k)
{
    forget_mappings(c, k->a.val[0], k->a.val[1]);
    return CUDA_SUCCESS;
}

/* After the client's work queued so far (above): only a range the client mapped, as the
 * driver would check (it unmaps nothing else, and says so with success). */
static CUresult unmap_call(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *m = srv_obj_find(c, SHIM_HT_MEM_MAPPED, k->a.val[0]);
    if (!m) return CUDA_SUCCESS;
    if (m->size != k->a.val[1])
        return CUDA_ERROR_INVALID_VALUE; /* never a part of a mapping (the driver's rule) */
    srv_memops_end_range(c, m->key.value, m->size); /* its waits there end first */
    return srv_later(c, later_dev(c), SRV_LATER_UNMAP, k->a.val[0], k->a.val[1]);
}

/* Unmapping is allowed in the client's own reservations only. */
const struct srv_hook srv_hook_vmm_unmap = {
    .before = map_before, .call = unmap_call, .after = unmap_after};

/* A reservation is freed whole (its size as reserved), and its mappings with it. */
static CUresult free_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *r = srv_obj_find(c, SHIM_HT_MEM_RESERVED, k->a.val[0]);
    return r && r->size == k->a.val[1] ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The reservation's record goes here, after its mappings': the generic replay's record of
 * what the call destroys is the range its address finds, which is a mapping's where one
 * starts at the reservation's base (forgotten just before: a use after free that
 * fuzz_server found), so the replay is told to keep its hands off (k->keep, free_call). */
static CUresult free_after(struct srv_client *c, struct srv_call *k)
{
    forget_mappings(c, k->a.val[0], k->a.val[1]);
    struct srv_obj *r = srv_obj_find(c, SHIM_HT_MEM_RESERVED, k->a.val[0]);
    if (r) srv_obj_destroyed(c, r);
    return CUDA_SUCCESS;
}

/* After the client's work queued so far (above), its mappings still in the range unmapped
 * first, then the range freed. */
static CUresult free_call(struct srv_client *c, struct srv_call *k)
{
    uint64_t base = k->a.val[0], size = k->a.val[1];
    CUresult r = CUDA_SUCCESS;
    k->keep = 1;                         /* its record goes in free_after */
    srv_memops_end_range(c, base, size); /* its waits in the range end first */
    for (struct srv_obj *m = srv_objs_of(c, SHIM_HT_MEM_MAPPED); m && r == CUDA_SUCCESS;
         m = m->type_next)
        if (m->key.value >= base && m->key.value - base < size)
            r = srv_later(c, later_dev(c), SRV_LATER_UNMAP, m->key.value, m->size);
    return r == CUDA_SUCCESS ? srv_later(c, later_dev(c), SRV_LATER_ADDRESS_FREE, base, size) : r;
}

const struct srv_hook srv_hook_vmm_free = {
    .before = free_before, .call = free_call, .after = free_after};

/* A departed client's reservations and mappings: unmapped first (before-parent), then the
 * address space freed. */
void srv_release_vmm_mapping(struct srv_client *c, struct srv_obj *o)
{
    CUresult r = DRV(cuMemUnmap)(o->key.value, o->size);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: unmapping its virtual memory failed with %s", (int)c->pid,
                srv_errname(r));
}

void srv_release_vmm_reservation(struct srv_client *c, struct srv_obj *o)
{
    CUresult r = srv_zone_free(o->key.value, o->size);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: freeing its reserved addresses failed with %s", (int)c->pid,
                srv_errname(r));
}
