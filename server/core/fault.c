/* Faults: a sticky error in a device's shared context (an illegal address in one client's
 * kernel, say) kills that context for every client in it, as it kills a process's own
 * context natively. The server sees it, tells every client of that device and lets go of
 * what lived in the dead context without destroying it. The device is then lost to this
 * process for good (the retain after a reset returns the fault again: handover.c), so a new
 * server process takes over the pipe directory at once and serves new clients on fresh contexts
 * (handover.c), while this one keeps its clients for a while: those of the faulted device get
 * the fault from every call, as natively, until they leave or are ended (below).
 *
 * Other devices: the driver's fault is the process's, not the context's. After device 0's
 * fault, device 1's context in the same process answers it too, and so does a context made
 * there anew (driver 580, two H200s: tests/progs/fault.c --device1, natively). So the fault
 * thread's query finds every device of this server dead, and their clients get the fault as
 * well. MPS keeps a fault to its device; that needs each device's shared context in a
 * process of its own, which this server does not have (issue 30). What is written below
 * about "other devices" holds where the driver keeps a fault to its context (the CPU test
 * driver with MPSSHIM_CPUDRV_FAULTS_PER_CONTEXT=1).
 *
 * Who does what:
 *  - Any worker whose driver call returned a sticky code notes the device (srv_fault_note);
 *    the fault thread below then checks it at once with a cheap query on a stream of its
 *    own there, and checks every device that way every FAULT_POLL_MS anyway, so a fault no
 *    client is waiting on is seen too. Only the query's answer raises a fault: a worker's
 *    note may name the wrong device.
 *  - Raising: the device goes to SRV_DEV_FAULT (for good), its IPC shares are marked dead,
 *    its generation and the server's fault epoch move on, and the successor is started.
 *    Each client's registry stays its own worker's (registry.c): workers see the epoch
 *    before each record and when idle (srv_fault_sync), mark their contexts on the device
 *    dead (every later call in them answers the fault), end their waits there with it,
 *    forget every object there (no destroyer runs in a dead context) and publish the epoch
 *    in fault_ack. Work a client asks for on the device later (in a context it makes
 *    after the fault, say) is answered with the fault too (srv_fault_gate).
 *  - The fault thread waits for those acks from every client of the device, at most
 *    FAULT_ACK_NS, and logs the clients that did not let go in time (a worker stuck inside
 *    a driver call lets go when its call returns; until it has, srv_fault_dead keeps its
 *    releases from destroying anything of the dead context: registry.c, streams.c).
 *  - MPSSHIM_FAULT_LINGER seconds after the fault (10 by default), the fault thread ends
 *    the device's clients that are still connected (srv_clients_end: from then on their
 *    calls fail with CUDA_ERROR_MPS_CLIENT_TERMINATED, which says the process must start
 *    again, as MPS's faulted clients must). Until then each gets the fault from every call,
 *    as natively, so that it can say so and leave cleanly. Natively such a process keeps
 *    its dead context until it exits; here the dead context lives in this faulted server,
 *    which exits with its last client (main.c): without an end, a client that never leaves
 *    would keep a server process and its dead contexts' memory for good (issue 34, S10).
 *    Clients of other devices are not ended: the fault is none of theirs, and this server
 *    is theirs (as MPS keeps a fault to its device); the dead context's memory stays until
 *    they leave too. A newer server that finds too many faulted servers alive has this
 *    one end every client at once (handover.c). */
#include "server/core/server.h"
#include "server/core/devctx.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/clients.h"
#include "server/core/registry.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/control/settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct srv_devfault srv_fault[CHAN_MAX_DEVICES];
_Atomic uint32_t srv_fault_epoch;

#define FAULT_POLL_MS 100
#define FAULT_ACK_NS (400ull * 1000 * 1000)       /* the workers' let-go, at most */
#define FAULT_WORK_NS (2ull * 1000 * 1000 * 1000) /* "had work": enqueued this recently */

/* Devices a worker's answer made suspect: checked at once. Passes over every device done
 * so far, and whether one is under way: a worker that saw a sticky error waits for the
 * next whole pass (so that the fault is raised before its client hears of it: a context
 * the client makes after that is new, one made before is dead). Guarded by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bell = PTHREAD_COND_INITIALIZER;
static pthread_cond_t passed = PTHREAD_COND_INITIALIZER;
static uint32_t suspects;
static uint64_t passes;
static int in_pass;
#define FAULT_NOTE_NS (100ull * 1000 * 1000) /* a noting worker waits that long at most */
static pthread_t thread;
static int started;
/* Set while a worker posts the fault to its own waits (let_go): nothing to note. */
static __thread int telling;
/* The fault thread's own stream on each device, for the query (fault thread only). */
static CUstream probe[CHAN_MAX_DEVICES];
/* Faulted devices whose clients' let-go was waited for (fault thread only). */
static int settled[CHAN_MAX_DEVICES];
/* MPSSHIM_FAULT_LINGER; faulted devices whose clients were ended, and whether every client
 * was (fault thread only). */
