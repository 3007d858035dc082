/* libmpsshim.so internals: the client end of mpsshim.
 *
 * The library IS libcuda.so.1 for the process that preloads it. Entry points are either
 * generated (stubs of `sync`/`async`/`unsupported` symbols, gen/gen.py) or hand-written
 * here, one file per family. Everything that needs the GPU crosses the channel to the
 * server; what the client can answer alone (devices, contexts, cached attributes) it does. */
#ifndef MPSSHIM_SHIM_H
#define MPSSHIM_SHIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cuda.h>

#include "channel/chan.h"
#include "channel/desc.h"
#include "shim_impl.h" /* generated: shim_impl_<name> of every hand-written entry point */

/* Grows *arr (of *cap elements of size elem) to hold n+1, doubling from 8; 0, or -1 without
 * memory (nothing changed). */
static inline int shim_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, ncap * elem);
    if (!p) return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* ---------------------------------------------------------------- log.c */

/* One line on stderr, prefixed "mpsshim: ". */
void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs `name` unsupported once, returns CUDA_ERROR_NOT_SUPPORTED. */
CUresult shim_unsupported(int id);
/* Same, for a feature of a supported call (flag, option, memory kind) named by `what`. */
CUresult shim_refuse(const char *what);
/* The same, answering `err`. */
CUresult shim_refuse_as(const char *what, CUresult err);

/* ---------------------------------------------------------------- passthrough.c */

/* How this process runs, decided once by its first CUDA call. */
enum shim_mode {
    SHIM_MODE_UNDECIDED = 0,
    SHIM_MODE_SERVER, /* through mpsshim-server */
    SHIM_MODE_REAL,   /* no server could be had: every call goes to the real driver */
    SHIM_MODE_NONE,   /* neither: calls fail with the connection error */
};
/* Written once under the connection lock, read without it by every entry point. */
extern _Atomic int shim_mode;

/* Decides the mode if not done yet (connecting, starting a server if need be, else
 * loading the real driver) and returns it. */
int shim_decide(void);
/* The real driver's function for a call id (a function returning CUDA_ERROR_NOT_SUPPORTED
 * when it lacks one). Only in SHIM_MODE_REAL. */
void *shim_real(int id);
/* The real driver, loaded (not initialised) in this process; NULL if none is found. */
void *shim_real_driver(void);

/* ---------------------------------------------------------------- conn.c */

/* Connection state; one per process. */
struct shim_conn {
    int slot; /* its ring and lanes' locks in rpc.c: 0 for shim_conn, the first connection */
    int sock;
    struct chan ch;
    int server_pid;
    uint32_t client_id;
    uint16_t server_minor;   /* the server's protocol minor (what it can answer) */
    uint32_t server_flags;   /* its welcome's CHAN_WELCOME_* */
    struct chan_devinfo dev; /* private copy of what the server published */
};

extern struct shim_conn shim_conn;

/* Connections a process holds besides shim_conn, at most one per device (issue 30: each
 * GPU's own server for the devices it uses); slots 1.. of rpc.c's locks. */
#define SHIM_CONNS (1 + CHAN_MAX_DEVICES)
/* The connection that serves device d: shim_dev_conns[d], or shim_conn where that is NULL
 * (every device of a process that holds one connection). */
extern struct shim_conn *_Atomic shim_dev_conns[CHAN_MAX_DEVICES];
struct shim_conn *shim_conn_of_device(int d);

/* Runs fn(arg) while no other thread can send a request, provided none owns a reply lane
 * and shim_work_sent is still work_seen (no request with effects since the caller looked):
 * fn may then replace the connection (conn.c's move to a GPU's server). fn's result, or -1
 * (another thread has a lane), or -2 (requests with effects were sent meanwhile). rpc.c. */
int shim_rpc_alone(int (*fn)(void *), void *arg, uint64_t work_seen);
/* MPSSHIM_SERVER_PER_GPU: called before the first context on dev is made (context.c, under
 * its lock); a client that sees several GPUs moves to dev's own server then, if it can.
 * CUDA_SUCCESS, or CUDA_ERROR_INVALID_DEVICE for a device other than the one it moved for
 * (said once). conn.c. */
CUresult shim_gpu_server_for(int dev);
/* 1 when this process may come to be served by several GPUs' own servers: it moves at its
 * first context (MPSSHIM_SERVER_PER_GPU_MOVE, decided at its connection) and sees several
 * GPUs (replicas.c keeps its libraries for the others). 0 before it is connected. */
int shim_may_use_servers(void);
/* A peer query between two of the process's devices (moved.c): before its first context, a
 * process that asks one stays with the pipe directory's server by default. conn.c. */
void shim_conn_peer_asked(void);
/* Registers why a process may not hold a second connection (NULL: it may): asked before
 * each one is made; up to 4 such (the first answer that is not NULL counts). conn.c. */
void shim_conn_on_split(const char *(*why_not)(void));
/* The ordinal of the device a moved client's server holds, its device count in *of; -1 (and
 * *of 0) when it did not move. conn.c. */
