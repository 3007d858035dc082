/* Migrating managed memory: cuMemAllocManaged's bytes in device memory while the GPU works
 * on them and in host memory while the host does (server/memory/migrate.c has the server's
 * half: device memory at A, and a host view this process maps at A).
 *
 * The rules are CUDA's for a device without concurrent managed access (which the device
 * reports): the host may touch managed memory only while no device work that may use it runs.
 * So this process keeps a state per 64 KiB chunk of each allocation, with the protection of
 * its pages following it:
 *
 *   DEV    the device's bytes may be newer; no access (PROT_NONE)
 *   CLEAN  the host view holds what the device holds; read-only
 *   DIRTY  the host wrote since; read-write
 *
 *  - Before device work is enqueued (a launch, a graph launch, a copy, a memset, any
 *    asynchronous call: shim_mig_work, beside the __managed__ variables' push), the DIRTY
 *    chunks go to the device (MPUSH, ordered before every later work of the client on any
 *    stream, no round trip), and every chunk the host could reach becomes DEV: any kernel may
 *    write any managed memory. In a steady loop of launches nothing is host-reachable and
 *    this costs one atomic increment.
 *  - The host's first touch of a DEV chunk faults; the handler (pager.c) hands the fault to
 *    the pager, a thread of the shim's own (a signal handler must not send requests: the
 *    faulting thread may be inside one, holding its lane), and waits. The pager asks the server for
 *    the chunk (MPULL, after every push and after all the client's queued work, so that a
 *    touch CUDA forbids, while a kernel runs, waits for it and sees its writes instead of
 *    losing them), then makes it CLEAN, or DIRTY for a write. Sequential faults bring
 *    doubling runs of chunks, up to 2 MiB, as read-ahead does (eight sequences followed per
 *    allocation: threads walking their own slices); faults queued together share one pull.
 *    The shim reads a call's arguments and a launch's parameters before it takes the ring
 *    (call.c, launch.c), so that one in managed memory faults where the pager can serve it;
 *    a fault while the ring is held is said and stands. A write to a CLEAN chunk
 *    faults once more and makes it DIRTY without a transfer; once the host has written a
 *    chunk it had just read, that allocation's later runs come DIRTY at once.
 *  - A host function's (or stream callback's, or host node's) touches do not wait for the
 *    client's work (its own stream waits for it), and what it wrote goes to the device before
 *    its stream goes on (shim_mig_hostfn_done: a push answered once done).
 *  - Attachment (CU_MEM_ATTACH_HOST or SINGLE, at allocation or by cuStreamAttachMemAsync)
 *    changes nothing: all managed memory is treated as attached globally, which is correct
 *    for every program that keeps the attach rules (kernels may still use host-attached
 *    memory, as they can natively on this device), at the cost of faults and waits a
 *    host-attached allocation would not need.
 *  - Synchronisations change nothing here: what the host touches afterwards is fetched then,
 *    only what it touches. But for a prefetch to the host on a stream of the program's own:
 *    the pull is queued (on the transfers' stream after all the client's work, and the
 *    stream waits for it) and the call returns; a later synchronisation that covers it (that
 *    stream's, or its context's) makes the chunks CLEAN without a fault, unless device work
 *    began in between (then they stay DEV, fetched on touch). A prefetch on the NULL or
 *    per-thread stream, to an older server, or while another pull is in flight on the
 *    allocation pulls at once and waits.
 *  - No pull's bytes may land on a chunk the host can write: a chunk becomes DIRTY only while
 *    no pull is in flight on its allocation, and a host write to a CLEAN chunk waits while
 *    another thread's prefetch pull is landing on the allocation (pager.c; a host
 *    function's does not wait, since the prefetch may be waiting for it).
 *
 * Every decision is this process's own, from its own table: the server copies what it is
 * asked between a client's host view and its device memory, and a client can only fool
 * itself. Faults that are not ours (another address, or no pager) go to the handler that was
 * installed before ours, or end the process as they would have; a program that installs its
 * own SIGSEGV handler over ours gets it chained behind ours at the next work (checked where
 * chunks become DEV). MPSSHIM_MANAGED_MIGRATE=0 keeps managed memory in host memory, read by
 * the GPU over the bus, as before (interpose/managed.c).
 *
 * Limits (docs/apis.md, "Managed memory"): a host thread touching managed memory at the very moment
 * another thread enqueues device work is a race CUDA forbids; the touch sees the bytes from
 * before or after that work, and a chunk it made readable stays so until the next work. A
 * forked child touching a chunk that is not host-reachable dies of the fault. */
