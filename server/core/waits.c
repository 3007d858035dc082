/* Replies that wait for the GPU (stream, event and context synchronisation, copies whose
 * caller must see them complete). The worker never blocks on them: each becomes a list of
 * events it polls between requests, so one client thread waiting for a long kernel does
 * not stop its other threads' calls from being served. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/clients.h"
#include "server/core/reply.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/core/spin.h"
#include "channel/settings.h"
#include "channel/procstat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Posts the reply of a finished wait, with an error deferred from an async call if any
 * (unless `own`: the reply of a transfer of the shim's own, srv_wait_stream_own). */
static void finish(struct srv_client *c, int lane, CUresult r, uint32_t len, int own)
{
    if (r == CUDA_SUCCESS && !own) r = srv_take_deferred(c);
    srv_reply(c, lane, r, len);
}

/* srv_client_one_thread: by its /proc/PID/task folder's link count, which Linux's procfs makes
 * 2 plus the process's threads (an fstat: 0.6 us on the CPU test machine), else by the thread
 * count of its /proc/PID/stat (a read of the whole line, formatted for it: 3.3 us, asked at
 * a synchronisation of each single-threaded client). The link count is trusted for a client
 * only where it agreed with the stat line at the first question. Both kept open (no open per
 * question). 0 when it has more threads, or when neither can be read (a client in a PID
 * namespace the server cannot see into, pid 0: not asked again). */
static int stat_threads(struct srv_client *c)
{
    return (int)chan_stat_read(c->stat_fd1 - 1, 20);
}

int srv_client_one_thread(struct srv_client *c)
{
    if (!c->stat_fd1) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)c->pid);
        int fd = c->pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        c->stat_fd1 = fd + 1 > 0 ? fd + 1 : -1;
    }
    if (c->stat_fd1 <= 0) return 0;
    struct stat st;
    if (!c->task_fd1) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int)c->pid);
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int n = stat_threads(c);
        if (fd >= 0 && fstat(fd, &st) == 0 && n > 0 && st.st_nlink == (nlink_t)n + 2) {
            c->task_fd1 = fd + 1;
        } else {
            if (fd >= 0) close(fd);
            c->task_fd1 = -1;
        }
    }
    if (c->task_fd1 > 0 && fstat(c->task_fd1 - 1, &st) == 0) return st.st_nlink == 3;
    return stat_threads(c) == 1;
}

/* A client whose process has one thread is blocked in this very wait and can send nothing
 * else: the worker may then block in the driver's own synchronisation, which wakes faster
 * than polling. Any other client is polled, so that one of its threads waiting for the GPU
 * never holds up the others (which might even be the ones to release the work waited for:
 * a collective's half on another GPU, launched by another thread, tests/progs/thread_peer).
 * Not "has only called from one thread so far", as this was: a thread that had not yet sent
 * a record, or made only calls the shim answers itself, then found its launch unread behind
 * the blocked worker, for as long as the wait lasted, for ever where the wait was for that
 * launch. So is one that has host functions or host nodes (hostfn.c): its
 * work may wait on its callback thread, and should it die there, only this worker, polling
 * and so seeing it go, releases that work. */
static int may_block(struct srv_client *c)
{
    return srv.block_sync && !c->many_threads && !c->cb_last && !c->hn &&
           !chan_ring_pending(&c->ch) && srv_client_one_thread(c);
}

/* Blocks the worker until everything on `s` so far has run. The shared contexts keep the
 * driver's default scheduling (CU_CTX_SCHED_AUTO, which spins while the process has fewer
 * contexts than CPUs): its spin answers fastest, so it is kept while CPUs are free. While
 * the server is crowded (spin.c: busy clients over half the CPUs) a spinning worker per
 * waiting client takes the CPUs the clients' own threads and the other workers need — an
 * MPI job of one polling rank per CPU ran at about 2x native MPS's time — so the worker
 * then sleeps in an event made with CU_EVENT_BLOCKING_SYNC until the GPU's interrupt.
 * An operator's MPSSHIM_CTX_SCHED other than auto is left to decide alone. */