int shim_moved_ordinal(int *of);

/* Connects to the server if not yet done (starting one when none answers, unless
 * MPSSHIM_AUTOSTART=0). CUDA_SUCCESS, or the error every call gets; shim_connect_error()
 * says what went wrong. */
CUresult shim_connect(void);
/* Why the connection failed (empty when it did not). */
const char *shim_connect_error(void);

/* For entry points that need cuInit: CUDA_SUCCESS when initialised and connected. */
CUresult shim_ready(void);
/* What a call returns once the server marked this client dead: CUDA_ERROR_MPS_CLIENT_TERMINATED
 * after terminate_client, else CUDA_ERROR_MPS_SERVER_NOT_READY. */
CUresult shim_dead_error(void);
/* The same for connection c's server. */
CUresult shim_conn_dead_error(const struct shim_conn *c);

/* Marks the driver initialised (cuInit). */
void shim_set_initialized(void);

/* 1 while this process is connected and the server has not marked it dead (no system
 * call: a server that died without saying so is noticed by the next request). */
int shim_conn_up(void);
/* 1 while the server answers: waits use it to stop when the server is gone. */
int shim_server_alive(void *unused);

/* Receives one file descriptor the server sent on the socket (host allocations). */
int shim_recv_fd(void);
/* The same from connection c's socket (what a request sent there answers with). */
int shim_recv_fd_from(const struct shim_conn *c);

/* ---------------------------------------------------------------- procaddr.c */

/* Right after the handshake, before the connection is marked up: reads the server's
 * driver's cuGetProcAddress answers, which answer this process's requests from then on
 * (unusable ones are logged once, and the compiled-in table answers). */
void shim_procaddr_fetch(unsigned server_minor);

/* ---------------------------------------------------------------- rpc.c */

/* A request under construction in the ring. */
struct shim_req {
    struct shim_conn *conn; /* where it goes (shim_req_begin's route) */
    struct chan_rec *rec;
    uint8_t *payload; /* right after the header */
    int lane;         /* -1 for requests without a reply */
    int quiet;        /* SHIM_RQ_QUIET */
    int counted;      /* counted as awaiting its reply (rpc.c: a move waits for none) */
    uint32_t seq0;
    uint16_t op;  /* the record's op and position in the ring: a STAMPS=1 build's notes */
    uint64_t pos; /* (channel/stamp.h) */
};

/* A flag of shim_req_begin's own (never sent): the request enqueues no work (a query or a
 * synchronisation), so it leaves shim_work_sent as it is. */
#define SHIM_RQ_QUIET 0x10000u

/* Records sent that may have enqueued work (every request but SHIM_RQ_QUIET ones). */
extern _Atomic uint64_t shim_work_sent;

/* Reserves a record with `len` payload bytes for `op` (a call id or CHAN_OP_*), taking
 * the ring lock; with `reply`, also the calling thread's lane; `flags` are CHAN_RF_* and
 * SHIM_RQ_QUIET. The ring lock is held until shim_req_send(): fill the payload in between,
 * nothing else. */
CUresult shim_req_begin(struct shim_req *q, unsigned op, uint32_t len, int reply, unsigned flags);

/* Publishes the record and releases the ring lock. */
void shim_req_send(struct shim_req *q);

/* Waits for the reply of a sent request. Returns the server's result; *data and *len point
 * into the lane (valid until this thread's next request). */
CUresult shim_req_wait(struct shim_req *q, const uint8_t **data, uint32_t *len);
/* The reply of request q (begun with one) taken by a wait of the caller's own instead of
 * shim_req_wait, which does this itself: it no longer holds up a move (shim_rpc_alone). */
void shim_req_done(struct shim_req *q);
/* Whether requests to shim_conn are counted while their replies are awaited, which a move to
 * a GPU's server needs (shim_rpc_alone): on from the first connection while one may come,
 * off once it is decided (conn.c). */
void shim_rpc_count_waits(int on);

/* One round trip: payload in, up to `cap` reply bytes copied to `out` (*outlen gets the
 * server's length; NULL when none is wanted). */
CUresult shim_rpc(unsigned op, const void *payload, uint32_t len, void *out, uint32_t cap,
                  uint32_t *outlen);

/* One round trip for a query or a synchronisation (SHIM_RQ_QUIET), without reply data. */
CUresult shim_ask(unsigned op, const void *payload, uint32_t len);

/* One round trip whose reply is read in place: *data points into the calling thread's
 * lane, valid until its next request. */
CUresult shim_rpc_lane(unsigned op, const void *payload, uint32_t len, const uint8_t **data,
                       uint32_t *outlen);

/* One request without a reply (async operations). */
CUresult shim_post(unsigned op, const void *payload, uint32_t len);

/* Around a _ptds/_ptsz twin's call of its target (generated stubs call these): requests
 * sent in between name the per-thread default stream by NULL. */
unsigned shim_ptds_begin(void);
void shim_ptds_end(unsigned saved);
/* 1 inside such a twin: the NULL stream is the calling thread's per-thread default one. */
int shim_ptds_active(void);

