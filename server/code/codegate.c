/* Loading code (and the other calls that stop the driver meanwhile) waits, outside the
 * driver, until no client's stream is blocked on something only a client can end: a value in
 * its memory (device or host), its host function, its graph's host node.
 *
 * Why: in one shared context, loading code waits for every stream of the context, and holds
 * the driver meanwhile. Probed (bench/NOTES.md, "Driver calls held by a waiting stream"), while
 * one stream waited on cuStreamWaitValue32 for a word of device memory: cuModuleLoadData,
 * cuKernelGetFunction, the first launch of a CUkernel and cuCtxSetLimit waited for it, and
 * while they waited a cuStreamWriteValue32 on another stream (the very write that would end the
 * wait, whether the waiting client's own or the server's release of a departed client,
 * memops.c) waited too: every client stopped for good. cuModuleGetFunction returned, but the
 * write after it waited as well (the function's code was loaded later, lazily, under the same
 * rule). Under MPS each client has a context of its own and none of this happens. Event queries
 * went through throughout.
 *
 * Registering host memory does not stop the driver so: cuMemHostRegister (PORTABLE and
 * DEVICEMAP, of a memfd's shared pages as a client's segment is registered, and without
 * flags), cuMemHostAlloc, cuStreamCreate and cuMemCreate/cuMemMap/cuMemSetAccess neither
 * waited nor held the write up in the same probe. An earlier form of this file gated
 * registrations too, from a misread run of tests/codegate.sh: what was held up there was a
 * bystander's frees after its launches, which wait for every stream in the driver as they would
 * natively in one context.
 *
 * So the server keeps the rule itself: a thread that loads code (a module or library, a
 * function's code, a kernel's function in a context) or sets a context limit first waits,
 * polling events and holding nothing, until no device-memory wait of any client on that
 * device is pending, then calls the driver, while
 * new device-memory waits are held back (a per-device rwlock: loaders share it, a worker
 * enqueueing such a wait takes it alone for the enqueue). A wait's end is seen through an
 * event the server records right behind it. The loader's own client, and only it, is held
 * up meanwhile, as it would be by the driver, and it stops waiting when it leaves.
 *
 * Every wait whose end depends on a client is gated so, not only those on device memory: a
 * wait on the client's pinned host memory held a module load in the driver for as long as
 * the client liked (11 s in the attack of issue 34, every client's launches stopped), though
 * the server can end it with a plain store once the client is gone (memops.c). The same for
 * the waits the server itself enqueues for a client: a host function is a wait on the
 * client's "done" word (hostfn.c), a graph's host node a wait on its slot's flag, so a host
 * function that does not return is such a hold too (srv_codegate_wait_begin/_end around
 * those enqueues and around launches of execs with host nodes). What stays out of reach: a
 * kernel of the client's own that spins on a flag in memory; no call says so.
 *
 * Library kernels and libraries load their code in a context lazily, at the first call that
 * needs it there: besides a launch and cuKernelGetFunction, adding a graph's kernel node of
 * a CUkernel (graphnodes.c), cuKernelSetAttribute, an occupancy query of it and
 * cuLibraryGetGlobal waited so in the same probe (cuKernelGetAttribute did not; nor did an
 * instantiation, the node's add having loaded it). Those calls go through the gate the
 * first time they name a kernel or library on a device (srv_codegate_call_begin, below;
 * srv_kernel_loaded, launch.c).
 *
 * Not covered: code loaded inside calls the server does not know to load code (calls not
 * probed and not listed below): those may still wait in the driver. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/registry.h"
#include "server/code/codegate.h"
#include "server/code/unloads.h"
#include "server/code/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct pending {
    CUevent ev;
    int dev;
    pid_t pid;               /* the waiting client's, for the log */
    enum srv_wait_kind kind; /* the same */
    int abandoned;           /* its client left it running (srv_codegate_abandon) */
};

/* The client-held waits whose end was not yet seen, under list_lock (never held across a
 * call that may wait: event queries returned at once in the probe above). npending[dev]:
 * their count per device, read without the lock as a hint. */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *list;
static size_t nlist, caplist;
static _Atomic unsigned npending[CHAN_MAX_DEVICES];
/* Of those, the ones srv_codegate_abandon let go of: they hold loaders, not frees. */
static _Atomic unsigned nabandoned[CHAN_MAX_DEVICES];
/* Loaders read-lock, wait enqueuers write-lock (writers first, so that loaders cannot keep
 * a wait out for long). */
