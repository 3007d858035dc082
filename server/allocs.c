/* A client's memory ranges (device allocations, module globals, pinned host memory),
 * sorted by base address for range lookup: every address a client names is checked here. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first allocation with base > addr. */
static size_t upper(const struct srv_client *c, uint64_t addr)
{
    size_t lo = 0, hi = c->nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->allocs[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct srv_alloc *srv_alloc_find(struct srv_client *c, uint64_t addr, uint64_t len)
{
    size_t i = upper(c, addr);
    if (i == 0)
        return NULL;
    struct srv_alloc *a = &c->allocs[i - 1];
    uint64_t off = addr - a->base;
    if (off >= a->size && !(a->size == 0 && off == 0))
        return NULL;
    if (len > a->size - off)
        return NULL;
    return a;
}

int srv_alloc_add(struct srv_client *c, const struct srv_alloc *a)
{
    if (c->nallocs == c->capallocs) {
        size_t ncap = c->capallocs ? c->capallocs * 2 : 256;
        struct srv_alloc *n = realloc(c->allocs, ncap * sizeof(*n));
        if (!n)
            return -1;
        c->allocs = n;
        c->capallocs = ncap;
    }
    size_t i = upper(c, a->base);
    memmove(&c->allocs[i + 1], &c->allocs[i], (c->nallocs - i) * sizeof(*c->allocs));
    c->allocs[i] = *a;
    c->nallocs++;
    if (a->kind == SRV_ALLOC_DEVICE)
        srv_mem_count(c, a->dev, a->size);
    return 0;
}

int srv_alloc_remove(struct srv_client *c, uint64_t base, struct srv_alloc *out)
{
    size_t i = upper(c, base);
    if (i == 0 || c->allocs[i - 1].base != base)
        return -1;
    if (out)
        *out = c->allocs[i - 1];
    if (c->allocs[i - 1].kind == SRV_ALLOC_DEVICE)
        srv_mem_uncount(c, c->allocs[i - 1].dev, c->allocs[i - 1].size);
    memmove(&c->allocs[i - 1], &c->allocs[i], (c->nallocs - i) * sizeof(*c->allocs));
    c->nallocs--;
    return 0;
}

/* Only the client's worker changes these; atomics because the control thread reads them. */
void srv_mem_count(struct srv_client *c, int dev, uint64_t bytes)
{
    atomic_fetch_add(&c->stats.mem_in_use, bytes);
    if (dev >= 0 && dev < CHAN_MAX_DEVICES)
        atomic_fetch_add(&c->stats.mem_dev[dev], bytes);
}

void srv_mem_uncount(struct srv_client *c, int dev, uint64_t bytes)
{
    atomic_fetch_sub(&c->stats.mem_in_use, bytes);
    if (dev >= 0 && dev < CHAN_MAX_DEVICES)
        atomic_fetch_sub(&c->stats.mem_dev[dev], bytes);
}
