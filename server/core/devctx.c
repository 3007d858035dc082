/* The server's shared contexts, one per device, and the thread's current one.
 *
 * When each is made (MPSSHIM_SERVER_CONTEXTS):
 *  - At start (the default, but for a pipe directory's own server of several GPUs: below):
 *    every device's, the devices' at once, so that no client pays for one. A retain takes
 *    0.5-0.9 s on an H200 (32 hardware queues), and a successor after a fault makes every
 *    device's anew (the fault is the process's: fault.c); on two H200s one after the other
 *    took recovery to 2.2-3.1 s against 0.74-0.78 s on one (the GPU tier's fault-containment
 *    row, 2026-11-29). A thread that cannot start retains in this one.
 *  - At first use: the first request that needs a device (srv_use_device, srv_push_device)
 *    makes its context, under that device's lock; the others' requests go on. Why: with a
 *    server per GPU (MPSSHIM_SERVER_PER_GPU, the default where the pipe directory's own
 *    server holds several GPUs), that server serves a process only until its first context,
 *    when it moves to that GPU's server; a context made there at start would be a second one
 *    on every GPU, each with its memory (about 0.5 GiB on an H200) and time-sliced against
 *    the GPU's own server's. Only a process that stays (it made objects before its first
 *    context, or asked about peer access: interpose/conn.c) makes one here. Calls that need no
 *    context of the server's (device queries) make none (generic.c).
 *
 * Housekeeping (status, idle trims, the fault thread) never makes a context: it asks
 * srv_device_made first. A made context is published with release order after its state
 * beside it, so a reader that sees it made sees that state. */
#define _GNU_SOURCE
#include "server/core/devctx.h"
#include "server/core/clients.h"
#include "server/core/context.h"
#include "server/core/log.h"
#include "server/limits/policy.h"
#include "server/memory/memops.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static int first_use;    /* set before any client comes */
static int clients_move; /* the same */
static _Atomic int made[CHAN_MAX_DEVICES];
static _Atomic int failure_said[CHAN_MAX_DEVICES]; /* a device whose making failed: said once */
static pthread_mutex_t make_lock[CHAN_MAX_DEVICES];
static pthread_once_t locks_once = PTHREAD_ONCE_INIT;
/* The stream priority range, the same on every device: taken from the first context made. */
static pthread_mutex_t prio_lock = PTHREAD_MUTEX_INITIALIZER;
static int prio_taken;

static __thread int serving_pid;
static __thread uint32_t serving_op;

void srv_devctx_serving(int pid, uint32_t op)
{
    serving_pid = pid;
    serving_op = op;
}

static void init_locks(void)
{
    for (int i = 0; i < CHAN_MAX_DEVICES; i++)
        pthread_mutex_init(&make_lock[i], NULL);
}

/* A device's shared context retained (a thread of its own per device at start). */
struct retain {
    int dev;
    CUresult r;
    double ms;
};

static void *retain_one(void *arg)
{
    struct retain *t = arg;
    uint64_t t0 = chan_now_ns();
    CUdevice dev;
    t->r = DRV(cuDeviceGet)(&dev, t->dev);
    if (t->r == CUDA_SUCCESS) t->r = DRV(cuDevicePrimaryCtxRetain)(&srv.ctx[t->dev], dev);
    t->ms = (double)(chan_now_ns() - t0) / 1e6;
    return NULL;
}

static void release_one(int d)
{
    CUdevice dev;
    if (DRV(cuDeviceGet)(&dev, d) == CUDA_SUCCESS) DRV(cuDevicePrimaryCtxRelease_v2)(dev);
}

/* What the server keeps beside a context it just retained, taken with it pushed current:
 * its limits as made (the floor when clients leave: context.c), the priority range, and a
 * stream for releasing departed clients' waits. Made now, not when a release needs it:
 * cuStreamCreate waits while another thread's cuMemFree, cuMemHostUnregister or
 * cuMemFreeHost waits for the very stream the release would let go, and nothing moves; a
 * write on a stream made before goes through and all three end (memops.c). */
static void take_state(int d)
{
    if (DRV(cuCtxPushCurrent_v2)(srv.ctx[d]) != CUDA_SUCCESS) return;
    for (int l = 0; l < CU_LIMIT_MAX; l++)
        DRV(cuCtxGetLimit)(&srv_limit_default[d][l], (CUlimit)l);
    pthread_mutex_lock(&prio_lock);
    if (!prio_taken) {
        if (DRV(cuCtxGetStreamPriorityRange)(&srv_prio_least, &srv_prio_greatest) != CUDA_SUCCESS)
            srv_prio_least = srv_prio_greatest = 0;
        prio_taken = 1;
    }
    pthread_mutex_unlock(&prio_lock);
    CUresult r = DRV(cuStreamCreateWithPriority)(&srv_memops_release_streams[d],
                                                 CU_STREAM_NON_BLOCKING, srv_prio_greatest);
    if (r != CUDA_SUCCESS) {
        srv_memops_release_streams[d] = NULL;
        srv_log("device %d: no stream for releasing departed clients' waits (%s): each "
                "release makes one",
                d, srv_errname(r));
    }
    CUcontext old;
    DRV(cuCtxPopCurrent_v2)(&old);
}