/* Waiter used for lanes and slots: spins, then sleeps, stops when the server is gone. */
extern const struct chan_wait shim_waiter;

/* The thread's number, for per-thread default streams. */
uint16_t shim_thread_no(void);

/* Uploads `len` bytes with CHAN_OP_BLOB records, ahead of an operation that uses them. */
CUresult shim_upload(const void *data, size_t len);

/* The calling thread's current context, as context.c keeps it: the id field of its record
 * (NULL: none), and its device (-1: none known). shim_current_ctx_id reads the id: what every
 * request is tagged with, 0 when there is none; the device picks the connection the request
 * goes to (shim_conn_of_device; -1: shim_conn). */
void shim_set_current_ctx(const uint32_t *id, int device);
uint32_t shim_current_ctx_id(void);

/* A route: the calling thread's requests between shim_route_begin and shim_route_end go to
 * the connection of `device` (-1: shim_conn), tagged with context id `ctx`, whatever its
 * current context: a call that names a stream or event of another device's context goes
 * where that lives, and a context is made and destroyed through its device's server. Routes
 * nest: end restores what begin saved. */
struct shim_route {
    int set, device;
    uint32_t ctx;
};
void shim_route_begin(struct shim_route *saved, int device, uint32_t ctx);
void shim_route_end(const struct shim_route *saved);
/* The device the calling thread's requests go to now (its route's, else its context's; -1:
 * shim_conn), and their context id. */
int shim_route_device(void);
uint32_t shim_route_ctx(void);
/* The connection the calling thread's requests go to now (shim_conn_of_device of the
 * route's device). */
struct shim_conn *shim_route_conn(void);

/* Set (nonzero) once the process holds a connection besides shim_conn (rpc.c). */
extern _Atomic int shim_conns_extra;
/* route.c: where a call goes in a process of several connections. */
/* Begins the route of described call d (its arguments' values val) when it names something of
 * another connection's than the thread's requests go to: 1, and the caller ends it
 * (shim_route_end). 0 otherwise; *err is CUDA_ERROR_NOT_SUPPORTED (said once) when it names
 * objects of two connections; -1 for a stream's wait for another server's event
 * (shim_across_wait_event carries it). */
int shim_route_call(const struct shim_call *d, const uint64_t *val, void *const *ptr,
                    struct shim_route *saved, CUresult *err);
/* The device whose server connection slot `slot` reaches (route.c), or -1. */
int shim_slot_device(int slot);
/* Registers physical.c's shim_phys_device with route.c. */
void shim_route_on_phys(int (*fn)(uint64_t client, int *dev));
/* The same for a call enqueued on stream s (hand-written entry points), and for one about
 * something of context id ctx. */
int shim_route_stream(CUstream s, struct shim_route *saved);
/* The same for a graph, node or pool (owned.c), and for a handle the client knows (a graph
 * exec). */
int shim_route_owned(uint32_t type, uint64_t value, struct shim_route *saved);
int shim_route_known(uint32_t type, uint64_t value, struct shim_route *saved);
int shim_route_to_ctx(uint32_t ctx, struct shim_route *saved);
/* across.c: whether described call d (its arguments' values val) is a stream's wait for an
 * event of another connection's server (shim_route_call then answers -1), and that wait,
 * carried by an interprocess twin of the event. */
int shim_across_wait(const struct shim_call *d, const uint64_t *val);
CUresult shim_across_wait_event(CUstream stream, CUevent event, unsigned flags);
/* mirror.c: device memory of one of the process's GPUs' servers mapped in another's. The
 * range rg (another server's) mirrored in the server the thread's requests go to; a range
 * just made, mirrored where peer access asks it; one about to be freed, its mirrors closed.
 * Peer access between two servers' contexts is answered by the function registered with
 * route.c (described call d, values val: 1 with *err when it is that, else 0). */
struct shim_range;
CUresult shim_mirror_here(const struct shim_range *rg);
void shim_mirror_made(const struct shim_range *rg);
void shim_mirror_freeing(uint64_t base);
/* physical.c: physical memory handles in a process moved to its GPUs' servers, kept with the
 * connection that made each (all nothing in a process that did not move). Whether it keeps
 * them; the device whose server holds the process's handle `client` (1), or 0 when it holds
 * no such handle; a handle a call just returned from the server the thread's requests go to,
 * taken in (*value becomes the process's value for it); one cuMemRelease of it, counted. */
int shim_phys_live(void);
int shim_phys_device(uint64_t client, int *dev);
void shim_phys_made(uint64_t *value);
void shim_phys_released(uint64_t client);
/* Described call d's handles (values val, arguments args) as the server the thread's requests
 * go to names them (spare holds the new values). A cuMemMap of another server's handle maps
 * an import of it here, *imported (the process's value), which the caller releases after
 * the call; 0 when none. */
CUresult shim_phys_args(const struct shim_call *d, uint64_t *val, uint64_t *spare,
                        const void **args, uint64_t *imported);
