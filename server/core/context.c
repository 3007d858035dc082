/* A client's contexts in the server. They are the client's own objects (interpose/
 * context.c): the server has one real context per device, and only learns each id, so that
 * it can tag what is made in it, synchronise exactly its work and free exactly what it
 * holds when the client destroys or resets it. Limits set in a context are the client's,
 * over the shared context's real ones. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/fault.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/limits/account.h"
#include "server/code/codegate.h"
#include "server/core/context.h"
#include "server/core/devctx.h"
#include "server/limits/green.h"
#include "server/core/segment.h"
#include "server/core/devices.h"

#include <stdlib.h>
#include <string.h>

/* A client's context limits (its ctxlim): as it set them (the shared context's real limit
 * is the largest any client asked for; bit i of set: limit i was set), and the device
 * memory they cost and on which device, charged to its account while they stand. Its
 * worker writes them; another client's worker reads them as it leaves (srv_limits_settle,
 * under clients_lock). */
struct srv_ctxlimits {
    uint64_t limits[CU_LIMIT_MAX];
    uint32_t limits_set;
    uint64_t limit_cost[CU_LIMIT_MAX];
    int limit_cost_dev[CU_LIMIT_MAX];
};

/* Guards srv_limit_default and the shared contexts' real limits. */
static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;
size_t srv_limit_default[CHAN_MAX_DEVICES][CU_LIMIT_MAX];

void srv_op_ctx_create(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_ctx m; /* the payload is one (its %op row) */
    CUresult res;
    (void)len;
    memcpy(&m, p, sizeof(m));
    /* The client names its own ordinal; a device it was not given is refused. */
    m.device = srv_dev_in(c, m.device);
    if (m.device < 0 || m.device >= srv.ndev)
        res = CUDA_ERROR_INVALID_DEVICE;
    else if (m.id == 0 || srv_ctx_get(c, m.id))
        res = CUDA_ERROR_INVALID_VALUE;
    else if (atomic_load(&srv_fault[m.device].state) != SRV_DEV_OK)
        /* The device is lost to this server (fault.c), as it is to a process natively:
         * a new context there returns the fault. New processes get a new server. */
        res = (CUresult)atomic_load(&srv_fault[m.device].err);
    else if ((res = srv_device_make(m.device)) != CUDA_SUCCESS ||
             (res = srv_green_assign_device(c, m.device)) != CUDA_SUCCESS)
        ; /* the shared context, or the client's share of it, could not be made (logged) */
    else {
        struct srv_ctx *x = calloc(1, sizeof(*x));
        res = CUDA_ERROR_OUT_OF_MEMORY;
        if (x) {
            x->id = m.id;
            x->device = m.device;
            x->primary = (int)m.primary;
            /* Read before any work in it: a fault seen after this kills it too. */
            x->gen = atomic_load(&srv_fault[m.device].gen);
            HASH_ADD(hh, c->ctxs, id, sizeof(x->id), x);
            atomic_fetch_or(&c->stats.devices, 1u << m.device);
            srv_segment_register(c, m.device); /* if no context was made before */
            res = CUDA_SUCCESS;
        }
    }
    srv_reply(c, r->lane, res, 0);
}

void srv_op_ctx_destroy(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_ctx m; /* the payload is one (its %op row) */
    (void)len;
    memcpy(&m, p, sizeof(m));
    struct srv_ctx *x = srv_ctx_get(c, m.id);
    if (x) {
        srv_use_device(x->device);
        srv_release(c, x->id);
        if (c->cur == x) c->cur = NULL;
        HASH_DEL(c->ctxs, x);
        free(x);
    }
    srv_reply(c, r->lane, x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT, 0);
}

void srv_op_ctx_sync(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct srv_ctx *x = c->cur;
    if (len == sizeof(uint32_t)) {
        uint32_t id;
        memcpy(&id, p, sizeof(id));
        x = srv_ctx_get(c, id);
    }
    CUresult res = !x ? CUDA_ERROR_INVALID_CONTEXT : srv_captures_sync(c, x->id);
    if (res == CUDA_SUCCESS) res = srv_wait_ctx(c, x, r->lane);
    if (res != CUDA_SUCCESS) srv_reply(c, r->lane, res, 0);
}

