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
 *  - The host's first touch of a DEV chunk faults; the handler hands the fault to the pager,
 *    a thread of the shim's own (a signal handler must not send requests: the faulting
 *    thread may be inside one, holding its lane), and waits. The pager asks the server for
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
 *    only what it touches.
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
#include "interpose/shim.h"
#include "channel/settings.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define CHUNK (64ull << 10)
#define RUN_MAX 32u /* chunks one fault brings at most: 2 MiB */
#define SEQS 8      /* sequences of faults followed per allocation */
#define BATCH 64    /* faults served by one pull at most */

enum { ST_DEV = 0, ST_CLEAN, ST_DIRTY };

struct mig {
    uint64_t base, size; /* the allocation: A and its bytes */
    uint32_t nchunks;
    uint32_t nhost; /* chunks not DEV */
    uint32_t ctx;   /* the context it was made in: its pulls name it */
    uint32_t pins;  /* pulls in flight on it: its end waits for them */
    /* Sequences of faults followed (a thread's walk each, as in a parallel loop): the chunk
     * after the last run pulled, and that run's length; the slot a new sequence takes. */
    uint32_t seq_next[SEQS], seq_run[SEQS], seq_victim;
    int rw;     /* the host writes what it reads here: pulls come writable */
    int listed; /* in reach */
    uint8_t *st;
};

/* Guarded by lock: the allocations, by base; those with a chunk that is not DEV (reach: what
 * the next work must see to; when it could not grow, every allocation is looked at). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unpinned = PTHREAD_COND_INITIALIZER;
static struct mig **migs, **reach;
static size_t nmigs, capmigs, nreach, capreach;
static int reach_all;
/* Device work begun (shim_mig_work): a pull that saw it change was maybe overtaken. */
static atomic_ulong begun;
static atomic_int live; /* any migrating allocation made: the hooks have work */

/* ---------------------------------------------------------------- the fault handler */

struct fault {
    uint64_t addr;
    int write;        /* 1 a write, 0 a read, -1 not known */
    int hostfn;       /* the thread runs host functions */
    atomic_uint done; /* futex word: 0 pending, 1 served, 2 not ours */
    unsigned result;  /* the pager's: 0 not yet, 1 served, 2 not ours, 3 in this pull */
    struct fault *next;
};
static _Atomic(struct fault *) queue;
static atomic_uint queue_word; /* futex word the pager sleeps on */
static atomic_int pager_up;
static atomic_ulong lo_addr = ULONG_MAX, hi_addr; /* every allocation is within */
static struct sigaction prev;                     /* the handler before ours */
static atomic_int cb_tid;                         /* the host functions' thread (hostfn.c) */

static void futex_wait(atomic_uint *w, unsigned v)
{
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static int fault_write(const void *ucv)
{
#if defined(__x86_64__)
    const ucontext_t *uc = ucv;
    return (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0; /* the page fault's W bit */
#else
    (void)ucv;
    return -1;
#endif
}

static void on_segv(int sig, siginfo_t *si, void *ucv);

/* Not ours: as if our handler were not there. */
static void chain(int sig, siginfo_t *si, void *ucv)
{
    if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction && prev.sa_sigaction != on_segv) {
        prev.sa_sigaction(sig, si, ucv);
        return;
    }
    if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
        prev.sa_handler(sig);
        return;
    }
    /* The default: the access runs again and the process dies of it, as it would have. */
    signal(sig, SIG_DFL);
    if (si->si_code <= 0) raise(sig); /* sent, not a fault: it would not come again */
}