/* Begins a route to the server of handle `client` when that is not where the thread's
 * requests go: 1, and the caller ends it. Then that server's value of it (*server);
 * CUDA_ERROR_INVALID_VALUE when another server holds it. */
int shim_phys_route(uint64_t client, struct shim_route *saved);
CUresult shim_phys_server(uint64_t client, uint64_t *server);
/* owned.c: graphs, their nodes and memory pools of a process moved to its GPUs' servers,
 * kept with the device whose server made (or named) each. Whether a handle type is one of
 * those; one just returned through the server the thread's requests go to (a node with its
 * graph, `owner`, where the call named it; else 0); one destroyed (a graph's nodes with it);
 * the device of one (1), or 0 when not kept. */
int shim_owned_kind(uint32_t type);
void shim_owned_made(uint32_t type, uint64_t value, uint64_t owner);
void shim_owned_gone(uint32_t type, uint64_t value);
/* moved.c: a pool destroyed (call.c): the access it gave other GPUs, kept there, forgotten. */
void shim_moved_pool_gone(uint64_t pool);
int shim_owned_device(uint32_t type, uint64_t value, int *dev);
/* reserved.c: address space reserved by a process moved to its GPUs' servers, kept with the
 * device whose server reserved it: one just reserved through the server the thread's
 * requests go to, one freed, and the device of the reservation that holds addr (1), or 0. */
void shim_reserved_made(uint64_t base, uint64_t size);
void shim_reserved_freed(uint64_t base);
int shim_reserved_device(uint64_t addr, int *dev);
/* The physical memory mapped at ptr (a mapping's start) mirrored in device xdev's server;
 * the mirrors of mappings in [base, base + len) closed (an unmap, vmm.c). */
CUresult shim_mirror_vmm(uint64_t ptr, int xdev);
void shim_mirror_unmapped(uint64_t base, uint64_t len);
void shim_route_on_peer_call(int (*fn)(const struct shim_call *d, const uint64_t *val,
                                       CUresult *err));
/* ipc.c, through the connection the thread's requests go to: one CHAN_OP_IPC round trip
 * (struct chan_ipc's fields; *out the reply); a mirror opened from another server's handle
 * (of memory: its allocation's address in *value; of physical memory: mapped at `at`,
 * *value = at) and closed. */
CUresult shim_ipc_op(uint32_t what, uint32_t flags, uint64_t value, const void *handle,
                     struct chan_ipc_reply *out);
CUresult shim_ipc_mirror_open(const uint8_t handle[CU_IPC_HANDLE_SIZE], uint64_t at,
                              uint64_t *value);
CUresult shim_ipc_mirror_close(uint64_t base);
/* physical.c: the handle bytes of the process's physical memory handle `client` (its
 * server's, which the thread's requests must go to), as another server can import them. */
CUresult shim_phys_handle_bytes(uint64_t client, uint8_t out[CU_IPC_HANDLE_SIZE]);
/* Whether the process has __managed__ variables (mvars.c). */
int shim_mvar_live(void);
/* replicas.c: libraries and kernels on each of the process's GPUs' servers. Whether they are
 * kept (MPSSHIM_SERVER_PER_GPU_MOVE); whether every library loaded was; what a library load
 * and a kernel lookup leave there; forgetting a library at its unload; and h (a library or
 * kernel of the program's, or anything else) as the server of device dev names it, made
 * there if need be. */
int shim_replicas_on(void);
void shim_replica_library(uint64_t h, const void *image, size_t size, int keep);
void shim_replica_kernel(uint64_t k, uint64_t lib, const char *name);
void shim_replica_forget(uint64_t lib);
CUresult shim_replica_for(uint64_t h, int dev, uint64_t *out);
/* module.c gives replicas.c its loaders as the library loads: a library loaded from an
 * image without options, and a library's kernel looked up by name (recorded as `owner`'s),
 * through the thread's route. */
void shim_replicas_use(CUresult (*load)(const void *, uint64_t *),
                       CUresult (*find)(uint64_t, const char *, uint64_t, uint64_t *));
/* Whether what was made in context id ctx lives in another server than the one the thread's
 * requests go to now (0 in a process of one connection, and for ctx 0). */
int shim_route_apart(uint32_t ctx);

/* An OUTREF array the driver API returns by pointer, copied into the calling thread's room
 * for parameter `param`: valid until its next call that returns one there; NULL when it
 * does not fit or memory ran out. */
const void *shim_keep_array(int param, const void *data, size_t bytes);

/* ---------------------------------------------------------------- call.c */

/* Generic sync/async call from its descriptor (generated stubs call this). */
CUresult shim_forward(int id, const void *const *argv);

/* Hooks of a described call (client:NAME in cuda_symbols.txt, shim_hook_NAME in the
 * family's file): what no description can say. argv[i] is the address of parameter i. */