static CUresult block_stream(struct srv_client *c, struct srv_stream *s)
{
    int d = s->device;
    /* A client that allocates from memory pools is waited for by cuStreamSynchronize itself:
     * what it freed stream-ordered the driver keeps reserved through cuMemPoolTrimTo until
     * the stream has been synchronised; neither the event below nor a cuStreamQuery of the
     * stream before the trim counts (bench/NOTES.md, "Replies from the GPU"). */
    if (srv.ctx_sched != CU_CTX_SCHED_AUTO || !srv_spin_crowded() || c->pool_allocs || d < 0 ||
        d >= CHAN_MAX_DEVICES)
        return DRV(cuStreamSynchronize)(s->real);
    /* A short wait (a fleet's few small kernels and a read-back) is spun out first, on the
     * stream itself (srv_spin_sync_ns): a blocking event recorded for every synchronisation
     * costs each an interrupt, which cost a crowded fleet over a quarter of its steps, even
     * with the event only queried for 1 ms before anyone slept on it (bench/NOTES.md,
     * "block_stream spin"). */
    uint64_t spin = srv_spin_sync_ns();
    if (spin) {
        uint64_t end = chan_now_ns() + spin;
        CUresult q;
        while ((q = DRV(cuStreamQuery)(s->real)) == CUDA_ERROR_NOT_READY && chan_now_ns() < end)
            for (int i = 0; i < 32; i++)
                chan_cpu_relax();
        if (q != CUDA_ERROR_NOT_READY) return q;
    }
    CUevent ev = srv_event_blocking(c, d);
    if (!ev || DRV(cuEventRecord)(ev, s->real) != CUDA_SUCCESS)
        return DRV(cuStreamSynchronize)(s->real);
    return DRV(cuEventSynchronize)(ev);
}

/* MPSSHIM_GPU_REPLIES: 0 turns replies from the GPU off. */
static int gpu_replies = 1;
/* MPSSHIM_GPU_REPLY_FRESH_US, in ns: a stream given work this recently is not asked whether
 * it is idle before a reply from the GPU is queued on it (gpu_reply). */
static uint64_t fresh_ns;
/* MPSSHIM_CROWDED_GPU_REPLIES (1): replies from the GPU while crowded too (gpu_reply). */
static int crowded_replies;

void srv_waits_init(void)
{
    gpu_replies = (int)chan_setting_num(CHAN_SET_GPU_REPLIES);
    fresh_ns = chan_setting_num(CHAN_SET_GPU_REPLY_FRESH_US) * 1000;
    crowded_replies = (int)chan_setting_num(CHAN_SET_CROWDED_GPU_REPLIES);
}

/* Waits done are kept for the next ones, up to SPARE_WAITS a client, zeroed: a wait is about 1
 * KiB (its events' arrays), and its allocation and zeroing came before the GPU's store on every
 * round trip the GPU answers (gpu_reply), 570 of the worker's instructions a copy there
 * (callgrind, the CPU test driver, copysweep's 4 KiB copies), against a few taken from the
 * list. A wait is freed some polls after its reply, when the next round trip's wait is made
 * already: one spare would seldom be there, four are. */
#define SPARE_WAITS 4

static struct srv_wait *new_wait(struct srv_client *c, int lane, uint32_t len)
{
    struct srv_wait *w = c->spare_waits;
    if (w) {
        c->spare_waits = w->next;
        c->nspare_waits--;
        w->next = NULL;
    } else if (!(w = calloc(1, sizeof(*w)))) {
        return NULL;
    }
    w->lane = lane;
    w->reply_len = len;
    w->result = CUDA_SUCCESS;
    return w;
}

/* A wait's memory given back (its events and word already): kept zeroed for new_wait, or
 * freed. */
static void wait_drop(struct srv_client *c, struct srv_wait *w)
{
    if (c->nspare_waits >= SPARE_WAITS) {
        free(w);
        return;
    }
    memset(w, 0, sizeof(*w));
    w->next = c->spare_waits;
    c->spare_waits = w;
    c->nspare_waits++;
}

