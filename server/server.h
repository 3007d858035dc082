/* mpsshim-server internals.
 *
 * One process per user and pipe directory. It owns one real context per device (the
 * devices' primary contexts) and replays every client's calls on it: one worker thread per
 * client, in the order the client issued them. Each client's objects live in its own
 * tables; every handle and address a client names is checked there first, so a client can
 * neither see nor harm another's objects through the API. */
#ifndef MPSSHIM_SERVER_H
#define MPSSHIM_SERVER_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <cuda.h>
#include <uthash.h>

#include "channel/chan.h"
#include "channel/desc.h"
#include "channel/marshal.h"
#include "channel/ranges.h"
#include "server/driver.h"
#include "server/family.h"

/* ---------------------------------------------------------------- log.c */

/* Appends "[date time Server pid] message" to server.log (and stderr in the foreground). */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Opens the log files in dir (to_stderr: every line on stderr too). A file that cannot be
 * opened is said once on stderr and its lines are dropped; -1 then, with the first reason in
 * why, for a caller that would rather not start (the server goes on either way). */
int srv_log_open(const char *dir, const char *file, const char *who, int to_stderr, char *why,
                 size_t len);
/* Closes and opens both files again by name (SIGHUP: a rotated log starts anew). */
void srv_log_reopen(void);
/* Appends "[date time Control pid] message" to control.log (commands and their results). */
void srv_clog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A client's text (its executable's name, its command line) made safe to show in a log
 * line or a control answer: control bytes, bytes that are no shown UTF-8 character and
 * backslashes escaped (\xNN, \\), cut at cap bytes between whole escapes. Returns out. */
const char *srv_log_escape(const char *s, char *out, size_t cap);

/* ---------------------------------------------------------------- per-client objects */

/* One object a client holds (registry.c): a handle (stream, event, module, array, pool...)
 * or a memory range, of one of the types cuda_symbols.txt declares (%handle, %range). The
 * client names it by `key.value`: the real handle, or a range's base address. Owned by the
 * client's worker thread alone. */
struct srv_client;
struct srv_obj_key {
    uint64_t value;
    uint32_t type; /* SHIM_HT_* */
    uint32_t pad;
};
struct srv_waitval;
struct srv_obj {
    struct srv_obj_key key;
    uint64_t size;  /* ranges: bytes from key.value */
    uint64_t bytes; /* device memory it holds, counted against the limit on dev */
    int dev;        /* device it lives on; -1: none */
    uint32_t ctx;   /* client context it was made in; 0: none (released at exit) */
    int owned;      /* the client made it: destroyed when released, else only forgotten */
    struct srv_obj *parent;
    struct srv_obj *children;              /* objects that belong to this one */
    struct srv_obj *sib_prev, *sib_next;   /* among the parent's children */
    struct srv_obj *type_prev, *type_next; /* among the client's objects of this type */
    void *ext;             /* the family's own state (struct srv_stream), freed by its release */
    uint64_t aux;          /* the family's own value (pinned memory: the bytes mapped) */
    struct srv_held *held; /* held with other clients (ipc.c's shares), else NULL */
    /* Frees the family's state of a record that is going, however it goes (destroyed,
     * dying with its parent, released): graphs' and execs' host node slots (hostfn.c). */
    void (*drop)(struct srv_client *c, struct srv_obj *o);
    /* Execs: what their nodes name, checked again at each launch (graphrefs.c). */
    struct srv_graphrefs *refs;
    UT_hash_handle hh;
};

/* A record held with other clients (ipc.c's shares), the first member of the family's own
 * state: the real object goes when its last holder lets go (let_go; `leaving`: its client
 * or context goes, not the API; `leak`: its client's work may still use it, so it is never
 * destroyed). revoked: the grant ended and the record resolves no more (any worker reads
 * it, without a lock). */
struct srv_held {
    _Atomic int revoked;
    void (*let_go)(struct srv_client *c, struct srv_obj *o, int leaving, int leak);
};
/* 1 if o is held with others whose grant ended (an opened record whose exporter left). */
static inline int srv_obj_revoked(const struct srv_obj *o)
{
    return o->held && atomic_load_explicit(&o->held->revoked, memory_order_acquire);
}

/* A family's operation on a record of a type it keeps state for (%handle ... release=,
 * drop=, forget=NAME: srv_type_release, srv_type_drop, srv_type_forget). */
typedef void srv_release_fn(struct srv_client *c, struct srv_obj *o);

struct srv_stream {
    uint64_t key; /* what the client names it by: the real handle, or 0 for defaults */
    CUstream real;
    struct srv_obj *obj; /* its registry record (created streams; NULL for defaults) */
    uint32_t ctx;
    int device;
    unsigned flags; /* as the client asked (the real stream is always non-blocking) */
    int priority;
    int blocking;            /* synchronises with its context's legacy stream */
    int legacy;              /* this is the context's legacy default stream */
    uint16_t thread;         /* per-thread default stream of this client thread, else 0 */
    uint64_t nsubmit;        /* operations enqueued so far */
    uint64_t seen_by_legacy; /* our nsubmit when the legacy stream last waited for us */
    uint64_t legacy_seen;    /* the legacy stream's nsubmit when we last waited for it */
    CUevent mark;            /* internal event recorded for those waits */
    /* Recorded on it just before its latest capture began (graph.c): what it held then, for
     * a free that must come after the client's work (devmem.c); NULL: never captured. */
    CUevent cap_mark;
    uint64_t queued;       /* bytes charged here not yet covered by a mark (queue.c) */
    struct srv_hblock *hb; /* the pinned block its inline copies fill now (hostblocks.c) */
    /* The graph a capture begun on it builds (graph.c), NULL: none. Kept from the begin, as
     * the driver names it only while the capture is active, and the end of an invalidated
     * capture must still find what the client held in it. */
    CUgraph capture_graph;
    uint64_t mvar_seen; /* the client's mvar_gen it is ordered after (managed.c) */
    uint32_t trace_gen; /* the trace it was named for (trace.c); the worker's own */
    UT_hash_handle hh;  /* in ctx->defaults (per-thread default streams) */
};

struct srv_ctx {
    uint32_t id;
    int device;
    int primary;
    uint32_t gen;                /* the device's fault generation when it was made (fault.c) */
    CUresult fault;              /* a fault killed it: every call in it returns this (sticky) */
    struct srv_stream *legacy;   /* created on first use */
    struct srv_stream *defaults; /* per-thread default streams, keyed by thread number */
    struct srv_stream *mvar;     /* __managed__ variables' copies (managed.c); on first use */
    UT_hash_handle hh;
};

/* A reply that waits for the GPU: posted when all its events have completed. */
#define SRV_WAIT_EVENTS 64
struct srv_wait {
    struct srv_wait *next;
    int lane;
    uint32_t reply_len;
    CUresult result;
    int own; /* reply with its own result only (srv_wait_stream_own) */
    /* A reply the GPU posts (waits.c gpu_reply; 2: to a thread told to spin for it): the
     * lane's reply number it stores. When its event completes the worker only wakes the
     * thread if it sleeps; on a failure it posts the failure under the same number. */
    int gpu;
    uint32_t target;
    int nev;
    CUevent ev[SRV_WAIT_EVENTS];
    int pooled[SRV_WAIT_EVENTS]; /* 1: return the event to the pool when done */
    int dev[SRV_WAIT_EVENTS];    /* device of each event (events belong to one context) */
};

/* Bytes the server holds for a client's queued work (queue.c), let go as the GPU passes
 * the marks recorded after it. Owned by the worker. */
struct srv_qmark {
    CUevent ev;
    int dev;
    uint64_t bytes;
};
struct srv_queue {
    struct srv_qmark *marks;
    size_t n, cap;
    uint64_t held;        /* charged and not known complete, marked or not */
    uint64_t unmarked;    /* the part of held no mark covers yet (in streams' queued) */
    uint64_t peak;        /* the most held at once */
    uint64_t over_since;  /* monotonic ns since held is over the limit; 0: it is not */
    uint64_t progress_ns; /* when marks last let bytes go */
    uint64_t pauses;      /* times it went over the limit */
    uint32_t ran_seen;    /* the client's cb_ran when last looked at */
    int logged, stall_logged;
};

/* Pinned blocks for inline copies' data (hostblocks.c). Owned by the worker. */
struct srv_hblock;
struct srv_hblocks {
    struct srv_hblock *busy; /* closed, until their events complete */
    struct srv_hblock *free;
    unsigned nfree;
    uint64_t bytes; /* pinned, all blocks */
    int logged;
};