struct shim_hook {
    /* Before it is sent: an error refuses the call at once. */
    CUresult (*before)(const void *const *argv);
    /* After it succeeded (an asynchronous call: once sent). */
    void (*after)(const void *const *argv);
    /* Last, after it succeeded and was recorded, where the client has more to do that can
     * fail (a __managed__ variable's host copy): an error is the call's (what the server
     * made stays, as an unused lookup of the driver's would). */
    CUresult (*finish)(const void *const *argv);
    /* An asynchronous call that must have reached the driver before it returns, as the
     * driver's own calls have: 1 to wait for the server's answer. */
    int (*wait)(const void *const *argv);
    /* A query, which enqueues nothing (its request is SHIM_RQ_QUIET), whose answer the
     * client may know: 1 when it knows it is CUDA_SUCCESS (after `before`); the call is
     * then not sent. */
    int (*known)(const void *const *argv);
    /* After `before`: may point arguments at values of its own (alive until the call returns
     * on the calling thread), which are what is sent; 1 when nothing is left to send, the
     * call then succeeding unsent. */
    int (*rewrite)(const void **args);
};
extern const struct shim_hook *const shim_hooks[SHIM_NCALLS];

/* ---------------------------------------------------------------- pcopy.c */

/* memcpy of host memory, split over helper threads when large; callers take turns. */
void shim_pcopy(void *dst, const void *src, size_t n);

/* ---------------------------------------------------------------- graphnode.c */

/* Forgets the body arrays of a conditional node (root 0) or of every conditional node in
 * an outermost graph (node 0), which the driver's API says live as long as their node. */
void shim_cond_forget(uint64_t node, uint64_t root);

/* ---------------------------------------------------------------- context.c */

struct shim_ctx;
struct shim_range;

/* Device of the current context, or -1. */
int shim_current_device(void);
/* Device of the context with this id (a live one, or a primary context's), or -1. */
int shim_ctx_id_device(uint32_t id);
/* A context id of the process's on device dev, to tag a request sent there that needs one:
 * the thread's current context if it is dev's, else dev's primary context if active, else
 * any active one of dev's; 0 when there is none. */
uint32_t shim_ctx_of_device(int dev);
/* CUDA_SUCCESS if the thread has a live current context, else CUDA_ERROR_INVALID_CONTEXT. */
CUresult shim_need_ctx(void);
/* For entry points that need an initialised, connected process and a current context. */
CUresult shim_ready_ctx(void);
/* Resolves a context handle (NULL = current) to its id and device. */
CUresult shim_ctx_lookup(CUcontext c, uint32_t *id, int *device);
/* The ids of the contexts the server knows now, up to cap of them; how many there are. */
size_t shim_ctx_active_ids(uint32_t *out, size_t cap);
/* The handle of the context with this id (for cuStreamGetCtx), or NULL. */
CUcontext shim_ctx_by_id(uint32_t id);
/* The primary context of a device, without retaining or activating it (a later
 * cuDevicePrimaryCtxRetain returns the same handle). NULL for a bad ordinal. */
CUcontext shim_primary_ctx(CUdevice dev);
/* Registers a function called with each context that is destroyed or reset (primary),
 * before its resources go; at most a few (context-local storage uses one). */
void shim_ctx_on_destroy(void (*fn)(CUcontext ctx));
/* Sets the function each range of a destroyed or reset context is handed to as it leaves
 * the mirror (memory.c's, set as the library loads). */
void shim_ctx_on_range_gone(void (*fn)(const struct shim_range *r));

/* ---------------------------------------------------------------- device.c */

/* CUDA_SUCCESS if `dev` is a valid ordinal. */
CUresult shim_check_device(CUdevice dev);

/* ---------------------------------------------------------------- ranges.c */

/* What the client knows about its own memory, to classify copy sides and answer pointer
 * queries without a round trip. The server keeps the authoritative tables. */
struct shim_range {
    uint64_t base, size; /* first, as channel/ranges.h's elements */
    uint32_t kind;       /* the range type: SHIM_HT_MEM_DEVICE, _GLOBAL, _PINNED... */
    uint32_t ctx;        /* context id it was made in */
    uint32_t flags;      /* cuMemHostAlloc flags of pinned ranges */
    uint64_t owner;      /* module/library handle of globals, else 0 */
    uint64_t mapped;     /* pinned and managed ranges: bytes mapped (the server's rounding) */
};

/* 1 for the kinds of range that are host memory mapped here and in the server (pinned,
 * registered and managed memory): copies take them in place, work on them completes
 * before a sync call returns, they are unmapped when they go. */
static inline int shim_range_is_host(uint32_t kind)
{
    return kind == SHIM_HT_MEM_PINNED || kind == SHIM_HT_MEM_MANAGED;
}

void shim_range_add(const struct shim_range *r);
/* Sets bits in the flags of the range starting at base; 0 if found. */
int shim_range_set_flags(uint64_t base, uint32_t flags);
/* Removes the range starting at base; 0 if found. */
int shim_range_remove(uint64_t base, struct shim_range *removed);
/* Finds the range holding addr when all of [addr, addr+len) lies in the process's ranges
 * (one, or several that follow each other without a gap); 0 if found. */