#define _GNU_SOURCE
#include "interpose/migrate.h"
#include "channel/settings.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

pthread_mutex_t shim_mig_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t shim_mig_unpinned = PTHREAD_COND_INITIALIZER;
atomic_ulong shim_mig_begun;
atomic_ulong shim_mig_lo = ULONG_MAX, shim_mig_hi;
static const struct shim_mig_pager *pager;

void shim_mig_set_pager(const struct shim_mig_pager *p)
{
    pager = p;
}
/* Guarded by shim_mig_lock: the allocations, by base; those with a chunk that is not DEV
 * (reach: what the next work must see to; when it could not grow, every allocation is looked
 * at). */
static struct mig **migs, **reach;
static size_t nmigs, capmigs, nreach, capreach;
static int reach_all;
static atomic_int live; /* any migrating allocation made: the hooks have work */

/* ---------------------------------------------------------------- the table */

/* Prefetches to the host queued on a stream (guarded by shim_mig_lock): chunks [a, b) of m,
 * pulled behind stream s of context ctx when the count of device work begun was `begun`. At
 * most PEND_MAX: past them a prefetch waits as on the NULL stream. */
#define PEND_MAX 64
struct pend {
    struct mig *m;
    uint32_t a, b, ctx;
    CUstream s;
    unsigned long begun;
    uint64_t seq; /* its number in pend_seq: a synchronisation covers it only if sent after */
};
static struct pend pend[PEND_MAX];
static _Atomic size_t npend; /* changed under lock; read without it to skip the lock at 0 */
/* Queued pulls sent so far, counted after each is in the ring; a synchronisation reads it
 * before it is sent (sync_seq, this thread's): a pull counted by then is ahead of it in the
 * ring, so the server's worker, which serves a client's records in order, queued the
 * stream's wait for the pull before it waits for the stream. One sent by another thread
 * while the synchronisation was on its way is not covered by it (the server may have
 * answered before it saw the pull). */
static atomic_ulong pend_seq;
static __thread uint64_t sync_seq;

/* Forgets the queued prefetches of allocation m, or (m NULL) of stream s (under lock). */
static void pend_drop_locked(const struct mig *m, CUstream s)
{
    for (size_t i = npend; i-- > 0;)
        if (m ? pend[i].m == m : pend[i].s == s) pend[i] = pend[--npend];
}