static pthread_rwlock_t gate[CHAN_MAX_DEVICES];
/* Loaders waiting for dev's pending waits to end. A client that enqueues waits one after
 * another (a host function every step) could keep some always pending and a loader out for
 * good; while a loader waits, a new wait's enqueue first gives way, for a bounded time (its
 * own client must never be kept from the very call that ends an earlier wait of its own). */
static _Atomic unsigned loaders[CHAN_MAX_DEVICES];
#define GIVE_WAY_NS (20ull * 1000000ull)

void srv_codegate_init(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        pthread_rwlock_init(&gate[d], &a);
    pthread_rwlockattr_destroy(&a);
}

/* At most this many waits are watched at once; a list this long is pruned of the ended
 * ones before it grows (a client that waits again and again while nobody loads code). */
#define WATCH_MAX 4096
#define WATCH_PRUNE 64

/* list_lock held: drops the waits of dev (-1: of every device) whose events completed (or
 * failed: nothing more will run); how many of dev's remain pending (for a call that waits
 * for every stream, `whole`, not counting the abandoned). */
static unsigned prune(int dev, int whole)
{
    unsigned left = 0;
    size_t j = 0;
    for (size_t i = 0; i < nlist; i++) {
        if ((dev < 0 || list[i].dev == dev) &&
            DRV(cuEventQuery)(list[i].ev) != CUDA_ERROR_NOT_READY) {
            DRV(cuEventDestroy_v2)(list[i].ev);
            atomic_fetch_sub(&npending[list[i].dev], 1);
            if (list[i].abandoned) atomic_fetch_sub(&nabandoned[list[i].dev], 1);
            continue;
        }
        left += list[i].dev == dev && !(whole && list[i].abandoned);
        list[j++] = list[i];
    }
    nlist = j;
    return left;
}

static unsigned settle(int dev, int whole)
{
    pthread_mutex_lock(&list_lock);
    unsigned left = prune(dev, whole);
    pthread_mutex_unlock(&list_lock);
    return left;
}

/* What waits of the kinds counted in n are ("2 host functions, 1 wait on a value"), into
 * buf at *used (advanced; stops short of len). */
static void say_kinds(const unsigned n[SRV_WAIT_KINDS], char *buf, size_t len, size_t *used)
{
    static const char *const one[SRV_WAIT_KINDS] = {"wait on a value", "host function",
                                                    "graph host node"};
    static const char *const many[SRV_WAIT_KINDS] = {"waits on values", "host functions",
                                                     "graph host nodes"};
    int first = 1;
    for (int k = 0; k < SRV_WAIT_KINDS; k++) {
        if (!n[k] || *used >= len) continue;
        int w = snprintf(buf + *used, len - *used, "%s%u %s", first ? "" : ", ", n[k],
                         n[k] == 1 ? one[k] : many[k]);
        first = 0;
        *used = w < 0 || (size_t)w >= len - *used ? len : *used + (size_t)w; /* full: stop */
    }
}

/* The client processes whose waits on dev are pending, each with what they are, for the
 * log: an operator can end a wait that lasts for ever by ending its client
 * (terminate_client). */
static void holders(int dev, char *buf, size_t len)
{
    size_t used = 0;
    int n = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&list_lock);
    for (size_t i = 0; i < nlist && used + 16 < len; i++) {
        if (list[i].dev != dev) continue;
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = list[j].dev == dev && list[j].pid == list[i].pid;
        if (dup) continue;
        unsigned kinds[SRV_WAIT_KINDS] = {0};
        for (size_t j = i; j < nlist; j++)
            if (list[j].dev == dev && list[j].pid == list[i].pid) kinds[list[j].kind]++;
        int w = snprintf(buf + used, len - used, "%s%d (", n++ ? ", " : "client process ",
                         (int)list[i].pid);
        used = w < 0 || (size_t)w >= len - used ? len : used + (size_t)w;
        say_kinds(kinds, buf, len, &used);
        if (used + 1 < len) {
            buf[used++] = ')';
            buf[used] = '\0';
        }
    }
    pthread_mutex_unlock(&list_lock);
    if (!n) snprintf(buf, len, "none left");
}