static uint64_t linger_ns;
static int ended[CHAN_MAX_DEVICES], ended_all;

/* Errors after which a context is unusable ("sticky": every later call returns them). */
static int sticky(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
        return 1;
    default:
        return 0;
    }
}

void srv_fault_note(int dev, CUresult r)
{
    if (!sticky(r) || !started || telling) return;
    /* A fault already known needs no pass, nor may a worker telling its waits about it
     * (let_go) wait for one: the fault thread is waiting for that very worker. */
    if (dev >= 0 && dev < srv.ndev ? atomic_load(&srv_fault[dev].state) != SRV_DEV_OK
                                   : srv_fault_any())
        return;
    pthread_mutex_lock(&lock);
    suspects |= dev >= 0 && dev < CHAN_MAX_DEVICES ? 1u << dev : ~0u;
    uint64_t want = passes + (in_pass ? 2 : 1);
    pthread_cond_signal(&bell);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t until = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + FAULT_NOTE_NS;
    ts.tv_sec = (time_t)(until / 1000000000ull);
    ts.tv_nsec = (long)(until % 1000000000ull);
    while (passes < want && !atomic_load(&srv.quitting))
        if (pthread_cond_timedwait(&passed, &lock, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&lock);
}

int srv_fault_any(void)
{
    for (int d = 0; d < srv.ndev; d++)
        if (atomic_load(&srv_fault[d].state) != SRV_DEV_OK) return 1;
    return 0;
}

int srv_fault_dead(const struct srv_client *c, int dev)
{
    return dev >= 0 && dev < srv.ndev && atomic_load(&srv_fault[dev].gen) != c->gen_seen[dev];
}

/* ---------------------------------------------------------------- the workers' side */

/* 1 if o died with dev's context: it lives there, in no context made since the fault, and
 * is not pinned or managed memory (our own host range, released as usual: its registration died,
 * the range goes back) or a graph or graph node (host-side descriptions, whose handles stay valid
 * until destroyed). */
static int dies(struct srv_client *c, const struct srv_obj *o, int dev)
{
    if (o->dev != dev || srv_host_type(o->key.type) || o->key.type == SHIM_HT_CUgraph ||
        o->key.type == SHIM_HT_CUgraphNode)
        return 0;
    struct srv_ctx *in = o->ctx ? srv_ctx_get(c, o->ctx) : NULL;
    return !in || in->fault;
}

/* The client's contexts on dev died with error err: marks them, ends its waits there with
 * the error and forgets everything it held there. Worker (or departing client) thread. */
static void let_go(struct srv_client *c, int dev, uint32_t gen, CUresult err)
{
    unsigned nctx = 0, nobj = 0, nwait = 0;
    struct srv_ctx *x, *xt;
    HASH_ITER(hh, c->ctxs, x, xt) {
        if (x->device != dev || x->gen == gen)
            continue; /* another device's, or made since the fault (srv_fault_gate answers) */
        if (!x->fault) nctx++;
        x->fault = err;
        x->gen = gen; /* dead: a later fault of the device is none of its business */
        srv_streams_drop(c, x, srv_stream_forget);
    }
    /* Its threads waiting for the GPU there get the fault now, as they would natively. */
    for (struct srv_wait **pw = &c->waits; *pw;) {
        struct srv_wait *w = *pw;
        int there = 0;
        for (int i = 0; i < w->nev; i++)
            there |= w->dev[i] == dev;
        if (!there) {
            pw = &w->next;
            continue;
        }
        *pw = w->next;
        for (int i = 0; i < w->nev; i++)
            if (w->pooled[i] && w->dev[i] != dev) srv_event_give(c, w->dev[i], w->ev[i]);
        telling = 1;
        srv_wait_fail(c, w, err);
        telling = 0;
        srv_wait_free(c, w);
        nwait++;
    }
    atomic_store_explicit(&c->stats.gpu_waits, c->waits != NULL, memory_order_relaxed);
    size_t j = 0;
    for (size_t i = 0; i < c->nretired; i++)
        if (c->retired[i].dev != dev) c->retired[j++] = c->retired[i];
    c->nretired = j;
    /* Internal events of the dead context: only forgotten. */
    srv_events_forget_device(c, dev);
    srv_families_ctx_died(c, dev);
    /* Its objects there, roots first (what belongs to them goes with them), collected
     * before any goes since forgetting frees records the walk would step on. */
    size_t cap = HASH_COUNT(c->objs), n = 0;
    struct srv_obj **roots = cap ? malloc(cap * sizeof(*roots)) : NULL;
    struct srv_obj *o, *t;
    for (int again = 1; again;) {
        again = 0;
        HASH_ITER(hh, c->objs, o, t) {
            if (!dies(c, o, dev)) continue;
            int covered = 0;
            for (struct srv_obj *a = o->parent; a && !covered; a = a->parent)
                covered = dies(c, a, dev);
            if (covered) continue;
            if (roots) {
                roots[n++] = o;
            } else {
                /* Out of memory for the list: one root at a time, walking again. */
                srv_obj_forget_tree(c, o);
                nobj++;
                again = 1;
                break;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        srv_obj_forget_tree(c, roots[i]);
    nobj += (unsigned)n;
    free(roots);
    if (nctx || nobj || nwait)
        srv_log("Client process %d: its context%s on device %d died with the fault (%s): "
                "%u object tree%s there forgotten, %u wait%s ended with the error",
                (int)c->pid, nctx == 1 ? "" : "s", dev, srv_errname(err), nobj,
                nobj == 1 ? "" : "s", nwait, nwait == 1 ? "" : "s");
}

void srv_fault_sync(struct srv_client *c)
{
    uint32_t e = atomic_load_explicit(&srv_fault_epoch, memory_order_acquire);
    if (e == c->fault_seen) return;
    /* The epoch is read before the generations (the fault thread moves them the other way
     * round), so what is acked below covers every fault up to e. */
    for (int d = 0; d < srv.ndev; d++) {
        uint32_t g = atomic_load(&srv_fault[d].gen);
        if (g != c->gen_seen[d]) {
            let_go(c, d, g, (CUresult)atomic_load(&srv_fault[d].err));
            c->gen_seen[d] = g;
        }
    }
    c->fault_seen = e;
    atomic_store_explicit(&c->fault_ack, e, memory_order_release);
}

CUresult srv_fault_gate(struct srv_client *c, int dev)
{
    if (dev < 0 || dev >= srv.ndev || atomic_load(&srv_fault[dev].state) == SRV_DEV_OK)
        return CUDA_SUCCESS;
    srv_fault_sync(c); /* what died goes before the answer */
    return (CUresult)atomic_load(&srv_fault[dev].err);
}

/* ---------------------------------------------------------------- the fault thread */

/* The device's context answers a cheap query on our own stream there: its sticky error,
 * or CUDA_SUCCESS. */
static CUresult query(int d)
{
    CUresult r = DRV(cuCtxSetCurrent)(srv.ctx[d]);
    if (r == CUDA_SUCCESS && !probe[d]) r = DRV(cuStreamCreate)(&probe[d], CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS) r = DRV(cuStreamQuery)(probe[d]);
    return sticky(r) ? r : CUDA_SUCCESS;
}

/* 1 if client x may hold something in dev's context. clients_lock held. */
static int client_of(struct srv_client *x, int dev)
{
    return atomic_load(&x->connected) && !atomic_load(&x->finished) &&
           (atomic_load(&x->stats.devices) & (1u << dev));
}

/* Logs the fault once, naming the device's clients that had work on it: those with a
 * reply waiting for the GPU, or that enqueued GPU work there in the FAULT_WORK_NS before
 * (the driver does not say whose kernel faulted, and in a dead context no stream can be
 * asked what it was running). */
static void log_fault(int d, CUresult err)
{
    char busy[600] = "", idle[600] = "";
    size_t nb = 0, ni = 0;
    unsigned nbusy = 0, nidle = 0;
    uint64_t now = chan_now_ns();
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next) {
        if (!client_of(x, d)) continue;
        uint64_t at = atomic_load(&x->stats.enqueued_ns[d]);
        int worked = atomic_load(&x->stats.gpu_waits) || (at && now - at < FAULT_WORK_NS);
        char *b = worked ? busy : idle;
        size_t *n = worked ? &nb : &ni;
        if (*n < sizeof(busy) - 16)
            *n += (size_t)snprintf(b + *n, sizeof(busy) - *n, "%s%d", *n ? ", " : "", (int)x->pid);
        if (worked)
            nbusy++;
        else
            nidle++;
    }
    pthread_mutex_unlock(&srv.clients_lock);
    srv_log("Device %d: %s in the shared context; it is dead for its %u client(s). Had work "
            "on the device then (enqueued within 2 s, or waiting for it): %s; others: %s. "
            "A new server takes over for new clients",
            d, srv_errname(err), nbusy + nidle, nbusy ? busy : "none", nidle ? idle : "none");
}

/* Waits until every client of dev acked epoch e (let go of the dead context), or
 * FAULT_ACK_NS passed; the clients that did not. */
static unsigned wait_acks(int d, uint32_t e)
{
    uint64_t until = chan_now_ns() + FAULT_ACK_NS;
    for (;;) {
        unsigned late = 0;
        pthread_mutex_lock(&srv.clients_lock);
        for (struct srv_client *x = srv.clients; x; x = x->next)
            if (client_of(x, d) && (int32_t)(atomic_load(&x->fault_ack) - e) < 0) late++;
        pthread_mutex_unlock(&srv.clients_lock);
        if (!late || chan_now_ns() > until || atomic_load(&srv.quitting)) return late;
        usleep(1000);
    }
}

/* Raises a fault on d: its clients are told (through the epoch), it is logged and a new
 * server is started to serve new clients. */
static void raise_fault(int d, CUresult err)
{
    atomic_store(&srv_fault[d].err, (int)err);
    atomic_store(&srv_fault[d].state, SRV_DEV_FAULT);
    atomic_store(&srv_fault[d].seen_ns, chan_now_ns());
    srv_families_dev_fault(d);
    log_fault(d, err);
    atomic_fetch_add(&srv_fault[d].gen, 1);
    atomic_fetch_add(&srv_fault_epoch, 1);
    /* After the epoch: a client's query that reaches its worker from now on is answered
     * with the fault, and every "idle" answer a client kept from before is dropped. Every
     * client's, not only the device's: a fault is rare, a needless round trip cheap. */
    srv_clients_alert();
    srv_families_dev_faulted(d, err);
}

/* After raising: waits for d's clients to let go, and says who did not in time. */
static void settle(int d)
{
    uint32_t e = atomic_load(&srv_fault_epoch);
    unsigned late = wait_acks(d, e);
    if (late)
        srv_log("Device %d: %u client(s) did not let go of the dead context within %llu ms "
                "(inside a driver call); each forgets what it held there when the call "
                "returns, destroying none of it",
                d, late, (unsigned long long)(FAULT_ACK_NS / 1000000));
    else
        srv_log("Device %d: every client let go of the dead context", d);
}

/* Ends the clients that stayed on a faulted device past the linger, and every client once
 * this server was told to (too many faulted servers alive: handover.c). */
static void end_lingering(void)
{
    uint64_t now = chan_now_ns();
    for (int d = 0; d < srv.ndev; d++) {
        if (atomic_load(&srv_fault[d].state) == SRV_DEV_OK || ended[d] ||
            now - atomic_load(&srv_fault[d].seen_ns) < linger_ns)
            continue;
        ended[d] = 1;
        unsigned n = srv_clients_end(d);
        if (n)
            srv_log("Device %d: %u client(s) still connected %llu s after the fault "
                    "(MPSSHIM_FAULT_LINGER): ended, their calls fail with "
                    "CUDA_ERROR_MPS_CLIENT_TERMINATED from now on",
                    d, n, (unsigned long long)(linger_ns / 1000000000ull));
    }
    if (!ended_all && srv_families_end_all()) {
        ended_all = 1;
        unsigned n = srv_clients_end(-1);
        srv_log("Too many faulted servers are alive: this one ends its %u remaining client(s) "
                "now (CUDA_ERROR_MPS_CLIENT_TERMINATED)",
                n);
    }
}

static void *fault_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&srv.quitting)) {
        pthread_mutex_lock(&lock);
        if (!suspects) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += FAULT_POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&bell, &lock, &ts);
        }
        suspects = 0; /* every device is looked at below anyway */
        in_pass = 1;
        pthread_mutex_unlock(&lock);
        /* First every device is looked at and each fault raised, so that the workers
         * waiting in srv_fault_note go on (and let go); then the recoveries. */
        for (int d = 0; d < srv.ndev && !atomic_load(&srv.quitting); d++) {
            /* A context not made yet (devctx.c) has nothing to lose. */
            if (atomic_load(&srv_fault[d].state) != SRV_DEV_OK || !srv_device_made(d)) continue;
            CUresult err = query(d);
            if (err != CUDA_SUCCESS) raise_fault(d, err);
        }
        pthread_mutex_lock(&lock);
        passes++;
        in_pass = 0;
        pthread_cond_broadcast(&passed);
        pthread_mutex_unlock(&lock);
        for (int d = 0; d < srv.ndev && !atomic_load(&srv.quitting); d++)
            if (atomic_load(&srv_fault[d].state) != SRV_DEV_OK && !settled[d]) {
                settle(d);
                settled[d] = 1;
            }
        end_lingering();
    }
    return NULL;
}

int srv_fault_start(void)
{
    linger_ns = srv_settings_seconds_ns(CHAN_SET_FAULT_LINGER);
    if (pthread_create(&thread, NULL, fault_main, NULL) != 0) return -1;
    started = 1;
    return 0;
}

void srv_fault_stop(void)
{
    if (!started) return;
    pthread_mutex_lock(&lock);
    pthread_cond_signal(&bell);
    pthread_cond_broadcast(&passed);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    started = 0;
}
