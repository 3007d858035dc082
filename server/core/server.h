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
#include "server/core/driver.h"
#include "server/core/family.h"

/* ---------------------------------------------------------------- log.c */

/* Appends "[date time Server pid] message" to server.log (and stderr in the foreground). */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* srv_log the first time this place is reached, never again (in any thread): for what a
 * client could otherwise repeat into the log without end. */
#define SRV_LOG_ONCE(...)                                                                          \
    do {                                                                                           \
        static _Atomic int said_once_;                                                             \
        if (!atomic_exchange(&said_once_, 1)) srv_log(__VA_ARGS__);                                \
    } while (0)

/* ---------------------------------------------------------------- per-client objects */

struct srv_client;
struct srv_stream;
struct srv_ctx;
struct srv_obj_key {
    uint64_t value;
    uint32_t type; /* SHIM_HT_* */
    uint32_t pad;
};
/* One object a client holds (registry.c): a handle (stream, event, module, array, pool...)
 * or a memory range, of one of the types cuda_symbols.txt declares (%handle, %range). The
 * client names it by `key.value`: the real handle, or a range's base address. Owned by the
 * client's worker thread alone. */
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
    _Atomic uint64_t gpu_replies;  /* replies the GPU was given to post (waits.c gpu_reply) */
    _Atomic uint64_t word_replies; /* replies posted once a word the GPU stored landed (waits.c) */
};
/* A client connection. What a family keeps of it is its own struct (family.h, client_init),
 * named here only; the host-function ring's words stay, as the core's queue and waits read them. */
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
    int shm_want;              /* its registration waits for the quiet context (segment.c) */
    const char *quiet_why;     /* while it waits: a call of the client's would have used it
                                * (a copy through its slots, a wait the GPU would answer) */
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
    struct srv_limits *lim;      /* what it may use (account.h): from the handshake on, read-only */
    struct srv_account *acct;    /* its process's account, from the handshake on */
    struct srv_reserve *reserve; /* memory its checks reserved, not yet counted (account.c) */
    struct srv_ctxlimits *ctxlim; /* context limits it set (context.c) */
    struct srv_devmap *devs;      /* the devices it sees (devices.c), from the handshake on */
    struct srv_green *green;      /* its green contexts, where its streams are made (green.c) */
    _Atomic int dead;             /* the socket hung up, or the server is quitting */
    _Atomic int finished;         /* the worker has released everything */
    /* terminate_client (1) or a faulted server (SRV_ENDED_BY_FAULT): its calls fail with
     * CLIENT_TERMINATED */
    _Atomic int terminated;
    _Atomic int connected; /* the handshake succeeded (it is listed by the control commands) */
    int admitted;          /* holds a place under MPSSHIM_MAX_CLIENTS; guarded by clients_lock */
    struct srv_prof *prof; /* PROFILE=1 builds: its worker's profile (clients.h); else NULL */
    struct srv_spin *spin; /* the spinning policy's (spin.c) */
    struct srv_coalesce *coalesce; /* doorbell coalescing's (coalesce.c) */
    /* A release gave up on work still running (registry.c, leave_running): that work may
     * still fire its host functions into this struct and the segment, or copy through the
     * segment's slots, so neither is ever freed or unmapped. */
    int left_running;
    struct srv_memops *memops; /* stream waits it enqueued (memops.c) */
    struct srv_tmaps *tmaps;   /* tensor maps it was handed (tensormap.c); NULL until one */
    /* Blocks its small migrating managed allocations share (migrate.c); each goes with its
     * last allocation. */
    struct srv_mblock *mblocks;
    struct srv_peers *peers; /* peer access it enabled (peer.c); NULL until one */
    uint64_t hello_by;       /* monotonic ns by which the whole hello must have arrived */
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
    /* Waits done, kept zeroed for the next (waits.c, new_wait), and how many. */
    struct srv_wait *spare_waits;
    unsigned nspare_waits;
    /* Replies posted on each lane so far, by the worker or the GPU: the lane's seq as the
     * server wrote it (proto.h; the segment's own word is never read back). */
    uint32_t lane_seq[CHAN_NLANES];
    unsigned captures;           /* stream captures it began and has not ended (graph.c) */
    struct srv_events *events;   /* its internal events (evpool.c) */
    CUresult deferred;           /* first failure of an async operation not yet reported */
    struct srv_retired *retired; /* destroyed streams' work still running (streamrec.h) */
    size_t nretired, capretired;
    struct srv_queue *queue; /* bytes held for its queued work (queue.c) */
    /* __managed__ variables (managed.c): pushes so far, and the stream of the last, whose
     * mark every stream waits for before its next work (srv_stream_prepare). */
    uint64_t mvar_gen;
    struct srv_stream *mvar_last;
    /* Pinned memory its inline copies' data waits in: hostblocks.c's own, made at the first
     * such copy (NULL until then). */
    struct srv_hblocks *hblocks;
    struct srv_seqs *seqs;     /* its launch sequences' graphs (seqgraph.c), from its first */
    struct srv_devmem *devmem; /* its streams and deferred frees (devmem.c) */
    uint8_t *blob;             /* image uploaded for the next load */
    size_t blob_len, blob_cap;
    struct srv_copy *copy; /* its staging slots (copy.c) */
    uint8_t *rec;          /* the record being replayed (copied out of the ring) */
    uint8_t *scratch;      /* stands in for the lane of a record that asked for no reply */
    uint8_t *out;          /* a described call's outputs, private until copied to its lane */
    uint8_t mem_refused[CHAN_MAX_DEVICES]; /* limit refusal logged; cleared by an allocation */
    unsigned hostreg_said; /* host registrations refused for want of the address (memory.c) */
    unsigned shm_guards;   /* its registrations of shared files, guarded (memory.c, shmguard.c) */
    unsigned hostfn_said;  /* host functions refused for their number (hostfn.c) */
    /* Once it is gone: until when its calls that wait for every stream wait for the gate,
     * all of them together, and whether going on past it was said (codegate.c). */
    uint64_t gate_by;
    int gate_said;
    uint32_t hostfn_seq;   /* the number of the last host function it sent (hostfn.c) */
    unsigned eager_left;   /* kernels its image loads may still load eagerly (module.c) */
    uint16_t first_thread; /* client thread number of the first record */
    int many_threads;      /* records came from more than one client thread */
    int stat_fd1; /* its /proc/PID/stat open (waits.c), as fd + 1; 0: not yet, -1: cannot */
    int task_fd1; /* its /proc/PID/task open (waits.c), as fd + 1; 0: not yet, -1: not used */
    unsigned word_waits; /* its waits holding a word of gpuword.c (waits.c: at most CHAN_NLANES) */
    unsigned nwaits;     /* its waits pending in `waits` (waits.c: at most SRV_WAITS_MAX) */
    int waits_full_said; /* a wait refused past SRV_WAITS_MAX was logged */
    int pool_allocs;     /* it allocated stream-ordered from a pool (waits.c gpu_reply) */

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
#define SRV_ENDED_BY_FAULT 2           /* terminated: by srv_clients_end */
#define SRV_BUSY_HANDSHAKE 0xfffffffeu /* busy_op: the handshake's driver calls */
#define SRV_BUSY_RELEASE 0xffffffffu   /* busy_op: releasing what it held */
/* A call in progress this long is logged once, with the thread that makes it. */
#define SRV_SLOW_CALL_NS (10ull * 1000000000ull)