struct srv_stats {
    _Atomic uint64_t launches;
    _Atomic uint64_t bytes_copied;
    _Atomic uint64_t calls;
    _Atomic uint64_t mem_in_use;                /* device bytes held, all devices */
    _Atomic uint64_t mem_dev[CHAN_MAX_DEVICES]; /* device bytes held per device (limits) */
    _Atomic uint64_t pinned;                    /* pinned host bytes */
    _Atomic uint64_t streams; /* real streams held for it (created and default ones) */
    _Atomic uint32_t devices; /* bit d: it made a context on device d (ps) */
    /* When it last enqueued GPU work on each device, and whether a reply of its waits for
     * the GPU: who had work on a device when it faulted (fault.c). */
    _Atomic uint64_t enqueued_ns[CHAN_MAX_DEVICES];
    _Atomic int gpu_waits;
    _Atomic uint64_t gpu_replies; /* replies the GPU was given to post (waits.c gpu_reply) */
};

/* What a client may use, fixed when it connects (policy.c). */
struct srv_limits {
    int pct;                        /* active thread percentage in force, 1..100 */
    unsigned sms[CHAN_MAX_DEVICES]; /* SMs its work may use on each device */
    int part[CHAN_MAX_DEVICES];     /* its green partition's index (green.c), -1: none */
    uint64_t mem[CHAN_MAX_DEVICES]; /* device memory it may hold, bytes; 0: no limit */
    int priority;                   /* 0 normal, 1 below normal */
};

/* The devices a client sees (devices.c), fixed at the handshake: its ordinal i is the
 * server's to_srv[i]; to_cli[d] is the client's ordinal of the server's device d, or -1. */
struct srv_devmap {
    int n;
    int8_t to_srv[CHAN_MAX_DEVICES];
    int8_t to_cli[CHAN_MAX_DEVICES];
};

/* What one client process may spend and spends, across its connections (account.c). */
#define SRV_ACCOUNT_CONNS 8 /* connections of one process at once */
struct srv_account {
    pid_t pid;
    unsigned long long start;   /* its start time: a reused pid is another process */
    unsigned conns;             /* its connections; under account.c's lock */
    struct srv_limits lim;      /* its first connection's, for all of them */
    int part[CHAN_MAX_DEVICES]; /* its green partition per device (-1: none); green_lock */
    _Atomic uint64_t mem[CHAN_MAX_DEVICES];      /* device bytes counted */
    _Atomic uint64_t reserved[CHAN_MAX_DEVICES]; /* allowed by a check, not yet counted */
    _Atomic uint64_t pinned;                     /* pinned host bytes */
    _Atomic uint64_t objects; /* registry records, when MPSSHIM_MAX_OBJECTS caps them */
    _Atomic uint64_t queued;  /* bytes held for its queued work (queue.c) */
    _Atomic int objects_said;
    struct srv_account *next;
};

struct srv_client {
    uint32_t id;
    pid_t pid;
    uid_t uid;
    char exe[64];
    int sock;
    struct chan ch;
    void *shm;
    size_t shm_size;
    int shm_registered;
    CUdeviceptr shm_dptr;      /* the segment's device address (0: not device-mapped) */
    _Atomic uint32_t cb_fired; /* host-function notifications posted so far */
    /* Notifications published in the ring (its tail): kept here, so that the driver's
     * callback thread publishing in order never waits on a word the client can write. */
    _Atomic uint32_t cb_published;
    _Atomic uint32_t cb_last; /* seq of the last host function enqueued (read by the main
                               * loop for a client that died: srv_hostfn_release) */
    _Atomic uint32_t cb_ran;  /* seq of the last host function posted to it (queue.c) */
    struct srv_hostnode *hn;  /* host node slots (hostfn.c), CHAN_HN_SLOTS; NULL until used */
    _Atomic int hn_gone;      /* it left: its host nodes no longer hold their graphs */
    pthread_t worker;
    struct srv_limits lim;    /* set at the handshake, read-only after */
    struct srv_account *acct; /* its process's account, from the handshake on */
    /* Device memory a check allowed during the record being handled, not yet counted
     * (account.c); the worker's own. */
    uint64_t reserved[CHAN_MAX_DEVICES];
    int reserved_any;
    /* Device memory its context limits cost, and on which device (context.c); charged to
     * its account while they stand. */
    uint64_t limit_cost[CU_LIMIT_MAX];
    int limit_cost_dev[CU_LIMIT_MAX];
    struct srv_devmap devs;             /* set at the handshake, read-only after */
    CUgreenCtx green[CHAN_MAX_DEVICES]; /* where its streams are made; NULL: shared ctx */
    /* MPSSHIM_GREEN_EACH=1: an unthrottled client's own green context over all SMs, where
     * its streams are made instead (green.c); NULL otherwise. */
    CUgreenCtx green_own[CHAN_MAX_DEVICES];
    _Atomic int dead;       /* the socket hung up, or the server is quitting */
    _Atomic int finished;   /* the worker has released everything */
    _Atomic int terminated; /* terminate_client: its calls fail with CLIENT_TERMINATED */
    _Atomic int connected;  /* the handshake succeeded (it is listed by the control commands) */
    int admitted;           /* holds a place under MPSSHIM_MAX_CLIENTS; guarded by clients_lock */
    /* PROFILE=1 builds (channel/prof.h): its worker's records, time replaying them, and
     * since when it serves. */
    uint64_t prof_records, prof_replay_ns, prof_since_ns;
    /* and per operation (srv_prof_slot): records and ns, pairs; NULL in other builds */
    uint64_t *prof_op;
    /* The spinning policy (spin.c), the worker's own: counted busy until busy_until; the
     * spin hint last written into the segment. */
    int busy;
    uint64_t busy_until;
    uint32_t spin_hint;
    /* The coalescing bound last written into the segment (coalesce.c); its sweeper reads
     * `coalescing` (that bound is not 0) under clients_lock. */
    uint32_t coalesce_hint;
    _Atomic int coalescing;
    /* A release gave up on work still running (registry.c, leave_running): that work may
     * still fire its host functions into this struct and the segment, or copy through the
     * segment's slots, so neither is ever freed or unmapped. */
    int left_running;
    /* Stream waits it enqueued, to unblock when it goes (memops.c). Changed by its own
     * thread only, under waitvals_lock, which the main loop takes to read them. */
    struct srv_waitval *waitvals;
    size_t nwaitvals, capwaitvals;
    pthread_mutex_t waitvals_lock;
    int watch_values;  /* the main loop let go of waits on its host memory (logged once) */
    uint64_t hello_by; /* monotonic ns by which the whole hello must have arrived */
    /* Faults (fault.c): the server's fault epoch this worker has acted on, published for
     * the recovery to wait on; the rest is the worker's own. */
    _Atomic uint32_t fault_ack;
    uint32_t fault_seen;
    uint32_t gen_seen[CHAN_MAX_DEVICES]; /* fault generation of each device acted on */
    _Atomic int evicted;                 /* a newer connection took its handshake place: give up */
    /* The last value stored in the segment's alert word (srv_client_alert): counted here,
     * never read back from the segment, which the client can write. */
    _Atomic uint32_t alerts;
    struct srv_client *next; /* in the server's list, guarded by srv.clients_lock */

