/* Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64 and their batch,
 * cuStreamBatchMemOp_v2), described in cuda_symbols.txt; what no description can say is
 * here: a client that leaves while one of its streams waits for a value must not keep the
 * server from releasing it.
 *
 * A wait blocks its stream on the GPU until memory of the client's own holds a value. When
 * the client goes, nothing will ever write it, and the release (which first waits for the
 * client's streams, so that nothing is freed under running work) would wait forever, with
 * terminate_client and quit behind it. So the server remembers the waits each client
 * enqueued, and before releasing it writes into each waited word, while that word is still
 * the client's, a value that satisfies the wait; the stream then runs to its end. A wait that
 * no value can satisfy (AND with 0, NOR with all bits set) is refused when it is enqueued:
 * natively it blocks its stream for ever.
 *
 * The release writes with the driver, so it needs the driver's lock: when the client's own
 * thread is stuck behind that lock, held by another client's call that waits for the whole
 * device (cuMemHostUnregister does), which waits for this very stream, nothing moves (seen with
 * host functions, hostfn.c). Words in the client's host-mapped memory (pinned, registered,
 * managed), which the server maps at the same address, are therefore also written by the main
 * loop as soon as it finds the client gone, with a plain store and no driver call
 * (srv_memops_let_go). A wait on device memory cannot be let go so: its release writes with the
 * driver, on a stream the server made at start (main.c). Probed (bench/NOTES.md, "Driver calls
 * held by a waiting stream"): while cuMemFree, cuMemHostUnregister or cuMemFreeHost waited for
 * a stream blocked on a value in device memory, cuStreamCreate waited too, but a write on a
 * stream made before went through and all three ended (tests/waitvalue_twin.sh). While a module
 * load or cuCtxSetLimit waits so, even that write waits: those calls therefore wait in the
 * server while any such wait is pending (codegate.c, which also watches each wait enqueued
 * here). */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/code/codegate.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/memory/memops.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

CUstream srv_memops_release_streams[CHAN_MAX_DEVICES];

/* Waits remembered per client, every one until it has passed; past this many pending at
 * once a new one is refused (each must stay known until it ends, or nothing could end it
 * when the client goes). */
#define SRV_MAX_WAITS 1024
/* How long the release waits for a wait it ended to pass before it ends a later wait on the
 * same word, which may want another value. */
#define SRV_WAIT_PASS_NS (2ull * 1000 * 1000 * 1000)

struct srv_waitval {
    uint64_t addr, value;
    uint32_t flags;
    uint32_t ctx;
    int wide; /* 64-bit */
    int host; /* in the client's host memory, mapped here: the main loop may write it */
    int dev;  /* of ev */
    /* Recorded right behind the wait (the client's pool of dev): complete once the wait has
     * passed; NULL when none could be had (the wait counts as pending until the release). */
    CUevent ev;
};

/* The stream waits a client enqueued, to unblock when it goes (its memops). Changed by its
 * own thread only, under lock, which the main loop takes to read them (memops_lost). */
struct srv_memops {
    struct srv_waitval *v;
    size_t n, cap;
    pthread_mutex_t lock;
    int lost_said;         /* the main loop let go of waits on its host memory (logged once) */
    unsigned refused_said; /* stream waits refused past the pending bound */
};

/* The value that makes the wait condition true, or -1 when none does. */
static int satisfying(uint64_t value, uint32_t flags, int wide, uint64_t *out)
{
    uint64_t all = wide ? ~0ull : 0xffffffffull;
    switch (flags & 0x3u) {
    case CU_STREAM_WAIT_VALUE_GEQ:
    case CU_STREAM_WAIT_VALUE_EQ:
        *out = value;
        return 0;
    case CU_STREAM_WAIT_VALUE_AND:
        *out = value;
        return (value & all) ? 0 : -1;
    default: /* NOR: ~(*addr | value) != 0 */
        *out = 0;
        return (value & all) != all ? 0 : -1;
    }
}

/* 1 when wait w has passed (or can never run: its context failed). */
static int passed(struct srv_client *c, const struct srv_waitval *w)
{
    return w->ev && (srv_fault_dead(c, w->dev) || DRV(cuEventQuery)(w->ev) != CUDA_ERROR_NOT_READY);
}

/* The waits that have passed leave the list (the worker's own list; the lock is for the
 * main loop, which reads it, and is never held across a driver call). */
