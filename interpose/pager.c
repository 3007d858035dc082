/* Migrating managed memory's faults (migrate.c has the table and the hooks): the SIGSEGV
 * handler, which hands a fault on an allocation's protected chunk to the pager and waits on a
 * futex (a handler must not send requests: the faulting thread may hold the ring or its
 * lane), and the pager, a thread of the shim's own that serves the queued faults together: a
 * transfer-free change where the chunk is the host's already, else one pull of their runs
 * (doubling along each of SEQS sequences of faults, so that threads walking their own slices
 * each get read-ahead), after the client's queued work unless the faults are the host
 * functions' thread's. */
#define _GNU_SOURCE
#include "interpose/migrate.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

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
static struct sigaction prev; /* the handler before ours */
static atomic_int cb_tid;     /* the host functions' thread (hostfn.c) */

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
    int ours = si->si_code == SEGV_ACCERR && atomic_load(&pager_up) &&
               a >= atomic_load(&shim_mig_lo) && a < atomic_load(&shim_mig_hi);
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

/* The pager's context for its requests: the allocation's (context.c keeps ids by pointer). */
static uint32_t pager_ctx;

/* The run of chunks a fault at chunk i of m serves: doubling along a sequence of faults
 * (one of SEQS followed), up to RUN_MAX, never past a chunk not in state st (DEV for a pull,
 * CLEAN for a write that needs none). */
static uint32_t run_for(struct mig *m, uint32_t i, uint8_t st)
{
    uint32_t slot = SEQS, want = 1, n = 1;
    for (uint32_t k = 0; k < SEQS && slot == SEQS; k++)
        if (m->seq_run[k] && m->seq_next[k] == i) {
            slot = k;
            want = m->seq_run[k] * 2 > RUN_MAX ? RUN_MAX : m->seq_run[k] * 2;
        }
    if (slot == SEQS) slot = m->seq_victim++ % SEQS;
    while (n < want && i + n < m->nchunks && m->st[i + n] == st)
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
    pthread_mutex_lock(&shim_mig_lock);
    for (struct fault *f = list; f; f = f->next) {
        if (f->result || f->hostfn != hostfn) continue;
        struct mig *m = shim_mig_find_locked(f->addr);
        if (!m) {
            f->result = 2;
            continue;
        }
        uint32_t i = (uint32_t)((f->addr - m->base) / CHUNK);
        if (m->st[i] == ST_DIRTY || (m->st[i] == ST_CLEAN && f->write == 0)) {
            f->result = 1; /* served meanwhile */
        } else if (m->st[i] == ST_CLEAN && m->prefetching && !hostfn) {
            /* A write while another thread's prefetch pull is landing on the allocation: its
             * bytes could land over the write. It waits (the fault stays queued; the pager
             * serves others meanwhile and is kicked when the pull is done). Not a host
             * function's: a prefetch may be waiting for it. */
            continue;
        } else if (m->st[i] == ST_CLEAN) { /* a write: no transfer */
            /* Read, then written (x[i] += ...): later pulls come writable, one fault a
             * chunk instead of two, at the cost of pushing back what may not change. */
            if (just_pulled(m, i)) m->rw = 1;
            /* A host pass writing what a prefetch brought: runs doubling as pulls do (a
             * fault and an mprotect per 2 MiB, not per chunk); a lone write, one chunk. */
            uint32_t n = run_for(m, i, ST_CLEAN);
            shim_mig_protect(m, i, i + n, PROT_READ | PROT_WRITE);
            memset(m->st + i, ST_DIRTY, n);
            f->result = 1;
        } else {
            size_t x = 0;
            while (x < k && !(p[x].m == m && i >= p[x].a && i < p[x].b))
                x++;
            if (x == k && k < BATCH) {
                uint32_t n = run_for(m, i, ST_DEV);
                p[k] = (struct pull){.m = m, .a = i, .b = i + n};
                e[k] = (struct chan_mvar_ent){.dptr = m->base + i * CHUNK,
                                              .len = shim_mig_span(m, i, i + n)};
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
        unsigned long b0 = atomic_load(&shim_mig_begun);
        pthread_mutex_unlock(&shim_mig_lock);
        r = shim_mig_move(CHAN_MVAR_MPULL, e, k, hostfn ? 0 : CHAN_MPULL_AFTER_WORK, 1);
        pthread_mutex_lock(&shim_mig_lock);
        if (r != CUDA_SUCCESS || atomic_load(&shim_mig_begun) == b0) break;
    }
    if (r != CUDA_SUCCESS && !said++)
        shim_log("managed memory at %#llx could not be brought from the device (%s): the host "
                 "sees its own last copy (said once)",
                 (unsigned long long)e[0].dptr, shim_error_name(r));
    for (size_t x = 0; x < k; x++) /* first: a chunk is made writable with no pull in flight */
        p[x].m->pins--;
    for (size_t x = 0; x < k; x++)
        shim_mig_reach_locked(p[x].m, p[x].a, p[x].b, p[x].m->rw);
    if (k) pthread_cond_broadcast(&shim_mig_unpinned);
    for (struct fault *f = list; f; f = f->next) {
        if (f->result != 3) continue;
        struct mig *m = shim_mig_find_locked(f->addr); /* held by its pin until just now */
        uint32_t i = m ? (uint32_t)((f->addr - m->base) / CHUNK) : 0;
        if (m && f->write == 1 && m->st[i] == ST_CLEAN && !m->pins) { /* else faults again */
            shim_mig_protect(m, i, i + 1, PROT_READ | PROT_WRITE);
            m->st[i] = ST_DIRTY;
        }
        f->result = 1;
    }
    pthread_mutex_unlock(&shim_mig_lock);
}

/* Faults taken from the queue, appended to *list. */
static void take(struct fault **list)
{
    struct fault *f = atomic_exchange(&queue, NULL);
    while (f) {
        struct fault *n = f->next;
        f->next = *list;
        *list = f;
        f = n;
    }
}

static void *pager(void *arg)
{
    (void)arg;
    shim_set_current_ctx(&pager_ctx, -1);
    struct fault *list = NULL; /* taken, not answered yet */
    for (;;) {
        unsigned w = atomic_load(&queue_word);
        take(&list);
        if (!list) {
            futex_wait(&queue_word, w);
            continue;
        }
        serve(list, 0);
        serve(list, 1);
        /* The answered ones go back to their threads; those left wait (a batch's overflow,
         * or a write waiting for a prefetch's pull): served again at once if some were
         * answered, else when a fault comes or a pull lands (kick), or 1 ms on. */
        int answered = 0;
        for (struct fault **pp = &list; *pp;) {
            struct fault *f = *pp;
            if (!f->result) {
                pp = &f->next;
                continue;
            }
            *pp = f->next; /* f is the faulting thread's, gone once done */
            atomic_store(&f->done, f->result);
            futex_wake(&f->done);
            answered = 1;
        }
        if (list && !answered) {
            struct timespec ms = {0, 1000000};
            syscall(SYS_futex, &queue_word, FUTEX_WAIT_PRIVATE, w, &ms, NULL, 0);
        }
    }
    return NULL;
}

static void kick(void)
{
    atomic_fetch_add(&queue_word, 1);
    futex_wake(&queue_word);
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

void shim_mig_hostfn_thread(void)
{
    atomic_store(&cb_tid, (int)syscall(SYS_gettid));
}

/* The table starts the pager and checks the handler through these (migrate.h says why). */
static const struct shim_mig_pager hooks = {
    .start = start_locked, .check = handler_check, .kick = kick};

__attribute__((constructor)) static void give_table(void)
{
    shim_mig_set_pager(&hooks);
}