int shim_range_find(uint64_t addr, uint64_t len, struct shim_range *out);
/* The same among the ranges of the server the thread's requests go to alone (route.c). */
int shim_range_find_here(uint64_t addr, uint64_t len, struct shim_range *out);
/* Registers which connection slot a range of context id ctx (0: the thread's route's) is
 * kept under (route.c). */
void shim_ranges_on_slot(int (*slot_of_ctx)(uint32_t ctx));
/* Removes every range that starts in [base, base + size). */
void shim_range_drop_within(uint64_t base, uint64_t size);
/* A copy of the ranges of kind `kind` in connection slot's table: how many, *out malloc'd
 * (the caller's to free; NULL when none or out of memory). */
int shim_range_list(int slot, uint32_t kind, struct shim_range **out);
/* The connection slot whose table holds addr, with its range in *out; -1 when none. */
int shim_range_slot(uint64_t addr, struct shim_range *out);
/* Removes every range made in context `ctx` (0 = any) or owned by `owner` (0 = any); calls
 * fn on each first (may be NULL). */
void shim_range_drop(uint32_t ctx, uint64_t owner, void (*fn)(const struct shim_range *));

/* ---------------------------------------------------------------- memory.c, managed.c */

/* Shared host memory the server maps at one address in both processes and registers:
 * cuMemHostAlloc's (flags CU_MEMHOSTALLOC_*) or, with CHAN_HOST_MANAGED, cuMemAllocManaged's
 * (then flags carry CU_MEM_ATTACH_*). */
CUresult shim_host_alloc(void **pp, size_t bytesize, unsigned flags);
/* Portable pinned memory and its free for the shim's own use (mvars.c): no capture mode
 * refuses them, as no program call of the thread's makes them. */
CUresult shim_host_alloc_quiet(void **pp, size_t bytesize);
CUresult shim_host_free_quiet(void *p);
/* A managed range goes (freed, or with its context): its advice goes too (managed.c), and a
 * migrating one leaves migrate.c's table: 1 when migrate.c unmapped it (or keeps its block
 * for others), 0 when the caller unmaps it. */
int shim_managed_forget(uint64_t base);
/* A __managed__ variable's advice, kept as an allocation's is (managed.c): 0, or -1 when
 * out of memory. */
int shim_managed_track(uint64_t base, uint64_t size);

/* ---------------------------------------------------------------- migrate.c */

/* Managed memory migrates (MPSSHIM_MANAGED_MIGRATE, default on). */
int shim_mig_wanted(void);
/* A migrating allocation [base, base + size) in the block at `block`, made in context ctx,
 * enters the table (its pages become read-only); a new block (block_bytes, else 0) is mapped
 * here first from fd. 0; 1 when the block's addresses are taken here; -1 when out of memory
 * or no pager. Forget: it leaves, and its block is unmapped when it was the block's last: 1;
 * 0 when base is no migrating allocation. */
int shim_mig_place(uint64_t base, uint64_t size, uint64_t block, uint64_t block_bytes, int fd,
                   uint32_t ctx);
int shim_mig_forget(uint64_t base);
/* Any migrating allocation was made. */
int shim_mig_live(void);
/* Device work is about to be enqueued: the host's writes go first and nothing stays
 * host-reachable (under shim_mvar_work). An error only when they could not be sent. */
CUresult shim_mig_work(void);
/* Prefetches of [p, p + n) of a migrating allocation: to the host on stream s, queued after
 * the client's queued work with s waiting for it, and host-reachable from the synchronisation
 * that covers it (shim_mig_synced; brought now, waited for, on the NULL or per-thread stream);
 * to a device, the host's writes pushed (shim_mig_work). */
CUresult shim_mig_prefetch_host(uint64_t p, uint64_t n, CUstream s);
/* A synchronisation is about to be sent (from shim_mvar_sync_begin), and returned r (what:
 * enum shim_mvar_sync, of stream s or context ctx): the prefetches to the host it covers are
 * done (from shim_mvar_synced). Both on the synchronising thread. */
void shim_mig_sync_begin(void);
void shim_mig_synced(int what, CUstream s, uint32_t ctx, CUresult r);
/* Stream s is destroyed: its queued prefetches are forgotten (their chunks fetched on touch). */
void shim_mig_stream_gone(CUstream s);
/* rpc.c: this thread's room of CHAN_REC_MAX bytes for a request packed before the ring is
 * taken (NULL when out of memory); valid until its next use on the thread. */
uint8_t *shim_stage(void);
/* rpc.c: this thread holds the ring (between shim_req_begin and shim_req_send). */
extern __thread int shim_ring_held __attribute__((tls_model("initial-exec")));
/* hostfn.c: its thread starts; a host function returned (what it wrote is pushed first). */
void shim_mig_hostfn_thread(void);
void shim_mig_hostfn_done(void);
/* hostfn.c: waits until this process's host functions and stream callbacks sent so far have
 * returned (or the server is gone): before a call that waits for every stream. Those on streams
 * of device `dev` only (the device whose context the call loads code in), or all of them for
 * SHIM_SETTLE_ALL (a call that waits on every device: frees, unregistrations, unloads). */