/* ---------------------------------------------------------------- main.c: the server */

/* The server's settings and its list of clients; what one family keeps for the whole
 * server is that family's own (its header). */
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
    /* A release left a client's work running (registry.c): the GPU may never be idle again,
     * so nothing that waits for the whole device is done when idle (srv_limits_idle). */
    _Atomic int left_running_any;
    _Atomic int draining; /* quit -t: new clients are refused while the others finish */
    int quiet_context;    /* MPSSHIM_QUIET_CONTEXT: host memory's own context (quietctx.c) */
    int keep_libraries;   /* MPSSHIM_KEEP_LIBRARIES: unloads that wait, put off (unloads.c) */
};
extern struct srv srv;

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
    /* The driver call it stands for, with vals (generic.c): for a hook's call that wraps it. */
    CUresult (*drive)(struct srv_call *k);
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
extern srv_release_fn *const srv_type_release[SHIM_NHTYPES];
extern srv_release_fn *const srv_type_drop[SHIM_NHTYPES];
extern srv_release_fn *const srv_type_forget[SHIM_NHTYPES];

/* ---------------------------------------------------------------- operation handlers */

/* Each handler replays one operation; `p`/`len` is the payload, `lane` the reply lane or -1.
 * A handler replies itself (now, or later through a wait) when lane >= 0. */
typedef void srv_handler(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len);

#include "srv_ops.h" /* generated: srv_op_* of every %op row of cuda_symbols.txt */

#include "srv_hooks.h" /* generated: srv_hook_*, srv_release_*, srv_drop_*, srv_forget_* */

#endif
