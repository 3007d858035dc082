/* Idle answers known in the client: a query or synchronisation whose answer cannot have
 * changed since the server last gave it costs no round trip (issue 12: cuStreamQuery on an
 * idle stream was a round trip, more than twice the native call's time: bench/NOTES.md, "Idle
 * stream query").
 *
 * Why it is right. What a stream or an event of this process will still do changes in two
 * ways only: through records this process sends (launches, copies, waits, event records,
 * graph launches, captures, host functions, and the creations and destructions that make a
 * handle value name something else), and through the GPU's progress, which only ever
 * completes work. So once the server has said "idle" (cuStreamQuery or cuEventQuery
 * returning CUDA_SUCCESS, or a successful cuStreamSynchronize, cuEventSynchronize or
 * cuCtxSynchronize that covers it), the same answer holds for as long as this process has
 * sent no record that may enqueue work: shim_work_sent (call.c), counted under the ring
 * lock, has not moved. Queries and synchronisations enqueue nothing and are not counted
 * (SHIM_RQ_QUIET), so that several threads polling several streams keep each other's
 * answers. The count is read before the question is sent: a record sent in between moves it
 * and the answer is never used.
 *
 * What changes an answer without a record of ours is the server's to say: it moves the
 * segment's alert word (channel/proto.h) on a fault of the shared context (raised before
 * the word moves: a query that reaches the worker after the move hears the fault), on
 * terminate_client, and when an asynchronous error is deferred to the next
 * synchronisation; a server going away sets `dead`, which shim_ready() answers before any
 * of this. The word too is read before the question is sent, and an answer is used only
 * while it has not moved. A synchronisation reports a deferred error, a query does not (as
 * in the server, server/core/waits.c): so an answer a query gave is used for queries only, one a
 * synchronisation gave for both, since that synchronisation took every deferred error and
 * a new one needs a record (every srv_defer is in the replay of one).
 *
 * A copy that returns complete answers for its stream as a synchronisation does (memcpy.c):
 * the server replies to it once the stream has run everything up to it, with any deferred
 * error, as it answers a cuStreamSynchronize (server/memory/copy.c answer(), waits.c).
 * cudaMemcpyAsync into pageable memory followed by a synchronisation of the same stream
 * (CuPy's get(stream=...), older PyTorch's `.item()`) then costs one round trip, not two.
 * (PyTorch 2's `.item()` copies into pinned memory: that copy returns at once, and the
 * synchronisation after it is its one round trip.) Its mark is the count with the copy's
 * own record in it, so that it holds only while the copy is the last record sent
 * (shim_idle_stream_after). Not the pipelined copies of large pageable buffers, nor
 * cuMemcpy2DUnaligned: the server answers those without the deferred errors.
 *
 * What is never answered here: interprocess events (their owner, or an opener, may record
 * them from another process); anything while this process has a capture going that
 * capture.c keeps (the modes' rules and the server's answers for capturing streams stay as
 * they are; one begun on a per-thread default stream is not kept there, but beginning it
 * was a record, and a capturing stream's answers are errors, never kept); a server older
 * than protocol minor 3 (it never moves the alert word). A context's synchronisation covers
 * its streams only, not events: the server does not refuse an event recorded on a stream
 * of another context of the process, which that synchronisation would not have waited for.
 * A server killed without a word (SIGKILL) sets no `dead`: what was idle is answered idle
 * until the process's next request finds the server gone.
 *
 * A destroyed handle, or a new one the driver gives the same value, never meets an old
 * answer: destroying and creating are records. The answers are one small set, all taken at
 * one count: a newer count empties it, so it holds at most IDLE_MAX entries and never a
 * stale one that could match. Threads share it under one lock; an answer given here is the
 * one the server would have given when the count was read. */
#include "interpose/shim.h"

#include <string.h>

enum idle_what {
    IDLE_STREAM = 1, /* a stream the process created: handle */
    IDLE_LEGACY,     /* the legacy default stream of context ctx */
    IDLE_PTDS,       /* the per-thread default stream of thread `thread` in context ctx */
    IDLE_EVENT,      /* an event: handle */
    IDLE_CTX,        /* every stream of context ctx (cuCtxSynchronize) */
};