    /* Owned by the worker thread alone. */
    struct srv_ctx *ctxs;
    struct srv_ctx *cur;                   /* context of the record being replayed */
    struct srv_obj *objs;                  /* every object it holds, by (value, type) */
    struct chan_ranges ranges;             /* its range objects, by address (srv_range) */
    struct srv_obj *by_type[SHIM_NHTYPES]; /* its objects of each type, newest first */
    /* The record of each type its worker found last (registry.c): a launch looks up the
     * same function and stream again and again. Forgetting a record clears its entry. */
    struct srv_obj *last_found[SHIM_NHTYPES];
    unsigned nobjs[SHIM_NHTYPES];
    /* Records forgotten so far (registry.c): an exec found good since needs no new check
     * at its launch (graphrefs.c). */
    uint64_t forgotten;
    struct srv_wait *waits;
    /* Replies posted on each lane so far, by the worker or the GPU: the lane's seq as the
     * server wrote it (proto.h; the segment's own word is never read back). */
    uint32_t lane_seq[CHAN_NLANES];
    unsigned captures; /* stream captures it began and has not ended (graph.c) */
    /* Free internal events, per device: an event can only be recorded on streams of the
     * context it was made in. */
    struct srv_evpool {
        CUevent *ev;
        size_t n, cap;
    } pool[CHAN_MAX_DEVICES];
    /* Per device, made when first needed: the CU_EVENT_BLOCKING_SYNC event through which
     * the worker waits for a stream while the server is crowded (waits.c block_stream). */
    CUevent block_ev[CHAN_MAX_DEVICES];
    CUresult deferred; /* first failure of an async operation not yet reported */
    /* Work of destroyed streams still running: context syncs must wait for it too. */
    struct srv_retired {
        CUevent ev;
        uint32_t ctx;
        int dev;
    } *retired;
    size_t nretired, capretired;
    /* Limits as this client set them (the shared context's real limit is the largest any
     * client asked for); bit i of limits_set: limit i was set. */
    uint64_t limits[CU_LIMIT_MAX];
    uint32_t limits_set;
    struct srv_queue queue; /* bytes held for its queued work (queue.c) */
    /* __managed__ variables (managed.c): pushes so far, and the stream of the last, whose
     * mark every stream waits for before its next work (srv_stream_prepare). */
    uint64_t mvar_gen;
    struct srv_stream *mvar_last;
    struct srv_hblocks hblocks; /* pinned memory its inline copies' data waits in */
    struct {                    /* devmem.c: its allocation and free streams per device */
        CUstream alloc, free;
    } devmem[CHAN_MAX_DEVICES];
    /* Frees, unmaps and address frees waiting for the work it queued before them, in order
     * (devmem.c, srv_later). */
    struct srv_later *later;
    size_t nlater, caplater;
    uint8_t *blob; /* image uploaded for the next load */
    size_t blob_len, blob_cap;
    uint32_t chunk_seq; /* staging chunk number (channel/copyplan.h) */
    /* DMA of the chunk last issued from/into each slot, per device (see pool). */
    CUevent slot_ev[CHAN_MAX_DEVICES][CHAN_NSLOTS];
    int slot_dev[CHAN_NSLOTS];      /* device whose event marks the slot's last DMA */
    int64_t slot_busy[CHAN_NSLOTS]; /* HtoD chunk whose DMA may still read the slot, or -1 */
    uint8_t *rec;                   /* the record being replayed (copied out of the ring) */
    uint8_t *scratch;               /* stands in for the lane of a record that asked for no reply */
    uint8_t *out; /* a described call's outputs, private until copied to its lane */
    uint8_t mem_refused[CHAN_MAX_DEVICES]; /* limit refusal logged; cleared by an allocation */
    unsigned hostreg_said; /* host registrations refused for want of the address (memory.c) */
    unsigned hostfn_said;  /* host functions refused for their number (hostfn.c) */
    unsigned waits_said;   /* stream waits refused past the pending bound (memops.c) */
    uint32_t hostfn_seq;   /* the number of the last host function it sent (hostfn.c) */
    unsigned eager_left;   /* kernels its image loads may still load eagerly (module.c) */
    uint16_t first_thread; /* client thread number of the first record */
    int many_threads;      /* records came from more than one client thread */
    int pool_allocs;       /* it allocated stream-ordered from a pool (waits.c gpu_reply) */

    /* What its thread is doing, for the main loop's watch on calls that never return
     * (srv_clients_watch): the record it replays (an id of shim_calls or a CHAN_OP_, or
     * SRV_BUSY_*; 0: none), and a count bumped per record, so that the watch tells a call
     * that lasts from many short ones without a clock read per record. */
    _Atomic uint32_t busy_op;
    _Atomic uint64_t busy_seq;
    uint64_t watch_seq, watch_since_ns; /* the main loop's own: what it saw, since when */
    int watch_said;
    int watch_gone; /* the main loop found it gone (logged once) */

    struct srv_stats stats;
};

#define SRV_BUSY_HANDSHAKE 0xfffffffeu /* busy_op: the handshake's driver calls */
#define SRV_BUSY_RELEASE 0xffffffffu   /* busy_op: releasing what it held */
/* A call in progress this long is logged once, with the thread that makes it. */
#define SRV_SLOW_CALL_NS (10ull * 1000000000ull)

/* ---------------------------------------------------------------- main.c: the server */

/* A device's SMs as green contexts can divide them (green.c). */
struct srv_sm_info {
    unsigned total; /* SMs of the device */
    unsigned align; /* partitions are multiples of this; 0: no partitions possible */
    unsigned min;   /* smallest partition */
};

/* Operator settings from the control commands (policy.c); guarded by lock. */
struct srv_policy {
    pthread_mutex_t lock;
    int default_pct;                        /* set_default_active_thread_percentage: 100 */
    int server_pct;                         /* set_active_thread_percentage; 0: not set */
    uint64_t default_mem[CHAN_MAX_DEVICES]; /* set_default_device_pinned_mem_limit; 0: none */
    uint64_t server_mem[CHAN_MAX_DEVICES];  /* set_device_pinned_mem_limit; 0: not set */
    int default_priority;                   /* set_default_client_priority: 0 */
};

/* A device's fault state (fault.c). A sticky error kills the shared context: its clients
 * are told and let go of what lived in it, and a new server serves new clients. */
enum { SRV_DEV_OK, SRV_DEV_FAULT };
struct srv_devfault {
    _Atomic int state;        /* SRV_DEV_OK, or SRV_DEV_FAULT for good (the device is lost) */
    _Atomic int err;          /* the sticky CUresult */
    _Atomic uint32_t gen;     /* faults seen: contexts of an older generation are dead */
    _Atomic uint64_t seen_ns; /* when the fault was seen */
};

struct srv {
    char pipe_dir[256];
    char log_dir[256];
    char driver_path[512];
    int ndev;
    CUcontext ctx[CHAN_MAX_DEVICES]; /* the one real context of each device */
    /* A stream of each shared context, made at start, for writes that release a departed
     * client's waits on values in its device memory (memops.c); NULL where it could not be
     * made. */
    CUstream release_stream[CHAN_MAX_DEVICES];
    struct chan_devinfo devinfo;
    pthread_mutex_t clients_lock;
    struct srv_client *clients;
    uint32_t next_client_id;
    unsigned max_clients;
    _Atomic int quitting;
    uint64_t idle_spin_ns;
    uint64_t release_ns;    /* how long a release waits for a departed client's work */
    uint64_t queue_limit;   /* bytes one client's queued work may hold in the server; 0: none */
    int block_sync;         /* single-threaded clients' syncs block in the driver (see waits.c) */
    unsigned ctx_sched;     /* CU_CTX_SCHED_* of the shared contexts (MPSSHIM_CTX_SCHED) */
    int green_each;         /* each unthrottled client's streams in a green context of its own */
    int device_pool;        /* MPSSHIM_DEVICE_POOL=1: cuMemAlloc from a pool of ours (devmem.c) */
    int device_vmm;         /* MPSSHIM_DEVICE_VMM=1: cuMemAlloc from the server's arena (arena.c) */
    uint64_t max_pinned;    /* pinned host bytes one client process may hold */
    uint64_t max_objects;   /* registry records one client process may hold; 0: no cap */
    unsigned eager_kernels; /* kernels of a client's images loaded when loaded (module.c) */
    uint64_t host_va_base, host_va_size; /* reservation for pinned host allocations */
    /* Context limits as the server started (the floor when clients leave); the real limit
     * is the largest of this and what live clients set. Guarded by limits_lock. */
    pthread_mutex_t limits_lock;
    size_t limit_default[CHAN_MAX_DEVICES][CU_LIMIT_MAX];
    /* A release left a client's work running (registry.c): the GPU may never be idle again,
     * so nothing that waits for the whole device is done when idle (srv_limits_idle). */
    _Atomic int left_running_any;
    struct srv_sm_info sm[CHAN_MAX_DEVICES];
    struct srv_policy policy;
    int prio_least, prio_greatest; /* stream priority range of the shared contexts */
    _Atomic int draining;          /* quit -t: new clients are refused while the others finish */
    struct srv_devfault fault[CHAN_MAX_DEVICES];
    _Atomic uint32_t fault_epoch; /* changes whenever a device faults */
};

extern struct srv srv;

/* ---------------------------------------------------------------- account.c */

/* At the handshake, once its limits are resolved: c joins its process's account and takes
 * its limits; -1 (why says) when the process has SRV_ACCOUNT_CONNS connections already. */
int srv_account_join(struct srv_client *c, char *why, size_t len);
/* Last in c's release: its account goes with the process's last connection. */
void srv_account_leave(struct srv_client *c);
/* 1 when `bytes` more device memory on dev stay within the process's limit, reserved until
 * srv_account_settle (after the record that asked); 0 otherwise. */
int srv_account_mem_fits(struct srv_client *c, int dev, uint64_t bytes);
void srv_account_settle(struct srv_client *c);
/* Device memory the process holds on dev; a change of it (srv_mem_count/uncount). */
uint64_t srv_account_mem_used(const struct srv_client *c, int dev);
void srv_account_mem_add(struct srv_client *c, int dev, int64_t bytes);
/* Pinned host bytes taken (1) within MPSSHIM_MAX_PINNED_MB for the process, or refused (0,
 * logged); and given back. */