#define SHIM_SETTLE_ALL (-1)
void shim_hostfn_settle(int dev);
/* Launch-time knowledge of a function or kernel (funcs.c). */
struct shim_func;
/* The same before f's first launch or node on the current device: the server may load its
 * code then, which waits for every stream. One load once done, or while none is outstanding. */
void shim_hostfn_settle_first(const struct shim_func *f);
/* ctxsync.c: before a cuMemFree in a process of several threads, this process's contexts on
 * the server the free goes to are synchronised (polled by the server), so that the free's
 * own wait in the server does not hold the other threads' calls; their error, if any. */
CUresult shim_ctx_settle_before_free(void);

/* ---------------------------------------------------------------- mvars.c */

/* A global range's flags (struct shim_range.flags, unused otherwise for globals): the
 * server was asked whether it is a __managed__ variable, and it is. */
#define SHIM_RANGE_MVAR_ASKED 0x40000000u
#define SHIM_RANGE_MVAR 0x80000000u
/* Device work is about to be enqueued on stream s (a launch, a graph launch, a copy, a
 * memset or any other async call): the host's writes to __managed__ variables go first.
 * An error only when they could not be sent. Nothing to do, at the cost of one load, in a
 * process that has no such variable. */
CUresult shim_mvar_work(CUstream s);
/* It was sent: s has work whose writes a later synchronisation brings back. */
void shim_mvar_worked(CUstream s);
/* Before a synchronisation is sent: the count of work it may cover. */
uint64_t shim_mvar_sync_begin(void);
/* What a synchronisation that returned *r covered (enum shim_mvar_sync and its stream,
 * context id, or nothing); gen: shim_mvar_sync_begin's. On success, the device's writes to
 * __managed__ variables are brought into their host copies if device work may have written
 * since the last time; *r becomes that transfer's error, if any. */
enum shim_mvar_sync {
    SHIM_MVAR_STREAM = 1, /* a stream's synchronisation or successful query */
    SHIM_MVAR_CTX,        /* a context's */
    SHIM_MVAR_OTHER,      /* an event's, or a synchronous copy's */
};
void shim_mvar_synced(enum shim_mvar_sync what, CUstream s, uint32_t ctx, uint64_t gen,
                      CUresult *r);
/* A global range leaves the mirror (its module, library or context went): a variable's
 * host copy goes with it. For shim_range_drop. */
void shim_mvar_range_gone(const struct shim_range *r);
/* The module or library `owner` is about to go: its variables' host copies go first. */
void shim_mvar_owner_gone(uint64_t owner);
/* A process-wide __managed__ variable's range holding [p, p + n), for managed.c: 0 with
 * its base and size, -1 if none. */
int shim_mvar_find(uint64_t p, uint64_t n, uint64_t *base, uint64_t *size);
/* mvarpages.c, under mvars.c's lock: a host copy's pages mapped at [base, base + size),
 * or -1 (nothing changed) when an address is taken here or memory runs out; unmap: one
 * variable less on them. */
int shim_mvar_map(uint64_t base, uint64_t size);
void shim_mvar_unmap(uint64_t base, uint64_t size);

/* ---------------------------------------------------------------- handles.c */

/* What the client keeps of a handle it knows itself (types marked `client`). */
struct shim_known {
    uint32_t ctx;   /* context it was made in */
    unsigned flags; /* as created (stream and event flags) */
    int priority;   /* streams: as asked */
};
void shim_known_add(uint32_t type, uint64_t value, const struct shim_known *info);
/* Set once the process knows an interprocess event (made or opened): until then no event
 * record needs the IPC check (interpose/ipc.c), which costs a lookup per cuEventRecord. */
extern _Atomic int shim_interprocess_events;
/* 0 if it was known. */
int shim_known_remove(uint32_t type, uint64_t value);
/* 0 with *out (may be NULL) if known. */
int shim_known_find(uint32_t type, uint64_t value, struct shim_known *out);
/* Removes a handle and gives what was known of it (to put back if its destruction fails);
 * -1 when it was not known. */
int shim_known_take(uint32_t type, uint64_t value, struct shim_known *out);
/* Forgets every known handle made in context `ctx`. */
void shim_known_drop_ctx(uint32_t ctx);
/* A copy of `s` that lives as long as the process, one per distinct text; NULL when out of
 * memory. */
const char *shim_intern(const char *s);

/* ---------------------------------------------------------------- stream.c */

/* Client view of a stream handle: validates it and gives its context.
 * Special handles (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) use the current context. */
CUresult shim_stream_check(CUstream s, uint32_t *ctx);

/* ---------------------------------------------------------------- idle.c */

/* A question about a stream, an event or a context: "is it idle?". Asked with one of the
 * shim_idle_ functions below (1: known to be so, answer CUDA_SUCCESS without sending it);
 * else sent with SHIM_RQ_QUIET, and, when the server answers CUDA_SUCCESS, its answer kept
 * with shim_idle_keep. Valid handles only (checked first, as the call checks them). */
