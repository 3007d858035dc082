// Graph memory: memory allocation and free nodes (cuGraphAddMemAllocNode,
// cuGraphAddMemFreeNode, their generic forms in graphnode.c, captured cuMemAllocAsync and
// cuMemFreeAsync in capture.c), the device's graph memory attributes and trimming.
//
// As with the driver, an allocation node's address is fixed when the node is added, and
// the memory is the graph's to allocate when a launch reaches the node, until a free node,
// cuMemFreeAsync or cuMemFree frees it. Here the address is backed from the node's
// creation until nobody refers to it and it is not allocated: accesses outside the
// allocated time are not caught (the driver does not catch them either); what is checked
// is what the driver refuses: freeing twice in a graph, freeing what is not allocated,
// launching a graph whose allocation is still allocated. Everything under cpudrv_big.
#include "graph.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static cuuint64_t used_now, used_high, reserved_now, reserved_high;
static struct cpudrv_gmem *all; // every graph allocation, for aliasing

// MPSSHIM_CPUDRV_GRAPHMEM_ALIAS=1: a new allocation node takes addresses of another
// graph's allocation that that graph frees itself, when it is large enough (its end, so
// a smaller one lies inside it), as the driver
// was seen doing on an H100 (PyTorch's captures, one graph after another). The graphs then
// share the memory too, so they must not run at the same time (they do not in the tests
// that set it: one stream). Off by default: every other test keeps its own addresses.
static int alias_on(void)
{
    static int on = -1;
    return cpudrv_env_level("MPSSHIM_CPUDRV_GRAPHMEM_ALIAS", 1, &on);
}

// An allocation of another live graph than g that that graph frees in itself, at least
// `bytes` large, on dev, not allocated now; NULL if none.
static struct cpudrv_gmem *alias_of(const struct cpudrv_graph *g, size_t bytes, int dev)
{
    for (struct cpudrv_gmem *m = all; m; m = m->next) {
        const struct cpudrv_graph *o;
        if (m->dev != dev || m->size < bytes || m->allocated || m->graph == (const void *)g ||
            !(o = cpudrv_graph_find((CUgraph)(uintptr_t)m->graph)))
            continue;
        for (const struct cpudrv_gnode *n = o->head; n; n = n->next)
            if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE && n->u.fptr == m->base) return m;
    }
    return NULL;
}

void cpudrv_gmem_ref(struct cpudrv_gmem *m)
{
    m->refs++;
}

// The range goes with the last reference once the memory is not allocated.
static void gmem_end(struct cpudrv_gmem *m)
{
    if (m->refs || m->allocated) return;
    if (m->alias_of) { // its own record only; the address is the other's
        cpudrv_gmem_put(m->alias_of);
        free(m);
        return;
    }
    if (m->prev)
        m->prev->next = m->next;
    else
        all = m->next;
    if (m->next) m->next->prev = m->prev;
    reserved_now -= m->size;
    cpudrv_mem_free_id(m->base, m->id);
    free(m);
}

void cpudrv_gmem_put(struct cpudrv_gmem *m)
{
    m->refs--;
    gmem_end(m);
}

static void set_allocated(struct cpudrv_gmem *m, int on)
{
    if (m->allocated == on) return;
    m->allocated = on;
    if (on) {
        used_now += m->size;
        if (used_now > used_high) used_high = used_now;
    } else {
        used_now -= m->size;
    }
}

CUresult cpudrv_gmem_free_outside(struct cpudrv_gmem *m)
{
    if (!m->allocated) return CUDA_ERROR_INVALID_VALUE;
    set_allocated(m, 0);
    gmem_end(m);
    return CUDA_SUCCESS;
}

int cpudrv_graph_has_mem(const struct cpudrv_graph *g)
{
    for (const struct cpudrv_gnode *n = g->head; n; n = n->next)
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
            return 1;
    return 0;
}

int cpudrv_graph_mem_instantiated(const struct cpudrv_graph *g)
{
    for (const struct cpudrv_gnode *n = g->head; n; n = n->next)
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->u.gm->refs > 1) return 1;
    return 0;
}

static struct cpudrv_gmem *gmem_at(CUdeviceptr p)
{
    const struct cpudrv_range *r = cpudrv_mem_device_at((uintptr_t)p);
    return r ? r->gmem : NULL;
}