static void prune(struct srv_client *c)
{
    size_t n = c->memops->n, j = 0;
    uint8_t *gone = n ? calloc(n, 1) : NULL;
    if (!gone) return;
    for (size_t i = 0; i < n; i++)
        gone[i] = passed(c, &c->memops->v[i]);
    pthread_mutex_lock(&c->memops->lock);
    for (size_t i = 0; i < n; i++) {
        if (!gone[i])
            c->memops->v[j++] = c->memops->v[i];
        else if (!srv_fault_dead(c, c->memops->v[i].dev))
            srv_event_give(c, c->memops->v[i].dev, c->memops->v[i].ev);
    }
    c->memops->n = j;
    pthread_mutex_unlock(&c->memops->lock);
    free(gone);
}

/* Admits n waits for value (flags, wide: 64-bit): one no value can satisfy is refused, and
 * so are waits past the client's bound. */
static CUresult wait_admit(struct srv_client *c, uint64_t value, uint32_t flags, int wide, size_t n)
{
    uint64_t v;
    if (satisfying(value, flags, wide, &v) != 0) {
        srv_log("Client process %d: a stream wait no value can satisfy (flags %#x, value %#llx) "
                "refused: it would block its stream for ever",
                (int)c->pid, (unsigned)flags, (unsigned long long)value);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (c->memops->n + n > SRV_MAX_WAITS) prune(c);
    if (c->memops->n + n > SRV_MAX_WAITS) {
        if (!c->memops->refused_said++)
            srv_log("Client process %d: a stream wait past %d of its own still pending refused "
                    "(said once)",
                    (int)c->pid, SRV_MAX_WAITS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult wait_before(struct srv_client *c, struct srv_call *k)
{
    return wait_admit(c, k->a.val[2], (uint32_t)k->a.val[3], k->d->params[2].size == 8, 1);
}

static int host_mapped(const struct srv_obj *o)
{
    /* Migrating managed memory is device memory here (migrate.c). */
    return o && srv_host_type(o->key.type) && !srv_migrating(o);
}

/* Every wait is remembered, not only the latest on a word: two waits on one word for two
 * values (EQ 5, then EQ 7) are ended one after the other when the client goes (a release
 * that wrote only the latest value left the first waiting for good: found by fuzz_server). */
static void wait_remember(struct srv_client *c, struct srv_call *k, uint64_t addr, uint64_t value,
                          uint32_t flags, int wide)
{
    struct srv_waitval w = {.addr = addr,
                            .value = value,
                            .flags = flags,
                            .ctx = c->cur ? c->cur->id : 0,
                            .wide = wide,
                            .dev = k->dev};
    w.host = host_mapped(srv_range_find(c, w.addr, w.wide ? 8 : 4));
    CUstream st = (CUstream)(uintptr_t)k->vals[k->d->stream];
    /* In a capture the wait is a node of a graph, not a wait now: nothing to record. */
    if (!(k->stream && srv_stream_capturing(c, k->stream)) && w.dev >= 0 &&
        srv_event_take(c, w.dev, &w.ev) == CUDA_SUCCESS &&
        DRV(cuEventRecord)(w.ev, st) != CUDA_SUCCESS) {
        srv_event_give(c, w.dev, w.ev);
        w.ev = NULL;
    }
    if (c->memops->n == c->memops->cap) {
        size_t ncap = c->memops->cap ? c->memops->cap * 2 : 16;
        struct srv_waitval *n = realloc(c->memops->v, ncap * sizeof(*n));
        if (!n) {
            if (w.ev) srv_event_give(c, w.dev, w.ev);
            return; /* unremembered: the drain's bound still holds */
        }
        pthread_mutex_lock(&c->memops->lock);
        c->memops->v = n;
        c->memops->cap = ncap;
        pthread_mutex_unlock(&c->memops->lock);
    }
    pthread_mutex_lock(&c->memops->lock);
    c->memops->v[c->memops->n++] = w;
    pthread_mutex_unlock(&c->memops->lock);
}

static CUresult wait_after(struct srv_client *c, struct srv_call *k)
{
    wait_remember(c, k, k->a.val[1], k->a.val[2], (uint32_t)k->a.val[3], k->d->params[2].size == 8);
    return CUDA_SUCCESS;
}

/* The driver's enqueue, with the code gate around it (codegate.c): no code is being loaded
 * while it is enqueued, and its end is watched. Every wait: one on host memory holds a code
 * load in the driver as long as one on device memory (a module load waited for a hold of
 * 11 s on pinned host memory, and held every client's launches meanwhile: issue 34, S4). */
static CUresult wait_call(struct srv_client *c, struct srv_call *k)
{
    srv_codegate_wait_begin(k->dev);
    CUresult r = k->drive(k);
    srv_codegate_wait_end(c, k->dev, (CUstream)(uintptr_t)k->vals[k->d->stream], r == CUDA_SUCCESS,
                          SRV_WAIT_VALUE);
    return r;
}

const struct srv_hook srv_hook_stream_wait_value = {
    .before = wait_before, .call = wait_call, .after = wait_after};

/* ---------------------------------------------------------------- batches */

/* cuStreamBatchMemOp_v2: its description checks every operation's address (a tagged union,
 * cuda_symbols.txt); its waits are admitted, enqueued behind the code gate and remembered
 * as single waits are. Writes, flushes and barriers need nothing here. */
static int is_wait(const CUstreamBatchMemOpParams *o)
{
    return o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
           o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}

static int is_wide(const CUstreamBatchMemOpParams *o)
{
    return o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}

static uint64_t wait_value(const CUstreamBatchMemOpParams *o)
{
    return is_wide(o) ? o->waitValue.value64 : o->waitValue.value;
}

/* How many of the batch's operations (*ops) are waits. */
static size_t batch_waits(const struct srv_call *k, const CUstreamBatchMemOpParams **ops)
{
    size_t n = 0;
    *ops = (const CUstreamBatchMemOpParams *)k->a.ptr[2];
    for (uint32_t i = 0; *ops && i < k->a.count[2]; i++)
        n += is_wait(&(*ops)[i]);
    return n;
}

static CUresult batch_before(struct srv_client *c, struct srv_call *k)
{
    const CUstreamBatchMemOpParams *ops;
    size_t n = batch_waits(k, &ops);
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; n && i < k->a.count[2] && r == CUDA_SUCCESS; i++)
        if (is_wait(&ops[i]))
            r = wait_admit(c, wait_value(&ops[i]), ops[i].waitValue.flags, is_wide(&ops[i]), n);
    return r;
}

static CUresult batch_call(struct srv_client *c, struct srv_call *k)
{
    const CUstreamBatchMemOpParams *ops;
    return batch_waits(k, &ops) ? wait_call(c, k) : k->drive(k);
}

static CUresult batch_after(struct srv_client *c, struct srv_call *k)
{
    const CUstreamBatchMemOpParams *ops;
    size_t n = batch_waits(k, &ops);
    for (uint32_t i = 0; n && i < k->a.count[2]; i++)
        if (is_wait(&ops[i]))
            wait_remember(c, k, ops[i].waitValue.address, wait_value(&ops[i]),
                          ops[i].waitValue.flags, is_wide(&ops[i]));
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_stream_batch_memop = {
    .before = batch_before, .call = batch_call, .after = batch_after};

/* Writes the value that ends wait w, while its word is still the client's (freed, it may
 * be another's now): on the server's release stream, made at start (main.c), since making
 * one now can wait for the very stream this write lets go; a stream made now only where
 * that one could not be made. */
static void end_one(struct srv_client *c, const struct srv_waitval *w)
{
    struct srv_obj *o = srv_range_find(c, w->addr, w->wide ? 8 : 4);
    uint64_t v;
    if (!o || satisfying(w->value, w->flags, w->wide, &v) != 0) return;
    int dev = o->dev >= 0 && o->dev < srv.ndev ? o->dev : 0;
    if (srv_fault_dead(c, dev) || srv_push_device(dev) != CUDA_SUCCESS) return;
    CUstream st = srv_memops_release_streams[dev], made = NULL;
    if (!st && DRV(cuStreamCreate)(&made, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) st = made;
    if (st) {
        CUresult r = w->wide ? DRV(cuStreamWriteValue64_v2)(st, w->addr, v, 0)
                             : DRV(cuStreamWriteValue32_v2)(st, w->addr, (cuuint32_t)v, 0);
        if (r == CUDA_SUCCESS) DRV(cuStreamSynchronize)(st);
    }
    if (made) DRV(cuStreamDestroy_v2)(made);
    srv_pop_device();
}

/* Which waits end_waits ends: those enqueued in context ctx or on memory of it (0: every
 * wait), or, when size, those on words in [base, base + size). */
struct pick {
    uint32_t ctx;
    uint64_t base, size;
};

static int picked(struct srv_client *c, const struct srv_waitval *w, const struct pick *p)
{
    if (p->size) return w->addr >= p->base && w->addr - p->base < p->size;
    if (!p->ctx || w->ctx == p->ctx) return 1;
    const struct srv_obj *o = srv_range_find(c, w->addr, w->wide ? 8 : 4);
    return o && o->ctx == p->ctx;
}

/* Ends the picked waits, in the order they were enqueued. A wait not passed yet is ended by
 * writing its value, written again (backing off to 1 ms) until it has passed, for up to
 * SRV_WAIT_PASS_NS in all: a later wait on the same word may want another value (EQ 5 then
 * EQ 7), and the client's own stream may write the word after the server did (its write,
 * then its wait: the server's value came first and the stream waited for good, found by
 * fuzz_server). Past that bound each wait gets one write. The waits to end leave the list
 * under the lock; the driver's writes come after it, since the main loop takes the lock and
 * must never wait behind a driver call. */
static void end_waits(struct srv_client *c, const struct pick *p)
{
    pthread_mutex_lock(&c->memops->lock);
    struct srv_waitval *ends = c->memops->n ? malloc(c->memops->n * sizeof(*ends)) : NULL;
    size_t n = 0, j = 0;
    for (size_t i = 0; i < c->memops->n; i++) {
        if (ends && picked(c, &c->memops->v[i], p))
            ends[n++] = c->memops->v[i];
        else
            c->memops->v[j++] = c->memops->v[i];
    }
    c->memops->n = j;
    pthread_mutex_unlock(&c->memops->lock);
    uint64_t by = chan_now_ns() + SRV_WAIT_PASS_NS;
    for (size_t i = 0; i < n; i++) {
        struct srv_waitval *w = &ends[i];
        for (unsigned us = 10; !passed(c, w); us = us < 1000 ? us * 2 : us) {
            end_one(c, w);
            if (!w->ev || chan_now_ns() >= by)
                break; /* no way to tell it passed, or no time left: one write */
            struct timespec ts = {0, (long)us * 1000};
            nanosleep(&ts, NULL);
        }
        if (w->ev && !srv_fault_dead(c, w->dev)) srv_event_give(c, w->dev, w->ev);
    }
    free(ends);
}

void srv_memops_unblock(struct srv_client *c, uint32_t ctx)
{
    end_waits(c, &(struct pick){.ctx = ctx});
    if (!ctx) {
        pthread_mutex_lock(&c->memops->lock);
        free(c->memops->v);
        c->memops->v = NULL;
        c->memops->n = c->memops->cap = 0;
        pthread_mutex_unlock(&c->memops->lock);
    }
}

void srv_memops_end_range(struct srv_client *c, uint64_t base, uint64_t size)
{
    if (c->memops->n && size) end_waits(c, &(struct pick){.base = base, .size = size});
}

size_t srv_memops_let_go(struct srv_client *c)
{
    size_t n = 0;
    pthread_mutex_lock(&c->memops->lock);
    for (size_t i = 0; i < c->memops->n; i++) {
        const struct srv_waitval *w = &c->memops->v[i];
        uint64_t v;
        /* host: checked to be the client's host range when enqueued, and cleared under
         * this lock before that range is unmapped (srv_memops_unmapping). */
        if (!w->host || w->addr % (w->wide ? 8 : 4) ||
            satisfying(w->value, w->flags, w->wide, &v) != 0)
            continue;
        if (w->wide)
            atomic_store((_Atomic uint64_t *)(uintptr_t)w->addr, v);
        else
            atomic_store((_Atomic uint32_t *)(uintptr_t)w->addr, (uint32_t)v);
        n++;
    }
    pthread_mutex_unlock(&c->memops->lock);
    return n;
}

void srv_memops_unmapping(struct srv_client *c, uint64_t addr, uint64_t bytes)
{
    srv_memops_end_range(c, addr, bytes); /* they leave the list: let_go stores no more there */
}

/* The main loop found the client gone: its waits on values in its host memory are let go
 * (said once). */
static void memops_lost(struct srv_client *c)
{
    if (srv_memops_let_go(c) && !c->memops->lost_said) {
        c->memops->lost_said = 1;
        srv_log("Client process %d: its streams' waits on values in its host memory "
                "were let go before its release (it is gone, or being stopped)",
                (int)c->pid);
    }
}

static int memops_init(struct srv_client *c)
{
    c->memops = calloc(1, sizeof(*c->memops));
    if (!c->memops) return -1;
    pthread_mutex_init(&c->memops->lock, NULL);
    return 0;
}

static void memops_free(struct srv_client *c)
{
    if (!c->memops) return;
    pthread_mutex_destroy(&c->memops->lock);
    free(c->memops->v);
    free(c->memops);
}

/* Stream waits on values it enqueued may still block its work. */
static int memops_waits_on_client(struct srv_client *c)
{
    return c->memops->n > 0;
}

const struct srv_family srv_family_memops = {.name = "memops",
                                             .client_init = memops_init,
                                             .client_free = memops_free,
                                             .client_lost = memops_lost,
                                             .waits_on_client = memops_waits_on_client,
                                             .ctx_quiesce = srv_memops_unblock};