static void on_segv(int sig, siginfo_t *si, void *ucv)
{
    int saved = errno;
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    int ours = si->si_code == SEGV_ACCERR && atomic_load(&pager_up) && a >= atomic_load(&lo_addr) &&
               a < atomic_load(&hi_addr);
    if (ours && shim_ring_held) {
        /* The shim itself read managed memory while it held the ring (a request's bytes):
         * the pager could not send, so this would never end. Said, then the fault stands. */
        static const char msg[] = "mpsshim: managed memory read while a request was being "
                                  "built (an argument in managed memory?): not supported\n";
        ssize_t ignored = write(2, msg, sizeof(msg) - 1);
        (void)ignored;
        ours = 0;
    }
    if (ours) {
        struct fault f = {.addr = a,
                          .write = fault_write(ucv),
                          .hostfn = (int)syscall(SYS_gettid) == atomic_load(&cb_tid)};
        atomic_init(&f.done, 0);
        f.next = atomic_load(&queue);
        while (!atomic_compare_exchange_weak(&queue, &f.next, &f))
            ;
        atomic_fetch_add(&queue_word, 1);
        futex_wake(&queue_word);
        unsigned d;
        while ((d = atomic_load(&f.done)) == 0)
            futex_wait(&f.done, 0);
        if (d == 1) {
            errno = saved;
            return; /* the access runs again, now allowed */
        }
    }
    errno = saved;
    chain(sig, si, ucv);
}

/* Ours is SIGSEGV's handler (called under lock, where chunks become DEV): a program's own,
 * installed over ours, is chained behind it. */
static void handler_check(void)
{
    struct sigaction cur, ours;
    if (sigaction(SIGSEGV, NULL, &cur) != 0 ||
        ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv))
        return;
    memset(&ours, 0, sizeof(ours));
    ours.sa_sigaction = on_segv;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGSEGV, &ours, &prev) != 0) shim_log("managed memory: SIGSEGV handler not set");
}

/* ---------------------------------------------------------------- the table */

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

static struct mig *find_locked(uint64_t a)
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
static void protect(const struct mig *m, uint32_t a, uint32_t b, int prot)
{
    if (mprotect((void *)(uintptr_t)(m->base + a * CHUNK), (size_t)(b - a) * CHUNK, prot) != 0)
        shim_log("managed memory: mprotect failed (%s)", strerror(errno));
}

/* A range's bytes within the allocation (the last chunk may end past it). */
static uint64_t span(const struct mig *m, uint32_t a, uint32_t b)
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
    (*e)[(*n)++] = (struct chan_mvar_ent){.dptr = m->base + a * CHUNK, .len = span(m, a, b)};
    return 0;
}

/* The chunks of [a, b) still DEV become CLEAN, or DIRTY (writable) when `write`: the host
 * view now holds the device's bytes. */
static void reach_locked(struct mig *m, uint32_t a, uint32_t b, int write)
{
    uint32_t e;
    for (; run_of(m, &a, b, ST_DEV, 1, &e); a = e) {
        reachable_locked(m);
        m->nhost += e - a;
        memset(m->st + a, write ? ST_DIRTY : ST_CLEAN, e - a);
        protect(m, a, e, write ? PROT_READ | PROT_WRITE : PROT_READ);
    }
}

/* ---------------------------------------------------------------- transfers */