int srv_account_pinned_take(struct srv_client *c, uint64_t bytes);
void srv_account_pinned_give(struct srv_client *c, uint64_t bytes);
/* One registry record more within MPSSHIM_MAX_OBJECTS (1), or refused (0, said once); and
 * one less. */
int srv_account_record_take(struct srv_client *c);
void srv_account_record_give(struct srv_client *c);
/* Bytes held for the process's queued work: a change, and the total (queue.c). */
void srv_account_queued_add(struct srv_client *c, int64_t bytes);
uint64_t srv_account_queued(const struct srv_client *c);

/* ---------------------------------------------------------------- client.c */

/* Starts serving an accepted connection (handshake and worker run in a new thread). */
void srv_client_start(int sock);
/* Marks every client dead and waits for their workers to clean up. */
void srv_clients_stop(void);
/* Called by the poll loop when a client's socket hangs up. */
void srv_client_hangup(struct srv_client *c);
/* terminate_client: marks every live client of process `pid` terminated (its worker stops
 * replaying, its calls fail with CUDA_ERROR_MPS_CLIENT_TERMINATED) and waits until the
 * server has released everything they held. Returns how many clients it terminated. */
int srv_client_terminate(pid_t pid);
/* Moves the client's alert word (chan_shm.alert): an answer it keeps may have changed
 * without a record of its own. Caller: c's worker, or a thread holding srv.clients_lock
 * that found c in the list (cleanup unmaps the segment under that lock). */
void srv_client_alert(struct srv_client *c);
/* srv_client_alert for every connected client (takes srv.clients_lock). */
void srv_clients_alert(void);
/* Clients whose handshake succeeded and that have not finished yet. */
unsigned srv_clients_live(void);
/* Connections whose worker has not finished: clients, and ones mid-handshake or mid-release. */
unsigned srv_clients_present(void);
/* From the main loop, every pass: a client found gone has its host-function waits and its
 * waits on values in its host memory let go at once (srv_hostfn_release,
 * srv_memops_let_go), whatever its own thread is doing; and each client call (or
 * handshake, or release) in progress SRV_SLOW_CALL_NS is logged, once: a driver call that
 * never returns stops the server's other clients too (its lock), and the line says whose
 * and which it was. */
void srv_clients_watch(void);
/* PROFILE=1 builds: the slot of an operation in prof_op (generic calls first, then the
 * protocol's own operations, then one for anything else). */
#define SRV_PROF_SLOTS (SHIM_NCALLS + (CHAN_OP_END - CHAN_OP_BASE) + 1)
static inline int srv_prof_slot(uint32_t op)
{
    if (op < SHIM_NCALLS) return (int)op;
    if (op > CHAN_OP_BASE && op < CHAN_OP_END) return SHIM_NCALLS + (int)(op - CHAN_OP_BASE);
    return SRV_PROF_SLOTS - 1;
}

/* Marks what c's thread does now (busy_op). Only that thread writes busy_seq: a load and a
 * store, no locked instruction on the path of every record. */