CUresult cpudrv_gmem_launch_check(struct cpudrv_gnode *const *order, size_t n, int autofree)
{
    for (size_t i = 0; i < n; i++)
        if (order[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && order[i]->u.gm->allocated &&
            !autofree)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

void cpudrv_gmem_launched(struct cpudrv_gnode *const *order, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (order[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            set_allocated(order[i]->u.gm, 1);
        } else if (order[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            // The allocation of this graph at that address (an alias has its own), else
            // the one whose address it is.
            struct cpudrv_gmem *m = NULL;
            for (size_t j = 0; j < i && !m; j++)
                if (order[j]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
                    order[j]->u.gm->base == (uintptr_t)order[i]->u.fptr)
                    m = order[j]->u.gm;
            if (!m) m = gmem_at(order[i]->u.fptr);
            if (m) {
                set_allocated(m, 0);
                gmem_end(m);
            }
        }
    }
}

// cpudrv_big held: the new allocation node n's memory (device memory of the pool
// properties' device, backed now: see above).
CUresult cpudrv_gmem_node_set(struct cpudrv_gnode *n, CUDA_MEM_ALLOC_NODE_PARAMS *p,
                              const struct cpudrv_graph *g)
{
    if (!p || !p->bytesize || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        cpudrv_dev_check(p->poolProps.location.id) || (p->accessDescCount && !p->accessDescs))
        return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_gmem *m = alias_on() ? alias_of(g, p->bytesize, p->poolProps.location.id) : NULL;
    if (m) {
        // An allocation of its own at the other's address (each has its own allocated
        // time: a free node frees its own graph's: cpudrv_gmem_launched), which keeps the other's
        // address while it lives.
        struct cpudrv_gmem *a = calloc(1, sizeof *a);
        if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
        cpudrv_gmem_ref(m);
        // At the end of the other's (inside it when smaller, on 256-byte steps), as the
        // driver's own suballocation may place it.
        uintptr_t at = m->base + ((m->size - p->bytesize) & ~(size_t)255);
        *a = (struct cpudrv_gmem){.base = at,
                                  .size = p->bytesize,
                                  .dev = m->dev,
                                  .refs = 1,
                                  .props = p->poolProps,
                                  .graph = g,
                                  .alias_of = m};
        n->u.gm = a;
        p->dptr = (CUdeviceptr)a->base;
        return CUDA_SUCCESS;
    }
    m = calloc(1, sizeof *m);
    struct cpudrv_range r = {0};
    if (!m || !(r.map = cpudrv_mem_map(p->bytesize, &r.maplen))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int dev = p->poolProps.location.id;
    if (cpudrv_mem_reserve(dev, r.maplen)) {
        munmap(r.map, r.maplen);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r.base = (uintptr_t)r.map;
    r.size = p->bytesize;
    r.type = CPUDRV_MEM_DEVICE;
    r.dev = dev;
    r.id = cpudrv_next_id();
    r.gmem = m;
    if (cpudrv_mem_add(&r)) {
        cpudrv_mem_unreserve(dev, r.maplen);
        munmap(r.map, r.maplen);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->base = r.base;
    m->size = p->bytesize;
    m->dev = dev;
    m->id = r.id;
    m->refs = 1;
    m->props = p->poolProps;
    m->graph = g;
    m->next = all;
    if (all) all->prev = m;
    all = m;
    reserved_now += m->size;
    if (reserved_now > reserved_high) reserved_high = reserved_now;
    n->u.gm = m;
    p->dptr = (CUdeviceptr)m->base;
    return CUDA_SUCCESS;
}

// 1 if an allocation node of g has its memory at dptr (an alias too: not in the ranges).
static int allocates_at(const struct cpudrv_graph *g, CUdeviceptr dptr)
{
    for (const struct cpudrv_gnode *o = g->head; o; o = o->next)
        if (o->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && o->u.gm->base == (uintptr_t)dptr) return 1;
    return 0;
}

// cpudrv_big held: a new free node of g for dptr, an allocation node's address not freed
// in g already.
CUresult cpudrv_gmem_free_node_set(struct cpudrv_gnode *n, CUdeviceptr dptr,
                                   const struct cpudrv_graph *g)
{
    if (!gmem_at(dptr) && !allocates_at(g, dptr)) return CUDA_ERROR_INVALID_VALUE;
    for (const struct cpudrv_gnode *o = g->head; o; o = o->next)
        if (o->type == CU_GRAPH_NODE_TYPE_MEM_FREE && o->u.fptr == dptr)
            return CUDA_ERROR_INVALID_VALUE;
    n->u.fptr = dptr;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- entry points */

static CUresult node_get(CUgraphNode h, CUgraphNodeType type, struct cpudrv_gnode **out)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_gnode *n = cpudrv_gnode_find(h);
    if (!n || n->type != type) {
        cpudrv_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    *out = n;
    return CUDA_SUCCESS;
}

// An allocation node's parameters (no access descriptors are kept: none given back).
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    if (!params_out) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_get(hNode, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &n);
    if (rc) return TR(rc);
    memset(params_out, 0, sizeof *params_out);
    params_out->poolProps = n->u.gm->props;
    params_out->bytesize = n->u.gm->size;
    params_out->dptr = (CUdeviceptr)n->u.gm->base;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// The address a free node frees.
CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    if (!dptr_out) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_get(hNode, CU_GRAPH_NODE_TYPE_MEM_FREE, &n);
    if (rc) return TR(rc);
    *dptr_out = n->u.fptr;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Graph memory allocated (USED) and backed (RESERVED), now and at its highest.
CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    CUresult rc = cpudrv_dev_check(device);
    if (rc) return TR(rc);
    if (!value) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = used_now;
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = used_high;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = reserved_now;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = reserved_high;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    cpudrv_unlock();
    return TR(rc);
}

// Resets a high-water mark of graph memory (only to 0) to what is in use now.
CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    CUresult rc = cpudrv_dev_check(device);
    if (rc) return TR(rc);
    if (!value ||
        (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) ||
        *(const cuuint64_t *)value != 0)
        return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        used_high = used_now;
    else
        reserved_high = reserved_now;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}
