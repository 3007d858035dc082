/* Requests from client threads: the ring lock, per-thread reply lanes and thread numbers,
 * and what every request carries of its thread (its current context, whether the NULL
 * stream is its per-thread one). The generic forwarder on top of it is call.c's. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>

#include "channel/settings.h"
#include "channel/stamp.h"
#include "channel/marshal.h" /* CHAN_MAX_ARGS, CHAN_OUTREF_MAX */

/* Each connection's locks, by its slot (shim_conn's is 0):
 *  - ring: producers serialise on it, since records must enter the ring whole and in the
 *    order the calls were made, which is the order the server replays them (any thread's
 *    later sync call sees every earlier async call submitted). Held only while a record is
 *    written.
 *  - lanes: lanes are owned by threads until they exit (`used`, bit i: lane i owned).
 *  - waiting: requests sent whose reply their thread has not taken yet (counted under the
 *    ring lock as they are begun, down as their wait returns): each waits on its lane of the
 *    connection's segment as it was when the request was sent.
 * A slot's connection never changes while it has requests (a move to a GPU's server,
 * conn.c, replaces shim_conn under shim_rpc_alone, which holds slot 0's locks, and only
 * while none is waiting). A thread keeps its lane's number across a move: the new segment's
 * lanes are all free, and the old segment stays mapped (conn.c). */
static struct link {
    pthread_mutex_t ring, lanes;
    pthread_cond_t freed;
    uint64_t used;
    _Atomic int waiting;
} links[SHIM_CONNS] = {[0 ... SHIM_CONNS - 1] = {PTHREAD_MUTEX_INITIALIZER,
                                                 PTHREAD_MUTEX_INITIALIZER,
                                                 PTHREAD_COND_INITIALIZER, 0, 0}};

struct shim_conn *_Atomic shim_dev_conns[CHAN_MAX_DEVICES];
_Atomic int shim_conns_extra;

struct shim_conn *shim_conn_of_device(int d)
{
    struct shim_conn *c = d >= 0 && d < CHAN_MAX_DEVICES
                              ? atomic_load_explicit(&shim_dev_conns[d], memory_order_acquire)
                              : NULL;
    return c ? c : &shim_conn;
}

/* Records sent that may have enqueued work: all but SHIM_RQ_QUIET ones (queries and
 * synchronisations, which change nothing a stream or event will do). Bumped under ring_lock,
 * in the order records enter the ring, and before the call that sent one returns, so that
 * any thread that learns of that call (through its own synchronisation with the caller)
 * sees the count moved: interpose/idle.c keeps an idle answer only while it stays put. */
_Atomic uint64_t shim_work_sent;

/* Thread numbers for per-thread default streams, the process's (a number only has to be
 * unique among a connection's threads); recycled when threads exit, under no_lock. */
static pthread_mutex_t no_lock = PTHREAD_MUTEX_INITIALIZER;
static uint16_t *free_thread_nos;
static unsigned nfree_thread_nos, cap_thread_nos;
static uint16_t next_thread_no = 1;

struct thread_slot {
    int8_t lane[SHIM_CONNS]; /* per connection slot: its lane + 1, 0 until the thread first
                                waits for a reply there */
    uint16_t thread_no;      /* 0 until first needed */
};
static __thread struct thread_slot self;
/* The id field of the thread's current context (context.c's record of it, never freed, so
 * that one destroyed by another thread reads 0 here too), NULL when it has none. Read
 * without a lock: a stale id is refused by the server, never misused. Its device picks the
 * connection (-1: shim_conn). */
static __thread const uint32_t *current_id;
static __thread int current_dev = -1;
/* Where the thread's requests go instead, between shim_route_begin and shim_route_end. */
static __thread struct shim_route route;

void shim_set_current_ctx(const uint32_t *id, int device)
{
    current_id = id;
    current_dev = device;
}

void shim_route_begin(struct shim_route *saved, int device, uint32_t ctx)
{
    *saved = route;
    route = (struct shim_route){.set = 1, .device = device, .ctx = ctx};
}

void shim_route_end(const struct shim_route *saved)
{
    route = *saved;
}

int shim_route_device(void)
{
    return route.set ? route.device : current_dev;
}

uint32_t shim_route_ctx(void)
{
    return route.set ? route.ctx : shim_current_ctx_id();
}

struct shim_conn *shim_route_conn(void)
{
    return shim_conn_of_device(shim_route_device());
}