struct idle_entry {
    struct shim_idle_key key;
    int sync; /* a synchronisation gave it: it answers synchronisations too */
};

#define IDLE_MAX 32

/* The set of answers, all taken at one (count, alert): guarded by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t set_mark;
static uint32_t set_alert;
static unsigned set_n, set_next;
static struct idle_entry set[IDLE_MAX];
/* IDLE_CTX entries in the set: read without the lock, to skip a stream's context lookup
 * when there are none (a stale read costs only that lookup, or a miss). */
static _Atomic unsigned set_nctx;

/* Not in a process of several connections (route.c): the alert word below is shim_conn's
 * server's alone. */
static int usable(void)
{
    return shim_conn_up() && shim_conn.server_minor >= 3 && !shim_capture_any() &&
           !atomic_load_explicit(&shim_conns_extra, memory_order_acquire);
}

static uint32_t alert_now(void)
{
    return atomic_load_explicit(&shim_conn.ch.shm->alert, memory_order_acquire);
}

static const struct idle_entry *find(const struct shim_idle_key *k)
{
    for (unsigned i = 0; i < set_n; i++)
        if (!memcmp(&set[i].key, k, sizeof(*k))) return &set[i];
    return NULL;
}

/* 1 if the set holds k (for a synchronisation: one a synchronisation gave) at the current
 * count and alert. */
static int known(const struct shim_idle_key *k, int sync, uint64_t mark, uint32_t alert)
{
    pthread_mutex_lock(&lock);
    const struct idle_entry *e = set_mark == mark && set_alert == alert ? find(k) : NULL;
    int hit = e && (e->sync || !sync);
    pthread_mutex_unlock(&lock);
    return hit;
}

/* The key of stream s as the calling thread names it (the special handles name its default
 * streams of its current context); *ctx gets the stream's context. s is known good. */
static void stream_key(CUstream s, struct shim_idle_key *k, uint32_t *ctx)
{
    memset(k, 0, sizeof(*k));
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        k->ctx = *ctx = shim_current_ctx_id();
        if (s == CU_STREAM_PER_THREAD || (s == NULL && shim_ptds_active())) {
            k->what = IDLE_PTDS;
            k->thread = shim_thread_no();
        } else {
            k->what = IDLE_LEGACY;
        }
        return;
    }
    k->what = IDLE_STREAM;
    k->handle = (uint64_t)(uintptr_t)s;
    *ctx = 0; /* looked up only when a context's answer could cover it */
}

/* Starts a question about q->key: 1 when its answer is known to be CUDA_SUCCESS; else q
 * is ready for shim_idle_keep. */
static int ask(struct shim_idle *q, int sync)
{
    q->usable = usable();
    if (!q->usable) return 0;
    /* Before the question goes: the answer it brings is then used only while neither has
     * moved. */
    q->alert = alert_now();
    q->mark = atomic_load_explicit(&shim_work_sent, memory_order_relaxed);
    return known(&q->key, sync, q->mark, q->alert);
}

int shim_idle_stream(struct shim_idle *q, CUstream s, int sync)
{
    uint32_t ctx;
    stream_key(s, &q->key, &ctx);
    if (ask(q, sync)) return 1;
    if (!q->usable || !atomic_load_explicit(&set_nctx, memory_order_relaxed)) return 0;
    /* A context's synchronisation covers its streams. */
    if (!ctx && shim_stream_check(s, &ctx) != CUDA_SUCCESS) return 0;
    struct shim_idle_key ck = {.ctx = ctx, .what = IDLE_CTX};
    return ctx && known(&ck, 1, q->mark, q->alert);
}

void shim_idle_stream_after(struct shim_idle *q, CUstream s)
{
    uint32_t ctx;
    stream_key(s, &q->key, &ctx);
    q->usable = usable();
    if (!q->usable) return;
    q->alert = alert_now();
    /* The count once the caller's own record is sent: the answer is kept only if that
     * record is the one sent since, so the stream's work it covers is the caller's to know. */
    q->mark = atomic_load_explicit(&shim_work_sent, memory_order_relaxed) + 1;
}

int shim_idle_event(struct shim_idle *q, CUevent e, int sync)
{
    q->key = (struct shim_idle_key){.handle = (uint64_t)(uintptr_t)e, .what = IDLE_EVENT};
    return ask(q, sync);
}