int srv_devctx_start(int at_first_use, int move, char *why, size_t len)
{
    pthread_once(&locks_once, init_locks);
    first_use = at_first_use;
    clients_move = at_first_use && move;
    if (first_use) {
        for (int i = 0; i < srv.ndev; i++)
            srv_log("Device %d: %s, its shared context made at first use "
                    "(MPSSHIM_SERVER_CONTEXTS)",
                    i, srv.devinfo.dev[i].name);
        if (clients_move)
            srv_log("Clients move to their GPUs' own servers at their first context, unless "
                    "their MPSSHIM_SERVER_PER_GPU or MPSSHIM_SERVER_PER_GPU_MOVE is 0 "
                    "(a fault then ends only its GPU's clients)");
        return 0;
    }
    struct retain t[CHAN_MAX_DEVICES];
    pthread_t th[CHAN_MAX_DEVICES];
    int started[CHAN_MAX_DEVICES] = {0};
    for (int i = 0; i < srv.ndev; i++) {
        t[i].dev = i;
        started[i] = srv.ndev > 1 && pthread_create(&th[i], NULL, retain_one, &t[i]) == 0;
        if (!started[i]) retain_one(&t[i]);
    }
    for (int i = 0; i < srv.ndev; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (int i = 0; i < srv.ndev; i++)
        if (t[i].r != CUDA_SUCCESS) {
            /* The others' retains are undone: this start ends here. */
            for (int j = 0; j < srv.ndev; j++)
                if (t[j].r == CUDA_SUCCESS) release_one(j);
            snprintf(why, len, "device %d: %s", i, srv_errname(t[i].r));
            return -1;
        }
    for (int i = 0; i < srv.ndev; i++) {
        srv_log("Device %d: %s, one shared context (made in %.0f ms)", i, srv.devinfo.dev[i].name,
                t[i].ms);
        take_state(i);
        atomic_store_explicit(&made[i], 1, memory_order_release);
    }
    DRV(cuCtxSetCurrent)(srv.ctx[0]); /* the starting thread's, as every server had it */
    return 0;
}

int srv_devctx_first_use(void)
{
    return first_use;
}

int srv_devctx_clients_move(void)
{
    return clients_move;
}

int srv_device_made(int dev)
{
    return dev >= 0 && dev < srv.ndev && dev < CHAN_MAX_DEVICES &&
           atomic_load_explicit(&made[dev], memory_order_acquire);
}

CUresult srv_device_make(int dev)
{
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    if (srv_device_made(dev)) return CUDA_SUCCESS;
    pthread_once(&locks_once, init_locks);
    pthread_mutex_lock(&make_lock[dev]);
    struct retain t = {.dev = dev};
    if (!atomic_load_explicit(&made[dev], memory_order_acquire)) {
        retain_one(&t);
        if (t.r == CUDA_SUCCESS) {
            take_state(dev);
            atomic_store_explicit(&made[dev], 1, memory_order_release);
            srv_log("Device %d: one shared context, made at its first use (in %.0f ms), for "
                    "%s of client process %d",
                    dev, t.ms,
                    serving_op < SHIM_NCALLS ? shim_calls[serving_op].name
                                             : srv_proto_op_name(serving_op),
                    serving_pid);
        } else if (!atomic_exchange(&failure_said[dev], 1)) {
            srv_log("Device %d: its shared context could not be made: %s (each request that "
                    "needs it tries again; said once)",
                    dev, srv_errname(t.r));
        }
    }
    pthread_mutex_unlock(&make_lock[dev]);
    return t.r;
}

void srv_devctx_release_all(void)
{
    for (int i = 0; i < srv.ndev && i < CHAN_MAX_DEVICES; i++)
        if (srv_device_made(i)) release_one(i);
}

/* ---------------------------------------------------------- the thread's current context */

/* The thread's current device context, to skip redundant cuCtxSetCurrent calls (a
 * device's context is made once per server: after a fault, a new server makes it). */
static __thread int cur_dev = -1;

CUresult srv_use_device(int dev)
{
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (cur_dev == dev) return CUDA_SUCCESS;
    CUresult r = srv_device_make(dev);
    if (r == CUDA_SUCCESS) r = DRV(cuCtxSetCurrent)(srv.ctx[dev]);
    if (r == CUDA_SUCCESS) cur_dev = dev;
    return r;
}

CUresult srv_push_device(int dev)
{
    CUresult r = srv_device_make(dev);
    return r == CUDA_SUCCESS ? DRV(cuCtxPushCurrent_v2)(srv.ctx[dev]) : r;
}

/* What goes is the context srv_push_device pushed, known to the caller: not returned. */
void srv_pop_device(void)
{
    CUcontext old;
    DRV(cuCtxPopCurrent_v2)(&old);
}

int srv_device_used(int dev, size_t *used)
{
    size_t f = 0, t = 0;
    if (!srv_device_made(dev) || srv_use_device(dev) != CUDA_SUCCESS ||
        DRV(cuMemGetInfo_v2)(&f, &t) != CUDA_SUCCESS)
        return -1;
    *used = t - f;
    return 0;
}