uint32_t shim_current_ctx_id(void)
{
    return current_id ? *current_id : 0;
}
/* Set while the thread runs a _ptds/_ptsz entry point: every request it sends then says
 * that the NULL stream is its per-thread default stream (CHAN_RF_PTDS). */
static __thread unsigned ptds;

unsigned shim_ptds_begin(void)
{
    unsigned saved = ptds;
    ptds = CHAN_RF_PTDS;
    return saved;
}

void shim_ptds_end(unsigned saved)
{
    ptds = saved;
}

int shim_ptds_active(void)
{
    return ptds != 0;
}
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

/* A client setting in µs (channel/settings.def), read once into *cache (-1 until then),
 * in ns. */
static uint64_t env_us(_Atomic int64_t *cache, enum chan_setting_id id)
{
    int64_t v = atomic_load_explicit(cache, memory_order_relaxed);
    if (v < 0) {
        v = (int64_t)chan_setting_num(id) * 1000;
        atomic_store(cache, v);
    }
    return (uint64_t)v;
}

/* How long a thread spins for a reply before it sleeps (MPSSHIM_SPIN_US): long enough to
 * catch the reply of a short kernel or copy without sleeping. */
static uint64_t spin_ns(void)
{
    static _Atomic int64_t cached = -1;
    return env_us(&cached, CHAN_SET_SPIN_US);
}

/* The slice a thread asleep for a reply asks for (MPSSHIM_WAIT_SLICE_US, channel/slice.h):
 * the kernel's shortest by default, as the thread only has to wake, take its reply and
 * return; its own slice is back before it runs the program on. */
static uint64_t wait_slice_ns(void)
{
    static _Atomic int64_t cached = -1;
    return env_us(&cached, CHAN_SET_WAIT_SLICE_US);
}

/* How long a thread spins for a reply the GPU posts (proto.h), MPSSHIM_GPU_WAIT_SPIN_US:
 * as a native synchronisation spins while its process has fewer contexts than CPUs (which
 * spins for as long as it takes), up to 20 ms by default, after which it sleeps and the
 * server's worker wakes it. */
static uint64_t gpu_spin_ns(void)
{
    static _Atomic int64_t cached = -1;
    return env_us(&cached, CHAN_SET_GPU_WAIT_SPIN_US);
}

/* While the server is crowded (its spin hint set): a reply the GPU posts is spun for this
 * long at most (MPSSHIM_CROWDED_GPU_SPIN_US), the CPU being another thread's after that.
 * Its default, 1000 us, outlasts a latency-bound step's GPU work: a thread that gives up
 * first rings its worker, which then wakes and replies, and that costs the CPUs more than
 * the spin saved. 16 PyTorch processes on 16 CPUs of an H200 (bench/cpusplit.py): 200 us
 * made 31150-35822 steps/s (five runs), 1000 us 35917-38887 (four), 30 us 20928.
 * A thread whose waits outlast it (an MPI rank synchronising after 50 kernels: milliseconds)
 * would spin it away each time on a CPU that ranks and workers want: a 20 ms spin made a
 * cold job of 16 ranks 20% slower (bench/NOTES.md). So a thread whose previous such wait
 * outlasted the bound spins a fifth of it (200 us, what those jobs were measured with), until
 * a wait ends within the bound again (gpu_waits_long). */
static uint64_t crowded_gpu_spin_ns(void)
{
    static _Atomic int64_t cached = -1;
    return env_us(&cached, CHAN_SET_CROWDED_GPU_SPIN_US);
}

/* While the server is crowded: the batches of 64 looks at a reply between a spinning thread's
 * sched_yields (MPSSHIM_CROWDED_YIELD_LOOKS / 64; channel/wait.c). A thread spinning for its
 * reply while every CPU is wanted holds one that its own worker, or another client, may be
 * waiting to run on; the yield hands it over where the scheduler has someone waiting, and
 * costs a system call (0.2 us on the H200 machines) where not. Yielding every 64 looks instead of
 * 1024 gave 16 PyTorch processes on an H200 of 16 CPUs 2-7% more steps in the medians of two
 * sessions' rounds, inside each round's spread, and the bench's cold MPI jobs of 16 and 32 ranks
 * were 1-5% slower with it (bench/results/issue29-2026-11-28, "The reference of 2366d19"): the
 * default stays 1024. */