struct shim_idle_key {
    uint64_t handle;
    uint32_t ctx;
    uint16_t thread;
    uint16_t what;
};
struct shim_idle {
    struct shim_idle_key key;
    uint64_t mark;  /* shim_work_sent before the question went */
    uint32_t alert; /* the segment's alert word then */
    int usable;     /* answers may be known and kept at all */
};
/* Stream s as the calling thread names it (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD:
 * its default streams of its current context); sync: for a synchronisation. */
int shim_idle_stream(struct shim_idle *q, CUstream s, int sync);
/* A question answered by the caller's next record (one that may enqueue work, sent right
 * after this): a copy that returns complete, whose reply comes once stream s has run
 * everything up to it and carries any error deferred to a synchronisation, as a
 * synchronisation's does. Kept with shim_idle_keep(q, 1) if the reply was CUDA_SUCCESS:
 * the answer then holds only while that record is the last one this process sent. */
void shim_idle_stream_after(struct shim_idle *q, CUstream s);
int shim_idle_event(struct shim_idle *q, CUevent e, int sync);
/* Every stream of the context with id ctx (a context synchronisation). */
int shim_idle_ctx(struct shim_idle *q, uint32_t ctx);
/* The server answered q with CUDA_SUCCESS; sync: q was a synchronisation's. */
void shim_idle_keep(const struct shim_idle *q, int sync);

/* ---------------------------------------------------------------- capture.c */

/* Before a "potentially unsafe" call (an allocation, a free, an event query): refused,
 * and the captures in its way invalidated, where the thread's capture mode forbids it. */
CUresult shim_capture_unsafe(void);
/* Before work on stream `s` that a graph could not replay (a copy staged through pageable
 * memory, a stream callback): refused, and the capture invalidated, while `s` captures. */
CUresult shim_capture_refuse(CUstream s);
/* 1 while this process has a capture going that it keeps (one load). */
int shim_capture_any(void);
/* 1 if stream `s` captures (costs nothing while this process has no capture going). */
int shim_capture_active(CUstream s);
/* 1 if work enqueued on `s` is captured, to run later as a graph: a created stream that
 * captures (the default streams are taken as never capturing here). */
int shim_work_captured(CUstream s);
/* Stream s is destroyed: a capture it began is over (the server ends it), so its mode no
 * longer restricts this process's calls. */
void shim_capture_stream_gone(CUstream s);
/* For handles of types the client knows (streams, events): CUDA_SUCCESS if `h` is one of
 * its own, else the error the driver gives at once. Other types: CUDA_SUCCESS (the server
 * checks them). */
CUresult shim_handle_check(unsigned htype, uint64_t h);

/* ---------------------------------------------------------------- funcs.c */

/* Records what the server returned for a function/kernel (chan_function + layout). */
CUresult shim_func_add(const uint8_t *data, uint32_t len, uint64_t owner, uint32_t ctx,
                       uint64_t *handle);
/* Looks a function up; NULL if unknown. The result stays valid until forgotten. */
const struct shim_func *shim_func_get(uint64_t handle);
/* Forgets the functions of a module/library (owner) or of a context. */
void shim_func_drop(uint64_t owner, uint32_t ctx);
/* The context id a function (module 0) or a module (1, through any function of it the
 * process got) was made in; 0 when unknown or of a library (context-free). */
uint32_t shim_func_ctx(uint64_t handle, int module);
/* Packs kernelParams into `buf` by the function's layout; returns bytes used. */
uint32_t shim_func_pack(const struct shim_func *f, void **params, uint8_t *buf);
uint32_t shim_func_param_bytes(const struct shim_func *f);
/* Validates a launch configuration the way the driver does before enqueueing. */
CUresult shim_func_check_launch(const struct shim_func *f, const unsigned grid[3],
                                const unsigned block[3], unsigned smem);
/* Updates cached attributes after cuFuncSetAttribute. */
void shim_func_set_attr(uint64_t handle, int attr, int value);
/* Whether f was launched, or made a graph's node, on device dev (0..63) before; marks it so.
 * hostfn.c's shim_hostfn_settle_first asks, before a launch or node. */
int shim_func_used_on(const struct shim_func *f, int dev);
void shim_func_mark_used(const struct shim_func *f, int dev);

/* ---------------------------------------------------------------- launch.c */

/* The parameter buffer of a launch or a kernel node: kernelParams packed by the function's
 * layout, or the buffer of the `extra` form. */
struct shim_params {
    const struct shim_func *fn;
    void **kernel_params;
    const void *extra; /* the `extra` form's buffer, else NULL */
    size_t bytes;
};
/* Checks and sizes the parameters of fn (one of kernelParams and extra). */
CUresult shim_kernel_params(const struct shim_func *fn, void **kernelParams, void **extra,
                            struct shim_params *out);
/* Writes them (out->bytes) to buf. */
void shim_kernel_params_write(const struct shim_params *p, uint8_t *buf);

#endif