void srv_codegate_pending_of(pid_t pid, char *buf, size_t len)
{
    unsigned n[CHAN_MAX_DEVICES][SRV_WAIT_KINDS] = {{0}};
    int any = 0;
    pthread_mutex_lock(&list_lock);
    prune(-1, 0); /* event queries return at once (above) */
    for (size_t i = 0; i < nlist; i++)
        if (list[i].pid == pid) {
            n[list[i].dev][list[i].kind]++;
            any = 1;
        }
    pthread_mutex_unlock(&list_lock);
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < CHAN_MAX_DEVICES && any && used < len; d++) {
        unsigned sum = 0;
        for (int k = 0; k < SRV_WAIT_KINDS; k++)
            sum += n[d][k];
        if (!sum) continue;
        int w = snprintf(buf + used, len - used, "%sdevice %d: ", used ? "; " : "", d);
        used = w < 0 || (size_t)w >= len - used ? len : used + (size_t)w;
        say_kinds(n[d], buf, len, &used);
    }
    if (!any) snprintf(buf, len, "none");
}

/* The waits pending on dev that hold a loader (whole: a call that waits for every stream),
 * from the counts alone. */
static unsigned holding(int dev, int whole)
{
    unsigned n = atomic_load(&npending[dev]), a = whole ? atomic_load(&nabandoned[dev]) : 0;
    return n > a ? n - a : 0;
}

/* A departed client's release could not wait for its work (registry.c, leave_running): every
 * value it waited on was stored and every host function of its ended first, so a wait of it
 * still pending is behind work of its own that does not end (a kernel waiting for a peer that
 * never came, seen on two H200s). Waiting for it, a call that waits for every stream (another
 * client's free or unregistration) would wait for ever, which the driver did not (on the
 * H200s, such frees and unregistrations returned at once once past the gate): those calls no
 * longer wait for it. Loaders still do: whether the driver's code load would wait for that
 * work, holding every client meanwhile, is not known, and the gate keeps it to the loader.
 * Said once, with what is left. */
void srv_codegate_abandon(struct srv_client *c)
{
    unsigned n = 0;
    pthread_mutex_lock(&list_lock);
    prune(-1, 0);
    for (size_t i = 0; i < nlist; i++)
        if (list[i].pid == c->pid && !list[i].abandoned) {
            list[i].abandoned = 1;
            atomic_fetch_add(&nabandoned[list[i].dev], 1);
            n++;
        }
    pthread_mutex_unlock(&list_lock);
    if (n)
        srv_log("Client process %d: %u of its waits are still pending behind its work left "
                "running; other clients' frees and unregistrations no longer wait for them, "
                "code loads on their devices still do (until the server starts afresh with no "
                "client, MPSSHIM_RECYCLE_IDLE)",
                (int)c->pid, n);
}

/* Waits, holding nothing, until no client-held wait is pending on dev, then read-locks its
 * gate: 0 (until srv_codegate_leave). A loader (`by` NULL) gives up, -1, when its client
 * leaves: nobody waits for the answer. A call that waits for every stream gives up, -1,
 * once *by (monotonic ns; 0: while c is there, then MPSSHIM_RELEASE_TIMEOUT from its going)
 * has passed. The wait is said in the log: a loader's at once, another after 100 ms (a
 * client's host function every step keeps waits pending for microseconds at a time). */
static int gate_wait(struct srv_client *c, int dev, const char *what, uint64_t *by)
{
    unsigned us = 0;
    int counted = 0, said = 0;
    uint64_t start = chan_now_ns();
    for (;;) {
        if (holding(dev, by != NULL) == 0 || settle(dev, by != NULL) == 0) {
            pthread_rwlock_rdlock(&gate[dev]);
            if (holding(dev, by != NULL) == 0) break;
            pthread_rwlock_unlock(&gate[dev]);
        }
        uint64_t now = chan_now_ns();
        int gone = atomic_load(&c->dead) || atomic_load(&c->evicted) || atomic_load(&srv.quitting);
        if (by && !*by && gone) *by = now + srv.release_ns;
        if (by ? *by && now >= *by : gone) {
            if (by && !c->gate_said) {
                c->gate_said = 1;
                char who[256];
                holders(dev, who, sizeof(who));
                srv_log("Client process %d: %s on device %d goes on after %llu ms although a "
                        "client's stream still waits on a value or a host function (pending "
                        "waits of: %s): the driver may stop every client until that wait ends",
                        (int)c->pid, what, dev, (unsigned long long)((now - start) / 1000000), who);
            }
            if (counted) atomic_fetch_sub(&loaders[dev], 1);
            return -1;
        }
        if (!counted++) atomic_fetch_add(&loaders[dev], 1);
        if (!said && (!by || (now - start > 100ull * 1000 * 1000 && !c->gate_said))) {
            said = 1;
            char who[256];
            holders(dev, who, sizeof(who));
            srv_log("Client process %d: %s on device %d waits until no client's stream waits "
                    "on a value or a host function that only a client can end (the driver "
                    "would stop every client meanwhile); pending waits of: %s",
                    (int)c->pid, what, dev, who);
        }
        us = us ? (us * 2 > 1000 ? 1000 : us * 2) : 20;
        struct timespec ts = {0, (long)us * 1000};
        nanosleep(&ts, NULL);
    }
    if (counted) atomic_fetch_sub(&loaders[dev], 1);
    return 0;
}

