/* devmem.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_DEVMEM_H
#define MPSSHIM_SERVER_DEVMEM_H

#include "server/core/server.h"

/* devmem.c: device memory from the server's arena (the default, MPSSHIM_DEVICE_VMM) or
 * pool (MPSSHIM_DEVICE_POOL=1 with MPSSHIM_DEVICE_VMM=0). */
CUresult srv_devmem_alloc(struct srv_client *c, int dev, CUdeviceptr *p, size_t bytes);
int srv_devmem_pooled(const struct srv_obj *o); /* o came from that pool or arena */
/* After the client's own work on the device, never after other clients' work. */
CUresult srv_devmem_free(struct srv_client *c, struct srv_obj *o);
/* What srv_later does once the client's work queued before it has run. */
enum srv_later_kind { SRV_LATER_ARENA_FREE, SRV_LATER_UNMAP, SRV_LATER_ADDRESS_FREE };
/* Frees arena block `base` of device dev, or unmaps or frees the addresses [base, base +
 * size), once all the work the client has queued so far has run, on any of its streams (at
 * once when none is left); nothing waits on the host. */
CUresult srv_later(struct srv_client *c, int dev, enum srv_later_kind kind, uint64_t base,
                   uint64_t size);
/* Carries out, in order, what srv_later queued whose work has run (all of it, waiting until
 * the client leaves, when `wait`); how many still wait. */
size_t srv_later_reap(struct srv_client *c, int wait);
/* cuMemFreeAsync of arena memory: srv_later's. */
CUresult srv_devmem_free_after(struct srv_client *c, struct srv_obj *o);
/* An event of device dev (the caller's to destroy) that completes once all the work the
 * client has queued so far has run, on any stream; NULL when none of that work is left, or
 * when no event could be made (then srv_devmem_work_event waited for that work itself). */
CUevent srv_devmem_work_event(struct srv_client *c, int dev);
void srv_devmem_gone(struct srv_client *c); /* its streams go */
/* A departing client's free streams (srv_later's marks), settled by `by` (monotonic ns), its
 * own streams' work being done: 0, or -1 when one still ran then. */
int srv_devmem_drain_by(struct srv_client *c, uint64_t by);
/* Memory of the pool nobody holds any more (IPC memory whose last holder let go): freed on
 * a stream of the server's, after nothing. */
CUresult srv_devmem_free_orphan(int dev, uint64_t p);

/* Frees and unmaps still waiting for the client's work (its worker polls them). */
size_t srv_later_pending(const struct srv_client *c);

#endif