static inline void srv_busy(struct srv_client *c, uint32_t op)
{
    atomic_store_explicit(&c->busy_op, op, memory_order_relaxed);
    atomic_store_explicit(&c->busy_seq,
                          atomic_load_explicit(&c->busy_seq, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* After client `gone` has left: lowers each limit it raised back to what the others need. */
void srv_limits_settle(struct srv_client *gone);
/* With no client left: the stack size the driver grew each device's context to for the
 * clients' kernels goes back to where it started (context.c). */
void srv_limits_idle(void);
/* Sets the server's context for device `dev` current on the calling thread. */
CUresult srv_use_device(int dev);
/* Pushes the server's context for device dev (< CHAN_MAX_DEVICES, not checked) over the
 * thread's current one, for what must be made or freed there whatever the call being
 * replayed runs in (another device's context, a green one); srv_pop_device, after a push
 * that succeeded, makes the thread's own current again (so srv_use_device's note of it
 * stays true). */
CUresult srv_push_device(int dev);
void srv_pop_device(void);
/* The whole device's memory in use as the driver counts it (other processes' included),
 * from the calling thread, made current in the device's context: 0, or -1. */
int srv_device_used(int dev, size_t *used);

/* ---------------------------------------------------------------- codegate.c, coalesce.c */

/* Code loading and client-held waits (codegate.c). srv_codegate_enter: before a driver
 * call that loads code or sets a context limit on dev (`what`, for the log), by a thread
 * serving c; CUDA_SUCCESS once no client-held wait is pending there (pair with
 * srv_codegate_leave), else c left while it waited. srv_codegate_wait_begin/_end: around
 * enqueueing on stream st anything only a client can end (a wait on a value in its memory,
 * a host function, a launch of an exec with host nodes; enqueued: the driver took it). */
void srv_codegate_init(void);
/* Around a generic call that may load a kernel's or library's code in a context the first
 * time it names it there (codegate.c): begin loads a kernel through the gate first, or
 * enters the gate for the call itself (its device, else -1; *res: CUDA_SUCCESS unless c
 * left while it waited); end leaves it. */
struct srv_call;
int srv_codegate_call_begin(struct srv_client *c, struct srv_call *k, CUresult *res);
void srv_codegate_call_end(int dev);
/* Loads CUkernel k's code in device dev's context through the gate, once (launch.c);
 * CUDA_SUCCESS unless c left while it waited (a failed load is the caller's call's to see). */
CUresult srv_kernel_loaded(struct srv_client *c, struct srv_obj *k, int dev);
CUresult srv_codegate_enter(struct srv_client *c, int dev, const char *what);
void srv_codegate_leave(int dev);
void srv_codegate_wait_begin(int dev);
void srv_codegate_wait_end(struct srv_client *c, int dev, CUstream st, int enqueued);
/* Doorbell coalescing while crowded (coalesce.c): MPSSHIM_COALESCE_US read at start; the
 * bound a client's segment gets; the sweeper thread, started when the bound is not 0. */
void srv_coalesce_init(void);
uint32_t srv_coalesce_hint(int crowded);
void srv_coalesce_start(void);

/* ---------------------------------------------------------------- spin.c */

/* Reads how many CPUs the spinning policy counts (MPSSHIM_SPIN_CPUS, else the affinity),
 * and asks for the server's scheduler slice (MPSSHIM_SERVER_SLICE_US): called by the main
 * thread before any other thread exists. */
void srv_spin_init(void);
/* Logs a spinning setting that was not understood (once the log is open). */
void srv_spin_log_settings(void);
/* How many clients are busy now, and how many CPUs the policy counts. */
void srv_spin_describe(unsigned *nbusy, unsigned *cpus);
/* True while more clients are busy than half the CPUs: workers do not spin. */
int srv_spin_crowded(void);
/* The grade of the policy now: "on", "short" or "off" (spin.c). */
const char *srv_spin_grade(void);
/* How long a worker spins for requests before it sleeps: MPSSHIM_SERVER_SPIN_US, or while
 * crowded MPSSHIM_CROWDED_WORKER_SPIN_US (0 by default). */
uint64_t srv_spin_worker_ns(void);
/* While crowded: how long a worker spins on a synchronisation before sleeping (waits.c). */
uint64_t srv_spin_sync_ns(void);
/* The worker of c replayed records at `now`: c counts as busy for a while. */
void srv_spin_worked(struct srv_client *c, uint64_t now);
/* The worker of c found nothing to do: ends c's busy spell when it is over; returns how
 * long c still counts as busy (UINT64_MAX: it does not), which bounds the worker's sleep. */
uint64_t srv_spin_idle(struct srv_client *c, uint64_t now);
/* c's worker stops: it no longer counts. */
void srv_spin_gone(struct srv_client *c);

/* ---------------------------------------------------------------- worker.c */

void *srv_worker_main(void *arg);
/* Answers a request on its lane; `len` bytes already in the lane's data. */
void srv_reply(struct srv_client *c, int lane, CUresult r, uint32_t len);
/* The lane's data area, where replies are written in place. */
uint8_t *srv_lane_data(struct srv_client *c, int lane);
/* Records the first error of an asynchronous operation, reported at the next sync. */
void srv_defer(struct srv_client *c, CUresult r, const char *what);
/* Takes the deferred error (CUDA_SUCCESS if none). */
CUresult srv_take_deferred(struct srv_client *c);
/* 1 while the client is connected: waits on it give up otherwise. */
int srv_client_alive(void *client);

/* ---------------------------------------------------------------- registry.c */

/* Records of all clients' objects that exist now (get_server_status's `Objects`). */
uint64_t srv_records_live(void);
/* Objects shared through IPC whose real object is still held (ipc.c). */
uint64_t srv_shares_live(void);

/* An element of a client's range table: its range and the object it belongs to. */
struct srv_range {
    struct chan_range r;
    struct srv_obj *obj;
};

/* Prepares the destroyers' call interfaces; 0 on success. */
int srv_registry_init(void);
/* The client's object of that type named `value`, or NULL (also when it is an opened IPC
 * record whose exporter left: see ipc.c). */
struct srv_obj *srv_obj_find(struct srv_client *c, uint32_t type, uint64_t value);
/* The record itself, revoked or not: for letting go of it. */
struct srv_obj *srv_obj_lookup(struct srv_client *c, uint32_t type, uint64_t value);
/* Registers an object: made in the current context (unless its type is context-free) and
 * on the current device, belonging to `parent` (may be NULL). An object already there is
 * returned as it is (owned if either says so). NULL when out of memory. */
struct srv_obj *srv_obj_add(struct srv_client *c, uint32_t type, uint64_t value, int owned,
                            struct srv_obj *parent);
/* Registers a range object [base, base + size); NULL when out of memory or when it
 * overlaps one the client already has. Its bytes are counted with srv_obj_count. */
struct srv_obj *srv_range_add(struct srv_client *c, uint32_t type, uint64_t base, uint64_t size,
                              int owned, struct srv_obj *parent);
/* The client's range object holding addr when all of [addr, addr + len) lies in its
 * ranges (one, or several that follow each other without a gap), or NULL. */
struct srv_obj *srv_range_find(struct srv_client *c, uint64_t addr, uint64_t len);
/* The same for every byte one side of a pitched 3D copy touches (chan_copy_extent's
 * arguments): a copy's side, a graph node's memory. NULL also when the extent overflows. */
struct srv_obj *srv_range_extent(struct srv_client *c, uint64_t base, uint64_t x, uint64_t y,
                                 uint64_t z, uint64_t pitch, uint64_t slice_rows, uint64_t width,
                                 uint64_t height, uint64_t depth);
/* Counts `bytes` of device memory on dev for the object (against the client's limit). */
void srv_obj_count(struct srv_client *c, struct srv_obj *o, int dev, uint64_t bytes);
/* Destroys, as its type's release would, an object the driver just made that could not be
 * registered (out of memory): nothing the server cannot release may stay behind. */
void srv_obj_undo(struct srv_client *c, uint32_t type, uint64_t value, uint64_t size);
/* The client destroyed the object through the API: what dies with it is forgotten, what
 * outlives it stays the client's without a parent; then the record goes. */
void srv_obj_destroyed(struct srv_client *c, struct srv_obj *o);
/* Destroys the object for real if the client owns it (its type's release or destroyer),
 * with everything that belongs to it first, and forgets them all. */
void srv_obj_release(struct srv_client *c, struct srv_obj *o);
/* The client's objects of a type, newest first: for (o = first; o; o = o->type_next). */
static inline struct srv_obj *srv_objs_of(struct srv_client *c, uint32_t type)
{
    return c->by_type[type];
}
/* 1 if v is one of the client's functions; a CUkernel may stand for a CUfunction (CUDA
 * 12+: a kernel launches as the function of the current context). */
static inline int srv_func_known(struct srv_client *c, uint64_t v)
{
    return srv_obj_find(c, SHIM_HT_CUfunction, v) || srv_obj_find(c, SHIM_HT_CUkernel, v);
}
/* Fills a chan_function and its layout for a function or kernel at `out` (room bytes);
 * returns bytes written, 0 on failure with *err (module.c). */
uint32_t srv_func_describe(struct srv_client *c, uint64_t h, int is_kernel, uint8_t *out,
                           uint32_t room, CUresult *err);
/* Frees everything made in context `ctx` (0 = everything the client has), after its work
 * in that context has finished: one walk, what belongs to an object before the object. */
void srv_release(struct srv_client *c, uint32_t ctx);
/* Device bytes the client holds on dev: counted in stats.mem_dev[dev] and mem_in_use. */
void srv_mem_count(struct srv_client *c, int dev, uint64_t bytes);
void srv_mem_uncount(struct srv_client *c, int dev, uint64_t bytes);

/* Hooks of a described call (server:NAME in cuda_symbols.txt, srv_hook_NAME in the
 * family's file): what no description can say. */
struct srv_call {
    int id;                    /* the call id replayed */
    const struct shim_call *d; /* its descriptor */
    const struct chan_rec *r;
    struct chan_args a;           /* decoded arguments; pointers into private buffers */
    uint64_t vals[CHAN_MAX_ARGS]; /* what the driver gets for each parameter */
    struct srv_stream *stream;    /* the client stream it is enqueued on, or NULL */
    struct srv_obj *parent;       /* what it creates belongs to this, or NULL */
    int dev;                      /* device of the call (its context's, else 0) */
    int report;                   /* the driver failed it and wrote outputs that say why */
    int keep;                     /* a hook says: what the call names as destroyed lives on */
    int registers;                /* a hook registers what the call made, not its description */
};
struct srv_hook {
    /* Before the driver call: refuses with an error, or may change k->vals. */
    CUresult (*before)(struct srv_client *c, struct srv_call *k);
    /* Instead of the driver call (NULL: the call, or its via: call). */
    CUresult (*call)(struct srv_client *c, struct srv_call *k);
    /* After a successful call, once what it made is registered: may fix outputs or
     * complete the records (srv_obj_find finds them). */
    CUresult (*after)(struct srv_client *c, struct srv_call *k);
};
extern const struct srv_hook *const srv_call_hooks[SHIM_NCALLS];
/* The driver call a described call stands for, with k->vals (generic.c): for a hook's call
 * that wraps it. */
CUresult srv_generic_drive(struct srv_call *k);
extern srv_release_fn *const srv_type_release[SHIM_NHTYPES];
extern srv_release_fn *const srv_type_drop[SHIM_NHTYPES];
extern srv_release_fn *const srv_type_forget[SHIM_NHTYPES];

/* Contexts (context.c) */
struct srv_ctx *srv_ctx_get(struct srv_client *c, uint32_t id);
/* Internal events (ordering marks and sync points), recycled per client (events.c). */
CUresult srv_event_take(struct srv_client *c, int dev, CUevent *ev);
void srv_event_give(struct srv_client *c, int dev, CUevent ev);

/* ---------------------------------------------------------------- streams.c */

/* Resolves the stream a client named (handles NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
 * and `ptds` per-thread semantics) in the current context. NULL if invalid. */
struct srv_stream *srv_stream_resolve(struct srv_client *c, uint64_t handle, int ptds,
                                      uint16_t thread);
/* Makes `s` ready to take one more operation, keeping CUDA's legacy-stream ordering
 * among this client's streams; returns the real stream to enqueue on. */
CUstream srv_stream_prepare(struct srv_client *c, struct srv_stream *s);
/* Replies on `lane` once everything now enqueued on `s` has completed. */
CUresult srv_wait_stream(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len);
/* The same, replying with the wait's own result only: an error deferred from the client's
 * async work stays for its next synchronisation (a transfer of the shim's own). */
CUresult srv_wait_stream_own(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len);
/* Replies on `lane` once every stream of context `ctx` is idle. */
CUresult srv_wait_ctx(struct srv_client *c, struct srv_ctx *x, int lane);
/* Replies on `lane` once the event completes. */
CUresult srv_wait_event(struct srv_client *c, CUevent ev, int lane);
/* Polls pending waits, posting the replies of finished ones. 0 if none remain, 2 if all
 * that remain are replies the GPU posts to threads that spin for them, else 1. */
int srv_waits_poll(struct srv_client *c);
/* Ends wait w (taken off c->waits by the caller) with error err: the thread waiting on its
 * lane gets err, whether its reply was to come from the worker or from the GPU. */
void srv_wait_fail(struct srv_client *c, struct srv_wait *w, CUresult err);
/* MPSSHIM_GPU_REPLIES (1 by default): stream synchronisations answered by the GPU. */
void srv_waits_init(void);
/* A context sync while streams of the client's capture in it fails and invalidates those
 * captures, as with the driver: the driver's error, or CUDA_SUCCESS when none captures. */
CUresult srv_captures_sync(struct srv_client *c, uint32_t ctx);
/* 1 while `s` captures work into a graph (only asked of the driver while the client has a
 * capture going): the server must then add no work of its own to it. */
int srv_stream_capturing(struct srv_client *c, struct srv_stream *s);
/* Destroys a stream's server objects (after synchronising it). */
void srv_stream_free(struct srv_client *c, struct srv_stream *s);
/* 1 for the kinds of range that are host memory the server maps (pinned, registered and
 * managed memory): the driver sees them as host memory, they outlive a context fault. */
static inline int srv_host_type(uint32_t type)
{
    return type == SHIM_HT_MEM_PINNED || type == SHIM_HT_MEM_MANAGED;
}
/* managed.c: cuMemAllocManaged's flags are valid; cuMemFree of a managed range. */
int srv_managed_flags_ok(unsigned flags);
CUresult srv_managed_free(struct srv_client *c, struct srv_obj *o);
/* 1 if o is a global range the driver says is managed memory (a __managed__ variable). */
int srv_managed_var(const struct srv_obj *o);
/* srv_stream_prepare: s waits for the client's last push of __managed__ variables. */
void srv_managed_order(struct srv_client *c, struct srv_stream *s);
/* streams.c: context x's stream for __managed__ variables' copies, made on first use
 * (non-blocking, among the context's default streams for drains and releases); NULL when
 * it cannot be made. */
struct srv_stream *srv_stream_mvar(struct srv_client *c, struct srv_ctx *x);
/* 1 if dptr is graph memory of the client's whose graph still holds the address: a free
 * outside the graph leaves its record (graph.c). */
int srv_graphmem_keep(struct srv_client *c, uint64_t dptr);
int srv_graphmem_aliased(const struct srv_obj *o);
/* Stream-ordered allocation in a capture (graph.c). An allocation node the driver made for
 * a cuMemAllocAsync/cuMemAllocFromPoolAsync on capturing stream s: its address becomes graph
 * memory of the graph being captured, counted on dev; OUT_OF_MEMORY (the capture then
 * invalidated) when it cannot be registered. */
CUresult srv_graphmem_captured(struct srv_client *c, struct srv_stream *s, int dev, uint64_t dptr,
                               uint64_t bytes);
/* cuMemFreeAsync on a capturing stream: a free node, of the client's graph memory only. */
CUresult srv_graphmem_capture_free(struct srv_client *c, struct srv_call *k);
/* Ends a capture begun on s that its client will not end (s goes, or the client, or its
 * context): the graph goes unless it is the client's own (cuStreamBeginCaptureToGraph).
 * `forget`: its record and the graph memory under it go too; not during a release walk,
 * whose records must stay put (there they are released in the walk). */
void srv_capture_abandon(struct srv_client *c, struct srv_stream *s, int forget);
/* srv_capture_abandon, forgetting, for every stream of context ctx (0: all) of the client:
 * before a release walks its records. */
void srv_captures_abandon(struct srv_client *c, uint32_t ctx);

/* Waits until every stream of the client (context `ctx`, 0 = all) is idle, capturing ones
 * left out (they run nothing): 0; -1 if the client left first (then nothing may be freed
 * under that work: its release sees to it). */
int srv_streams_drain(struct srv_client *c, uint32_t ctx);
/* The same, giving up at `by` (monotonic ns) instead: -1 if work was still running then. */
int srv_streams_drain_by(struct srv_client *c, uint32_t ctx, uint64_t by);
/* Waits for the server's stream st of client c: 0 once idle, -1 if c left first. */
int srv_stream_settle(struct srv_client *c, CUstream st);
/* The same with a bound (monotonic ns) instead of the client's presence: -1 if it came. */
int srv_stream_settle_by(struct srv_client *c, CUstream st, uint64_t by);

/* ---------------------------------------------------------------- operation handlers */

/* Each handler replays one operation; `p`/`len` is the payload, `lane` the reply lane or -1.
 * A handler replies itself (now, or later through a wait) when lane >= 0. */
typedef void srv_handler(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len);

srv_handler srv_op_ctx_create, srv_op_ctx_destroy, srv_op_ctx_sync, srv_op_ctx_limit;
srv_handler srv_op_host_alloc, srv_op_host_free;
srv_handler srv_op_copy;
srv_handler srv_op_blob, srv_op_module_load, srv_op_get_function, srv_op_enum_functions;
srv_handler srv_op_launch, srv_op_occupancy;
srv_handler srv_op_stream_create, srv_op_stream_destroy, srv_op_stream_sync, srv_op_event_sync;
srv_handler srv_op_error_string;
srv_handler srv_op_procaddr;

/* ---------------------------------------------------------------- procaddr.c */

/* Asks the loaded driver's cuGetProcAddress_v2 for every name the shim knows and keeps the
 * answers as the table CHAN_OP_PROCADDR hands to clients. Once, before serving; 0, or -1
 * (logged) when clients must answer from the shim's compiled-in table. */
int srv_procaddr_build(void *drv);
srv_handler srv_op_kernel_node;
srv_handler srv_op_cond_node; /* graphcond.c */
srv_handler srv_op_host_func, srv_op_host_node;
srv_handler srv_op_ipc;
srv_handler srv_op_host_register;
srv_handler srv_op_mvar; /* managed.c */

/* memops.c: writes into every word a stream of the client waits on (in context ctx, 0 =
 * all) a value that ends the wait, while the word is still the client's: before a release
 * waits for its streams. */
void srv_memops_unblock(struct srv_client *c, uint32_t ctx);
/* The same, with no driver call, for the waits on its host-mapped memory (pinned, registered,
 * managed: mapped at the same address here): the main loop's, for a client it finds gone
 * (srv_clients_watch). The number of words written. */
size_t srv_memops_let_go(struct srv_client *c);
/* [addr, addr + bytes) of the client's host memory is about to be unmapped: its waits there
 * are ended (srv_memops_end_range), so that srv_memops_let_go stores there no more. */
void srv_memops_unmapping(struct srv_client *c, uint64_t addr, uint64_t bytes);
/* Memory [base, base + size) of the client's is about to be freed: the waits on words in it
 * are ended first, while it is still the client's (afterwards nothing could end them, and a
 * stream waiting for ever holds every client's code loads: found by fuzz_server). */
void srv_memops_end_range(struct srv_client *c, uint64_t base, uint64_t size);

/* IPC (ipc.c). The record lets go of its share: the real object is destroyed once neither
 * the exporter nor any opener holds it. `leaving`: released because its client or context
 * goes (an exporter's departure revokes the openers' records), not through the API. */
void srv_share_drop(struct srv_client *c, struct srv_obj *o, int leaving);
/* The same; `leak`: the real object is never destroyed, even by the last to let go (its
 * client's work may still be running on it: registry.c, leave_running). */
void srv_share_let_go(struct srv_client *c, struct srv_obj *o, int leaving, int leak);
/* graphrefs.c: what exec x's nodes name, listed anew from graph g (instantiated or
 * updated from it), or for one node set in it; freed with the record. */
void srv_graphrefs_build(struct srv_client *c, struct srv_obj *x, CUgraph g);
void srv_graphrefs_memset(struct srv_obj *x, uint64_t node, const CUDA_MEMSET_NODE_PARAMS *p);
void srv_graphrefs_memcpy(struct srv_obj *x, uint64_t node, const CUDA_MEMCPY3D *p);
void srv_graphrefs_child(struct srv_client *c, struct srv_obj *x, uint64_t node, CUgraph child);
void srv_graphrefs_func(struct srv_client *c, struct srv_obj *x, uint64_t node, uint64_t func);
/* hostfn.c: lets every stream and graph waiting on a departed client's host functions and
 * host nodes go on. Stores into its segment only: also called, again and again, by the
 * main loop for a client it finds gone (srv_clients_watch), under clients_lock. */
void srv_hostfn_release(struct srv_client *c);
/* 1 when graph exec record x has host nodes (a launch of it waits on the client). */
int srv_hostfn_exec_waits(const struct srv_obj *x);

/* generic.c: replays a `sync`/`async` call from its descriptor. */
void srv_generic(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len);
/* Prepares libffi call interfaces; 0 on success. */
int srv_generic_init(void);

/* memory.c: 1 if `bytes` more on device dev stay within the client's limit; else 0, and
 * the refusal is logged (once until an allocation there succeeds again). */
int srv_mem_fits(struct srv_client *c, int dev, uint64_t bytes);
/* The host address reservation for pinned allocations. */
int srv_host_init(void);

/* devinfo.c */
int srv_devinfo_fill(struct chan_devinfo *d);

/* ---------------------------------------------------------------- devices.c */
/* The client's devices from its hello's CUDA_VISIBLE_DEVICES (all when unset). */
void srv_devices_select(struct srv_client *c, const struct chan_hello *h);
/* Writes the devices it sees, in its order, into its segment's devinfo. */
void srv_devices_publish(struct srv_client *c);
/* A client's ordinal -> the server's, or -1 when it was not given that device. */
int srv_dev_in(const struct srv_client *c, int64_t dev);
/* A server ordinal -> the client's, or -1 when it does not see that device. */
int srv_dev_out(const struct srv_client *c, int64_t dev);
/* A device the client may use (its first), for calls that need one current. */
int srv_dev_any(const struct srv_client *c);
/* Maps the id of the CUmemLocation at loc when it names a device, in (client -> server)
 * or out; CUDA_ERROR_INVALID_DEVICE when the client does not have that device. */
CUresult srv_dev_location(const struct srv_client *c, uint8_t *loc, int in);

/* policy.c: resolving each client's limits. */
void srv_policy_init(void);
/* The client's limits from its hello and the operator's settings: 0, or -1 with a message
 * for the client in why. */
int srv_policy_resolve(const struct chan_hello *h, struct srv_limits *out, char *why, size_t len);
/* SMs an active thread percentage gives on device dev, at the partition granularity. */
unsigned srv_policy_sms(int dev, int pct);
/* The priority a client's stream on device dev is made with when it asks for `requested`. */
int srv_policy_stream_priority(const struct srv_client *c, int dev, int requested);
/* The operator's settings as text for the server process that carries on from this one,
 * and back (handover.c, recycle.c): 0, or -1 (does not fit; malformed: nothing taken). */
int srv_policy_encode(char *b, size_t n);
int srv_policy_decode(const char *s);
/* n unsigned decimal numbers, each after one space or at *s: 0 with *s past them, or -1. */
int srv_parse_nums(const char **s, unsigned long long *v, int n);
/* "4096", "512M", "2G" (K/M/G/T, powers of 1024, optional B): 0, or -1 if malformed. */
int srv_parse_size(const char *s, uint64_t *out);
/* Bytes in the largest unit that divides them exactly: "2G", "512M", "1000". */
void srv_format_size(uint64_t v, char *out, size_t len);
/* The device an ordinal or a UUID (or its prefix, "GPU-8e2b...") names; -1 if none. */
int srv_device_by_name(const char *s);

/* green.c: SM shares. */
void srv_green_init(void);
/* Gives the client a green partition on each device where its share is below the whole;
 * 0, or -1 (logged) if partitions cannot be made. */
int srv_green_assign(struct srv_client *c);
/* Gives the client's partitions back (after its streams are gone). */
void srv_green_release(struct srv_client *c);

/* fault.c: sticky errors in a device's shared context. */
/* Starts the thread that polls each device for a sticky error and raises one. */
int srv_fault_start(void);
/* Ends that thread (the server is quitting). */
void srv_fault_stop(void);
/* A driver call on device dev (-1: unknown) returned r: when r is a sticky error, the
 * fault thread checks the device at once. Cheap when r is not. */
void srv_fault_note(int dev, CUresult r);
/* The worker acts on faults it has not seen yet: lets go of what died and tells its
 * waits. Called before each record and when idle. */
void srv_fault_sync(struct srv_client *c);
/* 0 when the calling worker may go on with work on dev; else the fault to answer with
 * (dev faulted in this server: it is lost here). */
CUresult srv_fault_gate(struct srv_client *c, int dev);
/* 1 if o lives in a context that died since the worker last synced: it must be forgotten,
 * never destroyed (the driver's handles died with the context). */
int srv_fault_dead(const struct srv_client *c, int dev);
/* 1 once any device faulted in this server (get_server_status says FAULT). */
int srv_fault_any(void);
/* Marks the client's work on dev (srv_stream_prepare): who had work when a fault came. */
static inline void srv_fault_mark_work(struct srv_client *c, int dev)
{
    if (dev >= 0 && dev < CHAN_MAX_DEVICES)
        atomic_store_explicit(&c->stats.enqueued_ns[dev], chan_now_ns(), memory_order_relaxed);
}
/* Pieces of the recovery that live with their families. */
/* Ends every client of device dev (-1: every client) as terminate_client does, without
 * waiting: its calls fail with CUDA_ERROR_MPS_CLIENT_TERMINATED from then on, and what it
 * held is released. How many it ended (client.c). */
unsigned srv_clients_end(int dev);
void srv_stream_forget(struct srv_client *c, struct srv_stream *s); /* streams.c */
void srv_copy_forget_device(struct srv_client *c, int dev);         /* copy.c */

/* streams.c: fn on every stream of the client in context ctx (0: any): created ones, the
 * per-thread default ones, the ones of __managed__ variables' copies, and the legacy ones
 * too when with_legacy. fn must free none. arg is passed to fn as is: most walks gather or
 * aim at something (a wait, a stream to order), which travels with the call rather than in
 * a thread's variable beside it. */
void srv_streams_each(struct srv_client *c, uint32_t ctx, int with_legacy,
                      void (*fn)(struct srv_client *c, struct srv_stream *s, void *arg), void *arg);
/* streams.c: the streams context x holds itself go, each taken out of x and passed to gone
 * (srv_stream_free, or srv_stream_forget when they died with it): its per-thread default
 * ones, its legacy one, its __managed__ variables' one. Not srv_streams_each, whose fn may
 * free none and which passes the created streams too (they go with their objects). */
void srv_streams_drop(struct srv_client *c, struct srv_ctx *x,
                      void (*gone)(struct srv_client *c, struct srv_stream *s));

/* devmem.c: device memory from the server's arena (the default, MPSSHIM_DEVICE_VMM) or
 * pool (MPSSHIM_DEVICE_POOL=1 with MPSSHIM_DEVICE_VMM=0). */
CUresult srv_devmem_alloc(struct srv_client *c, int dev, CUdeviceptr *p, size_t bytes);
int srv_devmem_pooled(const struct srv_obj *o); /* o came from that pool or arena */
/* After the client's own work on the device, never after other clients' work. */
CUresult srv_devmem_free(struct srv_client *c, struct srv_obj *o);
/* What srv_later does once the client's work queued before it has run. */
enum srv_later_kind { SRV_LATER_ARENA_FREE, SRV_LATER_UNMAP, SRV_LATER_ADDRESS_FREE };
/* Frees arena block `base` of device dev, or unmaps or frees the addresses [base, base +
 * size), once all the work the client has queued so far has run, on any of its streams (at
 * once when none is left); nothing waits on the host. */
CUresult srv_later(struct srv_client *c, int dev, enum srv_later_kind kind, uint64_t base,
                   uint64_t size);
/* Carries out, in order, what srv_later queued whose work has run (all of it, waiting until
 * the client leaves, when `wait`); how many still wait. */
size_t srv_later_reap(struct srv_client *c, int wait);
/* cuMemFreeAsync of arena memory: srv_later's. */
CUresult srv_devmem_free_after(struct srv_client *c, struct srv_obj *o);
/* An event of device dev (the caller's to destroy) that completes once all the work the
 * client has queued so far has run, on any stream; NULL when none of that work is left, or
 * when no event could be made (then srv_devmem_work_event waited for that work itself). */
CUevent srv_devmem_work_event(struct srv_client *c, int dev);
/* arena.c: device memory mapped with the virtual memory calls, small requests sharing 2 MiB
 * slabs; srv_arena_free waits for nothing. */
CUresult srv_arena_alloc(int dev, uint64_t bytes, CUdeviceptr *p);
/* 1 when device dev has the virtual memory calls (asked once, logged once when not). */
int srv_arena_usable(int dev);
CUresult srv_arena_free(int dev, CUdeviceptr p);
/* Unmaps the slabs kept empty for later requests (the main loop, once no client is left);
 * srv_arena_cached: whether any is kept. */
void srv_arena_trim(void);
int srv_arena_cached(void);
/* Bytes the arena has mapped on dev, and of those the slabs kept empty (for the status). */
void srv_arena_usage(int dev, uint64_t *mapped, uint64_t *kept);
void srv_devmem_gone(struct srv_client *c); /* its streams go */
/* A departing client's free streams (srv_later's marks), settled by `by` (monotonic ns), its
 * own streams' work being done: 0, or -1 when one still ran then. */
int srv_devmem_drain_by(struct srv_client *c, uint64_t by);
/* Memory of the pool nobody holds any more (IPC memory whose last holder let go): freed on
 * a stream of the server's, after nothing. */
CUresult srv_devmem_free_orphan(int dev, uint64_t p);

/* pools.c: every pool the server makes or lets go goes through these, one at a time. A
 * pool let go becomes a spare, destroyed in the driver only once nothing in it is in use;
 * a plain one (pinned on its device, nothing else set) is made new for the next such
 * create. */
CUresult srv_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult srv_pool_retire(CUmemoryPool pool, int dev, int plain, CUevent after);
/* cuMemFree of memory from one of the client's pools (its record o): its pool is no spare. */
CUresult srv_pool_mem_free(struct srv_client *c, struct srv_obj *o);
void srv_pools_report(void); /* the log's line on pools made, made new, kept, destroyed */
void srv_pools_tidy(void);   /* spares trimmed; those a trim cannot empty and nothing uses go */

/* queue.c: back-pressure on queued work. Past MPSSHIM_QUEUE_LIMIT its requests wait; when
 * its work waits on itself they are taken again up to this many times the limit. */
#define SRV_QUEUE_HARD_FACTOR 4
/* Charges `bytes` the server holds for work just enqueued on s until the GPU passes it. */
void srv_queue_charge(struct srv_client *c, struct srv_stream *s, uint64_t bytes);
/* 1 when the worker should take none of the client's requests now (over its limit). */
int srv_queue_paused(struct srv_client *c);
/* s goes: its uncovered bytes get a mark first, or are forgotten when its context died. */
void srv_queue_stream_gone(struct srv_client *c, struct srv_stream *s, int dead);
/* dev's context died: marks there are forgotten and their bytes let go. */
void srv_queue_forget_device(struct srv_client *c, int dev);
/* The client leaves (its work drained or left running): its marks go. */
void srv_queue_release(struct srv_client *c);
/* hostblocks.c: pinned memory for the data of inline copies. n bytes on s, valid until the
 * GPU has run what s holds after the copy issued next; NULL when none can be had. */
void *srv_hblock_take(struct srv_client *c, struct srv_stream *s, size_t n);
/* Closes s's open block behind the work s holds now (before a capture begins on s). */
void srv_hblock_close(struct srv_client *c, struct srv_stream *s);
/* s goes: its open block is closed behind its work, or forgotten with its dead context. */
void srv_hblock_stream_gone(struct srv_client *c, struct srv_stream *s, int dead);
/* dev's context died: blocks whose copies or registration were there are forgotten. */
void srv_hblock_forget_device(struct srv_client *c, int dev);
/* The client leaves: its blocks are unpinned (kept if its work was left running). */
void srv_hblock_release(struct srv_client *c);
void srv_obj_forget_tree(struct srv_client *c, struct srv_obj *o); /* registry.c */
void srv_ipc_fault(int dev);                                       /* ipc.c */
CUgreenCtx srv_green_ctx(struct srv_client *c, int dev);           /* green.c */

/* handover.c: a new server process, started before as a standby, takes over after a fault
 * loses a device to this one. */
/* MPSSHIM_STANDBY: how far the standby gets before a fault (read once, logged if bad). */
#define SRV_STANDBY_OFF 0     /* none: the successor is started at the fault */
#define SRV_STANDBY_INIT 1    /* the driver loaded and cuInit run (the default) */
#define SRV_STANDBY_CONTEXT 2 /* and the devices' contexts made */
int srv_standby_mode(void);
/* Standby, first in main: 1 when this process is a standby (its socket taken, its death
 * tied to its server's), 0 when not, 2 when its server is already gone (exit quietly), -1
 * (why says) when the description is malformed. */
int srv_standby_adopt(char *why, size_t len);
/* Standby, once prepared (ready_ms after it started): says so and waits to be told to take
 * over. 1 with the sockets and lock handed on (MPSSHIM_READY_FD then names the socket for
 * "ready"), 2 when its server went or no longer needs it (exit quietly), -1 (why says)
 * when the hand-over is malformed. */
int srv_standby_wait(unsigned ready_ms, int *listen_fd, int *control_fd, int *lock_fd, char *why,
                     size_t len);
/* main: the arguments to start a standby with, and the sockets and lock it takes; makes the
 * service's life pipe unless this server carries one on. 0, or -1 (errno). */
int srv_handover_init(char **argv, int listen_fd, int control_fd, int lock_fd);
/* main, at start: SIGUSR1 tells a faulted server to end every client now (too many faulted
 * servers are alive: the live server's hand-over says). */
void srv_handover_signals(void);
/* Fault thread: 1 once this faulted server was told to end every client now. */
int srv_handover_end_all(void);
/* Fault thread: device dev faulted with err; tells the standby to take over (once per
 * server; a standby is started first if there is none). */
void srv_handover_start(int dev, CUresult err);
/* Main loop: whether to accept clients (not while a successor starts, nor after). */
int srv_handover_accepting(void);
/* Main loop: the socket of the standby or starting successor (-1: none to watch). */
int srv_handover_fd(void);
/* Main loop: hears the standby or successor, replaces a standby that died, retries a
 * failed hand-over when due; 1 once the successor serves (close the listening sockets,
 * exit with the last client). */
int srv_handover_poll(void);
/* 1 once a successor serves this server's pipe directory. */
int srv_handover_done(void);
/* Main loop, once handed over: 1 when the live server has exited (the service ended: this
 * one ends too). */
int srv_handover_service_ended(void);
/* The listening sockets and locked file a server hands on: 0 (each made close-on-exec
 * again), or -1 (why says) when any is something else. */
int srv_handover_check_fds(int listen_fd, int control_fd, int lock_fd, char *why, size_t len);
/* A fresh image (recycle.c): what it carries on of the hand-over (the life pipe, the
 * faulted servers), appended as text at b; 0, or -1 (does not fit). decode takes it back at
 * *s (moved past it): 0, or -1 (why says). inherit: 1 if fd must survive the execve. */
int srv_handover_encode(char *b, size_t n);
int srv_handover_decode(const char **s, char *why, size_t len);
int srv_handover_inherit(int fd);
/* Stops the standby (before a fresh image replaces this one: the new one starts its own). */
void srv_handover_standby_stop(void);
/* Successor, once serving: logs the recovery time and whether a standby was used; tells
 * the oldest faulted servers beyond the bound to end their clients. */
void srv_handover_adopted(void);
/* get_server_status: the faulted servers alive and the standby, a line each. */
void srv_handover_describe(char *out, size_t len);
/* A faulted server in the foreground (the service's main process) passes sig (a stop, a
 * reopening of the logs) on to the live server. */
void srv_handover_forward(int sig, int foreground);
/* At shutdown: stops the standby or a successor still starting; in the foreground, passes
 * the stop on to the live server when this server was told to (`told`: SIGTERM to a
 * service's main process, say). */
void srv_handover_end(int told, int foreground);
/* Last in main: the live server writes its status into the life pipe and returns; a
 * faulted one in the foreground exits with the live server's status if it has ended, else
 * becomes the keeper (execve); other faulted ones return. */
void srv_handover_exit(int foreground);
/* `mpsshim-server --keeper FD`: waits for the end of the service's life pipe FD, passing
 * SIGTERM, SIGINT and SIGHUP on to the live server; its exit status. */
int srv_keeper(const char *fd);

/* control.c: the control socket. */
int srv_control_listen(void);
/* main loop: serves a connection just accepted; never blocks on its peer. */
void srv_control_serve(int fd);
/* 1 while any control connection is open (an interactive session holds one until it has
 * been idle for MPSSHIM_CONTROL_IDLE seconds). */
int srv_control_busy(void);

/* trace.c: GPU timelines (`trace start|stop|status`). srv_trace_gen is the running trace's
 * number, 0 when none runs. */
extern _Atomic uint32_t srv_trace_gen;
/* Runs a `trace` command (its words after "trace"); the answer in out (cap bytes,
 * terminated). 1 when it failed. */
int srv_trace_control(int argc, char **argv, char *out, size_t cap);
/* 1 while a trace runs (the server does not start afresh under it). */
int srv_trace_active(void);
/* c's worker names stream s for the running trace (the stream's first work in it). */
void srv_trace_stream(struct srv_client *c, struct srv_stream *s);
/* Before work goes on s: one relaxed load when no trace runs, or s was named already. */
static inline void srv_trace_note(struct srv_client *c, struct srv_stream *s)
{
    if (atomic_load_explicit(&srv_trace_gen, memory_order_relaxed) != s->trace_gen)
        srv_trace_stream(c, s);
}

/* recycle.c: a server idle after serving clients starts afresh in the same process. */
/* main: what the fresh image needs (as srv_handover_init) and whether this server runs in
 * the foreground; reads MPSSHIM_RECYCLE_IDLE. */
void srv_recycle_init(char **argv, int listen_fd, int control_fd, int lock_fd, int foreground);
/* Main loop: a client connection was accepted. */
void srv_recycle_served(void);
/* Main loop: starts afresh (execve, no return) once idle long enough after serving. */
void srv_recycle_poll(void);
/* Signal handler (async-signal-safe): a stop asked for while the image is being replaced is
 * passed on to the new one. */
void srv_recycle_forward(int sig);
/* main, once its handlers are set: unblocks the stop signals a fresh image inherits blocked
 * (any that came during the replacement are delivered now). */
void srv_recycle_unblock(void);
/* In main: 1 with the sockets, lock and foreground flag of the image this one replaced, 0
 * when this image is not a fresh start, -1 (why says) when its description is malformed. */
int srv_recycle_adopt(int *listen_fd, int *control_fd, int *lock_fd, int *foreground, char *why,
                      size_t len);
/* Fresh image, once serving: logs how long the start took and the devices' memory. */
void srv_recycle_adopted(void);
/* get_server_status: its line about starting afresh. */
void srv_recycle_describe(char *out, size_t len);

#include "srv_hooks.h" /* generated: srv_hook_* and srv_release_* of every family */

#endif