static unsigned crowded_yield_every(void)
{
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) { /* at least 1: the settings table keeps the value at 64 or more */
        v = (int)(chan_setting_num(CHAN_SET_CROWDED_YIELD_LOOKS) / 64);
        atomic_store(&cached, v);
    }
    return (unsigned)v;
}

const struct chan_wait shim_waiter = {.spin_ns = 200 * 1000, .alive = shim_server_alive};

/* OUTREF arrays the driver API returns by pointer: valid for the calling thread until its
 * next call that returns one in the same parameter position (the driver's arrays live until
 * the next call on the stream). */
#define OUTREF_BYTES (CHAN_OUTREF_MAX * 16u)         /* the largest element is 16 bytes */
static __thread uint8_t *outref_room[CHAN_MAX_ARGS]; /* made on first use, freed at exit */
/* A request's bytes packed before the ring is taken (shim_stage): made on first use, freed at
 * exit. */
static __thread uint8_t *stage_room;

static void thread_exit(void *arg)
{
    (void)arg;
    for (int s = 0; s < SHIM_CONNS; s++) {
        if (!self.lane[s]) continue;
        pthread_mutex_lock(&links[s].lanes);
        links[s].used &= ~(1ull << (self.lane[s] - 1));
        pthread_cond_signal(&links[s].freed);
        pthread_mutex_unlock(&links[s].lanes);
        self.lane[s] = 0;
    }
    pthread_mutex_lock(&no_lock);
    if (self.thread_no) {
        if (nfree_thread_nos == cap_thread_nos) {
            unsigned ncap = cap_thread_nos ? cap_thread_nos * 2 : 64;
            uint16_t *n = realloc(free_thread_nos, ncap * sizeof(*n));
            if (n) {
                free_thread_nos = n;
                cap_thread_nos = ncap;
            }
        }
        if (nfree_thread_nos < cap_thread_nos) free_thread_nos[nfree_thread_nos++] = self.thread_no;
    }
    pthread_mutex_unlock(&no_lock);
    self.thread_no = 0;
    for (int i = 0; i < CHAN_MAX_ARGS; i++) {
        free(outref_room[i]);
        outref_room[i] = NULL;
    }
    free(stage_room);
    stage_room = NULL;
}

static void make_exit_key(void)
{
    pthread_key_create(&exit_key, thread_exit);
}

static void register_exit(void)
{
    pthread_once(&exit_key_once, make_exit_key);
    pthread_setspecific(exit_key, (void *)1);
}

const void *shim_keep_array(int param, const void *data, size_t bytes)
{
    if (param < 0 || param >= CHAN_MAX_ARGS || bytes > OUTREF_BYTES) return NULL;
    if (!outref_room[param]) {
        register_exit();
        if (!(outref_room[param] = malloc(OUTREF_BYTES))) return NULL;
    }
    memcpy(outref_room[param], data, bytes);
    return outref_room[param];
}

uint8_t *shim_stage(void)
{
    if (!stage_room) {
        register_exit();
        stage_room = malloc(CHAN_REC_MAX);
    }
    return stage_room;
}

uint16_t shim_thread_no(void)
{
    if (self.thread_no) return self.thread_no;
    register_exit();
    pthread_mutex_lock(&no_lock);
    if (nfree_thread_nos)
        self.thread_no = free_thread_nos[--nfree_thread_nos];
    else {
        self.thread_no = next_thread_no;
        /* 65535 live threads never happen; on wrap-around numbers are shared. */
        next_thread_no = next_thread_no == UINT16_MAX ? 1 : next_thread_no + 1;
    }
    pthread_mutex_unlock(&no_lock);
    return self.thread_no;
}

/* The thread's lane on the connection of slot s, taken now if need be. */
static int my_lane(int s)
{
    if (self.lane[s]) return self.lane[s] - 1;
    register_exit();
    struct link *k = &links[s];
    pthread_mutex_lock(&k->lanes);
    /* More threads than lanes wait here for one to exit. */
    while (k->used == ~0ull)
        pthread_cond_wait(&k->freed, &k->lanes);
    int l = __builtin_ctzll(~k->used);
    k->used |= 1ull << l;
    pthread_mutex_unlock(&k->lanes);
    self.lane[s] = (int8_t)(l + 1);
    return l;
}

/* Whether slot 0's requests are counted in `waiting`: only while a move may still come
 * (conn.c), so that other processes pay nothing for it. A request remembers whether it was. */
static _Atomic int count_waits;

