/* Address space reservations (cuMemAddressReserve) in a process moved to its GPUs' servers
 * (conn.c, issue 30): each lies in the server that reserved it, and only that server can map
 * into it or free it. Reserved space is no memory (the range mirror leaves it out: ranges.c),
 * so its server is kept here, by address, and route.c sends a cuMemMap into it and its
 * cuMemAddressFree there, whatever device is current (PyTorch frees with another device
 * current; NCCL's ranks in one process map on their own thread). In a process that did not
 * move nothing is kept. */
#include "interpose/shim.h"

#include "channel/ranges.h"

struct resv {
    struct chan_range r;
    int dev; /* a device of the server that holds it (routes go by device) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct chan_ranges table = {.elem = sizeof(struct resv)}; /* under lock */

void shim_reserved_made(uint64_t base, uint64_t size)
{
    int of, dev = shim_route_device();
    if (shim_moved_ordinal(&of) < 0) return;
    if (dev < 0) dev = shim_moved_ordinal(&of); /* shim_conn's device */
    struct resv e = {.r = {.base = base, .size = size}, .dev = dev};
    pthread_mutex_lock(&lock);
    /* One the driver handed out again while an old record of it stayed: the new one. */
    (void)chan_ranges_remove(&table, base, NULL);
    if (chan_ranges_add(&table, &e) != 0)
        shim_log("reserved address space at %#llx: not kept (out of memory, or overlapping "
                 "another): its mappings go to the thread's GPU's server",
                 (unsigned long long)base);
    pthread_mutex_unlock(&lock);
}

void shim_reserved_freed(uint64_t base)
{
    int of;
    if (shim_moved_ordinal(&of) < 0) return;
    pthread_mutex_lock(&lock);
    (void)chan_ranges_remove(&table, base, NULL);
    pthread_mutex_unlock(&lock);
}

int shim_reserved_device(uint64_t addr, int *dev)
{
    int of;
    if (shim_moved_ordinal(&of) < 0) return 0;
    pthread_mutex_lock(&lock);
    const struct resv *e = chan_ranges_find(&table, addr, 1);
    if (e) *dev = e->dev;
    pthread_mutex_unlock(&lock);
    return e != NULL;
}