/* Device memory a context limit of `value` costs on device dev beyond what the context had
 * when the server started: a stack of `value` bytes for every thread the device can hold at
 * once (8 KiB a thread costs GiBs on a large device: bench/NOTES.md, "Stack limit growth"), a
 * heap or printf FIFO of `value` bytes. The other limits hold no device memory the server can
 * reckon (the pending launch count's buffer is the driver's own size): 0. */
static uint64_t limit_cost(int dev, unsigned limit, uint64_t value)
{
    uint64_t floor = srv_limit_default[dev][limit], per = 1, cost;
    if (value <= floor) return 0;
    if (limit == CU_LIMIT_STACK_SIZE) {
        const int32_t *a = srv.devinfo.dev[dev].attr;
        int32_t sms = a[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
        int32_t threads = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR];
        per = (uint64_t)(sms > 0 ? sms : 1) * (uint64_t)(threads > 0 ? threads : 2048);
    } else if (limit != CU_LIMIT_MALLOC_HEAP_SIZE && limit != CU_LIMIT_PRINTF_FIFO_SIZE) {
        return 0;
    }
    return __builtin_mul_overflow(value - floor, per, &cost) ? UINT64_MAX : cost;
}

/* A client's limit set to `value` on device dev: its process's memory limit must hold what
 * the setting costs (charged to its account while it stands, instead of what it charged
 * before), else CUDA_ERROR_OUT_OF_MEMORY before the driver is asked (issue 34, S9: a client
 * limited to 1 MiB set the shared stack to 1 MiB a thread and the heap to 8 GiB). */