CUresult srv_codegate_enter(struct srv_client *c, int dev, const char *what)
{
    if (dev < 0 || dev >= CHAN_MAX_DEVICES) return CUDA_SUCCESS;
    return gate_wait(c, dev, what, NULL) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* ---------------------------------------------------------------- calls that wait for
 * every stream */

/* Freeing and unregistering memory wait in the driver for every stream of the context, as
 * loading code does (bench/NOTES.md, "Driver calls held by a waiting stream": cuMemFree,
 * cuMemHostUnregister and cuMemFreeHost waited for a stream held on a value, and
 * cuStreamCreate in another thread waited behind them). Ungated, a killed client's release
 * unregistering its managed memory's host view waited so for a bystander's stream held on
 * the bystander's host function; that function's page fault asked the bystander's worker
 * for a pull, and the worker was held in the driver behind the release: both stopped for
 * good (tests/managed_kill.sh on an H200; tests/hostfn_gate.sh). So these calls keep the
 * loaders' rule, on every device (a host registration is every context's), except that a
 * departed client's release waits for the gate at most MPSSHIM_RELEASE_TIMEOUT, then makes
 * its call anyway, as it did before (said once). */

uint64_t srv_codegate_whole_begin(struct srv_client *c, const char *what)
{
    uint64_t entered = 0;
    /* In device order, as every holder of several takes them. One bound for all of a
     * departed client's calls: a release of many registrations waits once, not each. */
    for (int d = 0; d < srv.ndev && d < CHAN_MAX_DEVICES && d < 64; d++)
        if (gate_wait(c, d, what, &c->gate_by) == 0) entered |= 1ull << d;
    return entered;
}

void srv_codegate_whole_end(uint64_t entered)
{
    for (int d = 0; d < CHAN_MAX_DEVICES && d < 64; d++)
        if (entered & (1ull << d)) pthread_rwlock_unlock(&gate[d]);
}

CUresult srv_gated_unregister(struct srv_client *c, void *p)
{
    uint64_t g = srv_codegate_whole_begin(c, "unregistering host memory");
    CUresult r = DRV(cuMemHostUnregister)(p);
    srv_codegate_whole_end(g);
    return r;
}

CUresult srv_gated_free(struct srv_client *c, CUdeviceptr p)
{
    uint64_t g = srv_codegate_whole_begin(c, "freeing device memory");
    CUresult r = DRV(cuMemFree_v2)(p);
    srv_codegate_whole_end(g);
    return r;
}

void srv_codegate_leave(int dev)
{
    if (dev >= 0 && dev < CHAN_MAX_DEVICES) pthread_rwlock_unlock(&gate[dev]);
}

void srv_codegate_wait_begin(int dev)
{
    if (atomic_load(&loaders[dev])) {
        uint64_t until = chan_now_ns() + GIVE_WAY_NS;
        struct timespec ts = {0, 200 * 1000};
        while (atomic_load(&loaders[dev]) && chan_now_ns() < until)
            nanosleep(&ts, NULL);
    }
    pthread_rwlock_wrlock(&gate[dev]);
}

void srv_codegate_wait_end(struct srv_client *c, int dev, CUstream st, int enqueued,
                           enum srv_wait_kind kind)
{
    if (enqueued) {
        /* An event right behind the wait: its completion is the wait's end. Without one the
         * wait cannot be watched, and loads would not know to wait for it: said. */
        CUevent ev = NULL;
        CUresult r = DRV(cuEventCreate)(&ev, CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS && (r = DRV(cuEventRecord)(ev, st)) != CUDA_SUCCESS)
            DRV(cuEventDestroy_v2)(ev);
        pthread_mutex_lock(&list_lock);
        if (nlist >= WATCH_PRUNE && nlist == caplist) prune(-1, 0);
        if (r == CUDA_SUCCESS && nlist == caplist && caplist < WATCH_MAX) {
            size_t ncap = caplist ? caplist * 2 : 16;
            struct pending *n = realloc(list, ncap * sizeof(*n));
            if (n) {
                list = n;
                caplist = ncap;
            }
        }
        static int said; /* once until a wait is watched again */
        if (r == CUDA_SUCCESS && nlist < caplist) {
            list[nlist++] = (struct pending){ev, dev, c->pid, kind, 0};
            atomic_fetch_add(&npending[dev], 1);
            said = 0;
        } else {
            if (r == CUDA_SUCCESS) DRV(cuEventDestroy_v2)(ev);
            if (!said++)
                srv_log("Client process %d: a wait on device memory cannot be watched (%s): "
                        "code loaded meanwhile may stop every client until it ends",
                        (int)c->pid,
                        r == CUDA_SUCCESS ? "too many waits watched already" : srv_errname(r));
        }
        pthread_mutex_unlock(&list_lock);
    }
    pthread_rwlock_unlock(&gate[dev]);
}

/* ---------------------------------------------------------------- calls that load code */

/* Generic calls that may load a library kernel's code, or a library's module, in a context
 * the first time they name it there: those cuda_symbols.txt marks loads-code
 * (SHIM_CF_LOADS_CODE). Probed (bench/NOTES.md, "Driver calls held by a waiting stream"), each
 * naming a CUkernel or library never used in the context: cuKernelSetAttribute,
 * cuOccupancyMaxActiveBlocksPerMultiprocessor and cuLibraryGetGlobal waited for the held
 * stream and held up the write on another stream; cuKernelGetAttribute did not. The others
 * marked take the same handles for the same kind of answer and are held to the same rule
 * unprobed. A kernel is gated once per device, a library's call each time (below); none
 * waits while no device-memory wait is pending. */

/* The client's kernel (named as itself or as a function) or library that parameter i of k
 * names, or NULL; *lib says which. */
static struct srv_obj *code_obj(struct srv_client *c, const struct srv_call *k, int i, int *lib)
{
    const struct shim_param *p = &k->d->params[i];
    *lib = 0;
    if (p->kind != SHIM_PK_HANDLE) return NULL;
    if (p->htype == SHIM_HT_CUkernel || p->htype == SHIM_HT_CUfunction)
        return srv_obj_find(c, SHIM_HT_CUkernel, k->a.val[i]);
    *lib = p->htype == SHIM_HT_CUlibrary;
    return *lib ? srv_obj_find(c, SHIM_HT_CUlibrary, k->a.val[i]) : NULL;
}

/* A kernel is loaded in the current context first, through the gate, by srv_kernel_loaded
 * (launch.c), which marks it loaded there only once cuKernelGetFunction made sure: the call
 * then loads nothing. Otherwise (a kernel named for another device than the current
 * context's, a library, whose loading no call here makes sure of) the call itself goes
 * through the gate, every time, and marks nothing: these are calls of a program's start,
 * and the gate costs nothing while no device-memory wait is pending. */
int srv_codegate_call_begin(struct srv_client *c, struct srv_call *k, CUresult *res)
{
    *res = CUDA_SUCCESS;
    if (!(k->d->flags & SHIM_CF_LOADS_CODE)) return -1;
    /* The device the call names (the server's ordinal by now), else its context's. */
    int dev = k->dev;
    for (int i = 0; i < k->d->nparams; i++)
        if (k->d->params[i].kind == SHIM_PK_VAL && (k->d->params[i].pflags & SHIM_PF_DEVICE))
            dev = (int)k->a.val[i];
    if (dev < 0 || dev >= CHAN_MAX_DEVICES || dev >= 64) return -1;
    int whole = 0;
    for (int i = 0; i < k->d->nparams; i++) {
        int lib;
        struct srv_obj *o = code_obj(c, k, i, &lib);
        srv_library_hot(o); /* the call may load its code (unloads.c) */
        if (!o || (!lib && (o->aux & (1ull << dev)))) continue;
        if (lib || !c->cur || c->cur->device != dev)
            whole = 1;
        else if ((*res = srv_kernel_loaded(c, o, dev)) != CUDA_SUCCESS)
            return -1;
    }
    if (!whole || (*res = srv_codegate_enter(c, dev, "loading code")) != CUDA_SUCCESS) return -1;
    return dev;
}

void srv_codegate_call_end(int dev)
{
    if (dev >= 0) srv_codegate_leave(dev);
}