/* MPUSH or MPULL of n entries, in records that fit; reply: wait for each. */
static CUresult move(unsigned what, const struct chan_mvar_ent *e, size_t n, uint64_t flags,
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

/* The pager's context for its requests: the allocation's (context.c keeps ids by pointer). */
static uint32_t pager_ctx;

/* The run of chunks a fault at chunk i of m brings: doubling along a sequence of faults
 * (one of SEQS followed), up to RUN_MAX, never past a chunk the host already reaches. */
static uint32_t run_for(struct mig *m, uint32_t i)
{
    uint32_t slot = SEQS, want = 1, n = 1;
    for (uint32_t k = 0; k < SEQS && slot == SEQS; k++)
        if (m->seq_run[k] && m->seq_next[k] == i) {
            slot = k;
            want = m->seq_run[k] * 2 > RUN_MAX ? RUN_MAX : m->seq_run[k] * 2;
        }
    if (slot == SEQS) slot = m->seq_victim++ % SEQS;
    while (n < want && i + n < m->nchunks && m->st[i + n] == ST_DEV)
        n++;
    m->seq_next[slot] = i + n;
    m->seq_run[slot] = n;
    return n;
}

/* Chunk i of m was in a run pulled last (for the read-then-write hint). */
static int just_pulled(const struct mig *m, uint32_t i)
{
    for (uint32_t k = 0; k < SEQS; k++)
        if (m->seq_run[k] && i < m->seq_next[k] && i + m->seq_run[k] >= m->seq_next[k]) return 1;
    return 0;
}

/* What the pager brings in one pull: chunks [a, b) of m. */
struct pull {
    struct mig *m;
    uint32_t a, b;
};

/* The queued faults of the host functions' thread (hostfn 1: their pulls do not wait for
 * the client's work, which waits for them) or of the others, that are not served yet: those
 * served without a transfer are; the rest share one pull (at most BATCH runs; more wait for
 * the next), after which their chunks become CLEAN, or DIRTY for writes. */
static void serve(struct fault *list, int hostfn)
{
    static int said;
    struct pull p[BATCH];
    struct chan_mvar_ent e[BATCH];
    size_t k = 0;
    pthread_mutex_lock(&lock);
    for (struct fault *f = list; f; f = f->next) {
        if (f->result || f->hostfn != hostfn) continue;
        struct mig *m = find_locked(f->addr);
        if (!m) {
            f->result = 2;
            continue;
        }
        uint32_t i = (uint32_t)((f->addr - m->base) / CHUNK);
        if (m->st[i] == ST_DIRTY || (m->st[i] == ST_CLEAN && f->write == 0)) {
            f->result = 1;                 /* served meanwhile */
        } else if (m->st[i] == ST_CLEAN) { /* a write: no transfer */
            protect(m, i, i + 1, PROT_READ | PROT_WRITE);
            m->st[i] = ST_DIRTY;
            /* Read, then written (x[i] += ...): later pulls come writable, one fault a
             * chunk instead of two, at the cost of pushing back what may not change. */
            if (just_pulled(m, i)) m->rw = 1;
            f->result = 1;
        } else {
            size_t x = 0;
            while (x < k && !(p[x].m == m && i >= p[x].a && i < p[x].b))
                x++;
            if (x == k && k < BATCH) {
                uint32_t n = run_for(m, i);
                p[k] = (struct pull){.m = m, .a = i, .b = i + n};
                e[k] =
                    (struct chan_mvar_ent){.dptr = m->base + i * CHUNK, .len = span(m, i, i + n)};
                m->pins++;
                pager_ctx = m->ctx;
                k++;
            }
            if (x < k) f->result = 3;
        }
    }
    CUresult r = CUDA_SUCCESS;
    /* Work begun meanwhile may have overtaken the pull: again, a few times (a thread that
     * launches without end must not starve the touch). */
    for (int tries = 0; k && tries < 4; tries++) {
        unsigned long b0 = atomic_load(&begun);
        pthread_mutex_unlock(&lock);
        r = move(CHAN_MVAR_MPULL, e, k, hostfn ? 0 : CHAN_MPULL_AFTER_WORK, 1);
        pthread_mutex_lock(&lock);
        if (r != CUDA_SUCCESS || atomic_load(&begun) == b0) break;
    }
    if (r != CUDA_SUCCESS && !said++)
        shim_log("managed memory at %#llx could not be brought from the device (%s): the host "
                 "sees its own last copy (said once)",
                 (unsigned long long)e[0].dptr, shim_error_name(r));
    for (size_t x = 0; x < k; x++) {
        reach_locked(p[x].m, p[x].a, p[x].b, p[x].m->rw);
        p[x].m->pins--;
    }
    if (k) pthread_cond_broadcast(&unpinned);
    for (struct fault *f = list; f; f = f->next) {
        if (f->result != 3) continue;
        struct mig *m = find_locked(f->addr); /* held by its pin until just now */
        uint32_t i = m ? (uint32_t)((f->addr - m->base) / CHUNK) : 0;
        if (m && f->write == 1 && m->st[i] == ST_CLEAN) {
            protect(m, i, i + 1, PROT_READ | PROT_WRITE);
            m->st[i] = ST_DIRTY;
        }
        f->result = 1;
    }
    pthread_mutex_unlock(&lock);
}

static void *pager(void *arg)
{
    (void)arg;
    shim_set_current_ctx(&pager_ctx);
    for (;;) {
        unsigned w = atomic_load(&queue_word);
        struct fault *list = atomic_exchange(&queue, NULL), *f;
        if (!list) {
            futex_wait(&queue_word, w);
            continue;
        }
        int left;
        do {
            serve(list, 0);
            serve(list, 1);
            left = 0;
            for (f = list; f; f = f->next)
                left |= f->result == 0;
        } while (left);
        while (list) {
            f = list;
            list = f->next; /* f is the faulting thread's, gone once done */
            atomic_store(&f->done, f->result);
            futex_wake(&f->done);
        }
    }
    return NULL;
}

/* A forked child has no pager: its faults are not served. */
static void forked(void)
{
    atomic_store(&pager_up, 0);
}

/* The pager and the handler, once (under lock). */
static int start_locked(void)
{
    if (atomic_load(&pager_up)) return 0;
    pthread_t t;
    pthread_attr_t at;
    sigset_t all, old;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the pager takes no signals */
    int rc = pthread_create(&t, &at, pager, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0) return -1;
    static int atfork;
    if (!atfork++) pthread_atfork(NULL, NULL, forked);
    handler_check();
    atomic_store(&pager_up, 1);
    return 0;
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
    if (!m || !(m->st = calloc(n, 1)) || start_locked() != 0 ||
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
    protect(m, 0, n, PROT_READ);
    unsigned long lo = atomic_load(&lo_addr), hi = atomic_load(&hi_addr);
    if (base < lo) atomic_store(&lo_addr, base);
    if (base + (uint64_t)n * CHUNK > hi) atomic_store(&hi_addr, base + (uint64_t)n * CHUNK);
    atomic_store(&live, 1);
    return 0;
}

int shim_mig_place(uint64_t base, uint64_t size, uint64_t block, uint64_t block_bytes, int fd,
                   uint32_t ctx)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    if (block_bytes) {
        void *want = (void *)(uintptr_t)block;
        void *p = mmap(want, block_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                       fd, 0);
        if (p != want) {
            if (p != MAP_FAILED) munmap(p, block_bytes); /* an old kernel ignored the hint */
            pthread_mutex_unlock(&lock);
            return 1;
        }
        if (shim_grow((void **)&blocks, &capblocks, nblocks, sizeof(*blocks)) != 0) {
            munmap(p, block_bytes);
            pthread_mutex_unlock(&lock);
            return -1;
        }
        blocks[nblocks++] = (struct block){.base = block, .bytes = block_bytes};
    }
    /* The allocation lies in a block mapped here (a server naming another is refused). */
    struct block *b = block_of_locked(base, size);
    if (b && !(base & (CHUNK - 1)) && (rc = track_locked(base, size, ctx)) == 0) b->refs++;
    if (b && !b->refs) block_drop_locked(b);
    pthread_mutex_unlock(&lock);
    return rc;
}

int shim_mig_forget(uint64_t base)
{
    pthread_mutex_lock(&lock);
    struct mig *m = find_locked(base);
    while (m && m->base == base && m->pins) {
        pthread_cond_wait(&unpinned, &lock);
        m = find_locked(base); /* the table may have moved meanwhile */
    }
    if (!m || m->base != base) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    for (size_t k = 0; m->listed && k < nreach; k++)
        if (reach[k] == m) {
            reach[k] = reach[--nreach];
            break;
        }
    size_t i = above_locked(base) - 1;
    nmigs--;
    memmove(migs + i, migs + i + 1, (nmigs - i) * sizeof(*migs));
    /* Reachable again: a block's freed units are ordinary memory until they are reused. */
    protect(m, 0, m->nchunks, PROT_READ | PROT_WRITE);
    struct block *b = block_of_locked(base, m->size);
    if (b && !--b->refs) block_drop_locked(b);
    free(m->st);
    free(m);
    pthread_mutex_unlock(&lock);
    return 1;
}

/* m's chunks the host can reach become DEV, what it wrote added to e. */
static CUresult own_locked(struct mig *m, struct chan_mvar_ent **e, size_t *n, size_t *cap)
{
    CUresult r = CUDA_SUCCESS;
    uint32_t b, y;
    for (uint32_t a = 0; m->nhost && run_of(m, &a, m->nchunks, ST_DEV, 0, &b); a = b) {
        protect(m, a, b, PROT_NONE); /* first: no write slips past the push */
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
    handler_check();
    for (size_t i = 0; i < nreach; i++)
        if (own_locked(reach[i], &e, &n, &cap) != CUDA_SUCCESS) r = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; reach_all && i < nmigs; i++)
        if (own_locked(migs[i], &e, &n, &cap) != CUDA_SUCCESS) r = CUDA_ERROR_OUT_OF_MEMORY;
    nreach = 0;
    reach_all = 0;
    if (r == CUDA_SUCCESS && n) r = move(CHAN_MVAR_MPUSH, e, n, 0, reply);
    free(e);
    return r;
}

CUresult shim_mig_work(void)
{
    if (!atomic_load_explicit(&live, memory_order_relaxed)) return CUDA_SUCCESS;
    atomic_fetch_add(&begun, 1);
    pthread_mutex_lock(&lock);
    CUresult r = nreach || reach_all ? to_device_locked(0) : CUDA_SUCCESS;
    pthread_mutex_unlock(&lock);
    return r;
}

int shim_mig_live(void)
{
    return atomic_load_explicit(&live, memory_order_relaxed);
}

void shim_mig_hostfn_thread(void)
{
    atomic_store(&cb_tid, (int)syscall(SYS_gettid));
}

/* The host functions' thread names no context of its own: its pushes name an allocation's. */
static uint32_t hostfn_ctx;

void shim_mig_hostfn_done(void)
{
    if (!atomic_load_explicit(&live, memory_order_relaxed)) return;
    pthread_mutex_lock(&lock);
    /* What it wrote reaches the device before its stream goes on: waited for. */
    CUresult r = CUDA_SUCCESS;
    if (nreach || reach_all) {
        hostfn_ctx = nreach ? reach[0]->ctx : nmigs ? migs[0]->ctx : 0;
        shim_set_current_ctx(&hostfn_ctx);
        r = to_device_locked(1);
    }
    pthread_mutex_unlock(&lock);
    if (r != CUDA_SUCCESS)
        shim_log("managed memory a host function wrote could not reach the device (%s)",
                 shim_error_name(r));
}

CUresult shim_mig_prefetch_host(uint64_t p, uint64_t n)
{
    pthread_mutex_lock(&lock);
    struct mig *m = find_locked(p);
    uint64_t end;
    if (!m || n == 0 || __builtin_add_overflow(p, n, &end) || end - m->base > m->size) {
        pthread_mutex_unlock(&lock);
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
    if (r == CUDA_SUCCESS && k) {
        unsigned long b0 = atomic_load(&begun);
        m->pins++;
        pthread_mutex_unlock(&lock);
        r = move(CHAN_MVAR_MPULL, e, k, CHAN_MPULL_AFTER_WORK, 1);
        pthread_mutex_lock(&lock);
        m->pins--;
        pthread_cond_broadcast(&unpinned);
        /* Work begun meanwhile may have overtaken it: the chunks stay DEV, fetched on touch. */
        if (r == CUDA_SUCCESS && atomic_load(&begun) == b0) reach_locked(m, a, b, 0);
    }
    pthread_mutex_unlock(&lock);
    free(e);
    return r;
}