static CUresult limit_charge(struct srv_client *c, int dev, unsigned limit, uint64_t value)
{
    uint64_t cost = limit_cost(dev, limit, value), had = c->ctxlim->limit_cost[limit];
    int same = had && c->ctxlim->limit_cost_dev[limit] == dev;
    if (cost > (same ? had : 0) && !srv_mem_fits(c, dev, cost - (same ? had : 0))) {
        srv_log("Client process %d: context limit %u set to %llu refused: it would cost %llu "
                "bytes of device memory on device %d, past the client's limit",
                (int)c->pid, limit, (unsigned long long)value, (unsigned long long)cost, dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* What the limit costs now replaces what it cost before, in the account. */
static void limit_charged(struct srv_client *c, int dev, unsigned limit, uint64_t value)
{
    if (c->ctxlim->limit_cost[limit])
        srv_account_mem_add(c, c->ctxlim->limit_cost_dev[limit],
                            -(int64_t)c->ctxlim->limit_cost[limit]);
    c->ctxlim->limit_cost[limit] = limit_cost(dev, limit, value);
    c->ctxlim->limit_cost_dev[limit] = dev;
    if (c->ctxlim->limit_cost[limit])
        srv_account_mem_add(c, dev, (int64_t)c->ctxlim->limit_cost[limit]);
}

void srv_op_ctx_limit(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_limit m; /* the payload is one (its %op row) */
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t out = 0;
    (void)len;
    memcpy(&m, p, sizeof(m));
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto reply;
    }
    if (m.limit >= CU_LIMIT_MAX) {
        res = CUDA_ERROR_UNSUPPORTED_LIMIT;
        goto reply;
    }
    /* Raising a limit waits for every stream of the context in the driver: not while one
     * is held on a value in device memory (codegate.c). */
    int gdev = c->cur->device;
    if (m.set && (res = limit_charge(c, gdev, m.limit, m.value)) != CUDA_SUCCESS) goto reply;
    if (m.set && (res = srv_codegate_enter(c, gdev, "setting a limit")) != CUDA_SUCCESS) goto reply;
    size_t real = 0;
    pthread_mutex_lock(&limits_lock);
    res = DRV(cuCtxGetLimit)(&real, (CUlimit)m.limit);
    uint64_t v = real;
    if (res == CUDA_SUCCESS && m.set) {
        /* The context is shared: its real limit is the largest any client asked for, so no
         * client can take stack, heap or FIFO space from another's kernels; each client
         * reads back what it set. */
        if (m.value > real) res = DRV(cuCtxSetLimit)((CUlimit)m.limit, (size_t)m.value);
        if (res == CUDA_SUCCESS) {
            c->ctxlim->limits[m.limit] = m.value;
            c->ctxlim->limits_set |= 1u << m.limit;
            limit_charged(c, gdev, m.limit, m.value);
        }
        v = m.value;
    } else if (res == CUDA_SUCCESS && (c->ctxlim->limits_set & (1u << m.limit))) {
        v = c->ctxlim->limits[m.limit];
    }
    pthread_mutex_unlock(&limits_lock);
    if (m.set) srv_codegate_leave(gdev);
    if (res != CUDA_SUCCESS) goto reply;
    memcpy(srv_lane_data(c, r->lane), &v, sizeof(v));
    out = sizeof(v);
reply:
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out : 0);
}

void srv_limits_settle(struct srv_client *gone)
{
    for (unsigned l = 0; l < CU_LIMIT_MAX; l++)
        if (gone->ctxlim->limit_cost[l]) { /* its account is charged no more */
            srv_account_mem_add(gone, gone->ctxlim->limit_cost_dev[l],
                                -(int64_t)gone->ctxlim->limit_cost[l]);
            gone->ctxlim->limit_cost[l] = 0;
        }
    /* The limits it raised stay as they are while other clients run: setting a limit waits
     * for every stream of the context in the driver, and lowering one under other clients'
     * work faulted the shared context on two H200s (`contexts`, which raises the stack
     * limit, leaving while `multithread` ran: CUDA_ERROR_LAUNCH_FAILED in that context
     * 6-7 s later, its release held until then, twice, 2026-11-30). srv_limits_idle sets
     * them back once no client is left. */
}

/* The driver raises a context's stack size limit itself when a kernel needs a bigger stack,
 * and never lowers it: the device memory a kernel with a large stack took comes back only when
 * the limit is set back (bench/NOTES.md, "Stack limit growth"). Natively that context ends with
 * its process; the shared one kept what any departed client's kernels grew it to, and what
 * departed clients raised with cuCtxSetLimit (the heap, the printf FIFO, ...). Setting a
 * limit waits for the device's work, so it is done only when no client is left (nothing runs
 * then, and no client thread is in the driver to be held up) and never after a release left a
 * client's work running (it may run for ever). A device whose context faulted is left as it
 * is (fault.c: the server that takes over makes a new one). A limit the driver will not lower
 * (the heap, once a kernel used it) is said once at that value. */
void srv_limits_idle(void)
{
    static size_t refused_at[CHAN_MAX_DEVICES][CU_LIMIT_MAX];
    if (atomic_load(&srv.left_running_any)) return;
    pthread_mutex_lock(&limits_lock);
    for (int d = 0; d < srv.ndev && d < CHAN_MAX_DEVICES; d++) {
        if (atomic_load(&srv_fault[d].state) != SRV_DEV_OK || !srv_device_made(d) ||
            srv_use_device(d) != CUDA_SUCCESS)
            continue;
        for (int l = 0; l < CU_LIMIT_MAX; l++) {
            size_t want = srv_limit_default[d][l], real = 0;
            if (DRV(cuCtxGetLimit)(&real, (CUlimit)l) != CUDA_SUCCESS || real <= want ||
                refused_at[d][l] == real)
                continue;
            CUresult r = DRV(cuCtxSetLimit)((CUlimit)l, want);
            size_t now = real;
            /* Refused, or taken at another value than asked (rounded up): not tried again
             * at that value, so that an idle server does not ask every poll. */
            if (r != CUDA_SUCCESS)
                refused_at[d][l] = real;
            else if (DRV(cuCtxGetLimit)(&now, (CUlimit)l) == CUDA_SUCCESS && now > want)
                refused_at[d][l] = now;
            if (l == CU_LIMIT_STACK_SIZE)
                srv_log("device %d: the stack size per thread the clients' kernels grew the "
                        "context to, %zu bytes, set back to %zu now that no client is left: %s",
                        d, real, want, srv_errname(r));
            else
                srv_log("device %d: limit %d the clients raised to %zu set back to %zu now that "
                        "no client is left: %s",
                        d, l, real, want, srv_errname(r));
        }
    }
    pthread_mutex_unlock(&limits_lock);
}

SRV_CLIENT_STATE(ctxlim, ctxlim)

const struct srv_family srv_family_context = {.name = "context", SRV_CLIENT_STATE_HOOKS(ctxlim)};