void srv_waits_spares_free(struct srv_client *c)
{
    for (struct srv_wait *w = c->spare_waits, *n; w; w = n) {
        n = w->next;
        free(w);
    }
    c->spare_waits = NULL;
    c->nspare_waits = 0;
}

/* A wait with an event of s's device taken for it (ev[0], pooled, not counted in nev until
 * recorded: armed); NULL without memory or an event. */
static struct srv_wait *new_wait_ev(struct srv_client *c, struct srv_stream *s, int lane,
                                    uint32_t len)
{
    struct srv_wait *w = new_wait(c, lane, len);
    if (!w) return NULL;
    if (srv_event_take(c, s->device, &w->ev[0]) != CUDA_SUCCESS) {
        wait_drop(c, w);
        return NULL;
    }
    w->dev[0] = s->device;
    w->pooled[0] = 1;
    return w;
}

/* new_wait_ev's wait given up before it was armed: its event back to the pool. */
static void drop_unarmed(struct srv_client *c, struct srv_wait *w)
{
    srv_event_give(c, w->dev[0], w->ev[0]);
    srv_wait_free(c, w);
}

static void add(struct srv_client *c, struct srv_wait *w);

/* new_wait_ev's wait with its event recorded on s behind what is there: pending (added to
 * c's waits). The driver's refusal otherwise (the event and the wait still the caller's). */
static CUresult arm(struct srv_client *c, struct srv_wait *w, struct srv_stream *s)
{
    CUresult r = DRV(cuEventRecord)(w->ev[0], s->real);
    if (r != CUDA_SUCCESS) return r;
    w->nev = 1;
    add(c, w);
    return CUDA_SUCCESS;
}

static void add(struct srv_client *c, struct srv_wait *w)
{
    w->added = 1;
    c->nwaits++; /* until srv_wait_free */
    w->made_ns = chan_now_ns();
    w->ask_ns = w->made_ns + SRV_WAITS_LAZY_US * 1000ull;
    /* A thread waits on one reply a lane at a time: an older wait on this lane was seen by
     * the thread, whose events are then asked at the next poll (srv_waits_poll). */
    for (struct srv_wait *o = c->waits; o; o = o->next)
        if (o->lane == w->lane && (o->gpu || o->word.host)) o->passed = 1;
    w->next = c->waits;
    c->waits = w;
    atomic_store_explicit(&c->stats.gpu_waits, 1, memory_order_relaxed);
}

