/* A client's contexts in the server. They are the client's own objects (interpose/
 * context.c): the server has one real context per device, and only learns each id, so that
 * it can tag what is made in it, synchronise exactly its work and free exactly what it
 * holds when the client destroys or resets it. Limits set in a context are the client's,
 * over the shared context's real ones. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

struct srv_ctx *srv_ctx_get(struct srv_client *c, uint32_t id)
{
    struct srv_ctx *x = NULL;
    HASH_FIND(hh, c->ctxs, &id, sizeof(id), x);
    return x;
}

void srv_op_ctx_create(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_ctx m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    if (len == sizeof(m)) {
        memcpy(&m, p, sizeof(m));
        /* The client names its own ordinal; a device it was not given is refused. */
        m.device = srv_dev_in(c, m.device);
        if (m.device < 0 || m.device >= srv.ndev)
            res = CUDA_ERROR_INVALID_DEVICE;
        else if (m.id == 0 || srv_ctx_get(c, m.id))
            res = CUDA_ERROR_INVALID_VALUE;
        else if (atomic_load(&srv.fault[m.device].state) != SRV_DEV_OK)
            /* The device is lost to this server (fault.c), as it is to a process natively:
             * a new context there returns the fault. New processes get a new server. */
            res = (CUresult)atomic_load(&srv.fault[m.device].err);
        else {
            struct srv_ctx *x = calloc(1, sizeof(*x));
            res = CUDA_ERROR_OUT_OF_MEMORY;
            if (x) {
                x->id = m.id;
                x->device = m.device;
                x->primary = (int)m.primary;
                /* Read before any work in it: a fault seen after this kills it too. */
                x->gen = atomic_load(&srv.fault[m.device].gen);
                HASH_ADD(hh, c->ctxs, id, sizeof(x->id), x);
                atomic_fetch_or(&c->stats.devices, 1u << m.device);
                res = CUDA_SUCCESS;
            }
        }
    }
    srv_reply(c, r->lane, res, 0);
}

void srv_op_ctx_destroy(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_ctx m;
    struct srv_ctx *x = NULL;
    if (len == sizeof(m)) {
        memcpy(&m, p, sizeof(m));
        x = srv_ctx_get(c, m.id);
    }
    if (x) {
        srv_use_device(x->device);
        srv_release(c, x->id);
        if (c->cur == x)
            c->cur = NULL;
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
    if (res == CUDA_SUCCESS)
        res = srv_wait_ctx(c, x, r->lane);
    if (res != CUDA_SUCCESS)
        srv_reply(c, r->lane, res, 0);
}

void srv_op_ctx_limit(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_limit m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t out = 0;
    if (len != sizeof(m))
        goto reply;
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
    if (m.set && (res = srv_codegate_enter(c, gdev, "setting a limit")) != CUDA_SUCCESS)
        goto reply;
    size_t real = 0;
    pthread_mutex_lock(&srv.limits_lock);
    res = DRV(cuCtxGetLimit)(&real, (CUlimit)m.limit);
    uint64_t v = real;
    if (res == CUDA_SUCCESS && m.set) {
        /* The context is shared: its real limit is the largest any client asked for, so no
         * client can take stack, heap or FIFO space from another's kernels; each client
         * reads back what it set. */
        if (m.value > real)
            res = DRV(cuCtxSetLimit)((CUlimit)m.limit, (size_t)m.value);
        if (res == CUDA_SUCCESS) {
            c->limits[m.limit] = m.value;
            c->limits_set |= 1u << m.limit;
        }
        v = m.value;
    } else if (res == CUDA_SUCCESS && (c->limits_set & (1u << m.limit))) {
        v = c->limits[m.limit];
    }
    pthread_mutex_unlock(&srv.limits_lock);
    if (m.set)
        srv_codegate_leave(gdev);
    if (res != CUDA_SUCCESS)
        goto reply;
    memcpy(srv_lane_data(c, r->lane), &v, sizeof(v));
    out = sizeof(v);
reply:
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out : 0);
}

void srv_limits_settle(struct srv_client *gone)
{
    if (!gone->limits_set)
        return;
    pthread_mutex_lock(&srv.limits_lock);
    for (int l = 0; l < CU_LIMIT_MAX; l++) {
        if (!(gone->limits_set & (1u << l)))
            continue;
        for (int d = 0; d < srv.ndev; d++) {
            size_t want = srv.limit_default[d][l], real = 0;
            pthread_mutex_lock(&srv.clients_lock);
            for (struct srv_client *x = srv.clients; x; x = x->next)
                if (x != gone && !atomic_load(&x->finished) && (x->limits_set & (1u << l)) &&
                    x->limits[l] > want)
                    want = x->limits[l];
            pthread_mutex_unlock(&srv.clients_lock);
            /* Only ever lowered here, back towards what the remaining clients need: a big
             * stack limit costs device memory for every resident thread. */
            if (srv_use_device(d) == CUDA_SUCCESS &&
                DRV(cuCtxGetLimit)(&real, (CUlimit)l) == CUDA_SUCCESS && want < real)
                DRV(cuCtxSetLimit)((CUlimit)l, want);
        }
    }
    pthread_mutex_unlock(&srv.limits_lock);
}

/* The driver raises a context's stack size limit itself when a kernel needs a bigger stack,
 * and never lowers it: on an H200 (driver 580.159.04) a kernel with 8 KiB of local memory
 * per thread took the limit from 1024 to 8192 bytes and 1.8 GiB of device memory, which came
 * back only when the limit was set back. Natively that context ends with its process; the
 * shared one kept what any departed client's kernels grew it to. Setting the limit waits
 * for the device's work, so it is done only when no client is left (nothing runs then, and
 * no client thread is in the driver to be held up) and never after a release left a
 * client's work running (it may run for ever). A device whose context faulted is left as it
 * is (fault.c: the server that takes over makes a new one). */
void srv_limits_idle(void)
{
    if (atomic_load(&srv.left_running_any))
        return;
    pthread_mutex_lock(&srv.limits_lock);
    for (int d = 0; d < srv.ndev && d < CHAN_MAX_DEVICES; d++) {
        size_t want = srv.limit_default[d][CU_LIMIT_STACK_SIZE], real = 0;
        if (atomic_load(&srv.fault[d].state) != SRV_DEV_OK || srv_use_device(d) != CUDA_SUCCESS ||
            DRV(cuCtxGetLimit)(&real, CU_LIMIT_STACK_SIZE) != CUDA_SUCCESS || real <= want)
            continue;
        CUresult r = DRV(cuCtxSetLimit)(CU_LIMIT_STACK_SIZE, want);
        srv_log("device %d: the stack size per thread the clients' kernels grew the context "
                "to, %zu bytes, set back to %zu now that no client is left: %s",
                d, real, want, srv_errname(r));
    }
    pthread_mutex_unlock(&srv.limits_lock);
}