/* The index of the first allocation whose base is above a. */
static size_t above_locked(uint64_t a)
{
    size_t lo = 0, hi = nmigs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (migs[mid]->base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct mig *shim_mig_find_locked(uint64_t a)
{
    size_t i = above_locked(a);
    if (i == 0) return NULL;
    struct mig *m = migs[i - 1];
    return a - m->base < (uint64_t)m->nchunks * CHUNK ? m : NULL;
}

/* m has chunks the host can reach: the next work sees to them. */
static void reachable_locked(struct mig *m)
{
    if (m->listed) return;
    if (shim_grow((void **)&reach, &capreach, nreach, sizeof(*reach)) != 0) {
        reach_all = 1;
        return;
    }
    reach[nreach++] = m;
    m->listed = 1;
}

/* Chunks [a, b) of m get protection prot. */
void shim_mig_protect(const struct mig *m, uint32_t a, uint32_t b, int prot)
{
    if (mprotect((void *)(uintptr_t)(m->base + a * CHUNK), (size_t)(b - a) * CHUNK, prot) != 0)
        shim_log("managed memory: mprotect failed (%s)", strerror(errno));
}

/* A range's bytes within the allocation (the last chunk may end past it). */
uint64_t shim_mig_span(const struct mig *m, uint32_t a, uint32_t b)
{
    uint64_t end = (uint64_t)b * CHUNK;
    return (end < m->size ? end : m->size) - (uint64_t)a * CHUNK;
}

/* The next run of chunks from *at, below end, whose state is st (is 1) or is not (is 0):
 * 1 with the run in [*at, *to); 0 when none is left. */
static int run_of(const struct mig *m, uint32_t *at, uint32_t end, uint8_t st, int is, uint32_t *to)
{
    uint32_t a = *at;
    while (a < end && (m->st[a] == st) != is)
        a++;
    uint32_t b = a;
    while (b < end && (m->st[b] == st) == is)
        b++;
    *at = a;
    *to = b;
    return a < end;
}

/* A push or pull entry for chunks [a, b) of m, appended to *e: 0, or -1 out of memory. */
static int entry(const struct mig *m, uint32_t a, uint32_t b, struct chan_mvar_ent **e, size_t *n,
                 size_t *cap)
{
    if (shim_grow((void **)e, cap, *n, sizeof(**e)) != 0) return -1;
    (*e)[(*n)++] =
        (struct chan_mvar_ent){.dptr = m->base + a * CHUNK, .len = shim_mig_span(m, a, b)};
    return 0;
}

/* The chunks of [a, b) still DEV become CLEAN, or DIRTY (writable) when `write` and no pull
 * is in flight on m (its bytes could land over the host's writes): the host view now holds
 * the device's bytes. */
void shim_mig_reach_locked(struct mig *m, uint32_t a, uint32_t b, int write)
{
    uint32_t e;
    write = write && !m->pins;
    for (; run_of(m, &a, b, ST_DEV, 1, &e); a = e) {
        reachable_locked(m);
        m->nhost += e - a;
        memset(m->st + a, write ? ST_DIRTY : ST_CLEAN, e - a);
        shim_mig_protect(m, a, e, write ? PROT_READ | PROT_WRITE : PROT_READ);
    }
}

/* ---------------------------------------------------------------- transfers */

/* MPUSH or MPULL of n entries, in records that fit; reply: wait for each. */
CUresult shim_mig_move(unsigned what, const struct chan_mvar_ent *e, size_t n, uint64_t flags,
                       int reply)
{
    const size_t per =
        (CHAN_REC_MAX - sizeof(struct chan_rec) - sizeof(struct chan_mvar)) / sizeof(*e);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        struct chan_mvar h = {.what = what, .n = (uint32_t)k, .buf = flags};
        struct shim_req q;
        if ((r = shim_req_begin(&q, CHAN_OP_MVAR, (uint32_t)(sizeof(h) + k * sizeof(*e)), reply,
                                0)) != CUDA_SUCCESS)
            break;
        memcpy(q.payload, &h, sizeof(h));
        memcpy(q.payload + sizeof(h), e + i, k * sizeof(*e));
        shim_req_send(&q);
        if (reply) r = shim_req_wait(&q, NULL, NULL);
    }
    return r;
}

/* ---------------------------------------------------------------- the shim's hooks */

int shim_mig_wanted(void)
{
    return chan_setting_num(CHAN_SET_MANAGED_MIGRATE) != 0;
}

/* The blocks mapped here (the server's, shared by small allocations: server/memory/migrate.c),
 * under lock; each is unmapped with its last allocation. */
struct block {
    uint64_t base, bytes;
    int refs;
};
static struct block *blocks;
static size_t nblocks, capblocks;

static struct block *block_of_locked(uint64_t base, uint64_t size)
{
    for (size_t i = 0; i < nblocks; i++)
        if (base >= blocks[i].base && base - blocks[i].base < blocks[i].bytes &&
            size <= blocks[i].bytes - (base - blocks[i].base))
            return &blocks[i];
    return NULL;
}

static void block_drop_locked(struct block *b)
{
    munmap((void *)(uintptr_t)b->base, b->bytes);
    *b = blocks[--nblocks];
}

/* A new allocation's table entry: 0, or -1 when out of memory or no pager. */
static int track_locked(uint64_t base, uint64_t size, uint32_t ctx)
{
    struct mig *m = calloc(1, sizeof(*m));
    uint32_t n = (uint32_t)((size + CHUNK - 1) / CHUNK);
    if (!m || !(m->st = calloc(n, 1)) || !pager || pager->start() != 0 ||
        shim_grow((void **)&migs, &capmigs, nmigs, sizeof(*migs)) != 0) {
        if (m) free(m->st);
        free(m);
        return -1;
    }
    *m = (struct mig){.base = base, .size = size, .nchunks = n, .ctx = ctx, .st = m->st};
    size_t at = above_locked(base);
    memmove(migs + at + 1, migs + at, (nmigs - at) * sizeof(*migs));
    migs[at] = m;
    nmigs++;
    /* Both sides start zeroed: CLEAN, read-only, so that the host reads without a transfer
     * and its first write per chunk is seen. */
    memset(m->st, ST_CLEAN, n);
    m->nhost = n;
    reachable_locked(m);
    shim_mig_protect(m, 0, n, PROT_READ);
    if (base < atomic_load(&shim_mig_lo)) atomic_store(&shim_mig_lo, base);
    if (base + (uint64_t)n * CHUNK > atomic_load(&shim_mig_hi))
        atomic_store(&shim_mig_hi, base + (uint64_t)n * CHUNK);
    atomic_store(&live, 1);
    return 0;
}

int shim_mig_place(uint64_t base, uint64_t size, uint64_t block, uint64_t block_bytes, int fd,
                   uint32_t ctx)
{
    int rc = -1;
    pthread_mutex_lock(&shim_mig_lock);
    if (block_bytes) {
        void *want = (void *)(uintptr_t)block;
        void *p = mmap(want, block_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                       fd, 0);
        if (p != want) {
            if (p != MAP_FAILED) munmap(p, block_bytes); /* an old kernel ignored the hint */
            pthread_mutex_unlock(&shim_mig_lock);
            return 1;
        }
        if (shim_grow((void **)&blocks, &capblocks, nblocks, sizeof(*blocks)) != 0) {
            munmap(p, block_bytes);
            pthread_mutex_unlock(&shim_mig_lock);
            return -1;
        }
        blocks[nblocks++] = (struct block){.base = block, .bytes = block_bytes};
    }
    /* The allocation lies in a block mapped here (a server naming another is refused). */
    struct block *b = block_of_locked(base, size);
    if (b && !(base & (CHUNK - 1)) && (rc = track_locked(base, size, ctx)) == 0) b->refs++;
    if (b && !b->refs) block_drop_locked(b);
    pthread_mutex_unlock(&shim_mig_lock);
    return rc;
}

int shim_mig_forget(uint64_t base)
{
    pthread_mutex_lock(&shim_mig_lock);
    struct mig *m = shim_mig_find_locked(base);
    while (m && m->base == base && m->pins) {
        pthread_cond_wait(&shim_mig_unpinned, &shim_mig_lock);
        m = shim_mig_find_locked(base); /* the table may have moved meanwhile */
    }
    if (!m || m->base != base) {
        pthread_mutex_unlock(&shim_mig_lock);
        return 0;
    }
    for (size_t k = 0; m->listed && k < nreach; k++)
        if (reach[k] == m) {
            reach[k] = reach[--nreach];
            break;
        }
    pend_drop_locked(m, NULL);
    size_t i = above_locked(base) - 1;
    nmigs--;
    memmove(migs + i, migs + i + 1, (nmigs - i) * sizeof(*migs));
    /* Reachable again: a block's freed units are ordinary memory until they are reused. */
    shim_mig_protect(m, 0, m->nchunks, PROT_READ | PROT_WRITE);
    struct block *b = block_of_locked(base, m->size);
    if (b && !--b->refs) block_drop_locked(b);
    free(m->st);
    free(m);
    pthread_mutex_unlock(&shim_mig_lock);
    return 1;
}

/* m's chunks the host can reach become DEV, what it wrote added to e. */
static CUresult own_locked(struct mig *m, struct chan_mvar_ent **e, size_t *n, size_t *cap)
{
    CUresult r = CUDA_SUCCESS;
    uint32_t b, y;
    for (uint32_t a = 0; m->nhost && run_of(m, &a, m->nchunks, ST_DEV, 0, &b); a = b) {
        shim_mig_protect(m, a, b, PROT_NONE); /* first: no write slips past the push */
        for (uint32_t x = a; run_of(m, &x, b, ST_DIRTY, 1, &y); x = y)
            if (entry(m, x, y, e, n, cap) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
        memset(m->st + a, ST_DEV, b - a);
    }
    m->nhost = 0;
    m->listed = 0;
    return r;
}

/* Pushes the DIRTY chunks and makes every chunk DEV (under lock); reply: wait for the push. */
static CUresult to_device_locked(int reply)
{
    struct chan_mvar_ent *e = NULL;
    size_t n = 0, cap = 0;
    CUresult r = CUDA_SUCCESS;
    if (pager) pager->check();
    for (size_t i = 0; i < nreach; i++)
        if (own_locked(reach[i], &e, &n, &cap) != CUDA_SUCCESS) r = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; reach_all && i < nmigs; i++)
        if (own_locked(migs[i], &e, &n, &cap) != CUDA_SUCCESS) r = CUDA_ERROR_OUT_OF_MEMORY;
    nreach = 0;
    reach_all = 0;
    if (r == CUDA_SUCCESS && n) r = shim_mig_move(CHAN_MVAR_MPUSH, e, n, 0, reply);
    free(e);
    return r;
}

CUresult shim_mig_work(void)
{
    if (!atomic_load_explicit(&live, memory_order_relaxed)) return CUDA_SUCCESS;
    atomic_fetch_add(&shim_mig_begun, 1);
    pthread_mutex_lock(&shim_mig_lock);
    CUresult r = nreach || reach_all ? to_device_locked(0) : CUDA_SUCCESS;
    pthread_mutex_unlock(&shim_mig_lock);
    return r;
}

int shim_mig_live(void)
{
    return atomic_load_explicit(&live, memory_order_relaxed);
}

/* The host functions' thread names no context of its own: its pushes name an allocation's. */
static uint32_t hostfn_ctx;

void shim_mig_hostfn_done(void)
{
    if (!atomic_load_explicit(&live, memory_order_relaxed)) return;
    pthread_mutex_lock(&shim_mig_lock);
    /* What it wrote reaches the device before its stream goes on: waited for. */
    CUresult r = CUDA_SUCCESS;
    if (nreach || reach_all) {
        hostfn_ctx = nreach ? reach[0]->ctx : nmigs ? migs[0]->ctx : 0;
        shim_set_current_ctx(&hostfn_ctx, -1);
        r = to_device_locked(1);
    }
    pthread_mutex_unlock(&shim_mig_lock);
    if (r != CUDA_SUCCESS)
        shim_log("managed memory a host function wrote could not reach the device (%s)",
                 shim_error_name(r));
}

/* A stream goes: its queued prefetches are never made CLEAN (a stream made later may get
 * its handle; the chunks stay DEV, fetched on touch). */
void shim_mig_stream_gone(CUstream s)
{
    if (!atomic_load_explicit(&npend, memory_order_relaxed)) return;
    pthread_mutex_lock(&shim_mig_lock);
    pend_drop_locked(NULL, s);
    pthread_mutex_unlock(&shim_mig_lock);
}

void shim_mig_sync_begin(void)
{
    if (atomic_load_explicit(&live, memory_order_relaxed)) sync_seq = atomic_load(&pend_seq);
}

/* A synchronisation returned: the queued prefetches it covers (what: enum shim_mvar_sync,
 * stream s or context ctx, and sent before it began) are done, and their chunks still DEV
 * become CLEAN if no device work began since they were queued (it may have changed the
 * device's bytes after the pull). */
void shim_mig_synced(int what, CUstream s, uint32_t ctx, CUresult r)
{
    /* Nothing queued (read without the lock): a prefetch queued meanwhile is not one this
     * synchronisation covers for sure; it waits for the next that does. */
    if (r != CUDA_SUCCESS || !atomic_load_explicit(&npend, memory_order_relaxed)) return;
    pthread_mutex_lock(&shim_mig_lock);
    unsigned long now = atomic_load(&shim_mig_begun);
    for (size_t i = npend; i-- > 0;) {
        struct pend *q = &pend[i];
        int covered = q->seq <= sync_seq && ((what == SHIM_MVAR_STREAM && q->s == s) ||
                                             (what == SHIM_MVAR_CTX && q->ctx == ctx));
        if (covered && q->begun == now) shim_mig_reach_locked(q->m, q->a, q->b, q->m->rw);
        if (covered || q->begun != now) *q = pend[--npend];
    }
    pthread_mutex_unlock(&shim_mig_lock);
}

/* Whether a prefetch to the host of m on s may be queued rather than waited for: a stream of
 * the program's own (the NULL and per-thread streams name a different stream per thread,
 * which a synchronisation elsewhere could be taken for), a server that knows
 * CHAN_MPULL_ON_STREAM (protocol 5.7), room to keep it, and no pull in flight on m (one
 * queued before it could make a chunk the host's, and the host write it, before the queued
 * pull lands over it; pulls queued after it land after it, in the server's order).
 * Capture was ruled out by the caller. */
static int queueable_locked(const struct mig *m, CUstream s)
{
    return s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && shim_conn.server_minor >= 7 &&
           npend < PEND_MAX && !m->pins;
}

CUresult shim_mig_prefetch_host(uint64_t p, uint64_t n, CUstream s)
{
    pthread_mutex_lock(&shim_mig_lock);
    struct mig *m = shim_mig_find_locked(p);
    uint64_t end;
    if (!m || n == 0 || __builtin_add_overflow(p, n, &end) || end - m->base > m->size) {
        pthread_mutex_unlock(&shim_mig_lock);
        return CUDA_SUCCESS; /* not migrating memory: nothing moves */
    }
    uint32_t a = (uint32_t)((p - m->base) / CHUNK),
             b = (uint32_t)((end - m->base + CHUNK - 1) / CHUNK);
    struct chan_mvar_ent *e = NULL;
    size_t k = 0, cap = 0;
    CUresult r = CUDA_SUCCESS;
    uint32_t y;
    for (uint32_t x = a; r == CUDA_SUCCESS && run_of(m, &x, b, ST_DEV, 1, &y); x = y)
        if (entry(m, x, y, &e, &k, &cap) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    unsigned long b0 = atomic_load(&shim_mig_begun);
    if (r == CUDA_SUCCESS && k && queueable_locked(m, s)) {
        /* Sent under the lock: no pull of the pager's can come between the scan and this
         * one in the ring (none is in flight: queueable), so every later pull lands after
         * it, in the server's order on the pulls' stream. */
        for (size_t i = 0; i < k; i++)
            e[i].off = (uint64_t)(uintptr_t)s; /* the stream that waits for the pull */
        r = shim_mig_move(CHAN_MVAR_MPULL, e, k, CHAN_MPULL_AFTER_WORK | CHAN_MPULL_ON_STREAM, 0);
        uint64_t seq = atomic_fetch_add(&pend_seq, 1) + 1; /* it is in the ring */
        if (r == CUDA_SUCCESS) /* room: queueable_locked, under the same lock */
            pend[npend++] = (struct pend){.m = m,
                                          .a = a,
                                          .b = b,
                                          .ctx = shim_current_ctx_id(),
                                          .s = s,
                                          .begun = b0,
                                          .seq = seq};
    } else if (r == CUDA_SUCCESS && k) {
        m->pins++;
        m->prefetching++; /* a host write waits for it (pager.c) */
        pthread_mutex_unlock(&shim_mig_lock);
        r = shim_mig_move(CHAN_MVAR_MPULL, e, k, CHAN_MPULL_AFTER_WORK, 1);
        pthread_mutex_lock(&shim_mig_lock);
        m->pins--;
        m->prefetching--;
        pthread_cond_broadcast(&shim_mig_unpinned);
        if (pager) pager->kick();
        /* Work begun meanwhile may have overtaken it: the chunks stay DEV, fetched on touch.
         * Writable at once where the host was seen writing what it read (the pager's hint). */
        if (r == CUDA_SUCCESS && atomic_load(&shim_mig_begun) == b0)
            shim_mig_reach_locked(m, a, b, m->rw);
    }
    pthread_mutex_unlock(&shim_mig_lock);
    free(e);
    return r;
}