int shim_rpc_alone(int (*fn)(void *), void *arg, uint64_t work_seen)
{
    /* No other thread may take a lane (lane_lock) or write a record (ring_lock) meanwhile:
     * with no reply awaited (waiting: the calling thread awaits none either) and nothing
     * with effects sent since the caller's look, no request of another thread is on its way
     * or awaits a reply, and none can start before fn returns. Threads that own a lane but
     * wait for nothing (a runtime's threads that asked about devices before the first
     * context, as JAX's do) send their next requests to the new connection. */
    struct link *k = &links[0];
    pthread_mutex_lock(&k->lanes);
    pthread_mutex_lock(&k->ring);
    int rc = atomic_load(&k->waiting) != 0               ? -1
             : atomic_load(&shim_work_sent) != work_seen ? -2
                                                         : fn(arg);
    pthread_mutex_unlock(&k->ring);
    pthread_mutex_unlock(&k->lanes);
    return rc;
}

/* Set while this thread holds ring_lock (between shim_req_begin and shim_req_send): a fault
 * then could not be served (migrate.c reads it in its signal handler, hence initial-exec). */
__thread int shim_ring_held __attribute__((tls_model("initial-exec")));

CUresult shim_req_begin(struct shim_req *q, unsigned op, uint32_t len, int reply, unsigned flags)
{
    if (len > CHAN_REC_MAX - sizeof(struct chan_rec)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t begun = CHAN_STAMPING ? chan_now_ns() : 0;
    q->conn = shim_route_conn();
    struct chan *c = &q->conn->ch;
    struct link *k = &links[q->conn->slot];
    q->lane = reply ? my_lane(q->conn->slot) : -1;
    q->quiet = (flags & SHIM_RQ_QUIET) != 0;
    flags &= ~SHIM_RQ_QUIET;
    uint16_t tno = shim_thread_no();
    pthread_mutex_lock(&k->ring);
    struct chan_wait w = shim_waiter;
    w.spin_ns = 0;
    w.arg = q->conn;
    q->rec = chan_ring_reserve(c, (uint32_t)sizeof(struct chan_rec) + len, &w);
    if (!q->rec) {
        pthread_mutex_unlock(&k->ring);
        return shim_conn_dead_error(q->conn);
    }
    shim_ring_held = 1;
    q->op = (uint16_t)op;
    q->pos = c->pos; /* where the record begins: the server's worker sees the same number */
    chan_stamp(CHAN_STAMP_BEGUN, 0, q->op, q->pos, begun);
    q->rec->op = (uint16_t)op;
    q->rec->flags = (uint16_t)(flags | ptds | (reply ? CHAN_RF_REPLY : 0));
    q->rec->lane = reply ? (uint16_t)q->lane : 0;
    q->rec->thread = tno;
    q->rec->ctx = shim_route_ctx();
    q->payload = (uint8_t *)(q->rec + 1);
    q->counted =
        reply && k == &links[0] && atomic_load_explicit(&count_waits, memory_order_relaxed);
    if (reply) q->seq0 = atomic_load_explicit(&c->lanes[q->lane].seq, memory_order_acquire);
    if (q->counted) atomic_fetch_add_explicit(&k->waiting, 1, memory_order_relaxed);
    return CUDA_SUCCESS;
}

void shim_req_done(struct shim_req *q)
{
    if (q->counted) atomic_fetch_sub_explicit(&links[0].waiting, 1, memory_order_release);
}

void shim_rpc_count_waits(int on)
{
    atomic_store(&count_waits, on);
}

void shim_req_send(struct shim_req *q)
{
    if (!q->quiet) atomic_fetch_add_explicit(&shim_work_sent, 1, memory_order_relaxed);
    /* Noted just before the record is published: after it, the doorbell's wake-up of a
     * sleeping worker may run the worker first on a busy machine, which then took the record
     * before it was "sent" (CI, two CPUs: every operation 100-1100 us early). */
    if (CHAN_STAMPING) chan_stamp(CHAN_STAMP_SENT, 0, q->op, q->pos, chan_now_ns());
    chan_ring_publish(&q->conn->ch, q->rec);
    shim_ring_held = 0;
    pthread_mutex_unlock(&links[q->conn->slot].ring);
}

/* This thread's last wait that outlasted its spin, while the server was crowded, outlasted
 * MPSSHIM_CROWDED_GPU_SPIN_US too (crowded_gpu_spin_ns). Waits answered within the spin
 * (most requests) leave it. */
static __thread int gpu_waits_long;

CUresult shim_req_wait(struct shim_req *q, const uint8_t **data, uint32_t *len)
{
    struct chan *c = &q->conn->ch;
    struct chan_wait w = shim_waiter;
    w.arg = q->conn;
    w.spin_ns = spin_ns();
    w.slice_ns = wait_slice_ns();
    w.gpu_spin_ns = gpu_spin_ns();
    /* The server's hint (proto.h): shorter while its CPUs are all wanted. */
    uint32_t hint = atomic_load_explicit(&c->shm->spin_hint_us, memory_order_relaxed);
    if (hint && (uint64_t)(hint - 1) * 1000 < w.spin_ns) w.spin_ns = (uint64_t)(hint - 1) * 1000;
    uint64_t t0 = 0;
    if (hint) {
        uint64_t bound = crowded_gpu_spin_ns() / (gpu_waits_long ? 5 : 1);
        if (bound < w.gpu_spin_ns) w.gpu_spin_ns = bound;
        w.yield_every = crowded_yield_every();
        t0 = chan_now_ns();
    }
    int gone = chan_lane_wait(c, (uint32_t)q->lane, q->seq0, &w) != 0;
    if (CHAN_STAMPING) chan_stamp(CHAN_STAMP_ANSWERED, 0, q->op, q->pos, chan_now_ns());
    /* The lane is found before the request counts as answered: from then on a move may
     * replace shim_conn's segment (c is &shim_conn.ch), and the reply is read where it came,
     * in the old one, which stays mapped. */
    struct chan_lane *l = &c->lanes[q->lane];
    shim_req_done(q);
    if (gone) return shim_conn_dead_error(q->conn);
    if (t0) {
        uint64_t took = chan_now_ns() - t0;
        if (took > w.spin_ns) gpu_waits_long = took > crowded_gpu_spin_ns();
    }
    uint32_t n = l->len;
    if (n > CHAN_LANE_DATA) n = CHAN_LANE_DATA;
    if (data) *data = l->data;
    if (len) *len = n;
    return (CUresult)l->result;
}

/* One request that waits for its reply, with the request flags given (shim_rpc, shim_ask). */
static CUresult rpc(unsigned op, const void *payload, uint32_t len, unsigned flags, void *out,
                    uint32_t cap, uint32_t *outlen)
{
    struct shim_req q;
    CUresult r = shim_req_begin(&q, op, len, 1, flags);
    if (r != CUDA_SUCCESS) return r;
    if (len) memcpy(q.payload, payload, len);
    shim_req_send(&q);
    const uint8_t *data;
    uint32_t n;
    r = shim_req_wait(&q, &data, &n);
    if (outlen) *outlen = n;
    if (out && cap) memcpy(out, data, n < cap ? n : cap);
    return r;
}

CUresult shim_rpc(unsigned op, const void *payload, uint32_t len, void *out, uint32_t cap,
                  uint32_t *outlen)
{
    return rpc(op, payload, len, 0, out, cap, outlen);
}

CUresult shim_ask(unsigned op, const void *payload, uint32_t len)
{
    return rpc(op, payload, len, SHIM_RQ_QUIET, NULL, 0, NULL);
}

CUresult shim_rpc_lane(unsigned op, const void *payload, uint32_t len, const uint8_t **data,
                       uint32_t *outlen)
{
    struct shim_req q;
    CUresult r = shim_req_begin(&q, op, len, 1, 0);
    if (r != CUDA_SUCCESS) return r;
    if (len) memcpy(q.payload, payload, len);
    shim_req_send(&q);
    return shim_req_wait(&q, data, outlen);
}

CUresult shim_post(unsigned op, const void *payload, uint32_t len)
{
    struct shim_req q;
    CUresult r = shim_req_begin(&q, op, len, 0, 0);
    if (r != CUDA_SUCCESS) return r;
    if (len) memcpy(q.payload, payload, len);
    shim_req_send(&q);
    return CUDA_SUCCESS;
}

CUresult shim_upload(const void *data, size_t len)
{
    const size_t max = CHAN_REC_MAX - sizeof(struct chan_rec);
    const uint8_t *p = data;
    while (len) {
        size_t n = len < max ? len : max;
        CUresult r = shim_post(CHAN_OP_BLOB, p, (uint32_t)n);
        if (r != CUDA_SUCCESS) return r;
        p += n;
        len -= n;
    }
    return CUDA_SUCCESS;
}