int shim_idle_ctx(struct shim_idle *q, uint32_t ctx)
{
    q->key = (struct shim_idle_key){.ctx = ctx, .what = IDLE_CTX};
    return ask(q, 1);
}

void shim_idle_keep(const struct shim_idle *q, int sync)
{
    const struct shim_idle_key *k = &q->key;
    if (!q->usable) return;
    /* Something was sent since the question, or happened: nothing worth keeping. */
    if (atomic_load_explicit(&shim_work_sent, memory_order_relaxed) != q->mark ||
        alert_now() != q->alert)
        return;
    if (k->what == IDLE_EVENT) {
        struct shim_known info;
        if (shim_known_find(SHIM_HT_CUevent, k->handle, &info) != 0 ||
            (info.flags & CU_EVENT_INTERPROCESS))
            return;
    }
    pthread_mutex_lock(&lock);
    if (q->mark < set_mark) {
        pthread_mutex_unlock(&lock); /* a later count's set: ours can never be used */
        return;
    }
    if (q->mark != set_mark || q->alert != set_alert) {
        set_mark = q->mark;
        set_alert = q->alert;
        set_n = set_next = 0;
        atomic_store_explicit(&set_nctx, 0, memory_order_relaxed);
    }
    struct idle_entry *e = (struct idle_entry *)find(k);
    if (!e) {
        if (set_n < IDLE_MAX) {
            e = &set[set_n++];
        } else {
            e = &set[set_next++ % IDLE_MAX]; /* full: the oldest goes */
            if (e->key.what == IDLE_CTX)
                atomic_fetch_sub_explicit(&set_nctx, 1, memory_order_relaxed);
        }
        e->key = *k;
        e->sync = 0;
        if (k->what == IDLE_CTX) atomic_fetch_add_explicit(&set_nctx, 1, memory_order_relaxed);
    }
    e->sync |= sync;
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- the query calls */

/* cuStreamQuery and cuEventQuery are described calls (cuda_symbols.txt, client:NAME): these
 * hooks answer from the set, and keep what the server answered. The question the `known`
 * hook started is the calling thread's until its `finish` hook (which runs only when the
 * server answered CUDA_SUCCESS) or its next query. A query the server answered CUDA_SUCCESS
 * is also a synchronisation for __managed__ variables (mvars.c): their device writes come
 * back before the answer is kept; one answered here needs none, since nothing was sent
 * since the one that was kept. */
static __thread struct shim_idle asked;
static __thread uint64_t asked_gen; /* the __managed__ variables' work count before it */

static CUresult stream_query_before(const void *const *argv)
{
    (void)argv;
    asked_gen = shim_mvar_sync_begin();
    return CUDA_SUCCESS;
}

static int stream_query_known(const void *const *argv)
{
    return shim_idle_stream(&asked, *(const CUstream *)argv[0], 0);
}

static CUresult stream_query_finish(const void *const *argv)
{
    CUresult r = CUDA_SUCCESS;
    shim_mvar_synced(SHIM_MVAR_STREAM, *(const CUstream *)argv[0], 0, asked_gen, &r);
    if (r == CUDA_SUCCESS) shim_idle_keep(&asked, 0);
    return r;
}

/* An event query is "potentially unsafe" in a capture (capture.c): refused first, as
 * before, whatever is known. */
static CUresult event_query_before(const void *const *argv)
{
    (void)argv;
    asked_gen = shim_mvar_sync_begin();
    return shim_capture_unsafe();
}

static int event_query_known(const void *const *argv)
{
    return shim_idle_event(&asked, *(const CUevent *)argv[0], 0);
}

static CUresult event_query_finish(const void *const *argv)
{
    (void)argv;
    CUresult r = CUDA_SUCCESS;
    shim_mvar_synced(SHIM_MVAR_OTHER, NULL, 0, asked_gen, &r);
    if (r == CUDA_SUCCESS) shim_idle_keep(&asked, 0);
    return r;
}

const struct shim_hook shim_hook_stream_query = {
    .before = stream_query_before, .known = stream_query_known, .finish = stream_query_finish};
const struct shim_hook shim_hook_event_query = {
    .before = event_query_before, .known = event_query_known, .finish = event_query_finish};