/* Adds "everything on `s` so far" to w; blocks instead if w is full. */
static CUresult add_stream(struct srv_client *c, struct srv_wait *w, struct srv_stream *s)
{
    /* A capturing stream runs nothing now; its recorded work runs when the graph does. */
    if (srv_stream_capturing(c, s) || DRV(cuStreamQuery)(s->real) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    if (w->nev == SRV_WAIT_EVENTS) return DRV(cuStreamSynchronize)(s->real);
    CUevent ev;
    CUresult r = srv_event_take(c, s->device, &ev);
    if (r != CUDA_SUCCESS) {
        srv_log("Client process %d: no event to wait with on device %d: %s", (int)c->pid, s->device,
                srv_errname(r));
        return r;
    }
    if ((r = DRV(cuEventRecord)(ev, s->real)) != CUDA_SUCCESS) {
        srv_log("Client process %d: recording a wait on a stream of device %d failed: %s",
                (int)c->pid, s->device, srv_errname(r));
        srv_event_give(c, s->device, ev);
        return r;
    }
    w->ev[w->nev] = ev;
    w->dev[w->nev] = s->device;
    w->pooled[w->nev++] = 1;
    return CUDA_SUCCESS;
}

/* Whether s was given work so recently (MPSSHIM_GPU_REPLY_FRESH_US) that it is taken as busy
 * without asking the driver (gpu_reply says why). Taken busy wrongly, a stream costs a store
 * that lands at once, or a context's wait an event more (find_busy): never a reply too soon. */
static int fresh(const struct srv_stream *s)
{
    return fresh_ns && chan_now_ns() - s->submit_ns < fresh_ns;
}

/* Whether the GPU may post c's replies now, whatever the stream (gpu_reply says why each). */
static int gpu_reply_fits(struct srv_client *c)
{
    return gpu_replies && c->shm_registered && !c->pool_allocs &&
           c->shm_dptr == (CUdeviceptr)(uintptr_t)c->ch.shm && c->deferred == CUDA_SUCCESS &&
           !atomic_load_explicit(&c->terminated, memory_order_relaxed) &&
           !(srv_spin_crowded() && !crowded_replies);
}

/* A stream synchronisation answered by the GPU (proto.h, chan_lane): the stream itself
 * stores the lane's next reply number once it has run everything enqueued so far, so that
 * the client's thread, spinning on its lane, goes on the moment its work is done, and no
 * thread of the server has to wake for it (each such wake-up can cost a scheduler slice of
 * milliseconds when clients take every CPU: bench/results/issue29-2026-11-28). The worker
 * keeps a wait with an event behind that store: to wake the thread should it sleep, to
 * answer a fault in its stead, and to know when the lane's number is the GPU's.
 *
 * Only for a reply of CUDA_SUCCESS: no error deferred from the client's async work to
 * report (finish() would post it). Its data, if any, is in the lane already or on its way
 * there in the same stream ahead of the store (a read-back's copy into the lane, copy.c; an
 * output the worker wrote, generic.c). The result and length are written before the store
 * is enqueued; the client reads them, and the data, only once it sees the number. The segment must
 * be device-mapped at its own address (unified addressing), so that the address is good in every
 * device's context.
 *
 * Not for a client that allocates from memory pools (cuMemAllocAsync): what it frees
 * stream-ordered, the driver's pool keeps reserved until a thread of the server has seen
 * the free complete by synchronising the stream itself ("not observed on the host",
 * cuMemPoolTrimTo; block_stream), which a reply from the GPU skips; a query of the event
 * behind the store before its next call does not count (the GPU tier's mempool, mallocasync
 * and pools programs failed their trims either way: bench/NOTES.md, "Replies from the GPU").
 *
 * The thread is told to spin for its reply (gpu_seq), as a native synchronisation does, which
 * costs nothing while CPUs are free and makes a launch + synchronisation round trip 1-2 us
 * shorter than the worker's reply. While the server is crowded (spin.c: busy clients over
 * half the CPUs) it spins at most MPSSHIM_CROWDED_GPU_SPIN_US (1000 us; interpose/rpc.c) and
 * then sleeps, ringing for the worker. Such replies used to be off while crowded: with the
 * thread spinning up to MPSSHIM_GPU_WAIT_SPIN_US (20 ms) a cold job of as many polling ranks
 * as CPUs ran a fifth slower than with the worker's reply (bench/NOTES.md, "Replies from the
 * GPU"). With the bounded spin, and with coalesced doorbells, the worker of a crowded fleet
 * neither spins on the stream nor sleeps on an event for its step: on an H200 of 16 CPUs 16
 * PyTorch processes made 30746 steps/s against 25251-26691 and the cold MPI jobs of 16 and 32
 * ranks kept their times (bench/results/issue29-2026-11-28, "Coalesced steps as graphs";
 * MPSSHIM_CROWDED_GPU_REPLIES=0 is the old way). 1 when the reply is posted or on its way. */
static int gpu_reply(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len)
{
    /* Into its lanes: the quiet context's making is started at its next record (segment.c). */
    if (gpu_replies && c->shm_want) c->quiet_why = "a wait the GPU would answer";
    if (!gpu_reply_fits(c) || len > CHAN_LANE_DATA || lane < 0 || lane >= CHAN_NLANES ||
        srv_stream_capturing(c, s))
        return 0;
    /* Nothing left to wait for: answered at once. Not asked of a stream given work a few
     * microseconds ago (the launch or copy a round trip waits for; srv_stream_prepare stamps
     * it), which is still running it: the query (about 0.5 us) would only delay the store
     * the client spins for (bench/latprobe's relay_server against relay_store; bench/NOTES.md,
     * "Fresh streams"). Should it be idle after all, the store lands at once anyway. */
    if (!fresh(s) && DRV(cuStreamQuery)(s->real) == CUDA_SUCCESS) {
        finish(c, lane, CUDA_SUCCESS, len, 0);
        return 1;
    }
    struct srv_wait *w = new_wait_ev(c, s, lane, len);
    if (!w) return 0;
    struct chan_lane *l = &c->ch.lanes[lane];
    uint32_t target = c->lane_seq[lane] + 1;
    l->result = CUDA_SUCCESS;
    l->len = len;
    /* Default flags: the store follows a system-scope fence behind the stream's work. */
    CUdeviceptr at = c->shm_dptr + (CUdeviceptr)((uint8_t *)&l->seq - (uint8_t *)c->ch.shm);
    if (DRV(cuStreamWriteValue32_v2)(s->real, at, target, 0) != CUDA_SUCCESS) {
        drop_unarmed(c, w);
        return 0; /* answered as any other wait: the store never ran */
    }
    c->lane_seq[lane] = target;
    atomic_fetch_add_explicit(&c->stats.gpu_replies, 1, memory_order_relaxed);
    /* The hint that makes the thread spin (MPSSHIM_GPU_WAIT_SPIN_US); a thread asleep
     * already is woken to spin (or to find its reply, should the GPU have been quicker). */
    atomic_store_explicit(&l->gpu_seq, target, memory_order_release);
    chan_wake(&l->seq, &l->waiting);
    w->gpu = 2;
    w->target = target;
    if (arm(c, w, s) != CUDA_SUCCESS) {
        /* No event to see the store by: the worker waits for the stream itself and posts
         * the same number (a second store of it changes nothing), or the failure. */
        CUresult r = DRV(cuStreamSynchronize)(s->real);
        if (r == CUDA_SUCCESS)
            chan_wake(&l->seq, &l->waiting);
        else
            srv_wait_fail(c, w, r);
        drop_unarmed(c, w);
    }
    return 1;
}

void srv_wait_fail(struct srv_client *c, struct srv_wait *w, CUresult err)
{
    if (w->replied) return; /* the word landed first: the work waited for had run */
    if (!w->gpu) {
        srv_reply(c, w->lane, err, 0);
        return;
    }
    /* A sticky error has the fault thread look at the device before the thread may go on,
     * as srv_reply does for the worker's own replies: its next call must find the context
     * dead. Not only after a poll (srv_waits_poll notes it first): gpu_reply posts here too
     * when its event's record failed behind the store, and the thread's next cuMemAlloc,
     * served from the arena with no driver call, then succeeded (CI, once: fault --peer,
     * whose cuCtxSynchronize is answered by the GPU since 42cc3dd). */
    srv_fault_note(w->dev[0], err);
    /* The GPU's number, posted with the failure: unless a later reply has been posted on
     * the lane since (the thread then had this one, from the GPU, and went on). */
    if (c->lane_seq[w->lane] == w->target)
        chan_lane_post_at(&c->ch, (uint32_t)w->lane, err, 0, w->target);
}

/* How long a worker spins for a word wait's store (SRV_WAITS_WORDS); then it polls the word
 * as it polls any wait, backing off to 50 us (worker.c), so that a wait on work that waits
 * itself (a stream wait on a value nobody writes yet) takes no CPU for ever: as long as a
 * client's thread spins for a reply the GPU posts (MPSSHIM_GPU_WAIT_SPIN_US's default). */
#define WORD_SPIN_NS (20ull * 1000 * 1000)

/* Word waits: the reply the worker posts once the stream has stored a word of the server's
 * (server/memory/gpuword.c says why), which the worker reads at each turn of its loop, and
 * spins on while it waits for nothing else (worker.c). Where the GPU cannot post the reply to
 * the client's lane itself (gpu_reply), instead of blocking in the driver or polling events.
 * An event recorded behind the store tells a fault (the store then never lands: the event's
 * error is the reply), and when the word may be given back. Only while the server is not
 * crowded, where the shared contexts spin (CU_CTX_SCHED_AUTO): a worker that spins for its
 * client's GPU work takes a CPU, as the driver's synchronisation does there (block_stream
 * sleeps instead while crowded). Not for a client of memory pools (block_stream says why),
 * nor a capturing stream (the store would go into its graph). 1 when the wait is made. */
static int words_fit(struct srv_client *c)
{
    /* Words are the server's, kept registered once made: a client holds at most one a lane
     * (what a client that keeps the protocol can wait on at once), so that one that floods
     * synchronisations on a stalled stream cannot grow the server's pinned pages without end;
     * past it, its waits take the event path (its own pool's events, freed when it goes). */
    return srv.ctx_sched == CU_CTX_SCHED_AUTO && !srv_spin_crowded() && !c->pool_allocs &&
           c->word_waits < CHAN_NLANES;
}

static int word_wait(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len, int own)
{
    if (!words_fit(c) || srv_stream_capturing(c, s)) return 0;
    struct srv_wait *w = new_wait_ev(c, s, lane, len);
    if (!w) return 0;
    if (srv_gpuword_store(&w->word, s->real) != 0) {
        drop_unarmed(c, w);
        return 0;
    }
    c->word_waits++; /* until srv_wait_free */
    w->own = own;
    if (arm(c, w, s) != CUDA_SUCCESS) {
        /* The store is on its way: waited for here, so that the word can go back. */
        CUresult r = DRV(cuStreamSynchronize)(s->real);
        drop_unarmed(c, w);
        finish(c, lane, r, r == CUDA_SUCCESS ? len : 0, own);
    }
    return 1;
}

void srv_wait_free(struct srv_client *c, struct srv_wait *w)
{
    if (w->word.host) c->word_waits--;
    if (w->added) c->nwaits--;
    srv_gpuword_release(&w->word);
    wait_drop(c, w);
}

/* 1 when c may have one wait more (SRV_WAITS_MAX): the waits done are taken back first. */
static int room(struct srv_client *c)
{
    if (c->nwaits < SRV_WAITS_MAX) return 1;
    srv_waits_poll(c, SRV_WAITS_ALL);
    if (c->nwaits < SRV_WAITS_MAX) return 1;
    if (!c->waits_full_said) {
        c->waits_full_said = 1;
        srv_log("Client process %d has %u synchronisations pending, more than any thread of its "
                "own can wait for: the next are answered CUDA_ERROR_OUT_OF_MEMORY until some end",
                (int)c->pid, c->nwaits);
    }
    return 0;
}

static CUresult wait_stream(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len,
                            int own)
{
    if (!room(c)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!own && gpu_reply(c, s, lane, len)) return CUDA_SUCCESS;
    if (word_wait(c, s, lane, len, own)) return CUDA_SUCCESS;
    if (may_block(c)) {
        CUresult r = block_stream(c, s);
        finish(c, lane, r, r == CUDA_SUCCESS ? len : 0, own);
        return CUDA_SUCCESS;
    }
    struct srv_wait *w = new_wait(c, lane, len);
    if (!w) {
        /* No memory for a wait: block instead. */
        CUresult r = DRV(cuStreamSynchronize)(s->real);
        if (r == CUDA_SUCCESS) finish(c, lane, r, len, own);
        return r;
    }
    w->own = own;
    CUresult r = add_stream(c, w, s);
    if (r != CUDA_SUCCESS || w->nev == 0) {
        wait_drop(c, w);
        if (r == CUDA_SUCCESS) finish(c, lane, CUDA_SUCCESS, len, own);
        return r;
    }
    add(c, w);
    return CUDA_SUCCESS;
}

CUresult srv_wait_stream(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len)
{
    return wait_stream(c, s, lane, len, 0);
}

CUresult srv_wait_stream_own(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len)
{
    return wait_stream(c, s, lane, len, 1);
}

/* srv_wait_ctx's walk: the wait it fills, and the first error, after which no stream is
 * added. */
struct ctx_walk {
    struct srv_wait *w;
    CUresult r;
};

static void add_each(struct srv_client *c, struct srv_stream *s, void *arg)
{
    struct ctx_walk *k = arg;
    if (k->r == CUDA_SUCCESS) k->r = add_stream(c, k->w, s);
}

/* srv_wait_ctx's look for a context whose work is all on one stream. A fresh stream (the one
 * a launch just before the synchronisation went to) is busy without asking: the query, 0.5 us
 * on an H200, would only delay the reply's store. */
struct busy_walk {
    int n; /* streams with work, up to 2 */
    struct srv_stream *s;
};

static void find_busy(struct srv_client *c, struct srv_stream *s, void *arg)
{
    struct busy_walk *k = arg;
    if (k->n < 2 && !srv_stream_capturing(c, s) &&
        (fresh(s) || DRV(cuStreamQuery)(s->real) != CUDA_SUCCESS)) {
        k->n++;
        k->s = s;
    }
}

/* A context's synchronisation whose work is on one stream (a program's default stream, most
 * often: `cudaDeviceSynchronize` after a launch) is that stream's: a reply from the GPU where
 * one may be had (gpu_reply; the other streams were idle when asked, and later work on them
 * comes after this record in the client's ring), else its word wait; 1 when made or
 * answered. The GPU's reply saves the worker's look at the word and its post: the client
 * sees the stream's store itself, as for cuStreamSynchronize. */
static int one_stream_ctx(struct srv_client *c, struct srv_ctx *x, int lane)
{
    if (!words_fit(c) && !gpu_reply_fits(c)) return 0;
    for (size_t i = 0; i < c->nretired; i++)
        if (c->retired[i].ctx == x->id) return 0; /* destroyed streams' work: events */
    struct busy_walk k = {0};
    srv_streams_each(c, x->id, 1, find_busy, &k);
    if (k.n == 0) {
        finish(c, lane, CUDA_SUCCESS, 0, 0);
        return 1;
    }
    return k.n == 1 && (gpu_reply(c, k.s, lane, 0) || word_wait(c, k.s, lane, 0, 0));
}

CUresult srv_wait_ctx(struct srv_client *c, struct srv_ctx *x, int lane)
{
    if (!room(c)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (one_stream_ctx(c, x, lane)) return CUDA_SUCCESS;
    struct srv_wait *w = new_wait(c, lane, 0);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    struct ctx_walk k = {.w = w, .r = CUDA_SUCCESS};
    srv_streams_each(c, x->id, 1, add_each, &k);
    CUresult r = k.r;
    /* Destroyed streams' pending work: the wait takes their events over. */
    size_t j = 0;
    for (size_t i = 0; i < c->nretired; i++) {
        if (c->retired[i].ctx == x->id && w->nev < SRV_WAIT_EVENTS) {
            w->ev[w->nev] = c->retired[i].ev;
            w->dev[w->nev] = c->retired[i].dev;
            w->pooled[w->nev++] = 1;
        } else {
            c->retired[j++] = c->retired[i];
        }
    }
    c->nretired = j;
    /* Decided once: the events below are either all waited for here or all polled. While
     * crowded the wait is polled rather than spun in the driver (block_stream). */
    int block = may_block(c) && !(srv.ctx_sched == CU_CTX_SCHED_AUTO && srv_spin_crowded());
    if (r == CUDA_SUCCESS && block)
        for (int i = 0; i < w->nev; i++) {
            CUresult q = DRV(cuEventSynchronize)(w->ev[i]);
            if (q != CUDA_SUCCESS && r == CUDA_SUCCESS) r = q;
        }
    if (r != CUDA_SUCCESS || w->nev == 0 || block) {
        for (int i = 0; i < w->nev; i++)
            srv_event_give(c, w->dev[i], w->ev[i]);
        wait_drop(c, w);
        if (r == CUDA_SUCCESS) finish(c, lane, CUDA_SUCCESS, 0, 0);
        return r;
    }
    add(c, w);
    return CUDA_SUCCESS;
}

CUresult srv_wait_event(struct srv_client *c, CUevent ev, int lane)
{
    if (!room(c)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (may_block(c)) {
        finish(c, lane, DRV(cuEventSynchronize)(ev), 0, 0);
        return CUDA_SUCCESS;
    }
    CUresult q = DRV(cuEventQuery)(ev);
    if (q != CUDA_ERROR_NOT_READY) {
        finish(c, lane, q, 0, 0);
        return CUDA_SUCCESS;
    }
    struct srv_wait *w = new_wait(c, lane, 0);
    if (!w) return CUDA_ERROR_OUT_OF_MEMORY;
    w->ev[0] = ev;
    w->pooled[0] = 0;
    w->nev = 1;
    add(c, w);
    return CUDA_SUCCESS;
}

int srv_waits_poll(struct srv_client *c, int full)
{
    struct srv_wait **pw = &c->waits;
    int words = 0;
    uint64_t now = chan_now_ns();
    const uint64_t lazy = SRV_WAITS_LAZY_US * 1000ull, most = SRV_WAITS_ASK_MAX_US * 1000ull;
    while (*pw) {
        struct srv_wait *w = *pw;
        if (w->word.host && !w->replied) {
            if (srv_gpuword_reached(&w->word)) {
                finish(c, w->lane, CUDA_SUCCESS, w->reply_len, w->own);
                w->replied = 1;
                atomic_fetch_add_explicit(&c->stats.word_replies, 1, memory_order_relaxed);
            } else if (now - w->made_ns < WORD_SPIN_NS) {
                words = SRV_WAITS_WORDS;
            }
        }
        int lazy_wait = w->gpu || w->word.host; /* its reply needs no ask */
        int ask = !lazy_wait || full == SRV_WAITS_ALL || w->passed;
        if (!ask && full) {
            /* The lane's word is the client's: it only decides how soon its own wait is
             * asked (every SRV_WAITS_LAZY_US at most), as below. */
            int asleep = w->gpu == 2 &&
                         atomic_load_explicit(&c->ch.lanes[w->lane].waiting, memory_order_relaxed);
            ask = now >= (asleep ? w->made_ns + lazy : w->ask_ns);
        }
        if (ask && lazy_wait) {
            /* Asked again, should it still be running, after as long as it has run so far:
             * a long wait's asks each cost a driver call that a request may meet. */
            uint64_t age = now - w->made_ns;
            w->passed = 0;
            w->ask_ns = now + (age < lazy ? lazy : age > most ? most : age);
        }
        while (ask && w->nev > 0) {
            int i = w->nev - 1;
            CUresult q = DRV(cuEventQuery)(w->ev[i]);
            if (q == CUDA_ERROR_NOT_READY) break;
            if (q != CUDA_SUCCESS && w->result == CUDA_SUCCESS) {
                srv_fault_note(w->dev[i], q);
                w->result = q;
                srv_log("Client process %d: work waited for failed: %s", (int)c->pid,
                        srv_errname(q));
            }
            if (w->pooled[i]) srv_event_give(c, w->dev[i], w->ev[i]);
            w->nev--;
        }
        if (w->nev == 0) {
            *pw = w->next;
            if (w->replied) {
                /* a word wait's, posted when the word landed */
            } else if (!w->gpu) {
                /* Its events ran (a word wait's store too), or failed: their answer is the reply.
                 */
                finish(c, w->lane, w->result, w->result == CUDA_SUCCESS ? w->reply_len : 0, w->own);
            } else if (w->result != CUDA_SUCCESS) {
                srv_wait_fail(c, w, w->result);
            } else { /* the GPU posted it: a thread asleep on the lane must see it */
                chan_wake(&c->ch.lanes[w->lane].seq, &c->ch.lanes[w->lane].waiting);
            }
            srv_wait_free(c, w);
        } else {
            pw = &w->next;
        }
    }
    atomic_store_explicit(&c->stats.gpu_waits, c->waits != NULL, memory_order_relaxed);
    if (!c->waits) return 0;
    /* `waiting` is the client's word: it only decides how soon this client's own thread is
     * woken, within the bounds the worker polls at anyway. */
    for (struct srv_wait *w = c->waits; w; w = w->next)
        if ((w->gpu != 2 && !w->replied) ||
            (w->gpu == 2 &&
             atomic_load_explicit(&c->ch.lanes[w->lane].waiting, memory_order_relaxed)))
            return 1 | words;
    return 2 | words;
}
